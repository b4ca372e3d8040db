/* GGUF blocks times 8-bit activations, integer sums (llama.cpp's scheme in one fixed order): y (M, N) = x (M, K)
   W^T with W the GGUF tensor's own bytes (quant.c's block layouts, row n at w + n * row_bytes) and each row of x
   quantized once per call, reused for every output.

   Activations: a row of x in blocks of B values (B = 32 for Q4_0, Q4_1, Q8_0; 256 for Q4_K, Q5_K, Q6_K), each
   block on its own:
     a  = the largest |x_i| of the block (compared as bit patterns, so a NaN counts above infinity);
     a not finite: d = NaN and every q_i = 0; else d = a / 127 (float32 division) and q_i = 0 where d == 0, else
     q_i = rint(x_i / d) (float32 division, rounded to nearest even) clamped to [-127, 127];
   and s_j = the sum of q over values 16 j .. 16 j + 15 of the row. `quantize_x8_sums` computes this 16 values at a
   time where the build has vectors (AVX2, AVX-512, NEON): the float32 division and the rounding to nearest even are
   correctly rounded in every unit, the clamp is a min and a max of integral values, so the same bits as the scalar
   loop (denormals as they come: no unit flushes them).

   Integer sums per (W row, block b), w the stored integers (quant.c's header comment), exact in int32:
     Q8_0        I = sum w_i q_i
     Q4_0        I = sum w_i q_i - 8 (sum q_i)                           (w the nibble)
     Q4_1        I = sum w_i q_i,                      J = sum q_i
     Q4_K, Q5_K  I = sum_g scale_g sum_{i in g} w_i q_i,  J = sum_g min_g (s_2g + s_2g+1)  (g: 8 groups of 32)
     Q6_K        I = sum_j scale_j sum_{i in j} w_i q_i - 32 sum_j scale_j s_j             (j: 16 groups of 16)
   Float, the one order of every build: acc = 0, then for b = 0, 1, ... in turn
     acc = fmaf(dw_b * dx_b, (float)I_b, acc), and for the types with a J
     acc = fmaf(mw_b * dx_b, (float)J_b, acc),
   dw the block's f16 d (Q6_K's d; its sub-block scales are in I), mw Q4_1's m or the K types' -dmin, every f16
   widened exactly. The vector builds compute the integer sums with other instructions (AVX2 maddubs + madd,
   AVX512-VNNI dpbusd, NEON sdot or smull) and reduce them exactly, and run the float steps with one output per lane, blocks in
   sequence: the same operations on the same values, so the same bits on every build, for every M and thread
   count (threads split N). */
#include "quench_native.h"
#include "half.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define QDOT_AVX2 1
#elif defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
#define QDOT_NEON 1
#endif
#if defined(QDOT_AVX2) && defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define QDOT_VNNI 1
#endif

#define ALWAYS static inline __attribute__((always_inline))

int qdot_level(void) {
#if defined(QDOT_VNNI)
    return 2;
#elif defined(QDOT_AVX2)
    return 1;
#elif defined(QDOT_NEON)
    return 3;
#else
    return 0;
#endif
}

static int block_bytes(int type) {
    switch (type) {
        case GGML_TYPE_Q4_0: return 18;
        case GGML_TYPE_Q4_1: return 20;
        case GGML_TYPE_Q8_0: return 34;
        case GGML_TYPE_Q4_K: return 144;
        case GGML_TYPE_Q5_K: return 176;
        case GGML_TYPE_Q6_K: return 210;
        default: return 0;
    }
}

ALWAYS int block_values(int type) { return type >= GGML_TYPE_Q4_K ? 256 : 32; }
ALWAYS int has_min(int type) { return type == GGML_TYPE_Q4_1 || type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q5_K; }

/* ---- activations ---- */

