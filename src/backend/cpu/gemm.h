/* src/backend/cpu/gemm.h: the CPU linear-layer kernels.
 *
 *   Y[M,N] = X[M,K] . W[N,K]^T  (+ Y if accumulate)      X, Y FP32 row-major
 *
 * W is a torch Linear weight ([out_features, in_features], row-major) in BF16, FP32, or
 * compressed-tensors int4 pack-quantized form, read in place (mmapped). The _ref functions
 * are plain loops with FP32 accumulation of x * float(w) in k order: the oracle. The fast
 * functions pick an AVX-512, AVX2+FMA or scalar path at run time and agree with the
 * reference to FP32 summation-order error; their int4 weights decode to exactly the BF16
 * values of vsr_dequant_int4_ref. A NULL pool runs on the caller's thread. */
#ifndef VSR_BACKEND_CPU_GEMM_H
#define VSR_BACKEND_CPU_GEMM_H

#include <stdint.h>

#include "backend/cpu/threadpool.h"

#ifdef __cplusplus
extern "C" {
#endif

/* int4 pack-quantized weight (compressed-tensors-format.md 2.2):
 *   packed [N, K/8] u32 (nibble k%8 of word k/8, from the LSB), K a multiple of 8;
 *   scale_bf16 [N, G], G = ceil(K/group) (group -1 = channel: G = 1);
 *   zp [ceil(N/8), G] u32 packed along N (nibble n%8) or NULL for symmetric (zero point 8);
 *   g_idx [K] with values in [0, G), or NULL for column order (k / group). A g_idx holding
 *   -1 means "not initialised" and is treated as column order, as the reference does. */
typedef struct vsr_int4_weight {
    const uint32_t *packed;
    const uint16_t *scale_bf16;
    const uint32_t *zp;    /* NULL = symmetric */
    const int32_t *g_idx;  /* NULL = column order */
    int group;             /* -1 = channel */
    int64_t N, K;
} vsr_int4_weight;

void vsr_gemm_bf16_ref(const float *X, int64_t M, int64_t K, const uint16_t *W, int64_t N,
                       float *Y, int accumulate);
void vsr_gemm_bf16(vsr_pool *p, const float *X, int64_t M, int64_t K, const uint16_t *W,
                   int64_t N, float *Y, int accumulate);
void vsr_gemm_int4_ref(const float *X, int64_t M, const vsr_int4_weight *w, float *Y,
                       int accumulate);
void vsr_gemm_int4(vsr_pool *p, const float *X, int64_t M, const vsr_int4_weight *w, float *Y,
                   int accumulate);
/* readout in FP32 */
void vsr_gemm_f32_ref(const float *X, int64_t M, int64_t K, const float *W, int64_t N, float *Y,
                      int accumulate);
void vsr_gemm_f32(vsr_pool *p, const float *X, int64_t M, int64_t K, const float *W, int64_t N,
                  float *Y, int accumulate);

/* which SIMD path is in use: "avx512", "avx2+fma", "scalar" */
const char *vsr_gemm_isa(void);

/* TEST-ONLY: force a path ("avx512", "avx2+fma", "scalar"), or NULL to return to the
 * automatic choice. Returns 0, or -1 (nothing changed) when this CPU lacks the path or the
 * name is unknown. Not thread-safe against concurrent GEMM calls. */
int vsr_gemm_force_isa(const char *name);

/* The name forced by vsr_gemm_force_isa, or NULL when the choice is automatic. The other CPU
 * ops (ops_cpu.c) read it too: forcing "scalar" or "avx2+fma" also turns off their AVX-512
 * paths, so one switch puts the whole CPU backend on a known path for tests. */
const char *vsr_gemm_forced_isa(void);

/* TEST-ONLY switches of the ops in ops_cpu.c (defined there), for tests/test_cpu_ops.c. */
/* Which path the non-GEMM ops (rmsnorm_gated, conv1d_silu, deltanet, softmax exp,
 * mul_sigmoid, swiglu) take now: "avx512" or "scalar". */
const char *vsr_cpu_ops_isa(void);
/* Attention path: "rows" forces the per-query loop (otherwise used only when the blocked
 * path's workspace cannot be allocated); NULL returns to the automatic choice, the blocked
 * GEMM path. Returns 0, or -1 (nothing changed) for an unknown name. Not thread-safe
 * against concurrent attention calls. */
int vsr_cpu_attention_force_path(const char *name);

#ifdef __cplusplus
}
#endif

#endif
