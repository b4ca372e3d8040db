/* quant.c's group of 32 values in NEON registers: eight float32x4 vectors, v[j] holding lanes 4 j .. 4 j + 3
   (lane order k mod 32, as the AVX2 build's four vectors of 8). The same values as the scalar `expand`, by the
   same float32 operations; where the AVX2 build fuses an exact product with its sum (Q4_1, Q4_K, Q5_K) this one
   fuses it too (FMLA), which is the scalar path's two roundings' one result. Included by quant.c only, after
   its block formats and block_scales. */
#ifndef QUENCH_QUANT_NEON_H
#define QUENCH_QUANT_NEON_H
#include <arm_neon.h>

typedef struct { float32x4_t v[8]; } group32;

/* 16 unsigned bytes -> four vectors of 4 floats (exact: integers below 2^24). */
static inline void unsigned16(uint8x16_t b, float32x4_t* out) {
    uint16x8_t lo = vmovl_u8(vget_low_u8(b)), hi = vmovl_u8(vget_high_u8(b));
    out[0] = vcvtq_f32_u32(vmovl_u16(vget_low_u16(lo)));
    out[1] = vcvtq_f32_u32(vmovl_u16(vget_high_u16(lo)));
    out[2] = vcvtq_f32_u32(vmovl_u16(vget_low_u16(hi)));
    out[3] = vcvtq_f32_u32(vmovl_u16(vget_high_u16(hi)));
}

/* 16 signed bytes -> four vectors of 4 floats (exact). */
static inline void signed16(int8x16_t b, float32x4_t* out) {
    int16x8_t lo = vmovl_s8(vget_low_s8(b)), hi = vmovl_s8(vget_high_s8(b));
    out[0] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo)));
    out[1] = vcvtq_f32_s32(vmovl_s16(vget_high_s16(lo)));
    out[2] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi)));
    out[3] = vcvtq_f32_s32(vmovl_s16(vget_high_s16(hi)));
}

/* (v >> shift) & mask on 16 bytes; shift may vary at run time (a negative vshl count shifts right). */
static inline uint8x16_t bits16(uint8x16_t v, int shift, int mask) {
    return vandq_u8(vshlq_u8(v, vdupq_n_s8((int8_t)-shift)), vdupq_n_u8((uint8_t)mask));
}

ALWAYS group32 expand(int type, const uint8_t* b, int g, const block_scales* sc) {
    group32 w;
    if (type == GGML_TYPE_Q8_0) {
        float32x4_t d = vdupq_n_f32(sc->d[0]);
        signed16(vld1q_s8((const int8_t*)b + 2), w.v);
        signed16(vld1q_s8((const int8_t*)b + 18), w.v + 4);
        for (int j = 0; j < 8; j++) w.v[j] = vmulq_f32(w.v[j], d);
    } else if (type == GGML_TYPE_Q4_0 || type == GGML_TYPE_Q4_1) {
        uint8x16_t q = vld1q_u8(b + (type == GGML_TYPE_Q4_0 ? 2 : 4));
        uint8x16_t lo = vandq_u8(q, vdupq_n_u8(15)), hi = vshrq_n_u8(q, 4);  /* values 0-15, 16-31 */
        float32x4_t d = vdupq_n_f32(sc->d[0]);
        if (type == GGML_TYPE_Q4_0) {  /* (q - 8) exactly, then d * it */
            signed16(vsubq_s8(vreinterpretq_s8_u8(lo), vdupq_n_s8(8)), w.v);
            signed16(vsubq_s8(vreinterpretq_s8_u8(hi), vdupq_n_s8(8)), w.v + 4);
            for (int j = 0; j < 8; j++) w.v[j] = vmulq_f32(d, w.v[j]);
        } else {
            float32x4_t m = vdupq_n_f32(sc->m[0]);
            unsigned16(lo, w.v);
            unsigned16(hi, w.v + 4);
            for (int j = 0; j < 8; j++) w.v[j] = vfmaq_f32(m, d, w.v[j]);  /* d q exact: one rounding either way */
        }
    } else if (type == GGML_TYPE_Q6_K) {
        int h = g / 4, k = g % 4;
        const uint8_t* ql = b + 64 * h + 32 * (k % 2);
        const uint8_t* qh = b + 128 + 32 * h;
        for (int half = 0; half < 2; half++) {
            uint8x16_t q = vorrq_u8(bits16(vld1q_u8(ql + 16 * half), 4 * (k / 2), 15),
                                    vshlq_n_u8(bits16(vld1q_u8(qh + 16 * half), 2 * k, 3), 4));
            signed16(vsubq_s8(vreinterpretq_s8_u8(q), vdupq_n_s8(32)), w.v + 4 * half);
            float32x4_t d = vdupq_n_f32(sc->d[2 * g + half]);
            for (int j = 4 * half; j < 4 * half + 4; j++) w.v[j] = vmulq_f32(d, w.v[j]);
        }
    } else {  /* Q4_K, Q5_K */
        const uint8_t* qs = b + (type == GGML_TYPE_Q4_K ? 16 : 48) + 32 * (g / 2);
        float32x4_t d = vdupq_n_f32(sc->d[g]), minus_m = vdupq_n_f32(-sc->m[g]);
        for (int half = 0; half < 2; half++) {
            uint8x16_t q = bits16(vld1q_u8(qs + 16 * half), 4 * (g & 1), 15);
            if (type == GGML_TYPE_Q5_K) q = vorrq_u8(q, vshlq_n_u8(bits16(vld1q_u8(b + 16 + 16 * half), g, 1), 4));
            unsigned16(q, w.v + 4 * half);
        }
        /* (d scale) q exact: d q + (-m) rounded once is d q - m rounded once, as mul, sub */
        for (int j = 0; j < 8; j++) w.v[j] = vfmaq_f32(minus_m, d, w.v[j]);
    }
    return w;
}

static inline void store_group(float* out, group32 w) {
    for (int j = 0; j < 8; j++) vst1q_f32(out + 4 * j, w.v[j]);
}

/* quant.c's fixed reduction of 32 lane sums a[0..7]: s_j = (L[j] + L[8 + j]) + (L[16 + j] + L[24 + j]) for
   j < 4 in one vector, j >= 4 in another, then ((s0 + s4) + (s2 + s6)) + ((s1 + s5) + (s3 + s7)). */
static inline float reduce32(const float32x4_t* a) {
    float32x4_t low = vaddq_f32(vaddq_f32(a[0], a[2]), vaddq_f32(a[4], a[6]));   /* s0 .. s3 */
    float32x4_t high = vaddq_f32(vaddq_f32(a[1], a[3]), vaddq_f32(a[5], a[7]));  /* s4 .. s7 */
    float32x4_t u = vaddq_f32(low, high);                                         /* s_j + s_{j+4} */
    float32x2_t p = vadd_f32(vget_low_f32(u), vget_high_f32(u));                  /* (u0 + u2), (u1 + u3) */
    return vget_lane_f32(p, 0) + vget_lane_f32(p, 1);
}
#endif