/* The largest |v_i| of n values as bits (n a multiple of 16). */
ALWAYS uint32_t top_bits(const float* v, int n) {
#if defined(__AVX512F__)
    __m512i top = _mm512_setzero_si512(), magnitude = _mm512_set1_epi32(0x7fffffff);
    for (int i = 0; i < n; i += 16) top = _mm512_max_epu32(top, _mm512_and_si512(_mm512_loadu_si512(v + i), magnitude));
    return _mm512_reduce_max_epu32(top);
#elif defined(QDOT_AVX2)
    __m256i top = _mm256_setzero_si256(), magnitude = _mm256_set1_epi32(0x7fffffff);
    for (int i = 0; i < n; i += 8) top = _mm256_max_epu32(top, _mm256_and_si256(_mm256_loadu_si256((const __m256i*)(v + i)), magnitude));
    __m128i r = _mm_max_epu32(_mm256_castsi256_si128(top), _mm256_extracti128_si256(top, 1));
    r = _mm_max_epu32(r, _mm_shuffle_epi32(r, 0x4e));
    return (uint32_t)_mm_cvtsi128_si32(_mm_max_epu32(r, _mm_shuffle_epi32(r, 0xb1)));
#elif defined(QDOT_NEON)
    uint32x4_t top = vdupq_n_u32(0);
    for (int i = 0; i < n; i += 4) top = vmaxq_u32(top, vandq_u32(vld1q_u32((const uint32_t*)(v + i)), vdupq_n_u32(0x7fffffff)));
    return vmaxvq_u32(top);
#else
    uint32_t top = 0;
    for (int i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, v + i, 4);
        bits &= 0x7fffffffu;
        top = bits > top ? bits : top;
    }
    return top;
#endif
}

/* q_i = rint(v_i / d) clamped to [-127, 127] for n values (d finite, nonzero) and, where s is not NULL, their sums
   of 16. */
ALWAYS void quantize_values(const float* v, float d, int n, int8_t* q, int32_t* s) {
#if defined(__AVX512F__)
    __m512 dv = _mm512_set1_ps(d), lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
    for (int i = 0; i < n; i += 16) {
        __m512 t = _mm512_roundscale_ps(_mm512_div_ps(_mm512_loadu_ps(v + i), dv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m512i r = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(t, lo), hi));  /* integral: converted exactly */
        _mm_storeu_si128((__m128i*)(q + i), _mm512_cvtepi32_epi8(r));
        if (s) s[i / 16] = _mm512_reduce_add_epi32(r);
    }
#elif defined(QDOT_AVX2)
    __m256 dv = _mm256_set1_ps(d), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    for (int i = 0; i < n; i += 16) {
        __m256i r[2];
        for (int h = 0; h < 2; h++) {
            __m256 t = _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(v + i + 8 * h), dv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            r[h] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(t, lo), hi));
        }
        __m128i a = _mm_packs_epi32(_mm256_castsi256_si128(r[0]), _mm256_extracti128_si256(r[0], 1));
        __m128i b = _mm_packs_epi32(_mm256_castsi256_si128(r[1]), _mm256_extracti128_si256(r[1], 1));
        _mm_storeu_si128((__m128i*)(q + i), _mm_packs_epi16(a, b));
        if (s) {
            __m256i both = _mm256_add_epi32(r[0], r[1]);
            __m128i t = _mm_add_epi32(_mm256_castsi256_si128(both), _mm256_extracti128_si256(both, 1));
            t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4e));
            s[i / 16] = _mm_cvtsi128_si32(_mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1)));
        }
    }
#elif defined(QDOT_NEON)
    float32x4_t dv = vdupq_n_f32(d), lo = vdupq_n_f32(-127.0f), hi = vdupq_n_f32(127.0f);
    for (int i = 0; i < n; i += 16) {
        int32x4_t r[4];
        for (int k = 0; k < 4; k++)  /* FDIV, FRINTN (nearest even), FCVTZS exact on integral values */
            r[k] = vcvtq_s32_f32(vminq_f32(vmaxq_f32(vrndnq_f32(vdivq_f32(vld1q_f32(v + i + 4 * k), dv)), lo), hi));
        int16x8_t a = vcombine_s16(vmovn_s32(r[0]), vmovn_s32(r[1])), b = vcombine_s16(vmovn_s32(r[2]), vmovn_s32(r[3]));
        vst1q_s8(q + i, vcombine_s8(vmovn_s16(a), vmovn_s16(b)));
        if (s) s[i / 16] = vaddvq_s32(vaddq_s32(vaddq_s32(r[0], r[1]), vaddq_s32(r[2], r[3])));
    }
