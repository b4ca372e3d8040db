"""C source of quench's native decode kernels (compiled and loaded by `quench.engine.native`).

Six translation units, each with its own compiler flags: RoPE (exact PyTorch rounding), attention,
the norm glue, the small bfloat16 GEMM, the layer loop and the screened greedy head. `SOURCES` and `FLAGS` are what `native._build` compiles;
both are part of the cache key, so editing a kernel rebuilds the library. The attention and GEMM sources
are in `native_attention_source`, `native_gemm_source`, `native_layers_source` and `native_screen_source`.
"""

from quench.engine.native_attention_source import ATTEND
from quench.engine.native_gemm_source import GEMM
from quench.engine.native_layers_source import LAYERS
from quench.engine.native_screen_source import SCREEN

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

# x86 helpers shared by the attention, glue and GEMM units (each has its own compiler flags, so the
# helpers are compiled into each; all are exact integer moves).
_X86 = r"""
#if defined(__AVX512F__)
#include <immintrin.h>
/* 16 bfloat16 values -> float32 (exact). */
static inline __m512 bf16x16_to_f32(const bf16* p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p)), 16));
}
#if defined(__AVX512BF16__)
/* 16 floats -> bfloat16, rounded to nearest even (as store_bf16 for finite values). */
static inline __m256i f32x16_to_bf16(__m512 v) { return (__m256i)_mm512_cvtneps_pbh(v); }
/* 16 floats rounded to bfloat16 and back (round_bf16, 16 at a time). */
static inline __m512 round_to_bf16(__m512 v) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(f32x16_to_bf16(v)), 16));
}
#endif
/* exp(x) in float32: 2^n e^r with n = round(x / ln 2), r = x - n ln 2 in two steps, e^r by Cephes' degree-7
   polynomial (~1 ulp, as libm's expf; max relative error 1.2e-7 against double precision over [-87, 0]).
   Below -104 it is 0 (-inf too), above ~88.7 scalef gives inf. The attention's softmax and SiLU use it. */
static inline __m512 exp_ps(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));  /* exp(-104) is below the smallest float: 0 */
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}
#endif
#if defined(__AVX512F__) && defined(__AVX512BF16__) && defined(__AMX_TILE__) && defined(__AMX_BF16__)
typedef struct { uint8_t palette, start; uint8_t reserved[14]; uint16_t colsb[16]; uint8_t rows[16]; } tile_config;
/* Tiles 0 .. count - 1 as 16 rows x 64 bytes (tile state is per thread). */
static inline void load_tiles_16x64(int count) {
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < count; t++) { cfg.rows[t] = 16; cfg.colsb[t] = 64; }
    _tile_loadconfig(&cfg);
}
#endif
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

_ATTEND = _COMMON + _X86 + ATTEND

# Residual sum + RMSNorm for a bfloat16 decode step. At 8 rows of 576 each PyTorch op is dominated by
# its dispatch (~20-30 us for a residual sum and an RMSNorm's four ops, more than the work), twice per
# layer. Numerics as modeling_llama's bfloat16 path: the sum is rounded to bfloat16 (bit-identical);
# the norm runs in float32, is rounded, multiplied by the weight and rounded again. The float32 sum of
# squares adds in another order than PyTorch's reduction, so the mean square can differ in its last
# bit: on real decode steps of the default model 15 of 29,280 normed rows differed from PyTorch's, by
# one bfloat16 step in a few elements (a near-tie in rounding). SiLU is in the layer loop's unit
# (native_layers_source), with the prelude's exp_ps.
_GLUE = _COMMON + _X86 + r"""
#include <math.h>
/* x (N, Dm) is the residual stream: x += delta (if given, rounded); out = w * norm(x) (N, Dm). */
#if defined(__AVX512F__) && defined(__AVX512BF16__)
/* The same arithmetic 16 lanes at a time: lane k sums the squares of elements k, k + 16, ... in order,
   as the scalar loop's lanes[k] does, and the lanes are added in the same order: the same bits. */
