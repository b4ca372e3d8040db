"""Resumable training state, and the final model in Hugging Face format.

Layout of an output directory:
  config.json, model.safetensors, tokenizer files   the trained model (LoRA merged), loadable by
                                                    `quench generate/robustness --model DIR`
  quench.json                                       {"prompt_format": "chat"|"completion", ...}
  state/                                            resume: trainable weights, optimizer, scheduler,
                                                    data position, RNG of every process
  train.json, train_log.jsonl, variants.jsonl       the config, per-step losses, the training variants
"""

from __future__ import annotations

import copy
import json
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from quench.errors import QuenchError

STATE_DIR = "state"
QUENCH_JSON = "quench.json"
CONFIG_FILE = "train.json"
LOG_FILE = "train_log.jsonl"
VARIANTS_FILE = "variants.jsonl"


@dataclass(frozen=True)
class Position:
    """Where training stands: `step` optimizer steps done in total; the next batch is (epoch, batch)."""

    step: int
    epoch: int
    batch: int


def rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def trainable_state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().cpu().clone() for name, p in model.named_parameters() if p.requires_grad}


def save_state(out: Path, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any,
               position: Position, rng_states: list[dict[str, Any]], config: dict[str, Any]) -> None:
    """Write `out/state` atomically (a staging directory renamed over the old one)."""
    staging = out / f"{STATE_DIR}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    torch.save(trainable_state(model), staging / "trainable.pt")
    torch.save(optimizer.state_dict(), staging / "optimizer.pt")
    torch.save(scheduler.state_dict(), staging / "scheduler.pt")
    torch.save(rng_states, staging / "rng.pt")
    (staging / "position.json").write_text(json.dumps({**position.__dict__, "config": config}, indent=2) + "\n")
    final = out / STATE_DIR
    old = out / f"{STATE_DIR}.old"
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        final.rename(old)
    staging.rename(final)
    shutil.rmtree(old, ignore_errors=True)


def saved_position(out: Path) -> tuple[Position, dict[str, Any]] | None:
    path = out / STATE_DIR / "position.json"
    if not path.is_file():
        return None
    row = json.loads(path.read_text())
    return Position(row["step"], row["epoch"], row["batch"]), row["config"]


def load_state(out: Path, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any,
               rank: int) -> Position:
    state = out / STATE_DIR
    weights = torch.load(state / "trainable.pt", map_location="cpu")
    params = dict(model.named_parameters())
    missing = [name for name in weights if name not in params]
    if missing:
        raise QuenchError(f"{state}: saved weights do not match this model ({missing[0]} ...)")
    with torch.no_grad():
        for name, tensor in weights.items():
            params[name].copy_(tensor)
    optimizer.load_state_dict(torch.load(state / "optimizer.pt", map_location="cpu"))
    scheduler.load_state_dict(torch.load(state / "scheduler.pt", map_location="cpu", weights_only=False))
    rngs = torch.load(state / "rng.pt", weights_only=False)
    if len(rngs) <= rank:
        raise QuenchError(f"{state}: saved by {len(rngs)} process(es); resume with the same number")
    set_rng_state(rngs[rank])
    found = saved_position(out)
    assert found is not None
    return found[0]


def export_model(model: nn.Module, tokenizer: Any, out: Path, prompt_format: str, info: dict[str, Any]) -> None:
    """The model in Hugging Face format (LoRA merged into a copy), its tokenizer and `quench.json`."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the CLI owns the terminal
    merged = copy.deepcopy(model)
    if hasattr(merged, "merge_and_unload"):
        merged = merged.float().merge_and_unload()  # in float32: bfloat16 would round small updates away
    merged.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    (out / QUENCH_JSON).write_text(json.dumps({"prompt_format": prompt_format, **info}, indent=2) + "\n")
