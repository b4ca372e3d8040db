"""benchmarks/gpu.py end to end on the CPU at toy size, and its one-line errors for input it cannot run."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

from helpers import torch_threads

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu.py"
TOY = ["--device", "cpu", "--preset", "tiny", "--prompts", "3", "--prompt-tokens", "12", "--max-new-tokens", "10",
       "--batch-sizes", "1", "2", "--rounds", "2"]


@pytest.fixture(scope="module")
def gpu() -> ModuleType:
    spec = importlib.util.spec_from_file_location("benchmarks_gpu", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def table_rows(out: str) -> dict[tuple[str, str], list[str]]:
    """(batch, decoding) -> the row's cells, from the printed Markdown table."""
    rows = {}
    for line in out.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0].isdigit():
            rows[(cells[0], cells[1])] = cells
    return rows


def test_a_float32_cpu_run_prints_every_method_with_exact_greedy_output(gpu, capsys) -> None:
    with torch_threads(1):
        assert gpu.main([*TOY, "--dtype", "float32"]) == 0
    out = capsys.readouterr().out
    assert "preset tiny" in out and "float32 on cpu" in out and "3 prompts x 12 tokens" in out
    rows = table_rows(out)
    assert set(rows) == {(b, m) for b in ("1", "2") for m in gpu.METHODS}
    for batch in ("1", "2"):
        regular, self_draft = rows[(batch, "quench")], rows[(batch, "quench-self-draft")]
        assert regular[3].endswith("x)") and self_draft[4].endswith("x)")  # two rounds' ratios and their median
        # float32: the engine's greedy tokens are generate's, and a draft that is the target is always accepted
        assert regular[6] == "3/3" and self_draft[6] == "3/3" and self_draft[7] == "3/3"
        assert self_draft[5] == "1.000"


def test_random_prompts_and_weights_follow_the_seed(gpu) -> None:
    prompts = gpu.random_prompts(4, 6, 512, seed=3)
    assert prompts == gpu.random_prompts(4, 6, 512, seed=3) != gpu.random_prompts(4, 6, 512, seed=4)
    assert all(len(p) == 6 and min(p) >= gpu.FIRST_ID and max(p) < 512 for p in prompts)
    shape = gpu.PRESETS["tiny"]
    first, again = (gpu.build_model(shape, "cpu", torch.float32, seed=1) for _ in range(2))
    assert torch.equal(first.lm_head.weight, again.lm_head.weight)
    assert first.config.hidden_size == 64 and first.dtype == torch.float32


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error given where CUDA is missing")
def test_cuda_without_cuda_is_a_one_line_error(gpu, capsys) -> None:
    assert gpu.main(["--device", "cuda", "--preset", "1b"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --device cuda: CUDA is not available") and err.count("\n") == 1


@pytest.mark.parametrize("argv, named", [
    (["--preset", "13b"], "--preset '13b'"),
    (["--rounds", "0"], "--rounds must be at least 1"),
    (["--batch-sizes", "8", "0"], "--batch-sizes must be at least 1"),
    (["--prompt-tokens", "4000", "--max-new-tokens", "128"], "past the tiny model's 4096 positions"),
    (["--dtype", "float16"], "--dtype 'float16'"),
    (["--device", "tpu"], "--device 'tpu'"),
    (["--rounds", "three"], "--rounds: invalid int value"),
])
def test_bad_input_is_a_one_line_error_before_any_model_is_built(gpu, capsys, monkeypatch, argv, named) -> None:
    monkeypatch.setattr(gpu, "build_model", lambda *args: pytest.fail("built a model for bad input"))
    assert gpu.main(["--device", "cpu", "--preset", "tiny", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and named in err and err.count("\n") == 1
