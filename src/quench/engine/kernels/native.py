"""Native decode kernels on CPU (C sources in `csrc/`, built and bound by `native_build`): RoPE + KV-cache
write + attention in one call, residual-add + RMSNorm, a small bfloat16 GEMM, the layer loop, argmax.

Why: for decode-sized queries (a few tokens per row), PyTorch's CPU attention spends most of its
time in per-(row, head) matrix-call overhead, a large share of a decode step for the default model. One
plain C loop over rows and kv heads, reading each key/value once, is several times faster. It is compiled
with the system C compiler on first use and cached
under `$QUENCH_CACHE/native`; without a compiler the engine falls back to PyTorch's kernels.

Which kernels run is decided by the CPU (what the build serves) and by a `KernelConfig` the caller
passes down (`EngineConfig.kernels`); there is no module-level switch.

Numerics: RoPE is computed exactly as PyTorch does it in the model dtype (each product and the sum
rounded to bfloat16), so the cached keys are bit-identical to the PyTorch path; attention itself
runs in float32 (as PyTorch's CPU kernel does for bfloat16) and is rounded once at the end.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch

from quench.engine.kernels.native_build import BuildResult, NativeLibrary, build
from quench.engine.kernels.native_config import KernelConfig  # noqa: F401  (re-exported: kernels and their choices)

SMALL_GEMM_ROWS = 32  # up to this many rows the small GEMM's step beats oneDNN's (docs/benchmarks.md,
# "Where the small GEMM hands over to oneDNN")
AMX_GEMM_ROWS = 256  # with AMX tiles, up to this many rows (ibid.); past it oneDNN's own blocking wins


def _cache_dir() -> Path:
    root = Path(os.environ.get("QUENCH_CACHE", Path.home() / ".cache" / "quench"))
    return root / "native"


@lru_cache(maxsize=1)
def build_result() -> BuildResult:
    """The kernels built for this CPU (once per process), or why there are none."""
    return build(_cache_dir())


def _library() -> NativeLibrary | None:
    return build_result().library


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
    *,
    amx: bool,
    fixed: bool = False,
) -> torch.Tensor:
    """Packed rows: qkv (N, H + 2 Hkv, D), row b's tokens at offsets[b]:offsets[b + 1] (B + 1,),
    fed at positions start[b] + s (B,). Writes their keys/values into the caches (B, Hkv, T, D)
    and returns the attention output (N, H D). fixed: the kernel whose arithmetic every build shares (batch-invariant
    runners); else the build's fastest, with amx q.k on AMX tiles where the build has them. float32 rows may keep
    bfloat16 caches (keys and values rounded as they are written): only on the fixed kernel."""
    tokens, _, head_dim = qkv.shape
    batch, kv_heads, max_len = keys.shape[0], keys.shape[1], keys.shape[2]
    assert qkv.is_contiguous() and keys.is_contiguous() and values.is_contiguous() and cos.is_contiguous()
    assert qkv.dtype == cos.dtype == sin_signed.dtype and keys.dtype == values.dtype
    mixed = keys.dtype != qkv.dtype
    assert not mixed or (qkv.dtype == torch.float32 and keys.dtype == torch.bfloat16 and fixed)
    assert start.dtype == offsets.dtype == torch.int64 and start.is_contiguous() and offsets.is_contiguous()
    out = torch.empty(tokens, heads * head_dim, dtype=qkv.dtype)
    library = _library()
    assert library is not None
    arguments = (
        qkv.data_ptr(), keys.data_ptr(), values.data_ptr(), cos.data_ptr(), sin_signed.data_ptr(), start.data_ptr(),
        offsets.data_ptr(), out.data_ptr(), batch, heads, kv_heads, head_dim, max_len, scale, torch.get_num_threads(),
    )
    if mixed:
        status = library.rope_attend_f32_bf16(*arguments)
    else:
        function = library.rope_attend_bf16 if qkv.dtype == torch.bfloat16 else library.rope_attend_f32
        status = function(*arguments, route(library, amx=amx, fixed=fixed))
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



@lru_cache(maxsize=1)
def amx_supported() -> bool:
    """Whether this CPU, OS and build let quench's GEMM and attention use AMX tiles."""
    library = _library()
    return library is not None and bool(library.small_gemm_available()) and bool(library.amx_available())