static void add_rms_norm_row16(bf16* xr, const bf16* dr, const bf16* weight, bf16* o, int Dm, float eps) {
    __m512 lanes = _mm512_setzero_ps();
    for (int i = 0; i < Dm; i += 16) {
        __m512 v = bf16x16_to_f32(xr + i);
        if (dr) {
            v = round_to_bf16(_mm512_add_ps(v, bf16x16_to_f32(dr + i)));
            _mm256_storeu_si256((__m256i*)(xr + i), f32x16_to_bf16(v));
        }
        lanes = _mm512_add_ps(lanes, _mm512_mul_ps(v, v));
    }
    float part[16], total = 0.0f;
    _mm512_storeu_ps(part, lanes);
    for (int k = 0; k < 16; k++) total += part[k];
    __m512 inv = _mm512_set1_ps(1.0f / sqrtf(total / (float)Dm + eps));
    for (int i = 0; i < Dm; i += 16) {
        __m512 rounded = round_to_bf16(_mm512_mul_ps(bf16x16_to_f32(xr + i), inv));
        _mm256_storeu_si256((__m256i*)(o + i), f32x16_to_bf16(_mm512_mul_ps(bf16x16_to_f32(weight + i), rounded)));
    }
}
#endif
void add_rms_norm_bf16(bf16* x, const bf16* delta, const bf16* weight, bf16* out, int N, int Dm, float eps) {
#if defined(__AVX512F__) && defined(__AVX512BF16__)
    if (Dm % 16 == 0) {
        for (int n = 0; n < N; n++)
            add_rms_norm_row16(x + (int64_t)n * Dm, delta ? delta + (int64_t)n * Dm : 0, weight, out + (int64_t)n * Dm, Dm, eps);
        return;
    }
#endif
    for (int n = 0; n < N; n++) {
        bf16* xr = x + (int64_t)n * Dm;
        if (delta) {
            const bf16* dr = delta + (int64_t)n * Dm;
            for (int i = 0; i < Dm; i++) xr[i] = store_bf16(load_bf16(xr[i]) + load_bf16(dr[i]));
        }
        float lanes[16] = {0}, total = 0.0f;  /* 16 float lanes, like a vectorised sum (closer to PyTorch's) */
        for (int i = 0; i < Dm; i++) { float v = load_bf16(xr[i]); lanes[i % 16] += v * v; }
        for (int k = 0; k < 16; k++) total += lanes[k];
        float inv = 1.0f / sqrtf(total / (float)Dm + eps);  /* IEEE division and sqrt, as torch.rsqrt computes */
        bf16* o = out + (int64_t)n * Dm;
        for (int i = 0; i < Dm; i++)
            o[i] = store_bf16(load_bf16(weight[i]) * round_bf16(load_bf16(xr[i]) * inv));
    }
}

/* Greedy decoding's argmax over logits (R rows of V, row stride `stride`; bfloat16 or float32): the
   first index of the largest value, as torch.argmax (NaN aside: torch ranks it highest, this ignores it).
   PyTorch's CPU argmax ran at ~0.2-0.5 G elements/s here: 4-9 ms for a batch-8 verification's (8, 5, 49152). */
#if defined(__AVX512F__)
/* The vector part: per lane, strictly greater, so each lane keeps its first maximum; then the first
   index among the lanes holding the maximum. Leaves v (where the scalar tail starts), top and first. */
#define ARGMAX_VECTOR(LOAD16)                                                                      \
        __m512 best = _mm512_set1_ps(-INFINITY);                                                   \
        __m512i where = _mm512_setzero_si512();                                                    \
        __m512i index = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);   \
        int v = 0;                                                                                 \
        for (; v + 16 <= V; v += 16) {                                                             \
            __m512 value = LOAD16(p + v);                                                          \
            __mmask16 greater = _mm512_cmp_ps_mask(value, best, _CMP_GT_OQ);                       \
            best = _mm512_mask_mov_ps(best, greater, value);                                       \
            where = _mm512_mask_mov_epi32(where, greater, index);                                  \
            index = _mm512_add_epi32(index, _mm512_set1_epi32(16));                                \
        }                                                                                          \
        float top = _mm512_reduce_max_ps(best);                                                    \
        __mmask16 ties = _mm512_cmp_ps_mask(best, _mm512_set1_ps(top), _CMP_EQ_OQ);                \
        int first = ties ? _mm512_mask_reduce_min_epi32(ties, where) : 0;
#else
#define ARGMAX_VECTOR(LOAD16) int v = 0; float top = -INFINITY; int first = 0;
#endif
#define ARGMAX(T, SUFFIX, LOAD16)                                                                  \
void argmax_##SUFFIX(const T* x, int64_t* out, int R, int V, int64_t stride) {                     \
    for (int r = 0; r < R; r++) {                                                                  \
        const T* p = x + (int64_t)r * stride;                                                      \
        ARGMAX_VECTOR(LOAD16)                                                                      \
        for (; v < V; v++) {                                                                       \
            float value = load_##SUFFIX(p[v]);                                                     \
            if (value > top) { top = value; first = v; }                                           \
        }                                                                                          \
        out[r] = first;                                                                            \
    }                                                                                              \
}
ARGMAX(bf16, bf16, bf16x16_to_f32)
ARGMAX(float, f32, _mm512_loadu_ps)
"""

FLAGS = {
    "rope": ["-O2", "-ffp-contract=off"],
    "attend": ["-O3", "-march=native", "-ffast-math"],
    "glue": ["-O3", "-march=native", "-ffp-contract=off"],
    "gemm": ["-O3", "-march=native"],  # no fast-math: it turns 1/sqrtf into an approximation
    "layers": ["-O3", "-march=native", "-ffp-contract=off"],
    "screen": ["-O3", "-march=native"],
}
# Attention and the GEMMs split their work over torch's threads with OpenMP: built with -fopenmp, the
# library asks for libgomp.so.1, and the dynamic loader hands it the copy torch already loaded, so both
# share one thread pool. Where the compiler has no OpenMP the pragmas are ignored: one thread.
OPENMP = {"attend", "gemm", "screen"}


SOURCES = {"rope": _ROPE, "attend": _ATTEND, "glue": _GLUE, "gemm": _COMMON + _X86 + GEMM, "layers": _COMMON + _X86 + LAYERS,
           "screen": _COMMON + _X86 + SCREEN}
