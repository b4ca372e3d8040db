/* The kernels' correctness checks in C, for builds no Python of this machine can load (aarch64 under
   qemu-user): each kernel against a scalar reference written here (the fixed-order GEMMs and the GGUF block
   products bit for bit against their documented fmaf order, on odd shapes and hostile values), and the
   batch-invariant kernels' rows against the same rows computed alone. Prints the build's vector levels, one
   line per check, a digest of each exact kernel's outputs (to compare architectures) and "N passed, N failed";
   exits 1 on a failure. Built with the library's units by tests/engine/kernels/test_native_cross.py. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "canon.h"

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

/* A value of kind `mode`: 0 uniform in [-1, 1); 1 a wide range of exponents, with denormals and -0.0; 2 near
   float32's largest (partial sums overflow or not with the order); 3 uniform with inf, -inf, nan, -0.0 and
   denormals sprinkled in. */
static float value_of(int mode) {
    float u = uniform();
    if (mode == 1) {
        float r = uniform();
        if (r < -0.9f) return u * 1e-39f;  /* denormal */
        if (r > 0.95f) return -0.0f;
        return ldexpf(u, (int)(uniform() * 40.0f));
    }
    if (mode == 2) return u * 3e38f;
    if (mode == 3) {
        static const float specials[] = {INFINITY, -INFINITY, NAN, -0.0f, 1e-45f, -2e-40f};
        float r = uniform();
        if (r > 0.94f) return specials[(int)((r - 0.94f) * 100.0f) % 6];
    }
    return u;
}

/* Bit for bit, every NaN counted equal to every NaN: which NaN operand an FMA passes on is the instruction form's
   choice (x86's 132/213/231 forms differ, as do x86 and ARM), not the summation order's. */
static int same_float(float a, float b) { return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof a) == 0; }

/* FNV-1a of a kernel's outputs (every NaN as one), printed per kernel so builds of two architectures can be
   compared: the same inputs on every machine, so the same digest where the bits are the same. */
enum { DIGEST_F32, DIGEST_BF16, DIGEST_QUANT, DIGEST_ATTEND, DIGEST_SILU, DIGEST_SAMPLE, DIGEST_QDOT,
       DIGEST_ATTEND_BF16_CACHE, DIGESTS };
static uint64_t digests[DIGESTS] = {0xcbf29ce484222325ull, 0xcbf29ce484222325ull, 0xcbf29ce484222325ull,
                                   0xcbf29ce484222325ull, 0xcbf29ce484222325ull, 0xcbf29ce484222325ull,
                                   0xcbf29ce484222325ull, 0xcbf29ce484222325ull};
static void fold(int which, float v) {
    uint32_t bits = 0x7fc00000u;
    if (!isnan(v)) memcpy(&bits, &v, 4);
    digests[which] = (digests[which] ^ bits) * 0x100000001b3ull;
}

/* The shapes the fixed-order kernels are checked on: odd N (not a multiple of 16 or 4), K = 1, odd K, and M
   past the 4-row block; N from one block to past two 6-block groups. */
static const int SHAPES[][3] = {{1, 1, 1}, {1, 16, 1}, {2, 5, 1}, {3, 17, 2}, {4, 96, 3}, {5, 97, 33}, {9, 45, 37},
                                {2, 113, 64}, {7, 200, 3}, {1, 7, 129}, {6, 33, 1}, {4, 100, 17}, {3, 211, 8}};
enum { SHAPE_COUNT = sizeof SHAPES / sizeof SHAPES[0] };

static void check_fixed_gemm_f32(void) {
    for (int mode = 0; mode < 4; mode++) {
        int exact = 1, invariant = 1, threaded = 1;
        for (int shape = 0; shape < SHAPE_COUNT; shape++) {
            int M = SHAPES[shape][0], N = SHAPES[shape][1], K = SHAPES[shape][2];
            float *x = malloc(sizeof(float) * M * K), *w = malloc(sizeof(float) * N * K);
            for (int i = 0; i < M * K; i++) x[i] = value_of(mode);
            for (int i = 0; i < N * K; i++) w[i] = value_of(mode == 2 ? 0 : mode);  /* mode 2: large x, small w */
            float *wp = pack_f32(w, N, K), *y = malloc(sizeof(float) * M * N), *again = malloc(sizeof(float) * M * N);
            fixed_gemm_f32(x, wp, y, M, N, K, 1);
            for (int m = 0; m < M; m++)
                for (int n = 0; n < N; n++) {
                    float acc = 0.0f;  /* the documented order: one fused multiply-add per k from zero */
                    for (int k = 0; k < K; k++) acc = fmaf(x[m * K + k], w[n * K + k], acc);
                    if (exact && !same_float(acc, y[m * N + n]))
                        printf("     mode %d M %d N %d K %d: y[%d][%d] = %a, fmaf order gives %a\n", mode, M, N, K, m, n,
                               y[m * N + n], acc);
                    exact &= same_float(acc, y[m * N + n]);
                    fold(DIGEST_F32, y[m * N + n]);
                }
            for (int m = 0; m < M; m++) {
                fixed_gemm_f32(x + m * K, wp, again, 1, N, K, 1);
                invariant &= memcmp(again, y + m * N, sizeof(float) * N) == 0;
            }
            fixed_gemm_f32(x, wp, again, M, N, K, 3);
            threaded &= memcmp(again, y, sizeof(float) * M * N) == 0;
            free(x); free(w); free(wp); free(y); free(again);
        }
        char name[160];
        snprintf(name, sizeof name, "fixed_gemm_f32 (values %d) equals the fused multiply-add sequence, bit for bit", mode);
        check(exact, name);
        snprintf(name, sizeof name, "fixed_gemm_f32 (values %d) gives each row its bits alone and on 3 threads", mode);
        check(invariant && threaded, name);
    }
}

