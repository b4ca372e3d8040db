"""Drafters propose the next K tokens of every row; the target verifies them (see verify.py).

- `NgramDrafter` (prompt lookup): finds the latest earlier occurrence of the row's last n tokens in
  its own prompt + output and proposes what followed. Deterministic: draft probability 1.
- `ModelDrafter`: a small causal LM sharing the target's tokenizer, run autoregressively over its
  own ragged KV cache; its tokens are drawn from the same processed distribution that verification
  divides by, as lossless speculative sampling requires. Rows asked for 0 tokens are not fed at all
  (their cache catches up the next time they draft).
- `HybridDrafter`: per row, prompt lookup when the row's last n-gram occurred before (it copies
  exactly, which a small draft model cannot), else the draft model with a per-row length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import torch

from quench.engine.kernels import native
from quench.engine.config import EngineConfig
from quench.engine.kv_cache import KVCache
from quench.engine.row_settings import DrawSettings
from quench.engine.rows import Row
from quench.engine.sampling import logits_to_probs, sample_rows
from quench.engine.runners.protocol import Runner
from quench.engine.scheduler import PrefixStore, WorkItem
from quench.engine.verify import PLACEHOLDER, HeadColumns

CATCH_UP = 16  # tokens per row per catch-up forward of a draft model (a decode-sized step)
LOOP_SPAN = 24  # a row is in a loop when its last this many generated tokens repeat those one period earlier


@dataclass(frozen=True)
class Draft:
    tokens: torch.Tensor  # (B, K), PLACEHOLDER where a row proposes fewer
    probs: torch.Tensor | None  # (B, Kp, V), Kp <= K: draft distribution of each token; None = deterministic
    deterministic: torch.Tensor | None = None  # (B,) bool: rows drafted with probability 1 although probs is set
    columns: HeadColumns | None = None  # probs is (B, Kp, V') over these tokens only (a reduced head)

    @property
    def width(self) -> int:
        """Drafted positions actually used by some row (the verification forward feeds 1 + width)."""
        used = (self.tokens != PLACEHOLDER).sum(dim=1)
        return int(used.max()) if used.numel() else 0


class Drafter(Protocol):
    def admit(self, slots: Sequence[tuple[int, WorkItem]]) -> None:
        """New rows entered these slots (their prompts are in the items)."""
        ...

    def release(self, request_index: int) -> None:
        """No further sample of this request will start."""
        ...

    def propose(self, rows: Sequence[Row | None], limits: Sequence[int], sampling: DrawSettings) -> Draft:
        """Up to limits[b] tokens for each row (0 for empty slots)."""
        ...

    def reach(self, slot: int, row: Row) -> int:
        """How many tokens the row's next draft may have whatever the draft length policy says (0: the policy's)."""
        ...


class NgramIndex:
    """For each n-gram seen so far, the position right after its latest occurrence that has a follower."""

    def __init__(self, max_n: int) -> None:
        self.max_n = max_n
        self.next_position: dict[tuple[int, ...], int] = {}
        self.indexed = 0  # tokens[: indexed] are in the index

    def extend(self, tokens: list[int]) -> None:
        for i in range(max(self.indexed, 1), len(tokens)):
            for n in range(1, min(self.max_n, i) + 1):
                self.next_position[tuple(tokens[i - n : i])] = i
        self.indexed = len(tokens)

    def lookup(self, tokens: list[int], k: int, min_n: int) -> list[int]:
        """The tokens that followed the longest matching suffix (n from max_n down to min_n)."""
        for n in range(min(self.max_n, len(tokens)), min_n - 1, -1):
            position = self.next_position.get(tuple(tokens[-n:]))
            if position is not None:
                return tokens[position : position + k]
        return []


def loop_period(tokens: list[int], prompt_len: int, index: NgramIndex) -> int:
    """The period of the loop a row's output is in, 0 if none: its last LOOP_SPAN generated tokens equal
    those one period earlier, the period being the distance to the last n-gram's previous occurrence.

    `index` holds the row's tokens but the last (NgramIndex.extend): a greedy model caught in a
    repetition loop keeps repeating it, so the loop's continuation is a draft the target accepts.
    """
    n = len(tokens)
    position = index.next_position.get(tuple(tokens[-index.max_n :])) if n - prompt_len > LOOP_SPAN else None
    if position is None:
        return 0
    period = n - position
    if n - LOOP_SPAN - period < prompt_len:
        return 0
    return period if tokens[n - LOOP_SPAN :] == tokens[n - LOOP_SPAN - period : n - period] else 0


class NgramDrafter:
    """Prompt-lookup drafting (no model): n-grams of the row's own prompt and output.

    With `loop_tokens`, a row whose output is in a repetition loop (`loop_period`) drafts that many
    tokens of the loop's continuation, whatever the batch's draft length: a long draft only where
    the target will almost surely accept it. Verification keeps the output the target's own.
    """

    def __init__(self, batch_size: int, max_n: int = EngineConfig.ngram_max, min_n: int = EngineConfig.ngram_min,
                 loop_tokens: int = 0) -> None:
        self.max_n = max_n
        self.min_n = min_n
        self.loop_tokens = loop_tokens
        self.indexes: list[NgramIndex | None] = [None] * batch_size
        self.periods: list[tuple[int, int]] = [(-1, 0)] * batch_size  # per slot: (tokens then, loop period)

    def admit(self, slots: Sequence[tuple[int, WorkItem]]) -> None:
        for slot, _ in slots:
            self.indexes[slot] = NgramIndex(self.max_n)
            self.periods[slot] = (-1, 0)

    def release(self, request_index: int) -> None:
        return None

    def period(self, slot: int, row: Row | None) -> int:
        """The period of the loop the row is in (0: none, or loop drafting is off); found once per step
        (the decode loop asks `reach`, then `lookup`)."""
        index = self.indexes[slot]
        if not self.loop_tokens or row is None or index is None:
            return 0
        seen, period = self.periods[slot]
        if seen != len(row.tokens):
            index.extend(row.tokens)
            period = loop_period(row.tokens, row.prompt_len, index)
            self.periods[slot] = (len(row.tokens), period)
        return period

    def reach(self, slot: int, row: Row) -> int:
        return self.loop_tokens if self.period(slot, row) else 0

    def lookup(self, slot: int, row: Row | None, limit: int) -> list[int]:
        """Up to `limit` tokens that followed the row's longest earlier-seen suffix ([] if none); in a
        loop, the loop's continuation."""
        index = self.indexes[slot]
        if row is None or index is None or limit == 0:
            return []
        index.extend(row.tokens)
        proposal = index.lookup(row.tokens, limit, self.min_n)
        if len(proposal) < limit and (period := self.period(slot, row)):
            loop = row.tokens[len(row.tokens) - period :]
            proposal = [loop[i % period] for i in range(limit)]
        return proposal

    def propose(self, rows: Sequence[Row | None], limits: Sequence[int], sampling: DrawSettings) -> Draft:
        k = max(limits, default=0)
        tokens = torch.full((len(rows), k), PLACEHOLDER, dtype=torch.long)  # (B, K)
        for b, row in enumerate(rows):
            proposal = self.lookup(b, row, limits[b])
            if proposal:
                tokens[b, : len(proposal)] = torch.tensor(proposal, dtype=torch.long)
        return Draft(tokens, None)


