"""MBXP's languages: how a problem's program is put together and how it is built and run.

A program is `prompt + completion + test`, as MBXP (amazon-science/mxeval) defines it; the test
harness's `main` exits non-zero when a case fails. For every language but Python the program
handed to the sandbox is a small Python *launcher* that writes the source into the program's
fresh scratch directory, builds it and runs it there, so the build and the run share the
sandbox, limits and outcome enum of Python programs. A build that fails raises `CompileError`
(the `compile_error` outcome); a run that exits non-zero raises `ProgramFailed` (`failed`).

Per language:
- JavaScript: run in a fresh V8 context by the sandbox worker's warm node (the host: the launcher
  starts with HOST_MARK, which gives it the host's pipes; quench.execution.node_host and
  node_host.js), which tells a syntax error (a compile error, worded and confirmed by `node --check`)
  from a failed test itself. A program the host declines (one that may use what a context lacks:
  `process`, timers, modules but lodash, ...) runs as `node main.js`, started from the prepared start-up snapshot with lodash loaded when
  there is one for this node binary (quench.execution.toolchains); when that fails naming a
  SyntaxError (or a RangeError), `node --check main.js` tells a syntax error from a failed test.
  The harness needs lodash (Debian `node-lodash`, on NODE_PATH).
- Go: the compiler and linker against the precompiled standard library of the Go installation,
  with `go run`'s flags (no debug information or symbol table) but without the go command, its
  build cache or a garbage collector in either tool; `go build` with a private cache where the
  installation ships no precompiled library. A build that fails is redone as `go build`, whose
  verdict and diagnostics are reported (as every shortcut's, they are the plain toolchain's).
- C++: `g++ main.cpp` (mxeval's flags), with a shared read-only precompiled `bits/stdc++.h`
  when one has been prepared (quench.execution.toolchains); a build that fails is redone without it,
  and the plain build's verdict and diagnostics are reported.
- Java: one JVM compiles and runs the source (`java Main.java`, the single-file launcher), with a
  prepared class-data archive of the launcher's classes (javac's) when there is one; the harness's
  `class Main` goes first, after the imports, because the launcher runs the first class.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
from dataclasses import dataclass, field

from quench.datasets.harness import CPP_HARNESS_OBJECT, Harnessed, cpp_program, go_program, java_test, javascript_program

LAUNCHER = '''\
import json, os, shutil, signal

HOST = ["<host>"]  # run command: main.js run by the sandbox's warm node in a fresh context
HOST_FDS = (4, 5)  # its requests and answers, in a program whose text starts with HOST_MARK
TOKEN_FD, REPORT_FD = 3, 4  # in a harnessed program's process: the harness's token, and its report
SOURCES = SOURCE_FILES  # what the builds compile, in order (a harnessed program's harness file first)
SCRIPT = SCRIPT_FILE  # what node starts: a harnessed program's runner.js

class ExitedEarly(Exception):
    pass

class CompileError(Exception):
    pass

class ProgramFailed(Exception):
    pass

def tail(path, size=200):
    with open(path, "rb") as handle:
        handle.seek(max(0, os.path.getsize(path) - size))
        return handle.read().decode("utf-8", "replace")

def head(path, size=280):  # the first error comes first; the sandbox keeps 300 characters of detail
    with open(path, "rb") as handle:
        return handle.read(size).decode("utf-8", "replace").strip()

def spawn(argv, env, out, err=None, channel=()):
    """Exit status of `argv` (negative: the signal that killed it), stdin empty, stdout to the file
    `out`, stderr to `err` or with stdout, and each (fd, target) of `channel` at its target. What
    subprocess.run does (SIGPIPE and SIGXFSZ back to their defaults), without the milliseconds
    importing subprocess costs every program."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    actions = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0), (os.POSIX_SPAWN_OPEN, 1, out, flags, 0o644),
               (os.POSIX_SPAWN_OPEN, 2, err, flags, 0o644) if err else (os.POSIX_SPAWN_DUP2, 1, 2)]
    actions += [(os.POSIX_SPAWN_DUP2, fd, target) for fd, target in channel]
    pid = os.posix_spawnp(argv[0], argv, env, file_actions=actions, setsigdef=(signal.SIGPIPE, signal.SIGXFSZ))
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])

