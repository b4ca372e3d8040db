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
    except Exception as err:
        if not interrupted(err):
            raise
    except KeyboardInterrupt:
        pass
    forget_unhandled_interrupt()
    print("interrupted: what finished is saved; run the same command again to continue", file=sys.stderr)
    return 130


def forget_unhandled_interrupt() -> None:
    """CPython marks a KeyboardInterrupt raised inside code that a C extension runs (PyRun_*) as unhandled, and
    after `python -m` returns it kills itself with SIGINT (exit -2, not 130); the interrupt is handled here."""
    try:
        import ctypes

        ctypes.c_int.in_dll(ctypes.pythonapi, "_Py_UnhandledKeyboardInterrupt").value = 0
    except (ImportError, ValueError, AttributeError):  # another interpreter: nothing to clear
        pass


def interrupted(err: BaseException) -> bool:
    """Whether `err` came out of a Ctrl-C: a library's clean-up (tqdm's lock, say) can replace the
    KeyboardInterrupt with an error of its own, which keeps the interrupt as its context."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, KeyboardInterrupt):
            return True
        seen.add(id(err))
        err = err.__context__
    return False


if __name__ == "__main__":
    sys.exit(main())
