"""Draft models: built from the target's layers, stored without the target's embedding, loaded back exactly."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers import DRAFT_EVERYTHING, char_tokenizer, tiny_llama  # noqa: E402
from quench.errors import QuenchError  # noqa: E402
from quench.engine.drafters import ModelDrafter  # noqa: E402
from quench.engine.backend import QuenchBackend, make_draft_runner
from quench.engine.config import EngineConfig  # noqa: E402
from quench.engine.rows import Row  # noqa: E402
from quench.engine.scheduler import WorkItem  # noqa: E402
from quench.engine.types import GenerationRequest, SamplingParams  # noqa: E402
from quench.models import LoadedModel  # noqa: E402
from quench.models.draft import (  # noqa: E402
    SubsetHead, build_draft, load_draft, own_state, read_draft_file, save_draft, shipped_draft_path,
    use_subset_head,
)

PROMPTS = ["def f(x):\n", "x = [1, 2, 3]\nfor i in x:\n    ", "import os\n\nclass A:\n", "print(1)"]


@pytest.fixture
def target() -> LoadedModel:
    return LoadedModel(tiny_llama(), char_tokenizer(), "tiny", "completion", torch.float32, "")


@pytest.fixture
def draft_file(target, tmp_path) -> Path:
    path = tmp_path / "draft.safetensors"
    save_draft(path, build_draft(target.model), target.tokenizer, "tiny")
    return path


def test_a_draft_starts_from_the_targets_layers_and_shares_its_embedding_and_head(target):
    draft = build_draft(target.model, (0, -1))
    assert draft.config.num_hidden_layers == 2
    last = target.model.model.layers[-1].self_attn.q_proj.weight
    assert torch.equal(draft.model.layers[1].self_attn.q_proj.weight, last)
    assert draft.model.layers[1].self_attn.q_proj.weight.data_ptr() != last.data_ptr()  # a copy: trains apart
    assert draft.model.embed_tokens.weight is target.model.model.embed_tokens.weight
    assert draft.lm_head.weight is target.model.lm_head.weight
    assert not draft.lm_head.weight.requires_grad


def test_the_file_holds_only_the_drafts_own_weights_and_loads_back_exactly(target, draft_file):
    tensors, metadata = read_draft_file(draft_file)
    assert not any("embed_tokens" in name or "lm_head" in name for name in tensors)
    assert metadata["target"] == "tiny"
    original = build_draft(target.model)
    loaded = load_draft(str(draft_file), target)
    ids = torch.tensor([[1, 10, 11, 12, 13]])
    assert torch.equal(original(ids).logits, loaded(ids).logits)
    assert set(own_state(loaded)) == set(tensors)


def test_a_tokenizer_with_another_vocabulary_is_refused(target, draft_file):
    other = char_tokenizer()
    other.add_tokens(["<extra>"])
    with pytest.raises(QuenchError, match="another tokenizer"):
        load_draft(str(draft_file), LoadedModel(target.model, other, "tiny", "completion", torch.float32, ""))


def test_same_size_but_different_vocabulary_is_refused(target, tmp_path):
    swapped = char_tokenizer()
    vocab = swapped.get_vocab()
    assert len(vocab) == target.model.config.vocab_size
    path = tmp_path / "draft.safetensors"
    save_draft(path, build_draft(target.model), target.tokenizer, "tiny")
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    renumbered = {token: (index + 1) % len(vocab) for token, index in vocab.items()}  # same size, other ids
    core = Tokenizer(models.WordLevel(renumbered, unk_token="<pad>"))
    core.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    other = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>")
    with pytest.raises(QuenchError, match="another tokenizer"):
        load_draft(str(path), LoadedModel(target.model, other, "tiny", "completion", torch.float32, ""))


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
def test_a_corrupt_draft_file_is_a_clear_error(target, draft_file, damage):
    data = draft_file.read_bytes()
    draft_file.write_bytes({"truncated": data[: len(data) // 2], "garbage": b"\x07" * 300, "empty": b""}[damage])
    with pytest.raises(QuenchError, match="corrupt|not a"):
        load_draft(str(draft_file), target)


def test_a_safetensors_file_that_is_not_a_draft_is_refused(target, tmp_path):
    from safetensors.torch import save_file

    path = tmp_path / "model.safetensors"
    save_file({"x": torch.zeros(2)}, str(path))
    with pytest.raises(QuenchError, match="not a quench draft"):
        load_draft(str(path), target)


def test_missing_file_missing_target_and_unknown_preset(target, tmp_path):
    with pytest.raises(QuenchError, match="not found"):
        load_draft(str(tmp_path / "nothing.safetensors"), target)
    with pytest.raises(QuenchError, match="target model"):
        load_draft("auto", None)
    with pytest.raises(QuenchError, match="no shipped draft"):
        load_draft("auto", target)


def test_a_subset_head_scores_only_its_tokens(target):
    draft = use_subset_head(build_draft(target.model), torch.tensor([2, 5, 7, 40]))
    logits = draft(torch.tensor([[1, 10, 11]])).logits  # (1, 3, V)
    assert logits.shape[-1] == target.model.config.vocab_size
    assert torch.isinf(logits[..., [0, 1, 3, 4]]).all() and torch.isfinite(logits[..., [2, 5, 7, 40]]).all()
    assert set(logits[0].argmax(-1).tolist()) <= {2, 5, 7, 40}


def subset_draft_file(target, path: Path) -> Path:
    ids = torch.arange(3, 60)
    save_draft(path, use_subset_head(build_draft(target.model, (1,)), ids), target.tokenizer, "tiny", head_token_ids=ids)
    return path


def test_a_subset_head_draft_round_trips(target, tmp_path):
    loaded = load_draft(str(subset_draft_file(target, tmp_path / "d.safetensors")), target)
    assert isinstance(loaded.lm_head, SubsetHead) and loaded.lm_head.token_ids.tolist() == list(range(3, 60))


def greedy(target, draft=None, fast_path=True, k=3):
    tokenizer = target.tokenizer
    requests = [GenerationRequest(f"p{i}", tuple(tokenizer(p)["input_ids"])) for i, p in enumerate(PROMPTS)]
    config = EngineConfig(batch_size=2, drafter="draft" if draft is not None else "none", draft_length="fixed",
                          draft_tokens=k, fast_path=fast_path, **DRAFT_EVERYTHING)
    backend = QuenchBackend(target.model, tokenizer, config, draft_model=draft)  # maps a reduced head itself
    results = backend.generate(requests, SamplingParams(max_new_tokens=20))
    return {r.key: r.token_ids for r in results}, backend


@pytest.mark.parametrize("fast_path", [True, False])
@pytest.mark.parametrize("subset", [False, True])
def test_engine_greedy_with_a_loaded_draft_equals_greedy_without(target, tmp_path, fast_path, subset):
    path = subset_draft_file(target, tmp_path / "d.safetensors") if subset else tmp_path / "d.safetensors"
    if not subset:
        save_draft(path, build_draft(target.model), target.tokenizer, "tiny")
    draft = load_draft(str(path), target)
    plain, _ = greedy(target)
    speculative, backend = greedy(target, draft, fast_path)
    assert speculative == plain
    assert backend.last_stats.drafted > 0


@pytest.mark.parametrize("drafter", ["draft", "hybrid"])
def test_the_engine_maps_a_reduced_head_draft_back_to_the_full_vocabulary(target, tmp_path, drafter):
    draft = load_draft(str(subset_draft_file(target, tmp_path / "d.safetensors")), target)
    config = EngineConfig(batch_size=2, drafter=drafter, draft_length="fixed", draft_tokens=3, **DRAFT_EVERYTHING)
    backend = QuenchBackend(target.model, target.tokenizer, config, draft_model=draft)  # no mapping by the caller
    assert backend.draft_columns.ids.tolist() == list(range(3, 60))  # the fast path scores the head's rows only
    assert backend.draft_columns.positions.shape == (target.model.config.vocab_size,)
    requests = [GenerationRequest(f"p{i}", tuple(target.tokenizer(p)["input_ids"])) for i, p in enumerate(PROMPTS)]
    sampled = list(backend.generate(requests, SamplingParams(temperature=1.0, max_new_tokens=12, seed=1)))
    assert len(sampled) == len(PROMPTS) and backend.last_stats.drafted > 0  # sampled: verified by column


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_reduced_head_draft_proposes_the_same_on_the_fast_path_as_through_its_module(target, tmp_path, temperature):
    """The fast path scores the head's 57 rows only and maps its picks back; the generic path calls the
    module, whose head returns full logits (-inf elsewhere). Same tokens, same probabilities (float64)."""
    draft = load_draft(str(subset_draft_file(target, tmp_path / "d.safetensors")), target).double()
    proposals = []
    for fast_path in (True, False):
        runner, columns = make_draft_runner(draft, EngineConfig(fast_path=fast_path))
        assert (columns is not None) == fast_path
        drafter = ModelDrafter(runner, 2, 64, columns=columns)
        prompts = [[5, 6, 7], [8, 9, 10, 11]]
        rows = [Row(b, GenerationRequest(f"r{b}", tuple(p)), 0, torch.Generator().manual_seed(b), list(p), len(p))
                for b, p in enumerate(prompts)]
        drafter.admit([(b, WorkItem(b, row.request, 0)) for b, row in enumerate(rows)])
        proposals.append(drafter.propose(rows, [3, 3], SamplingParams(temperature=temperature)))
    fast, generic = proposals
    assert torch.equal(fast.tokens, generic.tokens) and set(fast.tokens.flatten().tolist()) <= set(range(3, 60))
    if temperature:  # the fast path's probabilities stay over the head's columns, the generic path's cover all
        vocab = target.model.config.vocab_size
        assert fast.columns.ids.tolist() == list(range(3, 60)) and generic.columns is None
        assert fast.probs.shape == (2, 3, 57) and generic.probs.shape == (2, 3, vocab)
        spread = torch.zeros(2, 3, vocab, dtype=fast.probs.dtype).index_copy(-1, fast.columns.ids, fast.probs)
        assert torch.allclose(spread, generic.probs, rtol=0, atol=1e-6) and not generic.probs[..., :3].any()


@pytest.mark.slow
def test_the_shipped_draft_loads_and_keeps_greedy_output(tmp_path):
    from quench.datasets import load_humaneval
    from quench.models import encode_prompt, load_model

    target = load_model(dtype="float32")
    if not shipped_draft_path(target.name).is_file():
        pytest.skip("no shipped draft in this checkout")
    draft = load_draft("auto", target)
    problems = load_humaneval()[:2]
    requests = [GenerationRequest(p.task_id, encode_prompt(target, p.prompt)) for p in problems]
    sampling = SamplingParams(max_new_tokens=48)
    plain = QuenchBackend(target.model, target.tokenizer, EngineConfig(batch_size=2))
    speculative = QuenchBackend(target.model, target.tokenizer, EngineConfig(batch_size=2, drafter="draft", **DRAFT_EVERYTHING),
                                 draft_model=draft)
    expected = {r.key: r.token_ids for r in plain.generate(requests, sampling)}
    got = {r.key: r.token_ids for r in speculative.generate(requests, sampling)}
    assert got == expected
    assert speculative.last_stats.acceptance_rate > 0.1  # an untrained draft accepts ~0
