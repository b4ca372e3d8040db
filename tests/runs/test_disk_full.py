"""A full disk under a run's logs: one `error:` line naming the file, exit 2, only whole records left,
and the same command continues once there is space. On a real small file system (a tmpfs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from quench.errors import QuenchError
from quench.runs.samples import JsonlAppender, resume_samples

PAGE = 4096


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs, filled but for two pages."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode()[-200:]}")
    try:
        fill(disk, free=2 * PAGE)
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk: Path, free: int) -> None:
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while os.write(fd, b"\0" * PAGE):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    os.truncate(filler, max(0, filler.stat().st_size - free))


def grow(disk: Path) -> None:
    subprocess.run(["mount", "-o", "remount,size=1m", str(disk)], check=True)


def whole_records(path: Path) -> list[dict]:
    data = path.read_bytes()
    assert data == b"" or data.endswith(b"\n"), data[-80:]
    return [json.loads(line) for line in data.decode().splitlines()]


def sample(index: int) -> dict:
    return {"task_id": "HumanEval/0", "sample_index": index, "completion": f"    return {index}  # " + "x" * 400 + "\n"}


def test_the_appender_keeps_only_whole_records_and_continues_after_space_is_freed(small_disk: Path) -> None:
    path = small_disk / "run" / "samples.jsonl"
    out = JsonlAppender(path)
    written = 0
    with pytest.raises(QuenchError) as full:
        for index in range(100):
            out.write(sample(index))
            written += 1
    out.close()  # nothing more to say: the error was raised already
    assert str(path) in str(full.value) and "No space left" in str(full.value)
    assert 0 < written < 100
    assert [r["sample_index"] for r in whole_records(path)] == list(range(written))
    grow(small_disk)
    out = JsonlAppender(path)
    for index in range(written, 100):
        out.write(sample(index))
    out.close()
    assert [r.sample_index for r in resume_samples(path)] == list(range(100))


def test_the_cli_ends_with_one_error_line_and_the_rerun_finishes(small_disk: Path, tmp_path: Path) -> None:
    samples = tmp_path / "samples.jsonl"
    samples.write_text("".join(json.dumps(sample(index)) + "\n" for index in range(60)))
    out = small_disk / "out"
    command = [sys.executable, "-m", "quench.cli.main", "evaluate", str(samples), "--out", str(out), "--workers", "1",
               "--k", "1"]
    full = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert full.returncode == 2, full.stderr[-2000:]
    assert "Traceback" not in full.stderr, full.stderr[-2000:]
    errors = [line for line in full.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(out) in errors[0] and "No space left" in errors[0], full.stderr[-2000:]
    results = out / "results.jsonl"
    before = whole_records(results) if results.exists() else []
    assert len(before) < 60
    grow(small_disk)
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(r["sample_index"] for r in whole_records(results)) == list(range(60))
