"""The Python judge's plain values: what crosses between the program's process and the judge's."""

from __future__ import annotations

import collections
import math

import pytest

from quench.datasets.judge import VALUES, free_names

PLAIN: dict = {}
exec(VALUES, PLAIN)  # form, value and LyingValue, as the judge and the runner define them
form, value, LyingValue = PLAIN["form"], PLAIN["value"], PLAIN["LyingValue"]


def same(a: object, b: object) -> bool:
    """Equal, with the same exact type at every depth (True is not 1, -0.0 is not 0.0, nan is nan)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return math.copysign(1, a) == math.copysign(1, b) and (a == b or (math.isnan(a) and math.isnan(b)))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


@pytest.mark.parametrize("plain", [
    None, True, False, 0, 1, -7, 2 ** 200, 1.5, -0.0, float("nan"), float("inf"), 1 + 2j, "", "é\U0001f600\udc80",
    b"\x00\xff", [1, [2, (3, "x")]], (), (True, 1), {"a": [1], 2: (3,), (1, 2): None}, {1, 2}, frozenset({"a"}),
    [int, str, type(None).__name__], {frozenset({1}): {2}},
])
def test_plain_values_cross_unchanged(plain: object) -> None:
    assert same(value(form(plain)), plain)


@pytest.mark.parametrize("liar, named", [
    (type("Agree", (int,), {"__eq__": lambda self, other: True})(0), "Agree"),
    (type("Liar", (), {"__eq__": lambda self, other: True})(), "Liar"),
    ([1, {"k": (2, type("S", (str,), {})("x"))}], "S"),
    ((x for x in [1]), "generator"),
    (math, "module"),
])
def test_anything_else_is_a_lie_naming_its_type(liar: object, named: str) -> None:
    with pytest.raises(LyingValue, match=named):
        form(liar)


def test_the_standard_librarys_dicts_cross_as_dicts() -> None:
    counted = value(form(collections.Counter("abca")))
    assert type(counted) is dict and counted == {"a": 2, "b": 1, "c": 1}
    assert type(value(form(collections.defaultdict(list, {1: [2]})))) is dict


def test_forms_that_are_not_plain_values_are_refused() -> None:
    for shape in ({"q": "1"}, {"i": ["1"]}, ["x"], {"l": [{"o": 1}]}, {"y": "object"}):
        with pytest.raises((ValueError, KeyError, TypeError)):
            value(shape)


def test_free_names_are_what_the_test_takes_from_the_program() -> None:
    test = "import math\n\ndef check(candidate):\n    xs = [1]\n    assert math.fabs(poly(xs, candidate(xs))) < 1e-4\n"
    assert free_names(test, "find_zero") == ["find_zero", "poly"]
    assert free_names("def check(f):\n    assert f(1) == helper\n", "g") == ["g", "helper"]
