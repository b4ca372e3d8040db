"""Help that tells the truth: every option a command's `--help` lists is accepted by that command (each
choice it lists, one by one), and the global options mean the same after the command's name as before it."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

import pytest

from quench.cli import serve
from quench.cli.main import SUBCOMMANDS
from quench.cli.parser import build_parser, subparsers_of
from quench.errors import QuenchError

PARSER = build_parser(SUBCOMMANDS)
COMMANDS = {tuple(sub.prog.split()[1:]): sub for sub in subparsers_of(PARSER)
            if not any(isinstance(a, argparse._SubParsersAction) for a in sub._actions)}  # ("guard", "train") -> parser
UP_FRONT_CHECKS = {("serve",): serve.check_args}  # a command's own checks that need no model: they refuse nothing listed
NEEDS = {"--gpus-per-replica": ("--ray", "auto"), "--replicas": ("--ray", "auto"), "--cpus-per-replica": ("--ray", "auto")}
ENTRY = re.compile(r"^  (-\S.*?)(?:\s{2,}|$)")  # "  -n SAMPLES, --samples SAMPLES   samples per problem"


def listed_options(parser: argparse.ArgumentParser) -> list[tuple[str, str | None]]:
    """(option, metavar or None) for each option string in the help's option entries, as a user reads them."""
    listed = []
    for line in parser.format_help().splitlines():
        match = ENTRY.match(line)
        if match:
            for part in re.split(r", (?=-)", match[1]):
                option, _, metavar = part.partition(" ")
                listed.append((option, metavar or None))
    return listed


def required_argv(parser: argparse.ArgumentParser) -> list[str]:
    """A value for each positional and each required option, so that one more option can be parsed."""
    argv = []
    for action in parser._actions:
        if not action.option_strings and action.dest != "help":
            argv.append("x")
        elif action.required:
            argv += [action.option_strings[0], "x"]
    return argv


def values_to_try(action: argparse.Action, metavar: str | None) -> list[list[str]]:
    """The values the help offers: each choice between braces, else one ordinary value of the option's type."""
    if action.nargs == 0:
        return [[]]
    if metavar and metavar.startswith("{"):
        return [[choice] for choice in metavar.strip("{}").split(",")]
    if action.default not in (None, argparse.SUPPRESS) and not isinstance(action.default, (list, bool)):
        return [[str(action.default)]]
    return [[{int: "2", float: "1.0"}.get(action.type, "x")]]


CASES = [(command, option, value) for command, parser in sorted(COMMANDS.items())
         for option, metavar in listed_options(parser) if option not in ("-h", "--help")
         for value in values_to_try(parser._option_string_actions[option], metavar)]


@pytest.mark.parametrize("command, option, value", CASES,
                         ids=[" ".join((*c, o, *v)) for c, o, v in CASES])
def test_every_listed_option_is_accepted(command, option, value, capsys):
    parser = COMMANDS[command]
    argv = [*command, *required_argv(parser), option, *value, *NEEDS.get(option, ())]
    try:
        args = PARSER.parse_args(argv)
    except SystemExit:
        pytest.fail(f"quench {' '.join(argv)}: {capsys.readouterr().err.strip()}")
    check = UP_FRONT_CHECKS.get(command)
    if check is not None:
        try:
            check(args)
        except QuenchError as err:
            pytest.fail(f"quench {' '.join(argv)}: the help lists it, the command refuses it: {err}")


@pytest.mark.parametrize("command", sorted(COMMANDS), ids=" ".join)
def test_each_listed_choice_is_one_value(command):
    """`{none,function,loop,function,loop}` hides that `function,loop` is one value: braces list the choices as they are."""
    parser = COMMANDS[command]
    for option, metavar in listed_options(parser):
        if metavar and metavar.startswith("{"):
            choices = [str(c) for c in parser._option_string_actions[option].choices]
            assert metavar.strip("{}").split(",") == choices, f"quench {' '.join(command)} {option} {metavar}"


@pytest.mark.parametrize("command", sorted(COMMANDS), ids=" ".join)
def test_global_options_mean_the_same_after_the_command(command):
    required = required_argv(COMMANDS[command])
    after = PARSER.parse_args([*command, *required, "--threads", "3", "-v"])
    before = PARSER.parse_args(["--threads", "3", "-v", *command, *required])
    plain = PARSER.parse_args([*command, *required])
    assert (after.threads, after.verbose) == (before.threads, before.verbose) == (3, True)
    assert (plain.threads, plain.verbose) == (None, False)


def test_serve_lists_no_backend_it_refuses():
    help_text = COMMANDS[("serve",)].format_help()
    for refused in ("--backend", "--base-url", "--concurrency", "--max-retries", "--engines"):
        assert refused not in help_text


BENCHMARK_COMMANDS = [command for command, parser in sorted(COMMANDS.items())  # guard's commands take MBPP's splits only
                      if "--benchmark" in parser._option_string_actions and command[0] != "guard"]


@pytest.mark.parametrize("command", BENCHMARK_COMMANDS, ids=[" ".join(c) for c in BENCHMARK_COMMANDS])
def test_the_benchmark_help_names_every_benchmark(command):
    from quench.datasets.loading import BENCHMARKS

    text = " ".join(COMMANDS[command]._option_string_actions["--benchmark"].help.split())
    assert [name for name in BENCHMARKS if not re.search(rf"(^|[\s(]){re.escape(name)}([\s,)]|$)", text)] == []


def test_building_every_commands_help_imports_neither_numpy_nor_torch():
    """`quench X --help` stays fast: the parser is built without the heavy libraries (counted, not timed)."""
    code = ("import sys\nfrom quench.cli.main import SUBCOMMANDS\nfrom quench.cli.parser import build_parser\n"
            "build_parser(SUBCOMMANDS).format_help()\n"
            "print(sorted(m for m in ('numpy', 'torch', 'transformers') if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
