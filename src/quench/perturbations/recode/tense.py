"""ReCode's TenseTransformationPast and TenseTransformationFuture (profile "recode").

NL-Augmenter's tense shifter (tenseflow) on the masked prose: every token after the first that
spaCy tags as a finite verb, a past participle or a base form not after `to` / `not` (a gerund
is left alone) is conjugated:
to the past (`given` -> `gave`, `are` -> `was`, `Return` -> `Returned`), or to the future
(`will` put before it unless the previous word is `will` or `be`, the verb in its base form:
`is` -> `will be`, `given` -> `will give`). Tokens are joined by spaces and the spaces around
punctuation removed. quench's lexicon stands in for spaCy's tagger (a word's likeliest reading
after the previous word), so participles and imperatives change as in ReCode, modals (`can`)
do not.
"""

from __future__ import annotations

import random
import string

from quench.datasets import Problem
from quench.perturbations.base import DOCSTRING, Perturbation
from quench.perturbations.lexicon import lexicon
from quench.perturbations.recode.docstring import MASK, edit_prose, tokens_of

BE = frozenset({"am", "is", "are", "was", "were", "be"})
PLURAL_SUBJECTS = frozenset({"you", "we", "they"})
MODALS = frozenset({"can", "could", "may", "might", "must", "shall", "should", "will", "would"})


def verb_lemma(word: str, previous: str) -> str | None:
    """The lemma of `word` when spaCy would tag it a verb that tenseflow conjugates, else None."""
    lower = word.lower()
    if lower in BE:
        return "be"
    if lower in MODALS or not word[:1].isalpha():
        return None
    reading = lexicon().analyse(lower, previous)
    if reading is None or reading.pos != "VERB" or reading.tag == "VBG":
        return None
    if reading.tag == "VB" and previous in ("to", "not"):
        return None
    return reading.lemma


def past(lemma: str, previous: str) -> str:
    if lemma == "be":
        return "were" if previous in PLURAL_SUBJECTS else "was"
    return lexicon().inflect(lemma, "VERB", "VBD") or lemma


def shift(tokens: list[str], to_past: bool) -> list[str]:
    out = tokens[:1]
    previous = tokens[0].lower() if tokens else ""
    for token in tokens[1:]:
        lemma = verb_lemma(token, previous) if token.strip() else None
        if lemma is None:
            out.append(token)
        else:
            if not to_past and out[-1] not in ("will", "be"):
                out.append("will")
            new = past(lemma, previous) if to_past else lemma
            out.append(new.capitalize() if token[:1].isupper() else new)
        if token.strip():
            previous = token.lower()
    return out


def joined(tokens: list[str]) -> str:
    """tenseflow's join: spaces between tokens, then none after openers or before other punctuation."""
    text = " ".join(tokens)
    for char in string.punctuation:
        text = text.replace(char + " ", char) if char in "(<['\"" else text.replace(" " + char, char)
    for char in ("-", "“", "‘"):
        text = text.replace(char + " ", char)
    for char in ("…", "”", "'s", "n't"):
        text = text.replace(" " + char, char)
    return text


class RecodeTense(Perturbation):
    category = DOCSTRING
    randomized = False
    to_past = True

    def apply(self, problem: Problem, rng: random.Random) -> Problem:
        return edit_prose(problem, self.shift_text)

    def shift_text(self, text: str) -> str:
        # tenseflow's join spaces the mask out as `< ||| >`
        return joined(shift(tokens_of(text), self.to_past)).replace("< ||| >", MASK)


class RecodeTensePast(RecodeTense):
    name = "TenseTransformationPast"
    description = "every verb after the first word conjugated to the past (spaCy's reading approximated)"


class RecodeTenseFuture(RecodeTense):
    name = "TenseTransformationFuture"
    description = "`will` and the base form for every verb after the first word (spaCy's reading approximated)"
    to_past = False
