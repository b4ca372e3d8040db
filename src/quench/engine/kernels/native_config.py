"""Which native kernels a runner may use beyond what the CPU serves: a frozen config passed down from
`EngineConfig.kernels` to where kernels are chosen (`LlamaRunner`). No torch import: the CLI builds it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class KernelConfig:
    """Kernel choices on top of what the CPU serves (off for side-by-side runs and comparisons)."""

    amx: bool = True  # AMX tiles for the GEMMs and attention where the CPU and OS allow them
    screen: bool = True  # greedy heads screened in int8 first (quench.engine.kernels.screen) where the CPU allows

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> KernelConfig:
        """The defaults, with QUENCH_AMX=0 / QUENCH_SCREEN=0 turning AMX / the screened head off."""
        env = os.environ if environ is None else environ
        return cls(amx=env.get("QUENCH_AMX", "1") != "0", screen=env.get("QUENCH_SCREEN", "1") != "0")
