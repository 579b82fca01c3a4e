/* src/backend/cuda/ops.cu: the backend table (src/backend/backend.h) on an NVIDIA GPU.
 *
 * Activations are FP32 device buffers (cudaMalloc, never managed memory). Every op is
 * enqueued on one stream, in order; buf_get synchronises and reports any fault of the
 * kernels before it. Every launch is followed by cudaGetLastError, so a bad launch fails
 * its own op; a fault inside a kernel surfaces at the next synchronising call.
 *
 * Linear (BF16 weights): the FP32 activations are rounded to BF16 (one pass) and cuBLASLt
 * runs BF16 x BF16 with FP32 accumulation and FP32 output (beta = 1 to accumulate). This
 * is what transformers does in bf16 up to the output rounding, and it lets the GEMM use
 * the tensor cores at full rate; the CPU reference keeps FP32 activations, so the two
 * differ by the activation rounding (~2^-9 relative per element; see tests/test_cuda_ops.c
 * for the measured normalised error). FP32 weights (the readout) use cuBLASLt's true FP32
 * compute (CUBLAS_COMPUTE_32F, no TF32).
 *
 * Per-sequence ops get the segment table by value as a kernel parameter (up to
 * CUDA_MAX_SEGS sequences), so no host-to-device copy (which would synchronise with
 * pageable memory) sits between kernels. */
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
#define LT_WS_BYTES ((size_t)32 << 20)

static const char *const wkind_names_cuda[] = {"bf16", "f32", "int4", "fp8", "nvfp4"};

/* ---- helpers ---- */

extern "C" vsr_status cuda_check(cuda_ctx *c, cudaError_t e, const char *what, vsr_err *err) {
    if (e == cudaSuccess) return VSR_OK;
    (void)cudaGetLastError(); /* clear a non-sticky error so the next op is not blamed */
    return vsr_err_set(err, e == cudaErrorMemoryAllocation ? VSR_E_NOMEM : VSR_E_DEVICE,
                       "cuda:%d: %s: %s (%s)", c ? c->device : -1, what, cudaGetErrorString(e),
                       cudaGetErrorName(e));
}

extern "C" vsr_status cuda_check_launch(cuda_ctx *c, const char *kernel, vsr_err *err) {
    return cuda_check(c, cudaGetLastError(), kernel, err);
}

static vsr_status grow(cuda_ctx *c, void **buf, size_t *have, size_t bytes, vsr_err *err) {
    if (bytes <= *have) return VSR_OK;
    size_t n = bytes + bytes / 4;
    if (*buf) {
        /* the old scratch may still be read by enqueued kernels */
        vsr_status st = cuda_check(c, cudaStreamSynchronize(c->stream), "scratch: synchronize", err);
        if (st) return st;
        cudaFree(*buf);
        *buf = NULL, *have = 0;
    }
    c->mem_gen++; /* recorded graphs hold the old address */
    vsr_status st = cuda_check(c, cudaMalloc(buf, n), "scratch: cudaMalloc", err);
    if (st) return vsr_err_prefix(err, "%zu bytes of scratch", n);
    *have = n;
    return VSR_OK;
}

extern "C" vsr_status cuda_scratch(cuda_ctx *c, size_t bytes, void **out, vsr_err *err) {
    vsr_status st = grow(c, &c->scratch, &c->scratch_bytes, bytes, err);
    *out = c->scratch;
    return st;
}

extern "C" vsr_status cuda_scratch2(cuda_ctx *c, size_t bytes, void **out, vsr_err *err) {
    vsr_status st = grow(c, &c->scratch2, &c->scratch2_bytes, bytes, err);
    *out = c->scratch2;
    return st;
}

extern "C" vsr_status cuda_upload_bytes(cuda_ctx *c, const void *host, size_t n, const char *what,
                                        void **out, vsr_err *err) {
    void *p = NULL;
    vsr_status st = cuda_check(c, cudaMalloc(&p, n ? n : 1), "cudaMalloc", err);
    if (st) return vsr_err_prefix(err, "%s (%zu bytes)", what, n);
    if (n && (st = cuda_check(c, cudaMemcpy(p, host, n, cudaMemcpyHostToDevice), "copy to device", err))) {
        cudaFree(p);
        return vsr_err_prefix(err, "%s (%zu bytes)", what, n);
    }
    *out = p;
    return VSR_OK;
}

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

static vsr_status segs_to_dev(cuda_ctx *c, const vsr_segs *s, const char *op, dsegs *d, int64_t *rows,
                              int64_t *max_len, vsr_err *err) {
    if (s->n < 0 || s->n > CUDA_MAX_SEGS)
        return vsr_err_set(err, VSR_E_UNSUPPORTED, "cuda:%d: %s: %d sequences in one call (at most %d)",
                           c->device, op, s->n, CUDA_MAX_SEGS);
    d->n = s->n;
    int64_t ml = 0;
    for (int i = 0; i < s->n; i++) {
        d->start[i] = s->start[i], d->len[i] = s->len[i], d->pos0[i] = s->pos0 ? s->pos0[i] : 0;
        if (s->len[i] > ml) ml = s->len[i];
    }
    *rows = s->n ? s->start[s->n - 1] + s->len[s->n - 1] : 0;
    if (max_len) *max_len = ml;
    return VSR_OK;
}

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

static void plan_destroy(lt_plan *p) {
    if (!p->used) return;
    cublasLtMatmulDescDestroy(p->desc);
    cublasLtMatrixLayoutDestroy(p->la);
    cublasLtMatrixLayoutDestroy(p->lb);
    cublasLtMatrixLayoutDestroy(p->lc);
    p->used = 0;
}

static vsr_status lt_err(cuda_ctx *c, cublasStatus_t s, const char *what, vsr_err *err) {
    if (s == CUBLAS_STATUS_SUCCESS) return VSR_OK;
    return vsr_err_set(err, VSR_E_DEVICE, "cuda:%d: cuBLASLt %s: status %d", c->device, what, (int)s);
}

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

/* Recorded forwards (CUDA graphs), by the model's key; recorded on a key's second sighting. */
#define GRAPHS 8
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
} cuda_ctx_priv;

static inline cuda_ctx_priv *priv(cuda_ctx *c) { return (cuda_ctx_priv *)c; }

/* Counters for tests (tests/test_cuda_fused.c): linears that read a twin, forwards recorded and
 * replayed. Not synchronised: tests run one thread. */
extern "C" {
int64_t vsr_cuda_stat_twin_hits, vsr_cuda_stat_graph_records, vsr_cuda_stat_graph_replays;
/* Switches for benchmarks and tests, read at every op: graphs off (VSR_CUDA_GRAPHS=0 sets it at
 * the first backend creation), per-op timing on (VSR_CUDA_PROFILE=1 likewise). */
int vsr_cuda_graphs_off = -1, vsr_cuda_profile_on = -1;
/* 1: always write the FP32 output of a declared producer (A/B timing and tests) */
int vsr_cuda_sole_twins_off = 0;
void vsr_cuda_profile_report(void);
}
/* live contexts, for vsr_cuda_profile_report */
#define LIVE_CTX 16
static cuda_ctx *live_ctx[LIVE_CTX];

static vsr_status lt_plan_get(cuda_ctx *c, cudaDataType_t ty, cudaDataType_t dty, int64_t M, int64_t N, int64_t K,
                              lt_plan **out, vsr_err *err) {
    lt_cache *lc = &((cuda_ctx_priv *)c)->lt;
    for (int i = 0; i < LT_PLANS; i++) {
        lt_plan *p = &lc->p[i];
        if (p->used && p->ty == ty && p->dty == dty && p->M == M && p->N == N && p->K == K) {
            *out = p;
            return VSR_OK;
        }
    }
    lt_plan *p = &lc->p[lc->next];
    lc->next = (lc->next + 1) % LT_PLANS;
    plan_destroy(p);
    memset(p, 0, sizeof *p);
    p->ty = ty, p->dty = dty, p->M = M, p->N = N, p->K = K;
    /* column-major view: D[N, M] = op(W)[N, K] . B[K, M], W stored K x N (ld K) transposed */
    cublasComputeType_t ct = CUBLAS_COMPUTE_32F;
    cublasOperation_t tA = CUBLAS_OP_T, tB = CUBLAS_OP_N;
    vsr_status st;
    if ((st = lt_err(c, cublasLtMatmulDescCreate(&p->desc, ct, CUDA_R_32F), "desc", err))) return st;
    cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &tA, sizeof tA);
    cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tB, sizeof tB);
    if ((st = lt_err(c, cublasLtMatrixLayoutCreate(&p->la, ty, (uint64_t)K, (uint64_t)N, K), "layout A", err)) ||
        (st = lt_err(c, cublasLtMatrixLayoutCreate(&p->lb, ty, (uint64_t)K, (uint64_t)M, K), "layout B", err)) ||
        (st = lt_err(c, cublasLtMatrixLayoutCreate(&p->lc, dty, (uint64_t)N, (uint64_t)M, N), "layout C", err))) {
        p->used = 1;
        plan_destroy(p);
        return st;
    }
    p->used = 1;
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    size_t ws = c->lt_ws_bytes;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    cublasLtMatmulHeuristicResult_t res[LT_ALGOS];
    int found = 0;
    cublasStatus_t s =
        cublasLtMatmulAlgoGetHeuristic(c->lt, p->desc, p->la, p->lb, p->lc, p->lc, pref, LT_ALGOS, res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (s != CUBLAS_STATUS_SUCCESS || found < 1) {
        plan_destroy(p);
        return vsr_err_set(err, VSR_E_DEVICE, "cuda:%d: cuBLASLt has no algorithm for %s [%lld x %lld] . [%lld x %lld]^T "
                           "(status %d)", c->device, ty == CUDA_R_16BF ? "bf16" : "f32", (long long)M, (long long)K,
                           (long long)N, (long long)K, (int)s);
    }
    p->n_algos = 0;
    for (int i = 0; i < found; i++)
        if (res[i].state == CUBLAS_STATUS_SUCCESS) p->algos[p->n_algos++] = res[i].algo;
    if (!p->n_algos) p->algos[p->n_algos++] = res[0].algo;
    p->chosen = -1;
    *out = p;
    return VSR_OK;
}

typedef struct lt_tune {
    lt_plan *p;
    const void *A, *W;
    const cublasLtMatmulAlgo_t *algos; /* the candidates autotune_choose indexes */
} lt_tune;

/* autotune launch of candidate `cand` into out; one cuBLASLt refuses is skipped (very slow) */
static int lt_launch(cuda_ctx *c, int cand, void *arg, void *out, vsr_err *err) {
    (void)err;
    lt_tune *t = (lt_tune *)arg;
    lt_plan *p = t->p;
    float alpha = 1.0f, beta = 0.0f;
    if (cublasLtMatmul(c->lt, p->desc, &alpha, t->W, p->la, t->A, p->lb, &beta, out, p->lc, out, p->lc,
                       &t->algos[cand], c->lt_ws, c->lt_ws_bytes, c->stream) == CUBLAS_STATUS_SUCCESS)
        return 0;
    (void)cudaGetLastError();
    return TUNE_SKIP;
}

/* ---- widened cuBLASLt search (BF16 operands, with --autotune-cache) ----
 * The heuristic's top 16 are what cuBLASLt predicts; at M = 384 (3 x 128 tokens) its tiles leave
 * the last wave mostly empty (128x256 on N = 34816: 3 x 136 = 408 tiles on 132 SMs). The search
 * enumerates every algorithm id (cublasLtMatmulAlgoGetIds) with the tiles, stages, split-K and
 * reduction schemes, CTA swizzle and cluster shapes its capabilities allow, keeps what
 * cublasLtMatmulAlgoCheck accepts, times the most promising structures briefly (stage 1), expands
 * the best few over stages and swizzle (stage 2) and lets autotune_choose time those with the
 * heuristic's own 16 and record the winner. A configuration is recorded by name
 * ("id<algo>-t<tile>-s<stages>-sk<splits>-r<reduction>-w<swizzle>-o<custom>-i<inner>-c<cluster>",
 * the cuBLASLt enum values) and later processes rebuild exactly that algorithm from the name
 * (cublasLtMatmulAlgoInit + the nine config attributes) and check it, so split-K's summation order
 * is reproduced bit for bit; a name the device rejects is refused with the file's name.
 * Off by default: VSR_CUDA_LT_SEARCH=1 turns it on (first H200 run, 2026-11-29: no reliable gain over
 * the heuristic's 16 once a later process loads the winner; bench/NOTES.md "Widened cuBLASLt search").
 * Otherwise the previous behaviour (the heuristic's 16, recorded by index under "lt_gemm"). */

/* tile id -> rows x columns of D's tile, index = cublasLtMatmulTile_t (CUDA 13 header, ids 0-634) */
static const uint16_t LT_TILE_MN[][2] = {
    {0, 0}, {8, 8}, {8, 16}, {16, 8}, {8, 32}, {16, 16}, {32, 8}, {8, 64}, {16, 32}, {32, 16}, {64, 8}, {32, 32},
    {32, 64}, {64, 32}, {32, 128}, {64, 64}, {128, 32}, {64, 128}, {128, 64}, {64, 256}, {128, 128}, {256, 64},
    {64, 512}, {128, 256}, {256, 128}, {512, 64}, {64, 96}, {96, 64}, {96, 128}, {128, 160}, {160, 128}, {192, 128},
    {128, 192}, {128, 96}, {32, 256}, {256, 32}, {8, 128}, {8, 192}, {8, 256}, {8, 320}, {8, 384}, {8, 448},
    {8, 512}, {8, 576}, {8, 640}, {8, 704}, {8, 768}, {16, 64}, {16, 128}, {16, 192}, {16, 256}, {16, 320},
    {16, 384}, {16, 448}, {16, 512}, {16, 576}, {16, 640}, {16, 704}, {16, 768}, {24, 64}, {24, 128}, {24, 192},
    {24, 256}, {24, 320}, {24, 384}, {24, 448}, {24, 512}, {24, 576}, {24, 640}, {24, 704}, {24, 768}, {32, 192},
    {32, 320}, {32, 384}, {32, 448}, {32, 512}, {32, 576}, {32, 640}, {32, 704}, {32, 768}, {40, 64}, {40, 128},
    {40, 192}, {40, 256}, {40, 320}, {40, 384}, {40, 448}, {40, 512}, {40, 576}, {40, 640}, {40, 704}, {40, 768},
    {48, 64}, {48, 128}, {48, 192}, {48, 256}, {48, 320}, {48, 384}, {48, 448}, {48, 512}, {48, 576}, {48, 640},
    {48, 704}, {48, 768}, {56, 64}, {56, 128}, {56, 192}, {56, 256}, {56, 320}, {56, 384}, {56, 448}, {56, 512},
    {56, 576}, {56, 640}, {56, 704}, {56, 768}, {64, 192}, {64, 320}, {64, 384}, {64, 448}, {64, 576}, {64, 640},
    {64, 704}, {64, 768}, {72, 64}, {72, 128}, {72, 192}, {72, 256}, {72, 320}, {72, 384}, {72, 448}, {72, 512},
    {72, 576}, {72, 640}, {80, 64}, {80, 128}, {80, 192}, {80, 256}, {80, 320}, {80, 384}, {80, 448}, {80, 512},
    {80, 576}, {88, 64}, {88, 128}, {88, 192}, {88, 256}, {88, 320}, {88, 384}, {88, 448}, {88, 512}, {96, 192},
    {96, 256}, {96, 320}, {96, 384}, {96, 448}, {96, 512}, {104, 64}, {104, 128}, {104, 192}, {104, 256},
    {104, 320}, {104, 384}, {104, 448}, {112, 64}, {112, 128}, {112, 192}, {112, 256}, {112, 320}, {112, 384},
    {120, 64}, {120, 128}, {120, 192}, {120, 256}, {120, 320}, {120, 384}, {128, 320}, {128, 384}, {136, 64},
    {136, 128}, {136, 192}, {136, 256}, {136, 320}, {144, 64}, {144, 128}, {144, 192}, {144, 256}, {144, 320},
    {152, 64}, {152, 128}, {152, 192}, {152, 256}, {152, 320}, {160, 64}, {160, 192}, {160, 256}, {168, 64},
    {168, 128}, {168, 192}, {168, 256}, {176, 64}, {176, 128}, {176, 192}, {176, 256}, {184, 64}, {184, 128},
    {184, 192}, {184, 256}, {192, 64}, {192, 192}, {192, 256}, {200, 64}, {200, 128}, {200, 192}, {208, 64},
    {208, 128}, {208, 192}, {216, 64}, {216, 128}, {216, 192}, {224, 64}, {224, 128}, {224, 192}, {232, 64},
    {232, 128}, {232, 192}, {240, 64}, {240, 128}, {240, 192}, {248, 64}, {248, 128}, {248, 192}, {256, 192},
    {264, 64}, {264, 128}, {272, 64}, {272, 128}, {280, 64}, {280, 128}, {288, 64}, {288, 128}, {296, 64},
    {296, 128}, {304, 64}, {304, 128}, {312, 64}, {312, 128}, {320, 64}, {320, 128}, {328, 64}, {328, 128},
    {336, 64}, {336, 128}, {344, 64}, {344, 128}, {352, 64}, {352, 128}, {360, 64}, {360, 128}, {368, 64},
    {368, 128}, {376, 64}, {376, 128}, {384, 64}, {384, 128}, {392, 64}, {400, 64}, {408, 64}, {416, 64}, {424, 64},
    {432, 64}, {440, 64}, {448, 64}, {456, 64}, {464, 64}, {472, 64}, {480, 64}, {488, 64}, {496, 64}, {504, 64},
    {520, 64}, {528, 64}, {536, 64}, {544, 64}, {552, 64}, {560, 64}, {568, 64}, {576, 64}, {584, 64}, {592, 64},
    {600, 64}, {608, 64}, {616, 64}, {624, 64}, {632, 64}, {640, 64}, {648, 64}, {656, 64}, {664, 64}, {672, 64},
    {680, 64}, {688, 64}, {696, 64}, {704, 64}, {712, 64}, {720, 64}, {728, 64}, {736, 64}, {744, 64}, {752, 64},
    {760, 64}, {768, 64}, {64, 16}, {64, 24}, {64, 40}, {64, 48}, {64, 56}, {64, 72}, {64, 80}, {64, 88}, {64, 104},
    {64, 112}, {64, 120}, {64, 136}, {64, 144}, {64, 152}, {64, 160}, {64, 168}, {64, 176}, {64, 184}, {64, 200},
    {64, 208}, {64, 216}, {64, 224}, {64, 232}, {64, 240}, {64, 248}, {64, 264}, {64, 272}, {64, 280}, {64, 288},
    {64, 296}, {64, 304}, {64, 312}, {64, 328}, {64, 336}, {64, 344}, {64, 352}, {64, 360}, {64, 368}, {64, 376},
    {64, 392}, {64, 400}, {64, 408}, {64, 416}, {64, 424}, {64, 432}, {64, 440}, {64, 456}, {64, 464}, {64, 472},
    {64, 480}, {64, 488}, {64, 496}, {64, 504}, {64, 520}, {64, 528}, {64, 536}, {64, 544}, {64, 552}, {64, 560},
    {64, 568}, {64, 584}, {64, 592}, {64, 600}, {64, 608}, {64, 616}, {64, 624}, {64, 632}, {64, 648}, {64, 656},
    {64, 664}, {64, 672}, {64, 680}, {64, 688}, {64, 696}, {64, 712}, {64, 720}, {64, 728}, {64, 736}, {64, 744},
    {64, 752}, {64, 760}, {128, 8}, {128, 16}, {128, 24}, {128, 40}, {128, 48}, {128, 56}, {128, 72}, {128, 80},
    {128, 88}, {128, 104}, {128, 112}, {128, 120}, {128, 136}, {128, 144}, {128, 152}, {128, 168}, {128, 176},
    {128, 184}, {128, 200}, {128, 208}, {128, 216}, {128, 224}, {128, 232}, {128, 240}, {128, 248}, {128, 264},
    {128, 272}, {128, 280}, {128, 288}, {128, 296}, {128, 304}, {128, 312}, {128, 328}, {128, 336}, {128, 344},
    {128, 352}, {128, 360}, {128, 368}, {128, 376}, {128, 392}, {128, 400}, {128, 408}, {128, 416}, {128, 424},
    {128, 432}, {128, 440}, {128, 448}, {128, 456}, {128, 464}, {128, 472}, {128, 480}, {128, 488}, {128, 496},
    {128, 504}, {128, 512}, {192, 8}, {192, 16}, {192, 24}, {192, 32}, {192, 40}, {192, 48}, {192, 56}, {192, 72},
    {192, 80}, {192, 88}, {192, 96}, {192, 104}, {192, 112}, {192, 120}, {192, 136}, {192, 144}, {192, 152},
    {192, 160}, {192, 168}, {192, 176}, {192, 184}, {192, 200}, {192, 208}, {192, 216}, {192, 224}, {192, 232},
    {192, 240}, {192, 248}, {192, 264}, {192, 272}, {192, 280}, {192, 288}, {192, 296}, {192, 304}, {192, 312},
    {192, 320}, {192, 328}, {192, 336}, {256, 8}, {256, 16}, {256, 24}, {256, 40}, {256, 48}, {256, 56}, {256, 72},
    {256, 80}, {256, 88}, {256, 96}, {256, 104}, {256, 112}, {256, 120}, {256, 136}, {256, 144}, {256, 152},
    {256, 160}, {256, 168}, {256, 176}, {256, 184}, {256, 200}, {256, 208}, {256, 216}, {256, 224}, {256, 232},
    {256, 240}, {256, 248}, {256, 256}, {320, 8}, {320, 16}, {320, 24}, {320, 32}, {320, 40}, {320, 48}, {320, 56},
    {320, 72}, {320, 80}, {320, 88}, {320, 96}, {320, 104}, {320, 112}, {320, 120}, {320, 136}, {320, 144},
    {320, 152}, {320, 160}, {320, 168}, {320, 176}, {320, 184}, {320, 192}, {320, 200}, {384, 8}, {384, 16},
    {384, 24}, {384, 32}, {384, 40}, {384, 48}, {384, 56}, {384, 72}, {384, 80}, {384, 88}, {384, 96}, {384, 104},
    {384, 112}, {384, 120}, {384, 136}, {384, 144}, {384, 152}, {384, 160}, {384, 168}, {448, 8}, {448, 16},
    {448, 24}, {448, 32}, {448, 40}, {448, 48}, {448, 56}, {448, 72}, {448, 80}, {448, 88}, {448, 96}, {448, 104},
    {448, 112}, {448, 120}, {448, 128}, {448, 136}, {448, 144}, {512, 8}, {512, 16}, {512, 24}, {512, 32},
    {512, 40}, {512, 48}, {512, 56}, {512, 72}, {512, 80}, {512, 88}, {512, 96}, {512, 104}, {512, 112}, {512, 120},
    {512, 128}, {576, 8}, {576, 16}, {576, 24}, {576, 32}, {576, 40}, {576, 48}, {576, 56}, {576, 72}, {576, 80},
    {576, 88}, {576, 96}, {576, 104}, {576, 112}, {640, 8}, {640, 16}, {640, 24}, {640, 32}, {640, 40}, {640, 48},
    {640, 56}, {640, 72}, {640, 80}, {640, 88}, {640, 96}, {704, 8}, {704, 16}, {704, 24}, {704, 32}, {704, 40},
    {704, 48}, {704, 56}, {704, 72}, {704, 80}, {704, 88}, {768, 8}, {768, 16}, {768, 24}, {768, 32}, {768, 40},
    {768, 48}, {768, 56}, {768, 72}, {768, 80}, {256, 512}, {256, 1024}, {512, 512}, {512, 1024},
};
#define LT_N_TILES ((unsigned)(sizeof LT_TILE_MN / sizeof LT_TILE_MN[0]))

