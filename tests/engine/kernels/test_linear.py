"""`Linear` packs for oneDNN only what oneDNN runs on this CPU."""

import os
import subprocess
import sys

SCRIPT = r"""
import torch
import torch.nn.functional as F
from quench.engine.kernels.linear import Linear
weight = torch.randn(48, 64, generator=torch.Generator().manual_seed(0)).bfloat16()
x = torch.randn(3, 64, generator=torch.Generator().manual_seed(1)).bfloat16()
linear = Linear(weight, None, prepack=True)
assert not linear.packed
assert torch.equal(F.linear(x, weight), F.linear(x, linear.weight))
print("ok")
"""


def test_bfloat16_weights_stay_unpacked_where_onednn_runs_no_bfloat16():
    """oneDNN held to AVX2 (as on a CPU without AVX-512) refuses to reorder bfloat16 weights: the projection keeps
    them as they are instead of failing."""
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2"}
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"
