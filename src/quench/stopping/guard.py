"""GenGuard (CodeFast, Guo et al., ISSTA 2024): a small classifier on the target's last hidden state.

The feature of generated token t is the final-norm hidden state (what the LM head reads) at the
position where t is fed, so the engine gets it from the forward pass that runs anyway. The
classifier is `Linear(d_model, 2)` as in CodeFast, or optionally a one-hidden-layer MLP; class 1 is
"stop" (the token is excess). `GuardState` runs it batched, with a policy state per row; the two
implement the engine's observer protocol (`quench.engine.observers`), which is how the decode loop
calls them.
"""

from __future__ import annotations

import json
import weakref
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import nn

from quench.engine.observers import PAD, RowStopper, StopObserver
from quench.stopping.policy import GuardPolicy, RowPolicy, TokenShape

FORMAT = "quench-genguard"
VERSION = "1"
FEATURE = "final_norm_hidden"  # the hidden state the LM head reads, at the position the token is fed


@dataclass(frozen=True)
class GuardInfo:
    """What a guard was trained for and on (stored in the file's metadata)."""

    hidden_size: int
    model: str = ""  # the model name it was trained for
    kind: str = "linear"  # "linear" or "mlp"
    mlp_hidden: int = 0
    feature: str = FEATURE
    trained_on: str = ""  # data description, e.g. "mbpp train+validation, 140 answers"
    metrics: dict[str, float] = field(default_factory=dict)  # validation figures from training


def make_head(hidden_size: int, kind: str = "linear", mlp_hidden: int = 64) -> nn.Sequential:
    """The classifier: logits (..., 2) from hidden states (..., D)."""
    if kind == "linear":
        return nn.Sequential(nn.Linear(hidden_size, 2))
    if kind == "mlp":
        return nn.Sequential(nn.Linear(hidden_size, mlp_hidden), nn.GELU(), nn.Linear(mlp_hidden, 2))
    raise ValueError(f"guard kind must be 'linear' or 'mlp', got {kind!r}")


class GenGuard(StopObserver):
    """A trained classifier, its policy and its metadata; `start` gives the batched per-row runner."""

    def __init__(self, head: nn.Module, policy: GuardPolicy, info: GuardInfo) -> None:
        self.head = head.float().eval()
        self.policy = policy
        self.info = info

    @property
    def hidden_size(self) -> int:
        return self.info.hidden_size

    @torch.no_grad()
    def stop_probs(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden (..., D) in any float dtype -> probability that each token is excess (...,)."""
        logits = self.head(hidden.float())  # (..., 2)
        return torch.softmax(logits, dim=-1)[..., 1]

    def with_policy(self, **changes: Any) -> "GenGuard":
        return GenGuard(self.head, replace(self.policy, **changes), self.info)

    def start(self, tokenizer: Any, slots: int) -> "GuardState":
        """Per-row state for a batch of `slots` rows; reset a slot when a new sequence starts in it."""
        return GuardState(self, token_shapes(tokenizer), slots)

    def save(self, path: Path) -> None:
        from safetensors.torch import save_file

        tensors = {name: value.detach().float().contiguous() for name, value in self.head.state_dict().items()}
        metadata = {
            "format": FORMAT,
            "version": VERSION,
            "info": json.dumps(asdict(self.info), sort_keys=True),
            "policy": json.dumps(asdict(self.policy), sort_keys=True),
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file(tensors, str(path), metadata=metadata)


class GuardState(RowStopper):
    """GenGuard over a batch: one `RowPolicy` per slot, one classifier call per step for all rows."""

    def __init__(self, guard: GenGuard, shapes: Sequence[TokenShape], slots: int) -> None:
        self.guard = guard
        self.shapes = shapes
        self.rows = [RowPolicy(guard.policy) for _ in range(slots)]
        self.stopped = [False] * slots
        self.last_probs: torch.Tensor | None = None  # (B, T) stop probabilities of the latest step

    def reset(self, slot: int) -> None:
        self.rows[slot] = RowPolicy(self.guard.policy)
        self.stopped[slot] = False

    def step(self, hidden: torch.Tensor, token_ids: torch.Tensor) -> list[int | None]:
        """hidden (B, T, D) at the positions where token_ids (B, T) were fed; PAD marks positions to skip.

        Returns, per row, None or the number of generated tokens to keep (the row stops there).
        Rows feed left to right: a row's valid tokens are a prefix of its T positions.
        """
        probs = self.guard.stop_probs(hidden)  # (B, T)
        self.last_probs = probs
        votes = (probs >= self.guard.policy.threshold).tolist()
        ids = token_ids.tolist()
        out: list[int | None] = [None] * len(ids)
        for b, (row_ids, row_votes) in enumerate(zip(ids, votes)):
            if self.stopped[b]:
                continue
            for token, vote in zip(row_ids, row_votes):
                if token == PAD:
                    break
                keep = self.rows[b].feed(vote, self._shape(token))
                if keep is not None:
                    out[b] = keep
                    self.stopped[b] = True
                    break
        return out

    def _shape(self, token: int) -> TokenShape:
        return self.shapes[token] if 0 <= token < len(self.shapes) else _PLAIN


_PLAIN = TokenShape(0, False, False)
_SHAPES: "weakref.WeakKeyDictionary[Any, list[TokenShape]]" = weakref.WeakKeyDictionary()


def token_shapes(tokenizer: Any) -> list[TokenShape]:
    """Newline layout of every vocabulary entry (decoded once per tokenizer: a pass over the whole vocabulary)."""
    cached = _SHAPES.get(tokenizer)
    if cached is not None and len(cached) == len(tokenizer):
        return cached
    texts = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])
    interned: dict[TokenShape, TokenShape] = {}
    shapes = [interned.setdefault(s, s) for s in map(TokenShape.of, texts)]
    _SHAPES[tokenizer] = shapes
    return shapes
