"""The fast path on Gemma 3 (`families.py`) against Hugging Face's `Gemma3ForCausalLM`, on tiny random models:
logits on the packed C path and the PyTorch path, across the sliding window, greedy output, speculation."""

import pytest
import torch
from transformers import Gemma3ForCausalLM, Gemma3TextConfig

from helpers import CHARS, char_requests, char_tokenizer, hf_greedy, hf_logits, perturbed, quench_greedy
from quench.engine.config import ConfigError
from quench.engine.backend import QuenchBackend
from quench.engine.config import EngineConfig
from quench.engine.runners.families import family_of
from quench.engine.runners.forward_plan import plan_forward
from quench.engine.runners.llama import LlamaRunner, on_fast_path

WINDOW = 12  # sliding window of the tiny models' local layers: the tests run past it
PROMPTS = ["def f(x):\n", "x = [1, 2, 3]\nfor i in x:\n    ", "a", "import os\n\nclass A:\n", "print(1)"]


def tiny_gemma(
    dtype: torch.dtype = torch.float32, seed: int = 0, layer_types: tuple[str, ...] = ("sliding_attention", "full_attention", "sliding_attention"),
    **overrides,
) -> Gemma3ForCausalLM:
    """3 layers (local, global, local), GQA, head size 16, its own attention scale and RoPE bases; the norm
    weights drawn at random (Gemma stores w - 1: the initial zeros would hide a missing offset)."""
    torch.manual_seed(seed)
    config = Gemma3TextConfig(
        vocab_size=len(CHARS) + 3, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=24, sliding_window=WINDOW,
        layer_types=list(layer_types), max_position_embeddings=128,
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}},
        bos_token_id=1, eos_token_id=2, pad_token_id=0, **overrides,
    )
    model = Gemma3ForCausalLM(config)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.normal_(0.0, 0.5)
            elif "proj" in name:
                parameter.mul_(4)  # sharper attention and larger activations than the init's: errors show
    return model.to(dtype).eval()




def test_gemma_3_takes_the_fast_path_and_unsupported_variants_do_not():
    assert on_fast_path(tiny_gemma())
    family = family_of(tiny_gemma())
    assert family.windows == (WINDOW, None, WINDOW) and family.rope_kinds[1] == "full_attention"
    assert not on_fast_path(tiny_gemma(final_logit_softcapping=30.0))
    assert not on_fast_path(tiny_gemma(attn_logit_softcapping=50.0))
    backend = QuenchBackend(tiny_gemma(final_logit_softcapping=30.0), char_tokenizer(), EngineConfig(batch_size=2))
    assert type(backend.runner).__name__ == "HFRunner"


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 2e-5), (torch.float64, 1e-12)])
def test_logits_match_hugging_face_on_prefill_and_decode_steps_past_the_window(dtype, tolerance):
    """Rows prefill 6 tokens, then decode one token a step to 3x the window: float32 runs the packed C path while
    every position is below the window and the PyTorch path with per-layer window masks after; float64 the
    PyTorch path throughout."""
    model = tiny_gemma(dtype)
    runner = LlamaRunner(model)
    ids = torch.randint(3, model.config.vocab_size, (2, 3 * WINDOW))
    reference = hf_logits(model, ids)
    cache = runner.new_cache(2, 64)
    zero = torch.zeros(2, dtype=torch.long)
    assert runner._packed(6, zero) == (dtype == torch.float32)
    logits = runner.forward(cache, ids[:, :6], zero)  # (B, 6, V)
    assert torch.allclose(logits.double(), reference[:, :6], rtol=0, atol=tolerance)
    for position in range(6, ids.shape[1]):
        start = torch.full((2,), position)
        step = runner.forward(cache, ids[:, position : position + 1], start)[:, 0]  # (B, V)
        assert torch.allclose(step.double(), reference[:, position], rtol=0, atol=tolerance), position


def test_ragged_verification_steps_match_hugging_face_on_both_paths():
    """Ragged rows of 5, 3 and 1 tokens (verification-shaped) after ragged prefixes, below and past the window."""
    model = tiny_gemma()
    runner = LlamaRunner(model)
    ids = torch.randint(3, model.config.vocab_size, (3, 3 * WINDOW))
    reference = hf_logits(model, ids)
    counts = torch.tensor([5, 3, 1])
    for start, packed in (([4, 2, 4], True), ([WINDOW + 4, WINDOW, WINDOW + 6], False)):
        cache = runner.new_cache(3, 64)
        runner.forward(cache, ids[:, : max(start)], torch.zeros(3, dtype=torch.long), counts=torch.tensor(start))
        tokens = torch.stack([ids[b, s : s + 5] for b, s in enumerate(start)])  # (B, 5)
        assert runner._packed(5, torch.tensor(start)) == packed
        logits = runner.forward(cache, tokens, torch.tensor(start), counts=counts)
        for b, s in enumerate(start):
            n = int(counts[b])
            assert torch.allclose(logits[b, :n].double(), reference[b, s : s + n], rtol=0, atol=2e-5), (start, b)


def test_bfloat16_logits_follow_the_float32_model():
    """bfloat16 on the packed path (and the products this CPU serves fastest) stays close to float32 HF."""
    model = tiny_gemma(torch.float32)
    ids = torch.randint(3, model.config.vocab_size, (2, 10))
    reference = hf_logits(model, ids)
    runner = LlamaRunner(tiny_gemma(torch.bfloat16))
    logits = runner.forward(runner.new_cache(2, 32), ids, torch.zeros(2, dtype=torch.long)).double()
    error = (logits - reference).abs().max() / reference.abs().max()
    assert error < 0.05, float(error)








@pytest.mark.parametrize("fast_path", [True, False])  # the generic path masks each layer type's window too
def test_greedy_output_equals_hugging_face_generate_past_the_window_with_ragged_prompts_and_refills(fast_path):
    model = tiny_gemma()
    reqs = char_requests(PROMPTS)
    out = quench_greedy(model, reqs, 3 * WINDOW, batch_size=2, fast_path=fast_path)
    for r in reqs:
        assert out[r.key] == hf_greedy(model, r, 3 * WINDOW), r.key


@pytest.mark.parametrize("drafter", ["ngram", "draft", "hybrid"])
def test_speculative_greedy_equals_regular_greedy(drafter):
    model = tiny_gemma()
    reqs = char_requests(PROMPTS)
    regular = quench_greedy(model, reqs, 3 * WINDOW, batch_size=3)
    draft = perturbed(model, 0.3) if drafter != "ngram" else None
    fixed = {"draft_length": "fixed", "draft_tokens": 4} if drafter != "ngram" else {"ngram_min": 1}
    assert quench_greedy(model, reqs, 3 * WINDOW, draft, batch_size=3, drafter=drafter, **fixed) == regular


def test_batch_invariance_is_refused_for_gemma_even_without_sliding_layers():
    with pytest.raises(ValueError, match="gemma3_text"):
        plan_forward(tiny_gemma(layer_types=("full_attention",) * 3), batch_invariant=True)



def test_the_engine_refuses_batch_invariance_for_gemma_with_a_config_error():
    with pytest.raises(ConfigError, match="batch_invariant"):
        QuenchBackend(tiny_gemma(), char_tokenizer(), EngineConfig(batch_invariant=True))
