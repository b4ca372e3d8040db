"""Prefill paced to a share of a decode step (quench.engine.serving.prefill_pacer): the allowance with literal
values, and a live loop whose arrivals' prompts go in small chunks while a row decodes, with the same answers."""

from __future__ import annotations

import pytest
import torch

from live_server import tiny_backend
from quench.engine.config import EngineConfig
from quench.engine.kernels import invariant
from quench.engine.serving.live import Finished, LiveEngine, LiveEvent
from quench.engine.serving.prefill_pacer import MIN_CHUNK, PrefillPacer, allowance
from quench.engine.types import GenerationRequest, SamplingParams

needs_invariant = pytest.mark.skipif(not invariant.available(torch.float32), reason="no native kernels built here")

LONG = "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n        self." * 3


def test_the_allowance_is_the_share_of_a_step_in_prompt_tokens_within_its_bounds() -> None:
    assert allowance(1.0, 0.050, 0.001, 512) == 50  # a 50 ms step, 1 ms a prompt token
    assert allowance(0.5, 0.050, 0.001, 512) == 25
    assert allowance(1.0, 0.050, 0.010, 512) == MIN_CHUNK  # never below one small chunk
    assert allowance(4.0, 0.500, 0.001, 512) == 512  # never past the budget
    assert allowance(1.0, 0.050, 0.0, 512) == 512


def test_the_pacer_allows_the_whole_budget_until_it_has_measured_and_while_nothing_decodes() -> None:
    pacer = PrefillPacer(share=1.0, budget=512)
    assert pacer.tokens(decoding=True) == 512
    pacer.prefilled(100, 0.1)  # 1 ms a token
    assert pacer.tokens(decoding=True) == 512  # no step measured yet
    pacer.stepped(0.040)
    assert pacer.tokens(decoding=True) == 40 and pacer.tokens(decoding=False) == 512
    pacer.stepped(0.080)  # running averages: the newest counts a quarter
    assert pacer.step_s == pytest.approx(0.050) and pacer.tokens(decoding=True) == 50
    pacer.prefilled(0, 1.0)  # nothing prefilled: nothing learnt
    assert pacer.token_s == pytest.approx(0.001)


def serve_beside_a_decoding_row(share: float | None) -> tuple[dict[str, list[tuple]], list[int]]:
    """A short prompt decodes 120 tokens; a long one arrives at its 4th step. The answers, and the width of
    every prompt feed after the arrival."""
    backend = tiny_backend(EngineConfig(batch_size=4))
    engine = LiveEngine(backend, max_len=512, prefill_budget=4096, prefill_share=share)
    events: dict[str, list[LiveEvent]] = {"short": [], "long": []}
    ids = {name: tuple(backend.tokenizer(text)["input_ids"]) for name, text in (("short", "def f(x):"), ("long", LONG))}
    sampling = {"short": SamplingParams(max_new_tokens=120, ignore_eos=True), "long": SamplingParams(max_new_tokens=8)}
    engine.submit(GenerationRequest("seed:short", ids["short"]), sampling["short"], events["short"].append)
    feeds: list[int] = []
    forward = backend.runner.forward

    def recorded(cache, tokens, start, **kwargs):
        if kwargs.get("logits_at") is not None and arrived:
            feeds.append(tokens.shape[1])
        return forward(cache, tokens, start, **kwargs)

    arrived: list[bool] = []
    loop = engine._loop()

    class Arrival:
        def on_token(self, slot, row, token) -> None:
            pass

        def on_commit(self, slots) -> None:
            if loop.stats.steps == 4 and not arrived:
                arrived.append(True)
                engine.submit(GenerationRequest("seed:long", ids["long"]), sampling["long"], events["long"].append)

        def on_finish(self, slot, row, result) -> None:
            pass

    loop.listeners.append(Arrival())
    backend.runner.forward = recorded
    for _ in loop.run():
        pass
    answers = {name: [e.result.token_ids for e in got if isinstance(e, Finished)] for name, got in events.items()}
    alone = tiny_backend(EngineConfig(batch_size=4))
    for name in answers:
        assert answers[name] == [r.token_ids for r in alone.generate([GenerationRequest(f"seed:{name}", ids[name])],
                                                                     sampling[name])], name
    return answers, feeds


@needs_invariant
def test_an_arrival_is_prefilled_in_small_chunks_while_a_row_decodes_with_the_same_answers() -> None:
    """With a tiny share every feed beside the decoding row is one MIN_CHUNK chunk; without a share the
    long prompt goes in one feed. The answers are those each request gets alone, in both."""
    _, paced = serve_beside_a_decoding_row(share=1e-6)
    _, whole = serve_beside_a_decoding_row(share=None)
    assert max(paced) <= MIN_CHUNK and len(paced) >= len(LONG) // MIN_CHUNK
    assert max(whole) > 4 * MIN_CHUNK  # the long prompt in one forward