#else
    for (int i = 0; i < n; i++) {
        float t = rintf(v[i] / d);
        q[i] = (int8_t)(t > 127.0f ? 127 : t < -127.0f ? -127 : (int)t);
    }
    for (int j = 0; s && j < n / 16; j++) {
        int32_t t = 0;
        for (int i = 0; i < 16; i++) t += q[16 * j + i];
        s[j] = t;
    }
#endif
}

/* quantize_x8 with the sums of 16 where s is not NULL. */
static int quantize_rows(const float* x, int8_t* q, float* d, int32_t* s, int M, int K, int block) {
    if ((block != 32 && block != 256) || M < 0 || K <= 0 || K % block) return 1;
    for (int64_t b = 0; b < (int64_t)M * (K / block); b++) {
        const float* v = x + b * block;
        uint32_t top = top_bits(v, block);
        float a;
        memcpy(&a, &top, 4);
        float scale = top >= 0x7f800000u ? NAN : a / 127.0f;
        d[b] = scale;
        if (scale != 0.0f && top < 0x7f800000u) quantize_values(v, scale, block, q + b * block, s ? s + b * (block / 16) : NULL);
        else {
            memset(q + b * block, 0, (size_t)block);
            if (s) memset(s + b * (block / 16), 0, sizeof(int32_t) * (size_t)(block / 16));
        }
    }
    return 0;
}

int quantize_x8(const float* x, int8_t* q, float* d, int M, int K, int block) { return quantize_rows(x, q, d, NULL, M, K, block); }

int quantize_x8_sums(const float* x, int8_t* q, float* d, int32_t* s, int M, int K, int block) {
    return quantize_rows(x, q, d, s, M, K, block);
}

/* A call's quantized x: q (M, K), d (M, K / B), s (M, K / 16). */
typedef struct { int8_t* q; float* d; int32_t* s; } acts;

/* ---- per (W row, block): the scalar parts every build shares ---- */

ALWAYS void k_scale_min(const uint8_t* s, int g, int* scale, int* min) {
    if (g < 4) { *scale = s[g] & 63; *min = s[g + 4] & 63; }
    else { *scale = (s[g + 4] & 15) | ((s[g - 4] >> 6) << 4); *min = (s[g + 4] >> 4) | ((s[g] >> 6) << 4); }
}

/* I's terms outside sum w q (Q4_0's and Q6_K's offsets) and J, from the block and x's 16-sums s (of this block). */
ALWAYS void block_terms(int type, const uint8_t* b, const int32_t* s, int32_t* offset, int32_t* j) {
    *offset = 0, *j = 0;
    if (type == GGML_TYPE_Q4_0) *offset = -8 * (s[0] + s[1]);
    else if (type == GGML_TYPE_Q4_1) *j = s[0] + s[1];
    else if (type == GGML_TYPE_Q6_K) {
        int32_t t = 0;
        for (int k = 0; k < 16; k++) t += (int8_t)b[192 + k] * s[k];
        *offset = -32 * t;
    } else if (type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q5_K) {
        for (int g = 0; g < 8; g++) {
            int scale, min;
            k_scale_min(b + 4, g, &scale, &min);
            *j += min * (s[2 * g] + s[2 * g + 1]);
        }
    }
}

ALWAYS void block_floats(int type, const uint8_t* b, float* dw, float* mw) {
    *mw = 0.0f;
    if (type == GGML_TYPE_Q6_K) *dw = half_to_float(b + 208);
    else *dw = half_to_float(b);
    if (type == GGML_TYPE_Q4_1) *mw = half_to_float(b + 2);
    else if (type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q5_K) *mw = -half_to_float(b + 2);
}

