/* Batch-invariant kernels: each output row's bits depend on that row's inputs only, never on how many rows
   a call has, which rows share it, how they are blocked, or the number of threads.

   fixed_gemm_f32: y (M, N) = x (M, K) W^T with W packed as (ceil(N/16), K, 16) (zeros past N). Every output
   is one float32 accumulator updated by a fused multiply-add per input in order k = 0 .. K-1, starting from
   zero: the same sequence whatever the row block, the column group, the vector width (AVX512, AVX2 + FMA as two
   8-lane halves of each 16-column block, NEON as four 4-lane quarters with FMLA, or the scalar fmaf fallback:
   the same bits on all four) or the thread that computes it. Threads split the columns only, never K.

   fixed_gemm_bf16: the same product in bfloat16, W packed in pairs of k as (ceil(N/16), ceil(K/2), 16, 2)
   (zeros past N and past K): the inputs widened exactly to float32 and summed as fixed_gemm_f32 does, rounded
   to bfloat16 once. Every build gives those bits. Where the CPU has AVX512-BF16, a row whose values and W's
   keep every product and partial sum clear of denormals (`dot_exact`, from each one's least and largest
   exponent: W's `bf16_span` is computed once, when it is packed) goes through VDPBF16PS with each pair turned
   around, which then performs the same fused steps in the same order, two per instruction; any other row is
   widened. Units that keep their own order are not used here: AMX's TDPBF16PS (it sums a tile step in its
   own order) and ARM's BFDOT/BFMMLA (not one IEEE fused step per input, denormals flushed).

   rms_norm_f32: each row's sum of squares in order, one product and one addition per value (compiled without
   fast-math and without FMA contraction, so no reassociated or vectorised reduction; rows side by side).
   silu_mul_*: element by element with `exp_fixed` (canon.h), the exponential every build and the vector SiLUs
   compute bit for bit. */
#include "x86.h"
#include "canon.h"

#include <math.h>
#include <stdlib.h>

static inline float widen_f32(float v) { return v; }
static inline void put_f32(float* p, float v) { *p = v; }

#if defined(__AVX512F__)
static inline __m512 wload_f32(const float* p) { return _mm512_loadu_ps(p); }
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
#elif defined(__AVX2__) && defined(__FMA__)
#define FIXED_AVX2 1
/* AVX2 + FMA: a 16-wide block as two 8-wide halves (columns 0-7, 8-15), the same FMA per output and k.
   MB rows x S blocks of W from w; block s's 16 sums for row i go to out[i][at + 16 s ..]. MB x 2 S <= 12 of the
   16 vector registers. */