typedef struct lt_cfg {
    int32_t id, sk;
    uint32_t tile, stages, red, swz, custom;
    uint16_t inner, cluster;
} lt_cfg;

static void lt_cfg_name(const lt_cfg *g, char *s, size_t n) {
    snprintf(s, n, "id%d-t%u-s%u-sk%d-r%u-w%u-o%u-i%u-c%u", g->id, g->tile, g->stages, g->sk, g->red, g->swz,
             g->custom, (unsigned)g->inner, (unsigned)g->cluster);
}

/* 0, or -1 when s is not exactly a name lt_cfg_name writes */
static int lt_cfg_parse(const char *s, lt_cfg *g) {
    unsigned inner = 0, cluster = 0;
    int used = -1;
    memset(g, 0, sizeof *g);
    if (sscanf(s, "id%d-t%u-s%u-sk%d-r%u-w%u-o%u-i%u-c%u%n", &g->id, &g->tile, &g->stages, &g->sk, &g->red, &g->swz,
               &g->custom, &inner, &cluster, &used) != 9 ||
        used < 0 || s[used] || inner > 0xffff || cluster > 0xffff)
        return -1;
    g->inner = (uint16_t)inner, g->cluster = (uint16_t)cluster;
    char back[64];
    lt_cfg_name(g, back, sizeof back);
    return strcmp(back, s) == 0 ? 0 : -1; /* no leading zeros, signs or spaces: one spelling per config */
}

static void lt_cfg_of(const cublasLtMatmulAlgo_t *a, lt_cfg *g) {
    size_t w;
    memset(g, 0, sizeof *g);
    g->sk = 1;
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_ID, &g->id, sizeof g->id, &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_TILE_ID, &g->tile, sizeof g->tile, &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_STAGES_ID, &g->stages, sizeof g->stages, &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &g->sk, sizeof g->sk, &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &g->red, sizeof g->red, &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &g->swz, sizeof g->swz, &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &g->custom, sizeof g->custom, &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, &g->inner, sizeof g->inner, &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &g->cluster, sizeof g->cluster, &w);
}

/* The algorithm named by g for plan p, checked (cublasLtMatmulAlgoCheck) and within the workspace.
 * 0, or a reason in why (for the refusal of a recorded name). */
static int lt_cfg_build(cuda_ctx *c, const lt_plan *p, const lt_cfg *g, cublasLtMatmulAlgo_t *a, double *waves,
                        char *why, size_t why_n) {
    cublasStatus_t s = cublasLtMatmulAlgoInit(c->lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, p->ty, p->ty, p->dty, p->dty,
                                              g->id, a);
    if (s != CUBLAS_STATUS_SUCCESS) {
        if (why) snprintf(why, why_n, "cublasLtMatmulAlgoInit(algorithm %d) returned status %d", g->id, (int)s);
        return -1;
    }
    struct {
        cublasLtMatmulAlgoConfigAttributes_t at;
        const void *v;
        size_t n;
    } set[] = {
        {CUBLASLT_ALGO_CONFIG_TILE_ID, &g->tile, sizeof g->tile},
        {CUBLASLT_ALGO_CONFIG_STAGES_ID, &g->stages, sizeof g->stages},
        {CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &g->sk, sizeof g->sk},
        {CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &g->red, sizeof g->red},
        {CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &g->swz, sizeof g->swz},
        {CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &g->custom, sizeof g->custom},
        {CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, &g->inner, sizeof g->inner},
        {CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &g->cluster, sizeof g->cluster},
    };
    for (size_t i = 0; i < sizeof set / sizeof set[0]; i++)
        if ((s = cublasLtMatmulAlgoConfigSetAttribute(a, set[i].at, set[i].v, set[i].n)) != CUBLAS_STATUS_SUCCESS) {
            if (why) snprintf(why, why_n, "config attribute %d refused (status %d)", (int)set[i].at, (int)s);
            return -1;
        }
    cublasLtMatmulHeuristicResult_t r;
    memset(&r, 0, sizeof r);
    if ((s = cublasLtMatmulAlgoCheck(c->lt, p->desc, p->la, p->lb, p->lc, p->lc, a, &r)) != CUBLAS_STATUS_SUCCESS) {
        if (why) snprintf(why, why_n, "cublasLtMatmulAlgoCheck returned status %d", (int)s);
        return -1;
    }
    if (r.workspaceSize > c->lt_ws_bytes) {
        if (why) snprintf(why, why_n, "needs %zu bytes of workspace (%zu held)", r.workspaceSize, c->lt_ws_bytes);
        return -1;
    }
    if (waves) *waves = r.wavesCount;
    return 0;
}

typedef struct lt_cand {
    lt_cfg g;
    cublasLtMatmulAlgo_t a;
    char name[64];
    double cost; /* stage 1 order: padded work x last-wave loss / tile efficiency (lower first) */
    float us;    /* stage 1 time, 1e30 = not timed */
    int id_slot; /* index into the per-id capabilities */
} lt_cand;

typedef struct lt_caps {
    int id;
    uint32_t stages[64];
    int n_stages;
    uint32_t swz, red; /* CTA swizzle supported; the split-K reduction scheme used (0: no split-K) */
    int n_sk;
} lt_caps;

typedef struct lt_list {
    lt_cand *v;
    int n, cap;
} lt_list;

static int lt_list_has(const lt_list *l, const char *name) {
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->v[i].name, name) == 0) return 1;
    return 0;
}

/* appends g (named, built, checked) unless present or refused; 0 = appended */
static int lt_list_add(cuda_ctx *c, const lt_plan *p, lt_list *l, const lt_cfg *g, int slot, int *checks) {
    lt_cand k;
    memset(&k, 0, sizeof k);
    k.g = *g, k.id_slot = slot, k.us = 1e30f;
    lt_cfg_name(g, k.name, sizeof k.name);
    if (lt_list_has(l, k.name)) return 1;
    double waves = 0;
    (*checks)++;
    if (lt_cfg_build(c, p, g, &k.a, &waves, NULL, 0)) return -1;
    if (g->tile && g->tile < LT_N_TILES && LT_TILE_MN[g->tile][0]) {
        /* which tile side runs along N is not documented: the orientation that pads less */
        double tm = LT_TILE_MN[g->tile][0], tn = LT_TILE_MN[g->tile][1];
        double pa = ceil((double)p->N / tm) * tm * ceil((double)p->M / tn) * tn,
               pb = ceil((double)p->N / tn) * tn * ceil((double)p->M / tm) * tm;
        double pad = (pa < pb ? pa : pb) / ((double)p->N * (double)p->M);
        double eff = tm * tn >= 128 * 128 ? 1.0 : tm * tn >= 128 * 64 ? 0.85 : 0.6;
        double wq = waves > 0 ? ceil(waves - 1e-6) / waves : 1.0;
        k.cost = pad * wq / eff * (g->sk > 1 ? 1.05 : 1.0);
    } else
        k.cost = 10; /* unknown tile: last */
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 256;
        lt_cand *v = (lt_cand *)realloc(l->v, sizeof *v * (size_t)cap);
        if (!v) return -1;
        l->v = v, l->cap = cap;
    }
    l->v[l->n++] = k;
    return 0;
}

static int lt_cmp_cost(const void *a, const void *b) {
    const lt_cand *x = (const lt_cand *)a, *y = (const lt_cand *)b;
    if (x->cost != y->cost) return x->cost < y->cost ? -1 : 1;
    return strcmp(x->name, y->name);
}
static int lt_cmp_us(const void *a, const void *b) {
    const lt_cand *x = (const lt_cand *)a, *y = (const lt_cand *)b;
    if (x->us != y->us) return x->us < y->us ? -1 : 1;
    return strcmp(x->name, y->name);
}

#define LT_WIDE_MIN_M 128     /* below: weight streaming, the heuristic's 16 only */
#define LT_CHECKS 6000        /* AlgoCheck calls per shape in the enumeration */
#define LT_ENUM_S 0.4         /* and seconds */
#define LT_STAGE1_S 0.6       /* seconds of stage-1 timing per shape (at least LT_STAGE1_MIN structures) */
#define LT_STAGE1_MIN 24
#define LT_STAGE1_MAX 160
#define LT_STAGE2_TOP 6       /* structures expanded over stages and swizzle */
#define LT_STAGE2_EACH 8      /* variants each */

/* The last decision of lt_choose_wide ("lt:<config>,<timed|cache>" or "lt:heuristic(...)"), for tests
 * and benchmarks; kept apart from the quant paths' cuda_quant_last_path, which an int4 linear sets
 * before its BF16 GEMM. Not synchronised: one thread decides at a time per process in tests. */
static char lt_last[96];
extern "C" const char *cuda_lt_last_choice(void) { return lt_last; }
static void lt_set_last(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(lt_last, sizeof lt_last, fmt, ap);
    va_end(ap);
}

static double lt_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Candidates of the widened search for plan p, heuristic's first: out (caller frees out->v).
 * Times on the live inputs into the autotune output buffer. */
static vsr_status lt_widen(cuda_ctx *c, lt_plan *p, const void *A, const void *W, void *tout, lt_list *out,
                           vsr_err *err) {
    static const uint16_t clusters[] = {CUBLASLT_CLUSTER_SHAPE_AUTO, CUBLASLT_CLUSTER_SHAPE_1x1x1,
                                        CUBLASLT_CLUSTER_SHAPE_2x1x1, CUBLASLT_CLUSTER_SHAPE_1x2x1,
                                        CUBLASLT_CLUSTER_SHAPE_2x2x1, CUBLASLT_CLUSTER_SHAPE_4x1x1,
                                        CUBLASLT_CLUSTER_SHAPE_1x4x1};
    double t0 = lt_now();
    int checks = 0;
    lt_list s1 = {NULL, 0, 0};
    lt_caps *caps = NULL;
    int n_caps = 0;
    memset(out, 0, sizeof *out);
    for (int i = 0; i < p->n_algos; i++) { /* the heuristic's own, rebuilt from their configuration */
        lt_cfg g;
        lt_cfg_of(&p->algos[i], &g);
        lt_list_add(c, p, out, &g, -1, &checks);
    }
    int n_heur = out->n;
    if (p->M >= LT_WIDE_MIN_M) {
        int ids[256], nid = 0;
        if (cublasLtMatmulAlgoGetIds(c->lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, p->ty, p->ty, p->dty, p->dty, 256, ids,
                                     &nid) != CUBLAS_STATUS_SUCCESS)
            nid = 0;
        caps = (lt_caps *)calloc((size_t)(nid ? nid : 1), sizeof *caps);
        if (!caps) return vsr_err_set(err, VSR_E_NOMEM, "cuda:%d: out of memory (cuBLASLt search)", c->device);
        for (int j = 0; j < nid; j++) {
            cublasLtMatmulAlgo_t a;
            if (cublasLtMatmulAlgoInit(c->lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, p->ty, p->ty, p->dty, p->dty, ids[j],
                                       &a) != CUBLAS_STATUS_SUCCESS)
                continue;
            lt_caps *cp = &caps[n_caps];
            cp->id = ids[j];
            size_t w = 0;
            uint32_t tiles[1024];
            int n_tiles = 0;
            if (cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_TILE_IDS, NULL, 0, &w) ==
                    CUBLAS_STATUS_SUCCESS && w && w <= sizeof tiles &&
                cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_TILE_IDS, tiles, w, &w) ==
                    CUBLAS_STATUS_SUCCESS)
                n_tiles = (int)(w / sizeof tiles[0]);
            if (!n_tiles) tiles[n_tiles++] = CUBLASLT_MATMUL_TILE_UNDEFINED;
            w = 0;
            uint32_t st_all[256];
            if (cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_STAGES_IDS, NULL, 0, &w) ==
                    CUBLAS_STATUS_SUCCESS && w && w <= sizeof st_all &&
                cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_STAGES_IDS, st_all, w, &w) ==
                    CUBLAS_STATUS_SUCCESS)
                for (int k = 0; k < (int)(w / sizeof st_all[0]) && cp->n_stages < 64; k++)
                    cp->stages[cp->n_stages++] = st_all[k];
            if (!cp->n_stages) cp->stages[cp->n_stages++] = CUBLASLT_MATMUL_STAGES_UNDEFINED;
            int32_t sk_ok = 0;
            uint32_t red_mask = 0;
            cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &sk_ok, sizeof sk_ok, &w);
            cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK, &red_mask, sizeof red_mask,
                                              &w);
            cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT, &cp->swz, sizeof cp->swz,
                                              &w);
            /* split-K reduced in FP32 (workspace), or in place when the output is FP32 itself; never in BF16 */
            uint32_t red = (red_mask & CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE) ? CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE
                           : (p->dty == CUDA_R_32F && (red_mask & CUBLASLT_REDUCTION_SCHEME_INPLACE))
                               ? CUBLASLT_REDUCTION_SCHEME_INPLACE
                               : 0;
            int slot = n_caps++;
            cp->red = red, cp->n_sk = sk_ok && red ? 4 : 1;
            /* stages tried for a structure: the heuristic's for this algorithm, automatic, the first listed */
            uint32_t try_st[6];
            int n_try = 0;
            for (int i = 0; i < n_heur && n_try < 2; i++)
                if (out->v[i].g.id == ids[j] && (n_try == 0 || try_st[0] != out->v[i].g.stages))
                    try_st[n_try++] = out->v[i].g.stages;
            try_st[n_try++] = CUBLASLT_MATMUL_STAGES_UNDEFINED;
            for (int k = 0; k < cp->n_stages && k < 2; k++) try_st[n_try++] = cp->stages[k];
            /* pass 1: each tile with the automatic cluster (else 1x1x1), no split, its first stages accepted */
            for (int ti = 0; ti < n_tiles && checks < LT_CHECKS; ti++) {
                uint32_t tile = tiles[ti];
                if (tile && tile < LT_N_TILES) {
                    double tm = LT_TILE_MN[tile][0], tn = LT_TILE_MN[tile][1];
                    if (tm * tn < 64 * 64) continue; /* small tiles: for few rows, not here */
                    /* padding waste over 25 % in both orientations: not a candidate */
                    double pa = ceil((double)p->N / tm) * tm * ceil((double)p->M / tn) * tn,
                           pb = ceil((double)p->N / tn) * tn * ceil((double)p->M / tm) * tm;
                    if ((pa < pb ? pa : pb) > 1.25 * (double)p->N * (double)p->M) continue;
                }
                lt_cfg g;
                memset(&g, 0, sizeof g);
                g.id = ids[j], g.tile = tile, g.sk = 1;
                int ok = 0;
                for (int cl = 0; cl < 2 && !ok; cl++)
                    for (int k = 0; k < n_try && !ok; k++) {
                        g.cluster = clusters[cl], g.stages = try_st[k];
                        ok = lt_list_add(c, p, &s1, &g, slot, &checks) >= 0;
                    }
            }
        }
        /* pass 2: the accepted structures with the other cluster shapes and with split-K */
        int n_base = s1.n;
        for (int b = 0; b < n_base && checks < LT_CHECKS && lt_now() - t0 < LT_ENUM_S; b++) {
            lt_cfg g = s1.v[b].g;
            int slot = s1.v[b].id_slot;
            const lt_caps *cp = &caps[slot];
            for (size_t ci = 0; ci < sizeof clusters / sizeof clusters[0]; ci++) {
                if (clusters[ci] == g.cluster) continue;
                lt_cfg h = g;
                h.cluster = clusters[ci];
                lt_list_add(c, p, &s1, &h, slot, &checks);
            }
            for (int sk = 2; sk <= 4 && sk <= (cp->n_sk > 1 ? 4 : 1); sk++) {
                if (p->K / sk < 1024) continue;
                lt_cfg h = g;
                h.sk = sk, h.red = cp->red;
                lt_list_add(c, p, &s1, &h, slot, &checks);
            }
        }
    }
    double t_enum = lt_now() - t0;
    /* stage 1: one warm-up and two timed launches per structure, most promising first */
    int timed = 0;
    if (s1.n) {
        qsort(s1.v, (size_t)s1.n, sizeof *s1.v, lt_cmp_cost);
        lt_tune t = {p, A, W, NULL};
        cudaEvent_t e0, e1;
        cudaEventCreate(&e0), cudaEventCreate(&e1);
        double t1 = lt_now();
        for (int i = 0; i < s1.n && i < LT_STAGE1_MAX; i++) {
            if (i >= LT_STAGE1_MIN && lt_now() - t1 > LT_STAGE1_S) break;
            t.algos = &s1.v[i].a;
            if (lt_launch(c, 0, &t, tout, err)) continue;
            cudaEventRecord(e0, c->stream);
            int bad = lt_launch(c, 0, &t, tout, err) || lt_launch(c, 0, &t, tout, err);
            cudaEventRecord(e1, c->stream);
            float ms = 0;
            if (cudaEventSynchronize(e1) != cudaSuccess || cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess) {
                cudaEventDestroy(e0), cudaEventDestroy(e1);
                free(s1.v), free(caps), free(out->v);
                out->v = NULL, out->n = 0;
                return cuda_check(c, cudaGetLastError(), "cuBLASLt search: timing", err);
            }
            if (!bad) s1.v[i].us = ms * 500.0f;
            timed++;
        }
        cudaEventDestroy(e0), cudaEventDestroy(e1);
        qsort(s1.v, (size_t)s1.n, sizeof *s1.v, lt_cmp_us);
    }
    /* stage 2: the best structures over their stages and swizzle */
    for (int i = 0; i < s1.n && i < LT_STAGE2_TOP && s1.v[i].us < 1e29f; i++) {
        const lt_caps *cp = &caps[s1.v[i].id_slot];
        lt_cfg g = s1.v[i].g;
        int added = lt_list_add(c, p, out, &g, -1, &checks) == 0;
        for (uint32_t swz = 0; swz <= (cp->swz ? 1u : 0u); swz++)
            for (int k = 0; k < cp->n_stages && added < LT_STAGE2_EACH; k++) {
                g.stages = cp->stages[k], g.swz = swz;
                if (lt_list_add(c, p, out, &g, -1, &checks) == 0) added++;
            }
    }
    fprintf(stderr, "cuda:%d: cuBLASLt search %s m%lld n%lld k%lld: %d heuristic, %d structures (%d checks, %.0f ms), "
            "%d timed (%.0f ms), %d to time%s%s\n", c->device, p->dty == CUDA_R_16BF ? "bf16o" : "bf16",
            (long long)p->M, (long long)p->N, (long long)p->K, n_heur, s1.n, checks, t_enum * 1e3, timed,
            (lt_now() - t0 - t_enum) * 1e3, out->n, s1.n ? "; stage-1 best " : "", s1.n ? s1.v[0].name : "");
    free(s1.v), free(caps);
    return VSR_OK;
}

/* The widened search's choice for plan p (with --autotune-cache): the recorded name rebuilt and
 * checked, or the search timed and its winner recorded. Sets p->run and p->cfg. */
