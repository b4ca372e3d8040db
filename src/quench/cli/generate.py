"""`quench generate`: sample completions for a benchmark into samples.jsonl (resumable)."""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

from quench.datasets import Problem
from quench.cli import builders, console, flags, settings, validate
from quench.runs import rundir
from quench.runs.records import SampleRecord
from quench.runs.samples import GenerateConfig, generate_samples, resume_samples


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("generate", help="sample completions into samples.jsonl")
    flags.add_benchmark_args(parser)
    flags.add_model_args(parser, auto=True)
    flags.add_sampling_args(parser)
    add_output_args(parser)
    flags.add_ray_args(parser)
    parser.set_defaults(handler=run)


def add_output_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=None, help="run directory (default: runs/<benchmark>-<model>-...)")
    parser.add_argument("--overwrite", action="store_true", help="start the run in --out again from nothing")


def default_out(args: argparse.Namespace) -> Path:
    kind = "partial" if args.partial else "full"
    return Path("runs") / f"{slug(args.benchmark)}-{kind}-{slug(args.model)}-n{args.samples}-t{args.temperature:g}"


def slug(text: str) -> str:
    """A name or path as a piece of a run directory's name (its last part, runs of other characters as '-')."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", Path(text).name or text).strip("-")


def run_config(args: argparse.Namespace, problems: list[Problem], loaded, stops: tuple[str, ...]) -> dict:
    """The run's settings for config.json: `dtype` as asked (e.g. auto), `dtype_used` what the model loaded as."""
    return {**settings_before_load(args, problems), "dtype_used": str(loaded.dtype).removeprefix("torch."),
            "weights": builders.weights_of(loaded), "kv_cache": builders.kv_cache_of(args, loaded),
            "prompt_format": loaded.prompt_format, "stop": list(stops)}


def settings_before_load(args: argparse.Namespace, problems: list[Problem]) -> dict:
    """The run's settings the flags decide alone (the loaded model decides the dtype, prompt format and stops)."""
    return {
        "model": args.model, "dtype": args.dtype, "backend": args.backend,
        "benchmark": args.benchmark, "split": args.split, "partial": args.partial,
        "tasks": [p.task_id for p in problems], "n": args.samples, "temperature": args.temperature,
        "top_p": args.top_p, "top_k": args.top_k, "max_new_tokens": args.max_new_tokens, "seed": args.seed,
        **stopping_config(args),
        "unsafe_unconfined": getattr(args, "unsafe_unconfined", False),  # `run` executes; `generate` does not
    }


def stopping_config(args: argparse.Namespace) -> dict:
    """Early stopping settings for config.json; None when off, so runs made before these flags resume."""
    loop_rule = settings.loop_rule_of(args).settings() if "loop" in args.stop_rule.split(",") else None
    return {"guard": args.guard, "stop_rule": None if args.stop_rule == "none" else args.stop_rule, "loop_rule": loop_rule}


def generate_into(args: argparse.Namespace, problems: list[Problem], out: Path) -> list[SampleRecord]:
    """Check the run directory, load the model, prepare the run directory, generate what is missing; print progress."""
    sampling = settings.sampling_from_args(args)
    settings.resolve_run_defaults(args, out)
    rundir.check_run_dir(out, settings_before_load(args, problems), args.overwrite)  # before a load of seconds
    finished = None if args.overwrite else finished_samples(args, problems, out)
    if finished is not None:
        rundir.lock_run_dir(out)
        console.say(f"{out}: every sample is on disk; nothing to generate, the model is not loaded")
        return finished
    loaded = builders.load_model_from_args(args)
    stops = settings.stops_from_args(args, loaded.prompt_format)
    backend = builders.backend_from_args(args, loaded, len(problems) * args.samples)  # a missing draft or guard fails
    rundir.prepare_run_dir(out, run_config(args, problems, loaded, stops), args.overwrite)
    config = GenerateConfig(args.samples, sampling, stops, loaded.prompt_format, args.stop_rule, settings.loop_rule_of(args))
    samples_path = out / "samples.jsonl"
    already = len(resume_samples(samples_path))
    bar = console.bar(total=len(problems) * args.samples, initial=already, desc="generate", unit="sample")
    started, tokens = time.perf_counter(), 0

    def on_sample(record: SampleRecord) -> None:
        nonlocal tokens
        tokens += record.num_tokens or 0
        bar.update(1)
        bar.set_postfix_str(console.token_rate(tokens, time.perf_counter() - started))

    try:
        samples = generate_samples(
            problems, backend, builders.prompt_encoder(loaded), config, samples_path, on_sample
        )
    finally:
        bar.close()
        getattr(backend, "close", lambda: None)()  # Ray: free the actors' CPUs/GPUs for what runs next
    return samples


def finished_samples(args: argparse.Namespace, problems: list[Problem], out: Path) -> list[SampleRecord] | None:
    """A finished run's samples, when `out` holds every sample these flags ask for under the settings it
    records (those the loaded model would decide, the prompt format and stops, included); else None."""
    config_path, samples_path = out / "config.json", out / "samples.jsonl"
    if not (config_path.is_file() and samples_path.is_file()) or not settings.recorded_settings_match(config_path, args):
        return None
    samples = resume_samples(samples_path)
    wanted = {(p.task_id, i) for p in problems for i in range(args.samples)}
    if not wanted <= {(s.task_id, s.sample_index) for s in samples}:
        return None
    tasks = {p.task_id for p in problems}
    return [s for s in samples if s.task_id in tasks]


def run(args: argparse.Namespace) -> int:
    validate.check_generation_args(args)
    problems = settings.problems_from_args(args)
    out = args.out or default_out(args)
    validate.check_out_dir(out)
    samples = generate_into(args, problems, out)
    print(f"{len(samples)} samples in {out / 'samples.jsonl'}")
    return 0
