/* src/backend/cuda/backend.cu: the CUDA backend's table (vsr_backend_ops, src/backend/backend.h) in one
 * place, and the state its ops share.
 *
 * Computes: nothing of its own on the GPU. It holds the op table (cuda_ops, at the end: each entry names the
 * file of its op), the backend's constructor and destructor, device buffers and weight uploads, the per-op
 * profiler (VSR_CUDA_PROFILE=1), the recorded forwards (CUDA graphs) and the bookkeeping of activation
 * twins and products kept in BF16 (see ops_internal.cuh). The ops themselves live one family a file:
 *   linear.cu       linear (BF16 / F32 through cuBLASLt; int4 / FP8 through the quant_*.cu hooks)
 *   norms.cu        rmsnorm, rmsnorm_gated          rope.cu         rope
 *   activations.cu  mul_sigmoid, swiglu, linear_swiglu, add
 *   embed.cu        embed, gather_rows, readout     conv1d.cu       conv1d_silu
 *   attention.cu    attention                       deltanet.cu     deltanet
 *   quant_fp8.cu, fp8_gemm.cu, quant_int4.cu, quant_common.cu, autotune.cu: the quantized linears and tuning.
 *
 * Activations are FP32 device buffers (cudaMalloc, never managed memory). Every op is enqueued on one
 * stream, in order; buf_get synchronises and reports any fault of the kernels before it. Every launch is
 * followed by cudaGetLastError, so a bad launch fails its own op; a fault inside a kernel surfaces at the
 * next synchronising call. Per-sequence ops get the segment table by value as a kernel parameter (up to
 * CUDA_MAX_SEGS sequences), so no host-to-device copy (which would synchronise with pageable memory) sits
 * between kernels.
 *
 * Floor: none (host code and copies). Tests: tests/test_cuda_ops.c (every table entry against the CPU
 * oracle, refusals), tests/test_cuda_fused.c (twins, kept products, recorded forwards). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/ops_internal.cuh" /* first: wraps the C headers in extern "C" */

#define LT_WS_BYTES ((size_t)32 << 20)

const char *const wkind_names_cuda[] = {"bf16", "f32", "int4", "fp8", "nvfp4"};

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

vsr_status cuda_grow(cuda_ctx *c, void **buf, size_t *have, size_t bytes, vsr_err *err) {
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
    vsr_status st = cuda_grow(c, &c->scratch, &c->scratch_bytes, bytes, err);
    *out = c->scratch;
    return st;
}

