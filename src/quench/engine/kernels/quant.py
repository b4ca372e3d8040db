"""GGUF weights executed as stored (C kernels in `csrc/quant.c` and `csrc/qdot.c`): the projections and the LM head
read the GGUF's block bytes, never a float32 copy, in one of two numeric modes (MODES).

Glossary:
  block      ggml's unit of quantization along a row: 32 values (Q4_0, Q4_1, Q8_0) or 256 (Q4_K, Q5_K, Q6_K),
             with its scales; a row of K values is K / block_values blocks, `row_bytes` bytes.
  QuantWeight  one GGUF tensor's rows as stored, (N, row_bytes) uint8, in Hugging Face row order.
  QuantLinear  a projection whose W is one or more QuantWeights stacked along N (q/k/v, gate/up fused).

gguf: what reaches the arithmetic is each weight's value as gguf's `dequantize` computes it (the float32 path's
weights, bit for bit), the blocks expanded in registers; the sums run in quant.c's fixed order, so the outputs differ
from the float32 path's by summation order only. gguf-int8: each row of x is quantized to 8 bits per block and
multiplied with the stored integers, integer sums, block scales applied in float in one order (llama.cpp's scheme;
qdot.c). In both a row's bits never depend on the other rows, the threads or the build (docs/engine.md).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from quench.engine.kernels import huge_pages, native

log = logging.getLogger(__name__)

# --weights modes on a GGUF's blocks: float32 activations and sums / 8-bit activations, integer sums
MODES = ("gguf", "gguf-int8")
# ggml type id -> name, the block formats quant.c and qdot.c serve
QUANT_TYPES = {2: "Q4_0", 3: "Q4_1", 8: "Q8_0", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K"}
# GGUF tensor name (per layer) -> the Hugging Face projection it holds
LAYER_TENSORS = {
    "attn_q": "q_proj", "attn_k": "k_proj", "attn_v": "v_proj", "attn_output": "o_proj",
    "ffn_gate": "gate_proj", "ffn_up": "up_proj", "ffn_down": "down_proj",
}


@dataclass(frozen=True)
class QuantWeight:
    """W (N, K) as GGUF blocks: `data` (N, row_bytes) uint8, row n at data[n]."""

    type: int  # ggml type id (QUANT_TYPES)
    in_features: int  # K
    data: torch.Tensor  # (N, row_bytes) uint8, contiguous

    @property
    def out_features(self) -> int:
        return self.data.shape[0]


def _library():
    library = native.build_result().library
    if library is None:
        raise RuntimeError(f"GGUF weights as stored need the native kernels: {native.build_result().reason}")
    return library


def row_bytes(qtype: int, in_features: int) -> int:
    """Bytes of one row of `in_features` values, or ValueError where the type or width does not fit."""
    size = _library().quant_row_bytes(qtype, in_features)
    if qtype not in QUANT_TYPES or size < 0:
        raise ValueError(f"GGUF type {qtype} with {in_features} values per row is not served")
    return size


def quant_weight(qtype: int, in_features: int, data: np.ndarray | torch.Tensor) -> QuantWeight:
    """A QuantWeight from a tensor's bytes, (N, row_bytes) or flat; the bytes are copied once, contiguous."""
    tensor = torch.from_numpy(np.array(data, copy=True)).view(torch.uint8)  # (from a read-only memory map)
    tensor = tensor.reshape(-1, row_bytes(qtype, in_features)).contiguous()
    return QuantWeight(qtype, in_features, tensor)


def gemm(x: torch.Tensor, weights: list[QuantWeight]) -> torch.Tensor:
    """x (M, K) float32 -> x W^T (M, N) float32, W the weights stacked along N (each writes its columns)."""
    rows, in_features = x.shape
    assert x.dtype == torch.float32 and all(w.in_features == in_features for w in weights)
    x = x.contiguous()
    width = sum(w.out_features for w in weights)
    out = torch.empty(rows, width, dtype=torch.float32)
    library, threads, column = _library(), torch.get_num_threads(), 0
    for w in weights:
        y = out.data_ptr() + 4 * column
        if library.quant_gemm_f32(x.data_ptr(), w.data.data_ptr(), y, width, rows, w.out_features, in_features, w.type, threads):
            raise ValueError(f"quant_gemm_f32 refused type {w.type} with K={in_features}")
        column += w.out_features
    return out


