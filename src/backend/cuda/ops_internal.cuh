/* src/backend/cuda/ops_internal.cuh: what the op files of the CUDA backend share (backend.cu,
 * linear.cu, norms.cu, rope.cu, activations.cu, embed.cu, attention.cu, deltanet.cu, conv1d.cu).
 * C++ only (device helpers and host declarations); the C view of the backend is cuda_internal.h.
 *
 *   device helpers     warp_sum / warp_max / sq4, the segment table (dsegs, seg_of_row_d), FP32-or-BF16
 *                      loads (ldf, ld4f, ld4raw), the twin writers (block_reduce, twin_row, e4m3x4, ...)
 *   private state      cuda_ctx_priv: the cuBLASLt plan cache, the activation twin, the product kept in
 *                      BF16, the profiler, the recorded forwards (backend.cu owns it)
 *   host helpers       blocks_for, ENTER, PROF, the twin / kept-product bookkeeping (backend.cu)
 *   the ops            cu_* (one family a file; the table in backend.cu) */
#ifndef VSR_CUDA_OPS_INTERNAL_CUH
#define VSR_CUDA_OPS_INTERNAL_CUH

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h" /* first: wraps the C headers in extern "C" */
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/ptx.cuh"
#define VSR_QUANT_INTERNAL_CUDA 1
#include "backend/cuda/quant_internal.h" /* autotune_choose */

#include <cuda_fp8.h>

#define CUDA_MAX_SEGS 128

static inline unsigned blocks_for(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    return (unsigned)(b < 1 ? 1 : (b > 0x7fffffff ? 0x7fffffff : b));
}

/* Every op starts here: the calling thread may not have this device current. */
#define ENTER(c)                                                                                   \
    do {                                                                                           \
        vsr_status st_ = cuda_check((c), cudaSetDevice((c)->device), "cudaSetDevice", err);        \
        if (st_) return st_;                                                                       \
    } while (0)


__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
/* Sum of squares of a float4 for the kernels that must agree bit for bit (the RMSNorm row and warp kernels; the
 * gated norm's row and token kernels), with its roundings spelled out: written as x*x + y*y + ..., ptxas fused
 * it as fma(x, x, y*y) in one kernel and fma(y, y, x*x) in another, and their outputs differed in the last bit
 * for some rows (seen on the H200 at 64 columns, session 7). */
