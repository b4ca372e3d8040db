"""The decoder families the fast path runs (`LlamaRunner`): Llama, Qwen2 (Llama with q/k/v biases) and Gemma 3.

A `Family` holds what differs between them, read from the Hugging Face model once; the runner's forward
reads it operation for operation as each `modeling_*.py` computes it:

- Gemma 3 (`modeling_gemma3.py`, text part): embeddings times sqrt(hidden) rounded to the embedding dtype;
  RMSNorm as x / rms(x) * (1 + w) in float32, rounded once; four norms per layer (input, post-attention,
  pre-feedforward, post-feedforward: each branch is normed before it joins the residual); RMSNorm over each
  head's q and k before RoPE; attention scale query_pre_attn_scalar^-0.5; gelu(gate, tanh) * up; sliding-window
  layers (their own RoPE base) between global ones.
- Qwen2: Llama's layer with biases on q, k and v (`Linear` adds them), sliding windows where its config asks.

Sliding windows: a query at position p sees keys p - window + 1 .. p. Where every fed position is below the
smallest window the window changes nothing and the packed C path runs; other steps take the runner's
PyTorch path with each layer's own mask.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

SUPPORTED = ("llama", "qwen2", "gemma3_text")


@dataclass(frozen=True)
class Family:
    name: str  # the config's model_type
    offset_norm: bool  # Gemma: RMSNorm weights are stored as w - 1; the product runs in float32
    sandwich_norms: bool  # Gemma: the attention and MLP outputs are normed before the residual add
    qk_norm: bool  # Gemma: RMSNorm over each head of q and k, before RoPE
    activation: str  # "silu" or "gelu_tanh": act(gate) * up
    embed_scale: float | None  # Gemma: embeddings times this (sqrt(hidden)), rounded to the model dtype
    rope_kinds: tuple[str, ...]  # per layer: which RoPE table it reads ("default" or a Gemma layer type)
    windows: tuple[int | None, ...]  # per layer: its sliding window in keys, None for global attention

    @property
    def llama_like(self) -> bool:
        """Llama's layer exactly (biases aside): what the C glue, the C layer loop and the invariant kernels serve."""
        return not (self.offset_norm or self.sandwich_norms or self.qk_norm) and self.activation == "silu"

    @property
    def smallest_window(self) -> int | None:
        sizes = [window for window in self.windows if window is not None]
        return min(sizes) if sizes else None


def family_of(model: torch.nn.Module) -> Family | None:
    """The model's family where the fast path runs it exactly (static RoPE, no logit soft-capping), else None."""
    config = getattr(model, "config", None)
    kind = getattr(config, "model_type", None)
    if kind not in SUPPORTED or getattr(getattr(model, "model", None), "rotary_emb", None) is None:
        return None
    if any("dynamic" in rope for rope in _rope_types(model.model.rotary_emb)):
        return None
    layer_types = tuple(getattr(config, "layer_types", None) or ("full_attention",) * config.num_hidden_layers)
    windows = tuple(config.sliding_window if layer == "sliding_attention" else None for layer in layer_types)
    if kind == "gemma3_text":
        if config.attn_logit_softcapping is not None or config.final_logit_softcapping is not None:
            return None
        if getattr(config, "use_bidirectional_attention", False) or config.hidden_activation != "gelu_pytorch_tanh":
            return None
        return Family(kind, True, True, True, "gelu_tanh", math.sqrt(config.hidden_size), layer_types, windows)
    if config.hidden_act != "silu":
        return None
    return Family(kind, False, False, False, "silu", None, ("default",) * len(layer_types), windows)


def _rope_types(rotary: torch.nn.Module) -> list[str]:
    rope_type = getattr(rotary, "rope_type", "default")
    return [str(value) for value in rope_type.values()] if isinstance(rope_type, dict) else [str(rope_type)]


def rope_frequencies(rotary: torch.nn.Module, kind: str) -> tuple[torch.Tensor, float]:
    """(inv_freq (D/2,), attention_scaling) of one RoPE table: Llama's single one or a Gemma layer type's."""
    if kind == "default":
        return rotary.inv_freq, rotary.attention_scaling
    return getattr(rotary, f"{kind}_inv_freq"), getattr(rotary, f"{kind}_attention_scaling")


def norm_weight(weight: torch.Tensor, family: Family) -> torch.Tensor:
    """The weight `rms_norm` multiplies by: Gemma's 1 + w in float32, else w itself."""
    return 1.0 + weight.detach().float() if family.offset_norm else weight.detach()


def offset_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Gemma's RMSNorm: x (..., Dm) in float32 over its last axis, times weight (float32 1 + w), rounded once."""
    normed = F.rms_norm(x.float(), (x.shape[-1],), eps=eps)
    return (normed * weight).to(x.dtype)


def gelu_tanh_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """(..., 2 I) -> gelu(gate, tanh approximation) * up (..., I), as Gemma's MLP."""
    inner = gate_up.shape[-1] // 2
    return F.gelu(gate_up[..., :inner], approximate="tanh") * gate_up[..., inner:]


def window_mask(mask: torch.Tensor, start: torch.Tensor, window: int) -> torch.Tensor:
    """mask (B, 1, S, Tk) causal -> the same with keys at or before p - window hidden from the query at p."""
    num_new, keys = mask.shape[-2], mask.shape[-1]
    positions = start[:, None] + torch.arange(num_new)  # (B, S)
    visible = torch.arange(keys)[None, None, :] > positions[:, :, None] - window  # (B, S, Tk)
    return mask & visible[:, None]
