"""Load a causal LM and its tokenizer from a preset, a Hugging Face directory or a GGUF file.

GGUF weights are dequantized once by transformers and cached as safetensors under `$QUENCH_CACHE`
(default `~/.cache/quench`): the first load takes ~15 s, later ones about a second.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from quench.errors import QuenchError
from quench.models.presets import DEFAULT_PRESET, PRESETS, preset_gguf_parts

log = logging.getLogger(__name__)

PROMPT_FORMATS = ("chat", "completion")
QUENCH_META = "quench.json"  # written into checkpoints by `quench train`: {"prompt_format": ...}
DTYPES = {"auto": None, "bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


@dataclass
class LoadedModel:
    """A model ready to generate: the HF causal LM (eval mode), its tokenizer and prompt format."""

    model: Any  # transformers PreTrainedModel
    tokenizer: Any  # transformers PreTrainedTokenizerBase
    name: str  # preset name or path
    prompt_format: str  # "chat" or "completion"
    dtype: torch.dtype
    source: str  # the directory the weights were read from


def cache_root() -> Path:
    return Path(os.environ.get("QUENCH_CACHE", Path.home() / ".cache" / "quench"))


def cpu_supports_bf16() -> bool:
    """bfloat16 matmuls are fast only with AVX512-BF16/AMX; elsewhere they are emulated and slow."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return any(flag in flags for flag in ("avx512_bf16", "amx_bf16", "avx512bw"))


def resolve_dtype(dtype: str, device: str) -> torch.dtype:
    if dtype not in DTYPES:
        raise QuenchError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    if dtype != "auto":
        return DTYPES[dtype]
    if device.startswith("cuda"):
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.bfloat16 if cpu_supports_bf16() else torch.float32


def gguf_cache_dir(parts: list[Path]) -> Path:
    """A cache directory keyed by the GGUF's name, size and modification time."""
    key = "|".join(f"{p.name}:{p.stat().st_size}:{int(p.stat().st_mtime)}" for p in parts)
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return cache_root() / "models" / f"{parts[0].name.split('.')[0]}-{digest}"


def dequantize_gguf(parts: list[Path], target: Path) -> None:
    """Dequantize a GGUF (possibly in chunks) with transformers and save it as safetensors."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.info("dequantizing %s once into %s (about 15 s)", parts[0].name, target)
    with tempfile.TemporaryDirectory(dir=cache_root()) as tmp:
        if len(parts) == 1:
            gguf_dir, gguf_name = parts[0].parent, parts[0].name
        else:
            gguf_dir, gguf_name = Path(tmp), parts[0].name.rsplit(".part", 1)[0]
            with (gguf_dir / gguf_name).open("wb") as out:
                for part in parts:
                    with part.open("rb") as chunk:
                        shutil.copyfileobj(chunk, out)
        model = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=gguf_name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_name)
        model.hf_quantizer = None  # the weights are plain tensors now; save them as such
        staging = Path(tmp) / "model"
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        drop_quantization_config(staging / "config.json")
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staging, target)  # atomic: a killed dequantization leaves no half cache


def drop_quantization_config(config_path: Path) -> None:
    """The saved weights are dequantized; a leftover GGUF `quantization_config` would mislead loaders."""
    config = json.loads(config_path.read_text())
    config.pop("quantization_config", None)
    config_path.write_text(json.dumps(config, indent=2) + "\n")


def cached_gguf_dir(parts: list[Path]) -> Path:
    target = gguf_cache_dir(parts)
    if not (target / "config.json").is_file():
        cache_root().mkdir(parents=True, exist_ok=True)
        dequantize_gguf(parts, target)
    return target


def saved_prompt_format(model_dir: Path) -> str:
    """The prompt format a quench checkpoint records in `quench.json`; raw completion otherwise."""
    meta_path = model_dir / QUENCH_META
    if not meta_path.is_file():
        return "completion"
    try:
        prompt_format = json.loads(meta_path.read_text()).get("prompt_format", "completion")
    except (json.JSONDecodeError, AttributeError):
        raise QuenchError(f"{meta_path}: not a JSON object") from None
    if prompt_format not in PROMPT_FORMATS:
        raise QuenchError(f"{meta_path}: unknown prompt_format {prompt_format!r}")
    return prompt_format


def resolve_source(name_or_path: str) -> tuple[Path, str]:
    """(HF model directory, default prompt format) for a preset, a directory or a GGUF file."""
    if name_or_path in PRESETS:
        preset = PRESETS[name_or_path]
        return cached_gguf_dir(preset_gguf_parts(preset)), preset.prompt_format
    path = Path(name_or_path).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return cached_gguf_dir([path]), "completion"
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise QuenchError(f"{path}: not a Hugging Face model directory (no config.json)")
        return path, saved_prompt_format(path)
    raise QuenchError(
        f"unknown model {name_or_path!r}: give a preset ({', '.join(PRESETS)}), "
        "a Hugging Face model directory or a .gguf file"
    )


def load_model(
    name_or_path: str = DEFAULT_PRESET,
    dtype: str = "auto",
    device: str = "cpu",
    prompt_format: str | None = None,
) -> LoadedModel:
    """Load a causal LM for generation. Nothing is ever downloaded."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # quench shows its own progress; the CLI owns the terminal
    if prompt_format is not None and prompt_format not in PROMPT_FORMATS:
        raise QuenchError(f"unknown prompt format {prompt_format!r}; choose chat or completion")
    source, default_format = resolve_source(name_or_path)
    torch_dtype = resolve_dtype(dtype, device)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch_dtype, local_files_only=True)
    except (OSError, ValueError) as err:
        raise QuenchError(f"{source}: cannot load model: {err}") from None
    model.to(device).eval()
    chosen = prompt_format or default_format
    if chosen == "chat" and not getattr(tokenizer, "chat_template", None):
        raise QuenchError(f"{name_or_path}: prompt format 'chat' needs a tokenizer with a chat template")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return LoadedModel(model, tokenizer, name_or_path, chosen, torch_dtype, str(source))
