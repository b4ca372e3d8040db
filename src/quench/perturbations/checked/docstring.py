"""Docstring perturbations (ReCode's NL-Augmenter set): typos, case, whitespace, words, tense.

Each edits only the docstring prose (after the opening quotes, before the first `>>>`), and only
its unprotected words and in-line spaces (see `text.py`); the rest of the prompt stays
byte-for-byte. BackTranslation (model-based) lives in `model_based.py`.
"""

from __future__ import annotations

import random
from abc import abstractmethod

from quench.datasets import Problem
from quench.perturbations.base import DOCSTRING, Perturbation
from quench.perturbations import wording
from quench.perturbations.checked import tense
from quench.perturbations.checked.inflection import apply_edits, inflection_edits
from quench.perturbations.text import FIXED, SPACE, WORD, Piece, docstring_text, join, match_case, segment
from quench.perturbations.words import butter_fingers, change_case, in_technical_terms, swap_characters

QUOTES = ('"""', "'''")


class DocstringPerturbation(Perturbation):
    category = DOCSTRING

    def apply(self, problem: Problem, rng: random.Random) -> Problem:
        doc = docstring_text(problem)
        if doc is None:
            return problem
        text = problem.prompt[doc.start:doc.end]
        new = self.edit(segment(text, doc.identifiers), rng)
        if new == text or any(q in new for q in QUOTES) or new.endswith("\\") or not new.strip():
            return problem
        return problem.with_changes(prompt=problem.prompt[:doc.start] + new + problem.prompt[doc.end:])

    @abstractmethod
    def edit(self, pieces: list[Piece], rng: random.Random) -> str:
        """The new editable text."""


def technical_pieces(pieces: list[Piece]) -> set[int]:
    """Indices of the word pieces inside a technical term (`floating point`, `prime number`, units);
    a term lies within one run of words separated by spaces alone (a protected word, `list` where
    the program names it, still counts as a word of the run)."""
    inside: set[int] = set()
    run: list[int] = []
    for i, piece in enumerate([*pieces, Piece("", FIXED)]):
        if piece.kind == WORD or (piece.kind == FIXED and piece.text.isalpha()):
            run.append(i)
        elif piece.kind != SPACE:
            inside.update(run[k] for k in in_technical_terms([pieces[j].text.lower() for j in run])
                          if pieces[run[k]].kind == WORD)
            run = []
    return inside


def next_word(pieces: list[Piece], i: int) -> str:
    """The word or name right after piece `i` (one space between), as written; "" before punctuation."""
    if i + 2 < len(pieces) and pieces[i + 1].kind == SPACE and pieces[i + 2].kind in (WORD, FIXED):
        return pieces[i + 2].text
    return ""


def names_a_variable(word: str) -> bool:
    """`CAP`, `SM`, `N`: a word in capitals names a variable (`Let CAP be`), save the words `A` and `I`."""
    return word.isalpha() and word.isupper() and word not in ("A", "I")


class WordwiseDocstringPerturbation(DocstringPerturbation):
    """Character noise: each editable word changed on its own."""

    def edit(self, pieces: list[Piece], rng: random.Random) -> str:
        return join([Piece(self.edit_word(p.text, rng), WORD) if p.kind == WORD else p for p in pieces])

    @abstractmethod
    def edit_word(self, word: str, rng: random.Random) -> str:
        """The replacement for one editable word."""


class ButterFingersPerturbation(WordwiseDocstringPerturbation):
    name = "ButterFingersPerturbation"
    description = "keyboard typos: each letter becomes a neighbouring key with p=0.05"

    def __init__(self, prob: float = 0.05) -> None:
        self.prob = prob

    def edit_word(self, word: str, rng: random.Random) -> str:
        return butter_fingers(word, rng, self.prob)


class ChangeCharCase(WordwiseDocstringPerturbation):
    name = "ChangeCharCase"
    description = "each character upper-cased with p=0.35"

    def __init__(self, prob: float = 0.35) -> None:
        self.prob = prob

    def edit_word(self, word: str, rng: random.Random) -> str:
        return change_case(word, rng, self.prob)


class SwapCharactersPerturbation(WordwiseDocstringPerturbation):
    name = "SwapCharactersPerturbation"
    description = "adjacent characters swapped with p=0.05"

    def __init__(self, prob: float = 0.05) -> None:
        self.prob = prob

    def edit_word(self, word: str, rng: random.Random) -> str:
        return swap_characters(word, rng, self.prob)


def at_least_one(candidates: list, prob: float, rng: random.Random) -> list:
    """Each candidate with probability `prob`; one drawn at random where none was (a variant that
    can change does)."""
    chosen = [c for c in candidates if rng.random() < prob]
    return chosen or ([rng.choice(candidates)] if candidates else [])


