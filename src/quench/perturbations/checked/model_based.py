"""The two model-based ReCode transformations, with a local causal LM instead of a hub model.

- BackTranslation: ReCode translates the docstring en->de->en with hub MT models. Here a local
  causal LM paraphrases it (the default instruct model, or any `TextModel` passed in); a
  paraphrase that drops a protected token (name, number, quoted text) is rejected.
- VarRenamerCB: ReCode asks CodeBERT (a masked LM) for a name. Here a causal LM proposes names
  at the variable's first occurrence and picks the one under which the visible code is most
  likely (summed log-likelihood), ReCode's "most natural name" idea without a masked LM.
Both take `model=` so tests can pass a tiny model; the default loads lazily on first use.
"""

from __future__ import annotations

import random
import re
import textwrap
from typing import Any, Protocol, Sequence

from quench.perturbations.checked.code_syntax import Analysed, CodePerturbation
from quench.perturbations.checked.renaming import rename_choice
from quench.perturbations.checked.docstring import QUOTES, DocstringPerturbation
from quench.perturbations.source import Edit, docstring_node
from quench.perturbations.text import FIXED, Piece, join

# Common names the model's own proposals are pooled with (kept short: each one is a forward pass).
STOCK_NAMES = ("result", "res", "value", "item", "idx", "count", "total", "num", "lst", "arr", "s", "x")
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
PARAPHRASE_REQUEST = (
    "Rewrite the following programming task in different words. Keep its meaning and keep every "
    "name, number and symbol exactly as written. Answer with the rewritten text only.\n\n{text}"
)


class TextModel(Protocol):
    """What the model-based perturbations need from a language model."""

    def generate(self, prompt: str, max_new_tokens: int, seed: int) -> str:
        """A sampled reply to an instruction (the chat template applied where the model has one)."""

    def log_likelihoods(self, texts: Sequence[str]) -> list[float]:
        """Summed token log-probabilities of each text."""

    def next_tokens(self, prefix: str, k: int) -> list[str]:
        """The k likeliest next tokens (decoded) after `prefix`."""


class HFTextModel:
    """`TextModel` over a `quench.models.LoadedModel` (HF causal LM + tokenizer)."""

    def __init__(self, loaded: Any) -> None:
        self.loaded = loaded

    @classmethod
    def default(cls) -> "HFTextModel":
        from quench.models import load_model

        return cls(load_model())

    def _ids(self, text: str) -> list[int]:
        return list(self.loaded.tokenizer(text, add_special_tokens=False)["input_ids"])

    def generate(self, prompt: str, max_new_tokens: int, seed: int) -> str:
        import torch

        from quench.models import format_prompt

        tokenizer = self.loaded.tokenizer
        if self.loaded.prompt_format == "chat":
            messages = [{"role": "user", "content": prompt}]
            text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        else:
            text = format_prompt(self.loaded, prompt) + "\n\nRewritten text:"
        ids = torch.tensor([self._ids(text)])  # (1, T)
        torch.manual_seed(seed)
        with torch.no_grad():
            out = self.loaded.model.generate(
                ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens, do_sample=True,
                temperature=0.7, top_p=0.95, pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id,
            )
        return tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)

    def log_likelihoods(self, texts: Sequence[str]) -> list[float]:
        import torch

        encoded = [self._ids(t) for t in texts]
        width = max(len(ids) for ids in encoded)
        ids = torch.tensor([ids + [0] * (width - len(ids)) for ids in encoded])  # (B, T)
        mask = torch.tensor([[1] * len(e) + [0] * (width - len(e)) for e in encoded])  # (B, T)
        with torch.no_grad():
            logits = self.loaded.model(input_ids=ids, attention_mask=mask).logits.float()  # (B, T, V)
        logprobs = torch.log_softmax(logits[:, :-1], dim=-1)  # (B, T-1, V)
        picked = logprobs.gather(-1, ids[:, 1:, None])[..., 0] * mask[:, 1:]  # (B, T-1)
        return picked.sum(dim=1).tolist()

    def next_tokens(self, prefix: str, k: int) -> list[str]:
        import torch

        ids = torch.tensor([self._ids(prefix)])  # (1, T)
        with torch.no_grad():
            logits = self.loaded.model(input_ids=ids).logits[0, -1]  # (V,)
        top = torch.topk(logits, k).indices.tolist()
        return [self.loaded.tokenizer.decode([t]) for t in top]


