"""Fixtures of the training tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from helpers import torch_threads
from quench.datasets import Problem
sys.path.insert(0, str(Path(__file__).parent))  # training_helpers.py
from training_helpers import tiny_problems  # noqa: E402


@pytest.fixture
def problems() -> list[Problem]:
    return tiny_problems()


@pytest.fixture(autouse=True)
def one_thread():
    with torch_threads(1):
        yield
