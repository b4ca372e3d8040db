"""The program that runs one sample against its problem's tests: the prompt (or the sample's whole
solution in its place) with the completion, then the problem's tests or, for MBPP+, its inputs."""

from __future__ import annotations

from quench.datasets.problem import PLUS_BENCHMARK, Problem
from quench.execution.plus import plus_program


def program_for(problem: Problem, completion: str, solution: str = "") -> str:
    """The program that runs the sample against the problem's tests."""
    if solution:  # the solution replaces the prompt
        problem, completion = problem.with_changes(prompt=solution), ""
    if problem.benchmark == PLUS_BENCHMARK:  # MBPP+: its inputs and expected outputs, not `test`
        return plus_program(problem, completion)
    return problem.program(completion)
