/* GGUF block formats executed as stored: y (M, N) = x (M, K) W^T with x float32 and W the GGUF tensor's own
   bytes, row n of W at w + n * row_bytes (ggml's layout: each row a run of blocks along K).

   Block layouts (ggml-common.h; f16 = IEEE half, little endian):
     Q4_0  32 values, 18 bytes: f16 d, 16 bytes qs.   value l: d * ((qs[l] & 15) - 8), value 16 + l: d * ((qs[l] >> 4) - 8)
     Q4_1  32 values, 20 bytes: f16 d, f16 m, qs[16]. d * q + m with q the nibble as above (no offset)
     Q8_0  32 values, 34 bytes: f16 d, int8 qs[32].   qs[l] * d
     Q4_K 256 values, 144 bytes: f16 d, f16 dmin, 12 bytes of 8 6-bit (scale, min) pairs, qs[128]: group g of 32
           values reads the low (g even) or high nibbles of qs[32 (g / 2) ..]; (d * scale_g) * q - dmin * min_g
     Q5_K 256 values, 176 bytes: as Q4_K with qh[32] after the scales: q = nibble | bit g of qh[l] << 4
     Q6_K 256 values, 210 bytes: ql[128], qh[64], int8 scales[16], f16 d: value h 128 + k 32 + l (h < 2, k < 4,
           l < 32) is ((ql[64 h + 32 (k % 2) + l] >> 4 (k / 2)) & 15 | ((qh[32 h + l] >> 2 k) & 3) << 4) - 32,
           times (d * scales[v / 16])
   Each value is computed with exactly the float32 operations of gguf's `dequantize` (gguf-py quants.py, what
   transformers' GGUF loader and so quench's float32 path use): one product, then the one sum or difference,
   each rounded (the unit is compiled with -ffp-contract=off, so the compiler fuses nothing); the f16 scales are
   widened exactly. Q4_1's d q and the K formats' (d scale) q are exact in float32 (11-bit d, 6-bit scale, 5-bit
   q: at most 22 significant bits), so the vector builds fuse that product with its + m / - dmin min: one rounding
   of the same exact sum, the same bits, one instruction fewer. Q6_K's (d scale) q can round, so it stays a
   product. `dequantize_rows` writes the values out (tests compare them with gguf's bit for bit).

   The product expands one group of 32 values of a row into registers (scalar: a 32-float array) and never
   stores it. Summation order, the same in every build: each output is 32 float32 lanes, lane l summing
   x[k] w[k] for k = l (mod 32) in increasing k by fused multiply-adds from zero, then lanes j, 8 + j, 16 + j,
   24 + j added as (L[j] + L[8 + j]) + (L[16 + j] + L[24 + j]) and those 8 as ((s0 + s4) + (s2 + s6)) +
   ((s1 + s5) + (s3 + s7)). So an output's bits depend on its x row and W row only: not on M, on the other
   rows, on the threads (which split N), nor on the build (scalar, AVX2 + FMA + F16C, AVX-512, NEON). */
#include "quench_native.h"
#include "half.h"

#include <math.h>
#include <string.h>
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define QUANT_AVX2 1
#elif defined(__aarch64__) && defined(__ARM_NEON)
#define QUANT_NEON 1
#endif
#if defined(QUANT_AVX2) && defined(__AVX512F__) && defined(__AVX512DQ__)
#define QUANT_AVX512 1
#endif

/* Every type's product is its own function (`type` a constant there), so each inner loop holds one format. */
#define ALWAYS static inline __attribute__((always_inline))

typedef struct { int values, bytes; } block_format;

static block_format format_of(int type) {
    switch (type) {
        case GGML_TYPE_Q4_0: return (block_format){32, 18};
        case GGML_TYPE_Q4_1: return (block_format){32, 20};
        case GGML_TYPE_Q8_0: return (block_format){32, 34};
        case GGML_TYPE_Q4_K: return (block_format){256, 144};
        case GGML_TYPE_Q5_K: return (block_format){256, 176};
        case GGML_TYPE_Q6_K: return (block_format){256, 210};
        default: return (block_format){0, 0};
    }
}

