"""`quench doctor`: which native kernels run on this machine, why any is off, and the forward plan of a model.

The plan (`engine.forward_plan.ForwardPlan`) is resolved from the model's config, built on the meta device,
not from a loaded model: every field depends on the config, the modules' shapes and biases and this CPU's
library, never on the weights' values, and reading the weights would take most of doctor's time. It is the
plan the engine's target runner gets under the default `EngineConfig` (and QUENCH_AMX / QUENCH_SCREEN).
"""

from __future__ import annotations

import argparse
import json
import platform
from dataclasses import asdict, fields
from typing import TYPE_CHECKING

from quench.errors import QuenchError
from quench.models.presets import DEFAULT_PRESET

if TYPE_CHECKING:
    from quench.engine.runners.forward_plan import ForwardPlan


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "doctor", help="report which native kernels are active here and why any is off (builds them if needed)"
    )
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    parser.add_argument("--model", default=DEFAULT_PRESET,
                        help="whose forward plan to print: a preset, a Hugging Face model directory or a .gguf file "
                             "(default: %(default)s; its config only, no weights are loaded)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from quench.engine.kernels import native, native_build
    from quench.engine.kernels.native_report import kernel_report

    try:
        result = native.build_result()
    except native_build.NativeBuildError as error:  # QUENCH_NATIVE_WERROR=1: reported, not raised
        result = native_build.BuildResult(None, str(error), native_build.march())
    config = native.KernelConfig.from_env()
    kernels = kernel_report(result, config)
    library = result.library
    chosen = native_build.target()
    build = {
        "machine": platform.machine(),
        "level": chosen.name,
        "level_features": chosen.level.summary if chosen.level is not None else None,
        "compiler_flags": list(chosen.compiler_flags),
        "best_level": _best_level_name(),
        "library": str(library.path) if library is not None else None,
        "openmp": library.openmp if library is not None else None,
        "error": result.reason or None,
        "config": asdict(config),
    }
    plan, why = forward_plan(args.model)
    if args.json:
        report = {"build": build, "kernels": [asdict(kernel) for kernel in kernels]}
        report["plan"] = {"model": args.model, "fields": asdict(plan) if plan is not None else None, "why": why}
        print(json.dumps(report))
        return 0
    state = "built" if library is not None else "off"
    print(f"native kernels: {state} for level {chosen.name} ({' '.join(chosen.compiler_flags)}; {platform.machine()})")
    if chosen.level is not None:
        print(f"  level: {chosen.level.summary}; this CPU's highest: {build['best_level']} (QUENCH_NATIVE_MARCH)")
    if library is not None:
        print(f"  library: {library.path} ({'OpenMP' if library.openmp else 'single-threaded: no OpenMP'})")
    else:
        print(f"  why: {result.reason}")
    print(f"  config: amx={config.amx} screen={config.screen} (QUENCH_AMX, QUENCH_SCREEN)")
    width = max(len(kernel.name) for kernel in kernels)
    for kernel in kernels:
        state = "on " if kernel.active else "off"
        detail = f"  ({kernel.reason})" if kernel.reason else ""
        print(f"{state}  {kernel.name:<{width}}{detail}")
    if plan is None:
        print(f"forward plan of {args.model}: none ({why})")
        return 0
    print(f"forward plan of {args.model} (engine defaults; from its config, no weights loaded):")
    width = max(len(field.name) for field in fields(plan))
    for field in fields(plan):
        print(f"  {field.name:<{width}}  {getattr(plan, field.name)}")
    return 0


def forward_plan(model: str) -> tuple[ForwardPlan | None, str | None]:
    """(the plan `engine_plan` gives `model` under the engine's defaults, None) or (None, why there is none)."""
    from quench.engine.config import EngineConfig
    from quench.engine.runners.forward_plan import engine_plan
    from quench.models.loading import model_skeleton

    try:
        skeleton = model_skeleton(model)
    except QuenchError as error:
        return None, str(error)
    plan = engine_plan(skeleton, EngineConfig(), device="cpu")
    if plan is None:
        return None, f"{type(skeleton).__name__} runs on the generic Hugging Face path"
    return plan, None


def _best_level_name() -> str | None:
    from quench.native_target import best_level
    from quench.engine.kernels.native_build import cpu_flags

    level = best_level(cpu_flags(), platform.machine())
    return level.name if level is not None else None
