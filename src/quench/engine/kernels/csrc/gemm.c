/* y = x W^T in bfloat16 for a few rows (decode steps), on CPUs with AVX512-BF16, and with AMX tiles where
   the CPU has them.

   A decode step is bound by streaming the weights from memory, and one core streams faster from several
   places at once than from one: a plain read runs faster as four interleaved streams than as one sequential
   stream (the L2 streamer prefetches within a 4 KB page, one stream per page; several pages in flight hide
   each page's restart). So W is packed as (ceil(N/16), K/2, 16, 2): 16
   output features per block (zeros past N; those outputs are never stored), each block one contiguous run
   (the pair-interleaved layout AMX's `tdpbf16ps` reads), and the kernels walk S blocks side by side, S
   streams, one 64-byte line (AVX512) or one 1 KB tile (AMX) from each in turn. Each output is a float32
   sum over K in one fixed order (vdpbf16ps / tdpbf16ps per pair of inputs), rounded to bfloat16 once, as
   oneDNN does; only the summation order differs from a float32 reference. Compiled without fast-math: it
   turns 1/sqrtf into an approximation. */
#include "x86.h"
#if defined(__AVX512F__) && defined(__AVX512BF16__)
int small_gemm_available(void) { return 1; }
/* 16 float32 outputs -> bfloat16 at p; only the first `cols` of them where fewer than 16 columns are real
   (the last block of W when N is not a multiple of 16: its packed rows past N are zeros). */
static inline void store_outputs(bf16* p, __m512 v, int cols) {
    __m256i packed = (__m256i)_mm512_cvtneps_pbh(v);
    if (cols >= 16) _mm256_storeu_si256((__m256i*)p, packed);
    else if (cols > 0) _mm256_mask_storeu_epi16(p, (__mmask16)((1u << cols) - 1), packed);
}
/* MB rows (xr/yr: row pointers; only the first mb are stored) x S 16-wide blocks of W starting at w, read
   side by side (S streams); yr[i] points at the first block's output columns. */
#define GEMM(MB, S)                                                                                \
static void gemm_##MB##_##S(const bf16* const* xr, const bf16* w, bf16* const* yr, int K, int mb, int cols) { \
    int K2 = K / 2;                                                                                \
    int64_t blk = (int64_t)16 * K;                                                                 \
    __m512 acc[MB][S];                                                                             \
    for (int i = 0; i < MB; i++)                                                                   \
        for (int s = 0; s < S; s++) acc[i][s] = _mm512_setzero_ps();                               \
    for (int kk = 0; kk < K2; kk++) {                                                              \
        __m512bh v[S];                                                                             \
        for (int s = 0; s < S; s++) v[s] = (__m512bh)_mm512_loadu_si512(w + s * blk + kk * 32);   \
        for (int i = 0; i < MB; i++) {                                                             \
            int32_t pair;                                                                          \
            memcpy(&pair, xr[i] + 2 * kk, 4);                                                      \
            __m512bh xb = (__m512bh)_mm512_set1_epi32(pair);                                       \
            for (int s = 0; s < S; s++) acc[i][s] = _mm512_dpbf16_ps(acc[i][s], v[s], xb);         \
        }                                                                                          \
    }                                                                                              \
    for (int i = 0; i < mb; i++)                                                                   \
        for (int s = 0; s < S; s++)                                                                \
            store_outputs(yr[i] + 16 * s, acc[i][s], cols - 16 * s);                             \
}
/* Rows of one row block over nblocks blocks: groups of S streams, then the leftover blocks one by one. */
#define GEMM_BLOCKS(MB, S)                                                                         \
GEMM(MB, S) GEMM(MB, 1)                                                                            \
static void blocks_##MB(const bf16* const* xr, const bf16* w, bf16* const* yr, int nblocks, int K, int mb, int cols) { \
    bf16* ys[MB];                                                                                  \
    for (int b = 0; b < nblocks;) {                                                                \
        int step = nblocks - b >= S ? S : 1;                                                       \
        for (int i = 0; i < MB; i++) ys[i] = yr[i] + 16 * b;                                       \
        if (step == S) gemm_##MB##_##S(xr, w + (int64_t)b * 16 * K, ys, K, mb, cols - 16 * b);     \
        else gemm_##MB##_1(xr, w + (int64_t)b * 16 * K, ys, K, mb, cols - 16 * b);                 \
        b += step;                                                                                 \
    }                                                                                              \
}
/* Accumulators MB x S <= 24 of the 32 vector registers. 3-4 rows: 6 streams read faster than 4 (the same
   bits either way). */
GEMM_BLOCKS(1, 8) GEMM_BLOCKS(2, 8) GEMM_BLOCKS(4, 6) GEMM_BLOCKS(8, 3)
/* x (M, K), W packed (N/16, K/2, 16, 2), y (M, N); rows in blocks of up to 8. Past 8 rows W goes in chunks
   of 24 blocks (<= 0.75 MB at K = 576, 1.2 MB at K = 1536) that every row block uses while they are in
   cache, so W is read from memory once. */
