"""A small C kernel for decode-time attention on CPU: RoPE, KV-cache write and attention in one call.

Why: for decode-sized queries (a few tokens per row), PyTorch's CPU attention spends most of its
time in per-(row, head) matrix-call overhead — ~0.45 ms per layer at batch 8, a third of a decode
step for the default model. One plain C loop over rows and kv heads, reading each key/value once,
is several times faster. It is compiled with the system C compiler on first use (~1 s) and cached
under `$QUENCH_CACHE/native`; without a compiler the engine falls back to PyTorch's attention.

Numerics: RoPE is computed exactly as PyTorch does it in the model dtype (each product and the sum
rounded to bfloat16), so the cached keys are bit-identical to the PyTorch path; attention itself
runs in float32 (as PyTorch's CPU kernel does for bfloat16) and is rounded once at the end.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

import torch

log = logging.getLogger(__name__)

_COMMON = r"""
#include <stdint.h>
#include <string.h>
typedef uint16_t bf16;
static inline float load_bf16(bf16 x) { uint32_t u = (uint32_t)x << 16; float f; memcpy(&f, &u, 4); return f; }
static inline bf16 store_bf16(float f) {
    uint32_t u; memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16)((u >> 16) | 0x40);  /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);                                         /* round to nearest even */
    return (bf16)(u >> 16);
}
static inline float round_bf16(float f) { return load_bf16(store_bf16(f)); }
static inline float load_f32(float x) { return x; }
static inline float store_f32(float f) { return f; }
static inline float round_f32(float f) { return f; }
"""

# Compiled without fast-math and without FMA contraction: every rounding as in PyTorch.
_ROPE = _COMMON + r"""
#define ROPE(T, SUFFIX)                                                                           \
void rope_##SUFFIX(const T* x, const T* cos, const T* sin_signed, int dim, float* out, T* store) { \
    int half = dim / 2;                                                                           \
    for (int i = 0; i < dim; i++) {                                                               \
        float rotated = load_##SUFFIX(x[i < half ? i + half : i - half]);                         \
        float a = round_##SUFFIX(load_##SUFFIX(x[i]) * load_##SUFFIX(cos[i]));                     \
        float b = round_##SUFFIX(rotated * load_##SUFFIX(sin_signed[i]));                          \
        out[i] = round_##SUFFIX(a + b);                                                           \
        if (store) store[i] = store_##SUFFIX(out[i]);                                             \
    }                                                                                             \
}
ROPE(bf16, bf16)
ROPE(float, f32)
"""

_ATTEND = _COMMON + r"""
#include <math.h>
#include <stdlib.h>
void rope_bf16(const bf16*, const bf16*, const bf16*, int, float*, bf16*);
void rope_f32(const float*, const float*, const float*, int, float*, float*);

/* Packed ragged rows: row b's new tokens are qkv[offsets[b] .. offsets[b+1]) with layout (N, H + 2 Hkv, D);
   its token s sits at position start[b] + s and sees keys 0 .. start[b] + s. Caches (B, Hkv, T, D);
   cos, sin_signed (positions, D); out (N, H D). */
