"""GGUF weights executed as stored (quench.engine.kernels.quant, csrc/quant.c): the kernels' values are gguf's
`dequantize`'s bit for bit, their products match float64 and do not depend on the other rows, the threads or
the build, and a model on them gives the float32 path's greedy tokens."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, dequantize as gguf_dequantize, quantize as gguf_quantize
from gguf.constants import GGML_QUANT_SIZES

from quench.engine.kernels import native, quant
from quench.engine.config import EngineConfig
from quench.engine.runners.make import make_runner
from quench.engine.kernels.native_build import CSRC
from transformers import LlamaConfig, LlamaForCausalLM

from tests.helpers import CHARS, char_requests, quench_greedy

pytestmark = [
    pytest.mark.skipif(not native.available(torch.float32), reason="no native kernels"),
    pytest.mark.filterwarnings("ignore::RuntimeWarning"),  # gguf's numpy dequantize on inf / NaN scales
]

TYPES = [GGMLQuantizationType[name] for name in ("Q4_0", "Q4_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K")]
# byte offsets of each format's f16 scales within a block
HALF_OFFSETS = {"Q4_0": (0,), "Q4_1": (0, 2), "Q8_0": (0,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,)}
HOSTILE_HALVES = np.array([0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0x7C01, 0xFE00, 0x7BFF, 0xFBFF, 0x0001, 0x03FF,
                           0x8001, 0x3C00], dtype=np.uint16)  # 0, -0, inf, -inf, NaNs, max, -max, subnormals, 1


def random_blocks(qtype: GGMLQuantizationType, rows: int, blocks: int, seed: int, hostile: bool = False) -> np.ndarray:
    """(rows, blocks * type_size) random block bytes. Scales: moderate finite f16 values, or (hostile) random
    bits and the special values above; everything else is random bits."""
    rng = np.random.default_rng(seed)
    size = GGML_QUANT_SIZES[qtype][1]
    data = rng.integers(0, 256, size=(rows * blocks, size), dtype=np.uint8)
    for offset in HALF_OFFSETS[qtype.name]:
        if hostile:
            halves = np.where(rng.random(rows * blocks) < 0.5, rng.choice(HOSTILE_HALVES, rows * blocks),
                              rng.integers(0, 1 << 16, rows * blocks)).astype(np.uint16)
        else:
            halves = (rng.standard_normal(rows * blocks) * 0.01).astype(np.float16).view(np.uint16)
        data[:, offset : offset + 2] = halves.view(np.uint8).reshape(-1, 2)
    return data.reshape(rows, blocks * size)


def weight_of(qtype: GGMLQuantizationType, data: np.ndarray) -> quant.QuantWeight:
    values = data.shape[1] // GGML_QUANT_SIZES[qtype][1] * GGML_QUANT_SIZES[qtype][0]
    return quant.quant_weight(int(qtype), values, data)


def same_floats(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit for bit, every NaN counted equal to every NaN."""
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    return bool(np.array_equal(nan_a, nan_b) and np.array_equal(a.view(np.uint32)[~nan_a], b.view(np.uint32)[~nan_b]))


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("hostile", [False, True], ids=["finite", "hostile"])
def test_the_kernels_values_are_gguf_dequantize_bit_for_bit(qtype, hostile):
    data = random_blocks(qtype, rows=64, blocks=8, seed=int(qtype) + 100 * hostile, hostile=hostile)
    expected = gguf_dequantize(data, qtype)  # (64, 8 * block values)
    assert same_floats(quant.dequantize(weight_of(qtype, data)).numpy(), expected)


