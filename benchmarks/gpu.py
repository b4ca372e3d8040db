"""GPU throughput: quench's engine, regular and speculative (the target as its own draft), against Hugging Face
`generate`, on a randomly initialised Llama-shaped model.

    python benchmarks/gpu.py --preset 1b --rounds 3                 # on a CUDA machine (also 3b, 7b)
    python benchmarks/gpu.py --device cpu --preset tiny --rounds 1  # the whole script end to end on CPU (~12 CPU-s)

Presets take their shapes (hidden size, layers, heads, key/value heads, MLP width, vocabulary) from
Llama-3.2-1B, Llama-3.2-3B and Llama-2-7B; the weights are random (seeded), built from the config on the
device, so nothing is downloaded and no tokenizer is needed: the prompts are random token ids (seeded).
Every sample has exactly --max-new-tokens tokens (EOS ends nothing). Greedy decoding, at each batch size:

- `hf`: `model.generate` on consecutive batches of the prompts (all prompts have the same length: no padding);
- `quench`: the engine's regular decoding (`QuenchBackend`, `drafter="none"`);
- `quench-self-draft`: speculative decoding with the target model as the draft model (`drafter="draft"`,
  `draft_stop=0.0`, never paused for the number of live rows): every greedy draft token is the target's own
  choice, so this is acceptance's upper bound (a draft forward costs a target forward: it bounds acceptance,
  not speed). In bfloat16 a near-tie may still flip between a one-token draft step and a wider verification
  step, which the acceptance column shows.

Each round runs the three back to back on the same prompts (the order rotates from round to round); a ratio is
taken within its round, and the table shows each round's ratio and the median. tokens/s: generated tokens per
wall second, prompt prefills included, the device synchronised before each clock read.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from quench.engine.backend import QuenchBackend
from quench.engine.config import EngineConfig
from quench.engine.kv_cache import KVCache
from quench.engine.runners.protocol import Runner
from quench.engine.types import GenerationRequest, SamplingParams

METHODS = ("hf", "quench", "quench-self-draft")
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}
FIRST_ID = 3  # prompt ids start here: 0-2 are the config's pad, BOS and EOS


@dataclass(frozen=True)
class ModelShape:
    """A Llama decoder's shape; the weights are random."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int
    tie_word_embeddings: bool
    rope_theta: float
    max_position_embeddings: int = 4096


PRESETS = {
    "tiny": ModelShape(64, 128, 2, 4, 2, 512, False, 10000.0),  # the CPU check
    "1b": ModelShape(2048, 8192, 16, 32, 8, 128256, True, 500000.0),  # Llama-3.2-1B
    "3b": ModelShape(3072, 8192, 28, 24, 8, 128256, True, 500000.0),  # Llama-3.2-3B
    "7b": ModelShape(4096, 11008, 32, 32, 32, 32000, False, 10000.0),  # Llama-2-7B
}


@dataclass(frozen=True)
class Settings:
    preset: str
    device: str
    dtype: str
    batch_sizes: tuple[int, ...]
    prompts: int
    prompt_tokens: int
    max_new_tokens: int
    rounds: int
    seed: int
    threads: int | None


@dataclass
class Run:
    """One method's pass over every prompt at one batch size."""

    tokens: int
    seconds: float
    outputs: list[tuple[int, ...]]  # generated token ids, in prompt order
    drafted: int = 0
    accepted: int = 0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds


@dataclass
class Cell:
    """Every round of one (batch size, method)."""

    runs: list[Run] = field(default_factory=list)


class BadInput(ValueError):
    """An argument the script cannot run with; main prints it as one `error:` line and exits 2."""


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise BadInput(message)


class IdsTokenizer:
    """What the engine asks of a tokenizer when prompts are token ids already: no EOS of its own, and a
    decode for the results' text (the ids, space-separated)."""

    eos_token_id = None

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return " ".join(str(t) for t in token_ids)