static vsr_status lt_choose_wide(cuda_ctx *c, lt_plan *p, const void *A, const void *W, vsr_err *err) {
    char key[96], rec[64], path[1200];
    snprintf(key, sizeof key, "bf16%s-m%lld-n%lld-k%lld", p->dty == CUDA_R_16BF ? "o" : "", (long long)p->M,
             (long long)p->N, (long long)p->K);
    const char *src = "cache";
    vsr_status st = autotune_recorded(c, "ltcfg", key, rec, sizeof rec, path, sizeof path, err);
    if (st == VSR_E_NOT_FOUND) {
        cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
        cudaStreamIsCapturing(c->stream, &cap);
        if (cap != cudaStreamCaptureStatusNone) { /* no timing inside a graph capture: the heuristic's first */
            p->run = p->algos[0], p->cfg[0] = 0;
            lt_set_last("lt:heuristic(a0,default(capturing))");
            return VSR_OK;
        }
        quant_state *q;
        size_t ob = (p->dty == CUDA_R_16BF ? 2 : 4) * (size_t)(p->M * p->N);
        if ((st = quant_state_get(c, &q, err)) ||
            (st = quant_grow(c, &q->tune_out, &q->tune_out_bytes, ob, "autotune output", err)))
            return st;
        lt_list l;
        if ((st = lt_widen(c, p, A, W, q->tune_out, &l, err))) return st;
        if (!l.n) { /* nothing rebuilt: the heuristic's first, not recorded */
            free(l.v);
            p->run = p->algos[0], p->cfg[0] = 0;
            lt_set_last("lt:heuristic(a0,default(no rebuilt candidate))");
            return VSR_OK;
        }
        const char **np = (const char **)malloc(sizeof *np * (size_t)l.n);
        cublasLtMatmulAlgo_t *al = (cublasLtMatmulAlgo_t *)malloc(sizeof *al * (size_t)l.n);
        if (!np || !al) {
            free(np), free(al), free(l.v);
            return vsr_err_set(err, VSR_E_NOMEM, "cuda:%d: out of memory (cuBLASLt search)", c->device);
        }
        for (int i = 0; i < l.n; i++) np[i] = l.v[i].name, al[i] = l.v[i].a;
        lt_tune t = {p, A, W, al};
        int choice = 0;
        st = autotune_choose(c, "ltcfg", key, l.n, np, 0, lt_launch, &t, ob, &choice, &src, err);
        if (st == VSR_OK && (choice < 0 || choice >= l.n)) /* remembered from a file deleted since: the first */
            choice = 0;
        if (st == VSR_OK) {
            p->run = al[choice];
            snprintf(p->cfg, sizeof p->cfg, "%s", np[choice]);
        }
        free(np), free(al), free(l.v);
        if (st == VSR_OK) {
            lt_set_last("lt:%s,%s", p->cfg, src);
            return VSR_OK;
        }
        if (st != VSR_E_FORMAT) return st;
        /* another process recorded a configuration outside this one's list first: take it from its file */
        src = "cache";
        if ((st = autotune_recorded(c, "ltcfg", key, rec, sizeof rec, path, sizeof path, err))) return st;
    } else if (st)
        return st;
    lt_cfg g;
    char why[160];
    if (lt_cfg_parse(rec, &g))
        return vsr_err_set(err, VSR_E_FORMAT, "autotune cache file %s: choice \"%s\" is not a cuBLASLt configuration "
                           "name (id<algo>-t<tile>-s<stages>-sk<splits>-r<reduction>-w<swizzle>-o<custom>-i<inner>-"
                           "c<cluster>); delete the file to time again", path, rec);
    if (lt_cfg_build(c, p, &g, &p->run, NULL, why, sizeof why))
        return vsr_err_set(err, VSR_E_FORMAT, "autotune cache file %s: cuBLASLt configuration \"%s\" is rejected on "
                           "cuda:%d (%s) for this shape: %s; delete the file to time again", path, rec, c->device,
                           c->dev_name, why);
    snprintf(p->cfg, sizeof p->cfg, "%s", rec);
    lt_set_last("lt:%s,%s", p->cfg, src);
    return VSR_OK;
}

static vsr_status lt_gemm(cuda_ctx *c, cudaDataType_t ty, const void *A, int64_t M, const void *W, int64_t N,
                          int64_t K, cudaDataType_t dty, void *y, int accumulate, vsr_err *err) {
    if (M <= 0) return VSR_OK;
    lt_plan *p = NULL;
    vsr_status st = lt_plan_get(c, ty, dty, M, N, K, &p, err);
    if (st) return st;
    if (p->chosen < 0) {
        /* with --autotune-cache: the heuristic's candidates timed once per shape and device, the
         * winner recorded (autotune.cu), or with VSR_CUDA_LT_SEARCH=1 (BF16) the widened search
         * (lt_choose_wide); without a cache, the heuristic's first, as cuBLASLt suggests */
        const char *ls = getenv("VSR_CUDA_LT_SEARCH");
        if (ty == CUDA_R_16BF && c->autotune_dir[0] && ls && strcmp(ls, "1") == 0) {
            if ((st = lt_choose_wide(c, p, A, W, err))) return st;
            p->chosen = 0;
        } else {
            int choice = 0;
            const char *src = "default";
            if (p->n_algos > 1 && c->autotune_dir[0]) {
                char key[96];
                snprintf(key, sizeof key, "%s%s-m%lld-n%lld-k%lld", ty == CUDA_R_16BF ? "bf16" : "f32",
                         dty == CUDA_R_16BF ? "o" : "", (long long)M, (long long)N, (long long)K);
                lt_tune t = {p, A, W, p->algos};
                if ((st = autotune_choose_indexed(c, "lt_gemm", key, p->n_algos, lt_launch, &t,
                                                  (dty == CUDA_R_16BF ? 2 : 4) * (size_t)(M * N), &choice, &src,
                                                  err)))
                    return st;
            }
            p->chosen = choice;
            p->run = p->algos[choice];
        }
    }
    float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    return lt_err(c, cublasLtMatmul(c->lt, p->desc, &alpha, W, p->la, A, p->lb, &beta, y, p->lc, y, p->lc, &p->run,
                                    c->lt_ws, c->lt_ws_bytes, c->stream),
                  "matmul", err);
}

extern "C" vsr_status cuda_gemm_bf16(cuda_ctx *c, const __nv_bfloat16 *A, int64_t M, const __nv_bfloat16 *W,
                                     int64_t N, int64_t K, float *y, int accumulate, vsr_err *err) {
    return lt_gemm(c, CUDA_R_16BF, A, M, W, N, K, CUDA_R_32F, y, accumulate, err);
}

extern "C" vsr_status cuda_gemm_bf16_out_bf16(cuda_ctx *c, const __nv_bfloat16 *A, int64_t M, const __nv_bfloat16 *W,
                                              int64_t N, int64_t K, __nv_bfloat16 *y, vsr_err *err) {
    return lt_gemm(c, CUDA_R_16BF, A, M, W, N, K, CUDA_R_16BF, y, 0, err);
}

/* ---- elementwise kernels ---- */

__global__ void k_f32_to_bf16(const float *__restrict__ x, int64_t n, __nv_bfloat16 *__restrict__ y) {
    int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (i + 3 < n && ((uintptr_t)(x + i) & 15) == 0) {
        float4 v = *(const float4 *)(x + i);
        __nv_bfloat162 a = __floats2bfloat162_rn(v.x, v.y), b = __floats2bfloat162_rn(v.z, v.w);
        *(__nv_bfloat162 *)(y + i) = a;
        *(__nv_bfloat162 *)(y + i + 2) = b;
    } else {
        for (int64_t j = i; j < i + 4 && j < n; j++) y[j] = __float2bfloat16_rn(x[j]);
    }
}

extern "C" vsr_status cuda_f32_to_bf16(cuda_ctx *c, const float *x, int64_t n, __nv_bfloat16 *y, vsr_err *err) {
    if (n <= 0) return VSR_OK;
    k_f32_to_bf16<<<blocks_for((n + 3) / 4, 256), 256, 0, c->stream>>>(x, n, y);
    return cuda_check_launch(c, "f32_to_bf16", err);
}

/* round to bf16 and back (the bf16 readout's result rounding) */
__global__ void k_round_bf16(float *x, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = __bfloat162float(__float2bfloat16_rn(x[i]));
}

__global__ void k_embed(const __nv_bfloat16 *__restrict__ table, const int32_t *__restrict__ ids, int64_t D,
                        float *__restrict__ y) {
    int64_t t = blockIdx.y;
    const __nv_bfloat16 *row = table + (int64_t)ids[t] * D;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < D; i += (int64_t)gridDim.x * blockDim.x)
        y[t * D + i] = __bfloat162float(row[i]);
}

/* one warp per row */
__global__ void k_rmsnorm(const float *__restrict__ x, int64_t xs, int64_t M, int64_t D, const float *__restrict__ w,
                          float off, float eps, float *y, int64_t ys) {
    int64_t r = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x & 31;
    if (r >= M) return;
    const float *xr = x + r * xs;
    float ss = 0;
    for (int64_t i = lane; i < D; i += 32) ss += xr[i] * xr[i];
    ss = warp_sum(ss);
    float inv = rsqrtf(ss / (float)D + eps);
    float *yr = y + r * ys;
    for (int64_t i = lane; i < D; i += 32) yr[i] = (xr[i] * inv) * (off + w[i]);
}

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

template <typename TZ>
__global__ void k_rmsnorm_gated(const float *__restrict__ x, const TZ *__restrict__ z, int64_t zh, int64_t zs,
                                int64_t M, int64_t D, const float *__restrict__ w, float eps, float *y,
                                __nv_bfloat16 *yb) {
    int64_t r = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x & 31;
    if (r >= M) return;
    const float *xr = x + r * D;
    const TZ *zr = z + (r / zh) * zs + (r % zh) * D;
    float ss = 0;
    for (int64_t i = lane; i < D; i += 32) ss += xr[i] * xr[i];
    ss = warp_sum(ss);
    float inv = rsqrtf(ss / (float)D + eps);
    for (int64_t i = lane; i < D; i += 32) {
        float o = w[i] * (xr[i] * inv) * silu_d(ldf(zr + i));
        if (y) y[r * D + i] = o;
        if (yb) yb[r * D + i] = __float2bfloat16_rn(o);
    }
}

__global__ void k_rope(float *x, int64_t xs, const dsegs s, int H, int64_t hs, int half, const float *__restrict__ cos_t,
                       const float *__restrict__ sin_t) {
    int64_t r = blockIdx.y;
    int sg = seg_of_row_d(s, r);
    int64_t pos = s.pos0[sg] + (r - s.start[sg]);
    for (int u = blockIdx.x * blockDim.x + threadIdx.x; u < H * half; u += gridDim.x * blockDim.x) {
        int h = u / half, i = u % half;
        float *xh = x + r * xs + h * hs;
        float cs = cos_t[pos * half + i], sn = sin_t[pos * half + i];
        float x1 = xh[i], x2 = xh[i + half];
        xh[i] = x1 * cs - x2 * sn;
        xh[i + half] = x2 * cs + x1 * sn;
    }
}

__global__ void k_mul_sigmoid(float *x, int64_t M, int H, int hd, const float *__restrict__ g, int64_t gs, int64_t ghs,
                              __nv_bfloat16 *xb, int write_x) {
    int64_t n = M * H * (int64_t)hd;
    for (int64_t u = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; u < n; u += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = u / ((int64_t)H * hd);
        int rem = (int)(u % ((int64_t)H * hd)), h = rem / hd, i = rem % hd;
        float o = x[u] * sigmoid_d(g[r * gs + h * ghs + i]);
        if (write_x) x[u] = o;
        if (xb) xb[u] = __float2bfloat16_rn(o);
    }
}

/* SwiGLU's inputs with their FP8 scales applied when sc is given (linear_swiglu on an unscaled FP8
 * product: g = t * sx[r] * sg[c], the FP8 epilogue's order), else as they are */
struct sw_scales {
    const float *sx, *sg, *su; /* [M], [N], [N]; sx NULL: none */
};
__device__ __forceinline__ float4 sw_load4(const float *p) { return *(const float4 *)p; }
/* SwiGLU of columns 4i..4i+3 of row r from their loaded inputs a (gate), b (up), scaled first when sc is given
 * (every vectorised SwiGLU kernel: one formula, so their outputs agree bit for bit) */
__device__ __forceinline__ float4 sw_comb4(float4 a, float4 b, int i, int64_t r, const sw_scales &sc) {
    if (sc.sx) {
        const float s = sc.sx[r];
        const float4 wg = sw_load4(sc.sg + 4 * i), wu = sw_load4(sc.su + 4 * i);
        a = make_float4(a.x * s * wg.x, a.y * s * wg.y, a.z * s * wg.z, a.w * s * wg.w);
        b = make_float4(b.x * s * wu.x, b.y * s * wu.y, b.z * s * wu.z, b.w * s * wu.w);
    }
    return make_float4(silu_d(a.x) * b.x, silu_d(a.y) * b.y, silu_d(a.z) * b.z, silu_d(a.w) * b.w);
}

template <typename TI>
__global__ void k_swiglu(const TI *g, const TI *__restrict__ u, int64_t gs, int64_t N, int64_t n, float *y,
                         sw_scales sc) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / N, c = i % N;
        float a = ldf(g + r * gs + c), b = ldf(u + r * gs + c);
        if (sc.sx) a = a * sc.sx[r] * sc.sg[c], b = b * sc.sx[r] * sc.su[c];
        y[i] = silu_d(a) * b;
    }
}

/* y[i] += x[i]: four floats a thread where both are 16-byte aligned and n is a multiple of 4 */
__global__ void k_add(float *y, const float *__restrict__ x, int64_t n, int vec) {
    const int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (vec) {
        if (id * 4 >= n) return;
        float4 a = ((const float4 *)y)[id];
        const float4 b = ((const float4 *)x)[id];
        a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w;
        ((float4 *)y)[id] = a;
    } else if (id < n)
        y[id] += x[id];
}
extern "C" void cuda_add_into(cuda_ctx *c, float *y, const float *x, int64_t n) {
    const int vec = n % 4 == 0 && ((uintptr_t)y & 15) == 0 && ((uintptr_t)x & 15) == 0;
    k_add<<<blocks_for(vec ? n / 4 : n, 256), 256, 0, c->stream>>>(y, x, n, vec);
}

#define GATHER_MAX 256
typedef struct drows {
    int64_t r[GATHER_MAX];
} drows;

__global__ void k_gather(const float *__restrict__ src, const drows rows, const int64_t *__restrict__ rows_dev, int64_t D,
                         float *__restrict__ dst) {
    int64_t r = blockIdx.y;
    int64_t from = rows_dev ? rows_dev[r] : rows.r[r];
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < D; i += (int64_t)gridDim.x * blockDim.x)
        dst[r * D + i] = src[from * D + i];
}

/* ---- gated delta rule ----
 * Pass 1 (k_dn_prep): per (row, key head) the l2-normalised q (times 1/sqrt(dk)) and k into
 * scratch [rows, Hk, dk] each; per (row, value head) beta and the decay exp(g).
 * Pass 2 (k_dn_scan): one warp per (sequence, value head, 8 value columns), the state
 * S[dk, dv] in registers, no shared memory and no barrier. Sequential over tokens, parallel
 * over sequences x heads x column slices (8 x 48 x 16 = 6144 warps at the 27B shape, 8x512).
 * Not the chunked (WY/UT) form of flash-linear-attention: see docs/cuda.md. */
__global__ void k_dn_prep(const float *__restrict__ qkv, int64_t qkv_stride, const float *__restrict__ b,
                          const float *__restrict__ a, const float *__restrict__ A_log,
                          const float *__restrict__ dt_bias, int64_t rows, int Hk, int Hv, int dk,
                          float *__restrict__ qn, float *__restrict__ kn, float *__restrict__ beta,
                          float *__restrict__ decay) {
    /* one warp per (row, key head, q-or-k) */
    int64_t u = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x & 31;
    if (u < rows * Hk * 2) {
        int which = (int)(u % 2);
        int64_t rh = u / 2, r = rh / Hk;
        int hk = (int)(rh % Hk);
        const float *src = qkv + r * qkv_stride + (int64_t)which * Hk * dk + (int64_t)hk * dk;
        float ss = 0;
        for (int i = lane; i < dk; i += 32) ss += src[i] * src[i];
        ss = warp_sum(ss);
        float inv = 1.0f / sqrtf(ss + 1e-6f);
        float sc = which == 0 ? 1.0f / sqrtf((float)dk) : 1.0f;
        float *dst = (which == 0 ? qn : kn) + rh * dk;
        for (int i = lane; i < dk; i += 32) dst[i] = (src[i] * inv) * sc;
    }
    /* beta and decay: the first rows*Hv threads of the grid */
    int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (g < rows * Hv) {
        int h = (int)(g % Hv);
        beta[g] = sigmoid_d(b[g]);
        decay[g] = expf(-expf(A_log[h]) * softplus_d(a[g] + dt_bias[h]));
    }
}

/* Lane l of a warp: column c = l / 4 of the warp's 8 columns, row group g = l % 4; it keeps
 * rows g, g+4, ... (RPT of them) of that column of S in registers. S^T k and S^T q are a
 * sum over the lane's rows, then two shuffles within the group of 4: the per-token chain
 * is RPT FMAs deep instead of dk (the first version, one column per lane, ran ~6 us per
 * token at the 27B shape, latency-bound on its 128-deep chains). */
template <int RPT>
__global__ void __launch_bounds__(128) k_dn_scan(const float *__restrict__ qn, const float *__restrict__ kn,
                                                 const float *__restrict__ beta, const float *__restrict__ decay,
                                                 const float *__restrict__ qkv, int64_t qkv_stride, const dsegs s,
                                                 int Hk, int Hv, int dk, int dv, float *__restrict__ out) {
    const int lane = threadIdx.x & 31, g = lane & 3;
    const int slices = (dv + 7) / 8;
    int64_t wid = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (wid >= (int64_t)s.n * Hv * slices) return;
    const int sl = (int)(wid % slices), h = (int)((wid / slices) % Hv), sg = (int)(wid / slices / Hv);
    const int hk = h / (Hv / Hk), col = sl * 8 + (lane >> 2);
    const bool live = col < dv;
    float S[RPT];
#pragma unroll
    for (int j = 0; j < RPT; j++) S[j] = 0.0f;
    const int64_t Kd2 = 2LL * Hk * dk;
    for (int64_t r = s.start[sg]; r < s.start[sg] + s.len[sg]; r++) {
        const float *kr = kn + (r * Hk + hk) * dk, *qr = qn + (r * Hk + hk) * dk;
        const float bt = beta[r * Hv + h], dc = decay[r * Hv + h];
        const float v = live ? qkv[r * qkv_stride + Kd2 + (int64_t)h * dv + col] : 0.0f;
        float kk[RPT], qq[RPT];
#pragma unroll
        for (int j = 0; j < RPT; j++) {
            int i = g + 4 * j;
            kk[j] = i < dk ? kr[i] : 0.0f;
            qq[j] = i < dk ? qr[i] : 0.0f;
        }
        float kv0 = 0.0f, kv1 = 0.0f;
#pragma unroll
        for (int j = 0; j < RPT; j += 2) {
            S[j] *= dc;
            kv0 += S[j] * kk[j];
            if (j + 1 < RPT) {
                S[j + 1] *= dc;
                kv1 += S[j + 1] * kk[j + 1];
            }
        }
        float kv = kv0 + kv1;
        kv += __shfl_xor_sync(0xffffffffu, kv, 1);
        kv += __shfl_xor_sync(0xffffffffu, kv, 2);
        const float delta = (v - kv) * bt;
        float o0 = 0.0f, o1 = 0.0f;
#pragma unroll
        for (int j = 0; j < RPT; j += 2) {
            S[j] += kk[j] * delta;
            o0 += S[j] * qq[j];
            if (j + 1 < RPT) {
                S[j + 1] += kk[j + 1] * delta;
                o1 += S[j + 1] * qq[j + 1];
            }
        }
        float o = o0 + o1;
        o += __shfl_xor_sync(0xffffffffu, o, 1);
        o += __shfl_xor_sync(0xffffffffu, o, 2);
        if (live && g == 0) out[r * ((int64_t)Hv * dv) + (int64_t)h * dv + col] = o;
    }
}

/* ---- attention: one block per (sequence, head, 8 queries); one warp per query ----
 * Keys and values stream through shared memory in tiles of 32 rows. Scores: lane j takes
 * key j of the tile (dot over d with the warp's query from shared memory; K rows padded by
 * one float so lanes hit distinct banks). Online softmax in FP32 (running max and sum per
 * query), then lane l accumulates output dims l, l+32, ... from the V tile. d <= 256. */
#define ATT_Q 8
#define ATT_KT 32
#define ATT_DMAX 256
static size_t att_smem(int d) { return sizeof(float) * ((size_t)ATT_KT * (d + 1) + (size_t)ATT_KT * d + (size_t)ATT_Q * d); }

__global__ void __launch_bounds__(ATT_Q * 32) k_attention(const float *__restrict__ q, int64_t qs, const float *__restrict__ k,
                                                         const float *__restrict__ v, const dsegs s, int H, int Hkv, int d,
                                                         float scale, int causal, float *__restrict__ out) {
    extern __shared__ float sm[];
    float *Ks = sm, *Vs = Ks + ATT_KT * (d + 1), *Qs = Vs + ATT_KT * d;
    const int sg = blockIdx.z, h = blockIdx.y, hk = h / (H / Hkv);
    const int64_t L = s.len[sg], s0 = s.start[sg];
    const int64_t qb = (int64_t)blockIdx.x * ATT_Q;
    if (qb >= L) return;
    const int w = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int64_t qi = qb + w; /* this warp's query, relative to the sequence */
    const bool qlive = qi < L;
    const int64_t kvs = (int64_t)Hkv * d;
    for (int i = threadIdx.x; i < ATT_Q * d; i += blockDim.x) {
        int qq = i / d, dd = i % d;
        Qs[i] = qb + qq < L ? q[(s0 + qb + qq) * qs + (int64_t)h * d + dd] : 0.0f;
    }
    float acc[ATT_DMAX / 32];
#pragma unroll
    for (int c = 0; c < ATT_DMAX / 32; c++) acc[c] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    const int64_t qmax = qb + ATT_Q - 1 < L - 1 ? qb + ATT_Q - 1 : L - 1;
    const int64_t nk = causal ? qmax + 1 : L;
    const float *qw = Qs + w * d;
    for (int64_t t0 = 0; t0 < nk; t0 += ATT_KT) {
        __syncthreads();
        for (int i = threadIdx.x; i < ATT_KT * d; i += blockDim.x) {
            int j = i / d, dd = i % d;
            bool in = t0 + j < nk;
            int64_t row = (s0 + t0 + j) * kvs + (int64_t)hk * d + dd;
            Ks[j * (d + 1) + dd] = in ? k[row] : 0.0f;
            Vs[j * d + dd] = in ? v[row] : 0.0f;
        }
        __syncthreads();
        if (!qlive) continue;
        const int64_t kj = t0 + lane;
        float sc = 0.0f;
        const float *kr = Ks + lane * (d + 1);
        for (int dd = 0; dd < d; dd++) sc += qw[dd] * kr[dd];
        sc *= scale;
        bool ok = kj < nk && (!causal || kj <= qi);
        sc = ok ? sc : -INFINITY;
        float mt = warp_max(sc);
        float mn = fmaxf(m, mt);
        /* mn is finite: key 0 is always allowed, and it is in the first tile */
        float p = ok ? expf(sc - mn) : 0.0f;
        float alpha = expf(m - mn); /* m = -inf on the first tile: 0 */
        l = l * alpha + warp_sum(p);
        m = mn;
#pragma unroll
        for (int c = 0; c < ATT_DMAX / 32; c++) acc[c] *= alpha;
        int jmax = (int)(nk - t0 < ATT_KT ? nk - t0 : ATT_KT);
        for (int j = 0; j < jmax; j++) {
            float pj = __shfl_sync(0xffffffffu, p, j);
            const float *vr = Vs + j * d;
#pragma unroll
            for (int c = 0; c < ATT_DMAX / 32; c++) {
                int dd = lane + 32 * c;
                if (dd < d) acc[c] += pj * vr[dd];
            }
        }
    }
    if (!qlive) return;
    float inv = 1.0f / l;
    float *o = out + (s0 + qi) * ((int64_t)H * d) + (int64_t)h * d;
#pragma unroll
    for (int c = 0; c < ATT_DMAX / 32; c++) {
        int dd = lane + 32 * c;
        if (dd < d) o[dd] = acc[c] * inv;
    }
}

