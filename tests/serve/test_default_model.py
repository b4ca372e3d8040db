"""The default model served with speculation: a chat request gives the text `quench generate` gives,
with or without log-probabilities."""

from __future__ import annotations

import httpx
import pytest

from live_server import serving
from quench.datasets import load_benchmark, parse_tasks
from quench.engine.config import EngineConfig
from quench.engine.backend import QuenchBackend
from quench.engine.types import GenerationRequest, SamplingParams
from quench.models import encode_prompt, load_model
from quench.models.prompts import CHAT_INSTRUCTION, fenced
from quench.stopping import default_stop_sequences

MAX_TOKENS = 48


@pytest.mark.slow
def test_greedy_chat_answers_equal_quench_generate() -> None:
    loaded = load_model()
    problems = load_benchmark("humaneval", None, parse_tasks("0,2"), None, False)
    stops = default_stop_sequences("humaneval", "chat")
    backend = QuenchBackend(loaded.model, loaded.tokenizer, EngineConfig(batch_size=4, drafter="ngram"))
    requests = [GenerationRequest(p.task_id, encode_prompt(loaded, p.prompt), 1, stops) for p in problems]
    expected = {r.key: r.text for r in backend.generate(requests, SamplingParams(max_new_tokens=MAX_TOKENS))}
    with serving(backend, max_model_len=1024, model_name=loaded.name) as served:
        for problem in problems:
            content = CHAT_INSTRUCTION + fenced(problem.prompt)  # the user turn of `format_prompt`
            body = {"model": loaded.name, "messages": [{"role": "user", "content": content}], "max_tokens": MAX_TOKENS,
                    "temperature": 0, "stop": list(stops)}
            answer = httpx.post(f"{served.url}/chat/completions", json=body, timeout=120).json()
            assert answer["choices"][0]["message"]["content"] == expected[problem.task_id]
            # with log-probabilities (a batch of their own, float logits every step): the same answer, and
            # each greedy token is the likeliest of its position
            scored = httpx.post(f"{served.url}/chat/completions", json={**body, "logprobs": True, "top_logprobs": 2},
                                timeout=120).json()["choices"][0]
            assert scored["message"]["content"] == expected[problem.task_id]
            content = scored["logprobs"]["content"]
            assert "".join(item["token"] for item in content) == scored["message"]["content"]
            assert all(item["top_logprobs"][0]["logprob"] == item["logprob"] <= 0 for item in content)
