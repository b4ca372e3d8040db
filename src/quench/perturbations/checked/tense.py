"""A small rule-based tense shifter for docstring prose (ReCode's TenseTransformation).

Only finite present-tense verbs change: the copula and auxiliaries (`is`, `are`, `has`, `does`)
and third-person verbs after a subject (`it returns`, `that contains`, `the list has`).
Imperatives (`Return the sum`), base forms (`Let CAP be`, `to be`) and participles (`given`,
`sorted`) stay as they are, and so does every sentence that instructs (one with an imperative
clause, `Given ...`, a modal or `your task is to`): `Write a function that took a list`, `Return 0
if all digits were even` and `you will implement a function that took` are no English a person
writes. English puts no `will` in a conditional or temporal clause (`If n is
greater than m, return -1`, never `If n will be greater`): the future leaves those clauses, from
`if`, `when`, `whether` and the like to the next punctuation, in the present.
"""

from __future__ import annotations

from quench.perturbations.lexicon import DETERMINERS, lexicon
from quench.perturbations.text import FIXED, SPACE, WORD, Piece, match_case
from quench.perturbations.words import AUXILIARY_VERBS, DOMINANT_READING, MODALS

PAST = {"is": "was", "are": "were", "am": "was", "has": "had", "have": "had", "does": "did", "do": "did"}
FUTURE = {"is": "will be", "are": "will be", "am": "will be", "was": "will be", "were": "will be",
          "has": "will have", "have": "will have", "does": "will", "do": "will"}
NEGATED_FUTURE = {"is": "will not be", "are": "will not be", "am": "will not be", "was": "will not be",
                  "were": "will not be", "has": "will not have", "have": "will not have",
                  "does": "will not", "do": "will not"}
SUBJECTS = frozenset("it he she this that which who there what one".split())
# `ones that contain`: a relative pronoun before a base-form verb stands for a plural antecedent.
PLURAL_SUBJECTS = frozenset("they we you i that which who".split())
NEEDS_SUBJECT = frozenset({"has", "have", "does", "do"})
CONDITIONS = frozenset("if when whenever unless until once whether while before after".split())
CLAUSE_ENDS = ",.;:!?"
SENTENCE_ENDS = ".;:!?"


def is_subject(previous: str, plural: bool) -> bool:
    if previous == "<name>":
        return True
    if previous in (PLURAL_SUBJECTS if plural else SUBJECTS):
        return True
    reading = lexicon().analyse(previous) if previous else None
    return reading is not None and reading.pos == "NOUN" and reading.tag == ("NNS" if plural else "NN")


def shift_verb(word: str, previous: str, when: str, following: str = "", before: str = "") -> str | None:
    """The shifted form of a present-tense verb, or None when `word` is not one here (`previous`:
    the word before it, `before`: the word before that)."""
    lower = word.lower()
    if previous == "<value>":
        return None
    if lower in MODALS:
        return None  # `n can be written`, never `n will can be written` (WordNet's `can`: to tin)
    if lower in FUTURE or lower in PAST:
        if when == "future" and following == "to":
            return None  # `are to be used`, `is to compute`: no `will be to`
        if when == "future" and lower in ("has", "have") and lexicon().is_participle(following):
            return None  # `has been tasked`: no `will have been tasked`
        if lower in NEEDS_SUBJECT and not (is_subject(previous, plural=lower in ("have", "do"))):
            return None
        return (PAST if when == "past" else FUTURE).get(lower)
    if following == "of" and any(a.pos == "NOUN" for a in lexicon().analyses(lower)):
        return None  # `the string reverse of a prefix`: a noun before `of` (`consists of` has no noun reading)
    verb = next((a for a in lexicon().analyses(lower) if a.pos == "VERB" and a.tag == "VBZ"), None)
    if verb is None:
        return plural_verb(lower, previous, when)
    if not is_subject(previous, plural=False):
        return None
    noun = next((a for a in lexicon().analyses(lower) if a.pos == "NOUN"), None)
    if previous not in SUBJECTS and noun is not None and noun.count > verb.count:
        return None  # `list numbers`: more likely a noun than a verb
    if previous not in SUBJECTS | {"<name>"} and noun is not None and before not in DETERMINERS:
        return None  # `polar coordinates`, `x, y point coordinates`: a compound noun, no subject and verb
    if when == "past":
        return lexicon().inflect(verb.lemma, "VERB", "VBD")
    return f"will {verb.lemma}"


def plural_verb(lower: str, previous: str, when: str) -> str | None:
    """`the numbers differ` -> `differed` / `will differ`: a base-form verb after a plural subject."""
    readings = lexicon().analyses(lower)
    if lower == "be" or not readings or (readings[0].pos, readings[0].tag) != ("VERB", "VB"):
        return None
    if not is_subject(previous, plural=True):
        return None
    if any(a.pos != "VERB" and a.count * DOMINANT_READING > readings[0].count for a in readings):
        return None  # `elements present in another list`: an adjective as likely as the verb
    if when == "past":
        return lexicon().inflect(readings[0].lemma, "VERB", "VBD")
    return f"will {lower}"


def previous_word(piece: Piece) -> str:
    """What a piece tells about the subject: a word, a protected name, or nothing."""
    if piece.kind == WORD:
        return piece.text.lower()
    if piece.text in ("True", "False", "None") or piece.text.strip(".,;:()").isdigit():
        return "<value>"  # `Return True is list ...` (a typo for `if`), `1 duplicate`: no subject
    if piece.kind == FIXED and piece.text.strip("`'\"").replace("_", "").isalnum():
        return "<name>"
    return ""


# Verbs that open an instruction (`Write a function`, `Given a list, return`), beside any word whose
# likeliest reading is a base-form verb.
IMPERATIVES = frozenset("""write return find check create implement complete sort count filter concatenate insert
add remove compute calculate convert determine get given round replace reverse use consider imagine evaluate
change make print extract split merge generate""".split())


