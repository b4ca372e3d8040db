"""`quench perturb`'s bar counts variants as each problem is perturbed, not whole transformations."""

import pytest
import re

from quench.cli.main import main
from quench.datasets import load_benchmark
from quench.cli import console
from quench.perturbations.pipeline import perturb_problems


@pytest.fixture(autouse=True)
def bars_drawn():
    """These tests read the bars: draw them, though pytest's stderr is not a terminal."""
    console.set_progress(True)
    yield
    console.set_progress(None)


def test_variants_are_reported_as_each_problem_is_perturbed() -> None:
    problems = load_benchmark("humaneval", tasks=["0", "1", "2"])
    reported: list[tuple[str, int]] = []
    perturb_problems(problems, ["FuncRenameButterFinger", "tab_indent"], seeds=2, validate_variants=False,
                     on_variants=lambda name, count: reported.append((name, count)))
    # a seeded transformation: one call per problem and seed; a deterministic one is made once, then copied
    assert reported == [("FuncRenameButterFinger", 1)] * 6 + [("tab_indent", 1)] * 3 + [("tab_indent", 3)]


def test_the_perturb_bar_counts_every_variant(tmp_path, capsys) -> None:
    argv = ["--progress", "perturb", "--tasks", "0-2", "--seeds", "2", "--transforms", "FuncRenameButterFinger,tab_indent",
            "--no-validate", "--out", str(tmp_path / "set")]
    assert main(argv) == 0
    err = capsys.readouterr().err
    bars = re.findall(r"perturb: +\d+%\|[^|]*\| (\d+)/(\d+) \[[^\]]*variant", err)
    assert bars and bars[-1] == ("12", "12"), err
    assert "transformation=tab_indent" in err
