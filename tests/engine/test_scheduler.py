"""Prompt prefills: shared beginnings are copied, never recomputed, where that keeps the bits."""

import pytest
import torch

from helpers import CHARS, char_tokenizer, llama_head_dim_64, tiny_llama
from quench.engine.kernels import invariant, native
from quench.engine.backend import QuenchBackend
from quench.engine.config import EngineConfig
from quench.engine.runners.forward_plan import plan_forward
from quench.engine.runners.llama import LlamaRunner
from quench.engine.scheduler import (
    MIN_SHARED_TOKENS, PartialPrefill, PrefixStore, WorkItem, WorkQueue, common_length, prefill, prefill_after,
    splits_exactly,
)
from quench.engine.types import GenerationRequest, SamplingParams

needs_layer_loop = pytest.mark.skipif(not native.layers_available(), reason="no AVX512-BF16 layer loop here")


def items(prompts):
    return [WorkItem(i, GenerationRequest(f"t/{i}", tuple(p), n=1), 0) for i, p in enumerate(prompts)]


def shared_prompts(seed=0):
    """Prompts of at most 32 tokens (quench's GEMM serves them on every CPU with the layer loop) that share
    their first 20 tokens; the third is the first plus one token (a 1-token rest)."""
    generator = torch.Generator().manual_seed(seed)
    head = torch.randint(3, 90, (20,), generator=generator).tolist()
    first = head + torch.randint(3, 90, (10,), generator=generator).tolist()
    second = head + torch.randint(3, 90, (7,), generator=generator).tolist()
    return [first, second, first + [7], torch.randint(3, 90, (25,), generator=generator).tolist()]


def same_bits(a, b):
    (prefix_a, logits_a), (prefix_b, logits_b) = a, b
    return prefix_a.length == prefix_b.length and torch.equal(logits_a, logits_b) and all(
        torch.equal(x, y) for x, y in zip(prefix_a.keys + prefix_a.values, prefix_b.keys + prefix_b.values)
    )


def test_common_length_counts_the_shared_leading_tokens():
    assert common_length([1, 2, 3], [1, 2, 4, 5]) == 2
    assert common_length([1, 2], [1, 2, 3]) == 2
    assert common_length([], [1]) == 0


@needs_layer_loop
def test_a_prompt_that_starts_like_an_earlier_one_gets_the_bits_of_a_whole_prefill():
    runner = LlamaRunner(llama_head_dim_64(torch.bfloat16))
    prompts = shared_prompts()
    store = PrefixStore(runner)
    store.ensure(items(prompts))
    # 20 shared by the second; the third shares all 30 of the first where its 1-token rest runs the whole
    # prompt's GEMM kernel (no AMX: AVX512 for both), else it feeds enough tokens to run AMX as the whole
    # prompt does (AVX512 up to 4 rows); the fourth shares nothing
    kept = 30 if not runner.amx else 31 - (native.avx512_gemm_rows() + 1)
    assert runner.prefill_kernel(31 - kept) == runner.prefill_kernel(31)
    assert kept == 30 or runner.prefill_kernel(31 - kept - 1) != runner.prefill_kernel(31)
    assert store.shared_tokens == 20 + kept
    for index, prompt in enumerate(prompts):
        assert same_bits(store.get(index), prefill(runner, [prompt])[0]), index


@needs_layer_loop
def test_copying_is_refused_where_the_runner_promises_nothing():
    bf16 = LlamaRunner(llama_head_dim_64(torch.bfloat16))
    assert bf16.prefill_kernel(30) == bf16.prefill_kernel(10) is not None
    too_long = native.small_gemm_rows(bf16.amx) + 1  # oneDNN's own blocking: not promised
    assert native.gemm_kernel(too_long, bf16.amx) == "onednn" and bf16.prefill_kernel(too_long) is None
    if bf16.amx:
        assert native.gemm_kernel(4, amx=True) == "avx512" and native.gemm_kernel(5, amx=True) == "amx"
        assert bf16.prefill_kernel(1) != bf16.prefill_kernel(31)  # one row takes the AVX512 kernel
    float32 = LlamaRunner(tiny_llama(dtype=torch.float32))
    store = PrefixStore(float32)
    store.ensure(items([[5] * 40 + [6], [5] * 40 + [7]]))
    assert store.shared_tokens == 0


