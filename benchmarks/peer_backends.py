"""The CPU peers of `benchmarks/generation.py` beside vLLM: OpenVINO GenAI and llama.cpp on the default preset's GGUF.

- `openvino`: `openvino-genai` in its own virtual environment, `LLMPipeline` on the GGUF with the continuous-batching
  scheduler (benchmarks/openvino_worker.py), every cell.
- `llamacpp`: llama-cpp-python's `Llama` in its own environment (benchmarks/llamacpp_worker.py): batch 1 only, its
  Python API has no batch. Above batch 1, greedy: `llama-batched-bench` from the same sources (--llama-bin), which
  decodes B sequences of synthetic P-token prompts and T tokens without sampling, and reports decode tokens/s —
  a "decode only" cell, not an end-to-end one; sampling above batch 1: no cell.

Each peer gets the run's threads; without its environment it is skipped with a line saying so.
"""

from __future__ import annotations

import json
import statistics
import subprocess
from dataclasses import dataclass
from pathlib import Path

from peer_client import WorkerBackend, peer_environment

HERE = Path(__file__).resolve().parent
OPENVINO_ENV = "QUENCH_OPENVINO_PYTHON"  # the openvino-genai environment's interpreter, where --openvino-python is not given
LLAMACPP_ENV = "QUENCH_LLAMACPP_PYTHON"  # the llama_cpp environment's interpreter, where --llamacpp-python is not given
LLAMA_BIN_ENV = "QUENCH_LLAMA_BIN"  # the llama.cpp build's bin directory (llama-batched-bench, libllama.so)
PEERS = ("vllm", "openvino", "llamacpp")  # the backends run outside this process
BATCHED_BENCH = "llama-batched-bench"


@dataclass(frozen=True)
class PeerSetup:
    """Where the peers live; None: that peer is not run."""

    gguf: Path
    openvino_python: Path | None = None
    llamacpp_python: Path | None = None
    llama_bin: Path | None = None  # llama-batched-bench, and libllama.so where the llama_cpp package has none

    def batched_bench(self) -> Path | None:
        return self.llama_bin / BATCHED_BENCH if self.llama_bin is not None else None


def check_llama_bin(path: str | None) -> Path | None:
    """The directory holding llama-batched-bench, or None where none is named; ValueError where it lacks the tool."""
    if not path:
        return None
    if not (Path(path) / BATCHED_BENCH).is_file():
        raise ValueError(f"--llama-bin: {path} holds no {BATCHED_BENCH} (the llama.cpp build's bin directory)")
    return Path(path)


def openvino_backend(setup: PeerSetup, batch_size: int, threads: int) -> WorkerBackend:
    command = [str(setup.openvino_python), str(HERE / "openvino_worker.py"), "--gguf", str(setup.gguf),
               "--batch-size", str(batch_size), "--threads", str(threads)]
    return WorkerBackend("openvino", command, batch_size, {"OMP_NUM_THREADS": str(threads)})


def llamacpp_backend(setup: PeerSetup, threads: int) -> WorkerBackend:
    command = [str(setup.llamacpp_python), str(HERE / "llamacpp_worker.py"), "--gguf", str(setup.gguf),
               "--threads", str(threads)]
    if setup.llama_bin is not None:
        command += ["--llama-lib", str(setup.llama_bin)]
    return WorkerBackend("llamacpp", command, 1, {"OMP_NUM_THREADS": str(threads)})


@dataclass(frozen=True)
class DecodeOnly:
    """One `llama-batched-bench` run: B sequences, P-token prompts, T new tokens each, wall time."""

    batch_size: int
    prompt_tokens: int
    new_tokens: int
    decode_tokens_per_s: float  # B T / the decode phase's seconds
    prefill_tokens_per_s: float  # B P / the prefill's seconds


def batched_bench_command(binary: Path, gguf: Path, threads: int, batch: int, prompt: int, new: int) -> list[str]:
    return [str(binary), "-m", str(gguf), "-t", str(threads), "-tb", str(threads),
            "-c", str(batch * (prompt + new) + 64), "-b", "2048", "-ub", "512",
            "-npp", str(prompt), "-ntg", str(new), "-npl", str(batch), "--output-format", "jsonl"]


def parse_batched_bench(stdout: str, batch: int, prompt: int, new: int) -> DecodeOnly:
    """The DecodeOnly of llama-batched-bench's JSON-lines output (its first JSON line)."""
    row = json.loads(next(line for line in stdout.splitlines() if line.startswith("{")))
    return DecodeOnly(batch, prompt, new, float(row["speed_tg"]), float(row["speed_pp"]))


