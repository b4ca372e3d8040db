"""Small pieces of the engine: masks, the KV cache, sampling filters, draft lengths, n-gram lookup, budgets."""

import math

import pytest
import torch

from helpers import char_tokenizer, tiny_llama
from quench.runs.budget import budget_pass_rates, sample_within_budget
from quench.engine.draft_length import PROBE_EVERY, BassDraftLength, FixedDraftLength, MeasuredDraftLength, StepCost, make_policy
from quench.engine.drafters import LOOP_SPAN, NgramDrafter, NgramIndex, loop_period
from quench.engine.rows import Row
from quench.engine.backend import QuenchBackend
from quench.engine.config import EngineConfig
from quench.engine.kv_cache import KVCache, attention_window, causal_mask
from quench.engine.sampling import logits_to_probs, row_generator
from quench.engine.types import GenerationRequest, GenerationResult, SamplingParams


def test_causal_mask_is_per_row():
    mask = causal_mask(torch.tensor([1, 3]), num_new=2, window=6)[:, 0].int().tolist()
    assert mask == [
        [[1, 1, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0]],
        [[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 0]],
    ]


def test_attention_window_rounds_up_and_stays_inside_the_cache():
    assert attention_window(torch.tensor([10, 70]), 2, max_len=1024) == 128
    assert attention_window(torch.tensor([10, 70]), 2, max_len=100) == 100


def test_kv_cache_writes_ragged_positions_and_installs_prefixes():
    cache = KVCache(num_layers=1, batch=2, max_len=8, dtype=torch.float32, device=torch.device("cpu"))
    keys = torch.arange(2 * 2 * 1 * 1, dtype=torch.float32).view(2, 2, 1, 1)  # (B, S, H, D)
    cache.write(0, keys, -keys, torch.tensor([[0, 1], [4, 5]]))
    assert cache.keys[0][:, 0, :, 0].tolist() == [[0, 1, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 2, 3, 0, 0]]
    prefix = cache.snapshot(0, 2)
    cache.install(1, prefix)
    assert cache.keys[0][1, 0, :2, 0].tolist() == [0, 1] and cache.values[0][1, 0, :2, 0].tolist() == [0, -1]


def test_a_resized_cache_keeps_each_rows_first_positions():
    cache = KVCache(num_layers=2, batch=2, max_len=4, dtype=torch.float32, device=torch.device("cpu"))
    keys = torch.arange(1, 17, dtype=torch.float32).view(2, 4, 2, 1)  # (B, S, H, D)
    cache.write(0, keys, -keys, torch.arange(4).expand(2, 4))  # layer 1 never written: stays unallocated
    before = cache.keys[0].clone()  # (B, H, T, D)
    cache.resize(6)
    assert cache.max_len == 6 and cache.keys[1] is None and cache.keys[0].shape == (2, 2, 6, 1)
    assert torch.equal(cache.keys[0][:, :, :4], before) and not cache.keys[0][:, :, 4:].any()
    assert torch.equal(cache.values[0][:, :, :4], -before)
    cache.resize(3)
    assert cache.keys[0].shape == (2, 2, 3, 1) and torch.equal(cache.keys[0], before[:, :, :3])


def test_top_k_and_top_p_filters():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    top_k = logits_to_probs(logits, SamplingParams(temperature=1.0, top_k=2))
    assert torch.allclose(top_k, torch.tensor([[0.625, 0.375, 0, 0]]))
    top_p = logits_to_probs(logits, SamplingParams(temperature=1.0, top_p=0.8))  # 0.5 + 0.3 reaches 0.8
    assert torch.allclose(top_p, torch.tensor([[0.625, 0.375, 0, 0]]))
    assert torch.allclose(logits_to_probs(logits, SamplingParams(temperature=1.0, top_p=0.81))[0, 2], torch.tensor(0.15 / 0.95))
    hot = logits_to_probs(logits, SamplingParams(temperature=2.0))
    assert torch.allclose(hot, torch.softmax(logits / 2, dim=-1))


def test_row_generators_depend_only_on_seed_request_and_sample():
    draw = lambda *key: torch.rand(3, generator=row_generator(*key)).tolist()  # noqa: E731
    assert draw(0, "HumanEval/1", 2) == draw(0, "HumanEval/1", 2)
    keys = [(0, "HumanEval/1", 2), (0, "HumanEval/2", 1), (1, "HumanEval/1", 2), (0, "HumanEval/1", 3)]
    assert len({tuple(draw(*k)) for k in keys}) == 4


