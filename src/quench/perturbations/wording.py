"""Word choice in context for the default synonym edits: the hand-written table `data/wording.tsv`.

WordNet's first sense is often not a programming task's (`example` -> `instance`, `smallest` ->
`littlest`), so the default profile draws synonyms from a table of task-prose words instead, each
row with the words around it that make the replacement read as a person writes it.
"""

from __future__ import annotations

import functools
import importlib.resources
from dataclasses import dataclass

from quench.perturbations.text import FIXED, SPACE, WORD, Piece
from quench.perturbations.words import DETERMINERS, MODALS, NUMERALS

SENTENCE_START = "^"  # the `previous` of a word that opens a sentence
SENTENCE_ENDS = ".!?:"
VERB_BLOCKERS = (DETERMINERS - {"that", "which", "what"}) | NUMERALS  # `the find`, `two check`: a noun follows
NOUN_BLOCKERS = MODALS | {"to"}  # `to sum`: a verb follows these, not a noun


@dataclass(frozen=True)
class Choice:
    """One row of the table: `form` may become any of `replacements` where the conditions hold."""

    form: str
    pos: str  # V, N, A or X (see data/wording.tsv)
    replacements: tuple[str, ...]
    after: frozenset[str] | None = None  # None: any previous word
    not_after: frozenset[str] = frozenset()
    before: frozenset[str] | None = None  # None: any next word
    not_before: frozenset[str] = frozenset()

    def fits(self, previous: str, following: str) -> bool:
        if self.pos == "V" and previous in VERB_BLOCKERS or self.pos == "N" and previous in NOUN_BLOCKERS:
            return False
        return ((self.after is None or previous in self.after) and previous not in self.not_after
                and (self.before is None or following in self.before) and following not in self.not_before)


def parse_choice(line: str) -> Choice:
    form, pos, replacements, *rest = line.split("\t")
    conditions: dict[str, frozenset[str]] = {}
    for condition in (rest[0].split() if rest else []):
        key, words = condition.split("=", 1)
        conditions[key.replace("!", "not_")] = frozenset(words.split(","))
    return Choice(form, pos, tuple(replacements.split("|")), **conditions)


@functools.cache
def table() -> dict[str, tuple[Choice, ...]]:
    """Every row of `data/wording.tsv` by form, in file order."""
    text = (importlib.resources.files("quench.perturbations") / "data" / "wording.tsv").read_text(encoding="utf-8")
    rows: dict[str, list[Choice]] = {}
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            choice = parse_choice(line)
            rows.setdefault(choice.form, []).append(choice)
    return {form: tuple(choices) for form, choices in rows.items()}


def starts_with_vowel(word: str) -> bool:
    return word[:1].lower() in "aeiou"


def replacements(word: str, previous: str, following: str, pos: str | None = None) -> list[str]:
    """What `word` may become between `previous` and `following` (lower case; `^` opens a sentence),
    from rows of part of speech `pos` alone where given; none where `a`/`an` before it would no longer fit."""
    lower = word.lower()
    for choice in table().get(lower, ()):
        if choice.fits(previous, following) and pos in (None, choice.pos):
            if previous in ("a", "an"):
                return [r for r in choice.replacements if starts_with_vowel(r) == starts_with_vowel(lower)]
            return list(choice.replacements)
    return []


def ends_sentence(piece: Piece) -> bool:
    text = piece.text.rstrip()
    return piece.kind == FIXED and bool(text) and text[-1] in SENTENCE_ENDS


def is_blank(piece: Piece) -> bool:
    return piece.kind == SPACE or (piece.kind == FIXED and not piece.text.strip())


def is_wordlike(piece: Piece) -> bool:
    return piece.kind == WORD or (piece.kind == FIXED and piece.text.strip("`'\"").replace("_", "").isalnum())


def previous_word(pieces: list[Piece], i: int) -> str:
    """The word before piece `i` across spaces and line breaks, lower case; `^` at a sentence's
    start, "" after other punctuation."""
    j = i - 1
    while j >= 0 and is_blank(pieces[j]):
        j -= 1
    if j < 0:
        return SENTENCE_START
    if is_wordlike(pieces[j]):
        return pieces[j].text.lower()
    return SENTENCE_START if ends_sentence(pieces[j]) else ""


def following_word(pieces: list[Piece], i: int) -> str:
    """The word after piece `i` across spaces and line breaks, lower case; "" before punctuation."""
    j = i + 1
    while j < len(pieces) and is_blank(pieces[j]):
        j += 1
    return pieces[j].text.lower() if j < len(pieces) and is_wordlike(pieces[j]) else ""


def sentence_of(pieces: list[Piece]) -> list[int]:
    """The sentence number of each piece (a sentence ends at `.`, `!`, `?` or `:`)."""
    out, sentence = [], 0
    for piece in pieces:
        out.append(sentence)
        if ends_sentence(piece):
            sentence += 1
    return out