int64_t quant_row_bytes(int type, int K) {
    block_format f = format_of(type);
    if (f.values == 0 || K <= 0 || K % f.values) return -1;
    return (int64_t)(K / f.values) * f.bytes;
}

int quant_level(void) {
#if defined(QUANT_AVX512)
    return 2;
#elif defined(QUANT_AVX2)
    return 1;
#elif defined(QUANT_NEON)
    return 3;
#else
    return 0;
#endif
}

/* Per-block scalars: Q4_K / Q5_K's 8 (d * scale, dmin * min), Q6_K's 16 d * scale, the others' d and m. */
typedef struct { float d[16], m[8]; } block_scales;

ALWAYS void k_scale_min(const uint8_t* s, int g, int* scale, int* min) {
    if (g < 4) { *scale = s[g] & 63; *min = s[g + 4] & 63; }
    else { *scale = (s[g + 4] & 15) | ((s[g - 4] >> 6) << 4); *min = (s[g + 4] >> 4) | ((s[g] >> 6) << 4); }
}

ALWAYS void read_scales(int type, const uint8_t* b, block_scales* sc) {
    if (type == GGML_TYPE_Q4_0 || type == GGML_TYPE_Q8_0) { sc->d[0] = half_to_float(b); return; }
    if (type == GGML_TYPE_Q4_1) { sc->d[0] = half_to_float(b); sc->m[0] = half_to_float(b + 2); return; }
    if (type == GGML_TYPE_Q6_K) {
        float d = half_to_float(b + 208);
        for (int i = 0; i < 16; i++) sc->d[i] = d * (float)(int8_t)b[192 + i];
        return;
    }
    float d = half_to_float(b), dmin = half_to_float(b + 2);  /* Q4_K, Q5_K */
    for (int g = 0; g < 8; g++) {
        int scale, min;
        k_scale_min(b + 4, g, &scale, &min);
        sc->d[g] = d * (float)scale;
        sc->m[g] = dmin * (float)min;
    }
}

#if defined(QUANT_AVX2)
/* 32 values (group g of a block) as four vectors of 8: lane order k mod 32. */
typedef struct { __m256 v[4]; } group32;

static inline __m256i bytes8(const uint8_t* p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)p)); }
static inline __m256i bits(__m256i v, int shift, int mask) {
    return _mm256_and_si256(_mm256_srli_epi32(v, shift), _mm256_set1_epi32(mask));
}

