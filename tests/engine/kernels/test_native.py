"""The C decode-attention kernel against the PyTorch path of the same runner."""

import ctypes
import dataclasses

import pytest
import torch

from helpers import llama_head_dim_64, tiny_llama, torch_threads
from quench.engine.kernels import native
from quench.engine.runners import llama
from quench.engine.runners.forward_plan import plan_forward
from quench.engine.runners.llama import LlamaRunner
from quench.engine.kernels.native import KernelConfig
from quench.engine.scheduler import prefill

pytestmark = pytest.mark.skipif(not native.available(torch.float32), reason=native.build_result().reason)


@pytest.fixture(params=[False, True], ids=["no-amx", "amx"])
def kernels(request):
    """Each kernel test once with AMX tiles off (what every CPU with the kernels runs) and once on, where the
    CPU and OS have them; the AMX run is the only one skipped elsewhere."""
    if request.param and not native.amx_supported():
        pytest.skip("AMX tiles: this CPU, OS or build has none (the no-amx run covers the other kernels)")
    return KernelConfig(amx=request.param)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_native_kernel_matches_pytorch_attention_on_ragged_rows(dtype):
    model = tiny_llama(dtype=dtype)
    fast, reference = LlamaRunner(model), LlamaRunner(model, plan_forward(model, native_attention=False))
    assert fast.plan.native and not reference.plan.native
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
    assert not runner.plan.native
    cache = runner.new_cache(1, 16)
    assert runner.forward(cache, torch.tensor([[5, 6]]), torch.zeros(1, dtype=torch.long)).shape == (1, 2, runner.vocab_size)


needs_small_gemm = pytest.mark.skipif(
    native.pack_small_gemm(torch.zeros(16, 2, dtype=torch.bfloat16)) is None, reason="no AVX512-BF16 kernel here"
)


@needs_small_gemm
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 8, 11, 16, 27, 40])
# 16-wide blocks walked S at a time (S = 8, 8, 6, 3 in AVX512 by rows; 6, or 2 with two row blocks, in AMX) with leftover blocks one by
# one (25 blocks: a leftover for every S); past 8 rows the AVX512 kernel takes W in chunks of 24 blocks (480: two);
# K = 130 is not a multiple of AMX's 32 inputs: the AVX512 kernel serves it; N = 15, 100, 6255: a last block
# with fewer than 16 real outputs (the draft's reduced head has 6255 rows)
@pytest.mark.parametrize(
    "shape", [(48, 64), (32, 64), (16, 130), (480, 64), (400, 64), (160, 64), (96, 96), (15, 64), (100, 96), (6255, 64)]
)
def test_small_gemm_matches_a_float32_product_to_one_rounding(rows, shape, kernels):
    torch.manual_seed(rows)
    weight = torch.randn(shape, dtype=torch.bfloat16)
    x = torch.randn(rows, shape[1], dtype=torch.bfloat16)
    got = native.small_gemm(x, native.pack_small_gemm(weight), shape[0], amx=kernels.amx)  # (rows, N)
    want = x.float() @ weight.float().t()
    assert got.shape == (rows, shape[0]) and got.dtype == torch.bfloat16
    assert torch.allclose(got.float(), want, rtol=2**-8, atol=1e-4)  # rounded once to bfloat16


def test_small_gemm_is_not_offered_for_unsupported_weights():
    assert native.pack_small_gemm(torch.zeros(16, 5, dtype=torch.bfloat16)) is None  # inputs not in pairs
    assert native.pack_small_gemm(torch.zeros(16, 4)) is None  # float32: oneDNN serves it


@needs_small_gemm
def test_small_gemm_writes_nothing_past_the_real_outputs(kernels):
    """N = 100: the last packed block holds 4 real outputs; the 12 columns after them belong to the next row."""
    torch.manual_seed(0)
    weight, x = torch.randn(100, 64, dtype=torch.bfloat16), torch.randn(9, 64, dtype=torch.bfloat16)
    got = native.small_gemm(x, native.pack_small_gemm(weight), 100, amx=kernels.amx)
    assert torch.allclose(got.float(), x.float() @ weight.float().t(), rtol=2**-8, atol=1e-4)  # row 1 starts where row 0's padding would


