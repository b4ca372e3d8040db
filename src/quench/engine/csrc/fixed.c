/* Batch-invariant kernels: each output row's bits depend on that row's inputs only, never on how many rows
   a call has, which rows share it, how they are blocked, or the number of threads.

   fixed_gemm: y (M, N) = x (M, K) W^T with W packed as (ceil(N/16), K, 16) in the weights' dtype (zeros
   past N). Every output is one float32 accumulator updated by a fused multiply-add per input in order
   k = 0 .. K-1, starting from zero, and rounded to the output dtype once: the same sequence whatever the
   row block, the column group, the vector width (AVX512 or the scalar fmaf fallback) or the thread that
   computes it. Threads split the columns only, never K. bfloat16 inputs are widened exactly to float32.

   rms_norm_f32 and silu_mul_*: one row at a time, scalar, in a fixed order (compiled without fast-math and
   without FMA contraction, so no reassociated or vectorised reduction). */
#include "x86.h"

#include <math.h>
#include <stdlib.h>

static inline float widen_f32(float v) { return v; }
static inline float widen_bf16(bf16 v) { return load_bf16(v); }
static inline void put_f32(float* p, float v) { *p = v; }
static inline void put_bf16(bf16* p, float v) { *p = store_bf16(v); }

#if defined(__AVX512F__)
static inline __m512 wload_f32(const float* p) { return _mm512_loadu_ps(p); }
static inline __m512 wload_bf16(const bf16* p) { return bf16x16_to_f32(p); }
/* MB rows (x rows as float32 at xr[i]) x S 16-wide blocks of W from w; block s's 16 sums for row i go to
   out[i][16 s ..]. */
#define FIXED(T, SUF, MB, S)                                                                       \
static void fixed_##SUF##_##MB##_##S(const float* const* xr, const T* w, float (*out)[16 * 6], int K) { \
    __m512 acc[MB][S];                                                                             \
    for (int i = 0; i < MB; i++)                                                                   \
        for (int s = 0; s < S; s++) acc[i][s] = _mm512_setzero_ps();                               \
    for (int k = 0; k < K; k++) {                                                                  \
        for (int s = 0; s < S; s++) {                                                              \
            __m512 wv = wload_##SUF(w + ((int64_t)s * K + k) * 16);                                \
            for (int i = 0; i < MB; i++) acc[i][s] = _mm512_fmadd_ps(_mm512_set1_ps(xr[i][k]), wv, acc[i][s]); \
        }                                                                                          \
    }                                                                                              \
    for (int i = 0; i < MB; i++)                                                                   \
        for (int s = 0; s < S; s++) _mm512_storeu_ps(out[i] + 16 * s, acc[i][s]);                  \
}
#define FIXED_ALL(T, SUF) FIXED(T, SUF, 4, 6) FIXED(T, SUF, 2, 6) FIXED(T, SUF, 1, 6)              \
    FIXED(T, SUF, 4, 1) FIXED(T, SUF, 2, 1) FIXED(T, SUF, 1, 1)
FIXED_ALL(float, f32)
FIXED_ALL(bf16, bf16)
#endif

/* One group of nb <= 6 blocks of W (starting at block b0) for the rows m0 .. m0 + mb (mb <= 4). */
#define GROUP(T, SUF)                                                                              \
static void group_##SUF(const float* xf, const T* wp, T* y, int m0, int mb, int b0, int nb, int N, int K) { \
    float out[4][16 * 6];                                                                          \
    const float* xr[4];                                                                            \
    for (int i = 0; i < 4; i++) xr[i] = xf + (int64_t)(m0 + (i < mb ? i : 0)) * K;                 \
    const T* w = wp + (int64_t)b0 * 16 * K;                                                        \
    GROUP_BODY(T, SUF)                                                                             \
    for (int i = 0; i < mb; i++)                                                                   \
        for (int c = 0; c < 16 * nb && 16 * b0 + c < N; c++)                                       \
            put_##SUF(y + (int64_t)(m0 + i) * N + 16 * b0 + c, out[i][c]);                         \
}
#if defined(__AVX512F__)
/* Rows past mb repeat row m0 (computed, never stored); a group of fewer than 6 blocks goes block by block. */
#define GROUP_VECTOR(T, SUF)                                                                        \
    int rows = mb > 2 ? 4 : mb;                                                                    \
    if (nb == 6) {                                                                                 \
        if (rows == 4) fixed_##SUF##_4_6(xr, w, out, K);                                           \
        else if (rows == 2) fixed_##SUF##_2_6(xr, w, out, K);                                      \
        else fixed_##SUF##_1_6(xr, w, out, K);                                                     \
    } else {                                                                                       \
        for (int s = 0; s < nb; s++) {                                                             \
            float part[4][16 * 6];                                                                 \
            const T* ws = w + (int64_t)s * 16 * K;                                                 \
            if (rows == 4) fixed_##SUF##_4_1(xr, ws, part, K);                                     \
            else if (rows == 2) fixed_##SUF##_2_1(xr, ws, part, K);                                \
            else fixed_##SUF##_1_1(xr, ws, part, K);                                               \
            for (int i = 0; i < rows; i++) memcpy(out[i] + 16 * s, part[i], 16 * sizeof(float));   \
        }                                                                                          \
    }
