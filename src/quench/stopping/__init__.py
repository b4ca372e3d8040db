"""Stopping in time: stop sequences, the function-complete and loop rules, and GenGuard (CodeFast)."""

from quench.stopping.criteria import (
    CHAT_STOPS,
    COMPLETION_STOPS,
    RowRules,
    RuleHook,
    SequenceMatcher,
    TextStop,
    TextStops,
    default_stop_sequences,
    rules_for,
)
from quench.stopping.function_rule import FunctionComplete, FunctionRule
from quench.stopping.loop_rule import LoopRule, LoopScanner
from quench.stopping.policy import GuardPolicy, RowPolicy, TokenShape

# GenGuard needs torch: imported on first use, so that stop rules (and `quench --help`) stay light.
_LAZY = {
    "PAD": "quench.stopping.guard", "GenGuard": "quench.stopping.guard", "GuardInfo": "quench.stopping.guard",
    "GuardState": "quench.stopping.guard", "token_shapes": "quench.stopping.guard",
    "load_guard": "quench.stopping.loading", "read_guard": "quench.stopping.loading",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CHAT_STOPS",
    "COMPLETION_STOPS",
    "PAD",
    "FunctionComplete",
    "FunctionRule",
    "GenGuard",
    "GuardInfo",
    "GuardPolicy",
    "GuardState",
    "LoopRule",
    "LoopScanner",
    "RowPolicy",
    "RowRules",
    "RuleHook",
    "SequenceMatcher",
    "TextStop",
    "TextStops",
    "TokenShape",
    "default_stop_sequences",
    "load_guard",
    "read_guard",
    "rules_for",
]
