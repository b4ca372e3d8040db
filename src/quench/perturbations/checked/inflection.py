"""Inflection frames of the default EnglishInflectionalVariation: a verb takes another form together
with the words that form needs, so the sentence stays grammatical and says the same.

- purpose:  `a function to find`      -> `a function that finds` | `a function for finding`
- relative: `a list that contains`    -> `a list containing`
- reduced:  `a string containing`     -> `a string that contains`; `numbers having` -> `numbers that have`
- summary:  a docstring opening `Return the sum` -> `Returns the sum` (and back): PEP 257's
  imperative summary and the descriptive one say the same of a function.

Nouns keep their number and adjectives their degree: either changes what the task asks for.
"""

from __future__ import annotations

from dataclasses import dataclass

from quench.perturbations.lexicon import lexicon
from quench.perturbations.text import FIXED, SPACE, WORD, Piece, match_case
from quench.perturbations.wording import ends_sentence, is_blank
from quench.perturbations.words import AUXILIARY_VERBS, MODALS

PURPOSE_NOUNS = frozenset("function functions program programs method methods routine code script".split())
RELATIVE_PRONOUNS = frozenset({"that", "which"})
# Words before `that` that do not take a relative clause (`such that`, `Note that`, `make sure that`).
NOT_ANTECEDENTS = frozenset("such so note given ensure check assume sure fact way order now say means".split())
REDUCED_VERBS = frozenset("""containing representing having denoting satisfying ending starting consisting
appearing occurring""".split())
# Opening verbs that describe what the function does; `Write`, `Create`, `Implement` instruct the reader.
SUMMARY_VERBS = frozenset("""return check find count compute calculate determine convert remove filter concatenate
insert sort add get test reverse compare extract generate""".split())
NOT_INFLECTED = AUXILIARY_VERBS | MODALS | {"be", "have", "do", "let"}


@dataclass(frozen=True)
class Edit:
    """Replace `pieces[start:end]` by one of `options`."""

    start: int
    end: int
    options: tuple[str, ...]


def word_at(pieces: list[Piece], i: int) -> str:
    """The lower-case word of piece `i`, or "" where it is no editable word."""
    return pieces[i].text.lower() if 0 <= i < len(pieces) and pieces[i].kind == WORD else ""


def spaced(pieces: list[Piece], i: int) -> bool:
    """Piece `i` is an in-line space (words on either side of it are adjacent on one line)."""
    return 0 <= i < len(pieces) and pieces[i].kind == SPACE


def verb_form(lemma: str, tag: str) -> str | None:
    return lexicon().inflect(lemma, "VERB", tag)


def base_verb(word: str) -> str | None:
    """The lemma of `word` where it can be a verb's base form (`find`, `sort`)."""
    if word in NOT_INFLECTED:
        return None
    return next((a.lemma for a in lexicon().analyses(word) if a.pos == "VERB" and a.tag == "VB"), None)


def noun_number(word: str) -> str | None:
    """`NN` or `NNS` where `word` is most likely a noun; None otherwise."""
    readings = lexicon().analyses(word)
    if word in NOT_ANTECEDENTS or not readings or readings[0].pos != "NOUN":
        return None
    return readings[0].tag


def coordinated(pieces: list[Piece], i: int, tag: str) -> list[int] | None:
    """The piece indices of further verbs of form `tag` joined to the clause after piece `i` by `and`,
    `or` or a comma (`that takes x, sorts it and returns y`), up to the sentence's end: they change
    form with the first. None where such a place holds a word that may be such a verb but is not in
    the lexicon (`and encodes`) or is likelier another part of speech (`, sorts it`, `or equal to`):
    the clause could be left half changed."""
    found = []
    for j in range(i + 1, len(pieces) - 2):
        if ends_sentence(pieces[j]) or pieces[j].text.rstrip().endswith(";"):
            break
        joins = word_at(pieces, j) in ("and", "or") or (pieces[j].kind == FIXED and pieces[j].text == ",")
        if not joins or not is_blank(pieces[j + 1]):
            continue
        readings = lexicon().analyses(word := word_at(pieces, j + 2))
        if not readings and word.endswith("s") and tag == "VBZ":
            return None
        if any(a.pos == "VERB" and a.tag == tag for a in readings):
            if readings[0].pos != "VERB":
                return None  # `sorts it` or `or equal to`: a verb or not, no telling
            found.append(j + 2)
    return found


