"""The float32 C layer loop (`native.layers_f32`) of batch-invariant runners on a GGUF's blocks: the plan turns it on
for that route only, and every packed step through it gives the Python loop's bits (logits, hidden states, caches)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from gguf import GGMLQuantizationType, dequantize as gguf_dequantize
from gguf.constants import GGML_QUANT_SIZES
from transformers import LlamaConfig, LlamaForCausalLM

from helpers import CHARS, llama_head_dim_64, tiny_llama, torch_threads
from quench.engine.config import EngineConfig
from quench.engine.runners.make import make_runner
from quench.engine.kernels import native, quant
from quench.engine.kernels.linear import Linear
from quench.engine.runners.forward_plan import plan_forward
from tests.engine.kernels.test_quant import _rescaled, random_blocks, weight_of

needs_native = pytest.mark.skipif(not native.available(torch.float32), reason="no native kernels here")
# The portable build's scalar products take minutes per step of the 135M-parameter preset: the tiny models only there
vector_products = pytest.mark.skipif(
    not native.available(torch.float32) or native.build_result().library.qdot_level() == 0,
    reason="the portable build's scalar products: the tiny models cover it",
)
CODE_PROMPTS = (
    'def add(a, b):\n    """Return the sum of a and b."""\n',
    "Write a python function to reverse a string.",
    "def is_prime(n):\n",
    "class Stack:\n",
    "Write a function to count the vowels of a string.",
    "x = [",
    "import os\n",
    "def fib(n):\n",
)


def tiny_gguf_llama(qtype: GGMLQuantizationType, mode: str, seed: int = 0) -> LlamaForCausalLM:
    """A two-layer Llama with head size 64 whose projections and head are random blocks of one format, run in `mode`
    (the HF model holds their dequantized values)."""
    config = LlamaConfig(vocab_size=len(CHARS) + 3, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, bos_token_id=1,
                         eos_token_id=2, pad_token_id=0, tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    tensors = {}
    for index, (name, parameter) in enumerate(model.named_parameters()):
        if parameter.dim() == 1:  # norms: each its own weights, not ones
            with torch.no_grad():
                parameter.uniform_(0.5, 1.5)
        if parameter.dim() != 2 or "embed_tokens" in name:
            continue
        rows, K = parameter.shape
        data = random_blocks(qtype, rows, K // GGML_QUANT_SIZES[qtype][0], seed=seed * 1000 + index)
        data = _rescaled(qtype, data, 4.0 / K**0.5)
        with torch.no_grad():
            parameter.copy_(torch.from_numpy(gguf_dequantize(data, qtype)))
        tensors[name] = weight_of(qtype, data)
    model.quench_gguf_weights = quant.GGUFWeights("<test>", tensors, mode)
    return model


def steps(runner, prompts: list[list[int]], vocab: int, c_layers: bool, seed: int = 0) -> list[torch.Tensor]:
    """A prefill of ragged prompts, a verification step of mixed widths (0 to 5) and two decode steps with the plan's C layer
    loop on or off -> every step's logits and hidden states, then every layer's keys and values."""
    runner.plan = dataclasses.replace(runner.plan, c_layers=c_layers)
    generator = torch.Generator().manual_seed(seed)
    batch, width = len(prompts), max(len(prompt) for prompt in prompts)
    tokens = torch.zeros(batch, width, dtype=torch.long)
    for row, prompt in enumerate(prompts):
        tokens[row, : len(prompt)] = torch.tensor(prompt)
    lengths = torch.tensor([len(prompt) for prompt in prompts])
    cache = runner.new_cache(batch, width + 16)
    out = list(runner.forward(cache, tokens, torch.zeros(batch, dtype=torch.long), counts=lengths, hidden=True))
    drafts = torch.randint(3, vocab, (batch, 5), generator=generator)
    widths = torch.randint(1, 6, (batch,), generator=generator)
    widths[1 : 2 if batch > 2 else 1] = 0  # a row that feeds nothing this step
    out += runner.forward(cache, drafts, lengths, counts=widths, hidden=True)
    start = lengths + widths
    for _ in range(2):
        step = torch.randint(3, vocab, (batch, 1), generator=generator)
        out += runner.forward(cache, step, start, hidden=True)
        out.append(runner.packed_logits(cache, step, start))  # the same position again: a rewrite
        start = start + 1
    return out + cache.keys + cache.values


def same_bits(runner, prompts: list[list[int]], vocab: int) -> bool:
    python, c = (steps(runner, prompts, vocab, c_layers) for c_layers in (False, True))
    return len(python) == len(c) and all(torch.equal(a, b) for a, b in zip(python, c))


@pytest.fixture(scope="module")
def preset():
    from quench.models import encode_prompt, load_model

    loaded = load_model("smollm2-135m-instruct", dtype="float32", weights="gguf-int8", notify=lambda _: None)
    runner = make_runner(loaded.model, EngineConfig())
    return runner, [encode_prompt(loaded, prompt) for prompt in CODE_PROMPTS]


@vector_products
@pytest.mark.parametrize("threads", [1, 2])
def test_the_default_models_gguf_int8_steps_give_the_python_loops_bits(preset, threads):
    """The default preset as `quench run` loads it (gguf-int8, batch invariant): prefill, verification and decode steps
    at batch 1, 3 and 8 on 1 and 2 threads, the same logits, hidden states and caches with and without the C loop."""
    runner, prompts = preset
    assert runner.plan.c_layers and runner.plan.weights == "gguf-int8" and runner.batch_invariant
    vocab = runner.vocab_size
    with torch_threads(threads):
        for batch in (1, 3, 8):
            chosen = [prompts[(index * 3) % len(prompts)][: 6 + 5 * index] for index in range(batch)]  # mixed lengths
            assert same_bits(runner, chosen, vocab), batch


@needs_native
@pytest.mark.parametrize("kv_cache", ["auto", "float32"])
@pytest.mark.parametrize("mode", quant.MODES)
@pytest.mark.parametrize("name", ["Q4_0", "Q8_0", "Q4_K", "Q6_K"])
def test_every_block_format_and_mode_gives_the_python_loops_bits(name, mode, kv_cache):
    """Packed copies (Q4_0, Q8_0 in gguf-int8, where the build has them) and blocks as stored (K formats; gguf's float
    sums) run the same calls in the C loop; every product a QuantLinear. With the default bfloat16 KV caches and
    float32 ones."""
    runner = make_runner(tiny_gguf_llama(GGMLQuantizationType[name], mode, seed=3), EngineConfig(kv_cache=kv_cache))
    assert runner.plan.c_layers and runner.plan.weights == mode
    assert all(isinstance(linear, quant.QuantLinear) for linear in runner._projections())
    prompts = [[5 + (7 * row + col) % 60 for col in range(3 + 4 * row)] for row in range(4)]
    for threads in (1, 2):
        with torch_threads(threads):
            assert same_bits(runner, prompts, runner.vocab_size)


@needs_native
def test_projections_left_as_float32_run_their_fixed_order_pack_and_a_change_rebuilds_the_table():
    """A GGUF whose tensor of some projection is not a served format keeps that projection's float32 `Linear` (its
    fixed-order pack): the C loop runs it there; swapping a projection after a step rebuilds the loop's table."""
    model = tiny_gguf_llama(GGMLQuantizationType.Q4_K, "gguf-int8", seed=5)
    runner = make_runner(model, EngineConfig())
    prompts = [[9, 20, 31, 42, 53], [7, 8], [60, 61, 62, 63, 64, 65, 66]]
    assert same_bits(runner, prompts, runner.vocab_size)
    attn = model.model.layers[1].self_attn
    runner.layers[1].o = Linear(attn.o_proj.weight.detach(), None, True, fixed=True)
    runner.layers[0].gate_up = Linear(torch.cat([model.model.layers[0].mlp.gate_proj.weight,
                                                 model.model.layers[0].mlp.up_proj.weight]).detach(), None, True, fixed=True)
    assert same_bits(runner, prompts, runner.vocab_size)


