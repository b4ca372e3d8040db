/* Decode attention: RoPE on the new tokens, their keys/values into the cache, and attention over ragged
   rows: the fixed kernel for any head size (bfloat16 and float32), whose arithmetic is written out below and
   gives the same bits on every build (ROUTE_FIXED, batch-invariant runners), and an AVX512-BF16 kernel (q.k
   optionally with AMX tiles) for bfloat16 with head size 64 on the other routes.

   Why: for decode-sized queries (a few tokens per row), PyTorch's CPU attention spends most of its time in
   per-(row, head) matrix-call overhead. One plain loop over rows and kv heads, reading each key/value
   once, is several times faster. Attention runs in float32 (as PyTorch's CPU kernel does for bfloat16)
   and is rounded once at the end. Work is split over torch's threads with OpenMP (built with -fopenmp the
   library asks for libgomp.so.1 and gets the copy torch already loaded: one thread pool). Compiled without
   fast-math and without FMA contraction: every fused step is an explicit one.

   The head-64 kernel: q.k is two vdpbf16ps per key (q is bfloat16-exact after RoPE's rounding, so the
   products are exact in float32; the sum order is the instruction's), and p.v keeps four query rows'
   accumulators in registers while each value row is read once. */
#include "x86.h"
#include "canon.h"

#include <math.h>
#include <stdlib.h>

#ifdef _OPENMP
#include <omp.h>
#define SET_WORKER(w) ((w) = omp_get_thread_num())
#else
#define SET_WORKER(w) ((void)(w))
#endif

/* The fixed attention's arithmetic, the same bits on every build (scalar, AVX2 + FMA, AVX-512, NEON):
   - q.k: 16 lanes, lane l summing q[d] k[d] over d = l (mod 16) by fused multiply-adds in increasing d from
     zero, then canon.h's fixed tree; times the scale (one product).
   - softmax over the keys a query sees: the largest score (max_fixed), e_t = exp_fixed(s_t - top),
     their total in 16 lanes (t mod 16) added in key order then the same tree, and p_t = e_t * (1 / total).
   - p.v: each output element one fused multiply-add per key, in key order from zero. */
#if defined(__AVX2__)
/* The tree's last three levels on the 8 sums s_j = L_j + L_{8+j}: s_j + s_{4+j}, then u_j + u_{2+j}, then v_0 + v_1. */
static inline float reduce8_fixed(__m256 s) {
    __m128 u = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    __m128 v = _mm_add_ps(u, _mm_movehl_ps(u, u));
    return _mm_cvtss_f32(_mm_add_ss(v, _mm_shuffle_ps(v, v, 1)));
}
#endif
#if defined(__AVX512F__)
static inline float dot_fixed(const float* q, const float* k, int D) {
    if (D % 16) goto scalar;
    __m512 acc = _mm512_setzero_ps();
    for (int d = 0; d < D; d += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + d), _mm512_loadu_ps(k + d), acc);
    return reduce8_fixed(_mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1)));
scalar:;
#elif defined(__AVX2__) && defined(__FMA__)
static inline float dot_fixed(const float* q, const float* k, int D) {
    if (D % 16) goto scalar;
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    for (int d = 0; d < D; d += 16) {
        lo = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_loadu_ps(k + d), lo);
        hi = _mm256_fmadd_ps(_mm256_loadu_ps(q + d + 8), _mm256_loadu_ps(k + d + 8), hi);
    }
    return reduce8_fixed(_mm256_add_ps(lo, hi));
