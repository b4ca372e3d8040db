"""EvalPlus's check of one MBPP+ output (evalplus 0.3.1, `evalplus/eval/__init__.py: unsafe_execute`).

Glossary:
- out: what the program returned for an input (a plain value, plus_values.py); exp: what the
  reference returned; args: the input.
- rule: how a task's outputs are compared, chosen by the task's entry point as EvalPlus does
  (`RULES`); "exact" for every other task.
- atol: the task's absolute tolerance. It is sticky within a stage, as in EvalPlus: once an
  expected output is a float or a list/tuple of floats, a task without one uses 1e-6 for that
  input and every later input of the stage.

The check, in EvalPlus's order: `out == exp`; then the rule may change that answer; then, if the
answer is no and atol is not 0, `out` must have `exp`'s type (and length) and be
`np.allclose(out, exp, rtol=1e-07, atol=atol)`. Outputs are plain values, so `==` runs no code of
the program's. Standard library only (numpy where importable, for allclose's exact semantics): this
file runs in the sandbox as part of the MBPP+ harness (plus.py).
"""

import math

FLOAT_ATOL = 1e-6  # EvalPlus's atol for a float output of a task that gives none
RTOL = 1e-7  # np.testing.assert_allclose's default, which EvalPlus passes to np.allclose
RULES = {
    "are_equivalent": "any",  # Mbpp/164: every output passes (the task is ill-posed)
    "sum_div": "zero_ok",  # Mbpp/295: 0 passes too
    "surface_Area": "surface_area",  # Mbpp/581: or the area with the height read as the pyramid's
    "digit_distance_nums": "digit_distance",  # Mbpp/558: or the distance of the zero-padded numbers
    # outputs compared as sets (Mbpp/2, 7, 111, 140, 232, 249, 579, 769)
    **{name: "set" for name in ("similar_elements", "find_char_long", "common_in_nested_lists", "extract_singly",
                                "larg_nnum", "intersection_array", "find_dissimilar", "Diff")},
    # the reference returns a match or None; expected is whether it was not None (Mbpp/737, 787, 794)
    **{name: "not_none" for name in ("check_str", "text_match_three", "text_starta_endb")},
}


def rule_of(entry_point):
    return RULES.get(entry_point, "exact")


def is_floats(value):
    if isinstance(value, float):
        return True
    if isinstance(value, (list, tuple)) and value:
        return all(isinstance(item, float) for item in value)
    return False


def stage_atol(atol, exp):
    """The atol in force for this input and the stage's later ones."""
    return FLOAT_ATOL if atol == 0 and is_floats(exp) else atol


def surface_area(base_edge, height):
    """Mbpp/581's other reading: `height` is the pyramid's, so the slant height is derived from it."""
    slant = math.sqrt((base_edge / 2) ** 2 + height ** 2)
    return round(base_edge ** 2 + 2 * base_edge * slant)


def digit_distance(first, second):
    """Mbpp/558's other reading: the sum of per-digit differences after padding both with zeros."""
    a, b = str(first), str(second)
    width = max(len(a), len(b))
    return sum(abs(int(x) - int(y)) for x, y in zip(a.zfill(width), b.zfill(width)))


def rule_answer(rule, exact, out, exp, args, atol):
    """EvalPlus's special oracles: the answer after the rule (may raise: the input fails)."""
    if rule == "any":
        return True
    if rule == "zero_ok":
        return exact or out == 0
    if rule == "surface_area":
        return exact or abs(out - surface_area(*args)) <= atol
    if rule == "digit_distance":
        return exact or out == digit_distance(*args)
    if rule == "set":
        return set(out) == set(exp)
    if rule == "not_none":
        return out == exp if isinstance(out, bool) else exp == (out is not None)
    return exact


def allclose(out, exp, atol):
    """np.allclose(out, exp, rtol=1e-07, atol=atol); elementwise on nested sequences without numpy."""
    try:
        import numpy
    except ImportError:
        return _close(out, exp, atol)
    return bool(numpy.allclose(out, exp, rtol=RTOL, atol=atol))


def _close(out, exp, atol):
    if isinstance(exp, (list, tuple)):
        return (isinstance(out, (list, tuple)) and len(out) == len(exp)
                and all(_close(o, e, atol) for o, e in zip(out, exp)))
    if type(out) not in (bool, int, float) or type(exp) not in (bool, int, float):
        raise TypeError("not a number")
    if math.isinf(exp) or math.isinf(out):
        return out == exp
    return abs(out - exp) <= atol + RTOL * abs(exp)


def check(out, exp, args, atol, rule="exact"):
    """(whether `out` passes, the stage's atol from now on); EvalPlus's order, including where it
    fails early: an error anywhere fails the input."""
    try:
        exact = out == exp
        exact = rule_answer(rule, exact, out, exp, args, atol)
    except Exception:
        return False, atol
    atol = stage_atol(atol, exp)
    if exact or atol == 0:
        return bool(exact), atol
    try:
        if type(out) is not type(exp) or (isinstance(exp, (list, tuple)) and len(out) != len(exp)):
            return False, atol
        return allclose(out, exp, atol), atol
    except Exception:
        return False, atol
