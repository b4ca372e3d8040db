"""The module-wide served tiny model of the serve tests."""

from __future__ import annotations

from typing import Iterator

import pytest
import torch

from helpers import torch_threads
from live_server import Served, serving, tiny_backend


@pytest.fixture(autouse=True)
def one_thread():
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models run fastest on one thread
    with serving(tiny_backend()) as running:
        yield running
    torch.set_num_threads(before)