#define FIXED8(MB, S)                                                                              \
static void fixed_f32_##MB##_##S(const float* const* xr, const float* w, float (*out)[16 * 6], int K, int at) { \
    __m256 acc[MB][2 * S];                                                                         \
    for (int i = 0; i < MB; i++)                                                                   \
        for (int s = 0; s < 2 * S; s++) acc[i][s] = _mm256_setzero_ps();                           \
    for (int k = 0; k < K; k++) {                                                                  \
        for (int s = 0; s < S; s++) {                                                              \
            __m256 lo = _mm256_loadu_ps(w + ((int64_t)s * K + k) * 16);                            \
            __m256 hi = _mm256_loadu_ps(w + ((int64_t)s * K + k) * 16 + 8);                        \
            for (int i = 0; i < MB; i++) {                                                         \
                __m256 xv = _mm256_broadcast_ss(xr[i] + k);                                        \
                acc[i][2 * s] = _mm256_fmadd_ps(xv, lo, acc[i][2 * s]);                            \
                acc[i][2 * s + 1] = _mm256_fmadd_ps(xv, hi, acc[i][2 * s + 1]);                    \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    for (int i = 0; i < MB; i++)                                                                   \
        for (int s = 0; s < 2 * S; s++) _mm256_storeu_ps(out[i] + at + 8 * s, acc[i][s]);          \
}
FIXED8(1, 6) FIXED8(2, 3) FIXED8(4, 1) FIXED8(2, 1) FIXED8(1, 1)
#elif defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
#define FIXED_NEON 1
/* NEON: a 16-wide block as four 4-wide quarters (columns 0-3, 4-7, 8-11, 12-15), one FMLA (vfmaq_f32, fused)
   per output and k, as the AVX2 halves. MB rows x S blocks of W from w; block s's 16 sums for row i go to
   out[i][at + 16 s ..]. MB x 4 S <= 24 of the 32 vector registers. */
#define FIXED4(MB, S)                                                                              \
static void fixed_f32_##MB##_##S(const float* const* xr, const float* w, float (*out)[16 * 6], int K, int at) { \
    float32x4_t acc[MB][4 * S];                                                                    \
    for (int i = 0; i < MB; i++)                                                                   \
        for (int s = 0; s < 4 * S; s++) acc[i][s] = vdupq_n_f32(0.0f);                             \
    for (int k = 0; k < K; k++) {                                                                  \
        for (int s = 0; s < S; s++) {                                                              \
            const float* line = w + ((int64_t)s * K + k) * 16;                                     \
            float32x4_t q[4] = {vld1q_f32(line), vld1q_f32(line + 4), vld1q_f32(line + 8), vld1q_f32(line + 12)}; \
            for (int i = 0; i < MB; i++) {                                                         \
                float32x4_t xv = vdupq_n_f32(xr[i][k]);                                            \
                for (int j = 0; j < 4; j++) acc[i][4 * s + j] = vfmaq_f32(acc[i][4 * s + j], xv, q[j]); \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    for (int i = 0; i < MB; i++)                                                                   \
        for (int s = 0; s < 4 * S; s++) vst1q_f32(out[i] + at + 4 * s, acc[i][s]);                 \
}
FIXED4(1, 6) FIXED4(2, 3) FIXED4(4, 1) FIXED4(2, 1) FIXED4(1, 1)
#endif
#if defined(FIXED_AVX2) || defined(FIXED_NEON)
#define FIXED_SPLIT 1  /* a 16-column block in narrower vectors: the same kernel shapes and dispatch */
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
#elif defined(FIXED_SPLIT)
/* Rows past mb repeat row m0 (computed, never stored); blocks by 6 (one row), 3 (two) or 1, the rest by 1. */
#define GROUP_BODY(T, SUF)                                                                          \
    int rows = mb > 2 ? 4 : mb, span = rows == 1 ? 6 : rows == 2 ? 3 : 1;                          \
    for (int s = 0; s < nb;) {                                                                     \
        const T* ws = w + (int64_t)s * 16 * K;                                                     \
        int step = nb - s >= span ? span : 1;                                                      \
        if (rows == 4) fixed_##SUF##_4_1(xr, ws, out, K, 16 * s);                                  \
        else if (rows == 2 && step == 3) fixed_##SUF##_2_3(xr, ws, out, K, 16 * s);                \
        else if (rows == 2) fixed_##SUF##_2_1(xr, ws, out, K, 16 * s);                             \
        else if (step == 6) fixed_##SUF##_1_6(xr, ws, out, K, 16 * s);                             \
        else fixed_##SUF##_1_1(xr, ws, out, K, 16 * s);                                            \
        s += step;                                                                                 \
    }
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

void fixed_gemm_f32(const float* x, const float* wp, float* y, int M, int N, int K, int threads) {
    int nblocks = (N + 15) / 16, groups = (nblocks + 5) / 6;
    threads = threads < 1 ? 1 : threads;
    #pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1 && groups > 1)
    for (int g = 0; g < groups; g++) {
        int b0 = 6 * g, nb = nblocks - b0 < 6 ? nblocks - b0 : 6;
        for (int m0 = 0; m0 < M; m0 += 4)
            group_f32(x, wp, y, m0, M - m0 < 4 ? M - m0 : 4, b0, nb, N, K);
    }
}

/* bfloat16, W in pairs of k: block s, pair p, column c, member j at ((s K2 + p) 16 + c) 2 + j, K2 = ceil(K/2).
   Every build gives every output the bits of one float32 sum: x[k] W[n][k] widened exactly and added by fused
   multiply-adds in order k = 0 .. K-1 from zero, rounded to bfloat16 once (the scalar loop below). */
#if defined(__AVX512F__)
/* x rows widened to float32 (xr[i], length K); each pair's members split exactly and added in order k. */
#define WIDE(MB, S)                                                                                \
static void wide_##MB##_##S(const float* const* xr, const bf16* w, float (*out)[16 * 6], int K) {  \
    __m512 acc[MB][S];                                                                             \
    const __m512i high = _mm512_set1_epi32((int32_t)0xffff0000u);                                  \
    int K2 = (K + 1) / 2;                                                                          \
    for (int i = 0; i < MB; i++)                                                                   \
        for (int s = 0; s < S; s++) acc[i][s] = _mm512_setzero_ps();                               \
    for (int p = 0; p < K2; p++) {                                                                 \
        for (int s = 0; s < S; s++) {                                                              \
            __m512i v = _mm512_loadu_si512(w + ((int64_t)s * K2 + p) * 32);                        \
            __m512 even = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));                           \
            __m512 odd = _mm512_castsi512_ps(_mm512_and_si512(v, high));                           \
            for (int i = 0; i < MB; i++) acc[i][s] = _mm512_fmadd_ps(_mm512_set1_ps(xr[i][2 * p]), even, acc[i][s]); \
            if (2 * p + 1 < K)                                                                     \
                for (int i = 0; i < MB; i++)                                                       \
                    acc[i][s] = _mm512_fmadd_ps(_mm512_set1_ps(xr[i][2 * p + 1]), odd, acc[i][s]); \
        }                                                                                          \
    }                                                                                              \
    for (int i = 0; i < MB; i++)                                                                   \
        for (int s = 0; s < S; s++) _mm512_storeu_ps(out[i] + 16 * s, acc[i][s]);                  \
}
WIDE(4, 6) WIDE(2, 6) WIDE(1, 6) WIDE(4, 1) WIDE(2, 1) WIDE(1, 1)
#if defined(__AVX512BF16__)
#define FIXED_DP 1
/* VDPBF16PS adds a pair's two products to the accumulator as two fused steps, the odd member's first (Intel's
   definition, and what Zen 4 computes), with denormal inputs and results flushed to zero. Each pair is turned
   around (x's 32-bit word and W's, rotated by 16 bits), so the even member, k = 2p, goes first: the steps of
   the widened kernel, in order k. Where no input, product or partial sum is a denormal (`dot_exact`) they
   round exactly as those fused multiply-adds: the same bits, two products per instruction. x rows as bfloat16
   with an even length 2 K2 (xr[i]); MB rows x S blocks. */
#define PAIRS(MB, S)                                                                               \
static void pairs_##MB##_##S(const bf16* const* xr, const bf16* w, float (*out)[16 * 6], int K2) { \
    __m512 acc[MB][S];                                                                             \
    for (int i = 0; i < MB; i++)                                                                   \
        for (int s = 0; s < S; s++) acc[i][s] = _mm512_setzero_ps();                               \
    for (int p = 0; p < K2; p++) {                                                                 \
        __m512bh xv[MB];                                                                           \
        for (int i = 0; i < MB; i++) {                                                             \
            uint32_t pair;                                                                         \
            memcpy(&pair, xr[i] + 2 * p, sizeof pair);                                             \
            xv[i] = (__m512bh)_mm512_set1_epi32((int32_t)(pair << 16 | pair >> 16));               \
        }                                                                                          \
        for (int s = 0; s < S; s++) {                                                              \
            __m512bh wv = (__m512bh)_mm512_rol_epi32(_mm512_loadu_si512(w + ((int64_t)s * K2 + p) * 32), 16); \
            for (int i = 0; i < MB; i++) acc[i][s] = _mm512_dpbf16_ps(acc[i][s], xv[i], wv);       \
        }                                                                                          \
    }                                                                                              \
    for (int i = 0; i < MB; i++)                                                                   \
        for (int s = 0; s < S; s++) _mm512_storeu_ps(out[i] + 16 * s, acc[i][s]);                  \
}
PAIRS(4, 6) PAIRS(2, 6) PAIRS(1, 6) PAIRS(4, 1) PAIRS(2, 1) PAIRS(1, 1)
/* Eight rows x S blocks: each W line read once for eight rows (24 accumulators at S = 3), a row's pair broadcast
   just before its products; the same steps per output as PAIRS. */
