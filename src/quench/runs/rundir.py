"""A run directory: one process writes it at a time, and a resumed run keeps the settings it started with.

`check_run_dir` runs before the model loads (seconds saved on a refusal); `prepare_run_dir` creates,
locks and checks the directory once everything the run records in `config.json` is known.
"""

from __future__ import annotations

import fcntl
import json
import logging
from pathlib import Path

from quench.errors import QuenchError
from quench.models.loading import GGUF_WEIGHTS
from quench.runs.calibration import CONFIG_KEY as CALIBRATION_KEY
from quench.stopping.loop_rule import EXACT_LOOP_RULE, recorded_loop_rule

log = logging.getLogger(__name__)

# recorded since a later version: absent from older run directories
ADDED_SETTINGS = ("dtype_used", "weights", "kv_cache", "loop_rule")
RUN_RECORDS = (CALIBRATION_KEY,)  # what the run itself writes into config.json: measured, not a setting
RESTARTED_FILES = ("samples.jsonl", "results.jsonl", "summary.json", "elapsed.json")  # removed by --overwrite

_held_locks: list = []  # run-directory locks, held until the process exits


def lock_run_dir(out: Path, hold: bool = True) -> None:
    """One process per run directory: a second one would write every sample twice (`hold=False`: only check)."""
    handle = (out / ".lock").open("a")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise QuenchError(f"{out}: another quench process is writing this run directory") from None
    if hold:
        _held_locks.append(handle)
    else:
        handle.close()


def release_run_dirs() -> None:
    """Unlock the run directories this process holds (the command is over)."""
    while _held_locks:
        _held_locks.pop().close()


def with_unrecorded_settings(previous: dict) -> dict:
    """An older run directory's settings with what its version ran without recording it: the GGUF weights ran
    float32 KV caches (before bfloat16 ones were their default), the loop rule had no numbers part, and before
    `exempt_spans` it counted every span (`recorded_loop_rule`)."""
    if "kv_cache" not in previous and previous.get("weights") in GGUF_WEIGHTS:
        previous = {**previous, "kv_cache": "float32"}
    if "loop_rule" not in previous and "loop" in str(previous.get("stop_rule") or "").split(","):
        previous = {**previous, "loop_rule": EXACT_LOOP_RULE.settings()}
    if isinstance(previous.get("loop_rule"), dict):
        previous = {**previous, "loop_rule": recorded_loop_rule(previous["loop_rule"]).settings()}
    return previous


def changed_settings(previous: dict, config: dict) -> list[str]:
    """The settings a resumed run would change; a setting older run directories lack is not one of them, unless
    their version's choice is known (`with_unrecorded_settings`)."""
    previous = with_unrecorded_settings(previous)
    keys = (set(previous) | (set(config) - {k for k in ADDED_SETTINGS if k not in previous})) - set(RUN_RECORDS)
    return sorted(k for k in keys if previous.get(k) != config.get(k))


def refuse_changed_settings(out: Path, changed: list[str]) -> None:
    if changed:
        raise QuenchError(f"{out}: holds a run with other settings ({', '.join(changed)}); "
                          "use another --out, or --overwrite to start it again")


def check_run_dir(out: Path, known: dict, overwrite: bool = False) -> None:
    """Before the model loads: `out` is neither another process's run nor a run whose settings differ in those
    `known` without the model; `prepare_run_dir` checks them all, and locks, once the model is loaded."""
    if (out / ".lock").is_file():
        lock_run_dir(out, hold=False)
    config_path = out / "config.json"
    if config_path.is_file() and not overwrite:
        changed = changed_settings(json.loads(config_path.read_text()), known)
        refuse_changed_settings(out, [name for name in changed if name in known])


def prepare_run_dir(out: Path, config: dict, overwrite: bool = False) -> None:
    """Create and lock the run directory, or check that a resumed run uses the same settings."""
    out.mkdir(parents=True, exist_ok=True)
    lock_run_dir(out)
    config_path = out / "config.json"
    if config_path.exists() and not overwrite:
        previous = json.loads(config_path.read_text())
        refuse_changed_settings(out, changed_settings(previous, config))
        log.info("resuming the run in %s", out)
        if previous != config:  # an older run directory: record what it lacked, and what its version ran
            config_path.write_text(json.dumps({**config, **with_unrecorded_settings(previous)}, indent=2, sort_keys=True) + "\n")
        return
    if overwrite:
        for name in RESTARTED_FILES:
            (out / name).unlink(missing_ok=True)
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
