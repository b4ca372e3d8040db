"""Training GenGuard: class-balanced cross-entropy on labelled hidden states, validated per answer.

Validation holds out whole answers (the "validation" split when the data has one, else a seeded
share), so no answer has tokens on both sides. Features are standardized for training and the
scaling is folded into the first layer afterwards: the saved guard reads raw hidden states.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import torch
from torch import nn

from quench.stopping.dataset import GuardDataset, shape_of_row
from quench.stopping.guard import GenGuard, GuardInfo, make_head
from quench.stopping.policy import GuardPolicy, RowPolicy

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainConfig:
    kind: str = "linear"  # "linear" (CodeFast) or "mlp"
    mlp_hidden: int = 64  # width of the MLP's hidden layer
    epochs: int = 30
    batch_size: int = 512
    lr: float = 3e-3
    weight_decay: float = 1e-2  # AdamW; a few hundred answers are easy to overfit
    val_fraction: float = 0.2  # held-out share of answers when the data has no "validation" split
    seed: int = 0


@dataclass(frozen=True)
class StopMetrics:
    """Token-level figures for class "stop", and what the policy does on whole answers."""

    tokens: int
    stop_share: float  # share of tokens labelled "stop"
    precision: float
    recall: float
    accuracy: float
    answers: int = 0
    early: int = 0  # answers cut before the required code ended
    stopped: int = 0  # answers the policy stopped at or after the end of the required code
    never: int = 0  # answers the policy never stopped
    generated_share: float = 1.0  # tokens the guarded run generates / tokens of the full answers
    excess_kept: float = 0.0  # mean excess tokens kept per stopped answer


def split_answers(data: GuardDataset, val_fraction: float, seed: int) -> torch.Tensor:
    """(A,) bool: which answers are held out for validation."""
    splits = [r.get("split", "") for r in data.records]
    if "validation" in splits and any(s != "validation" for s in splits):
        return torch.tensor([s == "validation" for s in splits])
    generator = torch.Generator().manual_seed(seed)
    count = len(data.records)
    held = torch.zeros(count, dtype=torch.bool)
    held[torch.randperm(count, generator=generator)[: max(1, round(val_fraction * count))]] = True
    if held.all() and count > 1:
        held[0] = False
    return held


THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)


def train_guard(
    data: GuardDataset,
    config: TrainConfig = TrainConfig(),
    policy: GuardPolicy = GuardPolicy(),
    model: str = "",
    calibrate: bool = False,
) -> tuple[GenGuard, StopMetrics]:
    """Fit the classifier; return the guard (best epoch on validation) and its validation metrics.

    calibrate: choose the policy threshold on validation (see `calibrate_threshold`).
    """
    torch.manual_seed(config.seed)
    held = split_answers(data, config.val_fraction, config.seed)
    val_tokens = held[data.sequence.long()]  # (N,)
    x = data.hidden.float()  # (N, D)
    y = data.labels.long()  # (N,)
    mean = x[~val_tokens].mean(dim=0)  # (D,)
    std = x[~val_tokens].std(dim=0).clamp(min=1e-4)  # (D,)
    x = (x - mean) / std
    head = make_head(data.hidden_size, config.kind, config.mlp_hidden)
    counts = torch.bincount(y[~val_tokens], minlength=2).float().clamp(min=1)
    loss_fn = nn.CrossEntropyLoss(weight=counts.sum() / (2 * counts))  # class-balanced
    optimizer = torch.optim.AdamW(head.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    train_x, train_y = x[~val_tokens], y[~val_tokens]
    val_x, val_y = (x[val_tokens], y[val_tokens]) if val_tokens.any() else (train_x, train_y)
    generator = torch.Generator().manual_seed(config.seed)
    best, best_loss = None, math.inf
    for epoch in range(config.epochs):
        head.train()
        for batch in torch.randperm(len(train_y), generator=generator).split(config.batch_size):
            optimizer.zero_grad()
            loss_fn(head(train_x[batch]), train_y[batch]).backward()
            optimizer.step()
        head.eval()
        with torch.no_grad():
            val_loss = float(loss_fn(head(val_x), val_y))
        log.debug("epoch %d: validation loss %.4f", epoch, val_loss)
        if val_loss < best_loss:
            best_loss, best = val_loss, {k: v.clone() for k, v in head.state_dict().items()}
    assert best is not None
    head.load_state_dict(best)
    fold_standardization(head, mean, std)
    info = GuardInfo(data.hidden_size, model or data.meta.get("model", ""), config.kind,
                     config.mlp_hidden if config.kind == "mlp" else 0)
    guard = GenGuard(head, policy, info)
    validation = held if val_tokens.any() else ~held
    if calibrate:
        guard = guard.with_policy(threshold=calibrate_threshold(guard, data, validation))
    metrics = evaluate_guard(guard, data, validation)
    described = f"{data.meta.get('description', '')} ({len(data.records)} answers, {len(y)} tokens)".strip()
    info = GuardInfo(**{**info.__dict__, "trained_on": described,
                        "metrics": {k: float(v) for k, v in metrics.__dict__.items()}})
    return GenGuard(guard.head, guard.policy, info), metrics


def evaluate_by_language(guard: GenGuard, data: GuardDataset, answers: torch.Tensor) -> dict[str, StopMetrics]:
    """`evaluate_guard` on the selected answers (A,) bool of each language in the data."""
    languages = data.languages()
    by_language = {}
    for language in sorted(set(languages)):
        chosen = answers & torch.tensor([lang == language for lang in languages])
        if chosen.any():
            by_language[language] = evaluate_guard(guard, data, chosen)
    return by_language


def calibrate_threshold(guard: GenGuard, data: GuardDataset, answers: torch.Tensor) -> float:
    """The lowest threshold that cuts the fewest answers before their code ends (stopping early costs
    correctness; stopping late only tokens), among `THRESHOLDS`."""
    early = {t: evaluate_guard(guard.with_policy(threshold=t), data, answers).early for t in THRESHOLDS}
    fewest = min(early.values())
    chosen = min(t for t, count in early.items() if count == fewest)
    log.info("threshold %.2f: %d answers cut early on validation (by threshold: %s)", chosen, fewest, early)
    return chosen


@torch.no_grad()
def fold_standardization(head: nn.Sequential, mean: torch.Tensor, std: torch.Tensor) -> None:
    """Make head(x) equal the trained head((x - mean) / std): W' = W / std, b' = b - W' mean."""
    first = head[0]
    assert isinstance(first, nn.Linear)
    first.weight.div_(std[None, :])
    first.bias.sub_(first.weight @ mean)


