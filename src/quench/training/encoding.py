"""Token ids of a training text, its loss mask, and the token alignment of a (nominal, variant) pair.

The prefix and the target are tokenized separately, as at inference where the model continues
the encoded prompt; the end-of-sequence token closes the target.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Sequence

from quench.errors import QuenchError
from quench.training.targets import TrainText


@dataclass(frozen=True)
class Encoded:
    """One training sequence: ids, where the target starts, and which target tokens are masked."""

    input_ids: tuple[int, ...]
    target_start: int  # index of the first target token (the prefix is never a target)
    masked: frozenset[int] = frozenset()  # positions of target tokens left out of the loss (mda)

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def target_ids(self) -> tuple[int, ...]:
        return self.input_ids[self.target_start:]


def require_fast(tokenizer: Any) -> None:
    if not getattr(tokenizer, "is_fast", False):
        raise QuenchError("training needs a fast (Rust) tokenizer: character offsets locate the masked tokens")


def overlapping(offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]]) -> list[int]:
    """Indices of tokens whose character range overlaps any span."""
    return [i for i, (a, b) in enumerate(offsets) if any(a < end and start < b for start, end in spans)]


def encode(tokenizer: Any, text: TrainText, add_special_tokens: bool,
           mask_spans: Sequence[tuple[int, int]] = ()) -> Encoded:
    """Tokenize prefix and target; target tokens overlapping `mask_spans` (target characters) are masked."""
    prefix = tokenizer(text.prefix, add_special_tokens=add_special_tokens)["input_ids"] if (
        text.prefix or add_special_tokens) else []
    target = tokenizer(text.target, add_special_tokens=False, return_offsets_mapping=True)
    ids = list(prefix) + list(target["input_ids"]) + [tokenizer.eos_token_id]
    start = len(prefix)
    masked = frozenset(start + i for i in overlapping(target["offset_mapping"], mask_spans))
    return Encoded(tuple(ids), start, masked)


def align(nominal: Encoded, variant: Encoded) -> list[tuple[int, int]]:
    """(nominal position, variant position) of target tokens the two sequences share, in order.

    The longest-matching-blocks alignment of the two target token lists: for a context-free
    perturbation the solution after the prompt aligns whole; a renamed identifier's tokens do not.
    """
    matcher = difflib.SequenceMatcher(None, nominal.target_ids, variant.target_ids, autojunk=False)
    pairs = []
    for block in matcher.get_matching_blocks():
        for k in range(block.size):
            pairs.append((nominal.target_start + block.a + k, variant.target_start + block.b + k))
    return pairs


def name_token_ids(tokenizer: Any, names: Sequence[str]) -> frozenset[int]:
    """Vocabulary ids that spell the names, with and without a leading space (BPE word starts).

    A token that is only whitespace (a lone space piece) is not part of a name.
    """
    ids: set[int] = set()
    for name in names:
        for spelling in (name, " " + name):
            ids.update(tokenizer(spelling, add_special_tokens=False)["input_ids"])
    return frozenset(i for i in ids if tokenizer.decode([i]).strip())
