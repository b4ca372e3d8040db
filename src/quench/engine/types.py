"""What callers hand to a generation backend and what they get back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Protocol

from quench.engine.row_settings import DrawSettings, RowLimits

# A hook the stopping rules use: (request, generated token ids so far, generated text so far) -> stop?
StopHook = Callable[["GenerationRequest", list[int], str], bool]


@dataclass(frozen=True)
class SamplingParams(DrawSettings):
    """A request's decoding settings: how its rows draw (temperature, top-p, top-k: `DrawSettings`, temperature 0
    means greedy), the seed of their generators and when they stop (`limits`)."""

    max_new_tokens: int = 512
    seed: int = 0  # row generators are seeded from (seed, request key, sample index)
    min_tokens: int = 0  # EOS cannot end a sample shorter than this: its logits are masked until then (vLLM's
    # min_tokens, Hugging Face's min_new_tokens); stop sequences and stop rules still apply
    ignore_eos: bool = False  # EOS ends nothing: it is kept and generation goes on (vLLM's; fixed-length runs)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.limits  # noqa: B018 - RowLimits checks max_new_tokens and min_tokens

    @property
    def limits(self) -> RowLimits:
        """When each of the request's rows stops."""
        return RowLimits(self.max_new_tokens, self.min_tokens, self.ignore_eos)


@dataclass(frozen=True)
class GenerationRequest:
    """One prompt, already formatted and tokenized, to be sampled `n` times."""

    key: str  # caller's id, e.g. "HumanEval/0"
    prompt_ids: tuple[int, ...]
    n: int = 1
    stop_sequences: tuple[str, ...] = ()  # text stops; the stop text is cut from the output
    sample_offset: int = 0  # index of the first sample (resume: samples 0..offset-1 exist)


@dataclass(frozen=True)
class GenerationResult:
    """One finished sample."""

    key: str
    sample_index: int
    token_ids: tuple[int, ...]  # generated tokens, stop text included if a stop sequence hit
    text: str  # decoded generated text, cut before the first stop sequence
    finish_reason: str  # "eos", "stop", "length", "hook" (a stop rule, e.g. function complete), "guard" (GenGuard)
    seconds: float = 0.0  # wall time attributed to this sample (for time budgets)
    extra: dict[str, float | str] = field(default_factory=dict)  # backend stats (accepted length, a server's model name, ...)


class Backend(Protocol):
    """A generation backend: Hugging Face `generate` (reference) or quench's own engine."""

    name: str

    def generate(
        self, requests: Iterable[GenerationRequest], sampling: SamplingParams
    ) -> Iterator[GenerationResult]:
        """Yield each sample as soon as it is finished (order not guaranteed)."""
        ...


def cut_at_stop(text: str, stop_sequences: Iterable[str]) -> tuple[str, bool]:
    """Cut `text` before the earliest stop sequence; return (text, whether one was found)."""
    cut = min((i for s in stop_sequences if s and (i := text.find(s)) >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)
