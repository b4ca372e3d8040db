"""Who a program is, outside its sandbox, in every language and both modes: a worker's own uid.

Checked from the host, not from inside: in "bwrap" mode /proc/self/uid_map reads `65534 0 1`
whoever starts bubblewrap, because the map is relative to bubblewrap's intermediate namespace.
So the test reads the uid of every process under each worker in the host's /proc while a
program runs, and has programs try what only a wrong uid, or a wrong bind, would allow: read
a 0600 file of the caller's, see the checkout, create files outside their own directory, and
kill a process they did not start.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest
from sandbox_helpers import MODES, mode_python, process_tree, skip_reason

from quench.datasets import LANGUAGES, Problem
from quench.execution import Outcome, SandboxLimits, SandboxPool
from quench.execution.toolchains import has_toolchain, prepare

CHECKOUT = Path(__file__).resolve().parents[2]
ALL_LANGUAGES = ("python", *LANGUAGES)
NOBODY = 65534

PROBE = {  # exits 1 if it read the secret, 2 if it saw a hidden path; tries to create every path
    "python": "import os, sys\ntry:\n    open({secret}).read()\nexcept OSError:\n    pass\nelse:\n    sys.exit(1)\n"
              "if any(os.path.exists(p) for p in {hidden}):\n    sys.exit(2)\nfor p in {paths}:\n"
              "    try:\n        open(p, 'w').write('x')\n    except OSError:\n        pass\n",
    "javascript": 'const fs = require("fs");\nlet read = false;\ntry { fs.readFileSync({secret}); read = true; } catch (e) {}\n'
                  "if (read) { process.exit(1); }\nif ({hidden}.some((p) => fs.existsSync(p))) { process.exit(2); }\n"
                  'for (const p of {paths}) { try { fs.writeFileSync(p, "x"); } catch (e) {} }\n',
    "go": 'package main\nimport "os"\nfunc main() {\n\tif _, err := os.ReadFile({secret}); err == nil {\n\t\tos.Exit(1)\n\t}\n'
          "\tfor _, p := range []string{{{hidden}}} {\n\t\tif _, err := os.Stat(p); err == nil {\n\t\t\tos.Exit(2)\n\t\t}\n\t}\n"
          '\tfor _, p := range []string{{{paths}}} {\n\t\t_ = os.WriteFile(p, []byte("x"), 0o644)\n\t}\n}\n',
    "cpp": "#include <cstdio>\n#include <unistd.h>\nint main() {\n"
           '    if (FILE* s = fopen({secret}, "r")) { fclose(s); return 1; }\n'
           "    const char* hidden[] = {{{hidden}}};\n    for (const char* p : hidden) { if (p && access(p, F_OK) == 0) { return 2; } }\n"
           "    const char* paths[] = {{{paths}}};\n"
           '    for (const char* p : paths) { if (FILE* f = p ? fopen(p, "w") : nullptr) { fputs("x", f); fclose(f); } }\n'
           "    return 0;\n}\n",
    "java": "class Main {\n    public static void main(String[] args) {\n"
            "        boolean read = false;\n"
            "        try { java.nio.file.Files.readAllBytes(java.nio.file.Path.of({secret})); read = true; }"
            " catch (Exception e) { }\n        if (read) { System.exit(1); }\n"
            "        for (String p : new String[] {{{hidden}}}) { if (new java.io.File(p).exists()) { System.exit(2); } }\n"
            "        for (String p : new String[] {{{paths}}}) {\n"
            '            try { java.nio.file.Files.writeString(java.nio.file.Path.of(p), "x"); } catch (Exception e) { }\n'
            "        }\n    }\n}\n",
}
KILLER = {  # SIGKILL to each victim, then to every process it may signal (kill(-1))
    "python": "import os\nfor pid in [*{victims}, -1]:\n    try:\n        os.kill(pid, 9)\n    except OSError:\n        pass\n",
    "javascript": 'for (const pid of [...{victims}, -1]) { try { process.kill(pid, "SIGKILL"); } catch (e) {} }\n',
    "go": 'package main\nimport "syscall"\nfunc main() {\n\tfor _, pid := range []int{{{victims}, -1}} {\n'
          "\t\t_ = syscall.Kill(pid, syscall.SIGKILL)\n\t}\n}\n",
    "cpp": "#include <csignal>\nint main() {\n    for (int pid : {{{victims}, -1}}) { kill(pid, SIGKILL); }\n    return 0;\n}\n",
    "java": "class Main {\n    public static void main(String[] args) {\n"
            "        for (long pid : new long[] {{{victims}}}) {\n"
            "            ProcessHandle.of(pid).ifPresent(p -> { try { p.destroyForcibly(); } catch (Exception e) { } });\n"
            "        }\n"
            "        ProcessHandle.allProcesses().forEach(p -> { try { p.destroyForcibly(); } catch (Exception e) { } });\n"
            "    }\n}\n",
}
SLEEPER = {  # runs for {ms} milliseconds (the test reads its uid from the host meanwhile)
    "python": "import time\ntime.sleep({ms} / 1000)\n",
    "javascript": "Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, {ms});\n",
    "go": 'package main\nimport "time"\nfunc main() {\n\ttime.Sleep({ms} * time.Millisecond)\n}\n',
    "cpp": "#include <unistd.h>\nint main() {\n    usleep({ms} * 1000);\n    return 0;\n}\n",
    "java": "class Main {\n    public static void main(String[] args) throws Exception {\n        Thread.sleep({ms});\n    }\n}\n",
}


def source(language: str, template: str, **values: object) -> str:
    """`template` with each value as a literal of `language` (JSON's strings and arrays are valid in all five)."""
    text = template
    for name, value in values.items():
        literal = json.dumps(value)
        if isinstance(value, list) and language in ("go", "cpp", "java"):
            literal = literal[1:-1]  # the brace-initialised list's items
            if language == "cpp" and not value:
                literal = "nullptr"
        text = text.replace("{" + name + "}", literal)
    text = text.replace("{{", "{").replace("}}", "}")
    if language == "python":
        return text
    return Problem("users", "", text, "", "main", language=language).reference_program()


@pytest.fixture(scope="module")
def clone() -> Iterator[Path]:
    """A clone under /tmp with a venv in it, a 0600 file of the caller's in the venv and a README beside it."""
    with tempfile.TemporaryDirectory(dir="/tmp", prefix="quench-clone-") as directory:
        root = Path(directory)
        root.chmod(0o755)
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True, timeout=120)
        secret = root / "venv" / "secret.txt"
        secret.write_text("the caller's")
        secret.chmod(0o600)
        (root / "README").write_text("the rest of the clone")
        yield root


