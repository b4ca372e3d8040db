"""A KV cache whose rows have their own lengths (ragged), written at explicit positions.

Each row of the batch is a slot. A slot's valid length is owned by the engine, not the cache: the
model writes the keys/values of new tokens at positions `start[b] .. start[b] + S - 1` and attends
to positions `<= start[b] + s`. Rolling back rejected draft tokens therefore costs nothing — the
engine simply does not advance the row's length, and the stale entries are overwritten later.
Every row holds the same number of positions, which the decode loop may change between steps
(`resize`: each row keeps its first positions).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from quench.engine.kernels import huge_pages


@dataclass(frozen=True)
class Prefix:
    """The keys/values of one prompt, ready to be copied into any slot."""

    keys: tuple[torch.Tensor, ...]  # per layer (H, P, D)
    values: tuple[torch.Tensor, ...]  # per layer (H, P, D)
    length: int  # P

    def head(self, length: int) -> Prefix:
        """The first `length` positions (views)."""
        if not 0 < length <= self.length:
            raise ValueError(f"a prefix of {self.length} positions has no head of {length}")
        keys = tuple(k[:, :length] for k in self.keys)
        values = tuple(v[:, :length] for v in self.values)
        return Prefix(keys, values, length)


class KVCache:
    """Per-layer key/value buffers of shape (B, H, T, D), allocated on the first write of a layer."""

    def __init__(self, num_layers: int, batch: int, max_len: int, dtype: torch.dtype, device: torch.device) -> None:
        self.num_layers = num_layers
        self.batch = batch
        self.max_len = max_len
        self.dtype = dtype
        self.device = device
        self.keys: list[torch.Tensor | None] = [None] * num_layers
        self.values: list[torch.Tensor | None] = [None] * num_layers
        self._rows = torch.arange(batch, device=device)[:, None]  # (B, 1) row index for writes

    def allocate(self, layer: int, heads: int, head_dim: int, value_dim: int | None = None) -> None:
        shape = (self.batch, heads, self.max_len, head_dim)
        self.keys[layer] = self._zeros(shape)
        vshape = (self.batch, heads, self.max_len, value_dim or head_dim)
        self.values[layer] = self._zeros(vshape)

    def _zeros(self, shape: tuple[int, ...]) -> torch.Tensor:
        if torch.device(self.device).type == "cpu":
            return huge_pages.zeros(shape, self.dtype)  # a step streams through every row's keys and values
        return torch.zeros(shape, dtype=self.dtype, device=self.device)

    def resize(self, max_len: int) -> None:
        """Hold `max_len` positions per row from now on, keeping each row's first min(old, new) positions.

        One layer at a time, so at most one layer's old and new buffers exist together."""
        keep = min(self.max_len, max_len)
        for buffers in (self.keys, self.values):
            for layer, old in enumerate(buffers):
                if old is None:
                    continue
                new = self._zeros((*old.shape[:2], max_len, old.shape[3]))
                new[:, :, :keep] = old[:, :, :keep]
                buffers[layer] = new
                del old
        self.max_len = max_len

    def write(self, layer: int, keys: torch.Tensor, values: torch.Tensor, positions: torch.Tensor) -> None:
        """Store new keys/values (B, S, H, D) at `positions` (B, S) of every row."""
        if self.keys[layer] is None:
            self.allocate(layer, keys.shape[2], keys.shape[3], values.shape[3])
        self.keys[layer][self._rows, :, positions] = keys.to(self.dtype)  # type: ignore[index]
        self.values[layer][self._rows, :, positions] = values.to(self.dtype)  # type: ignore[index]

    def window(self, layer: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The first `length` positions of every row: (B, H, length, D) views, no copy."""
        return self.keys[layer][:, :, :length], self.values[layer][:, :, :length]  # type: ignore[index]

    def snapshot(self, row: int, length: int) -> Prefix:
        """The first `length` positions of one row, as views (valid until the row is overwritten)."""
        keys = tuple(k[row, :, :length] for k in self.keys)  # type: ignore[index]
        values = tuple(v[row, :, :length] for v in self.values)  # type: ignore[index]
        return Prefix(keys, values, length)

    def install(self, row: int, prefix: Prefix) -> None:
        """Copy a prompt's keys/values into a slot (a row's first `prefix.length` positions)."""
        for layer, (k, v) in enumerate(zip(prefix.keys, prefix.values)):
            if self.keys[layer] is None:
                self.allocate(layer, k.shape[0], k.shape[2], v.shape[2])
            self.keys[layer][row, :, : prefix.length] = k  # type: ignore[index]
            self.values[layer][row, :, : prefix.length] = v  # type: ignore[index]


def round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def slot_length(longest_prompt: int, max_new_tokens: int, headroom: int) -> int:
    """Positions per slot for rows whose longest prompt is `longest_prompt`, rounded up to 64."""
    return round_up(longest_prompt + max_new_tokens + headroom, 64)


def attention_window(start: torch.Tensor, num_new: int, max_len: int, bucket: int = 64) -> int:
    """Key positions the next forward must see, rounded up so shapes repeat (fewer recompiles)."""
    return min(max_len, round_up(int(start.max()) + num_new, bucket))


def causal_mask(start: torch.Tensor, num_new: int, window: int) -> torch.Tensor:
    """Bool mask (B, 1, S, Tk): query s of row b sees key t iff t <= start[b] + s."""
    query_pos = start[:, None] + torch.arange(num_new, device=start.device)  # (B, S)
    key_pos = torch.arange(window, device=start.device)  # (Tk,)
    return (key_pos[None, None, :] <= query_pos[:, :, None])[:, None]  # (B, 1, S, Tk)


def real_positions(counts: torch.Tensor, width: int) -> torch.Tensor:
    """(B, S) bool: row b's first counts[b] of `width` fed positions are real tokens, the rest padding."""
    return torch.arange(width)[None, :] < counts[:, None]


def real_rows(padded: torch.Tensor, counts: torch.Tensor | None) -> torch.Tensor:
    """(B, S, ...) per fed position -> the real positions' entries (N, ...), row after row (counts None: all)."""
    return padded.flatten(0, 1) if counts is None else padded[real_positions(counts, padded.shape[1])]
