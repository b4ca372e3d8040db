"""C source of quench's native decode kernels (compiled and loaded by `quench.generation.native`).

Four translation units, each with its own compiler flags: RoPE (exact PyTorch rounding), attention,
the norm glue, and the small bfloat16 GEMM. `SOURCES` and `FLAGS` are what `native._build` compiles;
both are part of the cache key, so editing a kernel rebuilds the library.
"""

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

# bfloat16 with head size 64 on CPUs with AVX512-BF16 (the default model, this machine): the loops of
# the generic kernel ran ~4x below what the cache reads allow (one horizontal sum per query-key dot,
# and every key converted to float32 first). Here q.k is two vdpbf16ps per key (q is bfloat16-exact
# after RoPE's rounding, so products are exact in float32; the sum order differs, as any vectorised
# sum does), and p.v keeps four query rows' accumulators in registers while each value row is read once.
_ATTEND_BF16_64 = r"""
#if defined(__AVX512F__) && defined(__AVX512BF16__)
#define HAVE_AVX512_BF16 1
#include <immintrin.h>
static int attend64_bf16_avx512(const bf16* qkv, bf16* kc, bf16* vc, const bf16* cos, const bf16* sin_signed,
                                const int64_t* start, const int64_t* offsets, bf16* out, int B, int H, int Hkv,
                                int Tmax, float scale) {
    enum { D = 64 };
    int G = H / Hkv, width = H + 2 * Hkv, most = 0, longest = 0;
    for (int b = 0; b < B; b++) {
        int n = (int)(offsets[b + 1] - offsets[b]);
        if (n > most) most = n;
        if (n && start[b] + n > longest) longest = (int)(start[b] + n);
    }
    int rows = (most * G + 3) / 4 * 4;  /* query rows rounded up to the p.v block of 4 (extra rows: p = 0) */
    float* q = malloc(sizeof(float) * (rows + 1) * D);
    __m512bh* qb = aligned_alloc(64, sizeof(__m512bh) * 2 * (rows + 1));  /* vector stores need 64-byte alignment */
    float* scores = calloc((size_t)rows * longest + 1, sizeof(float));
    if (!q || !qb || !scores) { free(q); free(qb); free(scores); return 1; }
    for (int b = 0; b < B; b++) {
        int S = (int)(offsets[b + 1] - offsets[b]), M = S * G, keys = (int)start[b] + S;
        if (S == 0) continue;
        for (int s = 0; s < S; s++) {
            int64_t pos = start[b] + s;
            const bf16* tok = qkv + (offsets[b] + s) * width * D;
            for (int j = 0; j < Hkv; j++) {
                int64_t at = (((int64_t)b * Hkv + j) * Tmax + pos) * D;
                rope_bf16(tok + (H + j) * D, cos + pos * D, sin_signed + pos * D, D, q, kc + at);
                memcpy(vc + at, tok + (H + Hkv + j) * D, sizeof(bf16) * D);
            }
        }
        int blocks = (M + 3) / 4 * 4;
        memset(scores, 0, sizeof(float) * (size_t)blocks * keys);
        for (int j = 0; j < Hkv; j++) {
            for (int s = 0; s < S; s++) {
                int64_t pos = start[b] + s;
                const bf16* tok = qkv + (offsets[b] + s) * width * D;
                for (int g = 0; g < G; g++)
                    rope_bf16(tok + (j * G + g) * D, cos + pos * D, sin_signed + pos * D, D, q + (s * G + g) * D, 0);
            }
            for (int m = 0; m < M; m++) {  /* exact: RoPE rounded q to bfloat16 */
                qb[2 * m] = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(q + m * D + 16), _mm512_loadu_ps(q + m * D));
                qb[2 * m + 1] = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(q + m * D + 48), _mm512_loadu_ps(q + m * D + 32));
            }
            const bf16* kb = kc + ((int64_t)b * Hkv + j) * Tmax * D;
            const bf16* vb = vc + ((int64_t)b * Hkv + j) * Tmax * D;
            for (int t = 0; t < keys; t++) {
                __m512bh k0 = (__m512bh)_mm512_loadu_si512(kb + (int64_t)t * D);
                __m512bh k1 = (__m512bh)_mm512_loadu_si512(kb + (int64_t)t * D + 32);
                for (int m = 0; m < M; m++) {
                    __m512 dot = _mm512_dpbf16_ps(_mm512_setzero_ps(), qb[2 * m], k0);
                    dot = _mm512_dpbf16_ps(dot, qb[2 * m + 1], k1);
                    scores[(int64_t)m * keys + t] = (t <= start[b] + m / G) ? _mm512_reduce_add_ps(dot) * scale : -INFINITY;
                }
            }
            for (int m = 0; m < M; m++) {
                float* sc = scores + (int64_t)m * keys, top = -INFINITY, total = 0.0f;
                for (int t = 0; t < keys; t++) top = sc[t] > top ? sc[t] : top;
                for (int t = 0; t < keys; t++) { sc[t] = expf(sc[t] - top); total += sc[t]; }
                for (int t = 0; t < keys; t++) sc[t] /= total;
            }
            for (int m0 = 0; m0 < M; m0 += 4) {
                __m512 acc[4][4];
                for (int i = 0; i < 4; i++)
                    for (int c = 0; c < 4; c++) acc[i][c] = _mm512_setzero_ps();
                for (int t = 0; t < keys; t++) {
                    __m512 v[4];
                    for (int c = 0; c < 4; c++) {
                        __m256i raw = _mm256_loadu_si256((const __m256i*)(vb + (int64_t)t * D + 16 * c));
                        v[c] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
                    }
                    for (int i = 0; i < 4; i++) {
                        __m512 p = _mm512_set1_ps(scores[(int64_t)(m0 + i) * keys + t]);
                        for (int c = 0; c < 4; c++) acc[i][c] = _mm512_fmadd_ps(p, v[c], acc[i][c]);
                    }
                }
                for (int i = 0; i < 4 && m0 + i < M; i++) {
                    int m = m0 + i, s = m / G, g = m % G;
                    float row[D];
                    for (int c = 0; c < 4; c++) _mm512_storeu_ps(row + 16 * c, acc[i][c]);
                    bf16* o = out + (offsets[b] + s) * H * D + (j * G + g) * D;
                    for (int d = 0; d < D; d++) o[d] = store_bf16(row[d]);
                }
            }
        }
    }
    free(q); free(qb); free(scores);
    return 0;
}
#else
#define HAVE_AVX512_BF16 0
#endif
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
static int rope_attend_generic_##SUFFIX(const T* qkv, T* kc, T* vc, const T* cos, const T* sin_signed, \
                         const int64_t* start, const int64_t* offsets, T* out, int B, int H,        \
                         int Hkv, int D, int Tmax, float scale) {                                   \
    if (D == 64) return attend64_##SUFFIX(qkv, kc, vc, cos, sin_signed, start, offsets, out, B, H, Hkv, D, Tmax, scale); \
    if (D == 128) return attend128_##SUFFIX(qkv, kc, vc, cos, sin_signed, start, offsets, out, B, H, Hkv, D, Tmax, scale); \
    return attend_any_##SUFFIX(qkv, kc, vc, cos, sin_signed, start, offsets, out, B, H, Hkv, D, Tmax, scale); \
}
DISPATCH(bf16, bf16)
DISPATCH(float, f32)
""" + _ATTEND_BF16_64 + r"""
int rope_attend_bf16(const bf16* qkv, bf16* kc, bf16* vc, const bf16* cos, const bf16* sin_signed, const int64_t* start,
                     const int64_t* offsets, bf16* out, int B, int H, int Hkv, int D, int Tmax, float scale) {
#if HAVE_AVX512_BF16
    if (D == 64) return attend64_bf16_avx512(qkv, kc, vc, cos, sin_signed, start, offsets, out, B, H, Hkv, Tmax, scale);
#endif
    return rope_attend_generic_bf16(qkv, kc, vc, cos, sin_signed, start, offsets, out, B, H, Hkv, D, Tmax, scale);
}
int rope_attend_f32(const float* qkv, float* kc, float* vc, const float* cos, const float* sin_signed, const int64_t* start,
                    const int64_t* offsets, float* out, int B, int H, int Hkv, int D, int Tmax, float scale) {
    return rope_attend_generic_f32(qkv, kc, vc, cos, sin_signed, start, offsets, out, B, H, Hkv, D, Tmax, scale);
}
"""

