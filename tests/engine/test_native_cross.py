"""The kernels of every aarch64 level, cross-compiled with Debian's gcc-aarch64-linux-gnu and checked under
qemu-user by the C self-test (tests/engine/native_selftest.c): correctness only, qemu says nothing of speed.
The same self-test also runs natively at this machine's own level."""

import shutil
import subprocess
from pathlib import Path

import pytest

from quench.native_target import levels_of
from quench.engine.native_build import CSRC, HEADER, OPENMP, UNITS, parse_header, target, unit_flags

SELFTEST = Path(__file__).parent / "native_selftest.c"
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


def assert_selftest_passes(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and " 0 failed" in done.stdout, done.stdout + done.stderr


@pytest.mark.skipif(shutil.which(CROSS_CC) is None or shutil.which(QEMU) is None,
                    reason="needs gcc-aarch64-linux-gnu and qemu-user (scripts/setup.sh installs them)")
@pytest.mark.parametrize("level", [level.name for level in levels_of("aarch64")])
def test_each_aarch64_level_builds_without_warnings_and_passes_the_selftest_under_qemu(level, tmp_path):
    flags = next(item.compiler_flags for item in levels_of("aarch64") if item.name == level)
    binary = build_selftest(CROSS_CC, flags, tmp_path, static=True)
    assert_selftest_passes([QEMU, "-cpu", "max", str(binary)])


@pytest.mark.skipif(shutil.which("gcc") is None or target().refused != "", reason="needs gcc and a buildable level")
def test_the_selftest_passes_at_this_machines_level(tmp_path):
    binary = build_selftest("gcc", target().compiler_flags, tmp_path, static=False)
    assert_selftest_passes([str(binary)])
