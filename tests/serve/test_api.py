"""The OpenAI API over the engine: same greedy text as the engine in batch mode, concurrency, streaming."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from quench.engine.types import GenerationRequest, SamplingParams
from live_server import MODEL, Served, tiny_backend

PROMPTS = ["def add(a, b):\n", "import os\nprint(", "class Stack:\n    def", "x = [1, 2, 3]\nfor", "# sort a list", "s = '"]
MAX_TOKENS = 24
TOKENS: dict[tuple[str, int], int] = {}  # (prompt, sample index) -> generated tokens, filled by `reference`


@pytest.fixture(scope="module")
def reference() -> dict[str, list[str]]:
    """Each prompt's greedy texts from `QuenchBackend.generate` (batch mode) on an identical tiny model."""
    backend = tiny_backend()
    requests = [GenerationRequest(p, tuple(backend.tokenizer(p)["input_ids"]), n=2) for p in PROMPTS]
    texts: dict[str, list[str]] = {p: ["", ""] for p in PROMPTS}
    for result in backend.generate(requests, SamplingParams(max_new_tokens=MAX_TOKENS)):
        texts[result.key][result.sample_index] = result.text
        TOKENS[result.key, result.sample_index] = len(result.token_ids)
    return texts


def complete(served: Served, **body) -> dict:
    response = httpx.post(f"{served.url}/completions", json={"model": MODEL, **body}, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def test_models_lists_the_served_model(served: Served) -> None:
    listing = httpx.get(f"{served.url}/models").json()
    assert [card["id"] for card in listing["data"]] == [MODEL]
    assert listing["data"][0]["max_model_len"] == 512


def test_greedy_completions_equal_the_engine_in_batch_mode(served: Served, reference) -> None:
    for prompt in PROMPTS[:2]:
        answer = complete(served, prompt=prompt, max_tokens=MAX_TOKENS, temperature=0, n=2)
        assert [c["text"] for c in answer["choices"]] == reference[prompt]
        assert [c["index"] for c in answer["choices"]] == [0, 1]
        assert answer["usage"]["prompt_tokens"] == len(prompt)  # one character, one token
        assert answer["usage"]["completion_tokens"] == TOKENS[prompt, 0] + TOKENS[prompt, 1]


def test_concurrent_clients_share_the_batch_and_get_their_own_answers(served: Served, reference) -> None:
    with ThreadPoolExecutor(len(PROMPTS)) as pool:
        answers = list(pool.map(lambda p: complete(served, prompt=p, max_tokens=MAX_TOKENS, temperature=0, n=2),
                                PROMPTS))
    for prompt, answer in zip(PROMPTS, answers):
        assert [c["text"] for c in answer["choices"]] == reference[prompt]


def test_a_list_of_prompts_gives_n_choices_per_prompt_in_order(served: Served, reference) -> None:
    answer = complete(served, prompt=PROMPTS[:3], max_tokens=MAX_TOKENS, temperature=0, n=2)
    assert [c["text"] for c in answer["choices"]] == [t for p in PROMPTS[:3] for t in reference[p]]


def test_streamed_text_adds_up_to_the_whole_answer(served: Served, reference) -> None:
    body = {"model": MODEL, "prompt": PROMPTS[2], "max_tokens": MAX_TOKENS, "temperature": 0, "n": 2, "stream": True,
            "stream_options": {"include_usage": True}}
    texts, reasons, chunks, usage = ["", ""], [None, None], 0, None
    with httpx.stream("POST", f"{served.url}/completions", json=body, timeout=60) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    for line in lines[:-1]:
        event = json.loads(line.removeprefix("data: "))
        for choice in event["choices"]:
            texts[choice["index"]] += choice["text"]
            reasons[choice["index"]] = choice["finish_reason"] or reasons[choice["index"]]
            chunks += 1
        usage = event["usage"] or usage
    assert texts == reference[PROMPTS[2]]
    assert reasons == ["length" if TOKENS[PROMPTS[2], i] == MAX_TOKENS else "stop" for i in range(2)]
    assert chunks > 4  # token by token, not one piece at the end
    assert usage["completion_tokens"] == TOKENS[PROMPTS[2], 0] + TOKENS[PROMPTS[2], 1]


def test_a_stop_sequence_cuts_the_text_and_finishes_with_stop(served: Served, reference) -> None:
    whole = reference[PROMPTS[0]][0]
    stop = whole[10:12]
    answer = complete(served, prompt=PROMPTS[0], max_tokens=MAX_TOKENS, temperature=0, stop=[stop])
    assert answer["choices"][0]["text"] == whole[: whole.index(stop)]
    assert answer["choices"][0]["finish_reason"] == "stop"
    streamed = ""
    body = {"model": MODEL, "prompt": PROMPTS[0], "max_tokens": MAX_TOKENS, "temperature": 0, "stop": stop,
            "stream": True}
    with httpx.stream("POST", f"{served.url}/completions", json=body, timeout=60) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                streamed += json.loads(line[6:])["choices"][0]["text"]
    assert streamed == whole[: whole.index(stop)]


def test_the_same_seed_gives_the_same_samples(served: Served) -> None:
    body = dict(prompt=PROMPTS[3], max_tokens=12, temperature=1.0, n=3)
    first = [c["text"] for c in complete(served, seed=7, **body)["choices"]]
    again = [c["text"] for c in complete(served, seed=7, **body)["choices"]]
    other = [c["text"] for c in complete(served, seed=8, **body)["choices"]]
    assert first == again
    assert len(set(first)) == 3  # the n samples differ from each other
    assert other != first


def test_chat_completions_use_the_chat_template(served: Served) -> None:
    backend = tiny_backend()
    text = backend.tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                                 add_generation_prompt=True)
    request = GenerationRequest("chat", tuple(backend.tokenizer(text, add_special_tokens=False)["input_ids"]))
    [expected] = backend.generate([request], SamplingParams(max_new_tokens=16))
    response = httpx.post(f"{served.url}/chat/completions", timeout=60, json={
        "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16, "temperature": 0})
    answer = response.json()
    assert answer["object"] == "chat.completion"
    assert answer["choices"][0]["message"] == {"role": "assistant", "content": expected.text}
    assert answer["usage"]["prompt_tokens"] == len(request.prompt_ids)


def test_the_openai_client_streams_chat(served: Served) -> None:
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=served.url, api_key="unused", max_retries=0)
    whole = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hello"}],
                                           max_tokens=20, temperature=0)
    stream = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hello"}],
                                            max_tokens=20, temperature=0, stream=True)
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == whole.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason
