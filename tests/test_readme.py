"""The README's Python example runs as written (on a tiny model instead of the preset), and `import quench` gives
every name the README and `quench.__all__` promise without loading torch."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import quench
from helpers import save_tiny_model

README = Path(__file__).resolve().parent.parent / "README.md"


def python_example() -> str:
    section = README.read_text().split("## In Python", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.DOTALL)[1]


def test_the_readme_python_example_runs(tmp_path, monkeypatch, capsys):
    tiny = save_tiny_model(tmp_path / "tiny")
    load_model = quench.load_model
    monkeypatch.setattr(quench, "load_model", lambda name, *args, **kwargs: load_model(str(tiny), *args, **kwargs))
    exec(compile(python_example(), str(README), "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    assert sorted(line.split()[0] for line in printed) == ["0", "1"]  # n=2: each sample once


def test_every_exported_name_resolves():
    for name in quench.__all__:
        assert getattr(quench, name) is not None, name
    with pytest.raises(AttributeError):
        quench.no_such_name  # noqa: B018


def test_import_quench_loads_no_torch():
    probe = "import sys, quench; quench.__all__; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr
