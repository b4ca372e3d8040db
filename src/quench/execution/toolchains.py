"""Toolchains of MBXP's languages: what a machine has, and the shared read-only build cache.

The cache directory (`QUENCH_TOOLCHAINS`, default `~/.cache/quench/toolchains`) is prepared once,
outside the sandbox, from trusted inputs only, and is bound read-only into every sandbox: a
program can read it but never change what the next program sees. It holds a precompiled
`bits/stdc++.h` (every MBCPP program includes it; parsing it is most of g++'s time), the C++ test
harness compiled (quench.datasets.harness; every harnessed C++ program links it), a
class-data archive of the classes Java's source launcher loads (javac's: most of a JVM's start),
a Node.js start-up snapshot with lodash loaded (every MBJSP harness requires it; loading its
545 kB is most of what a program adds to node's own start), and the JavaScript host: the script of
the warm node that each sandbox worker keeps and that runs each program in a fresh V8 context
(node_host.js), checked here against plain node before it is kept, so that most programs pay for
no node start at all. Go needs nothing prepared: Debian's Go ships its precompiled standard library.

Each of these is loaded only when this user made it (quench.trusted_files): owned by the effective
uid, writable by no one else (nor is any directory up to the cache's root), and with the content
hash its builder recorded beside it (`<file>.sha256`). Preparing refuses a file or directory of
another user or writable by others (UntrustedFileError: an `error:` naming it) and rebuilds a file
whose hash is missing or differs; a sandbox binds the cache only when everything in it passes.
"""

from __future__ import annotations

import glob
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import time
import typing
from pathlib import Path

from quench.datasets.harness import CPP_HARNESS_OBJECT, cpp_harness
from quench.datasets.languages import JAVA_FLAGS, LANGUAGES, NODE_PATH, node_snapshot_entry, node_snapshot_path
from quench.execution.node_host import NodeHost
from quench.trusted_files import UntrustedFileError, owner_problem, ownership_problem, problem, record, sidecar
from quench.trusted_files import tree_problems

log = logging.getLogger(__name__)

ENV_VAR = "QUENCH_TOOLCHAINS"
PCH_TIMEOUT_S = PREPARE_TIMEOUT_S = 300
# Like MBJP's harness: collections, boxing, string building and an exception, so their classes are archived.
JAVA_TRAINING = """import java.util.*;

class Main {
    public static void main(String[] args) throws Exception {
        List<List<Integer>> rows = Arrays.asList(Arrays.asList(1, 2), new ArrayList<>(List.of(3)));
        Map<String, Integer> counts = new HashMap<>();
        for (List<Integer> row : rows) { counts.merge(row.toString(), row.size(), Integer::sum); }
        if (!Objects.equals(counts.get("[3]"), 1)) { throw new Exception("x = " + counts); }
    }
}
"""
# Run from the built snapshot before it is kept: lodash is the cached module and works, the program
# is the main module, a throw still fails the process.
NODE_SNAPSHOT_CHECK = """const _ = require('lodash');
if (require.main !== module || require.cache[require.resolve('lodash')].exports !== _) { process.exit(3); }
if (!_.isEqual([1, { a: new Map([[1, new Uint8Array([2])]]) }], [1, { a: new Map([[1, new Uint8Array([2])]]) }])) {
  process.exit(4);
}
console.log('snapshot ok');
"""
# Run by the host before it is kept, in order, each with what it must answer; where it runs one,
# plain node must end with the same status.
HOST_CHECKS: tuple[tuple[str, dict[str, typing.Any]], ...] = (
    ("const _ = require('lodash'); if (!_.isEqual([{a: new Map([[1, [2]]])}], [{a: new Map([[1, [2]]])}])) throw 'no';",
     {"status": 0}),
    ("const _ = require('lodash'); _.isEqual = () => true; Array.prototype.spoiled = 1; spoiled = 1;", {"status": 0}),
    ("const _ = require('lodash'); if (_.isEqual(1, 2) || [].spoiled || typeof spoiled !== 'undefined') throw 'spoiled';",
     {"status": 0}),
    ("throw 'Error at 1th assert statement';", {"status": 1}),
    ("function f(n) { return n ? f(n - 1) + 1 : 0; } f(1e7);", {"status": 1}),
    ("function (", {"status": 1, "syntax": True}),
    ("process.exit(3);", {"declined": "names `process`"}),
    ("for (;;) {}", {"timeout": True}),
)
HOST_CHECK_TIMEOUT_MS = 1000
MIN_PCH_BYTES = 1 << 20  # a real precompiled bits/stdc++.h is tens of MB; anything smaller is rebuilt


