"""The engine against Hugging Face greedy decoding, token for token, on tiny random models."""

from dataclasses import fields

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from helpers import DRAFT_EVERYTHING, char_tokenizer, perturbed, tiny_llama
from quench.engine.config import ConfigError, DraftingDefaults, drafting_defaults
from quench.engine.backend import QuenchBackend
from quench.engine.config import EngineConfig
from quench.engine.types import GenerationRequest, SamplingParams

PROMPTS = ["def f(x):\n", "x = [1, 2, 3]\nfor i in x:\n    ", "a", "import os\n\nclass A:\n", "print(1)"]


def requests(tokenizer, prompts=PROMPTS, n=1):
    ids = [tuple(tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts]
    return [GenerationRequest(f"t/{i}", p, n=n) for i, p in enumerate(ids)]


def hf_greedy(model, request, max_new_tokens, eos=None):
    prompt = torch.tensor([request.prompt_ids])
    options = dict(max_new_tokens=max_new_tokens, do_sample=False, attention_mask=torch.ones_like(prompt))
    if eos is not None:
        options["eos_token_id"] = eos
    with torch.inference_mode():
        out = model.generate(prompt, **options)[0, prompt.shape[1] :].tolist()
    if eos is not None and eos in out:
        out = out[: out.index(eos)]  # the backends leave EOS out of token_ids
    return out


def quench_outputs(model, tokenizer, reqs, sampling, draft_model=None, **config):
    backend = QuenchBackend(model, tokenizer, EngineConfig(**{**DRAFT_EVERYTHING, **config}), draft_model=draft_model)
    return {(r.key, r.sample_index): r for r in backend.generate(reqs, sampling)}, backend


@pytest.fixture(scope="module")
def tokenizer():
    return char_tokenizer()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("fast_path", [True, False])
def test_regular_greedy_equals_hf_with_ragged_prompts_and_refills(tokenizer, dtype, fast_path):
    model = tiny_llama(dtype=dtype)
    reqs = requests(tokenizer)
    out, backend = quench_outputs(model, tokenizer, reqs, SamplingParams(max_new_tokens=16), batch_size=2, fast_path=fast_path)
    assert backend.runner.__class__.__name__ == ("LlamaRunner" if fast_path else "HFRunner")
    for r in reqs:
        assert list(out[r.key, 0].token_ids) == hf_greedy(model, r, 16), r.key
        assert out[r.key, 0].finish_reason == "length"


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("k", [1, 3, 5])
@pytest.mark.parametrize("draft", ["same", "random"])
def test_speculative_greedy_with_a_draft_model_equals_hf(tokenizer, dtype, k, draft):
    model = tiny_llama(dtype=dtype)
    draft_model = model if draft == "same" else tiny_llama(dtype=dtype, seed=1)
    reqs = requests(tokenizer)
    sampling = SamplingParams(max_new_tokens=13)  # not a multiple of k + 1: the budget ends inside a block
    out, backend = quench_outputs(
        model, tokenizer, reqs, sampling, draft_model, batch_size=3, drafter="draft", draft_length="fixed", draft_tokens=k
    )
    for r in reqs:
        assert list(out[r.key, 0].token_ids) == hf_greedy(model, r, 13), r.key
    stats = backend.last_stats
    if draft == "same":
        assert stats.accepted == stats.drafted > 0  # identical models agree on every token
    else:
        assert stats.accepted < stats.drafted  # rejections happened, and the output is still exact


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("drafter", ["ngram", "draft"])
def test_speculative_greedy_with_bass_draft_length_equals_hf(tokenizer, drafter, dtype):
    model = tiny_llama(dtype=dtype)
    reqs = requests(tokenizer)
    out, _ = quench_outputs(
        model, tokenizer, reqs, SamplingParams(max_new_tokens=40), tiny_llama(dtype=dtype, seed=1),
        batch_size=4, drafter=drafter, draft_length="bass",
    )
    for r in reqs:
        assert list(out[r.key, 0].token_ids) == hf_greedy(model, r, 40), r.key


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_loop_drafts_keep_greedy_output_exact(tokenizer, dtype):
    """Tiny random models fall into repetition loops (and one prompt's answer leaves its loop again):
    rows in a loop draft 12 tokens of it, and the output is still greedy's, token for token."""
    model = tiny_llama(dtype=dtype)
    reqs = requests(tokenizer)
    sampling = SamplingParams(max_new_tokens=96)
    config = dict(batch_size=3, drafter="ngram", draft_length="fixed", draft_tokens=1)
    out, backend = quench_outputs(model, tokenizer, reqs, sampling, draft_loop_tokens=12, **config)
    for r in reqs:
        assert list(out[r.key, 0].token_ids) == hf_greedy(model, r, 96), r.key
    looped = backend.last_stats
    _, plain = quench_outputs(model, tokenizer, reqs, sampling, draft_loop_tokens=0, **config)
    assert looped.row_steps <= plain.last_stats.row_steps * 4 // 5  # the loops went by in long accepted drafts
    assert looped.accepted < looped.drafted  # a loop left: its draft was rejected, the output still exact


def test_eos_inside_an_accepted_block_ends_the_row_there(tokenizer):
    model = tiny_llama(dtype=torch.float64)
    reqs = requests(tokenizer)
    free = hf_greedy(model, reqs[1], 20)
    eos = free[9]  # make the 10th greedy token the end of sequence
    model.generation_config.eos_token_id = eos
    out, backend = quench_outputs(
        model, tokenizer, reqs, SamplingParams(max_new_tokens=20), model,
        batch_size=2, drafter="draft", draft_length="fixed", draft_tokens=4,
    )
    for r in reqs:
        assert list(out[r.key, 0].token_ids) == hf_greedy(model, r, 20, eos=eos), r.key
    assert out[reqs[1].key, 0].finish_reason == "eos" and len(out[reqs[1].key, 0].token_ids) == free.index(eos)


def test_generic_path_runs_a_gpt2_model_exactly(tokenizer):
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=2, n_head=4, n_positions=256, eos_token_id=2, bos_token_id=1)
    model = GPT2LMHeadModel(config).to(torch.float64).eval()
    reqs = requests(tokenizer)
    for drafter in ("none", "ngram"):
        out, backend = quench_outputs(model, tokenizer, reqs, SamplingParams(max_new_tokens=12), batch_size=2, drafter=drafter)
        assert backend.runner.__class__.__name__ == "HFRunner"
        for r in reqs:
            assert list(out[r.key, 0].token_ids) == hf_greedy(model, r, 12), (drafter, r.key)


