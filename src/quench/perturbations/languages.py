"""ReCode's transformations on MBXP's languages (JavaScript, Go, C++, Java): the ones whose meaning carries over.

- docstring: quench's docstring edits applied to the prose of the comment block before the entry
  point (`/** … */` or `//` lines), one line at a time after its marker, up to the examples;
- function name: the entry point renamed as a whole identifier in the prompt, the reference and
  the test harness (every call site), the name itself chosen as for Python;
- code format: tabs for spaces (or spaces for tabs), blank lines after code lines, after the
  comment block or at the end of the prompt, and a `/** … */` block turned into `//` lines.
Everything else is not applicable, with the reason `not_applicable` gives.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Sequence

from quench.datasets import Problem
from quench.datasets.partial import partial_problem
from quench.perturbations.base import CODE_FORMAT, CODE_SYNTAX, DOCSTRING, FUNCTION_NAME, Perturbation

LANGUAGE_NAMES = {"python": "Python", "javascript": "JavaScript", "go": "Go", "cpp": "C++", "java": "Java"}
FORMAT_TRANSFORMS = ("tab_indent", "new_lines", "new_line_aftercode", "new_line_afterdoc", "doc2comments")
NOT_CARRIED = {
    CODE_SYNTAX: "its rewrites (dead code, for→while, operand swap, variable renaming) parse Python",
    "split_lines": "a line break between two tokens can end a statement (automatic semicolons in JavaScript and Go); "
                   "the Python version's `\\` continuation has no equivalent",
}
KEYWORDS = {
    "javascript": "break case catch class const continue debugger default delete do else export extends false finally "
                  "for function if import in instanceof let new null return super switch this throw true try typeof "
                  "var void while with yield await async undefined NaN Infinity arguments eval require module console",
    "go": "break case chan const continue default defer else fallthrough for func go goto if import interface map "
          "package range return select struct switch type var true false nil iota append cap close copy delete len "
          "make new panic print println recover string int float64 bool byte rune error main",
    "cpp": "alignas auto bool break case catch char class const continue default delete do double else enum explicit "
           "extern false float for friend goto if inline int long namespace new nullptr operator private protected "
           "public register return short signed sizeof static struct switch template this throw true try typedef "
           "typename union unsigned using virtual void volatile while main std string vector map set",
    "java": "abstract assert boolean break byte case catch char class const continue default do double else enum "
            "extends final finally float for goto if implements import instanceof int interface long native new null "
            "package private protected public return short static strictfp super switch synchronized this throw "
            "throws transient try void volatile while true false var main String Object Integer List Main",
}
IDENTIFIER = re.compile(r"[A-Za-z_$][\w$]*")
COMMENT_LINE = re.compile(r"^[ \t]*(?:/\*\*?|\*/|\*|//)")
MARKER = re.compile(r"^[ \t]*(?:/\*\*?|\*(?!/)|//)[ \t]?")
EXAMPLES = re.compile(r"^[*\s]*(?:>|Examples?:)")
BOILERPLATE = re.compile(r"^Code should be written in")
STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')  # the harness's messages are not names
FORBIDDEN_IN_PROSE = ("*/", "/*", "\n", "\\")


def language_name(language: str) -> str:
    return LANGUAGE_NAMES.get(language, language)


def not_applicable(name: str, category: str, language: str) -> str | None:
    """Why transformation `name` does not apply to `language`, or None when it does."""
    if language == "python":
        return None
    if category in NOT_CARRIED:
        return NOT_CARRIED[category]
    if name in NOT_CARRIED:
        return NOT_CARRIED[name]
    if name == "doc2comments" and language == "go":
        return "MBGP's description is already `//` line comments"
    if category == CODE_FORMAT and name not in FORMAT_TRANSFORMS:
        return "it edits Python's layout"
    return None


@dataclass(frozen=True)
class CommentBlock:
    """The comment lines right before the entry point's definition: `prompt[start:end]` (whole lines)."""

    start: int
    end: int
    prose: tuple[tuple[int, int], ...]  # editable [start, end) spans, one per prose line


def line_spans(text: str) -> list[tuple[int, int]]:
    """[start, end) of every line, the newline excluded."""
    out, start = [], 0
    for line in text.split("\n"):
        out.append((start, start + len(line)))
        start += len(line) + 1
    return out


