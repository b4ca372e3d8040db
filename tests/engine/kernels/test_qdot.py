"""GGUF blocks times 8-bit activations (csrc/qdot.c, `quant.gemm_x8`): the kernel equals a plain numpy reference
of qdot.c's written definition bit for bit (activation quantization, integer sums, libm's fmaf in block order) on
many shapes and hostile values, gives each row the bits it gets alone on any thread count, and every x86 build
(scalar, AVX2, AVX-512, AVX512-VNNI) gives the same bits."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import subprocess

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType
from gguf.constants import GGML_QUANT_SIZES

from quench.engine.kernels import native, quant
from quench.engine.kernels.native_build import CSRC
from quench.native_target import cpu_flags

from tests.engine.kernels.test_quant import TYPES, random_blocks, same_floats, weight_of

pytestmark = [
    pytest.mark.skipif(not native.available(torch.float32), reason="no native kernels"),
    pytest.mark.filterwarnings("ignore::RuntimeWarning"),
]

_libm = ctypes.CDLL(ctypes.util.find_library("m"))
_libm.fmaf.restype = ctypes.c_float
_libm.fmaf.argtypes = [ctypes.c_float] * 3
fmaf = np.frompyfunc(lambda a, b, c: _libm.fmaf(a, b, c), 3, 1)


def quantize_reference(x: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray]:
    """x (M, K) float32 -> q (M, K) int8, d (M, K / block) float32, as qdot.c's header comment defines them."""
    blocks = x.reshape(-1, block)
    top = (blocks.view(np.uint32) & np.uint32(0x7FFFFFFF)).max(axis=1)
    finite = top < 0x7F800000
    d = np.where(finite, top.view(np.float32) / np.float32(127), np.float32(np.nan)).astype(np.float32)
    with np.errstate(all="ignore"):
        t = np.rint(blocks / d[:, None])
        q = np.where(finite[:, None] & (d[:, None] != 0), np.clip(t, -127, 127), 0).astype(np.int8)
    return q.reshape(x.shape), d.reshape(x.shape[0], -1)


def _halves(blocks: np.ndarray, offset: int) -> np.ndarray:
    return np.ascontiguousarray(blocks[:, offset : offset + 2]).view(np.float16).astype(np.float32)[:, 0]


