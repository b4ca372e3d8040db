"""`quench doctor`: every kernel family is listed as on or off, and each one that is off says why."""

import json

from quench.cli.main import main
from quench.engine.kernels import native
from quench.engine.kernels.native_build import BuildResult
from quench.engine.kernels.native_report import KernelStatus, _switched, kernel_report


def test_doctor_lists_every_kernel_with_a_reason_for_each_one_off(capsys):
    assert main(["doctor"]) == 0
    lines = capsys.readouterr().out.splitlines()
    kernels = [line for line in lines if line.startswith(("on ", "off "))]
    assert len(kernels) == len(kernel_report(native.build_result(), native.KernelConfig()))
    assert all(line.endswith(")") for line in kernels if line.startswith("off"))  # "(why)"
    if native._library() is not None:
        assert any(line.startswith("on ") and "attention" in line for line in kernels)


def test_doctor_json_matches_the_report(capsys):
    assert main(["doctor", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    want = kernel_report(native.build_result(), native.KernelConfig.from_env())
    assert [(k["name"], k["active"]) for k in report["kernels"]] == [(k.name, k.active) for k in want]
    assert all(k["reason"] for k in report["kernels"] if not k["active"])


def test_without_a_library_every_kernel_is_off_for_the_builds_reason():
    result = BuildResult(None, "no C compiler (looked for $CC=cc, gcc, clang)", "native")
    report = kernel_report(result, native.KernelConfig())
    assert report and all(not k.active and k.reason.startswith("no C compiler") for k in report)


def test_a_kernel_the_cpu_serves_but_the_config_turns_off_says_so():
    assert _switched("AMX", True, "", False, "QUENCH_AMX=0") == KernelStatus("AMX", False, "disabled by config (QUENCH_AMX=0)")
    assert _switched("AMX", False, "this CPU has no amx_tile", False, "QUENCH_AMX=0").reason == "this CPU has no amx_tile"
    assert _switched("AMX", True, "", True, "QUENCH_AMX=0").active
    result = native.build_result()
    if result.library is not None and result.library.amx_available():  # and the whole report, where AMX runs
        report = {k.name: k for k in kernel_report(result, native.KernelConfig(amx=False, screen=False))}
        assert "disabled by config (QUENCH_AMX=0" in report["AMX tiles (GEMM, attention)"].reason


def test_the_fixed_order_and_gguf_lines_name_what_the_build_vectorises():
    from quench.native_target import fixed_gemm_vectorised

    result = native.build_result()
    if result.library is None:
        return
    report = {k.name: k for k in kernel_report(result, native.KernelConfig())}
    fixed = report["fixed-order GEMM (batch invariance)"]
    assert fixed.active and (fixed.reason != "portable C loops") == fixed_gemm_vectorised()
    layers = report["layer loop in C (bfloat16, head size 64)"]
    assert layers.active == bool(result.library.layers_available())
    assert "this CPU has no" not in layers.reason or not layers.active  # an active kernel never gives a reason for off
    assert report["GGUF block products (Q4_0 to Q6_K, as stored)"].active
