"""Native decode kernels on CPU (C source in `native_sources`): RoPE + KV-cache write + attention in
one call, residual-add + RMSNorm, and a small bfloat16 GEMM; built on first use and loaded here.

Why: for decode-sized queries (a few tokens per row), PyTorch's CPU attention spends most of its
time in per-(row, head) matrix-call overhead — ~0.45 ms per layer at batch 8, a third of a decode
step for the default model. One plain C loop over rows and kv heads, reading each key/value once,
is several times faster. It is compiled with the system C compiler on first use (~1 s) and cached
under `$QUENCH_CACHE/native`; without a compiler the engine falls back to PyTorch's attention.

Numerics: RoPE is computed exactly as PyTorch does it in the model dtype (each product and the sum
rounded to bfloat16), so the cached keys are bit-identical to the PyTorch path; attention itself
runs in float32 (as PyTorch's CPU kernel does for bfloat16) and is rounded once at the end.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch

from quench.engine.native_sources import FLAGS, OPENMP, SOURCES

log = logging.getLogger(__name__)


def _cache_dir() -> Path:
    root = Path(os.environ.get("QUENCH_CACHE", Path.home() / ".cache" / "quench"))
    return root / "native"


def _build(compiler: str, target: Path) -> None:
    """Compile and link the kernels into `target`: with OpenMP where the compiler has it, else without."""
    try:
        _compile(compiler, target, openmp=True)
    except subprocess.CalledProcessError as error:
        log.info("building the native kernels with OpenMP failed (%s); building them single-threaded", error.stderr[-300:])
        _compile(compiler, target, openmp=False)


def _compile(compiler: str, target: Path, openmp: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        objects = []
        for name, source in SOURCES.items():
            path = Path(tmp) / f"{name}.c"
            path.write_text(source)
            obj = path.with_suffix(".o")
            extra = ["-fopenmp"] if openmp and name in OPENMP else []
            subprocess.run([compiler, "-c", "-fPIC", *FLAGS[name], *extra, str(path), "-o", str(obj)], check=True, capture_output=True, text=True)
            objects.append(str(obj))
        partial = Path(tmp) / target.name
        link = ["-fopenmp"] if openmp else []
        subprocess.run([compiler, "-shared", *objects, "-o", str(partial), *link, "-lm"], check=True, capture_output=True, text=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(partial), target)  # atomic within one file system; a racing build writes the same bytes


def _cpu_flags() -> str:
    """The instruction-set flags of this CPU (Linux), or "" where they cannot be read."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as handle:
            return next((line for line in handle if line.startswith("flags")), "")
    except OSError:
        return ""


