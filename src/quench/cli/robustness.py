"""`quench robustness`: how robust is this model, and where does it break? (ReCode metrics)"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

from quench.cli import builders, console, flags, settings, validate
from quench.cli.generate import add_output_args, slug, stopping_config
from quench.errors import QuenchError
from quench.runs import rundir
from quench.stats.figures import rounded
from quench.cli.perturb import add_profile_arg
from quench.perturbations.base import CATEGORIES
from quench.perturbations.catalog import names, perturbation_class

if TYPE_CHECKING:
    from quench.runs.records import SampleRecord

# The embedded default: a HumanEval subset and transformation set sized for a 2-core CPU with the default
# model (its time: docs/benchmarks.md, "The default `quench robustness`").
DEFAULT_TASKS = "0-19"
DEFAULT_SEEDS = 5  # ReCode's s
DEMO_SEEDS = 1  # s of the default subset, so that `quench robustness` alone finishes in minutes
ETA_REFRESH_S = 1.0  # the time left is recomputed at most this often (a few ms at ReCode's full setting)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("robustness", help="perturb, generate, execute and report ReCode robustness")
    flags.add_benchmark_args(parser, partial=False)  # robustness runs full and partial prompts itself
    flags.add_model_args(parser, auto=True)
    flags.add_sampling_args(parser)
    flags.add_execution_args(parser)
    add_output_args(parser)
    flags.add_ray_args(parser)
    parser.add_argument("--categories", default=",".join(CATEGORIES), help="comma-separated perturbation categories")
    parser.add_argument("--transforms", default=None, help="comma-separated transformation names (default: all non-model ones of the categories)")
    parser.add_argument("--seeds", type=int, default=None,
                        help=f"s: variants per randomised transformation (default {DEFAULT_SEEDS}; {DEMO_SEEDS} on the default subset)")
    parser.add_argument("--perturbed-dir", type=Path, default=None, help="evaluate on ReCode's released perturbed sets")
    parser.add_argument("--nominal-partial", type=Path, default=None,
                        help="the partial-code baseline for --perturbed-dir (ReCode's nominal/humaneval_partial.jsonl; "
                             "default: a *_partial.jsonl under --perturbed-dir, else the profile's split)")
    add_profile_arg(parser)
    parser.set_defaults(handler=run, k="1", partial=False)


def chosen_transforms(args: argparse.Namespace) -> tuple[str, ...]:
    categories = [c.strip() for c in args.categories.split(",") if c.strip()]
    if args.transforms:
        wanted = [t.strip() for t in args.transforms.split(",") if t.strip()]
        for name in wanted:
            perturbation_class(name)  # raises QuenchError naming an unknown transformation
        return tuple(wanted)
    return tuple(names(categories, include_model_based=False))


def applicable_transforms(transforms: tuple[str, ...], problems) -> tuple[tuple[str, ...], dict[str, str]]:
    """The transformations that apply to the problems' language, and the others with the reason (said once here)."""
    from quench.perturbations.languages import split_applicable

    kept, skipped = split_applicable(transforms, problems)
    for name, why in skipped.items():
        console.say(f"{name}: {why}")
    return tuple(kept), skipped


def apply_default_subset(args: argparse.Namespace) -> None:
    """No --tasks/--limit on HumanEval: the demo subset, sized to finish in a few minutes here."""
    demo = args.benchmark == "humaneval" and args.tasks is None and args.limit is None and args.perturbed_dir is None
    if demo:
        args.tasks = DEFAULT_TASKS
    if args.seeds is None:
        args.seeds = DEMO_SEEDS if demo else DEFAULT_SEEDS
    if demo:
        console.say(f"note: no --tasks/--limit given: the default subset HumanEval/{DEFAULT_TASKS}, s = {args.seeds} "
                   f"(its time on 2 cores: docs/benchmarks.md); pass --limit 164 --seeds {DEFAULT_SEEDS} for ReCode's full setting")


def default_out(args: argparse.Namespace) -> Path:
    return Path("runs") / f"robustness-{slug(args.benchmark)}-{slug(args.model)}-n{args.samples}-t{args.temperature:g}"