def run(argv, log, env):
    return spawn(argv, env, log)

def above(fd, lowest):
    """`fd` moved to a descriptor above `lowest` (dup2's targets in the child), without importing fcntl."""
    held = []
    while fd <= lowest:
        held.append(fd)
        fd = os.dup(fd)
    for low in held:
        os.close(low)
    return fd

def run_program(argv, env, reported):
    """(exit status, report) of the program's run. `reported`: it gets a fresh token to read on
    TOKEN_FD (the write end closed) and REPORT_FD to write to; report is True when exactly
    token + "P" came back, else what came (b"": nothing). Else report is None."""
    if not reported:
        return spawn(argv, env, os.devnull, "run.log"), None
    token = os.urandom(16)
    token_r, token_w = os.pipe()
    report_r, report_w = os.pipe()
    os.write(token_w, token)
    os.close(token_w)
    high = [above(fd, REPORT_FD) for fd in (token_r, report_w)]  # clear of the targets
    try:
        status = spawn(argv, env, os.devnull, "run.log", ((high[0], TOKEN_FD), (high[1], REPORT_FD)))
    finally:
        os.close(high[0])
        os.close(high[1])
    os.set_blocking(report_r, False)  # what is there now: a process the program left may hold the pipe
    report = b""
    try:
        while len(report) <= 4096 and (chunk := os.read(report_r, 4096)):
            report += chunk
    except BlockingIOError:
        pass
    os.close(report_r)
    return status, report == token + b"P" or report

def judge_report(report):
    """A run that exited with status 0: nothing unless its harness did not report exactly once."""
    if report is None or report is True:
        return
    if not report:
        raise ExitedEarly("exited with status 0 before the tests finished (no report from the test harness)")
    raise ProgramFailed("wrote to the test harness's report channel: not the harness's report")

def host_answer(err):
    """What the sandbox's warm node (the host) says of running main.js, its error text in the file
    `err`: {"status"} (and "syntax" when it does not parse), {"timeout"}; None when it did not run
    it (no host, it declined the program, or it ended before it answered): then node starts."""
    try:
        os.set_inheritable(HOST_FDS[0], False)  # builds and fallbacks never see the host
        os.set_inheritable(HOST_FDS[1], False)
        ident = os.urandom(8).hex()
        request = {"id": ident, "cwd": os.getcwd(), "main": "main.js", "stderr": os.path.abspath(err)}
        data = (json.dumps(request) + "\\n").encode()
        while data:
            data = data[os.write(HOST_FDS[0], data):]
        buffer = b""
        while True:
            while b"\\n" not in buffer:
                chunk = os.read(HOST_FDS[1], 65536)
                if not chunk:
                    return None
                buffer += chunk
            line, _, buffer = buffer.partition(b"\\n")
            answer = json.loads(line)
            if answer.get("id") == ident:
                return answer if "status" in answer or "timeout" in answer else None
    except (OSError, ValueError):
        return None

def mentions(path, words):
    with open(path, "rb") as handle:
        text = handle.read()
    return any(word.encode() in text for word in words)

def built(builds, env):
    return all(run(build, "build.log", env) == 0 for build in builds)

def write(name, text):
    with open(name, "w", encoding="utf-8") as handle:
        handle.write(text)

