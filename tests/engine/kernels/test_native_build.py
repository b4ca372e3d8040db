"""Building and binding the native kernels: warnings, the cache key, checked signatures, why a build is off."""

import ctypes
import os
import logging
import shutil
import subprocess
from dataclasses import replace

import pytest
import torch

from quench.engine.kernels import native
from quench.engine.kernels.native_build import (
    CSRC, HEADER, UNITS, CheckedFunction, NativeBuildError, NativeLibrary, build, cache_key, cached_library_problem,
    cpu_identity, parse_header,
)

needs_library = pytest.mark.skipif(native._library() is None, reason=native.build_result().reason)
needs_gcc_x86 = pytest.mark.skipif(
    shutil.which("gcc") is None or not cpu_identity().startswith("flags"), reason="needs gcc on x86"
)


def test_the_header_gives_each_function_its_ctypes_signature_and_the_constants():
    header = parse_header(HEADER.read_text())
    gemm = header.signatures["small_gemm_bf16"]
    assert gemm.restype is None and gemm.argtypes == (ctypes.c_void_p,) * 3 + (ctypes.c_int,) * 5
    assert gemm.argnames == ("x", "wp", "y", "M", "N", "K", "threads", "amx")
    assert header.signatures["fixed_gemm_bf16"].argnames[-1] == "w_span" and header.constants["ROUTE_FIXED"] == 2
    assert header.signatures["screen_work_bytes"].restype is ctypes.c_int64
    assert header.signatures["amx_available"].argtypes == ()
    argmax = header.signatures["argmax_f32"]
    assert argmax.argtypes == (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int64)
    assert header.constants["AVX512_GEMM_ROWS"] == 4 and header.constants["SCREEN_MAX_ROWS"] == 64


def test_a_declaration_the_binding_cannot_read_is_an_error():
    with pytest.raises(ValueError, match="size_t"):
        parse_header("size_t f(int a);")


@needs_library
def test_a_call_with_a_wrong_signature_raises_instead_of_corrupting_memory():
    library = native._library()
    logits, out = torch.randn(2, 40), torch.empty(2, dtype=torch.long)
    library.argmax_f32(logits.data_ptr(), out.data_ptr(), 2, 40, 40)
    assert torch.equal(out, logits.argmax(dim=-1))
    with pytest.raises(TypeError, match="takes 5 arguments"):  # ctypes alone passes an extra argument along
        library.argmax_f32(logits.data_ptr(), out.data_ptr(), 2, 40, 40, 1)
    with pytest.raises(TypeError, match="takes 5 arguments"):
        library.argmax_f32(logits.data_ptr(), out.data_ptr(), 2, 40)
    with pytest.raises(OverflowError, match="R="):  # an address where an int belongs: ctypes alone truncates it
        library.argmax_f32(logits.data_ptr(), out.data_ptr(), out.data_ptr(), 40, 40)
    with pytest.raises(ctypes.ArgumentError):
        library.argmax_f32(logits.data_ptr(), 1.5, 2, 40, 40)


@needs_library
def test_a_library_built_against_another_header_is_refused_at_load():
    library = native._library()
    header = parse_header(HEADER.read_text())
    cdll = ctypes.CDLL(str(library.path))
    with pytest.raises(OSError, match="another quench_native.h"):
        NativeLibrary(cdll, replace(header, digest="0" * 16), library.path, library.openmp)
    extra = parse_header(HEADER.read_text() + "\nint quench_no_such_kernel(int rows);\n")
    with pytest.raises(OSError, match="quench_no_such_kernel"):
        NativeLibrary(cdll, extra, library.path, library.openmp)
    assert isinstance(library.argmax_f32, CheckedFunction)


def test_the_cpu_key_reads_x86_flags_and_arm_features(tmp_path, monkeypatch):
    x86 = tmp_path / "x86"
    x86.write_text("processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu sse2 avx512f amx_tile\n")
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd sve2 bf16\nCPU part\t: 0xd4f\n")
    assert cpu_identity(x86) == "flags\t\t: fpu sse2 avx512f amx_tile"
    assert cpu_identity(arm) == "Features\t: fp asimd sve2 bf16"
    header = parse_header(HEADER.read_text())
    monkeypatch.setenv("QUENCH_NATIVE_MARCH", "native")  # a build tied to the CPU is cached per CPU
    assert cache_key("gcc", header, cpu_identity(x86)) != cache_key("gcc", header, cpu_identity(arm))
    monkeypatch.setenv("QUENCH_NATIVE_MARCH", "x86-64-v2")  # a level's build is the same on every CPU of it
    assert cache_key("gcc", header, cpu_identity(x86)) == cache_key("gcc", header, "flags: sse2 avx")


def test_the_cache_key_follows_the_target_architecture(monkeypatch):
    monkeypatch.delenv("QUENCH_NATIVE_MARCH", raising=False)
    monkeypatch.delenv("QUENCH_NATIVE_WERROR", raising=False)
    header = parse_header(HEADER.read_text())
    native_key = cache_key("gcc", header, "flags: avx2")
    monkeypatch.setenv("QUENCH_NATIVE_MARCH", "x86-64-v2")
    assert cache_key("gcc", header, "flags: avx2") != native_key
    monkeypatch.setenv("QUENCH_NATIVE_WERROR", "1")  # -Werror is a flag too
    werror_key = cache_key("gcc", header, "flags: avx2")
    monkeypatch.setenv("QUENCH_NATIVE_MARCH", "native")  # and -march=native is keyed by the CPU as well
    assert len({native_key, werror_key, cache_key("gcc", header, "flags: avx2"), cache_key("gcc", header, "flags: avx")}) == 4


