"""The server's inter-token latency against the engine's own decode step, with the engine loop in the server's
thread and in a process of its own, side by side.

    python benchmarks/serve_itl.py                         # 1, 8 and 32 clients, 2 threads, the default model
    python benchmarks/serve_itl.py --clients 1,8 --tokens 48 --json out.json

Both servers run at once on loopback (`quench serve --engine-loop thread` and `--engine-loop process`, the
server's defaults otherwise, `--max-model-len 512`), each idle while the other is measured. In each of --rounds
rounds, per client count C: the engine's own step at batch C (the server's live loop, `LiveEngine`, in this process
with the server's engine settings, context and threads, C requests submitted at once and no HTTP: the median gap
between a row's consecutive tokens), then each server with C
streaming clients, each sending --requests-per-client completions of a distinct prompt of about 170 tokens
asking for T tokens with ignore_eos. Interleaving the rounds spreads the machine's other load over all three.
ITL: the gaps between a stream's consecutive text chunks, p50 and p99 over all streams of all rounds (vLLM's
definition). The engine step is timed again after each server's cell, and each cell's ITL p50 is divided by the
mean of the steps timed just before and just after it; the table gives the median of those ratios over the
rounds (the machine's other load moves slower than one cell) for the mean gap (time per output token: what
a stream gets) and for the p50 (a front end that falls behind sends tokens in bursts, gaps near 0 and a long
one); "engine step" is the median of all. For the engine process, the pipe's cost per step
message from its /metrics: the engine loop's CPU time to send it and the time from its send to its delivery
in the front end. On a shared machine only the ratios within one run count; the run prints the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

from quench.threads import prepare_openmp

PROMPT = ("def quicksort(items: list[int]) -> list[int]:\n    \"\"\"Sort items with quicksort, returning a new list; "
          "stable for equal keys, O(n log n) on average.\"\"\"\n    if len(items) <= 1:\n        return list(items)\n"
          "    pivot = items[len(items) // 2]\n    left = [x for x in items if x < pivot]\n    middle = [x for x in "
          "items if x == pivot]\n    right = [x for x in items if x > pivot]\n    return quicksort(left) + middle + "
          "quicksort(right)\n\n\ndef binary_search(items: list[int], target: int) -> int:\n    \"\"\"The index of "
          "target in the sorted items, or -1.\"\"\"\n")


MAX_MODEL_LEN = 512  # the servers' context length, and the engine's here: the same cache


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))] if ordered else float("nan")


def serve_backend(args: argparse.Namespace):  # -> QuenchBackend
    """The server's engine (its default settings, --threads), built in this process."""
    import torch

    from quench.cli import settings
    from quench.cli.parser import build_parser
    from quench.serve.served_model import ServedModel

    torch.set_num_threads(args.threads)
    served = build_parser(["serve"]).parse_args(["serve", "--model", args.model, "--dtype", args.dtype])
    return ServedModel(args.model, args.dtype, options=settings.backend_options_from_args(served)).build()


def engine_step(backend, batch: int, tokens: int) -> float:
    """Seconds per decode step at `batch` rows: the median gap between consecutive tokens of a row, with the
    server's live loop (`LiveEngine`, the servers' context length) in this process and nothing else running."""
    import threading

    from quench.engine.serving.live import Finished, LiveEngine, Tokens
    from quench.engine.types import GenerationRequest, SamplingParams

    engine = LiveEngine(backend, MAX_MODEL_LEN).start()
    arrivals: dict[int, list[float]] = {i: [] for i in range(batch)}
    done = threading.Semaphore(0)

    def sink(index: int):
        def take(event) -> None:
            if isinstance(event, Tokens):
                arrivals[index].append(time.perf_counter())
            elif isinstance(event, Finished):
                done.release()
        return take

    for i in range(batch):
        prompt = tuple(backend.tokenizer(f"# engine {i}\n" + PROMPT)["input_ids"])
        engine.submit(GenerationRequest(f"seed:{i}", prompt), SamplingParams(max_new_tokens=tokens, ignore_eos=True),
                      sink(i))
    for _ in range(batch):
        done.acquire()
    engine.stop()
    return statistics.median(b - a for times in arrivals.values() for a, b in zip(times, times[1:]))


def start_server(args: argparse.Namespace, name: str, port: int) -> subprocess.Popen:
    """A server named by its `--engine-loop` value, with `+share=S` for `--prefill-share S`."""
    loop, _, share = name.partition("+share=")
    command = [sys.executable, "-m", "quench.cli.main", "--threads", str(args.threads), "serve", "--model", args.model,
               "--dtype", args.dtype, "--served-model-name", "bench", "--port", str(port), "--no-access-log",
               "--engine-loop", loop, "--max-model-len", str(MAX_MODEL_LEN), *(["--prefill-share", share] if share else [])]
    log = open(Path(args.log_dir) / f"serve-itl-{name}.log", "w")
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def wait_up(server: subprocess.Popen, port: int, timeout: float = 900) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the server exited with {server.returncode}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError("the server did not come up")


async def stream_gaps(client: httpx.AsyncClient, url: str, prompt: str, tokens: int) -> list[float]:
    """The gaps (seconds) between consecutive text chunks of one streamed completion."""
    body = {"model": "bench", "prompt": prompt, "max_tokens": tokens, "temperature": 0, "ignore_eos": True,
            "stream": True}
    arrivals: list[float] = []
    async with client.stream("POST", url, json=body) as response:
        async for line in response.aiter_lines():
            if line.startswith("data: {") and '"text":""' not in line.replace(" ", ""):
                arrivals.append(time.perf_counter())
    return [b - a for a, b in zip(arrivals, arrivals[1:])]


