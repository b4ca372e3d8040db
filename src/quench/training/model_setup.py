"""The model to train: LoRA adapters (peft) on chosen projections and layers, or every weight."""

from __future__ import annotations

import warnings

from torch import nn

from quench.errors import QuenchError
from quench.training.config import LoraSettings


def module_names(model: nn.Module) -> set[str]:
    return {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}


def apply_lora(model: nn.Module, lora: LoraSettings) -> nn.Module:
    """Wrap with peft LoRA; only the adapters train. `last_layers` keeps backward out of the lower blocks."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise QuenchError("--lora needs the package 'peft' (pip install peft), or train with --full") from None
    layers = int(getattr(model.config, "num_hidden_layers", 0))
    if lora.last_layers is not None and lora.last_layers > layers:
        raise QuenchError(f"--lora-layers {lora.last_layers}: the model has {layers} layers")
    missing = [t for t in lora.targets if t not in module_names(model)]
    if missing:
        raise QuenchError(f"--lora-targets: the model has no module named {', '.join(missing)}")
    transform = list(range(layers - lora.last_layers, layers)) if lora.last_layers else None
    settings = LoraConfig(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                          target_modules=list(lora.targets), layers_to_transform=transform, task_type="CAUSAL_LM")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning)  # peft calls a deprecated transformers method
        return get_peft_model(model, settings)


def prepare_model(model: nn.Module, lora: LoraSettings | None) -> nn.Module:
    """LoRA-wrapped or fully trainable, in training mode."""
    if lora is not None:
        model = apply_lora(model, lora)
    else:
        for param in model.parameters():
            param.requires_grad_(True)
    model.train()
    if not any(p.requires_grad for p in model.parameters()):
        raise QuenchError("nothing to train: no parameter requires a gradient")
    return model
