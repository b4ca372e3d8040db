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
from quench.perturbations.lexicon import DETERMINERS, Analysis, lexicon
from quench.perturbations.quench import tense
from quench.perturbations.text import FIXED, SPACE, WORD, Piece, docstring_text, join, match_case, segment
from quench.perturbations.words import (
    AUXILIARY_VERBS, DOMINANT_READING, FUNCTION_WORDS, NUMERALS, PREPOSITIONS, PROTECTED_VOCABULARY, STOPWORDS,
    TECHNICAL_TERMS, butter_fingers, change_case, in_technical_terms, swap_characters,
)

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
    keeps_terms = False  # word-level edits (synonyms, inflections) leave technical terms whole

    def edit(self, pieces: list[Piece], rng: random.Random) -> str:
        out, previous = [], ""
        fixed = technical_pieces(pieces) if self.keeps_terms else set()
        for i, piece in enumerate(pieces):
            following = next_word(pieces, i)
            # The word before a variable binds it (`Let CAP be`, `let SM be`): left as written.
            if piece.kind == WORD and (i in fixed or (self.keeps_terms and names_a_variable(following))):
                out.append(piece)
                previous = piece.text.lower()
            elif piece.kind == WORD:
                out.append(Piece(self.edit_word(piece.text, previous, following.lower(), rng), WORD))
                previous = piece.text.lower()
            else:
                out.append(piece)
                if piece.kind != SPACE:
                    previous = ""
        return join(out)

    @abstractmethod
    def edit_word(self, word: str, previous: str, following: str, rng: random.Random) -> str:
        """The replacement for one editable word (`previous`, `following`: the words around it, lower case)."""


class ButterFingersPerturbation(WordwiseDocstringPerturbation):
    name = "ButterFingersPerturbation"
    description = "keyboard typos: each letter becomes a neighbouring key with p=0.05"

    def __init__(self, prob: float = 0.05) -> None:
        self.prob = prob

    def edit_word(self, word: str, previous: str, following: str, rng: random.Random) -> str:
        return butter_fingers(word, rng, self.prob)


class ChangeCharCase(WordwiseDocstringPerturbation):
    name = "ChangeCharCase"
    description = "each character upper-cased with p=0.35"

    def __init__(self, prob: float = 0.35) -> None:
        self.prob = prob

    def edit_word(self, word: str, previous: str, following: str, rng: random.Random) -> str:
        return change_case(word, rng, self.prob)


class SwapCharactersPerturbation(WordwiseDocstringPerturbation):
    name = "SwapCharactersPerturbation"
    description = "adjacent characters swapped with p=0.05"

    def __init__(self, prob: float = 0.05) -> None:
        self.prob = prob

    def edit_word(self, word: str, previous: str, following: str, rng: random.Random) -> str:
        return swap_characters(word, rng, self.prob)


def eligible(word: str) -> bool:
    lower = word.lower()
    return len(lower) > 2 and lower not in STOPWORDS


def protected(lower: str, reading: Analysis) -> bool:
    """A stop-listed word in any inflection (`sums`, `closing` as `sum`, `close`)."""
    return lower in PROTECTED_VOCABULARY or reading.lemma in PROTECTED_VOCABULARY


# After a determiner, a numeral, a preposition or an adjective the next word is no verb: `four beats`,
# `musical notes`, `the number of triples`, `a supplied string`, `an underscore` (WordNet lists the
# last three as verbs only). Not after `that`, as often a relative pronoun (`palindromes that fall`)
# as a determiner, nor after `to`. Before `of` a word that can be a noun is one (`the string reverse
# of a prefix`, `the sum of`); a verb only where it cannot (`consists of`).
NOUN_CONTEXT = (DETERMINERS - {"that"}) | NUMERALS | (PREPOSITIONS - {"to"})


def readings_in_context(lower: str, previous: str, following: str = "") -> list[Analysis]:
    """The plausible readings of a word between `previous` and `following`, the likeliest first."""
    readings = lexicon().analyses(lower)
    before = lexicon().analyses(previous) if previous else []
    if (previous in NOUN_CONTEXT or (before and before[0].pos == "ADJ")
            or (following == "of" and any(a.pos == "NOUN" for a in readings))):
        return [a for a in readings if a.pos != "VERB"]
    chosen = lexicon().analyse(lower, previous)
    return [chosen, *(a for a in readings if a != chosen)] if chosen else []


def participle(reading: Analysis, lower: str) -> bool:
    """`separated`, `considered`: a past form that is also the participle, most often used as one."""
    return reading.tag == "VBD" and lexicon().inflect(reading.lemma, "VERB", "VBN") == lower


