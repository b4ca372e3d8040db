"""`quench evaluate` runs each problem's samples under the limit calibrated from its reference, and
records the calibration in the run directory's config.json; `--timeout-factor 0` is the fixed limit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sandbox_helpers import skip_reason

from quench.cli.main import main
from quench.execution.limits import limit_for
from quench.runs import rundir

BASE_S = 0.6  # --timeout: below what the slow problem's reference takes, so its limit is k times that
REFERENCE_SLEEP_S = 0.5
# A sample that takes about twice its reference: within k = 4 times the reference, past the base.
SLOW = {"task_id": "slow/0", "prompt": "import time\n\n\ndef work():\n",
        "canonical_solution": f"    time.sleep({REFERENCE_SLEEP_S})\n    return 1\n",
        "test": "def check(f):\n    assert f() == 1\n", "entry_point": "work"}
QUICK = {"task_id": "quick/0", "prompt": "def one():\n", "canonical_solution": "    return 1\n",
         "test": "def check(f):\n    assert f() == 1\n", "entry_point": "one"}
BARE = {**QUICK, "task_id": "bare/0", "canonical_solution": ""}  # no reference: T_base
SAMPLES = [
    {"task_id": "slow/0", "completion": f"    time.sleep({2 * REFERENCE_SLEEP_S})\n    return 1\n"},
    {"task_id": "quick/0", "completion": "    return 1\n"},
    {"task_id": "bare/0", "completion": "    return 2\n"},
]


@pytest.fixture(autouse=True)
def sandbox() -> None:
    if skip_reason("bwrap") and skip_reason("rlimits"):
        pytest.skip(skip_reason("bwrap"))


@pytest.fixture
def inputs(tmp_path: Path) -> tuple[Path, Path]:
    benchmark, samples = tmp_path / "problems.jsonl", tmp_path / "samples.jsonl"
    benchmark.write_text("".join(json.dumps(row) + "\n" for row in (SLOW, QUICK, BARE)))
    samples.write_text("".join(json.dumps(row) + "\n" for row in SAMPLES))
    return benchmark, samples


def evaluate(benchmark: Path, samples: Path, out: Path, *extra: str) -> int:
    return main(["evaluate", str(samples), "--benchmark", str(benchmark), "--out", str(out), "--workers", "2",
                 "--k", "1", "--timeout", str(BASE_S), *extra])


def results(out: Path) -> dict[str, dict]:
    return {row["task_id"]: row for row in map(json.loads, (out / "results.jsonl").read_text().splitlines())}


def calibration(out: Path) -> dict:
    return json.loads((out / "config.json").read_text())["calibration"]


def test_each_problem_runs_under_its_calibrated_limit_recorded_in_config_json(inputs, tmp_path):
    out = tmp_path / "out"
    assert evaluate(*inputs, out) == 0
    recorded = calibration(out)
    assert (recorded["base_s"], recorded["factor"]) == (BASE_S, 4.0)
    assert set(recorded["timeouts"]) == {"slow/0", "quick/0"}  # bare/0 has no reference: it runs under T_base
    reference = recorded["reference_seconds"]
    assert reference["slow/0"] >= REFERENCE_SLEEP_S and reference["quick/0"] < BASE_S / 4
    assert recorded["timeouts"] == {task: limit_for(reference[task], BASE_S) for task in reference}
    assert recorded["timeouts"]["quick/0"] == BASE_S  # a fast reference: the base is the floor
    verdicts = results(out)
    assert verdicts["slow/0"]["outcome"] == "passed", verdicts["slow/0"]  # twice the reference, past T_base
    assert (verdicts["quick/0"]["outcome"], verdicts["bare/0"]["outcome"]) == ("passed", "failed")


def test_timeout_factor_0_gives_every_program_the_fixed_timeout(inputs, tmp_path):
    out = tmp_path / "out"
    assert evaluate(*inputs, out, "--timeout-factor", "0") == 0
    slow = results(out)["slow/0"]
    assert slow["outcome"] == "timeout" and f"{BASE_S:g} s" in slow["detail"], slow
    assert not (out / "config.json").exists()  # nothing calibrated, nothing recorded


def test_a_resumed_run_reads_the_reference_times_from_config_json(inputs, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    recorded = {"base_s": 9.0, "factor": 2.0, "timeouts": {"slow/0": 18.0, "other/0": 9.0},
                "reference_seconds": {"slow/0": 2.0, "other/0": None}}
    (out / "config.json").write_text(json.dumps({"benchmark": "kept", "calibration": recorded}))
    assert evaluate(*inputs, out) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["benchmark"] == "kept"  # the run's settings stay beside the calibration
    again = config["calibration"]
    # slow/0 is not measured again; its recorded time takes this run's base and factor
    assert again["reference_seconds"]["slow/0"] == 2.0 and again["timeouts"]["slow/0"] == 8.0
    assert again["reference_seconds"]["other/0"] is None and again["timeouts"]["other/0"] == BASE_S
    assert again["reference_seconds"]["quick/0"] < BASE_S / 4  # measured: it was not recorded


def test_a_recorded_calibration_is_not_a_changed_setting_on_resume(tmp_path):
    settings = {"benchmark": "humaneval", "n": 1}
    rundir.prepare_run_dir(tmp_path, settings)
    rundir.release_run_dirs()
    with_calibration = {**settings, "calibration": {"base_s": 10.0, "factor": 4.0, "timeouts": {}, "reference_seconds": {}}}
    (tmp_path / "config.json").write_text(json.dumps(with_calibration))
    try:
        rundir.prepare_run_dir(tmp_path, settings)  # resumes: no "other settings" error
    finally:
        rundir.release_run_dirs()
    assert json.loads((tmp_path / "config.json").read_text()) == with_calibration