@needs_native
def test_the_plan_runs_the_float32_loop_on_gguf_blocks_with_batch_invariance_only(monkeypatch):
    """On for float32 batch-invariant runners on a GGUF's blocks (both modes); off for their dequantized weights,
    without batch invariance, for head sizes other than 64 and where the library lacks the loop."""
    model = tiny_gguf_llama(GGMLQuantizationType.Q4_K, "gguf-int8")
    assert plan_forward(model, batch_invariant=True).c_layers
    assert not plan_forward(model, batch_invariant=False).c_layers
    model.quench_gguf_weights = dataclasses.replace(model.quench_gguf_weights, mode="gguf")
    assert plan_forward(model, batch_invariant=True).c_layers
    assert not plan_forward(llama_head_dim_64(torch.float32), batch_invariant=True).c_layers  # dequantized
    small_heads = tiny_llama(dtype=torch.float32)
    small_heads.quench_gguf_weights = quant.GGUFWeights("<test>", {}, "gguf-int8")
    assert not plan_forward(small_heads, batch_invariant=True).c_layers  # head size 16
    monkeypatch.setattr(native, "layers_f32_available", lambda: False)
    runner = make_runner(tiny_gguf_llama(GGMLQuantizationType.Q4_K, "gguf-int8"), EngineConfig())
    assert not runner.plan.c_layers and runner.batch_invariant
    prompts = [[9, 20, 31], [7, 8, 9, 10]]
    assert len(steps(runner, prompts, runner.vocab_size, c_layers=False)) > 0  # the Python loop serves every step


@needs_native
@pytest.mark.parametrize("mode", quant.MODES)
def test_bfloat16_caches_give_the_python_loops_bits_and_hold_the_float32_values_rounded(mode):
    """With bfloat16 KV caches (kv_cache "bfloat16") the C loop and the Python loop give the same bits on 1 and 2
    threads; after a prefill, the first layer's cached keys and values are those a float32 cache holds, rounded to
    bfloat16 (nothing before them depends on the caches' dtype)."""
    prompts = [[5 + (7 * row + col) % 60 for col in range(3 + 4 * row)] for row in range(4)]
    model = tiny_gguf_llama(GGMLQuantizationType.Q4_K, mode, seed=3)
    runner = make_runner(model, EngineConfig(kv_cache="bfloat16"))
    assert runner.plan.c_layers and runner.plan.cache_dtype == torch.bfloat16
    for threads in (1, 2):
        with torch_threads(threads):
            assert same_bits(runner, prompts, runner.vocab_size)
    wide = make_runner(model, EngineConfig(kv_cache="float32"))
    tokens = torch.tensor([prompt[:3] for prompt in prompts])
    caches = []
    for each in (runner, wide):
        cache = each.new_cache(len(prompts), 8)
        each.forward(cache, tokens, torch.zeros(len(prompts), dtype=torch.long))
        caches.append(cache)
    assert caches[0].keys[0].dtype == torch.bfloat16 and caches[1].keys[0].dtype == torch.float32
    assert torch.equal(caches[0].keys[0], caches[1].keys[0].to(torch.bfloat16))
    assert torch.equal(caches[0].values[0], caches[1].values[0].to(torch.bfloat16))
    assert not torch.equal(caches[0].keys[1].float(), caches[1].keys[1])  # rounded, so not the float32 values
