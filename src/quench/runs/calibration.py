"""A run's per-problem time limits: calibrated once per problem, recorded in the run's config.json.

Each problem with a reference solution gets `max(T_base, k * T_reference)` (quench.execution.limits),
its reference timed in the same pool, before any sample runs. The calibration is written under
`"calibration"` in the run directory's config.json; a resumed run reads the reference times from
there instead of measuring them again, and applies the base and factor it was given.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from quench.datasets.problem import PLUS_BENCHMARK, Problem
from quench.execution.limits import FACTOR, Calibration, ProgramRunner, calibrate, limit_for

log = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
CONFIG_KEY = "calibration"


@dataclass(frozen=True)
class TimeLimitRule:
    """How a run limits each program's wall clock (`--timeout`, `--timeout-factor`)."""

    base_s: float  # T_base: the floor of every problem's limit, and the limit where nothing is calibrated
    factor: float = FACTOR  # k; 0: base_s for every program, nothing calibrated

    @property
    def fixed(self) -> bool:
        return self.factor <= 0


def calibrates(problem: Problem) -> bool:
    """Whether a problem's limit comes from its reference: it has one, and it is not MBPP+, whose
    harness already limits each input from that input's own reference time (execution/plus.py)."""
    return bool(problem.canonical_solution.strip()) and problem.benchmark != PLUS_BENCHMARK


def problem_limits(problems: Iterable[Problem], pool: ProgramRunner, rule: TimeLimitRule, out: Path) -> dict[str, float]:
    """task_id -> its limit, for the problems that `calibrates`; the others (absent) run under the
    pool's own limit. Writes the calibration into out/config.json, reusing the reference times there."""
    chosen = list({p.task_id: p for p in problems if calibrates(p)}.values())
    if rule.fixed or not chosen:
        return {}
    recorded = recorded_calibration(out)
    known = recorded.reference_seconds if recorded else {}
    started = time.perf_counter()
    calibration = calibrate(chosen, pool, rule.base_s, rule.factor, known)
    reused = sum(p.task_id in known for p in chosen)
    log.info("time limits of %d problems calibrated in %.1f s (%d reference times read from %s)",
             len(chosen), time.perf_counter() - started, reused, out / CONFIG_FILE)
    record_calibration(out, merged(recorded, calibration))
    return calibration.timeouts


def merged(recorded: Calibration | None, calibration: Calibration) -> Calibration:
    """`calibration` plus the recorded problems it does not cover (another input evaluated into the
    same directory), all limits under its base and factor."""
    if recorded is None:
        return calibration
    reference = {**recorded.reference_seconds, **calibration.reference_seconds}
    base_s, factor = calibration.base_s, calibration.factor
    return Calibration(base_s, factor, {task: limit_for(s, base_s, factor) for task, s in reference.items()}, reference)


def read_config(out: Path) -> dict:
    path = out / CONFIG_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError) as err:
        log.warning("%s: cannot read it (%s); the time limits are calibrated again", path, err)
        return {}


def recorded_calibration(out: Path) -> Calibration | None:
    """The calibration out/config.json records, or None (none, or not one that `to_json` wrote)."""
    data = read_config(out).get(CONFIG_KEY)
    if data is None:
        return None
    try:
        return Calibration.from_json(data)
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        log.warning("%s: its calibration is unreadable (%s); measured again", out / CONFIG_FILE, err)
        return None


def record_calibration(out: Path, calibration: Calibration) -> None:
    """Write `calibration` into out/config.json beside the settings already there (atomically)."""
    path = out / CONFIG_FILE
    config = {**read_config(out), CONFIG_KEY: calibration.to_json()}
    staging = path.with_suffix(".json.tmp")
    staging.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    staging.replace(path)
