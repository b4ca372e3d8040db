"""Datasets: HumanEval, MBPP and MBXP with MBPP's splits, partial-code prompts (the `--benchmark` choices)."""

from quench.datasets.languages import LANGUAGES, Language, language_of
from quench.datasets.loading import BENCHMARKS, load_benchmark, load_humaneval, load_mbpp, load_mbxp, parse_tasks
from quench.datasets.partial import partial_problem, split_body
from quench.datasets.problem import Problem, read_problems, write_problems

__all__ = [
    "BENCHMARKS", "LANGUAGES", "Language", "Problem", "language_of", "load_benchmark", "load_humaneval", "load_mbpp",
    "load_mbxp", "parse_tasks",
    "partial_problem", "split_body", "read_problems", "write_problems",
]
