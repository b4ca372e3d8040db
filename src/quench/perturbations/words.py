"""Word lists and character-level noise shared by docstring and function-name perturbations."""

from __future__ import annotations

import random

# Function words and auxiliaries: never inflected or replaced by a synonym.
STOPWORDS = frozenset("""
a an the and or but if then else of in on at to for from by with as into onto about above below up
down out over under again further once is are was were be been being am do does did doing have has
had having it its itself this that these those there here which who whom whose what when where why
how not no nor so than too very can will just should would could may might must shall i you he she
we they me him her us them my your his our their all any each every both either neither some such
only own same other another also one two three four five six seven eight nine ten e g eg ie etc
""".split())
# Task vocabulary whose WordNet synonyms change the task (`string` -> `twine`, `find` -> `happen`).
PROTECTED_VOCABULARY = frozenset("""
number numbers string strings list lists integer integers element elements array arrays return
returns returned value values key keys character characters char chars digit digits sum index
indices tuple tuples dictionary set sets function functions input output true false none find
write check count length even odd prime positive negative zero float decimal binary vowel vowels
letter letters maximum minimum max min sort sorted order word words line lines print item items
given according occurrence occurrences ascending descending natural total common unique consecutive
adjacent first last second product difference remove add upper lower case position matrix divisor
""".split())
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
