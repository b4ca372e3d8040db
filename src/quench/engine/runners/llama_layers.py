"""The fast path's weights, taken once from a Hugging Face decoder: one `LlamaLayer` per decoder layer
(q/k/v fused into one projection, gate/up into one, each served by `Linear`'s kernels, and each family's
norms) and the RoPE tables (`families.py` says what differs between Llama, Qwen2 and Gemma 3)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from quench.engine.runners.families import Family, norm_weight, rope_frequencies
from quench.engine.kernels.linear import Linear

# What a projection's `Linear` is built with: (prepack, int8, amx, fixed), as `Linear`'s arguments after the bias.
LinearKernels = tuple[bool, bool, bool, bool]


@dataclass
class LlamaLayer:
    input_norm: torch.Tensor  # (Dm,)
    qkv: Linear  # Dm -> (H + 2 Hkv) D
    o: Linear  # H D -> Dm
    post_norm: torch.Tensor  # (Dm,) the norm before the MLP
    gate_up: Linear  # Dm -> 2 I
    down: Linear  # I -> Dm
    rope: str = "default"  # which RoPE table (`families.Family.rope_kinds`)
    window: int | None = None  # sliding window in keys (None: global attention)
    q_norm: torch.Tensor | None = None  # (D,) Gemma: per-head norms of q and k
    k_norm: torch.Tensor | None = None  # (D,)
    attn_out_norm: torch.Tensor | None = None  # (Dm,) Gemma: the attention output's norm before the residual add
    mlp_out_norm: torch.Tensor | None = None  # (Dm,) Gemma: the MLP output's norm before the residual add


@torch.no_grad()
def build_layer(layer: torch.nn.Module, family: Family, index: int, kernels: LinearKernels) -> LlamaLayer:
    """The fast path's copy of Hugging Face decoder layer `index` of a model of `family`."""
    attn, mlp = layer.self_attn, layer.mlp
    qkv_weight = torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight])
    gate_up_weight = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])
    sandwich = family.sandwich_norms  # Gemma's post_attention_layernorm is the attention output's norm
    return LlamaLayer(
        input_norm=norm_weight(layer.input_layernorm.weight, family),
        qkv=Linear(qkv_weight, cat_bias(attn.q_proj, attn.k_proj, attn.v_proj), *kernels),
        o=Linear(attn.o_proj.weight.detach(), attn.o_proj.bias, *kernels),
        post_norm=norm_weight((layer.pre_feedforward_layernorm if sandwich else layer.post_attention_layernorm).weight, family),
        gate_up=Linear(gate_up_weight, cat_bias(mlp.gate_proj, mlp.up_proj), *kernels),
        down=Linear(mlp.down_proj.weight.detach(), mlp.down_proj.bias, *kernels),
        rope=family.rope_kinds[index],
        window=family.windows[index],
        q_norm=norm_weight(attn.q_norm.weight, family) if family.qk_norm else None,
        k_norm=norm_weight(attn.k_norm.weight, family) if family.qk_norm else None,
        attn_out_norm=norm_weight(layer.post_attention_layernorm.weight, family) if sandwich else None,
        mlp_out_norm=norm_weight(layer.post_feedforward_layernorm.weight, family) if sandwich else None,
    )


def cat_bias(*linears: torch.nn.Linear) -> torch.Tensor | None:
    """The biases of projections fused into one, zeros for those without; None when none has one."""
    if all(lin.bias is None for lin in linears):
        return None
    return torch.cat([lin.bias if lin.bias is not None else lin.weight.new_zeros(lin.out_features) for lin in linears])


@torch.no_grad()
def rope_table(
    rotary: torch.nn.Module, kind: str, max_positions: int, dtype: torch.dtype, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin_signed), (T, D) each, for positions 0..T-1 of RoPE `kind`.

    Same float32 arithmetic as LlamaRotaryEmbedding.forward (and Gemma's per layer type), once per position.
    """
    inv_freq, scaling = rope_frequencies(rotary, kind)
    positions = torch.arange(max_positions, device=device, dtype=torch.float32)
    freqs = positions[:, None] * inv_freq.float()[None, :]  # (T, D/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (T, D)
    cos = (emb.cos() * scaling).to(dtype)  # (T, D)
    sin = (emb.sin() * scaling).to(dtype)  # (T, D)
    half = emb.shape[-1] // 2
    # rotate_half(x) * sin == flip_halves(x) * [-sin_lo, sin_hi], bit for bit (negation is exact).
    return cos, torch.cat((-sin[:, :half], sin[:, half:]), dim=-1)  # (T, D), (T, D)
