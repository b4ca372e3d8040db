"""`quench` console entry point. It imports nothing but `sys` before its `try`, so that Ctrl-C at any
moment, the imports included, ends in one line; subcommand modules import their heavy libraries
(torch, transformers…) only when they run."""

import sys

SUBCOMMANDS = ("generate", "evaluate", "run", "robustness", "perturb", "guard", "train", "draft", "doctor", "compare",
               "serve")


def main(argv: list[str] | None = None) -> int:
    try:
        from quench.threads import prepare_openmp

        prepare_openmp()  # read when torch loads
        from quench.cli.parser import run_command

        return run_command(argv, SUBCOMMANDS)
    except KeyboardInterrupt:
        print("interrupted: what finished is saved; run the same command again to continue", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
