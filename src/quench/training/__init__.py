"""CodeFort robust training: data augmentation, batch augmentation, ALP/ALPD, contrastive losses.

`train(config, loaded, problems, out)` fine-tunes (LoRA or full, one process or `torchrun`) and
exports a Hugging Face model directory; `training_problems(config.data)` gives MBPP train +
validation (never test). Losses and their constants: docs/training.md.
"""

from quench.training.config import (
    STRATEGIES, DataSettings, LoraSettings, LossWeights, TrainConfig, check_config, parse_strategies,
)
from quench.training.data import training_problems
from quench.training.trainer import StepLog, TrainResult, train

__all__ = [
    "STRATEGIES", "DataSettings", "LoraSettings", "LossWeights", "StepLog", "TrainConfig", "TrainResult",
    "check_config", "parse_strategies", "train", "training_problems",
]