@lru_cache(maxsize=1)
def _library() -> ctypes.CDLL | None:
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None or platform.system() != "Linux":
        log.info("native attention unavailable (no C compiler); using PyTorch attention")
        return None
    # -march=native: a library built on one CPU must not be loaded on another (shared $QUENCH_CACHE).
    key = hashlib.sha256(("".join(SOURCES.values()) + repr(FLAGS) + repr(sorted(OPENMP)) + platform.machine() + _cpu_flags()).encode()).hexdigest()[:16]
    target = _cache_dir() / f"attend-{key}.so"
    try:
        if not target.exists():
            _build(compiler, target)
        library = ctypes.CDLL(str(target))
    except (OSError, subprocess.CalledProcessError) as error:
        log.warning("could not build the native attention kernel (%s); using PyTorch attention", error)
        return None
    for name in ("rope_attend_bf16", "rope_attend_f32"):
        function = getattr(library, name)
        function.restype = ctypes.c_int
        function.argtypes = [ctypes.c_void_p] * 8 + [ctypes.c_int] * 5 + [ctypes.c_float, ctypes.c_int, ctypes.c_int]
    library.small_gemm_available.restype = ctypes.c_int
    library.small_gemm_bf16.restype = None
    library.small_gemm_bf16.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 5
    library.amx_available.restype = ctypes.c_int
    library.avx512_gemm_rows.restype = ctypes.c_int
    library.gemm_bf16_amx.restype = ctypes.c_int
    library.gemm_bf16_amx.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 4
    for name in ("argmax_bf16", "argmax_f32"):
        getattr(library, name).restype = None
        getattr(library, name).argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_int] * 2 + [ctypes.c_int64]
    library.layers_available.restype = ctypes.c_int
    library.layers_bf16.restype = ctypes.c_int
    library.layers_bf16.argtypes = (
        [ctypes.c_void_p] * 4 + [ctypes.c_int] + [ctypes.c_void_p] + [ctypes.c_int] * 5 + [ctypes.c_void_p] * 4
        + [ctypes.c_int] * 2 + [ctypes.c_float] * 2 + [ctypes.c_int] * 2 + [ctypes.c_void_p, ctypes.c_int]
    )
    library.silu_mul_bf16.restype = None
    library.silu_mul_bf16.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_int] * 2
    library.add_rms_norm_bf16.restype = None
    library.add_rms_norm_bf16.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int] * 2 + [ctypes.c_float]
    library.screen_available.restype = ctypes.c_int
    library.screen_work_bytes.restype = ctypes.c_int64
    library.screen_work_bytes.argtypes = [ctypes.c_int] * 3
    library.w8_work_bytes.restype = ctypes.c_int64
    library.w8_work_bytes.argtypes = [ctypes.c_int] * 2
    library.w8_gemm_bf16.restype = ctypes.c_int
    library.w8_gemm_bf16.argtypes = (
        [ctypes.c_void_p] + [ctypes.c_int] * 2 + [ctypes.c_void_p] * 3 + [ctypes.c_int] + [ctypes.c_void_p] * 2 + [ctypes.c_int]
    )
    library.screen_argmax_bf16.restype = ctypes.c_int
    library.screen_argmax_bf16.argtypes = (
        [ctypes.c_void_p] + [ctypes.c_int] * 2 + [ctypes.c_void_p] * 6 + [ctypes.c_int] + [ctypes.c_void_p] * 3 + [ctypes.c_int]
    )
    return library


def available(dtype: torch.dtype) -> bool:
    return dtype in (torch.bfloat16, torch.float32) and _library() is not None


def rope_attend(
    qkv: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    cos: torch.Tensor,
    sin_signed: torch.Tensor,
    start: torch.Tensor,
    offsets: torch.Tensor,
    heads: int,
    scale: float,
) -> torch.Tensor:
    """Packed rows: qkv (N, H + 2 Hkv, D), row b's tokens at offsets[b]:offsets[b + 1] (B + 1,),
    fed at positions start[b] + s (B,). Writes their keys/values into the caches (B, Hkv, T, D)
    and returns the attention output (N, H D)."""
    tokens, _, head_dim = qkv.shape
    batch, kv_heads, max_len = keys.shape[0], keys.shape[1], keys.shape[2]
    assert qkv.is_contiguous() and keys.is_contiguous() and values.is_contiguous() and cos.is_contiguous()
    assert qkv.dtype == keys.dtype == values.dtype == cos.dtype == sin_signed.dtype
    assert start.dtype == offsets.dtype == torch.int64 and start.is_contiguous() and offsets.is_contiguous()
    out = torch.empty(tokens, heads * head_dim, dtype=qkv.dtype)
    library = _library()
    assert library is not None
    function = library.rope_attend_bf16 if qkv.dtype == torch.bfloat16 else library.rope_attend_f32
    status = function(
        qkv.data_ptr(), keys.data_ptr(), values.data_ptr(), cos.data_ptr(), sin_signed.data_ptr(), start.data_ptr(),
        offsets.data_ptr(), out.data_ptr(), batch, heads, kv_heads, head_dim, max_len, scale, torch.get_num_threads(),
        int(amx_available()),
    )
    if status != 0:
        raise MemoryError("native attention could not allocate its buffers")
    return out


def add_rms_norm(x: torch.Tensor, delta: torch.Tensor | None, weight: torch.Tensor, eps: float, out: torch.Tensor) -> torch.Tensor:
    """bfloat16 only: x (N, Dm) += delta (in place, if given); out (N, Dm) = weight * rms_norm(x). Returns out."""
    assert x.dtype == weight.dtype == out.dtype == torch.bfloat16 and x.is_contiguous() and out.is_contiguous()
    assert delta is None or (delta.dtype == torch.bfloat16 and delta.is_contiguous() and delta.shape == x.shape)
    library = _library()
    assert library is not None
    delta_ptr = delta.data_ptr() if delta is not None else None
    library.add_rms_norm_bf16(x.data_ptr(), delta_ptr, weight.data_ptr(), out.data_ptr(), x.shape[0], x.shape[1], eps)
    return out



