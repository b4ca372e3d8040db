"""The forward's plan: which path and kernels `LlamaRunner` runs, every switch resolved once.

The forward's switches (prepack, compile, native attention, int8 copies, the kernel config, batch invariance)
interact with the model (family, dtype, head size, biases, sliding windows) and with what this CPU's native
library serves. `plan_forward` resolves them into one frozen `ForwardPlan`, deciding there alone whether the
forward can be batch invariant; `engine_plan` reads the switches from an `EngineConfig`. The runner takes the
plan, builds its weights and picks each step's path from it, and `quench doctor` prints it.

Glossary:
- packed path: a step whose real tokens alone go through the products, RoPE, KV write and attention in C
  (`native.rope_attend`); the PyTorch path pads each row and masks (`scaled_dot_product_attention`).
- glue: on the packed path, each residual add fused with the RMSNorm after it (`native.add_rms_norm`).
- C layer loop: every decoder layer of a packed step in one C call (`native.layers` in bfloat16, `native.layers_f32`
  for float32 batch-invariant runners on a GGUF's blocks).
- fixed-order products: every matrix product on `invariant.gemm`, which sums each output in one order
  whatever the rows.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from quench.engine.kernels import invariant, native, quant
from quench.engine.config import ConfigError, EngineConfig
from quench.engine.runners.families import family_of
from quench.engine.kernels.native_config import KernelConfig
from quench.engine.kernels.screen import screen_available, tiles_fit

NATIVE_MAX_NEW = 16  # the C kernel serves decode/verify steps; long prefills use PyTorch's flash attention
# bfloat16 with head size 64 (C glue, the AVX512 attention kernel): prompts up to this many tokens per row are
# prefilled on the packed path too (its attention is O(S x keys) per row and kv head, scores in memory).
NATIVE_PREFILL_MAX = 512
C_LAYERS_HEAD_DIM = 64  # the head size the C layer loop and the long packed prefills serve

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ForwardPlan:
    """How a `LlamaRunner` runs its steps; built by `plan_forward`, never changed."""

    family: str  # the config's model_type (`families.py`)
    dtype: str  # the weights' and activations' dtype, e.g. "bfloat16"
    prepack: bool  # weights pre-packed for oneDNN and quench's small GEMM
    compiled: bool  # the PyTorch path runs under torch.compile
    native: bool  # steps may take the packed path (C RoPE, KV write and attention)
    packed_tokens: int | None  # the most tokens per row a packed step feeds (0: none; None: every step)
    glue: bool  # packed steps fuse each residual add with the next RMSNorm in C (bfloat16, Llama's layer)
    # packed steps the small GEMM serves run every layer in one C call (`native.layers`; float32 on a GGUF's blocks:
    # every step of a batch-invariant runner, `native.layers_f32`)
    c_layers: bool
    batch_invariant: bool  # every step packed on kernels whose per-row sums ignore the batch (`invariant`)
    fixed: bool  # every product on the fixed-order GEMM (batch invariance, or bfloat16 without AVX512-BF16)
    amx: bool  # the small GEMM and attention run AMX tiles (never batch invariant: tiles sum in their own order)
    int8: bool  # products of a few rows read int8 weight copies (draft models)
    screen: bool  # greedy steps read the LM head's int8 screen first (`screen.py`)
    window: int | None  # the smallest sliding window: packed steps only while every position is below it
    # what the projections and head read: dequantized (the model's parameters), gguf (the GGUF's blocks, float32
    # sums) or gguf-int8 (the blocks times 8-bit activations, integer sums; `quant.py`)
    weights: str = "dequantized"
    kv_dtype: str = ""  # the KV caches' dtype, e.g. "float32" ("": the model's); float32 models may keep bfloat16 ones

    @property
    def cache_dtype(self) -> torch.dtype:
        """The dtype of the KV caches this plan's runner allocates."""
        return getattr(torch, self.kv_dtype or self.dtype)

    def packed(self, num_new: int, end: int | None = None) -> bool:
        """Whether a step feeding num_new tokens per row, the last row's positions ending before `end` (None:
        unknown), runs the packed path. With a sliding window only while every fed position is below it (there
        the window hides nothing); later steps mask each layer's window on the PyTorch path."""
        if not self.native:
            return False
        if self.window is not None and (end is None or end > self.window):
            return False
        return self.packed_tokens is None or num_new <= self.packed_tokens

    def layers_in_c(self, rows: int) -> bool:
        """Whether a packed step of `rows` real tokens runs the C layer loop: where the small GEMM serves its
        rows, or every step of a batch-invariant runner (the loop's fixed-order GEMM ignores the row count)."""
        return self.c_layers and (self.batch_invariant or rows <= native.small_gemm_rows(self.amx))

    def prefill_kernel(self, tokens: int) -> str | None:
        """Which kernels a prefill feed of `tokens` tokens per row runs, where that fixes every row's bits; None
        where nothing is promised (`LlamaRunner.prefill_kernel`)."""
        if self.batch_invariant:
            return "fixed"
        if self.window is not None:
            return None  # a prompt past the window takes the PyTorch path
        kernel = native.gemm_kernel(tokens, self.amx)  # "onednn" past what the small GEMM (and the C layer loop) serves
        if not self.c_layers or self.int8 or not self.packed(tokens) or kernel == "onednn":
            return None  # int8 copies (drafts): a short rest would take other kernels than the whole prompt
        return kernel


