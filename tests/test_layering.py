"""The package layering: which top-level quench packages may import which, written down once (ALLOWED).

The engine sits low: it imports only models and errors, so GenGuard and the stop rules plug into
it (quench.engine.observers) and never the reverse. Run-level code (runs), robustness and the CLI
sit above it. The scan reads every import in src/quench, function-level ones included, so an import
circle between two modules is seen even where a function-level import hides it from Python.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from helpers import find_cycle
import quench

SRC = Path(quench.__file__).parent

# package -> the packages it may import (a module at the top, e.g. errors.py, counts as a package)
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "trusted_files": {"errors"},  # the owner, mode and hash checks of what quench loads code from
    "threads": {"errors"},
    "native_target": set(),  # the kernels' CPU level and compiler, read by the engine and by --dtype auto
    "datasets": {"errors"},
    "stats": set(),  # pass@k and bootstrap intervals: numbers in, numbers out
    "models": {"errors", "native_target"},
    "engine": {"errors", "models", "trusted_files", "native_target"},
    "execution": {"errors", "datasets", "trusted_files"},
    "stopping": {"errors", "datasets", "engine", "execution"},
    "perturbations": {"errors", "datasets", "execution", "models"},
    "runs": {"errors", "datasets", "engine", "execution", "models", "stopping", "stats"},
    "training": {"errors", "datasets", "engine", "models", "perturbations"},
    "robustness": {"errors", "datasets", "engine", "execution", "perturbations", "runs", "stats", "stopping"},
    "distributed": {"errors", "engine", "execution", "models", "runs"},
    "serve": {"errors", "engine", "models", "runs", "distributed"},  # distributed: --ray replicas
    "cli": {"errors", "threads", "native_target", "datasets", "models", "engine", "execution", "stopping", "perturbations", "runs",
            "training", "robustness", "distributed", "serve", "stats"},
}
ABOVE_THE_ENGINE = {"stopping", "execution", "robustness", "runs", "perturbations", "training", "cli"}


def reachable(package: str, graph: dict[str, set[str]]) -> set[str]:
    """Every package `package` imports, directly or through others."""
    seen: set[str] = set()
    todo = list(graph.get(package, ()))
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(graph.get(name, ()))
    return seen


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every quench import in a source file, nested ones included."""
    package = ".".join(("quench",) + path.relative_to(SRC).with_suffix("").parts[:-1])
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the file's package upwards
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]  # a module or a name in one
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module":
            if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                found.append((node.lineno, node.args[0].value))
    return [(line, name) for line, name in found if name.startswith("quench.")]


def top_package(module: str) -> str:
    """quench.engine.decode -> engine; quench.errors.QuenchError -> errors; quench.__version__ -> the root."""
    name = module.split(".")[1]
    return name if (SRC / name).is_dir() or (SRC / f"{name}.py").is_file() else ""


def package_edges() -> dict[tuple[str, str], list[str]]:
    """(importer, imported) top-level packages -> where ("file:line") each such import is."""
    edges: dict[tuple[str, str], list[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC).parts
        importer = parts[0] if len(parts) > 1 else path.stem
        if importer == "__init__":
            continue  # quench/__init__.py: the root, which every package may read
        for line, module in imported_modules(path):
            target = top_package(module)
            if target and target != importer:
                edges.setdefault((importer, target), []).append(f"{path.relative_to(SRC.parent)}:{line}")
    return edges


def test_the_allowed_graph_has_no_cycle_and_keeps_the_engine_below_the_run_pipeline():
    assert find_cycle(ALLOWED) is None
    assert not reachable("engine", ALLOWED) & ABOVE_THE_ENGINE
    assert "engine" in reachable("cli", ALLOWED) and "engine" in reachable("runs", ALLOWED)
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]  # the check can see one