#define PAIRS8(S)                                                                                  \
static void pairs8_##S(const bf16* const* xr, const bf16* w, float (*out)[16 * 6], int K2) {      \
    __m512 acc[8][S];                                                                              \
    for (int i = 0; i < 8; i++)                                                                    \
        for (int s = 0; s < S; s++) acc[i][s] = _mm512_setzero_ps();                               \
    for (int p = 0; p < K2; p++) {                                                                 \
        __m512bh wv[S];                                                                            \
        for (int s = 0; s < S; s++)                                                                \
            wv[s] = (__m512bh)_mm512_rol_epi32(_mm512_loadu_si512(w + ((int64_t)s * K2 + p) * 32), 16); \
        for (int i = 0; i < 8; i++) {                                                              \
            uint32_t pair;                                                                         \
            memcpy(&pair, xr[i] + 2 * p, sizeof pair);                                             \
            __m512bh xv = (__m512bh)_mm512_set1_epi32((int32_t)(pair << 16 | pair >> 16));         \
            for (int s = 0; s < S; s++) acc[i][s] = _mm512_dpbf16_ps(acc[i][s], xv, wv[s]);        \
        }                                                                                          \
    }                                                                                              \
    for (int i = 0; i < 8; i++)                                                                    \
        for (int s = 0; s < S; s++) _mm512_storeu_ps(out[i] + 16 * s, acc[i][s]);                  \
}
PAIRS8(3) PAIRS8(1)
#endif
#endif
#if defined(FIXED_AVX2)
/* AVX2 + FMA: x rows widened to float32 (length K). A 64-byte line of W holds pair p of 16 columns: its first
   half columns 0-7, its second 8-15; each 32-bit word's low half is k = 2p, its high half k = 2p + 1, so a
   shift and a mask widen them exactly. The FMAs run in order k, as fixed_gemm_f32's. */
