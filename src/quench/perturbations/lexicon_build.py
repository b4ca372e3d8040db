"""Build the shipped lexicon (`data/lexicon.tsv.gz`) from WordNet 3.0 and lemminflect, once.

Not imported at run time. Needs Debian's `wordnet-base` + `wordnet-sense-index` (files under
/usr/share/wordnet) and `pip install lemminflect`; run `python -m quench.perturbations.lexicon_build`.
Rows: `S lemma pos count synonyms` (count = WordNet sense-tagged frequency of the lemma in that
part of speech; synonyms = the other words of its most frequent sense) and
`I lemma pos TAG=form,...` (inflections, Penn tags).
"""

from __future__ import annotations

import gzip
import re
import sys
from collections import defaultdict
from pathlib import Path

WORDNET = Path("/usr/share/wordnet")
OUT = Path(__file__).parent / "data" / "lexicon.tsv.gz"
POS_FILES = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}
UPOS = {"n": "NOUN", "v": "VERB", "a": "ADJ", "r": "ADV"}
INFLECTED_TAGS = {"NOUN": ("NNS",), "VERB": ("VBD", "VBN", "VBG", "VBZ"), "ADJ": ("JJR", "JJS"), "ADV": ()}
WORD = re.compile(r"[a-z]+(?: [a-z]+)?")


def sense_counts() -> dict[tuple[str, str], list[tuple[int, str, int]]]:
    """(lemma, pos) -> [(sense number, synset offset, tag count)] from index.sense."""
    senses: dict[tuple[str, str], list[tuple[int, str, int]]] = defaultdict(list)
    ss_pos = {"1": "n", "2": "v", "3": "a", "4": "r", "5": "a"}
    for line in (WORDNET / "index.sense").read_text(encoding="latin-1").splitlines():
        key, offset, number, count = line.split()
        lemma, rest = key.split("%", 1)
        senses[(lemma, ss_pos[rest[0]])].append((int(number), offset, int(count)))
    return senses


def synset_words(pos: str, offset: str, cache: dict[str, bytes]) -> list[str]:
    if pos not in cache:
        cache[pos] = (WORDNET / f"data.{POS_FILES[pos]}").read_bytes()
    data = cache[pos]
    start = int(offset)
    line = data[start:data.index(b"\n", start)].decode("latin-1").split()
    count = int(line[3], 16)
    words = [line[4 + 2 * i] for i in range(count)]
    return [re.sub(r"\([a-z]+\)$", "", w).replace("_", " ") for w in words]


def build() -> list[str]:
    import lemminflect  # build-time only

    rows: list[str] = []
    needs_inflection: set[tuple[str, str]] = set()
    cache: dict[str, bytes] = {}
    for (lemma, pos), senses in sorted(sense_counts().items()):
        total = sum(c for _, _, c in senses)
        if total == 0 or not WORD.fullmatch(lemma) or " " in lemma:
            continue
        first = min(senses)
        synonyms = []
        if first[2] > 0:
            synonyms = [w for w in synset_words(pos, first[1], cache) if w != lemma and WORD.fullmatch(w)]
        rows.append(f"S\t{lemma}\t{UPOS[pos]}\t{total}\t{'|'.join(dict.fromkeys(synonyms))}")
        needs_inflection.add((lemma, UPOS[pos]))
        needs_inflection.update((w, UPOS[pos]) for w in synonyms if " " not in w)
    for lemma, upos in sorted(needs_inflection):
        forms = lemminflect.getAllInflections(lemma, upos=upos)
        pairs = [f"{tag}={forms[tag][0]}" for tag in INFLECTED_TAGS[upos] if tag in forms]
        if pairs:
            rows.append(f"I\t{lemma}\t{upos}\t{','.join(pairs)}")
    return rows


def main() -> int:
    rows = build()
    with gzip.open(OUT, "wt", encoding="utf-8", compresslevel=9) as out:
        out.write("\n".join(rows) + "\n")
    sys.stderr.write(f"wrote {len(rows)} rows to {OUT} ({OUT.stat().st_size} bytes)\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