def test_every_import_between_packages_is_allowed_and_the_packages_form_no_cycle():
    edges = package_edges()
    packages = {importer for importer, _ in edges} | {target for _, target in edges}
    unknown = sorted(packages - set(ALLOWED))
    assert not unknown, f"packages missing from ALLOWED in tests/test_layering.py: {unknown}"
    upward = {f"{a} -> {b}": where for (a, b), where in edges.items() if b not in ALLOWED[a]}
    assert not upward, f"imports against the layering: {upward}"
    graph: dict[str, set[str]] = {}
    for importer, target in edges:
        graph.setdefault(importer, set()).add(target)
    assert find_cycle(graph) is None
    assert ("engine", "models") in edges and ("stopping", "engine") in edges  # the scan sees real imports


def module_name(path: Path) -> str:
    """src/quench/execution/sanitize.py -> quench.execution.sanitize; a package's __init__.py -> the package."""
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_graph() -> dict[str, set[str]]:
    """Each quench module -> the quench modules it imports, function-level imports included."""
    modules = {module_name(path): path for path in SRC.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for importer, path in modules.items():
        for _, name in imported_modules(path):
            while name not in modules:  # quench.errors.QuenchError -> quench.errors
                name = name.rpartition(".")[0]
            if name != importer:
                graph.setdefault(importer, set()).add(name)
    return graph


def test_no_two_modules_import_each_other_even_through_a_function_level_import():
    graph = module_graph()
    assert "quench.runs.evaluate" in graph["quench.cli.run"]  # the scan sees a function-level import
    assert find_cycle(graph) is None, f"an import circle: {' -> '.join(find_cycle(graph) or [])}"


def test_importing_the_engine_pulls_in_nothing_above_it():
    """Every module of quench.engine, imported in a fresh interpreter: only engine, models and errors load."""
    code = (
        "import importlib, json, pkgutil, sys\n"
        "import quench.engine\n"
        "for info in pkgutil.walk_packages(quench.engine.__path__, 'quench.engine.'):\n"
        "    importlib.import_module(info.name)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('quench.'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.splitlines()[-1])
    assert "quench.engine.decode" in loaded and "quench.engine.observers" in loaded
    packages = {top_package(module) for module in loaded}
    assert packages <= {"engine"} | reachable("engine", ALLOWED), sorted(packages)
    assert not packages & ABOVE_THE_ENGINE


ENGINE_ROOMS = ("kernels", "runners", "serving")  # engine/<room>/; the modules at engine/'s top are its decode core
RUNNERS_READ_FROM_THE_CORE = {"config", "kv_cache"}  # leaf modules of the core: the configuration and the cache


def engine_room(module: str) -> str | None:
    """quench.engine.kernels.quant -> kernels; quench.engine.decode -> core:decode; outside the engine -> None."""
    parts = module.split(".")
    if parts[:2] != ["quench", "engine"] or len(parts) < 3:
        return None
    return parts[2] if parts[2] in ENGINE_ROOMS else f"core:{parts[2]}"


def test_inside_the_engine_kernels_sit_below_runners_below_the_core_below_serving():
    edges: dict[tuple[str, str], list[str]] = {}
    for path in sorted((SRC / "engine").rglob("*.py")):
        parts = path.relative_to(SRC / "engine").parts
        importer = parts[0] if len(parts) > 1 else "core"
        for line, module in imported_modules(path):
            target = engine_room(module)
            if target is not None and target.split(":")[0] != importer:
                edges.setdefault((importer, target), []).append(f"{path.name}:{line}")
    refused = {edge: where for edge, where in edges.items()
               if edge[0] == "kernels" or edge[1] == "serving"
               or (edge[0] == "runners" and edge[1].split(":")[-1] not in RUNNERS_READ_FROM_THE_CORE | {"kernels"})}
    assert not refused, f"imports against the engine's rooms: {refused}"
    assert ("runners", "kernels") in edges and ("serving", "core:decode") in edges  # the scan sees real imports