/* Stored integer i (< 32) of group g of a block, as the formula's w (Q6_K: 0 .. 63, before its - 32). */
ALWAYS int weight_int(int type, const uint8_t* b, int g, int i) {
    switch (type) {
        case GGML_TYPE_Q8_0: return (int8_t)b[2 + i];
        case GGML_TYPE_Q4_0: return (b[2 + i % 16] >> 4 * (i / 16)) & 15;
        case GGML_TYPE_Q4_1: return (b[4 + i % 16] >> 4 * (i / 16)) & 15;
        case GGML_TYPE_Q6_K: {
            int h = g / 4, k = g % 4;
            return ((b[64 * h + 32 * (k % 2) + i] >> 4 * (k / 2)) & 15) | ((b[128 + 32 * h + i] >> 2 * k) & 3) << 4;
        }
        default: {
            int q = (b[(type == GGML_TYPE_Q4_K ? 16 : 48) + 32 * (g / 2) + i] >> 4 * (g & 1)) & 15;
            if (type == GGML_TYPE_Q5_K) q |= ((b[16 + i] >> g) & 1) << 4;
            return q;
        }
    }
}

/* sum w q of one block with the sub-block scales (I without block_terms' offset), plain C. */
ALWAYS int32_t block_dot_scalar(int type, const uint8_t* b, const int8_t* x) {
    if (block_values(type) == 32) {
        int32_t t = 0;
        for (int i = 0; i < 32; i++) t += weight_int(type, b, 0, i) * x[i];
        return t;
    }
    int32_t total = 0;
    for (int g = 0; g < 8; g++) {
        int32_t t[2] = {0, 0};
        for (int i = 0; i < 32; i++) t[i / 16] += weight_int(type, b, g, i) * x[32 * g + i];
        if (type == GGML_TYPE_Q6_K) total += (int8_t)b[192 + 2 * g] * t[0] + (int8_t)b[193 + 2 * g] * t[1];
        else {
            int scale, min;
            k_scale_min(b + 4, g, &scale, &min);
            total += scale * (t[0] + t[1]);
        }
    }
    return total;
}

#if defined(QDOT_AVX2)
/* 8 int32 partial sums of u8 w times s8 x over 32 bytes (exact: no pair of u8 w <= 128 times |x| <= 127
   saturates maddubs' int16). */
ALWAYS __m256i dot32(__m256i w, __m256i x) {
#if defined(QDOT_VNNI)
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, x);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1));
#endif
}

/* The same with values 0-15 times lo and 16-31 times hi. */
ALWAYS __m256i dot32_scaled(__m256i w, __m256i x, int lo, int hi) {
#if defined(QDOT_VNNI)
    return _mm256_mullo_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), w, x),
                              _mm256_set_m128i(_mm_set1_epi32(hi), _mm_set1_epi32(lo)));
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set_m128i(_mm_set1_epi16((short)hi), _mm_set1_epi16((short)lo)));
#endif
}

ALWAYS __m256i nibbles(const uint8_t* p) {  /* 16 bytes -> 32 values: low nibbles, then high nibbles */
    __m128i raw = _mm_loadu_si128((const __m128i*)p);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(15));
}

ALWAYS __m256i bits8(__m256i v, int shift, int mask) {  /* (v >> shift) & mask per byte */
    return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(shift)), _mm256_set1_epi8((char)mask));
}

/* Group g's 32 stored integers as u8 (Q8_0: |w|, its signs moved onto x by the caller). */
ALWAYS __m256i weights32(int type, const uint8_t* b, int g) {
    switch (type) {
        case GGML_TYPE_Q8_0: return _mm256_abs_epi8(_mm256_loadu_si256((const __m256i*)(b + 2)));
        case GGML_TYPE_Q4_0: return nibbles(b + 2);
        case GGML_TYPE_Q4_1: return nibbles(b + 4);
        case GGML_TYPE_Q6_K: {
            int h = g / 4, k = g % 4;
            __m256i lo = bits8(_mm256_loadu_si256((const __m256i*)(b + 64 * h + 32 * (k % 2))), 4 * (k / 2), 15);
            __m256i hi = bits8(_mm256_loadu_si256((const __m256i*)(b + 128 + 32 * h)), 2 * k, 3);
            return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
        }
        default: {
            __m256i q = bits8(_mm256_loadu_si256((const __m256i*)(b + (type == GGML_TYPE_Q4_K ? 16 : 48) + 32 * (g / 2))),
                              4 * (g & 1), 15);
            if (type == GGML_TYPE_Q5_K) q = _mm256_or_si256(q, _mm256_slli_epi16(bits8(_mm256_loadu_si256((const __m256i*)(b + 16)), g, 1), 4));
            return q;
        }
    }
}

