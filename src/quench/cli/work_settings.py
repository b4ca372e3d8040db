"""The engine settings `auto` stands for: engines, batch size and speculation chosen from the work and the machine.

`quench generate`, `run` and `robustness` default `--engines`, `--batch-size` and `--speculate` to `auto`; a number or
a drafter given on the command line is kept as it is. With batch invariance (the default wherever the kernels serve
the model) none of these choices changes a greedy answer: they only change how fast it comes.

- engines: one one-thread engine per torch thread on a CPU once every engine gets at least `MIN_ROWS_PER_ENGINE`
  samples and the machine's free memory holds a model copy per engine; one engine on a GPU, with --ray, with
  --time-budget, with another backend, or for a smaller run.
- batch size: the samples each engine decodes, rounded up to a power of two, between 8 and `MAX_AUTO_BATCH`: on a
  CPU a step's cost grows slower than its rows up to that size, and a batch never holds more slots than work.
- speculation: greedy runs draft (`hybrid`: prompt lookup, else the draft model shipped for the preset; `ngram`:
  prompt lookup alone where none is shipped), which is lossless; drafting pauses while more rows than
  `--draft-max-rows` are live, where a draft costs more than it saves. Runs on a GGUF's blocks with 8-bit
  activations (`--weights gguf-int8`, the default for GGUF models) draft with prompt lookup alone: their C layer loop
  makes a target step so short that a draft model's own steps cost what its accepted tokens save, while a looked-up
  draft costs only its verification (the measured draft length keeps it where it pays). Sampled runs do not draft: speculative
  sampling's acceptance test runs in PyTorch's arithmetic order, which differs between CPUs, so a sampled answer
  would depend on the machine.
"""

from __future__ import annotations

import argparse
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from quench.errors import QuenchError

log = logging.getLogger(__name__)

AUTO = "auto"
MIN_ROWS_PER_ENGINE = 128  # below this a second engine's model load and its run's tail (a few long answers on few
# rows) cost more than its share of the decoding saves
MIN_AUTO_BATCH = 8
MAX_AUTO_BATCH = 64  # past this a CPU step's cost grows with its rows (arithmetic-bound): no gain, more memory
MODEL_COPIES_PER_ENGINE = 3  # an engine's resident size over its weights' bytes (weights, KV cache, activations)


@dataclass(frozen=True)
class Work:
    """What a run asks of generation, known before the engine is built."""

    rows: int  # samples to generate (prompts x samples; an upper bound where variants may coincide)
    greedy: bool
    backend: str  # "quench", "hf" or "openai"
    device: str
    threads: int  # torch threads this run was given
    one_engine_only: bool  # --ray, --time-budget: the run needs a single local engine
    draft_shipped: bool  # a draft model is shipped for the model (a preset's)
    weight_bytes: int  # the loaded model's weights
    free_bytes: int  # the machine's available memory
    weights: str = "dequantized"  # what the projections read (`load_model`'s mode): gguf-int8 steps are too short to draft


@dataclass(frozen=True)
class EngineChoice:
    engines: int
    batch_size: int
    drafter: str

    def describe(self) -> str:
        engines = f"{self.engines} engines" if self.engines > 1 else "1 engine"
        return f"{engines}, batch {self.batch_size}, speculate {self.drafter}"


def choose_engines(work: Work) -> int:
    if work.backend != "quench" or work.device != "cpu" or work.one_engine_only or work.threads < 2:
        return 1
    by_rows = max(1, work.rows // MIN_ROWS_PER_ENGINE)
    by_memory = max(1, work.free_bytes // max(1, MODEL_COPIES_PER_ENGINE * work.weight_bytes))
    return max(1, min(work.threads, by_rows, by_memory))


def choose_batch_size(work: Work, engines: int) -> int:
    per_engine = -(-max(1, work.rows) // engines)
    size = MIN_AUTO_BATCH
    while size < per_engine and size < MAX_AUTO_BATCH:
        size *= 2
    return size


# Weights modes whose target step is so short that a draft model's own steps cost what its accepted tokens save
# (docs/benchmarks.md, "Speculation on the default path"): prompt lookup alone there
LOOKUP_ONLY_WEIGHTS = ("gguf-int8",)


def greedy_drafter(draft_shipped: bool, weights: str) -> str:
    """What greedy steps draft with on quench's engine: prompt lookup alone on LOOKUP_ONLY_WEIGHTS or where no draft
    is shipped, else the shipped draft with prompt lookup."""
    return "hybrid" if draft_shipped and weights not in LOOKUP_ONLY_WEIGHTS else "ngram"


def choose_drafter(work: Work) -> str:
    if work.backend != "quench" or not work.greedy:
        return "none"
    return greedy_drafter(work.draft_shipped, work.weights)


def choose(work: Work, engines: str, batch_size: str, drafter: str) -> EngineChoice:
    """The flags' values with each `auto` replaced by its choice for `work`."""
    chosen_engines = choose_engines(work) if engines == AUTO else int(engines)
    chosen_batch = choose_batch_size(work, chosen_engines) if batch_size == AUTO else int(batch_size)
    chosen_drafter = choose_drafter(work) if drafter == AUTO else drafter
    return EngineChoice(chosen_engines, chosen_batch, chosen_drafter)


def batch_size_value(text: str) -> str:
    """argparse type of --batch-size: `auto` or a positive number (kept as text until the work is known)."""
    if text == AUTO or (text.isdigit() and int(text) >= 1):
        return text
    raise argparse.ArgumentTypeError(f"must be a positive number or auto, got {text!r}")


def available_memory() -> int:
    """The machine's available memory in bytes (MemAvailable), or 0 where it cannot be read."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    pages = os.sysconf("SC_AVPHYS_PAGES") if hasattr(os, "sysconf") else 0
    return max(0, pages) * (os.sysconf("SC_PAGE_SIZE") if pages else 0)


def check_value(name: str, value: str) -> None:
    if value != AUTO and (not str(value).isdigit() or int(value) < 1):
        raise QuenchError(f"{name} must be a positive number or auto, got {value!r}")