def test_add_rms_norm_matches_pytorch_in_bfloat16():
    torch.manual_seed(0)
    x = (torch.randn(16, 96) * 4).to(torch.bfloat16)
    delta = torch.randn(16, 96).to(torch.bfloat16)
    weight = (torch.rand(96) + 0.5).to(torch.bfloat16)
    summed = x + delta
    want = weight * torch.nn.functional.rms_norm(summed.float(), (96,), eps=1e-5).to(torch.bfloat16)
    residual, out = x.clone(), torch.empty_like(x)
    native.add_rms_norm(residual, delta, weight, 1e-5, out)
    assert torch.equal(residual, summed)  # the residual stream is updated in place, bit for bit
    assert torch.equal(out, want)
    native.add_rms_norm(residual, None, weight, 1e-5, out)  # no residual sum
    assert torch.equal(residual, summed) and torch.equal(out, want)


def _prefilled_bf16_runners(prompt_len: int, cache_len: int, kernels: KernelConfig):
    """The head-64 bfloat16 model as the fast runner (C kernels) and the PyTorch reference, each with its
    own cache prefilled with the same 3 random prompts (each on its own path)."""
    model = llama_head_dim_64(torch.bfloat16)
    fast = LlamaRunner(model, plan_forward(model, kernels=kernels))
    reference = LlamaRunner(model, plan_forward(model, prepack=False, native_attention=False))
    prompt = torch.randint(3, 90, (3, prompt_len))
    caches = [runner.new_cache(3, cache_len) for runner in (fast, reference)]
    for runner, cache in zip((fast, reference), caches):
        runner.forward(cache, prompt, torch.zeros(3, dtype=torch.long))
    return fast, reference, caches


def test_bfloat16_decode_kernels_match_the_pytorch_path(kernels):
    """Head size 64 in bfloat16: the AVX512-BF16 attention (q.k with AMX tiles or without), the small GEMM
    and the C RMSNorm (where built) against PyTorch attention and oneDNN/PyTorch ops, on ragged rows."""
    fast, reference, caches = _prefilled_bf16_runners(prompt_len=30, cache_len=64, kernels=kernels)
    assert fast.plan.glue and not reference.plan.native
    start, counts = torch.tensor([30, 21, 25]), torch.tensor([2, 1, 0])
    step = torch.randint(3, 90, (3, 2))
    got, hidden = fast.forward(caches[0], step, start, counts=counts, hidden=True)
    want, want_hidden = reference.forward(caches[1], step, start, hidden=True)
    assert torch.allclose(got[0], want[0], atol=0.1) and torch.allclose(got[1, :1], want[1, :1], atol=0.1)
    assert torch.allclose(hidden[0].float(), want_hidden[0].float(), atol=0.1)
    assert not got[1, 1:].any() and not got[2].any()
    for layer in range(2):
        assert torch.allclose(caches[0].keys[layer][0, :, :32], caches[1].keys[layer][0, :, :32], rtol=0.02, atol=0.05)
        assert torch.allclose(caches[0].values[layer][1, :, :22], caches[1].values[layer][1, :, :22], rtol=0.02, atol=0.05)
    # A plain decode step (one token per row, all real) returns the same logits as a packed one.
    one = step[:, :1]
    plain = fast.forward(caches[0], one, start + 2)
    packed = fast.forward(caches[0], torch.cat([one, one], dim=1), start + 2, counts=torch.tensor([1, 1, 1]))
    assert torch.equal(plain[:, 0], packed[:, 0])


