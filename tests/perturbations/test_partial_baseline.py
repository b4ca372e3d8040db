"""The partial-code baseline of a robustness run: the release's own file, quench perturb's, or the profile's split."""

from __future__ import annotations

import json
from pathlib import Path

from quench.datasets import load_humaneval, partial_problem
from quench.datasets.partial import recode_partial_problem
from quench.perturbations import perturb_problems, read_recode, write_set
from quench.robustness.pipeline import RobustnessConfig, partial_baselines


def rewrite_prompts(path: Path, suffix: str) -> None:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(row | {"prompt": row["prompt"] + suffix}) + "\n" for row in rows))


def test_the_file_beside_the_variants_or_the_one_named_is_the_baseline(tmp_path: Path) -> None:
    problems = load_humaneval()[:4]
    made = perturb_problems(problems, ["OperandSwap"], [0], validate_variants=False, profile="recode")
    write_set(made, tmp_path / "set", "humaneval")
    beside = partial_baselines(problems, RobustnessConfig(transforms=(), perturbed_dir=tmp_path / "set"))
    assert [b.prompt for b in beside.values()] == [recode_partial_problem(p).prompt for p in problems]
    rewrite_prompts(tmp_path / "set" / "humaneval_partial.jsonl", "# read from the file\n")
    beside = partial_baselines(problems, RobustnessConfig(transforms=(), perturbed_dir=tmp_path / "set"))
    assert all(b.prompt.endswith("# read from the file\n") and b.prompt_kind == "partial" for b in beside.values())
    named = tmp_path / "nominal.jsonl"
    named.write_text((tmp_path / "set" / "humaneval_partial.jsonl").read_text().replace("# read from the file", "# named"))
    chosen = partial_baselines(problems, RobustnessConfig(transforms=(), perturbed_dir=tmp_path / "set", nominal_partial=named))
    assert all(b.prompt.endswith("# named\n") for b in chosen.values())


def test_without_a_file_the_profile_splits() -> None:
    problems = load_humaneval()[10:14]
    assert [b.prompt for b in partial_baselines(problems, RobustnessConfig(transforms=())).values()] == [
        partial_problem(p).prompt for p in problems]
    recode = partial_baselines(problems, RobustnessConfig(transforms=(), profile="recode"))
    assert [b.prompt for b in recode.values()] == [recode_partial_problem(p).prompt for p in problems]


def test_recode_variants_read_back_byte_for_byte(tmp_path: Path) -> None:
    problems = load_humaneval()[:6]
    made = perturb_problems(problems, ["ForWhileTransformer"], [0], validate_variants=False, profile="recode")
    write_set(made, tmp_path, "humaneval")
    back = read_recode(tmp_path / "humaneval_ForWhileTransformer_s0.jsonl")
    assert [v.prompt for v in back] == [v.prompt for v in made.variants[("ForWhileTransformer", 0)]]
    assert any(v.prompt.endswith("   \n") for v in back)  # the whitespace-only last line ReCode's models saw
