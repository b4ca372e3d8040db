/* The screened greedy head: the argmax of x W^T over the vocabulary without reading all of W in bfloat16
   (`screen.ScreenedHead.argmax`), and int8 products for draft models (`screen.Int8Weight`).

   A greedy step needs one token per row, the first maximum of the head's bfloat16 logits. The head of the
   default model is 49,152 x 576 (57 MB in bfloat16, a fifth of what a decode step reads). Here each row is
   screened first against an int8 copy of W (28 MB) with AMX int8 tiles, and only the few tokens that can
   still be the maximum are computed exactly, as quench's AVX512 GEMM computes them (same float32 sum over K
   in the same order, rounded to bfloat16 once): the token is the one that GEMM's logits give, bit for bit.

   Why no token is lost. Per vocabulary row j, W_j = s_j q_j + e_j (q_j int8, s_j float). Per input row,
   x = x^ + d with x^ = s_x c, c a 15-bit integer vector stored as two byte planes (high and low 7 bits), so
   x^ . q_j is an exact integer sum of two tile products. With A_j the screened logit and E_j the float32 sum
   the exact GEMM forms, Cauchy-Schwarz bounds |E_j - A_j| by
       R_j = |d| |W_j| + |x^| |e_j| + gamma max(|x|, |x^|) (|W_j| + |e_j|) + 1e-3
   (2-norms; gamma covers the float32 rounding of both sums over K, 1e-3 the rounding of the screened logit
   itself). L = max_j (A_j - R_j) is below the exact logit of that j, so every j with A_j + R_j < L has a
   smaller exact logit. Rounding to bfloat16 can tie two sums that differ; the threshold is lowered to
   T = L - |L|/64 - 1e-3, two bfloat16 steps below L, so a token below T rounds strictly below the winner and
   cannot be a first maximum either. Tokens with A_j + R_j >= T (on the default model ~6 per row, at most
   ~100 on HumanEval answers) are computed exactly, a block of 16 tokens of the packed bfloat16 head at a
   time. */
#include "x86.h"
#if defined(__AVX512F__) && defined(__AVX512BF16__) && defined(__AVX512VNNI__) && defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AMX_INT8__)
#include <math.h>
#include <stdlib.h>
int screen_available(void) { return amx_available(); }
typedef struct { float scale, alpha, beta; } row_terms;

/* Row m of x (M, K) -> its two byte planes in group m / 8 (16 x K bytes: high planes in rows 0..7, low in
   8..15) and its bound terms. c = round(x / s) in [-16383, 16383], s = max|x| / 16383; c = 128 hi + lo with
   lo in [0, 127]; the high plane stores hi + 128 (unsigned), which the column sums of q undo. */
static void screen_quantize(const bf16* x, int M, int K, uint8_t* planes, row_terms* terms, double gamma) {
    memset(planes, 0, (size_t)((M + 7) / 8) * 16 * K);
    for (int m = 0; m < M; m++) {
        const bf16* xr = x + (int64_t)m * K;
        float top = 0.0f;
        for (int k = 0; k < K; k++) { float v = fabsf(load_bf16(xr[k])); if (v > top) top = v; }
        float s = top > 0.0f ? top / 16383.0f : 1.0f;
        uint8_t* hi = planes + (size_t)(m / 8) * 16 * K + (size_t)(m % 8) * K;
        uint8_t* lo = hi + (size_t)8 * K;
        double d2 = 0.0, q2 = 0.0, x2 = 0.0;
        for (int k = 0; k < K; k++) {
            double v = load_bf16(xr[k]);
            long c = lrint(v / s);
            if (c > 16383) c = 16383;
            if (c < -16383) c = -16383;
            long high = c >> 7;  /* floor(c / 128) */
            hi[k] = (uint8_t)(high + 128);
            lo[k] = (uint8_t)(c - high * 128);
            double q = (double)s * (double)c;
            d2 += (v - q) * (v - q); q2 += q * q; x2 += v * v;
        }
        double d = sqrt(d2), q = sqrt(q2), big = fmax(sqrt(x2), q);
        terms[m].scale = s;
        terms[m].alpha = (float)((d + gamma * big) * (1.0 + 1e-5));
        terms[m].beta = (float)((q + gamma * big) * (1.0 + 1e-5));
    }
}

