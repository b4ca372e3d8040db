"""Load a causal LM and its tokenizer from a preset, a Hugging Face directory or a GGUF file.

GGUF weights are dequantized once by transformers and cached as safetensors under `$QUENCH_CACHE`
(default `~/.cache/quench`): the first load dequantizes, later ones read the cache.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from quench.errors import QuenchError
from quench.models.presets import DEFAULT_PRESET, PRESETS, preset_gguf_parts

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

PROMPT_FORMATS = ("chat", "completion")
QUENCH_META = "quench.json"  # written into checkpoints by `quench train`: {"prompt_format": ...}
DTYPES = ("auto", "bfloat16", "float16", "float32")  # torch is imported only when a model loads
# dequantized: every weight from the float32 safetensors cache; gguf: the projections and head run on the GGUF's
# blocks as stored (quench.engine.kernels.quant), float32 activations and sums; gguf-int8: on the blocks as stored
# times 8-bit activations, integer sums (llama.cpp's scheme in one fixed order)
# auto (the CLI's default): gguf-int8 wherever `resolve_weights` finds it can run, else dequantized
GGUF_WEIGHTS = ("gguf", "gguf-int8")
WEIGHTS = ("auto", "dequantized", *GGUF_WEIGHTS)
GGUF_MAGIC = b"GGUF"
GGUF_HEADER = struct.Struct("<4sIQQ")  # magic, version, tensor count, metadata count


@dataclass
class LoadedModel:
    """A model ready to generate: the HF causal LM (eval mode), its tokenizer and prompt format."""

    model: Any  # transformers PreTrainedModel
    tokenizer: Any  # transformers PreTrainedTokenizerBase
    name: str  # preset name or path
    prompt_format: str  # "chat" or "completion"
    dtype: "torch.dtype"
    source: str  # the directory the weights were read from


def cache_root() -> Path:
    return Path(os.environ.get("QUENCH_CACHE", Path.home() / ".cache" / "quench"))


def cpu_supports_bf16() -> bool:
    """Whether bfloat16 is the CPU default (`--dtype auto`): where quench's fixed-order bfloat16 kernel is vectorised
    in this build (`native_target.fixed_gemm_vectorised`: AVX2 + FMA, AVX512 or NEON), else where oneDNN runs it natively
    (AVX512-BF16, AMX); elsewhere it is emulated and slower than float32."""
    from quench.native_target import cpu_flags, fixed_gemm_vectorised

    return fixed_gemm_vectorised() or bool({"avx512_bf16", "amx_bf16"} & cpu_flags())


def check_dtype(dtype: str) -> None:
    if dtype not in DTYPES:
        raise QuenchError(f"--dtype: unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")


def resolve_dtype(dtype: str, device: str) -> "torch.dtype":
    import torch

    check_dtype(dtype)
    if dtype != "auto":
        return getattr(torch, dtype)
    if device.startswith("cuda"):
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.bfloat16 if cpu_supports_bf16() else torch.float32


def check_weights(weights: str, dtype: str, name_or_path: str) -> None:
    """--weights: one of WEIGHTS; gguf and gguf-int8 only for a GGUF model (a preset or a .gguf file), in float32."""
    if weights not in WEIGHTS:
        raise QuenchError(f"--weights: unknown weights {weights!r}; choose one of {', '.join(WEIGHTS)}")
    if weights in GGUF_WEIGHTS and dtype not in ("auto", "float32"):
        raise QuenchError(f"--weights {weights} runs float32 activations, not --dtype {dtype}")
    if weights in GGUF_WEIGHTS and name_or_path not in PRESETS and not name_or_path.endswith(".gguf"):
        raise QuenchError(f"--weights {weights}: {name_or_path} is not a GGUF model (give a preset or a .gguf file)")


def resolve_weights(weights: str, name_or_path: str, dtype: str, device: str) -> str:
    """--weights auto: gguf-int8 for a GGUF model (a preset or a .gguf file) with --dtype auto or float32 on a CPU
    where quench's native kernels build (Linux, a C compiler), else dequantized; any other value is itself."""
    if weights != "auto":
        return weights
    import platform

    from quench.native_target import compiler

    gguf_model = name_or_path in PRESETS or name_or_path.endswith(".gguf")
    runs = dtype in ("auto", "float32") and device == "cpu" and platform.system() == "Linux" and compiler() is not None
    return "gguf-int8" if gguf_model and runs else "dequantized"


