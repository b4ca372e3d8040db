"""Cutting work into chunks for Ray calls (pure functions; nothing here imports Ray).

A generation chunk keeps each request's position in the caller's list, because quench's engine
seeds a sample's random generator from (seed, request index, sample index): an actor rebuilds the
list with every request at its old index, so a sample drawn on any actor, in any chunk, or again
after a lost node, is the same sample the local engine would draw.
"""

from __future__ import annotations

import math
from typing import Iterator, Sequence

from quench.engine.hf_backend import batched  # noqa: F401  (re-exported: one chunking helper for both)
from quench.engine.types import GenerationRequest

IndexedRequest = tuple[int, GenerationRequest]  # (position in the caller's request list, request)

# Fills the positions of requests that are not in a chunk; n=0, so no backend ever samples it.
PLACEHOLDER = GenerationRequest(key="", prompt_ids=(), n=0)


def balanced_size(total: int, workers: int, preferred: int, per_worker: int = 2) -> int:
    """A chunk size no larger than `preferred` that still gives each worker `per_worker` chunks."""
    if total < 1:
        return max(1, preferred)
    return max(1, min(preferred, math.ceil(total / (max(1, workers) * per_worker))))


def split_request(request: GenerationRequest, size: int) -> Iterator[GenerationRequest]:
    """The request's samples as requests of at most `size` samples (same key and prompt)."""
    for first in range(0, request.n, size):
        count = min(size, request.n - first)
        yield GenerationRequest(
            request.key, request.prompt_ids, count, request.stop_sequences, request.sample_offset + first
        )


def generation_chunks(requests: Sequence[GenerationRequest], size: int) -> Iterator[list[IndexedRequest]]:
    """Chunks of at most `size` samples; a request with more samples is split across chunks."""
    chunk: list[IndexedRequest] = []
    room = size
    for index, request in enumerate(requests):
        for part in split_request(request, size):
            if part.n > room:
                yield chunk
                chunk, room = [], size
            chunk.append((index, part))
            room -= part.n
    if chunk:
        yield chunk


def layout(chunk: Sequence[IndexedRequest]) -> list[GenerationRequest]:
    """The request list an actor hands its backend: each request at its original position."""
    if not chunk:
        return []
    requests = [PLACEHOLDER] * (max(index for index, _ in chunk) + 1)
    for index, request in chunk:
        if requests[index] is not PLACEHOLDER:
            raise ValueError(f"two parts of request {index} in one chunk")
        requests[index] = request
    return requests
