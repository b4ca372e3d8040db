"""Pure tensor functions that turn logits into probabilities and draw tokens with per-row generators.

Every row of a batch owns a `torch.Generator`, so a row's random draws do not depend on which other
rows share its batch (batch invariance), and a sample is reproducible from its seed. Rows of one batch
may draw with different settings (`draw_rows`).
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from typing import Iterable, Sequence

import torch

from quench.engine.kernels import native
from quench.engine.row_settings import DrawSettings


def forbid_tokens(logits: torch.Tensor, spans: Iterable[tuple[int, int]], token_ids: Iterable[int]) -> torch.Tensor:
    """logits (N, V), in place: -inf at `token_ids` in rows start..end-1 of each (start, end) span
    (`RowLimits.min_tokens` forbids EOS this way, as vLLM and Hugging Face do)."""
    columns = torch.tensor(sorted(token_ids), dtype=torch.long)  # (E,)
    with torch.inference_mode():  # the runners' logits are inference tensors
        for start, end in spans:
            if end > start and len(columns):
                logits[start:end, columns] = float("-inf")
    return logits


def row_generator(seed: int, key: str, sample_index: int) -> torch.Generator:
    """A generator seeded from (seed, request key, sample index).

    Independent of batch layout and of the request's position in the list, so a resumed run (which
    asks only for the missing samples) and a run split over workers draw what one whole run draws.
    """
    digest = hashlib.blake2b(f"{seed}/{key}/{sample_index}".encode(), digest_size=8).digest()
    generator = torch.Generator()
    generator.manual_seed(int.from_bytes(digest, "little") & ((1 << 63) - 1))
    return generator


def logits_to_probs(logits: torch.Tensor, sampling: DrawSettings, in_place: bool = False) -> torch.Tensor:
    """Temperature, then top-k, then top-p (as Hugging Face orders them): logits (..., V) -> probs (..., V).

    in_place: the caller no longer needs `logits`; float32 logits then become the probabilities in place
    (temperature only: no (..., V) temporaries, where fresh multi-megabyte buffers cost page faults).
    """
    if in_place and logits.dtype == torch.float32 and sampling.top_k == 0 and sampling.top_p == 1.0:
        with torch.inference_mode():  # the engine's logits are inference tensors, updated in place only in there
            logits.div_(sampling.temperature)
            logits.sub_(logits.amax(dim=-1, keepdim=True)).exp_()
            return logits.div_(logits.sum(dim=-1, keepdim=True))
    logits = logits.float() / sampling.temperature
    if 0 < sampling.top_k < logits.shape[-1]:
        kth = torch.topk(logits, sampling.top_k, dim=-1).values[..., -1:]  # (..., 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if sampling.top_p < 1.0:
        logits = _top_p_filter(logits, sampling.top_p)
    return torch.softmax(logits, dim=-1)


def _top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose mass reaches top_p (at least one)."""
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)  # (..., V)
    sorted_probs = torch.softmax(sorted_logits, dim=-1)
    mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs  # mass of strictly better tokens
    drop_sorted = mass_before >= top_p
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def draw_uniforms(generators: list[torch.Generator]) -> torch.Tensor:
    """One float64 uniform in [0, 1) per row, row b's from generators[b]: (B,)."""
    return torch.cat([torch.rand(1, generator=g, dtype=torch.float64) for g in generators])


def sample_rows(probs: torch.Tensor, generators: list[torch.Generator]) -> torch.Tensor:
    """One token per row by inverse-CDF sampling: probs (B, V) -> tokens (B,), row b's uniform from generators[b].

    (`torch.multinomial` draws row by row over the vocabulary; this costs one cumsum.)
    """
    cdf = torch.cumsum(probs, dim=-1, dtype=torch.float64)  # (B, V)
    targets = draw_uniforms(generators)[:, None] * cdf[:, -1:]  # (B, 1)
    tokens = torch.searchsorted(cdf, targets, right=True).squeeze(1)  # first index whose cdf exceeds the target
    return tokens.clamp(max=probs.shape[-1] - 1)


def next_tokens(
    logits: torch.Tensor, sampling: DrawSettings, generators: list[torch.Generator], in_place: bool = False,
    rows: torch.Tensor | None = None,
) -> torch.Tensor:
    """Regular decoding: logits (N, V) -> tokens (A,) of rows `rows` (A,) (None: every row, A = N), greedy
    (argmax) or sampled, one uniform per row from generators[a] (in_place: as for `logits_to_probs`).

    Sampling with temperature alone runs the C kernel (`native.sample`: the same inverse CDF, faster than PyTorch's
    ops); top-k, top-p and a machine without the kernels run PyTorch's ops."""
    if sampling.greedy:
        return native.argmax(logits if rows is None else logits[rows])
    if sampling.top_k == 0 and sampling.top_p == 1.0 and native.samples(logits):
        chosen = torch.arange(logits.shape[0]) if rows is None else rows
        return native.sample(logits, chosen, sampling.temperature, draw_uniforms(generators))
    chosen_logits = logits if rows is None else logits[rows]  # a gathered copy: free to change in place
    return sample_rows(logits_to_probs(chosen_logits, sampling, in_place or rows is not None), generators)


def draw_rows(
    logits: torch.Tensor, draws: Sequence[DrawSettings], generators: list[torch.Generator], in_place: bool = False,
    rows: torch.Tensor | None = None,
) -> torch.Tensor:
    """`next_tokens` with a setting per row: logits (N, V) -> tokens (A,) of rows `rows` (A,) (None: every row),
    row a drawn with draws[a] and generators[a]. Rows that draw alike go through one `next_tokens` call;
    one setting for all is that one call (in_place as there), and a row draws what it draws alone."""
    groups: dict[DrawSettings, list[int]] = defaultdict(list)
    for a, draw in enumerate(draws):
        groups[draw.draw].append(a)
    if len(groups) == 1:
        return next_tokens(logits, next(iter(groups)), generators, in_place=in_place, rows=rows)
    tokens = torch.empty(len(draws), dtype=torch.long)  # (A,)
    for draw, members in groups.items():
        chosen = torch.tensor(members)  # (R,) of the A rows
        picked = chosen if rows is None else rows[chosen]  # (R,) of the N logits rows
        tokens[chosen] = next_tokens(logits, draw, [generators[a] for a in members], rows=picked)
    return tokens