/* Values whose sum depends on its order far above bfloat16's precision (mode 4): x = +-1, W small integers with
   2^24 and -2^24 at two places of each row, so the small terms between them are rounded to even and the rest
   are not. Every route takes these rows (no denormal is possible). */
static void cancelling(bf16* x, bf16* w, int M, int N, int K) {
    for (int i = 0; i < M * K; i++) x[i] = store_bf16(uniform() < 0 ? -1.0f : 1.0f);
    for (int n = 0; n < N; n++) {
        for (int k = 0; k < K; k++) w[n * K + k] = store_bf16(floorf((uniform() + 1.0f) * 3.5f) - 3.0f);
        if (K < 3) continue;
        int first = (int)((uniform() + 1.0f) * 0.5f * (K - 2)), second = first + 1 + (int)((uniform() + 1.0f) * 0.5f * (K - 2 - first));
        w[n * K + first] = store_bf16(16777216.0f);
        w[n * K + (second < K ? second : K - 1)] = store_bf16(-16777216.0f);
    }
}

/* Every build gives each output the fmaf sequence's bits: widened, or through VDPBF16PS where that performs the
   same steps (rows whose values keep clear of denormals: modes 0, 2 and 4; modes 1 and 3 mix both routes). */
static void check_fixed_gemm_bf16(void) {
    for (int mode = 0; mode < 5; mode++) {
        int exact = 1, invariant = 1, status = 0;
        for (int shape = 0; shape < SHAPE_COUNT; shape++) {
            int M = SHAPES[shape][0], N = SHAPES[shape][1], K = SHAPES[shape][2];
            bf16 *x = malloc(sizeof(bf16) * M * K), *w = malloc(sizeof(bf16) * N * K);
            bf16 *y = malloc(sizeof(bf16) * M * N), *plain = malloc(sizeof(bf16) * M * N), *alone = malloc(sizeof(bf16) * N);
            if (mode < 4) {
                for (int i = 0; i < M * K; i++) x[i] = store_bf16(value_of(mode));
                for (int i = 0; i < N * K; i++) w[i] = store_bf16(value_of(mode == 2 ? 0 : mode));
            } else
                cancelling(x, w, M, N, K);
            bf16* wp = pack_pairs(w, N, K);
            int span = bf16_span(w, (int64_t)N * K);
            status |= fixed_gemm_bf16(x, wp, y, M, N, K, 1, span);
            status |= fixed_gemm_bf16(x, wp, plain, M, N, K, 1, -1);  /* every row widened */
            for (int m = 0; m < M; m++)
                for (int n = 0; n < N; n++) {
                    float acc = 0.0f;
                    for (int k = 0; k < K; k++) acc = fmaf(load_bf16(x[m * K + k]), load_bf16(w[n * K + k]), acc);
                    float got = load_bf16(y[m * N + n]), widened = load_bf16(plain[m * N + n]);
                    int ok = same_float(round_bf16(acc), got) && same_float(round_bf16(acc), widened);
                    if (exact && !ok)
                        printf("     mode %d M %d N %d K %d: y[%d][%d] = %a (widened %a), fmaf order gives %a\n", mode, M,
                               N, K, m, n, got, widened, round_bf16(acc));
                    exact &= ok;
                    fold(DIGEST_BF16, got);
                }
            for (int m = 0; m < M; m++) {
                status |= fixed_gemm_bf16(x + m * K, wp, alone, 1, N, K, 2, span);
                invariant &= memcmp(alone, y + m * N, sizeof(bf16) * N) == 0;
            }
            free(x); free(w); free(wp); free(y); free(plain); free(alone);
        }
        char name[160];
        snprintf(name, sizeof name, "fixed_gemm_bf16 (values %d) equals the widened fused multiply-add sequence, bit for bit", mode);
        check(status == 0 && exact, name);
        snprintf(name, sizeof name, "fixed_gemm_bf16 (values %d) gives each row the bits it gets alone on 2 threads", mode);
        check(invariant, name);
    }
}

/* ---- The fixed attention (ROUTE_FIXED): attend.c's arithmetic written out one value at a time. ---- */