__device__ __forceinline__ float sq4(float4 v) {
    return __fmaf_rn(v.w, v.w, __fmaf_rn(v.z, v.z, __fmaf_rn(v.y, v.y, __fmul_rn(v.x, v.x))));
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* The segment table by value. */
typedef struct dsegs {
    int n;
    int64_t start[CUDA_MAX_SEGS], len[CUDA_MAX_SEGS], pos0[CUDA_MAX_SEGS];
} dsegs;

__device__ __forceinline__ int seg_of_row_d(const dsegs &s, int64_t r) { return last_le_d(s.start, s.n, r); }

/* ---- cuBLASLt GEMM: y[M, N] (+)= A[M, K] . W[N, K]^T (row-major), plans cached per shape ---- */

#define LT_ALGOS 16 /* heuristic candidates kept per shape; timed once with --autotune-cache */
typedef struct lt_plan {
    cudaDataType_t ty, dty; /* operands, output (FP32, or BF16 for a consumer that reads BF16) */
    int64_t M, N, K;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algos[LT_ALGOS];
    int n_algos, chosen; /* chosen: -1 until the first call decides (autotune or the heuristic's first) */
    cublasLtMatmulAlgo_t run; /* what every call launches once chosen (a heuristic's, or rebuilt from its name) */
    char cfg[64];             /* the widened search's configuration name ("" on the heuristic-only paths) */
    int used;
} lt_plan;

#define LT_PLANS 64
typedef struct lt_cache {
    lt_plan p[LT_PLANS];
    int n, next;
} lt_cache;

/* The cache hangs off quant-independent private state: a static per-ctx table kept in a small
 * side structure allocated at ctx creation (cuda_ctx_priv). */
/* Activation twin: the output of a producer op (rmsnorm, rmsnorm_gated, mul_sigmoid, swiglu)
 * kept also in the precision the next linears read, written in the producer's own pass, so
 * those linears skip their conversion pass (BF16) or quantization pass (FP8, per-row scales
 * exactly as k_fp8_quant computes them). Only for outputs the model declared with
 * feed_linears; dropped by any op that writes over its source. */
enum { TW_NONE = 0, TW_BF16 = 1, TW_FP8 = 2 };
typedef struct twin {
    const float *src;    /* FP32 [rows, K] it copies */
    int64_t rows, K, Kp; /* Kp: the FP8 row stride (K rounded up to 16, zero padded) */
    int kind;
    void *data; /* BF16 [rows, K] or e4m3 [rows, Kp], in tw_buf */
    float *sx;  /* FP8: per-row scales [rows] */
    int sole;   /* the FP32 source was not written: the twin is the only copy (feed_linears readers) */
} twin;

/* Per-op timing (VSR_CUDA_PROFILE=1): an event pair around every table call, summed by name,
 * printed at destroy. Off by default; graphs are off while it is on. */
#define PROF_PAIRS 4096
#define PROF_NAMES 160
typedef struct prof_row {
    char name[72];
    int64_t calls;
    double ms;
} prof_row;
typedef struct prof {
    int made; /* events created (on first use) */
    cudaEvent_t ev[2 * PROF_PAIRS];
    int row_of[PROF_PAIRS];
    int n_pairs;
    prof_row rows[PROF_NAMES];
    int n_rows;
} prof;

/* Recorded forwards (CUDA graphs), by the model's key; recorded on a key's second sighting. A
 * bucketed model warms a few hundred shapes (src/model/qwen35.c), hence the room. */
#define GRAPHS 1024
#define GRAPH_SEEN 32
typedef struct graph_ent {
    uint64_t key, last_use;
    unsigned gen; /* mem_gen at recording */
    cudaGraphExec_t exec;
    int64_t n_ids, vocab;
} graph_ent;

typedef struct cuda_ctx_priv {
    cuda_ctx pub;
    lt_cache lt;
    twin tw;
    const float *req_x; /* feed_linears: the declared next producer output */
    int64_t req_rows, req_K;
    int req_sole_bf16, req_sole_fp8; /* its readers all read a BF16 (BF16, int4) / an FP8 twin */
    void *tw_buf;
    size_t tw_bytes;
    int n_fp8_w; /* FP8 linear weights held: producers make FP8 twins */
    /* keep_product_bf16: the declared next linear output, and the product held only in BF16 (live
     * while kp_src != NULL: [kp_rows, kp_N] at FP32 address kp_src, its BF16 copy in kp_buf) */
    const float *kp_req;
    int64_t kp_req_rows, kp_req_N;
    const float *kp_src;
    int64_t kp_rows, kp_N;
    void *kp_buf;
    size_t kp_bytes;
    prof pf;
    int capturing;
    uint64_t cap_key, tick;
    int64_t cap_n; /* token ids of the forward being recorded */
    graph_ent g[GRAPHS];
    uint64_t seen[GRAPH_SEEN];
    int seen_next;
    uint64_t never[GRAPHS]; /* keys whose recording failed: run op by op from then on */
    int never_next;
    int64_t embed_vocab;                /* vocabulary of the last embed call (replays check ids) */
    int32_t *ids_host, *ids_dev;        /* staging of token ids: pinned host, device */
    size_t ids_cap;                     /* elements of both */
    cudaEvent_t ids_ev;                 /* the last copy out of ids_host has finished */
    int64_t *tab_host, *tab_dev;        /* rows_stage's row table: pinned host, device */
    size_t tab_cap;                     /* elements of both */
    int64_t tab_n;                      /* elements staged */
    int tab_armed;                      /* staged since the last embed: the next embed copies it */
} cuda_ctx_priv;

static inline cuda_ctx_priv *priv(cuda_ctx *c) { return (cuda_ctx_priv *)c; }

/* Inputs of some ops may be FP32, or BF16 where a linear kept its product in BF16 (linear_swiglu,
 * keep_product_bf16): element loads widen either. */
__device__ __forceinline__ float ldf(const float *p) { return *p; }
__device__ __forceinline__ float ldf(const __nv_bfloat16 *p) { return __bfloat162float(*p); }
__device__ __forceinline__ float4 ld4f(const float *p) { return *(const float4 *)p; }
__device__ __forceinline__ float4 wide4(uint2 v) { /* four BF16, exactly */
    float2 a = __bfloat1622float2(*(const __nv_bfloat162 *)&v.x), b = __bfloat1622float2(*(const __nv_bfloat162 *)&v.y);
    return make_float4(a.x, a.y, b.x, b.y);
}
__device__ __forceinline__ float4 wide4(float4 v) { return v; }
__device__ __forceinline__ float4 ld4f(const __nv_bfloat16 *p) { return wide4(*(const uint2 *)p); } /* 8-byte aligned */
/* four elements as loaded (held narrow until used: half the registers for BF16) */
template <typename T> struct raw4 { typedef float4 type; };
template <> struct raw4<__nv_bfloat16> { typedef uint2 type; };
template <typename T> __device__ __forceinline__ typename raw4<T>::type ld4raw(const T *p) {
    return *(const typename raw4<T>::type *)p;
}

#define RN_VEC 8  /* float4 per thread held in registers by the row kernels: rows up to 8192 wide */
#define SW_MAX_N 32768 /* the FP8 swiglu kernels take rows up to this wide (the 27B MLP is 17408) */

__device__ __forceinline__ float block_reduce(float v, float *sh, bool is_max) {
    for (int o = 16; o; o >>= 1) {
        float u = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, u) : v + u;
    }
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31, nw = (int)(blockDim.x >> 5);
    __syncthreads(); /* sh may still be read from a previous reduction */
    if (l == 0) sh[w] = v;
    __syncthreads();
    if (w == 0) {
        v = l < nw ? sh[l] : (is_max ? 0.0f : 0.0f);
        for (int o = 16; o; o >>= 1) {
            float u = __shfl_xor_sync(0xffffffffu, v, o);
            v = is_max ? fmaxf(v, u) : v + u;
        }
        if (l == 0) sh[32] = v;
    }
    __syncthreads();
    return sh[32];
}