#define PAIRS8(MB, S)                                                                              \
static void pairs_##MB##_##S(const float* const* xr, const bf16* w, float (*out)[16 * 6], int K, int at) { \
    __m256 acc[MB][2 * S];                                                                         \
    const __m256i high = _mm256_set1_epi32((int32_t)0xffff0000u);                                  \
    int K2 = (K + 1) / 2;                                                                          \
    for (int i = 0; i < MB; i++)                                                                   \
        for (int s = 0; s < 2 * S; s++) acc[i][s] = _mm256_setzero_ps();                           \
    for (int p = 0; p < K / 2; p++) {                                                              \
        for (int s = 0; s < S; s++) {  /* both halves widened first: each row's inputs broadcast once */ \
            const bf16* line = w + ((int64_t)s * K2 + p) * 32;                                     \
            __m256i lo = _mm256_loadu_si256((const __m256i*)line);                                 \
            __m256i hi = _mm256_loadu_si256((const __m256i*)(line + 16));                          \
            __m256 even_lo = _mm256_castsi256_ps(_mm256_slli_epi32(lo, 16));                       \
            __m256 odd_lo = _mm256_castsi256_ps(_mm256_and_si256(lo, high));                       \
            __m256 even_hi = _mm256_castsi256_ps(_mm256_slli_epi32(hi, 16));                       \
            __m256 odd_hi = _mm256_castsi256_ps(_mm256_and_si256(hi, high));                       \
            for (int i = 0; i < MB; i++) {                                                         \
                __m256 xe = _mm256_broadcast_ss(xr[i] + 2 * p), xo = _mm256_broadcast_ss(xr[i] + 2 * p + 1); \
                acc[i][2 * s] = _mm256_fmadd_ps(xo, odd_lo, _mm256_fmadd_ps(xe, even_lo, acc[i][2 * s])); \
                acc[i][2 * s + 1] = _mm256_fmadd_ps(xo, odd_hi, _mm256_fmadd_ps(xe, even_hi, acc[i][2 * s + 1])); \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    if (K % 2)  /* the last input alone: its pair's second member is W's zero pad, never added */   \
        for (int s = 0; s < S; s++)                                                                \
            for (int half = 0; half < 2; half++) {                                                 \
                __m256i v = _mm256_loadu_si256((const __m256i*)(w + ((int64_t)s * K2 + K / 2) * 32 + 16 * half)); \
                __m256 even = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));                       \
                for (int i = 0; i < MB; i++)                                                       \
                    acc[i][2 * s + half] = _mm256_fmadd_ps(_mm256_broadcast_ss(xr[i] + K - 1), even, acc[i][2 * s + half]); \
            }                                                                                      \
    for (int i = 0; i < MB; i++)                                                                   \
        for (int s = 0; s < 2 * S; s++) _mm256_storeu_ps(out[i] + at + 8 * s, acc[i][s]);          \
}
PAIRS8(1, 6) PAIRS8(2, 3) PAIRS8(4, 1) PAIRS8(2, 1) PAIRS8(1, 1)
typedef float pair_row;
#elif defined(FIXED_NEON)
/* NEON: x rows widened to float32 (length K). A 64-byte line of W holds pair p of 16 columns as four quarters
   of 4 columns; each 32-bit word's low half is k = 2p, its high half k = 2p + 1: a shift and a mask widen them
   exactly (as the AVX2 path). The FMAs run in order k, as fixed_gemm_f32's. A quarter at a time, so MB x 4 S
   accumulators, MB pairs of broadcast inputs and one widened pair fit the 32 vector registers. */
