"""How often quench's greedy tokens are llama.cpp's own on the same GGUF file, per quench weights mode.

For the first --prompts HumanEval prompts in the chat template, quench tokenizes each prompt once and both systems
get those token ids (no tokenizer differences): llama.cpp through llama-cpp-python (benchmarks/llamacpp_worker.py,
its own virtual environment) and quench's engine with its defaults on `load_model(preset, weights=MODE)` for each
--weights MODE (any name `load_model` accepts). Each writes --tokens greedy tokens, EOS ignored. Printed per mode:
the share of prompts whose tokens are identical, the mean common-prefix length, and where the first differing
token falls.

    python benchmarks/llamacpp_agreement.py --llamacpp-python ~/.venvs/llamacpp/bin/python \\
        --llama-lib /path/to/llama.cpp/build/bin --weights dequantized gguf --prompts 20
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from peer_backends import LLAMA_BIN_ENV, LLAMACPP_ENV, PeerSetup, llamacpp_backend
from peer_client import check_python
from quench.datasets import load_benchmark
from quench.engine.backend import QuenchBackend
from quench.engine.config import EngineConfig
from quench.engine.types import GenerationRequest, SamplingParams
from quench.errors import QuenchError
from quench.models import DEFAULT_PRESET, PRESETS, encode_prompt, load_model
from quench.models.loading import check_weights
from quench.models.presets import preset_gguf_parts


@dataclass(frozen=True)
class Agreement:
    """One weights mode's greedy tokens against llama.cpp's, over the prompts."""

    prompts: int
    identical: int  # prompts whose tokens are all the same
    mean_prefix: float  # tokens before the first difference, averaged over the prompts
    prefixes: tuple[int, ...]  # per prompt, in order

    @property
    def identical_share(self) -> float:
        return self.identical / self.prompts if self.prompts else 0.0


def common_prefix(ours: tuple[int, ...], theirs: tuple[int, ...]) -> int:
    """How many leading tokens the two sequences share."""
    for index, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            return index
    return min(len(ours), len(theirs))


def agreement(ours: list[tuple[int, ...]], theirs: list[tuple[int, ...]]) -> Agreement:
    """Prompt by prompt (the same order in both lists): identical sequences and common-prefix lengths."""
    if len(ours) != len(theirs):
        raise ValueError(f"{len(ours)} sequences against {len(theirs)}")
    prefixes = tuple(common_prefix(a, b) for a, b in zip(ours, theirs))
    identical = sum(a == b for a, b in zip(ours, theirs))
    return Agreement(len(ours), identical, statistics.fmean(prefixes) if prefixes else 0.0, prefixes)


def greedy(backend, requests: list[GenerationRequest], tokens: int) -> list[tuple[int, ...]]:
    """Each request's first `tokens` greedy tokens, EOS ignored, in the requests' order."""
    sampling = SamplingParams(temperature=0.0, max_new_tokens=tokens, ignore_eos=True)
    by_key = {r.key: tuple(r.token_ids) for r in backend.generate(requests, sampling)}
    return [by_key[r.key] for r in requests]


def quench_tokens(weights: str, requests: list[GenerationRequest], tokens: int, batch_size: int) -> list[tuple[int, ...]]:
    loaded = load_model(DEFAULT_PRESET, weights=weights)
    backend = QuenchBackend(loaded.model, loaded.tokenizer, EngineConfig(batch_size=batch_size))
    return greedy(backend, requests, tokens)


def check_arguments(args: argparse.Namespace) -> None:
    """Every input before anything loads; ValueError or QuenchError naming the one that is wrong."""
    args.llamacpp_python = check_python(args.llamacpp_python, "--llamacpp-python", "llama_cpp")
    if args.llamacpp_python is None:
        raise ValueError(f"--llamacpp-python: not given (nor ${LLAMACPP_ENV}): the llama_cpp environment's python")
    if args.llama_lib is not None and not Path(args.llama_lib, "libllama.so").is_file():
        raise ValueError(f"--llama-lib: {args.llama_lib} holds no libllama.so")
    for name, value in (("--prompts", args.prompts), ("--tokens", args.tokens), ("--batch-size", args.batch_size)):
        if value < 1:
            raise ValueError(f"{name}: must be at least 1, got {value}")
    for weights in args.weights:
        check_weights(weights, "auto", DEFAULT_PRESET)
    parts = preset_gguf_parts(PRESETS[DEFAULT_PRESET])
    if len(parts) != 1:
        raise ValueError(f"the default preset's GGUF comes in {len(parts)} parts; llama.cpp needs one file")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llamacpp-python", default=os.environ.get(LLAMACPP_ENV),
                        help=f"the Python of a virtual environment with the llama_cpp package (default: ${LLAMACPP_ENV})")
    parser.add_argument("--llama-lib", default=os.environ.get(LLAMA_BIN_ENV),
                        help=f"a directory holding libllama.so built from the same sources (default: ${LLAMA_BIN_ENV})")
    parser.add_argument("--weights", nargs="+", default=["dequantized", "gguf"],
                        help="quench weights modes, each passed to load_model(weights=...) (default: %(default)s)")
    parser.add_argument("--prompts", type=int, default=20, help="the first this many prompts")
    parser.add_argument("--tokens", type=int, default=64, help="greedy tokens per prompt, EOS ignored")
    parser.add_argument("--benchmark", default="humaneval", help="whose prompts (its test split)")
    parser.add_argument("--batch-size", type=int, default=8, help="quench's engine batch size")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    try:
        check_arguments(args)
    except (ValueError, QuenchError) as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    torch.set_num_threads(args.threads)
    gguf = preset_gguf_parts(PRESETS[DEFAULT_PRESET])[0]
    reference = load_model(DEFAULT_PRESET)  # the tokenizer and chat template: the same ids for every system
    requests = [GenerationRequest(p.task_id, encode_prompt(reference, p.prompt))
                for p in load_benchmark(args.benchmark)[: args.prompts]]
    peer = llamacpp_backend(PeerSetup(gguf, llamacpp_python=args.llamacpp_python,
                                      llama_bin=Path(args.llama_lib) if args.llama_lib else None), args.threads)
    try:
        theirs = greedy(peer, requests, args.tokens)
    finally:
        peer.close()
    print(f"{gguf.name}: {len(requests)} {args.benchmark} prompts, the first {args.tokens} greedy tokens, EOS ignored")
    print("| quench weights | identical to llama.cpp | mean common prefix (tokens) | first difference (median, min) |")
    print("|---|---:|---:|---:|")
    for weights in args.weights:
        result = agreement(quench_tokens(weights, requests, args.tokens, args.batch_size), theirs)
        differing = [p for p in result.prefixes if p < args.tokens]
        where = f"{statistics.median(differing):.0f}, {min(differing)}" if differing else "–"
        print(f"| {weights} | {result.identical}/{result.prompts} ({result.identical_share:.0%}) | "
              f"{result.mean_prefix:.1f} / {args.tokens} | {where} |")


if __name__ == "__main__":
    main()
