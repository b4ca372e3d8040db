"""ReCode's DeadCodeInserter and DeadCodeInserterLast (profile "recode"), NatGen's semantics.

On the whole partial program (the split marker turned into a `print` statement, as ReCode does):

- candidates: every node whose type ends in `statement`, in breadth-first order, with more than
  one node and fewer than half the program's nodes;
- where: DeadCodeInserter shuffles the candidates and takes the last one that starts before the
  end of the marker line (so a random visible statement, the marker included); DeadCodeInserterLast
  takes the last such one in breadth-first order;
- what: any candidate but the marker, hidden half included (ReCode can copy a hidden statement
  into the prompt), wrapped in `for _i_N in range(0):`, `while False:` / `_i_N = 0; while _i_N < _i_N:`
  / `... > ...` or `if False:` / `_i_N = 0; if _i_N < _i_N:` / `... > ...` (each third with p=0.33).

ReCode drew from NumPy's global generator without seeding it, so its draws cannot be reproduced;
quench draws the same choices from the task's seeded generator.
"""

from __future__ import annotations

import random

from quench.perturbations.recode.code_syntax import Edit, RecodeCodeSyntax, breadth_first, line_indent, text_of

STATEMENT = "print('@@this is the line to split##')"


def count_nodes(node) -> int:  # noqa: ANN001 - tree_sitter node
    return 1 + sum(count_nodes(child) for child in node.children)


def sized_statements(root) -> list:  # noqa: ANN001
    """NatGen's statements: type `*statement`, more than one node, fewer than half the program's."""
    limit = count_nodes(root) // 2
    return [n for n in breadth_first(root)
            if n.type.endswith("statement") and 1 < count_nodes(n) < limit and text_of(n).strip()]


def dead_header(rng: random.Random) -> list[str]:
    """The lines that open a never-run block, as NatGen's three makers draw them."""
    kind = rng.choice(["for", "while", "if"])
    if kind == "for":
        return [f"for _i_{rng.randrange(10)} in range(0):"]
    p = rng.random()
    variable = f"_i_{rng.randrange(10)}"
    if p < 0.33:
        return [f"{kind} False:"]
    return [f"{variable} = 0", f"{kind} {variable} {'<' if p < 0.66 else '>'} {variable}:"]


def reindented(code: bytes, node, indent: str) -> list[str]:  # noqa: ANN001
    """The statement's lines with its own indentation replaced by `indent`."""
    own = line_indent(code, node.start_byte)
    lines = text_of(node).split("\n")
    return [indent + lines[0]] + [indent + line[len(own):] if line.startswith(own) else line for line in lines[1:]]


def insertion(code: bytes, before, body, rng: random.Random) -> Edit:  # noqa: ANN001
    indent = line_indent(code, before.start_byte)
    line_start = code.rfind(b"\n", 0, before.start_byte) + 1
    unit = "\t" if indent.startswith("\t") else "    "
    inline = bool(code[line_start:before.start_byte].strip())  # `if x: return y`: the block opens a level
    if inline:
        indent += unit
    lines = [indent + line for line in dead_header(rng)] + reindented(code, body, indent + unit)
    if inline:
        return Edit(before.start_byte, before.start_byte, "\n" + "\n".join(lines) + "\n" + indent)
    return Edit(line_start, line_start, "\n".join(lines) + "\n")


def insert_dead_code(code: bytes, root, rng: random.Random, last: bool) -> list[Edit]:  # noqa: ANN001
    statements = sized_statements(root)
    marker = code.find(STATEMENT.encode())
    split = code.find(b"\n", marker) if marker >= 0 else -1
    if split < 0:
        return []
    if not last:
        rng.shuffle(statements)
    before = next((s for s in reversed(statements) if s.start_byte <= split), None)
    if before is None:
        return []
    bodies = [s for s in statements if STATEMENT not in text_of(s)]
    if not bodies:
        return []
    return [insertion(code, before, rng.choice(bodies), rng)]


class RecodeDeadCodeInserter(RecodeCodeSyntax):
    name = "DeadCodeInserter"
    description = "any statement (hidden half included) under a never-run block, before a random visible statement"
    randomized = True
    marker_as_statement = True
    last = False

    def edits(self, code: bytes, root, rng: random.Random) -> list[Edit]:  # noqa: ANN001
        return insert_dead_code(code, root, rng, self.last)


class RecodeDeadCodeInserterLast(RecodeDeadCodeInserter):
    name = "DeadCodeInserterLast"
    description = "any statement (hidden half included) under a never-run block, before the last visible statement"
    last = True
