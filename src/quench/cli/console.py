"""What the CLI shows while it works: status lines on stderr and one progress bar per stage.

The library reports through callbacks (`notify`, `Progress`, a pool's results); only this module
draws them, so that a bar and a message never overwrite each other.
"""

from __future__ import annotations

import sys
import time
from typing import Callable, Sequence

from quench.stats import figures


_progress: list[bool | None] = [None]  # --progress / --no-progress; None: bars only on a terminal


def set_progress(choice: bool | None) -> None:
    """Draw progress bars (True), never (False), or only where stderr is a terminal (None, the default):
    redirected to a file, stderr gets status lines, not a bar's frames."""
    _progress[0] = choice


def progress_shown() -> bool:
    return _progress[0] if _progress[0] is not None else sys.stderr.isatty()


def bar(**options):
    """A tqdm progress bar on stderr, drawn only where `progress_shown()` (tqdm is imported here: help stays light)."""
    from tqdm import tqdm

    options.setdefault("dynamic_ncols", True)
    return tqdm(disable=options.pop("disable", False) or not progress_shown(), **options)


def percent(share: float | None) -> str:
    """A rate as a person reads it everywhere (console, report, compare): percent, one decimal.
    Machine-readable files keep fractions, rounded (`quench.stats.figures`)."""
    return figures.percent(share)


def token_rate(tokens: float, seconds: float) -> str:
    """The one spelling of a generation rate on every progress bar: `31 tok/s`."""
    return f"{tokens / max(seconds, 1e-9):.0f} tok/s"


def say(message: str) -> None:
    """A status line on stderr, printed above any open progress bar."""
    from tqdm import tqdm

    tqdm.write(message, file=sys.stderr)


def load_model(name: str, dtype: str = "auto", device: str = "cpu", prompt_format: str | None = None,
               weights: str = "dequantized"):
    """quench.models.load_model, saying what it loads (and the one-time GGUF conversion); the libraries it needs are
    imported first with Ctrl-C held (`interrupts.py`)."""
    from quench.cli.interrupts import import_model_libraries

    import_model_libraries()
    from quench.models import load_model as load

    return load(name, dtype, device, prompt_format, notify=say, weights=weights)


STAGE_UNITS = {"perturb": "transformation", "check": "program", "generate": "sample", "execute": "program"}
# A bar whose time left comes from the caller (its postfix) rather than tqdm's recent rate.
OWN_ETA_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]"


class StageBars:
    """One bar per stage, each with its own total; the next stage closes the one before."""

    def __init__(self, units: dict[str, str] | None = None, own_eta: Sequence[str] = ()) -> None:
        self.units = {**STAGE_UNITS, **(units or {})}
        self.own_eta = set(own_eta)  # stages whose time left the caller writes with `note`
        self.bar = None  # the open tqdm bar (tqdm is imported when a bar opens: help stays light)
        self.seconds: dict[str, float] = {}  # wall seconds of each closed stage
        self.totals: dict[str, int | None] = {}
        self.stage = ""  # the open bar's stage
        self.began = 0.0

    def begin(self, name: str, total: int | None = None) -> None:
        self.end()
        bar_format = OWN_ETA_FORMAT if name in self.own_eta else None
        self.bar = bar(total=total, desc=name, unit=self.units.get(name, "it"), bar_format=bar_format)
        self.stage = name
        self.totals[name], self.began = total, time.perf_counter()

    def advance(self, count: int = 1, **postfix: str) -> None:
        if self.bar is not None:
            self.bar.update(count)
            if postfix:
                self.bar.set_postfix(postfix, refresh=False)

    def note(self, text: str) -> None:
        """The open bar's postfix: on an own-ETA stage, the time left and whatever goes with it."""
        if self.bar is not None:
            self.bar.set_postfix_str(text, refresh=True)

    def checking(self, pool) -> "ReportingRunner":
        """`pool`, with the perturbations' meaning check drawn as its own stage, "check"."""
        return ReportingRunner(pool, lambda total: self.begin("check", total), self.advance)

    def end(self, complete: bool = True) -> None:
        """Close the current bar; a completed stage shows its total (what a resumed run read from disk counts)."""
        if self.bar is None:
            return
        if complete and self.bar.total is not None and self.bar.n < self.bar.total:
            self.bar.n = self.bar.total
            self.bar.refresh()
        self.seconds[self.stage] = time.perf_counter() - self.began
        self.bar.close()
        self.bar = None


class ReportingRunner:
    """A sandbox pool whose `run_many` (the perturbations' meaning check) reports each finished program.

    Everything else is the pool's own; results come back in the order the programs were given.
    """

    def __init__(self, pool, begin: Callable[[int], None], done: Callable[[], None]) -> None:
        self.pool = pool
        self.begin = begin
        self.done = done

    def run_many(self, programs: Sequence[str]) -> list:
        self.begin(len(programs))
        results: list = [None] * len(programs)
        for index, result in self.pool.imap(enumerate(programs)):
            results[index] = result
            self.done()
        return results

    def __getattr__(self, name: str):
        return getattr(self.pool, name)
