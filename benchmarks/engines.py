"""One engine with T threads against T one-thread engine processes (`--engines`), side by side.

    python benchmarks/engines.py                                   # 2 threads: 1x2 vs 2x1, batch 8 and 32
    python benchmarks/engines.py --prompts 128 --batch-sizes 8 16 32 --rounds 3
    python benchmarks/engines.py --prompts 128 --batch-sizes 64 --max-new-tokens 256   # `quench robustness`'s batch

The prompts are what `quench robustness` generates for: HumanEval prompts and their ReCode
variants (every non-model transformation, seed 0), in the run's order, greedy, the default model
with the CLI's weights (`--weights auto`) and OpenMP wait, up to --max-new-tokens. Each configuration
generates the same prompts; rounds alternate the order of the configurations, so a shared machine's
load falls on all alike. Printed per configuration and round: wall seconds, generated tokens per
second, and the ratio to the first configuration of the same round; then the median ratio over
rounds. The configurations' answers are compared with the first's (identical text counts).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from quench.threads import prepare_openmp

prepare_openmp()  # the OpenMP wait `quench` sets before torch loads; the engine processes inherit it

from quench.cli.builders import weights_of  # noqa: E402 - after the wait policy is set
from quench.datasets.loading import load_humaneval  # noqa: E402
from quench.distributed import ModelSpec  # noqa: E402
from quench.distributed.local import LocalEngines  # noqa: E402
from quench.engine.config import EngineConfig  # noqa: E402
from quench.engine.types import GenerationRequest, SamplingParams  # noqa: E402
from quench.models import encode_prompt, format_prompt, load_model  # noqa: E402
from quench.perturbations.catalog import names  # noqa: E402
from quench.perturbations.pipeline import perturb_problems  # noqa: E402
from quench.robustness.pipeline import build_units, unique_prompts  # noqa: E402
from quench.runs.backends import BackendOptions, make_backend  # noqa: E402


def robustness_prompts(loaded, count: int) -> list[GenerationRequest]:
    """The first `count` distinct prompts of a robustness run over HumanEval (all categories, s = 1)."""
    problems = load_humaneval()[: max(1, count // 20 + 1)]
    made = perturb_problems(problems, names(["docstring", "function_name", "code_syntax", "code_format"],
                                            include_model_based=False), 1, validate_variants=False)
    units = build_units(problems, made.variants, lambda text: format_prompt(loaded, text))
    prompts = unique_prompts(units)[:count]
    return [GenerationRequest(p.task_id, encode_prompt(loaded, p.prompt), 1, ()) for p in prompts]


def timed(backend, requests: list[GenerationRequest], sampling: SamplingParams) -> tuple[float, int, dict[str, str]]:
    started = time.perf_counter()
    results = list(backend.generate(requests, sampling))
    return time.perf_counter() - started, sum(len(r.token_ids) for r in results), {r.key: r.text for r in results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--weights", default="auto", help="a GGUF model's weights, as `quench --weights` (default auto)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--max-new-tokens", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch-invariant", action="store_true", help="every configuration with --batch-invariant")
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    loaded = load_model(args.model, args.dtype, weights=args.weights)
    requests = robustness_prompts(loaded, args.prompts)
    sampling = SamplingParams(0.0, 1.0, 0, args.max_new_tokens, 0)
    configs: dict[str, object] = {}
    for batch in args.batch_sizes:
        options = BackendOptions(engine=EngineConfig(batch_size=batch, batch_invariant=args.batch_invariant))
        configs[f"1 engine x {args.threads} threads, batch {batch}"] = make_backend(loaded, options)
        spec = ModelSpec(args.model, args.dtype, prompt_format=loaded.prompt_format, backend=options,
                         weights=weights_of(loaded))
        engines = LocalEngines(spec, args.threads, 1)
        engines.wait_ready()
        configs[f"{args.threads} engines x 1 thread, batch {batch}"] = engines
    print(f"{len(requests)} prompts, greedy, up to {args.max_new_tokens} new tokens, {loaded.dtype}, "
          f"{weights_of(loaded)}, "
          f"{'batch-invariant' if args.batch_invariant else 'default'} kernels, "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    names_ = list(configs)
    ratios: dict[str, list[float]] = {name: [] for name in names_}
    reference: dict[str, str] | None = None
    for round_ in range(args.rounds):
        order = names_ if round_ % 2 == 0 else names_[::-1]
        walls = {}
        for name in order:
            wall, tokens, texts = timed(configs[name], requests, sampling)
            reference = reference or texts
            same = sum(texts[k] == reference[k] for k in reference)
            walls[name] = wall
            print(f"round {round_ + 1}  {name:<36} {wall:7.1f} s  {tokens / wall:6.1f} tok/s  "
                  f"same text as the first: {same}/{len(reference)}", flush=True)
        for name in names_:
            ratios[name].append(walls[names_[0]] / walls[name])
    print(f"\nspeed against '{names_[0]}' (median over {args.rounds} rounds):")
    for name in names_:
        print(f"  {name:<36} {statistics.median(ratios[name]):.2f}x")
    for backend in configs.values():
        if isinstance(backend, LocalEngines):
            backend.close()


if __name__ == "__main__":
    main()