/* ---- activation twins (see twin) ---- */

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


/* RMSNorm, one block per row held in registers, VEC float4 a thread (D % 4 == 0, D <= blockDim * 4 * VEC,
 * 16-byte aligned rows); the same formula as k_rmsnorm, the sum of squares reduced in another order. VEC is
 * the row's need (5 at the 27B width: 40 registers fewer than RN_VEC's 8, so more blocks a multiprocessor). */
template <int TW, int VEC>
__global__ void __launch_bounds__(256) k_rmsnorm_row(const float *__restrict__ x, int64_t xs, int D,
                                                     const float *__restrict__ w, float off, float eps,
                                                     float *__restrict__ y, int64_t ys, void *__restrict__ tw,
                                                     int64_t twld, float *__restrict__ tsx) {
    __shared__ float sh[33];
    const int64_t r = blockIdx.x;
    const float4 *xr = (const float4 *)(x + r * xs), *wr = (const float4 *)w;
    const int D4 = D >> 2;
    float4 v[VEC];
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < VEC; j++) {
        int i = threadIdx.x + j * blockDim.x;
        v[j] = i < D4 ? xr[i] : make_float4(0, 0, 0, 0);
        ss += sq4(v[j]);
    }
    ss = block_reduce(ss, sh, false);
    const float inv = rsqrtf(ss / (float)D + eps);
    float4 *yr = y ? (float4 *)(y + r * ys) : NULL;
#pragma unroll
    for (int j = 0; j < VEC; j++) {
        int i = threadIdx.x + j * blockDim.x;
        if (i < D4) {
            float4 g = wr[i];
            v[j] = make_float4((v[j].x * inv) * (off + g.x), (v[j].y * inv) * (off + g.y), (v[j].z * inv) * (off + g.z),
                               (v[j].w * inv) * (off + g.w));
            if (y) yr[i] = v[j]; /* NULL: the twin is the only copy */
        }
    }
    twin_row<TW, VEC>(v, D4, D, r, tw, twld, tsx, sh);
}

/* RMSNorm of narrow rows (D % 4 == 0, D <= 128 * VEC; no twin): a warp per row, eight rows a block, the
 * row's x and weight loaded together. The attention's q and k norms (27B: 98,304 and 16,384 rows of 256
 * at 8 x 512) ran one 64-thread block per row in k_rmsnorm_row at ~1.6x the memory floor, bound by the
 * block launches. y may be x (each lane reads its columns before it writes them). */
template <int VEC>
__global__ void __launch_bounds__(256) k_rmsnorm_warp(const float *__restrict__ x, int64_t xs, int64_t M, int D,
                                                      const float *__restrict__ w, float off, float eps, float *y,
                                                      int64_t ys) {
    const int64_t r = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31, D4 = D >> 2;
    if (r >= M) return;
    const float4 *xr = (const float4 *)(x + r * xs), *wr = (const float4 *)w;
    float4 v[VEC], g[VEC];
#pragma unroll
    for (int j = 0; j < VEC; j++) {
        const int i = lane + 32 * j;
        v[j] = i < D4 ? xr[i] : make_float4(0, 0, 0, 0);
        g[j] = i < D4 ? wr[i] : make_float4(0, 0, 0, 0);
    }
    /* the sum of squares in k_rmsnorm_row's order, so a declared output (whose twin that kernel makes) is this
     * kernel's bit for bit: part j is what warp j of its ceil(D / 128) one-float4 threads sums (sq4, warp_sum's
     * tree), and block_reduce's lane 0 adds the warps' sums as (S0 + S2) + (S1 + S3) (the absent ones zero) */
    float S[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < VEC; j++) S[j] = warp_sum(sq4(v[j]));
    const float inv = rsqrtf(((S[0] + S[2]) + (S[1] + S[3])) / (float)D + eps);
    float4 *yr = (float4 *)(y + r * ys);
#pragma unroll
    for (int j = 0; j < VEC; j++) {
        const int i = lane + 32 * j;
        if (i < D4)
            yr[i] = make_float4((v[j].x * inv) * (off + g[j].x), (v[j].y * inv) * (off + g[j].y),
                                (v[j].z * inv) * (off + g[j].z), (v[j].w * inv) * (off + g[j].w));
    }
}

/* SwiGLU, FP32 out plus an optional BF16 twin, 4 columns per thread (N, gs multiples of 4, 16-byte aligned):
 * g, u rows at stride gs, y and yb contiguous [M, N]. Block (r, b) takes row r's float4 columns b * SW4_T * SW4_U
 * onwards, every thread's SW4_U loads issued before any is used; no division (the grid-stride form split its index
 * into row and column with 64-bit divisions, and ran the BF16 model's SwiGLU at 1.45x its memory floor). */
#define SW4_T 256
#define SW4_U 2
template <typename TI>
__global__ void __launch_bounds__(SW4_T) k_swiglu4(const TI *g, const TI *__restrict__ u, int64_t gs, int N, float *y,
                                                   __nv_bfloat16 *yb, sw_scales sc) {
    const int64_t r = blockIdx.x;
    const int N4 = N >> 2, c0 = (int)blockIdx.y * SW4_T * SW4_U + (int)threadIdx.x;
    const TI *gr = g + r * gs, *ur = u + r * gs;
    typename raw4<TI>::type a[SW4_U], b[SW4_U];
#pragma unroll
    for (int k = 0; k < SW4_U; k++) {
        const int i = c0 + k * SW4_T;
        if (i < N4) a[k] = ld4raw(gr + 4 * i), b[k] = ld4raw(ur + 4 * i);
    }
#pragma unroll
    for (int k = 0; k < SW4_U; k++) {
        const int i = c0 + k * SW4_T;
        if (i >= N4) break;
        const float4 o = sw_comb4(wide4(a[k]), wide4(b[k]), i, r, sc);
        if (y) *(float4 *)(y + r * N + 4 * i) = o;
        if (yb) store_bf16x4(yb + r * N + 4 * i, o);
    }
}

/* SwiGLU with an FP8 twin: one block per row of N (N % 4 == 0, N <= blockDim * 4 * VEC), up to 1024
 * threads so the row's loads of many blocks stay in flight (the first version, 256 threads x 20
 * float4 at 104 registers, ran 2 blocks per SM and took twice the BF16 kernel's time at 27B shape) */
template <typename TI, int VEC>
__global__ void __launch_bounds__(1024) k_swiglu_row_fp8(const TI *g, const TI *__restrict__ u, int64_t gs, int N,
                                                         float *y, uint8_t *__restrict__ tw, int64_t twld,
                                                         float *__restrict__ tsx, sw_scales sc) {
    __shared__ float sh[33];
    const int64_t r = blockIdx.x;
    const TI *gr = g + r * gs, *ur = u + r * gs;
    float4 *yr = y ? (float4 *)(y + r * N) : NULL;
    const int N4 = N >> 2;
    float4 v[VEC];
#pragma unroll
    for (int j = 0; j < VEC; j++) {
        int i = threadIdx.x + j * blockDim.x;
        if (i < N4) {
            v[j] = sw_comb4(ld4f(gr + 4 * i), ld4f(ur + 4 * i), i, r, sc);
            if (yr) yr[i] = v[j];
        } else {
            v[j] = make_float4(0, 0, 0, 0);
        }
    }
    twin_row<TW_FP8, VEC>(v, N4, N, r, tw, twld, tsx, sh);
}

/* SwiGLU with an FP8 twin for wide rows, in two passes over the row: the first computes every output
 * (writing y when asked) for the row's amax, the second computes them again, the same arithmetic in
 * the same order, and quantizes. Nothing is held in registers across the reduction, so 512-thread
 * blocks run four to a multiprocessor and one row's reduction overlaps others' loads (the register
 * kernel above holds the row: at the 27B width one 1024-thread block per multiprocessor, its phases
 * serialised, 292 us at 8 x 512; it now takes rows up to 8192 wide). The second pass reads the row
 * again from L2 (4 rows x 70 KB per multiprocessor at the 27B width in BF16). Outputs, scales and
 * twin are bit-identical to k_swiglu_row_fp8's. */
template <typename TI>
__device__ __forceinline__ float4 sw_out4(const TI *gr, const TI *ur, int i, int64_t r, const sw_scales &sc) {
    return sw_comb4(ld4f(gr + 4 * i), ld4f(ur + 4 * i), i, r, sc);
}

template <typename TI>
__global__ void __launch_bounds__(512) k_swiglu_fp8_2p(const TI *g, const TI *__restrict__ u, int64_t gs, int N, float *y,
                                                       uint8_t *__restrict__ tw, int64_t twld, float *__restrict__ tsx,
                                                       sw_scales sc) {
    __shared__ float sh[33];
    const int64_t r = blockIdx.x;
    const TI *gr = g + r * gs, *ur = u + r * gs;
    float4 *yr = y ? (float4 *)(y + r * N) : NULL;
    const int N4 = N >> 2;
    float amax = 0.0f;
    for (int i = threadIdx.x; i < N4; i += blockDim.x) {
        const float4 o = sw_out4(gr, ur, i, r, sc);
        if (yr) yr[i] = o;
        amax = fmaxf(amax, absmax4(o));
    }
    const fp8_div dv = twin_scale(amax, sh, tsx + r);
    uint8_t *q = tw + r * twld;
    for (int i = threadIdx.x; i < N4; i += blockDim.x) *(uint32_t *)(q + 4 * i) = e4m3x4(sw_out4(gr, ur, i, r, sc), dv);
    for (int64_t i = N + threadIdx.x; i < twld; i += blockDim.x) q[i] = 0;
}

/* The one-pass SwiGLU kernels' first step: columns [lo, hi) (float4 units) of row r into row[i - lo] (and yr[i]
 * when given), nt threads apart, every thread's U float4 pairs loaded (BF16 kept as loaded, widened at use: fewer
 * registers) before any is used; returns the thread's amax of what it wrote */
template <typename TI, int U>
__device__ __forceinline__ float sw_stage(const TI *gr, const TI *ur, int lo, int hi, int nt, int64_t r,
                                          const sw_scales &sc, float4 *row, float4 *yr) {
    float amax = 0.0f;
    for (int i0 = lo + (int)threadIdx.x; i0 < hi; i0 += U * nt) {
        typename raw4<TI>::type a[U], b[U];
#pragma unroll
        for (int j = 0; j < U; j++) {
            const int i = i0 + j * nt;
            if (i < hi) a[j] = ld4raw(gr + 4 * i), b[j] = ld4raw(ur + 4 * i);
        }
#pragma unroll
        for (int j = 0; j < U; j++) {
            const int i = i0 + j * nt;
            if (i < hi) {
                const float4 o = sw_comb4(wide4(a[j]), wide4(b[j]), i, r, sc);
                row[i - lo] = o;
                if (yr) yr[i] = o;
                amax = fmaxf(amax, absmax4(o));
            }
        }
    }
    return amax;
}

/* SwiGLU with an FP8 twin for wide rows in one pass over device memory (the default; VSR_CUDA_SWIGLU_1P=0
 * keeps k_swiglu_fp8_2p): the row's outputs go to shared memory (N * 4 bytes: 68 KB at the 27B width,
 * three blocks a multiprocessor) as they are computed for the amax, and are quantized from there, so the
 * row is read once (the two-pass kernel reads it twice, the second time mostly missing L2 at 8 x 512:
 * ~250 us a layer against a ~85 us one-pass floor). Loads are issued SW1_U float4 pairs at a time before
 * any is used. The same arithmetic per element as k_swiglu_fp8_2p (sw_comb4): outputs, scales and twin
 * bit-identical to it (tests/test_cuda_fused.c twin_fp8). */
#define SW1_U 4
template <typename TI>
__global__ void __launch_bounds__(512) k_swiglu_fp8_1p(const TI *g, const TI *__restrict__ u, int64_t gs, int N, float *y,
                                                       uint8_t *__restrict__ tw, int64_t twld, float *__restrict__ tsx,
                                                       sw_scales sc) {
    extern __shared__ float4 sw_row[]; /* [N / 4] */
    __shared__ float sh[33];
    const int64_t r = blockIdx.x;
    const TI *gr = g + r * gs, *ur = u + r * gs;
    float4 *yr = y ? (float4 *)(y + r * N) : NULL;
    const int N4 = N >> 2, nt = (int)blockDim.x;
    const float amax = sw_stage<TI, SW1_U>(gr, ur, 0, N4, nt, r, sc, sw_row, yr);
    const fp8_div dv = twin_scale(amax, sh, tsx + r); /* its barriers order sw_row's stores before the reads below */
    uint8_t *q = tw + r * twld;
    for (int i = threadIdx.x; i < N4; i += nt) *(uint32_t *)(q + 4 * i) = e4m3x4(sw_row[i], dv);
    for (int64_t i = N + threadIdx.x; i < twld; i += nt) q[i] = 0;
}

/* SwiGLU with an FP8 twin for wide rows, one pass, a row by a pair of CTAs (a thread-block cluster of 2; the
 * default on capability 9.0+): each CTA computes half the row into its shared memory (34 KB at the 27B width)
 * with its half's amax, the pair exchanges the two through distributed shared memory, and each quantizes its
 * half. k_swiglu_fp8_1p's whole-row CTA (512 threads at 59 registers: two a multiprocessor, 136 KB) ran the
 * 27B FP8 forward's SwiGLU at 221 us at 8 x 512 against an 85 us floor (its BF16 product read once, the FP8
 * twin written): with two big CTAs an SM spent much of its time with both in their reduction and store phases.
 * Six 256-thread half-row CTAs an SM (209 KB of shared memory, <= 42 registers) keep more loads in flight and
 * their phases apart. Per element the same arithmetic (sw_comb4), and the row's amax is a max: outputs,
 * scales and twin are bit-identical to k_swiglu_fp8_1p's. */
#define SWC_T 256
/* U: float4 pairs a thread loads before using any: 4 from BF16 (linear_swiglu's kept product), 2 from FP32, so 32
 * bytes of each input a thread are in flight and six CTAs fit a multiprocessor (<= 42 registers: FP32 at 4
 * spills); VSR_CUDA_SWIGLU_1P=3 swaps them (A/B) */
template <typename TI, int U>
__global__ void __launch_bounds__(SWC_T, 6) k_swiglu_fp8_cl(const TI *g, const TI *__restrict__ u, int64_t gs, int N,
                                                            float *y, uint8_t *__restrict__ tw, int64_t twld,
                                                            float *__restrict__ tsx, sw_scales sc) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ float4 sw_row[]; /* [half] */
    __shared__ float sh[33], slot;
    const unsigned rank = blockIdx.x & 1; /* the CTA's rank in its cluster of 2 along x */
    const int64_t r = blockIdx.x >> 1;
    const TI *gr = g + r * gs, *ur = u + r * gs;
    float4 *yr = y ? (float4 *)(y + r * N) : NULL;
    const int N4 = N >> 2, half = (N4 + 1) >> 1, lo = (int)rank * half, hi = min(N4, lo + half);
    const float amax = sw_stage<TI, U>(gr, ur, lo, hi, SWC_T, r, sc, sw_row, yr);
    /* block_reduce's barriers order sw_row's stores before the reads below */
    const float s = fp8_row_scale(cluster_max<2>(block_reduce(amax, sh, true), &slot));
    if (rank == 0 && threadIdx.x == 0) tsx[r] = s;
    const fp8_div dv = fp8_div_of(s);
    uint8_t *q = tw + r * twld;
    for (int i = lo + (int)threadIdx.x; i < hi; i += SWC_T) *(uint32_t *)(q + 4 * i) = e4m3x4(sw_row[i - lo], dv);
    if (rank == 1)
        for (int64_t i = N + threadIdx.x; i < twld; i += SWC_T) q[i] = 0;
    cluster_exit();
#endif
}

/* The gated norm's two steps per lane, shared by the row and token kernels below so that both round
 * alike: the lane's sum of squares over its float4s v[0..3], and one output float4 */
__device__ __forceinline__ float gated_ss4(const float4 (&v)[4]) {
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; j++) ss += sq4(v[j]);
    return ss;
}
__device__ __forceinline__ float4 gated_out4(float4 g, float4 v, float inv, float4 a) {
    return make_float4(g.x * (v.x * inv) * silu_d(a.x), g.y * (v.y * inv) * silu_d(a.y), g.z * (v.z * inv) * silu_d(a.z),
                       g.w * (v.w * inv) * silu_d(a.w));
}

/* DeltaNet output norm, one warp per row, 4 columns per lane (D % 4 == 0, D <= 32 * 4 * 4, x, z, w,
 * y 16-byte aligned): the same formula as k_rmsnorm_gated, the sum of squares in another order */
template <typename TZ>
__global__ void k_rmsnorm_gated4(const float *__restrict__ x, const TZ *__restrict__ z, int64_t zh, int64_t zs,
                                 int64_t M, int D, const float *__restrict__ w, float eps, float *__restrict__ y,
                                 __nv_bfloat16 *__restrict__ yb) {
    const int64_t r = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x & 31, D4 = D / 4;
    if (r >= M) return;
    const float4 *xr = (const float4 *)(x + r * D), *wr = (const float4 *)w;
    const TZ *zr = z + (r / zh) * zs + (r % zh) * D;
    float4 v[4], zv[4];
#pragma unroll
    for (int j = 0; j < 4; j++) { /* x and z loaded together: one memory latency per row, not two */
        int i = lane + 32 * j;
        v[j] = i < D4 ? xr[i] : make_float4(0, 0, 0, 0);
        zv[j] = i < D4 ? ld4f(zr + 4 * i) : make_float4(0, 0, 0, 0);
    }
    const float ss = warp_sum(gated_ss4(v));
    const float inv = rsqrtf(ss / (float)D + eps);
    float4 *yr = y ? (float4 *)(y + r * D) : NULL;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        int i = lane + 32 * j;
        if (i < D4) {
            const float4 o = gated_out4(wr[i], v[j], inv, zv[j]);
            if (yr) yr[i] = o;
            if (yb) store_bf16x4(yb + r * D + 4 * i, o);
        }
    }
}

/* DeltaNet output norm by token (where D % 4 == 0, D <= 128 and rows are 16-byte aligned, for every FP8 twin
 * and on grids of 8 blocks a multiprocessor or more; VSR_CUDA_GATED_TOK=0 keeps the row kernel above): one
 * 512-thread block per nh consecutive rows (a token's value heads: nh = the declared twin's K / D, else 32),
 * warp w taking rows w, w + 16, ..., all of
 * its x and z loads issued first and its rows' sums of squares reduced together (one shuffle tree for up to
 * HPW rows). The row kernel has 24 bytes in flight per lane and ran at ~1.7x its memory floor at 27B
 * 8 x 512 (~124 us in bench_cuda against ~72); it also could not make an FP8 twin, which needs the amax
 * over the whole token, so the FP8 out_proj quantized the FP32 output in a pass of its own. Per row the
 * same arithmetic as k_rmsnorm_gated4 (lane l holds columns 4l..4l+3, gated_ss4, warp_sum's tree,
 * gated_out4): y is bit-identical to it. The twin: BF16, or FP8 with the token's scale (as twin_row:
 * amax / 448, 1 for a zero token) and zeros out to twld. */
#define GT_W 16  /* warps a token */
#define GT_HPW 4 /* rows per warp held in registers at most (HPW): nh <= GT_W * GT_HPW */
/* CL > 1 (the default without an FP8 twin): a token's 16 warps in CL CTAs of 16 / CL warps (warp w of CTA q is
 * the token's warp q * 16 / CL + w: the same rows as CL = 1), so more, smaller CTAs share a multiprocessor and
 * their load and reduction phases overlap (27B 8 x 512, BF16 twin: 83 against 89 us). An FP8 twin needs the
 * token's amax, so CL = 1 (the same amax over a cluster of four CTAs through distributed shared memory was
 * slower: 104 against 94 us). */
