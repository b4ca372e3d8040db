"""The screened greedy head: a greedy step's token without reading the whole LM head in bfloat16.

`ScreenedHead.argmax(h)` gives, for each row of final-norm hidden states, the first maximum of the
bfloat16 logits that quench's AVX512 GEMM computes for it (`native.small_gemm` at 1-4 rows), bit for bit,
while reading an int8 copy of the head (half the bytes) plus ~6 exact rows per token: the proof that
no token is lost, and the kernel, are in `csrc/screen.c`. Greedy decode and greedy verification steps
use it (`LlamaRunner.greedy_tokens`, unless `KernelConfig.screen` is off); sampling needs every logit
and keeps the full head.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from quench.engine.kernels import native

log = logging.getLogger(__name__)

TILE_K = 64  # inputs per AMX int8 tile row
# Rows per call; more go through the whole head. The C kernel takes up to 64, but past 16 rows its cost grows
# faster than the whole head's (docs/benchmarks.md, "The screened greedy head").
MAX_ROWS = 16
KERNEL_MAX_ROWS = 64  # SCREEN_MAX_ROWS in quench_native.h: what a call may ask for with max_rows (checked in tests)
VNNI_ROWS = 4  # SCREEN_VNNI_ROWS in quench_native.h: calls of up to this many rows take AVX512-VNNI, not AMX tiles
BOUND_SLACK = 1.0 + 1e-6  # norms stored in float32 are rounded up by this factor
CHUNK = 4096  # head rows converted to float64 at a time


@dataclass(frozen=True)
class ScreenedHead:
    """An LM head W (V, K) as the screen reads it, next to its packed bfloat16 copy."""

    quantized: torch.Tensor  # (ceil(V/16), K/64, 16, 16, 4) int8: per block of 16 tokens, one 1 KB tile per 64 inputs
    scale: torch.Tensor  # (V,) float32 s_j: W_j ~ s_j q_j
    column_sums: torch.Tensor  # (V,) int32 sum_k q_jk
    norms: torch.Tensor  # (V,) float32 |W_j| (2-norm, rounded up)
    errors: torch.Tensor  # (V,) float32 |W_j - s_j q_j| (2-norm, rounded up)
    packed: torch.Tensor  # the head packed for native.small_gemm, (ceil(V/16), K/2, 16, 2) bfloat16
    vocab_size: int
    in_features: int

    def argmax(
        self, h: torch.Tensor, counts: torch.Tensor | None = None, max_rows: int = MAX_ROWS, vnni_rows: int = VNNI_ROWS
    ) -> torch.Tensor | None:
        """h (M, K) bfloat16 -> (M,) int64 first-maximum tokens; None where the screen cannot serve the call
        (more than max_rows rows: the whole head is faster there; benchmarks/head.py passes KERNEL_MAX_ROWS).
        counts, if given ((M,) int32, contiguous): filled with the tokens computed exactly per row.
        vnni_rows: calls of up to this many rows (at most 4) take AVX512-VNNI instead of AMX tiles."""
        library = native._library()
        rows = h.shape[0]
        served = 0 < rows <= min(max_rows, KERNEL_MAX_ROWS) and h.dtype == torch.bfloat16
        if library is None or not served:
            return None
        h = h.contiguous()
        out = torch.empty(rows, dtype=torch.long)
        work = torch.empty(library.screen_work_bytes(rows, self.vocab_size, self.in_features), dtype=torch.uint8)
        status = library.screen_argmax_bf16(
            h.data_ptr(), rows, self.in_features, self.quantized.data_ptr(), self.scale.data_ptr(),
            self.column_sums.data_ptr(), self.norms.data_ptr(), self.errors.data_ptr(), self.packed.data_ptr(),
            self.vocab_size, out.data_ptr(), counts.data_ptr() if counts is not None else None, work.data_ptr(),
            torch.get_num_threads(), vnni_rows,
        )
        return out if status == 0 else None


def screen_available() -> bool:
    library = native._library()
    return library is not None and bool(library.screen_available())


def screen_head(weight: torch.Tensor, packed: torch.Tensor | None) -> ScreenedHead | None:
    """W (V, K) bfloat16 and its `native.pack_small_gemm` copy -> the screen's int8 copy; None where the
    kernel cannot serve it (no AMX int8, K not a multiple of 64, a head too large for int32 offsets)."""
    if packed is None or not _tiles_fit(weight):
        return None
    tiles, scale, sums, norms, errors = _quantize_rows(weight, bounds=True)
    return ScreenedHead(tiles, scale, sums, _round_up(norms), _round_up(errors), packed, *weight.shape)


@dataclass(frozen=True)
class Int8Weight:
    """A weight W (N, K) as int8 rows with a float32 scale each, in the screen's tile layout: `y = x W^T`
    from half the bytes of bfloat16 (`native` `w8_gemm_bf16`). Not the bfloat16 products' bits (x is
    rounded to 15 bits per row, W to 8 bits per output): for draft models, whose proposals the target
    verifies. Each row's output depends on that row alone, whatever the batch."""

    quantized: torch.Tensor  # (ceil(N/16), K/64, 16, 16, 4) int8, as ScreenedHead.quantized
    scale: torch.Tensor  # (N,) float32
    column_sums: torch.Tensor  # (N,) int32
    out_features: int
    in_features: int

    def __call__(self, x: torch.Tensor, vnni_rows: int = VNNI_ROWS) -> torch.Tensor:
        """x (..., K) bfloat16 -> (..., N) bfloat16 (vnni_rows as for `ScreenedHead.argmax`)."""
        library = native._library()
        assert library is not None
        flat = x.reshape(-1, self.in_features).contiguous()  # (M, K)
        rows = flat.shape[0]
        out = torch.empty(rows, self.out_features, dtype=torch.bfloat16)
        if rows:
            work = torch.empty(library.w8_work_bytes(rows, self.in_features), dtype=torch.uint8)
            status = library.w8_gemm_bf16(
                flat.data_ptr(), rows, self.in_features, self.quantized.data_ptr(), self.scale.data_ptr(),
                self.column_sums.data_ptr(), self.out_features, out.data_ptr(), work.data_ptr(), torch.get_num_threads(),
                vnni_rows,
            )
            assert status == 0, "w8_gemm_bf16 refused a call int8_weight accepted"
        return out.view(*x.shape[:-1], self.out_features)


