"""What the native kernels are built for and with: CPU levels, this CPU's features, the C compiler.

It sits at the top of the package (beside `errors`), so both the engine, which builds the kernels, and the
model loader, whose `--dtype auto` follows what the kernels serve, can read it.

Why one build per level, not function multiversioning: every kernel unit is written against the
compiler's ISA macros (`__AVX2__`, `__AVX512BF16__`, `__AMX_TILE__`, `__ARM_NEON`, ...), so one set of
sources compiled at a level gives exactly the kernels that level can run, and nothing else. A level's
build is the same on every CPU of that level, so CI builds and tests each level on any machine that can
run it (an AVX-512 machine runs the x86-64-v3 build too), and the kernels a user runs are the ones tested.
Multiversioning (`target_clones`) would compile every function once per level into one library and
pick at load, which tests the same code but doubles the sources' conditional paths.

The level is chosen at run time from the CPU's feature flags (/proc/cpuinfo): the highest level whose
features the CPU reports. `QUENCH_NATIVE_MARCH` overrides it: a level name (e.g. `x86-64-v3`, refused
where the CPU lacks it) or any other `-march` value (e.g. `native`, built as given).
"""

from __future__ import annotations

import os
import platform
import shutil
from dataclasses import dataclass
from pathlib import Path

_V2 = frozenset({"cx16", "lahf_lm", "popcnt", "sse4_1", "sse4_2", "ssse3"})
_V3 = _V2 | {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"}
_V4 = _V3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}
_V4_BF16 = _V4 | {"avx512_bf16", "avx512_vnni"}
_V4_AMX = _V4_BF16 | {"amx_tile", "amx_bf16", "amx_int8"}
_NEON = frozenset({"asimd"})
_DOTPROD = _NEON | {"asimddp", "asimdhp"}
_BF16_I8MM = _DOTPROD | {"bf16", "i8mm"}


@dataclass(frozen=True)
class CpuLevel:
    """One build target: its name, the compiler flags that select it, and the CPU flags it needs."""

    name: str
    machine: str  # platform.machine() of the CPUs it runs on
    compiler_flags: tuple[str, ...]
    needs: frozenset[str]  # /proc/cpuinfo flags (x86) or Features (ARM), cumulative
    summary: str  # what the level adds, for `quench doctor`


LEVELS: tuple[CpuLevel, ...] = (
    CpuLevel("x86-64-v2", "x86_64", ("-march=x86-64-v2",), _V2, "SSE4.2: portable C loops"),
    CpuLevel("x86-64-v3", "x86_64", ("-march=x86-64-v3",), _V3, "AVX2 + FMA + F16C"),
    CpuLevel("x86-64-v4", "x86_64", ("-march=x86-64-v4",), _V4, "AVX-512"),
    CpuLevel("x86-64-v4-bf16", "x86_64", ("-march=x86-64-v4", "-mavx512bf16", "-mavx512vnni"), _V4_BF16,
             "AVX-512 + AVX512-BF16 + AVX512-VNNI"),
    CpuLevel("x86-64-v4-amx", "x86_64",
             ("-march=x86-64-v4", "-mavx512bf16", "-mavx512vnni", "-mamx-tile", "-mamx-bf16", "-mamx-int8"), _V4_AMX,
             "AVX-512 + AVX512-BF16 + VNNI + AMX tiles"),
    CpuLevel("armv8-a", "aarch64", ("-march=armv8-a",), _NEON, "NEON"),
    CpuLevel("armv8.2-a-dotprod", "aarch64", ("-march=armv8.2-a+fp16+dotprod",), _DOTPROD, "NEON + fp16 + dotprod"),
    CpuLevel("armv8.6-a-bf16", "aarch64", ("-march=armv8.2-a+fp16+dotprod+bf16+i8mm",), _BF16_I8MM,
             "NEON + fp16 + dotprod + bf16 + i8mm"),
)
BY_NAME = {level.name: level for level in LEVELS}


