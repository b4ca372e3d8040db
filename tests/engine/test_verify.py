import math

import pytest
import torch

from quench.engine import verify as verify_module
from quench.engine.verify import PLACEHOLDER, HeadColumns, verify_greedy, verify_sampling

P = PLACEHOLDER


def greedy(draft, target):
    verdict = verify_greedy(torch.tensor(draft, dtype=torch.long), torch.tensor(target, dtype=torch.long))
    return verdict.num_accepted.tolist(), verdict.tokens.tolist()


def test_greedy_all_accepted_gets_the_bonus_token():
    assert greedy([[1, 2, 3]], [[1, 2, 3, 4]]) == ([3], [[1, 2, 3, 4]])


def test_greedy_early_mismatch_emits_the_target_token():
    assert greedy([[1, 2, 3]], [[1, 5, 3, 4]]) == ([1], [[1, 5, P, P]])
    assert greedy([[1, 2, 3]], [[7, 2, 3, 4]]) == ([0], [[7, P, P, P]])


def test_greedy_ragged_rows_stop_at_their_own_draft_length():
    draft = [[1, 2, 3], [4, P, P], [P, P, P], [1, 2, P]]
    target = [[1, 2, 0, 9], [4, 5, 6, 7], [8, 8, 8, 8], [1, 2, 3, 4]]
    accepted, tokens = greedy(draft, target)
    assert accepted == [2, 1, 0, 2]
    assert tokens == [[1, 2, 0, P], [4, 5, P, P], [8, P, P, P], [1, 2, 3, P]]


def test_greedy_placeholder_never_matches_even_if_target_says_minus_one():
    assert greedy([[P, P]], [[P, 3, 4]])[0] == [0]


def test_greedy_empty_draft_is_regular_decoding():
    assert greedy([[], []], [[5], [6]]) == ([0, 0], [[5], [6]])


def generators(n, seed=0):
    return [torch.Generator().manual_seed(seed * 100_003 + i) for i in range(n)]


def test_sampling_accepts_a_draft_the_target_is_sure_of_and_adds_a_bonus():
    target = torch.zeros(1, 3, 4)
    target[0, 0, 2] = target[0, 1, 3] = target[0, 2, 1] = 1.0  # certain: 2, 3, then 1
    verdict = verify_sampling(torch.tensor([[2, 3]]), None, target, generators(1))
    assert verdict.num_accepted.tolist() == [2] and verdict.tokens.tolist() == [[2, 3, 1]]


def test_sampling_rejects_a_draft_the_target_rules_out_and_recovers_from_the_residual():
    target = torch.zeros(2, 3, 4)
    target[:, :, 0] = 0.5
    target[:, :, 1] = 0.5  # token 3 impossible everywhere
    draft_probs = torch.zeros(2, 2, 4)
    draft_probs[:, :, 3] = 0.6
    draft_probs[:, :, 0] = 0.4  # residual max(0, target - draft) keeps only token 1
    verdict = verify_sampling(torch.tensor([[3, 0], [P, P]]), draft_probs, target, generators(2))
    assert verdict.num_accepted.tolist() == [0, 0]
    assert verdict.tokens[0].tolist() == [1, P, P]  # recovered: the only token with residual mass
    assert verdict.tokens[1, 0].item() in (0, 1) and verdict.tokens[1, 1:].tolist() == [P, P]  # empty draft


def test_sampling_is_reproducible_from_the_generators():
    target = torch.softmax(torch.randn(3, 4, 6), dim=-1)
    draft = torch.softmax(torch.randn(3, 3, 6), dim=-1)
    tokens = torch.tensor([[0, 1, 2], [3, 4, P], [5, P, P]])
    first = verify_sampling(tokens, draft, target, generators(3, seed=4))
    again = verify_sampling(tokens, draft, target, generators(3, seed=4))
    assert torch.equal(first.tokens, again.tokens)


# Chi-square test: the first output token of speculative sampling must follow the target distribution.
VOCAB = 5
TARGET = torch.tensor([0.40, 0.25, 0.15, 0.12, 0.08])
DRAFT = torch.tensor([0.10, 0.15, 0.20, 0.25, 0.30])  # deliberately far from the target
CRITICAL_DF4_P0001 = 18.467  # chi-square critical value, 4 degrees of freedom, p = 0.001


def first_token_counts(sampler, samples=4000, k=3, seed=0):
    gens = generators(samples, seed)
    draft_probs = DRAFT.expand(samples, k, VOCAB)
    draft_tokens = torch.stack([torch.multinomial(DRAFT, k, replacement=True, generator=g) for g in gens])  # (N, K)
    target_probs = TARGET.expand(samples, k + 1, VOCAB)
    verdict = sampler(draft_tokens, draft_probs, target_probs, gens)
    return torch.bincount(verdict.tokens[:, 0], minlength=VOCAB).double()


def chi_square(counts, probs):
    expected = probs.double() * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


def test_speculative_sampling_follows_the_target_distribution():
    for seed in range(2):
        counts = first_token_counts(verify_sampling, seed=seed)
        assert chi_square(counts, TARGET) < CRITICAL_DF4_P0001, counts


def test_the_chi_square_test_rejects_a_wrong_sampler(monkeypatch):
    # A classic bug: at a rejection, draw the recovered token from the target instead of the residual.
    def target_instead_of_residual(draft_tokens, draft_probs, deterministic, target_probs, target_rows, *rest):
        return target_probs[target_rows]

    monkeypatch.setattr(verify_module, "_final_distribution", target_instead_of_residual)
    counts = first_token_counts(verify_sampling)
    assert chi_square(counts, TARGET) > CRITICAL_DF4_P0001, counts


