"""Building and binding the native kernels (C sources in `csrc/`): compiler flags, the build cache, and
ctypes signatures generated from the one header.

Why ctypes generated from the header, not cffi or a torch extension: both of those compile against
Python's (and torch's) headers, which a user's machine may lack and which are slow to build against;
the kernels need only a C compiler. What makes ctypes unsafe is a hand-written signature table: a
missing argument is read as garbage, an extra one is silently accepted (cdecl), an int past 32 bits is
silently truncated. Here the table is parsed from `quench_native.h`, which every unit includes (so the
compiler rejects a definition that disagrees with it), the library reports the hash of the header it
was built against (checked at load), and every call goes through `CheckedFunction`, which raises on a
wrong argument count, a wrong type or an int out of range instead of corrupting memory.

Environment: QUENCH_NATIVE_MARCH picks the build target (`quench.native_target`): unset, this CPU's highest level
(x86-64-v2, -v3, -v4, -v4-bf16, -v4-amx; armv8-a, armv8.2-a-dotprod, armv8.6-a-bf16); a level's name builds
that level (refused where the CPU lacks it); any other value is passed as -march (e.g. "native"); QUENCH_NATIVE_WERROR=1 turns compiler warnings into errors and a
failed build into an exception (CI); CC picks the compiler; QUENCH_CACHE the cache root.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from quench import trusted_files
from quench.native_target import Target, cpu_flags, cpu_identity, current_target
from quench.native_target import compiler as find_compiler

log = logging.getLogger(__name__)

CSRC = Path(__file__).parent / "csrc"
HEADER = CSRC / "quench_native.h"
WARNINGS = ("-Wall", "-Wextra")
# Per unit: its flags (-march added where listed). No unit is built with fast-math, and the units whose bits every
# build shares (attention, glue, layer loop, fixed-order and GGUF products) without FMA contraction: each fused
# step is an explicit intrinsic or fmaf, so the compiler neither reassociates nor fuses per ISA.
UNITS: dict[str, tuple[str, ...]] = {
    "rope": ("-O2", "-ffp-contract=off"),
    "attend": ("-O3", "-march", "-ffp-contract=off"),
    "glue": ("-O3", "-march", "-ffp-contract=off"),
    "gemm": ("-O3", "-march"),
    "layers": ("-O3", "-march", "-ffp-contract=off"),
    "layers_f32": ("-O3", "-march", "-ffp-contract=off"),
    "screen": ("-O3", "-march"),
    "fixed": ("-O3", "-march", "-ffp-contract=off"),
    "quant": ("-O3", "-march", "-ffp-contract=off"),
    "qdot": ("-O3", "-march", "-ffp-contract=off"),
    "qpack": ("-O3", "-march", "-ffp-contract=off"),
}
# Attention and the GEMMs split their work over torch's threads with OpenMP: built with -fopenmp, the library
# asks for libgomp.so.1 and the dynamic loader hands it the copy torch already loaded (one thread pool).
OPENMP = frozenset({"attend", "gemm", "screen", "fixed", "quant", "qdot", "qpack"})
_CTYPES = {"void": None, "int": ctypes.c_int, "int64_t": ctypes.c_int64, "float": ctypes.c_float}
_INT_RANGES = {ctypes.c_int: (-(2**31), 2**31 - 1), ctypes.c_int64: (-(2**63), 2**63 - 1)}


class NativeBuildError(RuntimeError):
    """The kernels failed to build while QUENCH_NATIVE_WERROR=1 asks for a failure, not a fallback."""


@dataclass(frozen=True)
class Signature:
    """One declaration of the header: ctypes types of the result and of each argument, with their names."""

    name: str
    restype: type | None
    argtypes: tuple[type, ...]
    argnames: tuple[str, ...]


@dataclass(frozen=True)
class Header:
    signatures: dict[str, Signature]
    constants: dict[str, int]
    digest: str  # sha256 of the header's text, first 16 hex digits


def _ctype(declared: str) -> type | None:
    """A C type of the header ("const bf16*", "int64_t", ...) -> its ctypes type; pointers are addresses."""
    if "*" in declared:
        return ctypes.c_char_p if declared.replace(" ", "") == "constchar*" else ctypes.c_void_p
    bare = declared.replace("const", "").strip()
    if bare not in _CTYPES:
        raise ValueError(f"quench_native.h: type {declared!r} has no ctypes mapping")
    return _CTYPES[bare]


def parse_header(text: str) -> Header:
    """The declarations and integer constants of `quench_native.h` (see its first comment for the grammar)."""
    constants = {name: int(value) for name, value in re.findall(r"^#define\s+(\w+)\s+(-?\d+)\b", text, re.MULTILINE)}
    code = re.sub(r"/\*.*?\*/", " ", text, flags=re.DOTALL)
    code = "\n".join(line for line in code.splitlines() if not line.lstrip().startswith("#"))
    signatures = {}
    for statement in code.split(";"):
        statement = " ".join(statement.split())
        if not statement or statement.startswith("typedef"):
            continue
        match = re.fullmatch(r"(.+?)\s*\b(\w+)\((.*)\)", statement)
        if match is None:
            raise ValueError(f"quench_native.h: cannot read the declaration {statement!r}")
        result, name, params = match.groups()
        types, names = [], []
        for param in ([] if params.strip() in ("", "void") else params.split(",")):
            declared, argname = re.fullmatch(r"(.+?)\s*(\w+)", param.strip()).groups()
            types.append(_ctype(declared))
            names.append(argname)
        signatures[name] = Signature(name, _ctype(result), tuple(types), tuple(names))
    return Header(signatures, constants, hashlib.sha256(text.encode()).hexdigest()[:16])


class CheckedFunction:
    """A C function called with exactly its declared arguments: a wrong count, type or an int that does not
    fit raises TypeError/OverflowError (ctypes alone accepts extra arguments and truncates ints)."""

    def __init__(self, function: ctypes._CFuncPtr, signature: Signature) -> None:
        function.restype = signature.restype
        function.argtypes = list(signature.argtypes)
        self.function, self.signature = function, signature
        self._ranges = [(i, _INT_RANGES[t]) for i, t in enumerate(signature.argtypes) if t in _INT_RANGES]

    def __call__(self, *args: object) -> object:
        signature = self.signature
        if len(args) != len(signature.argtypes):
            raise TypeError(f"{signature.name}() takes {len(signature.argtypes)} arguments ({len(args)} given)")
        for index, (low, high) in self._ranges:
            value = args[index]
            if isinstance(value, int) and not low <= value <= high:
                raise OverflowError(f"{signature.name}(): {signature.argnames[index]}={value} does not fit its C type")
        return self.function(*args)


class NativeLibrary:
    """The loaded kernels: each declared function as a `CheckedFunction` attribute, `constants` the header's."""

    def __init__(self, cdll: ctypes.CDLL, header: Header, path: Path, openmp: bool) -> None:
        self.path, self.openmp, self.constants = path, openmp, header.constants
        missing = [name for name in header.signatures if not hasattr(cdll, name)]
        if missing:
            raise OSError(f"{path} lacks {', '.join(missing)} declared in quench_native.h")
        for name, signature in header.signatures.items():
            setattr(self, name, CheckedFunction(getattr(cdll, name), signature))
        built_against = self.quench_native_header().decode()
        if built_against != header.digest:
            raise OSError(f"{path} was built against another quench_native.h ({built_against}, expected {header.digest})")


