"""Each loss on tiny tensors against values computed by hand."""

import math

import pytest
import torch

from quench.training.losses import (
    alp_distance, mean_pool, sequence_contrastive, token_contrastive, token_cross_entropy,
)

LOG_1_PLUS_E_INV = math.log(1 + math.exp(-1))  # -log(e / (e + 1)): one positive at 1, one negative at 0


def test_cross_entropy_uniform_logits_is_log_vocab():
    assert token_cross_entropy(torch.zeros(3, 4), torch.tensor([0, 1, 3])).item() == pytest.approx(math.log(4))


def test_alp_distance_centers_logits():
    nominal = torch.tensor([[1.0, 2.0, 3.0]])
    variant = torch.tensor([[1.0, 2.0, 6.0]])
    # diff (0, 0, -3), mean -1, centered (1, 1, -2): mean square (1 + 1 + 4) / 3 = 2
    assert alp_distance(nominal, variant).item() == pytest.approx(2.0)
    assert alp_distance(nominal, variant + 5.0).item() == pytest.approx(2.0)  # softmax ignores a shift
    assert alp_distance(nominal, nominal + 7.0).item() == pytest.approx(0.0)


def test_alp_distance_averages_tokens_and_drops_names():
    nominal = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]])
    variant = torch.tensor([[1.0, 2.0, 6.0], [0.0, 0.0, 0.0]])
    assert alp_distance(nominal, variant).item() == pytest.approx(1.0)  # (2 + 0) / 2
    keep = torch.tensor([[True, True, False], [True, True, True]])  # ALPD: column 2 is a renamed name
    assert alp_distance(nominal, variant, keep).item() == pytest.approx(0.0)
    keep = torch.tensor([[True, False, True], [True, True, True]])
    # token 0 compares columns 0 and 2: diff (0, -3), centered (1.5, -1.5), mean square 2.25
    assert alp_distance(nominal, variant, keep).item() == pytest.approx(2.25 / 2)


def test_alp_distance_of_nothing_is_zero():
    assert alp_distance(torch.zeros(0, 5), torch.zeros(0, 5)).item() == 0.0


def test_mean_pool_over_mask():
    hidden = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]]])
    mask = torch.tensor([[True, True, False]])
    assert mean_pool(hidden, mask).tolist() == [[2.0, 3.0]]


def test_sequence_contrastive_two_pairs():
    nominal = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    variant = torch.tensor([[2.0, 0.0], [0.0, 3.0]])  # cosines ignore the length
    # similarities: identity matrix; each row and column: -log(e / (e + 1))
    assert sequence_contrastive(nominal, variant, 1.0).item() == pytest.approx(LOG_1_PLUS_E_INV)
    # temperature 0.5 doubles the logits: -log(e^2 / (e^2 + 1))
    assert sequence_contrastive(nominal, variant, 0.5).item() == pytest.approx(math.log(1 + math.exp(-2)))


def test_sequence_contrastive_one_pair_has_no_negative():
    assert sequence_contrastive(torch.ones(1, 3), torch.ones(1, 3), 0.05).item() == pytest.approx(0.0)


def test_sequence_contrastive_asymmetric_case():
    nominal = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    variant = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    # s = [[1, 0], [1, 0]]. Rows (positive on the diagonal): -log(e/(e+1)), -log(1/(e+1)).
    # Columns: (1, 1) and (0, 0): -log(1/2) each.
    rows = (LOG_1_PLUS_E_INV + math.log(1 + math.e)) / 2
    columns = math.log(2)
    assert sequence_contrastive(nominal, variant, 1.0).item() == pytest.approx(0.5 * (rows + columns))


def test_token_contrastive_stays_inside_each_pair():
    nominal = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    variant = nominal.clone()
    pair = torch.tensor([0, 0, 1])
    # pair 0: 2x2 identity block, each row -log(e/(e+1)); pair 1: a lone token, loss 0. Mean over 3 rows.
    expected = 2 * LOG_1_PLUS_E_INV / 3
    assert token_contrastive(nominal, variant, pair, 1.0).item() == pytest.approx(expected)


def test_losses_have_gradients():
    nominal = torch.randn(4, 8, requires_grad=True)
    variant = torch.randn(4, 8)
    for loss in (alp_distance(nominal, variant), sequence_contrastive(nominal, variant, 0.1),
                 token_contrastive(nominal, variant, torch.tensor([0, 0, 1, 1]), 0.1)):
        (grad,) = torch.autograd.grad(loss, nominal)
        assert torch.isfinite(grad).all() and grad.abs().sum() > 0
