"""Flags and helpers shared by the subcommands."""

from __future__ import annotations

import argparse
import atexit
import os
import re
from pathlib import Path
from typing import Callable, Iterable

from quench.cli import remote, work_settings
from quench.datasets import Problem, language_of, load_benchmark, parse_tasks
from quench.datasets.problem import PLUS_BENCHMARK
from quench.errors import QuenchError
from quench.execution import SandboxLimits, SandboxPool, choose_isolation
from quench.execution.limits import FACTOR as LIMIT_FACTOR
from quench.execution.toolchains import prepare as prepare_toolchain
from quench.engine import SamplingParams
from quench.engine.config import DRAFT_LENGTHS, DRAFTERS, MAX_LOOP_TOKENS, ConfigError, EngineConfig, drafting_defaults
from quench.runs.backends import BackendOptions, make_backend
from quench.runs.calibration import TimeLimitRule
from quench.runs.samples import STOP_RULES
from quench.models import DEFAULT_PRESET
from quench.stopping import default_stop_sequences

ENGINE_DEFAULTS = EngineConfig()  # the flags' defaults are the engine's own
SAMPLING_DEFAULTS = SamplingParams()  # ... and the sampling flags' are SamplingParams'
AUTO_STOP_RULE = "auto"  # --stop-rule's default: `resolve_run_defaults`
ENGINE_FLAGS = {  # flag -> EngineConfig field
    "--batch-size": "batch_size", "--speculate": "drafter", "--draft-length": "draft_length",
    "--draft-tokens": "draft_tokens", "--draft-confidence": "draft_confidence", "--draft-stop": "draft_stop",
    "--draft-max-rows": "draft_max_rows", "--batch-invariant": "batch_invariant", "--draft-loop-tokens": "draft_loop_tokens",
}

BENCHMARK_HELP = ("humaneval, mbpp, mbpp+ (MBPP with EvalPlus' extra tests), MBXP's mbjsp (JavaScript), mbgp (Go), "
                  "mbcpp (C++), mbjp (Java), or a HumanEval-format .jsonl file")


def add_benchmark_args(parser: argparse.ArgumentParser, partial: bool = True) -> None:
    parser.add_argument("--benchmark", default="humaneval",
                        help=BENCHMARK_HELP)
    parser.add_argument("--split", default=None,
                        help="MBPP split (MBPP and MBXP, by task number): test (default), validation, train, fewshot, all")
    parser.add_argument("--tasks", default=None, help="task ids or numbers, e.g. '0,3,10-12'")
    parser.add_argument("--limit", type=int, default=None, help="keep the first N problems")
    if partial:
        parser.add_argument("--partial", action="store_true", help="ReCode partial-code prompts")


BACKEND_HELP = {"hf": "hf: Hugging Face generate", "quench": "quench: quench's engine (docs/engine.md)",
                "openai": "openai: an OpenAI-compatible server at --base-url (docs/serving.md)"}