scalar:;
#elif defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
static inline float dot_fixed(const float* q, const float* k, int D) {
    if (D % 16) goto scalar;
    float32x4_t a[4] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
    for (int d = 0; d < D; d += 16)
        for (int j = 0; j < 4; j++) a[j] = vfmaq_f32(a[j], vld1q_f32(q + d + 4 * j), vld1q_f32(k + d + 4 * j));
    float32x4_t u = vaddq_f32(vaddq_f32(a[0], a[2]), vaddq_f32(a[1], a[3]));  /* s_j + s_{4+j}, s = L_j + L_{8+j} */
    float32x2_t v = vadd_f32(vget_low_f32(u), vget_high_f32(u));
    return vget_lane_f32(v, 0) + vget_lane_f32(v, 1);
scalar:;
#else
static inline float dot_fixed(const float* q, const float* k, int D) {
#endif
    float lanes[16] = {0};
    for (int d = 0; d < D; d++) lanes[d % 16] = fmaf(q[d], k[d], lanes[d % 16]);
    return reduce16_fixed(lanes);
}

/* The largest of sc[0 .. n) (n >= 1), as the scalar scan in key order finds it. Where no score is NaN a vector
   maximum is the same value up to the sign of a zero maximum, which softmax_fixed cannot see (s - top is the same
   for top = +0 and -0 but where s is a zero, and exp_fixed(+0) = exp_fixed(-0) = 1); with a NaN, the scan. */
static float max_fixed(const float* sc, int n) {
    int t = 0;
#if defined(__AVX512F__)
    if (n >= 16) {
        __m512 top = _mm512_loadu_ps(sc);
        __mmask16 nan = _mm512_cmp_ps_mask(top, top, _CMP_UNORD_Q);
        for (t = 16; t + 16 <= n; t += 16) {
            __m512 v = _mm512_loadu_ps(sc + t);
            nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
            top = _mm512_max_ps(top, v);
        }
        float most = _mm512_reduce_max_ps(top);
        for (; t < n; t++) {
            nan |= sc[t] != sc[t];
            most = sc[t] > most ? sc[t] : most;
        }
        if (!nan) return most;
    }
#elif defined(__AVX2__)
    if (n >= 8) {
        __m256 top = _mm256_loadu_ps(sc), nan = _mm256_cmp_ps(top, top, _CMP_UNORD_Q);
        for (t = 8; t + 8 <= n; t += 8) {
            __m256 v = _mm256_loadu_ps(sc + t);
            nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
            top = _mm256_max_ps(top, v);
        }
        float lanes[8], most;
        _mm256_storeu_ps(lanes, top);
        most = lanes[0];
        for (int i = 1; i < 8; i++) most = lanes[i] > most ? lanes[i] : most;
        int any_nan = _mm256_movemask_ps(nan) != 0;
        for (; t < n; t++) {
            any_nan |= sc[t] != sc[t];
            most = sc[t] > most ? sc[t] : most;
        }
        if (!any_nan) return most;
    }
#endif
    float top = sc[0];
    for (t = 1; t < n; t++) top = sc[t] > top ? sc[t] : top;
    return top;
}

/* sc[0 .. n) (n >= 1) -> their softmax, in place. */
static void softmax_fixed(float* sc, int n) {
    float top = max_fixed(sc, n), lanes[16] = {0};
    int t = 0;
#if defined(__AVX512F__)
    for (; t + 16 <= n; t += 16) {
        __m512 e = exp_ps(_mm512_sub_ps(_mm512_loadu_ps(sc + t), _mm512_set1_ps(top)));
        _mm512_storeu_ps(sc + t, e);
        _mm512_storeu_ps(lanes, _mm512_add_ps(_mm512_loadu_ps(lanes), e));
    }
#elif defined(__AVX2__) && defined(__FMA__)
    for (; t + 16 <= n; t += 16)
        for (int h = 0; h < 16; h += 8) {
            __m256 e = exp8_ps(_mm256_sub_ps(_mm256_loadu_ps(sc + t + h), _mm256_set1_ps(top)));
            _mm256_storeu_ps(sc + t + h, e);
            _mm256_storeu_ps(lanes + h, _mm256_add_ps(_mm256_loadu_ps(lanes + h), e));
        }
#endif
    for (; t < n; t++) {
        sc[t] = exp_fixed(sc[t] - top);
        lanes[t % 16] += sc[t];
    }
    float inverse = 1.0f / reduce16_fixed(lanes);
    for (t = 0; t < n; t++) sc[t] *= inverse;
}

/* acc[0 .. D) += p row[0 .. D), one fused multiply-add per element. */
static inline void axpy_fixed(float* acc, float p, const float* row, int D) {
    int d = 0;
#if defined(__AVX512F__)
    for (; d + 16 <= D; d += 16)
        _mm512_storeu_ps(acc + d, _mm512_fmadd_ps(_mm512_set1_ps(p), _mm512_loadu_ps(row + d), _mm512_loadu_ps(acc + d)));
#elif defined(__AVX2__) && defined(__FMA__)
    for (; d + 8 <= D; d += 8)
        _mm256_storeu_ps(acc + d, _mm256_fmadd_ps(_mm256_set1_ps(p), _mm256_loadu_ps(row + d), _mm256_loadu_ps(acc + d)));
#elif defined(__aarch64__) && defined(__ARM_NEON)
    for (; d + 4 <= D; d += 4) vst1q_f32(acc + d, vfmaq_f32(vld1q_f32(acc + d), vdupq_n_f32(p), vld1q_f32(row + d)));
#endif
    for (; d < D; d++) acc[d] = fmaf(p, row[d], acc[d]);
}

/* Every cache line of the `bytes` bytes at p, fetched towards the level HINT names. */
#define PREFETCH_BYTES(p, bytes, HINT) \
    for (int line_ = 0; line_ < (bytes); line_ += 64) _mm_prefetch((const char*)(p) + line_, HINT)

#define KEYS_AHEAD 32    /* keys: 32 ahead of the block being computed */
#define VALUES_AHEAD 16  /* value rows ahead */

#if defined(__AVX512F__)
/* The 16 sums of 16 vectors, lane i the sum of a[i] by canon.h's tree: each level adds the same lane pairs as
   reduce16_fixed (L_j + L_{8+j}, then s_j + s_{4+j}, u_j + u_{2+j}, v_0 + v_1), for 16 vectors at once. */
static inline __m512 reduce16x16(const __m512* a) {
    __m512 l1[8], l2[4], l3[2];
    for (int i = 0; i < 8; i++)
        l1[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x44), _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xEE));
    for (int i = 0; i < 4; i++)
        l2[i] = _mm512_add_ps(_mm512_shuffle_f32x4(l1[2 * i], l1[2 * i + 1], 0x88), _mm512_shuffle_f32x4(l1[2 * i], l1[2 * i + 1], 0xDD));
    for (int i = 0; i < 2; i++)
        l3[i] = _mm512_add_ps(_mm512_shuffle_ps(l2[2 * i], l2[2 * i + 1], 0x44), _mm512_shuffle_ps(l2[2 * i], l2[2 * i + 1], 0xEE));
    __m512 last = _mm512_add_ps(_mm512_shuffle_ps(l3[0], l3[1], 0x88), _mm512_shuffle_ps(l3[0], l3[1], 0xDD));
    /* lane 4k + j holds vector k + 4j */
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), last);
}

/* scores[m][t] = dot_fixed(q_m, k_t) * scale for the M queries (q: M x D floats) and keys 0 .. keys - 1 (kb: the
   cache's rows; bfloat16 ones widened once per block for every query), 16 keys at a time, the values of keys
   ahead (vb) fetched towards L2 as they go (two streams from memory at once, faster than one); query m's keys
   past first + m / G are computed or not, never read. pv16: acc_i (D floats) = the sum over keys t < seen_i of p_i[t] v_t, one fused multiply-add per key
   in key order, for QB consecutive queries from m0, each value row read once for the QB queries; as the first block
   reads them, the keys of the pair the thread likely takes next (kn) are fetched towards L2, so memory streams
   while the sums run in both phases. D a multiple of 16, at most 256. */