@dataclass(frozen=True)
class PackedWeight:
    """qpack.c's interleaved copy of one or more QuantWeights of one type stacked along N: one product for all."""

    type: int  # ggml type id (Q4_0, Q4_1 or Q8_0)
    in_features: int  # K
    out_features: int  # N, the stacked weights' rows together
    data: torch.Tensor  # (qpack_bytes,) uint8


def packed(weights: list[QuantWeight]) -> PackedWeight | None:
    """The interleaved copy of weights stacked along N, where they share a type and this build's vector code runs it
    (Q4_0, Q4_1, Q8_0 on AVX2 and AVX512-VNNI); else None (quant_gemm_x8 reads W as stored)."""
    library, first = _library(), weights[0]
    rows = sum(w.out_features for w in weights)
    size = library.qpack_bytes(first.type, rows, first.in_features)
    if size < 0 or library.qdot_level() not in (1, 2) or any(w.type != first.type for w in weights):
        return None
    stacked = torch.cat([w.data for w in weights]) if len(weights) > 1 else first.data  # (N, row_bytes), transient
    out = huge_pages.zeros((size,), torch.uint8)  # a step streams through it
    if library.qpack(stacked.data_ptr(), out.data_ptr(), rows, first.in_features, first.type):
        raise ValueError(f"qpack refused type {first.type}")
    return PackedWeight(first.type, first.in_features, rows, out)


def _check(status: int, qtype: int, rows: int, in_features: int) -> None:
    if status == 2:
        raise MemoryError(f"quant_gemm_x8: no memory for {rows} rows of {in_features} quantized values")
    if status:
        raise ValueError(f"quant_gemm_x8 refused type {qtype} with K={in_features}")


def _block_values(qtype: int) -> int:
    return 256 if qtype >= 12 else 32


