"""Shared fixtures for the stopping tests: a synthetic GenGuard dataset."""

from __future__ import annotations

from typing import Callable

import pytest
import torch

from quench.stopping.dataset import GuardDataset

D = 16


def synthetic(answers: int = 40, length: int = 30, seed: int = 0) -> GuardDataset:
    """Answers whose tokens are "stop" from a random point on; a shifted, scaled direction tells them apart."""
    generator = torch.Generator().manual_seed(seed)
    direction = torch.randn(D, generator=generator)
    hidden, labels, sequence, position, shape, records = [], [], [], [], [], []
    for a in range(answers):
        end = 3 * int(torch.randint(2, length // 3 - 1, (1,), generator=generator))  # at a line start
        row_labels = (torch.arange(length) >= end).to(torch.uint8)
        noise = torch.randn(length, D, generator=generator)
        hidden.append(10.0 + 3.0 * (noise + 2.0 * (row_labels.float()[:, None] * 2 - 1) * direction))
        labels.append(row_labels)
        sequence.append(torch.full((length,), a, dtype=torch.int32))
        position.append(torch.arange(length, dtype=torch.int32))
        newline = (torch.arange(length) % 3 == 2).to(torch.uint8)  # every third token ends a line
        shape.append(torch.stack([newline, 1 - newline, torch.ones(length, dtype=torch.uint8)], dim=1))
        split = "validation" if a % 4 == 0 else "train"
        records.append({"task_id": f"T/{a}", "split": split, "num_tokens": length, "excess_token": end})
    return GuardDataset(
        torch.cat(hidden).to(torch.bfloat16), torch.cat(labels), torch.cat(sequence), torch.cat(position),
        torch.cat(shape), records, {"model": "synthetic", "description": "synthetic"},
    )


@pytest.fixture(scope="session")
def make_synthetic() -> Callable[..., GuardDataset]:
    return synthetic
