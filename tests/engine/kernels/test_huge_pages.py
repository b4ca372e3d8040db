import gc

import pytest
import torch

from quench.engine.kernels import huge_pages
from quench.engine.kv_cache import KVCache


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.uint8])
def test_a_large_buffer_is_zero_aligned_and_outlives_its_maker(dtype):
    shape = (3, 5, 1024, 197)  # past one huge page at every dtype, not a multiple of one
    buffer = huge_pages.zeros(shape, dtype)
    gc.collect()  # only the tensor holds the mapping now
    assert buffer.shape == shape and buffer.dtype == dtype and buffer.is_contiguous()
    assert not buffer.any()
    if huge_pages.ADVICE is not None:
        assert buffer.data_ptr() % huge_pages.HUGE_PAGE == 0
    buffer.fill_(7)
    buffer[-1, -1, -1, -1] = 3
    assert int(buffer.to(torch.int64).sum()) == 7 * buffer.numel() - 4


def test_a_small_buffer_is_an_ordinary_tensor():
    buffer = huge_pages.zeros((4, 8), torch.float32)
    assert buffer.shape == (4, 8) and not buffer.any()


def test_the_cache_keeps_its_values_across_a_resize():
    cache = KVCache(num_layers=2, batch=4, max_len=1024, dtype=torch.float32, device=torch.device("cpu"))
    keys = torch.randn(4, 2, 3, 64, generator=torch.Generator().manual_seed(0))  # (B, S, H, D)
    positions = torch.tensor([[0, 1], [5, 6], [1000, 1001], [7, 8]])
    for layer in range(2):
        cache.write(layer, keys, -keys, positions)
    cache.resize(2048)
    for b in range(4):
        for s in range(2):
            assert torch.equal(cache.keys[1][b, :, positions[b, s]], keys[b, s])
            assert torch.equal(cache.values[0][b, :, positions[b, s]], -keys[b, s])
    assert cache.keys[0].shape == (4, 3, 2048, 64) and not cache.keys[0][:, :, 1002:].any()