def gemm_x8(x: torch.Tensor, weights: list[QuantWeight | PackedWeight]) -> torch.Tensor:
    """x (M, K) float32 -> (M, N) float32: x quantized to 8 bits per block times W's stored integers, integer sums
    (qdot.c's definition), W the weights stacked along N, each as stored or `packed` (same bits, faster). x is
    quantized once per block size, whatever the number of weights."""
    rows, in_features = x.shape
    assert x.dtype == torch.float32 and all(w.in_features == in_features for w in weights)
    x = x.contiguous()
    width = sum(w.out_features for w in weights)
    out = torch.empty(rows, width, dtype=torch.float32)
    library, threads, column = _library(), torch.get_num_threads(), 0
    if len(weights) == 1:  # the kernel quantizes x itself
        w = weights[0]
        product = library.quant_gemm_x8_packed if isinstance(w, PackedWeight) else library.quant_gemm_x8
        _check(product(x.data_ptr(), w.data.data_ptr(), out.data_ptr(), width, rows, w.out_features, in_features, w.type,
                       threads), w.type, rows, in_features)
        return out
    quantized = {}  # block values -> q (M, K) int8, d (M, K / block) float32, s (M, K / 16) int32
    for w in weights:
        block = _block_values(w.type)
        if block not in quantized:
            if in_features % block:
                raise ValueError(f"quant_gemm_x8 refused type {w.type} with K={in_features}")
            q, d = torch.empty(rows, in_features, dtype=torch.int8), torch.empty(rows, in_features // block)
            s = torch.empty(rows, in_features // 16, dtype=torch.int32)
            library.quantize_x8_sums(x.data_ptr(), q.data_ptr(), d.data_ptr(), s.data_ptr(), rows, in_features, block)
            quantized[block] = (q, d, s)
        q, d, s = quantized[block]
        product = library.quant_gemm_x8_packed_quantized if isinstance(w, PackedWeight) else library.quant_gemm_x8_quantized
        y = out.data_ptr() + 4 * column
        _check(product(q.data_ptr(), d.data_ptr(), s.data_ptr(), w.data.data_ptr(), y, width, rows, w.out_features,
                       in_features, w.type, threads), w.type, rows, in_features)
        column += w.out_features
    return out


def dequantize(weight: QuantWeight) -> torch.Tensor:
    """W (N, K) float32 from the kernels' own expansion (tests compare it with gguf's dequantize)."""
    out = torch.empty(weight.out_features, weight.in_features, dtype=torch.float32)
    if _library().dequantize_rows(weight.data.data_ptr(), out.data_ptr(), weight.out_features, weight.in_features, weight.type):
        raise ValueError(f"dequantize_rows refused type {weight.type}")
    return out


def int8_parts(weights: list[QuantWeight]) -> list[QuantWeight | PackedWeight]:
    """What gemm_x8 runs for weights stacked along N: one packed copy of all where they share a packed type, else
    each packed where it can be, else as stored."""
    whole = packed(weights)
    return [whole] if whole is not None else [packed([w]) or w for w in weights]


# Products of more rows than this (prefills) expand W into a transient float32 buffer, one projection at a time,
# and run PyTorch's GEMM on it: the same values, expanded once rather than once per 8 rows.
SMALL_ROWS = 16
_scratch = torch.empty(0)  # that buffer, grown to the largest projection and reused


def expanded(weights: list[QuantWeight]) -> torch.Tensor:
    """W (N, K) float32 of weights stacked along N, in the reused scratch buffer (valid until the next call)."""
    global _scratch
    width, in_features = sum(w.out_features for w in weights), weights[0].in_features
    if _scratch.numel() < width * in_features:
        _scratch = torch.empty(width * in_features)
    out, row = _scratch[: width * in_features].view(width, in_features), 0
    for w in weights:
        if _library().dequantize_rows(w.data.data_ptr(), out[row].data_ptr(), w.out_features, in_features, w.type):
            raise ValueError(f"dequantize_rows refused type {w.type}")
        row += w.out_features
    return out


class QuantLinear:
    """y = x W^T with W as GGUF blocks (no bias): what `linear.Linear` does, from the stored bytes. mode "gguf":
    every_row (batch-invariant runners) runs every product on the kernel, whatever its rows, so a row's bits never
    depend on the others; else products of more than SMALL_ROWS rows go through `expanded`. mode "gguf-int8": every
    product on qdot.c's integer kernel (its arithmetic is the mode)."""

    fixed = small = int8 = bias = None  # the runner's bfloat16 layer table and int8 copies never apply

    def __init__(self, weights: list[QuantWeight], every_row: bool = False, mode: str = "gguf") -> None:
        if mode not in MODES:
            raise ValueError(f"unknown GGUF weights mode {mode!r}; choose one of {', '.join(MODES)}")
        self.weights = weights
        self.every_row = every_row
        self.mode = mode
        # the products gguf-int8 runs: one interleaved copy of all the weights where they share a packed type, else
        # the weights as stored (x is quantized once either way)
        self.parts = int8_parts(weights) if mode == "gguf-int8" else None
        self.out_features = sum(w.out_features for w in weights)
        self.nbytes = sum(w.data.nbytes for w in weights)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])  # (M, K)
        if self.mode == "gguf-int8":
            y = gemm_x8(flat, self.parts)  # (M, N)
        elif flat.shape[0] > SMALL_ROWS and not self.every_row:
            y = F.linear(flat, expanded(self.weights))
        else:
            y = gemm(flat, self.weights)  # (M, N)
        return y.view(*x.shape[:-1], self.out_features)


@dataclass(frozen=True)
class GGUFWeights:
    """A GGUF's quantized projections and head as stored, by Hugging Face name (e.g.
    `model.layers.0.self_attn.q_proj.weight`, `lm_head.weight`); tensors of other types are left out."""

    path: str
    tensors: dict[str, QuantWeight]
    mode: str = "gguf"  # how the products run (MODES)


