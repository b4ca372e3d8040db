/* IEEE half -> float32, exact (subnormals, infinities and NaN payloads kept, as numpy's astype), shared by the
   block kernels: F16C where the unit is built with it, FCVT on aarch64, else the bits by hand. */
#ifndef QUENCH_HALF_H
#define QUENCH_HALF_H
#include <stdint.h>
#include <string.h>
#if defined(__F16C__)
#include <immintrin.h>
#endif

static inline __attribute__((always_inline)) float half_to_float(const uint8_t* p) {
    uint16_t h = (uint16_t)(p[0] | p[1] << 8);
#if defined(__F16C__)
    return _cvtsh_ss(h);
#elif defined(__aarch64__)
    __fp16 f;  /* FCVT: exact, as F16C (a signalling NaN comes back quiet) */
    memcpy(&f, &h, 2);
    return (float)f;
#else
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exponent = (h >> 10) & 31, mantissa = h & 1023, bits;
    if (exponent == 31) bits = sign | 0x7f800000u | mantissa << 13;
    else if (exponent) bits = sign | (exponent + 112) << 23 | mantissa << 13;
    else {
        float f = (float)mantissa * 0x1p-24f;  /* exact: a 10-bit integer times a power of two */
        return sign ? -f : f;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
#endif
}
#endif
