"""Regular decoding's sampled tokens: the C kernel (`native.sample`) against PyTorch's inverse CDF; rows that
draw with different settings in one batch."""

import pytest
import torch

from quench.engine.kernels import native
from quench.engine.sampling import draw_rows, logits_to_probs, next_tokens, row_generator, sample_rows
from quench.engine.types import SamplingParams

pytestmark = pytest.mark.skipif(not native.available(torch.float32), reason=native.build_result().reason)

HOT = SamplingParams(temperature=0.7)


def generators(seed: int, rows: int) -> list[torch.Generator]:
    return [row_generator(seed, "task", index) for index in range(rows)]


def pytorch_tokens(logits: torch.Tensor, sampling: SamplingParams, seed: int) -> torch.Tensor:
    return sample_rows(logits_to_probs(logits.clone(), sampling), generators(seed, logits.shape[0]))


@pytest.mark.parametrize("vocab", [49152, 1000, 37])  # the default model's, and widths with a scalar tail
def test_the_kernel_draws_the_tokens_pytorchs_inverse_cdf_draws(vocab):
    logits = torch.randn(32, vocab, generator=torch.Generator().manual_seed(vocab)) * 4  # (B, V)
    assert native.samples(logits)
    for seed in range(6):
        drawn = next_tokens(logits, HOT, generators(seed, 32))
        assert drawn.tolist() == pytorch_tokens(logits, HOT, seed).tolist()


def test_rows_picks_the_rows_to_sample_and_each_keeps_its_own_draw():
    logits = torch.randn(6, 500, generator=torch.Generator().manual_seed(1)) * 3
    picked = torch.tensor([4, 1, 1])
    drawn = next_tokens(logits, HOT, generators(7, 3), rows=picked)
    assert drawn.tolist() == next_tokens(logits[picked].clone(), HOT, generators(7, 3)).tolist()
    alone = [next_tokens(logits[[int(row)]], HOT, [row_generator(7, "task", index)]).item() for index, row in enumerate(picked)]
    assert drawn.tolist() == alone  # a row's token depends on its logits and its generator only


def test_forbidden_tokens_are_never_drawn():
    logits = torch.zeros(4, 100)
    logits[:, :99] = float("-inf")  # only the last token is allowed
    logits[1] = float("-inf")  # nothing allowed: the argmax (the first token)
    for seed in range(20):
        assert next_tokens(logits, HOT, generators(seed, 4)).tolist() == [99, 0, 99, 99]


def test_draws_follow_the_tempered_softmax():
    vocab, draws = 40, 20_000
    logits = torch.linspace(-2.0, 2.0, vocab)[None].repeat(draws, 1)  # (draws, V): one draw per row
    tokens = next_tokens(logits, HOT, generators(3, draws))
    counts = torch.bincount(tokens, minlength=vocab).double()
    expected = torch.softmax(logits[0].double() / HOT.temperature, dim=0) * draws
    assert ((counts - expected).abs() <= 5 * expected.sqrt() + 1).all()


def test_top_k_and_top_p_keep_pytorchs_path():
    logits = torch.randn(8, 300, generator=torch.Generator().manual_seed(2)) * 3
    for sampling in (SamplingParams(temperature=0.8, top_k=5), SamplingParams(temperature=0.8, top_p=0.9)):
        drawn = next_tokens(logits, sampling, generators(0, 8))
        assert drawn.tolist() == pytorch_tokens(logits, sampling, 0).tolist()


SETTINGS = [  # argmax, the C kernel, PyTorch's top-k / top-p; greedy whatever its top-k
    SamplingParams(), HOT, SamplingParams(temperature=1.3), SamplingParams(temperature=0.8, top_k=5),
    SamplingParams(temperature=0.8, top_p=0.9, top_k=12), SamplingParams(top_k=3),
]


@pytest.mark.parametrize("seed", range(4))
def test_rows_with_their_own_settings_draw_what_each_draws_alone(seed):
    rng = torch.Generator().manual_seed(seed)
    logits = torch.randn(12, 700, generator=rng) * 4  # (N, V)
    picked = torch.randperm(12, generator=rng)[:9]  # (A,)
    draws = [SETTINGS[int(i)] for i in torch.randint(len(SETTINGS), (9,), generator=rng)]
    drawn = draw_rows(logits.clone(), draws, generators(seed, 9), rows=picked)
    alone = [next_tokens(logits[[int(row)]].clone(), draw, [row_generator(seed, "task", a)]).item()
             for a, (row, draw) in enumerate(zip(picked, draws))]
    assert drawn.tolist() == alone
    whole = draw_rows(logits.clone(), draws[:1] * 12, generators(seed, 12))  # one setting: next_tokens itself
    assert whole.tolist() == next_tokens(logits.clone(), draws[0], generators(seed, 12)).tolist()
