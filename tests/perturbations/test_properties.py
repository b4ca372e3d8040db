"""Properties over real problems: every variant parses, edits stay where they belong, and every
variant that passes validation really passes its tests in the sandbox."""

from __future__ import annotations

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from quench.datasets import Problem, load_humaneval, load_mbpp
from quench.perturbations import (
    CODE_FORMAT, CODE_SYNTAX, DOCSTRING, apply_seeded, create, names, perturb_problems, perturbation_class,
)
from quench.perturbations.source import cached_partial, parse
from quench.perturbations.validate import check_docstring

PROBLEMS = load_humaneval() + load_mbpp("all")
NON_MODEL = names(include_model_based=False)


def parses(problem: Problem) -> bool:
    return parse(problem.prompt + problem.canonical_solution) is not None


@settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(index=st.integers(0, len(PROBLEMS) - 1), name=st.sampled_from(NON_MODEL), seed=st.integers(0, 9))
def test_every_variant_parses_and_edits_stay_in_place(index: int, name: str, seed: int) -> None:
    original = PROBLEMS[index]
    assume(parses(original))
    variant = apply_seeded(create(name), original, seed)
    assert parses(variant)
    assert (variant.task_id, variant.test) == (original.task_id, original.test)
    category = perturbation_class(name).category
    if category == DOCSTRING and variant.prompt != original.prompt:
        assert check_docstring(original, variant).valid
    if category in (CODE_SYNTAX, CODE_FORMAT):
        nominal = cached_partial(original)
        assert variant.prompt_kind == "partial"
        if name not in ("tab_indent", "doc2comments", "new_line_afterdoc", "VarRenamerNaive", "VarRenamerRN"):
            # everything up to the end of the docstring is untouched
            head = nominal.prompt.split('"""')[0] if '"""' in nominal.prompt else ""
            assert variant.prompt.startswith(head)


def test_valid_variants_pass_in_the_sandbox() -> None:
    """On a sample of real problems: what validation keeps, the sandbox passes (re-run independently)."""
    from quench.execution import SandboxPool

    sample = PROBLEMS[::40]  # 29 problems across HumanEval and MBPP
    with SandboxPool() as pool:
        result = perturb_problems(sample, NON_MODEL, seeds=2, pool=pool)
        kept = [v for variants in result.variants.values() for v in variants if v.meta("changed") == "true"]
        outcomes = pool.run_many([v.reference_program() for v in kept])
    assert len(kept) > 500
    failures = [(v.task_id, v.meta("perturbation")) for v, r in zip(kept, outcomes) if not r.passed]
    assert failures == []