class DeviceRunner:
    """A `Runner` whose model lives on another device than the engine's bookkeeping.

    The decode loop, the drafters and verification keep token ids, positions and counts on the CPU; this moves
    each forward's inputs to the model's device and its outputs (token ids, logits) back. Greedy steps return
    token ids only, so a step moves (B, 1 + K) ids. On the CPU every move is a no-op.
    """

    def __init__(self, inner: Runner, device: torch.device) -> None:
        self.inner = inner
        self.device = device
        self.vocab_size = inner.vocab_size

    def new_cache(self, batch: int, max_len: int) -> KVCache:
        return self.inner.new_cache(batch, max_len)

    def prefill_kernel(self, tokens: int) -> str | None:
        return self.inner.prefill_kernel(tokens)

    def forward(self, cache: KVCache, tokens: torch.Tensor, start: torch.Tensor, logits_at: torch.Tensor | None = None,
                counts: torch.Tensor | None = None, hidden: bool = False) -> Any:
        out = self.inner.forward(cache, self._to(tokens), self._to(start), self._to(logits_at), counts, hidden)
        return tuple(t.cpu() if t is not None else None for t in out) if isinstance(out, tuple) else out.cpu()

    def packed_logits(self, cache: KVCache, tokens: torch.Tensor, start: torch.Tensor,
                      counts: torch.Tensor | None = None) -> torch.Tensor:
        return self.inner.packed_logits(cache, self._to(tokens), self._to(start), counts).cpu()

    def greedy_tokens(self, cache: KVCache, tokens: torch.Tensor, start: torch.Tensor,
                      counts: torch.Tensor | None = None) -> torch.Tensor:
        return self.inner.greedy_tokens(cache, self._to(tokens), self._to(start), counts).cpu()  # (B, S)

    def _to(self, tensor: torch.Tensor | None) -> torch.Tensor | None:
        return None if tensor is None else tensor.to(self.device)


def parse_settings(argv: Sequence[str] | None) -> Settings:
    parser = OneLineParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="1b", help=f"model shape: {', '.join(PRESETS)} (default 1b)")
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (default cuda)")
    parser.add_argument("--dtype", default="bfloat16", help="bfloat16 (default) or float32")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--prompts", type=int, default=8, help="random prompts, the same for every method")
    parser.add_argument("--prompt-tokens", type=int, default=128, help="tokens per prompt")
    parser.add_argument("--max-new-tokens", type=int, default=128, help="tokens generated per prompt")
    parser.add_argument("--rounds", type=int, default=3, help="paired rounds (every method once per round)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the weights and the prompts")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = parser.parse_args(argv)
    settings = Settings(args.preset, args.device, args.dtype, tuple(args.batch_sizes), args.prompts,
                        args.prompt_tokens, args.max_new_tokens, args.rounds, args.seed, args.threads)
    check_settings(settings)
    return settings


def check_settings(settings: Settings) -> None:
    """BadInput for the first setting the run cannot use, before anything is built."""
    if settings.preset not in PRESETS:
        raise BadInput(f"--preset {settings.preset!r}: choose one of {', '.join(PRESETS)}")
    if settings.dtype not in DTYPES:
        raise BadInput(f"--dtype {settings.dtype!r}: choose one of {', '.join(DTYPES)}")
    for flag, value in (("--prompts", settings.prompts), ("--prompt-tokens", settings.prompt_tokens),
                        ("--max-new-tokens", settings.max_new_tokens), ("--rounds", settings.rounds),
                        ("--batch-sizes", min(settings.batch_sizes)), ("--threads", settings.threads or 1)):
        if value < 1:
            raise BadInput(f"{flag} must be at least 1, got {value}")
    limit = PRESETS[settings.preset].max_position_embeddings
    if settings.prompt_tokens + settings.max_new_tokens > limit:
        raise BadInput(f"--prompt-tokens + --max-new-tokens is {settings.prompt_tokens + settings.max_new_tokens}, "
                       f"past the {settings.preset} model's {limit} positions")
    check_device(settings.device)


def check_device(device: str) -> None:
    try:
        kind = torch.device(device).type
    except RuntimeError:
        raise BadInput(f"--device {device!r}: not a device name (cuda, cuda:N or cpu)") from None
    if kind not in ("cuda", "cpu"):
        raise BadInput(f"--device {device!r}: this benchmark runs on cuda or cpu")
    if kind == "cuda" and not torch.cuda.is_available():
        raise BadInput(f"--device {device}: CUDA is not available to this torch build ({torch.__version__}); "
                       "use --device cpu --preset tiny for the CPU check")
    index = torch.device(device).index
    if kind == "cuda" and index is not None and index >= torch.cuda.device_count():
        raise BadInput(f"--device {device}: only {torch.cuda.device_count()} CUDA device(s)")


