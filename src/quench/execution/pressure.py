"""How long some task on this machine waited for a CPU: the kernel's pressure stall information (PSI).

`/proc/pressure/cpu`'s first line is `some avg10=… avg60=… avg300=… total=<microseconds>`: the time during
which at least one runnable task was not running. Over a program's run, a share of it near zero means no
process on the machine, the program's own threads included, waited for a CPU: nothing slowed the program
but its own work.
"""

from __future__ import annotations

PRESSURE_FILE = "/proc/pressure/cpu"


def cpu_stall_us(path: str = PRESSURE_FILE) -> int | None:
    """Microseconds some task has waited for a CPU since boot; None where the kernel keeps no such count."""
    try:
        with open(path, encoding="ascii") as pressure:
            first = pressure.readline()
        return int(first.split("total=", 1)[1])
    except (OSError, ValueError, IndexError):
        return None


def stall_share(before: int | None, after: int | None, seconds: float) -> float | None:
    """The share of `seconds` during which some task waited for a CPU, between two `cpu_stall_us` readings."""
    if before is None or after is None or seconds <= 0:
        return None
    return (after - before) / 1e6 / seconds
