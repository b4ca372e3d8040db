"""The function-complete rule inside quench's engine and through `generate_samples` (scripted model)."""

from __future__ import annotations

import pytest

from quench.datasets import Problem
from quench.engine.backend import QuenchBackend
from quench.engine.config import EngineConfig
from quench.engine.hf_backend import HFBackend
from quench.runs.samples import GenerateConfig, generate_samples
from quench.engine.types import GenerationRequest, SamplingParams
from quench.stopping import RuleHook, rules_for
from stopping.scripted import Script

# Completion answers continue the prompt's `def`; chat answers hold it in a fenced block.
COMPLETION = {
    "c/0": ["def f(x):\n", "    y = x + 1\n", "    return y\n", "\n", "print(f(2))\n", "print(f(3))\n"],
    "c/1": ["def h(x):\n", "    return [\n", "1,\n", "    ]\n", "assert h(1)\n", "assert h(2)\n"],
    "c/2": ["def k(x):\n", "    pass\n", "    pass  # never ends\n"],  # loops inside the body: never stops
}
CHAT = {
    "q/0": ["Write g.\n", "Sure:\n", "```python\n", "def g(x):\n", "    return x * 2\n", "```\n", "It doubles x.\n"],
    "q/1": ["Write m.\n", "```py\n", "def m():\n", "    return 1\n", "def helper():\n", "    return 2\n", "```  \n",
            "Done.\n"],
}
ENTRY = {"c/0": "f", "c/1": "h", "c/2": "k", "q/0": "g", "q/1": "m"}
# Where the rule cuts each answer (the stop line is excess).
EXPECTED = {
    "c/0": "    y = x + 1\n    return y\n\n",
    "c/1": "    return [\n1,\n    ]\n",
    "q/0": "Sure:\n```python\ndef g(x):\n    return x * 2\n",
    "q/1": "```py\ndef m():\n    return 1\ndef helper():\n    return 2\n",
}
SCRIPT = Script(list(COMPLETION.values()) + list(CHAT.values()))
SAMPLING = SamplingParams(max_new_tokens=12)


def problem(key: str) -> Problem:
    chain = {**COMPLETION, **CHAT}[key]
    return Problem(key, chain[0], "", "", ENTRY[key], benchmark="humaneval")


def requests(keys) -> list[GenerationRequest]:
    return [GenerationRequest(k, SCRIPT.ids([problem(k).prompt])) for k in keys]


def hook_for(keys, prompt_format: str) -> RuleHook:
    return RuleHook({k: rules_for(problem(k), prompt_format) for k in keys})


@pytest.mark.parametrize("drafter", ["none", "ngram"])
@pytest.mark.parametrize("prompt_format,keys", [("completion", list(COMPLETION)), ("chat", list(CHAT))])
def test_engine_stops_where_the_function_rule_says(drafter, prompt_format, keys):
    backend = QuenchBackend(SCRIPT.model, SCRIPT.tokenizer, EngineConfig(batch_size=2, drafter=drafter))
    full = {r.key: r for r in backend.generate(requests(keys), SAMPLING)}
    if drafter == "ngram":
        assert backend.last_stats.accepted > 0  # the looping answers were drafted: blocks were accepted
    hook = hook_for(keys, prompt_format)
    ruled = {r.key: r for r in backend.generate(requests(keys), SAMPLING, stop_hook=hook)}
    assert backend.stop_hook is None  # the per-call hook does not stick
    for key in keys:
        if key in EXPECTED:
            assert ruled[key].text == EXPECTED[key] == hook.rules[key].cut(full[key].text)[0]
            assert ruled[key].finish_reason == "hook"
            assert len(ruled[key].token_ids) < len(full[key].token_ids)
            assert ruled[key].token_ids == full[key].token_ids[: len(ruled[key].token_ids)]
        else:  # the rule never fires: the answer is untouched
            assert ruled[key] == full[key].__class__(**{**full[key].__dict__, "seconds": ruled[key].seconds,
                                                         "extra": ruled[key].extra})


@pytest.mark.parametrize("backend_name", ["quench", "hf"])
def test_generate_samples_with_the_function_rule(tmp_path, backend_name):
    problems = [problem(k) for k in CHAT]
    if backend_name == "quench":
        backend = QuenchBackend(SCRIPT.model, SCRIPT.tokenizer, EngineConfig(batch_size=2))
    else:
        backend = HFBackend(SCRIPT.model, SCRIPT.tokenizer, batch_size=2)
    encode = lambda text: SCRIPT.ids([text])  # noqa: E731
    plain = GenerateConfig(1, SAMPLING, (), "chat")
    ruled = GenerateConfig(1, SAMPLING, (), "chat", stop_rule="function")
    full = {r.task_id: r for r in generate_samples(problems, backend, encode, plain, tmp_path / "a.jsonl")}
    cut = {r.task_id: r for r in generate_samples(problems, backend, encode, ruled, tmp_path / "b.jsonl")}
    for key in CHAT:
        assert cut[key].raw == EXPECTED[key] and cut[key].finish_reason == "hook"
        assert cut[key].completion == full[key].completion  # the sanitizer kept the same code
        if backend_name == "quench":  # the engine stopped the row; Hugging Face only cut the text
            assert cut[key].num_tokens < full[key].num_tokens
        else:
            assert cut[key].num_tokens == full[key].num_tokens


def test_unknown_stop_rule_is_refused():
    with pytest.raises(ValueError, match="stop_rule"):
        GenerateConfig(stop_rule="lines")
