"""The peer workers' side of their protocol (`peer_client.py` is the other): JSON lines on stdin and on the original
stdout, {"ready": true} once the model is loaded, one answer per "generate" command, "quit" to end. Standard library
only: every worker imports it from its own environment."""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Callable, TextIO


def protocol_stream() -> TextIO:
    """The original stdout, kept for answers; file descriptor 1 then points at stderr so that whatever the peer
    prints (logs, progress) cannot break the JSON lines."""
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return answers


def serve(model: Any, generate: Callable[[Any, dict], dict], commands: TextIO, answers: TextIO) -> None:
    """Answer each "generate" command with `generate(model, command)` until "quit" or the end of `commands`."""
    for line in commands:
        if not line.strip():
            continue
        command = json.loads(line)
        if command["op"] == "quit":
            return
        if command["op"] != "generate":
            answers.write(json.dumps({"error": f"unknown op {command['op']!r}"}) + "\n")
            continue
        answers.write(json.dumps(generate(model, command)) + "\n")
