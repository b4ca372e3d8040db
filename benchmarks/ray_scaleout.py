"""Ray scale-out against one machine: sandbox throughput, end-to-end wall time, a lost node.

    python benchmarks/ray_scaleout.py                       # the figures in docs/ray.md
    python benchmarks/ray_scaleout.py --quick               # one repeat, fewer programs
    python benchmarks/ray_scaleout.py --model smollm2-135m-instruct --dtype float32

Clusters are `ray.cluster_utils.Cluster`s on this machine, over loopback: "ray1" is one node with
all of `--cpus`, "ray2" two nodes splitting them. Cluster start-up is reported apart (a real run
joins an existing cluster); actor start-up (each actor loads its own model) is part of the wall.

1. Sandbox throughput: HumanEval canonical programs (they pass), repeated to `--programs`, on a
   local SandboxPool and on RayPool with several chunk sizes; plus Ray tasks that each start a fresh
   SandboxPool for their chunk ("fresh"), the alternative to warm actors.
2. End to end, what `quench run` does (generate_samples, then execute_samples, then summarize) on
   HumanEval/--tasks: local backend + SandboxPool against RayBackend + RayPool. The model is a
   random tiny Llama unless `--model` names one (greedy, so every setup writes the same samples).
3. A lost node: the "ray2" run again, with the second node removed after the first sample.
Best of `--repeats` per setup (contention only slows a run down). The local run uses one torch
thread by default, like each Ray actor: on a small, shared machine torch's default (a thread per
core) was 15-25x slower for the tiny model, which would flatter Ray.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # nodes talk over loopback only
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import ray  # noqa: E402
import torch  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

from quench.datasets import load_benchmark, parse_tasks  # noqa: E402
from quench.distributed import ModelSpec, RayOptions  # noqa: E402
from quench.distributed.execution import RayPool  # noqa: E402
from quench.distributed.generation import RayBackend  # noqa: E402
from quench.execution import SandboxLimits, SandboxPool  # noqa: E402
from quench.runs.evaluate import execute_samples, problems_by_key, summarize  # noqa: E402
from quench.engine.config import EngineConfig  # noqa: E402
from quench.runs.backends import BackendOptions, make_backend  # noqa: E402
from quench.runs.samples import GenerateConfig, generate_samples  # noqa: E402
from quench.engine.types import SamplingParams  # noqa: E402
from quench.models import encode_prompt, load_model  # noqa: E402

MB = 1024**2
LIMITS = SandboxLimits(timeout_s=5.0)


NODE = {"object_store_memory": 100 * MB, "node_ip_address": "127.0.0.1"}


def shares(cpus: int, nodes: int) -> list[int]:
    return [cpus // nodes + (1 if i < cpus % nodes else 0) for i in range(nodes)]


def start_cluster(nodes: int, cpus: int, temp: str) -> Cluster:
    split = shares(cpus, nodes)
    cluster = Cluster(initialize_head=True, head_node_args={**NODE, "num_cpus": split[0], "temp_dir": temp, "include_dashboard": False})
    for share in split[1:]:
        cluster.add_node(**NODE, num_cpus=share)
    ray.init(address=cluster.address, log_to_driver=False, logging_level="warning")
    return cluster


def stop_cluster(cluster: Cluster) -> None:
    ray.shutdown()
    cluster.shutdown()


def best(runs: int, measure: Callable[[], float]) -> float:
    return min(measure() for _ in range(runs))


# --- 1. sandbox throughput ---------------------------------------------------------------------

def canonical_programs(count: int) -> list[str]:
    programs = [p.reference_program() for p in load_benchmark("humaneval", tasks=parse_tasks("0-19"))]
    return [programs[i % len(programs)] for i in range(count)]


def time_pool(pool, programs: list[str]) -> float:
    started = time.perf_counter()
    results = pool.run_many(programs)
    elapsed = time.perf_counter() - started
    assert all(r.passed for r in results), [r for r in results if not r.passed][:2]
    return elapsed


@ray.remote
def fresh_chunk(programs: list[str], limits: SandboxLimits) -> list:
    with SandboxPool(1, limits) as pool:
        return pool.run_many(programs)


def time_fresh_tasks(programs: list[str], chunk: int) -> float:
    started = time.perf_counter()
    refs = [fresh_chunk.remote(programs[i : i + chunk], LIMITS) for i in range(0, len(programs), chunk)]
    results = [r for ref in refs for r in ray.get(ref, timeout=600)]
    assert all(r.passed for r in results)
    return time.perf_counter() - started


def sandbox_throughput(args: argparse.Namespace, cluster_kind: str, programs: list[str]) -> dict[str, float]:
    """programs per second for each RayPool chunk size, and fresh pools per task."""
    rates: dict[str, float] = {}
    for chunk in args.chunks:
        with RayPool(args.cpus, LIMITS, options=RayOptions(chunk_size=chunk)) as pool:
            pool.fleet.wait_ready(pool.fleet.size)
            rates[f"{cluster_kind} chunk {chunk}"] = len(programs) / best(args.repeats, lambda: time_pool(pool, programs))
    rates[f"{cluster_kind} fresh pool per task of 8"] = len(programs) / best(args.repeats, lambda: time_fresh_tasks(programs, 8))
    return rates


# --- 2./3. end to end --------------------------------------------------------------------------

def tiny_model_dir(path: Path) -> str:
    from helpers import char_tokenizer, tiny_llama

    tiny_llama().save_pretrained(path)
    char_tokenizer().save_pretrained(path)
    return str(path)


def end_to_end(args: argparse.Namespace, model: str, out: Path, ray_run: bool, on_first: Callable[[], None] | None = None) -> dict:
    """generate -> execute -> summarize into `out`, as `quench run` does; wall seconds per phase."""
    problems = load_benchmark("humaneval", tasks=parse_tasks(args.tasks))
    started = time.perf_counter()
    loaded = load_model(model, args.dtype, "cpu", args.prompt_format)  # the driver tokenizes, as the CLI does
    options = BackendOptions(name=args.backend, engine=EngineConfig(batch_size=args.batch_size))
    spec = ModelSpec(model, args.dtype, "cpu", loaded.prompt_format, options)
    backend = RayBackend(spec, RayOptions(start_timeout_s=120)) if ray_run else make_backend(loaded, options)
    if ray_run:
        backend.start(wait_for=args.cpus)  # one actor per CPU; a just-lost node may still be counted
    ready = time.perf_counter()
    config = GenerateConfig(args.samples, SamplingParams(max_new_tokens=args.max_new_tokens), (), loaded.prompt_format)
    fired = False

    def on_sample(_: dict) -> None:
        nonlocal fired
        if on_first is not None and not fired:
            fired = True
            on_first()

    samples = generate_samples(problems, backend, lambda text: encode_prompt(loaded, text), config, out / "samples.jsonl", on_sample)
    generated = time.perf_counter()
    stats = dict(vars(backend.stats)) if ray_run else {}
    if ray_run:
        backend.close()
    pool = RayPool(args.cpus, LIMITS) if ray_run else SandboxPool(args.cpus, LIMITS)
    with pool:
        results = execute_samples(samples, problems_by_key(problems), pool, out / "results.jsonl")
    done = time.perf_counter()
    summary = summarize(results, (1,))
    texts = sorted((s.task_id, s.sample_index, s.raw) for s in samples)
    return {"wall": done - started, "start": ready - started, "generate": generated - ready, "execute": done - generated,
            "samples": len(samples), "pass@1": summary.pass_at_k.get(1), "texts": texts,
            "requeued": stats.get("chunks_requeued", 0), "lost": stats.get("actors_lost", 0)}


def settle(nodes: int, patience_s: float = 90.0) -> None:
    """Wait until Ray has declared the lost node dead (10-30 s), so the next run starts clean."""
    give_up = time.monotonic() + patience_s
    while sum(bool(n.get("Alive")) for n in ray.nodes()) > nodes and time.monotonic() < give_up:
        time.sleep(1.0)


def lose_worker_node(cluster: Cluster) -> None:
    """As if the second machine died: its raylet and every worker under it are killed."""
    from sandbox_helpers import kill_node, worker_node

    kill_node(cluster, worker_node(cluster))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpus", type=int, default=2, help="CPUs in each cluster (and local sandbox workers)")
    parser.add_argument("--programs", type=int, default=160)
    parser.add_argument("--chunks", type=lambda s: [int(c) for c in s.split(",")], default=[1, 8, 32])
    parser.add_argument("--tasks", default="0-9")
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--model", default=None, help="preset or path (default: a random tiny Llama)")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--prompt-format", default=None)
    parser.add_argument("--backend", default="quench")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--local-threads", type=int, default=1,
                        help="torch threads of the local run (0: torch's default; Ray actors get one per CPU they hold)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.quick:
        args.programs, args.repeats, args.chunks = 48, 1, [1, 8]
    if args.local_threads:
        torch.set_num_threads(args.local_threads)
    work = Path(tempfile.mkdtemp(prefix="qrb"))
    model = args.model or tiny_model_dir(work / "tiny")
    if args.model is None:
        args.prompt_format = "completion"
    report: dict = {"settings": {k: v for k, v in vars(args).items() if k != "json"}}
    programs = canonical_programs(args.programs)

    with SandboxPool(args.cpus, LIMITS) as pool:
        time_pool(pool, programs[:4])  # warm
        local_rate = len(programs) / best(args.repeats, lambda: time_pool(pool, programs))
    rates = {"local SandboxPool": local_rate}
    runs: dict[str, list[dict]] = {"local": [end_to_end(args, model, work / f"local{i}", False) for i in range(args.repeats)]}
    for kind, nodes in (("ray1", 1), ("ray2", 2)):
        begun = time.perf_counter()
        cluster = start_cluster(nodes, args.cpus, tempfile.mkdtemp(prefix="qr", dir=work))
        report[f"{kind} cluster start s"] = round(time.perf_counter() - begun, 2)
        try:
            rates |= sandbox_throughput(args, kind, programs)
            runs[kind] = [end_to_end(args, model, work / f"{kind}-{i}", True) for i in range(args.repeats)]
            if kind == "ray2":
                runs["ray2 lost node"] = []
                for i in range(args.repeats):
                    lose = lambda: lose_worker_node(cluster)  # noqa: E731
                    runs["ray2 lost node"].append(end_to_end(args, model, work / f"lost-{i}", True, on_first=lose))
                    cluster.add_node(**NODE, num_cpus=shares(args.cpus, 2)[1])
                    settle(nodes=2)
        finally:
            stop_cluster(cluster)

    reference = runs["local"][0]["texts"]
    report["sandbox programs/s"] = {k: round(v, 1) for k, v in rates.items()}
    report["end to end"] = {}
    for name, measured in runs.items():
        fastest = min(measured, key=lambda r: r["wall"])
        row = {k: (round(v, 2) if isinstance(v, float) else v) for k, v in fastest.items() if k != "texts"}
        row["same samples as local"] = all(r["texts"] == reference for r in measured)
        row["walls"] = [round(r["wall"], 2) for r in measured]
        report["end to end"][name] = row
    print(json.dumps(report, indent=2))
    for name, rate in rates.items():
        print(f"{name:36s} {rate:7.1f} programs/s  ({(local_rate / rate - 1) * 100:+.0f}% time vs local)")
    local_wall = report["end to end"]["local"]["wall"]
    for name, row in report["end to end"].items():
        print(f"{name:18s} wall {row['wall']:6.1f}s ({(row['wall'] / local_wall - 1) * 100:+.0f}%)  start {row['start']:.1f}  "
              f"generate {row['generate']:.1f}  execute {row['execute']:.1f}  same={row['same samples as local']}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
