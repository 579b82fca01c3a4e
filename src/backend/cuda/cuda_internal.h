/* src/backend/cuda/cuda_internal.h: what the CUDA backend's translation units share.
 * Only files under src/backend/cuda include this (and CUDA headers); the rest of the tree
 * sees the backend table (src/backend/backend.h) and src/backend/backend_cuda.h.
 *
 * The quantized linears (FP8 W8A8, int4 W4A16) live in quant_fp8.cu and quant_int4.cu (their
 * kernels in fp8_gemm.cu, int4_stream.cu, int4_tile.cu) and plug in through the hooks at the end of
 * this file: linear.cu calls them for VSR_WK_FP8 / VSR_WK_INT4. The op files' own C++ helpers
 * (device helpers, the private state, the cu_* ops of the table) are in ops_internal.cuh. */
#ifndef VSR_CUDA_INTERNAL_H
#define VSR_CUDA_INTERNAL_H

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
/* the project's C headers carry no extern "C" of their own: include them here, first */
#include "backend/backend.h"
#include "backend/backend_cuda.h"
#include "vsr/device.h"
#include "vsr/dtype.h"
#include "vsr/error.h"

/* Per-backend state. One stream: every op is enqueued on it in order; buf_get synchronises. */
typedef struct cuda_ctx {
    int device;
    int cc_major, cc_minor, sm_count;
    char dev_name[128];
    cudaStream_t stream;
    cublasLtHandle_t lt;
    void *lt_ws; /* cuBLASLt workspace */
    size_t lt_ws_bytes;
    /* Grow-only scratch for one op at a time (BF16 copies of activations, unpacked weights,
     * per-token scales, ...). An op may use it between its launches; it is stream-ordered, so
     * the next op reusing it is safe without a sync. Never hold it across two table calls. */
    void *scratch;
    size_t scratch_bytes;
    /* Second scratch, for hooks that need two buffers at once (e.g. activations + unpacked
     * weights). Same rules. */
    void *scratch2;
    size_t scratch2_bytes;
    /* Options from the model layer (NULL/"auto" = defaults); quant paths read these. */
    char dtype[32];          /* "auto" or an explicit compute dtype */
    char autotune_dir[1024]; /* "" = no autotune cache */
    void *quant_state;       /* private to quant_*.cu (autotune tables, ...); freed by cuda_quant_ctx_free */
    /* Bumped whenever a workspace (scratch, quant workspaces, ...) is freed or moved: a recorded
     * CUDA graph holds the old addresses and must not be replayed after that. Every grow-only
     * buffer used inside the forward bumps it when it reallocates. */
    unsigned mem_gen;
} cuda_ctx;

/* A weight as the CUDA backend holds it. */
struct vsr_bweight {
    vsr_weight_view v; /* kind, N, K, group, global_scale; host pointers cleared after upload
                        * (they point into the mapping, which the backend does not keep) */
    char name[256];    /* v.name copied (v.name points here) */
    void *w;           /* device: packed weight bytes as stored */
    void *scale;       /* device: scales as stored (bf16 / e4m3 ...) or NULL */
    void *zp;          /* device: zero points or NULL */
    int32_t *g_idx;    /* device: g_idx or NULL */
    uint64_t bytes;    /* device bytes held for this weight (all of the above + q) */
    void *q;           /* private to the quant hook that uploaded it (freed by cuda_quant_release) */
};

/* ---- helpers (backend.cu; cuda_gemm_bf16*, cuda_f32_to_bf16: linear.cu; cuda_add_into: activations.cu) ---- */

/* VSR_OK, or VSR_E_DEVICE "cuda:N: <what>: <cudaGetErrorString>" (clears the sticky error
 * when it can). */