template <typename TZ, int TW, int CL, int HPW>
__global__ void __launch_bounds__(GT_W * 32 / CL, CL == 1 && HPW == 3 ? 3 : 1) k_rmsnorm_gated_tok(const float *__restrict__ x, const TZ *__restrict__ z,
                                                                  int zh, int64_t zs, int M, int nh, int D,
                                                                  const float *__restrict__ w, float eps,
                                                                  float *__restrict__ y, void *__restrict__ tw,
                                                                  int64_t twld, float *__restrict__ tsx) {
    __shared__ float sh[33];
    const int R = blockIdx.x / CL, rank = blockIdx.x % CL;
    const int lane = threadIdx.x & 31, warp = rank * (GT_W / CL) + (threadIdx.x >> 5);
    const bool on = lane < D / 4;
    const float4 zero = make_float4(0, 0, 0, 0);
    float4 v[HPW];
    typename raw4<TZ>::type zv[HPW];
#pragma unroll
    for (int j = 0; j < HPW; j++) {
        const int h = warp + GT_W * j, r = R * nh + h;
        const bool ok = on && h < nh && r < M;
        v[j] = ok ? *(const float4 *)(x + (int64_t)r * D + 4 * lane) : zero;
        if (ok) zv[j] = ld4raw(z + (int64_t)(r / zh) * zs + (int64_t)(r % zh) * D + 4 * lane);
    }
    float ss[HPW];
#pragma unroll
    for (int j = 0; j < HPW; j++) {
        const float4 vr[4] = {v[j], zero, zero, zero};
        ss[j] = gated_ss4(vr);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) /* warp_sum's tree, the rows interleaved */
#pragma unroll
        for (int j = 0; j < HPW; j++) ss[j] += __shfl_xor_sync(0xffffffffu, ss[j], o);
    const float4 g = on ? ((const float4 *)w)[lane] : zero;
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < HPW; j++) {
        const int h = warp + GT_W * j, r = R * nh + h;
        if (!on || h >= nh || r >= M) continue;
        const float inv = rsqrtf(ss[j] / (float)D + eps);
        const float4 o = gated_out4(g, v[j], inv, wide4(zv[j]));
        v[j] = o; /* kept for the FP8 twin */
        if (y) *(float4 *)(y + (int64_t)r * D + 4 * lane) = o;
        if (TW == TW_BF16) store_bf16x4((__nv_bfloat16 *)tw + (int64_t)r * D + 4 * lane, o);
        amax = fmaxf(amax, absmax4(o));
    }
    if (TW == TW_FP8) { /* the launcher's rule: whole tokens (M a multiple of nh) */
        static_assert(TW != TW_FP8 || CL == 1, "an FP8 twin needs the whole token's amax in one CTA");
        const fp8_div dv = twin_scale(amax, sh, tsx + R);
        uint8_t *q = (uint8_t *)tw + (int64_t)R * twld;
#pragma unroll
        for (int j = 0; j < HPW; j++) {
            const int h = warp + GT_W * j;
            if (on && h < nh) *(uint32_t *)(q + h * D + 4 * lane) = e4m3x4(v[j], dv);
        }
        for (int64_t i = (int64_t)nh * D + threadIdx.x; i < twld; i += blockDim.x) q[i] = 0;
    }
}

/* attention output gate, 4 columns per thread (hd, gs, ghs multiples of 4, x and g 16-byte aligned) */
__global__ void k_mul_sigmoid4(float *x, int64_t M, int H, int hd, const float *__restrict__ g, int64_t gs, int64_t ghs,
                               __nv_bfloat16 *xb, int write_x) {
    const int hd4 = hd / 4;
    const int64_t row4 = (int64_t)H * hd4, n4 = M * row4;
    for (int64_t u = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; u < n4; u += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = u / row4;
        const int rem = (int)(u - r * row4), h = rem / hd4, i = (rem - h * hd4) * 4;
        float4 a = ((float4 *)x)[u], b = *(const float4 *)(g + r * gs + h * ghs + i);
        float4 o = make_float4(a.x * sigmoid_d(b.x), a.y * sigmoid_d(b.y), a.z * sigmoid_d(b.z), a.w * sigmoid_d(b.w));
        if (write_x) ((float4 *)x)[u] = o;
        if (xb) store_bf16x4(xb + 4 * u, o);
    }
}

/* attention output gate with an FP8 twin (an FP8 o_proj reads it; it quantized the FP32 output in a pass of
 * its own before): one block per token of H * hd / 16 threads rounded up to whole warps, MS_VEC float4 each
 * (H * hd <= 1024 * 4 * MS_VEC; hd, gs, ghs multiples of 4, 16-byte aligned), every x and g load issued
 * first, then twin_row (the token's scale). The same arithmetic per element as k_mul_sigmoid4. (Its first form, 256
 * threads holding RN_VEC = 8 float4 of x and of g, ran 2 blocks a multiprocessor: 125 us at 27B 8 x 512
 * against the BF16 twin's 72.) */
#define MS_VEC 4
__global__ void __launch_bounds__(1024) k_mul_sigmoid_row_fp8(float *x, int H, int hd, const float *__restrict__ g,
                                                              int64_t gs, int64_t ghs, uint8_t *__restrict__ tw,
                                                              int64_t twld, float *__restrict__ tsx, int write_x) {
    __shared__ float sh[33];
    const int64_t r = blockIdx.x;
    const int hd4 = hd / 4, D4 = H * hd4;
    float4 *xr = (float4 *)x + r * D4;
    float4 v[MS_VEC], gv[MS_VEC];
#pragma unroll
    for (int j = 0; j < MS_VEC; j++) {
        const int i = threadIdx.x + j * blockDim.x, h = i / hd4;
        if (i < D4) v[j] = xr[i], gv[j] = *(const float4 *)(g + r * gs + h * ghs + (i - h * hd4) * 4);
        else v[j] = gv[j] = make_float4(0, 0, 0, 0);
    }
#pragma unroll
    for (int j = 0; j < MS_VEC; j++) {
        const int i = threadIdx.x + j * blockDim.x;
        const float4 a = v[j], b = gv[j];
        v[j] = make_float4(a.x * sigmoid_d(b.x), a.y * sigmoid_d(b.y), a.z * sigmoid_d(b.z), a.w * sigmoid_d(b.w));
        if (write_x && i < D4) xr[i] = v[j];
    }
    twin_row<TW_FP8, MS_VEC>(v, D4, 4 * D4, r, tw, twld, tsx, sh);
}

static inline int64_t rup16(int64_t k) { return (k + 15) / 16 * 16; }

/* [ptr, ptr + bytes) overlaps the live product held only in BF16 */
static int kp_overlaps(cuda_ctx *c, const void *ptr, size_t bytes) {
    const cuda_ctx_priv *p = priv(c);
    if (!p->kp_src || !ptr) return 0;
    uintptr_t a = (uintptr_t)ptr, b = a + bytes, s = (uintptr_t)p->kp_src,
              e = s + sizeof(float) * (size_t)(p->kp_rows * p->kp_N);
    return a < e && s < b;
}

/* The kept BF16 product's element for FP32 address x, when x [rows of n floats at stride xs] lies
 * wholly inside it; else NULL. */
static const __nv_bfloat16 *kp_find(cuda_ctx *c, const float *x, int64_t rows, int64_t xs, int64_t n) {
    const cuda_ctx_priv *p = priv(c);
    if (!p->kp_src || (uintptr_t)x < (uintptr_t)p->kp_src || rows <= 0) return NULL;
    int64_t off = (int64_t)(((uintptr_t)x - (uintptr_t)p->kp_src) / sizeof(float));
    if (off + (rows - 1) * xs + n > p->kp_rows * p->kp_N) return NULL;
    return (const __nv_bfloat16 *)p->kp_buf + off;
}

/* An op about to read [ptr, ptr + bytes) as FP32: refused while a product held only in BF16 lies
 * there (the FP32 memory was never written; see keep_product_bf16 in backend.h). */
static vsr_status kp_guard(cuda_ctx *c, const void *ptr, size_t bytes, const char *op, vsr_err *err) {
    if (!kp_overlaps(c, ptr, bytes)) return VSR_OK;
    return vsr_err_set(err, VSR_E_INTERNAL, "cuda:%d: %s: its input is a linear's product held only in BF16 "
                       "(keep_product_bf16), which this op cannot read", c->device, op);
}

/* Drops the twin, the kept product and the pending declarations when [ptr, ptr + bytes) overlaps
 * their source. */
static void twin_clobber(cuda_ctx *c, const void *ptr, size_t bytes) {
    cuda_ctx_priv *p = priv(c);
    if (kp_overlaps(c, ptr, bytes)) p->kp_src = NULL;
    uintptr_t a = (uintptr_t)ptr, b = a + bytes;
    if (p->tw.kind) {
        uintptr_t s = (uintptr_t)p->tw.src, e = s + sizeof(float) * (size_t)(p->tw.rows * p->tw.K);
        if (a < e && s < b) p->tw.kind = TW_NONE;
    }
    if (p->req_x) {
        uintptr_t s = (uintptr_t)p->req_x, e = s + sizeof(float) * (size_t)(p->req_rows * p->req_K);
        if (a < e && s < b) p->req_x = NULL;
    }
}

/* A producer about to write y [rows * K floats as declared]: the twin kind to make (TW_NONE when y
 * was not declared, or the kind is not wanted: fp8_ok = 0), with its buffer. Drops the old twin. */
static vsr_status twin_start(cuda_ctx *c, const float *y, int64_t n, int fp8_ok, int bf16_ok, twin *t, vsr_err *err) {
    cuda_ctx_priv *p = priv(c);
    memset(t, 0, sizeof *t);
    int declared = p->req_x == y && p->req_rows * p->req_K == n;
    int64_t rows = p->req_rows, K = p->req_K;
    if (vsr_cuda_sole_twins_off > 0) p->req_sole_bf16 = p->req_sole_fp8 = 0;
    twin_clobber(c, y, sizeof(float) * (size_t)n);
    p->req_x = NULL;
    if (!declared) return VSR_OK;
    int kind = p->n_fp8_w > 0 ? (fp8_ok ? TW_FP8 : TW_NONE) : (bf16_ok ? TW_BF16 : TW_NONE);
    if (!kind) return VSR_OK;
    int64_t Kp = kind == TW_FP8 ? rup16(K) : K;
    size_t bytes = kind == TW_FP8 ? (size_t)(rows * Kp) + 16 + sizeof(float) * (size_t)rows
                                  : sizeof(__nv_bfloat16) * (size_t)(rows * K);
    vsr_status st = grow(c, &p->tw_buf, &p->tw_bytes, bytes, err);
    if (st) return vsr_err_prefix(err, "activation twin");
    *t = (twin){y, rows, K, Kp, kind, p->tw_buf, NULL, kind == TW_FP8 ? p->req_sole_fp8 : p->req_sole_bf16};
    if (kind == TW_FP8) t->sx = (float *)(((uintptr_t)p->tw_buf + (size_t)(rows * Kp) + 15) & ~(uintptr_t)15);
    return VSR_OK;
}

/* The producer's kernel launched: the twin is live. */
static void twin_commit(cuda_ctx *c, const twin *t) {
    if (t->kind) priv(c)->tw = *t;
}

/* Rows [r0, r0 + M) of the twin when x is row r0 of its source with the same K and kind. */
static int64_t twin_rows_of(cuda_ctx *c, const float *x, int64_t M, int64_t K, int kind) {
    const twin *t = &priv(c)->tw;
    if (t->kind != kind || t->K != K || (uintptr_t)x < (uintptr_t)t->src) return -1;
    int64_t off = (int64_t)(((uintptr_t)x - (uintptr_t)t->src) / sizeof(float));
    if (off % K || off / K + M > t->rows) return -1;
    return off / K;
}

static const void *twin_find(cuda_ctx *c, const float *x, int64_t M, int64_t K, int kind, const float **sx) {
    const twin *t = &priv(c)->tw;
    int64_t r0 = twin_rows_of(c, x, M, K, kind);
    if (r0 < 0) return NULL;
    vsr_cuda_stat_twin_hits++;
    if (kind == TW_FP8) {
        *sx = t->sx + r0;
        return (const uint8_t *)t->data + r0 * t->Kp;
    }
    return (const __nv_bfloat16 *)t->data + r0 * K;
}

static void cu_feed_linears(void *ctx, const float *x, int64_t rows, int64_t K, const vsr_bweight *const *readers,
                            int n_readers) {
    cuda_ctx_priv *p = priv((cuda_ctx *)ctx);
    if (!x || rows <= 0 || K <= 0) return;
    p->req_x = x, p->req_rows = rows, p->req_K = K;
    int bf = n_readers > 0, f8 = n_readers > 0;
    for (int i = 0; i < n_readers; i++) {
        vsr_wkind k = readers[i] ? readers[i]->v.kind : VSR_WK_COUNT;
        bf &= k == VSR_WK_BF16 || k == VSR_WK_INT4;
        f8 &= k == VSR_WK_FP8;
    }
    p->req_sole_bf16 = bf, p->req_sole_fp8 = f8;
}

extern "C" int cuda_env_switch(const char *name, int dflt, int *cache) {
    if (*cache < 0) {
        const char *e = getenv(name);
        *cache = e && e[0] == '0' ? 0 : e && e[0] == '1' ? 1 : dflt;
    }
    return *cache;
}
extern "C" int cuda_env_mode(const char *name, int dflt, int maxv, int *cache) {
    if (*cache < 0) {
        const char *e = getenv(name);
        *cache = e && e[0] >= '0' && e[0] - '0' <= maxv && e[1] == 0 ? e[0] - '0' : dflt;
    }
    return *cache;
}
extern "C" int cuda_env_switch_set(const char *name, int dflt, int *cache, int on, int maxv) {
    if (on < 0 || on > maxv) return -1;
    const int old = maxv > 1 ? cuda_env_mode(name, dflt, maxv, cache) : cuda_env_switch(name, dflt, cache);
    *cache = on;
    return old;
}

/* VSR_CUDA_KEEP_BF16=0 / VSR_CUDA_LINEAR_SWIGLU=0: the declaration ignored / linear_swiglu as the
 * FP32 linear + swiglu (A/B timing in separate processes) */
static int g_keep_on = -1, g_lsw_on = -1;

static void cu_keep_product_bf16(void *ctx, const float *y, int64_t rows, int64_t N) {
    cuda_ctx_priv *p = priv((cuda_ctx *)ctx);
    if (!cuda_env_switch("VSR_CUDA_KEEP_BF16", 1, &g_keep_on)) return;
    p->kp_req = rows > 0 && N > 0 ? y : NULL, p->kp_req_rows = rows, p->kp_req_N = N;
}

/* x lies in the source of a twin that is the only copy of it. */
static int twin_sole_covers(cuda_ctx *c, const float *x) {
    const twin *t = &priv(c)->tw;
    return t->kind && t->sole && (uintptr_t)x >= (uintptr_t)t->src &&
           (uintptr_t)x < (uintptr_t)(t->src + t->rows * t->K);
}

/* A linear of w on x [M, K]: refused when x exists only as a twin this linear cannot read. */
static vsr_status sole_twin_readable(cuda_ctx *c, const float *x, int64_t M, const vsr_bweight *w, vsr_err *err) {
    if (!twin_sole_covers(c, x)) return VSR_OK;
    int tk = priv(c)->tw.kind, wk = w->v.kind;
    int readable = tk == TW_FP8 ? wk == VSR_WK_FP8 : (wk == VSR_WK_BF16 || wk == VSR_WK_INT4);
    if (!readable || twin_rows_of(c, x, M, w->v.K, tk) < 0)
        return vsr_err_set(err, VSR_E_INTERNAL, "cuda:%d: %s: its input exists only as an activation copy this "
                           "linear cannot read (a reader the model did not declare)", c->device, w->name);
    return VSR_OK;
}

/* ---- per-op timing ---- */

static void prof_flush(cuda_ctx *c) {
    prof *f = &priv(c)->pf;
    if (!f->made || !f->n_pairs) return;
    cudaEventSynchronize(f->ev[2 * f->n_pairs - 1]);
    for (int i = 0; i < f->n_pairs; i++) {
        float ms = 0;
        if (cudaEventElapsedTime(&ms, f->ev[2 * i], f->ev[2 * i + 1]) == cudaSuccess) f->rows[f->row_of[i]].ms += ms;
    }
    (void)cudaGetLastError();
    f->n_pairs = 0;
}

static int prof_row_index(prof *f, const char *name) {
    for (int i = 0; i < f->n_rows; i++)
        if (!strcmp(f->rows[i].name, name)) return i;
    if (f->n_rows == PROF_NAMES) return PROF_NAMES - 1; /* the last row collects the rest */
    snprintf(f->rows[f->n_rows].name, sizeof f->rows[0].name, "%s", f->n_rows == PROF_NAMES - 1 ? "(other)" : name);
    return f->n_rows++;
}

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

/* A producer's profile row: the op, its row width and count, and the twin it makes ("fp8 sole": the FP8
 * twin is the only copy written), so the table separates the variants a forward runs */
static void prof_producer_name(char *buf, size_t n, const char *op, int64_t D, int64_t M, const twin *t) {
    static const char *kinds[] = {"", " bf16 twin", " fp8 twin"};
    snprintf(buf, n, "%s D=%lld M=%lld%s%s", op, (long long)D, (long long)M, kinds[t->kind], t->kind && t->sole ? " sole" : "");
}

static void prof_print(cuda_ctx *c) {
    prof *f = &priv(c)->pf;
    prof_flush(c);
    if (!f->n_rows) return;
    double total = 0;
    for (int i = 0; i < f->n_rows; i++) total += f->rows[i].ms;
    fprintf(stderr, "cuda:%d profile (VSR_CUDA_PROFILE): %.3f ms in table calls\n%-48s %8s %11s %10s %6s\n", c->device,
            total, "op", "calls", "total ms", "mean us", "%");
    /* largest first */
    int idx[PROF_NAMES];
    for (int i = 0; i < f->n_rows; i++) idx[i] = i;
    for (int i = 1; i < f->n_rows; i++)
        for (int j = i; j > 0 && f->rows[idx[j]].ms > f->rows[idx[j - 1]].ms; j--) {
            int t = idx[j];
            idx[j] = idx[j - 1], idx[j - 1] = t;
        }
    for (int k = 0; k < f->n_rows; k++) {
        const prof_row *r = &f->rows[idx[k]];
        fprintf(stderr, "%-48s %8lld %11.3f %10.1f %6.2f\n", r->name, (long long)r->calls, r->ms,
                r->calls ? 1e3 * r->ms / (double)r->calls : 0.0, total > 0 ? 100.0 * r->ms / total : 0.0);
    }
}

/* Prints every live context's table (largest first) and starts them afresh. */
extern "C" void vsr_cuda_profile_report(void) {
    for (int i = 0; i < LIVE_CTX; i++)
        if (live_ctx[i]) {
            prof *f = &priv(live_ctx[i])->pf;
            prof_print(live_ctx[i]);
            memset(f->rows, 0, sizeof f->rows);
            f->n_rows = 0;
        }
}

/* ---- recorded forwards (CUDA graphs) ---- */

static void graph_drop(graph_ent *e) {
    if (e->exec) cudaGraphExecDestroy(e->exec);
    memset(e, 0, sizeof *e);
}

static vsr_status ids_stage(cuda_ctx *c, const int32_t *ids, int64_t n, vsr_err *err) {
    cuda_ctx_priv *p = priv(c);
    vsr_status st;
    /* the last forward's copy out of the pinned buffer must be done (graph_begin waits before a recording) */
    if (p->ids_host && !p->capturing &&
        (st = cuda_check(c, cudaEventSynchronize(p->ids_ev), "token ids: wait for the last copy", err)))
        return st;
    if ((size_t)n > p->ids_cap) {
        size_t cap = (size_t)n + (size_t)n / 2 + 256;
        if ((st = cuda_check(c, cudaStreamSynchronize(c->stream), "token ids: synchronize", err))) return st;
        cudaFreeHost(p->ids_host), cudaFree(p->ids_dev);
        p->ids_host = NULL, p->ids_dev = NULL, p->ids_cap = 0;
        c->mem_gen++;
        if ((st = cuda_check(c, cudaHostAlloc((void **)&p->ids_host, cap * sizeof(int32_t), cudaHostAllocDefault),
                             "token ids: pinned buffer", err)) ||
            (st = cuda_check(c, cudaMalloc((void **)&p->ids_dev, cap * sizeof(int32_t)), "token ids: device buffer", err)))
            return st;
        p->ids_cap = cap;
    }
    memcpy(p->ids_host, ids, sizeof(int32_t) * (size_t)n);
    return VSR_OK;
}

static vsr_status cu_graph_begin(void *ctx, uint64_t key, const int32_t *ids, int64_t n, int *replayed, vsr_err *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    cuda_ctx_priv *p = priv(c);
    ENTER(c);
    *replayed = 0;
    if (vsr_cuda_graphs_off > 0 || vsr_cuda_profile_on > 0 || p->capturing) return VSR_OK;
    key ^= (uint64_t)n * 0x9e3779b97f4a7c15ull;
    graph_ent *e = NULL;
    for (int i = 0; i < GRAPHS; i++)
        if (p->g[i].exec && p->g[i].key == key) e = &p->g[i];
    vsr_status st;
    if (e && e->gen == c->mem_gen && e->n_ids == n) {
        for (int64_t t = 0; t < n; t++)
            if (ids[t] < 0 || ids[t] >= e->vocab)
                return vsr_err_set(err, VSR_E_INVALID, "token id %d at position %lld is outside the vocabulary [0, %lld)",
                                   ids[t], (long long)t, (long long)e->vocab);
        if ((st = ids_stage(c, ids, n, err))) return st;
        if (e->gen != c->mem_gen) goto record; /* staging moved the id buffers */
        if ((st = cuda_check(c, cudaGraphLaunch(e->exec, c->stream), "graph launch", err))) return st;
        cudaEventRecord(p->ids_ev, c->stream);
        e->last_use = ++p->tick;
        vsr_cuda_stat_graph_replays++;
        *replayed = 1;
        return VSR_OK;
    }
record:
    if (e) graph_drop(e); /* recorded before a workspace moved */
    for (int i = 0; i < GRAPHS; i++)
        if (p->never[i] == key) return VSR_OK;
    int seen = 0;
    for (int i = 0; i < GRAPH_SEEN; i++) seen |= p->seen[i] == key;
    if (!seen) {
        p->seen[p->seen_next] = key;
        p->seen_next = (p->seen_next + 1) % GRAPH_SEEN;
        return VSR_OK; /* first sighting: run as usual (sizes workspaces, plans, autotune) */
    }
    if (p->ids_host && (st = cuda_check(c, cudaEventSynchronize(p->ids_ev), "token ids: wait", err))) return st;
    if ((st = cuda_check(c, cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal), "graph capture", err)))
        return st;
    p->capturing = 1, p->cap_key = key, p->cap_n = n;
    return VSR_OK;
}