def test_bass_draft_length_grows_on_full_acceptance_and_shrinks_faster_on_repeated_misses():
    policy = BassDraftLength(initial=7, maximum=10)
    drafted = torch.tensor([10, 10])  # tokens each row drafted
    policy.update(torch.tensor([7, 2]), drafted)
    assert policy.current == 9
    policy.update(torch.tensor([9, 0]), drafted)
    assert policy.current == 10  # capped
    policy.update(torch.tensor([3, 1]), drafted)
    assert policy.current == 9  # 10 - ceil(10 / 10) - 0
    policy.update(torch.tensor([2, 1]), drafted)
    assert policy.current == 7  # 9 - ceil(9 / 10) - 1
    policy.update(torch.tensor([6, 1]), drafted)
    assert policy.current == 6  # never below the longest accepted run: max(1, 6, 7 - 1 - 1)
    policy.update(torch.tensor([0, 0]), torch.tensor([0, 0]))
    assert policy.current == 6  # no drafting row, no information
    assert FixedDraftLength(3).current == 3 and make_policy("fixed", 4, 8).current == 4
    with pytest.raises(ValueError):
        make_policy("adaptive", 4, 8)


def test_step_cost_fits_the_line_of_the_steps_and_never_prices_a_position_below_zero():
    cost = StepCost()
    for fed in (1, 3, 2, 5, 1, 4):
        cost.add(fed, 0.006 + 0.001 * fed)
    a, b = cost.line()
    assert a == pytest.approx(0.006) and b == pytest.approx(0.001)
    flat = StepCost()
    for _ in range(5):
        flat.add(8, 0.02)
    assert flat.line() == (pytest.approx(0.02), 0.0)  # one F seen: no slope to fit
    falling = StepCost()
    for fed, seconds in ((1, 0.01), (2, 0.005)):
        falling.add(fed, seconds)
    assert falling.line()[1] == 0.0


def run_measured(policy: MeasuredDraftLength, seconds, accepted, steps: int, rows: int = 1) -> list[int]:
    """Steps of `rows` rows each drafting the policy's length, `accepted(length)` tokens of it kept and the step taking
    `seconds(fed)`; the lengths asked for, step by step."""
    asked = []
    for _ in range(steps):
        length = policy.next_length(greedy=True)
        asked.append(length)
        drafted = torch.full((rows,), length)
        policy.update(torch.full((rows,), min(length, accepted(length))), drafted)
        policy.observe_step(rows, rows * (1 + length), rows if length else 0, seconds(rows * (1 + length)))
    return asked


def test_the_measured_length_grows_while_drafted_positions_are_cheap_and_accepted():
    policy = MeasuredDraftLength(initial=2, maximum=12)
    asked = run_measured(policy, lambda fed: 0.006 + 0.0001 * fed, lambda length: length, 60)
    assert asked[0] == 0 and asked[-1] == 12 and asked == sorted(asked)
    assert all(later - earlier <= 2 for earlier, later in zip(asked, asked[1:]))  # priced before a longer one


def test_the_measured_length_neither_drafts_nor_probes_past_a_tile_that_a_full_draft_would_not_repay():
    # 8 rows fill a tile of 8 positions: one more position reads the weights again (the step takes 2.5x as long), and
    # one drafted token per row is accepted: a step of 16 positions yields 16 tokens in the time 20 would need
    policy = MeasuredDraftLength(initial=7, maximum=12)
    asked = run_measured(policy, lambda fed: 0.02 if fed <= 8 else 0.05, lambda length: min(length, 1), 60, rows=8)
    assert max(asked) <= 2 and set(asked[8:]) == {0}


def test_the_measured_length_stops_drafting_where_a_position_costs_more_than_it_yields_and_keeps_probing():
    policy = MeasuredDraftLength(initial=4, maximum=12)
    asked = run_measured(policy, lambda fed: 0.001 + 0.005 * fed, lambda length: 0, 40, rows=8)
    tail = asked[8:]
    assert set(tail) == {0, 1} and tail.count(1) == len(tail) // PROBE_EVERY


def test_the_measured_length_settles_where_acceptance_and_cost_meet():
    # about 2 of each draft accepted and a position costing a fifth of a one-row step: 2 or 3 tokens pay most
    policy = MeasuredDraftLength(initial=7, maximum=16)
    asked = run_measured(policy, lambda fed: 0.005 + 0.001 * fed, lambda length: 2, 80)
    assert set(asked[-20:]) <= {2, 3}


def test_a_step_with_sampled_rows_drafts_the_initial_length_whatever_the_timings():
    policy = MeasuredDraftLength(initial=5, maximum=12)
    run_measured(policy, lambda fed: 0.001 + 0.005 * fed, lambda length: 0, 20, rows=8)
    assert policy.next_length(greedy=True) in (0, 1) and policy.next_length(greedy=False) == 5


def test_a_draft_length_left_unset_is_measured_for_prompt_lookup_and_bass_with_a_draft_model():
    assert EngineConfig(drafter="ngram").draft_length == "measured"
    assert EngineConfig(drafter="hybrid").draft_length == EngineConfig(drafter="draft").draft_length == "bass"
    assert EngineConfig(drafter="ngram", draft_length="bass").draft_length == "bass"
    assert make_policy("measured", 3, 8).next_length(greedy=True) == 0 and make_policy("measured", 3, 8).next_length(greedy=False) == 3


