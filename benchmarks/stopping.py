"""Stopping in time, side by side: tokens, time and pass@1 with and without early stopping.

    python benchmarks/stopping.py --humaneval 40 --mbpp 40 --json out.json
    python benchmarks/stopping.py --quick                  # 8 + 8 problems

Configurations (greedy, the default model, chat prompts, max_new_tokens=300, EOS always on):
  a  no early stop          b  stop sequences (the chat default: the closing fence line)
  c  function-complete rule d  GenGuard (the shipped guard, trained on MBPP train+validation only)
  e  GenGuard + the rule

The generation loop is this script's own (until quench's engine calls the guard), built from the
engine's parts: its model runner (the Llama fast path), ragged KV cache and prompt prefill, with
continuous batching (a finished row's slot takes the next prompt). The guard reads the final-norm
hidden state of each token from the forward pass that produced the next token (tapped at the LM
head's input), as it will in the engine: no extra forward. The five configurations run in turn on
chunks of the problems, so the load of a shared machine falls on all of them alike; CPU seconds
of this process (one thread) are the steadier measure of work, wall seconds the one a user sees.
Programs are cleaned by `sanitize` and run in the `SandboxPool`.
For the generalization check, configuration (a) also records the guard's votes on every token,
and those are scored against the labelling rule (HumanEval was never used in training).
"""

from __future__ import annotations

import argparse
import inspect
import json
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from quench.benchmarks import Problem, load_humaneval, load_mbpp
from quench.execution import SandboxPool
from quench.execution.sanitize import program_for, sanitize
from quench.generation.engine import EngineConfig, make_runner
from quench.generation.kv_cache import round_up
from quench.generation.scheduler import prefill
from quench.models import encode_prompt, load_model
from quench.stopping import GenGuard, RowRules, TextStops, default_stop_sequences, load_guard, rules_for
from quench.stopping.guard import token_shapes
from quench.stopping.labels import excess_start, token_labels, token_starts
from quench.stopping.policy import RowPolicy

CONFIGS = ("a", "b", "c", "d", "e")
NAMES = {"a": "no early stop", "b": "stop sequences", "c": "function rule", "d": "GenGuard", "e": "GenGuard + rule"}


@dataclass
class Row:
    """One answer being generated."""

    problem: Problem
    prompt_ids: list[int]
    stops: TextStops | None
    policy: RowPolicy | None
    generated: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)  # the guard's stop probability per token
    keep: int | None = None  # tokens kept when a rule or the guard stopped the row
    cut: int | None = None  # text offset of a text rule's stop
    reason: str = ""


@dataclass
class Answer:
    task_id: str
    benchmark: str
    text: str
    kept_tokens: int
    generated_tokens: int  # tokens sampled (the cost), including those after a stop was decided
    reason: str
    probs: list[float]
    token_ids: list[int]


class HiddenTap:
    """Wraps the runner's LM head to keep its input: the final-norm hidden states of the latest forward,
    (B, S, D), or (N, D) over the real tokens on the runner's packed path.

    This stands in for the engine hook (the forward returning hidden states): no extra computation.
    """

    def __init__(self, runner) -> None:
        self.inner = runner.lm_head
        runner.lm_head = self
        self.hidden: torch.Tensor | None = None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        self.hidden = x
        return self.inner(x)


def accept(row: Row, token: int, tokenizer, eos: set[int], max_new_tokens: int) -> bool:
    """Append a sampled token; True when the row is finished (EOS, a text rule, the limit)."""
    if token in eos:
        row.reason = "eos"
        return True
    row.generated.append(token)
    if row.stops is not None and (stop := row.stops.update(tokenizer.decode(row.generated))) is not None:
        row.cut, row.reason = stop.offset, stop.reason
    elif len(row.generated) >= max_new_tokens:
        row.reason = "length"
    return bool(row.reason)


