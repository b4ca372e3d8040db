"""Fixtures for the sandbox tests: a pool per isolation mode available here."""

from __future__ import annotations

from typing import Iterator

import pytest
from sandbox_helpers import MODES, open_pool, skip_reason

from quench.execution import SandboxPool


@pytest.fixture(scope="module", params=MODES)
def pool(request: pytest.FixtureRequest) -> Iterator[SandboxPool]:
    """A two-worker pool with short limits, once per isolation mode available here."""
    reason = skip_reason(request.param)
    if reason is not None:
        pytest.skip(reason)
    with open_pool(request.param) as sandbox:
        yield sandbox
