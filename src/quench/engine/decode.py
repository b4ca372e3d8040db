"""The decode loop: draft, verify, commit, refill freed slots from the queue (continuous batching).

Without a drafter every step is a regular decoding step (draft width 0). One loop serves both, so
regular and speculative decoding share the stopping, refilling and bookkeeping code. Batch runs
(`QuenchBackend.generate`) and the server (`quench.engine.serving.live`) build it from the same `LoopParts`;
code that watches it (the server's streaming) attaches as a `LoopListener` (`quench.engine.observers`).

Each row carries what it draws with and when it stops (`Row.draw`, `Row.limits`; `row_sampling` gives a
sample its request's settings, else every row has the loop's `sampling`). A step whose rows all draw alike
(a batch run: always) is the one-setting step: greedy steps take the target's argmax tokens, sampled ones
its logits, and drafts are proposed and verified with that setting. A step whose rows draw with several
settings (the server's mixed batches) is a regular step without drafts (a drafter proposes, and
speculative sampling verifies, with one distribution for the batch): one forward, then each row's token
drawn from its own logits with its own setting (`draw_rows`), which is what the row draws alone.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Sequence

import torch

from quench.engine.kernels import native
from quench.engine.draft_length import DraftLengthPolicy
from quench.engine.drafters import Draft, Drafter
from quench.engine.kv_cache import KVCache, slot_length
from quench.engine.observers import PAD, LoopListener, RowStopper
from quench.engine.row_settings import DrawSettings
from quench.engine.rows import Row, StopRules
from quench.engine.sampling import draw_rows, forbid_tokens, logits_to_probs, row_generator
from quench.engine.runners.protocol import Runner
from quench.engine.scheduler import PrefixStore, WorkItem, WorkQueue
from quench.engine.types import GenerationRequest, GenerationResult, SamplingParams
from quench.engine.verify import PLACEHOLDER, Verdict, verify_greedy, verify_sampling

log = logging.getLogger(__name__)


@dataclass
class LoopStats:
    """Totals over one `generate` call (for benchmarks and logs)."""

    steps: int = 0  # target forward passes
    row_steps: int = 0  # sum over steps of active rows
    tokens: int = 0  # tokens emitted (including ones cut by stopping)
    drafted: int = 0
    accepted: int = 0
    prefill_tokens: int = 0
    prefill_cpu_s: float = 0.0  # process CPU time spent in prompt prefills (benchmarks split it out)
    prefill_shared_tokens: int = 0  # of prefill_tokens, copied from another prompt's keys/values (not computed)
    mixed_steps: int = 0  # steps whose rows drew with more than one setting (regular steps, module docstring)

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def tokens_per_row_step(self) -> float:
        """Mean tokens a row gains per target forward (1 for regular decoding)."""
        return self.tokens / self.row_steps if self.row_steps else 0.0


@dataclass(frozen=True)
class LoopParts:
    """What a decode loop runs on (`QuenchBackend.loop_parts` builds it for batch runs and the server alike)."""

    runner: Runner
    cache: KVCache
    drafter: Drafter | None = None
    policy: DraftLengthPolicy | None = None  # how many tokens to draft (None: no step drafts)
    guard: RowStopper | None = None  # a stop observer over the slots (e.g. GenGuard): reads each fed token's hidden state
    share_prefixes: bool = True
    max_draft_rows: int | None = None  # steps with more live rows than this do not draft (None: all draft)
    draft_sampled: bool = True  # steps of sampled rows draft too (False: greedy steps only; EngineConfig.draft_sampled)
    # None: the cache keeps its length. Else positions a row needs beyond its prompt and new tokens
    # (drafts): the cache is fitted to the live rows at each admission (see _fit_cache).
    fit_cache: int | None = None


@dataclass(frozen=True)
class StepPlan:
    """What one step feeds: the slots holding a row, each one's pending token and the drafts after it (if any)."""

    active: list[int]  # slots with a row, ascending (a list: it indexes tensors)
    draft: Draft | None = None

    @property
    def width(self) -> int:
        """Draft positions fed after each pending token (K; 0: a regular step)."""
        return self.draft.width if self.draft is not None else 0

    def draft_tokens(self) -> torch.Tensor:
        """The active rows' drafts (A, K), PLACEHOLDER past a row's own."""
        assert self.draft is not None
        return self.draft.tokens[self.active, : self.width]


