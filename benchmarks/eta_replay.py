"""The generate stage's ETA replayed from a finished run's samples: tqdm's samples-per-second ETA against
quench's slot-seconds estimate (`quench.runs.eta`), side by side, at checkpoints of the real generation time.

    python benchmarks/eta_replay.py runs/robustness-humaneval-smollm2-135m-instruct-n1-t0
    python benchmarks/eta_replay.py tests/cli/fixtures/robustness_timings.jsonl     # a samples file alone (limit 512)
    python benchmarks/eta_replay.py RUN_DIR --at 0.1 0.2 0.5 0.8
    python benchmarks/eta_replay.py RUN_DIR --simulate 220 11668 --runs 40     # runs drawn from its samples

Each sample of `RUN_DIR/samples.jsonl` carries its finish time since generation began (`finish_s`) and its
latency (`seconds`), so its start is `finish_s - seconds`: the replay feeds starts and finishes in time order
to both estimators and, at each checkpoint (a fraction of the last finish time), prints the seconds each
predicts are left, the real seconds left, and each error relative to the real rest. tqdm's ETA is replayed
as tqdm computes it (an exponential moving average of samples per second over updates at least 0.1 s apart,
smoothing 0.3) and also as the plain average rate. The run must have generated in one go (not resumed).

--simulate N ...: instead, --runs runs of N samples drawn (seeded) from the run's samples, shuffled, each taken by
the first free of --slots slots (continuous batching at a constant pace): per N and checkpoint, each estimator's
mean absolute error and the share of runs it is within 20% of the real rest. 11668 is ReCode's full setting
(164 problems x (2 nominal prompts + 27 transformations x 5 seeds), identical prompts generated once).
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from quench.runs.eta import EtaConfig, GenerationEta


@dataclass(frozen=True)
class Event:
    time: float  # seconds since generation began
    kind: str  # "start" or "finish"
    record: dict


def events_of(records: list[dict]) -> list[Event]:
    events = []
    for record in records:
        events.append(Event(record["finish_s"] - record["seconds"], "start", record))
        events.append(Event(record["finish_s"], "finish", record))
    return sorted(events, key=lambda e: (e.time, e.kind == "start"))  # a slot frees before it refills


class TqdmRate:
    """tqdm's rate: EMA (smoothing 0.3) of samples and seconds between displayed updates (mininterval 0.1 s)."""

    def __init__(self, smoothing: float = 0.3, mininterval: float = 0.1) -> None:
        self.alpha, self.mininterval = smoothing, mininterval
        self.dn = self.dt = 0.0
        self.calls = 0
        self.last_t, self.last_n, self.n = 0.0, 0, 0

    def update(self, now: float) -> None:
        self.n += 1
        if now - self.last_t < self.mininterval:
            return
        beta = 1 - self.alpha
        self.dn = self.alpha * (self.n - self.last_n) + beta * self.dn
        self.dt = self.alpha * (now - self.last_t) + beta * self.dt
        self.calls += 1
        self.last_t, self.last_n = now, self.n

    def remaining(self, total: int) -> float | None:
        return (total - self.n) * self.dt / self.dn if self.dn else None


def sample_id(record: dict) -> tuple[str, int]:
    return (record.get("prompt_id") or record["task_id"], record["sample_index"])


def replay(records: list[dict], max_new_tokens: int, fractions: list[float]) -> list[tuple[float, ...]]:
    end = max(r["finish_s"] for r in records)
    total = len(records)
    clock_now = [0.0]
    eta = GenerationEta(EtaConfig(total, max_new_tokens), clock=lambda: clock_now[0])
    tqdm_rate, done = TqdmRate(), 0
    rows, checkpoints = [], sorted(fractions)
    for event in events_of(records) + [Event(float("inf"), "end", {})]:
        while checkpoints and event.time > checkpoints[0] * end:
            at = checkpoints.pop(0) * end
            clock_now[0] = at
            rows.append((at / end, done / total, end - at, tqdm_rate.remaining(total), (total - done) * at / max(done, 1) if done else None,
                         eta.remaining(at)))
        if event.kind == "start":
            eta.started(sample_id(event.record), event.time)
        elif event.kind == "finish":
            r = event.record
            eta.finished(sample_id(r), r["seconds"], r["num_tokens"], r["finish_reason"])
            tqdm_rate.update(event.time)
            done += 1
    return rows


