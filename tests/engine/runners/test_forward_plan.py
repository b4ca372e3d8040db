"""The forward plan: every switch of `LlamaRunner` resolved once, frozen, and printed by `quench doctor`."""

import dataclasses
import json

import pytest
import torch

from helpers import llama_head_dim_64, save_tiny_model, tiny_llama, tiny_qwen2
from quench.cli.main import main
from quench.engine.kernels import native
from quench.engine.config import EngineConfig
from quench.engine.runners.make import make_runner
from quench.engine.runners.forward_plan import NATIVE_MAX_NEW, NATIVE_PREFILL_MAX, ForwardPlan, plan_forward
from quench.engine.runners.llama import LlamaRunner
from quench.engine.kernels.native_config import KernelConfig
from quench.models.loading import load_model

needs_native = pytest.mark.skipif(not native.available(torch.float32), reason="no native kernels built here")

PLAIN = ForwardPlan(
    family="llama", dtype="float32", prepack=True, compiled=False, native=True, packed_tokens=NATIVE_MAX_NEW,
    glue=False, c_layers=False, batch_invariant=False, fixed=False, amx=False, int8=False, screen=False, window=None,
    kv_dtype="float32",
)


def changed(a: ForwardPlan, b: ForwardPlan) -> set[str]:
    return {field.name for field in dataclasses.fields(a) if getattr(a, field.name) != getattr(b, field.name)}


def test_the_plan_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        LlamaRunner(tiny_llama()).plan.native = False


def test_which_steps_take_the_packed_path():
    assert PLAIN.packed(NATIVE_MAX_NEW) and not PLAIN.packed(NATIVE_MAX_NEW + 1)
    assert not dataclasses.replace(PLAIN, native=False, packed_tokens=0).packed(1)
    assert dataclasses.replace(PLAIN, packed_tokens=None).packed(10_000)  # batch invariant: every step
    windowed = dataclasses.replace(PLAIN, window=10)
    assert windowed.packed(4, end=10) and not windowed.packed(4, end=11) and not windowed.packed(4)  # end unknown


def test_the_runner_reads_its_plan():
    runner = LlamaRunner(tiny_llama())
    assert runner.plan == dataclasses.replace(PLAIN, native=native.available(torch.float32), amx=native.use_amx(KernelConfig()),
                                              packed_tokens=NATIVE_MAX_NEW if native.available(torch.float32) else 0)
    assert [runner._packed(n, torch.tensor([0])) for n in (1, 16, 17)] == [runner.plan.packed(n, n) for n in (1, 16, 17)]
    assert runner.prefill_kernel(8) == runner.plan.prefill_kernel(8)


@needs_native
def test_batch_invariance_off_changes_the_products_and_the_packed_steps_only():
    model = tiny_llama()
    on, off = plan_forward(model, batch_invariant=True), plan_forward(model, batch_invariant=False)
    # AMX tiles sum in their own order: an invariant plan never uses them, a plain one does where the CPU has them
    assert not on.amx and off.amx == native.use_amx(KernelConfig())
    assert changed(on, off) == {"batch_invariant", "fixed", "packed_tokens"} | ({"amx"} if off.amx else set())
    assert (on.packed_tokens, off.packed_tokens) == (None, NATIVE_MAX_NEW)


@needs_native
def test_without_the_native_kernels_no_step_is_packed(monkeypatch):
    model = llama_head_dim_64(torch.bfloat16)
    with_kernels = plan_forward(model)
    assert with_kernels.glue and with_kernels.packed_tokens == NATIVE_PREFILL_MAX
    assert with_kernels.c_layers == native.layers_available()
    monkeypatch.setattr(native, "available", lambda dtype: False)
    without = plan_forward(model)
    assert changed(with_kernels, without) == {"native", "packed_tokens", "glue"} | ({"c_layers"} if with_kernels.c_layers else set())
    assert without.packed_tokens == 0 and not without.packed(1)


