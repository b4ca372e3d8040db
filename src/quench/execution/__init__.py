"""Running untrusted programs: sandboxed worker pool, typed outcomes, pass@k."""

from quench.execution.outcomes import ExecutionResult, Outcome
from quench.execution.passk import mean_pass_at_k, pass_at_k
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
    "mean_pass_at_k",
    "pass_at_k",
]
