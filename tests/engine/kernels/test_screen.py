"""The screened greedy head gives the tokens the whole bfloat16 head gives, and int8 weight copies give products
close to the bfloat16 ones, each row on its own (quench.engine.kernels.screen)."""

import re

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from helpers import llama_head_dim_64, torch_threads
from quench.engine.kernels import native
from quench.engine.kernels.linear import INT8_MAX_ROWS
from quench.engine.runners.forward_plan import plan_forward
from quench.engine.runners.llama import LlamaRunner
from quench.engine.kernels.native import KernelConfig
from quench.engine.kernels.native_build import HEADER
from quench.engine.kernels.screen import KERNEL_MAX_ROWS, MAX_ROWS, VNNI_ROWS, int8_weight, screen_available, screen_head

needs_screen = pytest.mark.skipif(
    native.pack_small_gemm(torch.zeros(16, 2, dtype=torch.bfloat16)) is None or not screen_available(),
    reason="no AMX int8 / AVX512-BF16 here",
)


def test_the_row_limits_are_the_headers():
    """screen.py's copies of the C limits (used without loading the library) match quench_native.h."""
    header = dict(re.findall(r"#define (\w+) (\d+)", HEADER.read_text()))
    assert int(header["SCREEN_MAX_ROWS"]) == KERNEL_MAX_ROWS and int(header["SCREEN_VNNI_ROWS"]) == VNNI_ROWS


def head_tokens_row_by_row(h: torch.Tensor, packed: torch.Tensor, vocab: int) -> torch.Tensor:
    """The reference: each row alone through the AVX512 GEMM (the bits the screen promises), first maximum."""
    return torch.stack([native.argmax(native.small_gemm(h[i : i + 1].contiguous(), packed, vocab, amx=True))[0] for i in range(len(h))])


def hidden_with_outliers(rows: int, width: int, seed: int) -> torch.Tensor:
    """Final-norm-like hidden states: most entries O(1), a few dimensions 10-30x larger (as in real models)."""
    generator = torch.Generator().manual_seed(seed)
    h = torch.randn(rows, width, generator=generator)
    h[:, [3, 17]] *= 25
    return h.to(torch.bfloat16)


@needs_screen
@pytest.mark.parametrize("rows", [1, 3, 8, 13, 16])
def test_screened_tokens_equal_the_whole_heads_row_by_row(rows):
    # 4,001 tokens: the last block of 16 is partly padding; 13 and 16 rows span two row groups of 8.
    torch.manual_seed(rows)
    weight = (torch.randn(4001, 128) * 0.05).to(torch.bfloat16)
    packed = native.pack_small_gemm(weight)
    screen = screen_head(weight, packed)
    h = hidden_with_outliers(rows, 128, seed=rows)
    counts = torch.zeros(rows, dtype=torch.int32)
    got = screen.argmax(h, counts=counts)
    assert got is not None and torch.equal(got, head_tokens_row_by_row(h, packed, 4001))
    assert (counts >= 1).all() and (counts <= 4001).all()  # the winner itself is always computed exactly


@needs_screen
def test_the_error_bound_keeps_the_tokens_that_int8_logits_rank_wrongly():
    """Each token's weights have one large entry, so its int8 copy keeps ~2 levels of the rest and the int8
    logits pick another token for some rows; only the error bound keeps the right one among the candidates
    (without it this test fails)."""
    torch.manual_seed(0)
    weight = torch.randn(4001, 128) * 0.05
    weight[torch.arange(4001), torch.randint(0, 128, (4001,))] = 3.0
    weight = weight.to(torch.bfloat16)
    packed = native.pack_small_gemm(weight)
    screen = screen_head(weight, packed)
    h = hidden_with_outliers(64, 128, seed=0)
    got = torch.cat([screen.argmax(h[i : i + MAX_ROWS]) for i in range(0, 64, MAX_ROWS)])
    assert torch.equal(got, head_tokens_row_by_row(h, packed, 4001))
    int8_logits = h.float() @ (torch.round(weight.float() / screen.scale[:, None]) * screen.scale[:, None]).T
    assert (int8_logits.argmax(dim=1) != got).any()


