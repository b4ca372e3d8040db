import pytest

from helpers import torch_threads


@pytest.fixture(autouse=True)
def one_thread():
    with torch_threads(1):
        yield
