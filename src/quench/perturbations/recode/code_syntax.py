"""ReCode's deterministic code-syntax transformations (profile "recode").

ReCode (NatGen on tree-sitter) works on the whole partial program, split marker included, with
the docstring taken out, and takes the first candidate in breadth-first tree order, even when it
lies in the hidden half of the body:

- ForWhileTransformer: the first `for` loop that converts: `for i in range(a, b, s)` becomes
  `i = a; while i < b: ...; i += s` (`>` and `-=` for a negative step); a loop without `range`
  over a sequence becomes `_x_i = 0; while _x_i < len(seq): x = seq[_x_i]; ...; _x_i += 1`.
- OperandSwap: the first comparison with exactly one of `< > <= >= == !=`, operands swapped.
- VarRenamerNaive: the identifier with most occurrences (not a function, class or called name,
  not imported, not a type name) renamed to `VAR_0` everywhere outside strings and comments.

`render.render` then writes the program back as ReCode did (black-formatted, cut at the
marker). The tree comes from tree-sitter's Python grammar, as in ReCode.
"""

from __future__ import annotations

import functools
import random
import string
from dataclasses import dataclass

from quench.datasets import Problem
from quench.datasets.partial import recode_partial_problem
from quench.errors import QuenchError
from quench.perturbations.base import CODE_SYNTAX, CannotApply, Perturbation
from quench.perturbations.marker import MARKER, marked_program
from quench.perturbations.recode.code_format import RecodeStream, indent_unit
from quench.perturbations.recode.render import render, sep, split_statements

MIRRORED = {"<": ">", ">": "<", "<=": ">=", ">=": "<=", "==": "==", "!=": "!="}
# Never renamed, and never edited in a docstring: NatGen's list, keywords `return` and `in` included.
TYPE_VARS = frozenset({"float", "list", "List", "int", "bool", "tuple", "str", "dict", "True", "False",
                       "self", "return", "$", "in"})
NOT_VARIABLE_PARENTS = frozenset({"function_definition", "class_definition", "call"})


@functools.lru_cache(maxsize=1)
def parser():  # noqa: ANN201 - tree_sitter.Parser
    try:
        import tree_sitter
        import tree_sitter_python
    except ImportError as err:
        raise QuenchError(f"the recode profile's code-syntax transformations need {err.name}: "
                          "pip install tree-sitter tree-sitter-python") from None
    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_python.language()))


@dataclass(frozen=True)
class Edit:
    start: int  # byte offsets in the program
    end: int
    text: str


def apply_edits(code: bytes, edits: list[Edit]) -> str:
    for edit in sorted(edits, key=lambda e: e.start, reverse=True):
        code = code[:edit.start] + edit.text.encode() + code[edit.end:]
    return code.decode()


def breadth_first(root):  # noqa: ANN001, ANN201 - tree_sitter nodes
    queue = [root]
    while queue:
        node = queue.pop(0)
        yield node
        queue.extend(node.children)


def text_of(node) -> str:  # noqa: ANN001
    return node.text.decode()


def line_indent(code: bytes, offset: int) -> str:
    start = code.rfind(b"\n", 0, offset) + 1
    line = code[start:offset].decode()
    return line[:len(line) - len(line.lstrip(" \t"))]


def body_indent(code: bytes, loop, block) -> str:  # noqa: ANN001
    """The indentation of the loop body (one level deeper than the loop for a same-line body)."""
    indent = line_indent(code, block_start(code, loop, block))
    outer = line_indent(code, loop.start_byte)
    return indent if len(indent) > len(outer) else outer + "    "


def block_text(code: bytes, loop, block, indent: str) -> str:  # noqa: ANN001
    """The loop body from the start of its line; a same-line body moves to a line of its own."""
    first = block_start(code, loop, block)
    start = code.rfind(b"\n", 0, first) + 1
    if code[start:first].strip():
        return indent + code[first:block.end_byte].decode()
    return code[start:block.end_byte].decode()


def loop_parts(loop):  # noqa: ANN001, ANN201
    """(target, `in`, iterable, body block) of a `for` loop; None when it has another shape."""
    children = loop.children
    blocks = [c for c in children if c.type == "block"]
    if len(children) < 6 or not blocks:
        return None
    return children[1], children[2], children[3], blocks[0]


