"""Batch invariance (`EngineConfig.batch_invariant`): a token's logits have the same bits whatever the batch, the
row's position in it, the width of the step (decode, verification, prefill) and the thread count; so greedy
output is the same at every batch size and with every drafter."""

import random

import pytest
import torch

from helpers import CHARS, DRAFT_EVERYTHING, char_tokenizer, llama_head_dim_64, perturbed, tiny_llama, torch_threads
from quench.engine.kernels import invariant, native
from quench.engine.config import ConfigError
from quench.engine.backend import QuenchBackend
from quench.engine.config import EngineConfig
from quench.engine.runners.forward_plan import plan_forward
from quench.engine.runners.llama import LlamaRunner
from quench.engine.types import GenerationRequest, SamplingParams

pytestmark = pytest.mark.skipif(not invariant.available(torch.float32), reason="no native kernels built here")

PROMPTS = [
    "def f(x):\n", "x = [1, 2, 3]\nfor i in x:\n    ", "a", "import os\n\nclass A:\n", "print(1)",
    "def add(a, b):\n    return", "while True:\n    pass\n", "# sort a list\n", "s = 'abc'\nt = s[::-1]\n",
    "for k in range(10):\n    print(k)\n",
]
MODELS = {
    "float32": lambda: tiny_llama(dtype=torch.float32),
    "bfloat16": lambda: tiny_llama(dtype=torch.bfloat16),
    "bfloat16-head64": lambda: llama_head_dim_64(torch.bfloat16, vocab_size=len(CHARS) + 3),
}


def sequences(vocab: int, count: int, seed: int) -> list[list[int]]:
    """Random token sequences of 5 to 40 tokens (ids from 3: no special tokens)."""
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab) for _ in range(rng.randint(5, 40))] for _ in range(count)]


def logits_one_by_one(runner: LlamaRunner, sequence: list[int]) -> torch.Tensor:
    """Each token fed alone in a batch of one: (T, V), the reference every other schedule must equal."""
    cache = runner.new_cache(1, 64)
    rows = [runner.forward(cache, torch.tensor([[token]]), torch.tensor([at]))[0, 0] for at, token in enumerate(sequence)]
    return torch.stack(rows)


def logits_in_chunks(runner: LlamaRunner, seqs: list[list[int]], rng: random.Random, widest: int) -> list[torch.Tensor]:
    """All sequences in one batch, each fed in chunks of random widths 1..widest per step (ragged), rows that are
    done feeding nothing: (T_b, V) per sequence."""
    cache = runner.new_cache(len(seqs), 64 + widest)
    done = [0] * len(seqs)
    out: list[list[torch.Tensor]] = [[] for _ in seqs]
    while any(d < len(s) for d, s in zip(done, seqs)):
        counts = [min(rng.randint(1, widest), len(s) - d) for d, s in zip(done, seqs)]
        width = max(counts)
        tokens = torch.zeros(len(seqs), width, dtype=torch.long)
        for b, (d, c) in enumerate(zip(done, counts)):
            tokens[b, :c] = torch.tensor(seqs[b][d : d + c])
        logits = runner.forward(cache, tokens, torch.tensor(done), counts=torch.tensor(counts))  # (B, S, V)
        for b, c in enumerate(counts):
            out[b].extend(logits[b, :c])
            done[b] += c
    return [torch.stack(rows) for rows in out]


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("widest", [1, 5, 40])  # decode steps, verification widths, whole prefills
def test_logits_bits_do_not_depend_on_batch_position_width_or_threads(name, widest):
    model = MODELS[name]()
    runner = LlamaRunner(model, plan_forward(model, batch_invariant=True))
    seqs = sequences(model.config.vocab_size, 8, seed=widest)
    with torch_threads(1):
        reference = [logits_one_by_one(runner, s) for s in seqs]
    for seed, threads in [(0, 1), (1, 2)]:
        rng = random.Random(seed)
        order = list(range(len(seqs)))
        rng.shuffle(order)  # another composition and position for every row
        with torch_threads(threads):
            got = logits_in_chunks(runner, [seqs[i] for i in order], rng, widest)
        for i, logits in zip(order, got):
            assert torch.equal(logits, reference[i]), (name, widest, threads, i)