/* Tokens j0 .. j0 + 15 of column block b (fewer in a partial last block): their lane mask. */
static inline __mmask16 block_lanes(int b, int V) {
    int j0 = 16 * b;
    return V - j0 >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (V - j0)) - 1);
}
/* Row i of a C tile (16 x 16 int32, in buf: high-plane sums in rows 0..7, low-plane sums in 8..15) -> the screened
   logits A = s_x s_j (c . q_j) of its 16 tokens. q128: 128 x the tokens' column sums of q (what the +128 of the
   stored high plane added); ws: their scales s_j. */
static inline __m512 screened_logits(const int32_t* buf, int i, __m512i q128, __m512 ws, float row_scale) {
    __m512i high = _mm512_sub_epi32(_mm512_load_si512(buf + 16 * i), q128);
    __m512 sum = _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(high), _mm512_set1_ps(128.0f)),
                               _mm512_cvtepi32_ps(_mm512_load_si512(buf + 16 * (8 + i))));
    return _mm512_mul_ps(sum, _mm512_mul_ps(ws, _mm512_set1_ps(row_scale)));
}

/* C tile of column block b, row group g -> upper bounds A + R of those rows' columns and each row's running max
   of A - R, 16 lanes wide (reduced once at the end). */
static void screen_finish(const int32_t* buf, int b, int g, int M, int V, const float* wscale, const int32_t* colq,
                          const float* w2, const float* e2, const row_terms* terms, float* upper, __m512* lower) {
    int j0 = 16 * b;
    __mmask16 keep = block_lanes(b, V);
    __m512 ws = _mm512_maskz_loadu_ps(keep, wscale + j0), n2 = _mm512_maskz_loadu_ps(keep, w2 + j0);
    __m512 en = _mm512_maskz_loadu_ps(keep, e2 + j0);
    __m512i q128 = _mm512_slli_epi32(_mm512_maskz_loadu_epi32(keep, colq + j0), 7);
    for (int i = 0; i < 8 && 8 * g + i < M; i++) {
        int m = 8 * g + i;
        __m512 a = screened_logits(buf, i, q128, ws, terms[m].scale);
        __m512 r = _mm512_fmadd_ps(_mm512_set1_ps(terms[m].alpha), n2,
                                   _mm512_fmadd_ps(_mm512_set1_ps(terms[m].beta), en, _mm512_set1_ps(1e-3f)));
        _mm512_mask_storeu_ps(upper + (int64_t)m * V + j0, keep, _mm512_add_ps(a, r));
        lower[m] = _mm512_mask_max_ps(lower[m], keep, lower[m], _mm512_sub_ps(a, r));
    }
}

/* The same tile as plain products (int8 weights, `w8_gemm_bf16`): out (M, V) = A, rounded to bfloat16. */
static void w8_finish(const int32_t* buf, int b, int g, int M, int V, const float* wscale, const int32_t* colq,
                      const row_terms* terms, bf16* out) {
    int j0 = 16 * b;
    __mmask16 keep = block_lanes(b, V);
    __m512 ws = _mm512_maskz_loadu_ps(keep, wscale + j0);
    __m512i q128 = _mm512_slli_epi32(_mm512_maskz_loadu_epi32(keep, colq + j0), 7);
    for (int i = 0; i < 8 && 8 * g + i < M; i++) {
        int m = 8 * g + i;
        __m512 a = screened_logits(buf, i, q128, ws, terms[m].scale);
        _mm256_mask_storeu_epi16(out + (int64_t)m * V + j0, keep, (__m256i)_mm512_cvtneps_pbh(a));
    }
}

/* A finished tile of either pass: the products themselves where out is given, else the screen's bounds. */
static inline void finish_tile(const int32_t* buf, int b, int g, int M, int V, const float* wscale, const int32_t* colq,
                               const float* w2, const float* e2, const row_terms* terms, float* upper, __m512* lower,
                               bf16* out) {
    if (out) w8_finish(buf, b, g, M, V, wscale, colq, terms, out);
    else screen_finish(buf, b, g, M, V, wscale, colq, w2, e2, terms, upper, lower);
}