static void gemm_bf16(const bf16* x, const bf16* wp, bf16* y, int M, int N, int K, int threads) {
    int nblocks = (N + 15) / 16, chunk = M > 8 ? 24 : nblocks;
    if (threads > 1 && M <= 8) chunk = (nblocks + threads - 1) / threads;  /* one contiguous share of W per thread */
    int chunks = (nblocks + chunk - 1) / chunk;
    #pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1 && chunks > 1)
    for (int part = 0; part < chunks; part++) {
        int b0 = part * chunk, nb = nblocks - b0 < chunk ? nblocks - b0 : chunk;
        const bf16* w = wp + (int64_t)b0 * 16 * K;
        for (int m0 = 0; m0 < M; m0 += 8) {
            int mb = M - m0 < 8 ? M - m0 : 8;
            const bf16* xr[8];
            bf16* yr[8];
            for (int i = 0; i < 8; i++) {  /* rows past mb repeat row m0: computed, never stored */
                int m = m0 + (i < mb ? i : 0);
                xr[i] = x + (int64_t)m * K;
                yr[i] = y + (int64_t)m * N + 16 * b0;
            }
            if (mb == 1) blocks_1(xr, w, yr, nb, K, mb, N - 16 * b0);
            else if (mb == 2) blocks_2(xr, w, yr, nb, K, mb, N - 16 * b0);
            else if (mb <= 4) blocks_4(xr, w, yr, nb, K, mb, N - 16 * b0);
            else blocks_8(xr, w, yr, nb, K, mb, N - 16 * b0);
        }
    }
}
#else
int small_gemm_available(void) { return 0; }
static void gemm_bf16(const bf16* x, const bf16* wp, bf16* y, int M, int N, int K, int threads) {
    (void)x; (void)wp; (void)y; (void)M; (void)N; (void)K; (void)threads;
}
#endif

#if defined(__AVX512F__) && defined(__AVX512BF16__) && defined(__AMX_TILE__) && defined(__AMX_BF16__)
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>
static int amx_state = 0;  /* 0: not asked yet, 1: the kernel lets this process use AMX tiles, -1: it does not */
int amx_available(void) {
    if (amx_state == 0) amx_state = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0 ? 1 : -1;
    return amx_state == 1;
}
/* C tile T (16 x 16 float32) -> rows m0 .. m0 + mb of y at block b's columns (bfloat16, rounded once). */
#define AMX_STORE(T, b)                                                                            \
    _tile_stored(T, buf, 64);                                                                      \
    for (int i = 0; i < mb; i++)                                                                   \
        store_outputs(y + (int64_t)(m0 + i) * N + 16 * (b), _mm512_load_ps(buf + 16 * i), N - 16 * (b));
/* The first row block reads W from memory: ask for the next tile of each of the group's `count` blocks one
   step early. Without it the 6-stream pass lost to one stream (0.76x) while the host's memory was busy;
   with it, 1.05x then and 1.3-1.5x otherwise (30 layers + head, 8 rows, one process). */
#define AMX_PREFETCH(count)                                                                        \
    for (int s = 0; s < (count); s++)                                                              \
        for (int l = 0; l < 16; l++)                                                               \
            _mm_prefetch((const char*)(w + (int64_t)s * 16 * K + (int64_t)(k0 + 32) * 16) + 64 * l, _MM_HINT_T0);
/* W block s of the group (32 inputs x 16 outputs from k0: one 1 KB tile) into tile 7. */
#define AMX_W(s) _tile_loadd(7, w + (int64_t)(s) * 16 * K + (int64_t)k0 * 16, 64)
/* The same product as gemm_bf16 with AMX tiles: x in blocks of 16 rows (a zero-padded copy), W's blocks as
   tiles of 32 inputs x 16 outputs, float32 accumulators in tiles. W goes in groups of blocks, each group
   staying in cache while every row block uses it:
   - up to 16 rows: 6 blocks side by side (6 streams), accumulators in tiles 0..5, x in 6, W in 7;
   - more: 2 blocks side by side and two row blocks per pass, 2 x 2 accumulators (tiles 0..3), both row
     blocks' x in tiles 4 and 5, both W tiles in 6 and 7: 4 tile loads per 4 products (3 W blocks with x
     reloaded per product take 9 per 6, and the model's products at 24-250 rows 1.04-1.26x the time);
     a last odd row block and a last single block go with the tiles they have.
   Every output is one accumulator tile updated by one TDPBF16PS per k0 = 0, 32, .. in order, whatever the
   blocking. Needs K % 32 == 0. Returns 0, or -1 where AMX is unusable or the copy could not be allocated
   (nothing written). */
