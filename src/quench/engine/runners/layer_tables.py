"""The address tables quench's C layer loops read: `native.layers` (bfloat16, plus the int8 copies' table) and
`native.layers_f32` (float32 on a GGUF's blocks), built from a runner's decoder layers (`LlamaLayer`)."""

from __future__ import annotations

import ctypes

import torch

from quench.engine.kernels import native
from quench.engine.kernels.linear import Linear
from quench.engine.kernels.quant import PackedWeight, QuantLinear
from quench.engine.runners.llama_layers import LlamaLayer


def projections(layers: list[LlamaLayer]) -> list[Linear]:
    """Every layer's qkv, o, gate_up and down, in the layer loop's order."""
    return [linear for layer in layers for linear in (layer.qkv, layer.o, layer.gate_up, layer.down)]


def bf16_table(layers: list[LlamaLayer], fixed: bool) -> ctypes.Array:
    """The addresses `native.layers` reads (6 per layer), where the plan runs the whole layer loop in C
    (`ForwardPlan.c_layers`: bfloat16 glue, head size 64, every projection packed, no biases, no windows).

    Runners whose products are all fixed-order (`fixed`: batch-invariant ones, and bfloat16 on builds without the
    small GEMM, e.g. AVX2) point it at the fixed-order packs (in bfloat16 the small GEMM's layout); invariant ones
    run every step through it, whatever its rows: the loop's GEMM sums each output in one order for any
    row count or thread count (AMX tiles for every product where the CPU has them, else the AVX512
    kernel), and its norms, RoPE, attention and SiLU treat each row on its own."""
    linears = projections(layers)
    packs = [linear.fixed if fixed else linear.small for linear in linears]
    if any(pack is None for pack in packs):
        raise AssertionError("the forward plan runs the C layer loop over weights without its packs")
    spans = [linear.fixed_span if fixed else -1 for linear in linears]
    addresses = []  # LAYER_WEIGHTS per layer (csrc/quench_native.h)
    for index, layer in enumerate(layers):
        addresses += [layer.input_norm.data_ptr(), layer.post_norm.data_ptr()]
        addresses += [pack.data_ptr() for pack in packs[4 * index : 4 * index + 4]]
        addresses += spans[4 * index : 4 * index + 4]
    return (ctypes.c_int64 * len(addresses))(*addresses)


def int8_table(layers: list[LlamaLayer]) -> ctypes.Array | None:
    """The int8 copies' addresses `native.layers` reads (12 per layer), where every projection has one."""
    linears = projections(layers)
    if any(linear.int8 is None for linear in linears):
        return None
    addresses = [
        tensor.data_ptr()
        for linear in linears
        for tensor in (linear.int8.quantized, linear.int8.scale, linear.int8.column_sums)
    ]
    return (ctypes.c_int64 * len(addresses))(*addresses)


def float32_parts(linear: Linear | QuantLinear, kinds: dict[str, int]) -> list[tuple[int, int, int, int]]:
    """One float32 projection's parts as `native.layers_f32` runs them, (kind, address, ggml type, out features) each,
    the calls the projection itself makes: a QuantLinear's stacked weights (gguf-int8: on the `quant.packed` copy where
    it has one, else as stored; gguf: as stored, every row on the kernel), or a `Linear`'s fixed-order pack."""
    if isinstance(linear, QuantLinear) and linear.mode == "gguf-int8":
        return [
            (kinds["F32_PART_X8_PACKED" if isinstance(part, PackedWeight) else "F32_PART_X8"], part.data.data_ptr(),
             part.type, part.out_features)
            for part in linear.parts
        ]
    if isinstance(linear, QuantLinear) and linear.mode == "gguf" and linear.every_row:
        return [(kinds["F32_PART_QUANT"], weight.data.data_ptr(), weight.type, weight.out_features) for weight in linear.weights]
    if isinstance(linear, Linear) and linear.fixed is not None and linear.bias is None and linear.fixed.dtype == torch.float32:
        return [(kinds["F32_PART_FIXED"], linear.fixed.data_ptr(), -1, linear.out_features)]
    raise AssertionError(f"the float32 C layer loop cannot run a {type(linear).__name__} ({getattr(linear, 'mode', '')})")


def float32_table(layers: list[LlamaLayer], linears: tuple[Linear | QuantLinear, ...]) -> ctypes.Array:
    """The table `native.layers_f32` reads (`ForwardPlan.c_layers` in float32: a batch-invariant runner on a GGUF's
    blocks) for `linears`, the layers' projections now in place (`projections`): per layer the input and
    post-attention norms' addresses, then each projection as a count of parts and (kind, address, ggml type, out
    features) per part, each part the call the projection itself makes (`float32_parts`)."""
    kinds = native.f32_part_kinds()
    entries: list[int] = []
    for index, layer in enumerate(layers):
        entries += [layer.input_norm.data_ptr(), layer.post_norm.data_ptr()]
        for linear in linears[4 * index : 4 * index + 4]:
            parts = float32_parts(linear, kinds)
            entries += [len(parts), *(field for part in parts for field in part)]
    return (ctypes.c_int64 * len(entries))(*entries)