ALWAYS group32 expand(int type, const uint8_t* b, int g, const block_scales* sc) {
    group32 w;
    if (type == GGML_TYPE_Q8_0) {
        __m256 d = _mm256_set1_ps(sc->d[0]);
        for (int j = 0; j < 4; j++)
            w.v[j] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)(b + 2 + 8 * j)))), d);
    } else if (type == GGML_TYPE_Q4_0 || type == GGML_TYPE_Q4_1) {
        const uint8_t* qs = b + (type == GGML_TYPE_Q4_0 ? 2 : 4);
        for (int j = 0; j < 2; j++) {
            __m256i q = bytes8(qs + 8 * j);
            w.v[j] = _mm256_cvtepi32_ps(_mm256_and_si256(q, _mm256_set1_epi32(15)));
            w.v[j + 2] = _mm256_cvtepi32_ps(_mm256_srli_epi32(q, 4));
        }
        __m256 d = _mm256_set1_ps(sc->d[0]);
        for (int j = 0; j < 4; j++) {
            if (type == GGML_TYPE_Q4_0)  /* (q - 8) exactly, then d * it */
                w.v[j] = _mm256_mul_ps(d, _mm256_sub_ps(w.v[j], _mm256_set1_ps(8.0f)));
            else
                w.v[j] = _mm256_fmadd_ps(d, w.v[j], _mm256_set1_ps(sc->m[0]));  /* d q exact: one rounding either way */
        }
    } else if (type == GGML_TYPE_Q6_K) {
        int h = g / 4, k = g % 4;
        const uint8_t* ql = b + 64 * h + 32 * (k % 2);
        const uint8_t* qh = b + 128 + 32 * h;
        for (int j = 0; j < 4; j++) {
            __m256i q = _mm256_or_si256(bits(bytes8(ql + 8 * j), 4 * (k / 2), 15),
                                        _mm256_slli_epi32(bits(bytes8(qh + 8 * j), 2 * k, 3), 4));
            __m256 f = _mm256_cvtepi32_ps(_mm256_sub_epi32(q, _mm256_set1_epi32(32)));
            w.v[j] = _mm256_mul_ps(_mm256_set1_ps(sc->d[2 * g + j / 2]), f);
        }
    } else {  /* Q4_K, Q5_K */
        const uint8_t* qs = b + (type == GGML_TYPE_Q4_K ? 16 : 48) + 32 * (g / 2);
        __m256 d = _mm256_set1_ps(sc->d[g]), m = _mm256_set1_ps(sc->m[g]);
        for (int j = 0; j < 4; j++) {
            __m256i q = bits(bytes8(qs + 8 * j), 4 * (g & 1), 15);
            if (type == GGML_TYPE_Q5_K) q = _mm256_or_si256(q, _mm256_slli_epi32(bits(bytes8(b + 16 + 8 * j), g, 1), 4));
            w.v[j] = _mm256_fmsub_ps(d, _mm256_cvtepi32_ps(q), m);  /* (d scale) q exact: as mul, sub */
        }
    }
    return w;
}

static inline void store_group(float* out, group32 w) {
    for (int j = 0; j < 4; j++) _mm256_storeu_ps(out + 8 * j, w.v[j]);
}

/* The fixed reduction of the header comment, from the 8 sums (L[j] + L[8 + j]) + (L[16 + j] + L[24 + j]). */
static inline float reduce8(__m256 s) {
    __m128 u = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));  /* s_j + s_{j+4} */
    __m128 p = _mm_add_ps(u, _mm_movehl_ps(u, u));                                   /* (u0 + u2), (u1 + u3) */
    return _mm_cvtss_f32(_mm_add_ss(p, _mm_shuffle_ps(p, p, 1)));
}
#elif defined(QUANT_NEON)
#include "quant_neon.h"
#else
typedef struct { float v[32]; } group32;

ALWAYS group32 expand(int type, const uint8_t* b, int g, const block_scales* sc) {
    group32 w;
    for (int l = 0; l < 32; l++) {
        float v;
        if (type == GGML_TYPE_Q8_0) v = (float)(int8_t)b[2 + l] * sc->d[0];
        else if (type == GGML_TYPE_Q4_0) v = sc->d[0] * (float)(((b[2 + l % 16] >> 4 * (l / 16)) & 15) - 8);
        else if (type == GGML_TYPE_Q4_1) v = sc->d[0] * (float)((b[4 + l % 16] >> 4 * (l / 16)) & 15) + sc->m[0];
        else if (type == GGML_TYPE_Q6_K) {
            int h = g / 4, k = g % 4;
            int q = ((b[64 * h + 32 * (k % 2) + l] >> 4 * (k / 2)) & 15) | ((b[128 + 32 * h + l] >> 2 * k) & 3) << 4;
            v = sc->d[2 * g + l / 16] * (float)(q - 32);
        } else {
            int q = (b[(type == GGML_TYPE_Q4_K ? 16 : 48) + 32 * (g / 2) + l] >> 4 * (g & 1)) & 15;
            if (type == GGML_TYPE_Q5_K) q |= ((b[16 + l] >> g) & 1) << 4;
            v = sc->d[g] * (float)q - sc->m[g];
        }
        w.v[l] = v;
    }
    return w;
}