SMALL_GEMM_ROWS = 32  # measured per step of the default model (30 layers + head) against oneDNN:
# 1 row 12.0 vs 19.6 ms, 8 rows 14.1 vs 21.4, 16 rows 23.0 vs 29.9, 32 rows 42.7 vs 49.8
AMX_GEMM_ROWS = 256  # with AMX tiles (30 layers + head, one thread, against oneDNN's prepacked kernel): 8 rows
# 20 vs 38 ms (AVX512: 38), 16 rows 17 vs 28, 32 rows 29 vs 44 (AVX512: 133), 128 rows 86 vs 109, 256 rows
# 183 vs 197; at 1024 rows oneDNN's own blocking wins (338 vs 249).


@dataclass
class Switches:
    """Kernel choices a benchmark may flip at run time (side-by-side runs); QUENCH_AMX=0 turns AMX off,
    QUENCH_SCREEN=0 the screened greedy head."""

    amx: bool = os.environ.get("QUENCH_AMX", "1") != "0"
    screen: bool = os.environ.get("QUENCH_SCREEN", "1") != "0"  # greedy heads screened in int8 (quench.engine.screen)


SWITCHES = Switches()


@lru_cache(maxsize=1)
def _amx_supported() -> bool:
    library = _library()
    return library is not None and bool(library.small_gemm_available()) and bool(library.amx_available())


def amx_available() -> bool:
    """Whether this CPU and kernel let quench's GEMM use AMX tiles (and they are not switched off)."""
    return SWITCHES.amx and _amx_supported()


def small_gemm_rows() -> int:
    """The most rows for which `small_gemm` beats oneDNN on this CPU."""
    return AMX_GEMM_ROWS if amx_available() else SMALL_GEMM_ROWS


def gemm_kernel(rows: int) -> str:
    """Which kernel `Linear` runs a product of `rows` rows on: "avx512", "amx" (quench's own) or "onednn".

    Each of quench's kernels sums every output over K in one fixed order whatever the number of rows, so a
    row's output bits depend on the kernel only; oneDNN picks its blocking by shape, which quench does not
    rely on. The runner uses this to tell whether a prompt prefilled in two parts gives the same bits as
    prefilled whole (`LlamaRunner.prefill_kernel`)."""
    if rows > small_gemm_rows():
        return "onednn"
    return "amx" if rows > _avx512_gemm_rows() and amx_available() else "avx512"


@lru_cache(maxsize=1)
def _avx512_gemm_rows() -> int:
    """Up to this many rows `small_gemm` takes the AVX512 kernel even where AMX is on (decided in C)."""
    library = _library()
    return library.avx512_gemm_rows() if library is not None else 0


