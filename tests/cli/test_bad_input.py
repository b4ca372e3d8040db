"""Every bad input, through the real CLI in a subprocess: exit code 2, a last line `error: …` naming the
input, no traceback, and every input file and the --out directory exactly as they were (a fresh --out
is not even created). One row per case; a new kind of bad input is a new row."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SAMPLE = json.dumps({"task_id": "HumanEval/0", "completion": "    return True\n"}) + "\n"
PROBLEM = json.dumps({"task_id": "T/0", "prompt": "def f():\n", "entry_point": "f",
                      "canonical_solution": "    return 1\n", "test": "def check(f):\n    assert f() == 1\n"}) + "\n"
UNCONFINED = "cannot confine the programs to run: bubblewrap (bwrap) is not installed"
GGUF_V3_HEADER = b"GGUF" + (3).to_bytes(4, "little") + (1).to_bytes(8, "little") + (0).to_bytes(8, "little")


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]  # {in} is the folder of the input files, {out} a --out that does not exist yet
    expected: str  # a substring of the error line that names the input
    files: dict[str, bytes] = field(default_factory=dict)  # under {in}
    read_only: tuple[str, ...] = ()  # input files made 0444 before the run
    unconfinable: bool = False  # run where programs cannot be confined: no bubblewrap, an interpreter nobody reads


CASES = [
    # --tasks, --k, -n and friends: wrong before any work
    Case("reversed task range", ("run", "--tasks", "5-2", "--out", "{out}"), "--tasks '5-2'"),
    Case("reversed range, robustness", ("robustness", "--tasks", "9-3", "--out", "{out}"), "the range 9-3 is empty"),
    Case("reversed range, perturb", ("perturb", "--tasks", "3-1", "--out", "{out}"), "--tasks '3-1'"),
    Case("empty task list", ("generate", "--tasks", ",", "--out", "{out}"), "--tasks ','"),
    Case("reversed range, evaluate", ("evaluate", "{in}/samples.jsonl", "--tasks", "5-2", "--out", "{out}"),
         "--tasks '5-2'", files={"samples.jsonl": SAMPLE.encode()}),
    Case("unknown task", ("run", "--tasks", "999", "--out", "{out}"), "--tasks: unknown task id(s) HumanEval/999 in humaneval"),
    Case("task outside the split", ("run", "--benchmark", "mbpp", "--tasks", "600", "--out", "{out}"),
         "--tasks: unknown task id(s) MBPP/600 in the test split of mbpp (--split test)"),
    Case("limit 0", ("run", "--limit", "0", "--out", "{out}"), "--limit must be at least 1"),
    Case("k above n, run", ("run", "--k", "5", "--out", "{out}"), "pass@5 needs at least 5 samples per problem, got -n 1"),
    Case("k 0, run", ("run", "--k", "0", "--out", "{out}"), "--k values must be >= 1"),
    Case("k not a number", ("run", "--k", "one", "--out", "{out}"), "--k must be a comma-separated list"),
    Case("k above n, robustness", ("robustness", "--k", "1,5", "-n", "2", "--out", "{out}"),
         "pass@5 needs at least 5 samples per problem, got -n 2"),
    Case("k above the samples, evaluate", ("evaluate", "{in}/samples.jsonl", "--k", "5", "--out", "{out}"),
         "samples.jsonl holds 1", files={"samples.jsonl": SAMPLE.encode()}),
    Case("k 0, evaluate", ("evaluate", "{in}/samples.jsonl", "--k", "0", "--out", "{out}"), "--k values must be >= 1",
         files={"samples.jsonl": SAMPLE.encode()}),
    Case("samples 0", ("run", "--samples", "0", "--out", "{out}"), "--samples must be at least 1"),
    Case("top-p 0", ("run", "--top-p", "0", "--out", "{out}"), "--top-p must be in (0, 1]"),
    Case("max-new-tokens 0", ("generate", "--max-new-tokens", "0", "--out", "{out}"), "--max-new-tokens must be >= 1"),
    Case("seeds 0", ("robustness", "--seeds", "0", "--out", "{out}"), "--seeds must be at least 1, got 0"),
    Case("seeds 0, perturb", ("perturb", "--seeds", "0", "--out", "{out}"), "--seeds must be at least 1, got 0"),
    Case("time budget 0", ("run", "--time-budget", "0", "--out", "{out}"), "--time-budget must be positive"),
    Case("unknown strategy, train", ("train", "--strategy", "nope", "--out", "{out}"), "unknown strategy nope"),
    Case("stop-after 0, train", ("train", "--stop-after", "0", "--out", "{out}"), "--stop-after must be at least 1"),
    Case("timeout 0", ("run", "--timeout", "0", "--out", "{out}"), "--timeout must be positive"),
    Case("workers 0", ("evaluate", "{in}/samples.jsonl", "--workers", "0", "--out", "{out}"), "--workers must be at least 1",
         files={"samples.jsonl": SAMPLE.encode()}),
    Case("threads 0", ("--threads", "0", "perturb", "--list"), "--threads must be at least 1, got 0"),
    Case("not an integer", ("run", "-n", "x", "--out", "{out}"), "argument -n/--samples: invalid int value: 'x'"),
    Case("unknown transformation", ("robustness", "--transforms", "Nope", "--out", "{out}"), "unknown perturbation 'Nope'"),
    Case("unknown category", ("robustness", "--categories", "nope", "--out", "{out}"), "unknown category 'nope'"),
    Case("unknown MBPP split", ("run", "--benchmark", "mbpp", "--split", "dev", "--out", "{out}"), "unknown MBPP split 'dev'"),
    Case("robustness has no --partial", ("robustness", "--partial", "--out", "{out}"), "unrecognized argument: --partial"),
    # --out that cannot be a run directory
    Case("out under a file", ("run", "--out", "{in}/file.txt/run"), "file.txt is not a directory",
         files={"file.txt": b"keep me\n"}),
    Case("out is a file", ("generate", "--out", "{in}/file.txt"), "file.txt: not a directory", files={"file.txt": b"x\n"}),
    Case("out under /etc/passwd", ("robustness", "--out", "/etc/passwd/x"), "/etc/passwd is not a directory"),
    Case("out in /proc", ("run", "--out", "/proc/quench-run"), "--out /proc/quench-run: cannot write there"),
    Case("out in /proc, evaluate", ("evaluate", "{in}/samples.jsonl", "--out", "/proc/quench-run"),
         "--out /proc/quench-run: cannot write there", files={"samples.jsonl": SAMPLE.encode()}),
    Case("out in /proc, perturb", ("perturb", "--limit", "1", "--out", "/proc/quench-run"), "cannot write there"),
    Case("out in /proc, guard build-data", ("guard", "build-data", "--out", "/proc/quench-run"), "cannot write there"),
    Case("out in /proc, train", ("train", "--out", "/proc/quench-run"), "cannot write there"),
    Case("out in /proc, draft train", ("draft", "train", "--out", "/proc/quench-run"), "cannot write there"),
    Case("out file in /proc, guard train", ("guard", "train", "--data", "{in}", "--out", "/proc/quench-guard/g.safetensors"),
         "--out /proc/quench-guard/g.safetensors: cannot write there (/proc)"),
    Case("out file under a file, guard train", ("guard", "train", "--data", "{in}", "--out", "{in}/file.txt/g.safetensors"),
         "file.txt/g.safetensors: ", files={"file.txt": b"keep me\n"}),
    # models
    Case("unknown model", ("run", "--model", "no-such-model", "--out", "{out}"), "unknown model 'no-such-model'"),
    Case("missing model path", ("run", "--model", "{in}/models/missing", "--out", "{out}"),
         "models/missing: no such file or directory"),
    Case("garbage gguf", ("run", "--model", "{in}/x.gguf", "--out", "{out}"), "x.gguf: not a GGUF file",
         files={"x.gguf": b"this is not a model\n"}),
    Case("gguf cut short", ("generate", "--model", "{in}/x.gguf", "--out", "{out}"), "x.gguf: a GGUF file cut short",
         files={"x.gguf": b"GGUF\x03\x00\x00\x00"}),
    Case("gguf without tensors", ("robustness", "--model", "{in}/x.gguf", "--out", "{out}"), "x.gguf: not a GGUF model",
         files={"x.gguf": GGUF_V3_HEADER.replace((1).to_bytes(8, "little"), (0).to_bytes(8, "little"), 1)}),
    Case("model dir with only config.json", ("run", "--model", "{in}/model", "--out", "{out}"), "model: a model directory without weights",
         files={"model/config.json": b'{"model_type": "llama"}\n'}),
    Case("model dir without config.json", ("run", "--model", "{in}/model", "--out", "{out}"), "no config.json",
         files={"model/weights.bin": b"\0"}),
    Case("unknown dtype", ("run", "--dtype", "int3", "--out", "{out}"), "--dtype: unknown dtype 'int3'"),
    Case("garbage gguf, train", ("train", "--model", "{in}/x.gguf", "--out", "{out}"), "x.gguf: not a GGUF file",
         files={"x.gguf": b"\0" * 64}),
    Case("missing model, draft train", ("draft", "train", "--model", "{in}/target", "--out", "{out}"),
         "target: no such file or directory"),
    Case("missing model, guard build-data", ("guard", "build-data", "--model", "{in}/m.gguf", "--out", "{out}"),
         "m.gguf: no such file or directory"),
    Case("missing model, perturb --with-models", ("perturb", "--with-models", "--transforms", "BackTranslation",
                                                   "--model", "{in}/m", "--limit", "1", "--out", "{out}"),
         "m: no such file or directory"),
    Case("draft without speculate", ("run", "--draft", "{in}/draft", "--out", "{out}"),
         "--speculate draft or hybrid", files={"draft/config.json": b"{}\n"}),
    Case("missing draft", ("run", "--speculate", "draft", "--draft", "{in}/nodraft", "--out", "{out}"), "nodraft: no such file"),
    Case("missing guard", ("run", "--guard", "{in}/missing-guard.safetensors", "--out", "{out}"), "missing-guard.safetensors"),
    Case("missing perturbed dir", ("robustness", "--perturbed-dir", "{in}/recode", "--out", "{out}"),
         "--perturbed-dir"),
    Case("speculation on hf", ("run", "--backend", "hf", "--speculate", "ngram", "--out", "{out}"),
         "--speculate ngram needs --backend quench"),
    Case("draft confidence", ("run", "--speculate", "hybrid", "--draft-confidence", "1.5", "--out", "{out}"),
         "--draft-confidence"),
    Case("draft stop", ("run", "--speculate", "hybrid", "--draft-stop", "-0.1", "--out", "{out}"), "--draft-stop"),
    Case("draft max rows", ("run", "--speculate", "hybrid", "--draft-max-rows", "-1", "--out", "{out}"), "--draft-max-rows"),
    Case("unknown kv cache", ("run", "--kv-cache", "float16", "--out", "{out}"), "argument --kv-cache: invalid choice"),
    Case("bfloat16 caches without batch invariance", ("run", "--kv-cache", "bfloat16", "--no-batch-invariant", "--limit",
                                                      "1", "--out", "{out}"), "--kv-cache bfloat16 under a float32 model"),
    Case("draft loop tokens", ("run", "--speculate", "ngram", "--draft-loop-tokens", "16", "--out", "{out}"),
         "--draft-loop-tokens"),
    # input files: named with file:line, opened read-only, never repaired
    Case("missing samples", ("evaluate", "{in}/missing.jsonl"), "missing.jsonl: no such samples file"),
    Case("samples not UTF-8", ("evaluate", "{in}/samples.jsonl", "--out", "{out}"), "samples.jsonl:2: not UTF-8",
         files={"samples.jsonl": SAMPLE.encode() + b"\xff\xfe\n"}),
    Case("samples line not JSON", ("evaluate", "{in}/samples.jsonl", "--out", "{out}"), "samples.jsonl:2: not valid JSON",
         files={"samples.jsonl": (SAMPLE + "{oops\n").encode()}),
    Case("torn last line, read-only", ("evaluate", "{in}/samples.jsonl", "--out", "{out}"), "samples.jsonl:2",
         files={"samples.jsonl": (SAMPLE + '{"task_id": "Hum').encode()}, read_only=("samples.jsonl",)),
    Case("torn line, evaluated in place", ("evaluate", "{in}/samples.jsonl"), "samples.jsonl:2",
         files={"samples.jsonl": (SAMPLE + '{"task_id": "Hum').encode()}),
    Case("binary samples", ("evaluate", "{in}/samples.jsonl", "--out", "{out}"), "samples.jsonl:1",
         files={"samples.jsonl": bytes(range(256))}),
    Case("sample of an unknown task", ("evaluate", "{in}/samples.jsonl", "--out", "{out}"),
         "unknown task id(s) for this benchmark: HumanEval/500",
         files={"samples.jsonl": SAMPLE.replace("HumanEval/0", "HumanEval/500").encode()}),
    Case("benchmark not UTF-8", ("run", "--benchmark", "{in}/bench.jsonl", "--out", "{out}"), "bench.jsonl:1: not UTF-8",
         files={"bench.jsonl": PROBLEM.replace("return 1", "return \udcff", 1).encode("utf-8", "surrogateescape")}),
    Case("benchmark not UTF-8, perturb", ("perturb", "--benchmark", "{in}/bench.jsonl", "--out", "{out}"),
         "bench.jsonl:2: not UTF-8", files={"bench.jsonl": PROBLEM.encode() + b"\xc3\x28\n"}),
    Case("sample without completion or solution", ("evaluate", "{in}/samples.jsonl", "--out", "{out}"),
         "samples.jsonl:2: missing field(s): completion (or an evalplus solution)",
         files={"samples.jsonl": (SAMPLE + '{"task_id": "HumanEval/1"}\n').encode()}),
    Case("duplicate sample", ("evaluate", "{in}/samples.jsonl", "--out", "{out}"),
         "samples.jsonl:2: duplicate sample 0 of HumanEval/0",
         files={"samples.jsonl": 2 * (json.dumps({"task_id": "HumanEval/0", "sample_index": 0, "completion": ""}) + "\n").encode()}),
    Case("perturbed samples without the run's variants", ("evaluate", "{in}/samples.jsonl", "--out", "{out}"),
         "need the run's variants.jsonl", files={"samples.jsonl": (json.dumps(
             {"task_id": "HumanEval/0", "variant": "tab_indent/0", "completion": ""}) + "\n").encode()}),
    Case("samples are the results evaluate writes", ("evaluate", "{in}/results.jsonl", "--out", "{in}"),
         "results.jsonl: is where evaluate writes", files={"results.jsonl": SAMPLE.encode()}),
    Case("missing benchmark file", ("run", "--benchmark", "{in}/bench.jsonl", "--out", "{out}"), "bench.jsonl: no such file"),
    Case("missing guard data", ("guard", "train", "--data", "{in}/data", "--out", "{out}/g.safetensors"), "--data"),
    Case("missing guard file", ("guard", "info", "{in}/guard.safetensors"), "guard.safetensors: no such file"),
    Case("guard build-data on HumanEval", ("guard", "build-data", "--benchmark", "humaneval", "--out", "{out}"),
         "HumanEval must stay unseen"),
    Case("guard build-data bad limit", ("guard", "build-data", "--limit", "train:x", "--out", "{out}"),
         "--limit: N or split:N"),
    Case("guard build-data on the test split", ("guard", "build-data", "--limit", "test:3", "--out", "{out}"),
         "split 'test' is not in --splits"),
    Case("guard train unknown benchmark", ("guard", "train", "--data", "{in}", "--benchmark", "mbxx", "--out",
                                           "{out}/g.safetensors"), "--benchmark: choose from"),
    Case("guard eval missing data", ("guard", "eval", "auto", "--data", "{in}/data"), "--data"),
    # programs that cannot be confined: refused before any work unless --unsafe-unconfined
    Case("unconfined, evaluate", ("evaluate", "{in}/samples.jsonl", "--out", "{out}"), UNCONFINED,
         files={"samples.jsonl": SAMPLE.encode()}, unconfinable=True),
    Case("unconfined, run", ("run", "--out", "{out}"), UNCONFINED, unconfinable=True),
    Case("unconfined, robustness", ("robustness", "--out", "{out}"), UNCONFINED, unconfinable=True),
    Case("unconfined, perturb", ("perturb", "--limit", "1", "--out", "{out}"), UNCONFINED, unconfinable=True),
    Case("unconfined, train", ("train", "--strategy", "da", "--limit", "1", "--out", "{out}"), UNCONFINED,
         unconfinable=True),
    Case("compare: missing run", ("compare", "{in}/a", "{in}/b", "--out", "{out}"), "a: no such run directory"),
    Case("compare: not a run", ("compare", "{in}/a", "{in}/a", "--out", "{out}"), "a: not a run directory",
         files={"a/config.json": b"{}\n"}),
]


def tree_state(root: Path) -> dict[str, tuple[int, str]]:
    """Every path under root with its mode and content hash: what must not change."""
    state = {}
    for path in sorted(root.rglob("*")):
        mode = path.lstat().st_mode
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
        state[str(path.relative_to(root))] = (mode, digest)
    return state


def quench(argv: list[str], cwd: Path, python: str | None = None) -> subprocess.CompletedProcess:
    """The CLI; with `python` (an interpreter nobody can read), on a PATH without bubblewrap."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "QUENCH_CACHE": str(cwd.parent / "cache")}
    if python is not None:
        empty = cwd.parent / "empty-bin"
        empty.mkdir(exist_ok=True)
        env.update(PATH=str(empty), PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    return subprocess.run([python or sys.executable, "-m", "quench.cli.main", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


@dataclass(frozen=True)
class Outcome:
    done: subprocess.CompletedProcess
    changed: bool  # an input file or --out differs from before the run


def refuse(argv: list[str], work: Path, python: str | None = None) -> Outcome:
    before = tree_state(work)
    done = quench(argv, work, python)
    return Outcome(done, tree_state(work) != before)


def assert_refused(outcome: Outcome, expected: str) -> None:
    stderr = outcome.done.stderr
    lines = stderr.strip().splitlines()
    assert outcome.done.returncode == 2, stderr
    assert "Traceback" not in stderr, stderr
    assert lines and lines[-1].startswith("error: "), stderr
    assert expected in lines[-1], stderr
    assert not outcome.changed, "an input file or --out changed"


def locked_python(parent: Path) -> str:
    """A venv (no pip) in a 0700 directory, made from this interpreter: programs it runs cannot drop to nobody."""
    locked = parent / "locked"
    locked.mkdir(mode=0o700)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(locked / "venv")], check=True, timeout=120)
    return str(locked / "venv" / "bin" / "python")


def run_case(case: Case, work: Path, python: str | None = None) -> Outcome:
    inputs = work / "in"  # work is the cwd: default run directories would appear there
    inputs.mkdir(parents=True)
    for name, content in case.files.items():
        (inputs / name).parent.mkdir(parents=True, exist_ok=True)
        (inputs / name).write_bytes(content)
    for name in case.read_only:
        (inputs / name).chmod(0o444)
    argv = [arg.replace("{in}", str(inputs)).replace("{out}", str(work / "out")) for arg in case.argv]
    return refuse(argv, work, python if case.unconfinable else None)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    """All rows at once, a few processes at a time (each is a short-lived CLI start)."""
    works = [tmp_path_factory.mktemp("bad-input") / "work" for _ in CASES]
    python = locked_python(tmp_path_factory.mktemp("unconfinable"))
    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip((case.id for case in CASES), pool.map(run_case, CASES, works, [python] * len(CASES))))


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input_is_refused_up_front_and_touches_nothing(case: Case, outcomes: dict[str, Outcome]) -> None:
    assert_refused(outcomes[case.id], case.expected)


