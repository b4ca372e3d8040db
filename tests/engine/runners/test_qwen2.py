"""The fast path on Qwen2 (Llama's layer with q/k/v biases, `families.py`) against Hugging Face's
`Qwen2ForCausalLM` on tiny random models: logits, greedy output, speculation, a sliding window, batch invariance."""

import random

import pytest
import torch

from helpers import CHARS, char_requests, char_tokenizer, hf_greedy, hf_logits, perturbed, quench_greedy, tiny_qwen2, torch_threads
from quench.engine.kernels import invariant
from quench.engine.config import ConfigError
from quench.engine.backend import QuenchBackend
from quench.engine.config import EngineConfig
from quench.engine.runners.forward_plan import plan_forward
from quench.engine.runners.llama import LlamaRunner, on_fast_path

WINDOW = 10
PROMPTS = ["def f(x):\n", "x = [1, 2, 3]\nfor i in x:\n    ", "a", "import os\n\nclass A:\n", "print(1)"]


def test_qwen2_takes_the_fast_path():
    assert on_fast_path(tiny_qwen2()) and on_fast_path(tiny_qwen2(window=WINDOW))
    assert LlamaRunner(tiny_qwen2(window=WINDOW)).window == WINDOW


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 2e-5), (torch.float64, 1e-12)])
@pytest.mark.parametrize("window", [None, WINDOW])
def test_logits_match_hugging_face_on_prefill_and_ragged_continuation(dtype, tolerance, window):
    """Prefill 6 tokens, then ragged steps of 1-4 tokens (one row re-feeding earlier positions) to past the window."""
    model = tiny_qwen2(dtype, window=window)
    runner = LlamaRunner(model)
    ids = torch.randint(3, model.config.vocab_size, (2, 40))
    reference = hf_logits(model, ids)
    cache = runner.new_cache(2, 64)
    logits = runner.forward(cache, ids[:, :6], torch.zeros(2, dtype=torch.long))
    assert torch.allclose(logits.double(), reference[:, :6], rtol=0, atol=tolerance)
    done = [6, 6]
    for step in range(10):
        start = torch.tensor([done[0], done[1] - 2 if step == 3 else done[1]])  # row 1 rolls back 2 positions once
        counts = torch.tensor([1 + step % 4, 1 + (step + 2) % 4])
        tokens = torch.stack([ids[b, int(start[b]) : int(start[b]) + 4] for b in range(2)])
        logits = runner.forward(cache, tokens, start, counts=counts)
        for b in range(2):
            s, n = int(start[b]), int(counts[b])
            assert torch.allclose(logits[b, :n].double(), reference[b, s : s + n], rtol=0, atol=tolerance), (step, b)
            done[b] = s + n


@pytest.mark.parametrize("window", [None, WINDOW])
@pytest.mark.parametrize("fast_path", [True, False])  # the generic path masks the sliding layers' window too
def test_greedy_output_equals_hugging_face_generate_with_ragged_prompts_and_refills(window, fast_path):
    model = tiny_qwen2(window=window)
    reqs = char_requests(PROMPTS)
    out = quench_greedy(model, reqs, 24, batch_size=2, fast_path=fast_path)
    for r in reqs:
        assert out[r.key] == hf_greedy(model, r, 24), r.key


@pytest.mark.parametrize("drafter", ["ngram", "draft", "hybrid"])
def test_speculative_greedy_equals_regular_greedy(drafter):
    model = tiny_qwen2()
    reqs = char_requests(PROMPTS)
    regular = quench_greedy(model, reqs, 24, batch_size=3)
    draft = perturbed(model, 0.3) if drafter != "ngram" else None
    fixed = {"draft_length": "fixed", "draft_tokens": 4} if drafter != "ngram" else {"ngram_min": 1}
    assert quench_greedy(model, reqs, 24, draft, batch_size=3, drafter=drafter, **fixed) == regular


@pytest.mark.skipif(not invariant.available(torch.float32), reason="no native kernels built here")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_batch_invariant_logits_bits_do_not_depend_on_the_batch_or_the_step_width(dtype):
    """Each sequence fed one token at a time alone against all of them in ragged chunks of 1-6 tokens, 2 threads
    (products wide enough that PyTorch's kernels would block them by row count)."""
    model = tiny_qwen2(dtype, hidden=256)
    runner = LlamaRunner(model, plan_forward(model, batch_invariant=True))
    rng = random.Random(0)
    seqs = [[rng.randrange(3, model.config.vocab_size) for _ in range(rng.randint(5, 24))] for _ in range(6)]
    alone = []
    for seq in seqs:
        cache = runner.new_cache(1, 32)
        alone.append(torch.cat([runner.forward(cache, torch.tensor([[t]]), torch.tensor([i]))[0] for i, t in enumerate(seq)]))
    cache = runner.new_cache(len(seqs), 32)
    done, got = [0] * len(seqs), [[] for _ in seqs]
    with torch_threads(2):
        while any(d < len(s) for d, s in zip(done, seqs)):
            counts = [min(rng.randint(1, 6), len(s) - d) for d, s in zip(done, seqs)]
            tokens = torch.zeros(len(seqs), max(counts), dtype=torch.long)
            for b, (d, n) in enumerate(zip(done, counts)):
                tokens[b, :n] = torch.tensor(seqs[b][d : d + n])
            logits = runner.forward(cache, tokens, torch.tensor(done), counts=torch.tensor(counts))
            for b, n in enumerate(counts):
                got[b].append(logits[b, :n])
                done[b] += n
    for b in range(len(seqs)):
        assert torch.equal(torch.cat(got[b]), alone[b]), b


@pytest.mark.skipif(not invariant.available(torch.float32), reason="no native kernels built here")
def test_batch_invariant_greedy_output_is_the_same_at_batch_1_and_8_with_prompt_lookup():
    model = tiny_qwen2(torch.bfloat16)
    reqs = char_requests(PROMPTS)
    alone = {}
    for r in reqs:
        alone.update(quench_greedy(model, [r], 24, batch_size=1, batch_invariant=True))
    assert quench_greedy(model, reqs, 24, batch_size=8, batch_invariant=True) == alone
    assert quench_greedy(model, reqs, 24, batch_size=8, batch_invariant=True, drafter="ngram", ngram_min=1) == alone


def test_batch_invariance_is_refused_with_a_sliding_window():
    with pytest.raises(ValueError, match="sliding windows"):
        plan_forward(tiny_qwen2(window=WINDOW), batch_invariant=True)
    with pytest.raises(ConfigError, match="batch_invariant"):  # the engine refuses first, naming the field
        QuenchBackend(tiny_qwen2(window=WINDOW), char_tokenizer(), EngineConfig(batch_invariant=True))


def test_the_generic_path_masks_the_window_of_a_model_whose_every_layer_slides():
    """Mistral (Qwen2's layer without biases, one window for every layer) runs on the generic path, windowed."""
    from transformers import MistralConfig, MistralForCausalLM

    torch.manual_seed(0)
    config = MistralConfig(
        vocab_size=len(CHARS) + 3, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, sliding_window=WINDOW, bos_token_id=1, eos_token_id=2,
        pad_token_id=0,
    )
    model = MistralForCausalLM(config).eval()
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(4)
            layer.self_attn.k_proj.weight.mul_(4)
    reqs = char_requests(PROMPTS)
    out = quench_greedy(model, reqs, 24, batch_size=2, fast_path=False)
    for r in reqs:
        assert out[r.key] == hf_greedy(model, r, 24), r.key
