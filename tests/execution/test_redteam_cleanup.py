"""Red team against cleanup: what a program builds in its scratch space is removed, and no verdict is lost to it.

Deep trees, unreadable and unwritable directories, symlinks (to a directory outside, in a loop)
and 10^5 files, each in a one-worker pool per mode; the programs after it must get the verdicts
they get alone, the worker must survive, and closing the pool must leave nothing and raise nothing.
A worker sabotaged from outside (its scratch made undeletable) is replaced, and the program that
met it runs again in a fresh one.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import textwrap
from typing import Iterator

import pytest
from sandbox_helpers import MODES, open_pool, skip_reason

from quench.execution import Outcome, SandboxLimits, SandboxPool

CHECK = "def check(candidate):\n    assert candidate(2) == 4\n"
RIGHT = "def square(x):\n    return x * x\n"
WRONG = "def square(x):\n    return x + 1\n"
LIMITS = SandboxLimits(timeout_s=8.0, memory_mb=512, timeout_retries=0)
# Where a program may build: its working directory, and in "bwrap" mode the whole /tmp and /dev/shm.
PLACES = """
def writable(place):
    probe = os.path.join(place, f'.probe-{os.getpid()}')
    try:
        os.mkdir(probe)
    except OSError:
        return False
    os.rmdir(probe)
    return True
places = [os.getcwd()] + [place for place in ('/tmp', '/dev/shm') if writable(place)]
"""
DEEP = PLACES + """
for place in places:
    os.chdir(place)
    os.mkdir('deep')
    os.chdir('deep')
    for level in range(3000):
        os.mkdir('d')
        os.chdir('d')
        if level % 700 == 0:
            open('f', 'w').write('x')
            os.symlink('/usr', 'to_usr')
            os.symlink('.', 'loop')
    os.chmod('.', 0)
"""
LOCKED = PLACES + """
for place in places:
    os.makedirs(os.path.join(place, 'locked/inner/innermost'))
    open(os.path.join(place, 'locked/inner/innermost/f'), 'w').write('x')
    os.chmod(os.path.join(place, 'locked/inner/innermost'), 0o000)
    os.chmod(os.path.join(place, 'locked/inner'), 0o100)
    os.chmod(os.path.join(place, 'locked'), 0o500)
    os.symlink('/', os.path.join(place, 'root_link'))
    os.symlink(os.path.join(place, 'self_a'), os.path.join(place, 'self_b'))
    os.symlink(os.path.join(place, 'self_b'), os.path.join(place, 'self_a'))
"""
MANY = """
import os
os.mkdir('many')
for name in range(100_000):
    os.close(os.open(f'many/{name}', os.O_CREAT | os.O_WRONLY, 0o600))
"""
# What the sandbox itself puts there stays: the working directory, and the folders that lead to the interpreter's
# read-only bind where the checkout lives under /tmp
PROBE = PLACES + """
import sys
own = [os.getcwd(), sys.prefix, sys.base_prefix]
def ours(path):
    return any(path == mine or mine.startswith(path + os.sep) for mine in own)
for place in places:
    left = [entry for entry in os.listdir(place) if not ours(os.path.join(place, entry))]
    assert left == [], (place, left)
"""
OUTSIDE = ("/", "/tmp", "/usr", "/dev/shm")  # what a link in a program's tree may point at, or its scratch's parent


def program(body: str, solution: str = RIGHT) -> str:
    return f"{solution}\nimport os\n{textwrap.dedent(body)}\n{CHECK}\ncheck(square)\n"


@pytest.fixture(scope="module", params=MODES)
def single(request: pytest.FixtureRequest) -> Iterator[SandboxPool]:
    reason = skip_reason(request.param)
    if reason is not None:
        pytest.skip(reason)
    with open_pool(request.param, workers=1, limits=LIMITS) as pool:
        yield pool


@pytest.mark.parametrize("builder", [DEEP, LOCKED, MANY], ids=["3000 deep", "locked and linked", "10^5 files"])
def test_what_a_program_builds_is_removed(single: SandboxPool, builder: str) -> None:
    before = set(single.worker_pids())
    modes = {path: os.stat(path).st_mode for path in OUTSIDE}
    results = single.run_many([program(builder, WRONG), program(PROBE), program(""), program("", WRONG)])
    assert {path: os.stat(path).st_mode for path in OUTSIDE} == modes  # cleanup changed nothing beyond the tree
    assert results[0].outcome in (Outcome.failed, Outcome.timeout), results[0].detail  # a slow disk: part of them
    assert [r.outcome for r in results[1:]] == [Outcome.passed, Outcome.passed, Outcome.failed], \
        [r.detail for r in results]
    assert set(single.worker_pids()) == before  # cleaned, not replaced


def test_closing_after_a_deep_tree_leaves_nothing_and_raises_nothing() -> None:
    for mode in MODES:
        if skip_reason(mode) is not None:
            continue
        pool = open_pool(mode, workers=1, limits=LIMITS)
        with pool:
            servers = set(pool.worker_pids())
            [result] = pool.run_many([program(DEEP)])
            assert result.outcome is Outcome.passed, result.detail
            servers |= set(pool.worker_pids())
        pool.close()  # a second close is harmless too
        # Only this pool's fork servers' scratch: pools of tests running beside this one keep theirs
        assert [path for pid in servers for path in glob.glob(f"/tmp/quench-sandbox-{pid}-*")] == []


def test_a_sabotaged_worker_is_replaced_and_its_program_runs_again() -> None:
    """In "rlimits" mode, root mounts a file system on the fork server's next work directory: it cannot be removed."""
    if skip_reason("rlimits") is not None:
        pytest.skip(skip_reason("rlimits"))
    if shutil.which("nsenter") is None:
        pytest.skip("no nsenter here")
    with open_pool("rlimits", workers=1, limits=LIMITS) as pool:
        pool.start()
        server = pool.worker_pids()[0]
        work = os.path.join(str(pool._pool[0].ready["scratch"]), "work")
        sabotage = f"mkdir {work} && mount -t tmpfs -o size=1m sabotage {work}"
        subprocess.run(["nsenter", "-t", str(server), "-m", "sh", "-c", sabotage], check=True)
        results = pool.run_many([program(""), program("", WRONG)])
        assert [r.outcome for r in results] == [Outcome.passed, Outcome.failed], [r.detail for r in results]
        assert pool.worker_pids() != [server]  # a fresh worker ran it
