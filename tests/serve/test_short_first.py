"""Short requests first (quench.engine.serving.live): while a request with few tokens left runs, the rows of
long requests wait with their caches kept, at most MAX_WAIT_STEPS steps in a row, and every answer is the
one its request gives alone."""

from __future__ import annotations

from typing import Callable

import pytest
import torch

from live_server import tiny_backend
from quench.engine.config import EngineConfig
from quench.engine.kernels import invariant
from quench.engine.serving.live import MAX_WAIT_STEPS, SHORT_REQUEST, Finished, LiveEngine, LiveEvent, LiveLoop
from quench.engine.types import GenerationRequest, SamplingParams

needs_invariant = pytest.mark.skipif(not invariant.available(torch.float32), reason="no native kernels built here")

LONG = SamplingParams(temperature=0.8, top_p=0.95, max_new_tokens=150)  # 2 samples: 300 tokens > SHORT_REQUEST
SHORT = SamplingParams(max_new_tokens=5)
assert 2 * LONG.max_new_tokens > SHORT_REQUEST >= SHORT.max_new_tokens


class Progress:
    """A loop listener: after each step, every running row's generated tokens, by (request, sample)."""

    def __init__(self, after_step: Callable[[int], None]) -> None:
        self.after_step = after_step
        self.steps: list[dict[tuple[int, int], int]] = []

    def on_token(self, slot, row, token) -> None:
        pass

    def on_commit(self, slots) -> None:
        self.steps.append({(row.request_index, row.sample_index): len(row.generated) for row in slots if row is not None})
        self.after_step(len(self.steps))

    def on_finish(self, slot, row, result) -> None:
        pass


def request(backend, name: str, text: str, n: int = 1) -> GenerationRequest:
    return GenerationRequest(f"seed:{name}", tuple(backend.tokenizer(text)["input_ids"]), n)


def run(engine: LiveEngine, after_step: Callable[[int], None]) -> tuple[LiveLoop, Progress]:
    loop = engine._loop()
    progress = Progress(after_step)
    loop.listeners.append(progress)
    for _ in loop.run():
        pass
    return loop, progress


def answers(events: list[LiveEvent]) -> list[tuple[int, ...]]:
    done = sorted((e.result for e in events if isinstance(e, Finished)), key=lambda r: r.sample_index)
    return [r.token_ids for r in done]


def alone(req: GenerationRequest, sampling: SamplingParams, config: EngineConfig = EngineConfig(batch_size=4)
          ) -> list[tuple[int, ...]]:
    """The request's samples served on an engine of its own."""
    engine = LiveEngine(tiny_backend(config), max_len=512)
    events: list[LiveEvent] = []
    engine.submit(req, sampling, events.append)
    run(engine, lambda step: None)
    return answers(events)


CASES = {  # name -> (engine config, the long request's sampling)
    "sampled": (EngineConfig(batch_size=4), LONG),
    # BASS's length drafts whatever the step timings say (the measured one may find drafts do not pay)
    "ngram": (EngineConfig(batch_size=4, drafter="ngram", draft_length="bass"), SamplingParams(max_new_tokens=150)),
}


@needs_invariant
@pytest.mark.parametrize("case", list(CASES))
def test_a_short_request_steps_alone_while_a_long_one_waits_and_both_answer_as_alone(case: str) -> None:
    config, long_sampling = CASES[case]
    backend = tiny_backend(config)
    engine = LiveEngine(backend, max_len=512)
    events: dict[str, list[LiveEvent]] = {"long": [], "short": []}
    long_req, short_req = request(backend, "long", "def f(x):", n=2), request(backend, "short", "x = ")
    engine.submit(long_req, long_sampling, events["long"].append)

    def submit_short(step: int) -> None:
        if step == 4:
            engine.submit(short_req, SHORT, events["short"].append)

    loop, progress = run(engine, submit_short)
    short_steps = [step for step in progress.steps if (1, 0) in step]
    first = progress.steps.index(short_steps[0])
    assert len(short_steps) == SHORT.max_new_tokens - 1  # its first token at admission, one per step after
    for before, after in zip(progress.steps[first:], progress.steps[first + 1 : first + len(short_steps) + 1]):
        assert all(after.get(key) == count for key, count in before.items() if key[0] == 0)  # the long rows waited
    assert progress.steps[first + len(short_steps) + 1][0, 0] > progress.steps[first][0, 0]  # and go on
    assert answers(events["short"]) == alone(short_req, SHORT, config)
    assert answers(events["long"]) == alone(long_req, long_sampling, config)
    assert loop.waited == 0 and not loop.waiting
    if config.drafter != "none":
        assert loop.stats.drafted > 0  # speculation paused while rows waited, and ran around it


@needs_invariant
def test_long_rows_wait_at_most_max_wait_steps_in_a_row_under_a_stream_of_short_requests() -> None:
    backend = tiny_backend(EngineConfig(batch_size=4))
    engine = LiveEngine(backend, max_len=512)
    events: dict[str, list[LiveEvent]] = {"long": []}
    long_req = request(backend, "long", "def f(x):", n=2)
    engine.submit(long_req, LONG, events["long"].append)
    shorts = {f"short{i}": request(backend, f"short{i}", "y = " + "ab"[i % 2]) for i in range(12)}
    pending = list(shorts)

    lengths = {name: SamplingParams(max_new_tokens=4 + i % 3) for i, name in enumerate(shorts)}  # staggered ends

    def keep_three_short_ones_running(step: int) -> None:
        held = engine.queue.held()
        while pending and held < 4:  # the long request and three short ones
            name = pending.pop(0)
            events[name] = []
            engine.submit(shorts[name], lengths[name], events[name].append)
            held += 1

    loop, progress = run(engine, keep_three_short_ones_running)
    counts = [step.get((0, 0)) for step in progress.steps]
    stalled = longest = 0
    for before, after in zip(counts, counts[1:]):
        stalled = stalled + 1 if after == before else 0
        longest = max(longest, stalled)
    assert MAX_WAIT_STEPS // 2 < longest <= MAX_WAIT_STEPS  # they did wait, never longer than the bound
    assert answers(events["long"]) == alone(long_req, LONG)
    for name, req in shorts.items():
        assert answers(events[name]) == alone(req, lengths[name]), name

def test_requests_of_one_size_step_together() -> None:
    """Only a mix of short and long requests makes rows wait: short ones alone, or long ones alone, all step."""
    backend = tiny_backend(EngineConfig(batch_size=4))
    engine = LiveEngine(backend, max_len=512)
    for i in range(3):
        engine.submit(request(backend, f"s{i}", "z = "), SHORT, lambda event: None)
    loop, progress = run(engine, lambda step: None)
    assert all(len(step) == 3 for step in progress.steps[: SHORT.max_new_tokens - 1])
    assert loop.waited == 0
