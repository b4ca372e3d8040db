"""The greedy tokens every CPU must give: the cases of `golden_tokens.json`, computed in this process.

Run as a script it prints the cases' tokens as JSON (`--cases` picks some), at whatever kernel level and PyTorch ISA
the environment sets (`QUENCH_NATIVE_MARCH`, `ATEN_CPU_CAPABILITY`, `ONEDNN_MAX_CPU_ISA`): tests/engine/test_golden.py
runs it once per level this machine can execute and compares each case with the file. `--write FILE` adds the
cases FILE lacks and never changes one it holds: an entry changes only by hand, in a commit that redefines its
mode's arithmetic and says why.

Each case: a model (the default preset as `quench run` loads it, bfloat16 and on its GGUF blocks in both modes, and
tiny models of each family and weight format, both GGUF modes), fixed prompts, 64 new tokens (EOS ignored), at batch 1,
at batch 8 and at batch 8 with n-gram speculation; a case named in ENGINE_SETTINGS runs with those engine settings too
(the KV caches' dtype). Batch invariance makes the three the same; each is kept, so a failure
says which one moved.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Callable

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]  # helpers.py (and `tests.helpers`) as a script too

NEW_TOKENS = 64
MODES = {"batch1": {"batch_size": 1}, "batch8": {"batch_size": 8}, "batch8-ngram": {"batch_size": 8, "drafter": "ngram"}}
CODE_PROMPTS = (
    'def add(a, b):\n    """Return the sum of a and b."""\n',
    "Write a python function to reverse a string.",
    "def is_prime(n):\n",
    'def fib(n):\n    """Return the n-th Fibonacci number."""\n',
    "Write a python function to find the first repeated character in a given string.",
    "def sort_list(xs):\n",
    "class Stack:\n",
    "Write a function to count the vowels of a string.",
)
CHAR_PROMPTS = ("def add(a, b):", "x = [", "print('hi')", "for i in range(10):", "a", "import os\n", "while True:", "# sort")


def _preset(dtype: str, weights: str = "dequantized") -> Callable[[], tuple[torch.nn.Module, object, list[tuple[int, ...]]]]:
    def build():
        from quench.models import encode_prompt, load_model

        loaded = load_model("smollm2-135m-instruct", dtype=dtype, weights=weights, notify=lambda _: None)
        return loaded.model, loaded.tokenizer, [tuple(encode_prompt(loaded, prompt)) for prompt in CODE_PROMPTS]

    return build


BLOCK_TYPES = ("Q4_0", "Q4_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K")
# cases whose engine runs with more than the mode's settings: bfloat16 KV caches under float32 models, on the float32
# layer loop (the preset's GGUF blocks, the default) and on the Python layer loop (the tiny head-64 model); the GGUF
# cases written with float32 caches keep them
ENGINE_SETTINGS = {
    "smollm2-135m-instruct/gguf-int8-kv-bfloat16": {"kv_cache": "bfloat16"},
    "llama-head64/float32-kv-bfloat16": {"kv_cache": "bfloat16"},
    "smollm2-135m-instruct/gguf": {"kv_cache": "float32"},
    "smollm2-135m-instruct/gguf-int8": {"kv_cache": "float32"},
    **{f"tiny-llama/gguf-{name}": {"kv_cache": "float32"} for name in BLOCK_TYPES},
    **{f"tiny-llama/gguf-int8-{name}": {"kv_cache": "float32"} for name in BLOCK_TYPES},
}
MODELS_VAR = "QUENCH_GOLDEN_MODELS"  # a folder of the tiny models, built once by the caller (`save_tiny_models`)


def _tiny(make: Callable[[], torch.nn.Module]) -> Callable[[], tuple[torch.nn.Module, object, list[tuple[int, ...]]]]:
    """A tiny model, from MODELS_VAR's folder where one is set: PyTorch draws random weights by other code at other
    ISA levels (its vectorised normal_), so a process held to a lower level loads the caller's instead of drawing."""
    def build():
        from helpers import CHARS, char_tokenizer

        ids = {c: i + 3 for i, c in enumerate(CHARS)}
        return make(), char_tokenizer(), [tuple(ids[c] for c in prompt) for prompt in CHAR_PROMPTS]

    return build


def _saved(name: str) -> Path | None:
    folder = os.environ.get(MODELS_VAR)
    return Path(folder) / (name.replace("/", "--") + ".pt") if folder else None


def save_tiny_models(folder: Path) -> None:
    """Every tiny case's model into `folder`, drawn in this process (see `_tiny`)."""
    for name, build in _cases().items():
        if not name.startswith("smollm2"):
            torch.save(build()[0], folder / (name.replace("/", "--") + ".pt"))