@needs_small_gemm
def test_bfloat16_prefills_on_the_packed_path_match_the_pytorch_path(kernels):
    """Head size 64 in bfloat16: prompts up to NATIVE_PREFILL_MAX tokens go through the C kernels (ragged
    lengths in one batch: the padding is skipped), longer ones through PyTorch's attention."""
    model = llama_head_dim_64(torch.bfloat16)
    fast = LlamaRunner(model, plan_forward(model, kernels=kernels))
    reference = LlamaRunner(model, plan_forward(model, prepack=False, native_attention=False))
    assert fast._packed(llama.NATIVE_PREFILL_MAX) and not fast._packed(llama.NATIVE_PREFILL_MAX + 1)
    assert not LlamaRunner(llama_head_dim_64(torch.float32))._packed(llama.NATIVE_MAX_NEW + 1)
    torch.manual_seed(1)
    prompts = [torch.randint(3, 90, (n,)).tolist() for n in (70, 41, 100)]
    for (got, got_logits), (want, want_logits) in zip(prefill(fast, prompts), prefill(reference, prompts)):
        assert got.length == want.length
        assert torch.allclose(got_logits, want_logits, atol=0.1)
        for layer in range(2):
            assert torch.allclose(got.keys[layer].float(), want.keys[layer].float(), rtol=0.02, atol=0.05)
            assert torch.allclose(got.values[layer].float(), want.values[layer].float(), rtol=0.02, atol=0.05)


@pytest.mark.skipif(not native.layers_available(), reason="no AVX512-BF16 layer loop here")
def test_the_c_layer_loop_gives_the_python_loops_bits(kernels):
    """bfloat16 head-64 packed steps run every layer in one C call where the weights allow: the logits, hidden
    states and cached keys/values equal the Python loop's over the same kernels (decode, verify, prefill)."""
    model = llama_head_dim_64(torch.bfloat16)
    runner = LlamaRunner(model, plan_forward(model, kernels=kernels))
    plan = runner.plan
    assert plan.c_layers and runner._layer_table is not None
    prompt, step = torch.randint(3, 90, (3, 40)), torch.randint(3, 90, (3, 5))
    start, counts = torch.tensor([40, 33, 12]), torch.tensor([5, 1, 3])
    outputs = []
    for c_layers in (False, True):
        runner.plan = dataclasses.replace(plan, c_layers=c_layers)
        cache = runner.new_cache(3, 64)
        prefilled = runner.forward(cache, prompt, torch.zeros(3, dtype=torch.long), logits_at=torch.tensor([39, 32, 11]))
        logits, hidden = runner.forward(cache, step, start, counts=counts, hidden=True)
        outputs.append((prefilled, logits, hidden, cache.keys + cache.values))
    (*python, python_cache), (*c, c_cache) = outputs
    assert all(torch.equal(a, b) for a, b in zip(python, c))
    assert all(torch.equal(a, b) for a, b in zip(python_cache, c_cache))


@pytest.mark.skipif(not native.layers_available(), reason="no AVX512-BF16 layer loop here")
def test_silu_times_up_rounds_as_pytorch_does():
    torch.manual_seed(0)
    gate_up = (torch.randn(512, 1024) * torch.logspace(-2, 1.5, 1024)).to(torch.bfloat16)
    want = torch.nn.functional.silu(gate_up[:, :512]) * gate_up[:, 512:]
    assert torch.equal(native.silu_mul(gate_up), want)