def build_and_run(source, name, builds, command, env, build_env, compile_mark, syntax_check, syntax_marks,
                  fallback=(), fallback_marks=(), plain_builds=None, harness=(), removed=(), reported=False):
    """`harness`: the harness's other files, (name, text); `reported`: the program passes only with its
    harness's report (TOKEN_FD, REPORT_FD)."""
    try:
        os.set_inheritable(3, False)  # the sandbox's result pipe stays with the launcher
    except OSError:
        pass
    env = {**os.environ, **env}
    write(name, source)
    for extra, text in harness:
        write(extra, text)
    builder = {**env, **{key: value.replace("{cwd}", os.getcwd()) for key, value in build_env.items()}}
    # a prepared build that fails is redone plainly: its verdict and diagnostics are the plain toolchain's
    if not built(builds, builder) and (plain_builds in (None, builds) or not built(plain_builds, builder)):
        raise CompileError(head("build.log"))
    for built_from in removed:  # the program cannot read its tests' source
        if os.path.exists(built_from):
            os.unlink(built_from)
    answer = host_answer("run.log") if command == HOST else None
    if answer is not None and answer.get("syntax") and run(syntax_check, "check.log", env) == 0:
        answer = None  # node parses what the host could not: node runs it
    if answer is not None:
        while answer.get("timeout"):  # the sandbox's deadline ends this run, as it would node's
            signal.pause()
        if answer.get("syntax"):  # in `node --check`'s words, not the host's
            raise CompileError(head("check.log"))
        if answer["status"] != 0:
            raise ProgramFailed(f"exit status {answer['status']}: {head('run.log')}")
        return
    command = node_start() if command == HOST else command
    status, report = run_program(command, env, reported)
    if status != 0 and fallback and list(fallback) != command and mentions("run.log", fallback_marks):
        status, report = run_program(list(fallback), env, reported)  # a prepared start this tool refuses: the plain one
    if status != 0:
        text = head("run.log")
        if compile_mark and compile_mark in tail("run.log"):
            raise CompileError(text)
        # only a failed run that names a parse error pays for the check
        if syntax_check and mentions("run.log", syntax_marks):
            write(name, source)  # its runtime may have removed it
            if run(syntax_check, "check.log", env) != 0:
                raise CompileError(head("check.log"))
        how = f"killed by signal {-status}" if status < 0 else f"exit status {status}"
        raise ProgramFailed(f"{how}: {text}" if text else how)
    judge_report(report)