@pytest.mark.parametrize("qtype", TYPES[:3], ids=lambda t: t.name)
def test_gguf_quantized_weights_expand_to_their_dequantized_values(qtype):
    weights = np.random.default_rng(int(qtype)).standard_normal((32, 256)).astype(np.float32)
    weights[0] = 0.0  # d = 0
    weights[1, :32] = 65504.0  # the largest half
    data = gguf_quantize(weights, qtype)
    assert same_floats(quant.dequantize(weight_of(qtype, data)).numpy(), gguf_dequantize(data, qtype))


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("rows", [1, 2, 3, 5, 8, 13, 16, 40])
def test_the_product_matches_float64_on_the_dequantized_weights(qtype, rows):
    blocks = 2 if GGML_QUANT_SIZES[qtype][0] == 256 else 9
    data = random_blocks(qtype, rows=37, blocks=blocks, seed=rows)
    w = torch.from_numpy(gguf_dequantize(data, qtype)).double()  # (37, K)
    x = torch.randn(rows, w.shape[1], generator=torch.Generator().manual_seed(rows))  # (M, K)
    y = quant.gemm(x, [weight_of(qtype, data)])  # (M, 37)
    exact = x.double() @ w.T
    bound = (x.double().abs() @ w.abs().T) * (w.shape[1] * 2.0**-24)  # float32 sums of K terms
    assert ((y.double() - exact).abs() <= bound).all()


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_a_rows_bits_do_not_depend_on_the_other_rows_or_the_threads(qtype):
    blocks = 2 if GGML_QUANT_SIZES[qtype][0] == 256 else 16
    weights = [weight_of(qtype, random_blocks(qtype, rows=n, blocks=blocks, seed=n)) for n in (70, 3)]
    x = torch.randn(16, weights[0].in_features, generator=torch.Generator().manual_seed(1))
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        alone = torch.cat([quant.gemm(x[m : m + 1], weights) for m in range(16)])  # (16, 73) one row per call
        torch.set_num_threads(2)
        together = quant.gemm(x, weights)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(alone.view(torch.int32), together.view(torch.int32))


def _standalone(tmp_path, march: str) -> ctypes.CDLL:
    library = tmp_path / f"quant-{march}.so"
    subprocess.run([os.environ.get("CC", "cc"), "-shared", "-fPIC", "-O2", f"-march={march}", "-ffp-contract=off",
                    f"-I{CSRC}", str(CSRC / "quant.c"), "-o", str(library), "-lm"], check=True, capture_output=True)
    cdll = ctypes.CDLL(str(library))
    cdll.quant_gemm_f32.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int64] + [ctypes.c_int] * 5
    cdll.dequantize_rows.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_int] * 3
    return cdll


def test_the_scalar_avx2_and_avx512_builds_give_the_same_bits(tmp_path):
    if shutil.which(os.environ.get("CC", "cc")) is None:
        pytest.skip("no C compiler")
    flags = open("/proc/cpuinfo").read()
    levels = ["x86-64-v2"] + (["x86-64-v3"] if " avx2" in flags else []) + (["x86-64-v4"] if " avx512dq" in flags else [])
    builds = {march: _standalone(tmp_path, march) for march in levels}
    assert [builds[m].quant_level() for m in levels] == list(range(len(levels)))
    for qtype in TYPES:
        blocks = 2 if GGML_QUANT_SIZES[qtype][0] == 256 else 16
        data = np.ascontiguousarray(random_blocks(qtype, rows=21, blocks=blocks, seed=int(qtype), hostile=True))
        finite = np.ascontiguousarray(random_blocks(qtype, rows=21, blocks=blocks, seed=int(qtype)))
        K = data.shape[1] // GGML_QUANT_SIZES[qtype][1] * GGML_QUANT_SIZES[qtype][0]
        x = np.random.default_rng(0).standard_normal((11, K)).astype(np.float32)
        outputs = []
        for march in levels:
            values, y = np.empty((21, K), np.float32), np.empty((11, 21), np.float32)
            assert builds[march].dequantize_rows(data.ctypes.data, values.ctypes.data, 21, K, int(qtype)) == 0
            assert builds[march].quant_gemm_f32(x.ctypes.data, finite.ctypes.data, y.ctypes.data, 21, 11, 21, K, int(qtype), 1) == 0
            assert same_floats(values, gguf_dequantize(data, qtype)), (qtype.name, march)
            outputs.append(y)
        assert all(np.array_equal(outputs[0].view(np.uint32), y.view(np.uint32)) for y in outputs), qtype.name


