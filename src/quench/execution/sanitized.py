"""What a sanitizer returns, and the code fences of a chat answer that every language's sanitizer reads."""

from __future__ import annotations

import re
from dataclasses import dataclass

FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)


@dataclass(frozen=True)
class Sanitized:
    completion: str  # continuation of the prompt (raw) or the cleaned code (chat)
    solution: str  # the whole program without tests; "" when `prompt + completion` is the program


def fenced_blocks(text: str) -> list[str]:
    return [body for _, body in FENCE.findall(text)]
