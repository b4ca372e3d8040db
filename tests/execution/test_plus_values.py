"""Plain values: which types cross from an MBPP+ sample, and the digests that stand in for large outputs."""

from __future__ import annotations

import collections
import marshal
import random

import pytest

from quench.execution.plus_values import (BATCH, as_simple, digest, is_simple, non_value_type, wire, wire_chunks,
                                          wire_digests, with_plain_mappings)


class Liar(int):
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = int.__hash__


@pytest.mark.parametrize("value", [None, True, 3, 2.5, 1j, "s", b"b", [1, (2, {3: {4}})], frozenset({1}),
                                   {"a": [None]}])
def test_plain_values(value) -> None:
    assert non_value_type(value) is None
    assert marshal.loads(wire(value)) == value


@pytest.mark.parametrize(("value", "name"), [
    (Liar(3), "Liar"),
    ([1, (2, Liar(3))], "Liar"),
    ({"k": collections.OrderedDict()}, "collections.OrderedDict"),
    ({Liar(1): 2}, "Liar"),
    ([iter([])], "list_iterator"),
])
def test_non_values_are_named_at_any_depth(value, name: str) -> None:
    assert name in non_value_type(value)
    with pytest.raises(ValueError):
        wire(value)  # marshal refuses them as well


def test_standard_mappings_become_dicts() -> None:
    value = [collections.Counter("aab"), {1: collections.defaultdict(int, {2: 3})}]
    assert with_plain_mappings(value) == [{"a": 2, "b": 1}, {1: {2: 3}}]
    assert non_value_type(with_plain_mappings(value)) is None
    assert non_value_type(with_plain_mappings([Liar(1)])) is not None  # nothing else changes


def test_equal_simple_values_have_equal_wire_forms_whatever_their_identities() -> None:
    shared = "colour"
    built = "".join(["col", "our"])
    assert wire([shared, shared, (1, shared)]) == wire([built, "colour", (1, built)])


@pytest.mark.parametrize(("value", "other"), [
    ([True, 2.0, (0.0,)], [1, 2, (0,)]),
    ([-0.0, 10.0 ** 20], [0, 10 ** 20]),
])
def test_as_simple_makes_equal_numbers_equal_bytes(value, other) -> None:
    assert value == other and wire(value) != wire(other)
    assert wire(as_simple(value)) == wire(as_simple(other))


@pytest.mark.parametrize("value", [[1, float("nan")], {1: 2}, {1}, [1j]])
def test_values_that_are_not_simple(value) -> None:
    assert not is_simple(value)


def test_chunks_are_the_wire_form_of_a_long_list() -> None:
    rng = random.Random(0)
    value = [(rng.randrange(9), rng.choice("abc"), rng.random() < 0.5, 1.0) for _ in range(3 * BATCH + 5)]
    assert b"".join(wire_chunks(value)) == wire(value)
    assert b"".join(wire_chunks(tuple(value))) == wire(tuple(value))
    assert b"".join(wire_chunks(value, simple=True)) == wire(as_simple(value))
    size, raw, simple = wire_digests(value)
    assert (size, raw, simple) == (len(wire(value)), digest(wire(value)), digest(wire(as_simple(value))))
