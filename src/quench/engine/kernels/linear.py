"""One projection of a Llama layer and the kernel that serves each product: the batch-invariant fixed-order
GEMM, the draft's int8 copy, quench's small GEMM, oneDNN's pre-packed weights, or PyTorch."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from quench.engine.kernels import invariant, native
from quench.engine.kernels.screen import Int8Weight, int8_weight


# Int8 weights (draft models) serve products of up to this many rows; more take the bfloat16 kernels, which are
# faster there (docs/draft.md, "Run in int8").
INT8_MAX_ROWS = 8


class Linear:
    """y = x W^T + b, with W pre-packed for oneDNN where that is available (CPU, bf16/fp32).

    int8: also keep an int8 copy of W (`screen.Int8Weight`) for products of few rows: half the bytes, not the
    bfloat16 bits (draft models only). amx: the small GEMM may use AMX tiles (`native.use_amx`); the fixed-order
    GEMM never does."""

    def __init__(
        self, weight: torch.Tensor, bias: torch.Tensor | None, prepack: bool, int8: bool = False, amx: bool = False,
        fixed: bool = False,
    ) -> None:
        self.out_features = weight.shape[0]
        self.bias = bias
        self.amx = amx
        # fixed: every product through the batch-invariant kernel (`invariant.gemm`), whatever the row count
        self.fixed = invariant.pack(weight) if fixed else None
        self.fixed_span = invariant.span(self.fixed) if self.fixed is not None else -1
        prepack = prepack and not fixed
        self.packed = prepack and _can_prepack(weight)
        # bfloat16 decode steps (a few rows) use quench's own kernel (native.small_gemm); prefills oneDNN's.
        self.small = native.pack_small_gemm(weight) if prepack and bias is None else None
        self.int8: Int8Weight | None = int8_weight(weight) if int8 and bias is None else None
        self.weight = torch.ops.mkldnn._reorder_linear_weight(weight, 8) if self.packed else weight

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.fixed is not None:
            y = invariant.gemm(x.reshape(-1, x.shape[-1]), self.fixed, self.out_features, self.fixed_span)
            y = y.view(*x.shape[:-1], self.out_features)
            return y + self.bias if self.bias is not None else y
        if self.int8 is not None and x.dtype == torch.bfloat16 and x.numel() <= INT8_MAX_ROWS * x.shape[-1]:
            return self.int8(x)
        if self.small is not None and x.dim() == 2 and x.shape[0] <= native.small_gemm_rows(self.amx) and x.is_contiguous():
            return native.small_gemm(x, self.small, self.out_features, amx=self.amx)
        if self.packed:
            return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")
        return F.linear(x, self.weight, self.bias)


def _can_prepack(weight: torch.Tensor) -> bool:
    """oneDNN packs float32 on any CPU, bfloat16 only where it runs bfloat16 (AVX512BW/VL/DQ or AVX-NE-CONVERT, and
    not held below them by ONEDNN_MAX_CPU_ISA): elsewhere its reorder refuses the weight."""
    return (
        weight.device.type == "cpu"
        and weight.dtype in (torch.bfloat16, torch.float32)
        and torch.backends.mkldnn.is_available()
        and (weight.dtype != torch.bfloat16 or torch.ops.mkldnn._is_mkldnn_bf16_supported())
    )