@needs_screen
def test_two_threads_give_the_same_tokens():
    torch.manual_seed(1)
    weight = (torch.randn(3000, 192) * 0.05).to(torch.bfloat16)
    packed = native.pack_small_gemm(weight)
    screen = screen_head(weight, packed)
    h = hidden_with_outliers(11, 192, seed=1)
    with torch_threads(2):
        two = screen.argmax(h)
    assert torch.equal(two, screen.argmax(h)) and torch.equal(two, head_tokens_row_by_row(h, packed, 3000))


@needs_screen
def test_ties_after_rounding_go_to_the_first_token_as_in_the_whole_head():
    """Tokens whose float32 logits differ but round to the same bfloat16 value: the whole head's first
    maximum is the lower index, and the screen must not drop it (its bound alone does not separate them)."""
    torch.manual_seed(0)
    width = 64
    weight = (torch.randn(2048, width) * 0.02).to(torch.bfloat16)
    h = torch.zeros(6, width)
    for i, (low, high) in enumerate([(5, 1900), (700, 701), (40, 2047), (1024, 1025), (300, 12), (1500, 1499)]):
        dim = 2 + i  # row i's pair lies along its own input dimension: logit 8.0 for both, others ~0.2
        weight[low] = 0
        weight[low, dim] = 1.0
        weight[high] = 0
        weight[high, dim] = 1.0
        weight[high, 1] = 2**-12  # + h[1] * 2^-12: the float32 sums differ, the bfloat16 logits do not
        h[i, dim] = 8.0
        h[i, 1] = 1.0
    h = h.to(torch.bfloat16)
    packed = native.pack_small_gemm(weight)
    got = screen_head(weight, packed).argmax(h)
    want = head_tokens_row_by_row(h, packed, 2048)
    assert torch.equal(got, want)
    assert want.tolist() == [5, 700, 40, 1024, 12, 1499]  # the lower index of each tied pair


@needs_screen
def test_the_screen_declines_what_it_cannot_serve():
    weight = torch.randn(256, 96).to(torch.bfloat16)  # 96 inputs: not a multiple of the tile's 64
    assert screen_head(weight, native.pack_small_gemm(weight)) is None
    weight = torch.randn(256, 64).to(torch.bfloat16)
    screen = screen_head(weight, native.pack_small_gemm(weight))
    assert screen.argmax(torch.randn(MAX_ROWS + 1, 64).to(torch.bfloat16)) is None  # too many rows: whole head
    assert screen.argmax(torch.randn(2, 64).to(torch.bfloat16)) is not None


@needs_screen
def test_greedy_steps_take_the_same_tokens_with_and_without_the_screen():
    """The runner's greedy tokens (decode and verification steps, ragged rows) with the screen and from the
    whole head's logits; up to 4 tokens per step, where the whole head runs the AVX512 kernel too."""
    model = llama_head_dim_64(torch.bfloat16, vocab_size=1000)
    runner, unscreened = LlamaRunner(model), LlamaRunner(model, plan_forward(model, kernels=KernelConfig(screen=False)))
    assert runner.head_screen is not None and unscreened.head_screen is None
    prompt = torch.randint(3, 990, (4, 20))
    caches = [runner.new_cache(4, 64), unscreened.new_cache(4, 64)]
    for each, cache in zip((runner, unscreened), caches):
        each.forward(cache, prompt, torch.zeros(4, dtype=torch.long))
    step = torch.randint(3, 990, (4, 4))
    start, counts = torch.tensor([20, 20, 20, 20]), torch.tensor([4, 1, 3, 2])
    screened = runner.greedy_tokens(caches[0], step, start, counts=counts)
    whole = unscreened.greedy_tokens(caches[1], step, start, counts=counts)
    logits = runner.packed_logits(caches[0], step, start, counts=counts)  # (10, V): the real positions
    assert torch.equal(screened, whole)
    assert torch.equal(screened[counts[:, None] > torch.arange(4)], native.argmax(logits))