vsr_status cuda_check(cuda_ctx *c, cudaError_t e, const char *what, vsr_err *err);
/* After a kernel launch: cudaGetLastError. */
vsr_status cuda_check_launch(cuda_ctx *c, const char *kernel, vsr_err *err);
/* A 0/1 switch from the environment (A/B and test knobs), read once into *cache (-1: not read yet;
 * a force hook may store into it): "0..." -> 0, "1..." -> 1, unset or anything else -> dflt. */
int cuda_env_switch(const char *name, int dflt, int *cache);
/* A switch of several modes 0..maxv (maxv <= 9): the environment's single digit in range, else dflt */
int cuda_env_mode(const char *name, int dflt, int maxv, int *cache);
/* the tests' setter of either: on in [0, maxv] replaces the cached value; the old value (-1: out of range) */
int cuda_env_switch_set(const char *name, int dflt, int *cache, int on, int maxv);
#ifdef __cplusplus
/* A 0/1 knob of a .cu file: `SC int on_fn(void)` reads the environment variable env once (default dflt, SC: static
 * or nothing), and the tests' setter `extern "C" int force_fn(int on)` replaces it (cuda_env_switch_set's contract:
 * the old value, or -1 for on outside 0..1), both over one cache */
#define CUDA_ENV_KNOB(SC, on_fn, force_fn, env, dflt)                                                                  \
    static int on_fn##_cache = -1;                                                                                     \
    SC int on_fn(void) { return cuda_env_switch(env, dflt, &on_fn##_cache); }                                          \
    extern "C" int force_fn(int on) { return cuda_env_switch_set(env, dflt, &on_fn##_cache, on, 1); }
#endif
/* y[i] += x[i] for n floats, launched on c's stream (the caller checks the launch). */
void cuda_add_into(cuda_ctx *c, float *y, const float *x, int64_t n);
/* Grow-only scratch (see cuda_ctx). */
vsr_status cuda_scratch(cuda_ctx *c, size_t bytes, void **out, vsr_err *err);
vsr_status cuda_scratch2(cuda_ctx *c, size_t bytes, void **out, vsr_err *err);
/* cudaMalloc + copy of n host bytes; on failure frees nothing of the caller's. */
vsr_status cuda_upload_bytes(cuda_ctx *c, const void *host, size_t n, const char *what, void **out,
                             vsr_err *err);
/* x FP32 [M, K] (row stride K) -> y BF16 [M, K], round to nearest even. */
vsr_status cuda_f32_to_bf16(cuda_ctx *c, const float *x, int64_t n, __nv_bfloat16 *y, vsr_err *err);
/* y[M, N] (+)= A[M, K] . W[N, K]^T, A and W BF16 row-major, FP32 accumulation and output,
 * through cuBLASLt. */
vsr_status cuda_gemm_bf16(cuda_ctx *c, const __nv_bfloat16 *A, int64_t M, const __nv_bfloat16 *W,
                          int64_t N, int64_t K, float *y, int accumulate, vsr_err *err);

/* Causal depthwise conv1d + silu (backend.h conv1d_silu), conv1d.cu; x FP32, or xb BF16 (x NULL). */
vsr_status cuda_conv1d_silu(cuda_ctx *c, const float *x, const __nv_bfloat16 *xb, int64_t xs, const vsr_segs *seg,
                            int64_t C, const float *w, int Kc, float *y, vsr_err *err);

/* ---- hooks for the quantized linears (quant_fp8.cu, quant_int4.cu) ---- */

/* Upload: v->kind is the hook's kind, v->N, v->K > 0 and v->w != NULL are checked, b is
 * zeroed with b->v = *v and b->name set. The hook fills b->w/scale/zp/g_idx (device copies,
 * cudaMalloc), b->bytes, and b->q if it keeps anything else. On failure it frees what it
 * allocated and leaves those fields NULL. Refusals (capability, shape) say why. */
vsr_status cuda_int4_upload(cuda_ctx *c, const vsr_weight_view *v, vsr_bweight *b, vsr_err *err);
vsr_status cuda_fp8_upload(cuda_ctx *c, const vsr_weight_view *v, vsr_bweight *b, vsr_err *err);
/* y[M, N] (+)= x[M, K] . W^T with x, y device FP32 (row strides K and N), on c->stream. */
vsr_status cuda_int4_linear(cuda_ctx *c, const float *x, int64_t M, const vsr_bweight *w, float *y,
                            int accumulate, vsr_err *err);
vsr_status cuda_fp8_linear(cuda_ctx *c, const float *x, int64_t M, const vsr_bweight *w, float *y,
                           int accumulate, vsr_err *err);
/* int4 from BF16 activations xb [M, K] (device, row stride K; read in place when 16-byte aligned and
 * not act-order); same contract otherwise (quant_int4.cu). */
vsr_status cuda_int4_linear_bf16(cuda_ctx *c, const __nv_bfloat16 *xb, int64_t M, const vsr_bweight *w, float *y,
                                 int accumulate, vsr_err *err);
/* The same from activations already quantized per token: xq e4m3 [M, Kp] (Kp = K rounded up to 16,
 * columns K..Kp zero, rows 16-byte aligned for the sm_90a kernel), sx FP32 [M]; device pointers. */
vsr_status cuda_fp8_linear_prequant(cuda_ctx *c, const uint8_t *xq, const float *sx, int64_t M,
                                    const vsr_bweight *w, float *y, int accumulate, vsr_err *err);
/* FP8 product kept in BF16 for a consumer that reads it (linear_swiglu): where
 * cuda_fp8_linear_prequant would itself go through a BF16 product (M >= 128 under --dtype auto: the
 * outer-vector-scaled one, or the unscaled one (b') where cuBLASLt has no outer-vector algorithm),
 * runs that product alone and sets *ran = 1, *d = BF16 [M, *ldd] in a quant workspace valid until the
 * next quantized linear, and *dsx, *dsw = the per-row and per-column scales the reader must apply
 * (NULL when the product is already scaled); else *ran = 0 and nothing ran. x FP32 [M, K] is
 * quantized here unless xq, sx are given (as for prequant). */
vsr_status cuda_fp8_linear_bf16out(cuda_ctx *c, const float *x, const uint8_t *xq, const float *sx, int64_t M,
                                   const vsr_bweight *w, const __nv_bfloat16 **d, int64_t *ldd, const float **dsx,
                                   const float **dsw, int *ran, vsr_err *err);
/* The same product, written to dst [M, N] (row stride N) instead of the workspace (one more pass when
 * the weight is padded to Np > N). */
vsr_status cuda_fp8_linear_bf16_to(cuda_ctx *c, const float *x, const uint8_t *xq, const float *sx, int64_t M,
                                   const vsr_bweight *w, __nv_bfloat16 *dst, int *ran, vsr_err *err);
/* autotune.cu: the choice recorded for (kernel, key) under --autotune-cache, as text (path: the
 * file); VSR_E_NOT_FOUND when none is recorded yet. */
vsr_status autotune_recorded(cuda_ctx *c, const char *kernel, const char *key, char *choice, size_t n, char *path,
                             size_t path_n, vsr_err *err);
/* y[M, N] = A . W^T as cuda_gemm_bf16, the result rounded to BF16 (D BF16, row stride N). */
vsr_status cuda_gemm_bf16_out_bf16(cuda_ctx *c, const __nv_bfloat16 *A, int64_t M, const __nv_bfloat16 *W, int64_t N,
                                   int64_t K, __nv_bfloat16 *y, vsr_err *err);
/* Frees b->q (weight_free frees w/scale/zp/g_idx itself). */
void cuda_quant_release(cuda_ctx *c, vsr_bweight *b);
/* Frees c->quant_state at destroy. */
void cuda_quant_ctx_free(cuda_ctx *c);

#ifdef __cplusplus
}
#endif

#endif
