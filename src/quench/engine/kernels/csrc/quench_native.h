/* quench's native decode kernels: every function Python calls, and every one a unit calls in another.

   This header is the one description of the library's interface. Each unit includes it, so the compiler
   rejects a definition that disagrees with its declaration here; `quench.engine.kernels.native_build` parses the
   same declarations into ctypes signatures (argument count and types checked on every call) and the
   library reports this header's hash, which is checked when the library is loaded. A declaration is one
   statement `ret name(type name, ...);` with ret and each type among: void, int, int64_t, float and
   pointers; constants are `#define NAME integer`. */
#ifndef QUENCH_NATIVE_H
#define QUENCH_NATIVE_H
#include <stdint.h>

typedef uint16_t bf16;  /* bfloat16 bits */

#define AVX512_GEMM_ROWS 4   /* small_gemm_bf16 takes the AVX512 kernel up to this many rows, AMX or not */
#define SCREEN_MAX_ROWS 64   /* screen_argmax_bf16's most rows per call */
#define SCREEN_VNNI_ROWS 4   /* int8 products of up to this many rows take AVX512-VNNI instead of AMX tiles */
#define ROUTE_FAST 0         /* attention's and layers_bf16's route: the build's fastest kernels (small GEMM, head-64 attention) */
#define ROUTE_AMX 1          /* ROUTE_FAST with AMX tiles past AVX512_GEMM_ROWS rows and in attention's scores */
#define ROUTE_FIXED 2        /* one arithmetic order on every build: fixed_gemm_bf16 and the fixed attention */

/* The hash of this header the library was built against (checked at load). */
const char* quench_native_header(void);

/* What this build serves on this CPU (1 or 0). */
int avx512_available(void);
int small_gemm_available(void);
int amx_available(void);
int layers_available(void);
int screen_available(void);
/* fixed.c's GEMMs vectorised, not the scalar loop: 3 NEON, 2 AVX-512, 1 AVX2 + FMA, 0 scalar (nonzero: vectorised). */
int fixed_vector_available(void);

/* rope.c: RoPE with PyTorch's roundings; rope64_bf16 (attend.c): the same for head size 64, vectorised. */
void rope_bf16(const bf16* x, const bf16* cos, const bf16* sin_signed, int dim, float* out, bf16* store);
void rope_f32(const float* x, const float* cos, const float* sin_signed, int dim, float* out, float* store);
void rope64_bf16(const bf16* x, const bf16* cos, const bf16* sin_signed, float* out, bf16* store);

/* attend.c: RoPE + KV-cache write + attention over packed ragged rows (route: ROUTE_*). Returns 0, 1 where out
   of memory. */
int rope_attend_bf16(const bf16* qkv, bf16* kc, bf16* vc, const bf16* cos, const bf16* sin_signed, const int64_t* start,
                     const int64_t* offsets, bf16* out, int B, int H, int Hkv, int D, int Tmax, float scale, int threads,
                     int route);
int rope_attend_f32(const float* qkv, float* kc, float* vc, const float* cos, const float* sin_signed, const int64_t* start,
                    const int64_t* offsets, float* out, int B, int H, int Hkv, int D, int Tmax, float scale, int threads,
                    int route);
/* The same over bfloat16 caches, always on ROUTE_FIXED's arithmetic: a key (after RoPE) or value is rounded to
   bfloat16 (nearest even) as it is written and widened exactly as it is read. */
int rope_attend_f32_bf16(const float* qkv, bf16* kc, bf16* vc, const float* cos, const float* sin_signed,
                         const int64_t* start, const int64_t* offsets, float* out, int B, int H, int Hkv, int D, int Tmax,
                         float scale, int threads);

/* glue.c: residual sum + RMSNorm, greedy argmax, and a token sampled with temperature (0, or 1 where out of
   memory). */
void add_rms_norm_bf16(bf16* x, const bf16* delta, const bf16* weight, bf16* out, int N, int Dm, float eps);
void argmax_bf16(const bf16* x, int64_t* out, int R, int V, int64_t stride);
void argmax_f32(const float* x, int64_t* out, int R, int V, int64_t stride);
int sample_f32(const float* x, int64_t stride, const int64_t* rows, int A, int V, float temperature, const double* uniforms,
               int64_t* out);