def definition_line(prompt: str, entry_point: str) -> int | None:
    """Index of the first code (not comment) line that names the entry point before a `(`."""
    call = re.compile(rf"(?<![\w$]){re.escape(entry_point)}\s*\(")
    for i, (start, end) in enumerate(line_spans(prompt)):
        line = prompt[start:end]
        if call.search(line) and not COMMENT_LINE.match(line):
            return i
    return None


def comment_block(prompt: str, entry_point: str) -> CommentBlock | None:
    lines = line_spans(prompt)
    definition = definition_line(prompt, entry_point)
    if definition is None:
        return None
    first = definition
    while first > 0 and COMMENT_LINE.match(prompt[slice(*lines[first - 1])]):
        first -= 1
    if first == definition:
        return None
    prose = []
    for start, end in lines[first:definition]:
        marker = MARKER.match(prompt[start:end])
        content_start = start + (marker.end() if marker else 0)
        content = prompt[content_start:end]
        if EXAMPLES.match(content):
            break
        if not content.strip() or content.strip() == "*/" or BOILERPLATE.match(content.strip()):
            continue
        lead = len(content) - len(content.lstrip())
        prose.append((content_start + lead, content_start + len(content.rstrip())))
    return CommentBlock(lines[first][0], lines[definition - 1][1], tuple(prose))


def code_identifiers(*texts: str) -> frozenset[str]:
    """Every identifier-like word on the code (not comment) lines of the texts: kept as they are in prose."""
    words: set[str] = set()
    for text in texts:
        for line in text.split("\n"):
            if not COMMENT_LINE.match(line):
                words.update(IDENTIFIER.findall(STRING.sub(" ", line).split("//")[0]))
    return frozenset(words)


def outside_prose(prompt: str, block: CommentBlock) -> tuple[str, ...]:
    """The prompt cut at the prose spans: what a docstring edit must leave byte for byte."""
    pieces, previous = [], 0
    for start, end in block.prose:
        pieces.append(prompt[previous:start])
        previous = end
    return (*pieces, prompt[previous:])


# --- docstring --------------------------------------------------------------------------------------

def perturb_comment(perturbation: Perturbation, problem: Problem, rng: random.Random) -> Problem:
    """A docstring transformation's `edit` on each prose line of the comment block."""
    from quench.perturbations.text import segment

    block = comment_block(problem.prompt, problem.entry_point)
    if block is None or not block.prose:
        return problem
    identifiers = code_identifiers(problem.prompt, problem.canonical_solution, problem.test) | {problem.entry_point}
    prompt, shift = problem.prompt, 0
    for start, end in block.prose:
        text = problem.prompt[start:end]
        new = perturbation.edit(segment(text, identifiers), rng)  # type: ignore[attr-defined]
        if new == text or not new.strip() or any(s in new for s in FORBIDDEN_IN_PROSE):
            continue
        prompt = prompt[:start + shift] + new + prompt[end + shift:]
        shift += len(new) - len(text)
    return problem if prompt == problem.prompt else problem.with_changes(prompt=prompt)


def check_comment(base: Problem, variant: Problem) -> str:
    """Why a docstring variant is not valid ("" when it is): only the comment's prose may change."""
    if (base.canonical_solution, base.test, base.entry_point) != (
            variant.canonical_solution, variant.test, variant.entry_point):
        return "changed more than the comment's prose"
    old = comment_block(base.prompt, base.entry_point)
    new = comment_block(variant.prompt, variant.entry_point)
    if old is None or new is None or len(old.prose) != len(new.prose):
        return "the comment block no longer reads the same"
    if outside_prose(base.prompt, old) != outside_prose(variant.prompt, new):
        return "edited outside the comment's prose"
    return ""


# --- function name ----------------------------------------------------------------------------------

def name_pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w$]){re.escape(name)}(?![\w$])")


