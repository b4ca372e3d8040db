"""The C decode-attention kernel against the PyTorch path of the same runner."""

import pytest
import torch

from helpers import tiny_llama
from quench.generation import native
from quench.generation.llama import LlamaRunner

pytestmark = pytest.mark.skipif(not native.available(torch.float32), reason="no C compiler")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_native_kernel_matches_pytorch_attention_on_ragged_rows(dtype):
    model = tiny_llama(dtype=dtype)
    fast, reference = LlamaRunner(model), LlamaRunner(model, native_attention=False)
    assert fast.native and not reference.native
    prompt = torch.randint(3, 90, (3, 9))
    caches = [runner.new_cache(3, 64) for runner in (fast, reference)]
    for runner, cache in zip((fast, reference), caches):
        runner.forward(cache, prompt, torch.zeros(3, dtype=torch.long))  # prefill: PyTorch path in both
    start, counts = torch.tensor([9, 5, 7]), torch.tensor([3, 1, 0])  # ragged; row 2 feeds nothing
    step = torch.randint(3, 90, (3, 3))
    got = fast.forward(caches[0], step, start, counts=counts)
    want = reference.forward(caches[1], step, start)
    tolerance = 1e-5 if dtype == torch.float32 else 0.1
    assert torch.allclose(got[0], want[0], atol=tolerance) and torch.allclose(got[1, :1], want[1, :1], atol=tolerance)
    assert not got[1, 1:].any() and not got[2].any()  # padding and empty rows: no logits
    for layer in range(2):  # the kernel wrote the same keys/values, and only for the rows' real tokens
        assert torch.allclose(caches[0].keys[layer][0, :, :12], caches[1].keys[layer][0, :, :12], atol=tolerance)
        assert torch.allclose(caches[0].values[layer][1, :, :6], caches[1].values[layer][1, :, :6], atol=tolerance)
        assert not caches[0].keys[layer][2, :, 9:].any()  # past the prefill: untouched


def test_runner_falls_back_to_pytorch_attention_without_the_kernel(monkeypatch):
    monkeypatch.setattr(native, "available", lambda dtype: False)
    runner = LlamaRunner(tiny_llama())
    assert not runner.native
    cache = runner.new_cache(1, 16)
    assert runner.forward(cache, torch.tensor([[5, 6]]), torch.zeros(1, dtype=torch.long)).shape == (1, 2, runner.vocab_size)