def toolchain_dir() -> str:
    """Where the shared build cache lives (absolute; it need not exist)."""
    configured = os.environ.get(ENV_VAR)
    if configured:
        return os.path.abspath(configured)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(os.path.abspath(cache), "quench", "toolchains")


def sandbox_binds() -> list[str]:
    """Paths outside the system directories that programs' toolchains read: bound read-only if present.

    The cache directory, when all it holds is trusted (else left out, with a warning: programs build
    and start the plain way), and the JDK's configuration, which Debian keeps under /etc.
    """
    untrusted = tree_problems(Path(toolchain_dir()))
    for path, reason in untrusted[:3]:
        log.warning("not binding the build cache: %s %s (quench's prepare rebuilds or refuses it)", path, reason)
    return [*([] if untrusted else [toolchain_dir()]), *sorted(glob.glob("/etc/java-*"))]


def reusable(target: Path) -> bool:
    """Whether the cached `target` may be loaded as it is; False when it must be (re)built.

    Raises UntrustedFileError when it, its recorded hash or a directory up to the cache's root is
    another user's or writable by others; a missing or different hash means rebuild.
    """
    if not os.path.lexists(target):
        return False
    root = Path(toolchain_dir())
    for path in (target, sidecar(target)):
        reason = ownership_problem(path, root) if os.path.lexists(path) else None
        if reason is not None:
            raise UntrustedFileError(path, reason)
    reason = problem(target, root)
    if reason is not None:
        log.warning("%s %s: rebuilding it", target, reason)
    return reason is None


def keep(built: Path, target: Path) -> None:
    """Move a finished build into the cache: readable by programs, its hash recorded first."""
    built.chmod(0o644)
    record(built, kept_as=target)
    os.replace(built, target)  # atomic: a concurrent reader sees the whole file or none


def has_toolchain(language: str) -> bool:
    """Whether this machine can build and run programs of `language` (Python always)."""
    if language == "python":
        return True
    if shutil.which(LANGUAGES[language].tool) is None:
        return False
    if language == "javascript":  # MBJSP's harness compares with lodash
        return any(os.path.isdir(os.path.join(path, "lodash")) for path in
                   ("/usr/share/nodejs", "/usr/lib/nodejs", "/usr/lib/node_modules", "/usr/local/lib/node_modules"))
    return True


def prepare(language: str) -> None:
    """Prepare the shared cache for `language` (idempotent; nothing to do for Go), then check all it holds."""
    if language == "python":
        return
    sweep()
    if language == "javascript" and has_toolchain("javascript"):
        prepare_node_snapshot()
        prepare_node_host()
    if language == "cpp" and shutil.which("g++"):
        prepare_cpp_header()
        prepare_cpp_harness()
    if language == "java" and shutil.which("java"):
        prepare_java_archive()
    sweep()


def cache_subdir(name: str) -> Path:
    """A directory of the cache that programs (run as nobody) can read; UntrustedFileError when it or
    one above it, up to the cache's root, is another user's or writable by others."""
    root = Path(toolchain_dir())
    parts = Path(name).parts
    for path in (root, *(root.joinpath(*parts[:n]) for n in range(1, len(parts) + 1))):
        if not path.exists():
            path.mkdir(parents=True)
            path.chmod(0o755)
        reason = owner_problem(os.stat(path) if path == root else os.lstat(path))
        if reason is not None:
            raise UntrustedFileError(path, reason)
    return root.joinpath(*parts)


def sweep() -> None:
    """Refuse the cache if anything in it is another user's or writable by others (UntrustedFileError);
    remove this user's files that no builder recorded or that changed (their next preparation rebuilds them)."""
    root = Path(toolchain_dir())
    for path, reason in tree_problems(root):
        if path.is_dir() or not path.is_file() or ownership_problem(path, root) is not None:
            raise UntrustedFileError(path, reason)
        log.warning("removing %s from the build cache: it %s", path, reason)
        path.unlink()
        sidecar(path).unlink(missing_ok=True)


