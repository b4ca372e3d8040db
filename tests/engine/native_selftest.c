/* The kernels' correctness checks in C, for builds no Python of this machine can load (aarch64 under
   qemu-user): each kernel against a scalar reference written here, and the batch-invariant kernels' rows
   against the same rows computed alone. Prints one line per check and "N passed, N failed"; exits 1 on a
   failure. Built with the library's units by tests/engine/test_native_cross.py. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"

static int passed, failed;
static uint64_t state = 0x9E3779B97F4A7C15ull;

static float uniform(void) {  /* xorshift64*, in [-1, 1) */
    state ^= state >> 12; state ^= state << 25; state ^= state >> 27;
    return (float)((state * 0x2545F4914F6CDD1Dull) >> 40) / (float)(1 << 23) - 1.0f;
}

static void check(int ok, const char* name) {
    printf("%s %s\n", ok ? "ok  " : "FAIL", name);
    if (ok) passed++; else failed++;
}

static float* randoms(int n) {
    float* p = malloc(sizeof(float) * (size_t)n);
    for (int i = 0; i < n; i++) p[i] = uniform();
    return p;
}

/* W (N, K) -> (ceil(N/16), K, 16), zeros past N. */
static float* pack_f32(const float* w, int N, int K) {
    int blocks = (N + 15) / 16;
    float* p = calloc((size_t)blocks * K * 16, sizeof(float));
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) p[((int64_t)(n / 16) * K + k) * 16 + n % 16] = w[(int64_t)n * K + k];
    return p;
}

/* W (N, K) bfloat16 -> (ceil(N/16), ceil(K/2), 16, 2), zeros past N and K. */
static bf16* pack_pairs(const bf16* w, int N, int K) {
    int blocks = (N + 15) / 16, pairs = (K + 1) / 2;
    bf16* p = calloc((size_t)blocks * pairs * 32, sizeof(bf16));
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++)
            p[(((int64_t)(n / 16) * pairs + k / 2) * 16 + n % 16) * 2 + k % 2] = w[(int64_t)n * K + k];
    return p;
}

static void check_fixed_gemm_f32(void) {
    enum { M = 9, N = 45, K = 37 };
    float *x = randoms(M * K), *w = randoms(N * K), *wp = pack_f32(w, N, K);
    float y[M * N], alone[N];
    int exact = 1, invariant = 1;
    fixed_gemm_f32(x, wp, y, M, N, K, 1);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            float acc = 0.0f;  /* the documented order: one fused multiply-add per k from zero */
            for (int k = 0; k < K; k++) acc = fmaf(x[m * K + k], w[n * K + k], acc);
            exact &= memcmp(&acc, &y[m * N + n], sizeof acc) == 0;
        }
    for (int m = 0; m < M; m++) {
        fixed_gemm_f32(x + m * K, wp, alone, 1, N, K, 1);
        invariant &= memcmp(alone, y + m * N, sizeof alone) == 0;
    }
    check(exact, "fixed_gemm_f32 equals the fused multiply-add sequence, bit for bit");
    check(invariant, "fixed_gemm_f32 gives each row the bits it gets alone");
    free(x); free(w); free(wp);
}

static void check_fixed_gemm_bf16(void) {
    enum { M = 7, N = 40, K = 72 };
    bf16 x[M * K], w[N * K], y[M * N], alone[N];
    for (int i = 0; i < M * K; i++) x[i] = store_bf16(uniform());
    for (int i = 0; i < N * K; i++) w[i] = store_bf16(uniform());
    bf16* wp = pack_pairs(w, N, K);
    int status = fixed_gemm_bf16(x, wp, y, M, N, K, 1, 0), close = 1, invariant = 1;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double acc = 0.0;
            for (int k = 0; k < K; k++) acc += (double)load_bf16(x[m * K + k]) * load_bf16(w[n * K + k]);
            close &= fabs(load_bf16(y[m * N + n]) - acc) <= 1e-2 * (1.0 + fabs(acc));
        }
    for (int m = 0; m < M; m++) {
        status |= fixed_gemm_bf16(x + m * K, wp, alone, 1, N, K, 1, 0);
        invariant &= memcmp(alone, y + m * N, sizeof alone) == 0;
    }
    check(status == 0 && close, "fixed_gemm_bf16 is x W^T to bfloat16 precision");
    check(invariant, "fixed_gemm_bf16 gives each row the bits it gets alone");
    free(wp);
}

