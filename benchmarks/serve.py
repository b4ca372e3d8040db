"""Serving under load: N concurrent streaming clients against `quench serve` (regular and speculative) and `vllm serve`.

    python benchmarks/serve.py --quick                 # 1 and 8 clients, n = 1 and 8, short answers (minutes)
    python benchmarks/serve.py                         # 1, 8 and 32 clients, n = 1 and 8
    python benchmarks/serve.py --json out.json

Each server runs as its own process on loopback (`quench serve --speculate none`, `--speculate ngram`,
and `vllm serve` where the vllm command is installed; the run says when it is not). Clients stream
chat completions of HumanEval prompts (quench's chat turn): n = 1 greedy, n = 8 at temperature 0.8.
Every client sends its next request as soon as its last one finished, until the cell's requests are
done. Per cell: completion tokens per wall-second (the servers' usage counts), time to first token
(request sent to first streamed text) and time per output token after it ((last - first text) /
(tokens per sample - 1)), p50 and p95 over requests; and speculative / regular throughput. The
server `quench-none+logprobs` is regular decoding with clients asking for `logprobs` (5 alternatives):
its throughput against `quench-none` is what log-probabilities cost. On a shared machine only the
ratios within one run count.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from quench.datasets import load_humaneval
from quench.models import DEFAULT_PRESET
from quench.models.prompts import CHAT_INSTRUCTION, fenced


LOGPROBS = "+logprobs"  # a server name's suffix: its clients ask for log-probabilities


@dataclass(frozen=True)
class Cell:
    server: str
    clients: int
    n: int
    requests: int
    tokens: int
    seconds: float
    ttft_p50_ms: float
    ttft_p95_ms: float
    tpot_p50_ms: float
    tpot_p95_ms: float

    @property
    def throughput(self) -> float:
        return self.tokens / self.seconds


@dataclass(frozen=True)
class Timing:
    ttft: float  # seconds to the first streamed text
    tpot: float | None  # seconds per token after it (None: one token per sample)
    tokens: int  # completion tokens of the request (all n samples)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(kind: str, model: str, port: int, args: argparse.Namespace) -> subprocess.Popen:
    if kind == "vllm":
        command = ["vllm", "serve", model, "--port", str(port), "--served-model-name", "bench"]
    else:
        command = [sys.executable, "-m", "quench.cli.main", "--threads", str(args.threads), "serve", "--model", model,
                   "--served-model-name", "bench", "--port", str(port), "--batch-size", str(args.batch_size),
                   "--speculate", kind.removeprefix("quench-").removesuffix(LOGPROBS), "--max-waiting", "4096", "--max-n", "8"]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def wait_until_up(server: subprocess.Popen, url: str, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"the server exited: {server.stderr.read()[-2000:]}")
        try:
            if httpx.get(f"{url}/v1/models", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise SystemExit("the server did not come up")


def stop(server: subprocess.Popen) -> None:
    os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


async def one_request(client: httpx.AsyncClient, url: str, prompt: str, n: int, max_tokens: int, logprobs: bool) -> Timing:
    body = {"model": "bench", "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens, "n": n,
            "temperature": 0.0 if n == 1 else 0.8, "seed": 0, "stream": True, "stream_options": {"include_usage": True}}
    if logprobs:
        body |= {"logprobs": True, "top_logprobs": 5}
    sent = time.perf_counter()
    first = last = None
    tokens = 0
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: {"):
                continue
            event = json.loads(line[6:])
            if any(c.get("delta", {}).get("content") for c in event.get("choices", [])):
                last = time.perf_counter()
                first = first or last
            if event.get("usage"):
                tokens = event["usage"]["completion_tokens"]
    first = first or time.perf_counter()
    per_sample = tokens / n
    tpot = (last - first) / (per_sample - 1) if last is not None and per_sample > 1 else None
    return Timing(first - sent, tpot, tokens)


async def load(url: str, prompts: list[str], clients: int, n: int, requests: int, max_tokens: int,
               logprobs: bool) -> tuple[list[Timing], float]:
    queue: asyncio.Queue[str] = asyncio.Queue()
    for i in range(requests):
        queue.put_nowait(prompts[i % len(prompts)])
    timings: list[Timing] = []

    async def client_loop(client: httpx.AsyncClient) -> None:
        while not queue.empty():
            prompt = queue.get_nowait()
            timings.append(await one_request(client, url, prompt, n, max_tokens, logprobs))

    limits = httpx.Limits(max_connections=clients + 4)
    async with httpx.AsyncClient(timeout=3600, limits=limits) as client:
        started = time.perf_counter()
        await asyncio.gather(*(client_loop(client) for _ in range(clients)))
        return timings, time.perf_counter() - started


def measure(server: str, url: str, prompts: list[str], clients: int, n: int, args: argparse.Namespace) -> Cell:
    requests = max(clients, args.min_requests)
    timings, seconds = asyncio.run(load(url, prompts, clients, n, requests, args.max_tokens, server.endswith(LOGPROBS)))
    ttft = [t.ttft * 1000 for t in timings]
    tpot = [t.tpot * 1000 for t in timings if t.tpot is not None]
    return Cell(server, clients, n, requests, sum(t.tokens for t in timings), seconds,
                percentile(ttft, 0.5), percentile(ttft, 0.95), percentile(tpot, 0.5), percentile(tpot, 0.95))


def print_table(cells: list[Cell], servers: list[str]) -> None:
    print(f"{'clients':>7} {'n':>2} | " + " | ".join(f"{s:^38}" for s in servers) + " | spec/regular")
    print(f"{'':>7} {'':>2} | " + " | ".join(f"{'tok/s':>7} {'TTFT p50/p95 ms':>16} {'TPOT p50/p95':>13}"
                                              for _ in servers) + " |")
    keys = sorted({(c.clients, c.n) for c in cells})
    for clients, n in keys:
        row = {c.server: c for c in cells if (c.clients, c.n) == (clients, n)}
        parts = []
        for s in servers:
            c = row.get(s)
            parts.append(f"{c.throughput:7.1f} {c.ttft_p50_ms:7.0f}/{c.ttft_p95_ms:<8.0f} "
                         f"{c.tpot_p50_ms:5.1f}/{c.tpot_p95_ms:<7.1f}" if c else f"{'-':^38}")
        regular, spec = row.get("quench-none"), row.get("quench-ngram")
        ratio = f"{spec.throughput / regular.throughput:.2f}x" if regular and spec else "-"
        scored = row.get("quench-none" + LOGPROBS)
        if regular and scored:
            ratio += f" | logprobs/regular {scored.throughput / regular.throughput:.2f}x"
        print(f"{clients:>7} {n:>2} | " + " | ".join(parts) + f" | {ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_PRESET)
    parser.add_argument("--quick", action="store_true", help="1 and 8 clients, 32-token answers, 8 requests per cell")
    parser.add_argument("--clients", default="1,8,32")
    parser.add_argument("--samples", default="1,8", help="n per request")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--min-requests", type=int, default=16, help="requests per cell, at least (and one per client)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1, help="torch threads of each quench server")
    parser.add_argument("--servers", default="quench-none,quench-ngram,vllm")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.quick:
        args.clients, args.max_tokens, args.min_requests = "1,8", 32, 8
    prompts = [CHAT_INSTRUCTION + fenced(p.prompt) for p in load_humaneval()]
    servers = args.servers.split(",")
    if "vllm" in servers and shutil.which("vllm") is None:
        print("vllm: not installed (no `vllm` command); its column is left out")
        servers.remove("vllm")
    cells: list[Cell] = []
    for server in servers:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        process = start_server(server, args.model, port, args)
        try:
            wait_until_up(process, url)
            for clients in map(int, args.clients.split(",")):
                for n in map(int, args.samples.split(",")):
                    cells.append(measure(server, url, prompts, clients, n, args))
                    print(f"  {server}: {clients} clients, n={n}: {cells[-1].throughput:.1f} tok/s", flush=True)
        finally:
            stop(process)
    print(f"\n{args.model}, {args.max_tokens} tokens per answer, batch {args.batch_size}, "
          f"{args.threads} thread(s) per quench server; n = 1 greedy, n > 1 at temperature 0.8")
    print_table(cells, servers)
    if args.json:
        args.json.write_text(json.dumps([asdict(c) | {"throughput": c.throughput} for c in cells], indent=2) + "\n")


if __name__ == "__main__":
    main()
