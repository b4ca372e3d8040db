/* qdot.c's product on an interleaved copy of W (32-value types: Q4_0, Q4_1, Q8_0): the same definition, the same
   bits, faster. G W rows form a group (G = 16 on the AVX512-VNNI builds, one row per lane of a 512-bit register;
   8 on the others, 256-bit); per group and block one record:
     Q4_0, Q4_1  f16 d[G], f16 m[G] (Q4_0: zero), then 4 runs of 4 G bytes: run j holds bytes 4 j .. 4 j + 3 of each
                 row's 16 nibble bytes, row r at 4 r (low nibbles: values 4 j + t, high: 16 + 4 j + t)     20 G bytes
     Q8_0        f16 d[G], int32 wsum[G] (each row's sum of w), then 8 runs of 4 G bytes: run j holds w[4 j .. 4 j + 3]
                 of each row, row r at 4 r                                                                  38 G bytes
   Rows past N are zero; the layout is the build's own (qpack and the product of one library agree). So one load holds
   4 values of G rows, and VPDPBUSD (or VPMADDUBSW + VPMADDWD) against 4 activation bytes broadcast adds them straight
   into the row's own int32 lane: no reduction across lanes.
   Q8_0 on VNNI takes the activations as unsigned bytes q + 128 and subtracts 128 wsum (exact). Float steps: qdot.c's,
   one output per lane, blocks in sequence. */
#include "quench_native.h"
#include "half.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define QPACK_AVX2 1
#endif
#if defined(QPACK_AVX2) && defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define QPACK_VNNI 1
#endif

#if defined(QPACK_VNNI) && defined(__AVX512BW__)
#define QPACK_ZMM 1
#define GROUP 16
#else
#define GROUP 8
#endif
#define ALWAYS static inline __attribute__((always_inline))
#define MINS (2 * GROUP)    /* a record's f16 m (Q4_0, Q4_1) or int32 wsum (Q8_0) */
#define NIBBLES (4 * GROUP) /* Q4_0, Q4_1: the first run */
#define BYTES (6 * GROUP)   /* Q8_0: the first run */
#define RUN (4 * GROUP)     /* bytes per run */
#define STREAMS 4           /* groups read side by side at one or two rows (groups()) */
#define CHUNK_BYTES 24576   /* activation bytes (rows x K) that stay in L1 while every group passes over them (groups()) */
#define CHUNK_RECORD_BYTES (4 << 20) /* at most this many bytes of records are read again for each chunk (from cache) */

static int record_bytes(int type) {
    return type == GGML_TYPE_Q4_0 || type == GGML_TYPE_Q4_1 ? 20 * GROUP : type == GGML_TYPE_Q8_0 ? 38 * GROUP : 0;
}

int64_t qpack_bytes(int type, int N, int K) {
    if (record_bytes(type) == 0 || quant_row_bytes(type, K) < 0 || N < 0) return -1;
    return (int64_t)((N + GROUP - 1) / GROUP) * (K / 32) * record_bytes(type);
}

int qpack(const uint8_t* w, uint8_t* out, int N, int K, int type) {
    int64_t total = qpack_bytes(type, N, K), row_bytes = quant_row_bytes(type, K);
    if (total < 0) return 1;
    memset(out, 0, (size_t)total);
    int blocks = K / 32, size = type == GGML_TYPE_Q8_0 ? 34 : type == GGML_TYPE_Q4_1 ? 20 : 18;
    for (int n = 0; n < N; n++)
        for (int b = 0; b < blocks; b++) {
            const uint8_t* src = w + n * row_bytes + (int64_t)b * size;
            uint8_t* rec = out + ((int64_t)(n / GROUP) * blocks + b) * record_bytes(type);
            int r = n % GROUP;
            memcpy(rec + 2 * r, src, 2);
            if (type == GGML_TYPE_Q8_0) {
                int32_t sum = 0;
                for (int i = 0; i < 32; i++) sum += (int8_t)src[2 + i];
                memcpy(rec + MINS + 4 * r, &sum, 4);
                for (int j = 0; j < 8; j++) memcpy(rec + BYTES + RUN * j + 4 * r, src + 2 + 4 * j, 4);
            } else {
                if (type == GGML_TYPE_Q4_1) memcpy(rec + MINS + 2 * r, src + 2, 2);
                const uint8_t* qs = src + (type == GGML_TYPE_Q4_1 ? 4 : 2);
                for (int j = 0; j < 4; j++) memcpy(rec + NIBBLES + RUN * j + 4 * r, qs + 4 * j, 4);
            }
        }
    return 0;
}