static float dot_reference(const float* q, const float* k, int D) {
    float lanes[16] = {0};
    for (int d = 0; d < D; d++) lanes[d % 16] = fmaf(q[d], k[d], lanes[d % 16]);
    return reduce16_fixed(lanes);
}

/* One query (q, D floats, RoPE applied) over keys 0 .. seen - 1 of one (row, kv head): out (D floats). */
static void attend_reference(const float* q, const float* keys, const float* values, int seen, int D, float scale,
                             float* out) {
    float* p = malloc(sizeof(float) * (size_t)seen);
    float lanes[16] = {0}, top;
    for (int t = 0; t < seen; t++) p[t] = dot_reference(q, keys + (int64_t)t * D, D) * scale;
    top = p[0];
    for (int t = 1; t < seen; t++) top = p[t] > top ? p[t] : top;
    for (int t = 0; t < seen; t++) { p[t] = exp_fixed(p[t] - top); lanes[t % 16] += p[t]; }
    float inverse = 1.0f / reduce16_fixed(lanes);
    for (int d = 0; d < D; d++) out[d] = 0.0f;
    for (int t = 0; t < seen; t++)
        for (int d = 0; d < D; d++) out[d] = fmaf(p[t] * inverse, values[(int64_t)t * D + d], out[d]);
    free(p);
}

/* The fixed attention of each activation and cache type, on ROUTE_FIXED. */
static int attend_bf16_fixed(const bf16* qkv, bf16* kc, bf16* vc, const bf16* cos, const bf16* sin_signed,
                             const int64_t* start, const int64_t* offsets, bf16* out, int B, int H, int Hkv, int D,
                             int Tmax, float scale, int threads) {
    return rope_attend_bf16(qkv, kc, vc, cos, sin_signed, start, offsets, out, B, H, Hkv, D, Tmax, scale, threads,
                            ROUTE_FIXED);
}
static int attend_f32_fixed(const float* qkv, float* kc, float* vc, const float* cos, const float* sin_signed,
                            const int64_t* start, const int64_t* offsets, float* out, int B, int H, int Hkv, int D,
                            int Tmax, float scale, int threads) {
    return rope_attend_f32(qkv, kc, vc, cos, sin_signed, start, offsets, out, B, H, Hkv, D, Tmax, scale, threads,
                           ROUTE_FIXED);
}

/* The rows of an attention check: B rows with earlier keys in the cache (start) and new tokens (offsets). */
struct rows { int B, H, Hkv, Tmax; int64_t start[4], offsets[5]; };
/* Ragged decode-sized feeds (a few tokens each), folded into the kernel's digest */
static const struct rows SHORT_FEEDS = {3, 4, 2, 40, {0, 7, 21}, {0, 5, 6, 9}};
/* Feeds long enough that their (row, kv head) pairs are too few for two threads: each is cut into spans */
static const struct rows LONG_FEEDS = {2, 6, 2, 120, {0, 40}, {0, 70, 103}};

/* Rows `r` (SHORT_FEEDS, LONG_FEEDS), head sizes 64, 48 (not a multiple of 16) and 16; scores of kind `mode` (0
   moderate, 3 with inf, NaN and denormals), two threads. Activations of type T, caches of type C: each new key is
   RoPE's output stored as C, each new value the token's value stored as C, and each output the written order over
   the keys and values the caches then hold. `digest`: the outputs folded into DIGEST, or not. */
