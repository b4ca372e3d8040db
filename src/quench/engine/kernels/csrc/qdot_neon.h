/* qdot.c's tile in NEON registers: 4 W rows per tile, one per float32x4 lane, blocks in sequence, the same float
   steps as the scalar loop (FMLA is fmaf, FNEG the C negation, SCVTF rounds to nearest as (float)). Integer sums:
   SDOT where the build has it (armv8.2-a+dotprod), else SMULL + SADALP (16-bit products: |w| <= 128 times
   |q| <= 127 fits), reduced exactly by pairwise adds. Included by qdot.c only, after its scalar helpers. */
#ifndef QUENCH_QDOT_NEON_H
#define QUENCH_QDOT_NEON_H
#include <arm_neon.h>

/* 4 int32 partial sums of 16 signed w times 16 signed q. */
ALWAYS int32x4_t dot16(int8x16_t w, int8x16_t x) {
#if defined(__ARM_FEATURE_DOTPROD)
    return vdotq_s32(vdupq_n_s32(0), w, x);
#else
    int16x8_t lo = vmull_s8(vget_low_s8(w), vget_low_s8(x)), hi = vmull_s8(vget_high_s8(w), vget_high_s8(x));
    return vpadalq_s16(vpaddlq_s16(lo), hi);
#endif
}

/* Group g's 32 stored integers (Q6_K's 0 .. 63) as two int8x16: values 0-15 and 16-31. */
ALWAYS void weights32_neon(int type, const uint8_t* b, int g, int8x16_t* w) {
    if (type == GGML_TYPE_Q8_0) {
        w[0] = vld1q_s8((const int8_t*)b + 2), w[1] = vld1q_s8((const int8_t*)b + 18);
    } else if (type == GGML_TYPE_Q4_0 || type == GGML_TYPE_Q4_1) {
        uint8x16_t q = vld1q_u8(b + (type == GGML_TYPE_Q4_0 ? 2 : 4));
        w[0] = vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(15))), w[1] = vreinterpretq_s8_u8(vshrq_n_u8(q, 4));
    } else {
        for (int half = 0; half < 2; half++) {
            uint8_t v[16];
            for (int i = 0; i < 16; i++) v[i] = (uint8_t)weight_int(type, b, g, 16 * half + i);
            w[half] = vreinterpretq_s8_u8(vld1q_u8(v));
        }
    }
}

/* The f16 at byte `at` of 4 blocks, widened (exact). */
ALWAYS float32x4_t halves4(const uint8_t* const* rows, int at) {
    float v[4] = {half_to_float(rows[0] + at), half_to_float(rows[1] + at), half_to_float(rows[2] + at),
                  half_to_float(rows[3] + at)};
    return vld1q_f32(v);
}

#define QDOT_ROWS 4
#define QDOT_XROWS 4
ALWAYS void tile(int type, const uint8_t* w, int64_t row_bytes, int n, int nr, const acts* a, int m0, int mt, int K,
                 float* y, int64_t ldy) {
    int B = block_values(type), bytes = block_bytes(type), blocks = K / B;
    float32x4_t acc[QDOT_XROWS];
    for (int i = 0; i < mt; i++) acc[i] = vdupq_n_f32(0.0f);
    for (int blk = 0; blk < blocks; blk++) {
        const uint8_t* rows[QDOT_ROWS];
        for (int r = 0; r < QDOT_ROWS; r++) rows[r] = w + (int64_t)(n + (r < nr ? r : nr - 1)) * row_bytes + (int64_t)blk * bytes;
        float32x4_t dw = halves4(rows, type == GGML_TYPE_Q6_K ? 208 : 0), mw = vdupq_n_f32(0.0f);
        if (type == GGML_TYPE_Q4_1) mw = halves4(rows, 2);
        if (type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q5_K) mw = vnegq_f32(halves4(rows, 2));
        int32x4_t part[QDOT_XROWS][QDOT_ROWS];
        int32_t offset[QDOT_XROWS][QDOT_ROWS], j[QDOT_XROWS][QDOT_ROWS];
        for (int r = 0; r < QDOT_ROWS; r++) {
            for (int i = 0; i < mt; i++) part[i][r] = vdupq_n_s32(0);
            for (int g = 0; g < B / 32; g++) {
                int8x16_t wv[2];
                weights32_neon(type, rows[r], g, wv);
                int lo = 1, hi = 1;
                if (type == GGML_TYPE_Q6_K) lo = (int8_t)rows[r][192 + 2 * g], hi = (int8_t)rows[r][193 + 2 * g];
                else if (B == 256) { int min; k_scale_min(rows[r] + 4, g, &lo, &min); hi = lo; }
                for (int i = 0; i < mt; i++) {
                    const int8_t* x = a->q + (int64_t)(m0 + i) * K + (int64_t)blk * B + 32 * g;
                    int32x4_t d0 = dot16(wv[0], vld1q_s8(x)), d1 = dot16(wv[1], vld1q_s8(x + 16));
                    part[i][r] = vmlaq_n_s32(vmlaq_n_s32(part[i][r], d0, lo), d1, hi);
                }
            }
            for (int i = 0; i < mt; i++)
                block_terms(type, rows[r], a->s + ((int64_t)(m0 + i) * K + (int64_t)blk * B) / 16, &offset[i][r], &j[i][r]);
        }
        for (int i = 0; i < mt; i++) {
            float32x4_t dx = vdupq_n_f32(a->d[(int64_t)(m0 + i) * blocks + blk]);
            int32x4_t isum = vpaddq_s32(vpaddq_s32(part[i][0], part[i][1]), vpaddq_s32(part[i][2], part[i][3]));
            isum = vaddq_s32(isum, vld1q_s32(offset[i]));
            acc[i] = vfmaq_f32(acc[i], vmulq_f32(dw, dx), vcvtq_f32_s32(isum));
            if (has_min(type)) acc[i] = vfmaq_f32(acc[i], vmulq_f32(mw, dx), vcvtq_f32_s32(vld1q_s32(j[i])));
        }
    }
    for (int i = 0; i < mt; i++) {
        float out[QDOT_ROWS];
        vst1q_f32(out, acc[i]);
        for (int r = 0; r < nr; r++) y[(int64_t)(m0 + i) * ldy + n + r] = out[r];
    }
}
#endif
