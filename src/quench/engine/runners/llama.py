"""A hand-written forward pass for Llama-style decoders over the ragged static KV cache.

The weights are taken from a Hugging Face `LlamaForCausalLM`, `Qwen2ForCausalLM` or `Gemma3ForCausalLM`
(`families.py`: what differs between them; no copy for the embedding; the projections are fused — q/k/v into
one matrix, gate/up into one — and, on CPU, pre-packed for quench's or oneDNN's kernels). Numerics follow each
family's `modeling_*.py` operation for operation.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import torch
import torch.nn.functional as F

from quench.engine.kernels import invariant, native
from quench.engine.runners.families import family_of, gelu_tanh_mul, norm_weight, offset_rms_norm, window_mask
from quench.engine.runners.forward_plan import NATIVE_MAX_NEW, NATIVE_PREFILL_MAX, ForwardPlan, plan_forward
from quench.engine.kv_cache import KVCache, attention_window, causal_mask, real_positions, real_rows
from quench.engine.kernels.linear import INT8_MAX_ROWS, Linear
from quench.engine.runners import layer_tables
from quench.engine.runners.llama_layers import LlamaLayer, build_layer, rope_table
from quench.engine.kernels.screen import ScreenedHead, screen_head

__all__ = ["NATIVE_MAX_NEW", "NATIVE_PREFILL_MAX", "LlamaRunner", "on_fast_path"]

# attend(index, layer, qkv (..., H + 2 Hkv, D)) -> attention output (..., H D): RoPE, the KV write and attention
Attend = Callable[[int, LlamaLayer, torch.Tensor], torch.Tensor]
# residual(x, delta, weight) -> (x + delta, weight * rms_norm(x + delta)): a branch joins the stream, normed for
# what reads it next (delta None: nothing to add; weight None: no norm wanted)
Residual = Callable[[torch.Tensor, torch.Tensor | None, torch.Tensor | None], tuple[torch.Tensor, torch.Tensor | None]]


def on_fast_path(model: torch.nn.Module) -> bool:
    """Whether the fast path can run this model exactly: a Llama, Qwen2 or Gemma 3 decoder (`families.py`)."""
    return family_of(model) is not None


def _check_room(cache: KVCache, start: torch.Tensor, num_new: int) -> None:
    if int(start.max()) + num_new > cache.max_len:
        raise ValueError(f"a row would pass the cache length {cache.max_len}")


class LlamaRunner:
    """Runs a Llama model over a `KVCache`: `forward(cache, tokens, start)` -> float32 logits (and hidden states)."""

    def __init__(self, model: torch.nn.Module, plan: ForwardPlan | None = None) -> None:
        """plan: how every step runs, resolved once from the model and the switches (`plan_forward`, or the engine's
        `engine_plan`); None: `plan_forward(model)`, the default switches."""
        self.plan: ForwardPlan = plan if plan is not None else plan_forward(model)
        plan = self.plan
        config, inner = model.config, model.model
        self.family = family_of(model)
        self.dtype = inner.embed_tokens.weight.dtype
        self.logits_dtype = torch.float64 if self.dtype == torch.float64 else torch.float32
        self.device = inner.embed_tokens.weight.device
        self.num_layers = config.num_hidden_layers
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.eps = config.rms_norm_eps
        self.scale = inner.layers[0].self_attn.scaling
        self.vocab_size = model.lm_head.weight.shape[0]
        self.embed = inner.embed_tokens.weight.detach()
        self.final_norm = norm_weight(inner.norm.weight, self.family)
        # Gemma: embeddings times sqrt(hidden), the scale rounded to the model dtype first (as its embedding module)
        embed_scale = self.family.embed_scale
        self.embed_scale = torch.tensor(embed_scale).to(self.dtype) if embed_scale is not None else None
        linear_kernels = (plan.prepack, plan.int8, plan.amx, plan.fixed)  # `Linear`'s arguments after the bias
        self.lm_head = Linear(model.lm_head.weight.detach(), model.lm_head.bias, *linear_kernels)
        # greedy steps read an int8 copy of the head first (quench.engine.kernels.screen); same tokens
        self.head_screen: ScreenedHead | None = (
            screen_head(model.lm_head.weight.detach(), self.lm_head.small) if plan.screen else None
        )
        self.layers = [build_layer(layer, self.family, index, linear_kernels) for index, layer in enumerate(inner.layers)]
        self._rotary = inner.rotary_emb
        self._rope_tables(config.max_position_embeddings)
        bf16_layers = plan.c_layers and self.dtype == torch.bfloat16
        self._layer_table = layer_tables.bf16_table(self.layers, plan.fixed) if bf16_layers else None
        self._int8_table = layer_tables.int8_table(self.layers) if bf16_layers and plan.int8 else None
        # float32 (`native.layers_f32`): (the projections it was built from, the table), rebuilt where they change
        self._f32_table: tuple[tuple[object, ...], ctypes.Array] | None = None
        self._layer_shape = native.LayerShape(
            self.heads, self.kv_heads, self.layers[0].gate_up.out_features // 2, self.scale, self.eps
        )
        self._forward = torch.compile(self._forward_impl, dynamic=True) if plan.compiled else self._forward_impl

    @property
    def batch_invariant(self) -> bool:
        return self.plan.batch_invariant

    @property
    def amx(self) -> bool:
        return self.plan.amx

    @property
    def int8(self) -> bool:
        return self.plan.int8

    @property
    def window(self) -> int | None:
        return self.plan.window

    def _float32_layer_table(self) -> ctypes.Array:
        """`layer_tables.float32_table` for the projections now in place (built on the first step, after
        `quant.use_gguf_weights` has put the GGUF's blocks in place), kept while they stay."""
        projections = tuple(self._projections())
        if self._f32_table is None or self._f32_table[0] != projections:
            self._f32_table = (projections, layer_tables.float32_table(self.layers, projections))
        return self._f32_table[1]

    def _projections(self) -> list[Linear]:
        """Every layer's qkv, o, gate_up and down, in the layer loop's order."""
        return layer_tables.projections(self.layers)

    @torch.no_grad()
    def _rope_tables(self, max_positions: int) -> None:
        """(cos, sin_signed) per RoPE kind, (T, D) each; `cos`/`sin_signed` are the first layer's (the C layer loop's)."""
        self.rope = {
            kind: rope_table(self._rotary, kind, max_positions, self.dtype, self.device)
            for kind in set(self.family.rope_kinds)
        }
        self.cos, self.sin_signed = self.rope[self.family.rope_kinds[0]]

    def new_cache(self, batch: int, max_len: int) -> KVCache:
        if max_len > self.cos.shape[0]:  # longer than the model was trained for: extend the tables
            self._rope_tables(max_len)
        cache = KVCache(self.num_layers, batch, max_len, self.plan.cache_dtype, self.device)
        for layer in range(self.num_layers):
            cache.allocate(layer, self.kv_heads, self.head_dim)
        return cache

    @torch.inference_mode()
    def forward(
        self,
        cache: KVCache,
        tokens: torch.Tensor,
        start: torch.Tensor,
        logits_at: torch.Tensor | None = None,
        counts: torch.Tensor | None = None,
        hidden: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Feed tokens (B, S) at positions start[b] + s; float32 logits (B, S, V), or (B, V) at `logits_at`.

        counts (B,): only the first counts[b] tokens of row b are real (the rest is padding whose
        logits are left at zero); the native path then skips the padding entirely.
        hidden: also return the final-norm hidden states (what the LM head reads), (B, S, Dm) or
        (B, Dm) at `logits_at`, in the model's dtype (zeros at padding on the native path).
        """
        batch, num_new = tokens.shape
        if self._packed(num_new, start):
            logits, states = self._forward_packed(cache, tokens, start, counts, logits_at, hidden)
        else:
            _check_room(cache, start, num_new)
            window = attention_window(start, num_new, cache.max_len)
            mask = causal_mask(start, num_new, window)  # (B, 1, S, Tk)
            logits, states = self._forward(cache.keys, cache.values, tokens, start, mask, logits_at)
        return (logits, states) if hidden else logits

    def _packed(self, num_new: int, start: torch.Tensor | None = None) -> bool:
        """Whether a step of num_new tokens per row from `start` (B,) runs the packed path (`ForwardPlan.packed`)."""
        return self.plan.packed(num_new, None if start is None else int(start.max()) + num_new)

    def prefill_kernel(self, tokens: int) -> str | None:
        """Which kernels a prefill feed of `tokens` tokens per row runs, where that fixes every row's bits; None
        where nothing is promised.

        Two feeds with the same answer give a token the same keys/values and logits whatever else they
        contain: on the bfloat16 head-64 packed path with the C layer loop, every operation treats each
        token's row on its own (quench's GEMM kernels sum over K in one fixed order, norms and RoPE are per
        row, attention is per query and stops at the query's own last key), so only the GEMM kernel
        (`native.gemm_kernel`) decides the bits. PyTorch's attention and oneDNN choose their blocking by
        shape: None there. `PrefixStore` copies a prompt's beginning from another only where the other's
        prefill, the whole new prompt and its rest all give the same answer."""
        return self.plan.prefill_kernel(tokens)

    @torch.inference_mode()
    def greedy_tokens(
        self, cache: KVCache, tokens: torch.Tensor, start: torch.Tensor, counts: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Feed tokens (B, S) as `forward` does -> the argmax token at each position (B, S), int64.

        The packed path never builds float32 logits: it takes the first maximum of the real tokens'
        logits in the model's dtype (bfloat16 -> float32 is exact, so the token is the one `forward`'s
        logits give) and leaves 0 at padding, so a greedy verification step never pads and converts
        (B, S, V) float32 logits.
        """
        batch, num_new = tokens.shape
        if not self._packed(num_new, start):
            return native.argmax(self.forward(cache, tokens, start, counts=counts))  # (B, S)
        h, real, _ = self._hidden_packed(cache, tokens, start, counts)  # (N, Dm), (B, S)
        best = self._head_argmax(h)  # (N,)
        if best.shape[0] == batch * num_new:
            return best.view(batch, num_new)
        out = best.new_zeros(batch, num_new)
        out[real] = best
        return out

    def _head_argmax(self, h: torch.Tensor) -> torch.Tensor:
        """h (N, Dm) final-norm hidden states -> (N,) their greedy tokens: screened in int8 where the CPU
        allows (the tokens the AVX512 GEMM's bfloat16 logits give), else from the whole head's logits."""
        best = self.head_screen.argmax(h) if self.head_screen is not None else None
        return best if best is not None else native.argmax(self.lm_head(h))

    @torch.inference_mode()
    def packed_logits(
        self, cache: KVCache, tokens: torch.Tensor, start: torch.Tensor, counts: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Feed tokens (B, S) as `forward` does -> float32 logits of the real tokens only, (N, V) with
        N = counts.sum(), row after row. A sampled verification step reads nothing else; hybrid rows
        draft from 1 token to many, so a padded (B, S, V) block would be mostly padding."""
        if not self._packed(tokens.shape[1], start):
            return real_rows(self.forward(cache, tokens, start, counts=counts), counts)  # (N, V)
        h, _, _ = self._hidden_packed(cache, tokens, start, counts)  # (N, Dm)
        return self.lm_head(h).to(self.logits_dtype)  # (N, V)

    def _hidden_packed(
        self, cache: KVCache, tokens: torch.Tensor, start: torch.Tensor, counts: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Only real tokens go through the matrix products: final-norm hidden states (N, Dm) with
        N = counts.sum() (None: every token real); the (B, S) mask of the real positions (row-major,
        as the N rows); and the (B + 1,) offsets of each row's tokens among the N."""
        batch, num_new = tokens.shape
        _check_room(cache, start, num_new)
        if counts is None:
            counts = torch.full((batch,), num_new, dtype=torch.long)
        real = real_positions(counts, num_new)  # (B, S)
        offsets = torch.zeros(batch + 1, dtype=torch.long)
        torch.cumsum(counts, dim=0, out=offsets[1:])  # (B + 1,) row b's tokens: offsets[b]:offsets[b + 1]
        start = start.to(torch.long).contiguous()
        x = self._embed(tokens[real])  # (N, Dm)
        if self.plan.layers_in_c(x.shape[0]):  # every layer in one C call, x updated in place
            caches = [tensor for pair in zip(cache.keys, cache.values) for tensor in pair]
            if self.dtype == torch.float32:
                h = native.layers_f32(
                    x, self._float32_layer_table(), caches, self.final_norm, self._layer_shape, self.cos, self.sin_signed,
                    start, offsets,
                )
                return h, real, offsets
            h = native.layers(
                x, self._layer_table, caches, self.final_norm, self._layer_shape, self.cos, self.sin_signed, start, offsets,
                self._int8_table, INT8_MAX_ROWS, amx=self.plan.amx, every_row=self.plan.batch_invariant,
            )
            return h, real, offsets
        residual = self._glued_residual() if self.plan.glue else self._add_norm
        _, h = self._layers(x, self._packed_attend(cache, start, offsets), residual, self.final_norm)
        return h, real, offsets  # (N, Dm)

    def _packed_attend(self, cache: KVCache, start: torch.Tensor, offsets: torch.Tensor) -> Attend:
        """Attention on the packed path: RoPE, the KV write and attention over the real tokens in one C call."""

        def attend(index: int, layer: LlamaLayer, qkv: torch.Tensor) -> torch.Tensor:
            cos, sin_signed = self.rope[layer.rope]
            return native.rope_attend(
                qkv, cache.keys[index], cache.values[index], cos, sin_signed, start, offsets, self.heads, self.scale,
                amx=self.plan.amx, fixed=self.plan.batch_invariant,
            )  # (N, H D)

        return attend

    def _forward_packed(
        self,
        cache: KVCache,
        tokens: torch.Tensor,
        start: torch.Tensor,
        counts: torch.Tensor | None,
        logits_at: torch.Tensor | None,
        hidden: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`forward` on the packed path: logits (B, S, V) or (B, V), and hidden states if asked."""
        batch, num_new = tokens.shape
        h, real, offsets = self._hidden_packed(cache, tokens, start, counts)  # (N, Dm), (B, S), (B + 1,)
        if logits_at is not None:  # rows without tokens get some other row's logits; callers ignore them
            at = (offsets[:-1] + logits_at).clamp(max=max(h.shape[0] - 1, 0))
            h = h[at]  # (B, Dm): the norm is per row, so normalising all rows first changes nothing
            return self.lm_head(h).to(self.logits_dtype), h  # (B, V), (B, Dm)
        logits = self.lm_head(h).to(self.logits_dtype)  # (N, V)
        if logits.shape[0] == batch * num_new:  # every token real (a plain decode step): no scatter
            out = logits.view(batch, num_new, logits.shape[-1])
            return out, h.view(batch, num_new, h.shape[-1]) if hidden else None
        out = logits.new_zeros(batch, num_new, logits.shape[-1])
        out[real] = logits
        states = None
        if hidden:  # scattered back like the logits, so callers index (B, S, Dm) on every path
            states = h.new_zeros(batch, num_new, h.shape[-1])
            states[real] = h
        return out, states  # (B, S, V), (B, S, Dm) or None

    def _layers(
        self, x: torch.Tensor, attend: Attend, residual: Residual, final_norm: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The decoder layers, in the one order every Python path runs them: x (..., Dm) embedded tokens ->
        (x, h), the residual stream after the last layer and `final_norm` of it (None: not normed here).

        Per layer: RMSNorm -> qkv (Gemma: q and k normed per head) -> RoPE, KV write and attention (`attend`)
        -> o (Gemma: normed) -> residual add -> RMSNorm -> gate/up -> act -> down (Gemma: normed) -> residual add.
        `residual` adds a branch to the stream and norms the sum for what reads it next: PyTorch's ops
        (`_add_norm`), or the C glue that fuses both in place (`_glued_residual`). The C layer loops
        (`native.layers`, `native.layers_f32`) run the same order."""
        width = self.heads + 2 * self.kv_heads
        x, h = residual(x, None, self.layers[0].input_norm)
        for index, layer in enumerate(self.layers):
            qkv = layer.qkv(h)
            qkv = self._qk_norm(qkv.view(*qkv.shape[:-1], width, self.head_dim), layer)  # (..., H + 2 Hkv, D)
            attn = attend(index, layer, qkv)  # (..., H D)
            x, h = residual(x, self._branch_out(layer.o(attn), layer.attn_out_norm), layer.post_norm)  # (..., Dm)
            act = self._activation(layer.gate_up(h))  # (..., I)
            following = self.layers[index + 1].input_norm if index + 1 < len(self.layers) else final_norm
            x, h = residual(x, self._branch_out(layer.down(act), layer.mlp_out_norm), following)
        return x, h

    def _add_norm(
        self, x: torch.Tensor, delta: torch.Tensor | None, weight: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`Residual` in PyTorch's ops (each family's norm): (x + delta, weight * rms_norm(x + delta))."""
        x = x if delta is None else x + delta
        return x, None if weight is None else self._rms_norm(x, weight)

    def _glued_residual(self) -> Residual:
        """`Residual` in C (bfloat16, Llama's norm): x += delta in place, the norm written into one buffer reused
        by every layer."""
        out: list[torch.Tensor] = []

        def residual(
            x: torch.Tensor, delta: torch.Tensor | None, weight: torch.Tensor | None
        ) -> tuple[torch.Tensor, torch.Tensor]:
            if not out:
                out.append(torch.empty_like(x))
            return x, native.add_rms_norm(x, delta, weight, self.eps, out[0])

        return residual

    def _forward_impl(
        self,
        keys: list[torch.Tensor],
        values: list[torch.Tensor],
        tokens: torch.Tensor,
        start: torch.Tensor,
        mask: torch.Tensor,
        logits_at: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The PyTorch path: every row padded to S tokens, attention masked -> logits and final-norm hidden states."""
        batch, num_new = tokens.shape
        window = mask.shape[-1]
        groups = self.heads // self.kv_heads
        positions = start[:, None] + torch.arange(num_new, device=tokens.device)  # (B, S)
        rows = torch.arange(batch, device=tokens.device)[:, None]  # (B, 1)
        rope = {kind: (cos[positions][:, :, None, :], sin[positions][:, :, None, :]) for kind, (cos, sin) in self.rope.items()}
        # Queries of one kv-head group share its keys: fold the group into the query axis so
        # attention runs as plain multi-head attention over Hkv heads (no repeated K/V copies).
        masks = {
            size: (mask if size is None else window_mask(mask, start, size))[:, :, None]
            .expand(batch, 1, groups, num_new, window)
            .reshape(batch, 1, groups * num_new, window)
            for size in {layer.window for layer in self.layers}
        }  # sliding window (None: global) -> (B, 1, G S, Tk)

        def attend(index: int, layer: LlamaLayer, qkv: torch.Tensor) -> torch.Tensor:
            cos, sin = rope[layer.rope]  # (B, S, 1, D) each
            qk = qkv[:, :, : self.heads + self.kv_heads]  # (B, S, H + Hkv, D)
            flipped = qk.unflatten(-1, (2, self.head_dim // 2)).flip(-2).flatten(-2)
            qk = qk * cos + flipped * sin  # RoPE
            q, k, v = qk[:, :, : self.heads], qk[:, :, self.heads :], qkv[:, :, self.heads + self.kv_heads :]
            keys[index][rows, :, positions] = k  # (B, S, Hkv, D) written at each row's positions
            values[index][rows, :, positions] = v
            q = q.reshape(batch, num_new, self.kv_heads, groups, self.head_dim).permute(0, 2, 3, 1, 4)
            q = q.reshape(batch, self.kv_heads, groups * num_new, self.head_dim)  # (B, Hkv, G S, D)
            attn = F.scaled_dot_product_attention(
                q, keys[index][:, :, :window], values[index][:, :, :window], attn_mask=masks[layer.window], scale=self.scale
            )  # (B, Hkv, G S, D)
            attn = attn.view(batch, self.kv_heads, groups, num_new, self.head_dim).permute(0, 3, 1, 2, 4)
            return attn.reshape(batch, num_new, self.heads * self.head_dim)  # (B, S, H D)

        final_norm = self.final_norm if logits_at is None else None  # at logits_at: the chosen rows only, below
        x, h = self._layers(self._embed(tokens), attend, self._add_norm, final_norm)  # (B, S, Dm), (B, S, Dm) or None
        if logits_at is not None:
            x = x[torch.arange(batch, device=x.device), logits_at]  # (B, Dm)
            h = self._rms_norm(x, self.final_norm)  # the LM head's input
        return self.lm_head(h).to(self.logits_dtype), h

    def _embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (...) -> embeddings (..., Dm), times Gemma's scale where the family has one."""
        x = F.embedding(tokens, self.embed)
        return x * self.embed_scale if self.embed_scale is not None else x

    def _qk_norm(self, qkv: torch.Tensor, layer: LlamaLayer) -> torch.Tensor:
        """qkv (..., H + 2 Hkv, D) -> the same with each head of q and k normed (Gemma); others unchanged."""
        if layer.q_norm is None:
            return qkv
        heads = self.heads
        q = self._rms_norm(qkv[..., :heads, :], layer.q_norm)  # (..., H, D)
        k = self._rms_norm(qkv[..., heads : heads + self.kv_heads, :], layer.k_norm)  # (..., Hkv, D)
        return torch.cat((q, k, qkv[..., heads + self.kv_heads :, :]), dim=-2)  # contiguous, as rope_attend reads it

    def _branch_out(self, out: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
        """A branch's output before the residual add: normed where the family norms it (Gemma), else as is."""
        return out if weight is None else self._rms_norm(out, weight)

    def _activation(self, gate_up: torch.Tensor) -> torch.Tensor:
        """(..., 2 I) -> act(gate) * up (..., I): Gemma's tanh GELU, else SiLU."""
        return gelu_tanh_mul(gate_up) if self.family.activation == "gelu_tanh" else self._silu_mul(gate_up)

    def _silu_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        """(..., 2 I) -> silu(gate) * up (..., I); row by row in C on the batch-invariant path."""
        if self.plan.batch_invariant:
            return invariant.silu_mul(gate_up)
        inner = gate_up.shape[-1] // 2
        return F.silu(gate_up[..., :inner]) * gate_up[..., inner:]

    def _rms_norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        if self.family.offset_norm:
            return offset_rms_norm(x, weight, self.eps)
        if self.plan.batch_invariant and x.dtype == torch.float32:
            return invariant.rms_norm(x, weight, self.eps)
        normed = F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps)
        return weight * normed.to(x.dtype)
