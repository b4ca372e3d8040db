"""Speculative decoding configurations side by side with regular decoding: acceptance, speed.

    python benchmarks/draft.py --quick                  # batch 1 and 8, greedy, 64 new tokens
    python benchmarks/draft.py --json draft.json        # batch 1, 8, 16; greedy + sampling

HumanEval prompts (never seen in distillation), chat template, the default model in bfloat16, one
thread. Configurations (`--configs`): regular decoding, `ngram` (prompt lookup), `draft` (the
distilled draft model, `--draft auto` or a path) and `hybrid` (per row: prompt lookup where the
row's last n-gram occurred before, else the draft model). Per batch size and mode the
configurations run interleaved, best of `--repeats` (contention only ever slows a run), in tokens
per CPU-second of this process (steady on a shared machine) and per wall-second; each speculative
configuration is also compared with regular decoding's run of the same round, with the median over
the rounds (the host's speed moves between rounds). For speculative
runs: acceptance rate (accepted / drafted), mean accepted draft tokens per row per step, tokens
per row per step, where the time goes — ms per step in the draft model (proposing) and in the
target (verifying), next to the ms of one regular decoding step — and, for hybrid, the share of
row drafts that came from prompt lookup. Greedy speculative outputs are compared with regular
greedy outputs token for token.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from quench.datasets import load_humaneval
from quench.engine.backend import QuenchBackend
from quench.engine.config import EngineConfig
from quench.engine.kernels.native_config import KernelConfig
from quench.engine.scheduler import PrefixStore
from quench.engine.types import GenerationRequest, SamplingParams
from quench.models import encode_prompt, load_model
from quench.models.draft import load_draft

PREFILL = 64  # forward calls feeding more tokens than this per row are prompt prefills, timed apart


class TimedRunner:
    """A runner proxy that adds up the CPU time of decode-sized forward calls."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.vocab_size = inner.vocab_size
        self.seconds = 0.0
        self.calls = 0
        self.prefilling = False  # set by `untimed_prefills` while a PrefixStore prefills prompts

    def new_cache(self, batch: int, max_len: int):
        return self.inner.new_cache(batch, max_len)

    def prefill_kernel(self, tokens: int) -> str | None:
        return self.inner.prefill_kernel(tokens)

    def forward(self, cache, tokens, start, logits_at=None, counts=None):
        return self._timed(tokens, self.inner.forward, cache, tokens, start, logits_at=logits_at, counts=counts)

    def packed_logits(self, cache, tokens, start, counts=None):
        return self._timed(tokens, self.inner.packed_logits, cache, tokens, start, counts=counts)

    def greedy_tokens(self, cache, tokens, start, counts=None):
        return self._timed(tokens, self.inner.greedy_tokens, cache, tokens, start, counts=counts)

    def _timed(self, tokens, call, *args, **kwargs):
        begin = time.process_time()
        out = call(*args, **kwargs)
        if tokens.shape[1] <= PREFILL and not self.prefilling:
            self.seconds += time.process_time() - begin
            self.calls += 1
        return out


def untimed_prefills() -> None:
    """Prompt prefills are not decode steps: a prompt whose beginning is copied from another's feeds only its
    rest, which may be shorter than PREFILL tokens, so mark every forward a PrefixStore makes."""
    ensure = PrefixStore.ensure

    def marked(store: PrefixStore, items) -> None:
        runner = store.runner
        if isinstance(runner, TimedRunner):
            runner.prefilling = True
        try:
            ensure(store, items)
        finally:
            if isinstance(runner, TimedRunner):
                runner.prefilling = False

    PrefixStore.ensure = marked


@dataclass
class Row:
    batch_size: int
    mode: str
    backend: str
    sequences: int
    tokens: int
    cpu_seconds: float
    tokens_per_cpu_s: float
    wall_tokens_per_s: float
    steps: int
    acceptance_rate: float | None = None
    accepted_per_step: float | None = None  # mean accepted draft tokens per row per step
    tokens_per_row_step: float | None = None
    draft_ms_per_step: float | None = None
    verify_ms_per_step: float | None = None  # target forward per step (regular: one decoding step)
    greedy_match: str | None = None
    copied_share: float | None = None  # hybrid: row drafts made by prompt lookup / all row drafts
    round_ratios: list[float] | None = None  # tokens/CPU-s against regular's run of the same round, one per round