class ModelDrafter:
    """A draft model with its own KV cache; keeps in step with the committed tokens of each row.

    columns: where the runner scores a reduced head's rows only, their full-vocabulary ids. Picks are
    made among the columns (argmax, confidence, sampling: the tokens outside have probability 0
    anyway) and mapped back. Sampled drafts' probabilities stay over the columns too (`Draft.columns`):
    verification reads them by column and spreads one row over the vocabulary only at a rejection.
    Spreading every step's logits, or every sampled draft's probabilities, over the whole vocabulary would
    cost a pass over (B, K, V) per step for rows that are mostly accepted.
    """

    def __init__(
        self,
        runner: Runner,
        batch_size: int,
        max_len: int,
        confidence: float = 0.0,
        columns: HeadColumns | None = None,
        share_prefixes: bool = True,
        stop: float = 0.0,
        floor: int = 0,
    ) -> None:
        self.runner = runner
        self.columns = columns
        # A row's draft ends before the first token the draft model gives less than this probability
        # (0: never): at batch > 1 each drafted token costs verification work, and unsure ones are
        # mostly rejected. The cut depends on the draft alone, so verification stays lossless.
        self.confidence = confidence
        # ... and, past its first `floor` tokens, before the token at which the product of the draft's
        # probabilities of the row's tokens so far (the chance the target keeps them all, were the draft
        # calibrated) falls below `stop` (0: never).
        self.stop = stop
        self.floor = floor
        # CATCH_UP more positions: a row that skipped drafting catches up in blocks of that many tokens.
        self.cache: KVCache = runner.new_cache(batch_size, max_len + CATCH_UP)
        self.prefixes = PrefixStore(runner, share=share_prefixes)
        # What this cache holds per slot: the row's first `base` tokens, then `fed` draft tokens.
        self.base = [0] * batch_size
        self.fed: list[list[int]] = [[] for _ in range(batch_size)]

    def admit(self, slots: Sequence[tuple[int, WorkItem]]) -> None:
        self.prefixes.ensure([item for _, item in slots])
        for slot, item in slots:
            prefix, _ = self.prefixes.get(item.request_index)
            self.cache.install(slot, prefix)
            self.base[slot], self.fed[slot] = prefix.length, []

    def release(self, request_index: int) -> None:
        self.prefixes.release(request_index)

    def reach(self, slot: int, row: Row) -> int:
        return 0

    def _valid(self, slot: int, row: Row) -> int:
        """Positions of the slot whose cached keys/values match the row's committed tokens."""
        kept = 0
        for token in self.fed[slot]:
            if self.base[slot] + kept >= len(row.tokens) or row.tokens[self.base[slot] + kept] != token:
                break
            kept += 1
        return min(self.base[slot] + kept, len(row.tokens) - 1)

    @torch.inference_mode()
    def propose(self, rows: Sequence[Row | None], limits: Sequence[int], sampling: DrawSettings) -> Draft:
        batch, k = len(rows), max(limits, default=0)
        tokens = torch.full((batch, k), PLACEHOLDER, dtype=torch.long)  # (B, K)
        if k == 0:
            return Draft(tokens, None)
        drafting = [row is not None and limits[b] > 0 for b, row in enumerate(rows)]
        valid = [self._valid(b, row) if row is not None else 0 for b, row in enumerate(rows)]
        logits = self._catch_up(rows, drafting, valid)  # (B, V') logits for each row's first draft token
        scratch = torch.Generator()  # draws past a row's own limit must not advance its generator
        # Rows that are not drafting write nothing they keep: their writes land past their valid positions.
        lengths = torch.tensor([len(row.tokens) if d else v for d, v, row in zip(drafting, valid, rows)])  # (B,)
        probs_steps: list[torch.Tensor] = []
        kept = list(limits)  # tokens each row keeps: its limit, or fewer where the draft was unsure
        sure = [1.0] * batch  # per row: the product of its draft tokens' probabilities so far
        unsure = bool(self.confidence or self.stop)
        for i in range(k):
            if sampling.greedy:
                column = native.argmax(logits)  # (B,)
                chosen = torch.softmax(logits.float(), dim=-1).gather(1, column[:, None])[:, 0] if unsure else None
            else:
                probs = logits_to_probs(logits, sampling, in_place=True)  # (B, V'); this step's logits are spent
                generators = [r.generator if r is not None and i < kept[b] else scratch for b, r in enumerate(rows)]
                column = sample_rows(probs, generators)
                probs_steps.append(probs)
                chosen = probs.gather(1, column[:, None])[:, 0] if unsure else None  # (B,)
            step = self.columns.ids[column] if self.columns is not None else column  # (B,) token ids
            tokens[:, i] = step
            if chosen is not None:
                sure = [s * float(p) for s, p in zip(sure, chosen)]
                kept = [i if i < n and self._cut(i, float(p), s) else n for n, p, s in zip(kept, chosen, sure)]
            live = [int(d and i + 1 < n) for d, n in zip(drafting, kept)]
            if not any(live):
                break
            logits = self.runner.forward(self.cache, step[:, None], lengths + i, counts=torch.tensor(live))[:, 0]  # (B, V')
        for b in range(batch):
            if drafting[b]:  # the cache now holds the row's tokens, then the drafts it fed (all kept but the last)
                self.base[b], self.fed[b] = len(rows[b].tokens), tokens[b, : min(kept[b], limits[b] - 1)].tolist()
            tokens[b, kept[b] :] = PLACEHOLDER
        width = max(kept, default=0)
        probs = torch.stack(probs_steps, dim=1)[:, :width] if probs_steps else None  # (B, <= K, V')
        columns = self.columns if probs is not None else None
        return Draft(tokens[:, :width], probs, columns=columns)  # verification spreads probs only at rejections

    def _cut(self, i: int, p: float, sure: float) -> bool:
        """Whether a row's draft ends before its token i, drafted with probability p (sure: the product
        of its tokens' probabilities up to and including i)."""
        return p < self.confidence or (i >= self.floor and sure < self.stop)

    def _catch_up(self, rows: Sequence[Row | None], drafting: list[bool], valid: list[int]) -> torch.Tensor:
        """Feed each drafting row's committed tokens that this cache lacks (at least the last one).

        A row that skipped drafting for a while may lack many tokens: they go in blocks of CATCH_UP
        (decode-sized steps, and the cache has CATCH_UP spare positions past the engine's length).
        """
        missing = [row.tokens[v:] if d else [] for d, v, row in zip(drafting, valid, rows)]
        start = torch.tensor(valid)  # (B,)
        while max(len(m) for m in missing) > CATCH_UP:
            block = [m[:CATCH_UP] if len(m) > CATCH_UP else [] for m in missing]
            self._feed(block, start)
            start = start + torch.tensor([len(m) for m in block])
            missing = [m[len(part) :] for m, part in zip(missing, block)]
        return self._feed(missing, start)

    def _feed(self, blocks: list[list[int]], start: torch.Tensor) -> torch.Tensor:
        """One forward of each row's block (rows with none feed nothing); (B, V) logits after each block."""
        width = max(1, max(len(m) for m in blocks))
        tokens = torch.zeros(len(blocks), width, dtype=torch.long)  # (B, S), right-padded
        for b, m in enumerate(blocks):
            tokens[b, : len(m)] = torch.tensor(m, dtype=torch.long)
        last = torch.tensor([max(len(m) - 1, 0) for m in blocks])  # (B,)
        counts = torch.tensor([len(m) for m in blocks])  # (B,)
        return self.runner.forward(self.cache, tokens, start, logits_at=last, counts=counts)


