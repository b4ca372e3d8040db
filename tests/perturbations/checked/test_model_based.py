"""BackTranslation and VarRenamerCB with an injected model: a scripted fake, and a tiny real LM."""

from __future__ import annotations

import pytest

from quench.datasets import Problem
from quench.perturbations import apply_seeded, create
from quench.perturbations.checked.model_based import HFTextModel


class ScriptedModel:
    """Replies with a fixed text; prefers short names; proposes a few tokens."""

    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.prompts: list[str] = []

    def generate(self, prompt: str, max_new_tokens: int, seed: int) -> str:
        self.prompts.append(prompt)
        return self.reply

    def log_likelihoods(self, texts: list[str]) -> list[float]:
        return [-float(len(t)) for t in texts]

    def next_tokens(self, prefix: str, k: int) -> list[str]:
        return [" parts", "(", " w"]


def test_back_translation_keeps_protected_tokens(problem: Problem) -> None:
    good = ScriptedModel("Rewritten text: Count the words of `text_line` longer than max_count; it "
                         'splits on "single spaces" and cares about case.')
    variant = apply_seeded(create("BackTranslation", model=good), problem, 0)
    assert variant.prompt.startswith(
        'def count_words(text_line, max_count):\n    """Count the words of `text_line` longer than max_count; it splits on\n'
        '    "single spaces" and cares about case.\n    >>> count_words')  # re-wrapped like the original
    assert '>>> count_words("a bb ccc", 1)' in variant.prompt and "Rewritten text" not in variant.prompt
    assert "`text_line`" in good.prompts[0]
    dropped = ScriptedModel("Count the words that are long.")  # lost `text_line`, max_count: rejected
    assert apply_seeded(create("BackTranslation", model=dropped), problem, 0).prompt == problem.prompt


def test_var_renamer_cb_picks_the_likeliest_name(problem: Problem) -> None:
    variant = apply_seeded(create("VarRenamerCB", model=ScriptedModel("")), problem, 0)
    # `words` is renamed (text_line is named by the docstring); the fake prefers the shortest name.
    assert "    w = text_line.split(' ')\n    total = 0\n    for word in w:\n" in variant.prompt


@pytest.mark.slow
def test_tiny_real_model(problem: Problem) -> None:
    from helpers import char_tokenizer, tiny_llama

    class Loaded:
        model, tokenizer, prompt_format = tiny_llama(), char_tokenizer(), "completion"

    model = HFTextModel(Loaded())
    scores = model.log_likelihoods(["abc", "abcdef"])
    assert len(scores) == 2 and scores[1] < scores[0] < 0
    assert len(model.next_tokens("def f(", 5)) == 5
    variant = apply_seeded(create("VarRenamerCB", model=model), problem, 0)
    assert variant.prompt != problem.prompt  # stock names are always available
    paraphrased = apply_seeded(create("BackTranslation", model=model, max_new_tokens=8), problem, 0)
    assert paraphrased.prompt == problem.prompt  # a random model's babble is rejected