def test_on_macos_the_reason_is_the_os_not_a_missing_compiler(tmp_path):
    result = build(tmp_path, system="Darwin")
    assert result.library is None and "Linux only" in result.reason and "macOS" in result.reason
    assert "compiler" not in result.reason


@needs_gcc_x86
def test_a_failed_build_says_why_and_fails_loudly_when_asked(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("CC", "gcc")
    monkeypatch.setenv("QUENCH_NATIVE_MARCH", "no-such-cpu")
    monkeypatch.delenv("QUENCH_NATIVE_WERROR", raising=False)  # first the fallback, then the failure CI asks for
    with caplog.at_level(logging.WARNING, logger="quench.engine.kernels.native_build"):
        result = build(tmp_path)
    assert result.library is None and "no-such-cpu" in result.reason
    assert "no-such-cpu" in caplog.text and "failed to build" in caplog.text  # the compiler's own message
    monkeypatch.setenv("QUENCH_NATIVE_WERROR", "1")
    with pytest.raises(NativeBuildError, match="no-such-cpu"):
        build(tmp_path)


@needs_gcc_x86
def test_a_baseline_build_runs_the_portable_kernels(tmp_path, monkeypatch):
    """x86-64-v2 (no AVX512): the scalar norm and argmax give PyTorch's answers; the AVX512-only kernels are off."""
    monkeypatch.setenv("CC", "gcc")
    monkeypatch.setenv("QUENCH_NATIVE_MARCH", "x86-64-v2")
    monkeypatch.setenv("QUENCH_NATIVE_WERROR", "1")  # and without a warning
    library = build(tmp_path).library
    assert not library.avx512_available() and not library.small_gemm_available() and not library.amx_available()
    torch.manual_seed(0)
    logits = torch.randint(-3, 3, (3, 37)).to(torch.bfloat16)  # ties: the first maximum
    out = torch.empty(3, dtype=torch.long)
    library.argmax_bf16(logits.data_ptr(), out.data_ptr(), 3, 37, 37)
    assert torch.equal(out, logits.argmax(dim=-1))
    x, delta = torch.randn(4, 96).to(torch.bfloat16), torch.randn(4, 96).to(torch.bfloat16)
    weight, normed = (torch.rand(96) + 0.5).to(torch.bfloat16), torch.empty(4, 96, dtype=torch.bfloat16)
    summed = x + delta
    library.add_rms_norm_bf16(x.data_ptr(), delta.data_ptr(), weight.data_ptr(), normed.data_ptr(), 4, 96, 1e-5)
    assert torch.equal(x, summed)
    assert torch.equal(normed, weight * torch.nn.functional.rms_norm(summed.float(), (96,), eps=1e-5).to(torch.bfloat16))


@needs_gcc_x86
def test_the_amx_units_compile_without_warnings(tmp_path):
    """The AMX and AVX512-BF16 paths compiled for a CPU that has them (this machine may not run them)."""
    probe = subprocess.run(["gcc", "-march=sapphirerapids", "-E", "-x", "c", "/dev/null"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("this gcc does not know -march=sapphirerapids")
    for name in ("attend", "gemm", "screen"):
        command = ["gcc", "-c", "-O3", "-march=sapphirerapids", "-fopenmp", "-Wall", "-Wextra", "-Werror", f"-I{CSRC}",
                   str(CSRC / f"{name}.c"), "-o", str(tmp_path / f"{name}.o")]
        result = subprocess.run(command, capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
    assert set(UNITS) == {path.stem for path in CSRC.glob("*.c")}  # every source is a unit the build compiles


@needs_gcc_x86
def test_a_planted_or_modified_cached_library_is_rebuilt_and_an_untrusted_cache_is_refused(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("CC", "gcc")
    monkeypatch.setenv("QUENCH_NATIVE_MARCH", "x86-64-v2")  # the quickest build
    monkeypatch.delenv("QUENCH_NATIVE_WERROR", raising=False)
    first = build(tmp_path).library
    assert first is not None and cached_library_problem(first.path) == ""
    path, built = first.path, first.path.read_bytes()

    def replace_library(content: bytes) -> None:  # a new file: the loaded library's pages stay as they are
        (tmp_path / "new").write_bytes(content)
        os.replace(tmp_path / "new", path)

    for plant in (lambda: replace_library(built[:-1] + bytes([built[-1] ^ 1])),  # modified after the build
                  lambda: (path.with_name(path.name + ".sha256").unlink(), replace_library(built))):  # planted
        plant()
        assert cached_library_problem(path) != ""
        with caplog.at_level(logging.WARNING, logger="quench.engine.kernels.native_build"):
            again = build(tmp_path).library
        assert again is not None and "rebuilding the native kernels" in caplog.text
        assert cached_library_problem(path) == "" and path.read_bytes() == built
        caplog.clear()
    tmp_path.chmod(0o777)  # a directory others may write to: nothing in it is loaded
    result = build(tmp_path)
    assert result.library is None and "is writable by" in result.reason
    monkeypatch.setenv("QUENCH_NATIVE_WERROR", "1")
    with pytest.raises(NativeBuildError, match="refusing the native kernel cache"):
        build(tmp_path)
    tmp_path.chmod(0o755)
    os.chown(path, 65534, 65534)  # another user's file: refused, not loaded
    assert "owned by uid 65534" in cached_library_problem(path)
