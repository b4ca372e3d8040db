"""Node's start-up snapshot: prepared once into the shared build cache, every JavaScript program
that starts node (no host: QUENCH_NODE_HOST=0) starts from it in the sandbox, no program can
change it, and a snapshot node refuses gives way to the plain start.

Runs in "bwrap" mode; skipped where the machine has no node with lodash.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Iterator

import pytest
from sandbox_helpers import skip_reason

from quench.datasets import Problem, load_benchmark
from quench.datasets import languages
from quench.datasets.languages import NODE_PATH, NODE_SNAPSHOT_REFUSED, node_snapshot_entry, node_snapshot_path
from quench.execution import Outcome, SandboxLimits, SandboxPool
from quench.execution import sandbox as sandbox_module
from quench.execution.toolchains import ENV_VAR, has_toolchain, prepare_node_snapshot, toolchain_dir
from quench.trusted_files import record


def needs_node() -> None:
    reason = skip_reason("bwrap")
    if reason is not None:
        pytest.skip(reason)
    if not has_toolchain("javascript"):
        pytest.skip("no node with lodash here")


@pytest.fixture(scope="module")
def snapshot() -> Path:
    needs_node()
    blob = prepare_node_snapshot()
    assert blob is not None, "node could not build its start-up snapshot"
    return blob


@pytest.fixture(scope="module")
def pool(snapshot: Path) -> Iterator[SandboxPool]:
    with pytest.MonkeyPatch.context() as patch:  # node starts for each program (no host), from the snapshot
        patch.setenv(sandbox_module.HOST_VAR, "0")
        with SandboxPool(2, SandboxLimits(timeout_s=12.0), isolation="bwrap") as sandbox:
            yield sandbox


def whole(text: str) -> str:
    return Problem("js", "", text, "", "main", language="javascript").reference_program()


def test_the_snapshot_is_named_after_the_node_binary(snapshot: Path) -> None:
    node = shutil.which("node")
    assert node is not None
    assert str(snapshot) == node_snapshot_path(toolchain_dir(), node)
    assert snapshot.stat().st_mode & 0o777 == 0o644
    assert prepare_node_snapshot() == snapshot  # prepared once: the second call finds it


def test_every_program_starts_from_the_prepared_snapshot(pool: SandboxPool, snapshot: Path) -> None:
    check = (f"const blob = {str(snapshot)!r};\n"
             "const i = process.execArgv.indexOf('--snapshot-blob');\n"
             "if (i < 0 || process.execArgv[i + 1] !== blob) { throw new Error('plain start: ' + process.execArgv); }\n"
             "if (!(require.resolve('lodash') in require.cache)) { throw new Error('lodash not loaded before'); }\n"
             "const _ = require('lodash');\n"
             "if (require.cache[require.resolve('lodash')].exports !== _ || require.main !== module) { process.exit(3); }\n")
    [result] = pool.run_many([whole(check)])
    assert result.outcome is Outcome.passed, result.detail


def test_no_program_can_change_the_snapshot(pool: SandboxPool, snapshot: Path) -> None:
    before = (snapshot.stat().st_mtime_ns, snapshot.stat().st_size)
    attack = (f"const fs = require('fs');\nconst blob = {str(snapshot)!r};\nlet changed = [];\n"
              "for (const how of [() => fs.writeFileSync(blob, 'x'), () => fs.appendFileSync(blob, 'x'),\n"
              "                   () => fs.truncateSync(blob, 0), () => fs.unlinkSync(blob),\n"
              "                   () => fs.renameSync(blob, blob + '.moved'), () => fs.chmodSync(blob, 0o666)]) {\n"
              "  try { how(); changed.push(how.toString()); } catch (e) {}\n}\n"
              "if (changed.length) { throw new Error('changed the snapshot: ' + changed.join('; ')); }\n")
    [result] = pool.run_many([whole(attack)])
    assert result.outcome is Outcome.passed, result.detail
    assert (snapshot.stat().st_mtime_ns, snapshot.stat().st_size) == before
    assert snapshot.stat().st_mode & 0o777 == 0o644


def test_verdicts_from_the_snapshot_are_those_of_the_plain_start(pool: SandboxPool) -> None:
    problems = [problem for problem in load_benchmark("mbjsp") if problem.canonical_solution][:6]
    programs = [problem.reference_program() for problem in problems]
    programs += [problem.program("    throw new Error('wrong');\n}\n") for problem in problems]
    programs += [problems[0].program("    return (;\n}\n")]
    outcomes = [result.outcome for result in pool.run_many(programs)]
    # MBJSP/17's reference fails its own test (under mxeval too); the rest pass, every wrong answer
    # fails, the unparsable one is a compile error
    expected = [Outcome.failed if problem.task_id == "MBJSP/17" else Outcome.passed for problem in problems]
    assert outcomes == expected + [Outcome.failed] * len(problems) + [Outcome.compile_error]


def write_foreign_snapshot(blob: Path, kind: str) -> None:
    """A file where the snapshot goes that node refuses: garbage, or one built under other V8 flags
    (as one built by another node version is refused)."""
    if kind == "garbage":
        blob.write_bytes(b"not a snapshot of this node" * 100)
        return
    entry = blob.with_name("entry.js")
    env = {"PATH": "/usr/bin:/bin", "NODE_PATH": NODE_PATH}
    lodash = subprocess.run(["node", "-p", "require.resolve('lodash')"], check=True, capture_output=True, text=True,
                            timeout=60, env=env).stdout.strip()
    entry.write_text(node_snapshot_entry(lodash), encoding="utf-8")
    command = ["node", "--max-semi-space-size=16", "--snapshot-blob", str(blob), "--build-snapshot", str(entry)]
    subprocess.run(command, check=True, capture_output=True, timeout=120, cwd=blob.parent, env=env)
    entry.unlink()


@pytest.mark.parametrize("kind", ["garbage", "other V8 flags"])
def test_a_snapshot_node_refuses_gives_way_to_the_plain_start(monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    needs_node()
    node = shutil.which("node")
    assert node is not None
    cache = Path.home() / ".cache" / "quench" / f"test-toolchains-{uuid.uuid4().hex[:8]}"  # not under /tmp: scratch
    blob = Path(node_snapshot_path(str(cache), node))
    try:
        blob.parent.mkdir(parents=True)
        for directory in (cache, blob.parent):
            directory.chmod(0o755)
        write_foreign_snapshot(blob, kind)
        blob.chmod(0o644)
        record(blob)  # as if quench had built it, so that the sandbox binds it and node refuses it
        monkeypatch.setenv(ENV_VAR, str(cache))
        monkeypatch.setitem(sandbox_module.WORKER_ENV, ENV_VAR, str(cache))
        check = ("const i = process.execArgv.indexOf('--snapshot-blob');\n"
                 "if (i >= 0) { process.exit(3); }\n"
                 "if (!require('lodash').isEqual([1], [1])) { process.exit(4); }\n")
        with SandboxPool(1, SandboxLimits(timeout_s=12.0), isolation="bwrap") as plain:
            passed, failed = plain.run_many([whole(check), whole("throw new Error('wrong');\n")])
        assert passed.outcome is Outcome.passed, passed.detail
        assert failed.outcome is Outcome.failed, failed.detail
        assert not any(mark in failed.detail for mark in NODE_SNAPSHOT_REFUSED), failed.detail
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def test_a_snapshot_that_does_not_run_the_program_is_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    needs_node()
    cache = Path.home() / ".cache" / "quench" / f"test-toolchains-{uuid.uuid4().hex[:8]}"
    broken = languages.NODE_SNAPSHOT_ENTRY.replace("  Module.runMain();\n", "")
    assert broken != languages.NODE_SNAPSHOT_ENTRY
    monkeypatch.setattr(languages, "NODE_SNAPSHOT_ENTRY", broken)
    monkeypatch.setenv(ENV_VAR, str(cache))
    try:
        assert prepare_node_snapshot() is None
        assert not list((cache / "javascript").glob("*.blob"))
    finally:
        shutil.rmtree(cache, ignore_errors=True)
