"""The generic path: any Hugging Face causal LM driven over the ragged `KVCache`.

The model gets explicit `position_ids`, a 4D attention mask (which Hugging Face passes through
unchanged) and a `DynamicCache` subclass whose `update` writes each row's new keys/values at that
row's own positions and returns the cache window. Sliding windows are masked here: a model whose layers
all slide (Mistral's `sliding_window`) gets the windowed mask; one that mixes sliding and global layers
(`layer_types`, e.g. Gemma 3 or Qwen2 with windows) gets a mask per layer type, which Hugging Face's models
take as a dict. Other layer types (chunked, linear attention) get the causal mask alone: such models are
exact only while every position is below their window.
"""

from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache

from quench.engine.kernels import native
from quench.engine.runners.families import window_mask
from quench.engine.kv_cache import KVCache, attention_window, causal_mask, real_rows

MASKED_LAYER_TYPES = {"full_attention", "sliding_attention"}


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
        self._window, self._per_layer_type = sliding_window(model.config.get_text_config())

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
        mask = self._masks(causal_mask(start, num_new, window), start)  # (B, 1, S, Tk), or one per layer type
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

    def _masks(self, mask: torch.Tensor, start: torch.Tensor) -> torch.Tensor | dict[str, torch.Tensor]:
        """The causal mask (B, 1, S, Tk) -> what the model's layers read: windowed where they slide, in the
        attention implementation's form (additive float for eager, boolean otherwise)."""
        if self._window is None:
            return self._form(mask)
        windowed = self._form(window_mask(mask, start, self._window))
        return {"full_attention": self._form(mask), "sliding_attention": windowed} if self._per_layer_type else windowed

    def _form(self, mask: torch.Tensor) -> torch.Tensor:
        if not self._additive_mask:
            return mask
        return torch.zeros(mask.shape, dtype=self.dtype).masked_fill(~mask, torch.finfo(self.dtype).min)


def sliding_window(config) -> tuple[int | None, bool]:
    """(the window the model's sliding layers use, whether only some layers slide) from its text config;
    (None, False) where no layer slides or where other layer types make the masks unknown here."""
    window = getattr(config, "sliding_window", None)
    layer_types = set(getattr(config, "layer_types", None) or ())
    if not window or not layer_types <= MASKED_LAYER_TYPES:
        return None, False
    if not layer_types:
        return window, False  # every layer slides (Mistral)
    if "sliding_attention" not in layer_types:
        return None, False
    return window, "full_attention" in layer_types