#define GROUP_BODY(T, SUF) GROUP_VECTOR(T, SUF)
#else
/* The same sums one at a time: fmaf rounds once per step, as the vector FMA does. */
#define GROUP_SCALAR(T, SUF)                                                                        \
    for (int i = 0; i < mb; i++)                                                                   \
        for (int c = 0; c < 16 * nb; c++) {                                                        \
            const T* wc = w + (int64_t)(c / 16) * 16 * K + c % 16;                                 \
            float acc = 0.0f;                                                                      \
            for (int k = 0; k < K; k++) acc = fmaf(xr[i][k], widen_##SUF(wc[(int64_t)k * 16]), acc); \
            out[i][c] = acc;                                                                       \
        }
#define GROUP_BODY(T, SUF) GROUP_SCALAR(T, SUF)
#endif
GROUP(float, f32)
GROUP(bf16, bf16)

static void fixed_gemm(const float* xf, const void* wp, void* y, int M, int N, int K, int threads, int is_bf16) {
    int nblocks = (N + 15) / 16, groups = (nblocks + 5) / 6;
    #pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1 && groups > 1)
    for (int g = 0; g < groups; g++) {
        int b0 = 6 * g, nb = nblocks - b0 < 6 ? nblocks - b0 : 6;
        for (int m0 = 0; m0 < M; m0 += 4) {
            int mb = M - m0 < 4 ? M - m0 : 4;
            if (is_bf16) group_bf16(xf, (const bf16*)wp, (bf16*)y, m0, mb, b0, nb, N, K);
            else group_f32(xf, (const float*)wp, (float*)y, m0, mb, b0, nb, N, K);
        }
    }
}

void fixed_gemm_f32(const float* x, const float* wp, float* y, int M, int N, int K, int threads) {
    fixed_gemm(x, wp, y, M, N, K, threads < 1 ? 1 : threads, 0);
}

int fixed_gemm_bf16(const bf16* x, const bf16* wp, bf16* y, int M, int N, int K, int threads) {
    float* xf = malloc(sizeof(float) * ((int64_t)M * K + 1));
    if (!xf) return 1;
    for (int64_t i = 0; i < (int64_t)M * K; i++) xf[i] = load_bf16(x[i]);
    fixed_gemm(xf, wp, y, M, N, K, threads < 1 ? 1 : threads, 1);
    free(xf);
    return 0;
}

void rms_norm_f32(const float* x, const float* weight, float* out, int N, int Dm, float eps) {
    for (int n = 0; n < N; n++) {
        const float* xr = x + (int64_t)n * Dm;
        float total = 0.0f;
        for (int i = 0; i < Dm; i++) total += xr[i] * xr[i];
        float inv = 1.0f / sqrtf(total / (float)Dm + eps);
        for (int i = 0; i < Dm; i++) out[(int64_t)n * Dm + i] = weight[i] * (xr[i] * inv);
    }
}

static inline float silu(float g) { return g / (1.0f + expf(-g)); }

void silu_mul_f32(const float* gate_up, float* act, int N, int I) {
    for (int n = 0; n < N; n++)
        for (int i = 0; i < I; i++) {
            const float* row = gate_up + (int64_t)n * 2 * I;
            act[(int64_t)n * I + i] = silu(row[i]) * row[I + i];
        }
}

void silu_mul_rows_bf16(const bf16* gate_up, bf16* act, int N, int I) {
    for (int n = 0; n < N; n++)
        for (int i = 0; i < I; i++) {
            const bf16* row = gate_up + (int64_t)n * 2 * I;
            act[(int64_t)n * I + i] = store_bf16(round_bf16(silu(load_bf16(row[i]))) * load_bf16(row[I + i]));
        }
}