#define PAIR16_KERNELS(T, SUFFIX, LOAD16)                                                            \
static inline __attribute__((always_inline)) void scores16_##SUFFIX(const float* q, int M, const T* kb, const T* vb, int keys, \
        int64_t first, int G, const int D, float scale, float* scores) {                            \
    for (int t0 = 0; t0 < keys; t0 += 16) {                                                         \
        int count = keys - t0 < 16 ? keys - t0 : 16;                                                \
        if (t0 + KEYS_AHEAD < keys) /* a later block towards L1 while this one computes, and its values */ \
            for (int l = 0; l < 16 * D * (int)sizeof(T); l += 64) {  /* towards L2: two streams at once */ \
                _mm_prefetch((const char*)(kb + (int64_t)(t0 + KEYS_AHEAD) * D) + l, _MM_HINT_T0);  \
                _mm_prefetch((const char*)(vb + (int64_t)(t0 + KEYS_AHEAD) * D) + l, _MM_HINT_T1);  \
            }                                                                                        \
        __mmask16 live = count == 16 ? (__mmask16)0xffff : (__mmask16)((1u << count) - 1);          \
        float wide[sizeof(T) == sizeof(float) ? 1 : 16 * 256] __attribute__((aligned(64)));          \
        const float* kf = (const float*)(const void*)(kb + (int64_t)t0 * D); /* float32: the rows */ \
        if (sizeof(T) != sizeof(float)) { /* narrower rows widened once (exactly) for every query */ \
            for (int i = 0; i < count * D; i += 16) _mm512_store_ps(wide + i, LOAD16(kb + (int64_t)t0 * D + i)); \
            kf = wide;                                                                               \
        }                                                                                            \
        for (int m = t0 > first ? (int)(t0 - first) * G : 0; m < M; m++) {                          \
            __m512 acc[16];                                                                          \
            for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_ps();                               \
            for (int c = 0; c < D; c += 16) {                                                        \
                __m512 qc = _mm512_loadu_ps(q + m * D + c);                                          \
                if (count == 16) /* a constant bound: no test per key */                             \
                    for (int i = 0; i < 16; i++)                                                     \
                        acc[i] = _mm512_fmadd_ps(qc, _mm512_loadu_ps(kf + i * D + c), acc[i]);       \
                else                                                                                 \
                    for (int i = 0; i < count; i++)                                                  \
                        acc[i] = _mm512_fmadd_ps(qc, _mm512_loadu_ps(kf + i * D + c), acc[i]);       \
            }                                                                                        \
            __m512 dots = _mm512_mul_ps(reduce16x16(acc), _mm512_set1_ps(scale));                    \
            _mm512_mask_storeu_ps(scores + (int64_t)m * keys + t0, live, dots);                      \
        }                                                                                            \
    }                                                                                                \
}                                                                                                    \
static inline __attribute__((always_inline)) void pv16_##SUFFIX(const float* scores, int keys, const T* vb, int m0, \
        int QB, int64_t first, int G, const int D, const T* kn, int kn_keys, float* out) {           \
    __m512 acc[4][16];                                                                               \
    int seen[4], least = keys, most = 0;                                                             \
    /* bfloat16 rows 32 values at a time: each half of a 64-byte load widened by one unpack with zeros, */ \
    /* the lanes in the unpack's order (undone at the store); each output's sum is the same either way */ \
    const int pairs = sizeof(T) == 2 && D % 32 == 0;                                                 \
    for (int i = 0; i < QB; i++) {                                                                   \
        seen[i] = (int)(first + (m0 + i) / G + 1);                                                   \
        most = seen[i] > most ? seen[i] : most;                                                      \
        least = seen[i] < least ? seen[i] : least;                                                   \
        for (int c = 0; c < D / 16; c++) acc[i][c] = _mm512_setzero_ps();                            \
    }                                                                                                \
    for (int t = 0; t < most; t++) {                                                                 \
        if (m0 == 0 && t + VALUES_AHEAD < most) /* a later value row, on the first pass over them */ \
            PREFETCH_BYTES(vb + (int64_t)(t + VALUES_AHEAD) * D, D * (int)sizeof(T), _MM_HINT_T0);     \
        if (m0 == 0 && t < kn_keys) /* the next pair's key row t towards L2: memory busy while this sums */ \
            PREFETCH_BYTES(kn + (int64_t)t * D, D * (int)sizeof(T), _MM_HINT_T1);                      \
        const int all = t < least; /* every query of the block sees key t */                         \
        for (int c = 0; c < D / 16; c += 1 + pairs) {                                                \
            __m512 v, w = _mm512_setzero_ps();                                                       \
            if (pairs) {                                                                             \
                __m512i x = _mm512_loadu_si512((const void*)(vb + (int64_t)t * D + 16 * c));         \
                v = _mm512_castsi512_ps(_mm512_unpacklo_epi16(_mm512_setzero_si512(), x));           \
                w = _mm512_castsi512_ps(_mm512_unpackhi_epi16(_mm512_setzero_si512(), x));           \
            } else {                                                                                 \
                v = LOAD16(vb + (int64_t)t * D + 16 * c);                                            \
            }                                                                                        \
            for (int i = 0; i < QB; i++)                                                             \
                if (all || t < seen[i]) {                                                            \
                    __m512 p = _mm512_set1_ps(scores[(int64_t)(m0 + i) * keys + t]);                 \
                    acc[i][c] = _mm512_fmadd_ps(p, v, acc[i][c]);                                    \
                    if (pairs) acc[i][c + 1] = _mm512_fmadd_ps(p, w, acc[i][c + 1]);                 \
                }                                                                                    \
        }                                                                                            \
    }                                                                                                \
    if (m0 == 0 && kn_keys > most) /* the next pair's remaining key rows */                           \
        PREFETCH_BYTES(kn + (int64_t)most * D, (kn_keys - most) * D * (int)sizeof(T), _MM_HINT_T1);     \
    const __m512i first16 = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23); \
    const __m512i second16 = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31); \
    for (int i = 0; i < QB; i++)                                                                     \
        for (int c = 0; c < D / 16; c += 1 + pairs) {                                                \
            float* o = out + (int64_t)(m0 + i) * D + 16 * c;                                         \
            if (pairs) {                                                                             \
                _mm512_storeu_ps(o, _mm512_permutex2var_ps(acc[i][c], first16, acc[i][c + 1]));      \
                _mm512_storeu_ps(o + 16, _mm512_permutex2var_ps(acc[i][c], second16, acc[i][c + 1])); \
            } else {                                                                                 \
                _mm512_storeu_ps(o, acc[i][c]);                                                      \
            }                                                                                        \
        }                                                                                            \
}                                                                                                    \
/* One (row, kv head) pair's attention on AVX-512: the fixed kernel's bits (tested against its written order). */ \
static void attend_pair_##SUFFIX(const float* q, int M, const T* kb, const T* vb, int keys, int64_t first, int G, \
                                   int D, float scale, const T* kn, int kn_keys, float* scores, float* acc) { \
    if (D == 64) scores16_##SUFFIX(q, M, kb, vb, keys, first, G, 64, scale, scores);                    \
    else if (D == 128) scores16_##SUFFIX(q, M, kb, vb, keys, first, G, 128, scale, scores);             \
    else scores16_##SUFFIX(q, M, kb, vb, keys, first, G, D, scale, scores);                             \
    for (int m = 0; m < M; m++) softmax_fixed(scores + (int64_t)m * keys, (int)first + m / G + 1);  \
    int block = D <= 64 ? 4 : D <= 128 ? 2 : 1;                                                      \
    for (int m0 = 0; m0 < M; m0 += block) {                                                          \
        int QB = M - m0 < block ? M - m0 : block;                                                    \
        if (D == 64 && QB == 4) pv16_##SUFFIX(scores, keys, vb, m0, 4, first, G, 64, kn, kn_keys, acc); \
        else if (D == 64 && QB == 3) pv16_##SUFFIX(scores, keys, vb, m0, 3, first, G, 64, kn, kn_keys, acc); \
        else if (D == 64) pv16_##SUFFIX(scores, keys, vb, m0, QB, first, G, 64, kn, kn_keys, acc);  \
        else if (D == 128) pv16_##SUFFIX(scores, keys, vb, m0, QB, first, G, 128, kn, kn_keys, acc); \
        else pv16_##SUFFIX(scores, keys, vb, m0, QB, first, G, D, kn, kn_keys, acc);                \
    }                                                                                                \
}
PAIR16_KERNELS(bf16, bf16, bf16x16_to_f32)
PAIR16_KERNELS(float, f32, _mm512_loadu_ps)
#define HAVE_PAIR_KERNEL 1
#elif defined(__AVX2__) && defined(__FMA__)
/* The 4 sums of 4 keys, key i's 16 lanes as lo[i] (lanes 0-7) and hi[i] (8-15), each by reduce8_fixed's steps
   on s = lo + hi (s_j + s_{4+j}, then u_j + u_{2+j}, then v_0 + v_1), for 4 keys at once. */