def rename_everywhere(problem: Problem, new_name: str) -> Problem:
    """The entry point renamed in the prompt, the reference and the test harness; unchanged when the
    new name is not an identifier, is a keyword or builtin of the language, or is taken already."""
    old = problem.entry_point
    texts = (problem.prompt, problem.canonical_solution, problem.test)
    if (new_name == old or not IDENTIFIER.fullmatch(new_name) or "$" in new_name
            or new_name in KEYWORDS.get(problem.language, "").split()
            or any(name_pattern(new_name).search(text) for text in texts)):
        return problem
    pattern = name_pattern(old)
    prompt, solution, test = (pattern.sub(new_name, text) for text in texts)
    return problem.with_changes(prompt=prompt, canonical_solution=solution, test=test, entry_point=new_name)


def check_static_rename(base: Problem, variant: Problem) -> str:
    """For a problem without a reference (MBGP): every occurrence of the old name became the new one."""
    if name_pattern(variant.entry_point).search(base.prompt + base.test):
        return "the new name was taken"
    renamed = rename_everywhere(base, variant.entry_point)
    if (renamed.prompt, renamed.canonical_solution, renamed.test) != (variant.prompt, variant.canonical_solution, variant.test):
        return "not every occurrence of the name was renamed"
    return ""


# --- code format ------------------------------------------------------------------------------------

def indent_unit(text: str) -> str:
    """The code's indentation unit: "\\t", or the smallest run of leading spaces on a code line."""
    widths = []
    for line in text.split("\n"):
        if not line.strip() or COMMENT_LINE.match(line):
            continue
        if line.startswith("\t"):
            return "\t"
        width = len(line) - len(line.lstrip(" "))
        if width:
            widths.append(width)
    return " " * min(widths) if widths else ""


