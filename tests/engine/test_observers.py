"""The engine's stop-observer protocol, with an observer that is not GenGuard: the engine needs nothing else."""

import pytest
import torch

from helpers import DRAFT_EVERYTHING, char_tokenizer, perturbed, tiny_llama
from quench.engine import RowStopper, StopObserver
from quench.engine.engine import EngineConfig, QuenchBackend
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
