"""Checks every subcommand runs before anything expensive or persistent: no model load, no perturbation,
no write to --out until the whole command line is known to be usable.

Each check raises QuenchError naming the flag or path that is wrong; the entry point turns it into
`error: …` and exit code 2. Nothing here imports torch: `check_device` reads the installed build's
version record, and imports torch only on a CUDA build, to ask whether the GPU is there.
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from quench.datasets.loading import BENCHMARKS
from quench.errors import QuenchError

if TYPE_CHECKING:
    from quench.runs.records import SampleRecord

DEFAULT_KS = (1, 10, 100)  # pass@k reported by default, those that -n allows


def check_tasks(spec: str | None) -> None:
    """`--tasks 0,3,10-12`: every part names something and no range is empty or reversed."""
    if spec is None:
        return
    parts = [part.strip() for part in spec.split(",")]
    if not any(parts):
        raise QuenchError(f"--tasks {spec!r}: names no task")
    for part in parts:
        if not part:
            raise QuenchError(f"--tasks {spec!r}: an empty item between commas")
        match = re.fullmatch(r"(\d+)-(\d+)", part)
        if match and int(match[2]) < int(match[1]):
            raise QuenchError(f"--tasks {spec!r}: the range {part} is empty (write it low-high, e.g. "
                              f"{match[2]}-{match[1]})")


def check_limit(limit: int | None) -> None:
    if limit is not None and limit < 1:
        raise QuenchError(f"--limit must be at least 1, got {limit}")


def resolve_ks(spec: str | None, n: int, have: str = "got -n") -> str:
    """The pass@k list to report: the user's (each k <= n), else those of 1, 10, 100 that n allows."""
    if spec is None:
        return ",".join(str(k) for k in DEFAULT_KS if k <= max(n, 1))
    ks = parse_ks(spec)
    if ks[-1] > n:
        raise QuenchError(f"--k {spec}: pass@{ks[-1]} needs at least {ks[-1]} samples per problem, {have} {n}")
    return ",".join(map(str, ks))


def parse_ks(spec: str) -> tuple[int, ...]:
    """--k as sorted, distinct pass@k values; QuenchError unless each is an integer >= 1."""
    try:
        ks = tuple(sorted({int(k) for k in spec.split(",") if k.strip()}))
    except ValueError:
        raise QuenchError(f"--k must be a comma-separated list of integers, got {spec!r}") from None
    if not ks or min(ks) < 1:
        raise QuenchError(f"--k values must be >= 1, got {spec!r}")
    return ks


def samples_per_problem(samples: list[SampleRecord]) -> int:
    """The most samples any one problem (task and variant) has in a samples file."""
    counts = Counter((s.task_id, s.variant) for s in samples)
    return max(counts.values(), default=0)


def check_positive(value: float | None, flag: str, minimum: float = 1) -> None:
    if value is not None and value < minimum:
        raise QuenchError(f"{flag} must be at least {minimum:g}, got {value:g}")


def check_input_file(path: Path, flag: str) -> None:
    """An existing, readable regular file."""
    if not path.exists():
        raise QuenchError(f"{flag} {path}: no such file")
    if not path.is_file():
        raise QuenchError(f"{flag} {path}: not a file")
    if not os.access(path, os.R_OK):
        raise QuenchError(f"{flag} {path}: not readable")


def check_input_dir(path: Path, flag: str) -> None:
    if not path.exists():
        raise QuenchError(f"{flag} {path}: no such directory")
    if not path.is_dir():
        raise QuenchError(f"{flag} {path}: not a directory")


def check_out_dir(out: Path, flag: str = "--out") -> None:
    """--out is a directory quench can create and write, or QuenchError; nothing is left behind."""
    check_writable(out, out, flag)


def check_out_file(path: Path, flag: str = "--out") -> None:
    """A file to write: its directory can be created and written, and the path itself is not a directory."""
    if path.is_dir():
        raise QuenchError(f"{flag} {path}: is a directory; give a file name")
    check_writable(path.parent, path, flag)


def check_writable(directory: Path, named: Path, flag: str) -> None:
    """`directory` can be created and written; an error names `named`, the path the user gave."""
    existing = directory
    while not existing.exists() and not existing.is_symlink():
        if existing.parent == existing:
            break
        existing = existing.parent
    if not existing.is_dir():
        what = "is not a directory" if existing.exists() else "does not exist"
        raise QuenchError(f"{flag} {named}: {existing} {what}" if existing != named else f"{flag} {named}: not a directory")
    probe_writable(existing, named, flag)


def probe_writable(existing: Path, out: Path, flag: str) -> None:
    """Create and remove an empty directory in `existing`: the only test that holds for root, /proc and
    read-only mounts alike (permission bits alone say yes to root everywhere)."""
    try:
        probe = tempfile.mkdtemp(prefix=".quench-write-check-", dir=existing)
    except OSError as err:
        reason = err.strerror or type(err).__name__
        where = "" if existing == out else f" ({existing})"
        raise QuenchError(f"{flag} {out}: cannot write there{where}: {reason}") from None
    os.rmdir(probe)


DEVICE = re.compile(r"(cpu|cuda)(?::(\d+))?")