@torch.inference_mode()
def generate(runner, tap: HiddenTap, tokenizer, rows: list[Row], guard: GenGuard | None, max_new_tokens: int,
             eos: set[int], slots: int) -> None:
    """Greedy decoding with continuous batching over `slots`; the guard votes on each token as it is fed."""
    shapes = token_shapes(tokenizer) if guard is not None else None
    takes_counts = "counts" in inspect.signature(runner.forward).parameters
    max_len = round_up(max(len(r.prompt_ids) for r in rows) + max_new_tokens + 2, 64)
    cache = runner.new_cache(slots, max_len)
    queue = deque(range(len(rows)))
    slot_row: list[int | None] = [None] * slots
    start = torch.zeros(slots, dtype=torch.long)  # (B,) cache length of each slot
    last = torch.zeros(slots, dtype=torch.long)  # (B,) the token each slot feeds next
    while queue or any(r is not None for r in slot_row):
        admit = [(s, queue.popleft()) for s in range(slots) if slot_row[s] is None and queue]
        if admit:
            for (s, r), (prefix, logits) in zip(admit, prefill(runner, [rows[r].prompt_ids for _, r in admit])):
                cache.install(s, prefix)
                start[s] = prefix.length
                if not accept(rows[r], int(logits.argmax()), tokenizer, eos, max_new_tokens):
                    slot_row[s], last[s] = r, rows[r].generated[-1]
            continue  # admit again if a row finished at once
        active = [s for s in range(slots) if slot_row[s] is not None]
        extra = {}
        if takes_counts:  # free slots cost nothing on the runner's packed path
            extra["counts"] = torch.tensor([int(r is not None) for r in slot_row])
        logits = runner.forward(cache, last[:, None], start, **extra)[:, 0]  # (B, V)
        start[active] += 1
        if guard is not None:
            hidden = tap.hidden if tap.hidden.ndim == 2 else tap.hidden[:, 0]  # packed (N, D) or (B, 1, D)
            if hidden.shape[0] == slots:
                hidden = hidden[active]  # else the packed path already kept only the active rows
            probs = guard.stop_probs(hidden).tolist()  # (A,) for the tokens just fed
        next_tokens = logits.argmax(-1).tolist()  # (B,)
        for j, s in enumerate(active):
            row = rows[slot_row[s]]
            if guard is not None:
                row.probs.append(probs[j])
                if row.policy is not None:
                    kept = row.policy.feed(probs[j] >= guard.policy.threshold, shapes[int(last[s])])
                    if kept is not None:
                        row.keep, row.reason, slot_row[s] = kept, "guard", None
                        continue
            if accept(row, next_tokens[s], tokenizer, eos, max_new_tokens):
                slot_row[s] = None
            else:
                last[s] = next_tokens[s]


def answer_of(row: Row, tokenizer) -> Answer:
    tokens = row.generated if row.keep is None else row.generated[: row.keep]
    text = tokenizer.decode(tokens)
    if row.cut is not None:
        text = text[: row.cut]
    return Answer(row.problem.task_id, row.problem.benchmark, text, len(tokens), len(row.generated),
                  row.reason or "length", row.probs, row.generated)


def make_rows(config: str, problems: list[Problem], loaded, guard: GenGuard) -> list[Row]:
    rows = []
    for p in problems:
        stops = None
        if config == "b":
            stops = RowRules(default_stop_sequences(p.benchmark, "chat")).start()
        elif config in ("c", "e"):
            stops = rules_for(p, "chat").start()
        policy = RowPolicy(guard.policy) if config in ("d", "e") else None
        rows.append(Row(p, list(encode_prompt(loaded, p.prompt)), stops, policy))
    return rows