@needs_screen
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 8, 70])
def test_int8_products_are_close_and_each_row_is_computed_alone(rows):
    """Close to the float product (x rounded to 15 bits, W to 8 bits per output, the result to bfloat16), and
    a row's output is the same alone and in any batch (1-4 rows: VNNI; 8 and 70: tiles, 70 in two calls)."""
    torch.manual_seed(rows)
    weight = (torch.randn(300, 192) * 0.05).to(torch.bfloat16)
    x = hidden_with_outliers(rows, 192, seed=rows)
    product = int8_weight(weight)
    out = product(x)
    want = x.float() @ weight.float().T
    assert out.shape == (rows, 300) and out.dtype == torch.bfloat16
    assert ((out.float() - want).norm() / want.norm()).item() < 0.02
    alone = torch.cat([product(x[i : i + 1]) for i in range(rows)])
    assert torch.equal(alone.view(torch.int16), out.view(torch.int16))


@needs_screen
def test_the_few_row_pass_sums_exactly_what_the_tile_pass_sums():
    """1-4 rows take AVX512-VNNI instead of AMX tiles: the integer sums, hence every product and every screened
    token, must be the same (4,001 tokens: a partial last group of blocks)."""
    torch.manual_seed(3)
    weight = (torch.randn(4001, 128) * 0.05).to(torch.bfloat16)
    product, screen = int8_weight(weight), screen_head(weight, native.pack_small_gemm(weight))
    for rows in (1, 2, 3, 4):
        x = hidden_with_outliers(rows, 128, seed=rows)
        vnni = product(x, vnni_rows=4), screen.argmax(x, vnni_rows=4)
        tiles = product(x, vnni_rows=0), screen.argmax(x, vnni_rows=0)  # 0: every call takes the AMX tiles
        assert torch.equal(vnni[0].view(torch.int16), tiles[0].view(torch.int16)), rows
        assert torch.equal(vnni[1], tiles[1]), rows


@needs_screen
def test_int8_weights_decline_what_the_kernel_cannot_serve():
    assert int8_weight(torch.randn(256, 96).to(torch.bfloat16)) is None  # 96 inputs: not a multiple of 64
    assert int8_weight(torch.randn(256, 64)) is None  # float32
    assert int8_weight(torch.randn(256, 64).to(torch.bfloat16)) is not None


@needs_screen
def test_an_int8_runner_scores_close_to_the_bfloat16_one():
    """A draft runner with int8 weights: decode steps of up to INT8_MAX_ROWS rows read the int8 copies (and
    give logits close to the bfloat16 runner's), longer feeds the bfloat16 kernels (the same logits)."""
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128)
    model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
    plain, int8 = LlamaRunner(model), LlamaRunner(model, plan_forward(model, int8=True))
    assert int8.layers[1].down.int8 is not None and int8.lm_head.int8 is not None and int8.head_screen is None
    assert plain.layers[1].down.int8 is None
    prompt = torch.randint(0, 512, (2, INT8_MAX_ROWS + 4))
    caches = [runner.new_cache(2, 64) for runner in (plain, int8)]
    fed = [runner.forward(cache, prompt, torch.zeros(2, dtype=torch.long)) for runner, cache in zip((plain, int8), caches)]
    assert torch.equal(fed[0], fed[1])  # 24 rows: past INT8_MAX_ROWS, the bfloat16 kernels
    step = torch.randint(0, 512, (2, 1))
    start = torch.full((2,), prompt.shape[1])
    logits = [runner.forward(cache, step, start) for runner, cache in zip((plain, int8), caches)]
    assert not torch.equal(logits[0], logits[1])  # 2 rows: the int8 copies
    assert ((logits[1] - logits[0]).norm() / logits[0].norm()).item() < 0.05