#define CHECK_ATTEND(T, SUFFIX, LOAD, STORE, C, CLOAD, CSTORE, NAME, ATTEND_CALL, DIGEST)             \
static int check_attend_##NAME(int D, int mode, const struct rows* r, int digest) {                 \
    const int B = r->B, H = r->H, Hkv = r->Hkv, Tmax = r->Tmax;                                      \
    const int64_t *start = r->start, *offsets = r->offsets;                                          \
    int N = (int)offsets[B], width = H + 2 * Hkv, ok = 1;                                            \
    T* qkv = malloc(sizeof(T) * (size_t)N * width * D);                                              \
    C* kc = malloc(sizeof(C) * (size_t)B * Hkv * Tmax * D);                                          \
    C* vc = malloc(sizeof(C) * (size_t)B * Hkv * Tmax * D);                                          \
    T* cos = malloc(sizeof(T) * (size_t)Tmax * D);                                                   \
    T* sin_signed = malloc(sizeof(T) * (size_t)Tmax * D);                                            \
    T* out = malloc(sizeof(T) * (size_t)N * H * D);                                                  \
    float *q = malloc(sizeof(float) * D), *keys = malloc(sizeof(float) * Tmax * D);                  \
    float *values = malloc(sizeof(float) * Tmax * D), *want = malloc(sizeof(float) * D);             \
    for (int i = 0; i < N * width * D; i++) qkv[i] = STORE(value_of(mode) * 3.0f);                   \
    for (int i = 0; i < B * Hkv * Tmax * D; i++) { kc[i] = CSTORE(value_of(mode)); vc[i] = CSTORE(value_of(mode)); } \
    for (int i = 0; i < Tmax * D; i++) { cos[i] = STORE(uniform()); sin_signed[i] = STORE(uniform()); } \
    ok &= ATTEND_CALL(qkv, kc, vc, cos, sin_signed, start, offsets, out, B, H, Hkv, D, Tmax, 0.125f, 2) == 0; \
    for (int b = 0; b < B; b++)                                                                      \
        for (int s = 0; s < (int)(offsets[b + 1] - offsets[b]); s++) {                               \
            const T* tok = qkv + (offsets[b] + s) * width * D;                                       \
            int64_t pos = start[b] + s;                                                              \
            for (int j = 0; j < Hkv; j++) { /* what the call wrote */                                \
                int64_t at = (((int64_t)b * Hkv + j) * Tmax + pos) * D;                              \
                rope_##SUFFIX(tok + (H + j) * D, cos + pos * D, sin_signed + pos * D, D, q, 0);      \
                for (int d = 0; d < D; d++)                                                          \
                    ok &= same_float(CLOAD(kc[at + d]), CLOAD(CSTORE(q[d])))                         \
                          && same_float(CLOAD(vc[at + d]), CLOAD(CSTORE(LOAD(tok[(H + Hkv + j) * D + d])))); \
            }                                                                                        \
            for (int h = 0; h < H; h++) {                                                            \
                int j = h / (H / Hkv), seen = (int)start[b] + s + 1;                                 \
                rope_##SUFFIX(tok + h * D, cos + pos * D, sin_signed + pos * D, D, q, 0);            \
                for (int t = 0; t < seen; t++)                                                       \
                    for (int d = 0; d < D; d++) {                                                    \
                        keys[t * D + d] = CLOAD(kc[(((int64_t)b * Hkv + j) * Tmax + t) * D + d]);    \
                        values[t * D + d] = CLOAD(vc[(((int64_t)b * Hkv + j) * Tmax + t) * D + d]);  \
                    }                                                                                \
                attend_reference(q, keys, values, seen, D, 0.125f, want);                            \
                for (int d = 0; d < D; d++) {                                                        \
                    float got = LOAD(out[(offsets[b] + s) * H * D + h * D + d]);                     \
                    if (ok && !same_float(got, LOAD(STORE(want[d]))))                                \
                        printf("     D %d mode %d row %d token %d head %d [%d] = %a, the written order gives %a\n", \
                               D, mode, b, s, h, d, got, LOAD(STORE(want[d])));                     \
                    ok &= same_float(got, LOAD(STORE(want[d])));                                     \
                    if (digest) fold(DIGEST, got);                                                   \
                }                                                                                    \
            }                                                                                        \
        }                                                                                            \
    free(qkv); free(kc); free(vc); free(cos); free(sin_signed); free(out); free(q); free(keys); free(values); free(want); \
    return ok;                                                                                       \
}
CHECK_ATTEND(bf16, bf16, load_bf16, store_bf16, bf16, load_bf16, store_bf16, bf16, attend_bf16_fixed, DIGEST_ATTEND)
CHECK_ATTEND(float, f32, load_f32, store_f32, float, load_f32, store_f32, f32, attend_f32_fixed, DIGEST_ATTEND)
CHECK_ATTEND(float, f32, load_f32, store_f32, bf16, load_bf16, store_bf16, f32_bf16_cache, rope_attend_f32_bf16,
             DIGEST_ATTEND_BF16_CACHE)

static void check_attend(void) {
    static const int sizes[] = {64, 48, 16};
    for (int mode = 0; mode < 4; mode += 3) {
        int bf = 1, f32 = 1, mixed = 1, spans = 1;
        for (int i = 0; i < 3; i++) {
            bf &= check_attend_bf16(sizes[i], mode, &SHORT_FEEDS, 1);
            f32 &= check_attend_f32(sizes[i], mode, &SHORT_FEEDS, 1);
            uint64_t kept = state;  /* the later checks draw the inputs they drew before these existed */
            mixed &= check_attend_f32_bf16_cache(sizes[i], mode, &SHORT_FEEDS, 1);
            spans &= check_attend_bf16(sizes[i], mode, &LONG_FEEDS, 0) && check_attend_f32(sizes[i], mode, &LONG_FEEDS, 0)
                     && check_attend_f32_bf16_cache(sizes[i], mode, &LONG_FEEDS, 0);
            state = kept;
        }
        char name[160];
        snprintf(name, sizeof name, "fixed attention, bfloat16 (values %d), equals its written order bit for bit", mode);
        check(bf, name);
        snprintf(name, sizeof name, "fixed attention, float32 (values %d), equals its written order bit for bit", mode);
        check(f32, name);
        snprintf(name, sizeof name, "fixed attention, float32 over bfloat16 caches (values %d), writes its keys and "
                 "values rounded and equals its written order bit for bit", mode);
        check(mixed, name);
        snprintf(name, sizeof name, "fixed attention over prompt-long feeds, cut into spans for two threads (values %d), "
                 "equals its written order bit for bit", mode);
        check(spans, name);
    }
}