#define PAIRS4(MB, S)                                                                              \
static void pairs_##MB##_##S(const float* const* xr, const bf16* w, float (*out)[16 * 6], int K, int at) { \
    float32x4_t acc[MB][4 * S];                                                                    \
    const uint32x4_t high = vdupq_n_u32(0xffff0000u);                                              \
    int K2 = (K + 1) / 2;                                                                          \
    for (int i = 0; i < MB; i++)                                                                   \
        for (int s = 0; s < 4 * S; s++) acc[i][s] = vdupq_n_f32(0.0f);                             \
    for (int p = 0; p < K / 2; p++) {                                                              \
        float32x4_t xe[MB], xo[MB];                                                                \
        for (int i = 0; i < MB; i++) { xe[i] = vdupq_n_f32(xr[i][2 * p]); xo[i] = vdupq_n_f32(xr[i][2 * p + 1]); } \
        for (int s = 0; s < S; s++)                                                                \
            for (int j = 0; j < 4; j++) {                                                          \
                uint32x4_t v = vreinterpretq_u32_u16(vld1q_u16(w + ((int64_t)s * K2 + p) * 32 + 8 * j)); \
                float32x4_t even = vreinterpretq_f32_u32(vshlq_n_u32(v, 16));                      \
                float32x4_t odd = vreinterpretq_f32_u32(vandq_u32(v, high));                       \
                for (int i = 0; i < MB; i++)                                                       \
                    acc[i][4 * s + j] = vfmaq_f32(vfmaq_f32(acc[i][4 * s + j], xe[i], even), xo[i], odd); \
            }                                                                                      \
    }                                                                                              \
    if (K % 2)  /* the last input alone: its pair's second member is W's zero pad, never added */   \
        for (int s = 0; s < S; s++)                                                                \
            for (int j = 0; j < 4; j++) {                                                          \
                uint32x4_t v = vreinterpretq_u32_u16(vld1q_u16(w + ((int64_t)s * K2 + K / 2) * 32 + 8 * j)); \
                float32x4_t even = vreinterpretq_f32_u32(vshlq_n_u32(v, 16));                      \
                for (int i = 0; i < MB; i++)                                                       \
                    acc[i][4 * s + j] = vfmaq_f32(acc[i][4 * s + j], vdupq_n_f32(xr[i][K - 1]), even); \
            }                                                                                      \
    for (int i = 0; i < MB; i++)                                                                   \
        for (int s = 0; s < 4 * S; s++) vst1q_f32(out[i] + at + 4 * s, acc[i][s]);                 \
}
PAIRS4(1, 6) PAIRS4(2, 3) PAIRS4(4, 1) PAIRS4(2, 1) PAIRS4(1, 1)
typedef float pair_row;
#endif

/* One group of nb <= 6 blocks (from block b0) for rows m0 .. m0 + mb (mb <= 4): x rows widened to float32 (K
   values each), or with dp bfloat16 pairs (`stride` values each, K rounded up to even) for VDPBF16PS. */