def _quantized(name: str, mode: str = "gguf") -> Callable[[], torch.nn.Module]:
    def make():
        from dataclasses import replace

        from gguf import GGMLQuantizationType

        sys.path.insert(0, str(Path(__file__).parent / "kernels"))
        from test_quant import quantized_tiny_llama

        qtype = GGMLQuantizationType[name]
        model = quantized_tiny_llama(qtype, seed=int(qtype))
        model.quench_gguf_weights = replace(model.quench_gguf_weights, mode=mode)
        return model

    return make


def _cases() -> dict[str, Callable[[], tuple[torch.nn.Module, object, list[tuple[int, ...]]]]]:
    from helpers import CHARS, llama_head_dim_64, tiny_llama, tiny_qwen2

    vocab = len(CHARS) + 3

    cases = {
        "smollm2-135m-instruct/bfloat16": _preset("bfloat16"),
        "smollm2-135m-instruct/gguf": _preset("float32", "gguf"),
        "smollm2-135m-instruct/gguf-int8": _preset("float32", "gguf-int8"),
        "smollm2-135m-instruct/gguf-int8-kv-bfloat16": _preset("float32", "gguf-int8"),
        "tiny-llama/float32": _tiny(lambda: tiny_llama(dtype=torch.float32)),
        "tiny-llama/bfloat16": _tiny(lambda: tiny_llama(dtype=torch.bfloat16)),
        "llama-head64/bfloat16": _tiny(lambda: llama_head_dim_64(torch.bfloat16, vocab_size=vocab)),
        "llama-head64/float32": _tiny(lambda: llama_head_dim_64(torch.float32, vocab_size=vocab)),
        "llama-head64/float32-kv-bfloat16": _tiny(lambda: llama_head_dim_64(torch.float32, vocab_size=vocab)),
        "tiny-qwen2/float32": _tiny(lambda: tiny_qwen2(torch.float32)),
        "tiny-qwen2/bfloat16": _tiny(lambda: tiny_qwen2(torch.bfloat16)),
    }
    for name in BLOCK_TYPES:
        cases[f"tiny-llama/gguf-{name}"] = _tiny(_quantized(name))
        cases[f"tiny-llama/gguf-int8-{name}"] = _tiny(_quantized(name, "gguf-int8"))
    return cases


def case_names() -> list[str]:
    return list(_cases())


def greedy_tokens(name: str) -> dict[str, list[list[int]]]:
    """One case's tokens per mode: each prompt's NEW_TOKENS greedy tokens, EOS ignored, one thread."""
    from quench.engine.backend import QuenchBackend
    from quench.engine.config import EngineConfig
    from quench.engine.types import GenerationRequest, SamplingParams

    model, tokenizer, prompts = _cases()[name]()
    saved = _saved(name)
    if saved is not None and saved.exists():
        model = torch.load(saved, weights_only=False)
    torch.set_num_threads(1)
    out = {}
    for mode, settings in MODES.items():
        backend = QuenchBackend(model, tokenizer, EngineConfig(**settings, **ENGINE_SETTINGS.get(name, {})))
        requests = [GenerationRequest(str(i), prompt) for i, prompt in enumerate(prompts)]
        sampling = SamplingParams(max_new_tokens=NEW_TOKENS, min_tokens=NEW_TOKENS)
        results = {result.key: list(result.token_ids) for result in backend.generate(requests, sampling)}
        out[mode] = [results[str(i)] for i in range(len(prompts))]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    parser.add_argument("--write", type=Path, help="add the cases this file lacks; never change one it holds")
    args = parser.parse_args()
    names = [name for name in args.cases.split(",") if name] or case_names()
    if args.write is None:
        json.dump({name: greedy_tokens(name) for name in names}, sys.stdout)
        return
    held = json.loads(args.write.read_text()) if args.write.exists() else {}
    for name in names:
        if name not in held:
            held[name] = greedy_tokens(name)
            args.write.write_text(render(held))  # case by case: an interrupted run keeps what it wrote


def render(held: dict[str, dict[str, list[list[int]]]]) -> str:
    """The file's text: a case per block, a mode's prompts one per line (a diff shows which prompt moved)."""
    lines = ["{"]
    for i, name in enumerate(sorted(held)):
        lines.append(f"  {json.dumps(name)}: {{")
        modes = held[name]
        for j, mode in enumerate(sorted(modes)):
            rows = ",\n".join(f"      {json.dumps(row)}" for row in modes[mode])
            lines.append(f"    {json.dumps(mode)}: [\n{rows}\n    ]" + ("," if j + 1 < len(modes) else ""))
        lines.append("  }" + ("," if i + 1 < len(held) else ""))
    lines.append("}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
