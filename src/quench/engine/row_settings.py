"""What one row of the batch draws its tokens with (`DrawSettings`) and when it stops (`RowLimits`).

A request's `SamplingParams` (quench.engine.types) holds both, and the seed of its rows' generators;
each row of the decode loop carries its own copy, so rows of different requests share a batch.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DrawSettings:
    """How a token is drawn from a position's logits; temperature 0 means greedy (argmax)."""

    temperature: float = 0.0
    top_p: float = 1.0  # nucleus mass kept (1.0 = off)
    top_k: int = 0  # 0 = off

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")

    @property
    def draw(self) -> DrawSettings:
        """These settings alone, one value for every greedy setting (top-p and top-k change no argmax), so
        rows that draw alike compare equal."""
        if self.greedy:
            return GREEDY
        return DrawSettings(self.temperature, self.top_p, self.top_k)


GREEDY = DrawSettings()


@dataclass(frozen=True)
class RowLimits:
    """When a row stops, besides EOS, stop sequences and stop rules."""

    max_new_tokens: int = 512
    min_tokens: int = 0  # EOS cannot end a sample shorter than this: its logits are masked until then (vLLM's
    # min_tokens, Hugging Face's min_new_tokens); stop sequences and stop rules still apply
    ignore_eos: bool = False  # EOS ends nothing: it is kept and generation goes on (vLLM's; fixed-length runs)

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if not 0 <= self.min_tokens <= self.max_new_tokens:
            raise ValueError(f"min_tokens must be between 0 and max_new_tokens ({self.max_new_tokens}), got {self.min_tokens}")
