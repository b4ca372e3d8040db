/* The bfloat16 layer loop: one call runs every decoder layer of a packed step (the GEMMs, attention,
   residual sums and norms of the other units, and SiLU x up here).

   At batch 8 a decode step called ~10 Python-level operations per layer (each GEMM's wrapper and output
   allocation, the attention's checks, two norms, SiLU, the product, slicing). Here the loop over layers is C,
   with its scratch allocated once per call. SiLU follows PyTorch's bfloat16 path (x / (1 + exp(-x)) in float32,
   rounded to bfloat16, then the product with `up` rounded) with canon.h's exp_fixed (Cephes' polynomial, about
   1 ulp, as Sleef's that PyTorch uses): 16 lanes (AVX512-BF16 builds) or 8 (AVX2 + FMA), the same bits as the
   scalar silu_mul_rows_bf16 of the Python loop. On ROUTE_FIXED (batch-invariant runners) every product runs on
   fixed_gemm_bf16 and attention on the fixed kernel, so a step's bits are the same on every build; builds
   without the small GEMM (AVX2) run every product on fixed_gemm_bf16 on every route (the packs have the same
   layout). Compiled with -ffp-contract=off. */
#include "x86.h"
#include <math.h>
#include <stdlib.h>

#if (defined(__AVX512F__) && defined(__AVX512BF16__)) || (defined(__AVX2__) && defined(__FMA__))
int layers_available(void) { return 1; }
/* gate_up (N, 2 I) -> act (N, I) = bf16(bf16(silu(gate)) * up); I % 16 == 0. */
void silu_mul_bf16(const bf16* gate_up, bf16* act, int N, int I) {
#if !(defined(__AVX512F__) && defined(__AVX512BF16__))
    /* AVX2: 8 lanes at a time, exp8_ps giving exp_fixed's bits, so the same SiLU as the AVX512 loop */
    for (int n = 0; n < N; n++) {
        const bf16* g = gate_up + (int64_t)n * 2 * I;
        for (int i = 0; i < I; i += 8) {
            __m256 silu = round8_to_bf16(silu8_ps(bf16x8_to_f32(g + i)));
            __m256 product = _mm256_mul_ps(silu, bf16x8_to_f32(g + I + i));
            _mm_storeu_si128((__m128i*)(act + (int64_t)n * I + i), f32x8_to_bf16(product));
        }
    }
#else
    for (int n = 0; n < N; n++) {
        const bf16* g = gate_up + (int64_t)n * 2 * I;
        for (int i = 0; i < I; i += 16) {
            __m512 x = bf16x16_to_f32(g + i);
            __m512 silu = round_to_bf16(_mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), x)))));
            __m512 product = _mm512_mul_ps(silu, bf16x16_to_f32(g + I + i));
            _mm256_storeu_si256((__m256i*)(act + (int64_t)n * I + i), f32x16_to_bf16(product));
        }
    }
#endif
}
/* Every decoder layer of a packed bfloat16 step with head size 64. x (N, Dm) is the residual stream, updated
   in place; h (N, Dm) gets the final-norm hidden states. weights: per layer the addresses of input_norm,
   post_norm and the packed qkv, o, gate_up, down (6 per layer); caches: per layer the key and value cache
   (2 per layer). w8, if given (draft models): per layer the int8 copies of qkv, o, gate_up, down (int8 tiles,
   scales, column sums: 12 per layer), which steps of at most w8_rows rows use instead (w8_gemm_bf16).
   Returns 0, 1 where a buffer could not be allocated or a GEMM failed (x is then partly updated). */
