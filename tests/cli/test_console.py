"""The CLI's progress: one bar per stage with its own total, and a pool that reports each checked program."""

import pytest
from quench.cli.console import ReportingRunner, StageBars
from quench.cli import console
from quench.execution import SandboxLimits, SandboxPool


@pytest.fixture(autouse=True)
def bars_drawn():
    """These tests read the bars: draw them, though pytest's stderr is not a terminal."""
    console.set_progress(True)
    yield
    console.set_progress(None)


def test_each_stage_has_its_own_bar_and_total():
    bars = StageBars()
    bars.begin("perturb", 3)
    bars.advance()
    assert (bars.bar.desc, bars.bar.n, bars.bar.total, bars.bar.unit) == ("perturb", 1, 3, "transformation")
    bars.begin("generate", 5)  # a new stage: a new bar from 0, not the old counter
    assert (bars.bar.desc, bars.bar.n, bars.bar.total, bars.bar.unit) == ("generate", 0, 5, "sample")
    bars.advance(2)
    bar = bars.bar
    bars.end()  # a finished stage shows its total: the rest was read back from disk
    assert bar.n == 5 and bars.bar is None


def test_an_interrupted_stage_keeps_its_count():
    bars = StageBars()
    bars.begin("execute", 4)
    bars.advance()
    bar = bars.bar
    bars.end(complete=False)
    assert bar.n == 1


def test_reporting_runner_counts_each_program_and_keeps_their_order():
    programs = ["import time; time.sleep(0.3)", "assert False", "print(1)"]
    seen: list[int] = []
    done: list[int] = []
    with SandboxPool(2, SandboxLimits(timeout_s=5)) as pool:
        runner = ReportingRunner(pool, seen.append, lambda: done.append(1))
        results = runner.run_many(programs)
        assert runner.isolation == pool.isolation  # everything else is the pool's own
    assert seen == [3] and len(done) == 3
    assert [r.passed for r in results] == [True, False, True]


def test_the_meaning_check_is_a_stage_of_its_own():
    bars = StageBars()
    bars.begin("perturb", 2)
    with SandboxPool(1, SandboxLimits(timeout_s=5)) as pool:
        bars.checking(pool).run_many(["print(1)", "print(2)"])
    assert (bars.bar.desc, bars.bar.n, bars.bar.total, bars.bar.unit) == ("check", 2, 2, "program")
    bars.end()


PROBE = """
import sys
from quench.cli.console import StageBars
bars = StageBars()
bars.begin("execute", 50)
for _ in range(50):
    bars.advance()
bars.end()
print(bars.seconds["execute"] >= 0)
"""


def test_no_bar_frames_when_stderr_is_a_file(tmp_path):
    import subprocess
    import sys

    for flags, frames in (((), False), (("--progress",), True)):
        setting = "None" if not flags else "True"
        script = f"from quench.cli import console; console.set_progress({setting})\n" + PROBE
        with open(tmp_path / "err.txt", "w") as err:
            done = subprocess.run([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=err, text=True,
                                  timeout=60)
        assert done.stdout.strip() == "True"
        written = (tmp_path / "err.txt").read_text()
        assert ("execute: 100%" in written) == frames, (flags, written[:200])
