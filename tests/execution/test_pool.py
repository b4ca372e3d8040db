"""SandboxPool behaviour: ordering, keys, lifecycle, restarts, determinism, a torch-loaded caller."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import time

import pytest

from sandbox_helpers import FAST, available, nobody_python, open_pool, pool_processes, process_tree
from quench.errors import QuenchError
from quench.execution import ExecutionResult, Outcome, SandboxLimits, SandboxPool, choose_isolation
from quench.execution.sandbox import fork_server_script, without_quench_imports

PASS, FAIL, LOOP = "assert True", "assert False, 'no'", "while True:\n    pass"


def test_run_many_keeps_the_order(pool: SandboxPool) -> None:
    programs = [PASS, FAIL, "x = 1 +", PASS, "raise KeyError('k')"] * 3
    outcomes = [result.outcome for result in pool.run_many(programs)]
    expected = [Outcome.passed, Outcome.failed, Outcome.syntax_error, Outcome.passed, Outcome.failed] * 3
    assert outcomes == expected
    assert pool.run_many([]) == []


def test_imap_yields_every_key_once(pool: SandboxPool) -> None:
    items = [(("task", i), PASS if i % 2 else FAIL) for i in range(12)]
    results = dict(pool.imap(items))
    assert sorted(results) == sorted(key for key, _ in items)
    assert all(result.passed == (key[1] % 2 == 1) for key, result in results.items())


def test_results_do_not_depend_on_the_number_of_workers() -> None:
    programs = [
        "import sys\nassert sys.flags.hash_randomization == 0",  # PYTHONHASHSEED=0 in every worker
        "assert list({'b', 'a', 'c'}) == sorted({'b', 'a', 'c'}, key=hash)",
        PASS,
        FAIL,
    ] * 4
    with SandboxPool(1, FAST) as one, SandboxPool(3, FAST) as three:
        assert [r.outcome for r in one.run_many(programs)] == [r.outcome for r in three.run_many(programs)]


def test_random_is_fresh_in_every_run(pool: SandboxPool) -> None:
    results = pool.run_many(["import random\nraise ValueError(random.random())"] * 4)
    assert len({result.detail for result in results}) == 4


def test_abandoning_imap_leaves_no_program_running(pool: SandboxPool) -> None:
    items = iter([("fast", PASS), ("slow", LOOP), ("slower", LOOP)])
    start = time.monotonic()
    for key, result in pool.imap(items):
        assert (key, result.outcome) == ("fast", Outcome.passed)
        break
    assert time.monotonic() - start < pool.limits.timeout_s
    per_worker = 2 if pool.isolation == "bwrap" else 1
    assert len(pool_processes(pool)) == pool.workers * per_worker
    assert pool.run_many([PASS])[0].passed


def test_close_leaves_no_process() -> None:
    pool = SandboxPool(2, FAST)
    with pool:
        pool.run_many([PASS, "import subprocess\nsubprocess.Popen(['sleep', '30'], start_new_session=True)"])
        tree = pool_processes(pool)
        assert len(tree) >= 2
    assert [pid for pid in tree if os.path.exists(f"/proc/{pid}")] == []
    assert pool.worker_pids() == []


def test_no_scratch_directory_survives_a_killed_worker() -> None:
    if not available("rlimits"):
        pytest.skip("the rlimits mode cannot run here")
    with open_pool("rlimits", workers=1) as pool:
        assert pool.run_many([PASS])[0].passed
        servers = set(pool.worker_pids())
        assert any(glob.glob(f"/tmp/quench-sandbox-{pid}-*") for pid in servers)  # the directories this test watches
        os.kill(pool.worker_pids()[0], 9)
        time.sleep(0.1)
        assert pool.run_many([PASS])[0].passed
        servers |= set(pool.worker_pids())
    # only this pool's fork servers' directories: tests on the other xdist worker run sandboxes of their own
    assert [path for pid in servers for path in glob.glob(f"/tmp/quench-sandbox-{pid}-*")] == []


def test_a_closed_pool_starts_again_on_use() -> None:
    pool = SandboxPool(1, FAST)
    assert pool.run_many([PASS])[0].passed  # without `with`: starts lazily
    pool.close()
    assert pool.run_many([PASS])[0].passed
    pool.close()


def test_a_worker_killed_from_outside_is_replaced(pool: SandboxPool) -> None:
    victim = pool.worker_pids()[0]
    for pid in reversed(process_tree(victim)):
        os.kill(pid, 9)
    time.sleep(0.1)
    results = pool.run_many([PASS] * 4)
    assert all(result.outcome in (Outcome.passed, Outcome.crashed) for result in results)
    assert all(result.passed for result in pool.run_many([PASS] * 4))


@pytest.mark.parametrize("mode", ["bwrap", "rlimits"])
def test_isolation_is_recorded(mode: str) -> None:
    if not available(mode):
        pytest.skip(f"the {mode} mode cannot run here")
    with open_pool(mode, workers=1) as pool:
        assert pool.isolation == mode
        assert pool.confined


def test_isolation_choice() -> None:
    if nobody_python() is not None:
        assert choose_isolation("rlimits", python=nobody_python()) == "rlimits"
    assert choose_isolation("auto", allow_unconfined=True) in ("bwrap", "rlimits", "unconfined")
    with pytest.raises(QuenchError, match="unknown isolation"):
        choose_isolation("docker")


@pytest.mark.parametrize(
    "bad", [{"timeout_s": 0}, {"timeout_s": -1.0}, {"memory_mb": 0}, {"max_processes": 0}, {"output_bytes": 0}]
)
def test_limits_are_validated(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        SandboxLimits(**bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        SandboxPool(0)


def test_result_json() -> None:
    result = ExecutionResult(Outcome.failed, "AssertionError (line 3)", 0.123456)
    assert result.to_json() == {"outcome": "failed", "detail": "AssertionError (line 3)", "seconds": 0.1235}
    assert not result.passed and ExecutionResult(Outcome.passed).passed
    assert Outcome("timeout") is Outcome.timeout and f"{Outcome.memory}" == "memory"


@pytest.mark.slow  # importing torch takes a few seconds
def test_usable_from_a_process_with_torch_loaded() -> None:
    pytest.importorskip("torch")
    script = (
        "import torch\n"
        "from quench.execution import SandboxPool, SandboxLimits\n"
        "with SandboxPool(2, SandboxLimits(timeout_s=2)) as pool:\n"
        "    results = pool.run_many(['assert True', 'assert False'] * 4)\n"
        "assert [r.passed for r in results] == [True, False] * 4, results\n"
        "print('ok', pool.isolation)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok")


def test_the_fork_server_script_runs_without_quench(tmp_path) -> None:
    """The worker's script is node_host.py then forkserver.py with no import of quench left: it
    defines what the fork server takes from node_host and runs under `python -s -P` anywhere."""
    script = fork_server_script()
    assert not [line for line in script.splitlines() if "quench" in line and line.lstrip().startswith(("from", "import"))]
    probe = script.replace('if __name__ == "__main__":', "if False:") + "\nprint(NodeHost.__name__, SANDBOX_EXIT, kill_group.__name__)\n"
    done = subprocess.run([sys.executable, "-s", "-P", "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["NodeHost", "125", "kill_group"]


def test_pools_started_in_several_threads_at_once_parse_the_script_once(monkeypatch) -> None:
    """CPython 3.11 can fail two threads' ast.parse calls at once (SystemError, gh-106905): the script is built once,
    under a lock, however many pools start together."""
    import threading

    from quench.execution import sandbox

    parsed, barrier = [], threading.Barrier(6)

    def slow_parse(source: str) -> str:
        parsed.append(source)
        time.sleep(0.02)  # a parse still running when the other threads arrive
        return without_quench_imports(source)

    monkeypatch.setattr(sandbox, "without_quench_imports", slow_parse)
    sandbox._fork_server_script.cache_clear()
    scripts = []

    def start() -> None:
        barrier.wait()
        scripts.append(sandbox.fork_server_script())

    threads = [threading.Thread(target=start) for _ in range(6)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sandbox._fork_server_script.cache_clear()
    assert len(scripts) == 6 and len(set(scripts)) == 1
    assert len(parsed) == len(sandbox.SCRIPT_PARTS)


def test_quench_imports_are_removed_whole() -> None:
    source = "import os\nfrom quench.execution.node_host import (  # x\n    a,\n    b,\n)\nfrom os import path\nx = 1\n"
    assert without_quench_imports(source) == "import os\n\n\n\n\nfrom os import path\nx = 1\n"
