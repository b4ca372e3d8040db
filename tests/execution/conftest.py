"""Fixtures for the sandbox tests: a pool per isolation mode available here."""

from __future__ import annotations

from typing import Iterator

import pytest
from sandbox_helpers import FAST, MODES, available

from quench.execution import SandboxPool


@pytest.fixture(scope="module", params=MODES)
def pool(request: pytest.FixtureRequest) -> Iterator[SandboxPool]:
    """A two-worker pool with short limits, once per isolation mode available here."""
    if not available(request.param):
        pytest.skip("bubblewrap cannot create namespaces here")
    with SandboxPool(2, FAST, isolation=request.param) as sandbox:
        yield sandbox
