"""quench confines every program or refuses to run it: bubblewrap, else a drop to nobody, else an error.

The machines differ (bubblewrap or not, root or not, an interpreter nobody can read or not), so
each test builds the situation it needs from real parts: a PATH without bwrap, a venv in a
directory only root can enter, a venv under /tmp, a pid namespace whose init is the caller.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from sandbox_helpers import FAST, MODES, mode_python, nobody_python, open_pool, skip_reason
from quench.errors import QuenchError
from quench.execution import Outcome, SandboxPool, choose_isolation
from quench.execution.uids import UID_BASE

WHO = "import os, sys\nprint(os.getuid(), sys.prefix)\nraise SystemExit(0)"


def make_venv(parent: Path) -> str:
    """A venv (no pip) under `parent`, made from this interpreter; its python's path."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(parent / "venv")], check=True, timeout=120)
    return str(parent / "venv" / "bin" / "python")


@pytest.fixture
def no_bwrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A PATH on which bubblewrap cannot be found, as on a machine without it."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


@pytest.fixture
def locked_python(tmp_path: Path) -> str:
    """An interpreter that nobody cannot read (a venv in a 0700 directory), as under /root or a home."""
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o700)
    return make_venv(locked)


def test_refuses_to_run_unconfined(no_bwrap: None, locked_python: str) -> None:
    with pytest.raises(QuenchError) as refused:
        SandboxPool(1, FAST, python=locked_python)
    message = str(refused.value)
    assert message.startswith("cannot confine the programs to run: bubblewrap (bwrap) is not installed, and ")
    assert "apt-get install bubblewrap" in message and "--unsafe-unconfined" in message
    with pytest.raises(QuenchError, match="isolation bwrap: bubblewrap \\(bwrap\\) is not installed"):
        choose_isolation("bwrap", python=locked_python)


def test_explicit_opt_in_runs_unconfined_and_says_so(
    no_bwrap: None, locked_python: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING), SandboxPool(1, FAST, python=locked_python, allow_unconfined=True) as pool:
        assert (pool.isolation, pool.confined) == ("unconfined", False)
        [result] = pool.run_many(["import os\nassert os.getuid() == %d" % os.geteuid()])
    assert result.passed, result.detail
    assert "UNCONFINED SANDBOX (opted in)" in caplog.text


def test_without_bubblewrap_programs_drop_to_a_uid_of_their_own(no_bwrap: None, caplog: pytest.LogCaptureFixture) -> None:
    if nobody_python() is None:
        pytest.skip(skip_reason("rlimits"))
    with caplog.at_level(logging.WARNING):
        assert choose_isolation("auto", python=nobody_python()) == "rlimits"
    assert "bubblewrap (bwrap) is not installed: programs run as a uid of their own" in caplog.text
    with SandboxPool(1, FAST, python=nobody_python()) as pool:
        [uid] = pool.worker_uids()
        [result] = pool.run_many([f"import os\nassert os.getuid() == {uid}\nopen('/etc/passwd', 'a')"])
    assert uid >= UID_BASE
    assert result.outcome is Outcome.failed and result.detail.startswith("PermissionError"), result.detail


def test_an_interpreter_under_tmp_is_confined_by_bubblewrap() -> None:
    if skip_reason("bwrap"):
        pytest.skip(skip_reason("bwrap"))
    with tempfile.TemporaryDirectory(dir="/tmp", prefix="quench-clone-") as clone:
        python = make_venv(Path(clone))
        prefix = str(Path(clone) / "venv")
        assert choose_isolation("auto", python=python) == "bwrap"
        vandal = (
            "import os\n"
            f"for attempt in (lambda: open({prefix!r} + '/x', 'w'), lambda: os.chmod({clone!r}, 0),\n"
            f"                lambda: os.rename({clone!r}, '/tmp/moved')):\n"
            "    try:\n        attempt()\n    except OSError:\n        pass\n"
        )
        check = f"import os, sys\nassert sys.prefix == {prefix!r}, sys.prefix\nassert os.getuid() == 65534"
        with SandboxPool(1, FAST, isolation="bwrap", python=python) as pool:
            results = pool.run_many([check, vandal, check, "open('leftover', 'w')", check])
        assert [r.outcome for r in results] == [Outcome.passed] * 5, results
        assert sorted(os.listdir(prefix)) == ["bin", "include", "lib", "lib64", "pyvenv.cfg"][: len(os.listdir(prefix))]
        assert not os.path.exists(os.path.join(prefix, "x"))