@dataclass(frozen=True)
class BuildResult:
    """The library, or why there is none (for the log and `quench doctor`)."""

    library: NativeLibrary | None
    reason: str  # "" when built
    march: str


def target() -> Target:
    """The build target: QUENCH_NATIVE_MARCH, else this CPU's highest level (`quench.native_target`)."""
    return current_target()


def march() -> str:
    """The build target's name (a level, or the raw -march value)."""
    return target().name


def strict() -> bool:
    return os.environ.get("QUENCH_NATIVE_WERROR") == "1"


def unit_flags(name: str, level_flags: tuple[str, ...] | None = None) -> list[str]:
    """Compiler flags of one unit (without OpenMP); level_flags in place of -march (default: the build target's)."""
    level_flags = target().compiler_flags if level_flags is None else level_flags
    flags = [part for flag in UNITS[name] for part in (level_flags if flag == "-march" else (flag,))]
    return [*flags, *WARNINGS, *(["-Werror"] if strict() else [])]


def cache_key(compiler: str, header: Header, cpu: str) -> str:
    """The library's name in the cache: its sources, every unit's flags, the compiler and, for a raw -march
    value (e.g. native), the CPU (cpu_identity); a level's build is the same on every CPU of that level."""
    cpu = cpu if target().level is None else ""
    sources = "".join(path.name + path.read_text() for path in sorted(CSRC.glob("*.[ch]")))
    flags = repr([(name, unit_flags(name)) for name in UNITS]) + repr(sorted(OPENMP))
    identity = compiler + platform.machine() + cpu
    return hashlib.sha256((sources + flags + identity + header.digest).encode()).hexdigest()[:16]