# Residual sum + RMSNorm for a bfloat16 decode step. At 8 rows of 576 each PyTorch op is dominated by
# its dispatch (~20-30 us for a residual sum and an RMSNorm's four ops, more than the work), twice per
# layer. Numerics as modeling_llama's bfloat16 path: the sum is rounded to bfloat16 (bit-identical);
# the norm runs in float32, is rounded, multiplied by the weight and rounded again. The float32 sum of
# squares adds in another order than PyTorch's reduction, so the mean square can differ in its last
# bit: on real decode steps of the default model 15 of 29,280 normed rows differed from PyTorch's, by
# one bfloat16 step in a few elements (a near-tie in rounding). SiLU stays in PyTorch: a vectorised
# expf here (glibc's) differs from PyTorch's in ~0.1% of bfloat16 results, a scalar one is slower.
_GLUE = _COMMON + r"""
#include <math.h>
/* x (N, Dm) is the residual stream: x += delta (if given, rounded); out = w * norm(x) (N, Dm). */
void add_rms_norm_bf16(bf16* x, const bf16* delta, const bf16* weight, bf16* out, int N, int Dm, float eps) {
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
"""

# y = x W^T in bfloat16 for a few rows (decode steps), on CPUs with AVX512-BF16. oneDNN's kernel for
# 8 rows ran ~21 ms per step of the default model against ~15 ms with its weights in cache: streaming
# 270 MB of weights and computing did not overlap. Here W is packed as (N/BW, K/2, BW, 2) with BW = 48
# output features (16 where N is not a multiple of 48), so the weights are read as one sequential
# stream: per pair of inputs, BW/16 64-byte lines, each multiplied (vdpbf16ps: 16 outputs x 2 inputs)
# with a broadcast pair of x for up to 8 rows (24 accumulators). Measured on 30 layers + head at 8
# rows: 12 ms, against 15 ms with 16-wide blocks read as three streams and 21 ms for oneDNN. Float32
# accumulation, rounded to bfloat16 once, as oneDNN does; only the summation order differs (in ~1e-4
# of outputs either differs from a float32 reference by one bfloat16 step, not always the same ones).
_GEMM = r"""
#include <stdint.h>
#include <string.h>
#if defined(__AVX512F__) && defined(__AVX512BF16__)
#include <immintrin.h>
typedef uint16_t bf16;
int small_gemm_available(void) { return 1; }
/* MB rows (xr/yr: row pointers; only the first mb are stored) x NB 16-wide vectors per block. */
#define GEMM(MB, NB)                                                                               \
static void gemm_##MB##_##NB(const bf16* const* xr, const bf16* wp, bf16* const* yr, int N, int K, int mb) { \
    int K2 = K / 2;                                                                                \
    for (int nb = 0; nb < N / (16 * NB); nb++) {                                                   \
        const bf16* w = wp + (int64_t)nb * K2 * 32 * NB;                                           \
        __m512 acc[MB][NB];                                                                        \
        for (int i = 0; i < MB; i++)                                                               \
            for (int c = 0; c < NB; c++) acc[i][c] = _mm512_setzero_ps();                          \
        for (int kk = 0; kk < K2; kk++) {                                                          \
            __m512bh v[NB];                                                                        \
            for (int c = 0; c < NB; c++) v[c] = (__m512bh)_mm512_loadu_si512(w + (kk * NB + c) * 32); \
            for (int i = 0; i < MB; i++) {                                                         \
                int32_t pair;                                                                      \
                memcpy(&pair, xr[i] + 2 * kk, 4);                                                  \
                __m512bh xb = (__m512bh)_mm512_set1_epi32(pair);                                   \
                for (int c = 0; c < NB; c++) acc[i][c] = _mm512_dpbf16_ps(acc[i][c], v[c], xb);   \
            }                                                                                      \
        }                                                                                          \
        for (int i = 0; i < mb; i++)                                                               \
            for (int c = 0; c < NB; c++)                                                           \
                _mm256_storeu_si256((__m256i*)(yr[i] + (nb * NB + c) * 16), (__m256i)_mm512_cvtneps_pbh(acc[i][c])); \
    }                                                                                              \
}
GEMM(1, 1) GEMM(2, 1) GEMM(4, 1) GEMM(8, 1) GEMM(1, 3) GEMM(2, 3) GEMM(4, 3) GEMM(8, 3)
/* x (M, K), W packed (N/BW, K/2, BW, 2) with BW = 16 * NB, y (M, N); rows in blocks of up to 8. Past 8
   rows W goes in chunks of 8 blocks (<= 0.5 MB at K = 576, 1.5 MB at K = 1536) that every row block
   uses while they are in cache, so W is read from memory once. */
void gemm_bf16(const bf16* x, const bf16* wp, bf16* y, int M, int N, int K, int NB) {
    int chunk = M > 8 ? 16 * NB * 8 : N;
    for (int n0 = 0; n0 < N; n0 += chunk) {
        int nc = N - n0 < chunk ? N - n0 : chunk;
        const bf16* w = wp + (int64_t)n0 * K;
        for (int m0 = 0; m0 < M; m0 += 8) {
            int mb = M - m0 < 8 ? M - m0 : 8;
            const bf16* xr[8];
            bf16* yr[8];
            for (int i = 0; i < 8; i++) {  /* rows past mb repeat row m0: computed, never stored */
                int m = m0 + (i < mb ? i : 0);
                xr[i] = x + (int64_t)m * K;
                yr[i] = y + (int64_t)m * N + n0;
            }
            if (NB == 3) {
                if (mb == 1) gemm_1_3(xr, w, yr, nc, K, mb);
                else if (mb == 2) gemm_2_3(xr, w, yr, nc, K, mb);
                else if (mb <= 4) gemm_4_3(xr, w, yr, nc, K, mb);
                else gemm_8_3(xr, w, yr, nc, K, mb);
            } else {
                if (mb == 1) gemm_1_1(xr, w, yr, nc, K, mb);
                else if (mb == 2) gemm_2_1(xr, w, yr, nc, K, mb);
                else if (mb <= 4) gemm_4_1(xr, w, yr, nc, K, mb);
                else gemm_8_1(xr, w, yr, nc, K, mb);
            }
        }
    }
}
#else
int small_gemm_available(void) { return 0; }
void gemm_bf16(const void* x, const void* wp, void* y, int M, int N, int K, int NB) {
    (void)x; (void)wp; (void)y; (void)M; (void)N; (void)K; (void)NB;
}
#endif
"""

FLAGS = {
    "rope": ["-O2", "-ffp-contract=off"],
    "attend": ["-O3", "-march=native", "-ffast-math"],
    "glue": ["-O3", "-march=native", "-ffp-contract=off"],
    "gemm": ["-O3", "-march=native"],  # no fast-math: it turns 1/sqrtf into an approximation
}


SOURCES = {"rope": _ROPE, "attend": _ATTEND, "glue": _GLUE, "gemm": _GEMM}