DRAFTERS = {"regular": "none", "ngram": "ngram", "draft": "draft", "hybrid": "hybrid",
            "regular-avx512": "none", "hybrid-avx512": "hybrid",  # *-avx512: AMX tiles switched off (what they give)
            "hybrid-bf16-draft": "hybrid"}  # the draft model's products in bfloat16 instead of its int8 copies


def make_backends(loaded, draft, batch_size: int, args) -> dict[str, QuenchBackend]:
    backends = {}
    for name in ["regular"] + [c for c in args.configs if c != "regular"]:
        config = EngineConfig(batch_size=batch_size, drafter=DRAFTERS[name], draft_length=args.draft_length,
                              draft_tokens=args.draft_tokens, max_draft_tokens=args.max_draft_tokens,
                              draft_int8=not name.endswith("bf16-draft"),
                              kernels=KernelConfig(amx=not name.endswith("-avx512")))
        backend = QuenchBackend(loaded.model, loaded.tokenizer, config,
                                draft_model=draft if config.runs_draft_model else None)
        backend.runner = TimedRunner(backend.runner)
        if backend.draft_runner is not None:
            backend.draft_runner = TimedRunner(backend.draft_runner)
        backend.drafters = []  # what each generate call drafted with (hybrid: copied vs modelled rows)
        build = backend.new_drafter
        backend.new_drafter = lambda max_len, build=build, seen=backend.drafters: seen.append(build(max_len)) or seen[-1]
        backends[name] = backend
    return backends


def measure(name: str, backend: QuenchBackend, requests, sampling, batch_size: int, mode: str):
    timers = [backend.runner] + ([backend.draft_runner] if backend.draft_runner is not None else [])
    for timer in timers:
        timer.seconds, timer.calls = 0.0, 0
    start, cpu_start = time.perf_counter(), time.process_time()
    results = list(backend.generate(requests, sampling))
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    tokens = sum(len(r.token_ids) + (r.finish_reason == "eos") for r in results)
    stats = backend.last_stats
    row = Row(batch_size, mode, name, len(results), tokens, round(cpu, 2), round(tokens / cpu, 1),
              round(tokens / wall, 1), stats.steps, verify_ms_per_step=round(1000 * backend.runner.seconds / max(stats.steps, 1), 2))
    if stats.drafted:
        row.acceptance_rate = round(stats.acceptance_rate, 3)
        row.accepted_per_step = round(stats.accepted / stats.row_steps, 2)
        row.tokens_per_row_step = round(stats.tokens_per_row_step, 2)
        if backend.draft_runner is not None:
            row.draft_ms_per_step = round(1000 * backend.draft_runner.seconds / max(stats.steps, 1), 2)
    drafter = backend.drafters[-1] if backend.drafters else None
    if drafter is not None and hasattr(drafter, "copied"):
        row.copied_share = round(drafter.copied / max(drafter.copied + drafter.modelled, 1), 2)
    return row, {(r.key, r.sample_index): r.token_ids for r in results}


def requests_for(loaded, count: int, n: int) -> list[GenerationRequest]:
    return [GenerationRequest(p.task_id, encode_prompt(loaded, p.prompt), n=n) for p in load_humaneval()[:count]]