/* A call's quantized x (qdot.c's quantize_x8_sums): q (M, K), d (M, K / 32), s (M, K / 16) the sums of 16 q; on
   VNNI for Q8_0 also u (M, K) = q + 128 as unsigned bytes, made once per call rather than once per tile. */
typedef struct { const int8_t* q; const float* d; const int32_t* s; const uint8_t* u; } acts;

ALWAYS int32_t block_sum(const acts* a, int64_t at) { return a->s[2 * at] + a->s[2 * at + 1]; }  /* sum of q, block at */

#if defined(QPACK_ZMM)
#define XROWS 8
ALWAYS __m512i bcast4(const int8_t* p) { int32_t v; memcpy(&v, p, 4); return _mm512_set1_epi32(v); }

/* 16 W rows, one per lane of a 512-bit register: the 256-bit tile's steps on twice the lanes. */
ALWAYS void group_tile(int type, const uint8_t* const* wps, const int* nrs, const int* ns, int ng, const acts* a, int m0, int mt,
                       int K, float* y, int64_t ldy) {
    int blocks = K / 32, rec = record_bytes(type);
    __m512 accs[STREAMS][XROWS];
    for (int s = 0; s < ng; s++)
        for (int i = 0; i < mt; i++) accs[s][i] = _mm512_setzero_ps();
    for (int b = 0; b < blocks; b++)
    for (int s = 0; s < ng; s++) {
        __m512* acc = accs[s];
        const uint8_t* r = wps[s] + (int64_t)b * rec;
        __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)r));
        __m512i isum[XROWS];
        const int8_t* x[XROWS];
        for (int i = 0; i < mt; i++) x[i] = a->q + (int64_t)(m0 + i) * K + 32 * b, isum[i] = _mm512_setzero_si512();
        if (type == GGML_TYPE_Q8_0) {
            for (int j = 0; j < 8; j++) {
                __m512i w = _mm512_loadu_si512(r + BYTES + RUN * j);
                for (int i = 0; i < mt; i++)  /* (q + 128) as u8 times w; 128 wsum taken off below */
                    isum[i] = _mm512_dpbusd_epi32(isum[i], bcast4((const int8_t*)a->u + (x[i] - a->q) + 4 * j), w);
            }
            __m512i wsum = _mm512_slli_epi32(_mm512_loadu_si512(r + MINS), 7);
            for (int i = 0; i < mt; i++) isum[i] = _mm512_sub_epi32(isum[i], wsum);
        } else {
            for (int j = 0; j < 4; j++) {
                __m512i raw = _mm512_loadu_si512(r + NIBBLES + RUN * j);
                __m512i lo = _mm512_and_si512(raw, _mm512_set1_epi8(15));
                __m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), _mm512_set1_epi8(15));
                for (int i = 0; i < mt; i++)
                    isum[i] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(isum[i], lo, bcast4(x[i] + 4 * j)), hi, bcast4(x[i] + 16 + 4 * j));
            }
        }
        for (int i = 0; i < mt; i++) {
            int64_t at = (int64_t)(m0 + i) * blocks + b;
            __m512 dx = _mm512_set1_ps(a->d[at]);
            if (type == GGML_TYPE_Q4_0) isum[i] = _mm512_sub_epi32(isum[i], _mm512_set1_epi32(8 * block_sum(a, at)));
            acc[i] = _mm512_fmadd_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(isum[i]), acc[i]);
            if (type == GGML_TYPE_Q4_1) {
                __m512 mw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(r + MINS)));
                acc[i] = _mm512_fmadd_ps(_mm512_mul_ps(mw, dx), _mm512_set1_ps((float)block_sum(a, at)), acc[i]);
            }
        }
    }
    for (int s = 0; s < ng; s++) {
        __mmask16 live = nrs[s] == GROUP ? (__mmask16)0xffff : (__mmask16)((1u << nrs[s]) - 1);
        for (int i = 0; i < mt; i++) _mm512_mask_storeu_ps(y + (int64_t)(m0 + i) * ldy + ns[s], live, accs[s][i]);
    }
}
#elif defined(QPACK_AVX2)
#if defined(__AVX512VL__)
#define XROWS 8
#else
#define XROWS 4
#endif
ALWAYS __m256i bcast4(const int8_t* p) { int32_t v; memcpy(&v, p, 4); return _mm256_set1_epi32(v); }