def test_ngram_index_proposes_what_followed_the_latest_match():
    tokens = [1, 2, 3, 4, 9, 2, 3, 5, 6, 2, 3]
    index = NgramIndex(max_n=3)
    index.extend(tokens)
    assert index.lookup(tokens, k=3, min_n=1) == [5, 6, 2]  # "2 3" last seen before "5 6"
    assert index.lookup(tokens + [7], k=3, min_n=1) == []  # 7 never seen
    assert index.lookup(tokens + [9], k=2, min_n=1) == [2, 3]
    assert index.lookup(tokens + [9], k=2, min_n=2) == []  # "3 9" never seen
    index.extend(tokens + [4])
    assert index.lookup(tokens + [4], k=9, min_n=1) == [9, 2, 3, 5, 6, 2, 3, 4]  # up to the end


def test_engine_config_rejects_bad_values():
    for bad in (dict(batch_size=0), dict(drafter="eagle"), dict(draft_length="x"), dict(draft_tokens=40), dict(dtype="int8"),
                dict(draft_loop_tokens=16), dict(draft_loop_tokens=-1)):
        with pytest.raises(ValueError):
            EngineConfig(**bad)
    with pytest.raises(ValueError, match="draft_model"):
        QuenchBackend(tiny_llama(), char_tokenizer(), EngineConfig(drafter="draft"))


def test_sampling_within_a_time_budget_reports_finish_times():
    tokenizer = char_tokenizer()
    backend = QuenchBackend(tiny_llama(), tokenizer, EngineConfig(batch_size=3))
    request = GenerationRequest("t/0", tuple(tokenizer("def f():", add_special_tokens=False)["input_ids"]))
    results = sample_within_budget(backend, request, SamplingParams(temperature=1.0, max_new_tokens=4), budget_s=0.3)
    finish = [r.extra["finish_s"] for r in results]
    assert len(results) > 3 and finish == sorted(finish) and finish[-1] <= 0.3 + 0.2
    assert len({r.sample_index for r in results}) == len(results)


def test_budget_pass_rates():
    def result(text):
        return GenerationResult("k", 0, (), text, "eos")

    prompts = [[result("ok"), result("bad")], [result("bad"), result("ok")], [result("bad")], []]
    assert budget_pass_rates(prompts, lambda r: r.text == "ok") == (0.25, 0.5)
    assert math.isclose(budget_pass_rates([], lambda r: True)[0], 0.0)


def loop_row(tokens: list[int], prompt_len: int) -> Row:
    return Row(0, GenerationRequest("loop", tuple(tokens[:prompt_len])), 0, torch.Generator(), list(tokens), prompt_len)


def test_a_row_is_in_a_loop_once_its_output_repeats_for_a_span():
    prompt = [7, 8, 9] * 20  # repetition inside the prompt is not a loop of the output
    lead = [1, 2, 3, 4, 5]
    period = [10, 11, 12]
    looping = prompt + lead + period * ((LOOP_SPAN + 3) // 3 + 1)
    index = NgramIndex(max_n=3)
    index.extend(looping)
    assert loop_period(looping, len(prompt), index) == 3
    short = prompt + lead + period * (LOOP_SPAN // 3)  # the span and one period are not all output yet
    index = NgramIndex(max_n=3)
    index.extend(short)
    assert loop_period(short, len(prompt), index) == 0
    index = NgramIndex(max_n=3)
    index.extend(prompt + lead)
    assert loop_period(prompt + lead, len(prompt), index) == 0
    broken = looping[:-2] + [13, 12]  # the last n-gram seen before, but the span does not repeat
    index = NgramIndex(max_n=3)
    index.extend(broken)
    assert loop_period(broken, len(prompt), index) == 0


def test_a_looping_row_drafts_the_loops_continuation():
    prompt, period = [5, 6], [10, 11, 12, 13]
    tokens = prompt + [1] + period * 8
    drafter = NgramDrafter(1, max_n=3, min_n=2, loop_tokens=10)
    drafter.admit([(0, None)])
    row = loop_row(tokens, len(prompt))
    assert drafter.reach(0, row) == 10
    assert drafter.lookup(0, row, 10) == (period * 3)[:10]  # past one period: the loop goes on
    assert drafter.lookup(0, row, 2) == period[:2]
    off = NgramDrafter(1, max_n=3, min_n=2)
    off.admit([(0, None)])
    assert off.reach(0, row) == 0 and off.lookup(0, row, 10) == period  # plain lookup stops at the row's end
    calm = loop_row(prompt + list(range(20, 60)), len(prompt))
    assert drafter.reach(0, calm) == 0
