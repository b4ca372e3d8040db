"""Ctrl-C inside `interrupts_held` waits for the body's end, then arrives as KeyboardInterrupt; the handler
before it comes back either way."""

import os
import signal
import time

import pytest

from quench.cli.interrupts import interrupts_held


def test_ctrl_c_in_the_body_is_raised_after_it():
    reached = []
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        with interrupts_held():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # a held interrupt raises nothing here
            reached.append(True)
    assert reached == [True]
    assert signal.getsignal(signal.SIGINT) is before


def test_a_quiet_body_raises_nothing():
    before = signal.getsignal(signal.SIGINT)
    with interrupts_held():
        pass
    assert signal.getsignal(signal.SIGINT) is before
