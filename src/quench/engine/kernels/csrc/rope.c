/* RoPE in the model dtype with PyTorch's roundings: each product and the sum rounded to bfloat16, so the
   cached keys are bit-identical to the PyTorch path. Compiled without fast-math and without FMA
   contraction (-ffp-contract=off): every rounding as in PyTorch. Also the library's header hash. */
#include "bf16.h"

#define STRINGIFY(x) #x
#define VALUE(x) STRINGIFY(x)
const char* quench_native_header(void) { return VALUE(QUENCH_NATIVE_HEADER_HASH); }

/* Element i of the first half pairs with i + half, of the second with i - half: one loop per half, so each
   vectorises (the same steps per element). */
#define ROPE_HALF(SUFFIX, FROM, TO, SHIFT)                                                        \
    for (int i = FROM; i < TO; i++) {                                                             \
        float rotated = load_##SUFFIX(x[i + (SHIFT)]);                                            \
        float a = round_##SUFFIX(load_##SUFFIX(x[i]) * load_##SUFFIX(cos[i]));                     \
        float b = round_##SUFFIX(rotated * load_##SUFFIX(sin_signed[i]));                          \
        out[i] = round_##SUFFIX(a + b);                                                           \
    }
#define ROPE(T, SUFFIX)                                                                           \
void rope_##SUFFIX(const T* x, const T* cos, const T* sin_signed, int dim, float* out, T* store) { \
    int half = dim / 2;                                                                           \
    ROPE_HALF(SUFFIX, 0, half, half)                                                              \
    ROPE_HALF(SUFFIX, half, dim, -half)                                                           \
    if (store)                                                                                    \
        for (int i = 0; i < dim; i++) store[i] = store_##SUFFIX(out[i]);                          \
}
ROPE(bf16, bf16)
ROPE(float, f32)