static vsr_status cu_graph_end(void *ctx, vsr_status ops_status, int *rerun, vsr_err *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    cuda_ctx_priv *p = priv(c);
    ENTER(c);
    *rerun = 0;
    if (!p->capturing) return VSR_OK;
    p->capturing = 0;
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(c->stream, &g);
    cudaGraphExec_t x = NULL;
    if (e == cudaSuccess && ops_status == VSR_OK && g) e = cudaGraphInstantiate(&x, g, 0);
    if (g) cudaGraphDestroy(g);
    if (e != cudaSuccess || ops_status != VSR_OK || !x) {
        /* not recordable (or an op failed): nothing ran; the model runs the ops unrecorded */
        (void)cudaGetLastError();
        if (x) cudaGraphExecDestroy(x);
        p->never[p->never_next] = p->cap_key;
        p->never_next = (p->never_next + 1) % GRAPHS;
        *rerun = 1;
        return VSR_OK;
    }
    graph_ent *slot = &p->g[0];
    for (int i = 0; i < GRAPHS; i++) {
        if (!p->g[i].exec) {
            slot = &p->g[i];
            break;
        }
        if (p->g[i].last_use < slot->last_use) slot = &p->g[i];
    }
    graph_drop(slot);
    *slot = (graph_ent){p->cap_key, ++p->tick, c->mem_gen, x, 0, p->embed_vocab};
    slot->n_ids = p->cap_n;
    vsr_cuda_stat_graph_records++;
    vsr_status st = cuda_check(c, cudaGraphLaunch(x, c->stream), "graph launch", err);
    if (!st) cudaEventRecord(p->ids_ev, c->stream);
    return st;
}

/* ---- the table ---- */

static void cu_destroy(void *ctx) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    if (!c) return;
    cudaSetDevice(c->device);
    if (c->stream) cudaStreamSynchronize(c->stream);
    cuda_ctx_priv *p = priv(c);
    for (int i = 0; i < LIVE_CTX; i++)
        if (live_ctx[i] == c) live_ctx[i] = NULL;
    if (p->pf.made) {
        prof_print(c);
        for (int i = 0; i < 2 * PROF_PAIRS; i++) cudaEventDestroy(p->pf.ev[i]);
    }
    if (p->capturing) {
        cudaGraph_t g = NULL;
        cudaStreamEndCapture(c->stream, &g);
        if (g) cudaGraphDestroy(g);
    }
    for (int i = 0; i < GRAPHS; i++) graph_drop(&p->g[i]);
    if (p->ids_ev) cudaEventDestroy(p->ids_ev);
    cudaFreeHost(p->ids_host);
    cudaFree(p->ids_dev);
    cudaFree(p->tw_buf);
    cuda_quant_ctx_free(c);
    lt_cache *lc = &((cuda_ctx_priv *)c)->lt;
    for (int i = 0; i < LT_PLANS; i++) plan_destroy(&lc->p[i]);
    if (c->lt) cublasLtDestroy(c->lt);
    cudaFree(c->lt_ws);
    cudaFree(c->scratch);
    cudaFree(c->scratch2);
    if (c->stream) cudaStreamDestroy(c->stream);
    free(c);
}

static vsr_status cu_buf_alloc(void *ctx, size_t bytes, void **out, vsr_err *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    ENTER(c);
    void *p = NULL;
    size_t n = (bytes + 255) & ~(size_t)255;
    vsr_status st = cuda_check(c, cudaMalloc(&p, n ? n : 256), "cudaMalloc", err);
    if (st) return vsr_err_prefix(err, "cuda:%d: cannot allocate %zu bytes of activations", c->device, bytes);
    /* a fresh buffer holds zeros, as on the CPU where tests rely on no garbage */
    if ((st = cuda_check(c, cudaMemsetAsync(p, 0, n ? n : 256, c->stream), "cudaMemsetAsync", err))) {
        cudaFree(p);
        return st;
    }
    *out = p;
    return VSR_OK;
}

static void cu_buf_free(void *ctx, void *buf) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    if (!buf) return;
    cudaSetDevice(c->device);
    cudaStreamSynchronize(c->stream); /* kernels may still read it */
    cudaFree(buf);
    /* the twin or a recorded forward may point into it */
    priv(c)->tw.kind = TW_NONE, priv(c)->req_x = NULL;
    c->mem_gen++;
}

static vsr_status cu_buf_set(void *ctx, void *dst, const void *src, size_t n, vsr_err *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    ENTER(c);
    twin_clobber(c, dst, n);
    return cuda_check(c, cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, c->stream), "buf_set", err);
}

static vsr_status cu_buf_get(void *ctx, void *dst, const void *src, size_t n, vsr_err *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    ENTER(c);
    vsr_status st = kp_guard(c, src, n, "buf_get", err);
    if (st) return st;
    st = cuda_check(c, cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, c->stream), "buf_get", err);
    if (st) return st;
    st = cuda_check(c, cudaStreamSynchronize(c->stream), "buf_get: synchronize (a kernel before it failed)", err);
    prof_flush(c);
    return st;
}

static vsr_status cu_weight_upload(void *ctx, const vsr_weight_view *v, vsr_bweight **out, vsr_err *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    ENTER(c);
    const char *nm = v->name ? v->name : "(weight)";
    if ((unsigned)v->kind >= VSR_WK_COUNT)
        return vsr_err_set(err, VSR_E_INVALID, "%s: unknown weight kind %d", nm, (int)v->kind);
    if (v->kind == VSR_WK_NVFP4)
        return vsr_err_set(err, VSR_E_DEVICE, "%s: %s; cuda:%d (%s, compute capability %d.%d) has no FP4 tensor "
                           "cores", nm, VSR_REFUSAL_NVFP4, c->device, c->dev_name, c->cc_major, c->cc_minor);
    if (v->N <= 0 || v->K <= 0 || !v->w)
        return vsr_err_set(err, VSR_E_INVALID, "%s: empty weight [%lld, %lld]", nm, (long long)v->N, (long long)v->K);
    vsr_bweight *b = (vsr_bweight *)calloc(1, sizeof *b);
    if (!b) return vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory", nm);
    b->v = *v;
    snprintf(b->name, sizeof b->name, "%s", nm);
    b->v.name = b->name;
    vsr_status st = VSR_OK;
    uint64_t NK = (uint64_t)v->N * (uint64_t)v->K;
    switch (v->kind) {
    case VSR_WK_BF16:
    case VSR_WK_F32: {
        size_t bytes = NK * (v->kind == VSR_WK_BF16 ? 2 : 4);
        st = cuda_upload_bytes(c, v->w, bytes, nm, &b->w, err);
        b->bytes = bytes;
        break;
    }
    case VSR_WK_INT4: st = cuda_int4_upload(c, v, b, err); break;
    case VSR_WK_FP8:
        st = cuda_fp8_upload(c, v, b, err);
        if (!st) priv(c)->n_fp8_w++;
        break;
    default: break;
    }
    b->v.w = b->v.scale = b->v.zp = NULL, b->v.g_idx = NULL; /* host views are not kept */
    if (st) {
        cudaFree(b->w), cudaFree(b->scale), cudaFree(b->zp), cudaFree(b->g_idx);
        free(b);
        return st;
    }
    *out = b;
    return VSR_OK;
}

/* Parts of one kind and K stacked along N into one weight (the fused gate|up projection). BF16 and
 * F32 are copied part by part into one device allocation; FP8 and int4 are stacked on the host
 * (weights, scales, zero points: int4 zero points are packed 8 rows to a word, so each part's N
 * must be a multiple of 8, and act-order parts must share g_idx) and uploaded by their hook. */
static vsr_status cu_weight_upload_cat(void *ctx, const vsr_weight_view *parts, int n, vsr_bweight **out,
                                       vsr_err *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    ENTER(c);
    if (n < 1) return vsr_err_set(err, VSR_E_INVALID, "weight_upload_cat: no parts");
    const vsr_weight_view *p0 = &parts[0];
    vsr_weight_view v = *p0;
    char name[256];
    snprintf(name, sizeof name, "%s", p0->name ? p0->name : "(weight)");
    v.N = 0;
    for (int i = 0; i < n; i++) {
        const vsr_weight_view *p = &parts[i];
        if (p->kind != p0->kind || p->K != p0->K || p->N <= 0 || !p->w)
            return vsr_err_set(err, VSR_E_UNSUPPORTED, "%s: parts of different kinds or widths cannot be stacked", name);
        if (p->kind == VSR_WK_INT4 &&
            (p->group != p0->group || !p->zp != !p0->zp || (p->zp && p->N % 8) || !p->g_idx != !p0->g_idx ||
             (p->g_idx && memcmp(p->g_idx, p0->g_idx, sizeof(int32_t) * (size_t)p->K))))
            return vsr_err_set(err, VSR_E_UNSUPPORTED, "%s: int4 parts with different groups, zero points or g_idx "
                               "cannot be stacked", name);
        if (i) snprintf(name + strlen(name), sizeof name - strlen(name), "+%s", p->name ? p->name : "?");
        v.N += p->N;
    }
    v.name = name;
    const int64_t K = v.K;
    if (v.kind == VSR_WK_BF16 || v.kind == VSR_WK_F32) {
        size_t es = v.kind == VSR_WK_BF16 ? 2 : 4;
        vsr_bweight *b = (vsr_bweight *)calloc(1, sizeof *b);
        if (!b) return vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory", name);
        b->v = v;
        snprintf(b->name, sizeof b->name, "%s", name);
        b->v.name = b->name;
        b->bytes = (uint64_t)v.N * (uint64_t)K * es;
        vsr_status st = cuda_check(c, cudaMalloc(&b->w, b->bytes), "cudaMalloc", err);
        for (int64_t i = 0, row = 0; !st && i < n; row += parts[i].N, i++)
            st = cuda_check(c, cudaMemcpy((char *)b->w + (size_t)row * (size_t)K * es, parts[i].w,
                                          (size_t)parts[i].N * (size_t)K * es, cudaMemcpyHostToDevice),
                            "weight upload", err);
        b->v.w = NULL;
        if (st) {
            cudaFree(b->w);
            free(b);
            return vsr_err_prefix(err, "%s", name);
        }
        *out = b;
        return VSR_OK;
    }
    if (v.kind != VSR_WK_FP8 && v.kind != VSR_WK_INT4)
        return vsr_err_set(err, VSR_E_UNSUPPORTED, "%s: %s parts are not stacked", name, wkind_names_cuda[v.kind]);
    /* host stacks: [rows, row bytes] for weights, scales and zero points */
    int64_t G = v.kind == VSR_WK_INT4 ? (v.group > 0 ? (K + v.group - 1) / v.group : 1) : 1;
    size_t wrow = v.kind == VSR_WK_FP8 ? (size_t)K : (size_t)(K / 8) * 4, srow = 2 * (size_t)G, zrow = 4 * (size_t)G;
    uint8_t *w = (uint8_t *)malloc(wrow * (size_t)v.N), *sc = (uint8_t *)malloc(srow * (size_t)v.N);
    uint8_t *zp = v.zp ? (uint8_t *)malloc(zrow * (size_t)(v.N / 8)) : NULL;
    if (!w || !sc || (v.zp && !zp)) {
        free(w), free(sc), free(zp);
        return vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory stacking", name);
    }
    for (int64_t i = 0, row = 0; i < n; row += parts[i].N, i++) {
        memcpy(w + wrow * (size_t)row, parts[i].w, wrow * (size_t)parts[i].N);
        memcpy(sc + srow * (size_t)row, parts[i].scale, srow * (size_t)parts[i].N);
        if (zp) memcpy(zp + zrow * (size_t)(row / 8), parts[i].zp, zrow * (size_t)(parts[i].N / 8));
    }
    v.w = w, v.scale = sc, v.zp = zp;
    vsr_status st = cu_weight_upload(ctx, &v, out, err);
    free(w), free(sc), free(zp);
    return st;
}

static void cu_weight_free(void *ctx, vsr_bweight *w) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    if (!w) return;
    cudaSetDevice(c->device);
    cudaStreamSynchronize(c->stream);
    if (w->v.kind == VSR_WK_FP8) priv(c)->n_fp8_w--;
    if (w->q) cuda_quant_release(c, w);
    cudaFree(w->w), cudaFree(w->scale), cudaFree(w->zp), cudaFree(w->g_idx);
    free(w);
}

static uint64_t cu_weight_bytes(void *ctx, const vsr_bweight *w) {
    (void)ctx;
    return w ? w->bytes : 0;
}

static vsr_status cu_vec_upload(void *ctx, const float *host, int64_t n, float **out, vsr_err *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    ENTER(c);
    void *p = NULL;
    vsr_status st = cuda_upload_bytes(c, host, (size_t)n * sizeof(float), "vector", &p, err);
    if (st) return st;
    *out = (float *)p;
    return VSR_OK;
}

static vsr_status cu_embed(void *ctx, const vsr_bweight *table, const int32_t *ids, int64_t n, float *y, vsr_err *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    ENTER(c);
    if (table->v.kind != VSR_WK_BF16)
        return vsr_err_set(err, VSR_E_UNSUPPORTED, "%s: the embedding table must be BF16 (found %s)", table->name,
                           wkind_names_cuda[table->v.kind]);
    for (int64_t t = 0; t < n; t++)
        if (ids[t] < 0 || ids[t] >= table->v.N)
            return vsr_err_set(err, VSR_E_INVALID, "token id %d at position %lld is outside the vocabulary [0, %lld)",
                               ids[t], (long long)t, (long long)table->v.N);
    if (n <= 0) return VSR_OK;
    PROF(c, "embed");
    twin_clobber(c, y, sizeof(float) * (size_t)(n * table->v.K));
    /* through a pinned buffer: a recorded forward replays this copy with the next request's ids */
    vsr_status st = ids_stage(c, ids, n, err);
    if (st) return st;
    cuda_ctx_priv *p = priv(c);
    if ((st = cuda_check(c, cudaMemcpyAsync(p->ids_dev, p->ids_host, sizeof(int32_t) * (size_t)n,
                                            cudaMemcpyHostToDevice, c->stream),
                         "embed: token ids to device", err)))
        return st;
    if (!p->capturing) cudaEventRecord(p->ids_ev, c->stream);
    p->embed_vocab = table->v.N;
    dim3 grid(blocks_for(table->v.K, 256) > 8 ? 8 : blocks_for(table->v.K, 256), (unsigned)n);
    k_embed<<<grid, 256, 0, c->stream>>>((const __nv_bfloat16 *)table->w, p->ids_dev, table->v.K, y);
    return cuda_check_launch(c, "embed", err);
}

/* A BF16 linear's input: the twin of x when there is one, else x converted into the scratch. */
static vsr_status bf16_input(cuda_ctx *c, const float *x, int64_t M, int64_t K, const __nv_bfloat16 **xb, vsr_err *err) {
    *xb = (const __nv_bfloat16 *)twin_find(c, x, M, K, TW_BF16, NULL);
    if (*xb) return VSR_OK;
    void *b;
    vsr_status st;
    if ((st = cuda_scratch(c, sizeof(__nv_bfloat16) * (size_t)(M * K), &b, err)) ||
        (st = cuda_f32_to_bf16(c, x, M * K, (__nv_bfloat16 *)b, err)))
        return st;
    *xb = (const __nv_bfloat16 *)b;
    return VSR_OK;
}

/* The linear declared by keep_product_bf16: y's product written only in BF16 (kp_buf), where the
 * weight's GEMM can write BF16 (BF16; FP8 where its path makes a BF16 product); *kept = 0 else. */
static vsr_status linear_keep_bf16(cuda_ctx *c, const float *x, int64_t M, const vsr_bweight *w, float *y, int *kept,
                                   vsr_err *err) {
    cuda_ctx_priv *p = priv(c);
    const int64_t N = w->v.N, K = w->v.K;
    *kept = 0;
    if (w->v.kind != VSR_WK_BF16 && w->v.kind != VSR_WK_FP8) return VSR_OK;
    twin_clobber(c, y, sizeof(float) * (size_t)(M * N)); /* y is replaced: twins and kept products of it go */
    p->kp_src = NULL;                                    /* one kept product at a time */
    vsr_status st = grow(c, &p->kp_buf, &p->kp_bytes, sizeof(__nv_bfloat16) * (size_t)(M * N), err);
    if (st) return st;
    if (w->v.kind == VSR_WK_BF16) {
        const __nv_bfloat16 *xb;
        if ((st = bf16_input(c, x, M, K, &xb, err)) ||
            (st = cuda_gemm_bf16_out_bf16(c, xb, M, (const __nv_bfloat16 *)w->w, N, K, (__nv_bfloat16 *)p->kp_buf, err)))
            return st;
    } else {
        const float *sx = NULL;
        const void *xq = twin_find(c, x, M, K, TW_FP8, &sx);
        int ran = 0;
        if ((st = cuda_fp8_linear_bf16_to(c, x, (const uint8_t *)xq, sx, M, w, (__nv_bfloat16 *)p->kp_buf, &ran, err)))
            return st;
        if (!ran) return VSR_OK;
    }
    p->kp_src = y, p->kp_rows = M, p->kp_N = N;
    *kept = 1;
    return VSR_OK;
}

static vsr_status cu_linear(void *ctx, const float *x, int64_t M, const vsr_bweight *w, float *y, int accumulate,
                            vsr_err *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    ENTER(c);
    if (M <= 0) return VSR_OK;
    char pname[72] = "";
    if (vsr_cuda_profile_on > 0)
        snprintf(pname, sizeof pname, "linear %s %lld->%lld M=%lld%s", wkind_names_cuda[w->v.kind], (long long)w->v.K,
                 (long long)w->v.N, (long long)M, accumulate ? " +=" : "");
    PROF(c, pname);
    vsr_status st;
    cuda_ctx_priv *pv = priv(c);
    const int keep = pv->kp_req == y && pv->kp_req_rows == M && pv->kp_req_N == w->v.N && !accumulate;
    pv->kp_req = NULL; /* a declaration is for the next linear only */
    if ((st = sole_twin_readable(c, x, M, w, err)) ||
        (st = kp_guard(c, x, sizeof(float) * (size_t)(M * w->v.K), w->name, err)) ||
        (accumulate && (st = kp_guard(c, y, sizeof(float) * (size_t)(M * w->v.N), w->name, err))))
        return st;
    if (keep) {
        int kept = 0;
        if ((st = linear_keep_bf16(c, x, M, w, y, &kept, err))) return vsr_err_prefix(err, "%s", w->name);
        if (kept) return VSR_OK;
    }
    switch (w->v.kind) {
    case VSR_WK_BF16: {
        const __nv_bfloat16 *xb;
        if ((st = bf16_input(c, x, M, w->v.K, &xb, err))) return st;
        st = cuda_gemm_bf16(c, xb, M, (const __nv_bfloat16 *)w->w, w->v.N, w->v.K, y, accumulate, err);
        break;
    }
    case VSR_WK_F32: st = lt_gemm(c, CUDA_R_32F, x, M, w->w, w->v.N, w->v.K, CUDA_R_32F, y, accumulate, err); break;
    case VSR_WK_INT4: {
        const void *xb = twin_find(c, x, M, w->v.K, TW_BF16, NULL);
        st = xb ? cuda_int4_linear_bf16(c, (const __nv_bfloat16 *)xb, M, w, y, accumulate, err)
                : cuda_int4_linear(c, x, M, w, y, accumulate, err);
        break;
    }
    case VSR_WK_FP8: {
        const float *sx = NULL;
        const void *xq = twin_find(c, x, M, w->v.K, TW_FP8, &sx);
        st = xq ? cuda_fp8_linear_prequant(c, (const uint8_t *)xq, sx, M, w, y, accumulate, err)
                : cuda_fp8_linear(c, x, M, w, y, accumulate, err);
        break;
    }
    default:
        return vsr_err_set(err, VSR_E_DEVICE, "%s: %s weights cannot run on cuda:%d", w->name,
                           wkind_names_cuda[w->v.kind], c->device);
    }
    twin_clobber(c, y, sizeof(float) * (size_t)(M * w->v.N));
    if (st) return vsr_err_prefix(err, "%s", w->name);
    return VSR_OK;
}

/* k_rmsnorm_row with the twin t asks for (yo: y, or NULL where the twin is the only copy) */
template <int VEC>
static void rmsnorm_row_launch(cuda_ctx *c, const twin &t, unsigned M, int thr, const float *x, int64_t xs, int D,
                               const float *w, float off, float eps, float *y, float *yo, int64_t ys, void *tw,
                               int64_t twld) {
    if (t.kind == TW_FP8)
        k_rmsnorm_row<TW_FP8, VEC><<<M, thr, 0, c->stream>>>(x, xs, D, w, off, eps, yo, ys, tw, twld, t.sx);
    else if (t.kind == TW_BF16)
        k_rmsnorm_row<TW_BF16, VEC><<<M, thr, 0, c->stream>>>(x, xs, D, w, off, eps, yo, ys, tw, twld, NULL);
    else
        k_rmsnorm_row<TW_NONE, VEC><<<M, thr, 0, c->stream>>>(x, xs, D, w, off, eps, y, ys, NULL, 0, NULL);
}