def block_start(code: bytes, loop, block) -> int:  # noqa: ANN001
    """Where the body begins: a comment between the colon and the block belongs to it (as in ReCode)."""
    colon = next(c for c in loop.children if c.type == ":")
    comments = [c for c in loop.children if c.type == "comment" and colon.end_byte <= c.start_byte < block.start_byte]
    return comments[0].start_byte if comments else block.start_byte


def range_loop(code: bytes, loop) -> str | None:  # noqa: ANN001
    target, in_node, call, block = loop_parts(loop)
    if call.type != "call" or text_of(call.children[0]) != "range":
        return None
    if target.type != "identifier" or in_node.type != "in":
        return None
    args = [a for a in call.children[1].children if a.type not in ("(", ",", ")")]
    start, step = "0", "1"
    if len(args) == 1:
        stop = text_of(args[0])
    elif len(args) == 2:
        start, stop = text_of(args[0]), text_of(args[1])
    else:
        start, stop, step = (text_of(a) for a in args[:3])
    name, indent, inner = text_of(target), line_indent(code, loop.start_byte), body_indent(code, loop, block)
    compare, update = (">", f"-= {step.lstrip('- ')}") if step.lstrip().startswith("-") else ("<", f"+= {step}")
    return (f"{name} = {start}\n{indent}while {name} {compare} {stop}:\n{block_text(code, loop, block, inner)}\n"
            f"{inner}{name} {update}")


def sequence_loop(code: bytes, loop) -> str | None:  # noqa: ANN001
    target, in_node, sequence, block = loop_parts(loop)
    if target.type != "identifier" or in_node.type != "in":
        return None
    name, seq, indent = text_of(target), text_of(sequence), line_indent(code, loop.start_byte)
    inner = body_indent(code, loop, block)
    counter = f"_{name}_i"
    return (f"{counter} = 0\n{indent}while {counter} < len({seq}):\n{inner}{name} = {seq}[{counter}]\n"
            f"{block_text(code, loop, block, inner)}\n{inner}{counter} += 1")


def for_to_while(code: bytes, root) -> list[Edit]:  # noqa: ANN001
    for loop in (n for n in breadth_first(root) if n.type == "for_statement"):
        parts = loop_parts(loop)
        if parts is None:
            continue
        if "range" in text_of(loop):
            replacement = range_loop(code, loop)
        elif "in" in text_of(parts[1]):
            replacement = sequence_loop(code, loop)
        else:
            replacement = None
        if replacement is not None:
            return [Edit(loop.start_byte, parts[3].end_byte, replacement)]
    return []


def operand_swap(code: bytes, root) -> list[Edit]:  # noqa: ANN001
    for node in breadth_first(root):
        if node.type != "comparison_operator":
            continue
        operators = [c for c in node.children if c.type in MIRRORED]
        if len(operators) != 1 or len(node.children) != 3:
            continue
        left, operator, right = node.children
        return [Edit(node.start_byte, node.end_byte, f"{text_of(right)} {MIRRORED[text_of(operator)]} {text_of(left)}")]
    return []


def variable_names(root, excluded_parents: bool) -> list[str]:  # noqa: ANN001
    """Identifiers whose parent is (or is not) a function, class or call node, in tree order."""
    return [text_of(n) for n in breadth_first(root)
            if n.type == "identifier" and (n.parent.type in NOT_VARIABLE_PARENTS) == excluded_parents]


def leaf_tokens(root) -> list[str]:  # noqa: ANN001
    """NatGen's tokens: leaves, strings and comments whole."""
    out, stack = [], [root]
    while stack:
        node = stack.pop()
        if node.type == "comment" or "string" in node.type or not node.children:
            out.append(text_of(node))
        else:
            stack.extend(reversed(node.children))
    return out


def variable_to_rename(code: bytes, root) -> str | None:  # noqa: ANN001
    names = list(dict.fromkeys(variable_names(root, excluded_parents=False)))
    import_lines = b"\n".join(line for line in code.split(b"\n") if b"import" in line)
    imported = set(variable_names(parser().parse(import_lines).root_node, excluded_parents=False))
    not_variables = set(variable_names(root, excluded_parents=True))
    candidates = [n for n in names if n not in imported and n not in TYPE_VARS and n not in not_variables]
    tokens = leaf_tokens(root)
    counts = {name: tokens.count(name) for name in candidates}
    return max(candidates, key=lambda name: counts[name]) if candidates else None


def random_name(length: int, rng: random.Random) -> str:
    """ReCode's alpha-numeric name: a letter, then letters or (six times likelier) digits."""
    letters = string.ascii_uppercase + string.ascii_lowercase
    return rng.choice(letters) + "".join(rng.choice(letters + string.digits * 6) for _ in range(length - 1))