/* part[i] = 8 int32 whose sum is block_dot_scalar(type, b, x[i]) for a 256-value block, mt rows of x. */
ALWAYS void superblock_dots(int type, const uint8_t* b, const int8_t* const* x, int mt, __m256i* part) {
    for (int i = 0; i < mt; i++) part[i] = _mm256_setzero_si256();
    for (int g = 0; g < 8; g++) {
        int lo, hi;
        if (type == GGML_TYPE_Q6_K) lo = (int8_t)b[192 + 2 * g], hi = (int8_t)b[193 + 2 * g];
        else { int min; k_scale_min(b + 4, g, &lo, &min); hi = lo; }
        __m256i w = weights32(type, b, g);
        for (int i = 0; i < mt; i++)
            part[i] = _mm256_add_epi32(part[i], dot32_scaled(w, _mm256_loadu_si256((const __m256i*)(x[i] + 32 * g)), lo, hi));
    }
}

/* Lane r = the sum of p[r]'s 8 lanes (exact integer adds). */
ALWAYS __m256i sum8x8(const __m256i* p) {
    __m256i a = _mm256_hadd_epi32(p[0], p[1]), b = _mm256_hadd_epi32(p[2], p[3]);
    __m256i c = _mm256_hadd_epi32(p[4], p[5]), d = _mm256_hadd_epi32(p[6], p[7]);
    __m256i lo = _mm256_hadd_epi32(a, b), hi = _mm256_hadd_epi32(c, d);
    return _mm256_add_epi32(_mm256_permute2x128_si256(lo, hi, 0x20), _mm256_permute2x128_si256(lo, hi, 0x31));
}

ALWAYS uint16_t u16(const uint8_t* p) { uint16_t v; memcpy(&v, p, 2); return v; }

/* The f16 at byte `at` of 8 blocks, widened (exact). */
ALWAYS __m256 halves8(const uint8_t* const* rows, int at) {
    return _mm256_cvtph_ps(_mm_setr_epi16((short)u16(rows[0] + at), (short)u16(rows[1] + at), (short)u16(rows[2] + at),
                                          (short)u16(rows[3] + at), (short)u16(rows[4] + at), (short)u16(rows[5] + at),
                                          (short)u16(rows[6] + at), (short)u16(rows[7] + at)));
}

