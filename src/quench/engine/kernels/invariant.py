"""Batch-invariant kernels (C sources in `csrc/fixed.c`): a row's output bits depend on that row alone.

`EngineConfig.batch_invariant` routes the Llama fast path's matrix products, RMSNorm (float32) and SiLU x up
through these, so a token's logits are the same whether it is computed in a decode step of 1 or 64 rows, in
a verification pass of any width, in a prefill, or on 1 or 2 threads (docs/engine.md, "Batch invariance").
Each product output is one float32 sum over K in one order, rounded once: k = 0 .. K-1 by fused multiply-adds,
on every CPU (csrc/fixed.c: AVX-512, AVX2, NEON and scalar builds, and VDPBF16PS where it performs those very
steps), so a token's logits are also the same on every CPU.
"""

from __future__ import annotations

import torch

from quench.engine.kernels import native

_FLOATS = (torch.float32, torch.bfloat16)


def available(dtype: torch.dtype) -> bool:
    """Whether the invariant kernels serve this dtype here (a built native library, float32 or bfloat16)."""
    return dtype in _FLOATS and native.available(dtype)


def bfloat16_fastest() -> bool:
    """Whether bfloat16 weights are the fastest exact choice here: the fixed-order bfloat16 kernel is vectorised in
    this build (VDPBF16PS with AVX512-BF16, else widened to float32 in registers: AVX512, AVX2 + FMA, NEON), so a step
    reads half of float32's bytes for the same float32 arithmetic; the scalar loop (an x86-64-v2 build) is slower
    than oneDNN's float32."""
    library = native.build_result().library
    return library is not None and bool(library.fixed_vector_available())


def span(packed: torch.Tensor) -> int:
    """A bfloat16 pack's exponent span (`bf16_span` in csrc/fixed.c), which `gemm` takes; -1 for float32."""
    if packed.dtype != torch.bfloat16:
        return -1
    library = native.build_result().library
    assert library is not None
    return int(library.bf16_span(packed.data_ptr(), packed.numel()))


def pack(weight: torch.Tensor) -> torch.Tensor:
    """W (N, K) -> 16 output columns per contiguous block, zeros past N, in W's dtype: float32 as
    (ceil(N/16), K, 16); bfloat16 in pairs of k as (ceil(N/16), ceil(K/2), 16, 2), zeros past K
    (`native.pack_pairs`)."""
    if weight.dtype == torch.bfloat16:
        return native.pack_pairs(weight)
    out_features, in_features = weight.shape
    padded = weight.detach().new_zeros((out_features + 15) // 16 * 16, in_features)
    padded[:out_features] = weight.detach()
    return padded.reshape(-1, 16, in_features).transpose(1, 2).contiguous()  # (N/16, K, 16)


def gemm(x: torch.Tensor, packed: torch.Tensor, out_features: int, w_span: int = -1) -> torch.Tensor:
    """x (M, K) -> x W^T (M, N) in x's dtype, W packed by `pack` (same dtype); w_span: `span(packed)` (bfloat16:
    -1 never lets a row take VDPBF16PS; the bits are the same either way)."""
    rows, in_features = x.shape
    x = x.contiguous()
    depth = (in_features + 1) // 2 if packed.dim() == 4 else in_features  # pairs of k in bfloat16
    assert x.dtype == packed.dtype and packed.shape[1] == depth
    out = torch.empty(rows, out_features, dtype=x.dtype)
    library = native.build_result().library
    assert library is not None
    threads = torch.get_num_threads()
    if x.dtype == torch.float32:
        library.fixed_gemm_f32(x.data_ptr(), packed.data_ptr(), out.data_ptr(), rows, out_features, in_features, threads)
    elif library.fixed_gemm_bf16(
        x.data_ptr(), packed.data_ptr(), out.data_ptr(), rows, out_features, in_features, threads, w_span
    ):
        raise MemoryError("the invariant GEMM could not allocate its buffer")
    return out


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """float32 x (N, Dm) -> weight * x / sqrt(mean(x^2) + eps), row by row in a fixed order."""
    x = x.contiguous()
    assert x.dtype == weight.dtype == torch.float32 and x.dim() == 2
    out = torch.empty_like(x)
    library = native.build_result().library
    assert library is not None
    library.rms_norm_f32(x.data_ptr(), weight.contiguous().data_ptr(), out.data_ptr(), x.shape[0], x.shape[1], eps)
    return out


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """gate_up (N, 2 I) -> silu(gate) * up (N, I), element by element (bfloat16: silu rounded, then the product)."""
    gate_up = gate_up.contiguous()
    rows, width = gate_up.shape
    out = torch.empty(rows, width // 2, dtype=gate_up.dtype)
    library = native.build_result().library
    assert library is not None and gate_up.dtype in _FLOATS
    function = library.silu_mul_f32 if gate_up.dtype == torch.float32 else library.silu_mul_rows_bf16
    function(gate_up.data_ptr(), out.data_ptr(), rows, width // 2, torch.get_num_threads())
    return out