static inline void store_group(float* out, group32 w) { memcpy(out, w.v, sizeof w.v); }
#endif

#if defined(QUANT_AVX512)
/* 32 values as two vectors of 16 (lanes 0-15, 16-31): the same values as `expand`, 16 at a time. */
typedef struct { __m512 lo, hi; } group32x;

static inline __m512i bytes16(const uint8_t* p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)p)); }
static inline __m512i bits16(__m512i v, int shift, int mask) {
    return _mm512_and_si512(_mm512_srli_epi32(v, shift), _mm512_set1_epi32(mask));
}

ALWAYS group32x expand16(int type, const uint8_t* b, int g, const block_scales* sc) {
    __m512 w[2];
    if (type == GGML_TYPE_Q8_0) {
        for (int j = 0; j < 2; j++)
            w[j] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(b + 2 + 16 * j)))),
                                 _mm512_set1_ps(sc->d[0]));
    } else if (type == GGML_TYPE_Q4_0 || type == GGML_TYPE_Q4_1) {
        __m512i q = bytes16(b + (type == GGML_TYPE_Q4_0 ? 2 : 4));
        w[0] = _mm512_cvtepi32_ps(_mm512_and_si512(q, _mm512_set1_epi32(15)));
        w[1] = _mm512_cvtepi32_ps(_mm512_srli_epi32(q, 4));
        __m512 d = _mm512_set1_ps(sc->d[0]);
        for (int j = 0; j < 2; j++) {
            if (type == GGML_TYPE_Q4_0) w[j] = _mm512_mul_ps(d, _mm512_sub_ps(w[j], _mm512_set1_ps(8.0f)));
            else w[j] = _mm512_fmadd_ps(d, w[j], _mm512_set1_ps(sc->m[0]));  /* d q exact: one rounding either way */
        }
    } else if (type == GGML_TYPE_Q6_K) {
        int h = g / 4, k = g % 4;
        const uint8_t* ql = b + 64 * h + 32 * (k % 2);
        const uint8_t* qh = b + 128 + 32 * h;
        for (int j = 0; j < 2; j++) {
            __m512i q = _mm512_or_si512(bits16(bytes16(ql + 16 * j), 4 * (k / 2), 15),
                                        _mm512_slli_epi32(bits16(bytes16(qh + 16 * j), 2 * k, 3), 4));
            __m512 f = _mm512_cvtepi32_ps(_mm512_sub_epi32(q, _mm512_set1_epi32(32)));
            w[j] = _mm512_mul_ps(_mm512_set1_ps(sc->d[2 * g + j]), f);
        }
    } else {  /* Q4_K, Q5_K */
        const uint8_t* qs = b + (type == GGML_TYPE_Q4_K ? 16 : 48) + 32 * (g / 2);
        __m512 d = _mm512_set1_ps(sc->d[g]), m = _mm512_set1_ps(sc->m[g]);
        for (int j = 0; j < 2; j++) {
            __m512i q = bits16(bytes16(qs + 16 * j), 4 * (g & 1), 15);
            if (type == GGML_TYPE_Q5_K) q = _mm512_or_si512(q, _mm512_slli_epi32(bits16(bytes16(b + 16 + 16 * j), g, 1), 4));
            w[j] = _mm512_fmsub_ps(d, _mm512_cvtepi32_ps(q), m);  /* (d scale) q exact: as mul, sub */
        }
    }
    return (group32x){w[0], w[1]};
}
#endif