def test_a_deterministic_draft_is_also_lossless():
    # Prompt-lookup drafts have probability 1: accept x with target(x), else draw from target minus x.
    counts = first_token_counts(lambda tokens, _, target, gens: verify_sampling(tokens, None, target, gens))
    assert chi_square(counts, TARGET) < CRITICAL_DF4_P0001, counts


def test_bonus_token_follows_the_target_distribution():
    samples = 2000
    gens = generators(samples, seed=9)
    target = torch.stack([torch.eye(VOCAB)[2], TARGET]).expand(samples, 2, VOCAB)  # position 0 certain
    verdict = verify_sampling(torch.full((samples, 1), 2), None, target, gens)
    assert bool((verdict.num_accepted == 1).all())
    counts = torch.bincount(verdict.tokens[:, 1], minlength=VOCAB).double()
    assert chi_square(counts, TARGET) < CRITICAL_DF4_P0001


@pytest.mark.parametrize("k", [1, 2, 4])
def test_acceptance_rate_matches_the_theory(k):
    # Leviathan et al.: P(accept) = sum_x min(target(x), draft(x)) per position.
    samples = 3000
    gens = generators(samples, seed=k)
    draft_tokens = torch.stack([torch.multinomial(DRAFT, k, replacement=True, generator=g) for g in gens])
    verdict = verify_sampling(draft_tokens, DRAFT.expand(samples, k, VOCAB), TARGET.expand(samples, k + 1, VOCAB), gens)
    alpha = float(torch.minimum(TARGET, DRAFT).sum())
    expected = sum(alpha**i for i in range(1, k + 1))  # E[accepted] = alpha + alpha^2 + ... + alpha^k
    observed = float(verdict.num_accepted.double().mean())
    assert math.isclose(observed, expected, rel_tol=0.08)


def ragged_case(seed=0, batch=5, k=4, vocab=7):
    """Random ragged drafts (row b drafts b % (k + 1) tokens), their draft and target distributions."""
    g = torch.Generator().manual_seed(seed)
    lengths = [b % (k + 1) for b in range(batch)]
    tokens = torch.full((batch, k), P, dtype=torch.long)
    for b, n in enumerate(lengths):
        tokens[b, :n] = torch.randint(0, vocab, (n,), generator=g)
    draft = torch.softmax(3 * torch.randn(batch, k, vocab, generator=g), dim=-1)
    target = torch.softmax(3 * torch.randn(batch, k + 1, vocab, generator=g), dim=-1)
    return lengths, tokens, draft, target


def verdicts_equal(a, b):
    return torch.equal(a.num_accepted, b.num_accepted) and torch.equal(a.tokens, b.tokens)


@pytest.mark.parametrize("seed", range(5))
def test_packed_target_rows_give_the_padded_verdict(seed):
    """A verification step's real positions only ((N, V) and each row's first) decide as the padded block."""
    lengths, tokens, draft, target = ragged_case(seed)
    padded = verify_sampling(tokens, draft, target, generators(5, seed))
    packed_rows = torch.cat([target[b, : n + 1] for b, n in enumerate(lengths)])  # (N, V), N = sum(1 + n)
    first = torch.tensor([0] + [n + 1 for n in lengths]).cumsum(0)[:-1]
    packed = verify_sampling(tokens, draft, packed_rows, generators(5, seed), first=first)
    assert packed_rows.shape[0] == sum(lengths) + 5 and verdicts_equal(packed, padded)


@pytest.mark.parametrize("seed", range(5))
def test_deterministic_rows_among_model_rows_decide_as_one_hot_distributions(seed):
    """Hybrid drafting: copied rows (probability 1, any length) beside model rows whose draft_probs are
    narrower than the draft. The same verdict as spelling the copies out as one-hot rows."""
    lengths, tokens, draft, target = ragged_case(seed)
    copied = torch.tensor([n > 2 for n in lengths])  # the long drafts are copies; model rows draft <= 2
    spelled = draft.clone()
    for b in torch.nonzero(copied).flatten().tolist():
        spelled[b] = 0.0
        spelled[b, torch.arange(lengths[b]), tokens[b, : lengths[b]]] = 1.0
    want = verify_sampling(tokens, spelled, target, generators(5, seed))
    got = verify_sampling(tokens, draft[:, :2], target, generators(5, seed), deterministic=copied)
    assert verdicts_equal(got, want)


def test_a_reduced_head_draft_is_lossless_and_verified_as_its_full_vocabulary_spread():
    # A draft whose head scores tokens 0, 2, 3 only: its probabilities come over those columns.
    ids = torch.tensor([0, 2, 3])
    sub = torch.tensor([0.5, 0.2, 0.3])  # over ids; tokens 1 and 4 are never drafted
    full = torch.zeros(VOCAB).index_copy(0, ids, sub)
    samples, k = 4000, 3
    gens = generators(samples, seed=5)
    tokens = torch.stack([ids[torch.multinomial(sub, k, replacement=True, generator=g)] for g in gens])  # (N, K)
    target = TARGET.expand(samples, k + 1, VOCAB)
    reduced = verify_sampling(tokens, sub.expand(samples, k, 3), target, generators(samples, seed=6),
                              draft_columns=HeadColumns.of(ids, VOCAB))
    spread = verify_sampling(tokens, full.expand(samples, k, VOCAB), target, generators(samples, seed=6))
    assert torch.equal(reduced.tokens, spread.tokens) and torch.equal(reduced.num_accepted, spread.num_accepted)
    counts = torch.bincount(reduced.tokens[:, 0], minlength=VOCAB).double()
    assert chi_square(counts, TARGET) < CRITICAL_DF4_P0001, counts
    assert int((reduced.num_accepted < k).sum()) > samples // 4  # rejections happened: the residual was used