def rename_variable(code: bytes, root, new_name: str | random.Random) -> list[Edit]:  # noqa: ANN001
    """`new_name`: the name, or a generator for a random one as long as the chosen variable."""
    chosen = variable_to_rename(code, root)
    if chosen is None:
        return []
    if isinstance(new_name, random.Random):
        new_name = random_name(len(chosen), new_name)
    taken = set(variable_names(root, excluded_parents=False))
    name = new_name + "2" if new_name in TYPE_VARS or new_name in taken else new_name
    return [Edit(n.start_byte, n.end_byte, name) for n in breadth_first(root)
            if n.type == "identifier" and text_of(n) == chosen]


def code_line_indent(lines: list[str]) -> str | None:
    """The indentation of the first line of code (not blank, not a comment) in `lines`."""
    line = next((line for line in lines if line.strip() and not line.lstrip().startswith("#")), None)
    return None if line is None else line[:len(line) - len(line.lstrip(" \t"))]


def marker_statement(code: str) -> str:
    """The marker comment made a `print` statement, at the indentation of a neighbouring line of
    code: ReCode's marker takes a blank line's indentation where one precedes it (`     # print`
    under 4-space code), which as a statement would not parse."""
    lines = code.split("\n")
    at = next(i for i, line in enumerate(lines) if line.strip() == MARKER)
    indent = lines[at][:len(lines[at]) - len(lines[at].lstrip(" \t"))]
    after = code_line_indent(lines[at + 1:])
    if after is not None and indent not in (after, code_line_indent(lines[at - 1::-1])):
        indent = after
    lines[at] = indent + MARKER[2:]
    return "\n".join(lines)


class RecodeCodeSyntax(Perturbation):
    """A NatGen transformation `(code, tree) -> edits` of ReCode's marked partial program, rendered
    as ReCode wrote it."""

    category = CODE_SYNTAX
    randomized = False
    splits_itself = True  # takes the full problem: the marker needs the whole reference
    marker_as_statement = False  # the marker comment made a `print` statement while transforming

    def apply(self, problem: Problem, rng: random.Random) -> Problem:
        partial = recode_partial_problem(problem)
        marked = marked_program(problem, recode_partial_problem)
        if marked is None:
            return partial  # a one-line body: ReCode leaves the prompt as it is
        header, doc, body = sep(marked, problem.entry_point)
        code = split_statements(header + body)
        if code is None:
            raise CannotApply("the program's `;` statements cannot be put on lines of their own")
        if self.marker_as_statement:
            code = marker_statement(code)
        edits = self.edits(code.encode(), parser().parse(code.encode()).root_node, rng)
        program = apply_edits(code.encode(), edits)
        if self.marker_as_statement:
            program = program.replace(MARKER[2:], MARKER)
        prompt, rest = render(program, doc, problem.entry_point, indent_unit(partial.prompt, problem.entry_point))
        return partial.with_changes(prompt=prompt, canonical_solution=rest)

    def edits(self, code: bytes, root, rng: random.Random) -> list[Edit]:  # noqa: ANN001
        return self.function(code, root)

    def function(self, code: bytes, root) -> list[Edit]:  # noqa: ANN001
        raise NotImplementedError


class RecodeForWhile(RecodeCodeSyntax):
    name = "ForWhileTransformer"
    description = "the first convertible `for` loop in tree order (hidden half included) as a `while` loop"
    function = staticmethod(for_to_while)


class RecodeOperandSwap(RecodeCodeSyntax):
    name = "OperandSwap"
    description = "the first single comparison in tree order (hidden half included) with its operands swapped"
    function = staticmethod(operand_swap)


class RecodeVarRenamerNaive(RecodeCodeSyntax):
    name = "VarRenamerNaive"
    description = "the most frequent variable (parameters included) renamed to VAR_0 everywhere"

    def function(self, code: bytes, root) -> list[Edit]:  # noqa: ANN001
        return rename_variable(code, root, "VAR_0")


class RecodeVarRenamerRN(RecodeStream, RecodeCodeSyntax):
    name = "VarRenamerRN"
    description = "the most frequent variable renamed to a random alpha-numeric name of its length everywhere"

    def edits(self, code: bytes, root, rng: random.Random) -> list[Edit]:  # noqa: ANN001
        return rename_variable(code, root, rng)