#define QDOT_ROWS 8  /* W rows per tile: one per lane */
#if defined(__AVX512VL__)
#define QDOT_XROWS 8  /* 32 vector registers */
#else
#define QDOT_XROWS 4
#endif
/* Outputs (m0 + i, n + r) for i < mt, r < nr, nr <= 8 W rows (lanes past nr repeat the last row, unstored). */
ALWAYS void tile(int type, const uint8_t* w, int64_t row_bytes, int n, int nr, const acts* a, int m0, int mt, int K,
                 float* y, int64_t ldy) {
    int B = block_values(type), bytes = block_bytes(type), blocks = K / B;
    __m256 acc[QDOT_XROWS];
    for (int i = 0; i < mt; i++) acc[i] = _mm256_setzero_ps();
    for (int blk = 0; blk < blocks; blk++) {
        const uint8_t* rows[QDOT_ROWS];
        const int8_t* x[QDOT_XROWS];
        for (int r = 0; r < QDOT_ROWS; r++) rows[r] = w + (int64_t)(n + (r < nr ? r : nr - 1)) * row_bytes + (int64_t)blk * bytes;
        for (int i = 0; i < mt; i++) x[i] = a->q + (int64_t)(m0 + i) * K + (int64_t)blk * B;
        __m256 dw = halves8(rows, type == GGML_TYPE_Q6_K ? 208 : 0), mw = _mm256_setzero_ps();
        if (type == GGML_TYPE_Q4_1) mw = halves8(rows, 2);
        if (type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q5_K) mw = _mm256_xor_ps(halves8(rows, 2), _mm256_set1_ps(-0.0f));  /* -dmin: the sign flipped, as C's - */
        __m256i isum[QDOT_XROWS], jsum[QDOT_XROWS];
        if (B == 32) {
            __m256i wv[QDOT_ROWS];
            for (int r = 0; r < QDOT_ROWS; r++) wv[r] = weights32(type, rows[r], 0);
            for (int i = 0; i < mt; i++) {
                __m256i xv = _mm256_loadu_si256((const __m256i*)x[i]), p[QDOT_ROWS];
                for (int r = 0; r < QDOT_ROWS; r++)
                    p[r] = dot32(wv[r], type == GGML_TYPE_Q8_0 ? _mm256_sign_epi8(xv, _mm256_loadu_si256((const __m256i*)(rows[r] + 2))) : xv);
                const int32_t* s = a->s + ((int64_t)(m0 + i) * K + (int64_t)blk * B) / 16;
                isum[i] = sum8x8(p);
                if (type == GGML_TYPE_Q4_0) isum[i] = _mm256_sub_epi32(isum[i], _mm256_set1_epi32(8 * (s[0] + s[1])));
                jsum[i] = _mm256_set1_epi32(s[0] + s[1]);
            }
        } else {
            __m256i p[QDOT_XROWS][QDOT_ROWS];
            int32_t offset[QDOT_XROWS][QDOT_ROWS], j[QDOT_XROWS][QDOT_ROWS];
            for (int r = 0; r < QDOT_ROWS; r++) {
                __m256i part[QDOT_XROWS];
                superblock_dots(type, rows[r], x, mt, part);
                for (int i = 0; i < mt; i++) {
                    p[i][r] = part[i];
                    block_terms(type, rows[r], a->s + ((int64_t)(m0 + i) * K + (int64_t)blk * B) / 16, &offset[i][r], &j[i][r]);
                }
            }
            for (int i = 0; i < mt; i++) {
                isum[i] = _mm256_add_epi32(sum8x8(p[i]), _mm256_loadu_si256((const __m256i*)offset[i]));
                jsum[i] = _mm256_loadu_si256((const __m256i*)j[i]);
            }
        }
        for (int i = 0; i < mt; i++) {
            __m256 dx = _mm256_set1_ps(a->d[(int64_t)(m0 + i) * blocks + blk]);
            acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(isum[i]), acc[i]);
            if (has_min(type)) acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(mw, dx), _mm256_cvtepi32_ps(jsum[i]), acc[i]);
        }
    }
    for (int i = 0; i < mt; i++) {
        float out[QDOT_ROWS];
        _mm256_storeu_ps(out, acc[i]);
        for (int r = 0; r < nr; r++) y[(int64_t)(m0 + i) * ldy + n + r] = out[r];
    }
}
#elif defined(QDOT_NEON)
#include "qdot_neon.h"
#else
#define QDOT_ROWS 1
#define QDOT_XROWS 1
ALWAYS void tile(int type, const uint8_t* w, int64_t row_bytes, int n, int nr, const acts* a, int m0, int mt, int K,
                 float* y, int64_t ldy) {
    int B = block_values(type), bytes = block_bytes(type), blocks = K / B;
    (void)nr, (void)mt;
    float acc = 0.0f;
    for (int blk = 0; blk < blocks; blk++) {
        const uint8_t* b = w + (int64_t)n * row_bytes + (int64_t)blk * bytes;
        int64_t at = (int64_t)m0 * K + (int64_t)blk * B;
        int32_t offset, j;
        float dw, mw, dx = a->d[(int64_t)m0 * blocks + blk];
        block_terms(type, b, a->s + at / 16, &offset, &j);
        block_floats(type, b, &dw, &mw);
        int32_t isum = block_dot_scalar(type, b, a->q + at) + offset;
        acc = fmaf(dw * dx, (float)isum, acc);
        if (has_min(type)) acc = fmaf(mw * dx, (float)j, acc);
    }
    y[(int64_t)m0 * ldy + n] = acc;
}
#endif