def int8_weight(weight: torch.Tensor) -> Int8Weight | None:
    """W (N, K) bfloat16 -> its int8 copy for `Int8Weight`; None where the kernel cannot serve it."""
    if not _tiles_fit(weight):
        return None
    tiles, scale, sums, _, _ = _quantize_rows(weight, bounds=False)
    return Int8Weight(tiles, scale, sums, *weight.shape)


def _tiles_fit(weight: torch.Tensor) -> bool:
    """Whether the int8 tile kernels take W (N, K): bfloat16, K a multiple of 64, AMX int8 here, int32 offsets."""
    return tiles_fit(*weight.shape, weight.dtype)


def tiles_fit(rows: int, in_features: int, dtype: torch.dtype) -> bool:
    """`_tiles_fit` from a weight's shape and dtype alone (`forward_plan` reads no weights)."""
    return (
        dtype == torch.bfloat16
        and in_features % TILE_K == 0
        and (rows + 15) // 16 * 8 * in_features < 2**31
        and screen_available()
    )


def _quantize_rows(
    weight: torch.Tensor, bounds: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """W (N, K) -> its int8 tiles, per-row scales s_j, column sums of q, and (with bounds) the float64 norms
    |W_j| and |W_j - s_j q_j| (zeros without)."""
    vocab, in_features = weight.shape
    blocks = (vocab + 15) // 16
    scale = torch.empty(vocab, dtype=torch.float32)
    sums = torch.empty(vocab, dtype=torch.int32)
    norms = torch.zeros(vocab, dtype=torch.float64)
    errors = torch.zeros(vocab, dtype=torch.float64)
    padded = torch.zeros(blocks * 16, in_features, dtype=torch.int8)
    for first in range(0, vocab, CHUNK):  # float64 in chunks: the whole head would take 8 bytes per weight
        w = weight[first : first + CHUNK].detach().to(torch.float64)  # (C, K)
        top = w.abs().amax(dim=1)  # (C,)
        s = torch.where(top > 0, top / 127, torch.ones_like(top)).to(torch.float32)  # the float32 s_j the kernel uses
        q = torch.round(w / s.double()[:, None]).clamp(-127, 127)  # (C, K)
        rows = slice(first, first + w.shape[0])
        scale[rows], sums[rows], padded[rows] = s, q.sum(dim=1).to(torch.int32), q.to(torch.int8)
        if bounds:
            errors[rows] = (w - q * s.double()[:, None]).norm(dim=1) * BOUND_SLACK
            norms[rows] = w.norm(dim=1) * BOUND_SLACK
    # (blocks, 16 tokens n, K/64 chunks c, 16 rows r, 4 inputs i) -> tile layout (blocks, c, r, n, i)
    tiles = padded.view(blocks, 16, in_features // TILE_K, 16, 4).permute(0, 2, 3, 1, 4).contiguous()
    return tiles, scale, sums, norms, errors


def _round_up(values: torch.Tensor) -> torch.Tensor:
    """float64 -> float32 never below the float64 value."""
    out = values.to(torch.float32)
    return torch.where(out.double() < values, torch.nextafter(out, torch.full_like(out, float("inf"))), out)