def test_sharing_can_be_switched_off_and_short_runs_are_not_shared():
    runner = LlamaRunner(llama_head_dim_64(torch.bfloat16))
    store = PrefixStore(runner, share=False)
    store.ensure(items(shared_prompts()))
    assert store.shared_tokens == 0
    short = PrefixStore(runner)
    short.ensure(items([[4] * (MIN_SHARED_TOKENS - 1) + [5, 6], [4] * (MIN_SHARED_TOKENS - 1) + [7, 8]]))
    assert short.shared_tokens == 0


def test_prefill_after_names_a_prefix_that_leaves_nothing_to_feed():
    runner = LlamaRunner(tiny_llama())
    [(prefix, _)] = prefill(runner, [[5, 6, 7]])
    with pytest.raises(ValueError, match="shorter than the prompt"):
        prefill_after(runner, prefix, [5, 6, 7])
    with pytest.raises(ValueError, match="no head of 4"):
        prefix.head(4)


@needs_layer_loop
@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_the_engine_gives_the_same_samples_with_and_without_sharing(temperature):
    """Greedy and seeded sampling, batch 2 with refills: sharing changes the work, not one token."""
    tokenizer = char_tokenizer()
    model = llama_head_dim_64(torch.bfloat16, vocab_size=len(CHARS) + 3)
    system = "# solve in Python\n"  # the shared beginning, as a chat template's (<= 32 tokens in all: quench's
    # GEMM serves the whole prompt on CPUs without AMX too)
    prompts = [system + p for p in ("def f(x):\n", "x = [1, 2]\n", "import os\n")]
    reqs = [GenerationRequest(f"t/{i}", tuple(tokenizer(p, add_special_tokens=False)["input_ids"]), n=2)
            for i, p in enumerate(prompts)]
    sampling = SamplingParams(temperature=temperature, max_new_tokens=12, seed=3)
    outputs, stats = [], []
    for share in (True, False):
        backend = QuenchBackend(model, tokenizer, EngineConfig(batch_size=2, share_prefixes=share))
        outputs.append({(r.key, r.sample_index): r.token_ids for r in backend.generate(reqs, sampling)})
        stats.append(backend.last_stats)
    assert outputs[0] == outputs[1]
    assert stats[0].prefill_shared_tokens == 2 * len(system) and stats[1].prefill_shared_tokens == 0


@needs_layer_loop
def test_humaneval_prompts_share_the_chat_template_on_the_default_model():
    """The point on the real model: consecutive HumanEval prompts share the chat template's system turn and
    instruction (tens of tokens), and copying them gives the whole prefill's bits."""
    from quench.datasets import load_humaneval
    from quench.models import encode_prompt, load_model

    loaded = load_model(dtype="bfloat16")
    prompts = [encode_prompt(loaded, problem.prompt) for problem in load_humaneval()[:2]]
    runner = LlamaRunner(loaded.model)
    store = PrefixStore(runner)
    store.ensure(items(prompts))
    if runner.prefill_kernel(len(prompts[1])) is None:  # a CPU without AMX prefills a prompt this long on oneDNN
        assert store.shared_tokens == 0  # its blocking promises no row's bits: nothing may be copied
        return
    assert store.shared_tokens == common_length(*prompts) >= 30
    assert same_bits(store.get(1), prefill(runner, [prompts[1]])[0])


@needs_layer_loop
def test_a_prompt_prefilled_by_other_kernels_lends_nothing(monkeypatch):
    """A lending prompt's keys/values must come from the kernels the borrower's whole prefill runs: a prompt
    longer than quench's GEMM serves (oneDNN) lends nothing to a shorter one starting like it."""
    runner = LlamaRunner(llama_head_dim_64(torch.bfloat16))
    monkeypatch.setattr(native, "AMX_GEMM_ROWS", 24)
    monkeypatch.setattr(native, "SMALL_GEMM_ROWS", 24)
    long_prompt, short_prompt = shared_prompts()[:2]  # 30 and 27 tokens sharing 20
    assert runner.prefill_kernel(len(long_prompt)) is None and runner.prefill_kernel(len(short_prompt)) is None
    short_prompt = short_prompt[:22]  # 22 tokens: quench's GEMM again
    assert runner.prefill_kernel(22) is not None
    store = PrefixStore(runner)
    store.ensure(items([long_prompt, short_prompt]))
    assert store.shared_tokens == 0
    assert same_bits(store.get(1), prefill(runner, [short_prompt])[0])


