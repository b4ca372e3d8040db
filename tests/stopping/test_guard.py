"""GenGuard training on a tiny synthetic dataset, saving and loading, and clear errors for bad files."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from helpers import torch_threads
from quench.errors import QuenchError
from quench.stopping import GuardPolicy, load_guard, read_guard
from quench.stopping.dataset import GuardDataset
from quench.stopping.guard import GenGuard, GuardInfo, make_head
from quench.stopping.loading import shipped_guard_path
from quench.stopping.train import TrainConfig, fold_standardization, train_guard

D = 16


@pytest.fixture(scope="module")
def trained(make_synthetic) -> tuple[GenGuard, object]:
    with torch_threads(1):
        return train_guard(make_synthetic(), TrainConfig(epochs=15, batch_size=128, lr=1e-2))


def test_training_reaches_high_accuracy(trained) -> None:
    guard, metrics = trained
    assert metrics.accuracy > 0.95 and metrics.precision > 0.9 and metrics.recall > 0.9
    assert metrics.answers == 10  # the "validation" answers
    assert metrics.early <= 1 and metrics.generated_share < 1.0
    assert guard.info.hidden_size == D and guard.info.metrics["accuracy"] == pytest.approx(metrics.accuracy)


def test_mlp_trains_too(make_synthetic) -> None:
    guard, metrics = train_guard(make_synthetic(answers=20), TrainConfig(kind="mlp", mlp_hidden=8, epochs=10, batch_size=64))
    assert metrics.accuracy > 0.9 and guard.info.kind == "mlp"


def test_fold_standardization_is_exact() -> None:
    torch.manual_seed(0)
    head = make_head(D, "mlp", 4).double()
    x = torch.randn(5, D, dtype=torch.float64)
    mean, std = torch.randn(D, dtype=torch.float64), torch.rand(D, dtype=torch.float64) + 0.5
    expected = head((x - mean) / std)
    fold_standardization(head, mean, std)
    assert torch.allclose(head(x), expected, atol=1e-10)


def test_save_load_round_trip(trained, tmp_path: Path) -> None:
    guard, _ = trained
    path = tmp_path / "g.safetensors"
    guard.with_policy(mode="consecutive", consecutive=4).save(path)
    loaded = load_guard(path, D)
    assert loaded.policy == GuardPolicy(mode="consecutive", consecutive=4)
    assert loaded.info == guard.info
    x = torch.randn(7, D)
    assert torch.equal(loaded.stop_probs(x), guard.stop_probs(x))
    assert path.stat().st_size < 4096  # a linear guard is a few hundred bytes here


def test_load_errors(trained, tmp_path: Path) -> None:
    guard, _ = trained
    path = tmp_path / "g.safetensors"
    guard.save(path)
    model = SimpleNamespace(name="other-model", model=SimpleNamespace(config=SimpleNamespace(hidden_size=D + 1)))
    with pytest.raises(QuenchError, match="hidden size 16.*hidden size 17"):
        load_guard(path, model)
    with pytest.raises(QuenchError, match="not found"):
        load_guard(tmp_path / "missing.safetensors", D)
    (tmp_path / "junk.safetensors").write_bytes(b"\x00\x01not a safetensors file")
    with pytest.raises(QuenchError, match="not a readable guard file"):
        read_guard(tmp_path / "junk.safetensors")
    truncated = tmp_path / "cut.safetensors"
    truncated.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(QuenchError, match="guard file"):
        read_guard(truncated)
    with pytest.raises(QuenchError, match="ships no GenGuard"):
        load_guard("auto", model)


def test_foreign_safetensors_is_refused(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    save_file({"weight": torch.zeros(2, 2)}, str(tmp_path / "w.safetensors"))
    with pytest.raises(QuenchError, match="not a quench GenGuard"):
        read_guard(tmp_path / "w.safetensors")


def test_shipped_guard_for_the_default_model() -> None:
    from quench.models import DEFAULT_PRESET

    path = shipped_guard_path(DEFAULT_PRESET)
    if not path.is_file():
        pytest.skip("no shipped guard yet")
    assert path.stat().st_size < 16_384
    model = SimpleNamespace(name=DEFAULT_PRESET, model=SimpleNamespace(config=SimpleNamespace(hidden_size=576)))
    guard = load_guard("auto", model)
    assert guard.hidden_size == 576 and guard.info.model == DEFAULT_PRESET
    benchmarks = guard.info.trained_on.split()[0].split("+")
    assert benchmarks == ["mbpp", "mbjsp", "mbgp", "mbcpp", "mbjp"]  # one guard for every language


def test_dataset_round_trip_and_errors(tmp_path: Path, make_synthetic) -> None:
    data = make_synthetic(answers=3, length=12)
    data.save(tmp_path / "d")
    back = GuardDataset.load(tmp_path / "d")
    assert torch.equal(back.hidden, data.hidden) and back.records == data.records
    with pytest.raises(QuenchError, match="not a guard dataset"):
        GuardDataset.load(tmp_path / "nothing")
    (tmp_path / "d" / "features.safetensors").write_bytes(b"garbage")
    with pytest.raises(QuenchError, match="damaged"):
        GuardDataset.load(tmp_path / "d")


def test_guard_info_defaults() -> None:
    info = GuardInfo(hidden_size=3)
    assert info.kind == "linear" and info.feature == "final_norm_hidden"
