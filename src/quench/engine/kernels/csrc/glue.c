/* Residual sum + RMSNorm for a bfloat16 decode step, and greedy argmax.

   At 8 rows of 576 each PyTorch op is dominated by its dispatch (~20-30 us for a residual sum and an
   RMSNorm's four ops, more than the work), twice per layer. Numerics as modeling_llama's bfloat16 path:
   the sum is rounded to bfloat16 (bit-identical); the norm runs in float32, is rounded, multiplied by the
   weight and rounded again. The float32 sum of squares adds in another order than PyTorch's reduction, so
   the mean square can differ in its last bit: on real decode steps of the default model 15 of 29,280
   normed rows differed from PyTorch's, by one bfloat16 step in a few elements (a near-tie in rounding).
   Compiled with -ffp-contract=off. */
#include "x86.h"
#include "canon.h"

int avx512_available(void) {
#if defined(__AVX512F__)
    return 1;
#else
    return 0;
#endif
}

#include <math.h>
#include <stdlib.h>
/* x (N, Dm) is the residual stream: x += delta (if given, rounded); out = w * norm(x) (N, Dm). */
#if defined(__AVX512F__) && defined(__AVX512BF16__)
/* The same arithmetic 16 lanes at a time: lane k sums the squares of elements k, k + 16, ... in order,
   as the scalar loop's lanes[k] does, and the lanes are added in the same order: the same bits. */
static void add_rms_norm_row16(bf16* xr, const bf16* dr, const bf16* weight, bf16* o, int Dm, float eps) {
    __m512 lanes = _mm512_setzero_ps();
    for (int i = 0; i < Dm; i += 16) {
        __m512 v = bf16x16_to_f32(xr + i);
        if (dr) {
            v = round_to_bf16(_mm512_add_ps(v, bf16x16_to_f32(dr + i)));
            _mm256_storeu_si256((__m256i*)(xr + i), f32x16_to_bf16(v));
        }
        lanes = _mm512_add_ps(lanes, _mm512_mul_ps(v, v));
    }
    float part[16], total = 0.0f;
    _mm512_storeu_ps(part, lanes);
    for (int k = 0; k < 16; k++) total += part[k];
    __m512 inv = _mm512_set1_ps(1.0f / sqrtf(total / (float)Dm + eps));
    for (int i = 0; i < Dm; i += 16) {
        __m512 rounded = round_to_bf16(_mm512_mul_ps(bf16x16_to_f32(xr + i), inv));
        _mm256_storeu_si256((__m256i*)(o + i), f32x16_to_bf16(_mm512_mul_ps(bf16x16_to_f32(weight + i), rounded)));
    }
}
#endif
void add_rms_norm_bf16(bf16* x, const bf16* delta, const bf16* weight, bf16* out, int N, int Dm, float eps) {
#if defined(__AVX512F__) && defined(__AVX512BF16__)
    if (Dm % 16 == 0) {
        for (int n = 0; n < N; n++)
            add_rms_norm_row16(x + (int64_t)n * Dm, delta ? delta + (int64_t)n * Dm : 0, weight, out + (int64_t)n * Dm, Dm, eps);
        return;
    }
#endif
    for (int n = 0; n < N; n++) {
        bf16* xr = x + (int64_t)n * Dm;
        if (delta) {
            const bf16* dr = delta + (int64_t)n * Dm;
            for (int i = 0; i < Dm; i++) xr[i] = store_bf16(load_bf16(xr[i]) + load_bf16(dr[i]));
        }
        float lanes[16] = {0}, total = 0.0f;  /* 16 float lanes, like a vectorised sum (closer to PyTorch's) */
        for (int i = 0; i < Dm; i++) { float v = load_bf16(xr[i]); lanes[i % 16] += v * v; }
        for (int k = 0; k < 16; k++) total += lanes[k];
        float inv = 1.0f / sqrtf(total / (float)Dm + eps);  /* IEEE division and sqrt, as torch.rsqrt computes */
        bf16* o = out + (int64_t)n * Dm;
        for (int i = 0; i < Dm; i++)
            o[i] = store_bf16(load_bf16(weight[i]) * round_bf16(load_bf16(xr[i]) * inv));
    }
}