static inline void reduce4x16(const __m256* lo, const __m256* hi, float* sums) {
    __m256 s0 = _mm256_add_ps(lo[0], hi[0]), s1 = _mm256_add_ps(lo[1], hi[1]);
    __m256 s2 = _mm256_add_ps(lo[2], hi[2]), s3 = _mm256_add_ps(lo[3], hi[3]);
    /* low half key 0 (2), high half key 1 (3): u_j = s_j + s_{4+j} */
    __m256 u01 = _mm256_add_ps(_mm256_permute2f128_ps(s0, s1, 0x20), _mm256_permute2f128_ps(s0, s1, 0x31));
    __m256 u23 = _mm256_add_ps(_mm256_permute2f128_ps(s2, s3, 0x20), _mm256_permute2f128_ps(s2, s3, 0x31));
    /* v_j = u_j + u_{2+j}: each half [v_0, v_1] of key 0 (1), then of key 2 (3) */
    __m256 v = _mm256_add_ps(_mm256_shuffle_ps(u01, u23, _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm256_shuffle_ps(u01, u23, _MM_SHUFFLE(3, 2, 3, 2)));
    __m256 r = _mm256_add_ps(_mm256_shuffle_ps(v, v, _MM_SHUFFLE(2, 0, 2, 0)), _mm256_shuffle_ps(v, v, _MM_SHUFFLE(3, 1, 3, 1)));
    float lanes[8];
    _mm256_storeu_ps(lanes, r);  /* [r0, r2, r0, r2, r1, r3, r1, r3] */
    sums[0] = lanes[0], sums[1] = lanes[4], sums[2] = lanes[1], sums[3] = lanes[5];
}

/* The AVX-512 pair kernel's work on 256-bit registers: scores4 takes 4 keys at a time (each key's 16 lanes in two
   registers), pv8 one query at a time with up to 8 accumulators of 8 outputs, each value row read from L1 per
   query. D a multiple of 16. */
#define PAIR8_KERNELS(T, SUFFIX, LOAD8)                                                              \
static inline __attribute__((always_inline)) void scores4_##SUFFIX(const float* q, int M, const T* kb, const T* vb, int keys, \
        int64_t first, int G, const int D, float scale, float* scores) {                            \
    for (int t0 = 0; t0 < keys; t0 += 4) {                                                          \
        int count = keys - t0 < 4 ? keys - t0 : 4;                                                  \
        if (t0 + KEYS_AHEAD < keys) /* keys towards L1, their values towards L2 (scores16) */        \
            for (int l = 0; l < 4 * D * (int)sizeof(T); l += 64) {                                  \
                _mm_prefetch((const char*)(kb + (int64_t)(t0 + KEYS_AHEAD) * D) + l, _MM_HINT_T0);  \
                _mm_prefetch((const char*)(vb + (int64_t)(t0 + KEYS_AHEAD) * D) + l, _MM_HINT_T1);  \
            }                                                                                        \
        float wide[sizeof(T) == sizeof(float) ? 1 : 4 * 256] __attribute__((aligned(32)));           \
        const float* k[4];                                                                           \
        for (int i = 0; i < 4; i++) { /* past the last: key t0 again; narrower rows widened once */  \
            const T* row = kb + (int64_t)(t0 + (i < count ? i : 0)) * D;                             \
            k[i] = (const float*)(const void*)row;                                                   \
            if (sizeof(T) != sizeof(float)) {                                                        \
                for (int c = 0; c < D; c += 8) _mm256_store_ps(wide + i * D + c, LOAD8(row + c));   \
                k[i] = wide + i * D;                                                                 \
            }                                                                                        \
        }                                                                                            \
        for (int m = t0 > first ? (int)(t0 - first) * G : 0; m < M; m++) {                          \
            __m256 lo[4], hi[4];                                                                     \
            for (int i = 0; i < 4; i++) lo[i] = hi[i] = _mm256_setzero_ps();                          \
            for (int c = 0; c < D; c += 16) {                                                        \
                __m256 ql = _mm256_loadu_ps(q + m * D + c), qh = _mm256_loadu_ps(q + m * D + c + 8);  \
                for (int i = 0; i < 4; i++) {                                                        \
                    lo[i] = _mm256_fmadd_ps(ql, _mm256_loadu_ps(k[i] + c), lo[i]);                    \
                    hi[i] = _mm256_fmadd_ps(qh, _mm256_loadu_ps(k[i] + c + 8), hi[i]);                \
                }                                                                                    \
            }                                                                                        \
            float dots[4];                                                                           \
            reduce4x16(lo, hi, dots);                                                                \
            for (int i = 0; i < count; i++) scores[(int64_t)m * keys + t0 + i] = dots[i] * scale;    \
        }                                                                                            \
    }                                                                                                \
}                                                                                                    \
static inline __attribute__((always_inline)) void pv8_##SUFFIX(const float* p, int seen, const T* vb, const int D, \
        const T* kn, int kn_keys, float* out) {                                                      \
    for (int d0 = 0; d0 < D; d0 += 64) {                                                             \
        int chunks = (D - d0) / 8 < 8 ? (D - d0) / 8 : 8;                                            \
        __m256 acc[8];                                                                               \
        for (int c = 0; c < 8; c++) acc[c] = _mm256_setzero_ps();                                    \
        for (int t = 0; t < seen; t++) {                                                             \
            __m256 pt = _mm256_set1_ps(p[t]);                                                        \
            const T* v = vb + (int64_t)t * D + d0;                                                   \
            if (d0 == 0 && t < kn_keys) /* the next pair's key row t towards L2 (pv16) */            \
                PREFETCH_BYTES(kn + (int64_t)t * D, D * (int)sizeof(T), _MM_HINT_T1);                  \
            if (chunks == 8) /* a constant bound: the accumulators stay in registers */              \
                for (int c = 0; c < 8; c++) acc[c] = _mm256_fmadd_ps(pt, LOAD8(v + 8 * c), acc[c]);  \
            else                                                                                     \
                for (int c = 0; c < chunks; c++) acc[c] = _mm256_fmadd_ps(pt, LOAD8(v + 8 * c), acc[c]); \
        }                                                                                            \
        for (int c = 0; c < chunks; c++) _mm256_storeu_ps(out + d0 + 8 * c, acc[c]);                 \
    }                                                                                                \
}                                                                                                    \
/* One (row, kv head) pair's attention on AVX2: the fixed kernel's bits (tested against its written order). */ \
static void attend_pair_##SUFFIX(const float* q, int M, const T* kb, const T* vb, int keys, int64_t first, int G, \
                                   int D, float scale, const T* kn, int kn_keys, float* scores, float* acc) { \
    if (D == 64) scores4_##SUFFIX(q, M, kb, vb, keys, first, G, 64, scale, scores);                     \
    else scores4_##SUFFIX(q, M, kb, vb, keys, first, G, D, scale, scores);                              \
    for (int m = 0; m < M; m++) {                                                                    \
        int seen = (int)first + m / G + 1;                                                           \
        softmax_fixed(scores + (int64_t)m * keys, seen);                                             \
        int ahead = m == 0 ? kn_keys : 0; /* the first query's pass fetches the next pair's keys */ \
        if (D == 64) pv8_##SUFFIX(scores + (int64_t)m * keys, seen, vb, 64, kn, ahead, acc + (int64_t)m * D); \
        else pv8_##SUFFIX(scores + (int64_t)m * keys, seen, vb, D, kn, ahead, acc + (int64_t)m * D); \
    }                                                                                                \
}
PAIR8_KERNELS(bf16, bf16, bf16x8_to_f32)
PAIR8_KERNELS(float, f32, _mm256_loadu_ps)
#define HAVE_PAIR_KERNEL 1
#else
#define HAVE_PAIR_KERNEL 0
#define PAIR_STUB(T, SUFFIX)                                                                       \
static void attend_pair_##SUFFIX(const float* q, int M, const T* kb, const T* vb, int keys, int64_t first, int G, \
                                   int D, float scale, const T* kn, int kn_keys, float* scores, float* acc) { \
    (void)q, (void)M, (void)kb, (void)vb, (void)keys, (void)first, (void)G, (void)D, (void)scale, (void)kn, (void)kn_keys; \
    (void)scores, (void)acc;                                                                       \
}
PAIR_STUB(bf16, bf16)
PAIR_STUB(float, f32)
#endif
/* Whether a head size runs on the build's pair kernel (AVX-512 or AVX2); else the loops of the written order. */
#define PAIR_KERNEL(D) (HAVE_PAIR_KERNEL && (D) % 16 == 0 && (D) <= 256)