/* Every SiLU (the scalar rows kernel, and the layer loop's vector one where the build has it) is silu_fixed's. */
static void check_silu_fixed(void) {
    enum { N = 3, I = 256 };
    bf16 gate_up[N * 2 * I], rows[N * I], loop[N * I];
    float g32[N * 2 * I], act32[N * I];
    int ok = 1, vector = layers_available();
    for (int i = 0; i < N * 2 * I; i++) {
        float v = i % 7 == 0 ? value_of(3) * 200.0f : i % 5 == 0 ? value_of(1) : value_of(0) * 110.0f;
        g32[i] = v;
        gate_up[i] = store_bf16(v);
    }
    silu_mul_rows_bf16(gate_up, rows, N, I, 2);
    silu_mul_f32(g32, act32, N, I, 2);
    if (vector) silu_mul_bf16(gate_up, loop, N, I);
    for (int n = 0; n < N; n++)
        for (int i = 0; i < I; i++) {
            const bf16* row = gate_up + n * 2 * I;
            float want = load_bf16(store_bf16(round_bf16(silu_fixed(load_bf16(row[i]))) * load_bf16(row[I + i])));
            float want32 = silu_fixed(g32[n * 2 * I + i]) * g32[n * 2 * I + I + i];
            ok &= same_float(load_bf16(rows[n * I + i]), want) && same_float(act32[n * I + i], want32);
            if (vector) ok &= same_float(load_bf16(loop[n * I + i]), want);
            fold(DIGEST_SILU, load_bf16(rows[n * I + i]));
            fold(DIGEST_SILU, act32[n * I + i]);
        }
    check(ok, "every SiLU equals silu_fixed (exp_fixed), bit for bit");
}

/* ---- GGUF block products: quant.c's values and summation order, written out from its header comment. ---- */

static float half(const uint8_t* p) {  /* IEEE half -> float, exact */
    uint32_t h = (uint32_t)(p[0] | p[1] << 8), sign = (h & 0x8000u) << 16, exponent = (h >> 10) & 31, mantissa = h & 1023;
    float f;
    if (exponent == 0) { f = ldexpf((float)mantissa, -24); return sign ? -f : f; }
    uint32_t bits = sign | (exponent == 31 ? 0x7f800000u : (exponent + 112) << 23) | mantissa << 13;
    memcpy(&f, &bits, 4);
    return f;
}

/* Value j (< the block's values) of one block, with gguf dequantize's float32 operations. */
static float block_value(int type, const uint8_t* b, int j) {
    int l = j % 32, g = j / 32;
    switch (type) {
        case GGML_TYPE_Q4_0: return half(b) * (float)(((b[2 + l % 16] >> 4 * (l / 16)) & 15) - 8);
        case GGML_TYPE_Q4_1: return half(b) * (float)((b[4 + l % 16] >> 4 * (l / 16)) & 15) + half(b + 2);
        case GGML_TYPE_Q8_0: return (float)(int8_t)b[2 + l] * half(b);
        case GGML_TYPE_Q6_K: {
            int h = j / 128, k = (j / 32) % 4;
            int q = ((b[64 * h + 32 * (k % 2) + l] >> 4 * (k / 2)) & 15) | ((b[128 + 32 * h + l] >> 2 * k) & 3) << 4;
            return (half(b + 208) * (float)(int8_t)b[192 + j / 16]) * (float)(q - 32);
        }
        default: {  /* Q4_K, Q5_K: 6-bit (scale, min) pair g of the 12 bytes at b + 4 */
            const uint8_t* s = b + 4;
            int scale = g < 4 ? s[g] & 63 : (s[g + 4] & 15) | (s[g - 4] >> 6) << 4;
            int min = g < 4 ? s[g + 4] & 63 : (s[g + 4] >> 4) | (s[g] >> 6) << 4;
            int q = (b[(type == GGML_TYPE_Q4_K ? 16 : 48) + 32 * (g / 2) + l] >> 4 * (g & 1)) & 15;
            if (type == GGML_TYPE_Q5_K) q |= ((b[16 + l] >> g) & 1) << 4;
            return (half(b) * (float)scale) * (float)q - half(b + 2) * (float)min;
        }
    }
}

/* x . w in quant.c's order: 32 lanes (lane l: k = l mod 32, fmaf in increasing k from zero), then
   s_j = (L[j] + L[8 + j]) + (L[16 + j] + L[24 + j]), then ((s0 + s4) + (s2 + s6)) + ((s1 + s5) + (s3 + s7)). */
static float block_dot(const float* x, const float* w, int K) {
    float lanes[32] = {0}, s[8];
    for (int k = 0; k < K; k++) lanes[k % 32] = fmaf(x[k], w[k], lanes[k % 32]);
    for (int j = 0; j < 8; j++) s[j] = (lanes[j] + lanes[8 + j]) + (lanes[16 + j] + lanes[24 + j]);
    return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}

static uint8_t byte(void) { uniform(); return (uint8_t)(state >> 32); }

