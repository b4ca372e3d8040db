"""The generic path: any Hugging Face causal LM driven over the ragged `KVCache`.

The model gets explicit `position_ids`, a 4D attention mask (which Hugging Face passes through
unchanged) and a `DynamicCache` subclass whose `update` writes each row's new keys/values at that
row's own positions and returns the cache window. Limitation: sliding-window layers see the full
window we pass, so models with sliding-window attention are exact only for sequences shorter than
their window.
"""

from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache

from quench.engine import native
from quench.engine.kv_cache import KVCache, attention_window, causal_mask, real_rows


class RaggedCache(DynamicCache):
    """Routes Hugging Face's cache updates into a `KVCache` at explicit per-row positions."""

    def __init__(self, kv: KVCache, positions: torch.Tensor, window: int) -> None:
        super().__init__()
        self.kv = kv
        self.positions = positions  # (B, S)
        self.window = window

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        # key_states, value_states: (B, H, S, D)
        self.kv.write(layer_idx, key_states.transpose(1, 2), value_states.transpose(1, 2), self.positions)
        return self.kv.window(layer_idx, self.window)

    def get_seq_length(self, layer_idx: int | None = 0) -> int:
        return int(self.positions[:, 0].max())


class HFRunner:
    """Runs any `AutoModelForCausalLM` over a `KVCache` (slower than the Llama fast path, but general)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.dtype = next(model.parameters()).dtype
        self.device = next(model.parameters()).device
        self.num_layers = model.config.get_text_config().num_hidden_layers
        self.vocab_size = model.get_output_embeddings().weight.shape[0]
        parameters = inspect.signature(model.forward).parameters
        self._cache_kwarg = "cache" if "cache" in parameters else "past_key_values"
        self._additive_mask = getattr(model.config, "_attn_implementation", "eager") == "eager"

    def new_cache(self, batch: int, max_len: int) -> KVCache:
        return KVCache(self.num_layers, batch, max_len, self.dtype, self.device)

    def prefill_kernel(self, tokens: int) -> str | None:
        """Nothing promised on the generic path (the `Runner` protocol's question): prompts are prefilled whole."""
        return None

    def greedy_tokens(
        self, cache: KVCache, tokens: torch.Tensor, start: torch.Tensor, counts: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The argmax token at each fed position (B, S) (the `Runner` protocol's greedy step)."""
        return native.argmax(self.forward(cache, tokens, start, counts=counts))

    def packed_logits(
        self, cache: KVCache, tokens: torch.Tensor, start: torch.Tensor, counts: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The real tokens' float32 logits (N, V), row after row (the `Runner` protocol's packed step)."""
        return real_rows(self.forward(cache, tokens, start, counts=counts), counts)  # (N, V)

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
        """tokens (B, S) fed at positions start[b] + s -> float32 logits (B, S, V), or (B, V) at logits_at.

        Padding after counts[b] is computed like real tokens here (its keys land past the row's length).
        hidden: also return the last hidden states (after the final norm: what the LM head reads),
        (B, S, D) or (B, D) at logits_at.
        """
        batch, num_new = tokens.shape
        window = attention_window(start, num_new, cache.max_len)
        positions = start[:, None] + torch.arange(num_new)  # (B, S)
        mask = causal_mask(start, num_new, window)  # (B, 1, S, Tk)
        if self._additive_mask:
            mask = torch.zeros(mask.shape, dtype=self.dtype).masked_fill(~mask, torch.finfo(self.dtype).min)
        kwargs = {self._cache_kwarg: RaggedCache(cache, positions, window)}
        output = self.model(
            input_ids=tokens, attention_mask=mask, position_ids=positions, use_cache=True,
            output_hidden_states=hidden, **kwargs
        )
        logits = output.logits  # (B, S, V)
        states = output.hidden_states[-1] if hidden else None  # (B, S, D)
        if logits_at is not None:
            logits = logits[torch.arange(batch), logits_at]  # (B, V)
            states = states[torch.arange(batch), logits_at] if hidden else None  # (B, D)
        logits = logits if logits.dtype == torch.float64 else logits.float()
        return (logits, states) if hidden else logits