def opens_instruction(word: str) -> bool:
    readings = lexicon().analyses(word)
    return word in IMPERATIVES or bool(readings and readings[0].pos == "VERB" and readings[0].tag == "VB")


def sentences(pieces: list[Piece]) -> list[list[int]]:
    """The piece indices of each sentence (ended by `.`, `!`, `?`, `:` or `;`)."""
    out: list[list[int]] = [[]]
    for i, piece in enumerate(pieces):
        out[-1].append(i)
        if piece.kind == FIXED and piece.text.strip()[-1:] in SENTENCE_ENDS and piece.text.strip():
            out.append([])
    return [s for s in out if s]


LIST_MARKS = frozenset({"*", "-", "•"})
CONTRACTIONS = frozenset("it's that's there's what's here's".split())  # a present verb the shifter leaves


# After these a base-form verb is no instruction: `to find`, `you need`, `the count`, `of use`, `are given`.
NOT_IMPERATIVE_AFTER = (MODALS | DETERMINERS | PLURAL_SUBJECTS | AUXILIARY_VERBS
                        | frozenset("to not n't do does did don't doesn't cannot of in for with by on".split()))


def sentence_words(pieces: list[Piece], sentence: list[int]) -> list[tuple[int, str]]:
    """(index, lower-case word) of the words of a sentence, protected ones (`CANNOT`, `add`) included."""
    return [(i, pieces[i].text.lower()) for i in sentence
            if pieces[i].kind == WORD or (pieces[i].kind == FIXED and pieces[i].text.isalpha())]


def instructs(pieces: list[Piece], sentence: list[int]) -> bool:
    """The sentence has an imperative clause, a modal, `is to` (`your task is to`) or list marks."""
    words = sentence_words(pieces, sentence)
    if not words or any(pieces[i].kind == FIXED and pieces[i].text.strip() in LIST_MARKS for i in sentence):
        return bool(words)
    if opens_instruction(words[0][1]) or any(w in MODALS or w == "cannot" for _, w in words):
        return True
    for (i, word), (_, after) in zip(words, words[1:]):
        if word in ("is", "are") and after == "to":
            return True
    for k, (i, word) in enumerate(words[1:], 1):
        if word in IMPERATIVES and words[k - 1][1] not in NOT_IMPERATIVE_AFTER:
            return True  # `..., return`, `(of length two) select and return`
    return False


def present_verb(word: str, previous: str) -> bool:
    """`is`, `has`, `it's`, `don't`, `returns`, `we have`, `cars move`: a present-tense verb, most likely one."""
    readings = lexicon().analyses(word)
    if word in ("is", "are", "has", "does", "don't", "doesn't") or word in CONTRACTIONS:
        return True
    if not readings or readings[0].pos != "VERB":
        return False
    if readings[0].tag == "VBZ":
        return True
    plural = previous in ("we", "they", "you", "i") or any(a.pos == "NOUN" and a.tag == "NNS"
                                                           for a in lexicon().analyses(previous)[:1])
    return readings[0].tag == "VB" and plural


def shift_pieces(pieces: list[Piece], when: str) -> tuple[list[str], set[int], set[int]]:
    """Each piece's new text, the indices of shifted verbs, and those inside a conditional clause."""
    out = [piece.text for piece in pieces]
    shifted: set[int] = set()
    conditional: set[int] = set()
    previous = before = ""
    condition = False  # inside an `if`/`when` clause: no future there
    shifted_before = False  # a lexical verb of this sentence changed: one joined by `and` changes with it
    for i, piece in enumerate(pieces):
        if piece.kind == WORD and piece.text.lower() in CONDITIONS:
            condition = True
        elif piece.kind == FIXED and any(c in piece.text for c in CLAUSE_ENDS):
            condition = False
            shifted_before = shifted_before and not any(c in piece.text for c in SENTENCE_ENDS)
        if condition:
            conditional.add(i)
        if piece.kind == WORD and not (condition and when == "future"):
            following = pieces[i + 2].text.lower() if i + 2 < len(pieces) and pieces[i + 1].kind == SPACE else ""
            readings = lexicon().analyses(piece.text.lower())
            joined = shifted_before and previous in ("and", "or") and bool(readings) and readings[0].pos == "VERB"
            subject = "<name>" if joined else previous  # `took a list and returned`, never `and forwarded`
            new = shift_verb(piece.text, subject, when, following, before)
            if new:
                shifted_before = piece.text.lower() not in FUTURE  # a lexical verb, not `is` or `has`
                if when == "future" and following == "not":
                    new = NEGATED_FUTURE[piece.text.lower()]
                    out[i + 1] = out[i + 2] = ""  # the space and `not`
                out[i] = match_case(piece.text, new)
                shifted.add(i)
        if piece.kind != SPACE:
            before, previous = previous, (piece.text.lower() if i in shifted else previous_word(piece))
    return out, shifted, conditional


def transform(pieces: list[Piece], when: str) -> str:
    """The text with its descriptive sentences in the past or future. A sentence that instructs, or one
    that would be left half shifted (a present verb the rules cannot shift beside one they did), stays."""
    out, shifted, conditional = shift_pieces(pieces, when)
    text = []
    for sentence in sentences(pieces):
        words = sentence_words(pieces, sentence)
        left = [i for k, (i, word) in enumerate(words) if i not in shifted
                and present_verb(word, words[k - 1][1] if k else "") and not (when == "future" and i in conditional)]
        keep = instructs(pieces, sentence) or not shifted.intersection(sentence) or left
        text += [pieces[i].text if keep else out[i] for i in sentence]
    return "".join(text)
