"""`quench robustness`: perturb, generate, execute, score, report — resumable at every step.

Units of work are deduplicated twice: identical prompts (an unchanged variant, a deterministic
transformation under several seeds) are generated once, keyed by a hash of the prompt; identical
programs are executed once, keyed by a hash of the program. Both go to append-only JSONL files in
the run directory, so a killed run started again does neither twice and ends with the same metrics.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

from quench.datasets import Problem, partial_problem, read_problems
from quench.datasets.problem import PLUS_BENCHMARK, problem_from_json
from quench.errors import QuenchError
from quench.runs.calibration import TimeLimitRule, problem_limits
from quench.runs.evaluate import ProblemKey, execute_pending
from quench.runs.records import ExecutionKey, ResultRecord, SampleLabels, SampleRecord
from quench.execution.program_build import program_for
from quench.execution.plus import PlusPool
from quench.runs.eta import StartReporting
from quench.runs.samples import GenerateConfig, generate_samples, read_records
from quench.engine.types import Backend, SamplingParams
from quench.perturbations.catalog import perturbation_class
from quench.perturbations.pipeline import perturb_problems
from quench.perturbations.profile import resolve_profile
from quench.perturbations.release import group_variants, read_recode
from quench.robustness.examples import Example
from quench.robustness.groups import PARTIAL, GroupKey
from quench.robustness.metrics import RobustnessMetrics, RobustnessRun, VariantOutcomes, robustness_metrics
from quench.robustness.regressions import regressions
from quench.stopping.loop_rule import LOOP_RULE, LoopRule

log = logging.getLogger(__name__)

VARIANTS_FILE = "variants.jsonl"
SAMPLES_FILE = "samples.jsonl"
RESULTS_FILE = "executions.jsonl"
ELAPSED_FILE = "elapsed.json"  # wall seconds spent on the run directory, summed over resumed runs


@dataclass(frozen=True)
class RobustnessConfig:
    transforms: tuple[str, ...]  # ReCode names, already resolved from --categories/--transforms
    seeds: int = 5  # s: variants per randomised transformation
    n: int = 1  # samples per prompt (1 = greedy, ReCode's default)
    ks: tuple[int, ...] = (1,)
    sampling: SamplingParams = SamplingParams()
    stop_sequences: tuple[str, ...] = ()
    prompt_format: str = "chat"
    perturbed_dir: Path | None = None  # ReCode's released sets instead of quench's own variants
    profile: str = "quench"  # "recode": ReCode's own transformations and partial split (docs/perturbations.md)
    nominal_partial: Path | None = None  # the partial-code baseline file (ReCode's nominal/*_partial.jsonl)
    stop_rule: str = "none"  # a text rule beyond stop sequences: "function", "loop" or both (STOP_RULES; docs/stopping.md)
    loop_rule: LoopRule = LOOP_RULE  # what "loop" counts as a loop
    examples_per_category: int = 3
    order_seed: int | None = 0  # generation order: tasks shuffled with this seed, each task's prompts together (None: as built)
    time_limits: TimeLimitRule | None = None  # each task's limit (runs/calibration.py); None: the pool's for every program


@dataclass(frozen=True)
class Unit:
    """One prompt to evaluate: a nominal baseline or a (transformation, seed) variant of a task."""

    problem: Problem
    group: GroupKey
    prompt_id: str  # hash of the prompt: identical prompts are generated once

    @property
    def task_id(self) -> str:
        return self.problem.task_id


@dataclass
class Progress:
    """Callbacks the CLI uses for one progress bar per stage (perturb, generate, execute)."""

    stage: Callable[[str, int | None], None] = lambda name, total: None  # noqa: E731  # a stage begins: its steps
    transform: Callable[[str], None] = lambda name: None  # noqa: E731  # a perturb step: a transformation applied
    planned: Callable[[int], None] = lambda count: None  # noqa: E731  # samples left to generate (not on disk)
    started: Callable[[str, int], None] = lambda key, index: None  # noqa: E731  # a sample took a slot (quench's engine)
    sample: Callable[[SampleRecord], None] = lambda record: None  # noqa: E731  # a generate step
    execution: Callable[[ResultRecord], None] = lambda record: None  # noqa: E731  # an execute step


@dataclass
class RobustnessOutcome:
    metrics: RobustnessMetrics
    run: RobustnessRun
    examples: list[Example]
    stats: dict[str, object] = field(default_factory=dict)
    metrics_plus: RobustnessMetrics | None = None  # MBPP+: the same metrics on base and extra inputs


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def variants_from_release(perturbed_dir: Path, problems: Sequence[Problem]) -> dict[tuple[str, int], list[Problem]]:
    """ReCode's released variants for the selected tasks, run on those tasks' tests (MBPP+'s extra inputs included)."""
    benchmark = {p.task_id: p.benchmark for p in problems}
    groups = group_variants(v.with_changes(benchmark=benchmark[v.task_id])
                            for v in read_recode(perturbed_dir) if v.task_id in benchmark)
    if not groups:
        raise QuenchError(f"{perturbed_dir}: no released variant of the selected tasks")
    return groups


def load_or_make_variants(
    problems: Sequence[Problem], config: RobustnessConfig, pool, out: Path,
    on_transform: Callable[[str], None] | None = None,
) -> dict[tuple[str, int], list[Problem]]:
    """Valid variants per (transformation, seed), made once and kept in the run directory."""
    path = out / VARIANTS_FILE
    if path.is_file():
        return read_variants(path)
    if config.perturbed_dir is not None:
        variants = variants_from_release(config.perturbed_dir, problems)
        summary: dict[str, object] = {"source": str(config.perturbed_dir)}
    else:
        made = perturb_problems(problems, config.transforms, config.seeds, validate_variants=True, pool=pool,
                                profile=config.profile, on_transform=on_transform)
        variants, summary = made.variants, made.summary()
    (out / "perturbations.json").write_text(json.dumps(summary, indent=2) + "\n")
    staging = path.with_suffix(".tmp")
    with staging.open("w", encoding="utf-8") as f:
        for group in variants.values():
            for variant in group:
                f.write(json.dumps(variant.to_json()) + "\n")
    staging.replace(path)  # atomic: a killed run remakes the file rather than reading half of it
    return variants


def read_variants(path: Path) -> dict[tuple[str, int], list[Problem]]:
    """The variants a run directory keeps, per (transformation, seed)."""
    rows = read_records(path, ("task_id", "prompt", "test", "entry_point"))
    log.info("read %d variants from %s", len(rows), path)
    return group_variants(problem_from_json(row) for row in rows)


def category_of(transformation: str) -> str:
    return perturbation_class(transformation).category


def variant_groups(variants: dict[tuple[str, int], list[Problem]]) -> dict[GroupKey, list[Problem]]:
    """The variants keyed by their group (the perturbation step keys them by (transformation, seed))."""
    return {GroupKey.variant(name, seed, category_of(name)): group for (name, seed), group in variants.items()}


def problems_by_variant(problems: Sequence[Problem], variants: dict[tuple[str, int], list[Problem]]) -> dict[ProblemKey, Problem]:
    """Each (task id, variant key) of a robustness run mapped to the problem its prompt came from."""
    table: dict[ProblemKey, Problem] = {}
    for problem in problems:
        table[(problem.task_id, GroupKey.nominal().label())] = problem
        table[(problem.task_id, GroupKey.partial().label())] = partial_problem(problem)
    for key, group in variant_groups(variants).items():
        for variant in group:
            table[(variant.task_id, key.label())] = variant
    return table


def partial_baselines(problems: Sequence[Problem], config: RobustnessConfig) -> dict[str, Problem]:
    """The nominal partial-code prompt of each task: from the baseline file when there is one (the
    release's own, or the one `quench perturb` wrote beside its variants), else the profile's split.
    A baseline from a file runs its task's tests (the file's rows do not name a benchmark)."""
    path = config.nominal_partial
    if path is None and config.perturbed_dir is not None:
        path = next(iter(sorted(Path(config.perturbed_dir).rglob("*_partial.jsonl"))), None)
    split = resolve_profile(config.profile).partial
    if path is None:
        return {p.task_id: split(p) for p in problems}
    released = {p.task_id: p for p in read_problems(Path(path))}
    log.info("partial-code baseline: %s", path)
    return {p.task_id: released[p.task_id].with_changes(prompt_kind=PARTIAL, benchmark=p.benchmark)
            if p.task_id in released else split(p) for p in problems}


def same_model_input(units: Sequence[Unit]) -> dict[str, int]:
    """Per transformation, variants whose prompt differs from the nominal one but whose model input
    (the formatted prompt) does not: a prompt format that cancels the perturbation."""
    nominal = {(unit.group, unit.task_id): unit for unit in units if unit.group.is_nominal}
    counts: dict[str, int] = {}
    for unit in units:
        if unit.group.is_nominal:
            continue
        name = unit.group.transformation
        base = nominal[(unit.group.baseline, unit.task_id)]
        collapsed = unit.problem.prompt != base.problem.prompt and unit.prompt_id == base.prompt_id
        counts[name] = counts.get(name, 0) + collapsed
    return counts


def build_units(problems: Sequence[Problem], variants: dict[tuple[str, int], list[Problem]], format_prompt: Callable[[str], str],
                partials: dict[str, Problem] | None = None) -> list[Unit]:
    units = []

    def add(problem: Problem, group: GroupKey) -> None:
        units.append(Unit(problem, group, digest(format_prompt(problem.prompt))))

    for problem in problems:
        add(problem, GroupKey.nominal())
        add(partials[problem.task_id] if partials else partial_problem(problem), GroupKey.partial())
    for key, group in sorted(variant_groups(variants).items(), key=lambda item: item[0].order):
        for variant in group:
            add(variant, key)
    return units


def unique_prompts(units: Sequence[Unit]) -> list[Problem]:
    """One problem per distinct prompt, renamed to the prompt's id: the request key of generation."""
    first: dict[str, Problem] = {}
    for unit in units:
        first.setdefault(unit.prompt_id, unit.problem.with_changes(task_id=unit.prompt_id))
    return list(first.values())


def generation_order(prompts: Sequence[Problem], seed: int | None, task_of: Mapping[str, str] | None = None) -> list[Problem]:
    """The prompts with their tasks in a seeded random order and each task's prompts together, sorted by text.

    Tasks in random order, so that any stretch of generation (the first tenth the ETA extrapolates from) is a
    fair sample of the run: tasks differ in prompt and answer length, and each stretch holds every
    transformation. A task's variants together and sorted, so that consecutive prompts share their longest
    beginnings and the engine's prefix store copies those keys/values instead of prefilling them again.
    `task_of`: prompt id (each prompt's `task_id` here) -> its task (`prompt_labels`); None: each prompt its own
    task. Sampled rows draw from (seed, prompt id, sample index) and greedy rows under `--batch-invariant` do not
    depend on their batch, so there the order changes no output; a resumed run orders the same prompts the same
    way and skips those on disk."""
    if seed is None:
        return list(prompts)
    groups: dict[str, list[Problem]] = {}
    for prompt in prompts:
        task = task_of.get(prompt.task_id, prompt.task_id) if task_of else prompt.task_id
        groups.setdefault(task, []).append(prompt)
    tasks = sorted(groups)
    random.Random(seed).shuffle(tasks)
    return [prompt for task in tasks for prompt in sorted(groups[task], key=lambda p: (p.prompt, p.task_id))]


def prompt_labels(units: Sequence[Unit]) -> dict[str, SampleLabels]:
    """The fields a prompt's samples carry: the real task id, the variant of the first unit with that
    prompt (nominal before variants), and the prompt id, so `quench evaluate` can score them."""
    labels: dict[str, SampleLabels] = {}
    for unit in units:
        labels.setdefault(unit.prompt_id, SampleLabels(unit.task_id, unit.group.label(), unit.prompt_id))
    return labels


def execution_jobs(units: Sequence[Unit], samples: Mapping[tuple[str, int], SampleRecord],
                   n: int) -> tuple[list[tuple[ExecutionKey, str]], dict[tuple[int, int], str]]:
    """Distinct programs to run, and which program each (unit, sample index) is."""
    jobs: dict[str, str] = {}
    program_of: dict[tuple[int, int], str] = {}
    for u, unit in enumerate(units):
        for index in range(n):
            sample = samples[(unit.prompt_id, index)]
            program = program_for(unit.problem, sample.completion, sample.solution)
            program_id = digest(program)
            jobs.setdefault(program_id, program)
            program_of[(u, index)] = program_id
    return [(ExecutionKey(program_id=pid), program) for pid, program in jobs.items()], program_of


def job_timeouts(problems: Sequence[Problem], units: Sequence[Unit], jobs: Sequence[tuple[ExecutionKey, str]],
                 program_of: dict[tuple[int, int], str], config: RobustnessConfig, pool, out: Path) -> list[float | None] | None:
    """Each job's limit: its task's, calibrated on the nominal problem's reference and reused for every
    variant. A perturbation changes the prompt, not the work the tests ask of a solution, so timing each
    variant's reference would cost a run per (transformation, seed) to learn the same time, and its noise
    could give one completion two limits under two variants: a drop that came from the clock."""
    if config.time_limits is None:
        return None
    limits = problem_limits(problems, pool, config.time_limits, out)
    task_of = {program_id: units[u].task_id for (u, _), program_id in program_of.items()}
    return [limits.get(task_of[key.program_id]) for key, _ in jobs]


def collect_run(units: Sequence[Unit], program_of: dict[tuple[int, int], str], passed: dict[str, bool], n: int) -> RobustnessRun:
    per_group: dict[GroupKey, dict[str, tuple[bool, ...]]] = {}
    for u, unit in enumerate(units):
        per_group.setdefault(unit.group, {})[unit.task_id] = tuple(passed[program_of[(u, i)]] for i in range(n))
    nominal_prompt = {(unit.group, unit.task_id): unit.prompt_id for unit in units if unit.group.is_nominal}
    variants = []
    for group, outcomes in sorted(per_group.items(), key=lambda item: item[0].order):
        if group.is_nominal:
            continue
        unchanged = frozenset(
            unit.task_id for unit in units
            if unit.group == group and unit.prompt_id == nominal_prompt[(group.baseline, unit.task_id)]
        )
        variants.append(VariantOutcomes(group.transformation, category_of(group.transformation), group.seed,
                                        outcomes, unchanged))
    return RobustnessRun(per_group.get(GroupKey.nominal(), {}), tuple(variants), per_group.get(GroupKey.partial(), {}))


def make_examples(
    run: RobustnessRun, units: Sequence[Unit], samples: Mapping[tuple[str, int], SampleRecord],
    details: dict[tuple[GroupKey, str, int], str], per_category: int,
) -> list[Example]:
    by_group = {(unit.group, unit.task_id): unit for unit in units}
    examples = []
    for case in regressions(run, per_category=per_category):
        group = GroupKey.variant(case.transformation, case.seed, case.category)
        nominal, variant = by_group[(group.baseline, case.task_id)], by_group[(group, case.task_id)]
        examples.append(Example(
            task_id=case.task_id, transformation=case.transformation, category=case.category, seed=case.seed,
            nominal_prompt=nominal.problem.prompt, perturbed_prompt=variant.problem.prompt,
            nominal_completion=samples[(nominal.prompt_id, case.sample)].raw or "",
            perturbed_completion=samples[(variant.prompt_id, case.sample)].raw or "",
            nominal_detail=details[(group.baseline, case.task_id, case.sample)],
            perturbed_detail=details[(group, case.task_id, case.sample)],
            sample=case.sample,
        ))
    return examples


def add_elapsed(out: Path, seconds: float) -> float:
    """Add this run's wall seconds to the run directory's total and return the total (rounded to 0.1 s)."""
    path = out / ELAPSED_FILE
    try:
        before = float(json.loads(path.read_text())["seconds"])
    except (OSError, ValueError, KeyError, TypeError):
        before = 0.0
    total = round(before + seconds, 1)
    path.write_text(json.dumps({"seconds": total}) + "\n")
    return total


def run_robustness(
    problems: Sequence[Problem],
    config: RobustnessConfig,
    backend: Backend,
    encode: Callable[[str], tuple[int, ...]],
    format_prompt: Callable[[str], str],
    pool,
    out: Path,
    progress: Progress | None = None,
) -> RobustnessOutcome:
    """The whole job; every step resumes from what `out` already holds."""
    progress = progress or Progress()
    started = time.perf_counter()
    progress.stage("perturb", len(config.transforms))  # the meaning check that follows: counted by the pool
    variants = load_or_make_variants(problems, config, pool, out, progress.transform)
    units = build_units(problems, variants, format_prompt, partial_baselines(problems, config))
    prompts = unique_prompts(units)
    progress.stage("generate", len(prompts) * config.n)
    # Requests are keyed by prompt id and each prompt's problem keeps its entry point, so the rule
    # hook generate_samples builds from `prompts` finds every request's rules.
    generate_config = GenerateConfig(config.n, config.sampling, config.stop_sequences, config.prompt_format,
                                     config.stop_rule, config.loop_rule)
    reporting = StartReporting(backend, progress.planned, progress.started)
    labels = prompt_labels(units)
    order = generation_order(prompts, config.order_seed, {key: label.task_id for key, label in labels.items()})
    records = generate_samples(order, reporting, encode, generate_config, out / SAMPLES_FILE, progress.sample,
                               labels=labels)
    samples = {r.generation_key: r for r in records}  # (prompt id, index); runs from before labels: (task id, index)
    jobs, program_of = execution_jobs(units, samples, config.n)
    progress.stage("execute", len(jobs))
    timeouts = job_timeouts(problems, units, jobs, program_of, config, pool, out)
    plus = any(p.benchmark == PLUS_BENCHMARK for p in problems)  # two verdicts per program (execution/plus.py)
    results = execute_pending(jobs, PlusPool(pool) if plus else pool, out / RESULTS_FILE, progress.execution, timeouts)
    passed = {r.program_id: r.passed for r in results}
    detail = {r.program_id: f"{r.outcome.value}: {r.detail}".strip(": ") for r in results}
    run = collect_run(units, program_of, passed, config.n)
    metrics = robustness_metrics(run, config.ks)
    details = {(units[u].group, units[u].task_id, i): detail[pid] for (u, i), pid in program_of.items()}
    examples = make_examples(run, units, samples, details, config.examples_per_category)
    stats = {
        "profile": config.profile, "same_model_input": same_model_input(units),
        "units": len(units), "distinct_prompts": len(prompts), "samples": len(prompts) * config.n,
        "programs": len(units) * config.n, "distinct_programs": len(jobs),
        "generated_tokens": sum(r.num_tokens or 0 for r in records),
        "seconds": add_elapsed(out, time.perf_counter() - started),
    }
    metrics_plus = robustness_metrics(collect_run(units, program_of, {r.program_id: bool(r.passed_plus)
                                                                      for r in results}, config.n), config.ks) if plus else None
    return RobustnessOutcome(metrics, run, examples, stats, metrics_plus)
