"""CPU levels: which build each CPU gets, a requested level the CPU cannot run is refused, and every x86 level
this CPU can run builds and gives PyTorch's answers on the portable kernels."""

import shutil

import pytest
import torch

from quench.native_target import BY_NAME, LEVELS, best_level, levels_of, resolve_target, this_cpu_levels
from quench.engine.kernels import native
from quench.engine.kernels.native_build import build

ZEN3 = frozenset("fpu sse2 ssse3 sse4_1 sse4_2 cx16 lahf_lm popcnt avx avx2 fma f16c bmi1 bmi2 abm movbe xsave aes".split())
ZEN4 = ZEN3 | frozenset("avx512f avx512dq avx512cd avx512bw avx512vl avx512_bf16 avx512_vnni avx512ifma".split())
SKYLAKE_X = ZEN3 | frozenset("avx512f avx512dq avx512cd avx512bw avx512vl".split())
SAPPHIRE_RAPIDS = ZEN4 | frozenset("amx_tile amx_bf16 amx_int8 avx512_fp16".split())
NEHALEM = frozenset("fpu sse2 ssse3 sse4_1 sse4_2 cx16 lahf_lm popcnt".split())
GRAVITON3 = frozenset("fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp asimddp sve bf16 i8mm".split())
GRAVITON1 = frozenset("fp asimd evtstrm aes pmull sha1 sha2 crc32 cpuid".split())


@pytest.mark.parametrize("features, machine, level", [
    (NEHALEM, "x86_64", "x86-64-v2"),
    (ZEN3, "x86_64", "x86-64-v3"),
    (SKYLAKE_X, "x86_64", "x86-64-v4"),
    (ZEN4, "x86_64", "x86-64-v4-bf16"),
    (SAPPHIRE_RAPIDS, "x86_64", "x86-64-v4-amx"),
    (GRAVITON1, "aarch64", "armv8-a"),
    (GRAVITON3, "aarch64", "armv8.6-a-bf16"),
])
def test_each_cpu_gets_its_highest_level(features, machine, level):
    assert best_level(features, machine).name == level
    assert resolve_target(None, features, machine).name == level


def test_a_cpu_missing_one_feature_of_a_level_gets_the_level_below():
    assert best_level(ZEN3 - {"f16c"}, "x86_64").name == "x86-64-v2"
    assert best_level(ZEN4 - {"avx512_vnni"}, "x86_64").name == "x86-64-v4"


def test_levels_are_cumulative_within_a_machine():
    for machine in ("x86_64", "aarch64"):
        levels = levels_of(machine)
        assert all(lower.needs < higher.needs for lower, higher in zip(levels, levels[1:]))
    assert {level.machine for level in LEVELS} == {"x86_64", "aarch64"}


def test_a_requested_level_the_cpu_lacks_is_refused_with_the_missing_features():
    target = resolve_target("x86-64-v4", ZEN3, "x86_64")
    assert target.level is BY_NAME["x86-64-v4"] and "avx512f" in target.refused
    assert resolve_target("x86-64-v3", ZEN4, "x86_64").refused == ""  # a lower level runs on a higher CPU
    assert "aarch64" in resolve_target("armv8-a", ZEN4, "x86_64").refused


def test_a_raw_march_value_passes_through_and_unknown_cpus_build_native():
    assert resolve_target("native", ZEN3, "x86_64").compiler_flags == ("-march=native",)
    assert resolve_target("znver3", ZEN3, "x86_64").level is None
    assert resolve_target(None, frozenset(), "riscv64").compiler_flags == ("-march=native",)


RUNNABLE = this_cpu_levels()


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
@pytest.mark.parametrize("name", RUNNABLE)
def test_every_level_this_cpu_runs_builds_and_gives_pytorchs_answers(name, monkeypatch):
    monkeypatch.setenv("QUENCH_NATIVE_MARCH", name)
    monkeypatch.setenv("QUENCH_NATIVE_WERROR", "1")  # no warning at any level
    result = build(native._cache_dir())  # the shared cache: a level's strict build is made once for every test
    assert result.library is not None and result.march == name, result.reason
    library = result.library
    generator = torch.Generator().manual_seed(0)
    logits = torch.randint(-3, 3, (5, 333), generator=generator).float()  # ties: the first maximum
    out = torch.empty(5, dtype=torch.long)
    library.argmax_f32(logits.data_ptr(), out.data_ptr(), 5, 333, 333)
    assert torch.equal(out, logits.argmax(dim=-1))
    x = torch.randn(4, 96, generator=generator).to(torch.bfloat16)
    delta = torch.randn(4, 96, generator=generator).to(torch.bfloat16)
    weight, normed = (torch.rand(96, generator=generator) + 0.5).to(torch.bfloat16), torch.empty(4, 96, dtype=torch.bfloat16)
    summed = x + delta
    library.add_rms_norm_bf16(x.data_ptr(), delta.data_ptr(), weight.data_ptr(), normed.data_ptr(), 4, 96, 1e-5)
    assert torch.equal(x, summed)
    assert torch.equal(normed, weight * torch.nn.functional.rms_norm(summed.float(), (96,), eps=1e-5).to(torch.bfloat16))
