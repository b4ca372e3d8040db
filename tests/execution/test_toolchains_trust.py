"""The build cache is loaded only when this user made it: a planted or modified file is removed and
rebuilt, a file or directory of another uid, or writable by others, is refused with an error, and a
sandbox binds the cache only when everything in it passes (quench.trusted_files)."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import Iterator

import pytest
from sandbox_helpers import skip_reason

from quench.datasets import load_benchmark
from quench.errors import QuenchError
from quench.execution import Outcome, SandboxLimits, SandboxPool
from quench.execution import sandbox as sandbox_module
from quench.execution.toolchains import ENV_VAR, has_toolchain, prepare, prepare_node_snapshot, sandbox_binds, sweep
from quench.trusted_files import UntrustedFileError, digest, sidecar, tree_problems

# Shadows the real header on the prepared build's include path: every program exits 0 before main.
PLANTED_HEADER = "#include_next <bits/stdc++.h>\nstruct Planted { Planted() { std::exit(0); } } planted;\n"


@pytest.fixture()
def cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty build cache of its own, outside /tmp (the sandbox's scratch), for quench and its sandboxes."""
    directory = Path.home() / ".cache" / "quench" / f"test-toolchains-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv(ENV_VAR, str(directory))
    monkeypatch.setitem(sandbox_module.WORKER_ENV, ENV_VAR, str(directory))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture()
def snapshot(cache: Path) -> Path:
    """A node start-up snapshot prepared in `cache` (the cheapest real build)."""
    if not has_toolchain("javascript"):
        pytest.skip("no node with lodash here")
    built = prepare_node_snapshot()
    assert built is not None
    return built


def test_what_quench_builds_carries_its_hash_and_is_bound(snapshot: Path, cache: Path) -> None:
    assert sidecar(snapshot).read_text().strip() == digest(snapshot)
    assert tree_problems(cache) == []
    assert str(cache) in sandbox_binds()


def test_a_modified_snapshot_is_not_bound_and_is_rebuilt(snapshot: Path, cache: Path) -> None:
    good = snapshot.read_bytes()
    snapshot.write_bytes(good[:-16] + b"\0" * 16)
    assert str(cache) not in sandbox_binds()
    assert prepare_node_snapshot() == snapshot
    assert snapshot.read_bytes()[-16:] != b"\0" * 16 and sidecar(snapshot).read_text().strip() == digest(snapshot)
    assert str(cache) in sandbox_binds()


def test_a_planted_file_is_not_bound_and_preparing_removes_it(cache: Path) -> None:
    (cache / "cpp" / "bits").mkdir(parents=True)
    planted = cache / "cpp" / "bits" / "stdc++.h"
    planted.write_text(PLANTED_HEADER, encoding="ascii")
    assert str(cache) not in sandbox_binds()
    sweep()
    assert not planted.exists() and str(cache) in sandbox_binds()


def test_a_planted_header_cannot_make_a_wrong_cpp_answer_pass(cache: Path) -> None:
    if skip_reason("bwrap") is not None or not has_toolchain("cpp"):
        pytest.skip("needs bubblewrap and g++")
    (cache / "cpp" / "bits").mkdir(parents=True)
    for directory in (cache, cache / "cpp", cache / "cpp" / "bits"):
        directory.chmod(0o755)
    planted = cache / "cpp" / "bits" / "stdc++.h"
    planted.write_text(PLANTED_HEADER, encoding="ascii")
    planted.chmod(0o644)
    problem = load_benchmark("mbcpp")[0]
    with SandboxPool(1, SandboxLimits(timeout_s=60.0), isolation="bwrap") as pool:
        [wrong] = pool.run_many([problem.program('    throw runtime_error("wrong");\n}\n')])
    assert wrong.outcome is Outcome.failed, wrong.detail


def test_a_group_writable_directory_is_refused_with_an_error_naming_it(snapshot: Path, cache: Path) -> None:
    snapshot.parent.chmod(0o775)
    assert str(cache) not in sandbox_binds()
    with pytest.raises(UntrustedFileError) as raised:
        prepare("javascript")
    assert isinstance(raised.value, QuenchError)
    assert str(snapshot.parent) in str(raised.value) and "writable by group" in str(raised.value)
    snapshot.parent.chmod(0o755)
    assert str(cache) in sandbox_binds()


def test_a_file_of_another_uid_is_refused_with_an_error_naming_it(snapshot: Path, cache: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("giving a file to another uid needs root")
    os.chown(snapshot, 65534, 65534)
    assert str(cache) not in sandbox_binds()
    for preparation in (prepare_node_snapshot, sweep):
        with pytest.raises(UntrustedFileError) as raised:
            preparation()
        assert str(snapshot) in str(raised.value) and "owned by uid 65534" in str(raised.value)
    assert snapshot.exists()  # refused, never removed