/* Greedy decoding's argmax over logits (R rows of V, row stride `stride`; bfloat16 or float32): the
   first index of the largest value, as torch.argmax (NaN aside: torch ranks it highest, this ignores it).
   One pass per row in vectors, where PyTorch's CPU argmax is slow on a verification's (B, S, V) logits. */
#if defined(__AVX512F__)
/* The vector part: per lane, strictly greater, so each lane keeps its first maximum; then the first
   index among the lanes holding the maximum. Leaves v (where the scalar tail starts), top and first. */
#define ARGMAX_VECTOR(LOAD16)                                                                      \
        __m512 best = _mm512_set1_ps(-INFINITY);                                                   \
        __m512i where = _mm512_setzero_si512();                                                    \
        __m512i index = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);   \
        int v = 0;                                                                                 \
        for (; v + 16 <= V; v += 16) {                                                             \
            __m512 value = LOAD16(p + v);                                                          \
            __mmask16 greater = _mm512_cmp_ps_mask(value, best, _CMP_GT_OQ);                       \
            best = _mm512_mask_mov_ps(best, greater, value);                                       \
            where = _mm512_mask_mov_epi32(where, greater, index);                                  \
            index = _mm512_add_epi32(index, _mm512_set1_epi32(16));                                \
        }                                                                                          \
        float top = _mm512_reduce_max_ps(best);                                                    \
        __mmask16 ties = _mm512_cmp_ps_mask(best, _mm512_set1_ps(top), _CMP_EQ_OQ);                \
        int first = ties ? _mm512_mask_reduce_min_epi32(ties, where) : 0;
#else
#define ARGMAX_VECTOR(LOAD16) int v = 0; float top = -INFINITY; int first = 0;
#endif
#define ARGMAX(T, SUFFIX, LOAD16)                                                                  \
void argmax_##SUFFIX(const T* x, int64_t* out, int R, int V, int64_t stride) {                     \
    for (int r = 0; r < R; r++) {                                                                  \
        const T* p = x + (int64_t)r * stride;                                                      \
        ARGMAX_VECTOR(LOAD16)                                                                      \
        for (; v < V; v++) {                                                                       \
            float value = load_##SUFFIX(p[v]);                                                     \
            if (value > top) { top = value; first = v; }                                           \
        }                                                                                          \
        out[r] = first;                                                                            \
    }                                                                                              \
}
ARGMAX(bf16, bf16, bf16x16_to_f32)
ARGMAX(float, f32, _mm512_loadu_ps)

/* Regular decoding's sampled token with temperature alone: for each chosen row r = rows[a] of x (row stride
   `stride`), token ~ softmax(x_r / temperature) by inverse CDF with the uniform u = uniforms[a] in [0, 1):
   the first token whose cumulative weight exceeds u times the total (torch.searchsorted(..., right=True)).
   In place of PyTorch's passes over the whole (A, V) logits and a float64 cumsum in fresh multi-megabyte
   buffers, three passes over each row in cache:
   the largest logit; each token's weight e_v = exp_fixed(x_v / T - max / T) (float32, stored in `work`, V
   floats) and SAMPLE_BLOCK-token sums of them in float64 (`block_sum`); then the block where the running sum
   passes the target and the token inside it, added one by one. Every row's token depends on its logits and
   uniform alone (any rows, any order, any threads), and every build computes the same weights and sums, so
   the same token on every CPU. Forbidden tokens (-inf) weigh 0 and are never drawn; a row with no finite
   logit, or whose weights sum to 0, gets its argmax. */
enum { SAMPLE_BLOCK = 256 };
/* The float64 sum of n weights: 16 lanes (i mod 16) over the whole groups of 16, added in order, then the tree of
   canon.h's reduce16_fixed in float64, then the last n mod 16 one by one: the same sums on every build. */
