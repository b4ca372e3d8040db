"""ReCode's inflection transformations (profile "recode"): NL-Augmenter's EnglishInflectionalVariation.

NL-Augmenter cuts the text as BERT's pre-tokenizer does (runs of letters and digits, every other
character alone), tags it (NLTK's perceptron tagger), and replaces every noun, verb and adjective
by one of its lemma's inflections drawn with `random.seed(s + len(word))`, `random.choices` over
lemminflect's forms in lemminflect's order (`give`: gave, given, giving, gives, give, give). It
then joins the tokens with one space wherever the text had any whitespace, so the prose comes
back on one line. quench's shipped lexicon stands in for the tagger and for lemminflect, so a
draw equals ReCode's where both read the word alike.

FuncRenameInflectionalVariation does the same to the words of the function name (snake_case
words joined by spaces, the result joined by underscores; a camelCase name goes through
snake_case and back) and replaces the name everywhere in the prompt by text.
"""

from __future__ import annotations

import random
import re

from quench.perturbations.lexicon import lexicon
from quench.perturbations.recode.chars import RecodeSeededName, RecodeSeededProse
from quench.perturbations.text import match_case

TOKEN = re.compile(r"[^\W_]+|\S")
# lemminflect's order of forms; the base tags (VB, VBP, NN, JJ) are the lemma itself.
FORM_ORDER = {"VERB": ("VBD", "VBN", "VBG", "VBZ", "VB", "VBP"), "NOUN": ("NNS", "NN"), "ADJ": ("JJR", "JJS", "JJ")}
BASE_TAGS = frozenset({"VB", "VBP", "NN", "JJ"})


def inflections(lemma: str, pos: str) -> list[str]:
    forms = lexicon().forms.get((lemma, pos), {})
    return [lemma if tag in BASE_TAGS else forms[tag] for tag in FORM_ORDER[pos] if tag in BASE_TAGS or tag in forms]


def name_reading(word: str, alone: bool):  # noqa: ANN201 - Analysis | None
    """A name's word as NLTK's tagger mostly reads one out of context: a noun where it can be
    one; a one-word name that cannot (`solve`) is tagged a noun anyway, so nothing to inflect."""
    readings = lexicon().analyses(word.lower())
    nouns = [r for r in readings if r.pos == "NOUN"]
    return nouns[0] if nouns else None if alone or not readings else readings[0]


def inflect_word(word: str, previous: str, seed: int, alone: bool | None = None) -> str:
    """`alone`: None for prose, else whether the word is a whole function name."""
    if not word[:1].isalpha():
        return word
    reading = lexicon().analyse(word.lower(), previous) if alone is None else name_reading(word, alone)
    if reading is None or reading.pos not in FORM_ORDER:
        return word
    forms = inflections(reading.lemma, reading.pos)
    draw = random.Random(seed + len(word)).random()
    return match_case(word, forms[int(draw * len(forms))])


def inflect_text(text: str, seed: int, name: bool = False) -> str:
    """Every content word inflected; tokens joined by one space where the text had whitespace."""
    out, previous, end = [], "", 0
    alone = (" " not in text) if name else None
    for match in TOKEN.finditer(text):
        word = match.group()
        out.append((" " if match.start() != end else "") + inflect_word(word, previous, seed, alone))
        previous, end = word.lower(), match.end()
    return "".join(out)


def snake_case(name: str) -> str:
    return name[0] + "".join("_" + c.lower() if c.isupper() else c for c in name[1:])


def camel_case(name: str) -> str:
    words = name.split("_")
    return words[0] + "".join(w[:1].upper() + w[1:] for w in words[1:] if w)


def inflect_name(name: str, seed: int) -> str:
    """Each word of a snake_case or camelCase name inflected (the name's spelling kept)."""
    snake = name if "_" in name else snake_case(name)
    new = "_".join(inflect_text(" ".join(snake.split("_")), seed, name=True).split(" "))
    return new if "_" in name else camel_case(new)


class RecodeEnglishInflectionalVariation(RecodeSeededProse):
    name = "EnglishInflectionalVariation"
    description = "every noun, verb and adjective of the prose as a seeded inflection; the prose on one line"
    edit = staticmethod(inflect_text)


class RecodeFuncRenameInflectionalVariation(RecodeSeededName):
    name = "FuncRenameInflectionalVariation"
    description = "each word of the function name as a seeded inflection, replaced everywhere in the prompt"
    edit = staticmethod(inflect_name)
