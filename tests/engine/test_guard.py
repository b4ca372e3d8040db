"""GenGuard inside the engine: rows stop where the policy, replayed on teacher-forced hidden states, says.

The oracle runs the model once over prompt + the unguarded answer (Hugging Face forward), scores
each generated token's hidden state (at the position where it is fed) with the guard, and replays
the policy: the guarded answer must be the unguarded one cut at that `keep`, with reason "guard",
for regular decoding and for every drafter (drafts accepted, rejected, stops inside a block).
"""

import pytest
import torch
from torch import nn

from helpers import DRAFT_EVERYTHING, char_tokenizer, tiny_llama
from quench.engine.backend import QuenchBackend
from quench.engine.config import EngineConfig
from quench.engine.types import GenerationRequest, SamplingParams
from quench.stopping import GenGuard, GuardInfo, GuardPolicy, RowPolicy, token_shapes

PROMPTS = ["def f(x):\n", "x = [1, 2, 3]\nfor i in x:\n    ", "a", "import os\n\nclass A:\n", "print(1)", "aaaa"]
SAMPLING = SamplingParams(max_new_tokens=24)


@pytest.fixture(scope="module")
def tokenizer():
    return char_tokenizer()


@pytest.fixture(scope="module")
def model():
    return tiny_llama(dtype=torch.float32)


def requests(tokenizer):
    return [GenerationRequest(f"t/{i}", tuple(tokenizer(p, add_special_tokens=False)["input_ids"]))
            for i, p in enumerate(PROMPTS)]


def head(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(32, 2))


def fed_hidden(model, request, result) -> tuple[list[int], torch.Tensor]:
    """The generated tokens the engine fed (all but a last one cut by the limit) and their hidden states."""
    fed = list(result.token_ids) if result.finish_reason == "eos" else list(result.token_ids[:-1])
    ids = torch.tensor([list(request.prompt_ids) + fed])
    with torch.inference_mode():
        states = model(ids, output_hidden_states=True).hidden_states[-1][0]  # (P + F, D)
    return fed, states[len(request.prompt_ids) :]  # (F, D): token i is fed at position P + i


def separated_threshold(probs: torch.Tensor) -> float:
    """A threshold near the top decile, midway in the widest gap there (no vote is near it)."""
    values = probs.sort().values
    lo, hi = int(0.75 * len(values)), int(0.95 * len(values))
    gaps = values[lo + 1 : hi + 1] - values[lo:hi]
    at = lo + int(gaps.argmax())
    return float(values[at] + values[at + 1]) / 2


def oracle_keep(guard: GenGuard, shapes, fed: list[int], states: torch.Tensor) -> int | None:
    policy = RowPolicy(guard.policy)
    votes = (guard.stop_probs(states) >= guard.policy.threshold).tolist()
    return next((keep for vote, t in zip(votes, fed) if (keep := policy.feed(vote, shapes[t])) is not None), None)


@pytest.fixture(scope="module")
def unguarded(model, tokenizer):
    backend = QuenchBackend(model, tokenizer, EngineConfig(batch_size=3))
    full = {r.key: r for r in backend.generate(requests(tokenizer), SAMPLING)}
    states = {r.key: fed_hidden(model, r, full[r.key]) for r in requests(tokenizer)}
    return full, states


def make_guard(unguarded, mode: str) -> GenGuard:
    _, states = unguarded
    probs = GenGuard(head(), GuardPolicy(), GuardInfo(32)).stop_probs(torch.cat([s for _, s in states.values()]))
    return GenGuard(head(), GuardPolicy(mode=mode, consecutive=2, threshold=separated_threshold(probs)), GuardInfo(32))


@pytest.mark.parametrize("speculate", ["none", "ngram", "same-draft", "other-draft"])
@pytest.mark.parametrize("mode", ["consecutive", "lines"])
@pytest.mark.parametrize("fast_path", [True, False])
def test_guard_stops_rows_where_the_policy_says(model, tokenizer, unguarded, speculate, mode, fast_path):
    full, states = unguarded
    guard = make_guard(unguarded, mode)
    config = {"none": {}, "ngram": {"drafter": "ngram", "ngram_min": 1, "draft_length": "bass"},  # drafts whatever the timings
              "same-draft": {"drafter": "draft"}, "other-draft": {"drafter": "draft"}}[speculate]
    draft = {"same-draft": model, "other-draft": tiny_llama(dtype=torch.float32, seed=1)}.get(speculate)
    backend = QuenchBackend(model, tokenizer, EngineConfig(batch_size=3, fast_path=fast_path, draft_tokens=4, **DRAFT_EVERYTHING, **config),
                            draft_model=draft, guard=guard)
    out = {r.key: r for r in backend.generate(requests(tokenizer), SAMPLING)}
    shapes = token_shapes(tokenizer)
    stopped = 0
    for key, result in full.items():
        keep = oracle_keep(guard, shapes, *states[key])
        if keep is None:  # not stopped: exactly the unguarded answer, whatever its batch neighbours did
            assert out[key].token_ids == result.token_ids and out[key].finish_reason == result.finish_reason
        else:
            stopped += 1
            assert out[key].token_ids == result.token_ids[:keep], key
            assert out[key].text == tokenizer.decode(result.token_ids[:keep], skip_special_tokens=True)
            assert out[key].finish_reason == "guard"
    if mode == "consecutive":  # the threshold sits in the top decile: some rows stop, some do not
        assert 0 < stopped < len(full)
    if speculate != "none":
        assert backend.last_stats.accepted > 0


def test_a_guard_that_always_votes_stop_keeps_nothing(model, tokenizer):
    always = nn.Sequential(nn.Linear(32, 2))
    with torch.no_grad():
        always[0].weight.zero_()
        always[0].bias.copy_(torch.tensor([0.0, 10.0]))
    guard = GenGuard(always, GuardPolicy(mode="consecutive", consecutive=3), GuardInfo(32))
    backend = QuenchBackend(model, tokenizer, EngineConfig(batch_size=2, drafter="draft", **DRAFT_EVERYTHING), draft_model=model,
                            guard=guard)
    out = list(backend.generate(requests(tokenizer), SAMPLING))
    # 3 "stop" votes in a row from the first token: the output keeps the tokens before the first one.
    assert len(out) == len(PROMPTS) and all(r.token_ids == () and r.finish_reason == "guard" for r in out)


def test_without_a_guard_the_runner_is_not_asked_for_hidden_states(model, tokenizer):
    backend = QuenchBackend(model, tokenizer, EngineConfig(batch_size=2))
    calls = []
    forward = backend.runner.forward
    backend.runner.forward = lambda *args, **kwargs: calls.append(kwargs.get("hidden", False)) or forward(*args, **kwargs)
    list(backend.generate(requests(tokenizer)[:2], SamplingParams(max_new_tokens=4)))
    assert calls and not any(calls)