static double block_sum(const float* e, int n) {
    double lanes[16] = {0};
    int i = 0;
#if defined(__AVX512F__)
    __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
    for (; i + 16 <= n; i += 16) {
        lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm256_loadu_ps(e + i)));
        hi = _mm512_add_pd(hi, _mm512_cvtps_pd(_mm256_loadu_ps(e + i + 8)));
    }
    _mm512_storeu_pd(lanes, lo);
    _mm512_storeu_pd(lanes + 8, hi);
#elif defined(__AVX2__)
    __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 4; j++) acc[j] = _mm256_add_pd(acc[j], _mm256_cvtps_pd(_mm_loadu_ps(e + i + 4 * j)));
    for (int j = 0; j < 4; j++) _mm256_storeu_pd(lanes + 4 * j, acc[j]);
#else
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) lanes[j] += (double)e[i + j];
#endif
    double s[8], u[4];
    for (int j = 0; j < 8; j++) s[j] = lanes[j] + lanes[8 + j];
    for (int j = 0; j < 4; j++) u[j] = s[j] + s[4 + j];
    double sum = (u[0] + u[2]) + (u[1] + u[3]);
    for (; i < n; i++) sum += (double)e[i];
    return sum;
}

static int64_t sample_row(const float* p, int V, float temperature, double u, float* work, double* blocks) {
    int64_t first;
    argmax_f32(p, &first, 1, V, V);
    float top = p[first];  /* the largest logit; -inf or NaN where no logit is finite and larger */
    if (!(top > -INFINITY) || !(top < INFINITY)) return first;
    float shift = top / temperature;  /* the largest x_v / T: division by T > 0 keeps the order */
    int nblocks = (V + SAMPLE_BLOCK - 1) / SAMPLE_BLOCK;
    double total = 0.0;
    for (int j = 0; j < nblocks; j++) {
        int i = j * SAMPLE_BLOCK, end = i + SAMPLE_BLOCK < V ? i + SAMPLE_BLOCK : V;
#if defined(__AVX512F__)
        for (; i + 16 <= end; i += 16) {
            __m512 x = _mm512_div_ps(_mm512_loadu_ps(p + i), _mm512_set1_ps(temperature));
            __m512 e = exp_ps(_mm512_sub_ps(x, _mm512_set1_ps(shift)));
            e = _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), _mm512_setzero_ps());  /* NaN weighs 0 */
            _mm512_storeu_ps(work + i, e);
        }
#endif
        for (; i < end; i++) {
            float x = p[i] / temperature, e = exp_fixed(x - shift);
            work[i] = x == x ? e : 0.0f;
        }
        blocks[j] = block_sum(work + j * SAMPLE_BLOCK, end - j * SAMPLE_BLOCK);
        total += blocks[j];
    }
    if (!(total > 0.0) || !(total < INFINITY)) return first;
    double target = u * total, before = 0.0;
    int j = 0;
    while (j + 1 < nblocks && before + blocks[j] <= target) before += blocks[j++];
    int end = (j + 1) * SAMPLE_BLOCK < V ? (j + 1) * SAMPLE_BLOCK : V;
    int64_t last = first;
    for (int i = j * SAMPLE_BLOCK; i < end; i++) {
        if (work[i] > 0.0f) last = i;
        before += work[i];
        if (before > target) return i;
    }
    return last;  /* the block's own sum rounded past the target where one-by-one additions did not */
}
int sample_f32(const float* x, int64_t stride, const int64_t* rows, int A, int V, float temperature, const double* uniforms,
               int64_t* out) {
    float* work = malloc(sizeof(float) * (size_t)V);
    double* blocks = malloc(sizeof(double) * (size_t)(V / SAMPLE_BLOCK + 1));
    if (!work || !blocks) { free(work); free(blocks); return 1; }
    for (int a = 0; a < A; a++) out[a] = sample_row(x + rows[a] * stride, V, temperature, uniforms[a], work, blocks);
    free(work);
    free(blocks);
    return 0;
}