def _k_scales(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K / Q5_K: (blocks, 8) 6-bit scales and mins."""
    s = blocks[:, 4:16].astype(np.int64)
    scale = np.concatenate([s[:, 0:4] & 63, (s[:, 8:12] & 15) | ((s[:, 0:4] >> 6) << 4)], axis=1)
    mins = np.concatenate([s[:, 4:8] & 63, (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)], axis=1)
    return scale, mins


def stored_integers(qtype: GGMLQuantizationType, blocks: np.ndarray) -> np.ndarray:
    """(blocks, values) int64: the formula's w per value (Q6_K before its - 32)."""
    name = qtype.name
    if name == "Q8_0":
        return blocks[:, 2:34].view(np.int8).astype(np.int64)
    if name in ("Q4_0", "Q4_1"):
        qs = blocks[:, 2 if name == "Q4_0" else 4 :][:, :16].astype(np.int64)
        return np.concatenate([qs & 15, qs >> 4], axis=1)
    if name == "Q6_K":
        ql, qh = blocks[:, :128].astype(np.int64), blocks[:, 128:192].astype(np.int64)
        out = np.empty((len(blocks), 256), np.int64)
        for h in range(2):
            for k in range(4):
                low = (ql[:, 64 * h + 32 * (k % 2) : 64 * h + 32 * (k % 2) + 32] >> (4 * (k // 2))) & 15
                out[:, 128 * h + 32 * k : 128 * h + 32 * k + 32] = low | (((qh[:, 32 * h : 32 * h + 32] >> (2 * k)) & 3) << 4)
        return out
    base = 16 if name == "Q4_K" else 48
    qs = blocks[:, base : base + 128].astype(np.int64)
    out = np.empty((len(blocks), 256), np.int64)
    for g in range(8):
        q = (qs[:, 32 * (g // 2) : 32 * (g // 2) + 32] >> (4 * (g & 1))) & 15
        if name == "Q5_K":
            q |= ((blocks[:, 16:48].astype(np.int64) >> g) & 1) << 4
        out[:, 32 * g : 32 * g + 32] = q
    return out


def gemm_reference(x: np.ndarray, qtype: GGMLQuantizationType, data: np.ndarray) -> np.ndarray:
    """x (M, K) float32, data (N, row bytes) -> (M, N) float32 by the written definition, block by block."""
    values, size = GGML_QUANT_SIZES[qtype]
    M, K = x.shape
    N, nb = data.shape[0], K // values
    blocks = data.reshape(N * nb, size)
    q, d = quantize_reference(x, values)  # (M, K), (M, nb)
    xq = q.astype(np.int64).reshape(M, nb, values)
    s16 = xq.reshape(M, nb, values // 16, 16).sum(axis=3)  # (M, nb, values / 16)
    w = stored_integers(qtype, blocks).reshape(N, nb, values)
    name = qtype.name
    if name in ("Q8_0", "Q4_0", "Q4_1"):
        isum = np.einsum("nbv,mbv->mnb", w, xq)
        if name == "Q4_0":
            isum = isum - 8 * xq.sum(axis=2)[:, None, :]
        jsum = np.broadcast_to(xq.sum(axis=2)[:, None, :], isum.shape)
        dw = _halves(blocks, 0).reshape(N, nb)
        mw = _halves(blocks, 2).reshape(N, nb) if name == "Q4_1" else None
    elif name == "Q6_K":
        scales = blocks[:, 192:208].view(np.int8).astype(np.int64).reshape(N, nb, 16)
        dots = np.einsum("nbjv,mbjv->mnbj", w.reshape(N, nb, 16, 16), xq.reshape(M, nb, 16, 16))
        isum = (dots * scales[None]).sum(axis=3) - 32 * np.einsum("nbj,mbj->mnb", scales, s16)
        dw, mw, jsum = _halves(blocks, 208).reshape(N, nb), None, None
    else:
        scale, mins = (a.reshape(N, nb, 8) for a in _k_scales(blocks))
        dots = np.einsum("nbgv,mbgv->mnbg", w.reshape(N, nb, 8, 32), xq.reshape(M, nb, 8, 32))
        isum = (dots * scale[None]).sum(axis=3)
        jsum = np.einsum("nbg,mbg->mnb", mins, s16.reshape(M, nb, 8, 2).sum(axis=3))
        dw, mw = _halves(blocks, 0).reshape(N, nb), -_halves(blocks, 2).reshape(N, nb)
    assert np.abs(isum).max(initial=0) < 2**31
    acc = np.zeros((M, N), np.float32)
    with np.errstate(all="ignore"):
        for b in range(nb):
            acc = fmaf(dw[None, :, b] * d[:, None, b], isum[:, :, b].astype(np.float32), acc).astype(np.float32)
            if mw is not None:
                acc = fmaf(mw[None, :, b] * d[:, None, b], jsum[:, :, b].astype(np.float32), acc).astype(np.float32)
    return acc


def hostile_x(rng: np.random.Generator, M: int, K: int) -> np.ndarray:
    """Activations of wildly different sizes per block, with zeros, denormals, ties at .5 and a few inf / NaN."""
    exponents = np.repeat(rng.integers(-140, 100, (M, K // 32)), 32, axis=1)  # one size per 32 values
    x = np.ldexp(rng.standard_normal((M, K)), exponents).astype(np.float32)
    x[rng.random((M, K)) < 0.05] = 0.0
    x[rng.random((M, K)) < 0.02] = np.float32(1e-42)
    x[rng.random((M, K)) < 0.01] = np.inf
    x[rng.random((M, K)) < 0.01] = np.nan
    if M > 1:
        x[1, :32] = np.arange(32, dtype=np.float32) - 15.5  # x / d at and near .5
    return x


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("M", [24, 70, 129])
def test_many_rows_give_the_written_definition_whatever_chunks_they_run_in(qtype, M):
    """A prefill's or a large batch's rows: the packed product takes them a chunk at a time (its activations' bytes
    over K), so K = 1536 runs 16-row chunks and a short last one; every output keeps its own steps."""
    values = GGML_QUANT_SIZES[qtype][0]
    rng = np.random.default_rng(M)
    data = random_blocks(qtype, rows=37, blocks=1536 // values, seed=M, hostile=True)
    x = hostile_x(rng, M, 1536)
    weight = weight_of(qtype, data)
    want = gemm_reference(x, qtype, data)
    for product in (weight, quant.packed([weight])):
        if product is not None:
            assert same_floats(quant.gemm_x8(torch.from_numpy(x), [product]).numpy(), want), (qtype.name, M)


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("case", range(4))
def test_the_integer_product_equals_the_written_definition_bit_for_bit(qtype, case):
    values = GGML_QUANT_SIZES[qtype][0]
    rng = np.random.default_rng(1000 * int(qtype) + case)
    for trial in range(6):
        if trial % 2:
            M, N = int(rng.integers(1, 19)), int(rng.integers(1, 41))
        else:  # one or two rows: the packed product reads several groups of W rows side by side
            M, N = int(rng.integers(1, 3)), int(rng.integers(1, 200))
        nb = int(rng.integers(1, 4 if values == 256 else 20))
        data = random_blocks(qtype, rows=N, blocks=nb, seed=int(rng.integers(1 << 30)), hostile=case == 3)
        K = nb * values
        x = hostile_x(rng, M, K) if case >= 2 else (rng.standard_normal((M, K)) * 10.0 ** (case - 1)).astype(np.float32)
        weight = weight_of(qtype, data)
        want = gemm_reference(x, qtype, data)
        assert same_floats(quant.gemm_x8(torch.from_numpy(x), [weight]).numpy(), want), (qtype.name, case, trial, M, N, K)
        pack = quant.packed([weight])  # the interleaved copy, where this build runs it
        if pack is not None:
            got = quant.gemm_x8(torch.from_numpy(x), [pack]).numpy()
            assert same_floats(got, want), ("packed", qtype.name, case, trial, M, N, K)


def hostile_blocks(rng: np.random.Generator, rows: int, blocks: int, block: int) -> np.ndarray:
    """(rows, blocks * block) float32, each block of one kind drawn at random: normal values of any size (denormal to
    near the largest float), all +0.0, all -0.0, a NaN (either sign, any payload) or an infinity among them, denormals
    only (d a few ulps or 0, x / d past the clamp), exact ties at .5 (d = 1 or 2), every value at +-a."""
    out = np.empty((rows * blocks, block), np.float32)
    for b in range(rows * blocks):
        kind = int(rng.integers(9))
        v = np.ldexp(rng.standard_normal(block), int(rng.integers(-150, 126))).astype(np.float32)
        if kind == 1:
            v[:] = 0.0
        elif kind == 2:
            v[:] = -0.0
        elif kind == 3:
            v[rng.integers(block)] = np.array([0x7FC00000, 0xFFC00001, 0x7F800001, 0xFFFFFFFF], np.uint32)[rng.integers(4)].view(np.float32)
        elif kind == 4:
            v[rng.integers(block)] = np.float32(np.inf) * rng.choice([-1, 1])
        elif kind == 5:  # k * 2^-149, k around the 63.5 where d first rounds up from 0, and past 190
            v = (rng.integers(-260, 260, block) * np.float32(2.0**-149)).astype(np.float32)
            v[rng.integers(block)] = np.float32(int(rng.integers(60, 200)) * 2.0**-149) * rng.choice([-1, 1])
        elif kind == 6:  # d exactly 1 or 2: x / d at n + 0.5
            scale = float(rng.choice([1.0, 2.0]))
            v = ((rng.integers(-127, 127, block) + 0.5) * scale).astype(np.float32)
            v[rng.integers(block)] = 127.0 * scale * rng.choice([-1, 1])
        elif kind == 7:
            v = (np.abs(v[0]) * rng.choice([-1, 1], block)).astype(np.float32)
        elif kind == 8:
            v = (v * np.float32(2.0**100) if np.abs(v).max() < 2.0**20 else v).astype(np.float32)
        out[b] = v
    return out.reshape(rows, blocks * block)


def test_activation_quantization_is_the_written_definition():
    library = native.build_result().library
    rng = np.random.default_rng(7)
    for trial in range(60):
        block = 32 if trial % 2 else 256
        M, nb = int(rng.integers(1, 10)), int(rng.integers(1, 6))
        x = hostile_x(rng, M, nb * block) if trial % 3 == 0 else hostile_blocks(rng, M, nb, block)
        q, d = np.empty(x.shape, np.int8), np.empty((M, nb), np.float32)
        q2, d2, s = np.empty_like(q), np.empty_like(d), np.empty((M, nb * block // 16), np.int32)
        assert library.quantize_x8(x.ctypes.data, q.ctypes.data, d.ctypes.data, M, nb * block, block) == 0
        assert library.quantize_x8_sums(x.ctypes.data, q2.ctypes.data, d2.ctypes.data, s.ctypes.data, M, nb * block, block) == 0
        want_q, want_d = quantize_reference(x, block)
        assert np.array_equal(q, want_q) and same_floats(d, want_d), trial
        assert np.array_equal(q2, want_q) and same_floats(d2, want_d), trial
        assert np.array_equal(s, want_q.astype(np.int32).reshape(M, -1, 16).sum(axis=2)), trial
    assert library.quantize_x8(x.ctypes.data, q.ctypes.data, d.ctypes.data, 9, 100, 32) == 1


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_a_rows_bits_do_not_depend_on_the_other_rows_or_the_threads(qtype):
    blocks = 2 if GGML_QUANT_SIZES[qtype][0] == 256 else 16
    weights = [weight_of(qtype, random_blocks(qtype, rows=n, blocks=blocks, seed=n)) for n in (70, 3)]
    # 37 rows: two threads also split the activations' quantization
    x = torch.randn(37, weights[0].in_features, generator=torch.Generator().manual_seed(1))
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        parts = [quant.int8_parts(weights), [quant.packed([w]) or w for w in weights]]  # one pack of both, one each
        alone = torch.cat([quant.gemm_x8(x[m : m + 1], weights) for m in range(37)])  # (37, 73) one row per call
        alone_each = torch.cat([torch.cat([quant.gemm_x8(x[m : m + 1], [w]) for w in weights], 1) for m in range(37)])
        torch.set_num_threads(2)
        together = [quant.gemm_x8(x, weights)] + [quant.gemm_x8(x, p) for p in parts]
    finally:
        torch.set_num_threads(before)
    assert torch.equal(alone.view(torch.int32), alone_each.view(torch.int32))
    for y in together:
        assert torch.equal(alone.view(torch.int32), y.view(torch.int32))


X86_BUILDS = {"x86-64-v2": (0, set()), "x86-64-v3": (1, {"avx2", "fma", "f16c"}),
              "x86-64-v4": (1, {"avx512f", "avx512bw", "avx512vl", "avx512dq"}),
              "x86-64-v4 -mavx512vnni": (2, {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni"})}


def test_the_scalar_avx2_avx512_and_vnni_builds_give_the_same_bits(tmp_path):
    compiler = os.environ.get("CC", "cc")
    if shutil.which(compiler) is None or os.uname().machine != "x86_64":
        pytest.skip("needs a C compiler on x86-64")
    builds = {}
    for march, (level, needs) in X86_BUILDS.items():
        if not needs <= cpu_flags():
            continue
        library = tmp_path / f"qdot-{len(builds)}.so"
        subprocess.run([compiler, "-shared", "-fPIC", "-O2", *f"-march={march}".split(), "-ffp-contract=off", f"-I{CSRC}",
                        *(str(CSRC / f"{unit}.c") for unit in ("quant", "qdot", "qpack")), "-o", str(library), "-lm"],
                       check=True, capture_output=True)
        cdll = ctypes.CDLL(str(library))
        cdll.quant_gemm_x8.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int64] + [ctypes.c_int] * 5
        cdll.quant_gemm_x8_packed.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int64] + [ctypes.c_int] * 5
        cdll.qpack_bytes.restype = ctypes.c_int64
        cdll.qpack.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_int] * 3
        cdll.quantize_x8_sums.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int] * 3
        assert cdll.qdot_level() == level, march
        builds[march] = cdll
    rng = np.random.default_rng(3)
    for block in (32, 256):  # the activations alone, hostile blocks
        x = hostile_blocks(rng, 13, 40 if block == 32 else 5, block)
        want_q, want_d = quantize_reference(x, block)
        for march, cdll in builds.items():
            q, d, s = np.empty(x.shape, np.int8), np.empty(want_d.shape, np.float32), np.empty((13, x.shape[1] // 16), np.int32)
            assert cdll.quantize_x8_sums(x.ctypes.data, q.ctypes.data, d.ctypes.data, s.ctypes.data, 13, x.shape[1], block) == 0
            assert np.array_equal(q, want_q) and same_floats(d, want_d), (march, block)
            assert np.array_equal(s, want_q.astype(np.int32).reshape(13, -1, 16).sum(axis=2)), (march, block)
    for qtype in TYPES:
        values = GGML_QUANT_SIZES[qtype][0]
        for hostile in (False, True):
            # one or two rows: groups of W rows read side by side; 70 rows: the packed product's row chunks
            for M, N in ((11, 29), (1, 149), (2, 149), (70, 29)):
                data = np.ascontiguousarray(random_blocks(qtype, rows=N, blocks=3 if values == 256 else 13, seed=int(qtype), hostile=hostile))
                K = data.shape[1] // GGML_QUANT_SIZES[qtype][1] * values
                x = hostile_x(rng, M, K) if hostile else rng.standard_normal((M, K)).astype(np.float32)
                outputs = []
                for cdll in builds.values():
                    y = np.empty((M, N), np.float32)
                    assert cdll.quant_gemm_x8(x.ctypes.data, data.ctypes.data, y.ctypes.data, N, M, N, K, int(qtype), 1) == 0
                    outputs.append(y)
                    size = cdll.qpack_bytes(int(qtype), N, K)
                    if size > 0:  # the interleaved copy's product, on every build (scalar included)
                        pack, y = np.empty(size, np.uint8), np.empty((M, N), np.float32)
                        assert cdll.qpack(data.ctypes.data, pack.ctypes.data, N, K, int(qtype)) == 0
                        assert cdll.quant_gemm_x8_packed(x.ctypes.data, pack.ctypes.data, y.ctypes.data, N, M, N, K, int(qtype), 1) == 0
                        outputs.append(y)
                assert all(same_floats(outputs[0], y) for y in outputs[1:]), (qtype.name, hostile, M)
                assert same_floats(outputs[0], gemm_reference(x, qtype, data)), (qtype.name, hostile, M)


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_a_tiny_model_in_the_integer_mode_runs_every_product_on_the_integer_kernel(qtype):
    """Every projection and the head are QuantLinears in the mode; their outputs are gemm_x8's on any rows."""
    from dataclasses import replace

    from quench.engine.config import EngineConfig
    from quench.engine.runners.make import make_runner
    from tests.engine.kernels.test_quant import quantized_tiny_llama

    model = quantized_tiny_llama(qtype, seed=int(qtype))
    model.quench_gguf_weights = replace(model.quench_gguf_weights, mode="gguf-int8")
    runner = make_runner(model, EngineConfig(batch_invariant=False))
    linears = [runner.lm_head, *runner._projections()]
    assert all(isinstance(linear, quant.QuantLinear) and linear.mode == "gguf-int8" for linear in linears)
    assert runner.plan.weights == "gguf-int8"
    x = torch.randn(quant.SMALL_ROWS + 3, runner.lm_head.weights[0].in_features, generator=torch.Generator().manual_seed(0))
    assert torch.equal(runner.lm_head(x), quant.gemm_x8(x, runner.lm_head.weights))  # past SMALL_ROWS too