/* Tokens per unit of work: a row's feed is cut into spans of this many tokens where its (row, kv head) pairs alone
   are too few to keep every thread busy (a prompt's prefill at batch 1), else taken whole (a decode step reads each
   pair's keys and values once). Each query's arithmetic is its own, so the spans change no bit. */
#define SPAN_TOKENS 16  /* the shortest span: below it each span's pass over the keys costs more than it spreads */
static int feed_span(const int64_t* offsets, int B, int Hkv, int threads) {
    int64_t most = 0, pairs = 0;
    for (int b = 0; b < B; b++) {
        int64_t n = offsets[b + 1] - offsets[b];
        most = n > most ? n : most;
        pairs += n > 0 ? Hkv : 0;
    }
    if (threads < 2 || pairs >= 4 * threads || most < 2 * SPAN_TOKENS) return most > 0 ? (int)most : 1;
    int64_t cuts = (4 * threads + pairs - 1) / (pairs > 0 ? pairs : 1), span = (most + cuts - 1) / cuts;
    return (int)(span < SPAN_TOKENS ? SPAN_TOKENS : span);
}

/* NAME: activations (qkv, the RoPE tables, out) of type T, caches of type C; a new key (RoPE's float output) and
   value are stored as C. Packed ragged rows: row b's new tokens are qkv[offsets[b] .. offsets[b+1]) with layout
   (N, H + 2 Hkv, D);
   its token s sits at position start[b] + s and sees keys 0 .. start[b] + s. Caches (B, Hkv, T, D);
   cos, sin_signed (positions, D); out (N, H D). A query's softmax and weighted sum run over its own keys
   only, in loops whose bounds depend on its position alone: its bits are the same in a decode step, a
   verification pass or a prefill, whatever other queries the call holds. Threads split the (row, kv head)
   pairs, each pair's queries whole or, where the pairs are too few for the threads, in spans of its feed
   (`feed_span`); each unit is computed by one thread with buffers of its own: the bits do not depend on the
   threads. */
#define ATTEND(T, SUFFIX, C, CSUFFIX, NAME)                                                         \
static int NAME(const T* qkv, C* kc, C* vc, const T* cos, const T* sin_signed, const int64_t* start, \
                const int64_t* offsets, T* out, int B, int H, int Hkv, int D, int Tmax, float scale, \
                int threads) {                                                                      \
    int G = H / Hkv, width = H + 2 * Hkv, most = 0, longest = 0;                                    \
    for (int b = 0; b < B; b++) {                                                                   \
        int n = (int)(offsets[b + 1] - offsets[b]);                                                 \
        if (n > most) most = n;                                                                     \
        if (n && start[b] + n > longest) longest = (int)(start[b] + n);                             \
    }                                                                                               \
    if (threads < 1) threads = 1;                                                                   \
    int span = feed_span(offsets, B, Hkv, threads);                                                 \
    int* row_first = malloc(sizeof(int) * (size_t)(B + 1));  /* row b's units: row_first[b] .. row_first[b + 1] */ \
    if (!row_first) return 1;                                                                       \
    row_first[0] = 0;  /* Hkv pairs times the feed's spans, pair-major */                           \
    for (int b = 0; b < B; b++) row_first[b + 1] = row_first[b] + Hkv * (int)((offsets[b + 1] - offsets[b] + span - 1) / span); \
    int units = row_first[B];                                                                       \
    if (threads > units) threads = units > 0 ? units : 1;                                           \
    int* unit_row = malloc(sizeof(int) * (size_t)(units + 1));                                      \
    int widest = most < span ? most : span;  /* the most tokens a unit holds */                     \
    size_t q_size = (size_t)(widest * G + 1) * D, scores_size = (size_t)widest * G * longest + 1;   \
    float* q_all = malloc(sizeof(float) * q_size * threads);                                        \
    float* scores_all = malloc(sizeof(float) * scores_size * threads);                              \
    float* acc_all = malloc(sizeof(float) * q_size * threads);                                      \
    float* row_all = malloc(sizeof(float) * (size_t)D * threads);                                   \
    if (!unit_row || !q_all || !scores_all || !acc_all || !row_all) {                               \
        free(row_first); free(unit_row); free(q_all); free(scores_all); free(acc_all); free(row_all); return 1; \
    }                                                                                               \
    for (int b = 0; b < B; b++)                                                                     \
        for (int u = row_first[b]; u < row_first[b + 1]; u++) unit_row[u] = b;                      \
    for (int b = 0; b < B; b++) {  /* the new tokens' keys (RoPE) and values into the caches */     \
        for (int s = 0; s < (int)(offsets[b + 1] - offsets[b]); s++) {                              \
            int64_t pos = start[b] + s;                                                             \
            const T* tok = qkv + (offsets[b] + s) * width * D;                                      \
            for (int j = 0; j < Hkv; j++) {                                                         \
                int64_t at = (((int64_t)b * Hkv + j) * Tmax + pos) * D;                             \
                rope_##SUFFIX(tok + (H + j) * D, cos + pos * D, sin_signed + pos * D, D, row_all, 0); \
                for (int d = 0; d < D; d++) kc[at + d] = store_##CSUFFIX(row_all[d]);               \
                if (sizeof(C) == sizeof(T)) memcpy(vc + at, tok + (H + Hkv + j) * D, sizeof(T) * D); \
                else for (int d = 0; d < D; d++)                                                    \
                    vc[at + d] = store_##CSUFFIX(load_##SUFFIX(tok[(H + Hkv + j) * D + d]));        \
            }                                                                                       \
        }                                                                                           \
    }                                                                                               \
    _Pragma("omp parallel for schedule(dynamic, 1) num_threads(threads) if (threads > 1)")          \
    for (int unit = 0; unit < units; unit++) {                                                      \
        int b = unit_row[unit], worker = 0, first_unit = row_first[b], fed = (int)(offsets[b + 1] - offsets[b]); \
        int spans = (row_first[b + 1] - first_unit) / Hkv, j = (unit - first_unit) / spans;         \
        int s0 = (unit - first_unit) % spans * span;                                                \
        int S = fed - s0 < span ? fed - s0 : span, M = S * G;                                       \
        int64_t first = start[b] + s0;  /* the span's first position: its query m sees keys 0 .. first + m / G */ \
        int keys = (int)first + S;                                                                  \
        SET_WORKER(worker);                                                                         \
        float* q = q_all + q_size * worker;                                                         \
        float* scores = scores_all + scores_size * worker;                                          \
        float* acc = acc_all + q_size * worker;                                                     \
        float* row = row_all + (size_t)D * worker;                                                  \
        for (int s = 0; s < S; s++) {                                                               \
            int64_t pos = first + s;                                                                \
            const T* tok = qkv + (offsets[b] + s0 + s) * width * D;                                 \
            for (int g = 0; g < G; g++)                                                             \
                rope_##SUFFIX(tok + (j * G + g) * D, cos + pos * D, sin_signed + pos * D, D,        \
                              q + (s * G + g) * D, 0);                                              \
        }                                                                                           \
        const C* kb = kc + ((int64_t)b * Hkv + j) * Tmax * D;                                       \
        const C* vb = vc + ((int64_t)b * Hkv + j) * Tmax * D;                                       \
        if (PAIR_KERNEL(D)) {                                                                       \
            int next = unit + 1, bn = next < units ? unit_row[next] : 0;  /* the unit this thread likely takes next */ \
            int next_fed = (int)(offsets[bn + 1] - offsets[bn]), jn = bn != b ? 0 : j + 1;  /* its pair's first span */ \
            int kn_keys = next < units && (bn != b || (next - first_unit) / spans != j)             \
                              ? (int)start[bn] + (next_fed < span ? next_fed : span) : 0;  /* 0: this pair again */ \
            const C* kn = kn_keys ? kc + ((int64_t)bn * Hkv + jn) * Tmax * D : kb;                  \
            attend_pair_##CSUFFIX(q, M, kb, vb, keys, first, G, D, scale, kn, kn_keys, scores, acc); \
            goto store;                                                                             \
        }                                                                                           \
        for (int t = 0; t < keys; t++) {                                                            \
            for (int d = 0; d < D; d++) row[d] = load_##CSUFFIX(kb[(int64_t)t * D + d]);            \
            for (int m = t > first ? (int)(t - first) * G : 0; m < M; m++)                          \
                scores[(int64_t)m * keys + t] = dot_fixed(q + m * D, row, D) * scale;               \
        }                                                                                           \
        for (int m = 0; m < M; m++)  /* only the query's own keys: its bits whatever follows */     \
            softmax_fixed(scores + (int64_t)m * keys, (int)first + m / G + 1);                      \
        memset(acc, 0, sizeof(float) * M * D);                                                      \
        for (int t = 0; t < keys; t++) {                                                            \
            for (int d = 0; d < D; d++) row[d] = load_##CSUFFIX(vb[(int64_t)t * D + d]);            \
            for (int m = t > first ? (int)(t - first) * G : 0; m < M; m++)                          \
                axpy_fixed(acc + m * D, scores[(int64_t)m * keys + t], row, D);                     \
        }                                                                                           \
    store:                                                                                          \
        for (int s = 0; s < S; s++)                                                                 \
            for (int g = 0; g < G; g++) {                                                           \
                T* o = out + (offsets[b] + s0 + s) * H * D + (j * G + g) * D;                       \
                for (int d = 0; d < D; d++) o[d] = store_##SUFFIX(acc[(s * G + g) * D + d]);        \
            }                                                                                       \
    }                                                                                               \
    free(row_first); free(unit_row); free(q_all); free(scores_all); free(acc_all); free(row_all);   \
    return 0;                                                                                       \
}
ATTEND(bf16, bf16, bf16, bf16, attend_fixed_bf16)
ATTEND(float, f32, float, f32, attend_fixed_f32)
/* float32 activations over bfloat16 caches: keys after RoPE and values rounded to bfloat16 (nearest even) as
   they are written, widened exactly as they are read; the arithmetic is the float32 kernel's on those values. */