def test_amx_kernel_takes_multiples_of_32_inputs_and_declines_the_rest():
    if not native.amx_supported():
        pytest.skip("AMX tiles: this CPU, OS or build has none")
    library = native._library()
    for in_features, served in ((64, True), (130, False)):
        weight = torch.randn(48, in_features, dtype=torch.bfloat16)
        x = torch.randn(5, in_features, dtype=torch.bfloat16)
        packed = native.pack_small_gemm(weight)
        out = torch.zeros(5, 48, dtype=torch.bfloat16)
        status = library.gemm_bf16_amx(x.data_ptr(), packed.data_ptr(), out.data_ptr(), 5, 48, in_features, 1)
        assert (status == 0) == served
        if served:
            assert torch.allclose(out.float(), x.float() @ weight.float().t(), rtol=2**-8, atol=1e-4)
        else:
            assert not out.any()  # declined: nothing written


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_kernels_give_the_same_bits_on_one_thread_and_on_several(kernels, dtype):
    """The GEMMs split W, attention splits (row, kv head) pairs and silu_mul splits rows over torch's threads
    (OpenMP): the work each output gets is the same, so the bits are too, with an uneven split (3 threads)
    included. The runner uses whichever kernels this CPU has (the generic attention where it lacks AVX512-BF16)."""
    model = llama_head_dim_64(dtype)
    runner = LlamaRunner(model, plan_forward(model, kernels=kernels))
    prompt = torch.randint(3, 90, (5, 30))
    start, counts = torch.tensor([30, 21, 25, 30, 12]), torch.tensor([3, 1, 0, 2, 3])
    step = torch.randint(3, 90, (5, 3))
    outputs = []
    for threads in (1, 3):
        with torch_threads(threads):
            cache = runner.new_cache(5, 64)
            runner.forward(cache, prompt, torch.zeros(5, dtype=torch.long))
            logits = runner.forward(cache, step, start, counts=counts)
            outputs.append((logits, [k.clone() for k in cache.keys], [v.clone() for v in cache.values]))
    (one, keys_one, values_one), (several, keys_several, values_several) = outputs
    assert torch.equal(one, several)
    assert all(torch.equal(a, b) for a, b in zip(keys_one + values_one, keys_several + values_several))


@pytest.mark.parametrize("cache_dtype", [torch.float32, torch.bfloat16])
def test_the_fixed_attention_cuts_a_prompt_long_feed_into_spans_without_changing_a_bit(cache_dtype):
    """At batch 1 a prompt's (row, kv head) pairs are fewer than the threads can share, so the fixed attention cuts
    each pair's queries into spans of the feed: one thread, two and three give the same bits, and each query the
    bits it gets fed one token at a time (a decode step per position, which no span cuts)."""
    g = torch.Generator().manual_seed(7)
    heads, kv_heads, head, tokens = 6, 2, 64, 97
    qkv = torch.randn(tokens, heads + 2 * kv_heads, head, generator=g) * 3  # (N, H + 2 Hkv, D)
    cos, sin = (torch.rand(tokens, head, generator=g) for _ in range(2))

    def prefill(threads: int, feeds: list[int]):
        keys, values = (torch.zeros(1, kv_heads, tokens, head, dtype=cache_dtype) for _ in range(2))
        outs, fed = [], 0
        with torch_threads(threads):
            for n in feeds:
                start, offsets = torch.tensor([fed]), torch.tensor([0, n])
                outs.append(native.rope_attend(qkv[fed:fed + n].contiguous(), keys, values, cos, sin, start, offsets,
                                               heads, head ** -0.5, amx=False, fixed=True))
                fed += n
        return torch.cat(outs), keys, values

    whole = [prefill(threads, [tokens]) for threads in (1, 2, 3)]
    stepwise = prefill(1, [1] * tokens)
    for out, keys, values in whole[1:] + [stepwise]:
        assert torch.equal(out, whole[0][0]) and torch.equal(keys, whole[0][1]) and torch.equal(values, whole[0][2])


@needs_small_gemm
@pytest.mark.parametrize("rows", [7, 40])  # 40: past 8 rows W goes in chunks (and AMX takes it where on)
def test_small_gemm_gives_the_same_bits_on_one_thread_and_on_several(rows, kernels):
    torch.manual_seed(rows)
    weight, x = torch.randn(480, 96, dtype=torch.bfloat16), torch.randn(rows, 96, dtype=torch.bfloat16)
    packed = native.pack_small_gemm(weight)
    with torch_threads(1):
        alone = native.small_gemm(x, packed, 480, amx=kernels.amx)
    with torch_threads(3):
        shared = native.small_gemm(x, packed, 480, amx=kernels.amx)
    assert torch.equal(alone, shared)


def test_bfloat16_verify_steps_with_many_queries_match_the_pytorch_path(kernels):
    """Verification-sized steps: up to 11 new tokens per row (22 query rows per kv head: two AMX query blocks),
    keys not a multiple of 16, against PyTorch attention."""
    fast, reference, caches = _prefilled_bf16_runners(prompt_len=37, cache_len=80, kernels=kernels)
    start, counts = torch.tensor([37, 19, 30]), torch.tensor([11, 4, 9])
    step = torch.randint(3, 90, (3, 11))
    got = fast.forward(caches[0], step, start, counts=counts)
    want = reference.forward(caches[1], step, start)
    for row, count in enumerate(counts.tolist()):
        assert torch.allclose(got[row, :count].float(), want[row, :count].float(), atol=0.1), row
        assert not got[row, count:].any()


