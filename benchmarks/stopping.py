"""Stopping in time, side by side, through quench's engine: tokens, time and pass@1.

    python benchmarks/stopping.py --humaneval 20 --mbpp 20 --json out.json
    python benchmarks/stopping.py --quick                  # 8 + 8 problems

Configurations (greedy, the default model, chat prompts, max_new_tokens=300, EOS always on):
  a  no early stop          b  stop sequences (the chat default: the closing fence line)
  c  function-complete rule d  GenGuard (the shipped guard, trained on MBPP train+validation only)
  e  GenGuard + the rule    f  GenGuard with n-gram speculation (--speculate ngram)

Every configuration runs in the engine (`make_backend` with `BackendOptions`, continuous batching
over `--batch-size` slots): the guard reads the hidden states of the engine's own forward passes,
the rule is the per-call `RuleHook` that `--stop-rule function` builds. The configurations run in
turn on chunks of the problems, so the load of a shared machine falls on all of them alike; CPU
seconds of this process (one thread) are the steadier measure of work, wall seconds the one a user
sees. Programs are cleaned by `sanitize` and run in the `SandboxPool`.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from quench.datasets import Problem, load_humaneval, load_mbpp
from quench.execution import SandboxPool
from quench.execution.program_build import program_for
from quench.execution.sanitize import sanitize
from quench.engine.config import EngineConfig
from quench.runs.backends import BackendOptions, make_backend
from quench.engine.types import GenerationRequest, SamplingParams
from quench.models import encode_prompt, load_model
from quench.stopping import RuleHook, default_stop_sequences, rules_for

CONFIGS = ("a", "b", "c", "d", "e", "f")
NAMES = {"a": "no early stop", "b": "stop sequences", "c": "function rule", "d": "GenGuard",
         "e": "GenGuard + rule", "f": "GenGuard + ngram"}
GUARDED = {"d", "e", "f"}


@dataclass
class Answer:
    task_id: str
    benchmark: str
    text: str
    kept_tokens: int
    reason: str
    token_ids: list[int]


def backends(loaded, configs: tuple[str, ...], guard: str, batch_size: int) -> dict[str, object]:
    """One engine per distinct backend setting; configurations a-c (and d-e) share theirs."""
    options = {
        "plain": BackendOptions(engine=EngineConfig(batch_size=batch_size)),
        "guard": BackendOptions(engine=EngineConfig(batch_size=batch_size), guard=guard),
        "guard-ngram": BackendOptions(engine=EngineConfig(batch_size=batch_size, drafter="ngram"), guard=guard),
    }
    wanted = {engine_of(c) for c in configs}
    return {name: make_backend(loaded, o) for name, o in options.items() if name in wanted}


def engine_of(config: str) -> str:
    return "guard-ngram" if config == "f" else "guard" if config in GUARDED else "plain"


def run_config(config: str, backend, problems: list[Problem], loaded, max_new_tokens: int) -> tuple[list[Answer], int]:
    """Generate one configuration's answers; (answers in problem order, tokens the engine generated)."""
    requests = [GenerationRequest(p.task_id, encode_prompt(loaded, p.prompt),
                                  stop_sequences=default_stop_sequences(p.benchmark, "chat") if config == "b" else ())
                for p in problems]
    hook = RuleHook({p.task_id: rules_for(p, "chat") for p in problems}) if config in ("c", "e") else None
    results = {r.key: r for r in backend.generate(requests, SamplingParams(max_new_tokens=max_new_tokens), stop_hook=hook)}
    answers = [Answer(p.task_id, p.benchmark, results[p.task_id].text, len(results[p.task_id].token_ids),
                      results[p.task_id].finish_reason, list(results[p.task_id].token_ids)) for p in problems]
    return answers, backend.last_stats.tokens + len(problems)  # the loop's count leaves out each first token (prefill)


def run_batches(problems: list[Problem], loaded, engines: dict, chunk: int, max_new_tokens: int,
                configs: tuple[str, ...]) -> tuple[dict[str, list[Answer]], dict[str, dict[str, float]]]:
    """Every configuration on every chunk, in turn; answers and (wall, cpu, tokens) per configuration."""
    answers: dict[str, list[Answer]] = {c: [] for c in configs}
    seconds = {c: {"wall": 0.0, "cpu": 0.0, "generated_tokens": 0} for c in configs}
    for start in range(0, len(problems), chunk):
        batch = problems[start : start + chunk]
        for config in configs:
            wall, cpu = time.perf_counter(), time.process_time()
            rows, generated = run_config(config, engines[engine_of(config)], batch, loaded, max_new_tokens)
            seconds[config]["wall"] += time.perf_counter() - wall
            seconds[config]["cpu"] += time.process_time() - cpu
            seconds[config]["generated_tokens"] += generated
            answers[config].extend(rows)
            print(f"  chunk {start // chunk + 1}: {config} {generated} tokens, {seconds[config]['wall']:.0f}s so far",
                  flush=True)
    return answers, seconds


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
                "kept_tokens": sum(rows[i].kept_tokens for i in idx),
                "reasons": {r: sum(rows[i].reason == r for i in idx) for r in sorted({rows[i].reason for i in idx})},
            }
        summary[config] = {"name": NAMES[config], **seconds[config], "by_benchmark": per}  # generated_tokens: all
    return summary


def print_table(summary: dict) -> None:
    base = summary.get("a")
    print(f"{'config':22} {'pass@1':>24} {'tokens':>8} {'kept':>8} {'wall s':>8} {'cpu s':>8} {'x tokens':>9} "
          f"{'x wall':>7} {'x cpu':>6}")
    for config, s in summary.items():
        all_ = s["by_benchmark"]["all"]
        ratio = lambda key: (base[key] / s[key]) if base and s[key] else float("nan")  # noqa: E731
        parts = " ".join(f"{b}:{v['passed']}/{v['problems']}" for b, v in s["by_benchmark"].items() if b != "all")
        print(f"{config} {s['name']:20} {parts:>24} {s['generated_tokens']:8d} {all_['kept_tokens']:8d} {s['wall']:8.0f} "
              f"{s['cpu']:8.0f} {ratio('generated_tokens'):9.2f} {ratio('wall'):7.2f} {ratio('cpu'):6.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--humaneval", type=int, default=20, help="the first N HumanEval problems")
    parser.add_argument("--mbpp", type=int, default=20, help="the first N MBPP test problems")
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
    configs = tuple(c.strip() for c in args.configs.split(",") if c.strip())
    if not configs or any(c not in CONFIGS for c in configs):
        parser.error(f"--configs: comma-separated letters from {','.join(CONFIGS)}, got {args.configs!r}")
    print(f"{len(problems)} problems ({n_he} HumanEval, {n_mbpp} MBPP test), configs {configs}, guard {args.guard}")
    engines = backends(loaded, configs, args.guard, args.batch_size)
    answers, seconds = run_batches(problems, loaded, engines, args.chunk, args.max_new_tokens, configs)
    by_id = {p.task_id: p for p in problems}
    passed = execute(answers, by_id, args.workers)
    summary = summarize(answers, passed, seconds)
    print_table(summary)
    report = {"summary": summary, "prefix_mismatches": prefix_mismatches(answers), "guard": args.guard}
    print("prefix mismatches vs (a):", report["prefix_mismatches"])
    if args.json:
        report["answers"] = {c: [asdict(a) for a in rows] for c, rows in answers.items()}
        report["passed"] = passed
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