def torch_build() -> dict[str, str | None]:
    """`__version__` and `cuda` of the installed torch, read from its torch/version.py without importing
    torch (seconds on a busy machine): `cuda` is None on a CPU-only build."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise QuenchError("torch is not installed: run `make setup`")
    record = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    values: dict[str, str | None] = {}
    for node in ast.parse(record.read_text(encoding="utf-8")).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and isinstance(getattr(node, "value", None), ast.Constant):
            values[target.id] = node.value.value
    return values


def check_device(device: str) -> None:
    """--device names a device this machine has: cpu, or cuda[:i] where torch sees that GPU."""
    match = DEVICE.fullmatch(device)
    if match is None:
        raise QuenchError(f"--device {device!r}: not a device quench runs models on (cpu, cuda, cuda:1, ...)")
    if match[1] == "cpu":
        return
    build = torch_build()
    if build.get("cuda") is None:
        raise QuenchError(f"--device {device}: the installed torch ({build.get('__version__', '?')}) is a CPU-only "
                          "build; use --device cpu, or install a CUDA build of torch")
    import torch

    if not torch.cuda.is_available():
        raise QuenchError(f"--device {device}: torch sees no CUDA device on this machine; use --device cpu")
    if match[2] is not None and int(match[2]) >= torch.cuda.device_count():
        raise QuenchError(f"--device {device}: torch sees {torch.cuda.device_count()} CUDA device(s), numbered from 0")


def check_model_args(args: argparse.Namespace) -> None:
    """--model, --dtype, --device, --draft, --guard and --prompt-format, without loading anything."""
    from quench.models.loading import GGUF_WEIGHTS, check_dtype, check_model, check_weights

    check_model(args.model)
    check_dtype(args.dtype)
    if not getattr(args, "ray", None):  # with --ray the model loads on the cluster's machines
        check_device(getattr(args, "device", "cpu"))
    weights = getattr(args, "weights", "dequantized")
    check_weights(weights, args.dtype, args.model)
    if weights in GGUF_WEIGHTS and getattr(args, "backend", "quench") != "quench":
        raise QuenchError(f"--weights {weights} runs in quench's engine: use --backend quench")
    speculate = getattr(args, "speculate", "none")
    draft = getattr(args, "draft", "auto")
    if draft != "auto":
        if speculate not in ("draft", "hybrid"):
            raise QuenchError(f"--draft {draft}: a draft model is used only with --speculate draft or hybrid; "
                              "add one of them, or drop --draft")
        check_input_file(Path(draft), "--draft")  # a draft file from `quench draft train`
    guard = getattr(args, "guard", None)
    if guard not in (None, "auto"):
        check_input_file(Path(guard), "--guard")


def check_ray(args: argparse.Namespace) -> None:
    """Join the cluster of --ray before the model loads: a wrong address fails in seconds, not after the load."""
    address = getattr(args, "ray", None)
    if address:
        from quench.distributed.cluster import connect

        connect(address)


def check_execution_args(args: argparse.Namespace) -> None:
    check_positive(args.workers, "--workers")
    if not args.timeout > 0:
        raise QuenchError(f"--timeout must be positive, got {args.timeout:g}")
    if not getattr(args, "timeout_factor", 0.0) >= 0:  # quench perturb has no --timeout-factor
        raise QuenchError(f"--timeout-factor must be 0 (a fixed --timeout) or positive, got {args.timeout_factor:g}")
    check_toolchain(getattr(args, "benchmark", ""))


def check_perturbable(benchmark: str, profile: str = "quench") -> None:
    """ReCode's own profile reproduces its Python releases: MBXP's languages take quench's transformations."""
    from quench.datasets import language_of

    language = language_of(benchmark)
    if language != "python" and profile != "quench":
        raise QuenchError(f"--benchmark {benchmark}: --profile {profile} reproduces ReCode's Python releases; "
                          f"{language} prompts take --profile quench (docs/languages.md)")


def check_toolchain(benchmark: str) -> None:
    """An MBXP benchmark needs its language's toolchain here (scripts/setup.sh installs them)."""
    from quench.datasets import LANGUAGES, language_of
    from quench.execution.toolchains import has_toolchain

    language = language_of(benchmark)
    if language != "python" and not has_toolchain(language):
        need = LANGUAGES[language].tool + (" and lodash (node-lodash)" if language == "javascript" else "")
        raise QuenchError(f"--benchmark {benchmark}: its programs need {need}, which this machine lacks; "
                          "scripts/setup.sh installs them")


def check_benchmark_args(args: argparse.Namespace) -> None:
    check_tasks(args.tasks)
    check_limit(args.limit)
    if args.benchmark not in BENCHMARKS:
        if not Path(args.benchmark).exists() and not args.benchmark.endswith((".jsonl", ".json")):
            raise QuenchError(f"--benchmark {args.benchmark}: unknown benchmark; choose {', '.join(BENCHMARKS)}, "
                              "or a HumanEval-format .jsonl file")
        check_input_file(Path(args.benchmark), "--benchmark")


def check_generation_args(args: argparse.Namespace) -> None:
    """Everything `generate`, `run` and `robustness` share, in the order a user reads the flags."""
    from quench.cli import settings

    check_benchmark_args(args)
    if args.backend == "openai":
        from quench.cli import remote

        remote.openai_options(args)  # a server generates: nothing local to load or build
    else:
        check_model_args(args)
        settings.backend_options_from_args(args)
        settings.check_engines(args)
    settings.sampling_from_args(args)
    check_positive(args.max_new_tokens, "--max-new-tokens")
    check_ray(args)
