"""quench.threads: the OpenMP wait policy and the default thread count reach torch; a busy CPU counts."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from quench.errors import QuenchError
from quench.threads import SPIN_COUNT, busy_cpus, choose_threads, configure_threads, prepare_openmp, usable_cpus

SPIN = "import os, sys\nos.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True:\n    pass\n"


def test_waiting_threads_spin_briefly_then_sleep_unless_the_user_chose() -> None:
    environ: dict[str, str] = {}
    prepare_openmp(environ)
    assert environ == {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": str(SPIN_COUNT)}
    for chosen in ({"OMP_WAIT_POLICY": "ACTIVE"}, {"OMP_WAIT_POLICY": "PASSIVE"}):
        prepare_openmp(given := dict(chosen))
        assert given == chosen  # a policy the user set keeps libgomp's spin count for it
    prepare_openmp(spin := {"GOMP_SPINCOUNT": "0"})
    assert spin == {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "0"}


def test_explicit_counts_win() -> None:
    assert choose_threads(3, {"OMP_NUM_THREADS": "2"}).threads == 3
    assert choose_threads(None, {"OMP_NUM_THREADS": "2"}).threads == 2
    default = choose_threads(None, {})
    assert 1 <= default.threads <= len(usable_cpus())
    assert "usable CPUs" in default.reason
    with pytest.raises(QuenchError, match="--threads must be at least 1"):
        configure_threads(0, {})


def test_a_cpu_taken_by_another_process_counts_as_busy() -> None:
    cpu = usable_cpus()[-1]
    spinner = subprocess.Popen([sys.executable, "-c", SPIN, str(cpu)])
    try:
        busy = busy_cpus([cpu], seconds=0.5)
    finally:
        spinner.kill()
        spinner.wait()
    assert busy > 0.7  # the spinner has that CPU (others' work may add to it, never take from it)


CHILD = """
import json, os, sys
from quench.threads import configure_threads, prepare_openmp
prepare_openmp()
choice = configure_threads(int(sys.argv[1]) if len(sys.argv) > 1 else None)
import torch
print(json.dumps({"chosen": choice.threads, "torch": torch.get_num_threads(), "wait": os.environ["OMP_WAIT_POLICY"],
                  "spin": os.environ["GOMP_SPINCOUNT"]}))
"""


@pytest.mark.parametrize("requested", [None, 1])
def test_the_choice_reaches_torch_loaded_afterwards(requested: int | None) -> None:
    openmp = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
    env = {key: value for key, value in os.environ.items() if key not in openmp}
    argv = [] if requested is None else [str(requested)]
    done = subprocess.run([sys.executable, "-c", CHILD, *argv], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["torch"] == report["chosen"] and (report["wait"], report["spin"]) == ("PASSIVE", str(SPIN_COUNT))
    if requested is not None:
        assert report["chosen"] == requested
