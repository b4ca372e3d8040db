"""Plain values: what an MBPP+ program's return values may be, and how they cross between processes.

Glossary:
- plain value: None, or a bool, int, float, complex, str or bytes, or a list, tuple, dict, set or
  frozenset of plain values, each of exactly that type (no subclasses): comparing two plain values
  runs no code of the program's.
- wire form: `marshal.dumps(value, WIRE_VERSION)`. Version 2 writes no back-references and no
  interning marks, so two equal values built of None, int, str, bytes, list and tuple have the same
  bytes whatever their object identities.
- simple value: a plain value built of None, bool, int, float (not NaN), str, bytes, list and tuple.
  With its numbers that equal an int made ints (`as_simple`), equality of two simple values is
  equality of their wire forms; so a large expected output is kept as two SHA-256 digests of its
  wire form, as it is and `as_simple` (plus_oracle.py), and never travels or sits in memory whole.
- standard mappings: `collections.Counter`, `OrderedDict` and `defaultdict`, which MBPP+'s
  references return where a dict is meant (Mbpp/88): sent as the plain dict of their items.

Standard library only: this file runs in the sandbox as part of the MBPP+ harness (plus.py).
"""

import hashlib
import marshal
from itertools import chain

WIRE_VERSION = 2
PLAIN_TYPES = (type(None), bool, int, float, complex, str, bytes, list, tuple, dict, set, frozenset)
SIMPLE_TYPES = (type(None), bool, int, float, str, bytes, list, tuple)
CONTAINERS = (list, tuple, set, frozenset)
PLAIN_SET, NESTED = frozenset(PLAIN_TYPES), frozenset((*CONTAINERS, dict))
SCALARS = PLAIN_SET - NESTED
MAX_DEPTH = 200  # deeper than any MBPP+ output
BATCH = 4096  # items of a long list or tuple encoded at a time: a large output is never encoded whole
STANDARD_MAPPINGS = ("collections.Counter", "collections.OrderedDict", "collections.defaultdict")


def non_value_type(value, depth=0):
    """The name of the first type in `value` that is not a plain one, else None. (marshal alone
    would not do: it writes anything with the buffer protocol, a numpy array say, as bytes.)"""
    kind = type(value)
    if kind not in PLAIN_SET:
        return _name(kind)
    if kind not in NESTED:
        return None
    if depth > MAX_DEPTH:
        return "nesting deeper than " + str(MAX_DEPTH)
    items = [*dict.keys(value), *dict.values(value)] if kind is dict else list(value) if kind not in (list, tuple) \
        else value
    for start in range(0, len(items), BATCH):
        found = _batch_type(items[start:start + BATCH], depth)
        if found is not None:
            return found
    return None


def _batch_type(part, depth):
    """non_value_type of a batch of items, their own items checked at once where they are scalars."""
    kinds = set(map(type, part))
    for other in kinds - PLAIN_SET:
        return _name(other)
    nested = kinds & NESTED
    if not nested:
        return None
    if dict not in nested and set(map(type, chain.from_iterable(x for x in part if type(x) in nested))) <= SCALARS:
        return None
    for item in part:
        if type(item) in NESTED:
            found = non_value_type(item, depth + 1)
            if found is not None:
                return found
    return None


def _name(kind):
    return kind.__module__ + "." + kind.__qualname__


def is_simple(value, depth=0):
    """Whether `value` is built of None, bool, int, float (not NaN), str, bytes, list and tuple alone."""
    kind = type(value)
    if kind not in SIMPLE_TYPES or depth > MAX_DEPTH or (kind is float and value != value):
        return False
    if kind in (list, tuple):
        return all(is_simple(item, depth + 1) for item in value)
    return True


def wire(value):
    """The wire form of a plain value (ValueError for anything else marshal refuses)."""
    return marshal.dumps(value, WIRE_VERSION)


def wire_chunks(value, simple=False):
    """The wire form of `value` (`as_simple(value)` if `simple`) in pieces, BATCH items at a time for
    a long list or tuple (version 2 writes a list as its header, then its items' wire forms)."""
    kind = type(value)
    if kind not in (list, tuple) or len(value) <= BATCH:
        yield wire(as_simple(value) if simple else value)
        return
    yield wire(kind())[:1] + len(value).to_bytes(4, "little")
    for start in range(0, len(value), BATCH):
        part = value[start:start + BATCH]
        yield wire(as_simple(part) if simple else part)[5:]


def wire_digests(value):
    """(size, digest) of the wire form of `value` as it is and made simple, never encoded whole."""
    raw, simple, size = hashlib.sha256(), hashlib.sha256(), 0
    for chunk in wire_chunks(value):
        raw.update(chunk)
        size += len(chunk)
    for chunk in wire_chunks(value, simple=True):
        simple.update(chunk)
    return size, raw.hexdigest(), simple.hexdigest()


def with_plain_mappings(value, depth=0):
    """`value` with the standard mappings in it made dicts (the other types stay as they are)."""
    kind = type(value)
    name = kind.__module__ + "." + kind.__qualname__
    if depth > MAX_DEPTH:
        return value
    if name in STANDARD_MAPPINGS or kind is dict:
        return {with_plain_mappings(k, depth + 1): with_plain_mappings(v, depth + 1) for k, v in dict.items(value)}
    if kind in CONTAINERS:
        return kind(with_plain_mappings(item, depth + 1) for item in value)
    return value


def digest(data):
    return hashlib.sha256(data).hexdigest()


def as_simple(value, depth=0):
    """`value` with the numbers that equal an int (True, 2.0, 3+0j) made ints: equal to a simple
    value exactly when `value` is. Anything that cannot equal a simple value stays as it is."""
    kind = type(value)
    if kind is bool:
        return int(value)
    if kind is float and value.is_integer():
        return int(value)
    if kind is complex and value.imag == 0 and value.real.is_integer():
        return int(value.real)
    if kind in (list, tuple) and depth <= MAX_DEPTH:
        return kind(as_simple(item, depth + 1) for item in value)
    return value