def requests(prompts: list[str]) -> list[GenerationRequest]:
    tokenizer = char_tokenizer()
    ids = [tuple(tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts]
    return [GenerationRequest(f"t/{i}", p) for i, p in enumerate(ids)]


def greedy(model, reqs, draft_model=None, threads: int = 1, **config) -> dict[str, tuple[int, ...]]:
    config = EngineConfig(batch_invariant=True, **{**DRAFT_EVERYTHING, **config})
    backend = QuenchBackend(model, char_tokenizer(), config, draft_model=draft_model)
    with torch_threads(threads):
        return {r.key: r.token_ids for r in backend.generate(reqs, SamplingParams(max_new_tokens=24))}


@pytest.mark.parametrize("name", ["float32", "bfloat16"])
def test_greedy_output_is_the_same_at_every_batch_size_drafter_and_thread_count(name):
    model = MODELS[name]()
    reqs = requests(PROMPTS)
    alone = {}
    for r in reqs:
        alone.update(greedy(model, [r], batch_size=1))
    assert greedy(model, reqs, batch_size=8) == alone
    assert greedy(model, list(reversed(reqs)), batch_size=3, threads=2) == alone
    assert greedy(model, reqs, batch_size=8, drafter="ngram", ngram_min=1) == alone
    draft = perturbed(model, 0.3)
    for drafter in ("draft", "hybrid"):
        assert greedy(model, reqs, draft, batch_size=8, drafter=drafter, draft_length="fixed", draft_tokens=4) == alone
        assert greedy(model, reqs[:3], draft, batch_size=1, drafter=drafter) == {r.key: alone[r.key] for r in reqs[:3]}


def test_the_invariant_gemm_gives_each_row_the_bits_it_gets_alone():
    generator = torch.Generator().manual_seed(0)
    # N = 200: groups of 6 and of 3 blocks and a short last group; 40 rows: ten 4-row blocks, then odd counts
    for dtype, in_features in [(torch.float32, 72), (torch.bfloat16, 72), (torch.bfloat16, 576), (torch.bfloat16, 75)]:
        weight = torch.randn(200, in_features, generator=generator).to(dtype)  # N not a multiple of 16
        x = torch.randn(40, in_features, generator=generator).to(dtype)
        packed = invariant.pack(weight)
        span = invariant.span(packed)
        with torch_threads(1):
            whole = invariant.gemm(x, packed, 200, span)
            alone = torch.cat([invariant.gemm(x[i : i + 1], packed, 200, span) for i in range(40)])
            assert torch.equal(whole, alone), (dtype, in_features)
            for rows in (3, 5, 17, 33):
                assert torch.equal(invariant.gemm(x[-rows:], packed, 200, span), whole[-rows:]), (dtype, rows)
        with torch_threads(2):
            assert torch.equal(invariant.gemm(x, packed, 200, span), whole), (dtype, in_features)
        assert torch.allclose(whole.double(), x.double() @ weight.double().T, rtol=1e-2, atol=1e-2)


def test_batch_invariance_off_the_llama_fast_path_is_a_config_error():
    with pytest.raises(ConfigError, match="batch_invariant"):
        QuenchBackend(tiny_llama(), char_tokenizer(), EngineConfig(batch_invariant=True, fast_path=False))
    with pytest.raises(ConfigError, match="batch_invariant"):
        QuenchBackend(tiny_llama(dtype=torch.float64), char_tokenizer(), EngineConfig(batch_invariant=True))


def test_batch_invariance_is_the_default_wherever_it_serves_and_off_with_a_warning_elsewhere(caplog):
    """EngineConfig's default (None) runs the invariant kernels on a Llama in float32 or bfloat16; off the fast path
    or in float64 it falls back to the plain kernels and says so; False turns it off."""
    for dtype in (torch.float32, torch.bfloat16):
        assert QuenchBackend(tiny_llama(dtype=dtype), char_tokenizer(), EngineConfig()).runner.batch_invariant
        off = QuenchBackend(tiny_llama(dtype=dtype), char_tokenizer(), EngineConfig(batch_invariant=False))
        assert not off.runner.batch_invariant
    for model, config in [(tiny_llama(dtype=torch.float64), EngineConfig()), (tiny_llama(), EngineConfig(fast_path=False))]:
        caplog.clear()
        with caplog.at_level("WARNING", logger="quench.engine.runners.forward_plan"):
            backend = QuenchBackend(model, char_tokenizer(), config)
        assert not getattr(backend.runner, "batch_invariant", False)
        assert any("batch invariance off" in record.getMessage() for record in caplog.records)


def test_without_the_native_kernels_the_default_falls_back_and_an_explicit_request_is_refused(monkeypatch, caplog):
    monkeypatch.setattr(native, "available", lambda dtype: False)  # as without a C compiler
    with caplog.at_level("WARNING", logger="quench.engine.runners.forward_plan"):
        assert not QuenchBackend(tiny_llama(), char_tokenizer(), EngineConfig()).runner.batch_invariant
    assert any("native kernels built" in record.getMessage() for record in caplog.records)
    with pytest.raises(ConfigError, match="batch_invariant"):
        QuenchBackend(tiny_llama(), char_tokenizer(), EngineConfig(batch_invariant=True))


def default_model_answers(dtype: str, batch_invariant: bool, tasks: int = 8, max_new_tokens: int = 48) -> dict[str, dict]:
    """The default model's greedy token ids for the first HumanEval prompts, per schedule: batch 1 and 8, regular,
    prompt lookup (batch 1 and 8) and hybrid drafting."""
    from quench.datasets import load_humaneval
    from quench.models import encode_prompt, load_model
    from quench.models.draft import load_draft

    loaded = load_model(dtype=dtype)
    draft = load_draft("auto", loaded)
    reqs = [GenerationRequest(p.task_id, encode_prompt(loaded, p.prompt)) for p in load_humaneval()[:tasks]]
    sampling = SamplingParams(max_new_tokens=max_new_tokens)

    def run(batch_size: int, drafter: str = "none") -> dict[str, tuple[int, ...]]:
        config = EngineConfig(batch_size=batch_size, drafter=drafter, batch_invariant=batch_invariant, **DRAFT_EVERYTHING)
        backend = QuenchBackend(loaded.model, loaded.tokenizer, config, draft_model=draft if config.runs_draft_model else None)
        return {r.key: r.token_ids for r in backend.generate(reqs, sampling)}

    return {
        "batch 1": run(1), "batch 8": run(8), "batch 1 ngram": run(1, "ngram"), "batch 8 ngram": run(8, "ngram"),
        "batch 8 hybrid": run(8, "hybrid"),
    }


@pytest.mark.slow
def test_the_default_model_answers_humaneval_the_same_at_batch_1_and_8_with_and_without_speculation():
    answers = default_model_answers("auto", batch_invariant=True)  # the dtype this CPU runs fast
    reference = answers.pop("batch 1")
    for schedule, answer in answers.items():
        assert answer == reference, schedule


def sequential_fma(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The fixed order's plain reference: each output one float32 sum from zero over k = 0 .. K-1, rounded once per
    step (a float32 product is exact in float64, so acc + x w in float64 rounded to float32 is the FMA)."""
    acc = torch.zeros(x.shape[0], weight.shape[0], dtype=torch.float32)  # (M, N)
    for k in range(x.shape[1]):
        acc = (acc.double() + x[:, k : k + 1].double() * weight[:, k].double()).float()
    return acc


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_invariant_gemm_sums_in_order_k_by_fused_multiply_adds(dtype):
    """Every build (AVX512, VDPBF16PS where the CPU has it, AVX2 + FMA, the scalar one) gives the plain sequential
    sum's bits: shapes that take every kernel of the group (1, 2 and 4 rows; 6, 3 and 1 blocks; an odd K), inputs
    across 12 decades, zeros of both signs and denormals."""
    generator = torch.Generator().manual_seed(1)
    for rows, out_features, in_features in [(1, 200, 33), (2, 115, 8), (7, 96, 31), (13, 16, 1), (4, 300, 64)]:
        weight = (torch.randn(out_features, in_features, generator=generator)
                  * torch.logspace(-6, 6, in_features)[torch.randperm(in_features, generator=generator)]).to(dtype)
        x = torch.randn(rows, in_features, generator=generator).to(dtype)
        x[0, 0], x[-1, -1], weight[0, 0] = 0.0, -0.0, 1e-39  # signed zeros, a denormal
        if rows == 7:  # cancellation: 2^24 and its negation later, so the rounding of the small terms between shows
            weight = torch.randint(-3, 4, (out_features, in_features), generator=generator).to(dtype)
            x = (torch.randint(0, 2, (rows, 1), generator=generator) * 2 - 1).expand(rows, in_features).to(dtype)
            for column in range(out_features):
                first, second = sorted(torch.randperm(in_features, generator=generator)[:2].tolist())
                weight[column, first], weight[column, second] = 2.0**24, -(2.0**24)
        packed = invariant.pack(weight)
        want = sequential_fma(x.float(), weight.float()).to(dtype)
        bits = torch.int32 if dtype == torch.float32 else torch.int16  # bit for bit: -0 is not +0
        for span in {invariant.span(packed), -1}:  # VDPBF16PS for the rows it serves exactly, and every row widened
            got = invariant.gemm(x, packed, out_features, span)
            assert torch.equal(got.view(bits), want.view(bits)), (dtype, rows, out_features, in_features, span)


def test_vdpbf16ps_takes_exactly_the_rows_whose_products_stay_clear_of_denormals():
    """Rows of moderate values take VDPBF16PS where the CPU has it, rows with a denormal, an inf or values tiny enough
    for a product or partial sum to be a denormal are widened: in one call, each row gets the sequential sum's bits."""
    generator = torch.Generator().manual_seed(3)
    weight = torch.randn(50, 64, generator=generator).to(torch.bfloat16)
    x = torch.randn(6, 64, generator=generator).to(torch.bfloat16)
    x[1, 5] = 1e-39  # a denormal input
    x[2] *= 2.0**-120  # products near 2^-121: a partial sum can be a denormal
    x[3, 7] = float("inf")
    x[4] = 0.0
    x[5, :32] = 2.0**-70  # products of 2^-70 and weights near 1: no denormal possible
    want = sequential_fma(x.float(), weight.float()).to(torch.bfloat16)
    packed = invariant.pack(weight)
    got = invariant.gemm(x, packed, 50, invariant.span(packed))
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))


def test_the_span_of_a_pack_is_its_least_and_largest_exponent():
    values = torch.tensor([[0.0, -0.0, 1.0, -3.0], [2.0**-100, 0.0, 0.0, 0.5]]).to(torch.bfloat16)
    assert invariant.span(invariant.pack(values)) == (127 - 100) | (127 + 1) << 8
    assert invariant.span(invariant.pack(torch.zeros(3, 4, dtype=torch.bfloat16))) == 255
    assert invariant.span(invariant.pack(torch.ones(3, 4))) == -1  # float32: no span