def reform(pieces: list[Piece], start: int, verb: int, tag: str, lead: str, new_tag: str) -> Edit | None:
    """Replace `pieces[start:verb + 1]` (a verb and the words that introduce it) by `lead` and the
    verb in form `new_tag`; coordinated verbs of form `tag` change with it."""
    joined = coordinated(pieces, verb, tag)
    if joined is None:
        return None
    verbs = [verb, *joined]
    forms = {}
    for index in verbs:
        lemma = next((a.lemma for a in lexicon().analyses(word_at(pieces, index)) if a.pos == "VERB" and a.tag == tag),
                     None)
        form = verb_form(lemma, new_tag) if lemma and lemma not in NOT_INFLECTED else None
        if form is None:
            return None
        forms[index] = match_case(pieces[index].text, form)
    text = f"{lead} {forms[verb]}".strip()
    text += "".join(forms.get(j, pieces[j].text) for j in range(verb + 1, verbs[-1] + 1))
    return Edit(start, verbs[-1] + 1, (text,))


def purpose(pieces: list[Piece], i: int) -> Edit | None:
    if word_at(pieces, i) != "to" or word_at(pieces, i - 2) not in PURPOSE_NOUNS or not spaced(pieces, i - 1):
        return None
    if not spaced(pieces, i + 1) or base_verb(word_at(pieces, i + 2)) is None:
        return None
    options = [e.options[0] for e in (reform(pieces, i, i + 2, "VB", "that", "VBZ"),
                                      reform(pieces, i, i + 2, "VB", "for", "VBG")) if e is not None]
    end = reform(pieces, i, i + 2, "VB", "that", "VBZ")
    return Edit(i, end.end, tuple(options)) if end is not None and len(options) == 2 else None


def relative(pieces: list[Piece], i: int) -> Edit | None:
    if word_at(pieces, i) not in RELATIVE_PRONOUNS or not spaced(pieces, i - 1) or not spaced(pieces, i + 1):
        return None
    number = noun_number(word_at(pieces, i - 2))
    if number is None or word_at(pieces, i + 2) in NOT_INFLECTED:
        return None
    return reform(pieces, i, i + 2, "VBZ" if number == "NN" else "VB", "", "VBG")


def reduced(pieces: list[Piece], i: int) -> Edit | None:
    verb = word_at(pieces, i)
    number = noun_number(word_at(pieces, i - 2))
    if verb not in REDUCED_VERBS or not spaced(pieces, i - 1) or number is None:
        return None
    if word_at(pieces, i - 4) in ("with", "each", "every"):
        return None  # `with each character representing a bit`: no relative clause
    return reform(pieces, i, i, "VBG", "that", "VBZ" if number == "NN" else "VB")


def summary(pieces: list[Piece], i: int) -> Edit | None:
    if i != 0 or not spaced(pieces, 1):
        return None
    word = word_at(pieces, 0)
    if word in SUMMARY_VERBS:
        form = verb_form(word, "VBZ")
    else:
        form = next((a.lemma for a in lexicon().analyses(word) if a.pos == "VERB" and a.tag == "VBZ"
                     and a.lemma in SUMMARY_VERBS), None)
    return Edit(0, 1, (match_case(pieces[0].text, form),)) if form else None


FRAMES = (summary, purpose, relative, reduced)


def inflection_edits(pieces: list[Piece]) -> list[Edit]:
    """Every frame that applies, in text order, none overlapping another."""
    edits: list[Edit] = []
    for i, piece in enumerate(pieces):
        if piece.kind != WORD or (edits and i < edits[-1].end):
            continue
        edit = next((e for frame in FRAMES if (e := frame(pieces, i)) is not None), None)
        if edit is not None:
            edits.append(edit)
    return edits


def apply_edits(pieces: list[Piece], chosen: dict[int, str], edits: list[Edit]) -> str:
    """The text with each chosen edit (by start) replaced by its text."""
    out, i = [], 0
    ends = {e.start: e.end for e in edits}
    while i < len(pieces):
        if i in chosen:
            out.append(chosen[i])
            i = ends[i]
        else:
            out.append(pieces[i].text)
            i += 1
    return "".join(out)