ATTEND(float, f32, bf16, bf16, attend_fixed_f32_bf16)

#if defined(__AVX512F__) && defined(__AVX512BF16__)
#define HAVE_AVX512_BF16 1
/* RoPE for head size 64, with rope_bf16's exact roundings (each product, then the sum, rounded to
   bfloat16 nearest-even) in four 16-wide vectors: explicit multiplies and adds, no FMA to contract. */
void rope64_bf16(const bf16* x, const bf16* cos, const bf16* sin_signed, float* out, bf16* store) {
    __m512 v[4];
    for (int c = 0; c < 4; c++) v[c] = bf16x16_to_f32(x + 16 * c);
    for (int c = 0; c < 4; c++) {
        __m512 a = round_to_bf16(_mm512_mul_ps(v[c], bf16x16_to_f32(cos + 16 * c)));
        __m512 b = round_to_bf16(_mm512_mul_ps(v[(c + 2) % 4], bf16x16_to_f32(sin_signed + 16 * c)));
        __m512 sum = round_to_bf16(_mm512_add_ps(a, b));
        _mm512_storeu_ps(out + 16 * c, sum);
        if (store) _mm256_storeu_si256((__m256i*)(store + 16 * c), f32x16_to_bf16(sum));
    }
}
#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
#define HAVE_AMX_ATTEND 1
/* scores (M, keys) = scale * q k^T, causal (query m sees keys t <= first + m / G), with AMX tiles:
   S^T = K Q^T per block of 16 keys (tiles 1, 2: the keys' two halves of D = 64, read straight from the
   cache) against 16 queries (tiles 3, 4: Q^T pair-interleaved, built once), float32 in tile 0. The
   products are exact (q is bfloat16-exact after RoPE's rounding); only the summation order differs. */