def gguf_file(parts: list[Path]) -> Path:
    """One file holding the GGUF: the file itself, or the chunks concatenated once into the cache."""
    if len(parts) == 1:
        return parts[0]
    target = gguf_cache_dir(parts) / parts[0].name.rsplit(".part", 1)[0]
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as out:
            for part in parts:
                with part.open("rb") as chunk:
                    shutil.copyfileobj(chunk, out)
        os.replace(out.name, target)
    return target


def gguf_cache_dir(parts: list[Path]) -> Path:
    """A cache directory keyed by the GGUF's name, size and modification time."""
    key = "|".join(f"{p.name}:{p.stat().st_size}:{int(p.stat().st_mtime)}" for p in parts)
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return cache_root() / "models" / f"{parts[0].name.split('.')[0]}-{digest}"


def dequantize_gguf(parts: list[Path], target: Path) -> None:
    """Dequantize a GGUF (possibly in chunks) with transformers and save it as safetensors."""
    import torch
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


def cached_gguf_dir(parts: list[Path], notify: Callable[[str], None]) -> Path:
    target = gguf_cache_dir(parts)
    if not (target / "config.json").is_file():
        notify(f"converting {parts[0].name} to safetensors once, into {target} (about 15 s)")
        cache_root().mkdir(parents=True, exist_ok=True)
        try:
            dequantize_gguf(parts, target)
        except (OSError, ValueError, KeyError, IndexError, TypeError, struct.error) as err:  # the gguf reader's ways to fail
            reason = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise QuenchError(f"{parts[0]}: cannot read this GGUF file: {reason}") from None
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


WEIGHT_FILES = ("*.safetensors", "pytorch_model*.bin")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")


def check_gguf_file(path: Path) -> None:
    """A readable file that starts with the GGUF magic, or QuenchError naming it."""
    try:
        with path.open("rb") as handle:
            header = handle.read(GGUF_HEADER.size)
    except OSError as err:
        raise QuenchError(f"{path}: cannot read: {err.strerror}") from None
    if not header.startswith(GGUF_MAGIC):
        raise QuenchError(f"{path}: not a GGUF file (it does not start with the GGUF header)")
    if len(header) < GGUF_HEADER.size:
        raise QuenchError(f"{path}: a GGUF file cut short ({len(header)} bytes)")
    _, version, tensors, _ = GGUF_HEADER.unpack(header)
    if version not in (2, 3) or tensors == 0:
        raise QuenchError(f"{path}: not a GGUF model quench can read (version {version}, {tensors} tensors)")


