"""Code-syntax perturbations (ReCode's NatGen set) on the partial-code prompt, by text splicing.

Unlike ReCode, nothing is re-formatted (no black): each transformation edits the few characters
it changes. Dead code is built only from statements of the visible prompt, never from the hidden
half of the solution. The variable renamers are in `renaming.py`.
"""

from __future__ import annotations

import ast
import builtins
import functools
import keyword
import logging
import random
from abc import abstractmethod

from quench.datasets import Problem
from quench.perturbations.base import CODE_SYNTAX, CannotApply, Perturbation
from quench.perturbations.source import (
    Edit, PartialProgram, Source, as_partial, body_indent_unit, find_function,
    own_nodes, own_statements, parse, with_program,
)
from quench.perturbations.text import program_identifiers

log = logging.getLogger(__name__)
FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
SWAPPED = {ast.Lt: ">", ast.Gt: "<", ast.LtE: ">=", ast.GtE: "<=", ast.Eq: "==", ast.NotEq: "!="}
LOOSER_THAN_COMPARE = (ast.BoolOp, ast.Compare, ast.IfExp, ast.Lambda, ast.NamedExpr, ast.Yield, ast.YieldFrom)
DEAD_BODY_KINDS = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Return, ast.Assert, ast.Delete)
NOT_IN_DEAD_CODE = (ast.Yield, ast.YieldFrom, ast.Await)