'''


@dataclass(frozen=True)
class Language:
    """One MBXP language: its benchmark name, data file and toolchain."""

    name: str  # "javascript", "go", "cpp", "java"
    benchmark: str  # "mbjsp", "mbgp", "mbcpp", "mbjp"
    data_file: str  # under quench/datasets/data
    source_name: str  # the file the program is written to
    fences: tuple[str, ...]  # code-fence tags of chat answers, e.g. ("javascript", "js")
    line_comment: str  # "//"
    tool: str  # the executable a machine needs (tests skip the language without it)


LANGUAGES: dict[str, Language] = {
    "javascript": Language("javascript", "mbjsp", "mbjsp_release_v1.2.jsonl", "main.js", ("javascript", "js", "node"),
                           "//", "node"),
    "go": Language("go", "mbgp", "mbgp_release_v1.1.jsonl", "main.go", ("go", "golang"), "//", "go"),
    "cpp": Language("cpp", "mbcpp", "mbcpp_release_v1.2.jsonl", "main.cpp", ("cpp", "c++", "cc", "cxx"), "//", "g++"),
    "java": Language("java", "mbjp", "mbjp_release_v1.2.jsonl", "Main.java", ("java",), "//", "java"),
}
BENCHMARK_LANGUAGES = {language.benchmark: language.name for language in LANGUAGES.values()}
NODE_PATH = "/usr/share/nodejs:/usr/lib/nodejs:/usr/lib/node_modules:/usr/local/lib/node_modules"
# Node prints a file it cannot parse as one of these (V8's early errors are SyntaxErrors; code nested
# past the parser's stack is a RangeError); a failed run that names neither ran, so it parsed.
NODE_PARSE_ERRORS = ("SyntaxError", "RangeError")
# What node prints for a start-up snapshot built by another node or V8 configuration (exit status 14),
# or for a file that is no snapshot at all (an assertion, SIGABRT).
NODE_SNAPSHOT_REFUSED = ("Failed to load the startup snapshot", "node::SnapshotData::FromBlob")
# A JVM inside the address-space limit: small fixed reservations, one GC thread, no JIT tiers
# beyond C1 (the programs are tiny; start-up dominates).
JAVA_FLAGS = ("-Xss8m", "-Xmx512m", "-XX:ReservedCodeCacheSize=64m", "-XX:CompressedClassSpaceSize=64m",
              "-XX:MaxMetaspaceSize=128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData",
              "-Xshare:auto")
# The plain builds (mxeval's g++ flags; `go build` with GO_BUILD_ENV's private cache): what a build from the
# prepared cache must equal, and what the launcher redoes when that build fails.
CPP_PLAIN_BUILD = ["g++", "main.cpp", "-o", "main"]
GO_PLAIN_BUILD = ["go", "build", "-o", "main", "main.go"]
JAVA_COMPILE_MARK = "error: compilation failed"  # the single-file launcher's last line when javac fails
# The Go compiler and linker are short-lived and allocate little: without a collector they do the
# same work in less CPU time, and GOMEMLIMIT brings the collector back should a build grow past it.
# Only the build sees these (the program runs with Go's defaults); `go build`, the fallback, keeps
# its cache in the scratch directory.
GO_BUILD_ENV = {"GOGC": "off", "GOMEMLIMIT": "512MiB", "GOCACHE": "{cwd}/gocache", "GOPATH": "{cwd}/gopath",
                "GO111MODULE": "off", "CGO_ENABLED": "0", "GOFLAGS": ""}


# Built into the snapshot: lodash, evaluated as its CommonJS wrapper would (with `require` for its
# `util.types` probe). At start-up it is registered in the module cache under the path
# `require("lodash")` resolves to, unless that file changed since (then it loads from the file, as
# without a snapshot), and the program runs as `node main.js` runs it (Module.runMain). Nothing else
# of the module system is touched while building: node does not support snapshotting it.
NODE_SNAPSHOT_ENTRY = """'use strict';
const { readFileSync, statSync } = require('fs');
const { startupSnapshot } = require('v8');
const LODASH = LODASH_PATH;
const stamp = (info) => info ? info.size + ':' + info.mtimeMs : '';
const built = stamp(statSync(LODASH));
const lodash = { exports: {}, require };
new Function('exports', 'require', 'module', readFileSync(LODASH, 'utf8') + '\\n//# sourceURL=' + LODASH)(
  lodash.exports, require, lodash);
startupSnapshot.setDeserializeMainFunction(() => {
  const path = require('path');
  const Module = require('module');
  if (stamp(statSync(LODASH, { throwIfNoEntry: false })) === built) {
    const cached = new Module(LODASH, null);
    cached.filename = LODASH;
    cached.paths = Module._nodeModulePaths(path.dirname(LODASH));
    cached.exports = lodash.exports;
    cached.loaded = true;
    Module._cache[LODASH] = cached;
  }
  process.argv[1] = path.resolve(process.argv[1]);
  Module.runMain();
});
"""
NODE_SNAPSHOT_TAG = hashlib.sha256(NODE_SNAPSHOT_ENTRY.encode()).hexdigest()[:12]
# The first line of a JavaScript launcher: the fork server hands such a program the pipes of its
# warm node (quench.execution.node_host), which runs the program in a fresh context.
HOST_MARK = "# quench: javascript host\n"


def node_snapshot_path(cache: str, node: str) -> str:
    """Where the start-up snapshot prepared for the node binary `node` lives in the build cache `cache`.

    Named after the binary's size and modification time (a blob only starts the node that built it,
    so an upgraded node finds no snapshot and starts the plain way) and after the script it was
    built from (NODE_SNAPSHOT_TAG).
    """
    info = os.stat(os.path.realpath(node))
    return f"{cache}/javascript/node-{info.st_size}-{info.st_mtime_ns}-{NODE_SNAPSHOT_TAG}.blob"


def node_snapshot_entry(lodash: str) -> str:
    """The script a start-up snapshot is built from, loading lodash from the file `lodash`."""
    return NODE_SNAPSHOT_ENTRY.replace("LODASH_PATH", json.dumps(lodash))


def language_of(benchmark: str) -> str:
    """The language of a benchmark name ("mbjsp" → "javascript"); "python" for anything else."""
    return BENCHMARK_LANGUAGES.get(benchmark, "python")


def java_source(prompt: str, completion: str, test: str) -> str:
    """Imports, then the harness (its `class Main` must be the first class), then the solution."""
    lines = prompt.splitlines(keepends=True)
    head = 0
    while head < len(lines) and (lines[head].startswith("import ") or not lines[head].strip()):
        head += 1
    return "".join(lines[:head]) + test.lstrip("\n") + "\n\n" + "".join(lines[head:]) + completion + "\n"


def harnessed(language: str, prompt: str, completion: str, test: str) -> Harnessed:
    """The program with its test harness (quench.datasets.harness): a pass is the harness's report."""
    if language == "cpp":
        return cpp_program(prompt, completion, test)
    if language == "go":
        return go_program(prompt, completion, test)
    if language == "javascript":
        return javascript_program(prompt, completion, test)
    return Harnessed(((LANGUAGES[language].source_name, java_source(prompt, completion, java_test(test))),))


def source(language: str, prompt: str, completion: str, test: str) -> str:
    """The program in the problem's language (MBXP: prompt + completion + test)."""
    if language == "java":
        return java_source(prompt, completion, test)
    return prompt + completion + test


@dataclass(frozen=True)
class Toolchain:
    """How the launcher builds and runs one language's program."""

    builds: str  # launcher expression for the build commands (argv lists), run in order
    command: str  # launcher expression for the run command
    env: dict[str, str] = field(default_factory=dict)  # extra environment of every step
    build_env: dict[str, str] = field(default_factory=dict)  # extra environment of the builds only
    compile_mark: str = ""  # a failed run whose output ends with this is a compile error
    syntax_check: tuple[str, ...] = ()  # run after a failed run: failing it makes a compile error
    syntax_marks: tuple[str, ...] = ()  # ... a failed run whose output has one of these (any, if empty)
    fallback: tuple[str, ...] = ()  # the plain run command, when `command` may start from a prepared snapshot
    fallback_marks: tuple[str, ...] = ()  # ... run instead when the first run fails naming one (snapshot refused)
    plain_builds: str = "None"  # launcher expression for the builds without the cache, redone when `builds` fail


def toolchain(language: str) -> Toolchain:
    """The build and run steps of `language` (not Python)."""
    if language == "javascript":
        return Toolchain("[]", "node_command()", {"NODE_PATH": NODE_PATH},
                         syntax_check=("node", "--check", "main.js"), syntax_marks=NODE_PARSE_ERRORS,
                         fallback=("node", "main.js"), fallback_marks=NODE_SNAPSHOT_REFUSED)
    if language == "cpp":
        return Toolchain("cpp_builds()", repr(["./main"]), plain_builds=f"[with_sources({CPP_PLAIN_BUILD!r})]")
    if language == "java":
        return Toolchain("[]", "java_command()", compile_mark=JAVA_COMPILE_MARK)
    if language == "go":
        return Toolchain("go_builds()", repr(["./main"]), build_env=GO_BUILD_ENV,
                         plain_builds=f"[with_sources({GO_PLAIN_BUILD!r})]")
    raise ValueError(f"no toolchain for language {language!r}")


BUILDERS = '''
CACHE = os.environ.get("QUENCH_TOOLCHAINS", "/nonexistent")

