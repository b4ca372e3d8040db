"""The kernels of every aarch64 level, cross-compiled with Debian's gcc-aarch64-linux-gnu and checked under
qemu-user by the C self-test (tests/engine/kernels/native_selftest.c): correctness only, qemu says nothing of speed.
Every aarch64 level runs the NEON paths of the fixed-order GEMMs, the GGUF block products (float and integer) and the
fixed attention, which the self-test compares bit for bit with their written order. The same self-test also runs natively at every x86
level this machine can execute. Every build's digests of its outputs equal tests/engine/golden_digests.json: the
same bits on every CPU (written once; a difference is a bug, never a reason to rewrite the file)."""

import json
import platform
import shutil
import subprocess
from pathlib import Path

import pytest

from quench.native_target import cpu_flags, levels_of
from quench.engine.kernels.native_build import CSRC, HEADER, OPENMP, UNITS, parse_header, unit_flags

SELFTEST = Path(__file__).parent / "native_selftest.c"
GOLDEN_DIGESTS = json.loads((Path(__file__).parents[1] / "golden_digests.json").read_text())
CROSS_CC, QEMU = "aarch64-linux-gnu-gcc", "qemu-aarch64"


def unit_command(compiler: str, name: str, level_flags: tuple[str, ...], out: Path, openmp: bool) -> list[str]:
    """One unit compiled as native_build compiles it, with the level's flags in place of -march."""
    digest = parse_header(HEADER.read_text()).digest
    extra = ["-fopenmp"] if openmp and name in OPENMP else []
    return [compiler, "-c", *unit_flags(name, level_flags), "-Werror", *extra, f"-I{CSRC}",
            f"-DQUENCH_NATIVE_HEADER_HASH={digest}", str(CSRC / f"{name}.c"), "-o", str(out)]


def build_selftest(compiler: str, level_flags: tuple[str, ...], tmp: Path, static: bool) -> Path:
    objects = []
    for name in UNITS:
        obj = tmp / f"{name}.o"
        done = subprocess.run(unit_command(compiler, name, level_flags, obj, openmp=True), capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        objects.append(str(obj))
    binary = tmp / "selftest"
    link = [compiler, "-O2", "-ffp-contract=off", f"-I{CSRC}", str(SELFTEST), *objects, "-fopenmp", "-lm", "-o", str(binary)]
    done = subprocess.run(link + (["-static"] if static else []), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return binary


def digests(report: str) -> dict[str, str]:
    """The self-test's digest of each kernel's outputs (the same inputs on every machine)."""
    return dict(line.split()[1:] for line in report.splitlines() if line.startswith("digest "))


def assert_selftest_passes(command: list[str]) -> str:
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and " 0 failed" in done.stdout, done.stdout + done.stderr
    return done.stdout


@pytest.mark.skipif(shutil.which(CROSS_CC) is None or shutil.which(QEMU) is None,
                    reason="needs gcc-aarch64-linux-gnu and qemu-user (scripts/setup.sh installs them)")
@pytest.mark.parametrize("level", [level.name for level in levels_of("aarch64")])
def test_each_aarch64_level_builds_without_warnings_and_passes_the_selftest_under_qemu(level, tmp_path):
    flags = next(item.compiler_flags for item in levels_of("aarch64") if item.name == level)
    binary = build_selftest(CROSS_CC, flags, tmp_path, static=True)
    report = assert_selftest_passes([QEMU, "-cpu", "max", str(binary)])
    assert "levels: fixed 3 quant 3 qdot 3" in report  # the NEON paths ran, not the scalar loops they are checked against
    assert digests(report) == GOLDEN_DIGESTS


X86_LEVELS = [level for level in levels_of("x86_64")]


@pytest.mark.skipif(shutil.which("gcc") is None or platform.machine() != "x86_64", reason="needs gcc on x86-64")
@pytest.mark.parametrize("level", [level.name for level in X86_LEVELS])
def test_each_x86_level_this_cpu_runs_passes_the_selftest_with_the_golden_digests(level, tmp_path):
    chosen = next(item for item in X86_LEVELS if item.name == level)
    if not chosen.needs <= cpu_flags():
        pytest.skip(f"this CPU lacks {', '.join(sorted(chosen.needs - cpu_flags()))}")
    binary = build_selftest("gcc", chosen.compiler_flags, tmp_path, static=False)
    assert digests(assert_selftest_passes([str(binary)])) == GOLDEN_DIGESTS