@pytest.mark.parametrize(
    "config",
    [
        dict(),
        dict(drafter="draft", draft_length="fixed", draft_tokens=3),
        dict(drafter="ngram", draft_length="fixed", draft_tokens=3),
        dict(drafter="draft", draft_length="fixed", draft_tokens=3, draft_confidence=0.0133),  # ~half cut
    ],
)
def test_a_sampled_row_is_the_same_alone_and_inside_a_batch(tokenizer, config):
    """The same drafting settings at both batch sizes (the shipped ones differ by batch size, and which
    tokens are drafted decides how the row's generator is drawn)."""
    config = dict(config, draft_stop=0.0, min_model_draft=1)
    model = tiny_llama(dtype=torch.float64)
    draft_model = tiny_llama(dtype=torch.float64, seed=1)
    reqs = requests(tokenizer, n=2)
    sampling = SamplingParams(temperature=1.0, top_k=20, max_new_tokens=14, seed=3)
    alone, _ = quench_outputs(model, tokenizer, reqs, sampling, draft_model, batch_size=1, **config)
    batched, _ = quench_outputs(model, tokenizer, reqs, sampling, draft_model, batch_size=4, **config)
    assert {k: v.token_ids for k, v in alone.items()} == {k: v.token_ids for k, v in batched.items()}
    assert len({v.token_ids for v in alone.values()}) > len(reqs)  # the two samples of a prompt differ


def test_a_resumed_request_draws_the_samples_the_whole_run_drew(tokenizer):
    model = tiny_llama(dtype=torch.float64)
    reqs = requests(tokenizer, n=3)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=12, seed=5)
    whole, _ = quench_outputs(model, tokenizer, reqs, sampling, batch_size=4)
    # A resume asks only for what is missing: the last request's last two samples, at list index 0.
    last = reqs[-1]
    rest = GenerationRequest(last.key, last.prompt_ids, n=2, sample_offset=1)
    resumed, _ = quench_outputs(model, tokenizer, [rest], sampling, batch_size=4)
    assert set(resumed) == {(last.key, 1), (last.key, 2)}
    assert {k: v.token_ids for k, v in resumed.items()} == {k: whole[k].token_ids for k in resumed}