/* gemm.c: y (M, N) = x (M, K) W^T in bfloat16, W packed (ceil(N/16), K/2, 16, 2). */
void small_gemm_bf16(const bf16* x, const bf16* wp, bf16* y, int M, int N, int K, int threads, int amx);
int gemm_bf16_amx(const bf16* x, const bf16* wp, bf16* y, int M, int N, int K, int threads);

/* fixed.c: batch-invariant kernels (each row's bits independent of the call's rows, threads and CPU); W packed
   (ceil(N/16), K, 16) in float32, (ceil(N/16), ceil(K/2), 16, 2) in bfloat16. bf16_span: the least and the
   largest biased exponent of the nonzero values, lo | hi << 8 (255 | 0 << 8 where all are zero); fixed_gemm_bf16
   takes W's (-1: unknown) and returns 0, or 1 where out of memory. */
void fixed_gemm_f32(const float* x, const float* wp, float* y, int M, int N, int K, int threads);
int bf16_span(const bf16* x, int64_t count);
int fixed_gemm_bf16(const bf16* x, const bf16* wp, bf16* y, int M, int N, int K, int threads, int w_span);
void rms_norm_f32(const float* x, const float* weight, float* out, int N, int Dm, float eps);
void silu_mul_f32(const float* gate_up, float* act, int N, int I, int threads);
void silu_mul_rows_bf16(const bf16* gate_up, bf16* act, int N, int I, int threads);

/* layers.c: SiLU x up, and every decoder layer of a packed step in one call. weights: LAYER_WEIGHTS addresses
   and spans per layer. route: ROUTE_FAST the small GEMM where the build has it, ROUTE_AMX the same with AMX
   tiles past AVX512_GEMM_ROWS rows and in attention, ROUTE_FIXED every product on fixed_gemm_bf16 and the
   fixed attention. */
#define LAYER_WEIGHTS 10     /* input norm, post norm, packed qkv, o, gate_up, down, then those four packs' bf16_span */
void silu_mul_bf16(const bf16* gate_up, bf16* act, int N, int I);
int layers_bf16(bf16* x, bf16* h, const int64_t* weights, const int64_t* caches, int L, const bf16* final_norm,
                int N, int Dm, int H, int Hkv, int I, const bf16* cos, const bf16* sin_signed, const int64_t* start,
                const int64_t* offsets, int B, int Tmax, float scale, float eps, int threads, int route,
                const int64_t* w8, int w8_rows);

/* screen.c: the screened greedy head and int8 products (AMX int8 tiles, AVX512-VNNI for a few rows). */
int64_t screen_work_bytes(int M, int V, int K);
int screen_argmax_bf16(const bf16* x, int M, int K, const int8_t* wq, const float* wscale, const int32_t* colq,
                       const float* w2, const float* e2, const bf16* wp, int V, int64_t* out, int32_t* counts, void* work,
                       int threads, int vnni_rows);
int64_t w8_work_bytes(int M, int K);
int w8_gemm_bf16(const bf16* x, int M, int K, const int8_t* wq, const float* wscale, const int32_t* colq, int N,
                 bf16* out, void* work, int threads, int vnni_rows);

/* ---- quant.c: GGUF block formats executed as stored (types are ggml's ids) ---- */
#define GGML_TYPE_Q4_0 2
#define GGML_TYPE_Q4_1 3
#define GGML_TYPE_Q8_0 8
#define GGML_TYPE_Q4_K 12
#define GGML_TYPE_Q5_K 13
#define GGML_TYPE_Q6_K 14
/* 3 NEON, 2 AVX-512, 1 AVX2 + FMA + F16C, 0 scalar. */
int quant_level(void);
/* Bytes of one row of K values of a type; -1 for an unknown type or K not a multiple of its block. */
int64_t quant_row_bytes(int type, int K);
/* y (M, N) float32, row m at y + m ldy, = x (M, K) float32 W^T, W (N, quant_row_bytes) as stored. Returns 0, 1 for
   a bad type, K or ldy < N. */