int layers_bf16(bf16* x, bf16* h, const int64_t* weights, const int64_t* caches, int L, const bf16* final_norm,
                int N, int Dm, int H, int Hkv, int I, const bf16* cos, const bf16* sin_signed, const int64_t* start,
                const int64_t* offsets, int B, int Tmax, float scale, float eps, int threads, int route,
                const int64_t* w8, int w8_rows) {
    enum { D = 64 };
    int width = (H + 2 * Hkv) * D, widest = Dm > I ? Dm : I;
    int small = small_gemm_available();  /* else (AVX2) every product on the fixed-order kernel, same packs */
    if (!w8 || N > w8_rows) w8 = 0;
    bf16* qkv = malloc(sizeof(bf16) * (size_t)N * width);
    bf16* attn = malloc(sizeof(bf16) * (size_t)N * H * D);
    bf16* gate_up = malloc(sizeof(bf16) * (size_t)N * 2 * I);
    bf16* act = malloc(sizeof(bf16) * (size_t)N * I);
    bf16* delta = malloc(sizeof(bf16) * (size_t)N * Dm);
    void* work = w8 ? malloc((size_t)w8_work_bytes(N, widest > H * D ? widest : H * D)) : 0;
    int status = (!qkv || !attn || !gate_up || !act || !delta || (w8 && !work));
    #define W(l, k) ((const bf16*)(intptr_t)weights[LAYER_WEIGHTS * (l) + (k)])
    #define SPAN(l, k) ((int)weights[LAYER_WEIGHTS * (l) + 6 + (k)])
    /* projection k (0 qkv, 1 o, 2 gate_up, 3 down) of layer l: y (N, n) = a (N, in) W^T */
    #define GEMM(l, k, a, y, n, in)                                                                 \
        if (w8) status |= w8_gemm_bf16(a, N, in, (const int8_t*)(intptr_t)w8[12 * (l) + 3 * (k)],    \
                                       (const float*)(intptr_t)w8[12 * (l) + 3 * (k) + 1],           \
                                       (const int32_t*)(intptr_t)w8[12 * (l) + 3 * (k) + 2], n, y, work, threads, SCREEN_VNNI_ROWS) != 0; \
        else if (route == ROUTE_FIXED || !small)                                                    \
            status |= fixed_gemm_bf16(a, W(l, 2 + (k)), y, N, n, in, threads, SPAN(l, k));          \
        else small_gemm_bf16(a, W(l, 2 + (k)), y, N, n, in, threads, route == ROUTE_AMX);
    if (!status) add_rms_norm_bf16(x, 0, W(0, 0), h, N, Dm, eps);
    for (int l = 0; l < L && !status; l++) {
        GEMM(l, 0, h, qkv, width, Dm)
        status |= rope_attend_bf16(qkv, (bf16*)(intptr_t)caches[2 * l], (bf16*)(intptr_t)caches[2 * l + 1], cos, sin_signed,
                                  start, offsets, attn, B, H, Hkv, D, Tmax, scale, threads, route);
        if (status) break;
        GEMM(l, 1, attn, delta, Dm, H * D)
        add_rms_norm_bf16(x, delta, W(l, 1), h, N, Dm, eps);
        GEMM(l, 2, h, gate_up, 2 * I, Dm)
        silu_mul_bf16(gate_up, act, N, I);
        GEMM(l, 3, act, delta, Dm, I)
        add_rms_norm_bf16(x, delta, l + 1 < L ? W(l + 1, 0) : final_norm, h, N, Dm, eps);
    }
    #undef GEMM
    #undef SPAN
    #undef W
    free(qkv); free(attn); free(gate_up); free(act); free(delta); free(work);
    return status ? 1 : 0;
}
#else
int layers_available(void) { return 0; }
int layers_bf16(bf16* x, bf16* h, const int64_t* weights, const int64_t* caches, int L, const bf16* final_norm,
                int N, int Dm, int H, int Hkv, int I, const bf16* cos, const bf16* sin_signed, const int64_t* start,
                const int64_t* offsets, int B, int Tmax, float scale, float eps, int threads, int route,
                const int64_t* w8, int w8_rows) {
    (void)x; (void)h; (void)weights; (void)caches; (void)L; (void)final_norm; (void)N; (void)Dm; (void)H; (void)Hkv;
    (void)I; (void)cos; (void)sin_signed; (void)start; (void)offsets; (void)B; (void)Tmax; (void)scale; (void)eps;
    (void)threads; (void)route; (void)w8; (void)w8_rows;
    return 1;
}
void silu_mul_bf16(const bf16* gate_up, bf16* act, int N, int I) { (void)gate_up; (void)act; (void)N; (void)I; }
#endif
