"""The scripts in benchmarks/ run with that directory first on sys.path: no name there may shadow a module
that the libraries they load import (transformers imports `kernels` when it can find one)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_a_benchmark_script_can_load_transformers_llama_modules() -> None:
    # what `python benchmarks/x.py` sees: the script's directory first on the path
    code = ("import sys; sys.path.insert(0, sys.argv[1]); "
            "import transformers.models.llama.configuration_llama, transformers.models.llama.modeling_llama")
    result = subprocess.run([sys.executable, "-c", code, str(BENCHMARKS)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
