"""A real (tiny) Llama that writes a script: each token names its successor, so greedy output is known.

The vocabulary is whole lines of text; the embedding is one-hot, every layer adds nothing (zero
output projections) and the LM head maps token t to its successor. Greedy decoding from a prompt
ending in token t therefore walks the successor chain: the text rules can be checked on real
code-shaped answers through the real engine, with no trained model.
"""

from __future__ import annotations

import torch
from tokenizers import Tokenizer, decoders, models
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SPECIAL = ["<pad>", "<s>", "</s>"]


def line_tokenizer(pieces: list[str]) -> PreTrainedTokenizerFast:
    vocab = {piece: i for i, piece in enumerate(SPECIAL + pieces)}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<s>", eos_token="</s>")


@torch.no_grad()
def scripted_llama(successor: dict[int, int], vocab_size: int) -> LlamaForCausalLM:
    """Greedy next token of t is successor[t] (else EOS), at any position and in any batch."""
    hidden = max(32, vocab_size + (-vocab_size) % 8)  # 4 heads of an even size (RoPE)
    config = LlamaConfig(
        vocab_size=vocab_size, hidden_size=hidden, intermediate_size=8, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )
    model = LlamaForCausalLM(config).float().eval()
    model.model.embed_tokens.weight.zero_()
    model.model.embed_tokens.weight[:, :vocab_size] = torch.eye(vocab_size)  # one-hot embeddings
    for layer in model.model.layers:  # every block adds zero to the residual stream
        layer.self_attn.o_proj.weight.zero_()
        layer.mlp.down_proj.weight.zero_()
    model.lm_head.weight.zero_()
    for token in range(vocab_size):
        model.lm_head.weight[successor.get(token, 2), token] = 1.0
    return model


class Script:
    """A tokenizer and model for answers written as lists of lines; `ids(lines)` encodes them."""

    def __init__(self, chains: list[list[str]]) -> None:
        pieces = sorted({line for chain in chains for line in chain})
        self.tokenizer = line_tokenizer(pieces)
        self.index = {piece: i + len(SPECIAL) for i, piece in enumerate(pieces)}
        successor: dict[int, int] = {}
        for chain in chains:  # each chain: prompt's last line, then the answer; its last line loops to itself
            for a, b in zip(chain, chain[1:] + chain[-1:]):
                ta, tb = self.index[a], self.index[b]
                assert successor.setdefault(ta, tb) == tb, f"{a!r} has two successors"
        self.model = scripted_llama(successor, len(SPECIAL) + len(pieces))

    def ids(self, lines: list[str]) -> tuple[int, ...]:
        return tuple(self.index[line] for line in lines)
