"""GenGuard per language, side by side: pass@1, tokens and time against generate-to-limit and stop sequences.

    python benchmarks/guard_languages.py --limit 20 \\
        --guard unified=auto --guard python=/path/python.safetensors --json out.json

Per benchmark (MBPP and MBXP's mbjsp, mbgp, mbcpp, mbjp; the first `--limit` test problems), greedy,
the model's prompt format, EOS on, the configurations in turn on chunks of the problems (so a shared
machine's load falls on all alike):
  limit   no stop sequences: EOS or the token limit
  stops   the language's stop sequences (`default_stop_sequences`)
  NAME    stop sequences + the guard given as `--guard NAME=PATH` (`auto`: the shipped guard; a
          `{benchmark}` in PATH picks a guard per benchmark)
`--score NAME=PATH` guards are not run, only scored on `limit`'s answers (no generation cost).
Printed per benchmark: pass@1 with its 95% bootstrap interval over problems, tokens the engine
generated, wall and CPU seconds, the ratios against `limit` and `stops`, and how many cleaned
programs equal `limit`'s. Then each guard's token precision/recall of "stop" on `limit`'s answers,
labelled by the rule that labels the training data (`quench.stopping.labels`), and what its policy
does on them (answers cut before their code ended, never stopped).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from quench.datasets import Problem, load_benchmark
from quench.engine.config import EngineConfig
from quench.errors import QuenchError
from quench.engine.types import GenerationRequest, SamplingParams
from quench.execution import SandboxPool
from quench.execution.program_build import program_for
from quench.execution.sanitize import sanitize
from quench.models import encode_prompt, load_model
from quench.runs.backends import BackendOptions, make_backend
from quench.stats.intervals import BootstrapConfig, mean_intervals
from quench.stopping import default_stop_sequences
from quench.stopping.dataset import label_answers
from quench.stopping.loading import load_guard
from quench.stopping.train import StopMetrics, evaluate_guard

BENCHMARKS = ("mbpp", "mbjsp", "mbgp", "mbcpp", "mbjp")


@dataclass
class Answer:
    task_id: str
    text: str
    token_ids: list[int]
    reason: str


@dataclass
class Cost:
    wall: float = 0.0
    cpu: float = 0.0
    tokens: int = 0  # tokens the engine generated


def parse_guards(specs: list[str]) -> dict[str, str]:
    guards = {}
    for spec in specs:
        name, _, path = spec.partition("=")
        if not name or not path or name in ("limit", "stops"):
            raise SystemExit(f"error: --guard {spec!r}: NAME=PATH (auto, a file, or a path with {{benchmark}})")
        guards[name] = path
    return guards


class Engines:
    """One engine per guard file (and one without), built on first use."""

    def __init__(self, loaded, batch_size: int) -> None:
        self.loaded, self.batch_size, self.built = loaded, batch_size, {}

    def get(self, guard: str | None):
        if guard not in self.built:
            options = BackendOptions(engine=EngineConfig(batch_size=self.batch_size), guard=guard)
            self.built[guard] = make_backend(self.loaded, options)
        return self.built[guard]


def generate(backend, loaded, problems: list[Problem], stops: bool, max_new_tokens: int) -> tuple[list[Answer], int]:
    """Greedy answers in problem order and the tokens the engine generated."""
    fmt = loaded.prompt_format
    requests = [GenerationRequest(p.task_id, encode_prompt(loaded, p.prompt),
                                  stop_sequences=default_stop_sequences(p.benchmark, fmt) if stops else ())
                for p in problems]
    results = {r.key: r for r in backend.generate(requests, SamplingParams(max_new_tokens=max_new_tokens))}
    answers = [Answer(p.task_id, results[p.task_id].text, list(results[p.task_id].token_ids),
                      results[p.task_id].finish_reason) for p in problems]
    return answers, backend.last_stats.tokens + len(problems)  # the loop's count leaves out each first token


def run_configs(problems, loaded, engines: Engines, guards: dict[str, str], benchmark: str, args) -> tuple[dict, dict]:
    """Every configuration on every chunk, in turn: answers and costs per configuration."""
    configs = ["limit", "stops", *guards]
    answers: dict[str, list[Answer]] = {c: [] for c in configs}
    costs = {c: Cost() for c in configs}
    for start in range(0, len(problems), args.chunk):
        chunk = problems[start : start + args.chunk]
        for config in configs:
            guard = guards[config].replace("{benchmark}", benchmark) if config in guards else None
            backend = engines.get(guard)
            wall, cpu = time.perf_counter(), time.process_time()
            rows, tokens = generate(backend, loaded, chunk, config != "limit", args.max_new_tokens)
            costs[config].wall += time.perf_counter() - wall
            costs[config].cpu += time.process_time() - cpu
            costs[config].tokens += tokens
            answers[config].extend(rows)
        print(f"  {benchmark}: {start + len(chunk)}/{len(problems)} problems, "
              + ", ".join(f"{c} {costs[c].tokens} tok {costs[c].wall:.0f}s" for c in configs), flush=True)
    return answers, costs


def execute(answers: dict[str, list[Answer]], problems: dict[str, Problem], fmt: str, workers: int) -> tuple[dict, dict]:
    """Passed flags and cleaned programs per configuration; identical programs run once."""
    programs = {c: [program_for(problems[a.task_id], *astuple_sanitized(problems[a.task_id], a.text, fmt)) for a in rows]
                for c, rows in answers.items()}
    unique = sorted({p for rows in programs.values() for p in rows})
    outcome: dict[str, bool] = {}
    with SandboxPool(workers=workers) as pool:
        for program, result in pool.imap([(p, p) for p in unique]):
            outcome[program] = result.passed
    return {c: [outcome[p] for p in rows] for c, rows in programs.items()}, programs


def astuple_sanitized(problem: Problem, text: str, fmt: str) -> tuple[str, str]:
    cleaned = sanitize(problem, text, fmt)
    return cleaned.completion, cleaned.solution


def guard_metrics(answers: list[Answer], problems: dict[str, Problem], loaded, guards: dict[str, str],
                  benchmark: str) -> tuple[dict[str, StopMetrics], int]:
    """Each guard on `limit`'s answers against the labelling rule; and how many answers the rule labels."""
    records = [{"task_id": a.task_id, "split": "test", "token_ids": a.token_ids, "text": a.text,
                "finish_reason": a.reason} for a in answers]
    encode = lambda text: encode_prompt(loaded, text)  # noqa: E731
    try:
        data = label_answers(records, problems, loaded.tokenizer, loaded.model, encode, loaded.prompt_format, {})
    except QuenchError:  # the rule can tell none of the answers' ends
        return {}, 0
    every = torch.ones(len(data.records), dtype=torch.bool)
    metrics = {name: evaluate_guard(load_guard(path.replace("{benchmark}", benchmark), loaded), data, every)
               for name, path in guards.items()}
    return metrics, len(data.records)