class HybridDrafter:
    """Per row: prompt lookup when the row's last n-gram occurred before, else the draft model.

    Lookup copies prompt text and repeated names exactly, which a 2-layer draft cannot (it has no
    induction circuit; docs/draft.md). A model-drafted row gets its own length, grown by one when
    the target accepted its whole last model draft and cut to what was accepted otherwise, so rows
    the draft predicts badly stop paying for long drafts that the batch-level length would give them.
    Sampling stays lossless: a copied token is a draft with probability 1 (`Draft.deterministic`).
    With `row_copy_lengths`, copies get a per-row cap too: cut to one past what the target kept of
    the row's last copy, lifted (back to the batch length) when it kept a whole copy.
    """

    def __init__(self, ngram: NgramDrafter, model: ModelDrafter, batch_size: int, max_model_tokens: int = 8,
                 row_copy_lengths: bool = False, min_model_tokens: int = 1) -> None:
        self.ngram = ngram
        self.model = model
        self.max_model_tokens = max_model_tokens
        self.min_model_tokens = min(min_model_tokens, max_model_tokens)  # the shortest model draft a row gets
        self.row_copy_lengths = row_copy_lengths
        self.model_length = [self.min_model_tokens] * batch_size  # tokens the draft model proposes for the row next time
        self.copy_cap: list[int | None] = [None] * batch_size  # most tokens the row copies next time (None: no cap)
        # Per slot: whether its last draft was a copy, the row's length then, and that draft's tokens.
        self.last_draft: list[tuple[bool, int, list[int]] | None] = [None] * batch_size
        self.copied = 0  # rows drafted by lookup / by the model (for benchmarks and logs)
        self.modelled = 0

    def admit(self, slots: Sequence[tuple[int, WorkItem]]) -> None:
        self.ngram.admit(slots)
        self.model.admit(slots)
        for slot, _ in slots:
            self.model_length[slot], self.copy_cap[slot], self.last_draft[slot] = self.min_model_tokens, None, None

    def release(self, request_index: int) -> None:
        self.model.release(request_index)

    def reach(self, slot: int, row: Row) -> int:
        return self.ngram.reach(slot, row)

    def propose(self, rows: Sequence[Row | None], limits: Sequence[int], sampling: DrawSettings) -> Draft:
        self._learn(rows)
        caps = [min(limit, cap or limit) for limit, cap in zip(limits, self.copy_cap)]
        copies = [self.ngram.lookup(b, row, cap) for b, (row, cap) in enumerate(zip(rows, caps))]
        # With a stop on the draft's cumulative probability, that rule sets each model draft's length.
        lengths = self.model_length if not self.model.stop else [self.max_model_tokens] * len(rows)
        model_limits = [
            0 if copy or row is None else min(limit, lengths[b])
            for b, (row, limit, copy) in enumerate(zip(rows, limits, copies))
        ]
        width = max([len(c) for c in copies] + model_limits + [0])
        tokens = torch.full((len(rows), width), PLACEHOLDER, dtype=torch.long)  # (B, K)
        probs, columns = None, None  # (B, Km, V or V'): the model rows' draft distributions (sampling only)
        if any(model_limits):
            drafted = self.model.propose(rows, model_limits, sampling)
            tokens[:, : drafted.tokens.shape[1]] = drafted.tokens
            probs, columns = drafted.probs, drafted.columns
        for b, copy in enumerate(copies):
            if copy:
                tokens[b, : len(copy)] = torch.tensor(copy, dtype=torch.long)
                self.last_draft[b] = (True, len(rows[b].tokens), list(copy))
            elif model_limits[b]:
                proposal = [t for t in tokens[b, : model_limits[b]].tolist() if t != PLACEHOLDER]  # unsure ones cut
                self.last_draft[b] = (False, len(rows[b].tokens), proposal) if proposal else None
        self.copied += sum(bool(c) for c in copies)
        self.modelled += sum(bool(m) for m in model_limits)
        # Copied rows: probability 1 on each copied token (verification's deterministic rows), never spelled out.
        return Draft(tokens, probs, torch.tensor([bool(c) for c in copies]) if probs is not None else None, columns)

    def _learn(self, rows: Sequence[Row | None]) -> None:
        """Adapt each row's draft length to how much of its last draft the target kept."""
        for b, row in enumerate(rows):
            last = self.last_draft[b]
            self.last_draft[b] = None
            if row is None or last is None:
                continue
            copied, length, proposal = last
            committed = row.tokens[length : length + len(proposal)]
            accepted = next((i for i, (a, c) in enumerate(zip(proposal, committed)) if a != c), len(committed))
            if copied:
                if self.row_copy_lengths:
                    self.copy_cap[b] = None if accepted == len(proposal) else accepted + 1
            elif self.model.stop:
                continue  # the cumulative stop sets model drafts' lengths; the per-row length is unused
            elif accepted == len(proposal):
                self.model_length[b] = min(self.model_length[b] + 1, self.max_model_tokens)
            else:
                self.model_length[b] = max(self.min_model_tokens, accepted)
