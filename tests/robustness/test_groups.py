"""Group keys: the typed key of a baseline or a variant, its on-disk label, and ReCode's baseline rule."""

from __future__ import annotations

import pytest

from quench.errors import QuenchError
from quench.robustness.groups import FULL, PARTIAL, GroupKey, baseline_of, is_nominal_label

CATEGORY = {"FuncRenameCamelCase": "function_name", "DeadCodeInserter": "code_syntax", "Tab": "code_format"}.__getitem__


@pytest.mark.parametrize(("key", "label"), [
    (GroupKey.nominal(), "nominal/full"),
    (GroupKey.partial(), "nominal/partial"),
    (GroupKey.variant("FuncRenameCamelCase", 0, "function_name"), "FuncRenameCamelCase/0"),
    (GroupKey.variant("DeadCodeInserter", 12, "code_syntax"), "DeadCodeInserter/12"),
])
def test_a_key_round_trips_through_the_label_samples_jsonl_keeps(key, label):
    assert key.label() == label
    assert GroupKey.from_label(label, CATEGORY) == key
    assert is_nominal_label(label) == key.is_nominal


def test_code_categories_compare_with_the_partial_prompt_and_the_others_with_the_full_one():
    assert [baseline_of(c) for c in ("docstring", "function_name", "code_syntax", "code_format")] == [
        FULL, FULL, PARTIAL, PARTIAL]
    assert GroupKey.variant("Tab", 3, "code_format").baseline == GroupKey.partial()
    assert GroupKey.variant("FuncRenameCamelCase", 3, "function_name").baseline == GroupKey.nominal()
    assert GroupKey.partial().baseline == GroupKey.partial()
    with pytest.raises(QuenchError, match="unknown perturbation category 'spelling'"):
        baseline_of("spelling")


def test_variants_sort_by_seed_as_a_number_after_the_baselines():
    keys = [GroupKey.variant("Tab", 10, "code_format"), GroupKey.variant("Tab", 2, "code_format"),
            GroupKey.partial(), GroupKey.variant("DeadCodeInserter", 0, "code_syntax"), GroupKey.nominal()]
    assert [k.label() for k in sorted(keys, key=lambda k: k.order)] == [
        "nominal/full", "nominal/partial", "DeadCodeInserter/0", "Tab/2", "Tab/10"]


@pytest.mark.parametrize("label", ["nominal/half", "Tab", "Tab/x", "/0"])
def test_a_label_that_names_no_group_is_refused(label):
    with pytest.raises(QuenchError, match="not a robustness group"):
        GroupKey.from_label(label, CATEGORY)


def test_a_key_has_a_transformation_and_a_seed_or_neither():
    with pytest.raises(ValueError):
        GroupKey("Tab", None, FULL)
    with pytest.raises(ValueError):
        GroupKey(None, None, "half")  # type: ignore[arg-type]