def run_batches(problems: list[Problem], loaded, guard: GenGuard, chunk: int, slots: int, max_new_tokens: int,
                configs: tuple[str, ...]) -> tuple[dict[str, list[Answer]], dict[str, dict[str, float]]]:
    """Every configuration on every batch, in turn; answers and (wall, cpu) seconds per configuration."""
    eos = {loaded.tokenizer.eos_token_id} | set(_as_list(loaded.model.generation_config.eos_token_id))
    runner = make_runner(loaded.model, EngineConfig())
    tap = HiddenTap(runner)
    answers: dict[str, list[Answer]] = {c: [] for c in configs}
    seconds = {c: {"wall": 0.0, "cpu": 0.0} for c in configs}
    for start in range(0, len(problems), chunk):
        batch = problems[start : start + chunk]
        for config in configs:
            rows = make_rows(config, batch, loaded, guard)
            wall, cpu = time.perf_counter(), time.process_time()
            generate(runner, tap, loaded.tokenizer, rows, guard if config in ("a", "d", "e") else None,
                     max_new_tokens, eos, slots)
            seconds[config]["wall"] += time.perf_counter() - wall
            seconds[config]["cpu"] += time.process_time() - cpu
            answers[config].extend(answer_of(row, loaded.tokenizer) for row in rows)
            print(f"  chunk {start // chunk + 1}: {config} {sum(len(r.generated) for r in rows)} tokens, "
                  f"{seconds[config]['wall']:.0f}s so far", flush=True)
    return answers, seconds


def _as_list(value) -> list[int]:
    return [] if value is None else [value] if isinstance(value, int) else list(value)


def execute(answers: dict[str, list[Answer]], problems: dict[str, Problem], workers: int) -> dict[str, list[bool]]:
    """Sanitize and run every answer; passed flags per configuration, in answer order."""
    items = []
    for config, rows in answers.items():
        for i, answer in enumerate(rows):
            problem = problems[answer.task_id]
            cleaned = sanitize(problem, answer.text, "chat")
            items.append(((config, i), program_for(problem, cleaned.completion, cleaned.solution)))
    passed = {config: [False] * len(rows) for config, rows in answers.items()}
    with SandboxPool(workers=workers) as pool:
        for (config, i), result in pool.imap(items):
            passed[config][i] = result.passed
    return passed


def guard_on_full_answers(answers: list[Answer], problems: dict[str, Problem], guard: GenGuard, tokenizer) -> dict:
    """Score the guard's votes on (a)'s answers against the labelling rule, and replay its policy."""
    shapes = token_shapes(tokenizer)
    out: dict[str, dict] = {}
    for benchmark in sorted({a.benchmark for a in answers}):
        tp = fp = fn = labelled = early = stopped = never = 0
        for a in (x for x in answers if x.benchmark == benchmark):
            excess = excess_start(problems[a.task_id], a.text, "chat", a.reason != "length")
            if excess is None:
                continue
            labelled += 1
            labels = token_labels(token_starts(tokenizer, a.token_ids), excess)
            end = labels.index(1) if 1 in labels else len(labels)
            votes = [p >= guard.policy.threshold for p in a.probs]
            for vote, label in zip(votes, labels):
                tp += vote and label
                fp += vote and not label
                fn += (not vote) and label
            policy = RowPolicy(guard.policy)
            keep = next((k for v, t in zip(votes, a.token_ids) if (k := policy.feed(v, shapes[t])) is not None), None)
            if keep is None:
                never += 1
            elif keep < end:
                early += 1
            else:
                stopped += 1
        out[benchmark] = {
            "answers_labelled": labelled, "precision": tp / max(tp + fp, 1), "recall": tp / max(tp + fn, 1),
            "policy_early": early, "policy_stopped": stopped, "policy_never": never,
        }
    return out


def prefix_mismatches(answers: dict[str, list[Answer]]) -> dict[str, int]:
    """Answers whose kept tokens are not a prefix of (a)'s (batch composition changes bf16 numerics)."""
    base = {a.task_id: a.token_ids for a in answers.get("a", [])}
    return {c: sum(a.token_ids[: a.kept_tokens] != base[a.task_id][: a.kept_tokens] for a in rows)
            for c, rows in answers.items() if c != "a" and base}


