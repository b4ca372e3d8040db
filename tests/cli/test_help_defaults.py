"""Every option of every command says what it does and its default, and one idea has one name across
commands (older names stay as aliases)."""

from __future__ import annotations

import argparse

import pytest

from quench.cli.main import SUBCOMMANDS
from quench.cli.parser import build_parser, subparsers_of

PARSER = build_parser(SUBCOMMANDS)
COMMANDS = {sub.prog: sub for sub in subparsers_of(PARSER)}
OPTIONS = [(prog, action) for prog, sub in sorted(COMMANDS.items()) for action in sub._actions
           if action.option_strings and action.dest != "help"]


@pytest.mark.parametrize("prog, action", OPTIONS, ids=[f"{p} {a.option_strings[-1]}" for p, a in OPTIONS])
def test_every_option_has_help_and_shows_its_default(prog, action):
    assert action.help, f"{prog} {action.option_strings[0]}: no help text"
    if action.default is None or action.default is False or action.default is argparse.SUPPRESS:
        return
    shown = COMMANDS[prog]._get_formatter()._expand_help(action)  # the entry's text as --help prints it
    assert "default" in shown.lower(), f"{prog} {action.option_strings[0]}: no default shown: {shown!r}"


@pytest.mark.parametrize("command, option, dest", [
    (["run"], "--benchmark", "benchmark"), (["run"], "--model", "model"), (["run"], "--samples", "samples"),
    (["run"], "--temperature", "temperature"), (["run"], "--dtype", "dtype"), (["run"], "--backend", "backend"),
    (["run"], "--speculate", "drafter")])
def test_the_main_flags_show_their_default_value(command, option, dest):
    parser = COMMANDS[f"quench {' '.join(command)}"]
    action = parser._option_string_actions[option]
    assert parser._get_formatter()._expand_help(action).endswith(f"(default {action.default})")


@pytest.mark.parametrize("argv, dest, value", [
    (["train", "--out", "o", "--seeds", "3"], "perturb_seeds", 3),
    (["train", "--out", "o", "--perturb-seeds", "3"], "perturb_seeds", 3),
    (["run", "--replicas", "2"], "ray_actors", 2),
    (["run", "--ray-actors", "2"], "ray_actors", 2),
    (["run", "--cpus-per-replica", "2"], "ray_cpus_per_actor", 2.0),
    (["run", "--ray-cpus-per-actor", "2"], "ray_cpus_per_actor", 2.0),
])
def test_one_name_per_idea_and_the_older_names_still_work(argv, dest, value):
    assert getattr(PARSER.parse_args(argv), dest) == value