def check_args(args: argparse.Namespace) -> tuple[int, ...]:
    """Every flag and path, before the model loads and before --out is touched; the pass@k list."""
    validate.check_generation_args(args)
    validate.check_execution_args(args)
    if args.perturbed_dir is None:
        validate.check_perturbable(args.benchmark, args.profile)
    if args.seeds is not None and args.seeds < 1:
        raise QuenchError(f"--seeds must be at least 1, got {args.seeds}")
    if args.perturbed_dir is not None:
        validate.check_input_dir(args.perturbed_dir, "--perturbed-dir")
    if args.nominal_partial is not None:
        validate.check_input_file(args.nominal_partial, "--nominal-partial")
    args.k = validate.resolve_ks(args.k, args.samples)
    return validate.parse_ks(args.k)


def run(args: argparse.Namespace) -> int:
    from quench.robustness.pipeline import RobustnessConfig, run_robustness
    from quench.robustness.report import write_report

    ks = check_args(args)
    apply_default_subset(args)
    problems = settings.problems_from_args(args)
    transforms, not_applicable = applicable_transforms(chosen_transforms(args), problems)
    sampling = settings.sampling_from_args(args)
    out = args.out or default_out(args)
    validate.check_out_dir(out)
    settings.resolve_run_defaults(args, out)
    known = settings_before_load(args, problems, transforms, not_applicable)
    rundir.check_run_dir(out, known if args.dtype == "auto" else {**known, "dtype": args.dtype}, args.overwrite)
    if not args.overwrite and report_finished(args, out, ks):
        return 0
    loaded = builders.load_model_from_args(args)  # seconds: after the checks that need no model
    stops = settings.stops_from_args(args, loaded.prompt_format)
    config = RobustnessConfig(transforms, args.seeds, args.samples, ks, sampling, stops,
                              loaded.prompt_format, args.perturbed_dir, stop_rule=args.stop_rule,
                              loop_rule=settings.loop_rule_of(args), profile=args.profile,
                              nominal_partial=args.nominal_partial, order_seed=args.seed,
                              time_limits=settings.time_limit_rule(args))
    recorded = {**known, "dtype": str(loaded.dtype).removeprefix("torch."),  # what "auto" chose
                "weights": builders.weights_of(loaded), "kv_cache": builders.kv_cache_of(args, loaded),
                "prompt_format": loaded.prompt_format, "stop": list(stops)}
    rows = len(problems) * (2 + len(transforms) * args.seeds) * args.samples  # nominal, partial and every variant
    backend = builders.backend_from_args(args, loaded, rows)  # a missing draft or guard fails before --out is written
    rundir.prepare_run_dir(out, recorded, args.overwrite)
    bars = console.StageBars(own_eta=("generate",))
    with builders.pool_from_args(args, problems) as pool:
        builders.say_isolation(pool.isolation)
        try:
            outcome = run_robustness(problems, config, backend, builders.prompt_encoder(loaded),
                                     builders.prompt_formatter(loaded), bars.checking(pool), out,
                                     stage_progress(bars, args, getattr(pool, "workers", 1)))
            bars.end()
        finally:
            bars.end(complete=False)
    run_info = {**recorded, "tasks": f"{len(problems)} problems: {problems[0].task_id} … {problems[-1].task_id}",
                "backend": args.backend, "isolation": pool.isolation, **outcome.stats}
    write_report(out, outcome.metrics, outcome.examples, run_info, run=outcome.run, metrics_plus=outcome.metrics_plus)
    print_table(outcome.metrics, outcome.stats, out)
    if outcome.metrics_plus is not None:  # MBPP+: the same metrics on base + extra inputs
        write_plus(outcome, out)
    return 0


def report_finished(args: argparse.Namespace, out: Path, ks: tuple[int, ...]) -> bool:
    """Print a finished run's figures from its report, without loading the model, and say so; False where
    `out` holds no finished run of these settings (its report is written last, after every execution)."""
    from quench.robustness.metrics import RobustnessMetrics
    from quench.robustness.report import METRICS_FILE, load_metrics

    config_path, metrics_path = out / "config.json", out / METRICS_FILE
    if not (config_path.is_file() and metrics_path.is_file()):
        return False  # check_run_dir has compared config.json with the flags: what it holds is this run's
    if not settings.recorded_settings_match(config_path, args):
        return False
    metrics, run_info = load_metrics(metrics_path)
    if tuple(metrics.ks) != tuple(ks):
        return False
    console.say(f"{out}: the run is finished; its figures, without loading the model")
    print_table(metrics, run_info, out)
    plus_path = out / "metrics_plus.json"
    if plus_path.is_file():
        plus = RobustnessMetrics.from_json(json.loads(plus_path.read_text(encoding="utf-8")))
        print_plus(metrics, plus, out)
    return True