def evaluate_guard(guard: GenGuard, data: GuardDataset, answers: torch.Tensor) -> StopMetrics:
    """Token precision/recall of "stop" and the policy's outcome on the selected answers (A,) bool."""
    selected = answers[data.sequence.long()]  # (N,)
    probs = guard.stop_probs(data.hidden[selected])  # (n,)
    votes = probs >= guard.policy.threshold
    labels = data.labels[selected].bool()
    true_stop = int((votes & labels).sum())
    outcome = simulate_policy(guard.policy, data, answers, votes)
    return StopMetrics(
        tokens=int(selected.sum()),
        stop_share=float(labels.float().mean()) if len(labels) else 0.0,
        precision=true_stop / max(int(votes.sum()), 1),
        recall=true_stop / max(int(labels.sum()), 1),
        accuracy=float((votes == labels).float().mean()) if len(labels) else 0.0,
        **outcome,
    )


def simulate_policy(policy: GuardPolicy, data: GuardDataset, answers: torch.Tensor, votes: torch.Tensor) -> dict:
    """Run the policy over each selected answer's votes (in the order of `data`) and compare with its labels."""
    sequence = data.sequence[answers[data.sequence.long()]].tolist()
    shapes = data.shape[answers[data.sequence.long()]].tolist()
    early = stopped = never = 0
    generated = total = excess_kept = 0
    rows: dict[int, RowPolicy] = {}
    decided: dict[int, tuple[int, int]] = {}  # answer -> (tokens kept, tokens generated when decided)
    for seq, vote, shape in zip(sequence, votes.tolist(), shapes):
        if seq in decided:
            continue
        row = rows.setdefault(seq, RowPolicy(policy))
        keep = row.feed(vote, shape_of_row(shape))
        if keep is not None:
            decided[seq] = (keep, row.position + 1)  # the engine has sampled one more token by then
    for seq in sorted(set(sequence)):
        record = data.records[seq]
        n, end = record["num_tokens"], record["excess_token"]
        total += n
        if seq not in decided:
            never += 1
            generated += n
            continue
        keep, at = decided[seq]
        generated += min(at, n)
        if keep < end:
            early += 1
        else:
            stopped += 1
            excess_kept += keep - end
    return {
        "answers": len(set(sequence)), "early": early, "stopped": stopped, "never": never,
        "generated_share": generated / max(total, 1), "excess_kept": excess_kept / max(stopped, 1),
    }
