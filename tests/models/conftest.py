import pytest

from helpers import torch_threads


@pytest.fixture(autouse=True)
def one_thread():
    with torch_threads(1):
        yield


@pytest.fixture(autouse=True)
def draft_everything(monkeypatch):
    """Tiny random models give every token ~1/vocab: the engine's automatic cumulative stop (0.15 at batch 1,
    0.4 above) would cut every model draft to its floor, and these tests are about drafting. The stop
    itself is tested with explicit thresholds (test_hybrid.py, test_engine.py)."""
    monkeypatch.setattr("quench.generation.engine.AUTO_DRAFT_STOP", 0.0)
    monkeypatch.setattr("quench.generation.engine.AUTO_DRAFT_STOP_BATCH1", 0.0)
