"""Two revisions of the native kernels in one engine, side by side: a kernel change's effect on generation.

    python benchmarks/native_revisions.py                          # HEAD's kernels against the working tree's
    python benchmarks/native_revisions.py --base HEAD~3 --batch-size 8 --threads 2

The base revision's `csrc/` (git archive) and the working tree's are built for this CPU's level, each into a
temporary cache, and loaded into one process. One engine (the CLI's weights, `--weights auto`) then alternates
between them generation by generation (the order flips every round, so drift and neighbours' load fall on both):
greedy, --max-new-tokens per row with EOS ignored, the first HumanEval prompts in the chat template, each batch
once per round. Printed: the median wall time of each, the median of the per-generation ratios, and the time
to first token (one prompt, one token) the same way. Every generation's tokens are checked equal between the
two builds: a kernel change must not change a bit. Both revisions' quench_native.h must declare the same
functions (the Python side is the working tree's).
"""

from __future__ import annotations

import argparse
import io
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import torch

from quench.datasets import load_humaneval
from quench.engine.backend import QuenchBackend
from quench.engine.config import EngineConfig
from quench.engine.kernels import native, native_build
from quench.engine.types import GenerationRequest, SamplingParams
from quench.models import encode_prompt, load_model

CSRC_IN_REPO = "src/quench/engine/kernels/csrc"


def revision_archive(revision: str) -> bytes:
    """The kernels' C sources at a git revision as a tar archive; ValueError (git's words) where git lacks it."""
    root = Path(native_build.CSRC).resolve().parents[4]
    done = subprocess.run(["git", "-C", str(root), "archive", revision, CSRC_IN_REPO], capture_output=True)
    if done.returncode != 0:
        raise ValueError(done.stderr.decode().strip().splitlines()[-1] if done.stderr.strip() else "git archive failed")
    return done.stdout


def extract_sources(archive: bytes, into: Path) -> Path:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into / CSRC_IN_REPO


def build_from(csrc: Path, cache: Path) -> native_build.BuildResult:
    """The kernels of one source directory, built for this CPU into cache."""
    saved = native_build.CSRC, native_build.HEADER
    native_build.CSRC, native_build.HEADER = csrc, csrc / "quench_native.h"
    try:
        result = native_build.build(cache)
    finally:
        native_build.CSRC, native_build.HEADER = saved
    if result.library is None:
        sys.exit(f"error: the kernels of {csrc} did not build: {result.reason}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default="HEAD", help="git revision whose kernels are compared (default HEAD)")
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--speculate", default="none", help="the engine's drafter (default none)")
    args = parser.parse_args()
    for name in ("batch_size", "threads", "max_new_tokens", "prompts", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    try:
        archive = revision_archive(args.base)
    except ValueError as error:
        parser.error(f"--base {args.base}: {error}")
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        base = build_from(extract_sources(archive, Path(tmp) / "base"), Path(tmp) / "base-cache")
        tree = build_from(native_build.CSRC, Path(tmp) / "tree-cache")
        builds = {args.base: base, "working tree": tree}
        current = [base]
        native.build_result = lambda: current[0]  # every kernel call looks its library up here
        loaded = load_model(weights="auto")
        backend = QuenchBackend(loaded.model, loaded.tokenizer, EngineConfig(batch_size=args.batch_size, drafter=args.speculate))
        requests = [GenerationRequest(p.task_id, encode_prompt(loaded, p.prompt)) for p in load_humaneval()[: args.prompts]]
        list(backend.generate(requests[:1], SamplingParams(max_new_tokens=8)))
        sampling = SamplingParams(max_new_tokens=args.max_new_tokens, ignore_eos=True)
        walls = {name: [] for name in builds}
        firsts = {name: [] for name in builds}
        for round_ in range(args.rounds):
            order = list(builds) if round_ % 2 == 0 else list(builds)[::-1]
            for start in range(0, len(requests), args.batch_size):
                batch = requests[start : start + args.batch_size]
                tokens = {}
                for name in order:
                    current[0] = builds[name]
                    began = time.perf_counter()
                    list(backend.generate(batch[:1], SamplingParams(max_new_tokens=1)))
                    firsts[name].append(time.perf_counter() - began)
                    began = time.perf_counter()
                    tokens[name] = sorted((r.key, tuple(r.token_ids)) for r in backend.generate(batch, sampling))
                    walls[name].append(time.perf_counter() - began)
                if len(set(map(tuple, tokens.values()))) != 1:
                    sys.exit(f"error: the two builds gave different tokens on {[r.key for r in batch]}")
    names = list(builds)
    rows = args.batch_size * args.max_new_tokens
    print(f"batch {args.batch_size}, {args.threads} thread(s), speculate {args.speculate}, {args.prompts} prompts x "
          f"{args.rounds} rounds, {args.max_new_tokens} new tokens per row (EOS ignored); identical tokens throughout")
    for name in names:
        wall = statistics.median(walls[name])
        print(f"  {name:>14}: {rows / wall:7.1f} tokens/s (median {wall:.3f} s), first token {1000 * statistics.median(firsts[name]):.0f} ms")
    ratio = statistics.median(a / b for a, b in zip(walls[names[0]], walls[names[1]]))
    first = statistics.median(a / b for a, b in zip(firsts[names[0]], firsts[names[1]]))
    print(f"  working tree / {args.base}: {ratio:.3f}x tokens/s, {first:.3f}x first-token speed (median of pairs)")


if __name__ == "__main__":
    main()