def synonym_candidates(pieces: list[Piece], pos: str | None = None) -> list[tuple[int, list[str]]]:
    """(piece index, replacements) of each word the wording table lets change here (of part of speech
    `pos` alone where given); technical terms and the word before a variable (`Let CAP be`) stay."""
    fixed = technical_pieces(pieces)
    out = []
    for i, piece in enumerate(pieces):
        if piece.kind != WORD or i in fixed or names_a_variable(next_word(pieces, i)):
            continue
        options = wording.replacements(piece.text, wording.previous_word(pieces, i), wording.following_word(pieces, i),
                                       pos)
        if options:
            out.append((i, options))
    return out


# Verbs only: `find or determine`, `check or verify` are phrases a person writes; `task or job`, `largest
# or biggest`, `elements or items` are not. Nor are `Write or implement a function` (an instruction),
# `need or have to` (a split phrase) and `perform or carry out` (a verb beside its own paraphrase).
NO_INSERTION = frozenset({"write", "implement", "create", "complete", "need", "perform", "performs"})


class SynonymSubstitution(DocstringPerturbation):
    name = "SynonymSubstitution"
    description = "words replaced by a synonym that fits the context (data/wording.tsv) with p=0.5, at least one"

    def __init__(self, prob: float = 0.5) -> None:
        self.prob = prob

    def edit(self, pieces: list[Piece], rng: random.Random) -> str:
        out = list(pieces)
        for i, options in at_least_one(synonym_candidates(pieces), self.prob, rng):
            out[i] = Piece(match_case(pieces[i].text, rng.choice(options)), WORD)
        return join(out)


class SynonymInsertion(DocstringPerturbation):
    name = "SynonymInsertion"
    description = "`verb or synonym` for verbs with a fitting synonym (data/wording.tsv), p=0.5, at most one a sentence"

    def __init__(self, prob: float = 0.5) -> None:
        self.prob = prob

    def edit(self, pieces: list[Piece], rng: random.Random) -> str:
        sentence = wording.sentence_of(pieces)
        candidates = [(i, options) for i, options in synonym_candidates(pieces, pos="V")
                      if pieces[i].text.lower() not in NO_INSERTION]
        out, used = list(pieces), set()
        for i, options in at_least_one(candidates, self.prob, rng):
            if sentence[i] not in used:
                used.add(sentence[i])
                out[i] = Piece(f"{pieces[i].text} or {rng.choice(options)}", WORD)
        return join(out)


class EnglishInflectionalVariation(DocstringPerturbation):
    name = "EnglishInflectionalVariation"
    description = "a verb in another form with the words it needs (`to find` -> `that finds`), p=0.5, at least one"

    def __init__(self, prob: float = 0.5) -> None:
        self.prob = prob

    def edit(self, pieces: list[Piece], rng: random.Random) -> str:
        edits = inflection_edits(pieces)
        chosen = {e.start: rng.choice(e.options) for e in at_least_one(edits, self.prob, rng)}
        return apply_edits(pieces, chosen, edits)


class WhitespacePerturbation(DocstringPerturbation):
    name = "WhitespacePerturbation"
    description = "spaces between words removed with p=0.1, spaces added after letters with p=0.05"

    def __init__(self, remove_prob: float = 0.1, add_prob: float = 0.05) -> None:
        self.remove_prob = remove_prob
        self.add_prob = add_prob

    def edit(self, pieces: list[Piece], rng: random.Random) -> str:
        out = []
        for i, piece in enumerate(pieces):
            if piece.kind == SPACE:
                between_words = 0 < i < len(pieces) - 1 and pieces[i - 1].kind == WORD == pieces[i + 1].kind
                if between_words and rng.random() < self.remove_prob:
                    continue
                out.append(piece.text)
            elif piece.kind == WORD:
                # Never after the last letter: a space there could touch a protected token.
                out.append("".join(c + " " if j < len(piece.text) - 1 and rng.random() < self.add_prob else c
                                   for j, c in enumerate(piece.text)))
            else:
                out.append(piece.text)
        return "".join(out)


class TenseTransformationPast(DocstringPerturbation):
    name = "TenseTransformationPast"
    description = "present-tense verbs put in the past (is -> was, returns -> returned)"
    randomized = False

    def edit(self, pieces: list[Piece], rng: random.Random) -> str:
        return tense.transform(pieces, "past")


class TenseTransformationFuture(DocstringPerturbation):
    name = "TenseTransformationFuture"
    description = "present-tense verbs put in the future (is -> will be, returns -> will return)"
    randomized = False

    def edit(self, pieces: list[Piece], rng: random.Random) -> str:
        return tense.transform(pieces, "future")
