"""The hybrid drafter (prompt lookup, else a draft model, per row) and prompt-length checks at admission."""

import copy

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from helpers import DRAFT_EVERYTHING, char_tokenizer, perturbed, tiny_llama
from quench.errors import QuenchError
from quench.engine.decode import DecodeLoop, LoopParts
from quench.engine.draft_length import BassDraftLength, FixedDraftLength
from quench.engine.drafters import CATCH_UP, HybridDrafter, ModelDrafter, NgramDrafter
from quench.engine.backend import QuenchBackend
from quench.engine.config import EngineConfig
from quench.engine.runners.make import make_runner
from quench.engine.rows import Row, StopRules
from quench.engine.scheduler import WorkItem, WorkQueue
from quench.engine.kernels.screen import screen_available
from quench.engine.types import GenerationRequest, SamplingParams
from quench.engine.verify import PLACEHOLDER, verify_sampling

# Repeated text, so prompt lookup finds matches, next to text where it finds none.
PROMPTS = ["def f(x):\n    return f(x)\n\ndef f(", "x = [1, 2, 3]\nfor i in x:\n    ", "a", "abcabcabcab", "print(1)"]


def requests(tokenizer, prompts=PROMPTS, n=1):
    ids = [tuple(tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts]
    return [GenerationRequest(f"t/{i}", p, n=n) for i, p in enumerate(ids)]


def hf_greedy(model, request, max_new_tokens):
    prompt = torch.tensor([request.prompt_ids])
    with torch.inference_mode():
        out = model.generate(prompt, max_new_tokens=max_new_tokens, do_sample=False, attention_mask=torch.ones_like(prompt))
    return out[0, prompt.shape[1] :].tolist()


def hybrid_loop(model, draft, tokenizer, reqs, sampling, batch_size, policy, fast_path=True, row_copy_lengths=False):
    config = EngineConfig(fast_path=fast_path)
    runner, draft_runner = make_runner(model, config), make_runner(draft, config)
    drafter = HybridDrafter(NgramDrafter(batch_size, 3, 2), ModelDrafter(draft_runner, batch_size, 256), batch_size,
                            row_copy_lengths=row_copy_lengths)
    loop = DecodeLoop(LoopParts(runner, runner.new_cache(batch_size, 256), drafter=drafter, policy=policy), WorkQueue(reqs),
                      StopRules(tokenizer, frozenset(), sampling.max_new_tokens), sampling)
    return {(r.key, r.sample_index): r for r in loop.run()}, loop, drafter


@pytest.fixture(scope="module")
def tokenizer():
    return char_tokenizer()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("fast_path", [True, False])
@pytest.mark.parametrize("policy", ["fixed", "bass", "bass-row-copies"])
def test_hybrid_greedy_equals_regular_greedy_with_ragged_rows_and_refills(tokenizer, dtype, fast_path, policy):
    model = tiny_llama(dtype=dtype)
    reqs = requests(tokenizer)
    sampling = SamplingParams(max_new_tokens=37)  # the budget ends inside a block
    length = FixedDraftLength(4) if policy == "fixed" else BassDraftLength(initial=3, maximum=12)
    out, loop, drafter = hybrid_loop(model, perturbed(model, 0.3), tokenizer, reqs, sampling, 2, length, fast_path,
                                     row_copy_lengths=policy == "bass-row-copies")
    for r in reqs:
        assert list(out[r.key, 0].token_ids) == hf_greedy(model, r, 37), r.key
    assert drafter.copied > 0 and drafter.modelled > 0  # both sources drafted
    assert 0 < loop.stats.accepted < loop.stats.drafted


def test_the_engine_runs_hybrid_and_needs_a_draft_model(tokenizer):
    model = tiny_llama(dtype=torch.float64)
    reqs = requests(tokenizer)
    backend = QuenchBackend(model, tokenizer, EngineConfig(batch_size=3, drafter="hybrid", **DRAFT_EVERYTHING),
                            draft_model=perturbed(model, 0.3))
    out = {r.key: r.token_ids for r in backend.generate(reqs, SamplingParams(max_new_tokens=20))}
    assert out == {r.key: tuple(hf_greedy(model, r, 20)) for r in reqs}
    assert backend.last_stats.drafted > 0
    with pytest.raises(ValueError, match="needs a draft_model"):
        QuenchBackend(model, tokenizer, EngineConfig(drafter="hybrid"))


def test_a_sampled_hybrid_row_is_the_same_alone_and_inside_a_batch(tokenizer):
    model = tiny_llama(dtype=torch.float64)
    draft = perturbed(model, 0.3)
    reqs = requests(tokenizer, n=2)
    sampling = SamplingParams(temperature=1.0, top_k=20, max_new_tokens=24, seed=3)
    # the same drafting at both sizes: the automatic settings depend on the batch size
    config = dict(drafter="hybrid", draft_length="fixed", draft_tokens=3, row_copy_lengths=True, min_model_draft=1,
                  **DRAFT_EVERYTHING)
    alone = QuenchBackend(model, tokenizer, EngineConfig(batch_size=1, **config), draft_model=draft)
    batched = QuenchBackend(model, tokenizer, EngineConfig(batch_size=4, **config), draft_model=draft)
    first = {(r.key, r.sample_index): r.token_ids for r in alone.generate(reqs, sampling)}
    second = {(r.key, r.sample_index): r.token_ids for r in batched.generate(reqs, sampling)}
    assert first == second
    assert len(set(first.values())) > len(reqs)  # the two samples of a prompt differ
    assert batched.last_stats.accepted > 0


def test_a_copied_draft_is_verified_as_a_one_hot_draft_distribution():
    """A copy is a draft with probability 1: verification treats one-hot draft probabilities exactly as
    a deterministic draft (accept x with target(x), else draw from target without x). So hybrid marks
    copied rows deterministic (`Draft.deterministic`) instead of spelling their one-hot rows out."""
    torch.manual_seed(0)
    target_probs = torch.softmax(torch.randn(3, 4, 7), dim=-1)  # (B, K + 1, V)
    draft_tokens = torch.tensor([[1, 2, 3], [4, 4, PLACEHOLDER], [0, 6, 5]])  # (B, K)
    one_hot = torch.zeros(3, 3, 7).scatter(-1, draft_tokens.clamp(min=0)[..., None], 1.0)  # (B, K, V)
    for seed in range(20):
        generators = [torch.Generator().manual_seed(seed * 3 + b) for b in range(3)]
        deterministic = verify_sampling(draft_tokens, None, target_probs, generators)
        generators = [torch.Generator().manual_seed(seed * 3 + b) for b in range(3)]
        hot = verify_sampling(draft_tokens, one_hot, target_probs, generators)
        assert torch.equal(deterministic.tokens, hot.tokens)


def make_row(slot_tokens, generator=None):
    request = GenerationRequest("r", tuple(slot_tokens[:3]))
    return Row(0, request, 0, generator or torch.Generator(), list(slot_tokens), 3)


def test_a_model_draft_floor_keeps_rows_drafting_at_least_that_many_tokens():
    model = tiny_llama(dtype=torch.float64)
    drafter = HybridDrafter(NgramDrafter(1, 3, 2), ModelDrafter(make_runner(model, EngineConfig()), 1, 64), 1,
                            min_model_tokens=2)
    row = make_row([9, 10, 11, 12])
    drafter.admit([(0, WorkItem(0, GenerationRequest("r0", tuple(row.tokens[:3])), 0))])
    row.prompt_len = 3
    draft = drafter.propose([row], [4], SamplingParams())
    assert (draft.tokens[0] != PLACEHOLDER).sum() == 2  # two from the start (the default floor: one)
    row.tokens += [int(draft.tokens[0, 0]) + 1]  # rejected at once
    draft = drafter.propose([row], [4], SamplingParams())
    assert drafter.model_length[0] == 2 and (draft.tokens[0] != PLACEHOLDER).sum() == 2


def test_lookup_rows_copy_and_other_rows_ask_the_model_for_their_own_length(tokenizer):
    model = tiny_llama(dtype=torch.float64)
    drafter = HybridDrafter(NgramDrafter(2, 3, 2), ModelDrafter(make_runner(model, EngineConfig()), 2, 64), 2)
    rows = [make_row([5, 6, 7, 8, 5, 6]), make_row([9, 10, 11, 12])]
    drafter.admit([(b, WorkItem(b, GenerationRequest(f"r{b}", tuple(row.tokens[:3])), 0)) for b, row in enumerate(rows)])
    for row in rows:  # the prompts were prefilled from 3 tokens: the rest is output so far
        row.prompt_len = 3
    draft = drafter.propose(rows, [4, 4], SamplingParams())
    assert draft.tokens[0].tolist() == [7, 8, 5, 6]  # "5 6" occurred before: copy what followed
    assert draft.tokens[1, 0] != PLACEHOLDER and draft.tokens[1, 1:].tolist() == [PLACEHOLDER] * 3  # model: length 1
    proposed = int(draft.tokens[1, 0])
    rows[1].tokens += [proposed, 13]  # the target accepted the model's token (and added one)
    draft = drafter.propose(rows, [4, 4], SamplingParams())
    assert drafter.model_length[1] == 2 and (draft.tokens[1] != PLACEHOLDER).sum() == 2
    rows[1].tokens += [int(draft.tokens[1, 0]) + 1]  # rejected at once
    drafter.propose(rows, [4, 4], SamplingParams())
    assert drafter.model_length[1] == 1
    sampled = drafter.propose(rows, [4, 4], SamplingParams(temperature=1.0))  # the copy: probability 1, not spelled out
    assert sampled.tokens[0].tolist() == [7, 8, 5, 6] and sampled.deterministic.tolist() == [True, False]
    assert sampled.probs.shape[1] == 1 and torch.isclose(sampled.probs[1, 0].sum(), torch.tensor(1.0, dtype=sampled.probs.dtype))


def test_row_copy_lengths_cap_a_row_after_a_rejected_copy_and_lift_the_cap_after_a_kept_one(tokenizer):
    model = tiny_llama(dtype=torch.float64)
    drafter = HybridDrafter(NgramDrafter(1, 3, 2), ModelDrafter(make_runner(model, EngineConfig()), 1, 64), 1,
                            row_copy_lengths=True)
    row = make_row([5, 6, 7, 8, 9, 10, 11, 5, 6])
    drafter.admit([(0, WorkItem(0, GenerationRequest("r0", tuple(row.tokens[:3])), 0))])
    row.prompt_len = 3
    assert drafter.propose([row], [4], SamplingParams()).tokens[0].tolist() == [7, 8, 9, 10]  # "5 6" seen: copy
    row.tokens += [7, 3]  # the target kept one copied token, then corrected
    row.tokens += [5, 6]  # ... and the row repeats "5 6" again
    draft = drafter.propose([row], [4], SamplingParams())
    assert drafter.copy_cap[0] == 2 and draft.tokens[0].tolist() == [7, 3]  # capped at kept + 1
    row.tokens += [7, 3, 5]  # the whole capped copy was kept (and one more token)
    row.tokens += [6]  # "5 6" again: the cap is lifted back to the batch length
    draft = drafter.propose([row], [4], SamplingParams())
    assert drafter.copy_cap[0] is None and len(draft.tokens[0]) == 4


@pytest.mark.parametrize("fast_path", [True, False])
def test_a_row_that_skipped_the_model_catches_up_exactly(fast_path):
    """After many tokens drafted by lookup (or none), the draft model's cache holds what a fresh run would."""
    model = tiny_llama(dtype=torch.float64)
    drafter = ModelDrafter(make_runner(model, EngineConfig(fast_path=fast_path)), 2, 128)
    rows = [make_row([5, 6, 7]), make_row([8, 9, 10])]
    drafter.admit([(b, WorkItem(b, GenerationRequest(f"r{b}", tuple(row.tokens)), 0)) for b, row in enumerate(rows)])
    sampling = SamplingParams(temperature=1.0, max_new_tokens=100)
    drafter.propose(rows, [2, 2], sampling)
    rows[0].tokens += list(range(20, 20 + 2 * CATCH_UP + 5))  # row 0 went on without the model
    rows[1].tokens += [30]
    drafter.propose(rows, [0, 2], sampling)  # row 0 skipped again
    rows[1].tokens += [31, 32]
    draft = drafter.propose(rows, [1, 1], sampling)
    for b, row in enumerate(rows):
        with torch.inference_mode():
            logits = model(torch.tensor([row.tokens])).logits[0, -1]  # (V,)
        assert torch.allclose(draft.probs[b, 0], torch.softmax(logits.float(), dim=-1), rtol=0, atol=1e-6), b  # float32 probs


def test_a_prompt_past_the_position_limit_is_a_clear_error(tokenizer):
    model = tiny_llama(dtype=torch.float64)  # 512 positions
    backend = QuenchBackend(model, tokenizer, EngineConfig(batch_size=2))
    long = [GenerationRequest("long", (5,) * 600)]
    with pytest.raises(QuenchError, match=r"'long'.*600 tokens.*target model's position limit of 512"):
        list(backend.generate(long, SamplingParams(max_new_tokens=4)))
    short_draft = copy.deepcopy(model)
    short_draft.config.max_position_embeddings = 100
    hybrid = QuenchBackend(model, tokenizer, EngineConfig(batch_size=2, drafter="hybrid", **DRAFT_EVERYTHING),
                            draft_model=short_draft)
    with pytest.raises(QuenchError, match=r"200 tokens.*draft model's position limit of 100"):
        list(hybrid.generate([GenerationRequest("mid", (5,) * 200)], SamplingParams(max_new_tokens=4)))
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_embd=16, n_layer=1, n_head=2, n_positions=64)).eval()
    with pytest.raises(QuenchError, match="position limit of 64"):  # learned positions: was a bare IndexError
        list(QuenchBackend(gpt2, tokenizer, EngineConfig(batch_size=1)).generate(
            [GenerationRequest("g", (5,) * 65)], SamplingParams(max_new_tokens=2)))