def test_stop_sequence_and_hook(tokenizer):
    model = tiny_llama(dtype=torch.float64)
    [request] = requests(tokenizer, ["abc"])
    free, _ = quench_outputs(model, tokenizer, [request], SamplingParams(max_new_tokens=10))
    text = free[request.key, 0].text
    stop = text[3:5]
    stopped = GenerationRequest(request.key, request.prompt_ids, stop_sequences=(stop,))
    for config in (dict(), dict(drafter="draft", draft_length="fixed", draft_tokens=4)):
        out, _ = quench_outputs(model, tokenizer, [stopped], SamplingParams(max_new_tokens=10), model, **config)
        result = out[request.key, 0]
        assert result.finish_reason == "stop" and result.text == text[: text.find(stop)]
        assert len(result.token_ids) == 5  # the token that completed the stop text, and nothing after it
    hooked = QuenchBackend(model, tokenizer, stop_hook=lambda req, ids, text: len(ids) >= 4)
    [result] = hooked.generate([request], SamplingParams(max_new_tokens=10))
    assert result.finish_reason == "hook" and list(result.token_ids) == list(free[request.key, 0].token_ids[:4])


def test_many_samples_flow_through_few_slots(tokenizer):
    model = tiny_llama(dtype=torch.float64)
    reqs = requests(tokenizer, PROMPTS[:2], n=5)
    sampling = SamplingParams(temperature=0.8, max_new_tokens=6, seed=1)
    out, backend = quench_outputs(model, tokenizer, reqs, sampling, batch_size=3)
    assert sorted(out) == sorted((r.key, i) for r in reqs for i in range(5))
    assert backend.last_stats.prefill_tokens == sum(len(r.prompt_ids) for r in reqs)  # one prefill per prompt


@pytest.mark.parametrize("drafter", ["draft", "hybrid"])
def test_speculation_pauses_while_more_rows_than_draft_max_rows_are_live_and_resumes_exactly(tokenizer, drafter):
    """Three rows live: regular steps. Row 0 stops early (a stop sequence), then the two others draft again,
    the draft model catching up on the tokens it skipped; greedy output stays the target's own."""
    model = tiny_llama(dtype=torch.float64)
    reqs = requests(tokenizer, PROMPTS[:3])
    sampling = SamplingParams(max_new_tokens=40)
    early = quench_outputs(model, tokenizer, reqs[:1], sampling, batch_size=1)[0]["t/0", 0].text[8:11]
    reqs[0] = GenerationRequest(reqs[0].key, reqs[0].prompt_ids, stop_sequences=(early,))
    out, backend = quench_outputs(model, tokenizer, reqs, sampling, perturbed(model, 0.3), batch_size=3,
                                  drafter=drafter, draft_length="fixed", draft_tokens=4, draft_max_rows=2)
    assert out["t/0", 0].finish_reason == "stop" and "drafted" not in out["t/0", 0].extra  # never drafted
    for r in reqs[1:]:
        assert list(out[r.key, 0].token_ids) == hf_greedy(model, r, 40), r.key
        assert out[r.key, 0].extra["drafted"] > 0  # drafting resumed once row 0 left
        assert out[r.key, 0].extra["steps"] > 12  # ... after some regular steps
    _, never = quench_outputs(model, tokenizer, reqs, sampling, perturbed(model, 0.3), batch_size=3,
                              drafter=drafter, draft_length="fixed", draft_tokens=4, draft_max_rows=0)
    assert never.last_stats.drafted > backend.last_stats.drafted  # 0: no pause
    assert EngineConfig().draft_max_rows == 8  # the shipped default; 0 (never pause) was run above
    with pytest.raises(ConfigError, match="draft_max_rows"):
        EngineConfig(draft_max_rows=-1)


@pytest.mark.parametrize("drafter", ["draft", "hybrid"])
def test_a_draft_cut_where_the_draft_model_is_unsure_keeps_greedy_exact(tokenizer, drafter):
    model = tiny_llama(dtype=torch.float64)
    draft_model = perturbed(model, 0.3)
    reqs = requests(tokenizer)
    sampling = SamplingParams(max_new_tokens=20)
    stats = {}
    cut = 0.0133  # about the median probability this near-uniform tiny draft gives its argmax token
    for confidence in (0.0, cut):
        out, backend = quench_outputs(model, tokenizer, reqs, sampling, draft_model, batch_size=3, drafter=drafter,
                                      draft_length="fixed", draft_tokens=4, draft_confidence=confidence)
        for r in reqs:
            assert list(out[r.key, 0].token_ids) == hf_greedy(model, r, 20), (confidence, r.key)
        stats[confidence] = backend.last_stats
    assert 0 < stats[cut].drafted < stats[0.0].drafted  # unsure tokens were not proposed, sure ones were