def build_into(target: Path, command: list[str], what: str, cwd: str) -> bool:
    """Run a trusted build that writes `target`; log and return False when it fails."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=PREPARE_TIMEOUT_S, check=False, cwd=cwd)
    except (OSError, subprocess.TimeoutExpired) as err:
        log.warning("could not prepare %s (%s); programs build without it", what, err)
        return False
    if done.returncode != 0 or not target.is_file():
        log.warning("could not prepare %s: %s", what, (done.stderr or done.stdout).strip()[-300:])
        return False
    return True


def prepare_java_archive() -> Path | None:
    """A class-data archive of what the source launcher loads (javac), shared read-only by every JVM."""
    target = cache_subdir("java") / "launcher.jsa"
    if reusable(target):
        return target
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        Path(scratch, "Main.java").write_text(JAVA_TRAINING, encoding="ascii")
        built = Path(scratch) / "launcher.jsa"
        command = ["java", f"-XX:ArchiveClassesAtExit={built}", *JAVA_FLAGS, "Main.java"]
        if not build_into(built, command, "the Java launcher's class-data archive", scratch):
            return None
        keep(built, target)
    log.info("archived the Java source launcher's classes into %s", target)
    return target


def prepare_cpp_header() -> Path | None:
    """Precompile `bits/stdc++.h` with the flags programs are built with; None if g++ cannot."""
    target = cache_subdir("cpp/bits") / "stdc++.h.gch"
    if reusable(target) and target.stat().st_size >= MIN_PCH_BYTES:
        return target
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:  # same file system: os.replace
        header = Path(scratch) / "stdc++.h"
        header.write_text("#include <bits/stdc++.h>\n", encoding="ascii")
        built = Path(scratch) / "stdc++.h.gch"
        command = ["g++", "-x", "c++-header", str(header), "-o", str(built)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=PCH_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as err:
            log.warning("could not precompile bits/stdc++.h (%s); C++ programs build without it", err)
            return None
        if done.returncode != 0:
            log.warning("could not precompile bits/stdc++.h: %s", done.stderr.strip()[-300:])
            return None
        keep(built, target)
    log.info("precompiled bits/stdc++.h into %s", target)
    return target


def prepare_cpp_harness() -> Path | None:
    """Compile the C++ test harness (quench.datasets.harness) once: every program links the same object."""
    target = Path(toolchain_dir()) / CPP_HARNESS_OBJECT
    cache_subdir(str(target.parent.relative_to(toolchain_dir())))
    if reusable(target):
        return target
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:  # same file system: os.replace
        Path(scratch, "harness.cpp").write_text(cpp_harness(), encoding="ascii")
        built = Path(scratch) / "harness.o"
        if not build_into(built, ["g++", "-c", "harness.cpp", "-o", str(built)], "the C++ test harness", scratch):
            return None
        keep(built, target)
    log.info("compiled the C++ test harness into %s", target)
    return target


def node_env() -> dict[str, str]:
    """The environment of the trusted node runs that build and check the snapshot."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "NODE_PATH": NODE_PATH}


def prepare_node_snapshot() -> Path | None:
    """A start-up snapshot of node with lodash loaded, for the installed node binary; None if node cannot."""
    node = shutil.which("node")
    if node is None:
        return None
    cache_subdir("javascript")
    target = Path(node_snapshot_path(toolchain_dir(), node))
    if reusable(target):
        return target
    try:
        resolved = subprocess.run([node, "-p", "require.resolve('lodash')"], capture_output=True, text=True,
                                  timeout=PREPARE_TIMEOUT_S, check=True, env=node_env())
    except (OSError, subprocess.SubprocessError) as err:
        log.warning("could not find lodash for the node start-up snapshot (%s); programs start without it", err)
        return None
    lodash = resolved.stdout.strip()
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:  # same file system: os.replace
        entry, check, built = Path(scratch, "entry.js"), Path(scratch, "check.js"), Path(scratch, "node.blob")
        entry.write_text(node_snapshot_entry(lodash), encoding="utf-8")
        check.write_text(NODE_SNAPSHOT_CHECK, encoding="ascii")
        command = [node, "--snapshot-blob", str(built), "--build-snapshot", str(entry)]
        if not build_into(built, command, "the node start-up snapshot", scratch):
            return None
        if not runs_from(node, built, check):
            return None
        keep(built, target)
    log.info("built a node start-up snapshot with lodash loaded into %s", target)
    return target


