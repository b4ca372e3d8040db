/* bfloat16 <-> float32, scalar and exact (round to nearest even), shared by every unit. */
#ifndef QUENCH_BF16_H
#define QUENCH_BF16_H
#include <string.h>
#include "quench_native.h"
static inline float load_bf16(bf16 x) { uint32_t u = (uint32_t)x << 16; float f; memcpy(&f, &u, 4); return f; }
static inline bf16 store_bf16(float f) {
    uint32_t u; memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16)((u >> 16) | 0x40);  /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);                                         /* round to nearest even */
    return (bf16)(u >> 16);
}
static inline float round_bf16(float f) { return load_bf16(store_bf16(f)); }
static inline float load_f32(float x) { return x; }
static inline float store_f32(float f) { return f; }
static inline float round_f32(float f) { return f; }
#endif
