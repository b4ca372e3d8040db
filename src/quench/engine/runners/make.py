"""The runner a model gets: the Llama fast path under its forward plan where `engine_plan` gives one, else the
generic Hugging Face path."""

from __future__ import annotations

import torch

from quench.engine.config import EngineConfig
from quench.engine.kernels import quant
from quench.engine.runners.forward_plan import engine_plan
from quench.engine.runners.hf_runner import HFRunner
from quench.engine.runners.llama import LlamaRunner
from quench.engine.runners.protocol import Runner

_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32, "float64": torch.float64}


def make_runner(model: torch.nn.Module, config: EngineConfig, draft: bool = False) -> Runner:
    """The runner `engine_plan` plans for `model` under `config`: the Llama fast path where it applies (and is
    enabled), else the generic Hugging Face path. draft: a draft model's runner (`engine_plan`)."""
    if config.dtype != "auto":
        model.to(_DTYPES[config.dtype])
    model.eval()
    plan = engine_plan(model, config, draft=draft)
    if plan is None:
        return HFRunner(model)
    runner = LlamaRunner(model, plan)
    gguf_weights = quant.gguf_weights_of(model)  # loaded with weights="gguf"
    if gguf_weights is not None:
        quant.use_gguf_weights(runner, gguf_weights)
    return runner