static void group_pairs(const void* x, int dp, int stride, const bf16* wp, bf16* y, int m0, int mb, int b0, int nb,
                        int N, int K) {
    float out[8][16 * 6];
    const float* xr[4];
    int K2 = (K + 1) / 2;
    for (int i = 0; i < 4; i++) xr[i] = (const float*)x + (int64_t)(m0 + (i < mb ? i : 0)) * K;
    const bf16* w = wp + (int64_t)b0 * 32 * K2;
#if defined(FIXED_DP)
    if (dp && mb == 8) {  /* eight rows: blocks by 3, the rest by 1 */
        const bf16* x8[8];
        for (int i = 0; i < 8; i++) x8[i] = (const bf16*)x + (int64_t)(m0 + i) * stride;
        for (int s = 0; s < nb;) {
            float part[8][16 * 6];
            int step = nb - s >= 3 ? 3 : 1;
            if (step == 3) pairs8_3(x8, w + (int64_t)s * 32 * K2, part, K2);
            else pairs8_1(x8, w + (int64_t)s * 32 * K2, part, K2);
            for (int i = 0; i < 8; i++) memcpy(out[i] + 16 * s, part[i], 16 * step * sizeof(float));
            s += step;
        }
        goto store;
    }
#endif
#if defined(__AVX512F__)
    /* Rows past mb repeat row m0 (computed, never stored); a group of fewer than 6 blocks goes block by block. */
    int rows = mb > 2 ? 4 : mb;
#if defined(FIXED_DP)
    const bf16* xb[4];
    for (int i = 0; i < 4; i++) xb[i] = (const bf16*)x + (int64_t)(m0 + (i < mb ? i : 0)) * stride;
#define KERNEL(SHAPE, W, OUT) \
    if (dp) pairs_##SHAPE(xb, W, OUT, K2); else wide_##SHAPE(xr, W, OUT, K)
#else
    (void)dp, (void)stride;
#define KERNEL(SHAPE, W, OUT) wide_##SHAPE(xr, W, OUT, K)
#endif
    if (nb == 6) {
        if (rows == 4) KERNEL(4_6, w, out);
        else if (rows == 2) KERNEL(2_6, w, out);
        else KERNEL(1_6, w, out);
    } else {
        for (int s = 0; s < nb; s++) {
            float part[4][16 * 6];
            const bf16* ws = w + (int64_t)s * 32 * K2;
            if (rows == 4) KERNEL(4_1, ws, part);
            else if (rows == 2) KERNEL(2_1, ws, part);
            else KERNEL(1_1, ws, part);
            for (int i = 0; i < rows; i++) memcpy(out[i] + 16 * s, part[i], 16 * sizeof(float));
        }
    }
#undef KERNEL
#elif defined(FIXED_SPLIT)
    (void)dp, (void)stride;
    /* Rows past mb repeat row m0 (computed, never stored); blocks by 6 (one row), 3 (two) or 1, the rest by 1. */
    int rows = mb > 2 ? 4 : mb, span = rows == 1 ? 6 : rows == 2 ? 3 : 1;
    for (int s = 0; s < nb;) {
        const bf16* ws = w + (int64_t)s * 32 * K2;
        int step = nb - s >= span ? span : 1;
        if (rows == 4) pairs_4_1(xr, ws, out, K, 16 * s);
        else if (rows == 2 && step == 3) pairs_2_3(xr, ws, out, K, 16 * s);
        else if (rows == 2) pairs_2_1(xr, ws, out, K, 16 * s);
        else if (step == 6) pairs_1_6(xr, ws, out, K, 16 * s);
        else pairs_1_1(xr, ws, out, K, 16 * s);
        s += step;
    }
#else
    (void)dp, (void)stride;
    /* The sums one at a time: fmaf rounds once per step, as the vector FMA does. */
    for (int i = 0; i < mb; i++)
        for (int c = 0; c < 16 * nb; c++) {
            const bf16* wc = w + (int64_t)(c / 16) * 32 * K2 + (c % 16) * 2;
            float acc = 0.0f;
            for (int k = 0; k < K; k++) acc = fmaf(xr[i][k], load_bf16(wc[(int64_t)(k / 2) * 32 + k % 2]), acc);
            out[i][c] = acc;
        }
#endif
#if defined(FIXED_DP)
store:
#endif
    for (int i = 0; i < mb; i++)
        for (int c = 0; c < 16 * nb && 16 * b0 + c < N; c++) y[(int64_t)(m0 + i) * N + 16 * b0 + c] = store_bf16(out[i][c]);
}

int fixed_vector_available(void) {
#if defined(__AVX512F__)
    return 2;
#elif defined(FIXED_AVX2)
    return 1;
#elif defined(FIXED_NEON)
    return 3;
#else
    return 0;
#endif
}

/* y (M, N) = x W^T for M rows of x (widened float32 rows, or dp: bfloat16 rows of `stride` values), every group
   of 6 blocks on one thread. */