def summarize(answers, costs, passed, programs) -> dict:
    bootstrap = BootstrapConfig(seed=0)
    rows = {}
    for config, flags in passed.items():
        interval = mean_intervals(np.array(flags, dtype=float)[:, None], bootstrap)[0]
        rows[config] = {
            "pass": sum(flags), "problems": len(flags), "low": interval.low, "high": interval.high,
            **asdict(costs[config]), "kept_tokens": sum(len(a.token_ids) for a in answers[config]),
            "same_as_limit": sum(p == q for p, q in zip(programs[config], programs["limit"])),
            "reasons": {r: sum(a.reason == r for a in answers[config]) for r in sorted({a.reason for a in answers[config]})},
        }
    return rows


def print_table(title: str, rows: dict) -> None:
    print(f"\n{title}")
    print(f"{'config':10} {'pass@1 [95% CI]':>22} {'tokens':>7} {'wall s':>7} {'cpu s':>6} "
          f"{'tok/lim':>7} {'wall/lim':>8} {'tok/stp':>7} {'wall/stp':>8} {'same':>5}")
    for config, r in rows.items():
        ci = f"[{r['low']:.2f}, {r['high']:.2f}]" if r["low"] is not None else ""
        ratio = lambda base, key: rows[base][key] / r[key] if r[key] else float("nan")  # noqa: E731
        print(f"{config:10} {r['pass']:>3}/{r['problems']:<3} {ci:>14} {r['tokens']:7d} {r['wall']:7.0f} {r['cpu']:6.0f} "
              f"{ratio('limit', 'tokens'):7.2f} {ratio('limit', 'wall'):8.2f} {ratio('stops', 'tokens'):7.2f} "
              f"{ratio('stops', 'wall'):8.2f} {r['same_as_limit']:>5}")