PID_1_SCRIPT = """
import json, os, sys
from quench.execution import SandboxLimits, SandboxPool
mode, python = sys.argv[1], sys.argv[2] or None
with SandboxPool(1, SandboxLimits(timeout_s=2), isolation=mode, python=python) as pool:
    killer = "import os\\ntry:\\n    os.kill(-1, 9)\\nexcept ProcessLookupError:\\n    pass"  # none it may signal
    outcomes = [r.outcome.value for r in pool.run_many(["assert True", "assert False", killer, "assert True"])]
print(json.dumps({"pid": os.getpid(), "isolation": pool.isolation, "outcomes": outcomes}))
"""


def pid_namespace_reason() -> str | None:
    """Why this test cannot start a process as pid 1 of a new pid namespace here, or None."""
    if shutil.which("unshare") is None:
        return "no unshare(1) here"
    done = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, timeout=30)
    return None if done.returncode == 0 else f"cannot create a pid namespace here: {done.stderr.decode()[-200:]}"


@pytest.mark.parametrize("mode", MODES)
def test_a_caller_that_is_pid_1(mode: str) -> None:
    """As in `docker run … quench evaluate`: the pool's process is its pid namespace's init."""
    for reason in (skip_reason(mode), pid_namespace_reason()):
        if reason:
            pytest.skip(reason)
    command = ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", PID_1_SCRIPT, mode, mode_python(mode) or ""]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.splitlines()[-1])
    assert report == {"pid": 1, "isolation": mode, "outcomes": ["passed", "failed", "passed", "passed"]}


def cli(python: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([python, "-m", "quench.cli.main", *args], capture_output=True, text=True, timeout=300, env=env)


def test_the_cli_refuses_before_any_work_unless_told(tmp_path: Path, locked_python: str) -> None:
    samples = tmp_path / "samples.jsonl"
    samples.write_text(json.dumps({"task_id": "HumanEval/0", "completion": "    return False\n"}) + "\n")
    before = samples.read_bytes()
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    # quench itself runs from the locked venv; its modules come from this environment's path.
    env = {**os.environ, "PATH": str(empty), "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    out = tmp_path / "out"
    refused = cli(locked_python, "evaluate", str(samples), "--out", str(out), "--workers", "1", env=env)
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert refused.stderr.splitlines()[-1].startswith("error: cannot confine the programs to run: ")
    assert "Traceback" not in refused.stderr
    assert not out.exists() and samples.read_bytes() == before
    allowed = cli(locked_python, "evaluate", str(samples), "--out", str(out), "--workers", "1", "--unsafe-unconfined",
                  env=env)
    assert allowed.returncode == 0, allowed.stderr[-2000:]
    assert "UNCONFINED SANDBOX (opted in)" in allowed.stderr
    assert [json.loads(line)["outcome"] for line in (out / "results.jsonl").read_text().splitlines()] == ["failed"]


@pytest.mark.slow  # a CLI run that loads torch and a tiny model
def test_an_unconfined_run_is_recorded_in_config_json(tmp_path: Path, locked_python: str) -> None:
    from helpers import save_tiny_model

    model = save_tiny_model(tmp_path / "tiny")
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    env = {**os.environ, "PATH": str(empty), "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    out = tmp_path / "run"
    args = ["run", "--model", str(model), "--tasks", "0", "--max-new-tokens", "4", "--batch-size", "1",
            "--workers", "1", "--k", "1", "--out", str(out), "--unsafe-unconfined"]
    done = cli(locked_python, *args, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((out / "config.json").read_text())["unsafe_unconfined"] is True