int gemm_bf16_amx(const bf16* x, const bf16* wp, bf16* y, int M, int N, int K, int threads) {
    if (K % 32 || !amx_available()) return -1;
    int Mp = (M + 15) & ~15, nblocks = (N + 15) / 16, S = Mp > 16 ? 2 : 6, groups = (nblocks + S - 1) / S;
    bf16* xp = aligned_alloc(64, (size_t)Mp * K * 2);
    if (!xp) return -1;
    memcpy(xp, x, (size_t)M * K * 2);
    memset(xp + (size_t)M * K, 0, (size_t)(Mp - M) * K * 2);
    #pragma omp parallel num_threads(threads) if (threads > 1 && groups > 1)
    {
        load_tiles_16x64(8);
        float buf[16 * 16] __attribute__((aligned(64)));
        #pragma omp for schedule(static)
        for (int g = 0; g < groups; g++) {  /* static: each thread streams one contiguous share of W */
            int b0 = g * S, nb = nblocks - b0 < S ? nblocks - b0 : S;
            const bf16* w = wp + (int64_t)b0 * 16 * K;
            for (int m0 = 0; m0 < Mp; m0 += 16) {
                const bf16* xa = xp + (int64_t)m0 * K;
                int mb = M - m0 < 16 ? M - m0 : 16;
                if (nb == 6) {
                    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3); _tile_zero(4); _tile_zero(5);
                    for (int k0 = 0; k0 < K; k0 += 32) {
                        if (m0 == 0) AMX_PREFETCH(6);
                        _tile_loadd(6, xa + k0, K * 2);
                        AMX_W(0); _tile_dpbf16ps(0, 6, 7);
                        AMX_W(1); _tile_dpbf16ps(1, 6, 7);
                        AMX_W(2); _tile_dpbf16ps(2, 6, 7);
                        AMX_W(3); _tile_dpbf16ps(3, 6, 7);
                        AMX_W(4); _tile_dpbf16ps(4, 6, 7);
                        AMX_W(5); _tile_dpbf16ps(5, 6, 7);
                    }
                    AMX_STORE(0, b0) AMX_STORE(1, b0 + 1) AMX_STORE(2, b0 + 2)
                    AMX_STORE(3, b0 + 3) AMX_STORE(4, b0 + 4) AMX_STORE(5, b0 + 5)
                } else if (nb == 2 && Mp - m0 >= 32) {
                    const bf16* xb = xa + (int64_t)16 * K;
                    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
                    for (int k0 = 0; k0 < K; k0 += 32) {
                        if (m0 == 0) AMX_PREFETCH(2);
                        _tile_loadd(4, xa + k0, K * 2);
                        _tile_loadd(5, xb + k0, K * 2);
                        _tile_loadd(6, w + (int64_t)k0 * 16, 64);
                        _tile_loadd(7, w + (int64_t)16 * K + (int64_t)k0 * 16, 64);
                        _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7);
                        _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
                    }
                    AMX_STORE(0, b0) AMX_STORE(1, b0 + 1)
                    int second = m0 + 16;
                    {
                        int m0 = second, mb = M - second < 16 ? M - second : 16;
                        AMX_STORE(2, b0) AMX_STORE(3, b0 + 1)
                    }
                    m0 += 16;  /* with the loop's own step: past both row blocks */
                } else if (nb == 2) {  /* the last, odd row block */
                    _tile_zero(0); _tile_zero(1);
                    for (int k0 = 0; k0 < K; k0 += 32) {
                        if (m0 == 0) AMX_PREFETCH(2);
                        _tile_loadd(4, xa + k0, K * 2);
                        _tile_loadd(6, w + (int64_t)k0 * 16, 64);
                        _tile_loadd(7, w + (int64_t)16 * K + (int64_t)k0 * 16, 64);
                        _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7);
                    }
                    AMX_STORE(0, b0) AMX_STORE(1, b0 + 1)
                } else {
                    for (int s = 0; s < nb; s++) {
                        _tile_zero(0);
                        for (int k0 = 0; k0 < K; k0 += 32) {
                            _tile_loadd(6, xa + k0, K * 2);
                            AMX_W(s); _tile_dpbf16ps(0, 6, 7);
                        }
                        AMX_STORE(0, b0 + s)
                    }
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
int gemm_bf16_amx(const bf16* x, const bf16* wp, bf16* y, int M, int N, int K, int threads) {
    (void)x; (void)wp; (void)y; (void)M; (void)N; (void)K; (void)threads;
    return -1;
}
#endif
/* The entry point (`native.small_gemm`, the layer loop): AMX tiles where allowed and served, else AVX512.
   Up to AVX512_GEMM_ROWS rows (quench_native.h) always take the AVX512 kernel: at those rows it streams the
   default model's weights at least as fast as AMX's tiles. It also gives a row the same bits at 1 to 4 rows,
   so a batch-1 verification step of up to 3 drafts scores its tokens as regular steps would. */
void small_gemm_bf16(const bf16* x, const bf16* wp, bf16* y, int M, int N, int K, int threads, int amx) {
    if (M <= AVX512_GEMM_ROWS || !amx || gemm_bf16_amx(x, wp, y, M, N, K, threads) != 0) gemm_bf16(x, wp, y, M, N, K, threads);
}
