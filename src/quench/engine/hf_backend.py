"""The reference backend: Hugging Face `generate`, batched with left padding, stop strings per row."""

from __future__ import annotations

import logging
import time
from typing import Iterable, Iterator, TypeVar

import torch

from quench.engine.config import EngineConfig
from quench.engine.types import GenerationRequest, GenerationResult, SamplingParams, cut_at_stop

log = logging.getLogger(__name__)

SampleItem = tuple[GenerationRequest, int]  # (request, sample index)
T = TypeVar("T")


def expand_samples(requests: Iterable[GenerationRequest]) -> Iterator[SampleItem]:
    for request in requests:
        for index in range(request.sample_offset, request.sample_offset + request.n):
            yield request, index


def batched(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """Consecutive lists of `size` items (the last may be shorter)."""
    if size < 1:
        raise ValueError(f"size must be at least 1, got {size}")
    batch: list[T] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


class HFBackend:
    """`model.generate` on batches of `batch_size` samples; samples of one batch share its seed."""

    name = "hf"

    def __init__(self, model, tokenizer, batch_size: int = EngineConfig.batch_size) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.eos_ids = self.eos_token_ids()

    def eos_token_ids(self) -> set[int]:
        eos = self.model.generation_config.eos_token_id
        ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if self.tokenizer.eos_token_id is not None:
            ids.add(self.tokenizer.eos_token_id)
        return ids

    def left_padded(self, batch: list[SampleItem]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(request.prompt_ids) for request, _ in batch)
        ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)  # (B, T)
        mask = torch.zeros((len(batch), width), dtype=torch.long)  # (B, T)
        for row, (request, _) in enumerate(batch):
            n = len(request.prompt_ids)
            ids[row, width - n :] = torch.tensor(request.prompt_ids)
            mask[row, width - n :] = 1
        return ids, mask

    def generate_batch(self, batch: list[SampleItem], sampling: SamplingParams, batch_seed: int) -> list[GenerationResult]:
        ids, mask = self.left_padded(batch)
        stops = sorted({s for request, _ in batch for s in request.stop_sequences})
        options: dict = dict(max_new_tokens=sampling.max_new_tokens, pad_token_id=self.pad_id,
                             eos_token_id=[] if sampling.ignore_eos else sorted(self.eos_ids),
                             min_new_tokens=sampling.min_tokens or None)
        if sampling.greedy:
            options.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        else:
            options.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k or None)
            torch.manual_seed(batch_seed)
        if stops:
            options.update(stop_strings=stops, tokenizer=self.tokenizer)
        start = time.perf_counter()
        with torch.inference_mode():
            out = self.model.generate(input_ids=ids, attention_mask=mask, **options)  # (B, T + new)
        seconds = (time.perf_counter() - start) / len(batch)
        return [self.result(request, index, out[row, ids.shape[1] :].tolist(), seconds, sampling.ignore_eos)
                for row, (request, index) in enumerate(batch)]

    def result(
        self, request: GenerationRequest, index: int, new_ids: list[int], seconds: float, ignore_eos: bool = False
    ) -> GenerationResult:
        end = None if ignore_eos else next((i for i, t in enumerate(new_ids) if t in self.eos_ids), None)
        tokens = new_ids if end is None else new_ids[:end]
        text, stopped = cut_at_stop(self.tokenizer.decode(tokens, skip_special_tokens=True), request.stop_sequences)
        reason = "stop" if stopped else "eos" if end is not None else "length"
        return GenerationResult(request.key, index, tuple(tokens), text, reason, seconds)

    def generate(self, requests: Iterable[GenerationRequest], sampling: SamplingParams) -> Iterator[GenerationResult]:
        for number, batch in enumerate(batched(expand_samples(requests), self.batch_size)):
            yield from self.generate_batch(batch, sampling, sampling.seed * 1_000_003 + number)
