"""What the subcommands' flags name, built: the model, the generation backend (local engines, a server, Ray
actors) and the sandbox pool."""

from __future__ import annotations

import argparse
import atexit
import os
from typing import Callable, Iterable

from quench.cli import remote, work_settings
from quench.cli.flags import ENGINE_DEFAULTS
from quench.cli.settings import backend_options_from_args, engine_config_from_args, engine_count
from quench.datasets import Problem, language_of
from quench.datasets.problem import PLUS_BENCHMARK
from quench.execution import SandboxLimits, SandboxPool
from quench.execution.toolchains import prepare as prepare_toolchain
from quench.runs.backends import BackendOptions, make_backend

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


def kv_cache_of(args: argparse.Namespace, loaded) -> str | None:
    """The dtype of the KV caches quench's engine keeps for the run's model (--kv-cache resolved), for config.json;
    None where the engine does not run it (a server, Hugging Face `generate`). A refusal is a ConfigError."""
    model = getattr(loaded, "model", None)
    if args.backend != "quench" or model is None:
        return None
    from quench.engine.runners.forward_plan import engine_plan

    plan = engine_plan(model, engine_config_from_args(args))
    return plan.kv_dtype if plan is not None else str(model.get_input_embeddings().weight.dtype).removeprefix("torch.")


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
        weight_bytes=weight_bytes, free_bytes=work_settings.available_memory(), weights=weights_of(loaded))


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


def say_isolation(isolation: str) -> None:
    """A line on the terminal when programs run with less than bubblewrap's namespaces."""
    from quench.cli import console

    if isolation == "rlimits":
        console.say("note: bubblewrap is unavailable; programs run as a uid of their own under rlimits and Landlock, without namespaces")
    elif isolation == "unconfined":
        console.say("note: programs run UNCONFINED (--unsafe-unconfined): they can read, change and delete your files")
