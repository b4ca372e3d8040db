"""The `Problem` record shared by benchmarks, perturbations, generation and execution."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

from quench.datasets.judge import judge_program
from quench.datasets.languages import LANGUAGES, harnessed, launcher, source
from quench.errors import InputFileError, QuenchError

REQUIRED_FIELDS = ("task_id", "prompt", "test", "entry_point")
PLUS_BENCHMARK = "mbpp+"  # its samples run EvalPlus's inputs (quench.execution.plus), not `test`


@dataclass(frozen=True)
class Problem:
    """One HumanEval-format problem: complete `prompt + completion`, then run `test` and `check`."""

    task_id: str
    prompt: str  # signature + docstring (full) or + first half of the body (partial)
    canonical_solution: str  # the reference continuation of `prompt`
    test: str  # defines `check(candidate)`
    entry_point: str  # the function `check` is called with
    benchmark: str = ""  # "humaneval", "mbpp", "mbpp+", an MBXP name, or "" for user files
    prompt_kind: str = "full"  # "full" or "partial" (ReCode's partial-code prompt)
    extra: tuple[tuple[str, str], ...] = ()  # free metadata, e.g. (("perturbation", "tab_indent"),)
    language: str = "python"  # "python" or an MBXP language: "javascript", "go", "cpp", "java"

    def program(self, completion: str) -> str:
        """The program that checks `completion` (a continuation of the prompt), as the sandbox runs it.

        Python: `check(entry_point)` of the tests run by a judge on `prompt + completion` run in a
        process of its own, values crossing as plain values only (quench.datasets.judge; for MBPP+
        that is MBPP's asserts, its inputs run through quench.execution.program_build.program_for). Other
        languages: a Python launcher that builds and runs `source(...)` with its test harness (quench.datasets.harness),
        whose report alone passes it; a problem without tests passes when its program exits with status 0.
        """
        if self.language != "python" and not self.test.strip():  # no tests: its exit status is all there is
            return launcher(self.language, self.source(completion))
        if self.language != "python":
            return launcher(self.language, harnessed(self.language, self.prompt, completion, self.test))
        return judge_program(f"{self.prompt}{completion}\n", self.test, self.entry_point)

    def source(self, completion: str) -> str:
        """The program in the problem's own language (for Python the same as `program`)."""
        if self.language == "python":
            return self.program(completion)
        return source(self.language, self.prompt, completion, self.test)

    def reference_program(self) -> str:
        return self.program(self.canonical_solution)

    def with_changes(self, **changes: object) -> "Problem":
        return dataclasses.replace(self, **changes)

    def meta(self, key: str, default: str = "") -> str:
        return dict(self.extra).get(key, default)

    def to_json(self) -> dict[str, object]:
        row: dict[str, object] = dataclasses.asdict(self)
        row["extra"] = dict(self.extra)
        return row


def problem_from_json(row: dict[str, object], benchmark: str = "") -> Problem:
    """Build a `Problem` from a HumanEval-format dict; raise `ValueError` naming a missing field."""
    missing = [f for f in REQUIRED_FIELDS if not isinstance(row.get(f), str)]
    if missing:
        raise ValueError(f"missing or non-string field(s): {', '.join(missing)}")
    extra = row.get("extra") or {}
    if not isinstance(extra, dict):
        raise ValueError("field 'extra' must be an object")
    language = str(row.get("language") or "python").lower()
    if language not in ("python", *LANGUAGES):
        raise ValueError(f"unknown language {language!r}: expected python, {', '.join(LANGUAGES)}")
    return Problem(
        task_id=str(row["task_id"]),
        prompt=str(row["prompt"]),
        canonical_solution=str(row.get("canonical_solution") or ""),
        test=str(row["test"]),
        entry_point=str(row["entry_point"]),
        benchmark=str(row.get("benchmark") or benchmark),
        prompt_kind=str(row.get("prompt_kind") or "full"),
        extra=tuple(sorted((str(k), str(v)) for k, v in extra.items())),
        language=language,
    )


OnInvalid = Callable[[InputFileError], None]  # takes a bad line's error instead of raising it


def parse_line(path: Path, number: int, raw: bytes | str) -> dict | None:
    """The JSON object on one line, None for a blank line; a bad line raises `file:line: reason`."""
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InputFileError(str(path), number, "not UTF-8") from None
    text = raw.lstrip("\ufeff") if number == 1 else raw
    if not text.strip():
        return None
    try:
        row = json.loads(text)
    except json.JSONDecodeError as err:
        torn = "" if raw.endswith("\n") else "; the last line has no newline: the file may be cut short"
        raise InputFileError(str(path), number, f"not valid JSON ({err.msg}){torn}") from None
    if not isinstance(row, dict):
        raise InputFileError(str(path), number, "expected a JSON object")
    return row


def iter_jsonl(
    path: Path, lines: Iterable[bytes | str] | None = None, on_invalid: OnInvalid | None = None
) -> Iterator[tuple[int, dict]]:
    """Yield (line number, object) for each non-blank line of a file opened read-only.

    A bad line (not UTF-8, not JSON, not an object) raises `file:line: reason`, or goes to
    `on_invalid` and is skipped when one is given.
    """
    if lines is None:
        try:
            source = path.open("rb")
        except OSError as err:
            raise QuenchError(f"{path}: cannot read ({err.strerror})") from None
        with source:
            yield from iter_jsonl(path, source, on_invalid)
        return
    for number, raw in enumerate(lines, start=1):
        try:
            row = parse_line(path, number, raw)
        except InputFileError as err:
            if on_invalid is None:
                raise
            on_invalid(err)
            continue
        if row is not None:
            yield number, row


def read_problems(path: Path, benchmark: str = "", lines: Iterable[bytes | str] | None = None) -> list[Problem]:
    """Read HumanEval-format problems (read-only); a malformed line fails with `file:line: reason`."""
    problems: list[Problem] = []
    seen: set[str] = set()
    for number, row in iter_jsonl(path, lines):
        try:
            problem = problem_from_json(row, benchmark)
        except ValueError as err:
            raise InputFileError(str(path), number, str(err)) from None
        if problem.task_id in seen:
            raise InputFileError(str(path), number, f"duplicate task_id {problem.task_id!r}")
        seen.add(problem.task_id)
        problems.append(problem)
    return problems


def write_problems(path: Path, problems: Iterable[Problem]) -> None:
    with path.open("w", encoding="utf-8") as out:
        for problem in problems:
            out.write(json.dumps(problem.to_json()) + "\n")
