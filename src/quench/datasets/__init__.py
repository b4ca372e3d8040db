"""Datasets: HumanEval, MBPP with its standard splits, ReCode partial-code prompts (the `--benchmark` choices)."""

from quench.datasets.loading import load_benchmark, load_humaneval, load_mbpp, parse_tasks
from quench.datasets.partial import partial_problem, split_body
from quench.datasets.problem import Problem, read_problems, write_problems

__all__ = [
    "Problem", "load_benchmark", "load_humaneval", "load_mbpp", "parse_tasks",
    "partial_problem", "split_body", "read_problems", "write_problems",
]
