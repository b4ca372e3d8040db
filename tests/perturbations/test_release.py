"""ReCode's release format: our files read back losslessly; released prompts are kept byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quench.datasets import Problem
from quench.errors import QuenchError
from quench.perturbations import group_variants, perturb_problems, read_recode, write_set
from quench.perturbations.release import MARKER, file_name

SAMPLES = Path(__file__).resolve().parents[3] / "shared" / "data" / "recode-samples"


def natgen_row() -> dict:
    """A row as ReCode's natgen releases have it: marker line first, a blank-ish last prompt line."""
    return {
        "task_id": "HumanEval/0", "entry_point": "f", "test": "def check(candidate):\n    assert candidate(2) == 3\n",
        "prompt": 'def f(x):\n    """Add one."""\n    y = x\n               \n',
        "canonical_solution": f"{MARKER}\n    return y + 1\n",
        "partial": f'def f(x):\n    """ Add one."""\n    y = x\n    {MARKER}\n    return y + 1\n',
    }


def test_reading_a_natgen_row(tmp_path: Path, runner) -> None:
    path = tmp_path / "humaneval_ForWhileTransformer_s3.jsonl"
    path.write_text(json.dumps(natgen_row()) + "\n")
    [problem] = read_recode(path)
    assert problem.prompt == 'def f(x):\n    """Add one."""\n    y = x\n               \n'  # byte for byte
    assert problem.canonical_solution == "    return y + 1\n"
    assert (problem.benchmark, problem.prompt_kind) == ("humaneval", "partial")
    assert dict(problem.extra) == {"perturbation": "ForWhileTransformer", "category": "code_syntax", "seed": "3",
                                   "source": "recode"}
    assert runner.run_many([problem.reference_program()])[0].passed


def test_round_trip(problem: Problem, tmp_path: Path) -> None:
    transforms = ["ButterFingersPerturbation", "FuncRenameSwapChar", "VarRenamerNaive", "new_lines"]
    result = perturb_problems([problem], transforms, seeds=2, validate_variants=False)
    paths = write_set(result, tmp_path, "test")
    assert (tmp_path / file_name("test", "VarRenamerNaive", 1)).is_file() and paths[-1].name == "summary.json"
    natgen = json.loads((tmp_path / "test_VarRenamerNaive_s0.jsonl").read_text())
    assert natgen["canonical_solution"].startswith(MARKER) and MARKER in natgen["partial"]
    back = group_variants(read_recode(tmp_path))
    assert set(back) == set(result.variants)
    for key, variants in result.variants.items():
        assert [(p.prompt, p.canonical_solution, p.entry_point) for p in back[key]] == [
            (p.prompt, p.canonical_solution, p.entry_point) for p in variants]


def test_bad_names_and_paths(tmp_path: Path) -> None:
    with pytest.raises(QuenchError, match="not a ReCode file name"):
        (tmp_path / "x.jsonl").write_text("")
        read_recode(tmp_path / "x.jsonl")
    with pytest.raises(QuenchError, match="no ReCode files"):
        read_recode(tmp_path)


@pytest.mark.skipif(not SAMPLES.is_dir(), reason="shared ReCode samples not present")
def test_reading_the_released_samples(runner) -> None:
    groups = group_variants(read_recode(SAMPLES))
    assert {k: len(v) for k, v in groups.items()} == {
        ("ButterFingersPerturbation", 0): 164, ("ForWhileTransformer", 0): 164,
        ("FuncRenameCamelCase", 0): 164, ("doc2comments", 0): 164}
    some = [p for v in groups.values() for p in v[:8]]
    assert all(r.passed for r in runner.run_many([p.reference_program() for p in some]))
