"""Fixtures for the sandbox tests: a pool per isolation mode available here."""

from __future__ import annotations

from typing import Iterator

import pytest
from sandbox_helpers import MODES, open_pool, skip_reason

from quench.datasets import LANGUAGES
from quench.execution import SandboxLimits, SandboxPool
from quench.execution.toolchains import prepare


@pytest.fixture(scope="module", params=MODES)
def pool(request: pytest.FixtureRequest) -> Iterator[SandboxPool]:
    """A two-worker pool with short limits, once per isolation mode available here."""
    reason = skip_reason(request.param)
    if reason is not None:
        pytest.skip(reason)
    with open_pool(request.param) as sandbox:
        yield sandbox


@pytest.fixture(scope="module")
def language_pool() -> Iterator[SandboxPool]:
    """A two-worker bubblewrap pool for MBXP's languages, their build caches prepared (builds take seconds
    on a busy machine, so 12 s per program)."""
    reason = skip_reason("bwrap")
    if reason is not None:
        pytest.skip(reason)
    for language in LANGUAGES:
        prepare(language)
    with SandboxPool(2, SandboxLimits(timeout_s=12.0, timeout_retries=0), isolation="bwrap") as sandbox:
        yield sandbox