# Inflections that keep the meaning: a noun's number, a finite verb's person or tense. An
# adjective's degree (`largest` -> `large`) and a participle used as an adjective (`missing`,
# `closed`, `a supplied string`) change what the task asks for: left as they are.
MEANING_NEUTRAL_TAGS = {"NN": ("NN", "NNS"), "NNS": ("NN", "NNS"), "VB": ("VB", "VBZ", "VBD"),
                        "VBZ": ("VB", "VBZ", "VBD"), "VBD": ("VB", "VBZ", "VBD")}


class EnglishInflectionalVariation(WordwiseDocstringPerturbation):
    name = "EnglishInflectionalVariation"
    description = "nouns and finite verbs replaced by a random inflection of the same lemma (number, person, tense)"
    keeps_terms = True

    def edit_word(self, word: str, previous: str, following: str, rng: random.Random) -> str:
        if not eligible(word):
            return word
        lower = word.lower()
        readings = readings_in_context(lower, previous, following)
        if not readings or protected(lower, readings[0]):
            return word
        # A form right under every reading: `guesses` (noun or verb) -> `guess`, never `guessed`.
        forms = [f for f in neutral_forms(readings[0], lower)
                 if all(f in neutral_forms(a, lower) for a in readings[1:] if a.pos != readings[0].pos)]
        return match_case(word, rng.choice(forms)) if forms else word


def neutral_forms(reading: Analysis, lower: str) -> list[str]:
    """The forms a word may take under one reading; only itself where no inflection keeps the meaning."""
    if reading.tag not in MEANING_NEUTRAL_TAGS or participle(reading, lower):
        return [lower]
    forms = (lexicon().inflect(reading.lemma, reading.pos, tag) for tag in MEANING_NEUTRAL_TAGS[reading.tag])
    return list(dict.fromkeys(f for f in forms if f))


def synonyms(word: str, previous: str, following: str = "") -> list[str]:
    """Synonyms of the word's reading in context, same part of speech and same sense; none for a
    stop-listed word or one whose part of speech is in doubt. Function words and technical terms
    (`pile` -> `heap`) never come in as synonyms."""
    lower = word.lower()
    if not eligible(word):
        return []
    readings = readings_in_context(lower, previous, following)
    if not readings or any(a.pos != readings[0].pos and a.count * DOMINANT_READING > readings[0].count
                           for a in readings):
        return []
    reading = readings[0]
    if protected(lower, reading):
        return []
    if participle(reading, lower) and previous in AUXILIARY_VERBS:
        reading = Analysis(reading.lemma, reading.pos, "VBN", reading.count)  # `is considered` -> `is regarded`
    lemmas = [s for s in lexicon().synonyms.get((reading.lemma, reading.pos), ())
              if not FUNCTION_WORDS.intersection(s.split()) and s not in PROTECTED_VOCABULARY
              and (s,) not in TECHNICAL_TERMS and common(s, reading) and same_sense(s, reading)]
    forms = (lexicon().inflect(s, reading.pos, reading.tag) for s in lemmas)
    return list(dict.fromkeys(f for f in forms if f and f != lower))


# A synonym must be a word in common use in that part of speech: WordNet's sense-tagged count at
# least this share of the original's (`compute` -> `cipher`, `ignore` -> `snub` are not).
COMMON_SHARE = 0.25


def common(synonym: str, reading: Analysis) -> bool:
    if " " in synonym:
        return False  # `patterned advance`, `bring forth`: multi-word synonyms read as a different phrase
    counts = [a.count for a in lexicon().analyses(synonym) if a.pos == reading.pos]
    return bool(counts) and max(counts) >= COMMON_SHARE * reading.count


def same_sense(synonym: str, reading: Analysis) -> bool:
    """The synonym's own most frequent sense is the word's, so a reader takes it in that sense:
    `example` -> `instance`, never `representative`; `meet` -> never `see`, `reverse` -> never `turn`."""
    return reading.lemma in lexicon().synonyms.get((synonym, reading.pos), ())


class SynonymSubstitution(WordwiseDocstringPerturbation):
    name = "SynonymSubstitution"
    description = "words replaced by a WordNet synonym (most frequent sense, inflected alike) with p=0.5"
    keeps_terms = True

    def __init__(self, prob: float = 0.5) -> None:
        self.prob = prob

    def edit_word(self, word: str, previous: str, following: str, rng: random.Random) -> str:
        options = synonyms(word, previous, following)
        if options and rng.random() < self.prob:
            return match_case(word, rng.choice(options))
        return word


class SynonymInsertion(WordwiseDocstringPerturbation):
    name = "SynonymInsertion"
    description = "a WordNet synonym inserted after words with p=0.5"
    keeps_terms = True

    def __init__(self, prob: float = 0.5) -> None:
        self.prob = prob

    def edit_word(self, word: str, previous: str, following: str, rng: random.Random) -> str:
        options = synonyms(word, previous, following)
        if options and rng.random() < self.prob:
            return f"{word} {rng.choice(options)}"
        return word


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
