"""Ctrl-C held back while a library imports: torch and transformers run Python from C++ as they load, and a
KeyboardInterrupt raised there aborts the process ("terminate called after throwing an instance of
'pybind11::error_already_set'") instead of reaching `main`'s one line. Held, it is delivered the moment the
import is over."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def interrupts_held() -> Iterator[None]:
    """Run the body with SIGINT recorded, not raised; raise KeyboardInterrupt after it if one came (main thread only:
    elsewhere Python delivers no signal)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if held:
        raise KeyboardInterrupt


def import_model_libraries() -> None:
    """Import what loading a model needs (torch, transformers' auto classes) with Ctrl-C held."""
    with interrupts_held():
        import torch  # noqa: F401
        from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401
