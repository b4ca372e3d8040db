"""`quench generate` says what it loads, and a command refused for a typo leaves --out free for the fixed one."""

import json

import pytest

from helpers import save_tiny_model
from quench.cli import builders
from quench.cli.main import main


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny"))


def test_a_refused_command_leaves_out_free_for_the_corrected_one(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["--threads", "1", "--progress", "generate", "--model", str(tiny_model_dir), "--tasks", "0", "--max-new-tokens", "4",
            "--out", str(out)]
    assert main([*argv, "--guard", str(tmp_path / "typo.safetensors")]) == 2
    assert "typo.safetensors: no such file" in capsys.readouterr().err
    assert not out.exists()
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert f"loading {tiny_model_dir} …" in err  # before the model loads, above the progress bar
    assert err.index("loading") < err.index("generate")
    assert json.loads((out / "config.json").read_text())["guard"] is None
    assert len((out / "samples.jsonl").read_text().splitlines()) == 1


def test_a_draft_that_does_not_load_leaves_no_run_directory(tiny_model_dir, tmp_path, capsys):
    """The backend (draft, guard) is built before --out is written: a corrupt draft leaves no config.json."""
    draft = tmp_path / "draft.safetensors"
    draft.write_bytes(b"not a draft")
    out = tmp_path / "run"
    argv = ["--threads", "1", "generate", "--model", str(tiny_model_dir), "--tasks", "0", "--max-new-tokens", "4",
            "--speculate", "draft", "--draft", str(draft), "--out", str(out)]
    assert main(argv) == 2
    assert "draft.safetensors: not a readable draft" in capsys.readouterr().err
    assert not out.exists()


def test_a_finished_run_answers_without_loading_the_model(tiny_model_dir, tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    argv = ["--threads", "1", "generate", "--model", str(tiny_model_dir), "--tasks", "0-1", "--max-new-tokens", "4",
            "--out", str(out)]
    assert main(argv) == 0
    before = (out / "samples.jsonl").read_bytes()
    capsys.readouterr()

    def refuse(args):
        raise AssertionError("the model was loaded for a finished run")

    monkeypatch.setattr(builders, "load_model_from_args", refuse)
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "nothing to generate, the model is not loaded" in captured.err
    assert f"2 samples in {out / 'samples.jsonl'}" in captured.out
    assert (out / "samples.jsonl").read_bytes() == before
    with pytest.raises(AssertionError, match="the model was loaded"):  # other stop sequences: generate again
        main([*argv, "--stop", "\\nclass "])