int dequantize_rows(const uint8_t* w, float* out, int N, int K, int type) {
    block_format f = format_of(type);
    int64_t row_bytes = quant_row_bytes(type, K);
    if (row_bytes < 0 || N < 0) return 1;
    for (int64_t n = 0; n < N; n++)
        for (int blk = 0; blk < K / f.values; blk++) {
            const uint8_t* b = w + n * row_bytes + (int64_t)blk * f.bytes;
            float* o = out + n * K + (int64_t)blk * f.values;
            block_scales sc;
            read_scales(type, b, &sc);
            for (int g = 0; g < f.values / 32; g++) {
#if defined(QUANT_AVX512)
                group32x v = expand16(type, b, g, &sc);
                _mm512_storeu_ps(o + 32 * g, v.lo);
                _mm512_storeu_ps(o + 32 * g + 16, v.hi);
#else
                store_group(o + 32 * g, expand(type, b, g, &sc));
#endif
            }
        }
    return 0;
}

/* One W row against mt <= ROW_TILE rows of x (xr[i]): out[i] = x_i . w, in the header comment's order. */
#if defined(QUANT_AVX512)
#define ROW_TILE 8
#define TWO_BY_TWO 1
/* Lanes 0-15 and 16-31 in two 16-wide accumulators: the same lanes and order as the AVX2 build's four. */
ALWAYS void row_dot(int type, int nr, int mt, const uint8_t* row, int64_t row_bytes, const float* const* xr, int K,
                    float* out) {
    block_format f = format_of(type);
    __m512 acc[4][ROW_TILE][2];
    for (int r = 0; r < nr; r++)
        for (int i = 0; i < mt; i++) acc[r][i][0] = acc[r][i][1] = _mm512_setzero_ps();
    for (int k0 = 0; k0 < K; k0 += f.values) {
        for (int r = 0; r < nr; r++) {
            const uint8_t* b = row + r * row_bytes + (int64_t)(k0 / f.values) * f.bytes;
            block_scales sc;
            read_scales(type, b, &sc);
            for (int g = 0; g < f.values / 32; g++) {
                group32x w = expand16(type, b, g, &sc);
                int k = k0 + 32 * g;
                for (int i = 0; i < mt; i++) {
                    acc[r][i][0] = _mm512_fmadd_ps(_mm512_loadu_ps(xr[i] + k), w.lo, acc[r][i][0]);
                    acc[r][i][1] = _mm512_fmadd_ps(_mm512_loadu_ps(xr[i] + k + 16), w.hi, acc[r][i][1]);
                }
            }
        }
    }
    for (int r = 0; r < nr; r++)
        for (int i = 0; i < mt; i++) {
            __m256 a = _mm256_add_ps(_mm512_castps512_ps256(acc[r][i][0]), _mm512_extractf32x8_ps(acc[r][i][0], 1));
            __m256 c = _mm256_add_ps(_mm512_castps512_ps256(acc[r][i][1]), _mm512_extractf32x8_ps(acc[r][i][1], 1));
            out[r * ROW_TILE + i] = reduce8(_mm256_add_ps(a, c));
        }
}
#elif defined(QUANT_AVX2)
#define ROW_TILE 2
#define TWO_BY_TWO 1  /* two x rows may take two W rows side by side */
ALWAYS void row_dot(int type, int nr, int mt, const uint8_t* row, int64_t row_bytes, const float* const* xr, int K,
                    float* out) {
    block_format f = format_of(type);
    __m256 acc[2][ROW_TILE][4];
    for (int r = 0; r < nr; r++)
        for (int i = 0; i < mt; i++)
            for (int j = 0; j < 4; j++) acc[r][i][j] = _mm256_setzero_ps();
    for (int k0 = 0; k0 < K; k0 += f.values) {
        for (int r = 0; r < nr; r++) {
            const uint8_t* b = row + r * row_bytes + (int64_t)(k0 / f.values) * f.bytes;
            block_scales sc;
            read_scales(type, b, &sc);
            for (int g = 0; g < f.values / 32; g++) {
                group32 w = expand(type, b, g, &sc);
                int k = k0 + 32 * g;
                for (int i = 0; i < mt; i++)
                    for (int j = 0; j < 4; j++)
                        acc[r][i][j] = _mm256_fmadd_ps(_mm256_loadu_ps(xr[i] + k + 8 * j), w.v[j], acc[r][i][j]);
            }
        }
    }
    for (int r = 0; r < nr; r++)
        for (int i = 0; i < mt; i++)
            out[r * ROW_TILE + i] = reduce8(_mm256_add_ps(_mm256_add_ps(acc[r][i][0], acc[r][i][1]),
                                                          _mm256_add_ps(acc[r][i][2], acc[r][i][3])));
}
#elif defined(QUANT_NEON)
/* The AVX2 build's lanes and order, a vector per 4 lanes: 8 accumulators per (W row, x row), so two pairs at a
   time (2 x 1 or 1 x 2: 16 of the 32 vector registers beside the expanded group's 8), never 2 x 2. */
