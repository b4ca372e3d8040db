"""Targets, masked augmentation, alignment, collation and epoch order on tiny problems."""

import torch

from quench.datasets import Problem
from quench.perturbations import apply_seeded, create
from quench.training.batching import collate
from quench.training.config import DataSettings, TrainConfig
from quench.training.data import Encoder, Example, Item, epoch_items, shard, steps_per_epoch
from quench.training.encoding import Encoded, align, encode, name_token_ids
from quench.training.losses import IGNORE
from quench.training.targets import FENCE_OPEN, echo_mask_spans, renamed_identifiers, train_text
from training_helpers import tiny_loaded

NOMINAL = Problem("T/0", 'def f(a):\n    """Doc."""\n    x = a\n', "    return x\n", "def check(c):\n    pass\n", "f")
RENAMED = NOMINAL.with_changes(prompt=NOMINAL.prompt.replace("x =", "VAR_0 ="),
                               canonical_solution="    return VAR_0\n", extra=(("perturbation", "VarRenamerNaive"),))
DEAD = NOMINAL.with_changes(prompt=NOMINAL.prompt + "    while False:\n        x = a\n",
                            extra=(("perturbation", "DeadCodeInserter"),))


def masked_text(tokenizer, encoded: Encoded) -> str:
    return "".join(tokenizer.decode([encoded.input_ids[i]]) for i in sorted(encoded.masked))


def test_chat_target_is_the_fenced_whole_function():
    loaded = tiny_loaded("chat")
    text = train_text(NOMINAL, "chat", lambda p: f"<user>{p}<assistant>")
    assert text.prefix == f"<user>{NOMINAL.prompt}<assistant>"
    assert text.target == "```python\n" + NOMINAL.prompt + "    return x\n```"
    assert text.target[text.echo[0]:text.echo[1]] == NOMINAL.prompt
    encoded = encode(loaded.tokenizer, text, add_special_tokens=False)
    assert encoded.input_ids[-1] == loaded.tokenizer.eos_token_id
    assert loaded.tokenizer.decode(encoded.target_ids[:-1]) == text.target


def test_completion_target_is_the_program():
    text = train_text(NOMINAL, "completion", lambda p: p)
    assert (text.prefix, text.target, text.echo) == ("", NOMINAL.prompt + "    return x\n", (0, len(NOMINAL.prompt)))


def test_masked_augmentation_masks_exactly_the_renamed_prompt_tokens():
    loaded = tiny_loaded("chat")
    fmt = lambda p: p  # noqa: E731
    base, variant = train_text(NOMINAL, "chat", fmt), train_text(RENAMED, "chat", fmt)
    spans = echo_mask_spans(base, variant)
    start = len(FENCE_OPEN) + RENAMED.prompt.index("VAR_0")
    assert spans == [(start, start + len("VAR_0"))]  # the solution's VAR_0 stays a target
    encoded = encode(loaded.tokenizer, variant, False, spans)
    assert masked_text(loaded.tokenizer, encoded) == "VAR_0"
    assert [encoded.target_start + start + k for k in range(5)] == sorted(encoded.masked)


def test_masked_augmentation_masks_inserted_dead_code():
    loaded = tiny_loaded("completion")
    base, variant = train_text(NOMINAL, "completion", str), train_text(DEAD, "completion", str)
    encoded = encode(loaded.tokenizer, variant, False, echo_mask_spans(base, variant))
    assert masked_text(loaded.tokenizer, encoded) == "    while False:\n        x = a\n"


def test_masking_a_real_perturbation(problems):
    loaded = tiny_loaded("chat")
    encoder = Encoder(loaded.tokenizer, "chat", lambda p: p, masked=True)
    variant = apply_seeded(create("VarRenamerNaive"), problems[1], 0)
    sample = encoder.variant(problems[1], variant)
    assert masked_text(loaded.tokenizer, sample.variant) == "VAR_0" * variant.prompt.count("VAR_0")
    assert "VAR_0" in variant.canonical_solution  # renamed in the hidden rest too, and trained there
    unmasked = Encoder(loaded.tokenizer, "chat", lambda p: p, masked=False).variant(problems[1], variant)
    assert not unmasked.variant.masked and unmasked.variant.input_ids == sample.variant.input_ids


def test_alignment_pairs_equal_tokens_and_skips_the_renamed_ones():
    loaded = tiny_loaded("completion")
    nominal = encode(loaded.tokenizer, train_text(NOMINAL, "completion", str), False)
    variant = encode(loaded.tokenizer, train_text(RENAMED, "completion", str), False)
    pairs = align(nominal, variant)
    assert all(nominal.input_ids[a] == variant.input_ids[b] for a, b in pairs)
    assert len(pairs) == len(nominal) - 2  # the two `x` differ; everything else aligns
    assert renamed_identifiers(NOMINAL.prompt, RENAMED.prompt) == {"x", "VAR_0"}
    assert renamed_identifiers(NOMINAL.prompt, DEAD.prompt) == frozenset()
    ids = name_token_ids(loaded.tokenizer, ["x", "VAR_0"])
    assert sorted(loaded.tokenizer.decode([i]) for i in ids) == ["0", "A", "R", "V", "_", "x"]


def test_collate_shifts_targets_and_skips_masked_tokens():
    seq = Encoded((5, 6, 7, 8, 9), target_start=2, masked=frozenset({3}))
    short = Encoded((5, 7, 9), target_start=1)
    batch = collate([Item(single=seq), Item(single=short)], pad_id=0, tok_max_aligned=4, generator=torch.Generator())
    assert batch.input_ids.tolist() == [[5, 6, 7, 8, 9], [5, 7, 9, 0, 0]]
    # position t predicts token t+1: 7 (t=1), 8 is masked (t=2), 9 (t=3)
    assert batch.targets.tolist() == [[IGNORE, 7, IGNORE, 9, IGNORE], [7, 9, IGNORE, IGNORE, IGNORE]]
    assert batch.region.tolist() == [[False, False, True, True, True], [False, True, True, False, False]]
    assert batch.pair_nominal.numel() == 0


def test_collate_pairs(problems):
    loaded = tiny_loaded("completion")
    encoder = Encoder(loaded.tokenizer, "completion", str, masked=False)
    sample = encoder.variant(problems[0], apply_seeded(create("VarRenamerNaive"), problems[0], 0))
    items = [Item(single=encoder.original(problems[1])), Item(pair=sample)]
    batch = collate(items, 0, tok_max_aligned=10, generator=torch.Generator().manual_seed(0))
    assert (batch.pair_nominal.tolist(), batch.pair_variant.tolist()) == ([1], [2])
    assert batch.align_pair.numel() == len([p for p in sample.aligned if min(p) >= 1])
    assert int(batch.align_sampled.sum()) == 10
    assert set(batch.drop_token.tolist()) == set(sample.names) and sample.names


def test_epoch_order_depends_only_on_seed_and_epoch():
    examples = [Example(f"T/{i}", Encoded((i, i), 1), ()) for i in range(10)]
    config = TrainConfig(data=DataSettings())
    first, again = epoch_items(examples, config, 0), epoch_items(examples, config, 0)
    assert first == again and first != epoch_items(examples, config, 1)
    assert steps_per_epoch(10, 3, 2) == 2
    # two processes, batch 3: step 1 covers items 6..11, wrapping to 0 and 1
    assert shard(first, 1, 3, 1, 2) == [first[9], first[0], first[1]]