def build(cache_dir: Path, system: str | None = None) -> BuildResult:
    """Build (or reuse from cache_dir) and load the kernels; a failure is logged with the compiler's message.
    system: the OS name as platform.system() gives it (the kernels are built on Linux only)."""
    system = platform.system() if system is None else system
    if system != "Linux":
        reason = f"native kernels are built on Linux only (this is {'macOS' if system == 'Darwin' else system})"
        log.info("%s; using PyTorch's kernels", reason)
        return BuildResult(None, reason, march())
    compiler = find_compiler()
    if compiler is None:
        reason = f"no C compiler (looked for $CC={os.environ.get('CC', 'cc')}, gcc, clang)"
        log.warning("%s; using PyTorch's kernels", reason)
        return BuildResult(None, reason, march())
    chosen = target()
    if chosen.refused:
        if strict():
            raise NativeBuildError(f"QUENCH_NATIVE_MARCH={chosen.name}: {chosen.refused}")
        log.warning("QUENCH_NATIVE_MARCH=%s: %s; using PyTorch's kernels", chosen.name, chosen.refused)
        return BuildResult(None, chosen.refused, chosen.name)
    header = parse_header(HEADER.read_text())
    target_path = cache_dir / f"quench-native-{cache_key(compiler, header, cpu_identity())}.so"
    try:
        openmp = _ensure_built(compiler, header, target_path)
        return BuildResult(NativeLibrary(ctypes.CDLL(str(target_path)), header, target_path, openmp), "", chosen.name)
    except UntrustedCacheError as error:
        if strict():
            raise NativeBuildError(str(error)) from error
        log.error("%s; using PyTorch's kernels", error)
        return BuildResult(None, str(error), chosen.name)
    except (OSError, subprocess.CalledProcessError) as error:
        message = error.stderr.strip()[-2000:] if isinstance(error, subprocess.CalledProcessError) else str(error)
        if strict():
            raise NativeBuildError(f"the native kernels failed to build: {message}") from error
        log.warning("the native kernels failed to build; using PyTorch's kernels. The compiler said:\n%s", message)
        return BuildResult(None, f"build failed: {_first_error(error, message)}", chosen.name)


def _first_error(error: Exception, message: str) -> str:
    """The compiler's first error line (else its last line), after the source it was compiling."""
    lines = message.splitlines()
    first = next((line for line in lines if "error" in line.lower()), lines[-1] if lines else str(error))
    source = next((Path(arg).name for arg in getattr(error, "cmd", ()) if str(arg).endswith(".c")), "")
    return f"{source}: {first}" if source else first


def _ensure_built(compiler: str, header: Header, target: Path) -> bool:
    """Compile and link into target unless a trusted copy is cached (`cached_library_problem`): with OpenMP
    where the compiler has it. Returns whether the library uses OpenMP (a marker file next to a cached library
    records it). Raises UntrustedCacheError where the cache directory is not this user's alone."""
    marker = target.with_suffix(".serial")
    directory_problem = trusted_files.owner_problem(os.stat(target.parent)) if target.parent.is_dir() else None
    if directory_problem:
        raise UntrustedCacheError(f"refusing the native kernel cache: {target.parent} {directory_problem}")
    if target.exists():
        problem = cached_library_problem(target)
        if not problem:
            return not marker.exists()
        log.warning("rebuilding the native kernels: %s", problem)
    try:
        _compile(compiler, header, target, openmp=True)
        marker.unlink(missing_ok=True)
        return True
    except subprocess.CalledProcessError as error:  # a failure without OpenMP too is reported with its own message
        log.info("building the native kernels with OpenMP failed (%s); building them single-threaded", error.stderr[-300:])
    target.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()
    _compile(compiler, header, target, openmp=False)
    return False


class UntrustedCacheError(OSError):
    """The kernel cache directory is not this user's alone (owner or mode): nothing in it is loaded."""


def cached_library_problem(library: Path) -> str:
    """Why a cached library must not be loaded ("" when it may): `trusted_files`' rules under its directory."""
    return trusted_files.problem(library, library.parent) or ""


def _compile(compiler: str, header: Header, target: Path, openmp: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        objects = []
        for name in UNITS:
            obj = Path(tmp) / f"{name}.o"
            extra = ["-fopenmp"] if openmp and name in OPENMP else []
            command = [compiler, "-c", "-fPIC", *unit_flags(name), *extra, f"-I{CSRC}",
                       f"-DQUENCH_NATIVE_HEADER_HASH={header.digest}", str(CSRC / f"{name}.c"), "-o", str(obj)]
            done = subprocess.run(command, check=True, capture_output=True, text=True)
            if done.stderr:  # warnings (errors under QUENCH_NATIVE_WERROR=1)
                log.debug("compiling %s.c: %s", name, done.stderr)
            objects.append(str(obj))
        target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.{os.getpid()}.tmp")  # beside target: the rename is atomic
        link = ["-fopenmp"] if openmp else []
        try:
            subprocess.run([compiler, "-shared", *objects, "-o", str(partial), *link, "-lm"], check=True,
                           capture_output=True, text=True)
            os.chmod(partial, 0o755)
            trusted_files.record(partial, kept_as=target)
            os.replace(partial, target)  # a racing build writes the same bytes and the same digest
        finally:
            partial.unlink(missing_ok=True)
