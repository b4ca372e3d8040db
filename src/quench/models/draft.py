"""Draft models for speculative decoding: a few transformer layers over the target's own embedding and head.

A draft is a `LlamaForCausalLM` of the target's width whose token embedding and output head are the
target's (shared tensors, frozen), so `ModelDrafter` and the engine's Llama fast path run it
unchanged. Only the draft's own weights are stored (its layers and final norm): for the default
target the tied 49152 x 576 embedding is 28M parameters, more than two layers (2 x 3.5M), and
leaving it out is what keeps a shipped draft under 20 MB.

File format: one safetensors file; its metadata holds the draft's Llama config, the fingerprint of
the tokenizer it was trained with (vocab size + SHA-256 of the vocabulary) and where it came from.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import nn

from quench.errors import QuenchError
from quench.models.loading import LoadedModel

log = logging.getLogger(__name__)

DRAFT_FORMAT = "quench-draft/1"
ASSETS = Path(__file__).parent / "assets"
SHARED = ("model.embed_tokens.weight", "lm_head.weight")  # taken from the target at load time, never stored
HEAD_IDS = "head_token_ids"  # stored only by drafts with a reduced head


class SubsetHead(nn.Module):
    """An output head over a subset of the vocabulary (rows of the target's head, frozen).

    forward returns full-vocabulary logits with -inf outside the subset, so a draft with this head
    is a drop-in causal LM: it never proposes those tokens, and speculative sampling stays lossless
    because the recovered distribution max(0, target - draft) covers them.
    """

    def __init__(self, full_weight: torch.Tensor, token_ids: torch.Tensor) -> None:
        super().__init__()
        self.vocab_size = full_weight.shape[0]
        self.register_buffer("token_ids", token_ids.long(), persistent=False)  # (V',)
        self.weight = nn.Parameter(full_weight.detach()[token_ids].clone(), requires_grad=False)  # (V', Dm)
        self.bias = None  # what runners reading `lm_head.bias` expect

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = torch.nn.functional.linear(hidden, self.weight)  # (..., V')
        return scatter_columns(logits, self.token_ids, self.vocab_size, float("-inf"))


def scatter_columns(values: torch.Tensor, token_ids: torch.Tensor, vocab_size: int, fill: float) -> torch.Tensor:
    """(..., V') values over token_ids -> (..., V), `fill` elsewhere (-inf for logits, 0 for probabilities)."""
    full = values.new_full((*values.shape[:-1], vocab_size), fill)
    full[..., token_ids] = values
    return full


def shipped_draft_path(preset: str) -> Path:
    return ASSETS / f"{preset}.draft.safetensors"


def vocab_fingerprint(tokenizer: Any) -> tuple[int, str]:
    """(vocabulary size, SHA-256 of the sorted token -> id map): equal only for interchangeable tokenizers."""
    vocab = tokenizer.get_vocab()
    digest = hashlib.sha256(json.dumps(sorted(vocab.items()), ensure_ascii=False).encode()).hexdigest()
    return len(vocab), digest


def _target_embeddings(target: nn.Module) -> tuple[nn.Embedding, nn.Module]:
    embed, head = target.get_input_embeddings(), target.get_output_embeddings()
    if embed is None or head is None or embed.weight.shape[1] != head.weight.shape[1]:
        raise QuenchError("the target model needs an input embedding and an output head of the same width")
    return embed, head


def draft_config(target: nn.Module, num_layers: int) -> Any:
    """The draft's Llama config: the target's own for Llama targets, else a Llama of the target's width."""
    from transformers import LlamaConfig

    config = target.config
    if getattr(config, "model_type", None) == "llama":
        draft = copy.deepcopy(config)
        draft.num_hidden_layers = num_layers
        draft.layer_types = None  # recomputed from num_hidden_layers where transformers uses it
        return LlamaConfig.from_dict(draft.to_dict())
    embed, head = _target_embeddings(target)
    width = embed.weight.shape[1]
    heads = max(1, width // 64)
    return LlamaConfig(
        vocab_size=head.weight.shape[0], hidden_size=width, intermediate_size=4 * width, num_hidden_layers=num_layers,
        num_attention_heads=heads, num_key_value_heads=heads, head_dim=width // heads,
        max_position_embeddings=getattr(config, "max_position_embeddings", 4096), tie_word_embeddings=False,
        bos_token_id=getattr(config, "bos_token_id", None), eos_token_id=getattr(config, "eos_token_id", None),
        pad_token_id=getattr(config, "pad_token_id", None),
    )


def attach_target(draft: nn.Module, target: nn.Module) -> nn.Module:
    """Point the draft's embedding and head at the target's weights (shared, frozen, not copied)."""
    embed, head = _target_embeddings(target)
    draft.model.embed_tokens.weight = embed.weight
    draft.model.embed_tokens.num_embeddings = embed.weight.shape[0]
    draft.lm_head.weight = head.weight
    draft.lm_head.out_features = head.weight.shape[0]
    draft.model.embed_tokens.weight.requires_grad_(False)
    draft.lm_head.weight.requires_grad_(False)
    return draft


def _empty_draft(config: Any, dtype: torch.dtype) -> nn.Module:
    """A draft whose embedding and head hold no memory of their own until `attach_target`."""
    from transformers import LlamaForCausalLM

    config = copy.deepcopy(config)
    config.tie_word_embeddings = False  # the head is set explicitly; tying would rebind it to the embedding
    vocab, pad = config.vocab_size, config.pad_token_id
    config.vocab_size, config.pad_token_id = 1, None  # tiny placeholders instead of two vocab x width matrices
    draft = LlamaForCausalLM(config).to(dtype)
    draft.config.vocab_size, draft.config.pad_token_id = vocab, pad
    return draft


def build_draft(target: nn.Module, source_layers: Sequence[int] = (0, -1), num_layers: int | None = None) -> nn.Module:
    """A new draft: for Llama targets, copies of the target's layers `source_layers` and final norm.

    Other architectures get `num_layers` freshly initialised Llama layers of the target's width.
    """
    config = target.config
    dtype = _target_embeddings(target)[0].weight.dtype
    if getattr(config, "model_type", None) == "llama":
        count = config.num_hidden_layers
        picked = [layer % count for layer in source_layers]
        draft = _empty_draft(draft_config(target, len(picked)), dtype)
        with torch.no_grad():
            for index, source in enumerate(picked):
                draft.model.layers[index].load_state_dict(target.model.layers[source].state_dict())
            draft.model.norm.load_state_dict(target.model.norm.state_dict())
    else:
        draft = _empty_draft(draft_config(target, num_layers or len(source_layers)), dtype)
    return attach_target(draft, target).eval()


def own_state(draft: nn.Module) -> dict[str, torch.Tensor]:
    """The draft's own weights: everything but the target's shared embedding and head."""
    return {name: tensor for name, tensor in draft.state_dict().items() if name not in SHARED}


def use_subset_head(draft: nn.Module, token_ids: torch.Tensor) -> nn.Module:
    """Replace the draft's full head (the target's) by its rows for `token_ids`."""
    draft.lm_head = SubsetHead(draft.lm_head.weight, token_ids)
    return draft


def save_draft(
    path: Path,
    draft: nn.Module,
    tokenizer: Any,
    target_name: str,
    extra: dict[str, str] | None = None,
    head_token_ids: torch.Tensor | None = None,
) -> None:
    """Write the draft's own weights (contiguous copies) and its metadata to one safetensors file."""
    from safetensors.torch import save_file

    size, digest = vocab_fingerprint(tokenizer)
    metadata = {
        "format": DRAFT_FORMAT,
        "config": draft.config.to_json_string(use_diff=False),
        "vocab_size": str(size),
        "vocab_sha256": digest,
        "target": target_name,
        **(extra or {}),
    }
    tensors = {name: t.detach().contiguous().clone() for name, t in own_state(draft).items()}
    if head_token_ids is not None:
        tensors[HEAD_IDS] = head_token_ids.to(torch.int64).contiguous()
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(path.name + ".tmp")
    save_file(tensors, str(staging), metadata=metadata)
    staging.replace(path)  # a killed save never leaves a half-written draft under the final name


def read_draft_file(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """(tensors, metadata) of a draft file; QuenchError for anything that is not one."""
    from safetensors import safe_open

    if not path.is_file():
        raise QuenchError(f"{path}: draft file not found")
    try:
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
            tensors = {name: f.get_tensor(name) for name in f.keys()}
    except Exception as err:  # safetensors raises several types for truncated or foreign files
        raise QuenchError(f"{path}: not a readable draft (corrupt or not safetensors): {err}") from None
    if metadata.get("format") != DRAFT_FORMAT:
        raise QuenchError(f"{path}: not a quench draft (metadata format {metadata.get('format')!r})")
    return tensors, metadata


def check_tokenizer(path: Path, metadata: dict[str, str], tokenizer: Any) -> None:
    size, digest = vocab_fingerprint(tokenizer)
    if str(size) != metadata.get("vocab_size") or digest != metadata.get("vocab_sha256"):
        raise QuenchError(
            f"{path}: the draft was trained with another tokenizer (vocab size {metadata.get('vocab_size')}, "
            f"hash {metadata.get('vocab_sha256', '')[:12]}) than the target's ({size}, {digest[:12]}); "
            "train a draft for this target with `quench draft train`"
        )


def draft_from_file(path: Path, target: LoadedModel) -> nn.Module:
    """Rebuild a stored draft around the target's embedding and head."""
    from transformers import LlamaConfig

    tensors, metadata = read_draft_file(path)
    check_tokenizer(path, metadata, target.tokenizer)
    try:
        config = LlamaConfig.from_dict(json.loads(metadata["config"]))
    except (KeyError, ValueError, TypeError) as err:
        raise QuenchError(f"{path}: unreadable draft config: {err}") from None
    embed, _ = _target_embeddings(target.model)
    if config.hidden_size != embed.weight.shape[1]:
        raise QuenchError(f"{path}: draft width {config.hidden_size} != target width {embed.weight.shape[1]}")
    head_ids = tensors.pop(HEAD_IDS, None)
    if head_ids is not None and (head_ids.ndim != 1 or int(head_ids.min()) < 0 or int(head_ids.max()) >= config.vocab_size):
        raise QuenchError(f"{path}: draft head token ids out of the vocabulary")
    draft = _empty_draft(config, embed.weight.dtype)
    expected = set(own_state(draft))
    if set(tensors) != expected:
        missing, unexpected = sorted(expected - set(tensors)), sorted(set(tensors) - expected)
        raise QuenchError(f"{path}: draft weights do not match its config (missing {missing[:3]}, unexpected {unexpected[:3]})")
    try:
        draft.load_state_dict({k: v.to(embed.weight.dtype) for k, v in tensors.items()}, strict=False)
    except RuntimeError as err:
        raise QuenchError(f"{path}: draft weights have the wrong shapes: {err}") from None
    draft = attach_target(draft, target.model)
    if head_ids is not None:
        use_subset_head(draft, head_ids)
    return draft.to(embed.weight.device).eval()


def load_draft(spec: str, target: LoadedModel) -> nn.Module:
    """The draft for `target`: "auto" = the one shipped for the target's preset, else a draft file's path."""
    if target is None or getattr(target, "model", None) is None:
        raise QuenchError("a draft model needs its target model loaded first")
    if spec == "auto":
        path = shipped_draft_path(target.name)
        if not path.is_file():
            shipped = sorted(p.name.split(".")[0] for p in ASSETS.glob("*.draft.safetensors"))
            raise QuenchError(
                f"no shipped draft for model {target.name!r} (shipped: {', '.join(shipped) or 'none'}); "
                "train one with `quench draft train` and pass its path"
            )
    else:
        path = Path(spec).expanduser()
    draft = draft_from_file(path, target)
    log.info("draft %s: %d layers, %.1fM own parameters", path.name, draft.config.num_hidden_layers,
             sum(t.numel() for t in own_state(draft).values()) / 1e6)
    return draft
