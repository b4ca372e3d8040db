"""EvalPlus 0.3.1's check of one MBPP+ output, with literal cases per rule."""

from __future__ import annotations

import pytest

from quench.execution.plus_rules import FLOAT_ATOL, check, digit_distance, rule_of, surface_area


@pytest.mark.parametrize(("out", "exp", "atol", "verdict"), [
    (0.1 + 0.2, 0.3, 0.0, True),  # floats get atol 1e-6 where the problem gives none
    (0.3001, 0.3, 0.0, False),
    (0.3001, 0.3, 1e-3, True),
    ([1.0, 2.0000001], [1.0, 2.0], 0.0, True),  # a list of floats, elementwise
    ((1.0, 2.0000001), [1.0, 2.0], 0.0, False),  # ... of the expected type only
    ([1.0], [1.0, 2.0], 0.0, False),  # ... and length
    (1, 1.0, 0.0, True),  # equal: exact comparison passes first
    (True, 1, 0.0, True),
    (2, 2.0000001, 0.0, False),  # an int is not a float
    ("0.3", 0.3, 1e-3, False),
    (float("inf"), float("inf"), 1e-4, True),
    (float("nan"), float("nan"), 1e-4, False),  # np.allclose: nan is not close to nan
    ((3, 1.5), (3, 1.5000001), 1e-4, True),  # atol problems: mixed tuples, elementwise
    ([[1.0]], [[1.0000001]], 1e-4, True),
    ([1, 2], [2, 1], 0.0, False),
    ({1, 2}, {2, 1}, 0.0, True),
])
def test_exact_and_atol(out, exp, atol, verdict) -> None:
    assert check(out, exp, (), atol)[0] is verdict


def test_atol_is_sticky_within_a_stage() -> None:
    """As in EvalPlus: once an expected output is a float, later inputs of the stage get 1e-6 too."""
    passed, atol = check(0.5, 0.5, (), 0.0)
    assert passed and atol == FLOAT_ATOL
    assert check([1.0000001, 2.0], [1, 2], (), atol)[0]  # close to a list of ints: passes now
    assert not check([1.0000001, 2.0], [1, 2], (), 0.0)[0]  # ... but not on a stage's first input


@pytest.mark.parametrize(("entry_point", "out", "exp", "verdict"), [
    ("similar_elements", (5, 4), (4, 5), True),  # Mbpp/2: outputs compared as sets
    ("similar_elements", [4, 5, 5], (4, 5), True),
    ("similar_elements", (4,), (4, 5), False),
    ("find_char_long", ["b", "a"], ["a", "b"], True),  # Mbpp/7
    ("Diff", [3, 1], [1, 3], True),  # Mbpp/769
    ("similar_elements", 4, (4,), False),  # set(4) raises: the input fails
    ("check_str", False, False, True),  # Mbpp/737: a bool is compared as a bool ...
    ("check_str", False, True, False),
    ("check_str", True, True, True),
    ("check_str", 0, True, True),  # ... anything else by whether it is None
    ("check_str", None, False, True),
    ("check_str", "", True, True),
    ("text_match_three", None, True, False),  # Mbpp/787
    ("text_starta_endb", True, False, False),  # Mbpp/794
    ("are_equivalent", "anything", False, True),  # Mbpp/164
    ("sum_div", 0, 7, True),  # Mbpp/295: 0 passes too
    ("sum_div", 3, 7, False),
])
def test_special_rules(entry_point: str, out, exp, verdict: bool) -> None:
    assert check(out, exp, (), 0.0, rule_of(entry_point))[0] is verdict


def test_surface_area_accepts_either_reading_of_the_height() -> None:
    """Mbpp/581: the reference reads `height` as the slant height; EvalPlus also accepts the
    pyramid's height, rounded, within the task's atol."""
    rule = rule_of("surface_Area")
    assert surface_area(3, 4) == round(9 + 2 * 3 * (1.5 ** 2 + 16) ** 0.5)
    assert check(surface_area(3, 4), 33, (3, 4), 0.0, rule)[0]  # the other reading
    assert check(33, 33, (3, 4), 0.0, rule)[0]
    assert not check(34, 33, (3, 4), 0.0, rule)[0]


def test_digit_distance_accepts_zero_padded_numbers() -> None:
    """Mbpp/558: the distance of the numbers padded to one length passes as well as the reference's."""
    rule = rule_of("digit_distance_nums")
    assert digit_distance(123, 45) == 1 + 2 + 2  # 123 against 045
    assert check(5, 9, (123, 45), 0.0, rule)[0]
    assert check(9, 9, (123, 45), 0.0, rule)[0]
    assert not check(6, 9, (123, 45), 0.0, rule)[0]


def test_other_tasks_compare_exactly() -> None:
    assert rule_of("remove_Occ") == "exact"
    assert not check((5, 4), (4, 5), (), 0.0, "exact")[0]
