import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models run fastest on one thread; on a busy machine extra OpenMP threads make them ~10x slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