def build_model(shape: ModelShape, device: str, dtype: torch.dtype, seed: int) -> LlamaForCausalLM:
    """The preset's Llama with random weights (seeded), built on the device in the dtype."""
    config = LlamaConfig(
        vocab_size=shape.vocab_size, hidden_size=shape.hidden_size, intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_hidden_layers, num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_key_value_heads, max_position_embeddings=shape.max_position_embeddings,
        rope_theta=shape.rope_theta, tie_word_embeddings=shape.tie_word_embeddings,
        pad_token_id=0, bos_token_id=1, eos_token_id=2,
    )
    torch.manual_seed(seed)  # seeds the CUDA generators too
    with torch.device(device):
        model = LlamaForCausalLM._from_config(config, dtype=dtype)
    return model.eval()


def random_prompts(count: int, length: int, vocab_size: int, seed: int) -> list[tuple[int, ...]]:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(FIRST_ID, vocab_size, (count, length), generator=generator)  # (P, T)
    return [tuple(row) for row in ids.tolist()]


def quench_backend(model: LlamaForCausalLM, batch_size: int, self_draft: bool) -> QuenchBackend:
    """The engine at this batch size: regular, or drafting with the model itself (its bits unchanged: no int8;
    drafts of any length, at any number of live rows)."""
    config = EngineConfig(batch_size=batch_size, drafter="draft" if self_draft else "none", draft_stop=0.0,
                          draft_int8=False, draft_max_rows=0)
    backend = QuenchBackend(model, IdsTokenizer(), config, draft_model=model if self_draft else None)
    device = model.device
    backend.runner = DeviceRunner(backend.runner, device)
    if backend.draft_runner is not None:
        backend.draft_runner = DeviceRunner(backend.draft_runner, device)
    return backend


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_quench(backend: QuenchBackend, prompts: list[tuple[int, ...]], new_tokens: int, device: torch.device) -> Run:
    requests = [GenerationRequest(key=str(i), prompt_ids=prompt) for i, prompt in enumerate(prompts)]
    sampling = SamplingParams(temperature=0.0, max_new_tokens=new_tokens, ignore_eos=True)
    synchronize(device)
    begin = time.perf_counter()
    results = list(backend.generate(requests, sampling))
    synchronize(device)
    seconds = time.perf_counter() - begin
    outputs = [r.token_ids for r in sorted(results, key=lambda r: int(r.key))]
    stats = backend.last_stats
    return Run(sum(map(len, outputs)), seconds, outputs, stats.drafted, stats.accepted)


@torch.inference_mode()
def run_hf(model: LlamaForCausalLM, prompts: list[tuple[int, ...]], new_tokens: int, batch_size: int) -> Run:
    outputs: list[tuple[int, ...]] = []
    synchronize(model.device)
    begin = time.perf_counter()
    for first in range(0, len(prompts), batch_size):
        ids = torch.tensor(prompts[first : first + batch_size], device=model.device)  # (B, T)
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                             do_sample=False, temperature=None, top_p=None, top_k=None, eos_token_id=[],
                             pad_token_id=0)  # (B, T + new)
        outputs.extend(tuple(row) for row in out[:, ids.shape[1] :].tolist())
    synchronize(model.device)
    seconds = time.perf_counter() - begin
    return Run(sum(map(len, outputs)), seconds, outputs)


