"""--device is checked before anything loads: a CUDA device on a CPU-only torch is one `error:` line and
exit code 2, without importing torch (seconds on a busy machine) or loading the model."""

from __future__ import annotations

import subprocess
import sys

import pytest

from quench.cli.validate import check_device, torch_build
from quench.errors import QuenchError

CPU_ONLY = torch_build().get("cuda") is None

PROBE = """
import sys
from quench.cli.main import main
code = main(sys.argv[1:])
print(code, "torch" in sys.modules)
"""


@pytest.mark.skipif(not CPU_ONLY, reason="needs a CPU-only torch build")
@pytest.mark.parametrize("argv", [["run", "--device", "cuda"], ["robustness", "--device", "cuda:1"],
                                  ["generate", "--device", "cuda"], ["serve", "--device", "cuda"]])
def test_cuda_on_a_cpu_only_torch_is_refused_before_torch_loads(argv, tmp_path):
    done = subprocess.run([sys.executable, "-c", PROBE, *argv, *(["--out", str(tmp_path / "out")] if argv[0] != "serve" else [])],
                          capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["2", "False"], done.stdout + done.stderr  # exit 2, torch never imported
    lines = done.stderr.strip().splitlines()
    assert lines == [f"error: --device {argv[2]}: the installed torch ({torch_build()['__version__']}) is a CPU-only "
                     "build; use --device cpu, or install a CUDA build of torch"]
    assert not (tmp_path / "out").exists()


def test_device_names_are_checked_without_torch():
    check_device("cpu")
    for bad in ("tpu", "cuda:x", "gpu", "cpu:0:1"):
        with pytest.raises(QuenchError, match=f"--device '{bad}': not a device quench runs models on"):
            check_device(bad)


def test_the_build_record_matches_torch():
    import torch

    assert torch_build()["__version__"] == torch.__version__ and torch_build().get("cuda") == torch.version.cuda