static void pairs_rows(const void* x, int dp, int stride, const bf16* wp, bf16* y, int M, int N, int K, int threads) {
    int nblocks = (N + 15) / 16, groups = (nblocks + 5) / 6;
    threads = threads < 1 ? 1 : threads;
    #pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1 && groups > 1)
    for (int g = 0; g < groups; g++) {
        int b0 = 6 * g, nb = nblocks - b0 < 6 ? nblocks - b0 : 6;
        for (int m0 = 0, mb; m0 < M; m0 += mb) {  /* VDPBF16PS: eight rows at a time while eight are left */
            mb = dp && M - m0 >= 8 ? 8 : M - m0 < 4 ? M - m0 : 4;
            group_pairs(x, dp, stride, wp, y, m0, mb, b0, nb, N, K);
        }
    }
}

#if !defined(FIXED_DP)
static int widened_rows(const bf16* x, const bf16* wp, bf16* y, int M, int N, int K, int threads) {
    float* wide = malloc(sizeof(float) * ((int64_t)M * K + 1));
    if (!wide) return 1;
    for (int64_t i = 0; i < (int64_t)M * K; i++) wide[i] = load_bf16(x[i]);
    pairs_rows(wide, 0, K, wp, y, M, N, K, threads);
    free(wide);
    return 0;
}
#endif

int bf16_span(const bf16* x, int64_t count) {
    int lo = 255, hi = 0;
    for (int64_t i = 0; i < count; i++) {
        int exponent = (x[i] >> 7) & 255;
        if ((x[i] & 0x7fff) == 0) continue;  /* +0 and -0 */
        lo = exponent < lo ? exponent : lo;
        hi = exponent > hi ? exponent : hi;
    }
    return lo | hi << 8;
}

#if defined(FIXED_DP)
/* Whether VDPBF16PS gives the bits of the fused multiply-adds for a row of span `x` against W of span `w`
   (`bf16_span`; -1: unknown). A bfloat16 value is an 8-bit integer times 2^(E - 134), so every product and
   every partial sum is a multiple of 2^(Ex + Ew - 268) for the least exponents Ex, Ew: with Ex + Ew >= 142
   a nonzero one is at least 2^-126, never a denormal, so the flushing never acts; Ex + Ew <= 379 for the
   largest keeps each product below 2^127; no input is a denormal (E = 0), inf or NaN (E = 255). */
static int dot_exact(int x, int w) {
    if (w < 0) return 0;
    int xlo = x & 255, xhi = x >> 8, wlo = w & 255, whi = w >> 8;
    return xlo >= 1 && wlo >= 1 && xhi <= 254 && whi <= 254 && xlo + wlo >= 142 && xhi + whi <= 379;
}

/* The rows in `which` (count of them) into y: dp, as VDPBF16PS pairs (padded to an even length); else widened. */
static int routed_rows(const bf16* x, const int* which, int count, int dp, const bf16* wp, bf16* y, int N, int K,
                       int threads) {
    int stride = dp ? 2 * ((K + 1) / 2) : K;
    bf16* pairs = dp ? calloc((size_t)count * stride + 1, sizeof(bf16)) : NULL;
    float* wide = dp ? NULL : malloc(sizeof(float) * ((size_t)count * K + 1));
    bf16* out = malloc(sizeof(bf16) * ((size_t)count * N + 1));
    if ((dp ? !pairs : !wide) || !out) { free(pairs); free(wide); free(out); return 1; }
    for (int r = 0; r < count; r++) {
        const bf16* row = x + (int64_t)which[r] * K;
        if (dp) memcpy(pairs + (int64_t)r * stride, row, sizeof(bf16) * K);
        else for (int k = 0; k < K; k++) wide[(int64_t)r * K + k] = load_bf16(row[k]);
    }
    pairs_rows(dp ? (const void*)pairs : (const void*)wide, dp, stride, wp, out, count, N, K, threads);
    for (int r = 0; r < count; r++) memcpy(y + (int64_t)which[r] * N, out + (int64_t)r * N, sizeof(bf16) * N);
    free(pairs); free(wide); free(out);
    return 0;
}
#endif

