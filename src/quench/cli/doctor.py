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
    build = {
        "machine": platform.machine(),
        "march": result.march,
        "library": str(library.path) if library is not None else None,
        "openmp": library.openmp if library is not None else None,
        "error": result.reason or None,
        "config": asdict(config),
    }
    if args.json:
        print(json.dumps({"build": build, "kernels": [asdict(kernel) for kernel in kernels]}))
        return 0
    print(f"native kernels: {'built' if library is not None else 'off'} (-march={result.march}, {platform.machine()})")
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