class DecodeLoop:
    """A fixed number of slots kept full from the work queue: `admit`, then `step` and `admit` until no row is left.

    sampling: the settings of every sample, unless `row_sampling` gives a sample's own (its request's)."""

    def __init__(
        self,
        parts: LoopParts,
        queue: WorkQueue,
        stop: StopRules,
        sampling: SamplingParams,
        deadline: float | None = None,
        listeners: Iterable[LoopListener] = (),
        row_sampling: Callable[[WorkItem], SamplingParams] | None = None,
    ) -> None:
        self.runner = parts.runner
        self.cache = parts.cache
        self.drafter = parts.drafter
        self.policy = parts.policy
        self.guard = parts.guard
        self.max_draft_rows = parts.max_draft_rows
        self.draft_sampled = parts.draft_sampled
        self.fit_cache = parts.fit_cache
        self.queue = queue
        self.stop = stop
        self.sampling = sampling
        self.row_sampling = row_sampling or (lambda item: sampling)
        self.deadline = deadline
        self.listeners = list(listeners)
        self.prefixes = PrefixStore(parts.runner, share=parts.share_prefixes)
        self.slots: list[Row | None] = [None] * parts.cache.batch
        self.stats = LoopStats()
        self.started = time.perf_counter()

    def run(self) -> Iterator[GenerationResult]:
        while True:
            yield from self.admit()
            for listener in self.listeners:
                listener.on_commit(self.slots)
            if all(row is None for row in self.slots):
                return
            if self.deadline is not None and time.perf_counter() >= self.deadline:
                self.queue.closed = True  # unfinished rows are dropped: they did not make the budget
                return
            yield from self.step()

    def _append(self, slot: int, row: Row, token: int) -> str | None:
        """Append `token` to the row in `slot` (listeners see it first); the finish reason if the row is done."""
        for listener in self.listeners:
            listener.on_token(slot, row, token)
        return self.stop.append(row, token)

    def _finish(self, slot: int, reason: str) -> GenerationResult:
        row = self.slots[slot]
        assert row is not None
        self.slots[slot] = None
        result = self.stop.result(row, reason, self.started)
        for listener in self.listeners:
            listener.on_finish(slot, row, result)
        self.completed(row)
        return result

    def completed(self, row: Row) -> None:
        """`row` has finished and the listeners have seen it: what the loop does about its request once they
        have (nothing here; the server's loop ends a request with its last sample)."""

    def admit(self) -> Iterator[GenerationResult]:
        """Fill every free slot from the queue; a sample's first token comes from its prompt's prefill."""
        while True:
            items: list[tuple[int, WorkItem]] = []
            for slot in (s for s, row in enumerate(self.slots) if row is None):
                item = self.queue.pop()
                if item is None:
                    break
                items.append((slot, item))
            if not items:
                return
            yield from self.start_rows(items)

    def start_rows(self, items: Sequence[tuple[int, WorkItem]]) -> Iterator[GenerationResult]:
        """Place each (slot, sample) with its request's settings and draw its first token from its prompt's logits."""
        fresh = {item.request_index: item.request for _, item in items if item.request_index not in self.prefixes}
        cpu = time.process_time()
        self.prefixes.ensure([item for _, item in items])
        self.stats.prefill_cpu_s += time.process_time() - cpu
        self.stats.prefill_tokens += sum(len(request.prompt_ids) for request in fresh.values())
        self.stats.prefill_shared_tokens = self.prefixes.shared_tokens
        settings = [self.row_sampling(item) for _, item in items]
        if self.fit_cache is not None:
            self._fit_cache([(item.request, sampling.max_new_tokens) for (_, item), sampling in zip(items, settings)])
        if len({slot for slot, _ in items}) < len(items) or any(self.slots[slot] is not None for slot, _ in items):
            raise RuntimeError(f"admission placed samples on taken slots: {[slot for slot, _ in items]}")
        logits = torch.stack([self._place(slot, item, sampling) for (slot, item), sampling in zip(items, settings)])  # (R, V)
        if self.drafter is not None:
            self.drafter.admit(items)
        for request_index in {item.request_index for _, item in items}:
            if not self.queue.pending(request_index):
                self.prefixes.release(request_index)
                if self.drafter is not None:
                    self.drafter.release(request_index)
        rows = [self.slots[slot] for slot, _ in items]
        forbid_tokens(logits, [(r, r + 1) for r, row in enumerate(rows) if row.limits.min_tokens], self.stop.eos_ids)
        first = draw_rows(logits, [row.draw for row in rows], [row.generator for row in rows], in_place=True)  # (R,)
        for (slot, _), row, token in zip(items, rows, first.tolist()):
            reason = self._append(slot, row, token)
            if reason is not None:
                yield self._finish(slot, reason)

    def _place(self, slot: int, item: WorkItem, sampling: SamplingParams) -> torch.Tensor:
        """Start `item`'s row in `slot` from its prompt's keys/values, drawing with `sampling` (its generator
        seeded from the seed, the request key and the sample index); the prompt's last logits (V,)."""
        prefix, prefix_logits = self.prefixes.get(item.request_index)
        self.cache.install(slot, prefix)
        generator = row_generator(sampling.seed, item.request.key, item.sample_index)
        prompt = list(item.request.prompt_ids)
        self.slots[slot] = Row(item.request_index, item.request, item.sample_index, generator, prompt, len(prompt),
                               sampling.draw, sampling.limits)
        if self.guard is not None:
            self.guard.reset(slot)
        return prefix_logits

    def _fit_cache(self, arriving: Sequence[tuple[GenerationRequest, int]]) -> None:
        """Resize the cache to what the live rows and `arriving` (request, its max new tokens) need (rounded up
        to 64 positions): larger when one needs more, smaller once they all need at most half of it. A long
        prompt's positions are held while it runs, not for the whole call; the values kept are the same, so is
        every answer."""
        wanted = [(row.request, row.limits.max_new_tokens) for row in self.slots if row is not None] + list(arriving)
        longest = max(len(request.prompt_ids) for request, _ in wanted)
        most = min(self.stop.max_new_tokens, max(new for _, new in wanted))
        needed = slot_length(longest, most, self.fit_cache)
        if needed > self.cache.max_len or 2 * needed <= self.cache.max_len:
            log.debug("KV cache: %d -> %d positions per row", self.cache.max_len, needed)
            self.cache.resize(needed)

    def _draft(self, active: list[int], draw: DrawSettings) -> Draft | None:
        """Drafts for the active rows, all drawing with `draw` (None: a regular step)."""
        if self.drafter is None or self.policy is None:
            return None
        if self.max_draft_rows is not None and len(active) > self.max_draft_rows:
            return None  # a regular step; a model drafter catches up on these tokens when drafting resumes
        if not draw.greedy and not self.draft_sampled:
            return None  # likewise: sampled rows draw as regular decoding does
        k = self.policy.next_length(draw.greedy)
        limits = [0] * len(self.slots)
        for b in active:
            row = self.slots[b]
            room = self.stop.most_new_tokens(row) - len(row.generated) - 1  # tokens after the bonus one
            limits[b] = max(0, min(max(k, self.drafter.reach(b, row)), room))
        if max(limits) == 0:
            return None
        return self.drafter.propose(self.slots, limits, draw)

    def stepping(self) -> list[Row | None]:
        """The slots whose rows this step runs (None: free, or a row that waits this step out with its
        cache kept); every row here."""
        return self.slots

    def _step_draw(self, active: list[int]) -> DrawSettings | None:
        """The setting every active row draws with; None when they draw with several (a mixed step)."""
        draws = {self.slots[b].draw for b in active}
        if len(draws) > 1:
            return None
        return draws.pop() if draws else self.sampling.draw

    def step(self) -> Iterator[GenerationResult]:
        """One target forward over the stepping rows: their pending token and drafts in, the verdict committed.
        Speculation pauses in a step where some row waits (the drafters follow every row) and in a step whose
        rows draw with several settings (module docstring)."""
        began = time.perf_counter()
        rows = self.stepping()
        active = [b for b, row in enumerate(rows) if row is not None]
        everyone = len(active) == sum(row is not None for row in self.slots)
        draw = self._step_draw(active)
        plan = StepPlan(active, self._draft(active, draw) if everyone and draw is not None else None)
        last = torch.tensor([row.last if row is not None else 0 for row in rows])  # (B,)
        inputs = last[:, None]  # (B, 1 + width): pending token, then the drafts
        counts = torch.tensor([int(row is not None) for row in rows])  # (B,) real tokens per row
        if plan.width:
            drafts = plan.draft.tokens[:, : plan.width]  # (B, K)
            inputs = torch.cat([inputs, drafts.clamp(min=0)], dim=1)
            counts = counts + (drafts != PLACEHOLDER).sum(dim=1)
        start = torch.tensor([row.length if row is not None else 0 for row in rows])  # (B,)
        keeps: list[int | None] = [None] * len(self.slots)
        no_eos = self._no_eos(active)  # (B,) leading positions of each row whose next token may not be EOS
        greedy = draw is not None and draw.greedy  # every row takes the argmax
        if self.guard is not None or (greedy and any(no_eos)):
            verdict, keeps = self._verify_block(inputs, start, counts, plan, no_eos)
        elif greedy:  # the target's tokens are all a greedy step needs: no float32 logits
            targets = self.runner.greedy_tokens(self.cache, inputs, start, counts=counts)  # (B, 1 + width)
            verdict = self._verify_greedy(targets[active], plan)
        else:  # sampling, or rows with several settings: the real positions' logits only, row after row
            logits = self.runner.packed_logits(self.cache, inputs, start, counts=counts)  # (N, V)
            first = (torch.cumsum(counts, dim=0) - counts)[active]  # (A,) each active row's first position
            if any(no_eos):  # packed rows: each span clipped to its row's real positions
                spans = [(f, f + min(no_eos[b], int(counts[b]))) for f, b in zip(first.tolist(), active)]
                forbid_tokens(logits, spans, self.stop.eos_ids)
            verdict = self._verify_sampled(logits, first, plan)
        self.stats.steps += 1
        self.stats.mixed_steps += draw is None
        seconds = time.perf_counter() - began
        yield from self.commit(verdict, plan, keeps)
        if self.policy is not None:
            drafting = int((counts[active] > 1).sum()) if plan.width else 0
            self.policy.observe_step(len(active), int(counts.sum()), drafting, seconds)

    def _verify_block(
        self, inputs: torch.Tensor, start: torch.Tensor, counts: torch.Tensor, plan: StepPlan, no_eos: list[int],
    ) -> tuple[Verdict, list[int | None]]:
        """A step from the padded (B, 1 + width) block's logits: the observer reads each fed position's
        hidden state, and greedy rows short of min_tokens need EOS masked before the argmax."""
        keeps: list[int | None] = [None] * len(self.slots)
        if self.guard is not None:
            logits, hidden = self.runner.forward(self.cache, inputs, start, counts=counts, hidden=True)  # hidden (B, 1 + width, D)
        else:
            logits = self.runner.forward(self.cache, inputs, start, counts=counts)  # (B, 1 + width, V)
        for b in (b for b in plan.active if no_eos[b]):
            forbid_tokens(logits[b], [(0, no_eos[b])], self.stop.eos_ids)
        full = len(plan.active) == len(self.slots)  # then logits[active] would only copy (B, 1 + width, V) floats
        verdict = self._verify(logits if full else logits[plan.active], plan)
        if self.guard is not None:
            keeps = self.guard.step(hidden, fed_tokens(inputs, verdict, plan.active))
        return verdict, keeps

    def _no_eos(self, active: list[int]) -> list[int]:
        """Per slot, how many of this step's positions (from the pending token on) predict a token that may
        not be EOS: the row has fewer than its `min_tokens` tokens before it."""
        no_eos = [0] * len(self.slots)
        for b in active:
            row = self.slots[b]
            no_eos[b] = max(0, row.limits.min_tokens - len(row.generated))
        return no_eos

    def _verify(self, logits: torch.Tensor, plan: StepPlan) -> Verdict:
        """logits (A, 1 + K, V) of the active rows -> their verdict."""
        draw = self._step_draw(plan.active)
        if draw is not None and draw.greedy:
            return self._verify_greedy(native.argmax(logits), plan)
        first = torch.arange(len(plan.active)) * logits.shape[1]  # (A,)
        return self._verify_sampled(logits.flatten(0, 1), first, plan)

    def _verify_sampled(self, logits: torch.Tensor, first: torch.Tensor, plan: StepPlan) -> Verdict:
        """logits (N, V): the active rows' positions, active row j's pending token at first[j] and its
        drafts right after -> their verdict (each row drawing with its own setting when there are no drafts)."""
        active, draft = plan.active, plan.draft
        rows = [self.slots[b] for b in active]
        generators = [row.generator for row in rows]
        if plan.width == 0:
            tokens = draw_rows(logits, [row.draw for row in rows], generators, in_place=True, rows=first)  # (A,)
            return Verdict(torch.zeros(len(active), dtype=torch.long), tokens[:, None])
        probs = logits_to_probs(logits, rows[0].draw, in_place=True)  # (N, V); drafts: one setting for all rows
        draft_probs = draft.probs[active, : plan.width] if draft.probs is not None else None
        deterministic = draft.deterministic[active] if draft.deterministic is not None else None
        return verify_sampling(plan.draft_tokens(), draft_probs, probs, generators, first, deterministic, draft.columns)

    @staticmethod
    def _verify_greedy(targets: torch.Tensor, plan: StepPlan) -> Verdict:
        """targets (A, 1 + K): the target's argmax tokens of the active rows -> their verdict."""
        if plan.width == 0:
            return Verdict(torch.zeros(len(plan.active), dtype=torch.long), targets[:, :1])
        return verify_greedy(plan.draft_tokens(), targets)

    def commit(self, verdict: Verdict, plan: StepPlan, keeps: Sequence[int | None]) -> Iterator[GenerationResult]:
        """Append each row's accepted tokens (and bonus token); finish rows that a rule or the guard stops.

        keeps[b]: the guard stopped slot b keeping that many generated tokens. Its decision read only
        fed tokens (the pending one and accepted drafts), so the bonus token is never kept then; a
        text rule or EOS that fires inside the kept tokens still wins (it stops earlier).
        """
        active = plan.active
        drafted = (plan.draft_tokens() != PLACEHOLDER).sum(dim=1) if plan.width else torch.zeros(len(active))
        if plan.width and self.policy is not None:
            self.policy.update(verdict.num_accepted, drafted)
        for j, b in enumerate(active):
            row = self.slots[b]
            new_tokens = verdict.row(j)
            row.steps += 1
            row.drafted += int(drafted[j])
            row.accepted += len(new_tokens) - 1
            self.stats.row_steps += 1
            self.stats.drafted += int(drafted[j])
            self.stats.accepted += len(new_tokens) - 1
            self.stats.tokens += len(new_tokens)
            keep = keeps[b]
            if keep is not None:
                new_tokens = new_tokens[: max(0, keep - len(row.generated))]
                del row.tokens[row.prompt_len + keep :]
            reason = None
            for token in new_tokens:
                reason = self._append(b, row, token)
                if reason is not None:
                    yield self._finish(b, reason)
                    break
            if reason is None and keep is not None:
                yield self._finish(b, "guard")


def fed_tokens(inputs: torch.Tensor, verdict: Verdict, active: Sequence[int]) -> torch.Tensor:
    """The step's inputs (B, 1 + K) that are now part of their rows: the pending token and the
    accepted drafts; PAD on rejected drafts and free slots (the guard skips those positions)."""
    fed = torch.full_like(inputs, PAD)  # (B, 1 + K)
    for j, b in enumerate(active):
        n = 1 + int(verdict.num_accepted[j])
        fed[b, :n] = inputs[b, :n]
    return fed