#define SCREEN_STORE(T, s)                                                                         \
    _tile_stored(T, buf, 64);                                                                      \
    finish_tile(buf, b0 + (s), g, M, V, wscale, colq, w2, e2, terms, upper, local, out);
/* Next K chunk's tile of each of the group's blocks, asked one step early (as the bf16 AMX GEMM does). */
#define SCREEN_PREFETCH(count)                                                                     \
    if (g == 0 && kc + 1 < K64)                                                                    \
        for (int s = 0; s < (count); s++)                                                          \
            for (int l = 0; l < 16; l++)                                                           \
                _mm_prefetch((const char*)(w + (int64_t)s * K64 * 1024 + (int64_t)(kc + 1) * 1024) + 64 * l, _MM_HINT_T0);
#define SCREEN_W(s) _tile_loadd(7, w + (int64_t)(s) * K64 * 1024 + (int64_t)kc * 1024, 64)

/* The pass below for a few rows, with AVX512-VNNI instead of tiles: a block's 64-byte tile row holds 4 inputs of
   each of its 16 tokens, the operand `vpdpbusd` takes, so a block is one sequential run in input order. Each
   row's two planes are broadcast 4 bytes at a time; BLOCKS blocks are read side by side. The integer sums are
   the tiles' exactly, so the finish (and the screen's bound) is unchanged. */
static inline __attribute__((always_inline)) void vnni_blocks(const uint8_t* planes, int M, int K, const int8_t* w,
                                                              int nb, int32_t* bufs) {
    enum { BLOCKS = 4, ROWS = 4 };
    __m512i acc[BLOCKS][ROWS][2];
    for (int s = 0; s < BLOCKS; s++)
        for (int m = 0; m < ROWS; m++) acc[s][m][0] = acc[s][m][1] = _mm512_setzero_si512();
    int64_t stride = (int64_t)K * 16;  /* one block: K/4 rows of 64 bytes */
    for (int j = 0; j < K / 4; j++) {
        __m512i wv[BLOCKS];
        for (int s = 0; s < BLOCKS; s++)
            wv[s] = s < nb ? _mm512_loadu_si512(w + s * stride + 64 * (int64_t)j) : _mm512_setzero_si512();
        for (int m = 0; m < ROWS; m++) {
            if (m >= M) break;
            int32_t hi4, lo4;
            memcpy(&hi4, planes + (size_t)m * K + 4 * j, 4);
            memcpy(&lo4, planes + (size_t)(8 + m) * K + 4 * j, 4);
            __m512i hi = _mm512_set1_epi32(hi4), lo = _mm512_set1_epi32(lo4);
            for (int s = 0; s < BLOCKS; s++)
                if (s < nb) {
                    acc[s][m][0] = _mm512_dpbusd_epi32(acc[s][m][0], hi, wv[s]);
                    acc[s][m][1] = _mm512_dpbusd_epi32(acc[s][m][1], lo, wv[s]);
                }
        }
    }
    for (int s = 0; s < nb; s++)
        for (int m = 0; m < M && m < ROWS; m++) {
            _mm512_store_si512(bufs + s * 256 + 16 * m, acc[s][m][0]);
            _mm512_store_si512(bufs + s * 256 + 16 * (8 + m), acc[s][m][1]);
        }
}
static void screen_pass_vnni(const uint8_t* planes, int M, int K, const int8_t* wq, const float* wscale,
                             const int32_t* colq, const float* w2, const float* e2, const row_terms* terms, int V,
                             float* upper, float* lower, int threads, bf16* out) {
    int nblocks = (V + 15) / 16, K64 = K / 64, groups = (nblocks + 3) / 4;
    for (int m = 0; m < M; m++) lower[m] = -INFINITY;
    #pragma omp parallel num_threads(threads) if (threads > 1 && groups > 1)
    {
        int32_t bufs[4 * 16 * 16] __attribute__((aligned(64)));
        __m512 local[SCREEN_MAX_ROWS];
        for (int m = 0; m < M; m++) local[m] = _mm512_set1_ps(-INFINITY);
        #pragma omp for schedule(static)
        for (int part = 0; part < groups; part++) {
            int b0 = part * 4, nb = nblocks - b0 < 4 ? nblocks - b0 : 4;
            const int8_t* w = wq + (int64_t)b0 * K64 * 1024;
            switch (M) {  /* a constant row count per call lets the compiler keep every sum in a register */
                case 1: vnni_blocks(planes, 1, K, w, nb, bufs); break;
                case 2: vnni_blocks(planes, 2, K, w, nb, bufs); break;
                case 3: vnni_blocks(planes, 3, K, w, nb, bufs); break;
                default: vnni_blocks(planes, 4, K, w, nb, bufs); break;
            }
            for (int s = 0; s < nb; s++)
                finish_tile(bufs + s * 256, b0 + s, 0, M, V, wscale, colq, w2, e2, terms, upper, local, out);
        }
        #pragma omp critical
        for (int m = 0; m < M; m++) {
            float low = _mm512_reduce_max_ps(local[m]);
            if (low > lower[m]) lower[m] = low;
        }
    }
}

