"""CodeFort robust training: data augmentation, batch augmentation, ALP/ALPD, contrastive losses.

`train(config, loaded, problems, out)` fine-tunes (LoRA or full, one process or `torchrun`) and
exports a Hugging Face model directory; `training_problems(config.data)` gives MBPP train +
validation (never test). Losses and their constants: docs/training.md.
"""

from quench.training.config import (
    STRATEGIES, DataSettings, LoraSettings, LossWeights, TrainConfig, check_config, parse_strategies,
)

# Training needs torch: imported on first use, so that the configuration (and `quench --help`) stays light.
_LAZY = {"training_problems": "quench.training.data", "StepLog": "quench.training.trainer",
         "TrainResult": "quench.training.trainer", "train": "quench.training.trainer"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "STRATEGIES", "DataSettings", "LoraSettings", "LossWeights", "StepLog", "TrainConfig", "TrainResult",
    "check_config", "parse_strategies", "train", "training_problems",
]