def measure_batch(model: LlamaForCausalLM, settings: Settings, batch_size: int,
                  prompts: list[tuple[int, ...]]) -> dict[str, Cell]:
    """Every method at one batch size, `settings.rounds` paired rounds, after one short warm-up run each."""
    backends = {"quench": quench_backend(model, batch_size, self_draft=False),
                "quench-self-draft": quench_backend(model, batch_size, self_draft=True)}

    def once(method: str, chosen: list[tuple[int, ...]], new_tokens: int) -> Run:
        if method == "hf":
            run = run_hf(model, chosen, new_tokens, batch_size)
        else:
            run = run_quench(backends[method], chosen, new_tokens, model.device)
        if run.tokens != len(chosen) * new_tokens:  # the rates compare the same work
            raise RuntimeError(f"{method} generated {run.tokens} tokens, not {len(chosen)} x {new_tokens}")
        return run

    for method in METHODS:  # CUDA context, kernels and caches, outside the clock
        once(method, prompts[:batch_size], min(8, settings.max_new_tokens))
    cells = {method: Cell() for method in METHODS}
    for round_index in range(settings.rounds):
        shift = round_index % len(METHODS)
        for method in METHODS[shift:] + METHODS[:shift]:
            cells[method].runs.append(once(method, prompts, settings.max_new_tokens))
    return cells


def ratios(cell: Cell, against: Cell) -> list[float]:
    return [run.tokens_per_s / base.tokens_per_s for run, base in zip(cell.runs, against.runs)]


def shown(values: list[float], unit: str = "x") -> str:
    rounds = ", ".join(f"{v:.2f}" for v in values)
    return f"{rounds} ({statistics.median(values):.2f}{unit})" if len(values) > 1 else f"{values[0]:.2f}{unit}"


def same_rows(cell: Cell, against: Cell) -> str:
    mine, theirs = cell.runs[-1].outputs, against.runs[-1].outputs
    return f"{sum(a == b for a, b in zip(mine, theirs))}/{len(theirs)}"


def table(results: dict[int, dict[str, Cell]]) -> list[str]:
    lines = ["| batch | decoding | tokens/s: rounds (median) | vs hf: rounds (median) | vs quench: rounds (median) "
             "| accepted | greedy = hf | greedy = quench |",
             "|---|---|---|---|---|---|---|---|"]
    for batch_size, cells in results.items():
        hf, regular = cells["hf"], cells["quench"]
        for method, cell in cells.items():
            rates = [run.tokens_per_s for run in cell.runs]
            vs_hf = shown(ratios(cell, hf)) if method != "hf" else ""
            vs_regular = shown(ratios(cell, regular)) if method == "quench-self-draft" else ""
            drafted = sum(run.drafted for run in cell.runs)
            accepted = f"{sum(run.accepted for run in cell.runs) / drafted:.3f}" if drafted else ""
            equal_hf = same_rows(cell, hf) if method != "hf" else ""
            equal_regular = same_rows(cell, regular) if method == "quench-self-draft" else ""
            lines.append(f"| {batch_size} | {method} | {shown(rates, '')} | {vs_hf} | {vs_regular} | {accepted} "
                         f"| {equal_hf} | {equal_regular} |")
    return lines


def describe(settings: Settings, model: LlamaForCausalLM) -> str:
    shape = PRESETS[settings.preset]
    device = model.device
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{torch.get_num_threads()} CPU thread(s)"
    parameters = sum(p.numel() for p in model.parameters())
    size = f"{parameters / 1e9:.2f}B" if parameters >= 1e9 else f"{parameters / 1e6:.2f}M"
    return (f"preset {settings.preset}: hidden {shape.hidden_size}, {shape.num_hidden_layers} layers, "
            f"{shape.num_attention_heads} heads ({shape.num_key_value_heads} key/value), MLP {shape.intermediate_size}, "
            f"vocabulary {shape.vocab_size}, {size} parameters (random, seed {settings.seed}); "
            f"{settings.dtype} on {device} ({name}); {settings.prompts} prompts x {settings.prompt_tokens} tokens, "
            f"{settings.max_new_tokens} new tokens each, greedy; {settings.rounds} paired round(s)")


def main(argv: Sequence[str] | None = None) -> int:
    try:
        settings = parse_settings(argv)
    except BadInput as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if settings.threads is not None:
        torch.set_num_threads(settings.threads)
    shape = PRESETS[settings.preset]
    model = build_model(shape, settings.device, DTYPES[settings.dtype], settings.seed)
    prompts = random_prompts(settings.prompts, settings.prompt_tokens, shape.vocab_size, settings.seed)
    print(describe(settings, model), flush=True)
    results = {batch_size: measure_batch(model, settings, batch_size, prompts) for batch_size in settings.batch_sizes}
    print("\n".join(table(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
