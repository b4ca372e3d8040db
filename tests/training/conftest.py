"""Fixtures of the training tests."""

from __future__ import annotations

import pytest

from quench.benchmarks import Problem
from training_helpers import tiny_problems


@pytest.fixture
def problems() -> list[Problem]:
    return tiny_problems()