/* Random block bytes; each f16 scale moderate and finite, or (hostile) random bits or a special half. */
static void random_blocks(int type, uint8_t* data, int blocks, int hostile) {
    static const uint16_t specials[] = {0x0000, 0x8000, 0x0001, 0x03ff, 0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0x7c01};
    int size = type == GGML_TYPE_Q4_0 ? 18 : type == GGML_TYPE_Q4_1 ? 20 : type == GGML_TYPE_Q8_0 ? 34
             : type == GGML_TYPE_Q4_K ? 144 : type == GGML_TYPE_Q5_K ? 176 : 210;
    int at[2] = {type == GGML_TYPE_Q6_K ? 208 : 0, type == GGML_TYPE_Q4_1 || type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q5_K ? 2 : -1};
    for (int i = 0; i < blocks * size; i++) data[i] = byte();
    for (int b = 0; b < blocks; b++)
        for (int h = 0; h < 2 && at[h] >= 0; h++) {
            uint16_t bits = (uint16_t)(0x1c00 + (int)((uniform() + 1.0f) * 0x0c00)) | (uniform() < 0 ? 0x8000 : 0);  /* 2^-8 .. 2^-2 */
            if (hostile) bits = uniform() < 0 ? specials[(int)((uniform() + 1.0f) * 5.0f) % 10] : (uint16_t)(byte() | byte() << 8);
            data[b * size + at[h]] = (uint8_t)bits;
            data[b * size + at[h] + 1] = (uint8_t)(bits >> 8);
        }
}

static void check_quant(void) {
    static const int types[] = {GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q8_0, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};
    static const char* names[] = {"Q4_0", "Q4_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K"};
    enum { M = 5, N = 21 };
    for (int t = 0; t < 6; t++) {
        int type = types[t], big = type >= GGML_TYPE_Q4_K, values = big ? 256 : 32;
        int64_t size = quant_row_bytes(type, values);
        int dequantized = 1, exact = 1, invariant = 1;
        for (int mode = 0; mode < 3; mode++)  /* finite; hostile scales; hostile x (values of kind 1, 2 and 3) */
            for (int blocks = 1; blocks <= (big ? 2 : 9); blocks += big ? 1 : 4) {
                int K = blocks * values;
                uint8_t* w = malloc((size_t)(N * blocks * size));
                float *wf = malloc(sizeof(float) * N * K), *got = malloc(sizeof(float) * N * K);
                float *x = malloc(sizeof(float) * M * K), y[M * N], alone[N];
                random_blocks(type, w, N * blocks, mode == 1);
                for (int i = 0; i < M * K; i++) x[i] = value_of(mode == 2 ? 1 + i % 3 : 0);
                for (int n = 0; n < N; n++)
                    for (int k = 0; k < K; k++) wf[n * K + k] = block_value(type, w + (n * blocks + k / values) * size, k % values);
                dequantized &= dequantize_rows(w, got, N, K, type) == 0;
                for (int i = 0; i < N * K; i++) dequantized &= same_float(got[i], wf[i]);
                exact &= quant_gemm_f32(x, w, y, N, M, N, K, type, 1) == 0;
                for (int m = 0; m < M; m++)
                    for (int n = 0; n < N; n++) {
                        float want = block_dot(x + m * K, wf + n * K, K);
                        if (exact && !same_float(want, y[m * N + n]))
                            printf("     %s mode %d K %d: y[%d][%d] = %a, the documented order gives %a\n", names[t], mode,
                                   K, m, n, y[m * N + n], want);
                        exact &= same_float(want, y[m * N + n]);
                        fold(DIGEST_QUANT, y[m * N + n]);
                    }
                for (int m = 0; m < M; m++) {
                    invariant &= quant_gemm_f32(x + m * K, w, alone, N, 1, N, K, type, 2) == 0;
                    for (int n = 0; n < N; n++) invariant &= same_float(alone[n], y[m * N + n]);  /* NaN: see same_float */
                }
                free(w); free(wf); free(got); free(x);
            }
        char name[160];
        snprintf(name, sizeof name, "dequantize_rows %s gives gguf's values, bit for bit", names[t]);
        check(dequantized, name);
        snprintf(name, sizeof name, "quant_gemm_f32 %s equals the documented lane order, bit for bit", names[t]);
        check(exact, name);
        snprintf(name, sizeof name, "quant_gemm_f32 %s gives each row the bits it gets alone on 2 threads", names[t]);
        check(invariant, name);
    }
}

/* ---- GGUF blocks times 8-bit activations: qdot.c's definition, written out from its header comment. ---- */

