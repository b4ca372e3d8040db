"""Feeding a literal answer to the function-complete rule's scanner, whole or in chunks."""

from __future__ import annotations

from quench.stopping.function_rule import FunctionRule, function_scanner


def kept(text: str, rule: FunctionRule, prompt: str = "", chunk: int = 0) -> str | None:
    """The text before the stop, or None if the rule never stops; fed in chunks (0 = all at once)."""
    scanner = function_scanner(rule, prompt)
    pieces = [text] if chunk == 0 else [text[i : i + chunk] for i in range(0, len(text), chunk)]
    for piece in pieces:
        if (at := scanner.feed(piece)) is not None:
            return text[:at]
    return None
