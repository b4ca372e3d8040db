"""Variable renaming (ReCode's VarRenamerNaive / VarRenamerRN; VarRenamerCB is in model_based.py).

The variable that occurs most often in the visible prompt is renamed everywhere in the entry
point (prompt and hidden rest alike), so the perturbed prompt + rest is the reference again.
Parameters that the docstring names are skipped: renaming them would orphan the mention.
"""

from __future__ import annotations

import ast
import functools
import random
import re
import string

from quench.perturbations.checked.code_syntax import Analysed, CodePerturbation
from quench.perturbations.source import Edit, docstring_node

# ReCode never renames these (type names and the like).
TYPE_VARS = frozenset({"float", "list", "List", "int", "bool", "tuple", "str", "dict", "True", "False", "self", "cls"})


def name_occurrences(a: Analysed) -> dict[str, list[tuple[int, int]] | None]:
    """Per name, every span where it occurs in the function (None: renaming it is unsafe)."""
    spans: dict[str, list[tuple[int, int]] | None] = {}

    def add(name: str, span: tuple[int, int]) -> None:
        found = spans.setdefault(name, [])
        if found is not None:
            found.append(span)

    for node in ast.walk(a.function):
        if isinstance(node, ast.Name):
            add(node.id, a.span(node))
        elif isinstance(node, ast.arg):
            start = a.source.offset(node.lineno, node.col_offset)
            add(node.arg, (start, start + len(node.arg)))
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            spans.update(dict.fromkeys(node.names))
        elif isinstance(node, ast.ExceptHandler) and node.name:
            spans[node.name] = None
        elif isinstance(node, ast.JoinedStr):
            # f-string positions are not reliable before Python 3.12
            spans.update(dict.fromkeys(n.id for n in ast.walk(node) if isinstance(n, ast.Name)))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == a.function.name:
            for kw in node.keywords:  # a recursive call passing a renamed parameter by keyword
                if kw.arg:
                    start = a.source.offset(kw.lineno, kw.col_offset)
                    add(kw.arg, (start, start + len(kw.arg)))
    return spans


def variable_to_rename(a: Analysed) -> tuple[str, list[tuple[int, int]]] | None:
    """ReCode's choice: the variable (parameter or local) that occurs most often in the visible prompt."""
    args = a.function.args
    params = [x.arg for x in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg] if x]
    stored = [n.id for n in ast.walk(a.function) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]
    occurrences = name_occurrences(a)
    doc = docstring_node(a.function)
    prose = doc.value if doc is not None else ""
    best: tuple[int, int, str, list[tuple[int, int]]] | None = None
    for name in dict.fromkeys(params + stored):
        spans = occurrences.get(name)
        if name in TYPE_VARS or name == a.function.name or name == "_" or not spans:
            continue
        if name in params and re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", str(prose)):
            continue  # the docstring talks about this parameter: renaming it would orphan the mention
        visible = [s for s in spans if s[1] <= a.program.split]
        if not visible:
            continue
        key = (-len(visible), min(s[0] for s in spans))
        if best is None or key < best[:2]:
            best = (*key, name, spans)
    return (best[2], best[3]) if best else None


@functools.lru_cache(maxsize=2048)
def rename_choice(a: Analysed) -> tuple[str, list[tuple[int, int]]] | None:
    """`variable_to_rename`, once per analysed program (shared by seeds and renamers)."""
    return variable_to_rename(a)


def rename_edits(a: Analysed, new_name: str) -> list[Edit]:
    chosen = rename_choice(a)
    if chosen is None or not a.fresh(new_name):
        return []
    return [Edit(start, end, new_name) for start, end in chosen[1]]


class VarRenamerNaive(CodePerturbation):
    name = "VarRenamerNaive"
    description = "the most frequent variable renamed to VAR_0 (prompt and hidden rest alike)"
    randomized = False

    def edits(self, a: Analysed, rng: random.Random) -> list[Edit]:
        return rename_edits(a, next(f"VAR_{i}" for i in range(100) if a.fresh(f"VAR_{i}")))


def random_name(length: int, rng: random.Random) -> str:
    """ReCode's alpha-numeric name: a letter, then letters and (six times likelier) digits."""
    first = rng.choice(string.ascii_letters)
    return first + "".join(rng.choice(string.ascii_letters + string.digits * 6) for _ in range(length - 1))


class VarRenamerRN(CodePerturbation):
    name = "VarRenamerRN"
    description = "the most frequent variable renamed to a random alpha-numeric name of the same length"

    def edits(self, a: Analysed, rng: random.Random) -> list[Edit]:
        chosen = rename_choice(a)
        if chosen is None:
            return []
        for _ in range(20):
            new = random_name(max(len(chosen[0]), 1), rng)
            if a.fresh(new) and new != chosen[0]:
                return rename_edits(a, new)
        return []
