"""ReCode's release format, both ways: `{benchmark}_{Transformation}_s{seed}.jsonl` files.

ReCode's code-syntax ("natgen") and code-format sets hold partial-code prompts and a `partial`
key (the unperturbed program with a split-marker line); natgen sets also start
`canonical_solution` with that marker line, and their prompts end with a whitespace-only line.
Reading drops the marker line from the solution and keeps every prompt byte for byte (the
whitespace-only line included): it is what ReCode's models were given.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Callable, Iterable

from quench.datasets import Problem, partial_problem
from quench.datasets.problem import iter_jsonl, problem_from_json
from quench.errors import InputFileError, QuenchError
from quench.perturbations.base import CODE_FORMAT, CODE_SYNTAX, RECODE_CATEGORY
from quench.perturbations.catalog import QUENCH
from quench.perturbations.marker import MARKER, marked_program

FILE_NAME = re.compile(r"^(?P<benchmark>[^_]+)_(?P<transform>.+)_s(?P<seed>\d+)\.jsonl$")


def file_name(benchmark: str, transform: str, seed: int) -> str:
    return f"{benchmark}_{transform}_s{seed}.jsonl"


def recode_row(original: Problem, variant: Problem, category: str, changed: bool,
               partial: Callable[[Problem], Problem] = partial_problem) -> dict[str, object]:
    row: dict[str, object] = {
        "task_id": variant.task_id, "prompt": variant.prompt, "entry_point": variant.entry_point,
        "canonical_solution": variant.canonical_solution, "test": variant.test,
    }
    if category in (CODE_SYNTAX, CODE_FORMAT):
        row["partial"] = marked_program(original, partial)
        if category == CODE_SYNTAX and row["partial"] is not None and not variant.canonical_solution.startswith(MARKER):
            row["canonical_solution"] = f"{MARKER}\n{variant.canonical_solution}"
    else:
        row["seed"] = int(variant.meta("seed", "0"))
        row["perturbed"] = changed
    row.update(benchmark=variant.benchmark, prompt_kind=variant.prompt_kind, extra=dict(variant.extra))
    return row


def nominal_partial_rows(originals: Iterable[Problem], partial: Callable[[Problem], Problem]) -> Iterable[dict]:
    """ReCode's `nominal/{benchmark}_partial.jsonl` rows: the baseline of the code categories."""
    for original in originals:
        split = partial(original)
        yield {"task_id": split.task_id, "prompt": split.prompt, "entry_point": split.entry_point,
               "canonical_solution": split.canonical_solution, "test": split.test,
               "partial": marked_program(original, partial)}


def write_recode(path: Path, rows: Iterable[dict[str, object]]) -> None:
    with path.open("w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row) + "\n")


def category_of(transform: str, path: Path) -> str:
    if transform in QUENCH:
        return QUENCH[transform].category
    by_dir = {v: k for k, v in RECODE_CATEGORY.items()}
    return by_dir.get(path.parent.name, "")


def problem_from_recode(row: dict, benchmark: str, transform: str, seed: str, category: str) -> Problem:
    row = dict(row)
    solution = str(row.get("canonical_solution") or "")
    if MARKER in solution:  # the prompt stays byte for byte: it is what ReCode's models saw
        solution = "".join(line for line in solution.splitlines(keepends=True) if line.strip() != MARKER)
        row["canonical_solution"] = solution
    if "prompt_kind" not in row:
        row["prompt_kind"] = "partial" if "partial" in row else "full"
    extra = {"perturbation": transform, "category": category, "seed": seed, "source": "recode"}
    row["extra"] = extra | dict(row.get("extra") or {})
    return problem_from_json(row, benchmark)


def read_recode_file(path: Path) -> list[Problem]:
    match = FILE_NAME.match(path.name)
    if not match:
        raise QuenchError(f"{path}: not a ReCode file name ({{benchmark}}_{{Transformation}}_s{{seed}}.jsonl)")
    benchmark, transform, seed = match["benchmark"], match["transform"], match["seed"]
    category = category_of(transform, path)
    problems = []
    for number, row in iter_jsonl(path):
        try:
            problems.append(problem_from_recode(row, benchmark, transform, seed, category))
        except ValueError as err:
            raise InputFileError(str(path), number, str(err)) from None
    return problems


def read_recode(path: Path) -> list[Problem]:
    """Problems from one ReCode file or every ReCode file under a directory, tagged in `extra`."""
    path = Path(path)
    if path.is_file():
        return read_recode_file(path)
    if not path.is_dir():
        raise QuenchError(f"{path}: no such file or directory")
    files = sorted(p for p in path.rglob("*.jsonl") if FILE_NAME.match(p.name))
    if not files:
        raise QuenchError(f"{path}: no ReCode files ({{benchmark}}_{{Transformation}}_s{{seed}}.jsonl) in it")
    return [problem for file in files for problem in read_recode_file(file)]


def group_variants(problems: Iterable[Problem]) -> dict[tuple[str, int], list[Problem]]:
    """Variants per (transformation, seed), as `perturb_problems` returns them."""
    groups: dict[tuple[str, int], list[Problem]] = {}
    for problem in problems:
        key = (problem.meta("perturbation"), int(problem.meta("seed", "0")))
        groups.setdefault(key, []).append(problem)
    return groups