/* Screened logits of every row: W's int8 copy (nblocks, K/64, 16 x 16 x 4: one 1 KB tile per block and
   64 inputs) in groups of 6 blocks side by side (C tiles 0..5, planes in 6, W in 7); each group stays in
   cache while every row group of 8 uses it. With out, the products themselves go there (w8_finish) and
   no bound is formed (w2, e2, upper unused). */
static void screen_pass(const uint8_t* planes, int M, int K, const int8_t* wq, const float* wscale, const int32_t* colq,
                        const float* w2, const float* e2, const row_terms* terms, int V, float* upper, float* lower,
                        int threads, bf16* out, int vnni_rows) {
    if (M <= vnni_rows && M <= 4) {
        screen_pass_vnni(planes, M, K, wq, wscale, colq, w2, e2, terms, V, upper, lower, threads, out);
        return;
    }
    int nblocks = (V + 15) / 16, K64 = K / 64, groups = (nblocks + 5) / 6, rgroups = (M + 7) / 8;
    for (int m = 0; m < M; m++) lower[m] = -INFINITY;
    #pragma omp parallel num_threads(threads) if (threads > 1 && groups > 1)
    {
        load_tiles_16x64(8);
        int32_t buf[16 * 16] __attribute__((aligned(64)));
        __m512 local[SCREEN_MAX_ROWS];
        for (int m = 0; m < M; m++) local[m] = _mm512_set1_ps(-INFINITY);
        #pragma omp for schedule(static)
        for (int part = 0; part < groups; part++) {
            int b0 = part * 6, nb = nblocks - b0 < 6 ? nblocks - b0 : 6;
            const int8_t* w = wq + (int64_t)b0 * K64 * 1024;
            for (int g = 0; g < rgroups; g++) {
                const uint8_t* a = planes + (size_t)g * 16 * K;
                if (nb == 6) {
                    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3); _tile_zero(4); _tile_zero(5);
                    for (int kc = 0; kc < K64; kc++) {
                        SCREEN_PREFETCH(6)
                        _tile_loadd(6, a + 64 * kc, K);
                        SCREEN_W(0); _tile_dpbusd(0, 6, 7);
                        SCREEN_W(1); _tile_dpbusd(1, 6, 7);
                        SCREEN_W(2); _tile_dpbusd(2, 6, 7);
                        SCREEN_W(3); _tile_dpbusd(3, 6, 7);
                        SCREEN_W(4); _tile_dpbusd(4, 6, 7);
                        SCREEN_W(5); _tile_dpbusd(5, 6, 7);
                    }
                    SCREEN_STORE(0, 0) SCREEN_STORE(1, 1) SCREEN_STORE(2, 2)
                    SCREEN_STORE(3, 3) SCREEN_STORE(4, 4) SCREEN_STORE(5, 5)
                } else {
                    for (int s = 0; s < nb; s++) {
                        _tile_zero(0);
                        for (int kc = 0; kc < K64; kc++) {
                            _tile_loadd(6, a + 64 * kc, K);
                            SCREEN_W(s); _tile_dpbusd(0, 6, 7);
                        }
                        SCREEN_STORE(0, s)
                    }
                }
            }
        }
        #pragma omp critical
        for (int m = 0; m < M; m++) {
            float low = _mm512_reduce_max_ps(local[m]);
            if (low > lower[m]) lower[m] = low;
        }
        _tile_release();
    }
}

