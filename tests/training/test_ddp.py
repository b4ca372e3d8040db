"""Two processes with torchrun (gloo on CPU): they finish, exit, and hold identical weights."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

WORKER = Path(__file__).parent / "ddp_worker.py"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_two_process_ddp(tmp_path):
    out = tmp_path / "ddp"
    torchrun = Path(sys.executable).parent / "torchrun"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([str(torchrun), "--standalone", "--nproc_per_node", "2", str(WORKER), str(out)],
                          capture_output=True, text=True, timeout=110, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rank 0: 2 steps, finished True" in done.stdout and "rank 1: 2 steps, finished True" in done.stdout
    a, b = torch.load(out / "rank0.pt"), torch.load(out / "rank1.pt")
    assert all(torch.equal(a[k], b[k]) for k in a)  # DDP kept the replicas in step
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert [row["step"] for row in log] == [1, 2] and all(row["alp"] > 0 and row["seq"] > 0 for row in log)
    assert len(torch.load(out / "state" / "rng.pt", weights_only=False)) == 2  # one RNG state per process
    assert (out / "model.safetensors").is_file() and (out / "quench.json").is_file()
