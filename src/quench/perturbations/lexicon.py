"""The shipped English lexicon: WordNet synonyms and inflections (built by `lexicon_build`).

Shipped as package data (~300 KB) rather than read from an NLTK WordNet install so that the
perturbations are identical on every machine and need no download or system package.
"""

from __future__ import annotations

import functools
import gzip
import importlib.resources
from dataclasses import dataclass

BASE_TAG = {"NOUN": "NN", "VERB": "VB", "ADJ": "JJ", "ADV": "RB"}
DETERMINERS = frozenset(
    "a an the each every any all some no this that these those its their his her our your my "
    "two three four several many few given first second last".split()
)
TO_VERB = frozenset("to will would can could should must may might shall not".split())


@dataclass(frozen=True)
class Analysis:
    """One reading of a word: `numbers` = (number, NOUN, NNS) or (number, VERB, VBZ)."""

    lemma: str
    pos: str  # NOUN, VERB, ADJ, ADV
    tag: str  # Penn tag: NN NNS VB VBD VBN VBG VBZ JJ JJR JJS RB
    count: int  # WordNet sense-tagged frequency of (lemma, pos)


class Lexicon:
    """Synonyms of a lemma's most frequent sense, inflections, and word analyses."""

    def __init__(self, rows: list[str]) -> None:
        self.counts: dict[tuple[str, str], int] = {}
        self.synonyms: dict[tuple[str, str], tuple[str, ...]] = {}
        self.forms: dict[tuple[str, str], dict[str, str]] = {}
        for row in rows:
            kind, lemma, pos, *rest = row.split("\t")
            if kind == "S":
                self.counts[(lemma, pos)] = int(rest[0])
                self.synonyms[(lemma, pos)] = tuple(s for s in rest[1].split("|") if s)
            elif kind == "I":
                forms = dict(pair.split("=", 1) for pair in rest[0].split(","))
                if "VBD" in forms:
                    forms.setdefault("VBN", forms["VBD"])
                self.forms[(lemma, pos)] = forms
        self.readings: dict[str, list[Analysis]] = {}
        for (lemma, pos), count in self.counts.items():
            self._add(lemma, Analysis(lemma, pos, BASE_TAG[pos], count))
            for tag, form in self.forms.get((lemma, pos), {}).items():
                self._add(form, Analysis(lemma, pos, tag, count))
        for readings in self.readings.values():
            readings.sort(key=lambda a: (-a.count, a.pos, a.tag))
        # Every listed verb's participles, untagged ones (`sorted`: no sense count for `sort`) included.
        self.participles = frozenset(form for (_, pos), forms in self.forms.items() if pos == "VERB"
                                     for tag, form in forms.items() if tag in ("VBN", "VBG"))

    def _add(self, form: str, analysis: Analysis) -> None:
        self.readings.setdefault(form, []).append(analysis)

    def analyses(self, word: str) -> list[Analysis]:
        """All readings of a lower-case word, most frequent first."""
        return self.readings.get(word, [])

    def analyse(self, word: str, previous: str = "") -> Analysis | None:
        """The likeliest reading, nudged by the previous word (`the lists` noun, `to list` verb)."""
        readings = self.analyses(word)
        if not readings:
            return None
        prefer = "NOUN" if previous in DETERMINERS else "VERB" if previous in TO_VERB else ""
        if prefer:
            # Only a plausible reading: `a given matrix` must not make `given` the noun (1 vs 780).
            preferred = [a for a in readings if a.pos == prefer and a.count * 10 >= readings[0].count]
            if preferred:
                return preferred[0]
        return readings[0]

    def is_participle(self, word: str) -> bool:
        """`sorted`, `given`, `being`: a verb form that follows an auxiliary."""
        return word in self.participles

    def inflect(self, lemma: str, pos: str, tag: str) -> str | None:
        if tag == BASE_TAG[pos]:
            return lemma
        return self.forms.get((lemma, pos), {}).get(tag)

    def inflections(self, lemma: str, pos: str) -> list[str]:
        """The base form and every inflected form of a lemma in one part of speech."""
        forms = [lemma, *self.forms.get((lemma, pos), {}).values()]
        return list(dict.fromkeys(forms))

    def synonyms_of(self, analysis: Analysis) -> list[str]:
        """Synonyms inflected like the original word (`numbers` -> `figures`)."""
        out = []
        for synonym in self.synonyms.get((analysis.lemma, analysis.pos), ()):
            if " " in synonym:
                if analysis.tag == BASE_TAG[analysis.pos]:
                    out.append(synonym)
                continue
            form = self.inflect(synonym, analysis.pos, analysis.tag)
            if form:
                out.append(form)
        return list(dict.fromkeys(out))


@functools.cache
def lexicon() -> Lexicon:
    path = importlib.resources.files("quench.perturbations") / "data" / "lexicon.tsv.gz"
    with gzip.open(str(path), "rt", encoding="utf-8") as rows:
        return Lexicon(rows.read().splitlines())