def plan_forward(
    model: torch.nn.Module,
    prepack: bool = True,
    compile: bool = False,
    native_attention: bool = True,
    int8: bool = False,
    kernels: KernelConfig = KernelConfig(),
    batch_invariant: bool | None = False,
    device: str | None = None,
    kv_cache: str = "auto",
) -> ForwardPlan:
    """The plan of a `LlamaRunner` over `model` under these switches, on this CPU's library.

    batch_invariant: True (ConfigError where its kernels cannot serve the model), False, or None: wherever they
    serve, logged where they do not. Reads the model's config and modules, never its weights' values: a model built
    on the meta device (`quench doctor`) gets the plan its loaded copy gets, given the device it would run on
    (`device`; None: the embedding's). kv_cache: the KV caches' dtype (`kv_cache_dtype`). ValueError where the fast
    path cannot run the model; ConfigError where the caches cannot take kv_cache."""
    family = family_of(model)
    if family is None:
        raise ValueError(f"the fast path does not run {type(model).__name__} models")
    config, dtype = model.config, model.model.embed_tokens.weight.dtype
    device = device or model.model.embed_tokens.weight.device.type
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    window = family.smallest_window
    if batch_invariant is not False:
        batch_invariant = decide_invariance(batch_invariant, invariance_refusal(model, native_attention, device))
    use_native = native_attention and device == "cpu" and native.available(dtype)
    # float32/64 keep PyTorch's ops, which follow modeling_llama bit for bit (the exactness tests run there); the C
    # glue is Llama's layer, so other families keep PyTorch's ops in bfloat16 too
    glue = use_native and dtype == torch.bfloat16 and family.llama_like
    fixed = batch_invariant or (prepack and _fixed_products(dtype))
    int8 = int8 and prepack and dtype == torch.bfloat16 and screen_available() and not batch_invariant
    small = prepack and not fixed and native.small_gemm_serves(dtype, device)  # `Linear` packs for the small GEMM
    head, hidden = model.lm_head, config.hidden_size
    screen = (kernels.screen and not int8 and not batch_invariant and small and head.bias is None and hidden % 2 == 0
              and tiles_fit(head.weight.shape[0], hidden, dtype))
    long_feeds = glue and head_dim == C_LAYERS_HEAD_DIM  # the C glue and attention serve long prefills too
    packed_tokens = NATIVE_PREFILL_MAX if long_feeds else NATIVE_MAX_NEW
    kv_dtype = kv_cache_dtype(kv_cache, dtype, use_native and batch_invariant, quant.weights_mode(model) in quant.MODES)
    return ForwardPlan(
        family=family.name, dtype=str(dtype).removeprefix("torch."), prepack=prepack, compiled=compile,
        native=use_native, packed_tokens=(None if batch_invariant else packed_tokens) if use_native else 0, glue=glue,
        c_layers=(long_feeds and window is None and _layer_packs(model, fixed, small))
        or _f32_layers(model, family, head_dim, use_native and batch_invariant), batch_invariant=batch_invariant,
        fixed=fixed, amx=native.use_amx(kernels) and not batch_invariant, int8=int8, screen=screen, window=window,
        weights=quant.weights_mode(model), kv_dtype=kv_dtype,
    )


def kv_cache_dtype(kv_cache: str, dtype: torch.dtype, invariant_native: bool, gguf: bool = False) -> str:
    """The KV caches' dtype name for `EngineConfig.kv_cache` on a model of `dtype`.

    bfloat16 caches under a float32 model (half the bytes each attention step reads) are written and read by the
    fixed attention kernel alone (`native.rope_attend`), so every step must be packed on it: batch invariant on the
    native kernels (`invariant_native`). "auto" takes them under a GGUF's blocks (`gguf`: float32 activations, a
    numeric mode of quench's own already) wherever they are served, else the model's dtype; "bfloat16" asks for them
    (ConfigError where they are not served); the model's own dtype keeps it. Float32 caches under a bfloat16 model:
    ConfigError."""
    model = str(dtype).removeprefix("torch.")
    if kv_cache == "auto":
        return "bfloat16" if gguf and model == "float32" and invariant_native else model
    if kv_cache == model:
        return model
    if kv_cache == "bfloat16" and model == "float32":
        if not invariant_native:
            raise ConfigError("kv_cache", "bfloat16 under a float32 model needs every step on the batch-invariant "
                                          "native kernels (batch invariance on, native attention, CPU)")
        return "bfloat16"
    raise ConfigError("kv_cache", f"{kv_cache} caches under a {model} model are not served (auto, or bfloat16 under "
                                  "float32)")