#define ROW_TILE 2
#define TWO_BY_TWO 0
ALWAYS void row_dot(int type, int nr, int mt, const uint8_t* row, int64_t row_bytes, const float* const* xr, int K,
                    float* out) {
    block_format f = format_of(type);
    float32x4_t acc[2][ROW_TILE][8];
    for (int r = 0; r < nr; r++)
        for (int i = 0; i < mt; i++)
            for (int j = 0; j < 8; j++) acc[r][i][j] = vdupq_n_f32(0.0f);
    for (int k0 = 0; k0 < K; k0 += f.values) {
        for (int r = 0; r < nr; r++) {
            const uint8_t* b = row + r * row_bytes + (int64_t)(k0 / f.values) * f.bytes;
            block_scales sc;
            read_scales(type, b, &sc);
            for (int g = 0; g < f.values / 32; g++) {
                group32 w = expand(type, b, g, &sc);
                int k = k0 + 32 * g;
                for (int i = 0; i < mt; i++)
                    for (int j = 0; j < 8; j++)
                        acc[r][i][j] = vfmaq_f32(acc[r][i][j], vld1q_f32(xr[i] + k + 4 * j), w.v[j]);
            }
        }
    }
    for (int r = 0; r < nr; r++)
        for (int i = 0; i < mt; i++) out[r * ROW_TILE + i] = reduce32(acc[r][i]);
}
#else
#define ROW_TILE 1
ALWAYS void row_dot(int type, int nr, int mt, const uint8_t* row, int64_t row_bytes, const float* const* xr, int K,
                    float* out) {
    block_format f = format_of(type);
    float acc[32] = {0};
    (void)nr, (void)mt, (void)row_bytes;
    for (int k0 = 0; k0 < K; k0 += f.values) {
        const uint8_t* b = row + (int64_t)(k0 / f.values) * f.bytes;
        block_scales sc;
        read_scales(type, b, &sc);
        for (int g = 0; g < f.values / 32; g++) {
            group32 w = expand(type, b, g, &sc);
            int k = k0 + 32 * g;
            for (int l = 0; l < 32; l++) acc[l] = fmaf(xr[0][k + l], w.v[l], acc[l]);
        }
    }
    float s[8];
    for (int j = 0; j < 8; j++) s[j] = (acc[j] + acc[8 + j]) + (acc[16 + j] + acc[24 + j]);
    out[0] = ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}
#endif

/* W rows n0 .. n1 - 1 of one type against every row of x, ROW_TILE rows of x at a time; one or two rows of x
   take several W rows side by side (independent sums in flight while each waits on its fused multiply-adds). */
