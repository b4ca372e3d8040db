"""Extra training problems from real code available offline: the installed standard library.

A top-level function with a docstring becomes a problem whose prompt is the signature and the
docstring and whose solution is the body. Such functions have no tests: `check` only asserts the
function exists, so the perturbations' meaning check reduces to "the program still runs".
"""

from __future__ import annotations

import ast
import logging
import sysconfig
from pathlib import Path
from typing import Iterator

from quench.datasets import Problem

log = logging.getLogger(__name__)
TEST = "def check(candidate):\n    assert callable(candidate)\n"
PER_MODULE = 3  # spread the picks over many modules
BODY_LINES = (3, 25)


def plain(function: ast.FunctionDef) -> bool:
    """No decorators, annotations or generators: a definition that runs on its own."""
    args = function.args
    annotated = function.returns is not None or any(
        a.annotation is not None for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg] if a)
    generator = any(isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await)) for n in ast.walk(function))
    return not function.decorator_list and not annotated and not generator


def function_problem(module: str, lines: list[str], function: ast.FunctionDef) -> Problem | None:
    doc = function.body[0]
    if not (isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant) and isinstance(doc.value.value, str)):
        return None
    if len(function.body) < 2 or not plain(function) or function.name.startswith("_"):
        return None
    assert function.end_lineno is not None and doc.end_lineno is not None
    body = lines[doc.end_lineno:function.end_lineno]
    if not BODY_LINES[0] <= sum(1 for line in body if line.strip()) <= BODY_LINES[1]:
        return None
    prompt = "".join(lines[function.lineno - 1:doc.end_lineno])
    if "\t" in prompt + "".join(body) or not prompt.isascii():
        return None
    return Problem(f"stdlib/{module}.{function.name}", prompt, "".join(body), TEST, function.name, "stdlib")


def module_files(root: Path) -> Iterator[tuple[str, Path]]:
    for path in sorted(root.glob("*.py")):
        if not path.name.startswith("_"):
            yield path.stem, path


def stdlib_problems(limit: int, root: Path | None = None) -> list[Problem]:
    """Up to `limit` problems, a few per module, in a fixed order (module name, then line)."""
    root = root or Path(sysconfig.get_paths()["stdlib"])
    out: list[Problem] = []
    for module, path in module_files(root):
        try:
            source = path.read_text(encoding="utf-8")
            tree = ast.parse(source)
        except (SyntaxError, UnicodeDecodeError, OSError):
            continue
        lines = source.splitlines(keepends=True)
        picked = [p for node in tree.body if isinstance(node, ast.FunctionDef)
                  for p in [function_problem(module, lines, node)] if p][:PER_MODULE]
        out.extend(picked)
        if len(out) >= limit:
            break
    log.info("%d standard-library functions from %s", min(len(out), limit), root)
    return out[:limit]