def add_model_args(parser: argparse.ArgumentParser, backends: tuple[str, ...] = ("hf", "quench", "openai"),
                   engines: bool = True, batch_size: int = ENGINE_DEFAULTS.batch_size, auto: bool = False) -> None:
    """The model flags; `backends` and `engines` (several engine processes) are those the command accepts,
    so that its help lists nothing it would refuse; `batch_size`: the command's default slots; `auto`: engines,
    batch size and speculation default to `auto`, chosen from the work and the machine (`work_settings`)."""
    parser.add_argument("--model", default=DEFAULT_PRESET, help="preset, HF model directory, or .gguf file")
    parser.add_argument("--dtype", default="auto", help="auto, bfloat16, float16, float32")
    parser.add_argument("--weights", default="auto", choices=["auto", "dequantized", "gguf", "gguf-int8"],
                        help="GGUF models: gguf-int8 (the projections and head run on the file's blocks as stored "
                             "times 8-bit activations, integer sums), gguf (the blocks, float32 activations) or "
                             "dequantized (weights dequantized once, --dtype's); auto (default): gguf-int8 for a "
                             "preset or .gguf file on a CPU with quench's native kernels, else dequantized "
                             "(docs/engine.md)")
    parser.add_argument("--device", default="cpu", help="torch device: cpu (default), cuda, cuda:1, ...")
    parser.add_argument("--prompt-format", default=None, choices=["chat", "completion"],
                        help="default: the preset's, or what a quench checkpoint records, else completion")
    if len(backends) > 1:
        parser.add_argument("--backend", default="quench", choices=backends,
                            help="; ".join(BACKEND_HELP[name] for name in backends))
    else:
        parser.set_defaults(backend=backends[0])
    if auto:
        parser.add_argument("--batch-size", type=work_settings.batch_size_value, default=work_settings.AUTO,
                            metavar="N|auto", help="rows decoded together (default auto: each engine's share of the "
                                                   f"samples, a power of two from {work_settings.MIN_AUTO_BATCH} to "
                                                   f"{work_settings.MAX_AUTO_BATCH})")
    else:
        parser.add_argument("--batch-size", type=int, default=batch_size,
                            help="rows decoded together (default %(default)s)")
    if engines:
        parser.add_argument("--engines", default=work_settings.AUTO if auto else "1", metavar="N|auto",
                            help="generation processes on this machine, each with its own model and --threads/N torch "
                                 "threads (auto: one per thread on a CPU where each gets at least "
                                 f"{work_settings.MIN_ROWS_PER_ENGINE} samples and memory holds their models; default "
                                 "%(default)s); on a CPU several one-thread engines decode more than one engine with "
                                 "several threads (docs/engine.md, Engine processes)")
    else:
        parser.set_defaults(engines="1")
    engine = parser.add_argument_group("quench engine")
    engine.add_argument("--speculate", default=work_settings.AUTO if auto else ENGINE_DEFAULTS.drafter,
                        choices=(work_settings.AUTO, *DRAFTERS) if auto else DRAFTERS,
                        help="speculative decoding: ngram = prompt lookup, draft = a draft model (--draft), hybrid = "
                             "prompt lookup where it matches, else the draft model; auto: hybrid for greedy runs where "
                             "a draft is shipped for the model, else ngram, none for sampled runs (whose acceptance "
                             "test is not one arithmetic order on every CPU) (default %(default)s)")
    engine.add_argument("--draft", default="auto", metavar="auto|PATH",
                        help="draft model for --speculate draft or hybrid (auto: the one shipped for the preset); "
                             "a PATH without one of them is refused")
    engine.add_argument("--draft-tokens", type=int, default=ENGINE_DEFAULTS.draft_tokens,
                        help="fixed draft length, or where BASS's length starts (default %(default)s)")
    engine.add_argument("--draft-length", default=ENGINE_DEFAULTS.draft_length, choices=DRAFT_LENGTHS,
                        help="bass: dynamic per batch; fixed")
    engine.add_argument("--draft-confidence", type=float, default=ENGINE_DEFAULTS.draft_confidence, metavar="P",
                        help="draft model: end a row's draft before a token the draft gives probability < P "
                             "(default %(default)s: never)")
    engine.add_argument("--draft-stop", type=float, default=None, metavar="P",
                        help="draft model: end a row's draft, past its floor, once the product of its tokens' draft "
                             f"probabilities falls below P (0: never; default: {drafting_defaults(1).draft_stop} at "
                             f"batch 1, {drafting_defaults(2).draft_stop} above)")
    engine.add_argument("--draft-loop-tokens", type=int, default=ENGINE_DEFAULTS.draft_loop_tokens, metavar="N",
                        help="prompt lookup: a row whose output is in a repetition loop drafts N tokens of the "
                             f"loop's continuation, whatever the draft length (default %(default)s; 0: off; at most "
                             f"{MAX_LOOP_TOKENS}); the output is unchanged")
    engine.add_argument("--draft-max-rows", type=int, default=ENGINE_DEFAULTS.draft_max_rows, metavar="N",
                        help="speculation pauses (regular steps) while more than N rows are live (0: never; "
                             "default %(default)s: past that drafts cost more than they save)")
    engine.add_argument("--batch-invariant", action=argparse.BooleanOptionalAction, default=ENGINE_DEFAULTS.batch_invariant,
                        help="every token's logits bit-identical at any batch size, position, speculation setting and "
                             "thread count (docs/engine.md, Batch invariance). Default: on wherever the kernels serve "
                             "the model (Llama's layer, float32 or bfloat16, native kernels built), else off with a "
                             "warning; --batch-invariant: an error where they cannot; --no-batch-invariant: off")
    engine.add_argument("--guard", default=None, metavar="auto|PATH",
                        help="GenGuard early stopping from the model's hidden state (auto: the shipped guard)")
    if "openai" in backends:
        remote.add_openai_args(parser)