class Analysed:
    """A partial program with its parse tree and the entry-point function; cached per program.

    Shared by every code transformation and seed of one problem, so derived facts are computed
    once (`cached_property`); nothing in it is ever mutated.
    """

    def __init__(self, program: PartialProgram, tree: ast.Module, function: FunctionNode) -> None:
        self.program = program
        self.source = Source(program.text)
        self.tree = tree
        self.function = function

    @functools.cached_property
    def taken(self) -> frozenset[str]:
        """Every identifier of the program, builtins and keywords: names a new name must avoid."""
        return frozenset(program_identifiers(self.tree) | set(dir(builtins)) | set(keyword.kwlist))

    @functools.cached_property
    def statements(self) -> list[ast.stmt]:
        return own_statements(self.function)

    @functools.cached_property
    def dead_code_bodies(self) -> list[ast.stmt]:
        return dead_code_bodies(self)

    @functools.cached_property
    def insertion_points(self) -> list[ast.stmt]:
        return insertion_points(self)

    def span(self, node: ast.AST) -> tuple[int, int]:
        return self.source.span(node)

    def visible(self, node: ast.AST) -> bool:
        return self.span(node)[1] <= self.program.split

    def segment(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.source.text[start:end]

    def fresh(self, name: str) -> bool:
        return name not in self.taken


@functools.lru_cache(maxsize=2048)
def analyse(program: PartialProgram, entry_point: str) -> Analysed | None:
    tree = parse(program.text)
    function = find_function(tree, entry_point) if tree else None
    if tree is None or function is None:
        return None
    return Analysed(program, tree, function)


class CodePerturbation(Perturbation):
    """Works on the partial-code problem; returns it (prompt_kind "partial") perturbed or not."""

    category = CODE_SYNTAX
    # Edits that only add blank lines outside strings cannot break the program: no re-parse.
    blank_lines_only = False

    def apply(self, problem: Problem, rng: random.Random) -> Problem:
        partial, program = as_partial(problem)
        analysed = analyse(program, partial.entry_point)
        if analysed is None:
            raise CannotApply("the program does not parse")
        edits = self.edits(analysed, rng)
        if not edits:
            return partial
        edited = program.edited(edits)
        if not self.blank_lines_only and parse(edited.text) is None:  # a bug, never a variant to keep
            log.warning("%s broke %s; refused", self.name, problem.task_id)
            raise CannotApply("the edited program does not parse")
        return with_program(partial, edited)

    @abstractmethod
    def edits(self, a: Analysed, rng: random.Random) -> list[Edit]:
        """The text edits of this transformation (empty when it does not apply)."""


def single_line(node: ast.AST) -> bool:
    return node.lineno == node.end_lineno  # type: ignore[attr-defined]


def dead_code_bodies(a: Analysed) -> list[ast.stmt]:
    """Visible one-line simple statements of the entry point's own scope."""
    out = []
    for stmt in a.statements:
        if not (isinstance(stmt, DEAD_BODY_KINDS) and single_line(stmt) and a.visible(stmt)):
            continue
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue
        if any(isinstance(n, NOT_IN_DEAD_CODE) for n in ast.walk(stmt)):
            continue
        out.append(stmt)
    return out


def insertion_points(a: Analysed) -> list[ast.stmt]:
    """Statements that start a visible line and may have a statement inserted before them."""
    out = []
    for stmt in a.statements:
        start = a.span(stmt)[0]
        if start >= a.program.split or not a.source.starts_line(start) or stmt is a.function.body[0]:
            continue
        if a.source.text.startswith("elif", start) or getattr(stmt, "decorator_list", None):
            continue
        out.append(stmt)
    return out


def dead_block(body: str, indent: str, unit: str, a: Analysed, rng: random.Random) -> str:
    """ReCode's dead-code templates: a statement under `for _i in range(0)`, `while False`, `if _i < _i`..."""
    names = [f"_i_{d}" for d in range(10) if a.fresh(f"_i_{d}")] or ["_i_dead"]
    var = rng.choice(names)
    kind = rng.choice(["for", "while", "if"])
    condition = rng.choice(["False", "<", ">"])
    inner = f"{indent}{unit}{body}\n"
    if kind == "for":
        return f"{indent}for {var} in range(0):\n{inner}"
    if condition == "False":
        return f"{indent}{kind} False:\n{inner}"
    return f"{indent}{var} = 0\n{indent}{kind} {var} {condition} {var}:\n{inner}"


class DeadCodeInserter(CodePerturbation):
    name = "DeadCodeInserter"
    description = "a visible statement, wrapped in a never-run loop or if, inserted before a random statement"
    last = False

    def edits(self, a: Analysed, rng: random.Random) -> list[Edit]:
        bodies, points = a.dead_code_bodies, a.insertion_points
        if not bodies or not points:
            return []
        body = a.segment(rng.choice(bodies))
        point = points[-1] if self.last else rng.choice(points)
        start = a.span(point)[0]
        text = dead_block(body, a.source.indent_at(start), body_indent_unit(a.source, a.function), a, rng)
        line_start = a.source.line_start(start)
        return [Edit(line_start, line_start, text)]


class DeadCodeInserterLast(DeadCodeInserter):
    name = "DeadCodeInserterLast"
    description = "dead code (as DeadCodeInserter) inserted before the last visible statement"
    last = True


def loop_body_nodes(loop: ast.For) -> list[ast.AST]:
    """Nodes of the loop body that belong to this loop (not nested loops, functions or classes)."""
    out: list[ast.AST] = []
    stack: list[ast.AST] = list(loop.body)
    while stack:
        node = stack.pop()
        out.append(node)
        if not isinstance(node, (ast.For, ast.AsyncFor, ast.While, ast.FunctionDef, ast.AsyncFunctionDef,
                                 ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))
    return out


def assigned_names(nodes: list[ast.AST]) -> set[str]:
    return {n.id for node in nodes for n in ast.walk(node) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}


def read_after(a: Analysed, name: str, offset: int) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name and a.span(n)[0] >= offset for n in ast.walk(a.function))


def range_bounds(call: ast.expr, a: Analysed) -> tuple[str, str, int] | None:
    """(start, stop, step) of a `range(...)` call with a literal step, else None."""
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "range"):
        return None
    args = call.args
    if call.keywords or not 1 <= len(args) <= 3 or any(isinstance(x, ast.Starred) for x in args):
        return None
    step = 1
    if len(args) == 3:
        literal = args[2]
        negative = isinstance(literal, ast.UnaryOp) and isinstance(literal.op, ast.USub)
        value = literal.operand if negative else literal  # type: ignore[attr-defined]
        if not (isinstance(value, ast.Constant) and type(value.value) is int and value.value):
            return None
        step = -value.value if negative else value.value
    start = a.segment(args[0]) if len(args) > 1 else "0"
    return start, a.segment(args[1] if len(args) > 1 else args[0]), step