static vsr_status cu_rmsnorm(void *ctx, const float *x, int64_t xs, int64_t M, int64_t D, const float *w, float off,
                             float eps, float *y, int64_t ys, vsr_err *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    ENTER(c);
    if (M <= 0) return VSR_OK;
    vsr_status st = kp_guard(c, x, sizeof(float) * (size_t)((M - 1) * xs + D), "rmsnorm", err);
    if (st) return st;
    int rowk = D % 4 == 0 && D <= 256 * 4 * RN_VEC && xs % 4 == 0 && ys % 4 == 0 && ((uintptr_t)x & 15) == 0 &&
               ((uintptr_t)y & 15) == 0 && ((uintptr_t)w & 15) == 0 && M <= 0x7fffffff;
    twin t;
    if ((st = twin_start(c, y, ys == D ? M * D : 0, rowk, rowk, &t, err))) return st;
    char pname[72] = "";
    if (vsr_cuda_profile_on > 0) prof_producer_name(pname, sizeof pname, "rmsnorm", D, M, &t);
    PROF(c, pname);
    if (!rowk) {
        k_rmsnorm<<<blocks_for(M, 8), 256, 0, c->stream>>>(x, xs, M, D, w, off, eps, y, ys);
        twin_clobber(c, y, sizeof(float) * (size_t)((M - 1) * ys + D));
        return cuda_check_launch(c, "rmsnorm", err);
    }
    /* narrow rows: a warp per row, from 128 columns (a whole warp of float4s). At 64 its output differed from the
     * row kernel's in one test on the H200 (session 7, call 5): ptxas had fused the two kernels' sums of squares
     * in different orders, which sq4 now spells out; rows narrower than 128 stay on the row kernel until that
     * has run on a GPU. */
    if (t.kind == TW_NONE && D >= 128 && D <= 32 * 4 * 4) {
        const unsigned nb = (unsigned)((M + 7) / 8);
        if (D <= 128) k_rmsnorm_warp<1><<<nb, 256, 0, c->stream>>>(x, xs, M, (int)D, w, off, eps, y, ys);
        else if (D <= 256) k_rmsnorm_warp<2><<<nb, 256, 0, c->stream>>>(x, xs, M, (int)D, w, off, eps, y, ys);
        else k_rmsnorm_warp<4><<<nb, 256, 0, c->stream>>>(x, xs, M, (int)D, w, off, eps, y, ys);
        if ((st = cuda_check_launch(c, "rmsnorm", err))) return st;
        if (ys != D) twin_clobber(c, y, sizeof(float) * (size_t)((M - 1) * ys + D));
        return VSR_OK;
    }
    /* a block per row: as many warps as the row has float4s, up to 8 */
    int thr = (int)((D / 4 + 31) / 32 * 32);
    thr = thr > 256 ? 256 : thr;
    if ((int64_t)thr * 4 * RN_VEC < D) thr = 256;
    void *tw = t.data;
    int64_t twld = t.kind == TW_FP8 ? t.Kp : D;
    float *yo = t.sole ? NULL : y; /* the twin alone when its readers are all that read y */
    const int need = (int)((D / 4 + thr - 1) / thr); /* float4 a thread */
    if (need <= 4) rmsnorm_row_launch<4>(c, t, (unsigned)M, thr, x, xs, (int)D, w, off, eps, y, yo, ys, tw, twld);
    else if (need == 5) rmsnorm_row_launch<5>(c, t, (unsigned)M, thr, x, xs, (int)D, w, off, eps, y, yo, ys, tw, twld);
    else rmsnorm_row_launch<RN_VEC>(c, t, (unsigned)M, thr, x, xs, (int)D, w, off, eps, y, yo, ys, tw, twld);
    if ((st = cuda_check_launch(c, "rmsnorm", err))) return st;
    if (ys != D) twin_clobber(c, y, sizeof(float) * (size_t)((M - 1) * ys + D));
    twin_commit(c, &t);
    return VSR_OK;
}

/* k_rmsnorm_gated_tok with the twin t asks for: none, BF16 or FP8 (CL = 1 only); CL CTAs a token; rows a warp
 * HPW = 3 for tokens of up to 48 rows (the 27B layer's: the FP8 twin's CTA then fits three a multiprocessor), else
 * GT_HPW */
#define GT_CL 4
template <typename TZ, int CL, int HPW>
static void gated_tok_launch_hpw(cuda_ctx *c, unsigned nt, const float *x, const TZ *z, int zh, int64_t zs, int M,
                                 int nh, int D, const float *w, float eps, float *yo, const twin &t) {
    const unsigned th = GT_W * 32 / CL, nb = nt * CL;
    if (t.kind == TW_FP8)
        k_rmsnorm_gated_tok<TZ, TW_FP8, 1, HPW><<<nt, GT_W * 32, 0, c->stream>>>(x, z, zh, zs, M, nh, D, w, eps, yo, t.data,
                                                                               t.Kp, t.sx);
    else if (t.kind == TW_BF16)
        k_rmsnorm_gated_tok<TZ, TW_BF16, CL, HPW><<<nb, th, 0, c->stream>>>(x, z, zh, zs, M, nh, D, w, eps, yo, t.data, 0,
                                                                          NULL);
    else
        k_rmsnorm_gated_tok<TZ, TW_NONE, CL, HPW><<<nb, th, 0, c->stream>>>(x, z, zh, zs, M, nh, D, w, eps, yo, NULL, 0,
                                                                          NULL);
}
template <typename TZ, int CL>
static void gated_tok_launch(cuda_ctx *c, unsigned nt, const float *x, const TZ *z, int zh, int64_t zs, int M, int nh,
                             int D, const float *w, float eps, float *yo, const twin &t) {
    if (nh <= GT_W * 3) gated_tok_launch_hpw<TZ, CL, 3>(c, nt, x, z, zh, zs, M, nh, D, w, eps, yo, t);
    else gated_tok_launch_hpw<TZ, CL, GT_HPW>(c, nt, x, z, zh, zs, M, nh, D, w, eps, yo, t);
}

/* VSR_CUDA_GATED_TOK=0: rmsnorm_gated by the row kernel, no FP8 twin (A/B); cuda_gated_set_tok for the test:
 * 0 off, 1 the default (by the grid's size), 2 the token kernel wherever it applies, 3 as 2 in whole-token CTAs
 * also without an FP8 twin (the kernel before quarter-token CTAs) */
static int g_gated_tok_on = -1;
extern "C" int cuda_gated_set_tok(int on) { return cuda_env_switch_set("VSR_CUDA_GATED_TOK", 1, &g_gated_tok_on, on, 3); }

static vsr_status cu_rmsnorm_gated(void *ctx, const float *x, const float *z, int64_t zh, int64_t zs, int64_t M,
                                   int64_t D, const float *w, float eps, float *y, vsr_err *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    ENTER(c);
    if (zh < 1 || zs < zh * D)
        return vsr_err_set(err, VSR_E_INVALID, "rmsnorm_gated: z holds %lld rows of %lld per token at stride %lld",
                           (long long)zh, (long long)D, (long long)zs);
    if (M <= 0) return VSR_OK;
    /* z may be a stacked projection's product kept in BF16 (keep_product_bf16) */
    const __nv_bfloat16 *zb = kp_find(c, z, (M - 1) / zh + 1, zs, zh * D);
    vsr_status st;
    if ((st = kp_guard(c, x, sizeof(float) * (size_t)(M * D), "rmsnorm_gated", err)) ||
        (!zb && (st = kp_guard(c, z, sizeof(float) * (size_t)(((M - 1) / zh) * zs + zh * D), "rmsnorm_gated", err))))
        return st;
    int vec = D % 4 == 0 && D <= 32 * 4 * 4 && zs % 4 == 0 && ((uintptr_t)x & 15) == 0 &&
              ((uintptr_t)(zb ? (const void *)zb : (const void *)z) & (zb ? 7 : 15)) == 0 && ((uintptr_t)w & 15) == 0 &&
              ((uintptr_t)y & 15) == 0;
    /* the token kernel: rows grouped by the declared twin's row (a token's heads; FP8 twins need that), else
     * by 32. Without an FP8 twin to make it takes only grids of 8 blocks a multiprocessor or more: at 27B
     * 3 x 128 (384 blocks) the row kernel is faster (bench_cuda, call 7: 10.2 against 10.8 us). */
    const cuda_ctx_priv *pv = priv(c);
    const int64_t dK = pv->req_x == y && pv->req_rows * pv->req_K == M * D ? pv->req_K : 0;
    const int mode = cuda_env_mode("VSR_CUDA_GATED_TOK", 1, 3, &g_gated_tok_on); /* 0 off, 1 by size, 2 always, 3 always in whole-token CTAs */
    int tok = mode && vec && D <= 128 && M < 0x7fffffff && zh < 0x7fffffff;
    const int64_t nh = dK > 0 && dK % D == 0 && dK / D <= GT_W * GT_HPW ? dK / D : 32;
    const int tok_fp8 = tok && dK == nh * D && pv->n_fp8_w > 0;
    if (mode == 1 && !tok_fp8 && (M + nh - 1) / nh < 8LL * c->sm_count) tok = 0;
    twin t;
    if ((st = twin_start(c, y, M * D, tok && dK == nh * D, 1, &t, err))) return st;
    char pname[72] = "";
    if (vsr_cuda_profile_on > 0) prof_producer_name(pname, sizeof pname, tok ? "rmsnorm_gated by token" : "rmsnorm_gated",
                                                    D, M, &t);
    PROF(c, pname);
    float *yo = t.sole ? NULL : y;
    __nv_bfloat16 *tb = (__nv_bfloat16 *)t.data;
    const unsigned nb = blocks_for(M, 8);
    if (tok) {
        const unsigned nt = (unsigned)((M + nh - 1) / nh);
        /* CTAs of a quarter token, but whole tokens for an FP8 twin (its amax over a cluster of four quarter-token
         * CTAs was slower: 104 against 94 us at 27B 8 x 512, session 7 call 2) and under mode 3 (A/B) */
        const bool quarter = mode != 3 && t.kind != TW_FP8;
        if (quarter && zb) gated_tok_launch<__nv_bfloat16, GT_CL>(c, nt, x, zb, (int)zh, zs, (int)M, (int)nh, (int)D, w, eps, yo, t);
        else if (quarter) gated_tok_launch<float, GT_CL>(c, nt, x, z, (int)zh, zs, (int)M, (int)nh, (int)D, w, eps, yo, t);
        else if (zb) gated_tok_launch<__nv_bfloat16, 1>(c, nt, x, zb, (int)zh, zs, (int)M, (int)nh, (int)D, w, eps, yo, t);
        else gated_tok_launch<float, 1>(c, nt, x, z, (int)zh, zs, (int)M, (int)nh, (int)D, w, eps, yo, t);
    } else if (vec && zb) k_rmsnorm_gated4<<<nb, 256, 0, c->stream>>>(x, zb, zh, zs, M, (int)D, w, eps, yo, tb);
    else if (vec) k_rmsnorm_gated4<<<nb, 256, 0, c->stream>>>(x, z, zh, zs, M, (int)D, w, eps, yo, tb);
    else if (zb) k_rmsnorm_gated<<<nb, 256, 0, c->stream>>>(x, zb, zh, zs, M, D, w, eps, yo, tb);
    else k_rmsnorm_gated<<<nb, 256, 0, c->stream>>>(x, z, zh, zs, M, D, w, eps, yo, tb);
    if ((st = cuda_check_launch(c, "rmsnorm_gated", err))) return st;
    twin_commit(c, &t);
    return VSR_OK;
}

static vsr_status cu_conv1d_silu(void *ctx, const float *x, int64_t xs, const vsr_segs *seg, int64_t C, const float *w,
                                 int Kc, float *y, vsr_err *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    ENTER(c);
    PROF(c, "conv1d_silu");
    int64_t rows = seg->n > 0 ? seg->start[seg->n - 1] + seg->len[seg->n - 1] : 0;
    twin_clobber(c, y, sizeof(float) * (size_t)(rows > 0 ? rows * C : 0));
    if (xs < C)
        return vsr_err_set(err, VSR_E_INVALID, "conv1d_silu: row stride %lld is less than the %lld channels",
                           (long long)xs, (long long)C);
    if (rows <= 0) return VSR_OK;
    /* x may be a stacked projection's product kept in BF16 (keep_product_bf16) */
    const __nv_bfloat16 *xb = kp_find(c, x, rows, xs, C);
    vsr_status st;
    if (!xb && (st = kp_guard(c, x, sizeof(float) * (size_t)((rows - 1) * xs + C), "conv1d_silu", err))) return st;
    return cuda_conv1d_silu(c, xb ? NULL : x, xb, xs, seg, C, w, Kc, y, err); /* conv1d.cu */
}

/* Chunked (WY/UT) gated delta rule on tensor cores (deltanet.cu); *taken = 0 for shapes it leaves to k_dn_scan */
extern "C" vsr_status cuda_deltanet_chunked(cuda_ctx *c, const float *qkv, int64_t qkv_stride, const float *b,
                                            const float *a, const float *A_log, const float *dt_bias,
                                            const vsr_segs *seg, int Hk, int Hv, int dk, int dv, float *out,
                                            int *taken, vsr_err *err);

/* b and a at row stride ba_stride -> contiguous [rows, Hv] each (the deltanet kernels read them so) */
template <typename TI>
__global__ void k_ba_compact(const TI *__restrict__ b, const TI *__restrict__ a, int64_t s, int64_t rows, int Hv,
                             float *__restrict__ bo, float *__restrict__ ao) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < rows * Hv; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / Hv, h = i % Hv;
        bo[i] = ldf(b + r * s + h), ao[i] = ldf(a + r * s + h);
    }
}

static vsr_status cu_deltanet(void *ctx, const float *qkv, int64_t qkv_stride, const float *b, const float *a,
                              int64_t ba_stride, const float *A_log, const float *dt_bias, const vsr_segs *seg, int Hk,
                              int Hv, int dk, int dv, float *state, float *out, vsr_err *err) {
    (void)state; /* the state lives in registers */
    cuda_ctx *c = (cuda_ctx *)ctx;
    ENTER(c);
    if (dk > 128 || dk <= 0 || dv <= 0 || Hk <= 0 || Hv % Hk)
        return vsr_err_set(err, VSR_E_UNSUPPORTED,
                           "cuda:%d: deltanet: key head dim up to 128 and value heads a multiple of key heads "
                           "(dk %d, dv %d, Hk %d, Hv %d)",
                           c->device, dk, dv, Hk, Hv);
    dsegs s;
    int64_t rows;
    vsr_status st = segs_to_dev(c, seg, "deltanet", &s, &rows, NULL, err);
    if (st || rows <= 0) return st;
    PROF(c, "deltanet");
    twin_clobber(c, out, sizeof(float) * (size_t)(rows * Hv * dv));
    if (ba_stride < Hv)
        return vsr_err_set(err, VSR_E_INVALID, "deltanet: b/a row stride %lld is less than the %d value heads",
                           (long long)ba_stride, Hv);
    /* b, a may be columns of a stacked projection's product kept in BF16 (keep_product_bf16) */
    const __nv_bfloat16 *bb = kp_find(c, b, rows, ba_stride, Hv), *ab = kp_find(c, a, rows, ba_stride, Hv);
    if ((st = kp_guard(c, qkv, sizeof(float) * (size_t)((rows - 1) * qkv_stride + (int64_t)(2 * Hk * dk + Hv * dv)),
                       "deltanet", err)) ||
        (!bb && (st = kp_guard(c, b, sizeof(float) * (size_t)((rows - 1) * ba_stride + Hv), "deltanet", err))) ||
        (!ab && (st = kp_guard(c, a, sizeof(float) * (size_t)((rows - 1) * ba_stride + Hv), "deltanet", err))))
        return st;
    if (ba_stride != Hv || bb || ab) { /* strided or BF16: compact them (rows x 2Hv floats) into scratch2 */
        void *ba;
        if ((st = cuda_scratch2(c, sizeof(float) * 2 * (size_t)(rows * Hv), &ba, err))) return st;
        float *bc = (float *)ba, *ac = bc + rows * Hv;
        const unsigned nb = blocks_for(rows * Hv, 256) > 1024 ? 1024 : blocks_for(rows * Hv, 256);
        if (bb && ab) k_ba_compact<<<nb, 256, 0, c->stream>>>(bb, ab, ba_stride, rows, Hv, bc, ac);
        else if (!bb && !ab) k_ba_compact<<<nb, 256, 0, c->stream>>>(b, a, ba_stride, rows, Hv, bc, ac);
        else
            return vsr_err_set(err, VSR_E_INTERNAL, "cuda:%d: deltanet: b and a must both or neither be a product "
                               "kept in BF16", c->device);
        if ((st = cuda_check_launch(c, "deltanet: b/a compaction", err))) return st;
        b = bc, a = ac;
    }
    int taken = 0;
    st = cuda_deltanet_chunked(c, qkv, qkv_stride, b, a, A_log, dt_bias, seg, Hk, Hv, dk, dv, out, &taken, err);
    if (st || taken) return st;
    size_t nqk = (size_t)rows * Hk * dk, nbh = (size_t)rows * Hv;
    void *scr;
    if ((st = cuda_scratch(c, sizeof(float) * (2 * nqk + 2 * nbh), &scr, err))) return st;
    float *qn = (float *)scr, *kn = qn + nqk, *beta = kn + nqk, *decay = beta + nbh;
    int64_t warps = rows * Hk * 2, threads = (int64_t)nbh;
    int64_t blocks = (warps + 7) / 8 > (threads + 255) / 256 ? (warps + 7) / 8 : (threads + 255) / 256;
    k_dn_prep<<<blocks_for(blocks * 256, 256), 256, 0, c->stream>>>(qkv, qkv_stride, b, a, A_log, dt_bias, rows, Hk, Hv,
                                                                   dk, qn, kn, beta, decay);
    if ((st = cuda_check_launch(c, "deltanet prep", err))) return st;
    int64_t nw = (int64_t)s.n * Hv * ((dv + 7) / 8);
    unsigned g = blocks_for(nw * 32, 128);
#define SCAN(R) k_dn_scan<R><<<g, 128, 0, c->stream>>>(qn, kn, beta, decay, qkv, qkv_stride, s, Hk, Hv, dk, dv, out)
    if (dk <= 16) SCAN(4);
    else if (dk <= 32) SCAN(8);
    else if (dk <= 64) SCAN(16);
    else SCAN(32);
#undef SCAN
    return cuda_check_launch(c, "deltanet scan", err);
}

static vsr_status cu_rope(void *ctx, float *x, int64_t xs, const vsr_segs *seg, int H, int64_t hs, int rot,
                          const float *cos_t, const float *sin_t, int64_t max_pos, vsr_err *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    ENTER(c);
    if (seg->n <= 0) return VSR_OK;
    for (int i = 0; i < seg->n; i++)
        if (seg->pos0[i] < 0 || seg->pos0[i] + seg->len[i] > max_pos)
            return vsr_err_set(err, VSR_E_INVALID, "rope: positions %lld..%lld exceed the table of %lld positions",
                               (long long)seg->pos0[i], (long long)(seg->pos0[i] + seg->len[i] - 1), (long long)max_pos);
    dsegs s;
    int64_t rows;
    vsr_status st = segs_to_dev(c, seg, "rope", &s, &rows, NULL, err);
    if (st || rows <= 0) return st;
    int half = rot / 2;
    if (half <= 0) return VSR_OK;
    PROF(c, "rope");
    if ((st = kp_guard(c, x, sizeof(float) * (size_t)((rows - 1) * xs + (H - 1) * hs + rot), "rope", err))) return st;
    twin_clobber(c, x, sizeof(float) * (size_t)((rows - 1) * xs + (H - 1) * hs + rot));
    dim3 grid(blocks_for((int64_t)H * half, 128) > 16 ? 16 : blocks_for((int64_t)H * half, 128), (unsigned)rows);
    k_rope<<<grid, 128, 0, c->stream>>>(x, xs, s, H, hs, half, cos_t, sin_t);
    return cuda_check_launch(c, "rope", err);
}

/* BF16 tensor-core flash attention (attention.cu); *taken = 0 for shapes it leaves to k_attention */
extern "C" vsr_status cuda_attention_tc(cuda_ctx *c, const float *q, int64_t qs, const float *k, const float *v,
                                        const vsr_segs *seg, int H, int Hkv, int d, float scale, int causal,
                                        float *out, int *taken, vsr_err *err);

static vsr_status cu_attention(void *ctx, const float *q, int64_t qs, const float *k, const float *v,
                               const vsr_segs *seg, int H, int Hkv, int d, float scale, int causal, float *out,
                               vsr_err *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    ENTER(c);
    if (seg->n <= 0) return VSR_OK;
    if (Hkv <= 0 || H % Hkv)
        return vsr_err_set(err, VSR_E_UNSUPPORTED, "attention: %d query heads over %d kv heads", H, Hkv);
    if (d <= 0 || d > ATT_DMAX)
        return vsr_err_set(err, VSR_E_UNSUPPORTED, "cuda:%d: attention: head dim %d (at most %d)", c->device, d, ATT_DMAX);
    dsegs s;
    int64_t rows, max_len;
    vsr_status st = segs_to_dev(c, seg, "attention", &s, &rows, &max_len, err);
    if (st || rows <= 0) return st;
    PROF(c, causal ? "attention (causal)" : "attention");
    if ((st = kp_guard(c, q, sizeof(float) * (size_t)((rows - 1) * qs + (int64_t)H * d), "attention", err)) ||
        (st = kp_guard(c, k, sizeof(float) * (size_t)(rows * Hkv * d), "attention", err)) ||
        (st = kp_guard(c, v, sizeof(float) * (size_t)(rows * Hkv * d), "attention", err)))
        return st;
    twin_clobber(c, out, sizeof(float) * (size_t)(rows * H * d));
    int taken = 0;
    st = cuda_attention_tc(c, q, qs, k, v, seg, H, Hkv, d, scale, causal, out, &taken, err);
    if (st || taken) return st;
    dim3 grid(blocks_for(max_len, ATT_Q), (unsigned)H, (unsigned)s.n);
    k_attention<<<grid, ATT_Q * 32, att_smem(d), c->stream>>>(q, qs, k, v, s, H, Hkv, d, scale, causal, out);
    return cuda_check_launch(c, "attention", err);
}

