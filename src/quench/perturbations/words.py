"""Word lists and character-level noise shared by docstring and function-name perturbations."""

from __future__ import annotations

import importlib.resources
import random

# Closed word classes. A tagger never calls these nouns, verbs, adjectives or adverbs, but WordNet
# lists some under those (`a` the noun "angstrom", `by` the adverb "past", `in` the noun "inch"),
# so a lexicon lookup alone would replace them: they are never edited as content words.
DETERMINERS = frozenset("""
a an the this that these those each every either neither any some no all both another such what which
whose whatever whichever half
""".split())
PREPOSITIONS = frozenset("""
about above across after against along amid among around as at before behind below beneath beside besides
between beyond by despite down during except for from in inside into like near of off on onto out outside
over per since than through throughout till to toward towards under underneath unlike until up upon via
with within without
""".split())
PRONOUNS = frozenset("""
i me my mine myself you your yours yourself yourselves he him his himself she her hers herself it its itself
we us our ours ourselves they them their theirs themselves one ones oneself who whom whoever anything anyone
anybody everything everyone everybody nothing nobody someone somebody something
""".split())
CONJUNCTIONS = frozenset("""
and or but nor yet if unless because although though while whereas whether when whenever where wherever
how why
""".split())
# Modals always; be, have and do as auxiliaries (`is sorted`, `has been`); see `is_auxiliary`.
MODALS = frozenset("can could may might must shall should will would".split())
AUXILIARY_VERBS = frozenset("be am is are was were been being have has had having do does did doing".split())
PARTICLES = frozenset("not to".split())
NUMERALS = frozenset("""
zero one two three four five six seven eight nine ten eleven twelve twenty hundred thousand million
""".split())
FUNCTION_WORDS = (DETERMINERS | PREPOSITIONS | PRONOUNS | CONJUNCTIONS | MODALS | AUXILIARY_VERBS | PARTICLES
                  | NUMERALS)
# Function words and auxiliaries in any use, and a few adverbs of degree: never inflected or
# replaced by a synonym in the default profile.
STOPWORDS = FUNCTION_WORDS | frozenset("""
then else again further once there here very just so too only own same other also e g eg ie etc
""".split())


def package_words(name: str) -> list[str]:
    """The non-comment lines of a shipped word list (`data/<name>`), lower case."""
    text = (importlib.resources.files("quench.perturbations") / "data" / name).read_text(encoding="utf-8")
    return [line.strip().lower() for line in text.splitlines() if line.strip() and not line.startswith("#")]


# Task vocabulary and words whose first sense is not a program's: never replaced (data/stoplist.txt).
PROTECTED_VOCABULARY = frozenset(word for line in package_words("stoplist.txt") for word in line.split())
# Compounds, units and technical words, each a tuple of words (data/technical_terms.txt).
TECHNICAL_TERMS = frozenset(tuple(line.split()) for line in package_words("technical_terms.txt"))
LONGEST_TERM = max(len(term) for term in TECHNICAL_TERMS)


def singular(word: str) -> str:
    """`differences` -> `difference`, `boxes` -> `box`: enough to find a listed term in the plural."""
    for ending, replacement in (("ies", "y"), ("xes", "x"), ("ches", "ch"), ("shes", "sh"), ("s", "")):
        if word.endswith(ending) and len(word) > len(ending) + 2 and not word.endswith("ss"):
            return word[:-len(ending)] + replacement
    return word


def in_technical_terms(words: list[str]) -> set[int]:
    """Positions of `words` (lower case, in a run of prose) that lie inside a technical term, its last
    word in the singular or the plural (`absolute differences` as `absolute difference`)."""
    inside: set[int] = set()
    for start in range(len(words)):
        for length in range(1, min(LONGEST_TERM, len(words) - start) + 1):
            term = words[start:start + length]
            if (tuple(term) in TECHNICAL_TERMS
                    or tuple([*term[:-1], singular(term[-1])]) in TECHNICAL_TERMS):
                inside.update(range(start, start + length))
    return inside


# A word's reading must outweigh every reading in another part of speech this many times over before
# it is edited as that part of speech: `closed` (verb or adjective), `even` (adverb or adjective),
# `present` (verb or adjective) have no one reading to edit.
DOMINANT_READING = 4

KEYBOARD_ROWS = ("qwertyuiop", "asdfghjkl", "zxcvbnm")


def keyboard_neighbours() -> dict[str, str]:
    """Letters next to each letter on a QWERTY keyboard (same row and the staggered rows)."""
    where = {ch: (r, c) for r, row in enumerate(KEYBOARD_ROWS) for c, ch in enumerate(row)}
    out = {}
    for ch, (r, c) in where.items():
        near = [(r, c - 1), (r, c + 1), (r - 1, c), (r - 1, c + 1), (r + 1, c - 1), (r + 1, c)]
        out[ch] = "".join(KEYBOARD_ROWS[rr][cc] for rr, cc in near if 0 <= rr < 3 and 0 <= cc < len(KEYBOARD_ROWS[rr]))
    return out


NEIGHBOURS = keyboard_neighbours()


def butter_fingers(word: str, rng: random.Random, prob: float) -> str:
    """Each letter, with probability `prob`, becomes a neighbouring key (case kept)."""
    chars = list(word)
    for i, ch in enumerate(chars):
        near = NEIGHBOURS.get(ch.lower())
        if near and rng.random() < prob:
            new = rng.choice(near)
            chars[i] = new.upper() if ch.isupper() else new
    return "".join(chars)


def swap_characters(word: str, rng: random.Random, prob: float) -> str:
    """Each adjacent pair, with probability `prob`, swaps."""
    chars = list(word)
    for i in range(len(chars) - 1):
        if rng.random() < prob:
            chars[i], chars[i + 1] = chars[i + 1], chars[i]
    return "".join(chars)


def change_case(word: str, rng: random.Random, prob: float) -> str:
    """Each character, with probability `prob`, is upper-cased."""
    return "".join(ch.upper() if rng.random() < prob else ch for ch in word)