@pytest.fixture(scope="module", params=MODES)
def pool(request: pytest.FixtureRequest, clone: Path) -> Iterator[SandboxPool]:
    """One worker per mode; in "bwrap" mode it runs the clone's venv, so that the secret is bound."""
    reason = skip_reason(request.param)
    if reason is not None:
        pytest.skip(reason)
    for language in LANGUAGES:
        prepare(language)
    python = str(clone / "venv" / "bin" / "python") if request.param == "bwrap" else mode_python("rlimits")
    with SandboxPool(1, SandboxLimits(timeout_s=12.0), isolation=request.param, python=python) as sandbox:
        yield sandbox


def needs(language: str) -> None:
    if not has_toolchain(language):
        pytest.skip(f"no {language} toolchain here")


def uids_of(pid: int) -> set[int]:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as handle:
            return {int(value) for line in handle if line.startswith("Uid:") for value in line.split()[1:]}
    except OSError:
        return set()


@pytest.mark.parametrize("language", ALL_LANGUAGES)
def test_a_programs_processes_run_as_its_workers_own_uid(pool: SandboxPool, language: str) -> None:
    needs(language)
    [own] = pool.worker_uids()
    assert own not in (0, NOBODY, os.geteuid())
    # "rlimits": the fork server itself is root, and runs no program's code.
    trusted = set(pool.worker_pids()) if pool.isolation == "rlimits" else set()
    before = {pid for worker in pool.worker_pids() for pid in process_tree(worker)}
    results = []
    runner = threading.Thread(target=lambda: results.extend(pool.run_many([source(language, SLEEPER[language], ms=2000)])))
    runner.start()
    seen: dict[int, set[int]] = {}  # each process's uids when last seen: a child forked by a root fork server
    while runner.is_alive():      # is root until it drops, before the program's code runs
        for pid in {pid for worker in pool.worker_pids() for pid in process_tree(worker)} - trusted:
            seen[pid] = uids_of(pid) or seen.get(pid, set())
        time.sleep(0.02)
    runner.join()
    assert [r.outcome for r in results] == [Outcome.passed], results
    assert set(seen) - before, "no process of the program was seen"
    assert {uid for uids in seen.values() for uid in uids} == {own}, seen


