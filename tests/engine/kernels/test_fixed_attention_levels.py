"""The fixed attention (ROUTE_FIXED) gives the same bits at every kernel level this CPU runs: the scalar build, the
AVX2 pair kernel and the AVX-512 one, at head sizes the self-test does not hold (128, 256: Gemma 3's) and at 64, for
float32 and bfloat16 caches, with ragged rows mixing a prefill, a verification and decode steps. Each level runs in
its own process (QUENCH_NATIVE_MARCH picks the build). float32 rows also run over bfloat16 caches."""

import hashlib

import pytest
import torch

from quench.engine.kernels import native
from quench.native_target import this_cpu_levels
from tests.helpers import stdout_at_level

pytestmark = pytest.mark.skipif(not native.available(torch.float32), reason=native.build_result().reason)

LEVELS = this_cpu_levels()

SCRIPT = r"""
import hashlib, torch
from quench.engine.kernels import native
torch.set_num_threads(2)
digest = hashlib.sha256()
for dtype, cache_dtype in ((torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16), (torch.float32, torch.bfloat16)):
    for head in (64, 128, 256):
        g = torch.Generator().manual_seed(head)
        B, H, Hkv, T = 4, 6, 2, 96
        start = torch.tensor([0, 37, 80, 61], dtype=torch.int64)
        counts = torch.tensor([33, 5, 1, 0], dtype=torch.int64)  # a prefill, a verification, a step, nothing
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64), counts.cumsum(0)])
        qkv = (torch.randn(int(counts.sum()), H + 2 * Hkv, head, generator=g) * 3).to(dtype)
        keys = torch.randn(B, Hkv, T, head, generator=g).to(cache_dtype)
        values = torch.randn(B, Hkv, T, head, generator=g).to(cache_dtype)
        cos, sin = (torch.rand(T, head, generator=g).to(dtype) for _ in range(2))
        out = native.rope_attend(qkv, keys, values, cos, sin, start, offsets, H, head ** -0.5, amx=False, fixed=True)
        for tensor in (out, keys, values):
            digest.update(tensor.contiguous().view(torch.uint8).numpy().tobytes())
print(digest.hexdigest())
"""


@pytest.mark.skipif(len(LEVELS) < 2, reason="this CPU runs one x86 level or none: nothing to compare")
def test_every_level_gives_the_fixed_attention_the_same_bits():
    digests = {level: stdout_at_level(SCRIPT, level) for level in LEVELS}
    assert len(set(digests.values())) == 1, digests
    assert len(next(iter(digests.values()))) == len(hashlib.sha256().hexdigest())