def summarize(answers, passed, seconds) -> dict:
    summary = {}
    for config, rows in answers.items():
        per = {}
        for benchmark in sorted({a.benchmark for a in rows}) + ["all"]:
            idx = [i for i, a in enumerate(rows) if benchmark in ("all", a.benchmark)]
            per[benchmark] = {
                "problems": len(idx), "passed": sum(passed[config][i] for i in idx),
                "generated_tokens": sum(rows[i].generated_tokens for i in idx),
                "kept_tokens": sum(rows[i].kept_tokens for i in idx),
                "reasons": {r: sum(rows[i].reason == r for i in idx) for r in sorted({rows[i].reason for i in idx})},
            }
        summary[config] = {"name": NAMES[config], **seconds[config], "by_benchmark": per}
    return summary


def print_table(summary: dict) -> None:
    base = summary.get("a")
    print(f"{'config':22} {'pass@1':>12} {'tokens':>8} {'wall s':>8} {'cpu s':>8} {'x tokens':>9} {'x wall':>7} {'x cpu':>6}")
    for config, s in summary.items():
        all_ = s["by_benchmark"]["all"]
        ratio = lambda key, value: (base[key] / value) if base and value else float("nan")  # noqa: E731
        tokens_ratio = base["by_benchmark"]["all"]["generated_tokens"] / all_["generated_tokens"] if base else float("nan")
        parts = " ".join(f"{b}:{v['passed']}/{v['problems']}" for b, v in s["by_benchmark"].items() if b != "all")
        print(f"{config} {s['name']:20} {parts:>12} {all_['generated_tokens']:8d} {s['wall']:8.0f} {s['cpu']:8.0f} "
              f"{tokens_ratio:9.2f} {ratio('wall', s['wall']):7.2f} {ratio('cpu', s['cpu']):6.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--humaneval", type=int, default=40, help="the first N HumanEval problems")
    parser.add_argument("--mbpp", type=int, default=40, help="the first N MBPP test problems")
    parser.add_argument("--quick", action="store_true", help="8 + 8 problems")
    parser.add_argument("--guard", default="auto", help="guard file, or auto (the shipped one)")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--batch-size", type=int, default=8, help="rows decoded together (continuous batching)")
    parser.add_argument("--chunk", type=int, default=16, help="problems per turn of the configurations")
    parser.add_argument("--max-new-tokens", type=int, default=300)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2, help="sandbox workers")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    n_he, n_mbpp = (8, 8) if args.quick else (args.humaneval, args.mbpp)
    problems = load_humaneval()[:n_he] + load_mbpp("test")[:n_mbpp]
    loaded = load_model()
    guard = load_guard(args.guard, loaded)
    configs = tuple(c for c in args.configs.split(",") if c in CONFIGS)
    print(f"{len(problems)} problems ({n_he} HumanEval, {n_mbpp} MBPP test), configs {configs}, guard {guard.info.trained_on}")
    answers, seconds = run_batches(problems, loaded, guard, args.chunk, args.batch_size, args.max_new_tokens, configs)
    by_id = {p.task_id: p for p in problems}
    passed = execute(answers, by_id, args.workers)
    summary = summarize(answers, passed, seconds)
    print_table(summary)
    report = {"summary": summary, "prefix_mismatches": prefix_mismatches(answers), "guard": asdict(guard.info)}
    if "a" in answers:
        report["guard_on_full_answers"] = guard_on_full_answers(answers["a"], by_id, guard, loaded.tokenizer)
        print("guard on (a)'s full answers:", json.dumps(report["guard_on_full_answers"]))
    print("prefix mismatches vs (a):", report["prefix_mismatches"])
    if args.json:
        report["answers"] = {c: [asdict(a) for a in rows] for c, rows in answers.items()}
        report["passed"] = passed
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