static void check_argmax(void) {
    enum { R = 5, V = 333 };
    float x[R * V];
    bf16 xb[R * V];
    int64_t got[R], gotb[R];
    int ok = 1, okb = 1;
    for (int i = 0; i < R * V; i++) { x[i] = floorf(uniform() * 3.0f); xb[i] = store_bf16(x[i]); }  /* ties */
    argmax_f32(x, got, R, V, V);
    argmax_bf16(xb, gotb, R, V, V);
    for (int r = 0; r < R; r++) {
        int64_t best = 0;
        for (int v = 1; v < V; v++) if (x[r * V + v] > x[r * V + best]) best = v;  /* the first maximum */
        ok &= got[r] == best;
        okb &= gotb[r] == best;
    }
    check(ok, "argmax_f32 returns each row's first maximum");
    check(okb, "argmax_bf16 returns each row's first maximum");
}

static void check_norms(void) {
    enum { N = 4, D = 96 };
    float *x = randoms(N * D), *weight = randoms(D), out[N * D];
    int close = 1;
    rms_norm_f32(x, weight, out, N, D, 1e-5f);
    for (int n = 0; n < N; n++) {
        double squares = 0.0;
        for (int d = 0; d < D; d++) squares += (double)x[n * D + d] * x[n * D + d];
        double inverse = 1.0 / sqrt(squares / D + 1e-5);
        for (int d = 0; d < D; d++)
            close &= fabs(out[n * D + d] - x[n * D + d] * inverse * weight[d]) <= 1e-5 * (1.0 + fabs(out[n * D + d]));
    }
    check(close, "rms_norm_f32 is x / rms(x) * weight");
    bf16 xb[N * D], delta[N * D], wb[D], normed[N * D];
    float summed[N * D];
    for (int i = 0; i < N * D; i++) {
        xb[i] = store_bf16(x[i]); delta[i] = store_bf16(uniform());
        summed[i] = round_bf16(load_bf16(xb[i]) + load_bf16(delta[i]));
    }
    for (int d = 0; d < D; d++) wb[d] = store_bf16(weight[d] + 1.5f);
    add_rms_norm_bf16(xb, delta, wb, normed, N, D, 1e-5f);
    int sums = 1;
    close = 1;
    for (int n = 0; n < N; n++) {
        double squares = 0.0;
        for (int d = 0; d < D; d++) squares += (double)summed[n * D + d] * summed[n * D + d];
        double inverse = 1.0 / sqrt(squares / D + 1e-5);
        for (int d = 0; d < D; d++) {
            sums &= load_bf16(xb[n * D + d]) == summed[n * D + d];
            double want = summed[n * D + d] * inverse * load_bf16(wb[d]);
            close &= fabs(load_bf16(normed[n * D + d]) - want) <= 1.6e-2 * (1e-3 + fabs(want));  /* two bf16 roundings */
        }
    }
    check(sums, "add_rms_norm_bf16 adds the residual in place, rounded to bfloat16");
    check(close, "add_rms_norm_bf16 normalises to bfloat16 precision");
    free(x); free(weight);
}

static void check_silu(void) {
    enum { N = 3, I = 32 };
    float *gate_up = randoms(N * 2 * I), act[N * I];
    int close = 1;
    for (int i = 0; i < N * 2 * I; i++) gate_up[i] *= 6.0f;
    silu_mul_f32(gate_up, act, N, I);
    for (int n = 0; n < N; n++)
        for (int i = 0; i < I; i++) {
            double g = gate_up[n * 2 * I + i], want = g / (1.0 + exp(-g)) * gate_up[n * 2 * I + I + i];
            close &= fabs(act[n * I + i] - want) <= 1e-5 * (1.0 + fabs(want));
        }
    check(close, "silu_mul_f32 is silu(gate) * up");
    free(gate_up);
}

static void check_rope(void) {
    enum { D = 64 };
    float x[D], c[D], s[D], out[D], store[D];
    int exact = 1;
    for (int i = 0; i < D; i++) { x[i] = uniform(); c[i] = uniform(); s[i] = uniform(); }
    rope_f32(x, c, s, D, out, store);
    for (int i = 0; i < D; i++) {
        float rotated = x[i < D / 2 ? i + D / 2 : i - D / 2];
        float a = x[i] * c[i], b = rotated * s[i], want = a + b;
        exact &= out[i] == want && store[i] == want;
    }
    check(exact, "rope_f32 rotates half the head with PyTorch's roundings");
}

int main(void) {
    check_fixed_gemm_f32();
    check_fixed_gemm_bf16();
    check_argmax();
    check_norms();
    check_silu();
    check_rope();
    printf("selftest: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