def test_a_cumulative_stop_ends_model_drafts_after_the_floor_and_keeps_greedy_output(tokenizer):
    """Tiny random models give every token ~1/vocab, so the product of the draft's probabilities falls below
    any useful stop at once: drafts keep exactly their floor, and none without one; 0 turns the rule off."""
    model = tiny_llama(dtype=torch.float64)
    runner = make_runner(model, EngineConfig())
    for stop, floor, want in [(0.5, 2, 2), (0.5, 0, 0), (0.0, 2, 5)]:
        drafter = ModelDrafter(runner, 1, 64, stop=stop, floor=floor)
        row = make_row([9, 10, 11, 12])
        drafter.admit([(0, WorkItem(0, GenerationRequest("r0", tuple(row.tokens[:3])), 0))])
        draft = drafter.propose([row], [5], SamplingParams())
        assert int((draft.tokens[0] != PLACEHOLDER).sum()) == want, (stop, floor)
    reqs = requests(tokenizer)
    config = EngineConfig(batch_size=2, drafter="hybrid", draft_stop=0.3, min_model_draft=2)
    backend = QuenchBackend(model, tokenizer, config, draft_model=perturbed(model, 0.3))
    out = {r.key: r.token_ids for r in backend.generate(reqs, SamplingParams(max_new_tokens=20))}
    assert out == {r.key: tuple(hf_greedy(model, r, 20)) for r in reqs}
    with pytest.raises(ValueError, match="draft_stop"):
        EngineConfig(draft_stop=1.0)


def test_an_int8_draft_proposes_and_the_target_keeps_its_own_greedy_output(tokenizer):
    """A bfloat16 draft runs from int8 weight copies where the CPU has AMX int8 (`draft_int8`, the default):
    its proposals change a little, the target's greedy output does not."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=tokenizer.vocab_size, hidden_size=128, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256)
    model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
    draft = perturbed(model, 0.3)
    reqs = requests(tokenizer)
    sampling = SamplingParams(max_new_tokens=24)
    regular = QuenchBackend(model, tokenizer, EngineConfig(batch_size=2))
    want = {r.key: r.token_ids for r in regular.generate(reqs, sampling)}
    for int8 in (True, False):
        backend = QuenchBackend(model, tokenizer, EngineConfig(batch_size=2, drafter="draft", draft_length="fixed",
                                                              draft_tokens=3, draft_int8=int8, **DRAFT_EVERYTHING),
                                draft_model=draft)
        assert backend.draft_runner.int8 == (int8 and screen_available())
        assert (backend.draft_runner.lm_head.int8 is not None) == backend.draft_runner.int8
        assert {r.key: r.token_ids for r in backend.generate(reqs, sampling)} == want, int8
        assert backend.last_stats.drafted > 0
