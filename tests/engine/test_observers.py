"""The engine's stop-observer protocol, with an observer that is not GenGuard: the engine needs nothing else;
and its listener protocol, with a listener that records what it is told."""

from collections import defaultdict

import pytest
import torch

from helpers import DRAFT_EVERYTHING, char_tokenizer, perturbed, tiny_llama
from quench.engine import LoopListener, RowStopper, StopObserver
from quench.engine.backend import QuenchBackend
from quench.engine.config import EngineConfig
from quench.engine.observers import PAD
from quench.engine.types import GenerationRequest, SamplingParams

PROMPTS = ["def f(x):\n", "x = [1, 2, 3]\nfor i in x:\n    ", "a", "import os\n\nclass A:\n", "print(1)"]
KEEP = 5


class KeepFirst:
    """Stops every row once it has fed KEEP generated tokens; records the hidden-state shapes it is shown."""

    def __init__(self) -> None:
        self.shapes: list[tuple[int, ...]] = []

    def start(self, tokenizer, slots: int) -> "KeepFirstRows":
        return KeepFirstRows(self, slots)


class KeepFirstRows:
    def __init__(self, observer: KeepFirst, slots: int) -> None:
        self.observer = observer
        self.fed = [0] * slots

    def reset(self, slot: int) -> None:
        self.fed[slot] = 0

    def step(self, hidden: torch.Tensor, token_ids: torch.Tensor) -> list[int | None]:
        self.observer.shapes.append(tuple(hidden.shape))
        out: list[int | None] = [None] * len(self.fed)
        for b, row in enumerate(token_ids.tolist()):
            for token in row:
                if token == PAD:
                    break
                self.fed[b] += 1
                if self.fed[b] == KEEP:
                    out[b] = KEEP
                    break
        return out


def test_keep_first_implements_the_protocol():
    observer = KeepFirst()
    assert isinstance(observer, StopObserver) and isinstance(observer.start(None, 2), RowStopper)


@pytest.mark.parametrize("config", [dict(), dict(drafter="draft", draft_length="fixed", draft_tokens=3, **DRAFT_EVERYTHING)])
def test_any_observer_stops_rows_where_it_says(config):
    model, tokenizer = tiny_llama(dtype=torch.float64), char_tokenizer()
    reqs = [GenerationRequest(f"t/{i}", tuple(tokenizer(p, add_special_tokens=False)["input_ids"]))
            for i, p in enumerate(PROMPTS)]
    sampling = SamplingParams(max_new_tokens=20)
    draft = perturbed(model, 0.3) if config else None
    plain = QuenchBackend(model, tokenizer, EngineConfig(batch_size=2, **config), draft_model=draft)
    full = {r.key: r.token_ids for r in plain.generate(reqs, sampling)}
    observer = KeepFirst()
    watched = QuenchBackend(model, tokenizer, EngineConfig(batch_size=2, **config), draft_model=draft, guard=observer)
    for result in watched.generate(reqs, sampling):
        assert result.finish_reason == "guard" and result.token_ids == full[result.key][:KEEP], result.key
    assert observer.shapes and all(shape[0] == 2 and shape[2] == model.config.hidden_size for shape in observer.shapes)


class Recorder:
    """A listener keeping every token, commit and finished sample it is told of."""

    def __init__(self) -> None:
        self.tokens: dict[tuple[str, int], list[int]] = defaultdict(list)  # per sample, each token appended
        self.commits: list[dict] = []  # per commit, each row's (generated tokens, tokens told so far)
        self.finished: list = []  # (slot, result)
        self.slots: dict[tuple[str, int], int] = {}  # the slot each sample's tokens came in

    def on_token(self, slot, row, token) -> None:
        key = (row.request.key, row.sample_index)
        assert self.slots.setdefault(key, slot) == slot  # a sample stays in its slot
        assert len(row.generated) == len(self.tokens[key])  # told before the token is appended
        self.tokens[key].append(token)

    def on_commit(self, slots) -> None:
        rows = [((row.request.key, row.sample_index), row) for row in slots if row is not None]
        self.commits.append({key: (tuple(row.generated), tuple(self.tokens[key])) for key, row in rows})

    def on_finish(self, slot, row, result) -> None:
        assert self.slots[(result.key, result.sample_index)] == slot
        self.finished.append((slot, result))


LISTENED = {
    "greedy": (dict(), SamplingParams(max_new_tokens=20), False),
    "speculative": (dict(drafter="draft", draft_length="fixed", draft_tokens=3, **DRAFT_EVERYTHING),
                    SamplingParams(max_new_tokens=20), False),
    "sampled": (dict(drafter="ngram"), SamplingParams(temperature=0.8, max_new_tokens=16, seed=3), False),
    "guarded": (dict(drafter="draft", draft_length="fixed", draft_tokens=3, **DRAFT_EVERYTHING),
                SamplingParams(max_new_tokens=20), True),
}


@pytest.mark.parametrize("case", list(LISTENED))
def test_a_listener_sees_each_token_commit_and_finish_the_results_hold(case):
    config, sampling, guarded = LISTENED[case]
    model, tokenizer = tiny_llama(dtype=torch.float64), char_tokenizer()
    stops = ("e", "\n") if case == "sampled" else ()
    reqs = [GenerationRequest(f"t/{i}", tuple(tokenizer(p, add_special_tokens=False)["input_ids"]), n=2,
                              stop_sequences=stops) for i, p in enumerate(PROMPTS)]
    draft = perturbed(model, 0.3) if config.get("drafter") == "draft" else None
    backend = QuenchBackend(model, tokenizer, EngineConfig(batch_size=3, **config), draft_model=draft,
                            guard=KeepFirst() if guarded else None)
    plain = {(r.key, r.sample_index): r.token_ids for r in backend.generate(reqs, sampling)}
    recorder = Recorder()
    assert isinstance(recorder, LoopListener)
    results = list(backend.generate(reqs, sampling, listeners=[recorder]))
    assert [result for _, result in recorder.finished] == results  # each told as it is yielded, in order
    assert {(r.key, r.sample_index): r.token_ids for r in results} == plain  # listening changes no token
    assert len(results) == 2 * len(PROMPTS) and len(recorder.commits) == backend.last_stats.steps + 1
    assert case != "sampled" or "stop" in {r.finish_reason for r in results}  # stop text ends some samples
    for result in results:
        seen = recorder.tokens[result.key, result.sample_index]
        if guarded:  # the guard may take back tokens already appended: the result keeps a prefix
            assert result.finish_reason == "guard" and tuple(seen[:KEEP]) == result.token_ids
        else:
            assert seen == list(result.token_ids) + [2] * (result.finish_reason == "eos")  # the result drops EOS
    for commit in recorder.commits:  # between steps, each row holds the tokens told so far (a guard's: a prefix)
        for generated, told in commit.values():
            assert generated and generated == told[: len(generated)] and (guarded or generated == told)
    assert any(len(commit) == 3 for commit in recorder.commits)  # the batch was full at some commit
