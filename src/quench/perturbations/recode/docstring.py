"""ReCode's word-level docstring transformations (profile "recode"): NL-Augmenter's semantics.

ReCode hands NL-Augmenter the docstring from after the opening quotes (and whitespace) to before
the first `>>>` (and whitespace), with every word naming an identifier of the program masked.
NL-Augmenter tokenizes the text, decides per content word (noun, verb, adjective, adverb) with
p=0.5 and rebuilds the text from its tokens, so a line break comes back with a space on each
side (`than \\n     given`) even where no word changed. SynonymSubstitution replaces a word by
one of its WordNet synonyms or its lemma (`numbers` -> `number`); SynonymInsertion (stop words
excepted) inserts one after it. ReCode's draws (spaCy's tags, NumPy's generator reseeded per
docstring) are not reproduced; quench's shipped lexicon stands in for WordNet and the tagger.
"""

from __future__ import annotations

import functools
import random
import re
from typing import Callable

from quench.datasets import Problem
from quench.perturbations.base import DOCSTRING, Perturbation
from quench.perturbations.lexicon import lexicon
from quench.perturbations.recode.code_syntax import TYPE_VARS, parser, variable_names
from quench.perturbations.recode.render import sep
from quench.perturbations.words import AUXILIARY_VERBS, FUNCTION_WORDS

MASK = "<|||>"
# NLTK's English stop words, which SynonymInsertion skips (compared case-sensitively, as there).
NLTK_STOPWORDS = frozenset("""
i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself yourselves he him his
himself she she's her hers herself it it's its itself they them their theirs themselves what which who whom this
that that'll these those am is are was were be been being have has had having do does did doing a an the and but
if or because as until while of at by for with about against between into through during before after above below
to from up down in out on off over under again further then once here there when where why how all any both each
few more most other some such no nor not only own same so than too very s t can will just don don't should
should've now d ll m o re ve y ain aren aren't couldn couldn't didn didn't doesn doesn't hadn hadn't hasn hasn't
haven haven't isn isn't ma mightn mightn't mustn mustn't needn needn't shan shan't shouldn shouldn't wasn wasn't
weren weren't won won't wouldn wouldn't
""".split())
BLANKS = " \n\t"


def split_docstring(prompt: str, entry_point: str) -> tuple[str, str, str]:
    """ReCode's (head, prose, examples): prose from after the quotes and whitespace to before `>>>`.

    As in ReCode, the first character after the quotes always stays in the head, a `\'\'\'`
    docstring counts when there is no double-quoted one, and a prompt without `>>>` (88 of
    HumanEval's) hands over everything but its last character, closing quotes included
    (NL-Augmenter writes them back as `" " "`).
    """
    after = prompt.find(entry_point)
    quotes = prompt.find('"""', after)
    start = (quotes if quotes != -1 else prompt.find("'''", after)) + 3
    special = start + 1
    while special < len(prompt) and prompt[special] in BLANKS:
        special += 1
    end = prompt.find(">>>", prompt.find(entry_point))  # -1: counted from the end, as ReCode's index
    last = end - 1
    while prompt[last] in BLANKS:
        last -= 1
    return prompt[:special], prompt[special:last + 1], prompt[last + 1:]


def clean_word(word: str) -> str:
    """The first run of letters and digits (`cost[]` -> `cost`)."""
    match = re.search(r"[A-Za-z0-9]+", word)
    return match.group(0) if match else ""


def identifiers(problem: Problem) -> set[str]:
    """Every identifier of the program (docstring left out) and the type names: never edited."""
    header, _, body = sep(problem.prompt + problem.canonical_solution, problem.entry_point)
    root = parser().parse((header + body).encode()).root_node
    return set(variable_names(root, True)) | set(variable_names(root, False)) | TYPE_VARS


def masked(prose: str, protected: set[str]) -> tuple[str, list[str]]:
    words, hidden = [], []
    for word in prose.split(" "):
        if clean_word(word) in protected:
            words.append(MASK)
            hidden.append(word)
        else:
            words.append(word)
    return " ".join(words), hidden


def edit_prose(problem: Problem, edit: Callable[[str], str], mask: bool = True) -> Problem:
    """`problem` with `edit` applied to ReCode's docstring prose, the program's names masked from it
    unless `mask` is False; the same problem when nothing changes."""
    head, prose, examples = split_docstring(problem.prompt, problem.entry_point)
    text, hidden = masked(prose, identifiers(problem)) if mask else (prose, [])
    new = edit(text)
    for word in hidden:
        new = new.replace(MASK, word, 1)
    prompt = head + new + examples
    return problem if prompt == problem.prompt else problem.with_changes(prompt=prompt)


def untokenize(tokens: list[str]) -> str:
    """NL-Augmenter's rebuild: tokens joined by spaces, then spaces before punctuation removed."""
    text = " ".join(tokens)
    text = text.replace("`` ", '"').replace(" ''", '"').replace(". . .", "...")
    text = text.replace(" ( ", " (").replace(" ) ", ") ")
    text = re.sub(r' ([.,:;?!%]+)([ \'"`])', r"\1\2", text)
    text = re.sub(r" ([.,:;?!%]+)$", r"\1", text)
    text = text.replace(" '", "'").replace(" n't", "n't").replace("can not", "cannot")
    return text.replace(" ` ", " '").strip()


PREFIX = "([{\"'`$"
SUFFIX = ")]}\"',.:;!?%"
OPERATORS = "=<>-+*/"
HYPHEN = re.compile(r"(?<=[A-Za-z])(-)(?=[A-Za-z])")