@dataclass(frozen=True)
class Target:
    """What the kernels are built for: a level (portable across CPUs of that level) or a raw -march value."""

    name: str  # a level's name, or the raw -march value
    compiler_flags: tuple[str, ...]
    level: CpuLevel | None  # None for a raw -march value (e.g. "native")
    refused: str = ""  # why this CPU cannot run the requested level ("" when it can)


def levels_of(machine: str) -> tuple[CpuLevel, ...]:
    return tuple(level for level in LEVELS if level.machine == machine)


def runnable_levels(features: frozenset[str], machine: str) -> tuple[CpuLevel, ...]:
    """The levels of `machine` whose features the CPU reports, lowest first."""
    return tuple(level for level in levels_of(machine) if level.needs <= features)


def best_level(features: frozenset[str], machine: str) -> CpuLevel | None:
    """The highest level of `machine` whose features the CPU reports (None: none known, e.g. another arch)."""
    runnable = runnable_levels(features, machine)
    return runnable[-1] if runnable else None


def missing_features(level: CpuLevel, features: frozenset[str]) -> list[str]:
    return sorted(level.needs - features)


def resolve_target(requested: str | None, features: frozenset[str], machine: str) -> Target:
    """The build target: `requested` (QUENCH_NATIVE_MARCH) if set, else this CPU's best level, else
    `-march=native` where no level of this machine is known (features unreadable, another architecture)."""
    if requested:
        level = BY_NAME.get(requested)
        if level is None:
            return Target(requested, (f"-march={requested}",), None)
        missing = missing_features(level, features) if level.machine == machine else [f"a {level.machine} CPU"]
        refused = f"this CPU has no {', '.join(missing)}, which the {level.name} build needs" if missing else ""
        return Target(level.name, level.compiler_flags, level, refused)
    level = best_level(features, machine)
    if level is None:
        return Target("native", ("-march=native",), None)
    return Target(level.name, level.compiler_flags, level)


# Levels whose build vectorises the fixed-order GEMM (AVX2 + FMA, AVX-512, NEON): bfloat16 weights widened in
# registers read half of float32's bytes for the same float32 arithmetic (engine/kernels/csrc/fixed.c).
FIXED_VECTOR_LEVELS = frozenset({"x86-64-v3", "x86-64-v4", "x86-64-v4-bf16", "x86-64-v4-amx",
                                 "armv8-a", "armv8.2-a-dotprod", "armv8.6-a-bf16"})


def cpu_identity(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """What a -march=native build depends on: x86's `flags` line or ARM's `Features` line of /proc/cpuinfo,
    else the processor name where /proc/cpuinfo is missing."""
    try:
        with open(cpuinfo, encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith(("flags", "Features")):
                    return line.strip()
    except OSError:
        pass
    return platform.processor()


def cpu_flags() -> frozenset[str]:
    """The instruction-set names of this CPU as /proc/cpuinfo spells them (empty where unknown)."""
    identity = cpu_identity()
    return frozenset(identity.split(":", 1)[1].split()) if ":" in identity else frozenset()


def compiler() -> str | None:
    """The C compiler the kernels are built with: $CC, else gcc, else clang (None where there is none)."""
    return shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")


def this_cpu_levels() -> list[str]:
    """The names of the levels this CPU can execute, lowest first (each a QUENCH_NATIVE_MARCH value)."""
    return [level.name for level in runnable_levels(cpu_flags(), platform.machine())]


def current_target() -> Target:
    """The build target: QUENCH_NATIVE_MARCH, else this CPU's highest level."""
    return resolve_target(os.environ.get("QUENCH_NATIVE_MARCH"), cpu_flags(), platform.machine())


def fixed_gemm_vectorised() -> bool:
    """Whether the kernels this machine builds vectorise the fixed-order GEMM (a compiler, on Linux, at a level
    of FIXED_VECTOR_LEVELS; a raw -march value counts where the CPU has AVX2 + FMA, AVX-512 or NEON)."""
    if platform.system() != "Linux" or compiler() is None:
        return False
    target = current_target()
    if target.refused:
        return False
    if target.level is not None:
        return target.level.name in FIXED_VECTOR_LEVELS
    flags = cpu_flags()
    return {"avx2", "fma"} <= flags or "avx512f" in flags or "asimd" in flags