/* Value j's stored integer: the nibble, int8, 5-bit or 6-bit q (Q6_K before its - 32); *group its scale group. */
static int stored_int(int type, const uint8_t* b, int j) {
    int l = j % 32, g = j / 32;
    switch (type) {
        case GGML_TYPE_Q8_0: return (int8_t)b[2 + l];
        case GGML_TYPE_Q4_0: return (b[2 + l % 16] >> 4 * (l / 16)) & 15;
        case GGML_TYPE_Q4_1: return (b[4 + l % 16] >> 4 * (l / 16)) & 15;
        case GGML_TYPE_Q6_K: {
            int h = j / 128, k = (j / 32) % 4;
            return ((b[64 * h + 32 * (k % 2) + l] >> 4 * (k / 2)) & 15) | ((b[128 + 32 * h + l] >> 2 * k) & 3) << 4;
        }
        default: {
            int q = (b[(type == GGML_TYPE_Q4_K ? 16 : 48) + 32 * (g / 2) + l] >> 4 * (g & 1)) & 15;
            return type == GGML_TYPE_Q5_K ? q | ((b[16 + l] >> g) & 1) << 4 : q;
        }
    }
}

static void k_pair(const uint8_t* b, int g, int* scale, int* min) {
    const uint8_t* s = b + 4;
    *scale = g < 4 ? s[g] & 63 : (s[g + 4] & 15) | (s[g - 4] >> 6) << 4;
    *min = g < 4 ? s[g + 4] & 63 : (s[g + 4] >> 4) | (s[g] >> 6) << 4;
}

/* One block of B activations: d and q as the header comment defines them. */
static float quantize_block(const float* x, int B, int8_t* q) {
    float a = 0.0f;
    int special = 0;
    for (int i = 0; i < B; i++) {
        if (isnan(x[i]) || isinf(x[i])) special = 1;
        else if (fabsf(x[i]) > a) a = fabsf(x[i]);
    }
    float d = special ? NAN : a / 127.0f;
    for (int i = 0; i < B; i++) {
        float t = special || d == 0.0f ? 0.0f : rintf(x[i] / d);
        q[i] = (int8_t)(t > 127.0f ? 127 : t < -127.0f ? -127 : t);
    }
    return d;
}

/* x . w for one row pair, block by block: acc = fmaf(dw dx, I, acc) then fmaf(mw dx, J, acc). */
static float qdot_reference(int type, const uint8_t* row, const float* x, int K) {
    int B = type >= GGML_TYPE_Q4_K ? 256 : 32, size = (int)quant_row_bytes(type, B);
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += B) {
        const uint8_t* b = row + (k0 / B) * size;
        int8_t q[256];
        float dx = quantize_block(x + k0, B, q), dw, mw = 0.0f;
        int64_t I = 0, J = 0;
        for (int j = 0; j < B; j++) {
            int w = stored_int(type, b, j), scale = 1, min = 0;
            if (type == GGML_TYPE_Q4_0) w -= 8;
            if (type == GGML_TYPE_Q6_K) { w -= 32; scale = (int8_t)b[192 + j / 16]; }
            if (type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q5_K) k_pair(b, j / 32, &scale, &min);
            I += (int64_t)scale * w * q[j];
            J += type == GGML_TYPE_Q4_1 ? q[j] : (int64_t)min * q[j];
        }
        dw = half(type == GGML_TYPE_Q6_K ? b + 208 : b);
        if (type == GGML_TYPE_Q4_1) mw = half(b + 2);
        if (type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q5_K) mw = -half(b + 2);
        acc = fmaf(dw * dx, (float)I, acc);
        if (type == GGML_TYPE_Q4_1 || type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q5_K) acc = fmaf(mw * dx, (float)J, acc);
    }
    return acc;
}