def add_sampling_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-n", "--samples", type=int, default=1, help="samples per problem")
    parser.add_argument("--temperature", type=float, default=SAMPLING_DEFAULTS.temperature, help="0 = greedy")
    parser.add_argument("--top-p", type=float, default=SAMPLING_DEFAULTS.top_p, help="nucleus sampling (default %(default)s: off)")
    parser.add_argument("--top-k", type=int, default=SAMPLING_DEFAULTS.top_k,
                        help="sample from the k likeliest tokens (default %(default)s: off)")
    parser.add_argument("--max-new-tokens", type=int, default=SAMPLING_DEFAULTS.max_new_tokens, help="default %(default)s")
    parser.add_argument("--stop", action="append", default=None, help="a stop sequence (repeatable); default per benchmark")
    parser.add_argument("--stop-rule", default=AUTO_STOP_RULE, choices=(AUTO_STOP_RULE, *STOP_RULES), metavar="RULE",
                        help=f"auto or one of {', '.join(STOP_RULES)} (default %(default)s). function: stop an answer "
                        "once its function is complete; loop: once it only repeats itself (its last 300 characters "
                        "equal those one period earlier); function,loop: either (docs/stopping.md); auto: loop for "
                        "greedy answers (one that only repeats itself would repeat to the token limit), none for "
                        "sampled ones, and a resumed run's own rule; the hf backend cuts the text after generation "
                        "instead")
    parser.add_argument("--seed", type=int, default=SAMPLING_DEFAULTS.seed, help="sampling seed (default %(default)s)")


def add_execution_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workers", type=int, default=None, help="sandbox workers (default: CPU count)")
    parser.add_argument("--timeout", type=float, default=SandboxLimits.timeout_s, metavar="SECONDS",
                        help="T_base: the floor of each problem's wall-clock limit per program (default "
                             "%(default)s); with --timeout-factor 0, every program's limit")
    parser.add_argument("--timeout-factor", type=float, default=LIMIT_FACTOR, metavar="K",
                        help="each problem's programs may take max(T_base, K x its reference solution's time, "
                             "measured here once before the samples run) (default %(default)g, evalplus'); "
                             "recorded in config.json and reused on resume; 0: the fixed --timeout for every program. "
                             "A problem without a reference gets T_base; MBPP+ limits each input from its "
                             "reference's time instead")
    parser.add_argument("--k", default=None,
                        help="pass@k values, each at most the samples per problem (default: those of 1,10,100 it allows)")
    add_unconfined_arg(parser)


def add_unconfined_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--unsafe-unconfined", action="store_true",
                        help="run programs even where quench cannot confine them (no working bubblewrap, no user to "
                             "drop to): they could read, change and delete your files; recorded in config.json")


def check_sandbox(args: argparse.Namespace) -> None:
    """Before any work: refuse a command that would run programs unconfined without --unsafe-unconfined."""
    if not hasattr(args, "unsafe_unconfined") or getattr(args, "no_validate", False) or getattr(args, "list", False):
        return
    needed = getattr(args, "needs_sandbox", None)  # a subcommand that runs programs only with some flags
    if needed is not None and not needed(args):
        return
    choose_isolation(allow_unconfined=args.unsafe_unconfined)