/* W rows n0 .. n1 - 1 against every row of x. */
ALWAYS void gemm_rows(int type, const acts* a, const uint8_t* w, float* y, int64_t ldy, int M, int n0, int n1, int K) {
    int64_t row_bytes = quant_row_bytes(type, K);
    for (int m0 = 0; m0 < M; m0 += QDOT_XROWS) {
        int mt = M - m0 < QDOT_XROWS ? M - m0 : QDOT_XROWS;
        for (int n = n0; n < n1; n += QDOT_ROWS) {
            int nr = n1 - n < QDOT_ROWS ? n1 - n : QDOT_ROWS;
            switch (mt) {  /* constant tile shapes, so the accumulators stay in registers */
#if QDOT_XROWS >= 8
                case 8: tile(type, w, row_bytes, n, nr, a, m0, 8, K, y, ldy); break;
                case 7: tile(type, w, row_bytes, n, nr, a, m0, 7, K, y, ldy); break;
                case 6: tile(type, w, row_bytes, n, nr, a, m0, 6, K, y, ldy); break;
                case 5: tile(type, w, row_bytes, n, nr, a, m0, 5, K, y, ldy); break;
#endif
#if QDOT_XROWS >= 4
                case 4: tile(type, w, row_bytes, n, nr, a, m0, 4, K, y, ldy); break;
                case 3: tile(type, w, row_bytes, n, nr, a, m0, 3, K, y, ldy); break;
                case 2: tile(type, w, row_bytes, n, nr, a, m0, 2, K, y, ldy); break;
#endif
                default: tile(type, w, row_bytes, n, nr, a, m0, 1, K, y, ldy); break;
            }
        }
    }
}

#define QDOT_TYPE(T) \
    static void rows_##T(const acts* a, const uint8_t* w, float* y, int64_t ldy, int M, int n0, int n1, int K) { \
        gemm_rows(GGML_TYPE_##T, a, w, y, ldy, M, n0, n1, K);                                                 \
    }
QDOT_TYPE(Q4_0) QDOT_TYPE(Q4_1) QDOT_TYPE(Q8_0) QDOT_TYPE(Q4_K) QDOT_TYPE(Q5_K) QDOT_TYPE(Q6_K)

typedef void (*rows_fn)(const acts*, const uint8_t*, float*, int64_t, int, int, int, int);

int quant_gemm_x8_quantized(const int8_t* q, const float* d, const int32_t* s, const uint8_t* w, float* y, int64_t ldy,
                            int M, int N, int K, int type, int threads) {
    if (quant_row_bytes(type, K) < 0 || M < 0 || N < 0 || ldy < N) return 1;
    acts a = {(int8_t*)q, (float*)d, (int32_t*)s};
    rows_fn rows = type == GGML_TYPE_Q4_0 ? rows_Q4_0 : type == GGML_TYPE_Q4_1 ? rows_Q4_1
                 : type == GGML_TYPE_Q8_0 ? rows_Q8_0 : type == GGML_TYPE_Q4_K ? rows_Q4_K
                 : type == GGML_TYPE_Q5_K ? rows_Q5_K : rows_Q6_K;
    threads = threads < 1 ? 1 : threads;
    int chunks = (N + 15) / 16;  /* 16 W rows per chunk: threads split N, never K */
    #pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1 && chunks > 1)
    for (int c = 0; c < chunks; c++) rows(&a, w, y, ldy, M, 16 * c, 16 * c + 16 < N ? 16 * c + 16 : N, K);
    return 0;
}

int quant_gemm_x8(const float* x, const uint8_t* w, float* y, int64_t ldy, int M, int N, int K, int type, int threads) {
    if (quant_row_bytes(type, K) < 0 || M < 0 || N < 0 || ldy < N) return 1;
    int B = block_values(type);
    int8_t* q = malloc((size_t)M * (size_t)K + 1);
    float* d = malloc(sizeof(float) * ((size_t)M * (size_t)(K / B) + 1));
    int32_t* s = malloc(sizeof(int32_t) * ((size_t)M * (size_t)(K / 16) + 1));
    int status = !q || !d || !s ? 2 : quantize_x8_sums(x, q, d, s, M, K, B);
    if (!status) status = quant_gemm_x8_quantized(q, d, s, w, y, ldy, M, N, K, type, threads);
    free(q); free(d); free(s);
    return status;
}