static void scores_amx(const float* q, bf16* qt, const bf16* kb, const bf16* vb, float* scores, int M, int keys,
                       int64_t first, int G, float scale) {
    enum { D = 64 };
    int blocks = (M + 15) / 16;
    memset(qt, 0, sizeof(bf16) * (size_t)blocks * 2 * 16 * 32);
    for (int m = 0; m < M; m++) {  /* qt[block][half][r][2 n + p] = q[16 block + n][32 half + 2 r + p] */
        const uint32_t* bits = (const uint32_t*)(q + m * D);  /* bfloat16-exact floats: the top half is the value */
        bf16* column = qt + (m / 16) * 2 * 512 + 2 * (m % 16);
        for (int d = 0; d < D; d += 2) {
            bf16* at = column + (d / 32) * 512 + ((d % 32) / 2) * 32;
            at[0] = (bf16)(bits[d] >> 16);
            at[1] = (bf16)(bits[d + 1] >> 16);
        }
    }
    bf16 tail[16 * D] __attribute__((aligned(64)));
    float buf[16 * 16] __attribute__((aligned(64)));
    for (int blk = 0; blk < blocks; blk++) {
        _tile_loadd(3, qt + (blk * 2) * 512, 64);
        _tile_loadd(4, qt + (blk * 2 + 1) * 512, 64);
        int queries = M - 16 * blk < 16 ? M - 16 * blk : 16;
        int64_t visible = first + (16 * blk + queries - 1) / G + 1;  /* keys the block's last query sees */
        for (int t0 = 0; t0 < keys && t0 < visible; t0 += 16) {
            const bf16* kt = kb + (int64_t)t0 * D;
            if (blk == 0)  /* the first pass reads the cache from memory: keys two blocks ahead, and this block's
                              values for p.v, as two streams (prefetches past the row land in the cache's buffer) */
                for (int l = 0; l < 32; l++) {
                    _mm_prefetch((const char*)(kt + 32 * D) + 64 * l, _MM_HINT_T0);
                    _mm_prefetch((const char*)(vb + (int64_t)t0 * D) + 64 * l, _MM_HINT_T0);
                }
            int kn = keys - t0 < 16 ? keys - t0 : 16;
            if (kn < 16) {  /* the last block: zero-padded, never read past the row's keys */
                memcpy(tail, kt, sizeof(bf16) * kn * D);
                memset(tail + kn * D, 0, sizeof(bf16) * (16 - kn) * D);
                kt = tail;
            }
            _tile_zero(0);
            _tile_loadd(1, kt, D * 2);
            _tile_loadd(2, kt + 32, D * 2);
            _tile_dpbf16ps(0, 1, 3);
            _tile_dpbf16ps(0, 2, 4);
            _tile_stored(0, buf, 64);
            for (int n = 0; n < queries; n++) {
                int m = 16 * blk + n;
                int64_t limit = first + m / G;
                float* sc = scores + (int64_t)m * keys + t0;
                /* column n of the tile (query n's scores for these 16 keys), masked where it sees no key */
                __m512i at = _mm512_add_epi32(_mm512_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192,
                                                                208, 224, 240), _mm512_set1_epi32(n));
                __m512 col = _mm512_mul_ps(_mm512_i32gather_ps(at, buf, 4), _mm512_set1_ps(scale));
                int64_t seen = limit - t0 + 1;  /* keys of this block the query sees */
                __mmask16 vis = seen >= 16 ? (__mmask16)0xffff : seen <= 0 ? 0 : (__mmask16)((1u << seen) - 1);
                __mmask16 live = kn >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << kn) - 1);
                _mm512_mask_storeu_ps(sc, live, _mm512_maskz_mov_ps(vis, col));
            }
        }
    }
}
#else
#define HAVE_AMX_ATTEND 0
#endif
/* One row's scores over the keys it sees -> their softmax, in place, 16 keys at a time. */
static void softmax_avx512(float* sc, int keys) {
    const __m512 minus_inf = _mm512_set1_ps(-INFINITY);
    __m512 top = minus_inf;
    for (int t = 0; t < keys; t += 16) {
        __mmask16 live = keys - t >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (keys - t)) - 1);
        top = _mm512_max_ps(top, _mm512_mask_loadu_ps(minus_inf, live, sc + t));
    }
    __m512 high = _mm512_set1_ps(_mm512_reduce_max_ps(top)), total = _mm512_setzero_ps();
    for (int t = 0; t < keys; t += 16) {
        __mmask16 live = keys - t >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (keys - t)) - 1);
        __m512 e = exp_ps(_mm512_sub_ps(_mm512_mask_loadu_ps(minus_inf, live, sc + t), high));
        total = _mm512_add_ps(total, e);  /* masked-off lanes loaded -inf: e = 0 there */
        _mm512_mask_storeu_ps(sc + t, live, e);
    }
    __m512 inverse = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(total));
    for (int t = 0; t < keys; t += 16) {
        __mmask16 live = keys - t >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (keys - t)) - 1);
        _mm512_mask_storeu_ps(sc + t, live, _mm512_mul_ps(_mm512_maskz_loadu_ps(live, sc + t), inverse));
    }
}
/* p.v for Q <= 4 consecutive query rows from m0 (scores row-major, keys per row): acc[i] (64 floats) = the sum
   over the keys t < seen of p[m0 + i][t] v[t], in key order, each value row read once for all Q rows. */
