"""Training configuration: strategies, loss constants, LoRA and data settings, checked up front.

Strategies (CodeFort, Zhang et al. 2024, §3-4; our constants, see docs/training.md):
  da      data augmentation: perturbed variants trained as extra examples
  mda     masked data augmentation: as da, perturbed prompt tokens echoed in the target are not targets
  ba      batch augmentation: each example and one perturbed variant in the same batch
  alp     adversarial logits pairing: ba + distance between the logits of aligned target tokens
  alpd    alp with name dropout: logits of renamed identifiers' tokens left out of the distance
  cl-seq  sequence-level contrastive loss (InfoNCE, in-batch negatives) on pooled hidden states
  cl-tok  token-level contrastive loss on the hidden states of aligned target tokens
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from quench.errors import QuenchError

STRATEGIES = ("da", "mda", "ba", "alp", "alpd", "cl-seq", "cl-tok")
PAIRED = frozenset({"ba", "alp", "alpd", "cl-seq", "cl-tok"})  # need (nominal, variant) pairs in a batch
AUGMENTING = frozenset({"da", "mda"}) | PAIRED  # need perturbed variants at all
DEFAULT_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class LossWeights:
    """Constants of the robust losses (CodeFort does not publish its own; docs/training.md says why these)."""

    alp: float = 0.5  # weight of the ALP logit distance (mean squared, centered logits)
    seq: float = 0.1  # weight of the sequence-level contrastive loss
    tok: float = 0.1  # weight of the token-level contrastive loss
    seq_temperature: float = 0.05  # SimCSE's temperature for cosine similarities
    tok_temperature: float = 0.1  # softer: aligned tokens of one pair are many and similar
    tok_max_aligned: int = 64  # aligned tokens sampled per pair for cl-tok (bounds the A x A matrix)


@dataclass(frozen=True)
class LoraSettings:
    rank: int = 8
    alpha: int = 16  # scale alpha / rank = 2, the common choice
    dropout: float = 0.05
    targets: tuple[str, ...] = DEFAULT_LORA_TARGETS
    last_layers: int | None = None  # adapt only the top N blocks: backward stops there (cheap on CPU)


@dataclass(frozen=True)
class DataSettings:
    splits: tuple[str, ...] = ("train", "validation")  # MBPP splits; never test
    limit: int | None = None  # keep the first N problems (after the stdlib ones are added)
    stdlib: int = 0  # add up to N functions with docstrings from the installed standard library
    transforms: tuple[str, ...] = ()  # perturbation names (resolved from categories by the CLI)
    perturb_seeds: int = 1  # seeds per randomised transformation
    variants_per_example: int = 1  # da/mda: perturbed variants drawn per example and epoch
    validate: bool = True  # keep only variants whose reference still passes (runs the sandbox)
    profile: str = "quench"  # perturbation profile: "quench" or "recode" (docs/perturbations.md)


@dataclass(frozen=True)
class TrainConfig:
    model: str = "smollm2-135m-instruct"
    strategies: frozenset[str] = frozenset()
    lora: LoraSettings | None = field(default_factory=LoraSettings)  # None: full fine-tuning
    epochs: int = 1
    lr: float = 2e-4
    batch_size: int = 4  # examples (a pair counts once) per process and step
    max_length: int = 512  # longer sequences are left out, never truncated (a cut answer teaches nothing)
    warmup_ratio: float = 0.05
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    seed: int = 0
    save_every: int = 50  # steps between resumable states
    dtype: str = "float32"
    losses: LossWeights = LossWeights()
    data: DataSettings = DataSettings()

    @property
    def paired(self) -> bool:
        return bool(self.strategies & PAIRED)

    @property
    def masked(self) -> bool:
        return "mda" in self.strategies

    def to_json(self) -> dict[str, Any]:
        row = dataclasses.asdict(self)
        row["strategies"] = sorted(self.strategies)
        return json.loads(json.dumps(row))  # tuples become lists, as they are read back


def parse_strategies(spec: str | None) -> frozenset[str]:
    """`"da,alp"` -> {"da", "alp"}; "" or "none" -> plain fine-tuning."""
    if not spec or spec.strip() == "none":
        return frozenset()
    wanted = [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [s for s in wanted if s not in STRATEGIES]
    if unknown:
        raise QuenchError(f"unknown strategy {', '.join(unknown)}; choose from {', '.join(STRATEGIES)} (or none)")
    return frozenset(wanted)


def check_config(config: TrainConfig) -> None:
    """Raise `QuenchError` for a configuration that cannot train (before anything is loaded)."""
    s = config.strategies
    conflicts = [("da", "mda", "mda is da with masking: give one of them"),
                 ("alp", "alpd", "alpd is alp with name dropout: give one of them")]
    for a, b, why in conflicts:
        if a in s and b in s:
            raise QuenchError(f"--strategy {a},{b}: {why}")
    if "da" in s and s & PAIRED:
        raise QuenchError(f"--strategy da,{','.join(sorted(s & PAIRED))}: paired strategies already train on "
                          "the perturbed variants; add mda to mask them, or drop da")
    if s & AUGMENTING and not config.data.transforms:
        raise QuenchError(f"--strategy {','.join(sorted(s))} needs perturbations: no transformation selected")
    if "cl-seq" in s and config.batch_size < 2:
        raise QuenchError("cl-seq contrasts each pair with the other pairs of the batch: --batch-size must be at least 2")
    positive = {"--epochs": config.epochs, "--batch-size": config.batch_size, "--save-every": config.save_every,
                "--seeds": config.data.perturb_seeds, "--variants-per-example": config.data.variants_per_example}
    for flag, value in positive.items():
        if value < 1:
            raise QuenchError(f"{flag} must be at least 1, got {value}")
    if not config.lr > 0:
        raise QuenchError(f"--lr must be positive, got {config.lr}")
    if config.max_length < 16:
        raise QuenchError(f"--max-length must be at least 16, got {config.max_length}")
    if not 0 <= config.warmup_ratio < 1:
        raise QuenchError(f"--warmup-ratio must be in [0, 1), got {config.warmup_ratio}")
    if config.dtype not in ("float32", "bfloat16", "float16"):
        raise QuenchError(f"--dtype {config.dtype}: train in float32, bfloat16 or float16")
    if config.data.stdlib < 0 or (config.data.limit is not None and config.data.limit < 1):
        raise QuenchError("--stdlib must be >= 0 and --limit >= 1")
    bad_splits = [x for x in config.data.splits if x not in ("train", "validation")]
    if bad_splits:
        raise QuenchError(f"--splits {','.join(bad_splits)}: train only on MBPP train and validation, never test")
    check_losses(config.losses)
    if config.lora is not None:
        check_lora(config.lora)


def check_losses(w: LossWeights) -> None:
    if min(w.alp, w.seq, w.tok) < 0:
        raise QuenchError("loss weights must be >= 0")
    if min(w.seq_temperature, w.tok_temperature) <= 0:
        raise QuenchError("contrastive temperatures must be positive")
    if w.tok_max_aligned < 2:
        raise QuenchError("cl-tok needs at least 2 aligned tokens per pair (--tok-max-aligned)")


def check_lora(lora: LoraSettings) -> None:
    if lora.rank < 1 or lora.alpha <= 0:
        raise QuenchError(f"--lora-rank must be >= 1 and --lora-alpha > 0, got {lora.rank}, {lora.alpha}")
    if not 0 <= lora.dropout < 1:
        raise QuenchError(f"--lora-dropout must be in [0, 1), got {lora.dropout}")
    if lora.last_layers is not None and lora.last_layers < 1:
        raise QuenchError(f"--lora-layers must be at least 1, got {lora.last_layers}")
    if not lora.targets:
        raise QuenchError("--lora-targets is empty")


def config_from_json(row: dict[str, Any]) -> TrainConfig:
    """Read back `TrainConfig.to_json()` (the saved training state's config)."""
    row = dict(row)
    lora = row.pop("lora")
    losses, data = row.pop("losses"), row.pop("data")
    return TrainConfig(
        **{**row, "strategies": frozenset(row["strategies"])},
        lora=None if lora is None else LoraSettings(**{**lora, "targets": tuple(lora["targets"])}),
        losses=LossWeights(**losses),
        data=DataSettings(**{**data, "splits": tuple(data["splits"]), "transforms": tuple(data["transforms"])}),
    )
