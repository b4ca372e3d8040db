"""The decode loop's bookkeeping: the kept KV cache after rejections, and slot refills."""

import pytest
import torch

from helpers import char_tokenizer, perturbed, tiny_llama
from quench.engine.decode import DecodeLoop, LoopParts
from quench.engine.draft_length import FixedDraftLength
from quench.engine.drafters import ModelDrafter
from quench.engine.engine import EngineConfig, make_runner
from quench.engine.rows import StopRules
from quench.engine.scheduler import WorkQueue, prefill
from quench.engine.types import GenerationRequest, SamplingParams

PROMPTS = ["def f(x):\n", "x = [1, 2, 3]\nfor i in x:\n    ", "a"]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])  # float32: the native kernel
@pytest.mark.parametrize("fast_path", [True, False])
@pytest.mark.parametrize("greedy", [True, False])
def test_kept_kv_equals_a_fresh_prefill_after_rejections(fast_path, greedy, dtype):
    tokenizer = char_tokenizer()
    config = EngineConfig(fast_path=fast_path)
    model = tiny_llama(dtype=dtype)
    tolerance = 1e-12 if dtype == torch.float64 else 1e-5
    runner = make_runner(model, config)
    draft_runner = make_runner(perturbed(model, 0.3), config)
    reqs = [GenerationRequest(f"t/{i}", tuple(tokenizer(p, add_special_tokens=False)["input_ids"])) for i, p in enumerate(PROMPTS)]
    sampling = SamplingParams(temperature=0.0 if greedy else 0.05, max_new_tokens=30)  # tiny random models are near-uniform
    cache = runner.new_cache(3, 128)
    loop = DecodeLoop(
        LoopParts(runner, cache, drafter=ModelDrafter(draft_runner, 3, 128), policy=FixedDraftLength(4)),
        WorkQueue(reqs), StopRules(tokenizer, frozenset(), 30), sampling,
    )
    list(loop.admit())
    for _ in range(4):
        list(loop.step())
        for slot, row in enumerate(loop.slots):
            [(fresh, _)] = prefill(runner, [row.tokens[:-1]])  # everything but the pending last token
            for layer in range(cache.num_layers):
                kept_keys = cache.keys[layer][slot, :, : row.length]
                kept_values = cache.values[layer][slot, :, : row.length]
                assert torch.allclose(kept_keys, fresh.keys[layer], rtol=0, atol=tolerance)
                assert torch.allclose(kept_values, fresh.values[layer], rtol=0, atol=tolerance)
    assert 0 < loop.stats.accepted < loop.stats.drafted  # some drafts were rejected along the way


def test_finished_rows_are_refilled_at_once_so_the_batch_stays_full():
    tokenizer = char_tokenizer()
    runner = make_runner(tiny_llama(dtype=torch.float64), EngineConfig())
    reqs = [GenerationRequest("t/0", (5, 6, 7), n=7)]
    loop = DecodeLoop(LoopParts(runner, runner.new_cache(3, 64)), WorkQueue(reqs), StopRules(tokenizer, frozenset(), 3),
                      SamplingParams())
    occupancy = []
    results = []
    results += loop.admit()
    while any(loop.slots):
        occupancy.append(sum(row is not None for row in loop.slots))
        results += loop.step()
        results += loop.admit()
    assert sorted(r.sample_index for r in results) == list(range(7))
    # 7 samples of 3 tokens (1 from the prefill + 2 steps) through 3 slots: 3 waves, the last one alone
    assert occupancy == [3, 3, 3, 3, 1, 1]
