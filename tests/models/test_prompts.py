"""Model input in the chat format: the prompt is fenced byte for byte, so whitespace variants stay distinct."""

from __future__ import annotations

import pytest

from helpers import char_tokenizer
from quench.datasets import load_humaneval
from quench.models.loading import LoadedModel
from quench.models.prompts import encode_prompt, format_prompt
from quench.perturbations import names, perturb_problems
from quench.perturbations.profile import PROFILES
from quench.robustness.pipeline import build_units, same_model_input

# ChatML as the default model's template writes it, and a template that trims each message.
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
TRIMMING = CHATML.replace("message['content']", "(message['content'] | trim)")


def chat_model(template: str) -> LoadedModel:
    tokenizer = char_tokenizer()
    tokenizer.chat_template = template
    return LoadedModel(model=None, tokenizer=tokenizer, name="char", prompt_format="chat", dtype=None, source="")


def test_the_prompt_sits_in_the_fence_byte_for_byte() -> None:
    loaded = chat_model(CHATML)
    text = format_prompt(loaded, "def f():\n    return 1\n")
    assert "```python\ndef f():\n    return 1\n```<|im_end|>" in text
    assert "```python\n\n\ndef g():\n    \n```" in format_prompt(loaded, "\n\ndef g():\n    ")
    completion = LoadedModel(model=None, tokenizer=loaded.tokenizer, name="c", prompt_format="completion", dtype=None, source="")
    assert format_prompt(completion, "\nx\n") == "\nx\n"


@pytest.mark.parametrize("template", [CHATML, TRIMMING], ids=["chatml", "trimming"])
def test_whitespace_variants_reach_the_model_different(template: str) -> None:
    loaded = chat_model(template)
    base = "def f(x):\n    return x\n"
    for variant in (base + "\n", "\n" + base, base.replace("    ", "\t"), base + "    \n"):
        assert encode_prompt(loaded, variant) != encode_prompt(loaded, base)


@pytest.mark.parametrize("profile", list(PROFILES))
def test_no_format_variant_collapses_to_the_nominal_input_in_chat_mode(profile: str) -> None:
    loaded = chat_model(CHATML)
    problems = load_humaneval()[:12]
    made = perturb_problems(problems, names(["code_format"]), seeds=2, validate_variants=False, profile=profile)
    partials = {p.task_id: PROFILES[profile].partial(p) for p in problems}
    units = build_units(problems, made.variants, lambda text: format_prompt(loaded, text), partials)
    counts = same_model_input(units)
    assert set(counts) == set(names(["code_format"]))
    assert counts == dict.fromkeys(counts, 0)
    changed = sum(v.prompt != partials[v.task_id].prompt for group in made.variants.values() for v in group)
    assert changed > 100  # the count above is over real changes