def simulated_records(pool: list[dict], count: int, slots: int, seed: int) -> list[dict]:
    """`count` samples drawn from `pool`, with the finish times `slots` continuously batched slots give them."""
    rng = random.Random(seed)
    drawn = [rng.choice(pool) for _ in range(count)]
    free, records = [0.0] * slots, []
    for i, sample in enumerate(drawn):
        start = heapq.heappop(free)
        heapq.heappush(free, start + sample["seconds"])
        records.append({**sample, "prompt_id": f"p{i}", "sample_index": 0, "finish_s": start + sample["seconds"]})
    return records


def simulate(pool: list[dict], counts: list[int], runs: int, slots: int, max_new_tokens: int, fractions: list[float]) -> None:
    print(f"{runs} simulated runs per size, {slots} slots; mean |error| of the time left, and the share of runs within 20%")
    print(f"{'samples':>7} {'time':>5} | {'tqdm EMA':>15} | {'tqdm avg':>15} | {'quench':>15}")
    for count in counts:
        table = [replay(simulated_records(pool, count, slots, seed), max_new_tokens, fractions) for seed in range(runs)]
        for position, share in enumerate(sorted(fractions)):
            cells = []
            for column in (3, 4, 5):
                errors = [abs((row[position][column] - row[position][2]) / row[position][2]) if row[position][column] is not None
                          else float("inf") for row in table]
                cells.append(f"{statistics.mean(errors):6.0%} {sum(e <= 0.2 for e in errors) / runs:6.0%} in")
            print(f"{count:>7} {share:5.0%} | " + " | ".join(cells))


def error(predicted: float | None, real: float) -> str:
    return "    -" if predicted is None else f"{(predicted - real) / real:+6.0%}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, help="a run directory, or a samples file")
    parser.add_argument("--at", type=float, nargs="+", default=[0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9])
    parser.add_argument("--max-new-tokens", type=int, default=None, help="default: the run's config.json")
    parser.add_argument("--simulate", type=int, nargs="+", default=None, metavar="N", help="simulated runs of N samples")
    parser.add_argument("--runs", type=int, default=20, help="simulated runs per N")
    parser.add_argument("--slots", type=int, default=8, help="slots of the simulated engine (--batch-size)")
    args = parser.parse_args(argv)
    path = args.run_dir if args.run_dir.is_file() else args.run_dir / "samples.jsonl"
    if not path.is_file():
        print(f"error: {path}: no samples file", file=sys.stderr)
        return 2
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not records or any("finish_s" not in r for r in records):
        print(f"error: {path}: samples without finish_s (written by another backend or an older quench)", file=sys.stderr)
        return 2
    records = [{"prompt_id": f"r{i}", "sample_index": 0, **r} for i, r in enumerate(records)]  # files without ids
    config = path.parent / "config.json"
    max_new_tokens = args.max_new_tokens or (json.loads(config.read_text())["max_new_tokens"] if config.is_file() else 512)
    if args.simulate:
        simulate(records, args.simulate, args.runs, args.slots, max_new_tokens, args.at)
        return 0
    rows = replay(records, max_new_tokens, args.at)
    print(f"{path}: {len(records)} samples, generation {max(r['finish_s'] for r in records):.0f} s")
    print(f"{'time':>5} {'done':>5} {'real left':>9} | {'tqdm EMA':>9} {'err':>6} | {'tqdm avg':>9} {'err':>6} | {'quench':>9} {'err':>6}")
    for at, done, real, ema, avg, ours in rows:
        cells = " | ".join(f"{'-' if v is None else f'{v:.0f} s':>9} {error(v, real)}" for v in (ema, avg, ours))
        print(f"{at:5.0%} {done:5.0%} {real:7.0f} s | {cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