def run(args) -> list[Row]:
    torch.set_num_threads(args.threads)
    untimed_prefills()
    loaded = load_model(dtype="bfloat16")
    draft = load_draft(args.draft, loaded)
    if args.full_head:  # the same layers scoring the whole vocabulary: what the reduced head saves
        head = torch.nn.Linear(draft.config.hidden_size, draft.config.vocab_size, bias=False)
        head.weight = loaded.model.get_output_embeddings().weight
        draft.lm_head = head
    rows = []
    for batch_size in args.batch_sizes:
        backends = make_backends(loaded, draft, batch_size, args)
        for mode in args.modes:
            n = 1 if mode == "greedy" else args.samples
            requests = requests_for(loaded, -(-max(batch_size * args.waves, args.min_sequences) // n), n)
            sampling = SamplingParams(temperature=0.0 if mode == "greedy" else args.temperature,
                                      max_new_tokens=args.max_new_tokens, seed=1)
            warm = [GenerationRequest(r.key, r.prompt_ids) for r in requests[:batch_size]]
            for backend in backends.values():  # one-time set-up (oneDNN kernels, native attention)
                list(backend.generate(warm, SamplingParams(max_new_tokens=8)))
            best, outputs, rates = {}, {}, {name: [] for name in backends}
            for _ in range(args.repeats):
                for name, backend in backends.items():
                    row, outputs[name] = measure(name, backend, requests, sampling, batch_size, mode)
                    rates[name].append(row.tokens_per_cpu_s)
                    if name not in best or row.cpu_seconds < best[name].cpu_seconds:
                        best[name] = row
            for name, row in best.items():  # the host's speed moves between rounds: also each round on its own
                if name != "regular":
                    row.round_ratios = [round(r / g, 2) for r, g in zip(rates[name], rates["regular"])]
            if mode == "greedy":
                for name in best:
                    if name != "regular":
                        same = sum(outputs["regular"][k] == v for k, v in outputs[name].items())
                        best[name].greedy_match = f"{same}/{len(outputs[name])}"
            for row in best.values():
                rows.append(row)
                print(format_row(row, best["regular"]), flush=True)
    return rows


def format_row(row: Row, regular: Row) -> str:
    text = (f"B={row.batch_size:<2} {row.mode:8} {row.backend:7} {row.tokens_per_cpu_s:6.1f} tok/cpu-s "
            f"({row.tokens_per_cpu_s / regular.tokens_per_cpu_s:.2f}x) {row.wall_tokens_per_s:6.1f} tok/s wall "
            f"target {row.verify_ms_per_step} ms/step")
    if row.acceptance_rate is not None:
        text += (f" draft {row.draft_ms_per_step} ms/step accept {row.acceptance_rate:.2f}"
                 f" accepted/step {row.accepted_per_step} tokens/step {row.tokens_per_row_step} match {row.greedy_match}"
                 f" copied {row.copied_share}")
    return text


def markdown(rows: list[Row]) -> str:
    lines = ["| batch | mode | decoding | tokens/CPU-s | vs regular | accept | accepted/step | tokens/step |"
             " draft ms/step | target ms/step | greedy = regular | copied |", "|" + "---|" * 12]
    regular = {(r.batch_size, r.mode): r for r in rows if r.backend == "regular"}
    for r in rows:
        ratio = r.tokens_per_cpu_s / regular[r.batch_size, r.mode].tokens_per_cpu_s
        lines.append(f"| {r.batch_size} | {r.mode} | {r.backend} | {r.tokens_per_cpu_s} | {ratio:.2f}x | "
                     f"{r.acceptance_rate or ''} | {r.accepted_per_step or ''} | {r.tokens_per_row_step or ''} | "
                     f"{r.draft_ms_per_step or ''} | {r.verify_ms_per_step} | {r.greedy_match or ''} | "
                     f"{'' if r.copied_share is None else r.copied_share} |")
    paired = [r for r in rows if r.round_ratios and len(r.round_ratios) > 1]
    if paired:
        lines.append("\nvs regular, round by round:")
        lines.extend(f"B={r.batch_size} {r.mode} {r.backend}: " + ", ".join(f"{x:.2f}x" for x in r.round_ratios)
                     + f" (median {statistics.median(r.round_ratios):.2f}x)" for r in paired)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--draft", default="auto", help="'auto' (the shipped draft) or a draft file")
    parser.add_argument("--quick", action="store_true", help="batch 1 and 8, greedy, 64 new tokens, one repeat")
    parser.add_argument("--configs", nargs="+", default=["regular", "ngram", "draft", "hybrid"], choices=list(DRAFTERS))
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 16])
    parser.add_argument("--modes", nargs="+", default=["greedy", "sampling"], choices=["greedy", "sampling"])
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--waves", type=int, default=2, help="sequences per run = waves x batch size ...")
    parser.add_argument("--min-sequences", type=int, default=8, help="... but at least this many")
    parser.add_argument("--samples", type=int, default=4, help="samples per prompt when sampling")
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--draft-length", default="bass", choices=["bass", "fixed"])
    parser.add_argument("--draft-tokens", type=int, default=4, help="fixed length, or where BASS starts")
    parser.add_argument("--max-draft-tokens", type=int, default=12)
    parser.add_argument("--full-head", action="store_true", help="score the whole vocabulary with the draft's layers")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.quick:
        args.batch_sizes, args.modes, args.max_new_tokens, args.repeats, args.waves = [1, 8], ["greedy"], 64, 1, 1
    rows = run(args)
    print()
    print(markdown(rows))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=2))


if __name__ == "__main__":
    main()