def test_bad_types_and_widths_are_refused():
    library = native.build_result().library
    assert library.quant_row_bytes(int(GGMLQuantizationType.Q4_K), 576) == -1  # not a multiple of 256
    assert library.quant_row_bytes(int(GGMLQuantizationType.F16), 64) == -1
    assert library.quant_row_bytes(int(GGMLQuantizationType.Q4_1), 576) == 18 * 20
    with pytest.raises(ValueError):
        quant.row_bytes(int(GGMLQuantizationType.Q4_K), 576)


def test_llama_rows_are_transformers_reverse_permutation():
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

    rows = np.arange(48 * 3).reshape(48, 3)
    expected = LlamaTensorProcessor()._reverse_permute_weights(rows, 4, 4)
    assert np.array_equal(rows[quant._llama_rows(48, 4)], expected)


def quantized_tiny_llama(qtype: GGMLQuantizationType, seed: int):
    """A tiny Llama whose projections and head are random blocks of one format: the HF model holds their
    dequantized float32 values (today's path), `quench_gguf_weights` the blocks."""
    width = 256 if GGML_QUANT_SIZES[qtype][0] == 256 else 64  # K a multiple of the block
    config = LlamaConfig(vocab_size=len(CHARS) + 3, hidden_size=width, intermediate_size=2 * width,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    tensors = {}
    for index, (name, parameter) in enumerate(model.named_parameters()):
        if parameter.dim() != 2 or "embed_tokens" in name:
            continue
        rows, K = parameter.shape
        data = random_blocks(qtype, rows, K // GGML_QUANT_SIZES[qtype][0], seed=seed * 1000 + index)
        data = _rescaled(qtype, data, 4.0 / K**0.5)  # weights of about this size keep the activations in range
        with torch.no_grad():
            parameter.copy_(torch.from_numpy(gguf_dequantize(data, qtype)))
        tensors[name] = weight_of(qtype, data)
    model.quench_gguf_weights = quant.GGUFWeights("<test>", tensors)
    return model


def _rescaled(qtype, data, scale):
    """The blocks with every f16 scale set to a value of the given size (random sign for Q6_K's int8 scales)."""
    data = data.copy()
    rng = np.random.default_rng(int(qtype))
    size = GGML_QUANT_SIZES[qtype]
    blocks = data.reshape(-1, size[1])
    magnitude = {"Q4_0": scale / 8, "Q4_1": scale / 8, "Q8_0": scale / 128, "Q4_K": scale / 15 / 40,
                 "Q5_K": scale / 31 / 40, "Q6_K": scale / 32 / 100}[qtype.name]
    for number, offset in enumerate(HALF_OFFSETS[qtype.name]):
        halves = (rng.uniform(0.5, 1.5, len(blocks)) * magnitude).astype(np.float16)
        if qtype.name == "Q4_1" and number == 1:
            halves = (-8 * halves.astype(np.float32) * rng.uniform(0.8, 1.2, len(blocks))).astype(np.float16)
        blocks[:, offset : offset + 2] = halves.view(np.uint8).reshape(-1, 2)
    return data


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("batch_invariant", [False, True], ids=["default", "batch_invariant"])
def test_a_tiny_model_on_its_gguf_blocks_gives_the_float32_paths_greedy_tokens(qtype, batch_invariant):
    model = quantized_tiny_llama(qtype, seed=int(qtype))
    runner = make_runner(model, EngineConfig(batch_invariant=batch_invariant))
    assert all(isinstance(linear, quant.QuantLinear) for linear in [runner.lm_head, *runner._projections()])
    requests = char_requests(["def add(a, b):", "x = [", "print('hi')", "for i in range(10):"])
    gguf_weights = model.quench_gguf_weights
    del model.quench_gguf_weights
    expected = quench_greedy(model, requests, 24, batch_size=2, batch_invariant=batch_invariant)
    model.quench_gguf_weights = gguf_weights  # float32 KV caches, as the float32 path keeps (bfloat16 is their default)
    got = quench_greedy(model, requests, 24, batch_size=2, batch_invariant=batch_invariant, kv_cache="float32")
    assert got == expected
    assert len({tokens for tokens in got.values()}) > 1  # the model says different things to different prompts


def test_products_past_small_rows_run_pytorchs_gemm_on_the_same_values_unless_every_row():
    qtype = GGMLQuantizationType.Q4_1
    weights = [weight_of(qtype, random_blocks(qtype, rows=n, blocks=4, seed=n)) for n in (24, 8)]
    w = torch.cat([quant.dequantize(part) for part in weights])  # (32, 128)
    x = torch.randn(quant.SMALL_ROWS + 5, 128, generator=torch.Generator().manual_seed(2))
    assert torch.equal(quant.QuantLinear(weights)(x), torch.nn.functional.linear(x, w))
    assert torch.equal(quant.QuantLinear(weights, every_row=True)(x), quant.gemm(x, weights))
    assert torch.equal(quant.QuantLinear(weights)(x[:3]), quant.gemm(x[:3], weights))


@pytest.mark.slow
def test_the_default_model_on_its_gguf_blocks_answers_humaneval_as_the_float32_path():
    """The preset's Q4_1 / Q8_0 tensors: the loader's blocks expand to the float32 model's weights bit for bit
    (row order of attn_q / attn_k included), and greedy answers to HumanEval 0-3 at batch 1 and 4 are the same."""
    from quench.datasets import load_humaneval
    from quench.engine.backend import QuenchBackend
    from quench.engine.types import GenerationRequest, SamplingParams
    from quench.models import encode_prompt, load_model

    loaded = load_model(weights="gguf")
    gguf_weights = quant.gguf_weights_of(loaded.model)
    parameters = dict(loaded.model.named_parameters())
    assert len(gguf_weights.tensors) == 30 * 7 + 1
    for name, weight in gguf_weights.tensors.items():
        expected = parameters.get(name, loaded.model.lm_head.weight).detach()
        assert torch.equal(quant.dequantize(weight).view(torch.int32), expected.view(torch.int32)), name
    requests = [GenerationRequest(p.task_id, encode_prompt(loaded, p.prompt)) for p in load_humaneval()[:4]]
    sampling = SamplingParams(max_new_tokens=48)

    def answers(weights, batch_size: int) -> dict[str, tuple[int, ...]]:
        loaded.model.quench_gguf_weights = weights
        config = EngineConfig(batch_size=batch_size, kv_cache="float32")  # the float32 path's caches
        backend = QuenchBackend(loaded.model, loaded.tokenizer, config)
        return {r.key: tuple(r.token_ids) for r in backend.generate(requests, sampling)}

    for batch_size in (1, 4):
        assert answers(gguf_weights, batch_size) == answers(None, batch_size), batch_size


@pytest.mark.parametrize("argv, expected", [
    (("--weights", "gguf", "--dtype", "bfloat16"), "--weights gguf runs float32 activations"),
    (("--weights", "gguf-int8", "--dtype", "float16"), "--weights gguf-int8 runs float32 activations"),
    (("--weights", "gguf-int8", "--model", "no/such/dir"), "no/such/dir"),
    (("--weights", "gguf", "--backend", "hf"), "--weights gguf runs in quench's engine"),
])
def test_bad_weights_flags_exit_2_before_the_model_loads(tmp_path, argv, expected):
    import sys

    done = subprocess.run([sys.executable, "-m", "quench.cli.main", "generate", *argv, "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.strip().splitlines()[-1].startswith("error:"), done.stderr[-500:]
    assert expected in done.stderr and not (tmp_path / "out").exists()
