"""The float32 kernels of the fixed layer loop give the same bits at every kernel level this CPU runs (the scalar
build, AVX2 and AVX-512): rms_norm_f32 (rows side by side in blocks of 8, and the rows left over), silu_mul_f32
(vector lanes and the scalar tail) and the fixed attention's softmax, on hostile values: NaN, infinities, huge and
denormal inputs, scores whose maximum is +0 or -0, and NaN scores. Each level runs in its own process
(QUENCH_NATIVE_MARCH picks the build); the scalar build's rms_norm_f32 is also checked against its written order."""


import numpy as np
import pytest
import torch

from quench.engine.kernels import invariant, native
from quench.native_target import this_cpu_levels
from tests.helpers import stdout_at_level

pytestmark = pytest.mark.skipif(not native.available(torch.float32), reason=native.build_result().reason)

LEVELS = this_cpu_levels()

SCRIPT = r"""
import hashlib, math, torch
from quench.engine.kernels import invariant, native
torch.set_num_threads(2)
digest = hashlib.sha256()
def update(tensor):
    digest.update(tensor.contiguous().view(torch.uint8).numpy().tobytes())
g = torch.Generator().manual_seed(7)
hostile = torch.tensor([math.nan, math.inf, -math.inf, 0.0, -0.0, 1e-40, -1e-40, 88.0, -88.0, 104.5, -104.5, 3e38, -3e38])
for rows, width in ((1, 576), (8, 576), (13, 576), (21, 40)):
    x = torch.randn(rows, width, generator=g) * 4
    if rows > 8:
        x[-1, : hostile.numel()] = hostile  # the last row's norm is NaN; the others' stay finite
    update(invariant.rms_norm(x, torch.randn(width, generator=g), 1e-5))
for rows, half in ((1, 1536), (5, 1536), (3, 23)):
    gate_up = torch.randn(rows, 2 * half, generator=g) * 20
    gate_up.view(-1)[: hostile.numel()] = hostile
    gate_up[-1, -hostile.numel():] = hostile
    update(invariant.silu_mul(gate_up))
# attention: query heads of zeros (every score +0), of -0 (scores -0 or +0), a NaN key, and ordinary ones
B, H, Hkv, T, D = 3, 6, 2, 80, 64
start = torch.tensor([0, 40, 70], dtype=torch.int64)
counts = torch.tensor([37, 3, 1], dtype=torch.int64)
offsets = torch.cat([torch.zeros(1, dtype=torch.int64), counts.cumsum(0)])
qkv = torch.randn(int(counts.sum()), H + 2 * Hkv, D, generator=g)
qkv[:, 0] = 0.0
qkv[:, 1] = -0.0
keys, values = torch.randn(B, Hkv, T, D, generator=g), torch.randn(B, Hkv, T, D, generator=g)
keys[1, 1, 17, 5] = math.nan
cos, sin = torch.ones(T, D), torch.zeros(T, D)  # RoPE leaves the zero queries zero
out = native.rope_attend(qkv, keys, values, cos, sin, start, offsets, H, D ** -0.5, amx=False, fixed=True)
for tensor in (out, keys, values):
    update(tensor)
print(digest.hexdigest())
"""


@pytest.mark.skipif(len(LEVELS) < 2, reason="this CPU runs one x86 level or none: nothing to compare")
def test_every_level_gives_the_element_kernels_and_the_softmax_the_same_bits():
    digests = {level: stdout_at_level(SCRIPT, level) for level in LEVELS}
    assert len(set(digests.values())) == 1, digests


def written_rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """rms_norm_f32's written order in float32: a row's squares added one at a time from zero."""
    out = np.empty_like(x)
    for n, row in enumerate(x):
        total = np.float32(0)
        for value in row:
            total = np.float32(total + np.float32(value * value))
        inv = np.float32(1) / np.sqrt(np.float32(total / np.float32(row.size) + np.float32(eps)))
        out[n] = weight * (row * inv)
    return out


@pytest.mark.parametrize("rows", [1, 7, 8, 9, 17])
def test_rms_norm_adds_each_rows_squares_in_order(rows):
    g = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, 96, generator=g) * torch.logspace(-3, 3, 96)  # magnitudes apart: the order shows
    weight = torch.randn(96, generator=g)
    got = invariant.rms_norm(x, weight, 1e-5).numpy()
    want = written_rms_norm(x.numpy(), weight.numpy(), 1e-5)
    assert np.array_equal(got.view(np.int32), want.view(np.int32))