def test_cost_aware_drafting_resolves_by_batch_size_at_construction_unless_set():
    one, eight = EngineConfig(batch_size=1), EngineConfig(batch_size=8)
    assert one.draft_confidence == eight.draft_confidence == 0.0
    assert not one.row_copy_lengths and eight.row_copy_lengths
    assert one.draft_stop == 0.15 and eight.draft_stop == 0.4  # a drafted token costs more to verify above batch 1
    assert one.min_model_draft == 2 and eight.min_model_draft == 1
    # nothing is left to resolve later (max_len: None sizes the cache per call; batch_invariant: None is "wherever
    # the kernels serve the model", which the model decides)
    for config in (one, eight):
        assert all(getattr(config, f.name) is not None for f in fields(config) if f.name not in ("max_len", "batch_invariant"))
        assert drafting_defaults(config.batch_size) == DraftingDefaults(config.draft_stop, config.min_model_draft,
                                                                        config.row_copy_lengths)
    explicit = EngineConfig(batch_size=8, draft_confidence=0.4, draft_stop=0.0, row_copy_lengths=False)
    assert explicit.draft_confidence == 0.4 and explicit.draft_stop == 0.0 and not explicit.row_copy_lengths
    assert EngineConfig(batch_size=1, draft_confidence=0.3).draft_confidence == 0.3
    assert EngineConfig(batch_size=1, min_model_draft=1).min_model_draft == 1
    for bad in (dict(draft_confidence=1.0), dict(draft_stop=-0.1), dict(min_model_draft=0)):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            EngineConfig(**bad)


@pytest.mark.parametrize("drafter", ["none", "ngram"])
def test_the_cache_grows_for_a_long_prompt_and_shrinks_after_it_without_changing_a_token(tokenizer, drafter):
    """Rows live in the cache while it is resized; their answers equal those of a cache sized once."""
    model = tiny_llama(dtype=torch.float32)
    prompts = [*PROMPTS[:3], "x = 1\n" * 50, *PROMPTS[3:], *PROMPTS]  # the long one arrives while rows run
    reqs = requests(tokenizer, prompts)
    sampling = SamplingParams(max_new_tokens=16)
    fixed, _ = quench_outputs(model, tokenizer, reqs, sampling, batch_size=2, drafter=drafter, max_len=512)
    backend = QuenchBackend(model, tokenizer, EngineConfig(**{**DRAFT_EVERYTHING, "batch_size": 2, "drafter": drafter}))
    lengths, fitted = [], {}  # the cache's length as each answer comes out
    for result in backend.generate(reqs, sampling):
        fitted[result.key, result.sample_index] = result
        lengths.append(backend._cache.max_len)
    assert {k: v.token_ids for k, v in fitted.items()} == {k: v.token_ids for k, v in fixed.items()}
    assert max(lengths) >= 300 + 16 and lengths[-1] <= 128  # held for the long prompt only


def test_draft_sampled_off_drafts_greedy_steps_only_and_sampled_rows_draw_as_regular_decoding(tokenizer):
    model = tiny_llama(dtype=torch.float64)
    reqs = requests(tokenizer, n=2)
    sampled = SamplingParams(temperature=1.0, top_k=20, max_new_tokens=24, seed=3)
    greedy = SamplingParams(max_new_tokens=48)
    config = dict(batch_size=4, drafter="ngram", ngram_min=1, draft_sampled=False, draft_length="bass")  # drafts whatever the timings
    plain, _ = quench_outputs(model, tokenizer, reqs, sampled, batch_size=4)
    quiet, backend = quench_outputs(model, tokenizer, reqs, sampled, **config)
    assert {k: v.token_ids for k, v in quiet.items()} == {k: v.token_ids for k, v in plain.items()}
    assert backend.last_stats.drafted == 0  # no sampled step drafted
    _, drafting = quench_outputs(model, tokenizer, reqs, sampled, batch_size=4, drafter="ngram", ngram_min=1)
    assert drafting.last_stats.drafted > 0  # the same rows do draft where sampled steps may
    out, backend = quench_outputs(model, tokenizer, reqs, greedy, **config)
    assert backend.last_stats.drafted > 0  # greedy steps draft
    for r in reqs:
        assert list(out[r.key, 0].token_ids) == hf_greedy(model, r, 48), r.key
