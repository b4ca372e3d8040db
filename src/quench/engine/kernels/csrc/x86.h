/* x86 helpers shared by the attention, glue, GEMM, layer and screen units (each unit has its own compiler
   flags, so the helpers are compiled into each; all are exact integer moves or documented approximations). */
#ifndef QUENCH_X86_H
#define QUENCH_X86_H
#include "bf16.h"
#if defined(__AVX512F__)
#include <immintrin.h>
/* 16 bfloat16 values -> float32 (exact). */
static inline __m512 bf16x16_to_f32(const bf16* p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p)), 16));
}
/* 16 floats -> bfloat16 as store_bf16 rounds them (nearest even, NaN quieted, denormals kept: VCVTNEPS2BF16
   would flush a denormal, so the rounding is done on the integers). */
static inline __m256i f32x16_to_bf16(__m512 v) {
    __m512i u = _mm512_castps_si512(v);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    return _mm512_cvtepi32_epi16(r);
}
/* 16 floats rounded to bfloat16 and back (round_bf16, 16 at a time). */
static inline __m512 round_to_bf16(__m512 v) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(f32x16_to_bf16(v)), 16));
}
/* exp(x) in float32: 2^n e^r with n = round(x / ln 2), r = x - n ln 2 in two steps, e^r by Cephes' degree-7
   polynomial (~1 ulp, as libm's expf; max relative error 1.2e-7 against double precision over [-87, 0]).
   Below -104 it is 0 (-inf and NaN too), above ~88.7 scalef gives inf (x capped at 100). canon.h's exp_fixed
   computes the same operations one value at a time, the same bits. The softmaxes and SiLUs use it. */
static inline __m512 exp_ps(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(100.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}
#endif
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
/* The AVX2 + FMA (x86-64-v3) counterparts, 8 lanes: the same bits as the AVX512 helpers lane by lane. */
/* 8 bfloat16 values -> float32 (exact). */
static inline __m256 bf16x8_to_f32(const bf16* p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p)), 16));
}
/* 8 floats -> bfloat16 as store_bf16 rounds them (nearest even, NaN quieted, denormals kept). */
static inline __m128i f32x8_to_bf16(__m256 v) {
    __m256i u = _mm256_castps_si256(v);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    r = _mm256_blendv_epi8(r, _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40)), nan);
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08));
}
/* 8 floats rounded to bfloat16 and back (round_bf16, 8 at a time). */
static inline __m256 round8_to_bf16(__m256 v) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(f32x8_to_bf16(v)), 16));
}
/* exp_ps's steps on 8 lanes, with scalef's p 2^n as two exact multiplies by powers of two (n = a + b, each
   a normal float's exponent: the first product is exact, the second rounds once, as scalef does). The same
   bits as exp_ps and canon.h's exp_fixed for every x. */
static inline __m256 exp8_ps(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-104.0f)), _mm256_set1_ps(100.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i whole = _mm256_cvtps_epi32(n), a = _mm256_srai_epi32(whole, 1), b = _mm256_sub_epi32(whole, a);
    __m256 two_a = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(a, _mm256_set1_epi32(127)), 23));
    __m256 two_b = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(127)), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, two_a), two_b);
}
/* silu(g) = g / (1 + e^-g) on 8 lanes, as layers.c's 16-lane SiLU computes it. */
static inline __m256 silu8_ps(__m256 g) {
    return _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), exp8_ps(_mm256_sub_ps(_mm256_setzero_ps(), g))));
}
#endif
#if defined(__AVX512F__) && defined(__AVX512BF16__) && defined(__AMX_TILE__) && defined(__AMX_BF16__)
typedef struct { uint8_t palette, start; uint8_t reserved[14]; uint16_t colsb[16]; uint8_t rows[16]; } tile_config;
/* Tiles 0 .. count - 1 as 16 rows x 64 bytes (tile state is per thread). */
static inline void load_tiles_16x64(int count) {
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < count; t++) { cfg.rows[t] = 16; cfg.colsb[t] = 64; }
    _tile_loadconfig(&cfg);
}
#endif
#endif
