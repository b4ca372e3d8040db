"""(Not gguf.py: a script of that name would shadow the gguf package it imports.)

The default preset's GGUF run several ways in one process (--systems): bfloat16 (the preset loaded with --dtype
auto's bfloat16), its weights dequantized to float32, and its blocks executed as stored (quench.engine.kernels.quant)
with float32 activations (gguf) or 8-bit activations and integer sums (gguf-int8), at the given batch sizes and
thread counts.

Decode tokens/s: B (T - 1) new tokens over the wall time of a T-token call minus that of a 1-token call (the
prefill and the first token), EOS ignored, the first B HumanEval prompts in the chat template; the best of
--repeats interleaved rounds. Bytes per decode step: the nbytes of every weight tensor a step reads (the 30 layers'
projections and the LM head; the embedding rows and norms are a few KB); the floor is those bytes over the read
bandwidth of a 512 MB sum at the same threads. "same tokens": the greedy token ids equal the first system's.

    .venv/bin/python benchmarks/gguf_weights.py --threads 1 2 --batch-sizes 1 8 16
    .venv/bin/python benchmarks/gguf_weights.py --systems gguf-int8,gguf-int8-python   # the C layer loop's gain

--agreement DIR DIR ...: no timing; the share of problems whose first 64 greedy tokens (the answer's text up to its
stop, tokenized again) are the same in each pair of `quench run --out DIR` folders (e.g. one per --weights).
    QUENCH_NATIVE_MARCH=x86-64-v3 .venv/bin/python benchmarks/gguf_weights.py ...   # the AVX2 build
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import torch

from generation import read_bandwidth_gbs
from quench.datasets import load_humaneval
from quench.engine.kernels import native, quant
from quench.engine.backend import QuenchBackend
from quench.engine.config import EngineConfig
from quench.engine.kernels.quant import QuantLinear
from quench.engine.types import GenerationRequest, SamplingParams
from quench.models import encode_prompt, load_model


def step_weight_bytes(runner) -> int:
    """Bytes of the weights one decode step reads: each projection and the head once."""
    total = 0
    for linear in [runner.lm_head, *runner._projections()]:
        total += linear.nbytes if isinstance(linear, QuantLinear) else linear.out_features * linear.weight.shape[-1] * linear.weight.element_size()
    return total


def kernel_rates(gguf_weights, repeats: int = 50) -> None:
    """quant_gemm_f32 (gguf) and quant_gemm_x8 (gguf-int8) alone on the preset's own tensors, one thread: CPU seconds
    of this thread per call (time.thread_time, so time the thread spends descheduled on a busy machine does not
    count)."""
    tensors = gguf_weights.tensors
    cases = {"layer 3 gate/up (Q4_1)": [tensors["model.layers.3.mlp.gate_proj.weight"], tensors["model.layers.3.mlp.up_proj.weight"]],
             "layer 3 down (Q4_1)": [tensors["model.layers.3.mlp.down_proj.weight"]],
             "head (Q8_0)": [tensors["lm_head.weight"]]}
    torch.set_num_threads(1)
    print("| product | rows | gguf CPU us / call | gguf-int8 CPU us / call | gguf / gguf-int8 |")
    print("|---|---:|---:|---:|---:|")
    for case, weights in cases.items():
        for rows in (1, 8, 16, 64, 128):  # 64 and 128: a large batch's and a prefill's rows
            x = torch.randn(rows, weights[0].in_features, generator=torch.Generator().manual_seed(0))
            calls = max(3, repeats * 1536 // sum(w.out_features for w in weights))
            products = {"gguf": QuantLinear(weights, every_row=True, mode="gguf"), "gguf-int8": QuantLinear(weights, mode="gguf-int8")}
            seconds = {}
            for name, product in products.items():
                product(x)
                start = time.thread_time()
                for _ in range(calls):
                    product(x)
                seconds[name] = (time.thread_time() - start) / calls
            f32, x8 = seconds["gguf"], seconds["gguf-int8"]
            print(f"| {case} | {rows} | {f32 * 1e6:.0f} | {x8 * 1e6:.0f} | {f32 / x8:.2f}x |")


def layer_sweep(loaded, gguf_weights, repeats: int = 5) -> None:
    """Every projection of the 30 layers once in turn (the head apart), as a decode step or a prefill runs them, at
    1, 8 and 179 rows on one thread: the sweep reads more than the last-level cache holds, so each product finds its
    weights cold. CPU seconds of this thread per sweep (time.thread_time), the best of `repeats`."""
    torch.set_num_threads(1)
    runner = backend(loaded, gguf_weights, "gguf-int8", 1).runner
    linears = [linear for layer in runner.layers for linear in (layer.qkv, layer.o, layer.gate_up, layer.down)]
    megabytes = sum(linear.nbytes for linear in linears) / 1e6
    floor = megabytes / read_bandwidth_gbs()  # ms to read the sweep's bytes once at this thread's bandwidth
    print(f"| all layers, cold ({megabytes:.0f} MB; read floor {floor:.2f} ms) | rows | gguf-int8 CPU ms / sweep | head CPU ms / call |")
    print("|---|---:|---:|---:|")
    generator = torch.Generator().manual_seed(0)
    for rows in (1, 8, 179):
        inputs = {width: torch.randn(rows, width, generator=generator) for width in {l.weights[0].in_features for l in linears}}
        best, head = float("inf"), float("inf")
        for _ in range(repeats):
            start = time.thread_time()
            for linear in linears:
                linear(inputs[linear.weights[0].in_features])
            middle = time.thread_time()
            runner.lm_head(inputs[runner.lm_head.weights[0].in_features])
            best, head = min(best, middle - start), min(head, time.thread_time() - middle)
        print(f"| all layers | {rows} | {best * 1e3:.2f} | {head * 1e3:.2f} |")


def agreement(folders: list[str], tokens: int = 64) -> None:
    """Per pair of run folders: problems whose first `tokens` greedy tokens agree, of those both answered."""
    import itertools
    import json
    from pathlib import Path

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(load_model().source, local_files_only=True)
    answers = {}
    for folder in folders:
        rows = (json.loads(line) for line in (Path(folder) / "samples.jsonl").read_text().splitlines())
        answers[folder] = {row["task_id"]: tuple(tokenizer(row["raw"])["input_ids"][:tokens]) for row in rows}
    print(f"| run A | run B | same first {tokens} tokens |")
    print("|---|---|---:|")
    for a, b in itertools.combinations(folders, 2):
        common = sorted(answers[a].keys() & answers[b].keys())
        if not common:  # runs of different benchmarks
            continue
        same = sum(answers[a][task] == answers[b][task] for task in common)
        print(f"| {a} | {b} | {same}/{len(common)} = {same / max(len(common), 1):.1%} |")


# gguf-int8 with every layer of a step in Python (the plan's C layer loop off): what the loop in C saves
PYTHON_LAYERS = "gguf-int8-python"


def backend(loaded, gguf_weights, weights: str, batch_size: int) -> QuenchBackend:
    """An engine over `loaded` with weights "dequantized" (its parameters), "gguf" or "gguf-int8" (the blocks), or
    PYTHON_LAYERS."""
    model, mode = loaded.model, "gguf-int8" if weights == PYTHON_LAYERS else weights
    model.quench_gguf_weights = replace(gguf_weights, mode=mode) if mode in quant.MODES else None
    built = QuenchBackend(model, loaded.tokenizer, EngineConfig(batch_size=batch_size))
    model.quench_gguf_weights = gguf_weights
    if weights == PYTHON_LAYERS:
        built.runner.plan = replace(built.runner.plan, c_layers=False)
    return built


def timed(backend: QuenchBackend, requests, new_tokens: int) -> tuple[float, dict]:
    sampling = SamplingParams(max_new_tokens=new_tokens, ignore_eos=True)
    start = time.perf_counter()
    results = {r.key: tuple(r.token_ids) for r in backend.generate(requests, sampling)}
    return time.perf_counter() - start, results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--kernels", action="store_true", help="only the products alone, in CPU time per call")
    parser.add_argument("--systems", default="bfloat16,gguf,gguf-int8",
                        help=f"comma-separated: bfloat16, dequantized (float32), gguf, gguf-int8, {PYTHON_LAYERS} (the "
                             "layers in Python, not the C loop)")
    parser.add_argument("--agreement", nargs="+", metavar="DIR", help="`quench run --out` folders to compare (no timing)")
    args = parser.parse_args()
    if args.agreement:
        agreement(args.agreement)
        return
    names = args.systems.split(",")
    known = {"bfloat16", "dequantized", *quant.MODES, PYTHON_LAYERS}
    if not set(names) <= known:
        parser.error(f"--systems: unknown {sorted(set(names) - known)}")

    loaded = load_model(weights="gguf")
    bf16 = load_model(dtype="bfloat16") if "bfloat16" in names else None
    gguf_weights = quant.gguf_weights_of(loaded.model)
    problems = load_humaneval()[: max(args.batch_sizes)]
    result = native.build_result()
    print(f"native build: {result.march}, quant level {result.library.quant_level()}; torch {torch.__version__}")
    if args.kernels:
        kernel_rates(gguf_weights)
        layer_sweep(loaded, gguf_weights)
        return
    print("| weights | batch | threads | bytes / step | floor tok/s | decode tok/s | prefill + 1st token s | same tokens |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for threads in args.threads:
        torch.set_num_threads(threads)
        bandwidth = read_bandwidth_gbs()
        for batch_size in args.batch_sizes:
            requests = [GenerationRequest(p.task_id, encode_prompt(loaded, p.prompt)) for p in problems[:batch_size]]
            systems = {name: QuenchBackend(bf16.model, bf16.tokenizer, EngineConfig(batch_size=batch_size)) if name == "bfloat16"
                       else backend(loaded, gguf_weights, name, batch_size) for name in names}
            best = {weights: (float("inf"), float("inf")) for weights in systems}
            tokens = {}
            for _ in range(args.repeats):
                for weights, system in systems.items():
                    first, _ = timed(system, requests, 1)
                    whole, tokens[weights] = timed(system, requests, args.max_new_tokens)
                    best[weights] = (min(best[weights][0], whole - first), min(best[weights][1], first))
            for weights, system in systems.items():
                step_bytes = step_weight_bytes(system.runner)
                decode = batch_size * (args.max_new_tokens - 1) / best[weights][0]
                floor = batch_size * bandwidth * 1e9 / step_bytes
                print(f"| {weights} | {batch_size} | {threads} | {step_bytes / 2**20:.1f} MiB | {floor:.0f} | {decode:.1f} | "
                      f"{best[weights][1]:.3f} | {tokens[weights] == tokens[names[0]]} |")
        print(f"<!-- read bandwidth at {threads} thread(s): {bandwidth:.1f} GB/s -->")


if __name__ == "__main__":
    main()
