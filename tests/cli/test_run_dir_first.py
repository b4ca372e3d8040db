"""`quench run` checks --out before the model loads: a run directory with other settings, or one another
process is writing, is `error: …` and exit code 2 in well under the seconds a model load takes."""

import fcntl

import pytest

from helpers import save_tiny_model
from quench.cli import console
from quench.cli.main import main


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny"))


def argv(command: str, model, out) -> list[str]:
    return [command, "--threads", "1", "--model", str(model), "--tasks", "0", "--max-new-tokens", "4", "--out", str(out)]


@pytest.fixture
def no_model_load(monkeypatch):
    def load_model(*args, **kwargs):
        raise AssertionError("the model loaded before --out was checked")

    monkeypatch.setattr(console, "load_model", load_model)


@pytest.fixture
def finished_run(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(argv("generate", tiny_model_dir, out)) == 0
    capsys.readouterr()
    return out


@pytest.mark.parametrize("flags, changed", [
    (["--seed", "1"], "(seed)"),
    (["--time-budget", "1", "--temperature", "0.5"], "temperature, time_budget"),  # the time-budget path too
])
def test_a_run_with_other_settings_is_refused_before_the_model_loads(tiny_model_dir, finished_run, flags, changed,
                                                                     no_model_load, capsys):
    assert main([*argv("run", tiny_model_dir, finished_run), *flags]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"error: {finished_run}: holds a run with other settings") and changed in last, last


def test_a_run_directory_another_process_writes_is_refused_before_the_model_loads(tiny_model_dir, tmp_path,
                                                                                   no_model_load, capsys):
    out = tmp_path / "run"
    out.mkdir()
    with (out / ".lock").open("a") as held:  # another open file holds the lock, as another process would
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert main(argv("run", tiny_model_dir, out)) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last == f"error: {out}: another quench process is writing this run directory"
    assert not (out / "config.json").exists()


def test_a_robustness_run_with_other_settings_is_refused_before_the_model_loads(tiny_model_dir, tmp_path,
                                                                               no_model_load, capsys):
    out = tmp_path / "robust"
    out.mkdir()
    (out / "config.json").write_text('{"seeds": 3, "transforms": ["tab_indent"]}\n')  # a run made with --seeds 3
    argv_ = ["robustness", "--threads", "1", "--model", str(tiny_model_dir), "--tasks", "0", "--transforms",
             "tab_indent", "--seeds", "2", "--max-new-tokens", "4", "--out", str(out)]
    assert main(argv_) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"error: {out}: holds a run with other settings (") and "seeds" in last, last