def use_amx(config: KernelConfig) -> bool:
    """Whether kernels chosen under config run AMX tiles here."""
    return config.amx and amx_supported()


def small_gemm_rows(amx: bool) -> int:
    """The most rows for which `small_gemm` beats oneDNN (amx: `use_amx` of the caller's config)."""
    return AMX_GEMM_ROWS if amx else SMALL_GEMM_ROWS


def gemm_kernel(rows: int, amx: bool) -> str:
    """Which kernel `Linear` runs a product of `rows` rows on: "avx512", "amx" (quench's own) or "onednn".

    Each of quench's kernels sums every output over K in one fixed order whatever the number of rows, so a
    row's output bits depend on the kernel only; oneDNN picks its blocking by shape, which quench does not
    rely on. The runner uses this to tell whether a prompt prefilled in two parts gives the same bits as
    prefilled whole (`LlamaRunner.prefill_kernel`)."""
    if rows > small_gemm_rows(amx):
        return "onednn"
    return "amx" if rows > avx512_gemm_rows() and amx else "avx512"


def avx512_gemm_rows() -> int:
    """Up to this many rows `small_gemm` takes the AVX512 kernel even where AMX is on (quench_native.h)."""
    library = _library()
    return library.constants["AVX512_GEMM_ROWS"] if library is not None else 0


def pack_small_gemm(weight: torch.Tensor) -> torch.Tensor | None:
    """W (N, K) bfloat16 -> (ceil(N/16), K/2, 16, 2) for `small_gemm`: each block of 16 output features one
    contiguous run (zero rows past N); None where the kernel cannot serve it."""
    out_features, in_features = weight.shape
    if not small_gemm_serves(weight.dtype, weight.device.type) or in_features % 2:
        return None
    return pack_pairs(weight)


def small_gemm_serves(dtype: torch.dtype, device: str) -> bool:
    """Whether `small_gemm` runs here for weights of this dtype on this device type (an even input width aside)."""
    library = _library() if dtype == torch.bfloat16 and device == "cpu" else None
    return library is not None and bool(library.small_gemm_available())