int quant_gemm_f32(const float* x, const uint8_t* w, float* y, int64_t ldy, int M, int N, int K, int type, int threads);
/* out (N, K) float32: W's values, bit for bit those of gguf's dequantize (tests). Returns 0, 1 as above. */
int dequantize_rows(const uint8_t* w, float* out, int N, int K, int type);

/* ---- qdot.c: GGUF blocks times 8-bit activations, integer sums (its header comment gives the definition) ---- */
/* 3 NEON, 2 AVX512-VNNI, 1 AVX2, 0 scalar. */
int qdot_level(void);
/* x (M, K) float32 -> q (M, K) int8 and d (M, K / block) float32, block 32 or 256. Returns 0, 1 for a bad shape. */
int quantize_x8(const float* x, int8_t* q, float* d, int M, int K, int block);
/* y (M, N) float32, row m at y + m ldy, = x quantized (quantize_x8, the type's block) times W (N, quant_row_bytes) as
   stored, integer sums. Returns 0, 1 for a bad type, K or ldy < N, 2 where out of memory. */
int quant_gemm_x8(const float* x, const uint8_t* w, float* y, int64_t ldy, int M, int N, int K, int type, int threads);
/* The same in two steps, so that one quantization serves every product of the same x and block: quantize_x8 plus
   s (M, K / 16) int32, the sums of 16 consecutive q (returns as quantize_x8); then the product of those activations
   (q, d, s of quantize_x8_sums with the type's block; returns 0, 1 as quant_gemm_x8). */
int quantize_x8_sums(const float* x, int8_t* q, float* d, int32_t* s, int M, int K, int block);
int quant_gemm_x8_quantized(const int8_t* q, const float* d, const int32_t* s, const uint8_t* w, float* y, int64_t ldy,
                            int M, int N, int K, int type, int threads);
/* qpack.c: the same product on W interleaved 8 or 16 rows at a time (Q4_0, Q4_1, Q8_0; its header comment gives the
   layout): the bytes of the copy (-1 for another type or a bad K), the copy, and the product (same bits, returns as
   quant_gemm_x8). */
int64_t qpack_bytes(int type, int N, int K);
int qpack(const uint8_t* w, uint8_t* out, int N, int K, int type);
int quant_gemm_x8_packed(const float* x, const uint8_t* wp, float* y, int64_t ldy, int M, int N, int K, int type, int threads);
/* The packed product of activations already quantized (quantize_x8_sums, block 32). */
int quant_gemm_x8_packed_quantized(const int8_t* q, const float* d, const int32_t* s, const uint8_t* wp, float* y,
                                   int64_t ldy, int M, int N, int K, int type, int threads);

/* layers_f32.c: every decoder layer of a packed float32 step of a batch-invariant runner (head size 64) in one call,
   over the kernels the Python loop calls (rms_norm_f32, the products, rope_attend_f32 on ROUTE_FIXED, silu_mul_f32).
   x (N, Dm), the residual stream, is updated in place; h (N, Dm) gets the final-norm hidden states. table (entries
   int64 values): per layer the addresses of the input and post-attention norms, then qkv, o, gate_up and down, each
   as a count P and P parts of F32_PART_FIELDS (kind, address, ggml type, N) stacked along N (each part one product
   writing its columns of y). caches: per layer the key and value cache, float32 or (cache_bf16) bfloat16
   (rope_attend_f32_bf16). Returns 0, 1 for a table that does not fit
   the shapes (nothing computed) or a refused product, 2 where out of memory (x is then partly updated). */
#define F32_PART_FIELDS 4
#define F32_PART_X8 0        /* quant_gemm_x8 on W as stored */
#define F32_PART_X8_PACKED 1 /* quant_gemm_x8_packed on qpack's copy */
#define F32_PART_QUANT 2     /* quant_gemm_f32 on W as stored */
#define F32_PART_FIXED 3     /* fixed_gemm_f32 on invariant.pack's copy, the projection's only part (type unused) */
int layers_f32(float* x, float* h, const int64_t* table, int64_t entries, const int64_t* caches, int cache_bf16, int L,
               const float* final_norm, int N, int Dm, int H, int Hkv, int I, const float* cos, const float* sin_signed,
               const int64_t* start, const int64_t* offsets, int B, int Tmax, float scale, float eps, int threads);

#endif