static void check_qdot(void) {
    static const int types[] = {GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q8_0, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};
    static const char* names[] = {"Q4_0", "Q4_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K"};
    enum { M = 11, N = 21 };
    for (int t = 0; t < 6; t++) {
        int type = types[t], big = type >= GGML_TYPE_Q4_K, values = big ? 256 : 32;
        int64_t size = quant_row_bytes(type, values);
        int exact = 1, invariant = 1, packed = 1;
        for (int mode = 0; mode < 3; mode++)  /* finite; hostile scales; hostile x (values of kind 1, 2 and 3) */
            for (int blocks = 1; blocks <= (big ? 3 : 13); blocks += big ? 1 : 4) {
                int K = blocks * values;
                uint8_t* w = malloc((size_t)(N * blocks * size));
                float *x = malloc(sizeof(float) * M * K), y[M * N], alone[N];
                random_blocks(type, w, N * blocks, mode == 1);
                for (int i = 0; i < M * K; i++) x[i] = value_of(mode == 2 ? 1 + i % 3 : 0);
                if (mode == 2) for (int i = 0; i < 32; i++) x[K + i] = (float)i - 15.5f;  /* x / d at .5 */
                exact &= quant_gemm_x8(x, w, y, N, M, N, K, type, 1) == 0;
                for (int m = 0; m < M; m++)
                    for (int n = 0; n < N; n++) {
                        float want = qdot_reference(type, w + n * blocks * size, x + m * K, K);
                        if (exact && !same_float(want, y[m * N + n]))
                            printf("     %s mode %d K %d: y[%d][%d] = %a, the definition gives %a\n", names[t], mode, K, m,
                                   n, y[m * N + n], want);
                        exact &= same_float(want, y[m * N + n]);
                        fold(DIGEST_QDOT, y[m * N + n]);
                    }
                for (int m = 0; m < M; m++) {
                    invariant &= quant_gemm_x8(x + m * K, w, alone, N, 1, N, K, type, 2) == 0;
                    for (int n = 0; n < N; n++) invariant &= same_float(alone[n], y[m * N + n]);
                }
                int64_t pack_size = qpack_bytes(type, N, K);
                if (pack_size > 0) {  /* the interleaved copy's product: the same bits, all rows and one at a time */
                    uint8_t* pack = malloc((size_t)pack_size);
                    float again[M * N];
                    packed &= qpack(w, pack, N, K, type) == 0 && quant_gemm_x8_packed(x, pack, again, N, M, N, K, type, 2) == 0;
                    for (int i = 0; i < M * N; i++) packed &= same_float(again[i], y[i]);
                    for (int m = 0; m < M; m++) {
                        packed &= quant_gemm_x8_packed(x + m * K, pack, alone, N, 1, N, K, type, 1) == 0;
                        for (int n = 0; n < N; n++) packed &= same_float(alone[n], y[m * N + n]);
                    }
                    free(pack);
                }
                free(w); free(x);
            }
        char name[160];
        snprintf(name, sizeof name, "quant_gemm_x8 %s equals the written integer definition, bit for bit", names[t]);
        check(exact, name);
        snprintf(name, sizeof name, "quant_gemm_x8 %s gives each row the bits it gets alone on 2 threads", names[t]);
        check(invariant, name);
        if (!big) {
            snprintf(name, sizeof name, "quant_gemm_x8_packed %s gives quant_gemm_x8's bits", names[t]);
            check(packed, name);
        }
    }
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
    silu_mul_f32(gate_up, act, N, I, 2);
    for (int n = 0; n < N; n++)
        for (int i = 0; i < I; i++) {
            double g = gate_up[n * 2 * I + i], want = g / (1.0 + exp(-g)) * gate_up[n * 2 * I + I + i];
            close &= fabs(act[n * I + i] - want) <= 1e-5 * (1.0 + fabs(want));
        }
    check(close, "silu_mul_f32 is silu(gate) * up");
    free(gate_up);
}

/* The sampled token of each row (temperature alone, inverse CDF): the same token alone as among the rows, and (by
   the digest) on every build; logits with -inf (forbidden), NaN and near-ties, and rows of one finite logit. */
static void check_sample(void) {
    enum { R = 24, V = 1000 };
    float* x = malloc(sizeof(float) * R * V);
    double uniforms[R];
    int64_t rows[R], got[R], alone;
    int ok = 1;
    for (int r = 0; r < R; r++) {
        rows[r] = r;
        uniforms[r] = (uniform() + 1.0) / 2.0;
        for (int v = 0; v < V; v++) {
            float u = uniform();
            x[r * V + v] = u > 0.97f ? -INFINITY : u < -0.99f ? NAN : floorf(uniform() * 40.0f) / 8.0f;
            if (r == 3) x[r * V + v] = v == 500 ? 1.0f : -INFINITY;
        }
    }
    ok &= sample_f32(x, V, rows, R, V, 0.7f, uniforms, got) == 0;
    for (int r = 0; r < R; r++) {
        ok &= sample_f32(x + r * V, V, rows, 1, V, 0.7f, uniforms + r, &alone) == 0 && alone == got[r];
        ok &= got[r] >= 0 && got[r] < V && x[r * V + got[r]] > -INFINITY;
        fold(DIGEST_SAMPLE, (float)got[r]);
    }
    ok &= got[3] == 500;
    check(ok, "sample_f32 draws a finite token per row, the same alone as among the rows");
    free(x);
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
    printf("levels: fixed %d quant %d qdot %d\n", fixed_vector_available(), quant_level(), qdot_level());  /* 3: NEON */
    check_fixed_gemm_f32();
    check_fixed_gemm_bf16();
    check_quant();
    check_argmax();
    check_norms();
    check_silu();
    check_silu_fixed();
    check_rope();
    check_attend();
    check_sample();
    check_qdot();  /* last: the checks before it draw the inputs their digests were written with */
    printf("digest fixed_gemm_f32 %016llx\n", (unsigned long long)digests[DIGEST_F32]);
    printf("digest fixed_gemm_bf16 %016llx\n", (unsigned long long)digests[DIGEST_BF16]);
    printf("digest quant_gemm_f32 %016llx\n", (unsigned long long)digests[DIGEST_QUANT]);
    printf("digest attend_fixed %016llx\n", (unsigned long long)digests[DIGEST_ATTEND]);
    printf("digest silu_fixed %016llx\n", (unsigned long long)digests[DIGEST_SILU]);
    printf("digest sample_f32 %016llx\n", (unsigned long long)digests[DIGEST_SAMPLE]);
    printf("digest quant_gemm_x8 %016llx\n", (unsigned long long)digests[DIGEST_QDOT]);
    printf("digest attend_fixed_bf16_cache %016llx\n", (unsigned long long)digests[DIGEST_ATTEND_BF16_CACHE]);
    printf("selftest: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