async def run_clients(port: int, clients: int, requests_each: int, tokens: int) -> list[float]:
    url = f"http://127.0.0.1:{port}/v1/completions"
    gaps: list[float] = []
    async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=clients + 4)) as client:
        async def one(index: int) -> None:
            for r in range(requests_each):
                gaps.extend(await stream_gaps(client, url, f"# client {index} request {r}\n" + PROMPT, tokens))
        await asyncio.gather(*(one(i) for i in range(clients)))
    return gaps


def channel(port: int) -> tuple[float, float, float]:
    """(messages, engine send seconds, transit seconds) from the engine process's /metrics; zeros without one."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    values = dict(line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))
    return tuple(float(values.get(f"quench_engine_{k}", 0)) for k in ("messages_total", "send_seconds_total",
                                                                      "transit_seconds_total"))  # type: ignore[return-value]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--clients", default="1,8,32")
    parser.add_argument("--tokens", type=int, default=64, help="tokens per answer (ignore_eos)")
    parser.add_argument("--requests-per-client", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every cell, interleaved")
    parser.add_argument("--loops", default="thread,process",
                        help="the servers' --engine-loop values; `process+share=1` adds --prefill-share 1")
    parser.add_argument("--log-dir", default="/tmp")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    prepare_openmp()  # as `quench` does before torch loads: waiting OpenMP threads sleep
    counts = [int(c) for c in args.clients.split(",")]
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", flush=True)
    loops = args.loops.split(",")
    ports = {loop: free_port() for loop in loops}
    servers = {loop: start_server(args, loop, ports[loop]) for loop in loops}
    backend = serve_backend(args)
    timings: dict[int, list[float]] = {}
    gaps: dict[tuple[str, int], list[float]] = {}
    ratios: dict[tuple[str, int], list[float]] = {}  # per round: mean ITL over the mean of the steps timed around it
    medians: dict[tuple[str, int], list[float]] = {}  # per round: ITL p50 over the same
    pipe: dict[int, list[float]] = {}  # clients -> [messages, send seconds, transit seconds]
    try:
        for loop in loops:
            wait_up(servers[loop], ports[loop])
            asyncio.run(run_clients(ports[loop], 1, 1, 8))  # warm-up
        engine_step(backend, 1, 4)  # warm-up
        for round_ in range(args.rounds):
            for clients in counts:
                before = engine_step(backend, clients, args.tokens)
                for loop in (loops if round_ % 2 == 0 else loops[::-1]):  # neither server always goes first
                    metrics = channel(ports[loop])
                    cell = asyncio.run(run_clients(ports[loop], clients, args.requests_per_client, args.tokens))
                    after = engine_step(backend, clients, args.tokens)
                    gaps.setdefault((loop, clients), []).extend(cell)
                    step = (before + after) / 2
                    ratios.setdefault((loop, clients), []).append(statistics.fmean(cell) / step)
                    medians.setdefault((loop, clients), []).append(percentile(cell, 50) / step)
                    timings.setdefault(clients, []).extend([before, after])
                    before = after
                    if loop == "process":
                        totals = pipe.setdefault(clients, [0.0, 0.0, 0.0])
                        for k, (a, b) in enumerate(zip(channel(ports[loop]), metrics)):
                            totals[k] += a - b
                print(f"round {round_ + 1} clients {clients}: mean / step " + ", ".join(
                    f"{loop} {ratios[loop, clients][-1]:.2f}x" for loop in loops), flush=True)
    finally:
        for server in servers.values():
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(60)
    steps = {clients: statistics.median(values) for clients, values in timings.items()}
    results = {loop: {clients: {"itl_p50_ms": percentile(gaps[loop, clients], 50) * 1e3,
                                "itl_p99_ms": percentile(gaps[loop, clients], 99) * 1e3,
                                "itl_mean_ms": statistics.fmean(gaps[loop, clients]) * 1e3,
                                "mean_over_step": statistics.median(ratios[loop, clients]),
                                "p50_over_step": statistics.median(medians[loop, clients])}
                      for clients in counts} for loop in loops}
    for clients, (messages, send_s, transit_s) in pipe.items():
        results["process"][clients].update(send_us=send_s / messages * 1e6 if messages else 0.0,
                                           transit_us=transit_s / messages * 1e6 if messages else 0.0)
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    print("| clients | engine step (ms) | " + " | ".join(f"ITL mean / p50 / p99 ({loop}, ms) | mean / step, p50 / step ({loop})"
                                                         for loop in loops) + " | pipe per step: send / transit (us) |")
    print("|---|---|" + "---|---|" * len(loops) + "---|")
    for clients in counts:
        step = steps[clients] * 1e3
        row = [f"{clients}", f"{step:.1f}"]
        for loop in loops:
            cell = results[loop][clients]
            row += [f"{cell['itl_mean_ms']:.1f} / {cell['itl_p50_ms']:.1f} / {cell['itl_p99_ms']:.1f}",
                    f"{cell['mean_over_step']:.2f}x, {cell['p50_over_step']:.2f}x"]
        process = results.get("process", {}).get(clients)
        row.append(f"{process['send_us']:.0f} / {process['transit_us']:.0f}" if process else "-")
        print("| " + " | ".join(row) + " |")
    if args.json:
        Path(args.json).write_text(json.dumps({"steps": steps, "servers": results}, indent=1))


if __name__ == "__main__":
    main()