def runs_from(node: str, blob: Path, check: Path) -> bool:
    """Whether `check` passes when node starts from `blob` (logged when it does not)."""
    command = [node, "--snapshot-blob", str(blob), str(check)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=PREPARE_TIMEOUT_S, check=False,
                              env=node_env(), cwd=check.parent)
    except (OSError, subprocess.TimeoutExpired) as err:
        log.warning("the node start-up snapshot did not run (%s); programs start without it", err)
        return False
    if done.returncode != 0 or done.stdout.strip() != "snapshot ok":
        log.warning("the node start-up snapshot failed its check (exit status %d: %s); programs start without it",
                    done.returncode, (done.stderr or done.stdout).strip()[-300:])
        return False
    return True


def node_host_script(cache: str | None = None) -> Path:
    """The JavaScript host's script in the build cache.

    Named after its source and the node binary (size, modification time), so an upgraded quench
    or node checks, and keeps, its own.
    """
    digest = hashlib.sha256(Path(__file__).with_name("node_host.js").read_bytes())
    node = shutil.which("node")
    if node is not None:
        info = os.stat(os.path.realpath(node))
        digest.update(f"{info.st_size}-{info.st_mtime_ns}".encode())
    return Path(cache or toolchain_dir()) / "javascript" / f"host-{digest.hexdigest()[:12]}" / "node_host.js"


def host_command(script: Path) -> tuple[list[str], dict[str, str]]:
    """The argv (but its last argument, the time limit in milliseconds) and extra environment of the host."""
    node = shutil.which("node") or "node"
    return [os.path.realpath(node), str(script)], {"NODE_PATH": NODE_PATH}


def prepare_node_host() -> Path | None:
    """Put the JavaScript host's script into the cache once it passes its checks; None if it cannot."""
    script = node_host_script()
    if shutil.which("node") is None:
        return None
    cache_subdir("javascript")
    if script.parent.exists():
        cache_subdir(f"javascript/{script.parent.name}")
    if reusable(script):
        return script
    with tempfile.TemporaryDirectory(dir=script.parent.parent) as scratch:  # same file system: os.replace
        built = Path(scratch, "host")
        built.mkdir()
        shutil.copyfile(Path(__file__).with_name("node_host.js"), built / script.name)
        if not host_passes_checks(built / script.name, Path(scratch)):
            return None
        (built / script.name).chmod(0o644)
        record(built / script.name)
        built.chmod(0o755)
        if script.parent.exists():  # one that failed its check above
            shutil.rmtree(script.parent)
        try:
            os.replace(built, script.parent)
        except OSError:  # another process kept one first
            pass
    log.info("checked the JavaScript host and kept it in %s", script.parent)
    return script


def host_passes_checks(script: Path, scratch: Path) -> bool:
    """Whether the host answers HOST_CHECKS as it must, with plain node's status (logged if not)."""
    argv, extra = host_command(script)
    null = os.open(os.devnull, os.O_RDWR)
    host = NodeHost([*argv, str(HOST_CHECK_TIMEOUT_MS)], {**node_env(), **extra}, null)
    problem = None if host.ensure() else "it did not start"
    for number, (program, expected) in enumerate(HOST_CHECKS):
        if problem is not None:
            break
        (scratch / "main.js").write_text(program, encoding="utf-8")
        request = {"id": str(number), "cwd": str(scratch), "main": "main.js", "stderr": str(scratch / "run.log")}
        answer = host.request(request, time.monotonic() + PREPARE_TIMEOUT_S) or {}
        answer.pop("id", None)
        plain = None
        if "status" in answer:
            plain = subprocess.run(["node", "main.js"], capture_output=True, timeout=PREPARE_TIMEOUT_S, check=False,
                                   env=node_env(), cwd=scratch).returncode
        if answer != expected or plain not in (None, answer.get("status")):
            problem = f"{program!r}: {answer or 'no answer'} (expected {expected}; plain node: {plain})"
    host.stop()
    os.close(null)
    if problem is not None:
        log.warning("the JavaScript host failed its check: %s; programs start node each", problem)
    return problem is None
