"""Tiny real models and tokenizers built in the test process (no files, no downloads)."""

from __future__ import annotations

import copy
import os
import string
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, decoders
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from quench.engine.types import GenerationRequest

CHARS = string.ascii_letters + string.digits + string.punctuation + " \n\t"
# Tiny random models give every token ~1/vocab, so the shipped cumulative draft stop (0.15 at batch 1, 0.4
# above) would end every model draft at its floor: engine configs of tests about drafting add this.
DRAFT_EVERYTHING = {"draft_stop": 0.0}


def char_tokenizer() -> PreTrainedTokenizerFast:
    """A character-level tokenizer: ids 0-2 are special (<pad>, <s>, </s>), then one id per character."""
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2}
    vocab.update({c: i + 3 for i, c in enumerate(CHARS)})
    core = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    core.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<s>", eos_token="</s>")


def tiny_llama(vocab_size: int = len(CHARS) + 3, seed: int = 0, dtype: torch.dtype = torch.float32,
               max_positions: int = 512) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_positions,
        bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )
    return LlamaForCausalLM(config).to(dtype).eval()


def tiny_qwen2(
    dtype: torch.dtype = torch.float32, seed: int = 0, window: int | None = None, hidden: int = 32
) -> Qwen2ForCausalLM:
    """2 layers, GQA, 4 heads, random q/k/v biases (the init's zeros would hide a dropped bias); window: the
    second layer attends over a sliding window of that many keys."""
    torch.manual_seed(seed)
    sliding = {"use_sliding_window": True, "sliding_window": window, "max_window_layers": 1} if window else {}
    config = Qwen2Config(
        vocab_size=len(CHARS) + 3, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, bos_token_id=1, eos_token_id=2,
        pad_token_id=0, **sliding,
    )
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():
        for layer in model.model.layers:
            for projection in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                projection.bias.normal_(0.0, 0.5)
                projection.weight.mul_(4)
    return model.to(dtype).eval()


def llama_head_dim_64(dtype: torch.dtype, vocab_size: int = 96) -> LlamaForCausalLM:
    """A small Llama with head size 64 (the C kernels' bfloat16 fast path), 2 layers."""
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab_size, hidden_size=128, intermediate_size=96, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=256,
    )
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # sharper attention than the random init's near-uniform one, so a wrong kernel shows
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(15)
            layer.self_attn.k_proj.weight.mul_(15)
    return model.to(dtype).eval()


def perturbed(model: LlamaForCausalLM, scale: float, seed: int = 0) -> LlamaForCausalLM:
    """A draft model that agrees with `model` often, but not always."""
    draft = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in draft.parameters():
            parameter.add_(scale * parameter.std() * torch.randn(parameter.shape, generator=generator, dtype=parameter.dtype))
    return draft


def save_tiny_model(path: Path) -> Path:
    """A tiny Llama + character tokenizer as a model directory the CLI loads; long enough for a
    character-tokenized benchmark prompt (HumanEval's run to ~1,500 characters)."""
    tiny_llama(max_positions=4096).save_pretrained(path)
    char_tokenizer().save_pretrained(path)
    return path


def stdout_at_level(script: str, level: str) -> str:
    """`python -c script` in a process whose native kernels are built at `level` (QUENCH_NATIVE_MARCH): its
    stripped stdout; the test fails on a nonzero exit."""
    env = {**os.environ, "QUENCH_NATIVE_MARCH": level}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()


@contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """Run with `count` torch threads, then restore. Tiny models run fastest on one thread; on a busy
    2-core machine a second OpenMP thread waiting for its descheduled sibling made them ~10x slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def hf_logits(model, ids: torch.Tensor) -> torch.Tensor:
    """Hugging Face's logits in float64, (B, T, V)."""
    with torch.no_grad():
        return model(ids).logits.to(torch.float64)  # (B, T, V)


def char_requests(prompts: list[str]) -> list[GenerationRequest]:
    """One request per prompt, keyed t/0, t/1, …, tokenized by `char_tokenizer`."""
    tokenizer = char_tokenizer()
    ids = [tuple(tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts]
    return [GenerationRequest(f"t/{i}", p) for i, p in enumerate(ids)]


def hf_greedy(model, request: GenerationRequest, max_new_tokens: int) -> tuple[int, ...]:
    """Hugging Face `generate`'s greedy tokens for one request, exactly `max_new_tokens` of them."""
    prompt = torch.tensor([request.prompt_ids])
    with torch.inference_mode():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=max_new_tokens,
                             do_sample=False, min_new_tokens=max_new_tokens)
    return tuple(out[0, prompt.shape[1] :].tolist())


def quench_greedy(
    model, reqs: list[GenerationRequest], max_new_tokens: int, draft_model=None, threads: int = 1, **config
) -> dict[str, tuple[int, ...]]:
    """quench's greedy tokens per request key; `config` goes to EngineConfig (fast_path=False: the generic path)."""
    from quench.engine.backend import QuenchBackend
    from quench.engine.config import EngineConfig
    from quench.engine.types import SamplingParams

    backend = QuenchBackend(model, char_tokenizer(), EngineConfig(**{**DRAFT_EVERYTHING, **config}), draft_model=draft_model)
    assert type(backend.runner).__name__ == ("LlamaRunner" if config.get("fast_path", True) else "HFRunner")
    sampling = SamplingParams(max_new_tokens=max_new_tokens, min_tokens=max_new_tokens)
    with torch_threads(threads):
        return {r.key: tuple(r.token_ids) for r in backend.generate(reqs, sampling)}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of the graph as a path that returns to its start, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None
