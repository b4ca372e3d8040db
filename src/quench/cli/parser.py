"""The command line: one subcommand per module, parsed, run, and its QuenchError turned into exit code 2."""

from __future__ import annotations

import argparse
import errno
import importlib
import logging
import sys
from typing import Sequence

from quench import __version__
from quench.errors import QuenchError
from quench.threads import configure_threads


class Parser(argparse.ArgumentParser):
    """argparse, with its errors in quench's one-line form: `error: …` as the last line, exit code 2."""

    def error(self, message: str):
        command = self.prog.removeprefix("quench").strip()  # "run", "guard train", or "" at the top
        self.print_usage(sys.stderr)
        self.exit(2, f"error: {command + ': ' if command else ''}{message}\n")


def add_global_args(parser: argparse.ArgumentParser, default=None) -> None:
    """Options every command takes, before or after its name (`default`: SUPPRESS where a subcommand must not
    reset what the top level parsed)."""
    parser.add_argument("-v", "--verbose", action="store_true", default=default if default is not None else False,
                        help="log at INFO level")
    parser.add_argument("--threads", type=int, default=default, metavar="N",
                        help="torch CPU threads (default: one per CPU not busy with other work when the command starts)")


def subparsers_of(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every parser below `parser` (subcommands and their verbs), each once."""
    found: dict[int, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                for sub in (child, *subparsers_of(child)):
                    found.setdefault(id(sub), sub)
    return list(found.values())


def build_parser(subcommands: Sequence[str]) -> argparse.ArgumentParser:
    parser = Parser(prog="quench", description="Fast, robust evaluation of code LLMs.")
    parser.add_argument("--version", action="version", version=f"quench {__version__}")
    add_global_args(parser)
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in subcommands:
        try:
            module = importlib.import_module(f"quench.cli.{name}")
        except ModuleNotFoundError as err:
            if err.name != f"quench.cli.{name}":
                raise
            continue
        module.register(subparsers)
    for sub in subparsers_of(parser):
        add_global_args(sub, default=argparse.SUPPRESS)  # `quench run --threads 1` as `quench --threads 1 run`
    return parser


def run_command(argv: list[str] | None, subcommands: Sequence[str]) -> int:
    """Parse, set the threads, refuse an unconfinable sandbox, run the subcommand; QuenchError -> exit code 2."""
    args = build_parser(subcommands).parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from quench.cli.common import check_sandbox
    from quench.runs.rundir import release_run_dirs

    try:
        configure_threads(args.threads)  # --threads, else a default that holds on a busy machine
        check_sandbox(args)
        return args.handler(args)
    except QuenchError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        if err.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        print(f"error: {err.filename or 'a file'}: {err.strerror}; free some space and run the same command again "
              "to continue", file=sys.stderr)
        return 2
    finally:
        release_run_dirs()
