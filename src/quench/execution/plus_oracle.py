"""MBPP+ oracles: the reference's outputs and times per input, computed once and cached.

Glossary:
- oracle: a problem's expected outputs and the reference's time per input, computed by running
  the reference solution on every input (EvalPlus's `trusted_exec`) and cached under `cache_dir()`
  by the problem's content hash (`PlusTask.digest`) and the Python version.
- expected entry: ("v", value), or for a simple value whose wire form exceeds DIGEST_BYTES and
  that is compared exactly, ("d", digest, digest made simple) (plus_values.py). Entries are made
  as the reference returns each output, so no large output is held by the oracle, the cache or a
  program (Mbpp/255's largest output is over a gigabyte).

The reference solutions ship with quench (package data, as EvalPlus's `trusted_exec` treats them),
so the oracle runs in a separate interpreter (`-s`, no user site) under the sandbox's environment
(the same hash seed, hence the same set order) and an address-space limit.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import platform
import resource
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from quench.datasets.mbppplus import PlusTask, plus_task
from quench.errors import QuenchError
from quench.execution.sandbox import WORKER_ENV, python_executable, without_quench_imports

CACHE_VERSION = "2"  # bump when the oracle's contents change
ORACLE_MEMORY_MB = 4096  # EvalPlus's 4 GB for the reference
DIGEST_BYTES = 64 << 10  # a simple expected output larger than this is kept as its digests

ORACLE_SCRIPT = """
import copy, pickle, sys, time
reference, entry_point, stages, atol, digest_bytes = pickle.load(sys.stdin.buffer)
namespace = {"__name__": "__reference__"}
exec(compile(reference, "<reference>", "exec"), namespace)
function = namespace[entry_point]
rule = rule_of(entry_point)
result = []
for inputs in stages:
    entries, seconds, stage_atol_now = [], [], atol
    for args in inputs:
        args = copy.deepcopy(args)
        start = time.perf_counter()
        out = function(*args)
        seconds.append(time.perf_counter() - start)
        if rule == "not_none":
            out = out is not None
        entries.append(entry(out, rule, stage_atol_now, digest_bytes))
        stage_atol_now = stage_atol(stage_atol_now, out)
        del out
    result.append((entries, seconds))
sys.stdout.buffer.write(pickle.dumps(result))
"""

ENTRY_SOURCE = '''
def entry(out, rule, atol, digest_bytes):
    """The expected entry of one output: digests where equality is exact and the value large."""
    if rule == "exact" and atol == 0 and is_simple(out):
        size, raw, simple = wire_digests(out)
        if size > digest_bytes:
            return ("d", raw, simple)
    return ("v", with_plain_mappings(out))
'''


@dataclass(frozen=True)
class Oracle:
    """Expected entries and the reference's seconds per input, for base and plus inputs."""

    base: list
    plus: list
    base_seconds: list[float]
    plus_seconds: list[float]


def cache_dir() -> Path:
    """$QUENCH_CACHE/mbppplus, else $XDG_CACHE_HOME/quench/mbppplus (default ~/.cache)."""
    root = os.environ.get("QUENCH_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "quench"
    return Path(root) / "mbppplus"


def oracle_path(task: PlusTask, directory: Path) -> Path:
    key = f"{task.digest}-py{platform.python_version()}-v{CACHE_VERSION}"
    return directory / f"{task.task_id.replace('/', '_')}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.pkl"


def oracle_for(task: PlusTask, directory: Path | None = None) -> Oracle:
    """The cached oracle of `task`, computed now if the cache has none."""
    path = oracle_path(task, directory or cache_dir())
    if path.is_file():
        try:
            return pickle.loads(path.read_bytes())
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError):
            pass  # a torn or stale file: compute it again
    oracle = compute_oracle(task)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    partial.write_bytes(pickle.dumps(oracle))
    partial.replace(path)
    return oracle


def _limit_memory() -> None:
    size = ORACLE_MEMORY_MB * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (size, size))


@functools.cache
def oracle_script() -> str:
    """ORACLE_SCRIPT after the helpers it uses (plus_values.py, plus_rules.py, `entry`)."""
    here = Path(__file__).parent
    parts = [without_quench_imports((here / name).read_text(encoding="utf-8"))
             for name in ("plus_values.py", "plus_rules.py")]
    return "\n".join([*parts, ENTRY_SOURCE, ORACLE_SCRIPT])


def compute_oracle(task: PlusTask) -> Oracle:
    """Run the reference on every input in a separate interpreter; QuenchError if it fails."""
    request = pickle.dumps((task.reference, task.entry_point, [list(task.base_inputs), list(task.plus_inputs)],
                            task.atol, DIGEST_BYTES))
    done = subprocess.run([python_executable(), "-s", "-c", oracle_script()], input=request, capture_output=True,
                          env=dict(WORKER_ENV), cwd="/", preexec_fn=_limit_memory, check=False)
    if done.returncode != 0:
        tail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        raise QuenchError(f"{task.task_id}: the reference solution failed on its inputs: {tail[0]}")
    (base, base_seconds), (plus, plus_seconds) = pickle.loads(done.stdout)
    return Oracle(base, plus, base_seconds, plus_seconds)


def prepare_oracles(task_ids: Sequence[str], workers: int = 1, on_done: Callable[[str], None] | None = None,
                    directory: Path | None = None) -> None:
    """Compute the oracles the cache lacks, `workers` at a time (the slowest reference takes a minute).

    Every source is parsed here, before the threads start: CPython 3.11's parser keeps a recursion
    depth shared by threads, so two threads parsing at once can fail with SystemError.
    """
    tasks = [plus_task(task_id) for task_id in task_ids]
    oracle_script()

    def one(task: PlusTask) -> None:
        oracle_for(task, directory)
        if on_done:
            on_done(task.task_id)

    with ThreadPoolExecutor(max(1, workers)) as threads:
        list(threads.map(one, tasks))
