"""The decode loop's bookkeeping: the kept KV cache after rejections, and slot refills."""

import pytest
import torch

from helpers import char_tokenizer, perturbed, tiny_llama
from quench.engine.decode import DecodeLoop, LoopParts
from quench.engine.draft_length import FixedDraftLength
from quench.engine.drafters import ModelDrafter
from quench.engine.config import EngineConfig
from quench.engine.runners.make import make_runner
from quench.engine.kernels import invariant
from quench.engine.observers import PAD
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


MIXED = {  # (prompt, settings): argmax, the C kernel, PyTorch's top-k / top-p; seeds, limits and EOS handling apart
    "greedy": ("def f(x):\n", SamplingParams(max_new_tokens=20)),
    "greedy-min": ("a", SamplingParams(max_new_tokens=12, min_tokens=6, top_k=3)),  # top_k: greedy all the same
    "hot": ("import os\n", SamplingParams(temperature=1.3, max_new_tokens=24, seed=1)),
    "hot-seed": ("import os\n", SamplingParams(temperature=1.3, max_new_tokens=24, seed=2, min_tokens=4)),
    "hot-ignore-eos": ("import os\n", SamplingParams(temperature=1.3, max_new_tokens=24, seed=1, ignore_eos=True)),
    "nucleus": ("x = [1, 2, 3]\nfor", SamplingParams(temperature=0.8, top_p=0.9, top_k=12, max_new_tokens=16)),
    "top-k": ("print(1)", SamplingParams(temperature=1.0, top_k=5, max_new_tokens=9, seed=7)),
}
EOS = frozenset(range(3, 9))  # "a" to "f" end a sample: tiny random models rarely pick </s>


class StopAtFed:
    """A stop observer that stops a row once `keep` of its generated tokens were fed, keeping those (the loop's
    guard path: padded logits with hidden states)."""

    def __init__(self, slots: int, keep: int) -> None:
        self.keep = keep
        self.fed = [0] * slots  # generated tokens fed, per slot

    def reset(self, slot: int) -> None:
        self.fed[slot] = 0

    def step(self, hidden: torch.Tensor, token_ids: torch.Tensor) -> list[int | None]:
        out: list[int | None] = [None] * len(self.fed)
        for b, row in enumerate(token_ids.tolist()):
            fed = sum(token != PAD for token in row)
            self.fed[b] += fed
            if fed and self.fed[b] >= self.keep:
                out[b] = self.keep
        return out


def run_loop(runner, tokenizer, requests, sampling, slots, row_sampling=None, guard=False) -> dict:
    """(key, sample index) -> (tokens, finish reason) of a decode loop over `requests` in `slots` slots."""
    stopper = StopAtFed(slots, keep=7) if guard else None
    loop = DecodeLoop(LoopParts(runner, runner.new_cache(slots, 128), guard=stopper), WorkQueue(requests),
                      StopRules(tokenizer, EOS, sampling.max_new_tokens, ignore_eos=sampling.ignore_eos), sampling,
                      row_sampling=row_sampling)
    results = {(r.key, r.sample_index): (r.token_ids, r.finish_reason) for r in loop.run()}
    return results | {"mixed steps": loop.stats.mixed_steps}


@pytest.mark.skipif(not invariant.available(torch.float32), reason="no native kernels built here")
@pytest.mark.parametrize("guard", [False, True])  # True: the guard's path (padded logits, hidden states)
@pytest.mark.parametrize("slots", [4, 11])  # 4: rows refill slots freed by others of other settings
def test_rows_with_different_settings_share_the_core_loop_and_each_draws_what_it_draws_alone(slots, guard):
    tokenizer = char_tokenizer()
    runner = make_runner(tiny_llama(), EngineConfig(batch_invariant=True))

    def request(key: str) -> GenerationRequest:
        return GenerationRequest(key, tuple(tokenizer(MIXED[key][0], add_special_tokens=False)["input_ids"]), n=2)

    alone: dict = {}
    for key, (_, sampling) in MIXED.items():
        alone |= run_loop(runner, tokenizer, [request(key)], sampling, 2, guard=guard)
    together = run_loop(runner, tokenizer, [request(key) for key in MIXED], SamplingParams(max_new_tokens=64), slots,
                        row_sampling=lambda item: MIXED[item.request.key][1], guard=guard)
    assert together.pop("mixed steps") > 0 and alone.pop("mixed steps") == 0
    assert together == alone
    assert {"eos", "guard" if guard else "length"} <= {reason for _, reason in together.values()}
    if guard:
        return
    assert alone["hot", 0] != alone["hot-seed", 0] and alone["hot", 0] != alone["hot", 1]
    for sample in (0, 1):  # EOS kept, and the row goes on to its max_new_tokens
        kept, reason = together["hot-ignore-eos", sample]
        assert reason == "length" and len(kept) == 24 and any(token in EOS for token in kept)
    assert all(len(tokens) >= 4 for (key, _), (tokens, _) in together.items() if key == "hot-seed")
