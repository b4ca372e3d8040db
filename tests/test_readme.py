"""The README's Python example runs as written (on a tiny model instead of the preset), and `import quench` gives
every name the README and `quench.__all__` promise without loading torch."""

from __future__ import annotations

import ast
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
    return re.search(r"```python\n(.*?\n)```\n", section, re.DOTALL)[1]  # to the fence that closes the block


def test_the_readme_python_example_runs(tmp_path, monkeypatch, capsys):
    tiny = save_tiny_model(tmp_path / "tiny")
    load_model = quench.load_model
    monkeypatch.setattr(quench, "load_model", lambda name, *args, **kwargs: load_model(str(tiny), *args, **kwargs))
    exec(compile(python_example(), str(README), "exec"), {})
    headers = [line for line in capsys.readouterr().out.splitlines() if line.startswith("# sample ")]
    assert sorted(line.split()[2] for line in headers) == ["0", "1"]  # n=2: each sample once


def printed_samples(out: str) -> list[str]:
    """The code of each sample the example prints, after its `# sample i (reason)` line."""
    return [part.split("\n", 1)[1] for part in re.split(r"^(?=# sample \d+ )", out, flags=re.MULTILINE) if part.strip()]


@pytest.mark.slow  # the preset model: seconds to load, a minute on a busy machine
def test_the_readme_python_example_prints_the_function_it_asks_for(capsys):
    """On the preset the README names, each printed sample is the function `add` and adds."""
    exec(compile(python_example(), str(README), "exec"), {})
    samples = printed_samples(capsys.readouterr().out)
    assert len(samples) == 2
    for code in samples:
        tree = ast.parse(code)
        assert [node.name for node in tree.body if isinstance(node, ast.FunctionDef)] == ["add"], code
        scope: dict = {}
        exec(compile(tree, "<sample>", "exec"), scope)
        assert scope["add"](2, 3) == 5


def test_the_readmes_printed_output_is_what_the_example_prints():
    section = README.read_text().split("## In Python", 1)[1]
    shown = re.search(r"It prints two samples.*?\n```\n(.*?)```", section, re.DOTALL)[1]
    for code in printed_samples(shown):
        assert [n.name for n in ast.parse(code).body if isinstance(n, ast.FunctionDef)] == ["add"]


def test_every_exported_name_resolves():
    for name in quench.__all__:
        assert getattr(quench, name) is not None, name
    with pytest.raises(AttributeError):
        quench.no_such_name  # noqa: B018


def test_import_quench_loads_no_torch():
    probe = "import sys, quench; quench.__all__; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr
