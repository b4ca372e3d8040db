"""The hand-written Llama forward against Hugging Face's, logit for logit."""

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from helpers import llama_head_dim_64, tiny_llama
from quench.engine.kernels import native
from quench.engine.config import EngineConfig
from quench.engine.runners.make import make_runner
from quench.engine.runners.llama import LlamaRunner, on_fast_path
from quench.engine.kernels.native import KernelConfig


def test_prefill_and_ragged_continuation_match_hugging_face_exactly_in_float64():
    model = tiny_llama(dtype=torch.float64)
    runner = LlamaRunner(model)
    ids = torch.randint(3, 90, (3, 20))
    with torch.no_grad():
        reference = model(ids).logits
    cache = runner.new_cache(3, 64)
    assert torch.equal(runner.forward(cache, ids[:, :12], torch.zeros(3, dtype=torch.long)), reference[:, :12])
    # Rows continue from different lengths: row 1 re-feeds positions 10-11 (a rollback), row 2 feeds one token.
    start = torch.tensor([12, 10, 12])
    tokens = torch.stack([ids[0, 12:15], ids[1, 10:13], ids[2, 12:15]])
    logits = runner.forward(cache, tokens, start, counts=torch.tensor([3, 3, 1]))
    assert torch.equal(logits[0], reference[0, 12:15]) and torch.equal(logits[1], reference[1, 10:13])
    assert torch.equal(logits[2, 0], reference[2, 12])


def test_last_token_logits_only():
    model = tiny_llama(dtype=torch.float64)
    runner = LlamaRunner(model)
    ids = torch.randint(3, 90, (2, 7))
    with torch.no_grad():
        reference = model(ids).logits
    logits = runner.forward(runner.new_cache(2, 16), ids, torch.zeros(2, dtype=torch.long), logits_at=torch.tensor([6, 3]))
    assert torch.allclose(logits, torch.stack([reference[0, 6], reference[1, 3]]), rtol=0, atol=1e-12)


def test_rope_tables_grow_past_the_trained_length():
    runner = LlamaRunner(tiny_llama())  # max_position_embeddings = 512
    runner.new_cache(1, 600)
    assert runner.cos.shape[0] == 600 and runner.sin_signed.shape[0] == 600


def test_only_llama_models_take_the_fast_path():
    assert on_fast_path(tiny_llama())
    assert not on_fast_path(GPT2LMHeadModel(GPT2Config(n_embd=16, n_layer=1, n_head=2, vocab_size=50)))


def test_a_step_past_the_cache_length_is_refused_on_every_entry_point():
    runner = LlamaRunner(tiny_llama())
    cache = runner.new_cache(2, 16)
    start = torch.tensor([14, 3])
    for step in (torch.ones(2, 3, dtype=torch.long), torch.ones(2, 17, dtype=torch.long)):  # packed, then PyTorch path
        for call in (runner.forward, runner.greedy_tokens, runner.packed_logits):
            with pytest.raises(ValueError, match="cache length 16"):
                call(cache, step, start)


def test_the_kernel_config_reaches_every_place_a_kernel_is_chosen():
    """EngineConfig.kernels -> make_runner -> LlamaRunner -> each Linear: AMX off everywhere when the config says
    so, the screened head only where the config allows it (and, on CPUs with it, AMX on where asked)."""
    model = llama_head_dim_64(torch.bfloat16)
    off = make_runner(model, EngineConfig(kernels=KernelConfig(amx=False, screen=False)))
    assert not off.plan.screen and off.head_screen is None
    assert not off.amx and not any(linear.amx for linear in off._projections() + [off.lm_head])
    on = make_runner(model, EngineConfig(kernels=KernelConfig()))
    assert on.amx == native.amx_supported() and all(linear.amx == on.amx for linear in on._projections())
    assert KernelConfig.from_env({"QUENCH_AMX": "0"}) == KernelConfig(amx=False)
    assert KernelConfig.from_env({"QUENCH_SCREEN": "0"}) == KernelConfig(screen=False)
