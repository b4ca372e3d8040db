"""Fixtures of the training tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from quench.benchmarks import Problem
sys.path.insert(0, str(Path(__file__).parent))  # training_helpers.py
from training_helpers import tiny_problems  # noqa: E402


@pytest.fixture
def problems() -> list[Problem]:
    return tiny_problems()


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny matrices: one thread is several times faster than two on a shared 2-core machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