static vsr_status cu_mul_sigmoid(void *ctx, float *x, int64_t M, int H, int hd, const float *g, int64_t gs, int64_t ghs,
                                 vsr_err *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    ENTER(c);
    int64_t n = M * H * (int64_t)hd;
    if (n <= 0) return VSR_OK;
    PROF(c, "mul_sigmoid");
    vsr_status st;
    if ((st = kp_guard(c, x, sizeof(float) * (size_t)n, "mul_sigmoid", err)) ||
        (st = kp_guard(c, g, sizeof(float) * (size_t)((M - 1) * gs + (H - 1) * ghs + hd), "mul_sigmoid", err)))
        return st;
    const int vec = hd % 4 == 0 && gs % 4 == 0 && ghs % 4 == 0 && ((uintptr_t)x & 15) == 0 && ((uintptr_t)g & 15) == 0;
    /* an FP8 twin where the declared rows are the tokens (the FP8 o_proj's input) */
    const cuda_ctx_priv *pv = priv(c);
    const int rowk = vec && pv->req_x == x && pv->req_K == (int64_t)H * hd && pv->req_rows == M &&
                     (int64_t)H * hd <= 1024 * 4 * MS_VEC && M <= 0x7fffffff;
    twin t;
    if ((st = twin_start(c, x, n, rowk, 1, &t, err))) return st;
    if (t.kind == TW_FP8)
        k_mul_sigmoid_row_fp8<<<(unsigned)M, (unsigned)(((int64_t)H * hd / 4 + 32 * MS_VEC - 1) / (32 * MS_VEC) * 32), 0,
                                c->stream>>>(x, H, hd, g, gs, ghs, (uint8_t *)t.data, t.Kp, t.sx, !t.sole);
    else if (vec)
        k_mul_sigmoid4<<<blocks_for(n / 4, 256) > 8192 ? 8192 : blocks_for(n / 4, 256), 256, 0, c->stream>>>(
            x, M, H, hd, g, gs, ghs, (__nv_bfloat16 *)t.data, !t.sole);
    else
        k_mul_sigmoid<<<blocks_for(n, 256) > 4096 ? 4096 : blocks_for(n, 256), 256, 0, c->stream>>>(
            x, M, H, hd, g, gs, ghs, (__nv_bfloat16 *)t.data, !t.sole);
    if ((st = cuda_check_launch(c, "mul_sigmoid", err))) return st;
    twin_commit(c, &t);
    return VSR_OK;
}

/* Wide FP8-twin rows (VSR_CUDA_SWIGLU_1P; cuda_swiglu_set_1p for the test): 1 (the default) one pass, by a
 * pair of CTAs where the device has clusters (capability 9.0+), else by one; 2 one pass by one CTA; 3 as 1 with
 * the other number of loads in flight a thread (k_swiglu_fp8_cl's U; A/B); 0 the two-pass kernel (A/B) */
static int g_sw1p_on = -1;
extern "C" int cuda_swiglu_set_1p(int on) { return cuda_env_switch_set("VSR_CUDA_SWIGLU_1P", 1, &g_sw1p_on, on, 3); }

/* SwiGLU from FP32 (cu_swiglu) or BF16 (linear_swiglu's kept product) g, u, with y's twin when
 * declared; the caller has checked gs >= N and opened the profile scope. */
template <typename TI>
static vsr_status swiglu_run(cuda_ctx *c, const TI *g, const TI *u, int64_t gs, int64_t M, int64_t N, float *y,
                             sw_scales sc, vsr_err *err) {
    const int64_t n = M * N;
    const uintptr_t al = sizeof(TI) * 4 - 1; /* 4 elements: float4, or 4 BF16 (8 bytes) */
    int vec = ((uintptr_t)g & al) == 0 && ((uintptr_t)u & al) == 0 && ((uintptr_t)y & 15) == 0 && N % 4 == 0 &&
              gs % 4 == 0;
    int rowk = vec && N <= SW_MAX_N && M <= 0x7fffffff;
    twin t;
    vsr_status st = twin_start(c, y, n, rowk, vec, &t, err);
    if (st) return st;
    float *yo = t.sole ? NULL : y;
    if (t.kind == TW_FP8) {
        int64_t n4 = N / 4, thr = (n4 + 31) / 32 * 32;
        thr = thr > 1024 ? 1024 : thr;
        const int mode = cuda_env_mode("VSR_CUDA_SWIGLU_1P", 1, 3, &g_sw1p_on);
        if (n4 > 2048 && (mode == 1 || mode == 3) && c->cc_major >= 9) { /* wide rows, one pass, a CTA pair per row */
            const size_t smem = sizeof(float4) * (size_t)((n4 + 1) / 2);
            constexpr int U = sizeof(TI) == 2 ? 4 : 2, Ualt = 6 - U; /* 32 bytes of each input in flight a thread */
            auto kern = mode == 1 ? k_swiglu_fp8_cl<TI, U> : k_swiglu_fp8_cl<TI, Ualt>;
            if ((st = cuda_check(c, cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
                                 "swiglu: shared memory of the CTA-pair FP8 kernel", err)))
                return st;
            cudaLaunchConfig_t cfg = {};
            cudaLaunchAttribute at[1];
            at[0].id = cudaLaunchAttributeClusterDimension;
            at[0].val.clusterDim.x = 2, at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = 1;
            cfg.gridDim = dim3((unsigned)(2 * M)), cfg.blockDim = dim3(SWC_T), cfg.dynamicSmemBytes = smem;
            cfg.stream = c->stream, cfg.attrs = at, cfg.numAttrs = 1;
            uint8_t *tq = (uint8_t *)t.data;
            const int Ni = (int)N;
            if ((st = cuda_check(c, cudaLaunchKernelEx(&cfg, kern, g, u, gs, Ni, yo, tq, t.Kp, t.sx, sc),
                                 "swiglu: the CTA-pair FP8 kernel", err)))
                return st;
        } else if (n4 > 2048 && mode) { /* wide rows, one pass */
            const size_t smem = sizeof(float4) * (size_t)n4; /* N <= SW_MAX_N: at most 128 KB */
            if ((st = cuda_check(c, cudaFuncSetAttribute(k_swiglu_fp8_1p<TI>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                         (int)smem),
                                 "swiglu: shared memory of the one-pass FP8 kernel", err)))
                return st;
            k_swiglu_fp8_1p<TI><<<(unsigned)M, 512, smem, c->stream>>>(g, u, gs, (int)N, yo, (uint8_t *)t.data, t.Kp,
                                                                       t.sx, sc);
        } else if (n4 > 2048) /* wide rows: two passes, four blocks a multiprocessor (see k_swiglu_fp8_2p) */
            k_swiglu_fp8_2p<TI><<<(unsigned)M, 512, 0, c->stream>>>(g, u, gs, (int)N, yo, (uint8_t *)t.data, t.Kp, t.sx,
                                                                   sc);
        else /* the row in registers, up to 4 float4 a thread */
            k_swiglu_row_fp8<TI, 4><<<(unsigned)M, (unsigned)thr, 0, c->stream>>>(g, u, gs, (int)N, yo,
                                                                                (uint8_t *)t.data, t.Kp, t.sx, sc);
    }
    else if (vec && M <= 0x7fffffff && N <= 0x7fffffff)
        k_swiglu4<TI><<<dim3((unsigned)M, (unsigned)((N / 4 + SW4_T * SW4_U - 1) / (SW4_T * SW4_U))), SW4_T, 0, c->stream>>>(
            g, u, gs, (int)N, yo, (__nv_bfloat16 *)t.data, sc);
    else
        k_swiglu<TI><<<blocks_for(n, 256) > 8192 ? 8192 : blocks_for(n, 256), 256, 0, c->stream>>>(g, u, gs, N, n, y,
                                                                                                  sc);
    if ((st = cuda_check_launch(c, "swiglu", err))) return st;
    twin_commit(c, &t);
    return VSR_OK;
}

static vsr_status cu_swiglu(void *ctx, const float *g, const float *u, int64_t gs, int64_t M, int64_t N, float *y,
                           vsr_err *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    ENTER(c);
    if (M * N <= 0) return VSR_OK;
    if (gs < N)
        return vsr_err_set(err, VSR_E_INVALID, "swiglu: row stride %lld is less than the width %lld", (long long)gs,
                           (long long)N);
    PROF(c, "swiglu");
    vsr_status st;
    if ((st = kp_guard(c, g, sizeof(float) * (size_t)((M - 1) * gs + N), "swiglu", err)) ||
        (st = kp_guard(c, u, sizeof(float) * (size_t)((M - 1) * gs + N), "swiglu", err)))
        return st;
    return swiglu_run(c, g, u, gs, M, N, y, sw_scales{NULL, NULL, NULL}, err);
}

/* linear_swiglu's GEMM for BF16 and FP8 weights, the product kept in BF16 where their GEMM can write it
 * (cuBLASLt D BF16: half the product's bytes written, and SwiGLU reads half): *gu [M, *ld] and the scales
 * its reader applies (an unscaled FP8 product); *gu NULL where this GEMM could not keep it */
static vsr_status swiglu_product(cuda_ctx *c, const float *x, int64_t M, const vsr_bweight *w, float *work,
                                 const __nv_bfloat16 **gu, int64_t *ld, sw_scales *sc, vsr_err *err) {
    const int64_t N = w->v.N / 2, K = w->v.K;
    vsr_status st;
    if ((st = sole_twin_readable(c, x, M, w, err)) || (st = kp_guard(c, x, sizeof(float) * (size_t)(M * K), w->name, err)))
        return st;
    if (w->v.kind == VSR_WK_BF16) {
        const __nv_bfloat16 *xb;
        /* the BF16 product lives in the caller's work buffer (FP32 [M, 2N] holds it twice over) */
        if ((st = bf16_input(c, x, M, K, &xb, err)) ||
            (st = cuda_gemm_bf16_out_bf16(c, xb, M, (const __nv_bfloat16 *)w->w, 2 * N, K, (__nv_bfloat16 *)work, err)))
            return vsr_err_prefix(err, "%s", w->name);
        twin_clobber(c, work, sizeof(float) * (size_t)(M * 2 * N));
        *gu = (const __nv_bfloat16 *)work;
        return VSR_OK;
    }
    const float *sx = NULL;
    const void *xq = twin_find(c, x, M, K, TW_FP8, &sx);
    int ran = 0;
    const float *dsx = NULL, *dsw = NULL;
    if ((st = cuda_fp8_linear_bf16out(c, x, (const uint8_t *)xq, sx, M, w, gu, ld, &dsx, &dsw, &ran, err)))
        return vsr_err_prefix(err, "%s", w->name);
    if (!ran) *gu = NULL;
    else *sc = sw_scales{dsx, dsw, dsw ? dsw + N : NULL};
    return VSR_OK;
}

/* linear_swiglu (backend.h): BF16 and FP8 weights keep the product in BF16 where their GEMM can write
 * it (swiglu_product); otherwise (int4, F32, FP8 below its BF16-product rows) the FP32 linear into work,
 * then swiglu. */
static vsr_status cu_linear_swiglu(void *ctx, const float *x, int64_t M, const vsr_bweight *w, float *work, float *y,
                                   vsr_err *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    ENTER(c);
    if (M <= 0) return VSR_OK;
    const int64_t N2 = w->v.N, N = N2 / 2, K = w->v.K;
    if (N2 % 2)
        return vsr_err_set(err, VSR_E_INVALID, "%s: linear_swiglu needs a stacked gate|up weight of an even number "
                           "of outputs, not %lld", w->name, (long long)N2);
    vsr_status st;
    priv(c)->kp_req = NULL; /* a keep_product_bf16 declaration is for the next linear only */
    if ((w->v.kind == VSR_WK_BF16 || w->v.kind == VSR_WK_FP8) && cuda_env_switch("VSR_CUDA_LINEAR_SWIGLU", 1, &g_lsw_on)) {
        char pname[72] = "", sname[72] = "";
        if (vsr_cuda_profile_on > 0) { /* two rows: the GEMM, and the SwiGLU over its kept product */
            snprintf(pname, sizeof pname, "linear_swiglu %s %lld->%lld M=%lld", wkind_names_cuda[w->v.kind],
                     (long long)K, (long long)N2, (long long)M);
            snprintf(sname, sizeof sname, "  its swiglu (%s) M=%lld", wkind_names_cuda[w->v.kind], (long long)M);
        }
        const __nv_bfloat16 *gu = NULL;
        int64_t ld = N2;
        sw_scales sc = {NULL, NULL, NULL};
        {
            PROF(c, pname);
            if ((st = swiglu_product(c, x, M, w, work, &gu, &ld, &sc, err))) return st;
        }
        if (gu) {
            PROF(c, sname);
            return swiglu_run(c, gu, gu + N, ld, M, N, y, sc, err);
        }
    }
    /* the FP32 product, then SwiGLU over its two halves */
    if ((st = cu_linear(ctx, x, M, w, work, 0, err)) || (st = cu_swiglu(ctx, work, work + N, N2, M, N, y, err)))
        return st;
    return VSR_OK;
}

static vsr_status cu_add(void *ctx, float *y, const float *x, int64_t n, vsr_err *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    ENTER(c);
    if (n <= 0) return VSR_OK;
    PROF(c, "add");
    vsr_status st;
    if ((st = kp_guard(c, x, sizeof(float) * (size_t)n, "add", err)) ||
        (st = kp_guard(c, y, sizeof(float) * (size_t)n, "add", err)))
        return st;
    twin_clobber(c, y, sizeof(float) * (size_t)n);
    cuda_add_into(c, y, x, n);
    return cuda_check_launch(c, "add", err);
}

static vsr_status cu_gather_rows(void *ctx, const float *src, const int64_t *rows, int64_t n, int64_t D, float *dst,
                                 vsr_err *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    ENTER(c);
    if (n <= 0) return VSR_OK;
    if (n > 65535) return vsr_err_set(err, VSR_E_UNSUPPORTED, "cuda:%d: gather_rows: %lld rows (at most 65535)", c->device, (long long)n);
    PROF(c, "gather_rows");
    for (int64_t i = 0; i < n; i++) {
        vsr_status sg = kp_guard(c, src + rows[i] * D, sizeof(float) * (size_t)D, "gather_rows", err);
        if (sg) return sg;
    }
    twin_clobber(c, dst, sizeof(float) * (size_t)(n * D));
    drows r;
    const int64_t *rd = NULL;
    if (n <= GATHER_MAX) {
        memcpy(r.r, rows, sizeof(int64_t) * (size_t)n);
    } else {
        void *d;
        vsr_status st = cuda_scratch(c, sizeof(int64_t) * (size_t)n, &d, err);
        if (st || (st = cuda_check(c, cudaMemcpyAsync(d, rows, sizeof(int64_t) * (size_t)n, cudaMemcpyHostToDevice, c->stream),
                                   "gather_rows: indices to device", err)))
            return st;
        rd = (const int64_t *)d;
    }
    dim3 grid(blocks_for(D, 256) > 16 ? 16 : blocks_for(D, 256), (unsigned)n);
    k_gather<<<grid, 256, 0, c->stream>>>(src, r, rd, D, dst);
    return cuda_check_launch(c, "gather_rows", err);
}

static vsr_status cu_readout(void *ctx, const float *h, int64_t M, const vsr_bweight *R, float *logits, vsr_err *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    ENTER(c);
    const int64_t N = R->v.N, D = R->v.K;
    PROF(c, "readout");
    vsr_status sg = M > 0 ? kp_guard(c, h, sizeof(float) * (size_t)(M * D), "readout", err) : VSR_OK;
    if (sg) return sg;
    twin_clobber(c, logits, sizeof(float) * (size_t)(M * N));
    if (R->v.kind == VSR_WK_F32) return lt_gemm(c, CUDA_R_32F, h, M, R->w, N, D, CUDA_R_32F, logits, 0, err);
    if (R->v.kind != VSR_WK_BF16)
        return vsr_err_set(err, VSR_E_UNSUPPORTED, "readout: weight must be F32 or BF16 (found %s)",
                           wkind_names_cuda[R->v.kind]);
    /* torch: bf16 @ bf16 accumulates in FP32 and rounds the result to bf16 */
    void *hb;
    vsr_status st;
    if ((st = cuda_scratch(c, sizeof(__nv_bfloat16) * (size_t)(M * D), &hb, err)) ||
        (st = cuda_f32_to_bf16(c, h, M * D, (__nv_bfloat16 *)hb, err)) ||
        (st = cuda_gemm_bf16(c, (const __nv_bfloat16 *)hb, M, (const __nv_bfloat16 *)R->w, N, D, logits, 0, err)))
        return st;
    k_round_bf16<<<blocks_for(M * N, 256), 256, 0, c->stream>>>(logits, M * N);
    return cuda_check_launch(c, "readout rounding", err);
}

static const vsr_backend_ops cuda_ops = {
    /* .name = */ "cuda",
    /* .destroy = */ cu_destroy,
    /* .buf_alloc = */ cu_buf_alloc,
    /* .buf_free = */ cu_buf_free,
    /* .buf_set = */ cu_buf_set,
    /* .buf_get = */ cu_buf_get,
    /* .weight_upload = */ cu_weight_upload,
    /* .weight_free = */ cu_weight_free,
    /* .weight_bytes = */ cu_weight_bytes,
    /* .vec_upload = */ cu_vec_upload,
    /* .embed = */ cu_embed,
    /* .linear = */ cu_linear,
    /* .rmsnorm = */ cu_rmsnorm,
    /* .rmsnorm_gated = */ cu_rmsnorm_gated,
    /* .conv1d_silu = */ cu_conv1d_silu,
    /* .deltanet = */ cu_deltanet,
    /* .rope = */ cu_rope,
    /* .attention = */ cu_attention,
    /* .mul_sigmoid = */ cu_mul_sigmoid,
    /* .swiglu = */ cu_swiglu,
    /* .add = */ cu_add,
    /* .gather_rows = */ cu_gather_rows,
    /* .readout = */ cu_readout,
    /* .mlp_rows = */ 4096,
    /* .feed_linears = */ cu_feed_linears,
    /* .graph_begin = */ cu_graph_begin,
    /* .graph_end = */ cu_graph_end,
    /* .weight_upload_cat = */ cu_weight_upload_cat,
    /* .linear_swiglu = */ cu_linear_swiglu,
    /* .keep_product_bf16 = */ cu_keep_product_bf16,
};

extern "C" vsr_status vsr_backend_cuda_new(int device_index, vsr_backend *out, vsr_err *err) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return vsr_err_set(err, VSR_E_DEVICE, "cuda:%d: the CUDA runtime found no usable device: %s (%s)", device_index,
                           cudaGetErrorString(e), cudaGetErrorName(e));
    }
    if (device_index < 0 || device_index >= count)
        return vsr_err_set(err, VSR_E_DEVICE, "cuda:%d: no such device (the CUDA runtime sees %d)", device_index, count);
    cuda_ctx_priv *p = (cuda_ctx_priv *)calloc(1, sizeof *p);
    if (!p) return vsr_err_set(err, VSR_E_NOMEM, "cuda: out of memory");
    cuda_ctx *c = &p->pub;
    c->device = device_index;
    snprintf(c->dtype, sizeof c->dtype, "auto");
    vsr_status st;
    cudaDeviceProp prop;
    if ((st = cuda_check(c, cudaSetDevice(device_index), "cudaSetDevice", err)) ||
        (st = cuda_check(c, cudaGetDeviceProperties(&prop, device_index), "cudaGetDeviceProperties", err)))
        goto fail;
    c->cc_major = prop.major, c->cc_minor = prop.minor, c->sm_count = prop.multiProcessorCount;
    snprintf(c->dev_name, sizeof c->dev_name, "%s", prop.name);
    if (c->cc_major < 8) {
        st = vsr_err_set(err, VSR_E_DEVICE, "cuda:%d: %s has compute capability %d.%d; the CUDA backend needs 8.0 or "
                         "later (BF16 tensor cores)", device_index, c->dev_name, c->cc_major, c->cc_minor);
        goto fail;
    }
    if ((st = cuda_check(c, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "cudaStreamCreate", err)))
        goto fail;
    if (cublasLtCreate(&c->lt) != CUBLAS_STATUS_SUCCESS) {
        st = vsr_err_set(err, VSR_E_DEVICE, "cuda:%d: cublasLtCreate failed", device_index);
        goto fail;
    }
    c->lt_ws_bytes = LT_WS_BYTES;
    if ((st = cuda_check(c, cudaMalloc(&c->lt_ws, c->lt_ws_bytes), "cuBLASLt workspace", err))) goto fail;
    if ((st = cuda_check(c, cudaFuncSetAttribute(k_attention, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 (int)att_smem(ATT_DMAX)),
                         "attention: shared memory limit", err)))
        goto fail;
    if ((st = cuda_check(c, cudaEventCreateWithFlags(&p->ids_ev, cudaEventDisableTiming), "event", err))) goto fail;
    if (vsr_cuda_graphs_off < 0) {
        const char *e = getenv("VSR_CUDA_GRAPHS");
        vsr_cuda_graphs_off = e && !strcmp(e, "0");
    }
    if (vsr_cuda_profile_on < 0) {
        const char *e = getenv("VSR_CUDA_PROFILE");
        vsr_cuda_profile_on = e && *e && strcmp(e, "0");
    }
    for (int i = 0; i < LIVE_CTX; i++)
        if (!live_ctx[i]) {
            live_ctx[i] = c;
            break;
        }
    out->ops = &cuda_ops;
    out->ctx = c;
    return VSR_OK;
fail:
    cu_destroy(c);
    return st;
}