def _llama_rows(rows: int, heads: int) -> np.ndarray:
    """The row order transformers' LlamaTensorProcessor gives attn_q / attn_k (llama.cpp permuted them)."""
    index = np.arange(rows)
    return index.reshape(heads, rows // heads // 2, 2).swapaxes(2, 1).reshape(rows)


def read_gguf_weights(path: Path, heads: int, kv_heads: int, mode: str = "gguf") -> GGUFWeights:
    """The served quantized tensors of one GGUF file, rows in Hugging Face order."""
    from gguf import GGUFReader

    reader = GGUFReader(path)
    architecture = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    names = {tensor.name for tensor in reader.tensors}
    tensors = {}
    for tensor in reader.tensors:
        qtype = int(tensor.tensor_type)
        if qtype not in QUANT_TYPES:
            continue
        parts = tensor.name.split(".")
        in_features = int(tensor.shape[0])  # GGUF lists dimensions innermost first
        if tensor.name == "output.weight" or (tensor.name == "token_embd.weight" and "output.weight" not in names):
            tensors["lm_head.weight"] = quant_weight(qtype, in_features, tensor.data)  # tied: the embedding
        elif len(parts) == 4 and parts[0] == "blk" and parts[2] in LAYER_TENSORS:
            weight = quant_weight(qtype, in_features, tensor.data)
            if architecture == "llama" and parts[2] in ("attn_q", "attn_k"):
                order = _llama_rows(weight.out_features, heads if parts[2] == "attn_q" else kv_heads)
                weight = QuantWeight(qtype, in_features, weight.data[torch.from_numpy(order)].contiguous())
            block = "mlp" if parts[2].startswith("ffn") else "self_attn"
            tensors[f"model.layers.{parts[1]}.{block}.{LAYER_TENSORS[parts[2]]}.weight"] = weight
    return GGUFWeights(str(path), tensors, mode)


def gguf_weights_of(model) -> GGUFWeights | None:
    """The GGUF blocks a model runs on: its `quench_gguf_weights` where set (None: its float32 parameters), else
    those of the file `load_model(weights="gguf" or "gguf-int8")` named (`quench_gguf_file`, in the mode
    `quench_weights`), read once and kept on the model."""
    if hasattr(model, "quench_gguf_weights"):
        return model.quench_gguf_weights
    path = getattr(model, "quench_gguf_file", None)
    if path is None:
        return None
    config = model.config.get_text_config()
    mode = getattr(model, "quench_weights", "gguf")
    model.quench_gguf_weights = read_gguf_weights(Path(path), config.num_attention_heads, config.num_key_value_heads, mode)
    return model.quench_gguf_weights


def use_gguf_weights(runner, weights: GGUFWeights) -> int:
    """Point a float32 `LlamaRunner`'s projections and head at the GGUF's blocks where every part of a fused
    projection is quantized; returns the bytes a decode step now reads from them (each tensor once)."""
    if runner.dtype != torch.float32:
        raise ValueError(f"GGUF weights as stored run with float32 activations, not {runner.dtype}")
    tensors = weights.tensors
    fused = {"qkv": ("self_attn", ("q_proj", "k_proj", "v_proj")), "o": ("self_attn", ("o_proj",)),
             "gate_up": ("mlp", ("gate_proj", "up_proj")), "down": ("mlp", ("down_proj",))}
    for index, layer in enumerate(runner.layers):
        for attribute, (block, projections) in fused.items():
            names = [f"model.layers.{index}.{block}.{name}.weight" for name in projections]
            if all(name in tensors for name in names) and getattr(layer, attribute).bias is None:
                setattr(layer, attribute, QuantLinear([tensors[name] for name in names], runner.batch_invariant, weights.mode))
    if "lm_head.weight" in tensors and runner.lm_head.bias is None:
        runner.lm_head = QuantLinear([tensors["lm_head.weight"]], runner.batch_invariant, weights.mode)
        runner.head_screen = None  # the screened head reads a bfloat16 pack of the float32 head
    linears = [runner.lm_head, *runner._projections()]
    return sum(linear.nbytes for linear in linears if isinstance(linear, QuantLinear))


def weights_mode(model) -> str:
    """What a model's projections and head read, from its attributes alone (no file read): "dequantized" (its
    parameters) or one of MODES."""
    weights = getattr(model, "quench_gguf_weights", None)
    if weights is not None:
        return weights.mode
    if hasattr(model, "quench_gguf_weights") or getattr(model, "quench_gguf_file", None) is None:
        return "dequantized"
    return getattr(model, "quench_weights", "gguf")