/* acc += the u8 w times s8 x products of each int32 lane's 4 bytes. */
ALWAYS __m256i dp(__m256i acc, __m256i w, __m256i x) {
#if defined(QPACK_VNNI)
    return _mm256_dpbusd_epi32(acc, w, x);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1)));
#endif
}

ALWAYS void group_tile(int type, const uint8_t* const* wps, const int* nrs, const int* ns, int ng, const acts* a, int m0, int mt,
                       int K, float* y, int64_t ldy) {
    int blocks = K / 32, rec = record_bytes(type);
    __m256 accs[STREAMS][XROWS];
    for (int s = 0; s < ng; s++)
        for (int i = 0; i < mt; i++) accs[s][i] = _mm256_setzero_ps();
    for (int b = 0; b < blocks; b++)
    for (int s = 0; s < ng; s++) {
        __m256* acc = accs[s];
        const uint8_t* r = wps[s] + (int64_t)b * rec;
        __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)r));
        __m256i isum[XROWS];
        const int8_t* x[XROWS];
        for (int i = 0; i < mt; i++) x[i] = a->q + (int64_t)(m0 + i) * K + 32 * b, isum[i] = _mm256_setzero_si256();
        if (type == GGML_TYPE_Q8_0) {
            for (int j = 0; j < 8; j++) {
                __m256i w = _mm256_loadu_si256((const __m256i*)(r + BYTES + RUN * j));
#if defined(QPACK_VNNI)
                for (int i = 0; i < mt; i++)  /* (q + 128) as u8 times w; 128 wsum taken off below */
                    isum[i] = _mm256_dpbusd_epi32(isum[i], bcast4((const int8_t*)a->u + (x[i] - a->q) + 4 * j), w);
#else
                __m256i aw = _mm256_abs_epi8(w);
                for (int i = 0; i < mt; i++) isum[i] = dp(isum[i], aw, _mm256_sign_epi8(bcast4(x[i] + 4 * j), w));
#endif
            }
#if defined(QPACK_VNNI)
            __m256i wsum = _mm256_slli_epi32(_mm256_loadu_si256((const __m256i*)(r + MINS)), 7);
            for (int i = 0; i < mt; i++) isum[i] = _mm256_sub_epi32(isum[i], wsum);
#endif
        } else {
            for (int j = 0; j < 4; j++) {
                __m256i raw = _mm256_loadu_si256((const __m256i*)(r + NIBBLES + RUN * j));
                __m256i lo = _mm256_and_si256(raw, _mm256_set1_epi8(15));
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), _mm256_set1_epi8(15));
                for (int i = 0; i < mt; i++) isum[i] = dp(dp(isum[i], lo, bcast4(x[i] + 4 * j)), hi, bcast4(x[i] + 16 + 4 * j));
            }
        }
        for (int i = 0; i < mt; i++) {
            int64_t at = (int64_t)(m0 + i) * blocks + b;
            __m256 dx = _mm256_set1_ps(a->d[at]);
            if (type == GGML_TYPE_Q4_0) isum[i] = _mm256_sub_epi32(isum[i], _mm256_set1_epi32(8 * block_sum(a, at)));
            acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(isum[i]), acc[i]);
            if (type == GGML_TYPE_Q4_1) {
                __m256 mw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(r + MINS)));
                acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(mw, dx), _mm256_set1_ps((float)block_sum(a, at)), acc[i]);
            }
        }
    }
    for (int s = 0; s < ng; s++)
        for (int i = 0; i < mt; i++) {
            float* row = y + (int64_t)(m0 + i) * ldy + ns[s];
            if (nrs[s] == GROUP) _mm256_storeu_ps(row, accs[s][i]);
            else {
                float out[GROUP];
                _mm256_storeu_ps(out, accs[s][i]);
                for (int k = 0; k < nrs[s]; k++) row[k] = out[k];
            }
        }
}
#else
#define XROWS 1
/* The packed layout read back one output at a time: qdot.c's scalar loop. */
ALWAYS void group_tile(int type, const uint8_t* const* wps, const int* nrs, const int* ns, int ng, const acts* a, int m0, int mt,
                       int K, float* y, int64_t ldy) {
    int blocks = K / 32, rec = record_bytes(type);
    (void)mt;
    for (int s = 0; s < ng; s++)
    for (int k = 0, nr = nrs[s], n = ns[s]; k < nr; k++) {
        const uint8_t* wp = wps[s];
        float acc = 0.0f;
        for (int b = 0; b < blocks; b++) {
            const uint8_t* r = wp + (int64_t)b * rec;
            const int8_t* x = a->q + (int64_t)m0 * K + 32 * b;
            int64_t at = (int64_t)m0 * blocks + b;
            int32_t isum = 0;
            if (type == GGML_TYPE_Q8_0)
                for (int v = 0; v < 32; v++) isum += (int8_t)r[BYTES + RUN * (v / 4) + 4 * k + v % 4] * x[v];
            else
                for (int v = 0; v < 32; v++) {
                    int byte = r[NIBBLES + RUN * (v % 16 / 4) + 4 * k + v % 4];
                    isum += (v < 16 ? byte & 15 : byte >> 4) * x[v];
                }
            if (type == GGML_TYPE_Q4_0) isum -= 8 * block_sum(a, at);
            float dx = a->d[at];
            acc = fmaf(half_to_float(r + 2 * k) * dx, (float)isum, acc);
            if (type == GGML_TYPE_Q4_1) acc = fmaf(half_to_float(r + MINS + 2 * k) * dx, (float)block_sum(a, at), acc);
        }
        y[(int64_t)m0 * ldy + n + k] = acc;
    }
}
#endif