@pytest.mark.skipif(not invariant.available(torch.float32), reason="no native kernels built here")
@pytest.mark.parametrize("chunk", [1, 7, 16, 49, 50])
def test_a_prompt_fed_in_chunks_gets_the_bits_of_a_whole_prefill(chunk):
    model = tiny_llama()
    runner = LlamaRunner(model, plan_forward(model, batch_invariant=True))
    prompt = torch.randint(3, 90, (50,), generator=torch.Generator().manual_seed(chunk)).tolist()
    assert splits_exactly(runner, len(prompt))
    partial = PartialPrefill(runner, prompt)
    while partial.rest:
        partial.feed(chunk)
    assert same_bits(partial.entry(), prefill(runner, [prompt])[0])
    store = PrefixStore(runner)  # from a recent prompt's shared beginning, then in chunks
    store.ensure(items([prompt[:30] + [5] * 10]))
    borrowed = store.begin(prompt)
    assert store.shared_tokens == 30 and borrowed.rest == 20
    while borrowed.rest:
        borrowed.feed(chunk)
    assert same_bits(borrowed.entry(), prefill(runner, [prompt])[0])


def test_a_prompt_is_not_split_where_the_runner_promises_nothing():
    runner = LlamaRunner(tiny_llama())
    assert runner.prefill_kernel(40) is None and not splits_exactly(runner, 40)
    with pytest.raises(ValueError, match="still to feed"):
        PartialPrefill(runner, [5, 6, 7]).entry()


def test_a_work_queue_asks_for_more_once_its_requests_run_out_and_stops_when_none_come():
    blocks = [[GenerationRequest("c", (5,), n=1)], [GenerationRequest("d", (6,), n=2)], []]
    asked = []

    def more():
        asked.append(len(asked))
        return blocks[len(asked) - 1]

    queue = WorkQueue([GenerationRequest("a", (3,), n=2), GenerationRequest("b", (4,), n=1)], more=more)
    started = []
    while (item := queue.pop()) is not None:
        started.append((item.request.key, item.sample_index))
        assert len(asked) == {"a": 0, "b": 0, "c": 1, "d": 2}[item.request.key]  # only once the requests ran out
    assert started == [("a", 0), ("a", 1), ("b", 0), ("c", 0), ("d", 0), ("d", 1)]
    assert asked == [0, 1, 2] and queue.pop() is None and len(asked) == 3  # nothing came: asked no more
    with pytest.raises(ValueError, match="no more requests"):
        WorkQueue([GenerationRequest("a", (3,), n=1)], unbounded=True, more=more)


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_requests_that_come_while_a_call_runs_get_the_samples_they_get_in_the_call_itself(temperature):
    """An engine that takes its requests a block at a time (`more`) starts them in the same continuous batch, in
    the same order, so every sample gets the bits it gets with all requests given at once; a later request longer
    than the call was sized for is refused."""
    tokenizer = char_tokenizer()
    model = tiny_llama()
    texts = ["def f(x):\n", "x = [1, 2]\n", "import os\n", "# sort\n", "for i in range(3):\n"]
    reqs = [GenerationRequest(f"t/{i}", tuple(tokenizer(p, add_special_tokens=False)["input_ids"]), n=2)
            for i, p in enumerate(texts)]
    sampling = SamplingParams(temperature=temperature, max_new_tokens=10, seed=3)
    config = EngineConfig(batch_size=2)
    whole = {(r.key, r.sample_index): r.token_ids for r in QuenchBackend(model, tokenizer, config).generate(reqs, sampling)}
    blocks = [reqs[2:4], reqs[4:], []]
    longest = max(reqs, key=lambda r: len(r.prompt_ids))
    backend = QuenchBackend(model, tokenizer, config)
    fed = {(r.key, r.sample_index): r.token_ids
           for r in backend.generate(reqs[:2], sampling, more=lambda: blocks.pop(0), longest=longest)}
    assert fed == whole and len(fed) == 10 and not blocks
    too_long = GenerationRequest("long", longest.prompt_ids + (5,), n=1)
    with pytest.raises(ValueError, match="more than the .* the call was sized for"):
        list(backend.generate(reqs[:1], sampling, more=lambda: [too_long], longest=longest))
