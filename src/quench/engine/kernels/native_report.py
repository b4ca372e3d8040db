"""Which native kernels run on this machine, and why any is off (`quench doctor`)."""

from __future__ import annotations

from dataclasses import dataclass

from quench.engine.kernels.native_build import BuildResult, cpu_flags
from quench.engine.kernels.native_config import KernelConfig


@dataclass(frozen=True)
class KernelStatus:
    name: str
    active: bool
    reason: str  # why it is off; for an active kernel, what it runs on (or "")


def _needs(march: str, features: frozenset[str], flags: tuple[str, ...], built: bool) -> str:
    """Why a kernel needing the CPU features `flags` is off: the CPU lacks one, or this build does not have them."""
    missing = [flag for flag in flags if features and flag not in features]
    if missing:
        return f"this CPU has no {', '.join(missing)}"
    if not built:
        return f"not in the {march} build (QUENCH_NATIVE_MARCH)"
    return ""


def kernel_report(result: BuildResult, config: KernelConfig, features: frozenset[str] | None = None) -> list[KernelStatus]:
    """One line per kernel family: active or not, and the reason. features: the CPU's flags (/proc/cpuinfo)."""
    library = result.library
    names = ("attention (RoPE + KV write + attention)", "norm and argmax glue", "small bfloat16 GEMM (AVX512-BF16)",
             "layer loop in C (bfloat16, head size 64)", "AMX tiles (GEMM, attention)", "screened greedy head (AMX int8)",
             "int8 draft weights (AMX int8)", "fixed-order GEMM (batch invariance)",
             "GGUF block products (Q4_0 to Q6_K, as stored)", "GGUF integer products (gguf-int8)",
             "layer loop in C (float32 on a GGUF's blocks, head size 64)")
    if library is None:
        return [KernelStatus(name, False, result.reason) for name in names]
    features = cpu_flags() if features is None else features
    bf16 = bool(library.small_gemm_available())
    amx, screen = bool(library.amx_available()), bool(library.screen_available())
    bf16_reason = _needs(result.march, features, ("avx512_bf16",), bf16)
    amx_reason = _needs(result.march, features, ("amx_tile", "amx_bf16"), amx) or (
        "" if amx else "the OS does not grant AMX tile state (Linux 5.16+ needed)")
    screen_reason = _needs(result.march, features, ("amx_int8", "avx512_vnni"), screen) or amx_reason
    return [
        KernelStatus(names[0], True, "AVX512-BF16, head size 64" if bf16 else "generic C loops"),
        KernelStatus(names[1], True, "AVX512" if library.avx512_available() else "portable C loops"),
        KernelStatus(names[2], bf16, bf16_reason),
        _layer_loop(names[3], bool(library.layers_available()), bf16, bf16_reason),
        _switched(names[4], amx, amx_reason, config.amx, "QUENCH_AMX=0 / KernelConfig.amx"),
        _switched(names[5], screen, screen_reason, config.screen, "QUENCH_SCREEN=0 / KernelConfig.screen"),
        KernelStatus(names[6], screen, screen_reason),
        KernelStatus(names[7], True, _FIXED_ISA.get(int(library.fixed_vector_available()), "portable C loops")),
        KernelStatus(names[8], True, _QUANT_ISA.get(int(library.quant_level()), "portable C loops")),
        KernelStatus(names[9], True, _QDOT_ISA.get(int(library.qdot_level()), "portable C loops")),
        KernelStatus(names[10], True, "the products above and the fixed-order attention, norms and SiLU"),
    ]


# What the fixed-order kernels and the block products run on, by the level the library reports (0: the portable
# scalar loops; the same order, so the same bits, on each).
_FIXED_ISA = {1: "AVX2 + FMA", 2: "AVX-512", 3: "NEON"}
_QUANT_ISA = {1: "AVX2 + FMA + F16C", 2: "AVX-512", 3: "NEON"}
_QDOT_ISA = {1: "AVX2 maddubs", 2: "AVX512-VNNI dpbusd", 3: "NEON"}


def _layer_loop(name: str, built: bool, small_gemm: bool, bf16_reason: str) -> KernelStatus:
    """The C layer loop runs its products on the small bfloat16 GEMM (AVX512-BF16) or on the fixed-order GEMM."""
    if not built:
        return KernelStatus(name, False, bf16_reason or "not in this build (needs AVX2 + FMA or AVX512-BF16)")
    return KernelStatus(name, True, "AVX512-BF16 products" if small_gemm else "fixed-order AVX2 + FMA products")


def _switched(name: str, served: bool, reason: str, enabled: bool, switch: str) -> KernelStatus:
    if served and not enabled:
        return KernelStatus(name, False, f"disabled by config ({switch})")
    return KernelStatus(name, served, reason)
