/* The arithmetic every build shares, written once in scalar C: where a kernel's vector code (AVX-512, AVX2,
   NEON) computes one of these, it performs the same IEEE operations in the same order, so every build gives
   the same bits (the units that include this are compiled without fast-math and without FMA contraction). */
#ifndef QUENCH_CANON_H
#define QUENCH_CANON_H
#include <math.h>
#include <stdint.h>
#include <string.h>

/* 2^e for -126 <= e <= 127, exact. */
static inline float pow2_fixed(int e) { uint32_t u = (uint32_t)(e + 127) << 23; float f; memcpy(&f, &u, 4); return f; }

/* exp(x) in float32: x clamped to [-104, 100] (NaN as -104: 0), 2^n e^r with n = x log2(e) rounded to nearest
   even, r = x - n ln 2 in two fused steps, e^r by Cephes' degree-7 polynomial (about 1 ulp, as libm's expf),
   scaled by 2^n as two exact powers of two (n = a + b): the first product is exact, the second rounds once.
   x86.h's exp_ps (16 lanes) and exp8_ps (8 lanes) compute exactly these operations. */
static inline float exp_fixed(float x) {
    x = x > -104.0f ? x : -104.0f;
    x = x < 100.0f ? x : 100.0f;
    float n = rintf(x * 1.44269504088896341f);
    float r = fmaf(-n, 0.693359375f, x);
    r = fmaf(-n, -2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = fmaf(p, r, 1.3981999507e-3f);
    p = fmaf(p, r, 8.3334519073e-3f);
    p = fmaf(p, r, 4.1665795894e-2f);
    p = fmaf(p, r, 1.6666665459e-1f);
    p = fmaf(p, r, 5.0000001201e-1f);
    p = fmaf(p, r * r, r + 1.0f);
    int whole = (int)n, a = whole >> 1, b = whole - a;
    return (p * pow2_fixed(a)) * pow2_fixed(b);
}

/* silu(g) = g / (1 + e^-g), as every vector SiLU computes it. */
static inline float silu_fixed(float g) { return g / (1.0f + exp_fixed(0.0f - g)); }

/* The sum of 16 lanes in one fixed tree: s_j = L[j] + L[8 + j], then s_j + s_{4 + j}, then u_j + u_{2 + j}, then
   v_0 + v_1 (the halvings of a vector register: 512 -> 256 -> 128 -> 64 -> 32 bits). */
static inline float reduce16_fixed(const float* lanes) {
    float s[8], u[4], v[2];
    for (int j = 0; j < 8; j++) s[j] = lanes[j] + lanes[8 + j];
    for (int j = 0; j < 4; j++) u[j] = s[j] + s[4 + j];
    for (int j = 0; j < 2; j++) v[j] = u[j] + u[2 + j];
    return v[0] + v[1];
}
#endif