def for_to_while(loop: ast.For, a: Analysed) -> list[Edit] | None:
    """The edits turning one `for` loop into the equivalent `while` loop, or None."""
    if loop.orelse or not isinstance(loop.target, ast.Name) or not single_line(loop.iter):
        return None
    start, end = a.span(loop)
    first = a.span(loop.body[0])[0]
    colon = a.source.text.find(":", a.span(loop.iter)[1])
    if not a.source.starts_line(start) or not a.source.starts_line(first) or colon >= a.program.split:
        return None
    body = loop_body_nodes(loop)
    if any(isinstance(n, ast.Continue) for n in body):
        return None
    var, indent = loop.target.id, a.source.indent_at(start)
    body_indent = a.source.indent_at(first)
    assigned = assigned_names(body)
    bounds = range_bounds(loop.iter, a)
    used = {n.id for n in ast.walk(loop.iter) if isinstance(n, ast.Name)}
    if var in assigned or used & assigned:
        return None
    after_body = a.source.line_end(end)
    if bounds:
        if read_after(a, var, end):
            return None  # after a while loop the counter ends one step further than after range()
        low, stop, step = bounds
        header = f"{var} = {low}\n{indent}while {var} {'<' if step > 0 else '>'} {stop}:"
        increment = f"\n{body_indent}{var} {'+=' if step > 0 else '-='} {abs(step)}"
        return [Edit(start, colon + 1, header), Edit(after_body, after_body, increment)]
    if not isinstance(loop.iter, (ast.Name, ast.Attribute, ast.Subscript)):
        return None
    mutated = any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and
                  a.segment(n.func.value) == a.segment(loop.iter) for node in body for n in ast.walk(node))
    index = f"_{var}_i"
    if mutated or not a.fresh(index):
        return None
    sequence = a.segment(loop.iter)
    header = f"{index} = 0\n{indent}while {index} < len({sequence}):"
    element = f"{body_indent}{var} = {sequence}[{index}]\n"
    first_line = a.source.line_start(first)
    return [Edit(start, colon + 1, header), Edit(first_line, first_line, element),
            Edit(after_body, after_body, f"\n{body_indent}{index} += 1")]


class ForWhileTransformer(CodePerturbation):
    name = "ForWhileTransformer"
    description = "a visible `for` loop rewritten as the equivalent `while` loop"

    def edits(self, a: Analysed, rng: random.Random) -> list[Edit]:
        loops = [n for n in own_nodes(a.function) if isinstance(n, ast.For)]
        options = [e for e in (for_to_while(loop, a) for loop in sorted(loops, key=lambda n: n.lineno)) if e]
        return rng.choice(options) if options else []


def same_expression(a: Analysed, node: ast.expr) -> bool:
    """The node's source text parses back to the node (guards against f-string positions)."""
    try:
        return ast.dump(ast.parse(a.segment(node).strip(), mode="eval").body) == ast.dump(node)
    except SyntaxError:
        return False


def is_name_char(char: str) -> bool:
    return char.isalnum() or char == "_"


def operand(a: Analysed, node: ast.expr) -> str:
    text = a.segment(node)
    return f"({text})" if isinstance(node, LOOSER_THAN_COMPARE) or (
        isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)) else text


class OperandSwap(CodePerturbation):
    name = "OperandSwap"
    description = "the operands of a visible comparison swapped (a < b -> b > a)"

    def edits(self, a: Analysed, rng: random.Random) -> list[Edit]:
        compares = [
            n for n in ast.walk(a.function)
            if isinstance(n, ast.Compare) and len(n.ops) == 1 and type(n.ops[0]) in SWAPPED
            and single_line(n) and a.visible(n) and same_expression(a, n)
        ]
        if not compares:
            return []
        node = rng.choice(sorted(compares, key=lambda n: (n.lineno, n.col_offset)))
        start, end = a.span(node)
        swapped = f"{operand(a, node.comparators[0])} {SWAPPED[type(node.ops[0])]} {operand(a, node.left)}"
        text = a.source.text
        if start and is_name_char(text[start - 1]) and is_name_char(swapped[0]):
            swapped = " " + swapped  # `x=="a"or y` -> `"a" == x or y`: keep tokens apart
        if end < len(text) and is_name_char(text[end]) and is_name_char(swapped[-1]):
            swapped += " "
        return [Edit(start, end, swapped)]
