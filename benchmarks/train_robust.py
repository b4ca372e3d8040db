"""Held-out consistency of trained models: ALP logit distance and CE on MBPP validation pairs.

    OMP_NUM_THREADS=1 python benchmarks/train_robust.py smollm2-135m-instruct runs/ft-none runs/ft-alp

For each model: the first `--problems` MBPP validation problems (not used by a `--limit 150` run
on train), their validated code-syntax and function-name variants, one variant per problem
(seeded), and the mean D_ALP (docs/training.md) and target CE over the (nominal, variant) pairs.
A model trained with `alp` should show a smaller distance than one trained without it.
"""

from __future__ import annotations

import argparse
import random

import torch

from quench.datasets import load_mbpp
from quench.models import format_prompt, load_model
from quench.perturbations import names
from quench.training.batching import collate
from quench.training.config import DataSettings, LossWeights
from quench.training.data import Encoder, Item, build_examples, make_variants
from quench.training.objective import LogitsModule, compute_loss


def pair_metrics(model_name: str, problems: list, variants: list, max_length: int, dtype: str) -> tuple[int, float, float]:
    loaded = load_model(model_name, dtype=dtype, prompt_format="chat")
    encoder = Encoder(loaded.tokenizer, "chat", lambda text: format_prompt(loaded, text), masked=False)
    examples = build_examples(problems, variants, encoder, max_length)
    rng = random.Random(0)
    pairs = [Item(pair=rng.choice(e.variants)) for e in examples if e.variants]
    module = LogitsModule(loaded.model).eval()
    distance = ce = 0.0
    with torch.no_grad():
        for start in range(0, len(pairs), 4):
            chunk = pairs[start:start + 4]
            batch = collate(chunk, loaded.tokenizer.pad_token_id, 64, torch.Generator().manual_seed(0))
            parts = compute_loss(module, batch, frozenset({"alp"}), LossWeights())
            distance += parts.alp * len(chunk)
            ce += parts.ce * len(chunk)
    return len(pairs), distance / len(pairs), ce / len(pairs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--problems", type=int, default=40)
    parser.add_argument("--max-length", type=int, default=320)
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()
    problems = load_mbpp("validation")[: args.problems]
    transforms = tuple(names(["code_syntax", "function_name"], include_model_based=False))
    variants = make_variants(problems, DataSettings(transforms=transforms, validate=True))
    print(f"{'model':<40}{'pairs':>6}{'D_ALP':>9}{'CE':>9}")
    for name in args.models:
        count, distance, ce = pair_metrics(name, problems, variants, args.max_length, args.dtype)
        print(f"{name:<40}{count:>6}{distance:>9.4f}{ce:>9.4f}", flush=True)


if __name__ == "__main__":
    main()