static inline __attribute__((always_inline)) void pv_rows(const float* scores, const bf16* vb, int keys, int seen,
                                                          int m0, int Q, __m512 acc[4][4]) {
    enum { D = 64 };
    for (int i = 0; i < Q; i++)
        for (int c = 0; c < 4; c++) acc[i][c] = _mm512_setzero_ps();
    for (int t = 0; t < keys && t < seen; t++) {
        __m512 v[4];
        for (int c = 0; c < 4; c++) v[c] = bf16x16_to_f32(vb + (int64_t)t * D + 16 * c);
        for (int i = 0; i < Q; i++) {
            __m512 p = _mm512_set1_ps(scores[(int64_t)(m0 + i) * keys + t]);
            for (int c = 0; c < 4; c++) acc[i][c] = _mm512_fmadd_ps(p, v[c], acc[i][c]);
        }
    }
}
/* The same scores with vdpbf16ps: per key, two dot-product instructions and a horizontal sum per query. */
static void scores_avx512(const float* q, __m512bh* qb, const bf16* kb, float* scores, int M, int keys, int64_t first,
                          int G, float scale) {
    enum { D = 64 };
    for (int m = 0; m < M; m++) {  /* exact: RoPE rounded q to bfloat16 */
        qb[2 * m] = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(q + m * D + 16), _mm512_loadu_ps(q + m * D));
        qb[2 * m + 1] = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(q + m * D + 48), _mm512_loadu_ps(q + m * D + 32));
    }
    for (int t = 0; t < keys; t++) {
        __m512bh k0 = (__m512bh)_mm512_loadu_si512(kb + (int64_t)t * D);
        __m512bh k1 = (__m512bh)_mm512_loadu_si512(kb + (int64_t)t * D + 32);
        for (int m = t > first ? (int)(t - first) * G : 0; m < M; m++) {  /* the queries that see key t */
            __m512 dot = _mm512_dpbf16_ps(_mm512_setzero_ps(), qb[2 * m], k0);
            dot = _mm512_dpbf16_ps(dot, qb[2 * m + 1], k1);
            scores[(int64_t)m * keys + t] = _mm512_reduce_add_ps(dot) * scale;
        }
    }
}
static int attend64_bf16_avx512(const bf16* qkv, bf16* kc, bf16* vc, const bf16* cos, const bf16* sin_signed,
                                const int64_t* start, const int64_t* offsets, bf16* out, int B, int H, int Hkv,
                                int Tmax, float scale, int threads, int amx) {
    enum { D = 64 };
    int G = H / Hkv, width = H + 2 * Hkv, most = 0, longest = 0;
    for (int b = 0; b < B; b++) {
        int n = (int)(offsets[b + 1] - offsets[b]);
        if (n > most) most = n;
        if (n && start[b] + n > longest) longest = (int)(start[b] + n);
    }
    if (threads < 1) threads = 1;
    if (threads > B * Hkv) threads = B * Hkv > 0 ? B * Hkv : 1;
    int rows = (most * G + 3) / 4 * 4;  /* query rows rounded up to the p.v block of 4 (extra rows: p = 0) */
    size_t q_size = (size_t)(rows + 1) * D, qb_size = 2 * (size_t)(rows + 1), scores_size = (size_t)rows * longest + 1;
    size_t qt_size = (size_t)(rows + 15) / 16 * 2 * 16 * 32;  /* AMX: Q^T tiles, 16 queries x 2 halves of D */
#if !HAVE_AMX_ATTEND
    (void)amx;  /* no AMX tiles in this build */
#endif
    /* one set of buffers per thread */
    float* q_all = malloc(sizeof(float) * q_size * threads);
    __m512bh* qb_all = aligned_alloc(64, sizeof(__m512bh) * qb_size * threads);  /* vector stores need 64-byte alignment */
    float* scores_all = calloc(scores_size * threads, sizeof(float));
    bf16* qt_all = aligned_alloc(64, sizeof(bf16) * qt_size * threads);
    if (!q_all || !qb_all || !scores_all || !qt_all) { free(q_all); free(qb_all); free(scores_all); free(qt_all); return 1; }
    #pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (int b = 0; b < B; b++) {  /* the new tokens' keys (RoPE) and values into the caches */
        float scratch[D];
        for (int s = 0; s < (int)(offsets[b + 1] - offsets[b]); s++) {
            int64_t pos = start[b] + s;
            const bf16* tok = qkv + (offsets[b] + s) * width * D;
            for (int j = 0; j < Hkv; j++) {
                int64_t at = (((int64_t)b * Hkv + j) * Tmax + pos) * D;
                rope64_bf16(tok + (H + j) * D, cos + pos * D, sin_signed + pos * D, scratch, kc + at);
                memcpy(vc + at, tok + (H + Hkv + j) * D, sizeof(bf16) * D);
            }
        }
    }
    #pragma omp parallel num_threads(threads) if (threads > 1)
    {
    int worker = 0;
#ifdef _OPENMP
    worker = omp_get_thread_num();
#endif
#if HAVE_AMX_ATTEND
    if (amx) load_tiles_16x64(5);
#endif
    #pragma omp for schedule(static)
    for (int pair = 0; pair < B * Hkv; pair++) {
        int b = pair / Hkv, j = pair % Hkv;
        float* q = q_all + q_size * worker;
        __m512bh* qb = qb_all + qb_size * worker;
        float* scores = scores_all + scores_size * worker;
        int S = (int)(offsets[b + 1] - offsets[b]), M = S * G, keys = (int)start[b] + S;
        if (S == 0) continue;
        int blocks = (M + 3) / 4 * 4;
        memset(scores, 0, sizeof(float) * (size_t)blocks * keys);
        for (int s = 0; s < S; s++) {
            int64_t pos = start[b] + s;
            const bf16* tok = qkv + (offsets[b] + s) * width * D;
            for (int g = 0; g < G; g++)
                rope64_bf16(tok + (j * G + g) * D, cos + pos * D, sin_signed + pos * D, q + (s * G + g) * D, 0);
        }
        const bf16* kb = kc + ((int64_t)b * Hkv + j) * Tmax * D;
        const bf16* vb = vc + ((int64_t)b * Hkv + j) * Tmax * D;
#if HAVE_AMX_ATTEND
        if (amx) scores_amx(q, qt_all + qt_size * worker, kb, vb, scores, M, keys, start[b], G, scale);
        else
#endif
        scores_avx512(q, qb, kb, scores, M, keys, start[b], G, scale);
        /* Causal: query m (token m / G) sees keys 0 .. start + m / G. The entries past them stay 0 (the memset,
           or written as 0), so the p.v block of 4 queries reads up to its last query's keys and adds nothing
           from the others': the same bits as a full pass, ~half the work on a prefill. */
        for (int m = 0; m < M; m++) {
            int seen = (int)(start[b] + m / G + 1);
            softmax_avx512(scores + (int64_t)m * keys, seen < keys ? seen : keys);
        }
        for (int m0 = 0; m0 < M; m0 += 4) {
            __m512 acc[4][4];
            int q = M - m0 < 4 ? M - m0 : 4, seen = (int)(start[b] + (m0 + q - 1) / G + 1);
            switch (q) {  /* a constant count: no work for query slots past M */
                case 1: pv_rows(scores, vb, keys, seen, m0, 1, acc); break;
                case 2: pv_rows(scores, vb, keys, seen, m0, 2, acc); break;
                case 3: pv_rows(scores, vb, keys, seen, m0, 3, acc); break;
                default: pv_rows(scores, vb, keys, seen, m0, 4, acc); break;
            }
            for (int i = 0; i < q; i++) {
                int m = m0 + i, s = m / G, g = m % G;
                bf16* o = out + (offsets[b] + s) * H * D + (j * G + g) * D;
                for (int c = 0; c < 4; c++) _mm256_storeu_si256((__m256i*)(o + 16 * c), f32x16_to_bf16(acc[i][c]));
            }
        }
    }
#if HAVE_AMX_ATTEND
    if (amx) _tile_release();
#endif
    }
    free(q_all); free(qb_all); free(scores_all); free(qt_all);
    return 0;
}
#else
#define HAVE_AVX512_BF16 0
/* Without AVX512-BF16: the scalar RoPE, which gives the same bits. */
void rope64_bf16(const bf16* x, const bf16* cos, const bf16* sin_signed, float* out, bf16* store) {
    rope_bf16(x, cos, sin_signed, 64, out, store);
}
#endif

int rope_attend_bf16(const bf16* qkv, bf16* kc, bf16* vc, const bf16* cos, const bf16* sin_signed, const int64_t* start,
                     const int64_t* offsets, bf16* out, int B, int H, int Hkv, int D, int Tmax, float scale, int threads,
                     int route) {
#if HAVE_AVX512_BF16
    if (D == 64 && route != ROUTE_FIXED)
        return attend64_bf16_avx512(qkv, kc, vc, cos, sin_signed, start, offsets, out, B, H, Hkv, Tmax, scale, threads,
                                    route == ROUTE_AMX);
#endif
    (void)route;
    return attend_fixed_bf16(qkv, kc, vc, cos, sin_signed, start, offsets, out, B, H, Hkv, D, Tmax, scale, threads);
}
int rope_attend_f32(const float* qkv, float* kc, float* vc, const float* cos, const float* sin_signed, const int64_t* start,
                    const int64_t* offsets, float* out, int B, int H, int Hkv, int D, int Tmax, float scale, int threads,
                    int route) {
    (void)route;  /* float32: the fixed kernel on every route */
    return attend_fixed_f32(qkv, kc, vc, cos, sin_signed, start, offsets, out, B, H, Hkv, D, Tmax, scale, threads);
}
int rope_attend_f32_bf16(const float* qkv, bf16* kc, bf16* vc, const float* cos, const float* sin_signed,
                         const int64_t* start, const int64_t* offsets, float* out, int B, int H, int Hkv, int D, int Tmax,
                         float scale, int threads) {
    return attend_fixed_f32_bf16(qkv, kc, vc, cos, sin_signed, start, offsets, out, B, H, Hkv, D, Tmax, scale, threads);
}