class LazyModel:
    """Holds the injected model, or loads the default one on first use."""

    def __init__(self, model: TextModel | None) -> None:
        self._model = model

    @property
    def model(self) -> TextModel:
        if self._model is None:
            self._model = HFTextModel.default()
        return self._model


def protected_tokens(pieces: list[Piece]) -> list[str]:
    return [p.text.strip(".,;:!?") for p in pieces if p.kind == FIXED and p.text.strip() and
            any(c.isalnum() for c in p.text)]


def clean_paraphrase(reply: str) -> str:
    first = reply.strip().split("\n\n")[0]
    first = re.sub(r"^(rewritten text|paraphrase|answer)\s*:\s*", "", first, flags=re.IGNORECASE)
    return " ".join(first.strip().strip('"').split())


def rewrap(paraphrase: str, original: str) -> str:
    """Lay the paraphrase out like the original: same continuation indent and similar width."""
    lines = original.split("\n")
    if len(lines) == 1:
        return paraphrase
    indent = lines[1][:len(lines[1]) - len(lines[1].lstrip(" \t"))]
    width = max(max(len(line) for line in lines), 40)
    wrapped = textwrap.wrap(paraphrase, width=width - len(indent), break_long_words=False, break_on_hyphens=False)
    return ("\n" + indent).join(wrapped)


class BackTranslation(LazyModel, DocstringPerturbation):
    name = "BackTranslation"
    description = "docstring paraphrased by a local causal LM (ReCode: en->de->en translation)"
    model_based = True

    def __init__(self, model: TextModel | None = None, max_new_tokens: int = 200) -> None:
        LazyModel.__init__(self, model)
        self.max_new_tokens = max_new_tokens

    def edit(self, pieces: list[Piece], rng: random.Random) -> str:
        original = join(pieces)
        prose = " ".join(original.split())
        budget = min(self.max_new_tokens, len(prose) // 2 + 32)  # ~4 characters a token, 2x headroom
        reply = self.model.generate(PARAPHRASE_REQUEST.format(text=prose), budget, rng.randrange(2**31))
        paraphrase = clean_paraphrase(reply)
        kept = all(token in paraphrase for token in protected_tokens(pieces))
        sane = 0.5 <= len(paraphrase) / max(len(prose), 1) <= 2.0 and not any(q in paraphrase for q in QUOTES)
        if not (kept and sane) or "\\" in paraphrase or paraphrase == prose:
            return original
        return rewrap(paraphrase, original)


class VarRenamerCB(LazyModel, CodePerturbation):
    name = "VarRenamerCB"
    description = "the most frequent variable renamed to the name a local causal LM finds likeliest"
    model_based = True
    randomized = False

    def __init__(self, model: TextModel | None = None, proposals: int = 12) -> None:
        LazyModel.__init__(self, model)
        self.proposals = proposals

    def candidates(self, a: Analysed, old: str, first: int) -> list[str]:
        proposed = [t.strip() for t in self.model.next_tokens(a.source.text[:first], self.proposals)]
        names = [n for n in [*proposed, *STOCK_NAMES] if IDENTIFIER.fullmatch(n)]
        return [n for n in dict.fromkeys(names) if n != old and a.fresh(n)]

    def edits(self, a: Analysed, rng: random.Random) -> list[Edit]:
        chosen = rename_choice(a)
        if chosen is None:
            return []
        old, spans = chosen
        visible = [s for s in spans if s[1] <= a.program.split]
        names = self.candidates(a, old, visible[0][0])
        if not names:
            return []
        texts = [scoring_text(a, visible, name) for name in names]
        scores = self.model.log_likelihoods(texts)
        best = names[max(range(len(names)), key=lambda i: (scores[i], -i))]
        return [Edit(s, e, best) for s, e in spans]


def scoring_text(a: Analysed, spans: list[tuple[int, int]], name: str) -> str:
    """The visible code from the signature on, renamed, without the docstring (the same for every name)."""
    start = a.source.line_start(a.span(a.function)[0])
    doc = docstring_node(a.function)
    doc_start, doc_end = a.span(doc) if doc else (a.program.split, a.program.split)
    parts = []
    for low, high in ((start, doc_start), (doc_end, a.program.split)):
        text = a.source.text[low:high]
        for s, e in sorted(spans, reverse=True):
            if low <= s and e <= high:
                text = text[:s - low] + name + text[e - low:]
        parts.append(text)
    return "".join(parts)