/* Row x's first maximum among the tokens whose upper bound reaches T: each computed as gemm_bf16 computes
   it (vdpbf16ps over the pairs of K in order, one float32 lane per token, rounded to bfloat16 once). A
   candidate's block of 16 tokens in the packed bfloat16 head (ceil(V/16), K/2, 16, 2) is one contiguous
   run, read whole (a gather of one token's pairs touches the same cache lines, more slowly). -1 if no
   token reaches T. */
static int64_t screen_exact(const bf16* x, const bf16* wp, const float* up, float lower, int V, int K, int32_t* cand,
                            int32_t* count) {
    float T = lower - fabsf(lower) * (1.0f / 64.0f) - 1e-3f;
    int n = 0, j = 0;
    for (; j + 16 <= V; j += 16) {
        __mmask16 hit = _mm512_cmp_ps_mask(_mm512_loadu_ps(up + j), _mm512_set1_ps(T), _CMP_GE_OQ);
        while (hit) { cand[n++] = j + __builtin_ctz(hit); hit &= hit - 1; }
    }
    for (; j < V; j++) if (up[j] >= T) cand[n++] = j;
    if (count) *count = n;
    if (n == 0) return -1;
    int K2 = K / 2;
    float best = -INFINITY, values[16] __attribute__((aligned(64)));
    int64_t first = cand[0];
    for (int c = 0; c < n;) {
        int block = cand[c] >> 4;
        const bf16* w = wp + (int64_t)block * 16 * K;
        __m512 acc = _mm512_setzero_ps();
        for (int kk = 0; kk < K2; kk++) {
            int32_t pair;
            memcpy(&pair, x + 2 * kk, 4);
            acc = _mm512_dpbf16_ps(acc, (__m512bh)_mm512_loadu_si512(w + kk * 32), (__m512bh)_mm512_set1_epi32(pair));
        }
        _mm512_store_ps(values, round_to_bf16(acc));
        for (; c < n && cand[c] >> 4 == block; c++)  /* candidates ascend: the first maximum wins ties */
            if (values[cand[c] & 15] > best) { best = values[cand[c] & 15]; first = cand[c]; }
    }
    return first;
}

/* x (M, K) bfloat16 -> out (M,) the first maximum of each row's bfloat16 logits x W^T, W given as its int8
   copy (wq, wscale, colq: column sums of q, w2 = |W_j|, e2 = |W_j - s_j q_j|) and packed for gemm_bf16 (wp).
   work: at least screen_work_bytes(M, V, K) bytes; counts (M,), if given: the tokens computed exactly per row.
   Calls of up to vnni_rows rows (at most 4; 0: none) take the AVX512-VNNI pass, the others AMX tiles.
   Returns 0, or -1 where the screen cannot serve the
   call (no AMX, K not a multiple of 64, too many rows, a row without candidates): nothing promised in out. */
