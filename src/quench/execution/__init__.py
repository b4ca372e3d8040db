"""Running untrusted programs: sandboxed worker pool, typed outcomes."""

from quench.execution.outcomes import ExecutionResult, Outcome
from quench.execution.pool import SandboxPool
from quench.execution.sandbox import Isolation, SandboxLimits, bwrap_works, choose_isolation

__all__ = [
    "ExecutionResult",
    "Isolation",
    "Outcome",
    "SandboxLimits",
    "SandboxPool",
    "bwrap_works",
    "choose_isolation",
]
