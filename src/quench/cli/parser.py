"""The command line: one subcommand per module, parsed, run, and its QuenchError turned into exit code 2."""

from __future__ import annotations

import argparse
import difflib
import errno
import importlib
import logging
import re
import sys
from typing import Sequence

from quench import __version__
from quench.errors import QuenchError
from quench.threads import configure_threads


class DefaultsFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default, unless the text already says it (`default …`)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        unset = action.default is None or action.default is False or action.default is argparse.SUPPRESS
        shown = not unset and action.default not in ([], "") and action.option_strings
        if not shown or "default" in text.lower():
            return text
        return f"{text} (default %(default)s)" if text else "default %(default)s"


class Parser(argparse.ArgumentParser):
    """argparse, with its errors in quench's one-line form: one `error: …` line, exit code 2, no usage dump;
    an unknown option names the command's nearest one. Every command's help shows each option's default."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", DefaultsFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        command = self.prog.removeprefix("quench").strip()  # "run", "guard train", or "" at the top
        message = nearest_choice(message)
        pointer = "" if "did you mean" in message else f"; see {self.prog} --help"
        self.exit(2, f"error: {command + ': ' if command else ''}{message}{pointer}\n")

    def parse_args(self, args=None, namespace=None):
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            command = command_parser(self, parsed)
            command.error(unrecognized(extras, command))
        return parsed


INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)$")


def nearest_choice(message: str) -> str:
    """argparse's invalid-choice message, ending with the nearest choice where one is close."""
    match = INVALID_CHOICE.search(message)
    if match is None:
        return message
    choices = re.findall(r"'([^']*)'", match[2])
    nearest = difflib.get_close_matches(match[1], choices, n=1, cutoff=0.6)
    return message + (f"; did you mean {nearest[0]}?" if nearest else "")


def option_strings(parser: argparse.ArgumentParser) -> list[str]:
    return [option for action in parser._actions for option in action.option_strings]


def unrecognized(extras: Sequence[str], parser: argparse.ArgumentParser) -> str:
    """`unrecognized argument: --max-tokens; did you mean --max-new-tokens?`: the first unknown option
    with the nearest one `parser` takes, or the extra arguments as argparse names them."""
    unknown = next((extra for extra in extras if extra.startswith("-")), None)
    if unknown is None:
        return f"unrecognized arguments: {' '.join(extras)}"
    name = unknown.partition("=")[0]
    nearest = difflib.get_close_matches(name, option_strings(parser), n=1, cutoff=0.6)
    return f"unrecognized argument: {name}" + (f"; did you mean {nearest[0]}?" if nearest else "")


def command_parser(parser: argparse.ArgumentParser, parsed: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the (sub)command `parsed` runs: the deepest one whose defaults name its handler."""
    handler = getattr(parsed, "handler", None)
    owners = [sub for sub in subparsers_of(parser) if handler is not None and sub._defaults.get("handler") is handler]
    return max(owners, key=lambda sub: len(sub.prog.split()), default=parser)


def add_global_args(parser: argparse.ArgumentParser, default=None) -> None:
    """Options every command takes, before or after its name (`default`: SUPPRESS where a subcommand must not
    reset what the top level parsed)."""
    parser.add_argument("-v", "--verbose", action="store_true", default=default if default is not None else False,
                        help="log at INFO level")
    parser.add_argument("--threads", type=int, default=default, metavar="N",
                        help="torch CPU threads (default: one per CPU not busy with other work when the command starts)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=default,
                        help="draw progress bars on stderr (default: only where stderr is a terminal; status lines "
                             "are printed either way)")


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


def describe_error(err: QuenchError) -> str:
    """The error line's text: an engine setting's refusal names its flag."""
    from quench.engine.config import ConfigError

    if isinstance(err, ConfigError):
        from quench.cli.settings import named_by_flag

        return named_by_flag(err)
    return str(err)


def run_command(argv: list[str] | None, subcommands: Sequence[str]) -> int:
    """Parse, set the threads, refuse an unconfinable sandbox, run the subcommand; QuenchError -> exit code 2."""
    args = build_parser(subcommands).parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from quench.cli.settings import check_sandbox
    from quench.cli.validate import check_device
    from quench.runs.rundir import release_run_dirs

    from quench.cli import console

    console.set_progress(args.progress)
    try:
        configure_threads(args.threads)  # --threads, else a default that holds on a busy machine
        if getattr(args, "device", None) and not getattr(args, "ray", None):
            check_device(args.device)  # before the sandbox's self-test: a wrong device fails at once
        check_sandbox(args)
        return args.handler(args)
    except QuenchError as err:
        print(f"error: {describe_error(err)}", file=sys.stderr)
        return 2
    except OSError as err:
        if err.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        print(f"error: {err.filename or 'a file'}: {err.strerror}; free some space and run the same command again "
              "to continue", file=sys.stderr)
        return 2
    finally:
        release_run_dirs()