def cpp_builds():  # the prepared precompiled bits/stdc++.h, if any (and readable), comes first on the include path
    include = ["-I", CACHE + "/cpp"] if os.access(CACHE + "/cpp", os.R_OK | os.X_OK) else []
    harness = CACHE + "/" + CPP_HARNESS_OBJECT  # harness.cpp, compiled by quench's prepare
    sources = [harness if source == "harness.cpp" and os.access(harness, os.R_OK) else source for source in SOURCES]
    return [["g++", *include, *sources, "-o", "main"]] if include else [with_sources(CPP_PLAIN_BUILD)]

def with_sources(argv):  # a plain build's argv compiling every file of SOURCES where it names the program's
    return [part for arg in argv for part in (SOURCES if arg == SOURCES[-1] else [arg])]

def java_command():  # the class-data archive of the source launcher (javac's classes), if prepared
    archive = CACHE + "/java/launcher.jsa"
    shared = ["-XX:SharedArchiveFile=" + archive] if os.path.isfile(archive) else []
    return ["java", *shared, *JAVA_FLAGS, "Main.java"]

def node_command():  # run by the sandbox's warm node if it gave us its pipes, else node_start()
    try:
        os.fstat(HOST_FDS[0])
        os.fstat(HOST_FDS[1])
        return HOST
    except OSError:
        return node_start()

