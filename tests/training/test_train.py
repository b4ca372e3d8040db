"""End-to-end training on a tiny model: ALP's effect, exact resume, the exported checkpoint."""

import json
from pathlib import Path

import torch
from safetensors.torch import load_file

from quench.models import load_model
from quench.training import DataSettings, LoraSettings, LossWeights, TrainConfig, train
from quench.training.batching import collate
from quench.training.data import Encoder, Item, build_examples, load_or_make_variants
from quench.training.objective import LogitsModule, compute_loss
from training_helpers import tiny_loaded

# A few of each kind: context-free (dead code, operand swap) and context-sensitive (renamings).
TRANSFORMS = ("DeadCodeInserter", "OperandSwap", "VarRenamerNaive", "FuncRenameCamelCase")


def tiny_config(strategies: str, **changes) -> TrainConfig:
    settings = dict(model="tiny", strategies=frozenset(strategies.split(",")) - {""}, lora=None, batch_size=2,
                    lr=3e-3, max_length=400, save_every=1000,
                    data=DataSettings(transforms=TRANSFORMS, validate=False))
    return TrainConfig(**(settings | changes))


def mean_pair_distance(loaded, problems, out: Path) -> float:
    """Mean ALP distance over every (nominal, variant) pair of the training variants."""
    variants = load_or_make_variants(problems, DataSettings(transforms=TRANSFORMS, validate=False), out / "v.jsonl")
    encoder = Encoder(loaded.tokenizer, loaded.prompt_format, str, masked=False)
    pairs = [Item(pair=s) for e in build_examples(problems, variants, encoder, 400) for s in e.variants]
    module = LogitsModule(loaded.model).eval()
    with torch.no_grad():
        batch = collate(pairs, 0, 64, torch.Generator())
        return compute_loss(module, batch, frozenset({"alp"}), LossWeights()).alp


def test_alp_brings_paired_logits_closer(problems, tmp_path):
    distances = {}
    for strategy in ("ba", "alp"):
        loaded = tiny_loaded("completion")
        # a large weight: the tiny model's logits are near zero, so are their distances
        config = tiny_config(strategy, epochs=4, losses=LossWeights(alp=100.0))
        train(config, loaded, problems, tmp_path / strategy)
        distances[strategy] = mean_pair_distance(loaded, problems, tmp_path / strategy)
    assert distances["alp"] < 0.5 * distances["ba"], distances  # measured: about 4x smaller


def test_resume_gives_identical_weights(problems, tmp_path):
    lora = LoraSettings(rank=4, alpha=8, dropout=0.2, targets=("q_proj", "v_proj", "down_proj"))
    config = tiny_config("mda,alpd,cl-seq,cl-tok", epochs=2, lora=lora)  # 2 steps per epoch: 4 in all
    whole = train(config, tiny_loaded("chat"), problems, tmp_path / "whole")
    assert (whole.steps, whole.finished) == (4, True)
    first = train(config, tiny_loaded("chat"), problems, tmp_path / "split", stop_after=2)
    assert (first.steps, first.finished) == (2, False)
    assert not (tmp_path / "split" / "model.safetensors").exists()
    second = train(config, tiny_loaded("chat"), problems, tmp_path / "split", resume=True)
    assert (second.steps, second.finished) == (4, True)
    a, b = load_file(tmp_path / "whole" / "model.safetensors"), load_file(tmp_path / "split" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    base = tiny_loaded("chat").model.state_dict()
    assert any(not torch.equal(a[k], base[k]) for k in a)  # the merged adapters changed the weights
    log = [json.loads(line) for line in (tmp_path / "split" / "train_log.jsonl").read_text().splitlines()]
    assert [row["step"] for row in log] == [1, 2, 3, 4]


def test_checkpoint_loads_as_a_model(problems, tmp_path):
    train(tiny_config("da", lora=LoraSettings(rank=2, targets=("q_proj",), last_layers=1)),
          tiny_loaded("chat"), problems, tmp_path / "out")
    meta = json.loads((tmp_path / "out" / "quench.json").read_text())
    assert meta["prompt_format"] == "chat" and meta["strategies"] == ["da"]
    loaded = load_model(str(tmp_path / "out"), dtype="float32", prompt_format=meta["prompt_format"])
    assert loaded.tokenizer("abc")["input_ids"] == tiny_loaded().tokenizer("abc")["input_ids"]
    assert not any("lora" in name for name, _ in loaded.model.named_parameters())


def test_overwrite_starts_from_scratch(problems, tmp_path):
    config = tiny_config("", epochs=2)
    train(config, tiny_loaded(), problems, tmp_path / "out", stop_after=3)
    result = train(config, tiny_loaded(), problems, tmp_path / "out", overwrite=True, stop_after=1)
    assert result.steps == 1  # not 4: the old state was not resumed
    log = [json.loads(line)["step"] for line in (tmp_path / "out" / "train_log.jsonl").read_text().splitlines()]
    assert log == [1]
