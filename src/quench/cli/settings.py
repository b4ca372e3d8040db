"""The subcommands' settings read from their flags (and from a resumed run's config.json): sampling, stops,
the engine's config, the problems; each QuenchError names the flag that is wrong."""

from __future__ import annotations

import argparse
from pathlib import Path

from quench.cli import work_settings
from quench.cli.flags import AUTO_STOP_RULE, ENGINE_DEFAULTS, ENGINE_FLAGS
from quench.datasets import Problem, load_benchmark, parse_tasks
from quench.errors import QuenchError
from quench.execution import choose_isolation
from quench.engine import SamplingParams
from quench.engine.config import ConfigError, EngineConfig
from quench.runs.backends import BackendOptions
from quench.runs import rundir
from quench.runs.calibration import TimeLimitRule
from quench.stopping import default_stop_sequences
from quench.stopping.loop_rule import LOOP_RULE, LoopRule

def check_sandbox(args: argparse.Namespace) -> None:
    """Before any work: refuse a command that would run programs unconfined without --unsafe-unconfined."""
    if not hasattr(args, "unsafe_unconfined") or getattr(args, "no_validate", False) or getattr(args, "list", False):
        return
    needed = getattr(args, "needs_sandbox", None)  # a subcommand that runs programs only with some flags
    if needed is not None and not needed(args):
        return
    choose_isolation(allow_unconfined=args.unsafe_unconfined)


def problems_from_args(args: argparse.Namespace) -> list[Problem]:
    return load_benchmark(args.benchmark, args.split, parse_tasks(args.tasks), args.limit, args.partial)


SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "max_new_tokens", "seed")  # each one's flag: --top-p, ...


def recorded_config(out: Path, args: argparse.Namespace) -> dict | None:
    """The config.json of a run that `out` holds and these flags resume (None: a new run, or --overwrite)."""
    import json

    config_path = out / "config.json"
    if getattr(args, "overwrite", False) or not config_path.is_file():
        return None
    try:
        recorded = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # the run-directory checks name what is wrong with it
    return recorded if isinstance(recorded, dict) else None


def resolve_run_defaults(args: argparse.Namespace, out: Path) -> None:
    """--stop-rule auto, --weights auto and --kv-cache auto (in `args`) as a resumed run in `out` was started: its
    own rule, weights and KV caches (runs recorded before these defaults: none, dequantized, and float32 caches under
    GGUF weights); for a new run, the stop rule loop for greedy answers and none for sampled ones (the weights and
    caches resolve when the model loads). The loop rule's definition (`args.loop_rule`) is the resumed run's own, else
    quench's (`loop_rule_of`)."""
    recorded = recorded_config(out, args)
    if args.stop_rule == AUTO_STOP_RULE:
        if recorded is not None:
            args.stop_rule = recorded.get("stop_rule") or "none"
        else:
            args.stop_rule = "loop" if args.temperature == 0 else "none"
    ran = rundir.with_unrecorded_settings(recorded) if recorded is not None else {}
    args.loop_rule = LoopRule(**ran["loop_rule"]) if isinstance(ran.get("loop_rule"), dict) else LOOP_RULE
    if getattr(args, "weights", None) == "auto" and recorded is not None:
        args.weights = recorded.get("weights") or "dequantized"
    if getattr(args, "kv_cache", None) == "auto" and recorded is not None:
        args.kv_cache = ran.get("kv_cache") or "auto"


def loop_rule_of(args: argparse.Namespace) -> LoopRule:
    """The loop rule `resolve_run_defaults` chose: a resumed run's own definition, else quench's."""
    return getattr(args, "loop_rule", LOOP_RULE)


def sampling_from_args(args: argparse.Namespace) -> SamplingParams:
    if args.samples < 1:
        raise QuenchError(f"--samples must be at least 1, got {args.samples}")
    try:
        return SamplingParams(args.temperature, args.top_p, args.top_k, args.max_new_tokens, args.seed)
    except ValueError as err:
        field = next((f for f in SAMPLING_FIELDS if str(err).startswith(f)), None)  # the flag, not the field
        raise QuenchError(f"--{field.replace('_', '-')}{str(err)[len(field):]}" if field else str(err)) from None


def stops_from_args(args: argparse.Namespace, prompt_format: str) -> tuple[str, ...]:
    if args.stop is not None:
        return tuple(s.encode().decode("unicode_escape") for s in args.stop if s)
    return default_stop_sequences(args.benchmark, prompt_format)


def recorded_settings_match(config_path: Path, args: argparse.Namespace) -> bool:
    """Whether a run's config.json records the prompt format and stops these flags ask for (the settings the loaded
    model decides; a finished run answers without loading it only where they match)."""
    import json

    config = json.loads(config_path.read_text(encoding="utf-8"))
    recorded_format = config.get("prompt_format")
    if recorded_format is None or args.prompt_format not in (None, recorded_format):
        return False
    return args.stop is None or list(stops_from_args(args, recorded_format)) == config.get("stop")


def engine_config_from_args(args: argparse.Namespace) -> EngineConfig:
    """The engine's config from the flags; QuenchError naming the flag whose value EngineConfig rejects. A flag
    still `auto` (before `resolve_auto_settings`) is checked at the engine's own default."""
    values = {field: getattr(args, flag[2:].replace("-", "_")) for flag, field in ENGINE_FLAGS.items()}
    values = {field: getattr(ENGINE_DEFAULTS, field) if value == work_settings.AUTO else value
              for field, value in values.items()}
    values["batch_size"] = int(values["batch_size"])
    try:
        return EngineConfig(**values)
    except ConfigError as err:
        raise QuenchError(named_by_flag(err)) from None


def named_by_flag(err: ConfigError) -> str:
    """A ConfigError's text with the flag that sets its field in place of the field's name (a refusal the model's
    plan raises after loading, too)."""
    flag = next((f for f, field in ENGINE_FLAGS.items() if field == err.field), err.field)
    return f"{flag} {err.reason}"


def backend_options_from_args(args: argparse.Namespace) -> BackendOptions:
    engine = engine_config_from_args(args)
    return BackendOptions(name=args.backend, engine=engine, draft=args.draft, guard=args.guard).check()


def engine_count(args: argparse.Namespace) -> int:
    """--engines as a number (auto, before `resolve_auto_settings`: 1); QuenchError when it is not one."""
    value = str(getattr(args, "engines", "1") or "1")
    work_settings.check_value("--engines", value)
    return 1 if value == work_settings.AUTO else int(value)


def check_engines(args: argparse.Namespace) -> None:
    """QuenchError where several engine processes do not apply (checked before anything loads; auto never
    chooses several there)."""
    if engine_count(args) == 1:
        return
    if args.device != "cpu":
        raise QuenchError("--engines applies on a CPU; on a GPU run one process per device (--ray)")
    if getattr(args, "ray", None):
        raise QuenchError("--engines and --ray: each Ray actor runs one engine; set their number with --replicas")
    if getattr(args, "time_budget", None) is not None:
        raise QuenchError("--time-budget needs one engine (it samples each prompt until its deadline); drop --engines")


def time_limit_rule(args: argparse.Namespace) -> TimeLimitRule:
    """--timeout and --timeout-factor: each problem's limit (runs/calibration.py)."""
    return TimeLimitRule(args.timeout, args.timeout_factor)