int fixed_gemm_bf16(const bf16* x, const bf16* wp, bf16* y, int M, int N, int K, int threads, int w_span) {
#if defined(FIXED_DP)
    /* Each row on VDPBF16PS where that gives its bits, else widened: a row's route depends on its own values. */
    int* order = malloc(sizeof(int) * ((size_t)M + 1));
    if (!order) return 1;
    int exact = 0, rest = M;
    for (int m = 0; m < M; m++) {
        if (dot_exact(bf16_span(x + (int64_t)m * K, K), w_span)) order[exact++] = m;
        else order[--rest] = m;
    }
    int status = 0;
    if (exact == M && K % 2 == 0) pairs_rows(x, 1, K, wp, y, M, N, K, threads);
    else {
        if (exact) status |= routed_rows(x, order, exact, 1, wp, y, N, K, threads);
        if (exact < M) status |= routed_rows(x, order + exact, M - exact, 0, wp, y, N, K, threads);
    }
    free(order);
    return status;
#else
    (void)w_span;
    return widened_rows(x, wp, y, M, N, K, threads);
#endif
}

static inline void scale_row(const float* xr, const float* weight, float* out, float total, int Dm, float eps) {
    float inv = 1.0f / sqrtf(total / (float)Dm + eps);
    for (int i = 0; i < Dm; i++) out[i] = weight[i] * (xr[i] * inv);
}

/* NORM_ROWS rows' sums of squares side by side: each its own chain of additions in order, NORM_ROWS chains in
   flight instead of one. */
#define NORM_ROWS 8
void rms_norm_f32(const float* x, const float* weight, float* out, int N, int Dm, float eps) {
    int n = 0;
    for (; n + NORM_ROWS <= N; n += NORM_ROWS) {
        const float* xr = x + (int64_t)n * Dm;
        float total[NORM_ROWS] = {0.0f};
        for (int i = 0; i < Dm; i++)
            for (int r = 0; r < NORM_ROWS; r++) total[r] += xr[(int64_t)r * Dm + i] * xr[(int64_t)r * Dm + i];
        for (int r = 0; r < NORM_ROWS; r++) scale_row(xr + (int64_t)r * Dm, weight, out + (int64_t)(n + r) * Dm, total[r], Dm, eps);
    }
    for (; n < N; n++) {
        const float* xr = x + (int64_t)n * Dm;
        float total = 0.0f;
        for (int i = 0; i < Dm; i++) total += xr[i] * xr[i];
        scale_row(xr, weight, out + (int64_t)n * Dm, total, Dm, eps);
    }
}


/* Element by element: the threads split the rows (at least SILU_ROWS_PER_THREAD each), never an element's work. */
#define SILU_ROWS_PER_THREAD 4
static int silu_threads(int threads, int N) {
    int most = N / SILU_ROWS_PER_THREAD;
    return threads < most ? threads : most > 1 ? most : 1;
}

/* out[i] = silu_fixed(row[i]) * row[I + i]: 16 or 8 lanes at a time with x86.h's SiLU steps (silu_fixed's bits). */
static inline void silu_mul_row_f32(const float* row, float* out, int I) {
    int i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= I; i += 16) {
        __m512 g = _mm512_loadu_ps(row + i);
        __m512 silu = _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), g))));
        _mm512_storeu_ps(out + i, _mm512_mul_ps(silu, _mm512_loadu_ps(row + I + i)));
    }
#elif defined(__AVX2__) && defined(__FMA__)
    for (; i + 8 <= I; i += 8)
        _mm256_storeu_ps(out + i, _mm256_mul_ps(silu8_ps(_mm256_loadu_ps(row + i)), _mm256_loadu_ps(row + I + i)));
#endif
    for (; i < I; i++) out[i] = silu_fixed(row[i]) * row[I + i];
}

void silu_mul_f32(const float* gate_up, float* act, int N, int I, int threads) {
    threads = silu_threads(threads, N);
    #pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (int n = 0; n < N; n++) silu_mul_row_f32(gate_up + (int64_t)n * 2 * I, act + (int64_t)n * I, I);
}

void silu_mul_rows_bf16(const bf16* gate_up, bf16* act, int N, int I, int threads) {
    threads = silu_threads(threads, N);
    #pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (int n = 0; n < N; n++)
        for (int i = 0; i < I; i++) {
            const bf16* row = gate_up + (int64_t)n * 2 * I;
            act[(int64_t)n * I + i] = store_bf16(round_bf16(silu_fixed(load_bf16(row[i]))) * load_bf16(row[I + i]));
        }
}
