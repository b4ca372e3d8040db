"""Peak memory of a command and all its descendants: the largest sum of their resident sets, sampled.

Runs the command, reads /proc every --interval seconds for the resident set of every process
descended from it (sandboxed workers and their children included), and prints the wall time,
the peak of the sum and the peak of any single process. Usage:
python benchmarks/tree_memory.py [--interval S] -- COMMAND ...
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE")


def children() -> dict[int, list[int]]:
    """Parent pid -> child pids, from /proc."""
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            tree.setdefault(int(fields[1]), []).append(int(entry.name))
    return tree


def resident(pid: int) -> int:
    try:
        return int((Path("/proc") / str(pid) / "statm").read_text().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def tree_resident(root: int) -> tuple[int, int]:
    """(sum, largest) resident bytes of `root` and its descendants now."""
    tree, stack, sizes = children(), [root], []
    while stack:
        pid = stack.pop()
        sizes.append(resident(pid))
        stack += tree.get(pid, [])
    return sum(sizes), max(sizes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=0.25)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    start = time.perf_counter()
    process = subprocess.Popen(command)
    peak_sum = peak_one = 0
    while process.poll() is None:
        total, largest = tree_resident(process.pid)
        peak_sum, peak_one = max(peak_sum, total), max(peak_one, largest)
        time.sleep(args.interval)
    gib = 1024 ** 3
    print(f"exit {process.returncode}; wall {time.perf_counter() - start:.1f} s; peak resident, all processes "
          f"{peak_sum / gib:.2f} GiB, largest one {peak_one / gib:.2f} GiB", file=sys.stderr)
    sys.exit(process.returncode)


if __name__ == "__main__":
    main()