def test_a_refused_run_leaves_an_existing_run_directory_as_it_was(tmp_path: Path) -> None:
    """A typo in a resumed run's flags changes nothing in it, so the corrected command still resumes."""
    work = tmp_path / "work"
    out = work / "run"
    out.mkdir(parents=True)
    (out / "config.json").write_text('{"n": 1}\n')
    (out / "samples.jsonl").write_text(SAMPLE)
    assert_refused(refuse(["robustness", "--perturbed-dir", str(work / "typo"), "--out", str(out)], work),
                   "--perturbed-dir")
    assert_refused(refuse(["run", "--guard", str(work / "typo.safetensors"), "--out", str(out)], work),
                   "typo.safetensors")


def test_unreachable_ray_head_fails_in_seconds(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    work = tmp_path / "work"
    work.mkdir()
    address = f"127.0.0.1:{port}"
    assert_refused(refuse(["run", "--ray", address, "--out", str(work / "out")], work), f"--ray {address}")


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into any directory; /proc stands in above")
def test_out_in_a_directory_this_user_cannot_write(tmp_path: Path) -> None:
    work = tmp_path / "work"
    locked = work / "locked"
    locked.mkdir(parents=True)
    locked.chmod(0o555)
    try:
        assert_refused(refuse(["run", "--out", str(locked / "run")], work), "cannot write there")
    finally:
        locked.chmod(0o755)


@pytest.mark.slow  # waits 5 s for a reply
def test_a_port_that_accepts_and_stays_silent_fails_in_seconds(tmp_path: Path) -> None:
    """A connection is accepted, nothing answers (Ray's own client would retry for minutes): one line."""
    pytest.importorskip("ray")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        address = "127.0.0.1:{}".format(server.getsockname()[1])
        work = tmp_path / "work"
        work.mkdir()
        started = time.perf_counter()
        outcome = refuse(["run", "--ray", address, "--out", str(work / "out")], work)
        elapsed = time.perf_counter() - started
    assert_refused(outcome, f"--ray {address}: no Ray head answers there")
    assert len(outcome.done.stderr.strip().splitlines()) == 1, outcome.done.stderr
    assert elapsed < 20, elapsed