/* An FP8 twin's row scale (fp8_row_scale of the block's amax, every thread's part reduced), stored by thread 0
 * into *tsx; what the row's elements are divided by */
__device__ __forceinline__ fp8_div twin_scale(float amax, float *sh, float *tsx) {
    const float s = fp8_row_scale(block_reduce(amax, sh, true));
    if (threadIdx.x == 0) *tsx = s;
    return fp8_div_of(s);
}

__device__ __forceinline__ uint32_t e4m3x4(float4 v, const fp8_div &d) {
    /* the same arithmetic as quant_fp8.cu's k_fp8_quant: x / s (fp8_scaled), RNE, saturate to finite; two values
     * per conversion (cvt.rn.satfinite.e4m3x2.f32 rounds each on its own: the converter of one value runs the
     * same instruction with a zero beside it), low byte first */
    const float2 lo = make_float2(fp8_scaled(v.x, d), fp8_scaled(v.y, d)), hi = make_float2(fp8_scaled(v.z, d), fp8_scaled(v.w, d));
    return (uint32_t)__nv_cvt_float2_to_fp8x2(lo, __NV_SATFINITE, __NV_E4M3) |
           (uint32_t)__nv_cvt_float2_to_fp8x2(hi, __NV_SATFINITE, __NV_E4M3) << 16;
}

__device__ __forceinline__ void store_bf16x4(__nv_bfloat16 *p, float4 v) {
    __nv_bfloat162 a = __floats2bfloat162_rn(v.x, v.y), b = __floats2bfloat162_rn(v.z, v.w);
    uint2 u;
    u.x = *(uint32_t *)&a, u.y = *(uint32_t *)&b;
    *(uint2 *)p = u;
}

/* Twin of one row held in registers (v[j] = float4 j*blockDim+tid of the row): BF16, or FP8 with
 * the row's scale (amax / 448, 1 for a zero row) and zeros out to Kp. */