def engine_plan(model: torch.nn.Module, config: EngineConfig, device: str | None = None,
                draft: bool = False) -> ForwardPlan | None:
    """The plan of the runner `make_runner` builds for `model` under `config`; None where the generic Hugging Face
    path runs it. The target takes `config.batch_invariant` (None: wherever its kernels serve the model); a draft,
    whose bits never reach the output, never runs invariant and reads int8 copies where `config.draft_int8` asks.
    Compile turns prepacking and the native kernels off."""
    wanted = False if draft else config.batch_invariant
    if not (config.fast_path and family_of(model) is not None):
        if wanted is not False:
            decide_invariance(wanted, invariance_refusal(model, config.native_attention, fast_path=False))
        if not draft:
            kv_cache_dtype(config.kv_cache, model.get_input_embeddings().weight.dtype, invariant_native=False)
        return None
    return plan_forward(
        model, prepack=config.prepack and not config.compile, compile=config.compile,
        native_attention=config.native_attention and not config.compile, int8=draft and config.draft_int8,
        kernels=config.kernels, batch_invariant=wanted, device=device, kv_cache="auto" if draft else config.kv_cache,
    )


def invariance_refusal(model: torch.nn.Module, native_attention: bool, device: str | None = None,
                       fast_path: bool = True) -> str | None:
    """Why the batch-invariant kernels cannot serve `model`'s forward (None where they can): they serve the fast path
    on Llama's layer without sliding windows (Llama; Qwen2 without a window), on the native kernels (CPU, float32 or
    bfloat16), whose reduction order per row is fixed. device: where it would run (None: the embedding's);
    fast_path False: the generic Hugging Face path runs it."""
    family = family_of(model) if fast_path else None
    weight = model.get_input_embeddings().weight
    dtype, device = weight.dtype, device or weight.device.type
    if family is None or not family.llama_like or family.smallest_window is not None:
        runs = "the generic Hugging Face path" if family is None else f"{family.name}'s layer"
        return (f"needs the fast path on Llama's layer without sliding windows (Llama, or Qwen2 without a window), "
                f"not {runs}")
    if not native_attention:
        return "needs the native kernels (native_attention on, compile off)"
    if device != "cpu" or not invariant.available(dtype):
        return f"needs float32 or bfloat16 on CPU with the native kernels built, got {dtype} on {device}"
    return None


def decide_invariance(wanted: bool | None, refusal: str | None) -> bool:
    """Whether the forward runs batch invariant: where asked (`wanted` True, or None: wherever it serves) and served
    (`refusal` None). ConfigError where it was asked for explicitly and is refused; logged where the default falls back."""
    if wanted is False:
        return False
    if refusal is None:
        return True
    if wanted:
        raise ConfigError("batch_invariant", refusal)
    log.warning("batch invariance off (greedy output may depend on the batch): it %s", refusal)
    return False


def _fixed_products(dtype: torch.dtype) -> bool:
    """bfloat16 products where the CPU has no AVX512-BF16 (no small GEMM): the fixed-order kernel widens to
    float32 and runs FMAs, faster there than oneDNN's emulated bfloat16."""
    library = native.build_result().library
    return dtype == torch.bfloat16 and library is not None and not library.small_gemm_available()


def _layer_packs(model: torch.nn.Module, fixed: bool, small: bool) -> bool:
    """Whether the C layer loop (`native.layers`) is built here and serves every projection: no biases (it adds
    none: Qwen2's q/k/v keep the Python loop, whose `Linear` adds them), each packed for the fixed-order GEMM
    (`fixed`) or the small GEMM (even input widths), and widths its kernels take (gate/up a multiple of 32, an
    even hidden size)."""
    config = model.config
    hidden, inner = config.hidden_size, config.intermediate_size
    inputs = (hidden, config.num_attention_heads * (getattr(config, "head_dim", None) or hidden // config.num_attention_heads), inner)
    packs = not _projection_biases(model) and (fixed or (small and all(width % 2 == 0 for width in inputs)))
    return native.layers_available() and packs and (2 * inner) % 32 == 0 and hidden % 2 == 0


def _f32_layers(model: torch.nn.Module, family: Family, head_dim: int, invariant_native: bool) -> bool:
    """Whether a batch-invariant runner on the native kernels (`invariant_native`) runs its packed steps on the float32
    layer loop (`native.layers_f32`): float32 products on a GGUF's blocks (quant.MODES), Llama's layer (batch
    invariance's) with head size 64, one RoPE table and no projection biases."""
    dtype = model.model.embed_tokens.weight.dtype
    return (invariant_native and dtype == torch.float32 and head_dim == C_LAYERS_HEAD_DIM
            and quant.weights_mode(model) in quant.MODES and len(set(family.rope_kinds)) == 1
            and not _projection_biases(model) and native.layers_f32_available())


def _projection_biases(model: torch.nn.Module) -> bool:
    """Whether any decoder layer's projection has a bias (Qwen2's q/k/v): the small GEMM's packs take none."""
    projections = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    return any(
        getattr(block, name).bias is not None
        for layer in model.model.layers
        for block in (layer.self_attn, layer.mlp)
        for name in projections
        if hasattr(block, name)
    )