/* One tile of mt rows over ng groups; constant shapes, so the accumulators stay in registers. */
#define TILE(MT, NG) group_tile(type, p, nr, n, NG, a, m0, MT, K, y, ldy)
ALWAYS void tile(int type, const uint8_t* const* p, const int* nr, const int* n, int ng, const acts* a, int m0, int mt,
                 int K, float* y, int64_t ldy) {
    if (ng == STREAMS && mt <= 2) {
        if (mt == 2) TILE(2, STREAMS); else TILE(1, STREAMS);
        return;
    }
    for (int s = 0; s < ng; s++, p++, nr++, n++)
        switch (mt) {
#if XROWS >= 8
            case 8: TILE(8, 1); break;
            case 7: TILE(7, 1); break;
            case 6: TILE(6, 1); break;
            case 5: TILE(5, 1); break;
#endif
#if XROWS >= 4
            case 4: TILE(4, 1); break;
            case 3: TILE(3, 1); break;
            case 2: TILE(2, 1); break;
#endif
            default: TILE(1, 1); break;
        }
}
#undef TILE

/* Group g's records, its live W rows and its first output column into slot k of groups()'s arrays. */
ALWAYS void locate(int g, int k, const uint8_t* wp, int64_t group_bytes, int N, const uint8_t** p, int* nr, int* n) {
    p[k] = wp + g * group_bytes, nr[k] = N - GROUP * g < GROUP ? N - GROUP * g : GROUP, n[k] = GROUP * g;
}

/* Groups g0 .. g1 - 1 for every row. Up to XROWS rows (a decode step's few rows) the products wait on the weights'
   bytes, and one core fetches several streams from memory faster than one: the range is cut into ng parts read
   side by side, block by block (ng = STREAMS, for one or two rows; at more, reading them side by side costs more
   than it gains; tile() takes a short last set one group at a time). More rows: CHUNK_BYTES of activations at a
   time, which stay in L1 while every group passes over them, each group's records read once per chunk and then
   from cache for every tile of XROWS rows (all rows in one chunk where the range's records are too many to read
   again from cache: the LM head). Every output's steps are the same either way. */
ALWAYS void groups(int type, const acts* a, const uint8_t* wp, float* y, int64_t ldy, int M, int g0, int g1, int N, int K) {
    int64_t group_bytes = (int64_t)(K / 32) * record_bytes(type);
    const uint8_t* p[STREAMS];
    int nr[STREAMS], n[STREAMS];
    if (M <= XROWS) {
        int ng = M <= 2 ? STREAMS : 1, per = (g1 - g0 + ng - 1) / ng;
        for (int i = 0; i < per; i++) {
            int k = 0;
            for (int g = g0 + i; g < g1 && k < ng; g += per) locate(g, k++, wp, group_bytes, N, p, nr, n);
            tile(type, p, nr, n, k, a, 0, M, K, y, ldy);
        }
        return;
    }
    int chunk = CHUNK_BYTES / K / XROWS * XROWS;  /* rows whose activations fit in L1, one tile at least */
    if (chunk < XROWS) chunk = XROWS;
    if ((g1 - g0) * group_bytes > CHUNK_RECORD_BYTES) chunk = M;  /* records too many to read again: all rows at once */
    for (int c0 = 0; c0 < M; c0 += chunk) {
        int c1 = M - c0 < chunk ? M : c0 + chunk;
        for (int g = g0; g < g1; g++) {
            locate(g, 0, wp, group_bytes, N, p, nr, n);
            for (int m0 = c0; m0 < c1; m0 += XROWS) tile(type, p, nr, n, 1, a, m0, c1 - m0 < XROWS ? c1 - m0 : XROWS, K, y, ldy);
        }
    }
}

