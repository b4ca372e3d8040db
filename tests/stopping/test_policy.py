"""GenGuard's policies on literal vote sequences, and the batched runner with ragged rows."""

from __future__ import annotations

import pytest
import torch

from quench.stopping import PAD, GenGuard, GuardInfo, GuardPolicy, GuardState, RowPolicy, TokenShape

WORD = TokenShape.of("x")
NL = TokenShape.of("\n")
S, C = True, False  # a "stop" vote, a "continue" vote


def run(policy: GuardPolicy, tokens: list[tuple[bool, TokenShape]]) -> tuple[int | None, int]:
    """(tokens to keep, tokens fed when it stopped) for a literal sequence of (vote, token shape)."""
    row = RowPolicy(policy)
    for vote, shape in tokens:
        if (keep := row.feed(vote, shape)) is not None:
            return keep, row.position
    return None, row.position


LINES = GuardPolicy(mode="lines", max_empty_lines=0)


def test_token_shape() -> None:
    assert TokenShape.of("abc") == TokenShape(0, False, False)
    assert TokenShape.of("\n   ") == TokenShape(1, True, True)
    assert TokenShape.of("x\n\n\nif") == TokenShape(3, False, False)


def test_line_voting_majority_continue_goes_on() -> None:
    # line 1: C C S + newline(C): 3 of 4 continue -> goes on
    assert run(LINES, [(C, WORD), (C, WORD), (S, WORD), (C, NL)]) == (None, 4)


def test_line_voting_stops_at_a_mostly_stop_line_and_drops_it() -> None:
    line1 = [(C, WORD), (C, WORD), (C, NL)]
    line2 = [(S, WORD), (C, WORD), (S, WORD), (S, NL)]  # 1 of 4 continue
    assert run(LINES, line1 + line2) == (3, 7)


def test_line_voting_exactly_half_continues() -> None:
    # "stop if fewer than half voted continue": 2 of 4 is not fewer
    assert run(LINES, [(S, WORD), (C, WORD), (S, WORD), (C, NL)]) == (None, 4)


def test_line_voting_waits_for_the_newline() -> None:
    assert run(LINES, [(S, WORD)] * 10) == (None, 10)


def test_consecutive_stop_votes() -> None:
    policy = GuardPolicy(mode="consecutive", consecutive=3, max_empty_lines=0)
    assert run(policy, [(C, WORD), (S, WORD), (S, WORD), (C, NL), (S, WORD), (S, NL), (S, WORD)]) == (4, 7)
    assert run(policy, [(S, WORD), (S, WORD), (C, WORD)] * 3) == (None, 9)


def test_empty_lines_rule() -> None:
    policy = GuardPolicy(mode="lines", max_empty_lines=3)
    code = [(C, WORD), (C, NL)]
    assert run(policy, code + [(C, NL)] * 3) == (None, 5)
    assert run(policy, code + [(C, NL)] * 4) == (2, 6)  # keeps the code line, drops the empty ones


def test_empty_lines_inside_one_token() -> None:
    policy = GuardPolicy(mode="lines", max_empty_lines=3)
    many = TokenShape.of("\n\n\n\n\n")  # ends the code line, then four empty lines
    assert run(policy, [(C, WORD), (C, many)]) == (2, 2)


def test_blank_indentation_tokens_make_empty_lines() -> None:
    policy = GuardPolicy(mode="lines", max_empty_lines=1)
    spaces = TokenShape.of("    ")
    assert run(policy, [(C, WORD), (C, NL), (C, spaces), (C, NL), (C, spaces), (C, NL)]) == (2, 6)


def test_policy_validation() -> None:
    with pytest.raises(ValueError):
        GuardPolicy(mode="sometimes")
    with pytest.raises(ValueError):
        GuardPolicy(threshold=1.5)


def fixed_guard(policy: GuardPolicy) -> GenGuard:
    """A guard whose stop probability is sigmoid of 2 * (feature 0 - feature 1): features pick the vote."""
    head = torch.nn.Sequential(torch.nn.Linear(2, 2))
    with torch.no_grad():
        head[0].weight.copy_(torch.tensor([[-1.0, 1.0], [1.0, -1.0]]))
        head[0].bias.zero_()
    return GenGuard(head, policy, GuardInfo(hidden_size=2))


VOTE = {S: [5.0, 0.0], C: [0.0, 5.0]}


def test_guard_state_ragged_rows_and_reset() -> None:
    policy = GuardPolicy(mode="consecutive", consecutive=2, max_empty_lines=0)
    # vocabulary: 0 = "x", 1 = "\n"
    state = GuardState(fixed_guard(policy), [TokenShape.of("x"), TokenShape.of("\n")], slots=3)
    hidden = torch.tensor([
        [VOTE[S], VOTE[S], VOTE[S]],  # row 0: stops at its first two stop votes
        [VOTE[C], VOTE[S], VOTE[S]],  # row 1: only two valid positions: one stop vote
        [VOTE[S], VOTE[S], VOTE[S]],  # row 2: inactive slot
    ])  # (B=3, T=3, D=2)
    ids = torch.tensor([[0, 0, 0], [0, 0, PAD], [PAD, PAD, PAD]])
    assert state.step(hidden, ids) == [0, None, None]
    assert state.last_probs is not None and state.last_probs.shape == (3, 3)
    # next step: row 0 already stopped (ignored until reset); row 1's second stop vote stops it
    stops = torch.tensor([[VOTE[S]]] * 3)  # (3, 1, 2)
    assert state.step(stops, torch.tensor([[0], [0], [PAD]])) == [None, 1, None]
    state.reset(0)
    assert state.step(hidden[:, :2], torch.tensor([[0, 0], [PAD, PAD], [PAD, PAD]])) == [0, None, None]


def test_genguard_is_the_engines_stop_observer() -> None:
    """The decode loop calls GenGuard only through quench.engine.observers' protocol."""
    from quench.engine import RowStopper, StopObserver

    guard = fixed_guard(GuardPolicy())
    assert isinstance(guard, StopObserver) and issubclass(GuardState, RowStopper)