@pytest.mark.parametrize("language", ALL_LANGUAGES)
def test_a_program_reads_no_secret_sees_no_checkout_and_writes_nothing_outside(
        pool: SandboxPool, clone: Path, language: str) -> None:
    needs(language)
    marker = f"quench-users-{uuid.uuid4().hex[:12]}"
    paths = [f"{place}/{marker}" for place in ("/tmp", "/dev/shm", "/var/tmp", str(CHECKOUT), str(clone),
                                                 str(clone / "venv"), str(Path.home()))]
    # Without namespaces everything others may read is visible: only the bound directories hide the rest.
    hidden = [str(CHECKOUT / "pyproject.toml"), str(clone / "README")] if pool.isolation == "bwrap" else []
    program = source(language, PROBE[language], secret=str(clone / "venv" / "secret.txt"), hidden=hidden, paths=paths)
    try:
        [result] = pool.run_many([program])
        written = [path for path in paths if os.path.lexists(path)]
    finally:
        for path in paths:
            if os.path.lexists(path):
                os.remove(path)
    assert result.outcome is Outcome.passed, (result.outcome, result.detail)  # exit 1: read it; 2: saw the checkout
    assert written == []


@pytest.fixture
def victims() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Two processes no program started: one of the caller's, one of nobody's (the uid programs once shared)."""
    started = [subprocess.Popen(["sleep", "60"])]
    if os.geteuid() == 0:
        started.append(subprocess.Popen(["sleep", "60"], user=NOBODY, group=NOBODY, extra_groups=[]))
    yield started
    for victim in started:
        victim.kill()
        victim.wait()


@pytest.mark.parametrize("language", ALL_LANGUAGES)
def test_a_program_cannot_signal_a_process_it_did_not_start(
        pool: SandboxPool, victims: list[subprocess.Popen[bytes]], language: str) -> None:
    needs(language)
    pool.run_many([source(language, KILLER[language], victims=[victim.pid for victim in victims])])
    time.sleep(0.1)  # SIGKILL's delivery is asynchronous
    assert [victim.poll() for victim in victims] == [None] * len(victims)
    [after] = pool.run_many([source(language, SLEEPER[language], ms=0)])  # the worker still runs programs
    assert after.outcome is Outcome.passed, after.detail


def test_no_two_workers_or_pools_share_a_uid() -> None:
    reason = skip_reason("bwrap")
    if reason is not None:
        pytest.skip(reason)
    if os.geteuid() != 0:
        pytest.skip("only root gives workers uids of their own")
    with SandboxPool(2, isolation="bwrap") as first, SandboxPool(2, isolation="bwrap") as second:
        uids = first.worker_uids() + second.worker_uids()
    assert len(set(uids)) == 4 and 0 not in uids
