"""Stopping in time: stop sequences, the function-complete rule, and GenGuard (CodeFast)."""

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
from quench.stopping.guard import PAD, GenGuard, GuardInfo, GuardState, token_shapes
from quench.stopping.loading import load_guard, read_guard
from quench.stopping.policy import GuardPolicy, RowPolicy, TokenShape

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
