"""The screened greedy head gives the tokens the whole bfloat16 head gives (quench.generation.screen)."""

import pytest
import torch

from helpers import llama_head_dim_64, torch_threads
from quench.generation import native
from quench.generation.llama import LlamaRunner
from quench.generation.screen import MAX_ROWS, screen_available, screen_head

needs_screen = pytest.mark.skipif(
    native.pack_small_gemm(torch.zeros(16, 2, dtype=torch.bfloat16)) is None or not screen_available(),
    reason="no AMX int8 / AVX512-BF16 here",
)


def head_tokens_row_by_row(h: torch.Tensor, packed: torch.Tensor, vocab: int) -> torch.Tensor:
    """The reference: each row alone through the AVX512 GEMM (the bits the screen promises), first maximum."""
    return torch.stack([native.argmax(native.small_gemm(h[i : i + 1].contiguous(), packed, vocab))[0] for i in range(len(h))])


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
    native.SWITCHES.screen = False
    try:
        assert screen.argmax(torch.randn(2, 64).to(torch.bfloat16)) is None
    finally:
        native.SWITCHES.screen = True


@needs_screen
def test_greedy_steps_take_the_same_tokens_with_and_without_the_screen():
    """The runner's greedy tokens (decode and verification steps, ragged rows) with the screen and from the
    whole head's logits; up to 4 tokens per step, where the whole head runs the AVX512 kernel too."""
    model = llama_head_dim_64(torch.bfloat16, vocab_size=1000)
    runner = LlamaRunner(model)
    assert runner.head_screen is not None
    cache = runner.new_cache(4, 64)
    runner.forward(cache, torch.randint(3, 990, (4, 20)), torch.zeros(4, dtype=torch.long))
    step = torch.randint(3, 990, (4, 4))
    start, counts = torch.tensor([20, 20, 20, 20]), torch.tensor([4, 1, 3, 2])
    screened = runner.greedy_tokens(cache, step, start, counts=counts)
    native.SWITCHES.screen = False
    try:
        whole = runner.greedy_tokens(cache, step, start, counts=counts)
    finally:
        native.SWITCHES.screen = True
    logits = runner.packed_logits(cache, step, start, counts=counts)  # (10, V): the real positions
    assert torch.equal(screened, whole)
    assert torch.equal(screened[counts[:, None] > torch.arange(4)], native.argmax(logits))
