"""The blind sample of changed default-profile docstring variants, labelled by reading them for meaning and
fluency (tests/perturbations/data/wording_labels.jsonl, drawn by benchmarks/wording_sample.py): the
sample is still what the current code writes, and its shares are those docs/robustness.md and
docs/benchmarks.md state."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import pytest

from quench.datasets import Problem, load_humaneval, load_mbpp
from quench.perturbations.base import apply_seeded
from quench.perturbations.catalog import create
from quench.stats.intervals import wilson_interval

LABELS = Path(__file__).parent / "data" / "wording_labels.jsonl"
FIELDS = {"benchmark", "task_id", "transformation", "seed", "original", "perturbed", "meaning_kept", "fluent", "why"}
TRANSFORMS = ("SynonymSubstitution", "SynonymInsertion", "EnglishInflectionalVariation",
              "TenseTransformationPast", "TenseTransformationFuture")
# docs/benchmarks.md: (variants read as keeping the meaning, as fluent, sample size), then the
# Wilson 95% interval of each share in %
STATED = {
    "SynonymSubstitution": (27, 26, 28, (82.3, 99.4), (77.4, 98.0)),
    "SynonymInsertion": (28, 27, 28, (87.9, 100.0), (82.3, 99.4)),
    "EnglishInflectionalVariation": (28, 28, 28, (87.9, 100.0), (87.9, 100.0)),
    "TenseTransformationPast": (14, 11, 14, (78.5, 100.0), (52.4, 92.4)),
    "TenseTransformationFuture": (14, 12, 14, (78.5, 100.0), (60.1, 96.0)),
    "all": (111, 104, 112, (95.1, 99.8), (86.5, 96.3)),
}


def labelled() -> list[dict]:
    return [json.loads(line) for line in LABELS.read_text(encoding="utf-8").splitlines()]


@functools.cache
def nominal() -> dict[str, Problem]:
    return {p.task_id: p for p in [*load_humaneval(), *load_mbpp(None)]}


@functools.cache
def sample_script():  # noqa: ANN201 - the benchmark module that draws the sample
    sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
    import wording_sample

    return wording_sample


def test_the_sample_is_well_formed() -> None:
    rows = labelled()
    assert len(rows) == 112 and all(set(r) == FIELDS for r in rows)
    assert all(isinstance(r["meaning_kept"], bool) and isinstance(r["fluent"], bool) for r in rows)
    assert all(bool(r["why"]) == (not r["meaning_kept"] or not r["fluent"]) for r in rows)
    assert {r["transformation"] for r in rows} == set(TRANSFORMS)


@pytest.mark.parametrize("name", TRANSFORMS)
def test_the_labelled_variants_are_what_the_transformation_writes(name: str) -> None:
    """A change to the transformations that alters a labelled variant must come with a fresh sample."""
    transform, script = create(name), sample_script()
    for row in (r for r in labelled() if r["transformation"] == name):
        problem = nominal()[row["task_id"]]
        variant = apply_seeded(transform, problem, row["seed"]).prompt
        assert script.changed_sentences(*script.prose(problem, variant)) == (row["original"], row["perturbed"])


def test_the_draw_is_the_sample() -> None:
    """The file is the seeded draw itself (its command is in benchmarks/wording_sample.py): nothing picked by hand."""
    drawn = sample_script().draw(90421, 14)
    assert [(r["task_id"], r["transformation"], r["seed"]) for r in drawn] == \
        [(r["task_id"], r["transformation"], r["seed"]) for r in labelled()]


def test_the_stated_shares_and_intervals() -> None:
    rows = labelled()
    for name, stated in STATED.items():
        group = [r for r in rows if name in ("all", r["transformation"])]
        meaning = wilson_interval(sum(r["meaning_kept"] for r in group), len(group))
        fluent = wilson_interval(sum(r["fluent"] for r in group), len(group))
        found = (sum(r["meaning_kept"] for r in group), sum(r["fluent"] for r in group), len(group),
                 (round(100 * meaning.low, 1), round(100 * meaning.high, 1)),
                 (round(100 * fluent.low, 1), round(100 * fluent.high, 1)))
        assert found == stated, name