@needs_small_gemm  # without AVX512-BF16, rope64_bf16 is the scalar rope_bf16 itself
def test_vectorised_rope_rounds_exactly_as_the_scalar_one():
    """The head-64 kernel's RoPE (AVX512) must give rope_bf16's bits: the cached keys are PyTorch's."""
    library = native._library()
    torch.manual_seed(0)
    scale = torch.logspace(-3, 3, 64)
    for _ in range(200):
        x, cos, sin = (torch.randn(64) * scale[torch.randperm(64)] for _ in range(3))
        x, cos, sin = x.to(torch.bfloat16), cos.to(torch.bfloat16), sin.to(torch.bfloat16)
        outs = [torch.zeros(64), torch.zeros(64)]
        stores = [torch.zeros(64, dtype=torch.bfloat16), torch.zeros(64, dtype=torch.bfloat16)]
        library.rope_bf16(*(ctypes.c_void_p(t.data_ptr()) for t in (x, cos, sin)), 64,
                          ctypes.c_void_p(outs[0].data_ptr()), ctypes.c_void_p(stores[0].data_ptr()))
        library.rope64_bf16(*(ctypes.c_void_p(t.data_ptr()) for t in (x, cos, sin, outs[1], stores[1])))
        assert torch.equal(outs[0], outs[1]) and torch.equal(stores[0], stores[1])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", [(3, 49152), (2, 5, 1000), (4, 37), (1, 15)])  # vector body + scalar tail
