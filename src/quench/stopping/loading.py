"""Reading guard files: a path, or "auto" for the guard quench ships for a preset model."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from quench.errors import QuenchError
from quench.stopping.guard import FEATURE, FORMAT, GenGuard, GuardInfo, make_head
from quench.stopping.policy import GuardPolicy

log = logging.getLogger(__name__)

ASSETS = Path(__file__).parent / "assets"


def shipped_guard_path(model_name: str) -> Path:
    return ASSETS / f"{model_name}.safetensors"


def model_hidden_size(model: Any) -> int:
    """The hidden size of a `LoadedModel`, a Hugging Face model, or an int."""
    if isinstance(model, int):
        return model
    inner = getattr(model, "model", model)  # LoadedModel.model, else the HF model itself
    config = getattr(inner, "config", None)
    if config is None:
        raise TypeError(f"cannot find the hidden size of {type(model).__name__}")
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    return int(text_config.hidden_size)


def load_guard(path_or_auto: str | Path, model: Any) -> GenGuard:
    """Load a guard for `model` (a LoadedModel, HF model or hidden size); QuenchError if it cannot serve it."""
    if str(path_or_auto) == "auto":
        name = getattr(model, "name", None)
        path = shipped_guard_path(name) if isinstance(name, str) else None
        if path is None or not path.is_file():
            raise QuenchError(
                f"--guard auto: quench ships no GenGuard for model {name or '(unnamed)'}; "
                "build one with `quench guard build-data` and `quench guard train`, then pass its path"
            )
    else:
        path = Path(path_or_auto).expanduser()
    guard = read_guard(path)
    expected = model_hidden_size(model)
    if guard.hidden_size != expected:
        raise QuenchError(
            f"{path}: this guard was trained for hidden size {guard.hidden_size}"
            f"{f' ({guard.info.model})' if guard.info.model else ''}, but the model has hidden size {expected}; "
            "train a guard for this model"
        )
    name = getattr(model, "name", None)
    if isinstance(name, str) and guard.info.model and guard.info.model != name:
        log.warning("%s: guard trained for %s, used with %s (same hidden size)", path, guard.info.model, name)
    return guard


def read_guard(path: Path) -> GenGuard:
    """Read and check a guard file; every problem becomes a QuenchError naming the file."""
    if not path.is_file():
        raise QuenchError(f"{path}: guard file not found")
    try:
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as handle:
            metadata = handle.metadata() or {}
            tensors = {name: handle.get_tensor(name) for name in handle.keys()}
    except Exception as err:  # safetensors raises its own error types for truncated or foreign files
        raise QuenchError(f"{path}: not a readable guard file ({type(err).__name__}: {err})") from None
    if metadata.get("format") != FORMAT:
        raise QuenchError(f"{path}: not a quench GenGuard file (format {metadata.get('format')!r})")
    try:
        info = GuardInfo(**json.loads(metadata["info"]))
        policy = GuardPolicy(**json.loads(metadata["policy"]))
        head = make_head(info.hidden_size, info.kind, info.mlp_hidden)
        head.load_state_dict(tensors)
    except (KeyError, TypeError, ValueError, RuntimeError, json.JSONDecodeError) as err:
        raise QuenchError(f"{path}: corrupt guard file ({type(err).__name__}: {err})") from None
    if info.feature != FEATURE:
        raise QuenchError(f"{path}: guard reads feature {info.feature!r}; this quench provides {FEATURE!r}")
    return GenGuard(head, policy, info)
