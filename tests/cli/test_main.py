"""The entry point: help without heavy imports, --threads, and Ctrl-C at any moment."""

import os
import signal
import subprocess
import sys
import time

import pytest

from quench.cli.main import SUBCOMMANDS, main

HEAVY = ("torch", "transformers", "matplotlib", "libcst", "ray", "tqdm")  # tqdm: ~0.1 s of importlib.metadata
HELPS = [[], *([name] for name in SUBCOMMANDS), ["guard", "build-data"], ["guard", "train"], ["draft", "train"]]


@pytest.mark.parametrize("command", HELPS, ids=lambda command: " ".join(command) or "quench")
def test_help_imports_no_heavy_library(command):
    """`quench [X] --help` stays well under half a second: none of the libraries a command needs when it runs."""
    probe = (
        "import sys\n"
        "from quench.cli.main import main\n"
        f"sys.argv = ['quench', *{command!r}, '--help']\n"
        "try:\n    main()\nexcept SystemExit as done:\n    assert done.code == 0, done.code\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_robustness_help_does_not_offer_partial(capsys):
    with pytest.raises(SystemExit):
        main(["robustness", "--help"])
    assert "--partial" not in capsys.readouterr().out


def test_threads_sets_torch_threads(capsys):
    import torch

    before = torch.get_num_threads()
    try:
        assert main(["--threads", "1", "perturb", "--list"]) == 0
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def interruptible() -> None:
    """Ctrl-C as a terminal delivers it: a test run started in the background inherits SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("delay_s", [0.5, 1.5])
def test_ctrl_c_while_starting_prints_one_line(delay_s, tmp_path):
    """SIGINT during the imports or the model load: exit 130 and one line, never a traceback."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "QUENCH_CACHE": str(tmp_path / "cache")}
    process = subprocess.Popen([sys.executable, "-m", "quench.cli.main", "run", "--limit", "1", "--out",
                                str(tmp_path / "run")], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, preexec_fn=interruptible)
    time.sleep(delay_s)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr, stderr
    assert stderr.strip().splitlines()[-1].startswith("interrupted")


def test_an_interrupt_that_lands_in_code_an_extension_runs_still_exits_130(tmp_path):
    """A Ctrl-C inside code a C extension runs through PyRun_* (as some do while importing) is handled
    like any other: CPython's mark of an unhandled interrupt must not turn exit 130 into death by SIGINT."""
    (tmp_path / "probe.py").write_text(
        "import ctypes, sys\n"
        "import quench.cli.parser as parser\n"
        "def interrupted_inside_c(argv, names):\n"
        "    ctypes.pythonapi.PyRun_SimpleString(b'raise KeyboardInterrupt')\n"
        "    raise KeyboardInterrupt\n"
        "parser.run_command = interrupted_inside_c\n"
        "from quench.cli.main import main\n"
        "sys.exit(main([]))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "probe"], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("interrupted")


def test_the_entry_point_imports_nothing_before_its_try():
    """Everything the CLI needs is imported inside main()'s try, where Ctrl-C ends in one line."""
    probe = (
        "import sys\n"
        "import quench\n"
        "before = set(sys.modules)\n"
        "import quench.cli.main\n"
        "print(sorted(set(sys.modules) - before))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['quench.cli', 'quench.cli.main']"


def test_an_error_raised_while_a_ctrl_c_unwinds_counts_as_the_interrupt():
    from quench.cli.main import interrupted

    def cleanup_fails_during_interrupt():
        try:
            raise KeyboardInterrupt
        finally:
            raise AttributeError("type object 'tqdm' has no attribute '_lock'")  # tqdm cut short mid-import

    with pytest.raises(AttributeError) as caught:
        cleanup_fails_during_interrupt()
    assert interrupted(caught.value)
    assert not interrupted(ValueError("a real error"))
