"""`--stop-rule function` in the robustness pipeline: requests are keyed by prompt id, rules follow them."""

from __future__ import annotations

import pytest

from quench.datasets import load_humaneval, partial_problem
from quench.runs.samples import stop_hook_for
from quench.robustness import pipeline
from quench.robustness.pipeline import RobustnessConfig, build_units, run_robustness, unique_prompts


class Captured(Exception):
    pass


def test_the_generate_config_carries_the_rule_and_every_prompt_id_has_its_problems_rules(monkeypatch, tmp_path):
    problems = load_humaneval()[:2]
    variants = {("FuncRenameCamelCase", 0): [problems[0].with_changes(prompt=problems[0].prompt.replace(
        problems[0].entry_point, "renamedFunction"), entry_point="renamedFunction")]}
    monkeypatch.setattr(pipeline, "load_or_make_variants", lambda *args: variants)
    seen = {}

    def fake_generate(prompts, backend, encode, config, path, on_sample, labels):
        seen.update(prompts=prompts, config=config)
        raise Captured

    monkeypatch.setattr(pipeline, "generate_samples", fake_generate)
    config = RobustnessConfig(("FuncRenameCamelCase",), stop_rule="function")
    with pytest.raises(Captured):
        run_robustness(problems, config, None, lambda t: (1,), lambda t: t, None, tmp_path)
    assert seen["config"].stop_rule == "function"

    hook = stop_hook_for(seen["prompts"], seen["config"])
    units = build_units(problems, variants, lambda t: t)
    assert set(hook.rules) == {u.prompt_id for u in units} == {p.task_id for p in unique_prompts(units)}
    for unit in units:  # each prompt id's rule targets the entry point of the unit's own problem
        assert hook.rules[unit.prompt_id].function.entry_point == unit.problem.entry_point
        assert hook.rules[unit.prompt_id].prompt == unit.problem.prompt
    assert partial_problem(problems[1]).prompt in {r.prompt for r in hook.rules.values()}
