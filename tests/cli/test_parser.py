"""argparse's errors in quench's form: one `error:` line naming the command, exit code 2, no usage dump,
and the nearest option or choice where the user mistyped one."""

from __future__ import annotations

import pytest

from quench.cli.main import main


def error_of(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and captured.out == "", captured.err  # no usage lines before the error
    return lines[0]


def test_an_unknown_option_names_the_nearest_one_of_its_command(capsys):
    assert error_of(["run", "--max-tokens", "5"], capsys) == (
        "error: run: unrecognized argument: --max-tokens; did you mean --max-new-tokens?")
    assert error_of(["robustness", "--temprature=0.2"], capsys) == (
        "error: robustness: unrecognized argument: --temprature; did you mean --temperature?")


def test_an_unknown_option_of_a_verb_names_the_verbs_own_options(capsys):
    line = error_of(["guard", "train", "--data", "d", "--out", "o", "--epohcs", "2"], capsys)
    assert line == "error: guard train: unrecognized argument: --epohcs; did you mean --epochs?"


def test_an_invalid_choice_names_the_nearest_choice(capsys):
    assert error_of(["run", "--backend", "hff"], capsys).endswith("; did you mean hf?")
    assert error_of(["robustnes"], capsys).endswith("; did you mean robustness?")


def test_other_errors_point_to_the_commands_help(capsys):
    assert error_of(["evaluate"], capsys) == (
        "error: evaluate: the following arguments are required: samples; see quench evaluate --help")
    assert error_of(["run", "stray"], capsys) == "error: run: unrecognized arguments: stray; see quench run --help"
