"""SamplingParams.min_tokens and ignore_eos (vLLM's) in the engine and the Hugging Face reference backend.

The tiny model's EOS is set to a token its greedy outputs reach after a few tokens (11), so EOS
ends most of them early unless an option says otherwise.
"""

import pytest
import torch

from helpers import DRAFT_EVERYTHING, char_tokenizer, perturbed, tiny_llama
from quench.engine.backend import QuenchBackend
from quench.engine.config import EngineConfig
from quench.engine.hf_backend import HFBackend
from quench.engine.types import GenerationRequest, SamplingParams

PROMPTS = ["def f(x):\n", "x = [1, 2, 3]\nfor i in x:\n    ", "import os\n\nclass A:\n", "print(1)"]
EOS = 11  # within the first 10 greedy tokens of every prompt above
CONFIGS = {
    "regular": dict(),
    "ngram": dict(drafter="ngram", draft_length="fixed", draft_tokens=3),
    "draft": dict(drafter="draft", draft_length="fixed", draft_tokens=3, min_model_draft=1, **DRAFT_EVERYTHING),
}


@pytest.fixture(scope="module")
def model():
    model = tiny_llama(dtype=torch.float64)
    model.generation_config.eos_token_id = EOS
    return model


@pytest.fixture(scope="module")
def tokenizer():
    return char_tokenizer()


def requests(tokenizer, n=1):
    return [GenerationRequest(f"t/{i}", tuple(tokenizer(p, add_special_tokens=False)["input_ids"]), n=n)
            for i, p in enumerate(PROMPTS)]


def quench(model, tokenizer, name, reqs, sampling, batch_size=3):
    config = EngineConfig(batch_size=batch_size, **CONFIGS[name])
    draft = perturbed(model, 0.3) if config.runs_draft_model else None
    backend = QuenchBackend(model, tokenizer, config, draft_model=draft)
    return {(r.key, r.sample_index): r for r in backend.generate(reqs, sampling)}


def hf_generate(model, request, **options):
    prompt = torch.tensor([request.prompt_ids])
    with torch.inference_mode():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False, pad_token_id=0, **options)
    return tuple(out[0, prompt.shape[1]:].tolist())


@pytest.mark.parametrize("name", list(CONFIGS))
def test_greedy_min_tokens_keeps_eos_out_of_the_first_tokens_as_hugging_face_does(model, tokenizer, name):
    reqs = requests(tokenizer)
    plain = quench(model, tokenizer, name, reqs, SamplingParams(max_new_tokens=16))
    assert all(r.finish_reason == "eos" and len(r.token_ids) < 10 for r in plain.values())  # EOS ends them early
    sampling = SamplingParams(max_new_tokens=16, min_tokens=10)
    out = quench(model, tokenizer, name, reqs, sampling)
    reference = HFBackend(model, tokenizer, batch_size=2)
    by_hf = {(r.key, r.sample_index): r.token_ids for r in reference.generate(reqs, sampling)}
    for r in reqs:
        want = hf_generate(model, r, max_new_tokens=16, min_new_tokens=10, eos_token_id=EOS)
        cut = want[: want.index(EOS)] if EOS in want else want  # the backends leave EOS out of token_ids
        assert out[r.key, 0].token_ids == cut == by_hf[r.key, 0], r.key
        assert len(cut) >= 10 and EOS not in cut


@pytest.mark.parametrize("name", list(CONFIGS))
def test_greedy_ignore_eos_keeps_eos_and_runs_to_max_new_tokens(model, tokenizer, name):
    reqs = requests(tokenizer)
    sampling = SamplingParams(max_new_tokens=16, ignore_eos=True)
    out = quench(model, tokenizer, name, reqs, sampling)
    by_hf = {(r.key, r.sample_index): r for r in HFBackend(model, tokenizer, batch_size=2).generate(reqs, sampling)}
    for r in reqs:
        want = hf_generate(model, r, max_new_tokens=16, eos_token_id=[])  # HF with no EOS at all
        assert EOS in want[:10] and len(want) == 16
        for result in (out[r.key, 0], by_hf[r.key, 0]):
            assert result.token_ids == want and result.finish_reason == "length", r.key


@pytest.mark.parametrize("name", ["regular", "draft"])
def test_sampled_min_tokens_never_draws_eos_early_and_rows_stay_batch_invariant(model, tokenizer, name):
    reqs = requests(tokenizer, n=3)
    plain = quench(model, tokenizer, name, reqs, SamplingParams(temperature=1.0, top_k=2, max_new_tokens=16, seed=5))
    assert sum(r.finish_reason == "eos" and len(r.token_ids) < 12 for r in plain.values()) >= 3
    sampling = SamplingParams(temperature=1.0, top_k=2, max_new_tokens=16, seed=5, min_tokens=12)
    alone = quench(model, tokenizer, name, reqs, sampling, batch_size=1)
    batched = quench(model, tokenizer, name, reqs, sampling, batch_size=4)
    assert {k: r.token_ids for k, r in alone.items()} == {k: r.token_ids for k, r in batched.items()}
    for r in batched.values():
        assert len(r.token_ids) >= 12 and EOS not in r.token_ids[:12]


def test_min_tokens_is_checked():
    with pytest.raises(ValueError, match="min_tokens"):
        SamplingParams(max_new_tokens=4, min_tokens=5)
    with pytest.raises(ValueError, match="min_tokens"):
        SamplingParams(min_tokens=-1)
