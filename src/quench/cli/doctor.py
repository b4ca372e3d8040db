"""`quench doctor`: which native kernels run on this machine, and why any is off."""

from __future__ import annotations

import argparse
import json
import platform
from dataclasses import asdict


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "doctor", help="report which native kernels are active here and why any is off (builds them if needed)"
    )
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from quench.engine import native, native_build
    from quench.engine.native_report import kernel_report

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
    if args.json:
        print(json.dumps({"build": build, "kernels": [asdict(kernel) for kernel in kernels]}))
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
    return 0


def _best_level_name() -> str | None:
    from quench.native_target import best_level
    from quench.engine.native_build import cpu_flags

    level = best_level(cpu_flags(), platform.machine())
    return level.name if level is not None else None