template <int TW, int VEC>
__device__ __forceinline__ void twin_row(const float4 (&v)[VEC], int D4, int D, int64_t r, void *tw, int64_t twld,
                                         float *tsx, float *sh) {
    if (TW == TW_BF16) {
        __nv_bfloat16 *o = (__nv_bfloat16 *)tw + r * twld;
#pragma unroll
        for (int j = 0; j < VEC; j++) {
            int i = threadIdx.x + j * blockDim.x;
            if (i < D4) store_bf16x4(o + 4 * i, v[j]);
        }
    } else if (TW == TW_FP8) {
        float amax = 0.0f;
#pragma unroll
        for (int j = 0; j < VEC; j++) amax = fmaxf(amax, absmax4(v[j]));
        const fp8_div dv = twin_scale(amax, sh, tsx + r);
        uint8_t *q = (uint8_t *)tw + r * twld;
#pragma unroll
        for (int j = 0; j < VEC; j++) {
            int i = threadIdx.x + j * blockDim.x;
            if (i < D4) *(uint32_t *)(q + 4 * i) = e4m3x4(v[j], dv);
        }
        for (int64_t i = D + threadIdx.x; i < twld; i += blockDim.x) q[i] = 0;
    }
}

static inline int64_t rup16(int64_t k) { return (k + 15) / 16 * 16; }


/* ---- backend.cu ---- */

extern const char *const wkind_names_cuda[];
/* Counters and switches for tests and benchmarks (defined in backend.cu) */
extern "C" {
extern int64_t vsr_cuda_stat_twin_hits, vsr_cuda_stat_graph_records, vsr_cuda_stat_graph_replays;
extern int vsr_cuda_graphs_off, vsr_cuda_profile_on;
extern int vsr_cuda_sole_twins_off;
}
vsr_status cuda_grow(cuda_ctx *c, void **buf, size_t *have, size_t bytes, vsr_err *err);
vsr_status segs_to_dev(cuda_ctx *c, const vsr_segs *s, const char *op, dsegs *d, int64_t *rows,
                              int64_t *max_len, vsr_err *err);
const __nv_bfloat16 *kp_find(cuda_ctx *c, const float *x, int64_t rows, int64_t xs, int64_t n);
vsr_status kp_guard(cuda_ctx *c, const void *ptr, size_t bytes, const char *op, vsr_err *err);
void twin_clobber(cuda_ctx *c, const void *ptr, size_t bytes);
vsr_status twin_start(cuda_ctx *c, const float *y, int64_t n, int fp8_ok, int bf16_ok, twin *t, vsr_err *err);
void twin_commit(cuda_ctx *c, const twin *t);
int64_t twin_rows_of(cuda_ctx *c, const float *x, int64_t M, int64_t K, int kind);
const void *twin_find(cuda_ctx *c, const float *x, int64_t M, int64_t K, int kind, const float **sx);
vsr_status sole_twin_readable(cuda_ctx *c, const float *x, int64_t M, const vsr_bweight *w, vsr_err *err);
void prof_flush(cuda_ctx *c);
int prof_row_index(prof *f, const char *name);
void prof_producer_name(char *buf, size_t n, const char *op, int64_t D, int64_t M, const twin *t);
vsr_status ids_stage(cuda_ctx *c, const int32_t *ids, int64_t n, vsr_err *err);

/* ---- linear.cu ---- */

void plan_destroy(lt_plan *p);
vsr_status lt_gemm(cuda_ctx *c, cudaDataType_t ty, const void *A, int64_t M, const void *W, int64_t N,
                          int64_t K, cudaDataType_t dty, void *y, int accumulate, vsr_err *err);
vsr_status bf16_input(cuda_ctx *c, const float *x, int64_t M, int64_t K, const __nv_bfloat16 **xb, vsr_err *err);
/* attention.cu: k_attention's dynamic shared memory limit, set once at backend creation */
vsr_status cuda_attention_setup(cuda_ctx *c, vsr_err *err);

/* ---- the ops of the table (backend.cu's cuda_ops), by file ---- */

/* embed.cu */
vsr_status cu_embed(void *ctx, const vsr_bweight *table, const int32_t *ids, int64_t n, float *y, vsr_err *err);
/* embed.cu */
vsr_status cu_gather_rows(void *ctx, const float *src, const int64_t *rows, int64_t n, int64_t D, float *dst,
                                 vsr_err *err);
