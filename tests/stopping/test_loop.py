"""GenGuard inside a decode loop (this test's own: HF forward, KV cache, greedy), on a tiny model.

Checks that the hidden states a decode loop sees equal the teacher-forced features the guard is
trained on, and that the batched guard decides for each row what it decides for that row alone.
"""

from __future__ import annotations

import inspect

import torch

from quench.stopping import PAD, GenGuard, GuardInfo, GuardPolicy
from quench.stopping.dataset import answer_features
from helpers import char_tokenizer, tiny_llama


def cache_kwarg(model) -> str:
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


@torch.inference_mode()
def greedy_with_guard(model, prompts: list[list[int]], steps: int, guard: GenGuard | None, tokenizer):
    """Greedy decoding of equal-length prompts; returns generated ids, per-step hidden states, guard stops."""
    ids = torch.tensor(prompts)  # (B, P)
    out = model(input_ids=ids, use_cache=True)
    cache = out.past_key_values
    tokens = out.logits[:, -1].argmax(-1)  # (B,)
    generated, hidden_seen = [tokens], []
    state = guard.start(tokenizer, len(prompts)) if guard is not None else None
    stops: list[int | None] = [None] * len(prompts)
    for _ in range(steps):
        out = model(input_ids=tokens[:, None], use_cache=True, output_hidden_states=True, **{cache_kwarg(model): cache})
        hidden = out.hidden_states[-1]  # (B, 1, D): the fed tokens' final-norm states
        hidden_seen.append(hidden[:, 0])
        if state is not None:
            fed = torch.where(torch.tensor([s is None for s in stops]), tokens, torch.full_like(tokens, PAD))
            for b, keep in enumerate(state.step(hidden, fed[:, None])):
                if keep is not None:
                    stops[b] = keep
        tokens = out.logits[:, -1].argmax(-1)
        generated.append(tokens)
    return torch.stack(generated, dim=1), torch.stack(hidden_seen, dim=1), stops


def test_decode_hidden_states_equal_teacher_forced_features() -> None:
    torch.manual_seed(0)
    model = tiny_llama()
    prompt = list(range(5, 17))
    generated, hidden, _ = greedy_with_guard(model, [prompt], steps=10, guard=None, tokenizer=None)
    features = answer_features(model, prompt, generated[0, :10].tolist())  # (10, D)
    assert torch.allclose(hidden[0], features, atol=1e-5)


def random_guard(hidden_size: int, policy: GuardPolicy) -> GenGuard:
    torch.manual_seed(1)
    head = torch.nn.Sequential(torch.nn.Linear(hidden_size, 2))
    return GenGuard(head, policy, GuardInfo(hidden_size=hidden_size))


def test_batched_guard_matches_rows_alone() -> None:
    torch.manual_seed(0)
    model, tokenizer = tiny_llama(), char_tokenizer()
    prompts = [list(range(5, 17)), list(range(30, 42)), list(range(50, 62))]
    guard = random_guard(model.config.hidden_size, GuardPolicy(mode="consecutive", consecutive=2, threshold=0.5))
    _, _, together = greedy_with_guard(model, prompts, steps=20, guard=guard, tokenizer=tokenizer)
    alone = [greedy_with_guard(model, [p], steps=20, guard=guard, tokenizer=tokenizer)[2][0] for p in prompts]
    assert together == alone and any(keep is not None for keep in together)
    never = guard.with_policy(threshold=1.0)  # a probability never reaches 1: no stop votes
    assert greedy_with_guard(model, prompts, steps=5, guard=never, tokenizer=tokenizer)[2] == [None, None, None]