def settings_before_load(args: argparse.Namespace, problems, transforms: tuple[str, ...],
                         not_applicable: dict[str, str]) -> dict:
    """The run's settings the flags decide alone (the loaded model decides the dtype, prompt format and stops)."""
    return {"model": args.model, "benchmark": args.benchmark, "split": args.split,
            "tasks": [p.task_id for p in problems], "transforms": list(transforms), "seeds": args.seeds,
            "n": args.samples, "temperature": args.temperature, "top_p": args.top_p, "top_k": args.top_k,
            "max_new_tokens": args.max_new_tokens, "seed": args.seed,
            "perturbed_dir": str(args.perturbed_dir) if args.perturbed_dir else None, **stopping_config(args),
            "profile": args.profile, "nominal_partial": str(args.nominal_partial) if args.nominal_partial else None,
            "unsafe_unconfined": args.unsafe_unconfined,
            "not_applicable": "; ".join(f"{name}: {why}" for name, why in not_applicable.items())}


def stage_progress(bars: console.StageBars, args: argparse.Namespace, workers: int):
    """The pipeline's callbacks drawn as one bar per stage; the generate bar shows the whole run's time left
    (generation, then execution: `quench.runs.eta`) and tokens per second; each tenth of the samples says it on a line."""
    from quench.robustness.pipeline import Progress
    from quench.runs.eta import ExecutePace, RunEta

    eta = RunEta(args.max_new_tokens, ExecutePace())
    state = {"tokens": 0, "began": 0.0, "shown": 0.0, "logged": 0}

    def planned(count: int) -> None:
        checked, seconds = bars.totals.get("check"), bars.seconds.get("check")
        pace = seconds / checked if checked and seconds else ExecutePace.seconds_per_program
        eta.execute = ExecutePace(pace, workers, args.timeout)
        eta.plan(count, bars.totals.get("generate") or count)
        state.update(began=time.perf_counter(), tokens=0)

    def on_sample(record: SampleRecord) -> None:
        now = time.perf_counter()
        state["tokens"] += record.num_tokens or 0
        eta.finished(record)
        bars.advance()
        tenth = int(eta.done() * 10)
        if tenth <= state["logged"] and now - state["shown"] < ETA_REFRESH_S:
            return
        state["shown"] = now
        left = eta.left(now)
        tok_s = state["tokens"] / max(now - state["began"], 1e-9)
        bars.note(f"{tok_s:.0f} tok/s" if left is None else f"≈{clock(left.total)} left with execute, {tok_s:.0f} tok/s")
        if left is not None and tenth > state["logged"]:
            state["logged"] = tenth
            console.say(f"generate: {100 * left.done:.0f}% of samples in {clock(now - state['began'])}, about "
                        f"{clock(left.total)} left (generate {clock(left.generate)}, execute {clock(left.execute)})")

    return Progress(stage=bars.begin, transform=lambda name: bars.advance(), planned=planned,
                    started=lambda key, index: eta.started((key, index)), sample=on_sample,
                    execution=lambda record: bars.advance())


def clock(seconds: float) -> str:
    """H:MM:SS (or M:SS under an hour)."""
    whole = int(round(seconds))
    hours, rest = divmod(whole, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def write_plus(outcome, out: Path) -> None:
    """metrics_plus.json (the metrics on base + extra inputs) and plus.md (both test sets side by side)."""
    from quench.robustness.plus_table import TITLE, side_by_side

    (out / "metrics_plus.json").write_text(json.dumps(rounded(outcome.metrics_plus.to_json()), indent=2) + "\n")
    table = side_by_side(outcome.metrics, outcome.metrics_plus)
    (out / "plus.md").write_text(f"# {TITLE} (95% intervals)\n\n" + "\n".join(table) + "\n")
    print_plus(outcome.metrics, outcome.metrics_plus, out)


def print_plus(base, plus, out: Path) -> None:
    from quench.robustness.plus_table import TITLE, side_by_side

    print(f"{TITLE} (95% intervals):\n" + "\n".join(side_by_side(base, plus)))
    print(f"MBPP+ tables: {out / 'plus.md'}, {out / 'metrics_plus.json'}")


def print_table(metrics, stats: dict, out: Path) -> None:
    from quench.robustness.report import console_summary

    print("\n".join(console_summary(metrics, stats)))
    print(f"report: {out / 'report.html'} (also report.md, metrics.json)")