def say_isolation(isolation: str) -> None:
    """A line on the terminal when programs run with less than bubblewrap's namespaces."""
    from quench.cli import console

    if isolation == "rlimits":
        console.say("note: bubblewrap is unavailable; programs run as a uid of their own under rlimits and Landlock, without namespaces")
    elif isolation == "unconfined":
        console.say("note: programs run UNCONFINED (--unsafe-unconfined): they can read, change and delete your files")


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
    """--stop-rule auto and --weights auto (in `args`) as a resumed run in `out` was started: its own rule and
    weights (runs recorded before either default: none, dequantized); for a new run, the stop rule loop for greedy
    answers and none for sampled ones (the weights resolve when the model loads)."""
    recorded = recorded_config(out, args)
    if args.stop_rule == AUTO_STOP_RULE:
        if recorded is not None:
            args.stop_rule = recorded.get("stop_rule") or "none"
        else:
            args.stop_rule = "loop" if args.temperature == 0 else "none"
    if getattr(args, "weights", None) == "auto" and recorded is not None:
        args.weights = recorded.get("weights") or "dequantized"


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


def parse_ks(spec: str) -> tuple[int, ...]:
    try:
        ks = tuple(sorted({int(k) for k in spec.split(",") if k.strip()}))
    except ValueError:
        raise QuenchError(f"--k must be a comma-separated list of integers, got {spec!r}") from None
    if not ks or min(ks) < 1:
        raise QuenchError(f"--k values must be >= 1, got {spec!r}")
    return ks


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", Path(text).name or text).strip("-")


def add_ray_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ray", default=None, metavar="auto|ADDRESS",
                        help="spread generation and execution over a Ray cluster (docs/ray.md)")
    parser.add_argument("--replicas", "--ray-actors", dest="ray_actors", type=int, default=None, metavar="N",
                        help="engine replicas (generation actors) on the cluster, as in `quench serve --replicas` "
                             "(--ray-actors: the same; default: one per GPU, else per CPU)")
    parser.add_argument("--cpus-per-replica", "--ray-cpus-per-actor", dest="ray_cpus_per_actor", type=float, default=1.0,
                        metavar="C", help="CPUs (torch threads) per replica, as in `quench serve` (--ray-cpus-per-actor: "
                                          "the same)")


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
        flag = next((f for f, field in ENGINE_FLAGS.items() if field == err.field), err.field)
        raise QuenchError(f"{flag} {err.reason}") from None


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


def torch_threads() -> int:
    """The torch threads this run was given (--threads, OMP_NUM_THREADS or the busy-machine default)."""
    value = os.environ.get("OMP_NUM_THREADS", "1")
    return int(value) if value.isdigit() and int(value) > 0 else 1


