import pytest

from helpers import torch_threads


@pytest.fixture(autouse=True)
def one_thread():
    with torch_threads(1):
        yield


@pytest.fixture(autouse=True)
def draft_everything(monkeypatch):
    """Tiny random models give every token ~1/vocab: the engine's automatic draft-confidence cut (0.4
    above batch 1) would leave them nothing to draft, and these tests are about drafting. The cut
    itself is tested with explicit thresholds (test_engine.py)."""
    monkeypatch.setattr("quench.generation.engine.AUTO_DRAFT_CONFIDENCE", 0.0)