def print_guards(metrics: dict[str, StopMetrics], labelled: int, total: int) -> None:
    print(f"guards on limit's answers ({labelled}/{total} labelled by the rule):")
    for name, m in metrics.items():
        print(f"  {name:12} precision {m.precision:.3f}  recall {m.recall:.3f}  cut early {m.early}  never {m.never}  "
              f"generated {m.generated_share:.0%}")


def totals(per_benchmark: dict[str, dict]) -> dict:
    """All benchmarks pooled: sums of passes, tokens and seconds per configuration."""
    configs = next(iter(per_benchmark.values()))["rows"].keys()
    pooled = {}
    for config in configs:
        rows = [b["rows"][config] for b in per_benchmark.values()]
        flags = [f for b in per_benchmark.values() for f in b["passed"][config]]
        interval = mean_intervals(np.array(flags, dtype=float)[:, None], BootstrapConfig(seed=0))[0]
        pooled[config] = {"pass": sum(flags), "problems": len(flags), "low": interval.low, "high": interval.high,
                          **{k: sum(r[k] for r in rows) for k in ("wall", "cpu", "tokens", "kept_tokens", "same_as_limit")}}
    return pooled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--benchmarks", default=",".join(BENCHMARKS))
    parser.add_argument("--limit", type=int, default=20, help="the first N test problems of each benchmark")
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--prompt-format", default=None, choices=["chat", "completion"])
    parser.add_argument("--guard", action="append", default=[], metavar="NAME=PATH", help="a guarded configuration")
    parser.add_argument("--score", action="append", default=[], metavar="NAME=PATH",
                        help="a guard scored on limit's answers only")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--chunk", type=int, default=10, help="problems per turn of the configurations")
    parser.add_argument("--max-new-tokens", type=int, default=300)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--workers", type=int, default=1, help="sandbox workers")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    benchmarks = [b.strip() for b in args.benchmarks.split(",") if b.strip()]
    if not benchmarks or any(b not in BENCHMARKS for b in benchmarks):
        raise SystemExit(f"error: --benchmarks: comma-separated from {','.join(BENCHMARKS)}, got {args.benchmarks!r}")
    if args.limit < 1:
        raise SystemExit(f"error: --limit must be at least 1, got {args.limit}")
    guards, scored = parse_guards(args.guard), parse_guards(args.score)
    torch.set_num_threads(args.threads)
    loaded = load_model(args.model, prompt_format=args.prompt_format)
    engines = Engines(loaded, args.batch_size)
    print(f"{args.model} ({loaded.prompt_format}), first {args.limit} test problems of {', '.join(benchmarks)}; "
          f"guards {guards}; batch {args.batch_size}, {args.threads} thread(s), max {args.max_new_tokens} new tokens")
    report = {}
    for benchmark in benchmarks:
        problems = load_benchmark(benchmark, "test", limit=args.limit)
        by_id = {p.task_id: p for p in problems}
        answers, costs = run_configs(problems, loaded, engines, guards, benchmark, args)
        passed, programs = execute(answers, by_id, loaded.prompt_format, args.workers)
        rows = summarize(answers, costs, passed, programs)
        judged = guards | scored
        metrics, labelled = guard_metrics(answers["limit"], by_id, loaded, judged, benchmark) if judged else ({}, 0)
        print_table(benchmark, rows)
        if judged:
            print_guards(metrics, labelled, len(problems))
        report[benchmark] = {"rows": rows, "passed": passed, "labelled": labelled,
                             "guards": {n: asdict(m) for n, m in metrics.items()},
                             "answers": {c: [asdict(a) for a in rs] for c, rs in answers.items()}}
        if args.json:
            args.json.write_text(json.dumps(report, indent=1) + "\n")
    if len(report) > 1:
        print_table("all benchmarks", totals(report))


if __name__ == "__main__":
    main()