#define QPACK_TYPE(T) \
    static void groups_##T(const acts* a, const uint8_t* wp, float* y, int64_t ldy, int M, int g0, int g1, int N, int K) { \
        groups(GGML_TYPE_##T, a, wp, y, ldy, M, g0, g1, N, K);                                                         \
    }
QPACK_TYPE(Q4_0) QPACK_TYPE(Q4_1) QPACK_TYPE(Q8_0)

int quant_gemm_x8_packed_quantized(const int8_t* q, const float* d, const int32_t* s, const uint8_t* wp, float* y,
                                   int64_t ldy, int M, int N, int K, int type, int threads) {
    if (qpack_bytes(type, N, K) < 0 || M < 0 || ldy < N) return 1;
    uint8_t* u = NULL;
#if defined(QPACK_VNNI)
    if (type == GGML_TYPE_Q8_0) {
        u = malloc((size_t)M * (size_t)K + 1);
        if (!u) return 2;
        for (int64_t i = 0; i < (int64_t)M * K; i++) u[i] = (uint8_t)(q[i] ^ 0x80);
    }
#endif
    acts a = {q, d, s, u};
    void (*run)(const acts*, const uint8_t*, float*, int64_t, int, int, int, int, int) =
        type == GGML_TYPE_Q4_0 ? groups_Q4_0 : type == GGML_TYPE_Q4_1 ? groups_Q4_1 : groups_Q8_0;
    int count = (N + GROUP - 1) / GROUP, parts = threads < count ? threads : count;  /* threads split N: a range of groups each */
    parts = parts < 1 ? 1 : parts;
    #pragma omp parallel for schedule(static) num_threads(parts) if (parts > 1)
    for (int t = 0; t < parts; t++) run(&a, wp, y, ldy, M, (int)((int64_t)count * t / parts), (int)((int64_t)count * (t + 1) / parts), N, K);
    free(u);
    return 0;
}

#define QUANTIZE_ROWS_PER_THREAD 16
int quant_gemm_x8_packed(const float* x, const uint8_t* wp, float* y, int64_t ldy, int M, int N, int K, int type, int threads) {
    if (qpack_bytes(type, N, K) < 0 || M < 0 || ldy < N) return 1;
    int8_t* q = malloc((size_t)M * (size_t)K + 1);
    float* d = malloc(sizeof(float) * ((size_t)M * (size_t)(K / 32) + 1));
    int32_t* s = malloc(sizeof(int32_t) * ((size_t)M * (size_t)(K / 16) + 1));
    int status = !q || !d || !s ? 2 : 0;
    /* Each row quantized on its own: threads split the rows, QUANTIZE_ROWS_PER_THREAD at least */
    int parts = threads < M / QUANTIZE_ROWS_PER_THREAD ? threads : M / QUANTIZE_ROWS_PER_THREAD;
    parts = parts < 1 ? 1 : parts;
    if (!status) {
        #pragma omp parallel for schedule(static) num_threads(parts) if (parts > 1) reduction(|:status)
        for (int p = 0; p < parts; p++) {
            int m0 = (int)((int64_t)M * p / parts), m1 = (int)((int64_t)M * (p + 1) / parts);
            status |= quantize_x8_sums(x + (int64_t)m0 * K, q + (int64_t)m0 * K, d + (int64_t)m0 * (K / 32),
                                       s + (int64_t)m0 * (K / 16), m1 - m0, K, 32);
        }
    }
    if (!status) status = quant_gemm_x8_packed_quantized(q, d, s, wp, y, ldy, M, N, K, type, threads);
    free(q); free(d); free(s);
    return status;
}