def pack_small_gemm(weight: torch.Tensor) -> torch.Tensor | None:
    """W (N, K) bfloat16 -> (ceil(N/16), K/2, 16, 2) for `small_gemm`: each block of 16 output features one
    contiguous run (zero rows past N); None where the kernel cannot serve it."""
    out_features, in_features = weight.shape
    library = _library() if weight.dtype == torch.bfloat16 and weight.device.type == "cpu" else None
    if library is None or not library.small_gemm_available() or in_features % 2:
        return None
    padded = weight.detach().new_zeros((out_features + 15) // 16 * 16, in_features)
    padded[:out_features] = weight.detach()
    shape = (padded.shape[0] // 16, 16, in_features // 2, 2)
    return padded.reshape(shape).permute(0, 2, 1, 3).contiguous()


def small_gemm(x: torch.Tensor, packed: torch.Tensor, out_features: int) -> torch.Tensor:
    """x (M, K) bfloat16, contiguous -> x W^T (M, N) with W packed by `pack_small_gemm`."""
    rows, in_features = x.shape
    assert x.dtype == torch.bfloat16 and x.is_contiguous() and packed.shape[1] * 2 == in_features
    out = torch.empty(rows, out_features, dtype=torch.bfloat16)
    library = _library()
    assert library is not None
    library.small_gemm_bf16(
        x.data_ptr(), packed.data_ptr(), out.data_ptr(), rows, out_features, in_features, torch.get_num_threads(),
        int(amx_available()),
    )
    return out


def argmax(logits: torch.Tensor) -> torch.Tensor:
    """logits (..., V) -> (...,) int64: the first index of each row's largest value, as torch.argmax.
    bfloat16 and float32 rows with a unit last stride go through the C kernel (PyTorch's is 4-9x slower)."""
    kernels = {torch.bfloat16: "argmax_bf16", torch.float32: "argmax_f32"}
    library = _library() if logits.dtype in kernels and logits.device.type == "cpu" else None
    if library is None or logits.dim() == 0 or logits.stride(-1) != 1 or logits.shape[-1] == 0:
        return logits.argmax(dim=-1)
    rows = logits.reshape(-1, logits.shape[-1])  # a view where the layout allows, else a copy
    out = torch.empty(rows.shape[0], dtype=torch.long)
    getattr(library, kernels[logits.dtype])(rows.data_ptr(), out.data_ptr(), rows.shape[0], rows.shape[1], rows.stride(0))
    return out.reshape(logits.shape[:-1])


def layers_available() -> bool:
    """Whether `layers` (the bfloat16 layer loop in C) is built for this CPU."""
    library = _library()
    return library is not None and bool(library.small_gemm_available()) and bool(library.layers_available())


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """gate_up (N, 2 I) bfloat16 -> bf16(bf16(silu(gate)) * up) (N, I), as the layer loop computes it."""
    rows, width = gate_up.shape
    assert gate_up.dtype == torch.bfloat16 and gate_up.is_contiguous() and width % 32 == 0
    out = torch.empty(rows, width // 2, dtype=torch.bfloat16)
    library = _library()
    assert library is not None
    library.silu_mul_bf16(gate_up.data_ptr(), out.data_ptr(), rows, width // 2)
    return out


@dataclass(frozen=True)
class LayerShape:
    """What `layers` needs besides the tensors: the model's sizes and constants."""

    heads: int
    kv_heads: int
    inner: int  # the MLP's intermediate size
    scale: float
    eps: float


def layers(
    x: torch.Tensor,
    weights: ctypes.Array,
    caches: list[torch.Tensor],
    final_norm: torch.Tensor,
    shape: LayerShape,
    cos: torch.Tensor,
    sin_signed: torch.Tensor,
    start: torch.Tensor,
    offsets: torch.Tensor,
    int8: ctypes.Array | None = None,
    int8_rows: int = 0,
) -> torch.Tensor:
    """Every decoder layer of a packed bfloat16 step (head size 64) in one C call: x (N, Dm), the residual
    stream, updated in place -> the final-norm hidden states (N, Dm). weights: 6 addresses per layer
    (input_norm, post_norm, packed qkv, o, gate_up, down); caches: each layer's key and value cache (B, Hkv,
    T, 64); start (B,) and offsets (B + 1,) int64 as `rope_attend` takes them. int8: 12 addresses per layer
    (each projection's `screen.Int8Weight` tiles, scales, column sums), used by steps of at most int8_rows rows."""
    rows, width = x.shape
    batch, _, max_len, _ = caches[0].shape
    assert x.dtype == torch.bfloat16 and x.is_contiguous() and start.is_contiguous() and offsets.is_contiguous()
    library = _library()
    assert library is not None
    addresses = (ctypes.c_int64 * len(caches))(*(cache.data_ptr() for cache in caches))
    out = torch.empty_like(x)
    status = library.layers_bf16(
        x.data_ptr(), out.data_ptr(), ctypes.cast(weights, ctypes.c_void_p), ctypes.cast(addresses, ctypes.c_void_p), len(caches) // 2, final_norm.data_ptr(), rows, width,
        shape.heads, shape.kv_heads, shape.inner, cos.data_ptr(), sin_signed.data_ptr(), start.data_ptr(),
        offsets.data_ptr(), batch, max_len, shape.scale, shape.eps, torch.get_num_threads(), int(amx_available()),
        ctypes.cast(int8, ctypes.c_void_p) if int8 is not None else None, int8_rows,
    )
    if status != 0:
        raise MemoryError("the native layer loop could not allocate its buffers")
    return out
