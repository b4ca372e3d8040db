"""A bad configuration fails before training starts, with a QuenchError naming the problem."""

import argparse

import pytest

from quench.cli import train as train_cli
from quench.errors import QuenchError
from quench.training import DataSettings, LoraSettings, TrainConfig, check_config, parse_strategies, train
from quench.training.config import config_from_json
from training_helpers import tiny_loaded

WITH_DATA = DataSettings(transforms=("VarRenamerNaive",))


@pytest.mark.parametrize("config, message", [
    (TrainConfig(strategies=frozenset({"da", "mda"}), data=WITH_DATA), "mda is da with masking"),
    (TrainConfig(strategies=frozenset({"alp", "alpd"}), data=WITH_DATA), "alpd is alp with name dropout"),
    (TrainConfig(strategies=frozenset({"da", "alp"}), data=WITH_DATA), "paired strategies already train"),
    (TrainConfig(strategies=frozenset({"alp"})), "needs perturbations"),
    (TrainConfig(strategies=frozenset({"cl-seq"}), batch_size=1, data=WITH_DATA), "at least 2"),
    (TrainConfig(lr=0.0), "--lr must be positive"),
    (TrainConfig(epochs=0), "--epochs must be at least 1"),
    (TrainConfig(max_length=8), "--max-length"),
    (TrainConfig(data=DataSettings(splits=("test",))), "never test"),
    (TrainConfig(lora=LoraSettings(rank=0)), "--lora-rank"),
    (TrainConfig(lora=LoraSettings(last_layers=0)), "--lora-layers"),
])
def test_bad_configuration_is_refused(config, message):
    with pytest.raises(QuenchError, match=message):
        check_config(config)


def test_unknown_strategy():
    assert parse_strategies("none") == frozenset() and parse_strategies("da, alp") == {"da", "alp"}
    with pytest.raises(QuenchError, match="unknown strategy fgsm"):
        parse_strategies("da,fgsm")


def test_config_round_trips_through_json():
    config = TrainConfig(strategies=frozenset({"mda", "alpd"}), data=WITH_DATA, lora=LoraSettings(last_layers=2))
    assert config_from_json(config.to_json()) == config


def test_model_dependent_checks_fail_before_training(problems, tmp_path):
    bad_layers = TrainConfig(model="tiny", lora=LoraSettings(last_layers=5))
    with pytest.raises(QuenchError, match="the model has 2 layers"):
        train(bad_layers, tiny_loaded(), problems, tmp_path / "a")
    bad_target = TrainConfig(model="tiny", lora=LoraSettings(targets=("c_attn",)))
    with pytest.raises(QuenchError, match="no module named c_attn"):
        train(bad_target, tiny_loaded(), problems, tmp_path / "b")
    assert not (tmp_path / "a" / "train_log.jsonl").exists()


def test_out_dir_rules(problems, tmp_path):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "file").write_text("x")
    with pytest.raises(QuenchError, match="not empty"):
        train(TrainConfig(model="tiny", lora=None), tiny_loaded(), problems, tmp_path / "busy")
    with pytest.raises(QuenchError, match="holds no training state"):
        train(TrainConfig(model="tiny", lora=None), tiny_loaded(), problems, tmp_path / "busy", resume=True)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    train_cli.register(parser.add_subparsers())
    return parser.parse_args(["train", *argv])


def test_cli_builds_the_config():
    args = parse(["--out", "x", "--strategy", "mda,alp", "--full", "--categories", "code_syntax", "--lr", "1e-4",
                  "--alp-weight", "2"])
    config = train_cli.config_from_args(args)
    assert config.strategies == {"mda", "alp"} and config.lora is None and config.lr == 1e-4
    assert config.losses.alp == 2.0 and "VarRenamerNaive" in config.data.transforms
    assert "FuncRenameCamelCase" not in config.data.transforms
    assert train_cli.config_from_args(parse(["--out", "x"])).lora == LoraSettings()


def test_cli_refuses_before_loading_the_model():
    with pytest.raises(QuenchError, match="mda is da"):
        train_cli.run(parse(["--out", "x", "--strategy", "da,mda", "--model", "/nonexistent"]))
    with pytest.raises(QuenchError, match="unknown perturbation"):
        train_cli.run(parse(["--out", "x", "--transforms", "Nope"]))