def batched_bench(setup: PeerSetup, threads: int, batch: int, prompt: int, new: int) -> DecodeOnly:
    command = batched_bench_command(setup.batched_bench(), setup.gguf, threads, batch, prompt, new)
    done = subprocess.run(command, capture_output=True, text=True, check=True, env=peer_environment())
    return parse_batched_bench(done.stdout, batch, prompt, new)


def cell(rate: float | None) -> str:
    return "–" if rate is None else f"{rate:.1f}"


def best_wall(m) -> float | None:
    """A measurement's tokens per wall-second in its fastest round (None: no measurement)."""
    if m is None:
        return None
    return max(m.wall_rounds) if m.wall_rounds else m.wall_tokens_per_s


def peer_table(rows: list, decode_only: dict[int, DecodeOnly], threads: int) -> str:
    """Every backend of the run side by side: wall tokens/s of the best round per batch size and mode, llama.cpp's
    decode-only rate where its Python API cannot run the cell, quench's defaults over the fastest end-to-end peer,
    and the two times to first token (ms) at batch 1."""
    backends = list(dict.fromkeys(m.backend for m in rows))
    quench = [name for name in backends if name.startswith("quench")]
    peers = [name for name in backends if not name.startswith("quench")]
    columns = quench + peers + (["llamacpp"] if decode_only and "llamacpp" not in peers else [])
    lead = "quench-defaults" if "quench-defaults" in quench else (quench[0] if quench else None)
    header = f"| {threads} thread(s), tokens/s (wall) | " + " | ".join(columns) + f" | {lead} / fastest peer |"
    lines = [header, "|---|" + "---:|" * (len(columns) + 1)]
    by = {(m.batch_size, m.mode, m.backend): m for m in rows}
    for batch_size, mode in dict.fromkeys((m.batch_size, m.mode) for m in rows):
        values = {name: best_wall(by.get((batch_size, mode, name))) for name in columns}
        cells = [cell(values[name]) for name in columns]
        bench = decode_only.get(batch_size) if mode == "greedy" else None
        if "llamacpp" in columns and values["llamacpp"] is None and bench is not None:
            cells[columns.index("llamacpp")] = f"{bench.decode_tokens_per_s:.1f} decode only"
        peer_rates = [values[name] for name in peers if values[name] is not None]
        ratio = f"{values[lead] / max(peer_rates):.2f}x" if lead and values[lead] and peer_rates else "–"
        lines.append(f"| {mode}, batch {batch_size} | " + " | ".join(cells) + f" | {ratio} |")
    for label, field in (("first token alone (ms)", "ttft_alone_ms"), ("first token, alternating rounds (ms)", "ttft_ms")):
        times = {name: getattr(by.get((1, rows[0].mode, name)), field, None) if rows else None for name in columns}
        if any(value is not None for value in times.values()):
            peer_times = [times[name] for name in peers if times[name] is not None]
            ratio = f"{min(peer_times) / times[lead]:.2f}x" if lead and times.get(lead) and peer_times else "–"
            lines.append(f"| {label} | " + " | ".join("–" if times[n] is None else f"{times[n]:.0f}" for n in columns)
                         + f" | {ratio} |")
    return "\n".join(lines)


def byte_floor_lines(gguf: Path, bandwidth_gbs: float, rows: list) -> list[str]:
    """The batch-1 decode floor of the GGUF: every tensor's bytes read once per token (the tied head reads the whole
    embedding) over the measured read bandwidth, beside each backend's batch-1 greedy rate."""
    from gguf import GGUFReader

    step_bytes = sum(int(tensor.n_bytes) for tensor in GGUFReader(gguf).tensors)
    floor = bandwidth_gbs * 1e9 / step_bytes
    lines = [f"byte floor, batch 1: {step_bytes / 1e6:.1f} MB of GGUF tensors per token / {bandwidth_gbs:.1f} GB/s read "
             f"= {floor:.0f} tokens/s"]
    for m in rows:
        if m.batch_size == 1 and m.mode == "greedy":
            lines.append(f"  {m.backend}: {best_wall(m)} tokens/s wall = {best_wall(m) / floor:.0%} of it")
    return lines


def median_ms(times: list[float]) -> float | None:
    return round(1000 * statistics.median(times), 1) if times else None
