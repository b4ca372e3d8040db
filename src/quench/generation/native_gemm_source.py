"""C source of quench's bfloat16 GEMM for decode, verification and short prefill steps (AVX512-BF16,
and AMX tiles where the CPU has them). `native_sources` prefixes it with the shared preludes and
compiles it as its own unit; `native.small_gemm` calls it.
"""

# y = x W^T in bfloat16 for a few rows (decode steps), on CPUs with AVX512-BF16. oneDNN's kernel for
# 8 rows ran ~21 ms per step of the default model against ~15 ms with its weights in cache: streaming
# 270 MB of weights and computing did not overlap. Here W is packed as (N/BW, K/2, BW, 2) with BW = 48
# output features (16 where N is not a multiple of 48), so the weights are read as one sequential
# stream: per pair of inputs, BW/16 64-byte lines, each multiplied (vdpbf16ps: 16 outputs x 2 inputs)
# with a broadcast pair of x for up to 8 rows (24 accumulators). Measured on 30 layers + head at 8
# rows: 12 ms, against 15 ms with 16-wide blocks read as three streams and 21 ms for oneDNN. Float32
# accumulation, rounded to bfloat16 once, as oneDNN does; only the summation order differs (in ~1e-4
# of outputs either differs from a float32 reference by one bfloat16 step, not always the same ones).
GEMM = r"""
#if defined(__AVX512F__) && defined(__AVX512BF16__)
int small_gemm_available(void) { return 1; }
/* MB rows (xr/yr: row pointers; only the first mb are stored) x NB 16-wide vectors per block. */
#define GEMM(MB, NB)                                                                               \
static void gemm_##MB##_##NB(const bf16* const* xr, const bf16* wp, bf16* const* yr, int N, int K, int mb) { \
    int K2 = K / 2;                                                                                \
    for (int nb = 0; nb < N / (16 * NB); nb++) {                                                   \
        const bf16* w = wp + (int64_t)nb * K2 * 32 * NB;                                           \
        __m512 acc[MB][NB];                                                                        \
        for (int i = 0; i < MB; i++)                                                               \
            for (int c = 0; c < NB; c++) acc[i][c] = _mm512_setzero_ps();                          \
        for (int kk = 0; kk < K2; kk++) {                                                          \
            __m512bh v[NB];                                                                        \
            for (int c = 0; c < NB; c++) v[c] = (__m512bh)_mm512_loadu_si512(w + (kk * NB + c) * 32); \
            for (int i = 0; i < MB; i++) {                                                         \
                int32_t pair;                                                                      \
                memcpy(&pair, xr[i] + 2 * kk, 4);                                                  \
                __m512bh xb = (__m512bh)_mm512_set1_epi32(pair);                                   \
                for (int c = 0; c < NB; c++) acc[i][c] = _mm512_dpbf16_ps(acc[i][c], v[c], xb);   \
            }                                                                                      \
        }                                                                                          \
        for (int i = 0; i < mb; i++)                                                               \
            for (int c = 0; c < NB; c++)                                                           \
                _mm256_storeu_si256((__m256i*)(yr[i] + (nb * NB + c) * 16), (__m256i)_mm512_cvtneps_pbh(acc[i][c])); \
    }                                                                                              \
}
GEMM(1, 1) GEMM(2, 1) GEMM(4, 1) GEMM(8, 1) GEMM(1, 3) GEMM(2, 3) GEMM(4, 3) GEMM(8, 3)
/* x (M, K), W packed (N/BW, K/2, BW, 2) with BW = 16 * NB, y (M, N); rows in blocks of up to 8. Past 8
   rows W goes in chunks of 8 blocks (<= 0.5 MB at K = 576, 1.5 MB at K = 1536) that every row block
   uses while they are in cache, so W is read from memory once. */
void gemm_bf16(const bf16* x, const bf16* wp, bf16* y, int M, int N, int K, int NB, int threads) {
    int BW = 16 * NB, chunk = M > 8 ? BW * 8 : N;
    if (threads > 1 && M <= 8) chunk = (N / BW + threads - 1) / threads * BW;  /* one contiguous share of W per thread */
    int chunks = (N + chunk - 1) / chunk;
    #pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1 && chunks > 1)
    for (int part = 0; part < chunks; part++) {
        int n0 = part * chunk, nc = N - n0 < chunk ? N - n0 : chunk;
        const bf16* w = wp + (int64_t)n0 * K;
        for (int m0 = 0; m0 < M; m0 += 8) {
            int mb = M - m0 < 8 ? M - m0 : 8;
            const bf16* xr[8];
            bf16* yr[8];
            for (int i = 0; i < 8; i++) {  /* rows past mb repeat row m0: computed, never stored */
                int m = m0 + (i < mb ? i : 0);
                xr[i] = x + (int64_t)m * K;
                yr[i] = y + (int64_t)m * N + n0;
            }
            if (NB == 3) {
                if (mb == 1) gemm_1_3(xr, w, yr, nc, K, mb);
                else if (mb == 2) gemm_2_3(xr, w, yr, nc, K, mb);
                else if (mb <= 4) gemm_4_3(xr, w, yr, nc, K, mb);
                else gemm_8_3(xr, w, yr, nc, K, mb);
            } else {
                if (mb == 1) gemm_1_1(xr, w, yr, nc, K, mb);
                else if (mb == 2) gemm_2_1(xr, w, yr, nc, K, mb);
                else if (mb <= 4) gemm_4_1(xr, w, yr, nc, K, mb);
                else gemm_8_1(xr, w, yr, nc, K, mb);
            }
        }
    }
}
#else
int small_gemm_available(void) { return 0; }
void gemm_bf16(const void* x, const void* wp, void* y, int M, int N, int K, int NB, int threads) {
    (void)x; (void)wp; (void)y; (void)M; (void)N; (void)K; (void)NB; (void)threads;
}
#endif

#if defined(__AVX512F__) && defined(__AVX512BF16__) && defined(__AMX_TILE__) && defined(__AMX_BF16__)
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>
#ifndef AMX_AHEAD
#define AMX_AHEAD 4
#endif
static int amx_state = 0;  /* 0: not asked yet, 1: the kernel lets this process use AMX tiles, -1: it does not */
int amx_available(void) {
    if (amx_state == 0) amx_state = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0 ? 1 : -1;
    return amx_state == 1;
}
/* C tile T (16 x 16 float32) -> rows m0 .. m0 + mb of y at column n (bfloat16, rounded once). */
#define AMX_STORE(T, C)                                                                            \
    _tile_stored(T, buf, 64);                                                                      \
    for (int i = 0; i < mb; i++)                                                                   \
        _mm256_storeu_si256((__m256i*)(y + (int64_t)(m0 + i) * N + n + 16 * (C)),                  \
                            (__m256i)_mm512_cvtneps_pbh(_mm512_load_ps(buf + 16 * i)));
/* The same product as gemm_bf16 with AMX tiles: x in blocks of 16 rows (a zero-padded copy; tile 3),
   W's BW-wide blocks as NB tiles of 32 inputs x 16 outputs (tiles 4..6, the packed layout is already
   the pair-interleaved one AMX reads, row stride BW * 4 bytes), float32 accumulators in tiles 0..2.
   A block of W (BW x K: at most 147 KB) stays in cache while every row block uses it. Needs K % 32 == 0.
   Returns 0, or -1 where AMX is unusable or the copy could not be allocated (nothing written). */
int gemm_bf16_amx(const bf16* x, const bf16* wp, bf16* y, int M, int N, int K, int NB, int threads) {
    if (K % 32 || (NB != 1 && NB != 3) || !amx_available()) return -1;
    int Mp = (M + 15) & ~15, BW = 16 * NB;
    bf16* xp = aligned_alloc(64, (size_t)Mp * K * 2);
    if (!xp) return -1;
    memcpy(xp, x, (size_t)M * K * 2);
    memset(xp + (size_t)M * K, 0, (size_t)(Mp - M) * K * 2);
    #pragma omp parallel num_threads(threads) if (threads > 1 && N / BW > 1)
    {
        load_tiles_16x64(8);
        float buf[16 * 16] __attribute__((aligned(64)));
        #pragma omp for schedule(static)
        for (int block = 0; block < N / BW; block++) {  /* static: each thread streams one contiguous share of W */
            int n = block * BW;
            const bf16* w = wp + (int64_t)n * K;
            for (int m0 = 0; m0 < Mp; m0 += 16) {
                const bf16* xa = xp + (int64_t)m0 * K;
                int mb = M - m0 < 16 ? M - m0 : 16;
                if (NB == 3 && Mp - m0 >= 32) {
                    /* Two row blocks share each W tile (read from cache once, not twice): float32 C tiles 0..2
                       (rows m0..) and 3..5 (rows m0 + 16..), W in tile 7, x reloaded into tile 6 (1 KB, in L1). */
                    const bf16* xb = xa + (int64_t)16 * K;
                    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3); _tile_zero(4); _tile_zero(5);
                    for (int k0 = 0; k0 < K; k0 += 32) {
                        const bf16* wk = w + (int64_t)k0 * BW;
                        if (m0 == 0)
                            for (int l = 0; l < BW; l++) _mm_prefetch((const char*)(wk + AMX_AHEAD * 32 * BW) + 64 * l, _MM_HINT_T0);
                        _tile_loadd(7, wk, BW * 4);
                        _tile_loadd(6, xa + k0, K * 2); _tile_dpbf16ps(0, 6, 7);
                        _tile_loadd(6, xb + k0, K * 2); _tile_dpbf16ps(3, 6, 7);
                        _tile_loadd(7, wk + 32, BW * 4);
                        _tile_loadd(6, xa + k0, K * 2); _tile_dpbf16ps(1, 6, 7);
                        _tile_loadd(6, xb + k0, K * 2); _tile_dpbf16ps(4, 6, 7);
                        _tile_loadd(7, wk + 64, BW * 4);
                        _tile_loadd(6, xa + k0, K * 2); _tile_dpbf16ps(2, 6, 7);
                        _tile_loadd(6, xb + k0, K * 2); _tile_dpbf16ps(5, 6, 7);
                    }
                    AMX_STORE(0, 0) AMX_STORE(1, 1) AMX_STORE(2, 2)
                    int second = m0 + 16;
                    {
                        int m0 = second, mb = M - second < 16 ? M - second : 16;
                        AMX_STORE(3, 0) AMX_STORE(4, 1) AMX_STORE(5, 2)
                    }
                    m0 += 16;  /* with the loop's own step: past both blocks */
                } else if (NB == 3) {
                    _tile_zero(0); _tile_zero(1); _tile_zero(2);
                    for (int k0 = 0; k0 < K; k0 += 32) {
                        const bf16* wk = w + (int64_t)k0 * BW;
                        if (m0 == 0)  /* the first row block streams W from memory: ask for it AMX_AHEAD chunks early */
                            for (int l = 0; l < BW; l++) _mm_prefetch((const char*)(wk + AMX_AHEAD * 32 * BW) + 64 * l, _MM_HINT_T0);
                        _tile_loadd(3, xa + k0, K * 2);
                        _tile_loadd(4, wk, BW * 4);
                        _tile_loadd(5, wk + 32, BW * 4);
                        _tile_loadd(6, wk + 64, BW * 4);
                        _tile_dpbf16ps(0, 3, 4);
                        _tile_dpbf16ps(1, 3, 5);
                        _tile_dpbf16ps(2, 3, 6);
                    }
                    AMX_STORE(0, 0) AMX_STORE(1, 1) AMX_STORE(2, 2)
                } else {
                    _tile_zero(0);
                    for (int k0 = 0; k0 < K; k0 += 32) {
                        _tile_loadd(3, xa + k0, K * 2);
                        _tile_loadd(4, w + (int64_t)k0 * BW, BW * 4);
                        _tile_dpbf16ps(0, 3, 4);
                    }
                    AMX_STORE(0, 0)
                }
            }
        }
        _tile_release();
    }
    free(xp);
    return 0;
}
#else
int amx_available(void) { return 0; }
int gemm_bf16_amx(const void* x, const void* wp, void* y, int M, int N, int K, int NB, int threads) {
    (void)x; (void)wp; (void)y; (void)M; (void)N; (void)K; (void)NB; (void)threads;
    return -1;
}
#endif
"""