def check_model_dir(path: Path) -> None:
    """A Hugging Face model directory: config.json, weights and a tokenizer, or QuenchError naming what is missing."""
    config_path = path / "config.json"
    if not config_path.is_file():
        raise QuenchError(f"{path}: not a Hugging Face model directory (no config.json)")
    try:
        config = json.loads(config_path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        raise QuenchError(f"{config_path}: not a JSON file") from None
    if not isinstance(config, dict):
        raise QuenchError(f"{config_path}: not a JSON object")
    if not any(any(path.glob(pattern)) for pattern in WEIGHT_FILES):
        raise QuenchError(f"{path}: a model directory without weights (no *.safetensors or pytorch_model*.bin)")
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise QuenchError(f"{path}: a model directory without a tokenizer (no {' or '.join(TOKENIZER_FILES)})")


def check_model(name_or_path: str) -> None:
    """Fail fast, before anything loads: a preset, a GGUF file or a complete HF model directory."""
    if name_or_path in PRESETS:
        preset_gguf_parts(PRESETS[name_or_path])  # QuenchError naming the package to install where it is missing
        return
    path = Path(name_or_path).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        check_gguf_file(path)
    elif path.is_dir():
        check_model_dir(path)
    elif path.exists():
        raise QuenchError(f"{path}: not a model: give a preset ({', '.join(PRESETS)}), "
                          "a Hugging Face model directory or a .gguf file")
    elif looks_like_path(name_or_path):
        raise QuenchError(f"{path}: no such file or directory")
    else:
        raise QuenchError(
            f"unknown model {name_or_path!r}: give a preset ({', '.join(PRESETS)}), "
            "a Hugging Face model directory or a .gguf file"
        )


def looks_like_path(name: str) -> bool:
    return "/" in name or name.startswith(("~", ".")) or name.endswith(".gguf")


def resolve_source(name_or_path: str, notify: Callable[[str], None] = log.info) -> tuple[Path, str]:
    """(HF model directory, default prompt format) for a preset, a directory or a GGUF file."""
    check_model(name_or_path)
    if name_or_path in PRESETS:
        preset = PRESETS[name_or_path]
        return cached_gguf_dir(preset_gguf_parts(preset), notify), preset.prompt_format
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return cached_gguf_dir([path], notify), "completion"
    return path, saved_prompt_format(path)


def load_model(
    name_or_path: str = DEFAULT_PRESET,
    dtype: str = "auto",
    device: str = "cpu",
    prompt_format: str | None = None,
    notify: Callable[[str], None] = log.info,
    weights: str = "dequantized",
) -> LoadedModel:
    """Load a causal LM for generation. Nothing is ever downloaded; `notify` hears what takes time.
    weights="auto": `resolve_weights` picks. weights="gguf" or "gguf-int8": the model also carries the path of its GGUF (`quench_gguf_file`) and the mode
    (`quench_weights`): quench's engine runs its projections and head on the quantized tensors as stored
    (`quench.engine.kernels.quant.gguf_weights_of`)."""
    check_model(name_or_path)
    check_dtype(dtype)
    check_weights(weights, dtype, name_or_path)
    weights = resolve_weights(weights, name_or_path, dtype, device)
    if prompt_format is not None and prompt_format not in PROMPT_FORMATS:
        raise QuenchError(f"unknown prompt format {prompt_format!r}; choose chat or completion")
    notify(f"loading {name_or_path} …")
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # quench shows its own progress; the CLI owns the terminal
    source, default_format = resolve_source(name_or_path, notify)
    torch_dtype = resolve_dtype("float32" if weights in GGUF_WEIGHTS else dtype, device)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch_dtype, local_files_only=True)
    except (OSError, ValueError) as err:
        raise QuenchError(f"{source}: cannot load model: {err}") from None
    model.to(device).eval()
    if weights in GGUF_WEIGHTS:  # the engine reads its blocks (quench.engine.kernels.quant.gguf_weights_of)
        parts = preset_gguf_parts(PRESETS[name_or_path]) if name_or_path in PRESETS else [Path(name_or_path).expanduser()]
        model.quench_gguf_file = str(gguf_file(parts))
        model.quench_weights = weights
    chosen = prompt_format or default_format
    if chosen == "chat" and not getattr(tokenizer, "chat_template", None):
        raise QuenchError(f"{name_or_path}: prompt format 'chat' needs a tokenizer with a chat template")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return LoadedModel(model, tokenizer, name_or_path, chosen, torch_dtype, str(source))


def model_skeleton(name_or_path: str = DEFAULT_PRESET, dtype: str = "auto", device: str = "cpu",
                   weights: str = "auto") -> Any:
    """The model `load_model` would give, built on the meta device: its config, modules and dtype, no weight read
    or allocated (`quench doctor` prints its forward plan; a GGUF mode is marked as `load_model` marks it, the file
    unread). A GGUF the first load has not converted yet raises QuenchError instead of converting it here."""
    check_model(name_or_path)
    check_dtype(dtype)
    check_weights(weights, dtype, name_or_path)
    weights = resolve_weights(weights, name_or_path, dtype, device)
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    path = Path(name_or_path).expanduser()
    source = path
    if name_or_path in PRESETS or path.is_file():
        source = gguf_cache_dir(preset_gguf_parts(PRESETS[name_or_path]) if name_or_path in PRESETS else [path])
        if not (source / "config.json").is_file():
            raise QuenchError(f"{name_or_path}: not converted from its GGUF yet (the first run converts it once)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        config = AutoConfig.from_pretrained(source, local_files_only=True)
    except (OSError, ValueError) as err:
        raise QuenchError(f"{source}: cannot read the model's config: {err}") from None
    with torch.device("meta"):
        torch_dtype = resolve_dtype("float32" if weights in GGUF_WEIGHTS else dtype, device)
        skeleton = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    if weights in GGUF_WEIGHTS:
        parts = preset_gguf_parts(PRESETS[name_or_path]) if name_or_path in PRESETS else [path]
        skeleton.quench_gguf_file, skeleton.quench_weights = str(parts[0]), weights
    return skeleton