def node_start():  # `node main.js` (or runner.js), from the prepared snapshot (lodash loaded) if there is one for this node
    node = shutil.which("node")
    blob = node_snapshot_path(CACHE, node) if node else ""
    return ["node", "--snapshot-blob", blob, SCRIPT] if blob and os.access(blob, os.R_OK) else ["node", SCRIPT]

def go_builds():  # what `go run` does (its compiler and linker flags), without the go command or its build cache
    goroot = os.path.dirname(os.path.dirname(os.path.realpath(shutil.which("go") or "/nonexistent/bin/go")))
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)
    tools = os.path.join(goroot, "pkg", "tool", "linux_" + arch)
    if os.path.exists(os.path.join(goroot, "pkg", "linux_" + arch, "fmt.a")) and os.path.exists(tools):
        compile = [tools + "/compile", "-p", "main", "-complete", "-nolocalimports", "-dwarf=false"]
        return [[*compile, "-o", "main.o", *SOURCES], [tools + "/link", "-s", "-w", "-o", "main", "main.o"]]
    return [with_sources(GO_PLAIN_BUILD)]
'''


# One definition of the snapshot's name, for quench and the launcher.
SNAPSHOT_PATH = f"\nNODE_SNAPSHOT_TAG = {NODE_SNAPSHOT_TAG!r}\n" + inspect.getsource(node_snapshot_path)


def launcher(language: str, program: str | Harnessed) -> str:
    """The Python program that builds and runs `program` in the sandbox's scratch directory.

    A `Harnessed` program (quench.datasets.harness) passes only when its harness reported after
    the last test; plain source text passes when it exits with status 0.
    """
    spec, steps = LANGUAGES[language], toolchain(language)
    files = program.files if isinstance(program, Harnessed) else ((spec.source_name, program),)
    (name, text), harness = files[0], files[1:]
    compiled = [extra for extra, _ in harness if extra.endswith(os.path.splitext(name)[1])] + [name]
    script = program.script if isinstance(program, Harnessed) and program.script else name
    removed = program.remove_after_build if isinstance(program, Harnessed) else ()
    fallback = [script if arg == name else arg for arg in steps.fallback]
    call = (f"build_and_run({text!r}, {name!r}, {steps.builds}, {steps.command}, {steps.env!r}, "
            f"{steps.build_env!r}, {steps.compile_mark!r}, {list(steps.syntax_check)!r}, "
            f"{list(steps.syntax_marks) or ['']!r}, {fallback!r}, {list(steps.fallback_marks)!r}, "
            f"{steps.plain_builds}, {list(harness)!r}, {list(removed)!r}, {isinstance(program, Harnessed)})\n")
    builders = (BUILDERS.replace("JAVA_FLAGS", repr(list(JAVA_FLAGS))).replace("CPP_PLAIN_BUILD", repr(CPP_PLAIN_BUILD))
                .replace("CPP_HARNESS_OBJECT", repr(CPP_HARNESS_OBJECT))
                .replace("GO_PLAIN_BUILD", repr(GO_PLAIN_BUILD)))
    mark = HOST_MARK if language == "javascript" else ""
    names = f"SOURCE_FILES = {compiled!r}\nSCRIPT_FILE = {script!r}\n"
    return mark + names + LAUNCHER + SNAPSHOT_PATH + builders + "\n" + call