#define ATTEND(T, SUFFIX, NAME, HD)                                                                \
static int NAME(const T* qkv, T* kc, T* vc, const T* cos, const T* sin_signed,                     \
                const int64_t* start, const int64_t* offsets, T* out, int B, int H,                 \
                int Hkv, int D_, int Tmax, float scale) {                                          \
    const int D = HD;                                                                             \
    int G = H / Hkv, width = H + 2 * Hkv, most = 0, longest = 0;                                  \
    for (int b = 0; b < B; b++) {                                                                 \
        int n = (int)(offsets[b + 1] - offsets[b]);                                               \
        if (n > most) most = n;                                                                   \
        if (n && start[b] + n > longest) longest = (int)(start[b] + n);                           \
    }                                                                                             \
    float* q = malloc(sizeof(float) * (most * G + 1) * D);                                        \
    float* scores = malloc(sizeof(float) * ((int64_t)most * G * longest + 1));                    \
    float* acc = malloc(sizeof(float) * (most * G + 1) * D);                                      \
    float* row = malloc(sizeof(float) * D);                                                       \
    if (!q || !scores || !acc || !row) { free(q); free(scores); free(acc); free(row); return 1; } \
    for (int b = 0; b < B; b++) {                                                                 \
        int S = (int)(offsets[b + 1] - offsets[b]), M = S * G, keys = (int)start[b] + S;          \
        if (S == 0) continue;                                                                     \
        for (int s = 0; s < S; s++) {                                                             \
            int64_t pos = start[b] + s;                                                           \
            const T* tok = qkv + (offsets[b] + s) * width * D;                                    \
            for (int j = 0; j < Hkv; j++) {                                                       \
                int64_t at = (((int64_t)b * Hkv + j) * Tmax + pos) * D;                          \
                rope_##SUFFIX(tok + (H + j) * D, cos + pos * D, sin_signed + pos * D, D, row, kc + at); \
                memcpy(vc + at, tok + (H + Hkv + j) * D, sizeof(T) * D);                          \
            }                                                                                     \
        }                                                                                         \
        for (int j = 0; j < Hkv; j++) {                                                           \
            for (int s = 0; s < S; s++) {                                                         \
                int64_t pos = start[b] + s;                                                       \
                const T* tok = qkv + (offsets[b] + s) * width * D;                                \
                for (int g = 0; g < G; g++)                                                       \
                    rope_##SUFFIX(tok + (j * G + g) * D, cos + pos * D, sin_signed + pos * D, D,  \
                                  q + (s * G + g) * D, 0);                                       \
            }                                                                                     \
            const T* kb = kc + ((int64_t)b * Hkv + j) * Tmax * D;                                 \
            const T* vb = vc + ((int64_t)b * Hkv + j) * Tmax * D;                                 \
            for (int t = 0; t < keys; t++) {                                                      \
                for (int d = 0; d < D; d++) row[d] = load_##SUFFIX(kb[(int64_t)t * D + d]);      \
                for (int m = 0; m < M; m++) {                                                     \
                    float dot = 0.0f;                                                             \
                    for (int d = 0; d < D; d++) dot += q[m * D + d] * row[d];                    \
                    scores[(int64_t)m * keys + t] = (t <= start[b] + m / G) ? dot * scale : -INFINITY; \
                }                                                                                 \
            }                                                                                     \
            for (int m = 0; m < M; m++) {                                                         \
                float* sc = scores + (int64_t)m * keys, top = -INFINITY, total = 0.0f;           \
                for (int t = 0; t < keys; t++) top = sc[t] > top ? sc[t] : top;                   \
                for (int t = 0; t < keys; t++) { sc[t] = expf(sc[t] - top); total += sc[t]; }     \
                for (int t = 0; t < keys; t++) sc[t] /= total;                                    \
            }                                                                                     \
            memset(acc, 0, sizeof(float) * M * D);                                                \
            for (int t = 0; t < keys; t++) {                                                      \
                for (int d = 0; d < D; d++) row[d] = load_##SUFFIX(vb[(int64_t)t * D + d]);      \
                for (int m = 0; m < M; m++) {                                                     \
                    float p = scores[(int64_t)m * keys + t];                                      \
                    for (int d = 0; d < D; d++) acc[m * D + d] += p * row[d];                     \
                }                                                                                 \
            }                                                                                     \
            for (int s = 0; s < S; s++)                                                           \
                for (int g = 0; g < G; g++) {                                                     \
                    T* o = out + (offsets[b] + s) * H * D + (j * G + g) * D;                      \
                    for (int d = 0; d < D; d++) o[d] = store_##SUFFIX(acc[(s * G + g) * D + d]);  \
                }                                                                                 \
        }                                                                                         \
    }                                                                                             \
    free(q); free(scores); free(acc); free(row);                                                  \
    return 0;                                                                                     \
}
/* A constant head size lets the compiler unroll and vectorize the inner loops fully. */
#define DISPATCH(T, SUFFIX)                                                                        \
ATTEND(T, SUFFIX, attend64_##SUFFIX, 64)                                                          \
ATTEND(T, SUFFIX, attend128_##SUFFIX, 128)                                                        \
ATTEND(T, SUFFIX, attend_any_##SUFFIX, D_)                                                        \
int rope_attend_##SUFFIX(const T* qkv, T* kc, T* vc, const T* cos, const T* sin_signed,            \
                         const int64_t* start, const int64_t* offsets, T* out, int B, int H,        \
                         int Hkv, int D, int Tmax, float scale) {                                   \
    if (D == 64) return attend64_##SUFFIX(qkv, kc, vc, cos, sin_signed, start, offsets, out, B, H, Hkv, D, Tmax, scale); \
    if (D == 128) return attend128_##SUFFIX(qkv, kc, vc, cos, sin_signed, start, offsets, out, B, H, Hkv, D, Tmax, scale); \
    return attend_any_##SUFFIX(qkv, kc, vc, cos, sin_signed, start, offsets, out, B, H, Hkv, D, Tmax, scale); \
}
DISPATCH(bf16, bf16)
DISPATCH(float, f32)
"""

_FLAGS = {"rope": ["-O2", "-ffp-contract=off"], "attend": ["-O3", "-march=native", "-ffast-math"]}


def _cache_dir() -> Path:
    root = Path(os.environ.get("QUENCH_CACHE", Path.home() / ".cache" / "quench"))
    return root / "native"


def _build(compiler: str, target: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        objects = []
        for name, source in (("rope", _ROPE), ("attend", _ATTEND)):
            path = Path(tmp) / f"{name}.c"
            path.write_text(source)
            obj = path.with_suffix(".o")
            subprocess.run([compiler, "-c", "-fPIC", *_FLAGS[name], str(path), "-o", str(obj)], check=True, capture_output=True)
            objects.append(str(obj))
        partial = Path(tmp) / target.name
        subprocess.run([compiler, "-shared", *objects, "-o", str(partial), "-lm"], check=True, capture_output=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(partial), target)  # atomic within one file system; a racing build writes the same bytes


@lru_cache(maxsize=1)
def _library() -> ctypes.CDLL | None:
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None or platform.system() != "Linux":
        log.info("native attention unavailable (no C compiler); using PyTorch attention")
        return None
    key = hashlib.sha256((_ROPE + _ATTEND + repr(_FLAGS) + platform.processor() + platform.machine()).encode()).hexdigest()[:16]
    target = _cache_dir() / f"attend-{key}.so"
    try:
        if not target.exists():
            _build(compiler, target)
        library = ctypes.CDLL(str(target))
    except (OSError, subprocess.CalledProcessError) as error:
        log.warning("could not build the native attention kernel (%s); using PyTorch attention", error)
        return None
    for name in ("rope_attend_bf16", "rope_attend_f32"):
        function = getattr(library, name)
        function.restype = ctypes.c_int
        function.argtypes = [ctypes.c_void_p] * 8 + [ctypes.c_int] * 5 + [ctypes.c_float]
    return library


def available(dtype: torch.dtype) -> bool:
    return dtype in (torch.bfloat16, torch.float32) and _library() is not None


def rope_attend(
    qkv: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    cos: torch.Tensor,
    sin_signed: torch.Tensor,
    start: torch.Tensor,
    offsets: torch.Tensor,
    heads: int,
    scale: float,
) -> torch.Tensor:
    """Packed rows: qkv (N, H + 2 Hkv, D), row b's tokens at offsets[b]:offsets[b + 1] (B + 1,),
    fed at positions start[b] + s (B,). Writes their keys/values into the caches (B, Hkv, T, D)
    and returns the attention output (N, H D)."""
    tokens, _, head_dim = qkv.shape
    batch, kv_heads, max_len = keys.shape[0], keys.shape[1], keys.shape[2]
    assert qkv.is_contiguous() and keys.is_contiguous() and values.is_contiguous() and cos.is_contiguous()
    assert qkv.dtype == keys.dtype == values.dtype == cos.dtype == sin_signed.dtype
    assert start.dtype == offsets.dtype == torch.int64 and start.is_contiguous() and offsets.is_contiguous()
    out = torch.empty(tokens, heads * head_dim, dtype=qkv.dtype)
    library = _library()
    assert library is not None
    function = library.rope_attend_bf16 if qkv.dtype == torch.bfloat16 else library.rope_attend_f32
    status = function(
        qkv.data_ptr(), keys.data_ptr(), values.data_ptr(), cos.data_ptr(), sin_signed.data_ptr(), start.data_ptr(),
        offsets.data_ptr(), out.data_ptr(), batch, heads, kv_heads, head_dim, max_len, scale,
    )
    if status != 0:
        raise MemoryError("native attention could not allocate its buffers")
    return out