ALWAYS void gemm_rows(int type, const float* x, const uint8_t* w, float* y, int64_t ldy, int M, int n0, int n1, int K) {
    int64_t row_bytes = quant_row_bytes(type, K);
    const float* xr[ROW_TILE];
    float out[4 * ROW_TILE] = {0};  /* row_dot writes every entry read; zeroed for gcc's flow analysis */
    for (int m0 = 0; m0 < M; m0 += ROW_TILE) {
        int mt = M - m0 < ROW_TILE ? M - m0 : ROW_TILE;
        for (int i = 0; i < mt; i++) xr[i] = x + (int64_t)(m0 + i) * K;
        for (int n = n0; n < n1;) {
            const uint8_t* row = w + (int64_t)n * row_bytes;
            int nr = 1;
            switch (mt) {  /* constant tile shapes, so the accumulators stay in registers */
#if ROW_TILE >= 8
                case 8: row_dot(type, 1, 8, row, row_bytes, xr, K, out); break;
                case 7: row_dot(type, 1, 7, row, row_bytes, xr, K, out); break;
                case 6: row_dot(type, 1, 6, row, row_bytes, xr, K, out); break;
                case 5: row_dot(type, 1, 5, row, row_bytes, xr, K, out); break;
                case 4: row_dot(type, 1, 4, row, row_bytes, xr, K, out); break;
                case 3: row_dot(type, 1, 3, row, row_bytes, xr, K, out); break;
#endif
#if ROW_TILE >= 2
                case 2:
                    if (n + 2 <= n1 && TWO_BY_TWO) { nr = 2; row_dot(type, 2, 2, row, row_bytes, xr, K, out); }
                    else row_dot(type, 1, 2, row, row_bytes, xr, K, out);
                    break;
                default:
                    if (n + ROW_TILE / 2 <= n1 && ROW_TILE >= 8) { nr = 4; row_dot(type, 4, 1, row, row_bytes, xr, K, out); }
                    else if (n + 2 <= n1) { nr = 2; row_dot(type, 2, 1, row, row_bytes, xr, K, out); }
                    else row_dot(type, 1, 1, row, row_bytes, xr, K, out);
                    break;
#else
                default: row_dot(type, 1, 1, row, row_bytes, xr, K, out); break;
#endif
            }
            for (int r = 0; r < nr; r++)
                for (int i = 0; i < mt; i++) y[(int64_t)(m0 + i) * ldy + n + r] = out[r * ROW_TILE + i];
            n += nr;
        }
    }
}

#define GEMM_TYPE(T) \
    static void gemm_rows_##T(const float* x, const uint8_t* w, float* y, int64_t ldy, int M, int n0, int n1, int K) { \
        gemm_rows(GGML_TYPE_##T, x, w, y, ldy, M, n0, n1, K);                                          \
    }
GEMM_TYPE(Q4_0) GEMM_TYPE(Q4_1) GEMM_TYPE(Q8_0) GEMM_TYPE(Q4_K) GEMM_TYPE(Q5_K) GEMM_TYPE(Q6_K)

typedef void (*gemm_rows_fn)(const float*, const uint8_t*, float*, int64_t, int, int, int, int);

int quant_gemm_f32(const float* x, const uint8_t* w, float* y, int64_t ldy, int M, int N, int K, int type, int threads) {
    if (quant_row_bytes(type, K) < 0 || M < 0 || N < 0 || ldy < N) return 1;
    gemm_rows_fn rows = type == GGML_TYPE_Q4_0 ? gemm_rows_Q4_0 : type == GGML_TYPE_Q4_1 ? gemm_rows_Q4_1
                      : type == GGML_TYPE_Q8_0 ? gemm_rows_Q8_0 : type == GGML_TYPE_Q4_K ? gemm_rows_Q4_K
                      : type == GGML_TYPE_Q5_K ? gemm_rows_Q5_K : gemm_rows_Q6_K;
    threads = threads < 1 ? 1 : threads;
    int chunks = (N + 15) / 16;  /* 16 W rows per chunk: threads split N, never K */
    #pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1 && chunks > 1)
    for (int c = 0; c < chunks; c++) rows(x, w, y, ldy, M, 16 * c, 16 * c + 16 < N ? 16 * c + 16 : N, K);
    return 0;
}
