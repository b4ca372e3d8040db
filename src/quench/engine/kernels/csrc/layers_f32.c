/* The float32 layer loop of batch-invariant runners: one call runs every decoder layer of a packed step (Llama's
   layer, head size 64) over the kernels the Python loop calls one at a time, in the same order with the same
   arguments, so each buffer gets the same bits: rms_norm_f32, the products (each stacked weight one call writing
   its columns of y through ldy, as quant.py's gemm_x8 and gemm do), rope_attend_f32 on ROUTE_FIXED, the residual
   sum x + delta in float32 (one IEEE addition per element, as PyTorch's: the same bits vectorised or not),
   silu_mul_f32. Plain C without intrinsics: every build has it. */
#include "quench_native.h"
#include <stdlib.h>

/* Whether one projection's entries at table[*at] are well formed, stepping *at past them: a count P, then P parts
   of F32_PART_FIELDS (kind, address, ggml type, N) whose widths sum to n; a fixed-order part is the whole of W. */
static int projection_ok(const int64_t* table, int64_t* at, int64_t entries, int n) {
    if (*at >= entries) return 0;
    int64_t parts = table[(*at)++], column = 0;
    if (parts < 1 || parts > entries || *at + parts * F32_PART_FIELDS > entries) return 0;
    for (int64_t p = 0; p < parts; p++, *at += F32_PART_FIELDS) {
        int64_t kind = table[*at], width = table[*at + 3];
        int known = kind == F32_PART_X8 || kind == F32_PART_X8_PACKED || kind == F32_PART_QUANT ||
                    (kind == F32_PART_FIXED && parts == 1);
        if (!known || width < 1 || column + width > n) return 0;
        column += width;
    }
    return column == n;
}

/* Whether the table holds L layers' entries and nothing else (layers_f32's layout). */
static int table_ok(const int64_t* table, int64_t entries, int L, int Dm, int H, int Hkv, int I) {
    enum { D = 64 };
    int64_t at = 0;
    int widths[4] = {(H + 2 * Hkv) * D, Dm, 2 * I, Dm};
    for (int l = 0; l < L; l++) {
        at += 2;  /* the input and post-attention norms */
        if (at > entries) return 0;
        for (int k = 0; k < 4; k++)
            if (!projection_ok(table, &at, entries, widths[k])) return 0;
    }
    return at == entries;
}

/* y (M, n) = a (M, K) W^T, W the parts of the projection at table[*at] stacked along N (checked by table_ok), each
   writing its columns of y; steps *at past it. Returns the first nonzero status of a product (1 refused, 2 out of
   memory), else 0. */
static int product(const int64_t* table, int64_t* at, const float* a, float* y, int M, int n, int K, int threads) {
    int64_t parts = table[(*at)++];
    int status = 0;
    float* out = y;
    for (int64_t p = 0; p < parts; p++, *at += F32_PART_FIELDS) {
        int64_t kind = table[*at], type = table[*at + 2], width = table[*at + 3];
        const void* w = (const void*)(intptr_t)table[*at + 1];
        if (status) continue;
        if (kind == F32_PART_X8_PACKED) status = quant_gemm_x8_packed(a, w, out, n, M, (int)width, K, (int)type, threads);
        else if (kind == F32_PART_X8) status = quant_gemm_x8(a, w, out, n, M, (int)width, K, (int)type, threads);
        else if (kind == F32_PART_QUANT) status = quant_gemm_f32(a, w, out, n, M, (int)width, K, (int)type, threads);
        else fixed_gemm_f32(a, w, out, M, n, K, threads);
        out += width;
    }
    return status;
}

/* x (N, Dm) += delta, element by element. */
static void add_f32(float* x, const float* delta, int64_t count) {
    for (int64_t i = 0; i < count; i++) x[i] = x[i] + delta[i];
}

int layers_f32(float* x, float* h, const int64_t* table, int64_t entries, const int64_t* caches, int cache_bf16, int L,
               const float* final_norm, int N, int Dm, int H, int Hkv, int I, const float* cos, const float* sin_signed,
               const int64_t* start, const int64_t* offsets, int B, int Tmax, float scale, float eps, int threads) {
    enum { D = 64 };
    if (L < 1 || !table_ok(table, entries, L, Dm, H, Hkv, I)) return 1;
    int width = (H + 2 * Hkv) * D;
    int64_t at = 0, count = (int64_t)N * Dm;
    float* qkv = malloc(sizeof(float) * ((size_t)N * width + 1));
    float* attn = malloc(sizeof(float) * ((size_t)N * H * D + 1));
    float* gate_up = malloc(sizeof(float) * ((size_t)N * 2 * I + 1));
    float* act = malloc(sizeof(float) * ((size_t)N * I + 1));
    float* delta = malloc(sizeof(float) * ((size_t)count + 1));
    int status = (!qkv || !attn || !gate_up || !act || !delta) ? 2 : 0;
    #define NORM(i) ((const float*)(intptr_t)table[(i)])
    if (!status) rms_norm_f32(x, NORM(0), h, N, Dm, eps);
    for (int l = 0; l < L && !status; l++) {
        const float* post_norm = NORM(at + 1);
        at += 2;
        if ((status = product(table, &at, h, qkv, N, width, Dm, threads))) break;
        void *keys = (void*)(intptr_t)caches[2 * l], *values = (void*)(intptr_t)caches[2 * l + 1];
        if (cache_bf16 ? rope_attend_f32_bf16(qkv, keys, values, cos, sin_signed, start, offsets, attn, B, H, Hkv, D, Tmax,
                                              scale, threads)
                       : rope_attend_f32(qkv, keys, values, cos, sin_signed, start, offsets, attn, B, H, Hkv, D, Tmax,
                                         scale, threads, ROUTE_FIXED)) {
            status = 2;
            break;
        }
        if ((status = product(table, &at, attn, delta, N, Dm, H * D, threads))) break;
        add_f32(x, delta, count);
        rms_norm_f32(x, post_norm, h, N, Dm, eps);
        if ((status = product(table, &at, h, gate_up, N, 2 * I, Dm, threads))) break;
        silu_mul_f32(gate_up, act, N, I, threads);
        if ((status = product(table, &at, act, delta, N, Dm, I, threads))) break;
        add_f32(x, delta, count);
        rms_norm_f32(x, l + 1 < L ? NORM(at) : final_norm, h, N, Dm, eps);
    }
    #undef NORM
    free(qkv); free(attn); free(gate_up); free(act); free(delta);
    return status;
}