def test_argmax_picks_the_first_maximum_as_torch_does(shape, dtype):
    torch.manual_seed(len(shape))
    ties = torch.randint(-3, 3, shape).to(dtype)  # few values: many tied maxima in every row
    spread = torch.randn(shape).to(dtype)
    masked = spread.clone()
    masked[..., : shape[-1] // 2] = float("-inf")  # a reduced draft head's logits: -inf outside its tokens
    for logits in (ties, spread, masked, torch.full(shape, float("-inf"), dtype=dtype)):
        assert torch.equal(native.argmax(logits), logits.argmax(dim=-1))
    strided = spread.reshape(-1, shape[-1])[::2]  # rows a stride apart
    assert torch.equal(native.argmax(strided), strided.argmax(dim=-1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_greedy_tokens_and_packed_logits_are_what_forward_gives_at_real_positions(dtype):
    """Greedy steps take only tokens, sampled steps only the real positions' logits: both must be what
    `forward`'s padded logits hold there, on ragged rows (padding, an empty row), and write the same cache."""
    model = llama_head_dim_64(dtype) if dtype == torch.bfloat16 else tiny_llama(dtype=dtype)
    runner = LlamaRunner(model)
    prompt = torch.randint(3, 90, (3, 20))
    caches = [runner.new_cache(3, 64) for _ in range(3)]
    for cache in caches:
        runner.forward(cache, prompt, torch.zeros(3, dtype=torch.long))
    start, counts = torch.tensor([20, 14, 17]), torch.tensor([4, 1, 0])
    step = torch.randint(3, 90, (3, 4))
    logits = runner.forward(caches[0], step, start, counts=counts)  # (3, 4, V)
    tokens = runner.greedy_tokens(caches[1], step, start, counts=counts)  # (3, 4)
    packed = runner.packed_logits(caches[2], step, start, counts=counts)  # (5, V)
    real = torch.arange(4)[None, :] < counts[:, None]
    assert tokens.shape == (3, 4) and tokens.dtype == torch.long
    assert torch.equal(tokens[real], logits.argmax(dim=-1)[real])
    assert packed.shape == (5, runner.vocab_size) and torch.equal(packed, logits[real])
    for layer in range(len(runner.layers)):
        for other in caches[1:]:
            assert torch.equal(caches[0].keys[layer], other.keys[layer])
            assert torch.equal(caches[0].values[layer], other.values[layer])
    long_step = torch.randint(3, 90, (3, 20))  # past NATIVE_MAX_NEW: the PyTorch path, then the argmax / packing
    at = torch.tensor([24, 24, 24])
    want = runner.forward(caches[0], long_step, at)
    assert torch.equal(runner.greedy_tokens(caches[1], long_step, at), want.argmax(dim=-1))
    assert torch.equal(runner.packed_logits(caches[2], long_step, at, counts=torch.tensor([20, 3, 0])),
                       torch.cat([want[0], want[1, :3]]))


@needs_small_gemm
def test_small_gemm_gives_a_row_the_same_bits_alone_and_among_up_to_four():
    """Up to `avx512_gemm_rows` rows the AVX512 kernel runs whatever the CPU (rows in blocks of 1, 2 or 4, with
    8, 8 or 6 streams): each output is the same sum in the same order, so a batch-1 verification of up to 3
    drafts scores its tokens with a regular step's bits. 9608 outputs: 601 blocks, a leftover for every S and a
    last block of 8. (AMX for 3-4 rows, which sums in another order, fails this: ~1e-4 of outputs differ.)"""
    torch.manual_seed(3)
    weight = torch.randn(9608, 576, dtype=torch.bfloat16)
    packed = native.pack_small_gemm(weight)
    x = torch.randn(native.avx512_gemm_rows(), 576, dtype=torch.bfloat16)
    alone = torch.cat([native.small_gemm(x[i : i + 1], packed, 9608, amx=True) for i in range(x.shape[0])])  # (R, N)
    for rows in range(2, x.shape[0] + 1):
        assert torch.equal(native.small_gemm(x[:rows], packed, 9608, amx=True), alone[:rows])


def test_the_float32_layer_loop_refuses_a_table_that_does_not_fit_before_computing_anything():
    """`native.layers_f32` walks its table first: widths that do not sum to a projection's, an unknown kind, a
    fixed-order part beside others, a table cut short or one entry too long -> ValueError, x and the caches unchanged."""
    from gguf import GGMLQuantizationType

    from quench.engine.config import EngineConfig
    from quench.engine.runners.make import make_runner
    from tests.engine.runners.test_llama_f32_layers import tiny_gguf_llama

    runner = make_runner(tiny_gguf_llama(GGMLQuantizationType.Q4_K, "gguf-int8"), EngineConfig())
    table = list(runner._float32_layer_table())
    kinds = native.f32_part_kinds()
    first = 2  # layer 0's qkv: a count, then (kind, address, type, N) per stacked weight (q, k, v)
    assert table[first] == 3
    wider = table.copy()
    wider[first + 4] += 16
    unknown = table.copy()
    unknown[first + 1] = 7
    fixed = table.copy()
    fixed[first + 1] = kinds["F32_PART_FIXED"]
    cases = {"wider": wider, "unknown kind": unknown, "fixed among parts": fixed, "short": table[:-1], "long": table + [0]}
    cache = runner.new_cache(2, 16)
    caches = [tensor for pair in zip(cache.keys, cache.values) for tensor in pair]
    start, offsets = torch.zeros(2, dtype=torch.long), torch.tensor([0, 2, 3])
    x = runner._embed(torch.tensor([5, 6, 7]))
    for name, entries in cases.items():
        before = x.clone()
        with pytest.raises(ValueError, match="refused its table"):
            native.layers_f32(x, (ctypes.c_int64 * len(entries))(*entries), caches, runner.final_norm, runner._layer_shape,
                              runner.cos, runner.sin_signed, start, offsets)
        assert torch.equal(x, before) and not any(tensor.any() for tensor in caches), name
    h = native.layers_f32(x, (ctypes.c_int64 * len(table))(*table), caches, runner.final_norm, runner._layer_shape,
                          runner.cos, runner.sin_signed, start, offsets)
    assert h.shape == x.shape and not torch.equal(x, before) and all(tensor.any() for tensor in caches)