def local_engines(args: argparse.Namespace, loaded, options: BackendOptions, engines: int):
    """`engines` engine processes sharing this run's threads (where they apply: `check_engines`)."""
    from quench.distributed import ModelSpec
    from quench.distributed.local import LocalEngines

    spec = ModelSpec(args.model, args.dtype, args.device, loaded.prompt_format, options, weights_of(loaded))
    backend = LocalEngines(spec, engines, max(1, torch_threads() // engines))
    atexit.register(backend.close)
    return backend


def load_model_from_args(args: argparse.Namespace):
    """The local model (loaded), or for --backend openai what is known of the served one (nothing loads)."""
    remote.check_remote_args(args)
    if args.backend == "openai":
        return remote.remote_model(args)
    from quench.cli import console

    return console.load_model(args.model, args.dtype, args.device, args.prompt_format, weights_from_args(args))


def weights_from_args(args: argparse.Namespace) -> str:
    """--weights as `load_model` takes it: auto stays auto (`resolve_weights`) except for Hugging Face `generate`,
    which multiplies dequantized weights only."""
    weights = getattr(args, "weights", "dequantized")
    return "dequantized" if weights == "auto" and getattr(args, "backend", "quench") == "hf" else weights


def weights_of(loaded) -> str:
    """The weights mode a loaded model runs (`load_model` marks GGUF modes on the model), for other processes."""
    return getattr(getattr(loaded, "model", None), "quench_weights", "dequantized")


def prompt_encoder(loaded) -> Callable[[str], tuple[int, ...]]:
    """A benchmark prompt -> the request's prompt ids: the model's tokens, or a server's text (`RemoteModel`)."""
    from quench.models import encode_prompt
    from quench.runs.openai_backend import RemoteModel

    if isinstance(loaded, RemoteModel):
        return loaded.encode

    return lambda text: encode_prompt(loaded, text)


def prompt_formatter(loaded) -> Callable[[str], str]:
    """A benchmark prompt -> the text the model continues (the chat template applied), or the text a server gets."""
    from quench.models import format_prompt
    from quench.runs.openai_backend import RemoteModel

    if isinstance(loaded, RemoteModel):
        return loaded.format

    return lambda text: format_prompt(loaded, text)


def work_of(args: argparse.Namespace, loaded, rows: int) -> work_settings.Work:
    """The run's generation work as `work_settings` sees it."""
    from quench.models.draft import shipped_draft_path

    model = getattr(loaded, "model", None)
    weight_bytes = sum(t.numel() * t.element_size() for t in model.state_dict().values()) if model is not None else 0
    return work_settings.Work(
        rows=rows, greedy=args.temperature == 0, backend=args.backend, device=args.device, threads=torch_threads(),
        one_engine_only=bool(getattr(args, "ray", None)) or getattr(args, "time_budget", None) is not None,
        draft_shipped=shipped_draft_path(getattr(loaded, "name", args.model)).is_file(),
        weight_bytes=weight_bytes, free_bytes=work_settings.available_memory())


def resolve_auto_settings(args: argparse.Namespace, loaded, rows: int) -> None:
    """Replace each `auto` of --engines, --batch-size and --speculate by its choice for `rows` samples (in `args`),
    and say what was chosen where anything was."""
    flags = (str(getattr(args, "engines", "1")), str(args.batch_size), args.speculate)
    if work_settings.AUTO not in flags:
        return
    choice = work_settings.choose(work_of(args, loaded, rows), *flags)
    args.engines, args.batch_size, args.speculate = str(choice.engines), choice.batch_size, choice.drafter
    from quench.cli import console

    console.say(f"engine: {choice.describe()} (auto, for {rows} samples)")


def backend_from_args(args: argparse.Namespace, loaded, rows: int | None = None):
    """The local backend, a server's (--backend openai), or generation actors on the Ray cluster of --ray; `rows`:
    the samples the run generates, from which `auto` settings are chosen."""
    if args.backend == "openai":
        return remote.openai_backend(args)
    resolve_auto_settings(args, loaded, rows if rows is not None else int(ENGINE_DEFAULTS.batch_size))
    options = backend_options_from_args(args)
    if not getattr(args, "ray", None):
        engines = engine_count(args)
        return local_engines(args, loaded, options, engines) if engines > 1 else make_backend(loaded, options)
    from quench.distributed import ModelSpec, RayOptions, make_ray_backend

    spec = ModelSpec(args.model, args.dtype, args.device, loaded.prompt_format, options, weights_of(loaded))
    return make_ray_backend(args.ray, spec, RayOptions(num_actors=args.ray_actors, cpus_per_actor=args.ray_cpus_per_actor))


def time_limit_rule(args: argparse.Namespace) -> TimeLimitRule:
    """--timeout and --timeout-factor: each problem's limit (runs/calibration.py)."""
    return TimeLimitRule(args.timeout, args.timeout_factor)


def plus_limits(limits: SandboxLimits, problems: Iterable[Problem], workers: int | None) -> SandboxLimits:
    """For MBPP+ problems: their expected outputs computed first, and a wall clock that fits their inputs."""
    plus = [p.task_id for p in problems if p.benchmark == PLUS_BENCHMARK]
    if not plus:
        return limits
    from quench.execution.plus import prepared_limits

    return prepared_limits(limits, plus, workers or os.cpu_count() or 1)


def pool_from_args(args: argparse.Namespace, problems: Iterable[Problem] = ()):
    """A SandboxPool, or sandboxes on the Ray cluster of --ray; use it as a context manager.
    MBPP+ `problems` get their expected outputs first (`plus_limits`)."""
    limits = plus_limits(SandboxLimits(timeout_s=args.timeout), problems, args.workers)
    prepare_toolchain(language_of(getattr(args, "benchmark", "")))  # e.g. C++'s precompiled header, once
    if not getattr(args, "ray", None):
        return SandboxPool(args.workers, limits, allow_unconfined=args.unsafe_unconfined)
    from quench.distributed import make_ray_pool

    return make_ray_pool(args.ray, args.workers, limits, allow_unconfined=args.unsafe_unconfined)