def split_chunk(chunk: str) -> list[str]:
    """A space-free chunk as spaCy's English tokenizer roughly cuts it: opening and closing
    brackets, quotes and punctuation come off the ends, a hyphen between letters stands alone,
    an operator of symbols alone (`==`, `->`) falls into characters; the rest (`a_b`, `1,0,1`,
    `-1`, `f(x`) stays whole."""
    head: list[str] = []
    tail: list[str] = []
    while len(chunk) > 1 and chunk[0] in PREFIX:
        head.append(chunk[0])
        chunk = chunk[1:]
    while len(chunk) > 1 and chunk[-1] in SUFFIX and not (chunk[-1] == "." and chunk[:-1].count(".")):
        tail.insert(0, chunk[-1])
        chunk = chunk[:-1]
    if len(chunk) > 1 and not chunk.strip(OPERATORS):
        middle = list(chunk)  # `==`, `->`, `=>`: one token per character
    else:
        middle = [part for part in HYPHEN.split(chunk) if part]  # `non-empty` -> `non - empty`
    return [*head, *middle, *tail]


def tokens_of(text: str) -> list[str]:
    """Chunks between single spaces, cut at their ends; a line break keeps its indentation as one token."""
    out = []
    for piece in re.split(r"([ \t]*\n[ \t\n]*|[ \t]{2,})", text):
        if not piece:
            continue
        if not piece.strip(" \t\n"):
            out.append(piece.lstrip(" \t") if "\n" in piece else piece[1:])
            continue
        for chunk in piece.split(" "):
            if chunk:
                out += split_chunk(chunk)
    return out


@functools.cache
def related_lemmas() -> dict[tuple[str, str], tuple[str, ...]]:
    """Lemma -> lemmas sharing a synset with it, both ways round (the shipped table lists one sense)."""
    related: dict[tuple[str, str], list[str]] = {}
    for (lemma, pos), synonyms in lexicon().synonyms.items():
        for synonym in synonyms:
            related.setdefault((lemma, pos), []).append(synonym)
            related.setdefault((synonym, pos), []).append(lemma)
    return {key: tuple(dict.fromkeys(values)) for key, values in related.items()}


def options(word: str) -> list[str]:
    """WordNet-like choices, uninflected as WordNet's synset names: the lemma, then related lemmas."""
    lower = word.lower()
    out = []
    for reading in lexicon().analyses(lower):
        out += [reading.lemma, *related_lemmas().get((reading.lemma, reading.pos), ())]
    return [o for o in dict.fromkeys(out) if o.lower() != lower]


# Between an auxiliary and its verb (`is not sorted`, `has always been`).
AUXILIARY_GAP = frozenset("not n't also always never still already only just all then".split())


def is_auxiliary(word: str, following: list[str]) -> bool:
    """`do`, and `be`/`have` before a participle: the auxiliaries spaCy tags AUX (ReCode's release
    never replaces them). Copula and possession (`is a prime`, `has a length`) are its VERBs."""
    if word in ("do", "does", "did"):
        return True
    for token in following:
        if token.lower() not in AUXILIARY_GAP:
            return token[:1].isalpha() and lexicon().is_participle(token.lower())
    return False


def is_content_word(token: str, following: list[str]) -> bool:
    """A word that NL-Augmenter's tagger calls a noun, verb, adjective or adverb, as far as the
    shipped lexicon and the closed word classes tell: never a determiner (`a`, which WordNet
    lists as the noun "angstrom"), preposition, pronoun, conjunction, numeral or auxiliary."""
    lower = token.lower()
    if not token[:1].isalpha() or not lexicon().analyses(lower):
        return False
    if lower in AUXILIARY_VERBS:
        return not is_auxiliary(lower, following)
    return lower not in FUNCTION_WORDS


class RecodeWordwise(Perturbation):
    """Per content word of the prose: a coin with p=0.5, then `edit`; the text is rebuilt from tokens."""

    category = DOCSTRING
    prob = 0.5

    def apply(self, problem: Problem, rng: random.Random) -> Problem:
        return edit_prose(problem, lambda text: self.edit_words(text, rng))

    def edit_words(self, text: str, rng: random.Random) -> str:
        out = []
        tokens = tokens_of(text)
        for i, token in enumerate(tokens):
            if is_content_word(token, tokens[i + 1:]) and self.eligible(token):
                out += self.edit(token, rng)
            else:
                out.append(token)
        return untokenize(out)

    def eligible(self, word: str) -> bool:
        return True

    def edit(self, word: str, rng: random.Random) -> list[str]:
        raise NotImplementedError


class RecodeSynonymSubstitution(RecodeWordwise):
    name = "SynonymSubstitution"
    description = "each content word replaced by a synonym or its lemma with p=0.5; the prose re-tokenized"

    def edit(self, word: str, rng: random.Random) -> list[str]:
        choices = options(word)
        coin = rng.random()
        return [rng.choice(choices).replace("_", " ")] if choices and coin < self.prob else [word]


class RecodeSynonymInsertion(RecodeWordwise):
    name = "SynonymInsertion"
    description = "a synonym inserted after each content word (stop words excepted) with p=0.5; the prose re-tokenized"

    def eligible(self, word: str) -> bool:
        return word not in NLTK_STOPWORDS

    def edit(self, word: str, rng: random.Random) -> list[str]:
        choices = options(word)
        if choices and rng.random() < self.prob:
            return [word, rng.choice(choices).replace("_", " ")]
        return [word]