def reindent(text: str, unit: str) -> str:
    """Leading spaces to tabs (one per `unit`), or leading tabs to four spaces each when `unit` is a tab."""
    out = []
    for line in text.split("\n"):
        stripped = line.lstrip(" \t")
        lead = line[:len(line) - len(stripped)]
        if unit == "\t":
            lead = lead.replace("\t", "    ")
        elif " " in lead and "\t" not in lead:
            lead = "\t" * (len(lead) // len(unit)) + " " * (len(lead) % len(unit))
        out.append(lead + stripped)
    return "\n".join(out)


def block_to_line_comments(prompt: str, block: CommentBlock) -> str:
    """`/** … */` lines as `//` lines at the same indentation; blank lines inside kept as `//`."""
    text = prompt[block.start:block.end]
    first = text.split("\n")[0]
    if not first.lstrip().startswith("/*") or not text.rstrip().endswith("*/"):
        return prompt
    indent, out = first[:len(first) - len(first.lstrip())], []
    for line in text.split("\n"):
        body = line.strip()
        if body in ("/*", "/**", "*/"):
            continue
        body = re.sub(r"^/\*\*?\s?|^\*\s?", "", body).removesuffix("*/").rstrip()
        out.append(f"{indent}// {body}".rstrip() if body else f"{indent}//")
    return prompt[:block.start] + "\n".join(out) + prompt[block.end:]


def format_program(name: str, prompt: str, rest: str, entry_point: str, rng: random.Random) -> tuple[str, str]:
    """(prompt, rest) after code-format transformation `name`."""
    block = comment_block(prompt, entry_point)
    if name == "tab_indent":
        unit = indent_unit(prompt + rest)
        return (reindent(prompt, unit), reindent(rest, unit)) if unit else (prompt, rest)
    if name == "new_line_aftercode":
        return prompt + "\n", rest
    if name == "new_line_afterdoc":
        return (prompt[:block.end] + "\n" + prompt[block.end:], rest) if block else (prompt, rest)
    if name == "doc2comments":
        return (block_to_line_comments(prompt, block), rest) if block else (prompt, rest)
    if name == "new_lines":
        start = block.end + 1 if block else 0
        lines = prompt[start:].split("\n")
        body = "\n".join(line + ("\n" if line.strip() and rng.random() < 0.5 else "") for line in lines[:-1])
        return prompt[:start] + body + "\n" + lines[-1], rest
    raise ValueError(f"{name} has no version for brace languages")


def perturb_format(name: str, problem: Problem, rng: random.Random) -> Problem:
    partial = partial_problem(problem) if problem.prompt_kind != "partial" else problem
    prompt, rest = format_program(name, partial.prompt, partial.canonical_solution, partial.entry_point, rng)
    if (prompt, rest) == (partial.prompt, partial.canonical_solution):
        return partial
    return partial.with_changes(prompt=prompt, canonical_solution=rest)


def skeleton(text: str) -> str:
    """The text without comments and whitespace: equal for two programs that differ only in layout."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.DOTALL)
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r"\s+", "", text)


def check_static_format(base: Problem, variant: Problem) -> str:
    """For a problem without a reference (MBGP): only layout and comment markers changed."""
    if skeleton(base.prompt + base.canonical_solution) != skeleton(variant.prompt + variant.canonical_solution):
        return "changed more than the layout"
    return ""


# --- dispatch ---------------------------------------------------------------------------------------

def apply(perturbation: Perturbation, problem: Problem, rng: random.Random) -> Problem:
    """`perturbation` on a problem in a brace language; the problem as given where it does not apply."""
    if not_applicable(perturbation.name, perturbation.category, problem.language):
        return problem
    if perturbation.category == DOCSTRING and hasattr(perturbation, "edit"):
        return perturb_comment(perturbation, problem, rng)
    if perturbation.category == FUNCTION_NAME and hasattr(perturbation, "new_name"):
        return rename_everywhere(problem, perturbation.new_name(problem.entry_point, rng))  # type: ignore[attr-defined]
    if perturbation.category == CODE_FORMAT:
        return perturb_format(perturbation.name, problem, rng)
    return problem


def has_reference(problem: Problem) -> bool:
    return bool(problem.canonical_solution.strip())


def static_check(base: Problem, variant: Problem, category: str) -> str | None:
    """The meaning check where no program needs to run: a reason ("" = valid), or None to run the reference.

    Comment edits are checked as text; a problem without a reference (MBGP) has its renaming
    and layout checked as text, since there is no program to run."""
    if category == DOCSTRING:
        return check_comment(base, variant)
    if has_reference(base):
        return None
    if category == FUNCTION_NAME:
        return check_static_rename(base, variant)
    if category == CODE_FORMAT:
        return check_static_format(base, variant)
    return "not applicable"


class LanguageAware(Perturbation):
    """A transformation that takes Python problems to itself and other languages to `apply` above."""

    def __init__(self, inner: Perturbation) -> None:
        self.inner = inner
        self.name = inner.name  # type: ignore[misc]
        self.category = inner.category  # type: ignore[misc]
        self.description = inner.description  # type: ignore[misc]
        self.randomized = inner.randomized  # type: ignore[misc]
        self.model_based = inner.model_based  # type: ignore[misc]
        self.splits_itself = inner.splits_itself  # type: ignore[misc]
        self.sequential = False  # type: ignore[misc]  # one generator per task, as `apply_seeded` draws

    def apply(self, problem: Problem, rng: random.Random) -> Problem:
        if problem.language == "python":
            return self.inner.apply(problem, rng)
        return apply(self.inner, problem, rng)


def adapt(perturbation: Perturbation, problems: Sequence[Problem]) -> Perturbation:
    """`perturbation` itself for Python problems; wrapped in `LanguageAware` when any is in another language."""
    if all(p.language == "python" for p in problems):
        return perturbation
    return LanguageAware(perturbation)


def inapplicable(transforms: Sequence[str], problems: Sequence[Problem]) -> dict[str, str]:
    """Transformation -> "not applicable to JavaScript: reason", for those that apply to no problem's language."""
    from quench.perturbations.catalog import perturbation_class

    languages = sorted({p.language for p in problems})
    out = {}
    for name in transforms:
        category = perturbation_class(name).category
        reasons = {lang: not_applicable(name, category, lang) for lang in languages}
        if languages and all(reasons.values()):
            named = ", ".join(language_name(lang) for lang in languages)
            out[name] = f"not applicable to {named}: {next(iter(reasons.values()))}"
    return out


def split_applicable(transforms: Sequence[str], problems: Sequence[Problem]) -> tuple[list[str], dict[str, str]]:
    """(the transformations that apply, the others with the reason); an error when none applies."""
    from quench.errors import QuenchError

    skipped = inapplicable(transforms, problems)
    kept = [name for name in transforms if name not in skipped]
    if transforms and not kept:
        named = ", ".join(sorted({language_name(p.language) for p in problems}))
        raise QuenchError(f"--categories/--transforms: none of {', '.join(transforms)} applies to {named} "
                          f"(docs/languages.md lists what does)")
    return kept, skipped