def test_the_kernel_switches_change_amx_and_the_screen_only():
    model = llama_head_dim_64(torch.bfloat16)
    default, off = plan_forward(model), plan_forward(model, kernels=KernelConfig.from_env({"QUENCH_AMX": "0", "QUENCH_SCREEN": "0"}))
    assert changed(default, off) == {name for name in ("amx", "screen") if getattr(default, name)}
    assert not off.amx and not off.screen


def test_doctor_prints_the_plan_the_engines_runner_gets(tmp_path, capsys):
    path = save_tiny_model(tmp_path / "tiny")
    runner = make_runner(load_model(str(path)).model, EngineConfig())
    assert main(["doctor", "--json", "--model", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["plan"]["fields"] == dataclasses.asdict(runner.plan)
    assert main(["doctor", "--model", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    printed = lines[-len(dataclasses.fields(ForwardPlan)) :]
    assert [line.split() for line in printed] == [[name, str(value)] for name, value in dataclasses.asdict(runner.plan).items()]


def test_doctor_says_why_a_model_has_no_plan(capsys):
    assert main(["doctor", "--json", "--model", "/no/such/model"]) == 0
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert plan["fields"] is None and "no such file" in plan["why"]


@needs_native
def test_projections_with_biases_keep_the_python_layer_loop():
    """The C layer loop adds no biases: Qwen2 (q/k/v biases) in bfloat16 with head size 64 runs the Python loop,
    whose logits follow Hugging Face's to bfloat16 rounding."""

    model = tiny_qwen2(torch.bfloat16, hidden=256)  # head size 64
    runner = LlamaRunner(model)
    assert runner.plan.glue and not runner.plan.c_layers
    tokens = torch.randint(3, 90, (1, 8))
    got = runner.forward(runner.new_cache(1, 32), tokens, torch.zeros(1, dtype=torch.long))
    assert torch.allclose(got, model(tokens).logits.float(), atol=0.05)


@needs_native
def test_bfloat16_caches_under_a_float32_model_need_the_batch_invariant_native_path():
    """kv_cache "bfloat16" under a float32 model: the plan's caches are bfloat16 where every step runs the fixed
    attention (batch invariant, native); elsewhere, and for float32 caches under a bfloat16 model, a ConfigError
    naming the field. "auto" takes bfloat16 under a GGUF's blocks where served, else the model's dtype, as "float32"
    does."""
    from quench.engine.config import ConfigError
    from quench.engine.kernels import quant

    gguf = tiny_llama(dtype=torch.float32)
    gguf.quench_gguf_weights = quant.GGUFWeights("<test>", {}, "gguf-int8")
    assert plan_forward(gguf, batch_invariant=True).cache_dtype == torch.bfloat16  # auto
    assert plan_forward(gguf, batch_invariant=False).cache_dtype == torch.float32  # not served there: the model's
    assert plan_forward(gguf, batch_invariant=True, kv_cache="float32").cache_dtype == torch.float32

    model = tiny_llama(dtype=torch.float32)
    plan = plan_forward(model, batch_invariant=True, kv_cache="bfloat16")
    assert plan.cache_dtype == torch.bfloat16 and changed(plan, plan_forward(model, batch_invariant=True)) == {"kv_dtype"}
    assert make_runner(model, EngineConfig(kv_cache="bfloat16")).new_cache(2, 8).keys[0].dtype == torch.bfloat16
    for kv_cache in ("auto", "float32"):
        assert plan_forward(model, batch_invariant=True, kv_cache=kv_cache).cache_dtype == torch.float32
    with pytest.raises(ConfigError, match="batch-invariant") as refused:
        plan_forward(model, batch_invariant=False, kv_cache="bfloat16")
    assert refused.value.field == "kv_cache"
    with pytest.raises(ConfigError, match="batch-invariant"):
        plan_forward(model, batch_invariant=None, native_attention=False, kv_cache="bfloat16")  # invariance off
    with pytest.raises(ConfigError, match="float32 caches under a bfloat16 model"):
        plan_forward(tiny_llama(dtype=torch.bfloat16), batch_invariant=True, kv_cache="float32")
    with pytest.raises(ConfigError, match="kv_cache must be one of"):
        EngineConfig(kv_cache="float16")
