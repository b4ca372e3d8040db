"""`QuenchBackend` and the runner builders under the names the serving modules import; `backend.py` and
`runners/make.py` hold them."""

from quench.engine.backend import (
    QuenchBackend,
    StartReportingQueue,
    check_prompt_lengths,
    make_draft_runner,
    position_limit,
)
from quench.engine.config import EngineConfig
from quench.engine.runners.make import make_runner

__all__ = ["EngineConfig", "QuenchBackend", "StartReportingQueue", "check_prompt_lengths", "make_draft_runner",
           "make_runner", "position_limit"]