int64_t screen_work_bytes(int M, int V, int K) {
    return (int64_t)((M + 7) / 8) * 16 * K + (int64_t)M * V * 4 + (int64_t)M * V * 4 + 64 * 3;
}
int screen_argmax_bf16(const bf16* x, int M, int K, const int8_t* wq, const float* wscale, const int32_t* colq,
                       const float* w2, const float* e2, const bf16* wp, int V, int64_t* out, int32_t* counts, void* work,
                       int threads, int vnni_rows) {
    if (K % 64 || M < 1 || M > SCREEN_MAX_ROWS || !screen_available()) return -1;
    row_terms terms[SCREEN_MAX_ROWS];
    float lower[SCREEN_MAX_ROWS];
    uintptr_t p = ((uintptr_t)work + 63) & ~(uintptr_t)63;
    uint8_t* planes = (uint8_t*)p;
    float* upper = (float*)(p + (((size_t)((M + 7) / 8) * 16 * K + 63) & ~(size_t)63));
    int32_t* cand = (int32_t*)(upper + (size_t)M * V);
    screen_quantize(x, M, K, planes, terms, (4.0 * K + 16.0) * 5.9604644775390625e-8);
    screen_pass(planes, M, K, wq, wscale, colq, w2, e2, terms, V, upper, lower, threads, NULL, vnni_rows);
    int failed = 0;
    #pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1 && M > 1) reduction(|:failed)
    for (int m = 0; m < M; m++) {
        out[m] = screen_exact(x + (int64_t)m * K, wp, upper + (int64_t)m * V, lower[m], V, K, cand + (int64_t)m * V,
                              counts ? counts + m : NULL);
        failed |= out[m] < 0;
    }
    return failed ? -1 : 0;
}

/* out (M, N) bfloat16 = x (M, K) W^T from W's int8 copy (wq, wscale, colq as for the screen): x rounded to 15
   bits per row, exact integer sums, one float32 scaling, one rounding to bfloat16. Every row is computed
   alone, so a row's output does not depend on the others. Not the bfloat16 GEMM's bits: for draft models.
   work: w8_work_bytes(M, K) bytes. Returns 0, or -1 where it cannot serve the call (no AMX, K % 64). */
int64_t w8_work_bytes(int M, int K) {
    int rows = M < SCREEN_MAX_ROWS ? M : SCREEN_MAX_ROWS;
    return (int64_t)((rows + 7) / 8) * 16 * K + 64;
}
int w8_gemm_bf16(const bf16* x, int M, int K, const int8_t* wq, const float* wscale, const int32_t* colq, int N,
                 bf16* out, void* work, int threads, int vnni_rows) {
    if (K % 64 || M < 1 || !screen_available()) return -1;
    row_terms terms[SCREEN_MAX_ROWS];
    float lower[SCREEN_MAX_ROWS];
    uint8_t* planes = (uint8_t*)(((uintptr_t)work + 63) & ~(uintptr_t)63);
    for (int m0 = 0; m0 < M; m0 += SCREEN_MAX_ROWS) {
        int rows = M - m0 < SCREEN_MAX_ROWS ? M - m0 : SCREEN_MAX_ROWS;
        screen_quantize(x + (int64_t)m0 * K, rows, K, planes, terms, 0.0);
        screen_pass(planes, rows, K, wq, wscale, colq, NULL, NULL, terms, N, NULL, lower, threads, out + (int64_t)m0 * N,
                    vnni_rows);
    }
    return 0;
}
#else
int64_t w8_work_bytes(int M, int K) { (void)M; (void)K; return 0; }
int w8_gemm_bf16(const bf16* x, int M, int K, const int8_t* wq, const float* wscale, const int32_t* colq, int N,
                 bf16* out, void* work, int threads, int vnni_rows) {
    (void)x; (void)M; (void)K; (void)wq; (void)wscale; (void)colq; (void)N; (void)out; (void)work; (void)threads;
    (void)vnni_rows;
    return -1;
}
int screen_available(void) { return 0; }
int64_t screen_work_bytes(int M, int V, int K) { (void)M; (void)V; (void)K; return 0; }
int screen_argmax_bf16(const bf16* x, int M, int K, const int8_t* wq, const float* wscale, const int32_t* colq,
                       const float* w2, const float* e2, const bf16* wp, int V, int64_t* out, int32_t* counts, void* work,
                       int threads, int vnni_rows) {
    (void)x; (void)counts; (void)M; (void)K; (void)wq; (void)wscale; (void)colq; (void)w2; (void)e2; (void)wp; (void)V;
    (void)out; (void)work; (void)threads; (void)vnni_rows;
    return -1;
}
#endif