vsr_status cu_gather_rows_staged(void *ctx, const float *src, const int64_t *rows, int64_t tab_off, int64_t n,
                                 int64_t D, float *dst, vsr_err *err);
/* embed.cu */
vsr_status cu_readout(void *ctx, const float *h, int64_t M, const vsr_bweight *R, float *logits, vsr_err *err);
/* linear.cu */
vsr_status cu_linear(void *ctx, const float *x, int64_t M, const vsr_bweight *w, float *y, int accumulate,
                            vsr_err *err);
/* norms.cu */
vsr_status cu_rmsnorm(void *ctx, const float *x, int64_t xs, int64_t M, int64_t D, const float *w, float off,
                             float eps, float *y, int64_t ys, vsr_err *err);
/* norms.cu */
vsr_status cu_rmsnorm_gated(void *ctx, const float *x, const float *z, int64_t zh, int64_t zs, int64_t M,
                                   int64_t D, const float *w, float eps, float *y, vsr_err *err);
/* conv1d.cu */
vsr_status cu_conv1d_silu(void *ctx, const float *x, int64_t xs, const vsr_segs *seg, int64_t C, const float *w,
                                 int Kc, float *y, vsr_err *err);
/* deltanet.cu */
vsr_status cu_deltanet(void *ctx, const float *qkv, int64_t qkv_stride, const float *b, const float *a,
                              int64_t ba_stride, const float *A_log, const float *dt_bias, const vsr_segs *seg, int Hk,
                              int Hv, int dk, int dv, float *state, float *out, vsr_err *err);
/* rope.cu */
vsr_status cu_rope(void *ctx, float *x, int64_t xs, const vsr_segs *seg, int H, int64_t hs, int rot,
                          const float *cos_t, const float *sin_t, int64_t max_pos, vsr_err *err);
/* attention.cu */
vsr_status cu_attention(void *ctx, const float *q, int64_t qs, const float *k, const float *v,
                               const vsr_segs *seg, int H, int Hkv, int d, float scale, int causal, float *out,
                               vsr_err *err);
/* activations.cu */
vsr_status cu_mul_sigmoid(void *ctx, float *x, int64_t M, int H, int hd, const float *g, int64_t gs, int64_t ghs,
                                 vsr_err *err);
/* activations.cu */
vsr_status cu_swiglu(void *ctx, const float *g, const float *u, int64_t gs, int64_t M, int64_t N, float *y,
                           vsr_err *err);
/* activations.cu */
vsr_status cu_linear_swiglu(void *ctx, const float *x, int64_t M, const vsr_bweight *w, float *work, float *y,
                                   vsr_err *err);
/* activations.cu */
vsr_status cu_add(void *ctx, float *y, const float *x, int64_t n, vsr_err *err);

/* Times the table call it lives in (an event before, one at scope exit). */
struct prof_scope {
    cuda_ctx *c;
    int pair;
    prof_scope(cuda_ctx *c_, const char *name) : c(c_), pair(-1) {
        prof *f = &priv(c)->pf;
        if (vsr_cuda_profile_on <= 0 || priv(c)->capturing) return;
        if (!f->made) {
            for (int i = 0; i < 2 * PROF_PAIRS; i++)
                if (cudaEventCreate(&f->ev[i]) != cudaSuccess) {
                    for (int j = 0; j < i; j++) cudaEventDestroy(f->ev[j]);
                    (void)cudaGetLastError();
                    return;
                }
            f->made = 1;
        }
        if (f->n_pairs == PROF_PAIRS) prof_flush(c);
        pair = f->n_pairs++;
        int r = prof_row_index(f, name);
        f->row_of[pair] = r;
        f->rows[r].calls++;
        cudaEventRecord(f->ev[2 * pair], c->stream);
    }
    ~prof_scope() {
        if (pair >= 0) cudaEventRecord(priv(c)->pf.ev[2 * pair + 1], c->stream);
    }
};
#define PROF(c, name) prof_scope prof_scope_(c, name)

#endif