extern "C" vsr_status cuda_scratch2(cuda_ctx *c, size_t bytes, void **out, vsr_err *err) {
    vsr_status st = cuda_grow(c, &c->scratch2, &c->scratch2_bytes, bytes, err);
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

vsr_status segs_to_dev(cuda_ctx *c, const vsr_segs *s, const char *op, dsegs *d, int64_t *rows,
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
const __nv_bfloat16 *kp_find(cuda_ctx *c, const float *x, int64_t rows, int64_t xs, int64_t n) {
    const cuda_ctx_priv *p = priv(c);
    if (!p->kp_src || (uintptr_t)x < (uintptr_t)p->kp_src || rows <= 0) return NULL;
    int64_t off = (int64_t)(((uintptr_t)x - (uintptr_t)p->kp_src) / sizeof(float));
    if (off + (rows - 1) * xs + n > p->kp_rows * p->kp_N) return NULL;
    return (const __nv_bfloat16 *)p->kp_buf + off;
}

/* An op about to read [ptr, ptr + bytes) as FP32: refused while a product held only in BF16 lies
 * there (the FP32 memory was never written; see keep_product_bf16 in backend.h). */
vsr_status kp_guard(cuda_ctx *c, const void *ptr, size_t bytes, const char *op, vsr_err *err) {
    if (!kp_overlaps(c, ptr, bytes)) return VSR_OK;
    return vsr_err_set(err, VSR_E_INTERNAL, "cuda:%d: %s: its input is a linear's product held only in BF16 "
                       "(keep_product_bf16), which this op cannot read", c->device, op);
}

/* Drops the twin, the kept product and the pending declarations when [ptr, ptr + bytes) overlaps
 * their source. */
void twin_clobber(cuda_ctx *c, const void *ptr, size_t bytes) {
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
vsr_status twin_start(cuda_ctx *c, const float *y, int64_t n, int fp8_ok, int bf16_ok, twin *t, vsr_err *err) {
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
    vsr_status st = cuda_grow(c, &p->tw_buf, &p->tw_bytes, bytes, err);
    if (st) return vsr_err_prefix(err, "activation twin");
    *t = (twin){y, rows, K, Kp, kind, p->tw_buf, NULL, kind == TW_FP8 ? p->req_sole_fp8 : p->req_sole_bf16};
    if (kind == TW_FP8) t->sx = (float *)(((uintptr_t)p->tw_buf + (size_t)(rows * Kp) + 15) & ~(uintptr_t)15);
    return VSR_OK;
}

/* The producer's kernel launched: the twin is live. */
void twin_commit(cuda_ctx *c, const twin *t) {
    if (t->kind) priv(c)->tw = *t;
}

/* Rows [r0, r0 + M) of the twin when x is row r0 of its source with the same K and kind. */
int64_t twin_rows_of(cuda_ctx *c, const float *x, int64_t M, int64_t K, int kind) {
    const twin *t = &priv(c)->tw;
    if (t->kind != kind || t->K != K || (uintptr_t)x < (uintptr_t)t->src) return -1;
    int64_t off = (int64_t)(((uintptr_t)x - (uintptr_t)t->src) / sizeof(float));
    if (off % K || off / K + M > t->rows) return -1;
    return off / K;
}

const void *twin_find(cuda_ctx *c, const float *x, int64_t M, int64_t K, int kind, const float **sx) {
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

/* VSR_CUDA_KEEP_BF16=0: the declaration ignored (A/B timing in separate processes; VSR_CUDA_LINEAR_SWIGLU is
 * activations.cu's) */
static int g_keep_on = -1;

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
vsr_status sole_twin_readable(cuda_ctx *c, const float *x, int64_t M, const vsr_bweight *w, vsr_err *err) {
    if (!twin_sole_covers(c, x)) return VSR_OK;
    int tk = priv(c)->tw.kind, wk = w->v.kind;
    int readable = tk == TW_FP8 ? wk == VSR_WK_FP8 : (wk == VSR_WK_BF16 || wk == VSR_WK_INT4);
    if (!readable || twin_rows_of(c, x, M, w->v.K, tk) < 0)
        return vsr_err_set(err, VSR_E_INTERNAL, "cuda:%d: %s: its input exists only as an activation copy this "
                           "linear cannot read (a reader the model did not declare)", c->device, w->name);
    return VSR_OK;
}

/* ---- per-op timing ---- */

void prof_flush(cuda_ctx *c) {
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

int prof_row_index(prof *f, const char *name) {
    for (int i = 0; i < f->n_rows; i++)
        if (!strcmp(f->rows[i].name, name)) return i;
    if (f->n_rows == PROF_NAMES) return PROF_NAMES - 1; /* the last row collects the rest */
    snprintf(f->rows[f->n_rows].name, sizeof f->rows[0].name, "%s", f->n_rows == PROF_NAMES - 1 ? "(other)" : name);
    return f->n_rows++;
}

/* A producer's profile row: the op, its row width and count, and the twin it makes ("fp8 sole": the FP8
 * twin is the only copy written), so the table separates the variants a forward runs */
void prof_producer_name(char *buf, size_t n, const char *op, int64_t D, int64_t M, const twin *t) {
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

/* A staging pair (pinned host, device) for `what` of at least n elements of `elem` bytes. The last
 * forward's copies out of the pinned buffers must be done first (not while recording: graph_begin
 * waits before one). Growing (to n + n/2 + slack, at least min_cap) moves both buffers and so
 * retires every recording made before (mem_gen). */
static vsr_status stage_reserve(cuda_ctx *c, void **host, void **dev, size_t *cap, size_t n, size_t elem, size_t slack,
                                size_t min_cap, const char *what, vsr_err *err) {
    cuda_ctx_priv *p = priv(c);
    vsr_status st;
    char op[64];
    snprintf(op, sizeof op, "%s: wait for the last copy", what);
    if (p->ids_host && !p->capturing && (st = cuda_check(c, cudaEventSynchronize(p->ids_ev), op, err))) return st;
    if (n <= *cap) return VSR_OK;
    size_t nc = n + n / 2 + slack;
    if (nc < min_cap) nc = min_cap;
    snprintf(op, sizeof op, "%s: synchronize", what);
    if ((st = cuda_check(c, cudaStreamSynchronize(c->stream), op, err))) return st;
    cudaFreeHost(*host), cudaFree(*dev);
    *host = NULL, *dev = NULL, *cap = 0;
    c->mem_gen++;
    snprintf(op, sizeof op, "%s: pinned buffer", what);
    if ((st = cuda_check(c, cudaHostAlloc(host, nc * elem, cudaHostAllocDefault), op, err))) return st;
    snprintf(op, sizeof op, "%s: device buffer", what);
    if ((st = cuda_check(c, cudaMalloc(dev, nc * elem), op, err))) return st;
    *cap = nc;
    return VSR_OK;
}

vsr_status ids_stage(cuda_ctx *c, const int32_t *ids, int64_t n, vsr_err *err) {
    cuda_ctx_priv *p = priv(c);
    vsr_status st = stage_reserve(c, (void **)&p->ids_host, (void **)&p->ids_dev, &p->ids_cap, (size_t)n,
                                  sizeof(int32_t), 256, 0, "token ids", err);
    if (st) return st;
    memcpy(p->ids_host, ids, sizeof(int32_t) * (size_t)n);
    return VSR_OK;
}

static vsr_status cu_rows_stage(void *ctx, const int64_t *tab, int64_t n, vsr_err *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    cuda_ctx_priv *p = priv(c);
    ENTER(c);
    if (n < 0) return vsr_err_set(err, VSR_E_INTERNAL, "row table: %lld entries", (long long)n);
    /* room for the largest row bucket (3 x 128 entries) at once: growing retires every recording */
    vsr_status st = stage_reserve(c, (void **)&p->tab_host, (void **)&p->tab_dev, &p->tab_cap, (size_t)n,
                                  sizeof(int64_t), 64, 512, "row table", err);
    if (st) {
        p->tab_n = 0;
        return st;
    }
    if (n) memcpy(p->tab_host, tab, sizeof(int64_t) * (size_t)n);
    p->tab_n = n, p->tab_armed = n > 0;
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
        p->tab_armed = 0; /* the recording copies the staged row table itself */
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
    cudaFreeHost(p->tab_host);
    cudaFree(p->tab_dev);
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
    /* .rows_stage = */ cu_rows_stage,
    /* .gather_rows_staged = */ cu_gather_rows_staged,
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
    if ((st = cuda_attention_setup(c, err))) goto fail;
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