def pack_pairs(weight: torch.Tensor) -> torch.Tensor:
    """W (N, K) bfloat16 -> (ceil(N/16), ceil(K/2), 16, 2), zeros past N and K: blocks of 16 output features,
    each one contiguous run of pairs of inputs (the layout of `small_gemm` and of `invariant.gemm` in bfloat16)."""
    out_features, in_features = weight.shape
    rows, width = (out_features + 15) // 16 * 16, in_features + in_features % 2
    padded = weight.detach().contiguous()
    if padded.shape != (rows, width):
        padded = padded.new_zeros(rows, width)
        padded[:out_features, :in_features] = weight.detach()
    words = padded.view(torch.int32)  # (N, K/2): a pair of inputs moved as one 32-bit word (a fast copy)
    return words.reshape(-1, 16, width // 2).transpose(1, 2).contiguous().view(torch.bfloat16).reshape(
        -1, width // 2, 16, 2)  # (N/16, K/2, 16, 2)


def small_gemm(x: torch.Tensor, packed: torch.Tensor, out_features: int, *, amx: bool) -> torch.Tensor:
    """x (M, K) bfloat16, contiguous -> x W^T (M, N) with W packed by `pack_small_gemm`; amx: AMX tiles past
    `avx512_gemm_rows` rows where the CPU has them (`use_amx`)."""
    rows, in_features = x.shape
    assert x.dtype == torch.bfloat16 and x.is_contiguous() and packed.shape[1] * 2 == in_features
    out = torch.empty(rows, out_features, dtype=torch.bfloat16)
    library = _library()
    assert library is not None
    library.small_gemm_bf16(
        x.data_ptr(), packed.data_ptr(), out.data_ptr(), rows, out_features, in_features, torch.get_num_threads(),
        int(amx),
    )
    return out


def argmax(logits: torch.Tensor) -> torch.Tensor:
    """logits (..., V) -> (...,) int64: the first index of each row's largest value, as torch.argmax.
    bfloat16 and float32 rows with a unit last stride go through the C kernel (faster than PyTorch's)."""
    kernels = {torch.bfloat16: "argmax_bf16", torch.float32: "argmax_f32"}
    library = _library() if logits.dtype in kernels and logits.device.type == "cpu" else None
    if library is None or logits.dim() == 0 or logits.stride(-1) != 1 or logits.shape[-1] == 0:
        return logits.argmax(dim=-1)
    rows = logits.reshape(-1, logits.shape[-1])  # a view where the layout allows, else a copy
    out = torch.empty(rows.shape[0], dtype=torch.long)
    getattr(library, kernels[logits.dtype])(rows.data_ptr(), out.data_ptr(), rows.shape[0], rows.shape[1], rows.stride(0))
    return out.reshape(logits.shape[:-1])


def samples(logits: torch.Tensor) -> bool:
    """Whether `sample` takes these logits: (N, V) float32 rows with a unit last stride, the kernels built."""
    return logits.dtype == torch.float32 and logits.dim() == 2 and logits.stride(-1) == 1 and _library() is not None


def sample(logits: torch.Tensor, rows: torch.Tensor, temperature: float, uniforms: torch.Tensor) -> torch.Tensor:
    """logits (N, V) (`samples`), rows (A,) indices into them, uniforms (A,) in [0, 1) -> (A,) int64: row
    rows[a]'s token drawn from softmax(logits / temperature) by inverse CDF with uniforms[a] (`sample_f32`)."""
    library = _library()
    assert library is not None and samples(logits) and temperature > 0
    rows = rows.to(torch.long).contiguous()
    uniforms = uniforms.to(torch.float64).contiguous()
    assert rows.shape == uniforms.shape and (rows.numel() == 0 or 0 <= int(rows.min()) <= int(rows.max()) < logits.shape[0])
    out = torch.empty(rows.shape[0], dtype=torch.long)
    status = library.sample_f32(
        logits.data_ptr(), logits.stride(0), rows.data_ptr(), rows.shape[0], logits.shape[1], temperature, uniforms.data_ptr(),
        out.data_ptr(),
    )
    if status != 0:
        raise MemoryError("native sampling could not allocate its buffers")
    return out


def layers_available() -> bool:
    """Whether `layers` (the bfloat16 layer loop in C) is built for this CPU: AVX512-BF16 (the small GEMM), or
    AVX2 + FMA (every product on the fixed-order kernel, `invariant.gemm`)."""
    library = _library()
    return library is not None and bool(library.layers_available())


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """gate_up (N, 2 I) bfloat16 -> bf16(bf16(silu(gate)) * up) (N, I), as the layer loop computes it."""
    rows, width = gate_up.shape
    assert gate_up.dtype == torch.bfloat16 and gate_up.is_contiguous() and width % 32 == 0
    out = torch.empty(rows, width // 2, dtype=torch.bfloat16)
    library = _library()
    assert library is not None
    library.silu_mul_bf16(gate_up.data_ptr(), out.data_ptr(), rows, width // 2)
    return out


def route(library: NativeLibrary, *, amx: bool, fixed: bool) -> int:
    """The C route (quench_native.h's ROUTE_*) of a step: fixed, AMX tiles, or the build's fastest kernels."""
    name = "ROUTE_FIXED" if fixed else "ROUTE_AMX" if amx else "ROUTE_FAST"
    return library.constants[name]


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
    *,
    amx: bool,
    every_row: bool = False,
) -> torch.Tensor:
    """Every decoder layer of a packed bfloat16 step (head size 64) in one C call: x (N, Dm), the residual
    stream, updated in place -> the final-norm hidden states (N, Dm). weights: LAYER_WEIGHTS entries per layer
    (the addresses of input_norm, post_norm, packed qkv, o, gate_up, down, then those packs' `bf16_span`); caches: each layer's key and value cache (B, Hkv,
    T, 64); start (B,) and offsets (B + 1,) int64 as `rope_attend` takes them. int8: 12 addresses per layer
    (each projection's `screen.Int8Weight` tiles, scales, column sums), used by steps of at most int8_rows rows.
    The packs are `pack_pairs`'s: the small GEMM's where the build has it, else the fixed-order kernel's.
    amx: AMX tiles in attention and past `avx512_gemm_rows` rows; every_row (batch-invariant runners): every
    product on the fixed-order GEMM and the fixed attention, whatever the rows and the CPU."""
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
        offsets.data_ptr(), batch, max_len, shape.scale, shape.eps, torch.get_num_threads(),
        route(library, amx=amx, fixed=every_row),
        ctypes.cast(int8, ctypes.c_void_p) if int8 is not None else None, int8_rows,
    )
    if status != 0:
        raise MemoryError("the native layer loop could not allocate its buffers")
    return out


# The kinds of a product's parts in `layers_f32`'s table (quench_native.h's F32_PART_*): what each part's call is.
F32_PARTS = ("F32_PART_X8", "F32_PART_X8_PACKED", "F32_PART_QUANT", "F32_PART_FIXED")


def f32_part_kinds() -> dict[str, int]:
    """F32_PARTS -> the header's values (an empty dict without the native library)."""
    library = _library()
    return {name: library.constants[name] for name in F32_PARTS} if library is not None else {}


def layers_f32_available() -> bool:
    """Whether `layers_f32` (the float32 layer loop of batch-invariant runners) is built: wherever the library is."""
    return _library() is not None


def layers_f32(
    x: torch.Tensor,
    table: ctypes.Array,
    caches: list[torch.Tensor],
    final_norm: torch.Tensor,
    shape: LayerShape,
    cos: torch.Tensor,
    sin_signed: torch.Tensor,
    start: torch.Tensor,
    offsets: torch.Tensor,
) -> torch.Tensor:
    """Every decoder layer of a packed float32 step (head size 64) of a batch-invariant runner in one C call: x
    (N, Dm), the residual stream, updated in place -> the final-norm hidden states (N, Dm). table: per layer the
    addresses of the input and post-attention norms, then each of qkv, o, gate_up and down as a count of parts and
    that many (kind, address, ggml type, out features) (`F32_PARTS`; quench_native.h); caches: each layer's key and
    value cache (B, Hkv, T, 64), all float32 or all bfloat16; start (B,) and offsets (B + 1,) int64 as `rope_attend`
    takes them. The same kernels in the same order as the Python loop over `invariant`'s norm and SiLU,
    `rope_attend(fixed=True)` and the projections' own calls, so the same bits."""
    rows, width = x.shape
    batch, _, max_len, _ = caches[0].shape
    assert x.dtype == final_norm.dtype == cos.dtype == sin_signed.dtype == torch.float32 and x.is_contiguous()
    cache_dtype = caches[0].dtype
    assert cache_dtype in (torch.float32, torch.bfloat16)
    assert all(cache.dtype == cache_dtype and cache.is_contiguous() for cache in caches)
    assert start.dtype == offsets.dtype == torch.int64 and start.is_contiguous() and offsets.is_contiguous()
    library = _library()
    assert library is not None
    addresses = (ctypes.c_int64 * len(caches))(*(cache.data_ptr() for cache in caches))
    out = torch.empty_like(x)
    status = library.layers_f32(
        x.data_ptr(), out.data_ptr(), ctypes.cast(table, ctypes.c_void_p), len(table), ctypes.cast(addresses, ctypes.c_void_p),
        int(cache_dtype == torch.bfloat16), len(caches) // 2, final_norm.data_ptr(), rows, width, shape.heads,
        shape.kv_heads, shape.inner, cos.data_ptr(), sin_signed.data_ptr(), start.data_ptr(), offsets.data_ptr(),
        batch, max_len, shape.scale, shape.eps, torch.get_num_threads(),
    )
    if status == 2:
        raise MemoryError("the float32 layer loop could not allocate its buffers")
    if status:
        raise ValueError("the float32 layer loop refused its table or a product")
    return out
