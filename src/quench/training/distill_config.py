"""The settings of a draft distillation run (`quench draft train`): a frozen dataclass, no torch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DistillConfig:
    source_layers: tuple[int, ...] = (0, -1)  # target layers the draft starts from (first and last)
    head_tokens: int = 8192  # N: draft only among the N most frequent answer tokens; 0: the whole vocabulary
    prompts: int | None = None  # MBPP train + validation prompts answered by the target (None = all 464)
    stdlib_functions: int = 400  # standard-library functions added as answers (real code)
    stdlib_prompts: int = 1082  # further stdlib signatures + docstrings answered by the target (all Python 3.11 has left)
    stdlib_labels: str = "real"  # "real": their own next tokens (no teacher pass); "teacher": the target's top-k
    max_new_tokens: int = 128  # per generated answer
    sampled_answers: int = 0  # further answers per answered prompt, sampled at sample_temperature (more target-written
    # code from the same prompts; keys sampled<r>/<prompt key>, held out with their prompt's greedy answer)
    sample_temperature: float = 0.7
    max_tokens: int = 256  # per training sequence (long prompts lose their middle, see fit_length)
    top_k: int = 32  # teacher log-probabilities kept per position
    epochs: int = 5
    batch_size: int = 8  # sequences per optimizer step
    learning_rate: float = 1e-3
    warmup_steps: int = 20
    min_lr_ratio: float = 0.1  # the cosine decays to this fraction of learning_rate
    heldout_every: int = 20  # one example in this many (by key hash) is held out for evaluation
    checkpoint_every: int = 25  # optimizer steps between checkpoints
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.source_layers:
            raise ValueError("source_layers must name at least one target layer")
        if self.stdlib_labels not in ("real", "teacher"):
            raise ValueError(f"stdlib_labels must be 'real' or 'teacher', got {self.stdlib_labels!r}")
        if self.stdlib_functions < 0 or self.stdlib_prompts < 0:
            raise ValueError("stdlib_functions and stdlib_prompts must be >= 0")
        if self.sampled_answers < 0 or not self.sample_temperature > 0:
            raise ValueError("sampled_answers must be >= 0 and sample_temperature > 0")
        if self.epochs < 1 or self.batch_size < 1 or self.top_k < 1 or self.max_tokens < 16:
            raise ValueError("epochs, batch_size and top_k must be >= 1, max_tokens >= 16")
