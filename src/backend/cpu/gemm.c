/* CPU GEMM: the scalar references, the scalar fast path, and the driver that picks an ISA,
 * resolves the weight layout and splits the work over the pool.
 *
 * Y[M,N] = X[M,K] . W[N,K]^T: every output is a dot product of an X row and a W row, both
 * contiguous along K. The weight matrix dominates the traffic (K, N up to ~17k), so:
 *   M <= 8   each task takes a band of W rows, streams them once and reuses each decoded
 *            W vector for every X row (GEMV-like; bound by weight bandwidth or decode).
 *   M > 8    tasks are (128-row X block) x (column block); inside, a W panel of 256 k x NR
 *            columns is decoded and transposed into scratch and an MR x NR micro-kernel
 *            broadcasts X (FMA-bound; W decode is amortised over up to 128 rows). */
#include "backend/cpu/gemm.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/gemm_internal.h"
#include "vsr/dtype.h"

/* ---------------------------------------------------------------- references */

void vsr_gemm_f32_ref(const float *X, int64_t M, int64_t K, const float *W, int64_t N, float *Y,
                      int accumulate) {
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            float s = 0.0f;
            for (int64_t k = 0; k < K; k++) s += X[m * K + k] * W[n * K + k];
            Y[m * N + n] = accumulate ? Y[m * N + n] + s : s;
        }
}

void vsr_gemm_bf16_ref(const float *X, int64_t M, int64_t K, const uint16_t *W, int64_t N,
                       float *Y, int accumulate) {
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            float s = 0.0f;
            for (int64_t k = 0; k < K; k++) s += X[m * K + k] * vsr_bf16_to_f32(W[n * K + k]);
            Y[m * N + n] = accumulate ? Y[m * N + n] + s : s;
        }
}

static int64_t int4_groups(const vsr_int4_weight *w) {
    return w->group > 0 ? (w->K + w->group - 1) / w->group : 1;
}

/* compressed-tensors treats a g_idx holding any -1 as "not initialised": column order. */
static bool int4_column_order(const vsr_int4_weight *w) {
    if (!w->g_idx) return true;
    for (int64_t k = 0; k < w->K; k++)
        if (w->g_idx[k] == -1) return true;
    return false;
}

/* W[n,k] as FP32: bf16((u - uzp) * s[n, grp(k)]), the product exact in FP32, rounded once. */
static inline float int4_weight(const vsr_int4_weight *w, int64_t G, bool col_order, int64_t n,
                                int64_t k) {
    int64_t words = (w->K + 7) / 8;
    int64_t g = w->group > 0 ? (col_order ? k / w->group : w->g_idx[k]) : 0;
    int u = (int)((w->packed[n * words + k / 8] >> (4 * (k % 8))) & 0xfu);
    int uzp = w->zp ? (int)((w->zp[(n / 8) * G + g] >> (4 * (n % 8))) & 0xfu) : 8;
    float s = vsr_bf16_to_f32(w->scale_bf16[n * G + g]);
    return vsr_bf16_to_f32(vsr_f32_to_bf16((float)(u - uzp) * s));
}

void vsr_gemm_int4_ref(const float *X, int64_t M, const vsr_int4_weight *w, float *Y,
                       int accumulate) {
    int64_t G = int4_groups(w), K = w->K, N = w->N;
    bool col_order = int4_column_order(w);
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            float s = 0.0f;
            for (int64_t k = 0; k < K; k++) s += X[m * K + k] * int4_weight(w, G, col_order, n, k);
            Y[m * N + n] = accumulate ? Y[m * N + n] + s : s;
        }
}

/* ---------------------------------------------------------------- scalar path */

/* Row n of W as FP32 into out[K]. */
static void decode_row_scalar(const gemm_w *w, int64_t n, float *out) {
    int64_t K = w->K;
    switch (w->fmt) {
    case GEMM_F32: memcpy(out, w->f32 + n * K, (size_t)K * sizeof *out); return;
    case GEMM_BF16:
        for (int64_t k = 0; k < K; k++) out[k] = vsr_bf16_to_f32(w->bf16[n * K + k]);
        return;
    case GEMM_INT4_UNIFORM:
    case GEMM_INT4_LANE: {
        const uint32_t *row = w->packed + n * ((K + 7) / 8);
        for (int64_t k = 0; k < K; k++) {
            int64_t g = w->fmt == GEMM_INT4_LANE ? w->gidx[k] : k / w->gsz;
            int u = (int)((row[k / 8] >> (4 * (k % 8))) & 0xfu);
            int uzp = w->zp ? (int)((w->zp[(n / 8) * w->G + g] >> (4 * (n % 8))) & 0xfu) : 8;
            float s = vsr_bf16_to_f32(w->scale[n * w->G + g]);
            out[k] = vsr_bf16_to_f32(vsr_f32_to_bf16((float)(u - uzp) * s));
        }
        return;
    }
    }
}

static void scalar_rows(const gemm_w *w, const float *X, int64_t m0, int64_t m1, int64_t n0,
                        int64_t n1, float *Y, int accumulate, void *scratch) {
    float *row = scratch;
    int64_t K = w->K, N = w->N;
    for (int64_t n = n0; n < n1; n++) {
        decode_row_scalar(w, n, row);
        for (int64_t m = m0; m < m1; m++) {
            const float *x = X + m * K;
            float s = 0.0f;
            for (int64_t k = 0; k < K; k++) s += x[k] * row[k];
            Y[m * N + n] = accumulate ? Y[m * N + n] + s : s;
        }
    }
}

static void scalar_small(const gemm_w *w, const float *X, int64_t M, int64_t n0, int64_t n1,
                         float *Y, int accumulate, void *scratch) {
    scalar_rows(w, X, 0, M, n0, n1, Y, accumulate, scratch);
}

static void scalar_large(const gemm_w *w, const float *X, int64_t M, int64_t m0, int64_t m1,
                         int64_t n0, int64_t n1, float *Y, int accumulate, void *scratch) {
    scalar_rows(w, X, m0, m1, n0, n1, Y, accumulate, scratch);
}

static size_t scalar_scratch(const gemm_w *w) { return (size_t)w->K * sizeof(float); }

static const gemm_isa isa_scalar = {"scalar", scalar_small, scalar_large, scalar_scratch, 16};

/* ---------------------------------------------------------------- dispatch */

typedef struct isa_entry {
    const char *name;
    const gemm_isa *isa;
    bool (*supported)(void);
} isa_entry;

static bool cpu_avx512(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("fma");
}
static bool cpu_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
}
static bool cpu_any(void) { return true; }

/* best first */
static const isa_entry isa_table[] = {
    {"avx512", &vsr_gemm_isa_avx512, cpu_avx512},
    {"avx2+fma", &vsr_gemm_isa_avx2, cpu_avx2},
    {"scalar", &isa_scalar, cpu_any},
};
enum { ISA_COUNT = sizeof isa_table / sizeof isa_table[0] };

/* Set only by the test-only vsr_gemm_force_isa; atomic so that ops_cpu.c's workers can read it
 * through vsr_gemm_forced_isa() while a test thread sets it between calls. */
static const gemm_isa *_Atomic g_forced;

static const gemm_isa *current_isa(void) {
    static const gemm_isa *_Atomic best;
    const gemm_isa *f = g_forced;
    if (f) return f;
    const gemm_isa *b = best;
    if (!b) {
        for (int i = 0; i < ISA_COUNT && !b; i++)
            if (isa_table[i].supported()) b = isa_table[i].isa;
        best = b;
    }
    return b;
}

const char *vsr_gemm_isa(void) { return current_isa()->name; }

const char *vsr_gemm_forced_isa(void) {
    const gemm_isa *f = g_forced;
    return f ? f->name : NULL;
}

int vsr_gemm_force_isa(const char *name) {
    if (!name) {
        g_forced = NULL;
        return 0;
    }
    for (int i = 0; i < ISA_COUNT; i++)
        if (strcmp(isa_table[i].name, name) == 0) {
            if (!isa_table[i].supported()) return -1;
            g_forced = isa_table[i].isa;
            return 0;
        }
    return -1;
}

/* ---------------------------------------------------------------- driver */

enum {
    SMALL_BAND = 16, /* W rows per small-path task unit */
    LARGE_MC = 128,  /* X rows per large-path task (at least) */
    LARGE_MC_MAX = 512, /* ... and at most */
    LARGE_NC = GEMM_LARGE_NC, /* W rows (output columns) per large-path task */
};

typedef struct gemm_job {
    const gemm_isa *isa;
    const gemm_w *w;
    const float *X;
    int64_t M;
    float *Y;
    int accumulate;
    unsigned char *scratch;
    size_t scratch_stride;
    int64_t nblocks, nc, mc;
} gemm_job;

static void small_task(void *ctx, int64_t b, int64_t e, int worker) {
    gemm_job *j = ctx;
    int64_t n0 = b * SMALL_BAND, n1 = e * SMALL_BAND;
    if (n1 > j->w->N) n1 = j->w->N;
    j->isa->small(j->w, j->X, j->M, n0, n1, j->Y, j->accumulate,
                  j->scratch + (size_t)worker * j->scratch_stride);
}

static void large_task(void *ctx, int64_t b, int64_t e, int worker) {
    gemm_job *j = ctx;
    for (int64_t t = b; t < e; t++) {
        int64_t mb = t / j->nblocks, nb = t % j->nblocks;
        int64_t m0 = mb * j->mc, m1 = m0 + j->mc < j->M ? m0 + j->mc : j->M;
        int64_t n0 = nb * j->nc, n1 = n0 + j->nc < j->w->N ? n0 + j->nc : j->w->N;
        j->isa->large(j->w, j->X, j->M, m0, m1, n0, n1, j->Y, j->accumulate,
                      j->scratch + (size_t)worker * j->scratch_stride);
    }
}

/* Returns false when scratch cannot be allocated (the caller then runs the reference). */
static bool gemm_run(vsr_pool *p, const gemm_w *w, const float *X, int64_t M, float *Y,
                     int accumulate) {
    int64_t N = w->N;
    if (M <= 0 || N <= 0) return true;
    if (w->K <= 0) {
        if (!accumulate) memset(Y, 0, (size_t)(M * N) * sizeof *Y);
        return true;
    }
    const gemm_isa *isa = current_isa();
    int threads = vsr_pool_size(p);
    size_t stride = (isa->scratch_bytes(w) + 63) & ~(size_t)63;
    unsigned char *scratch = aligned_alloc(64, stride * (size_t)threads);
    if (!scratch) return false;
    gemm_job j = {isa, w, X, M, Y, accumulate, scratch, stride, 0, 0, 0};
    if (M <= GEMM_SMALL_M) {
        vsr_pool_for(p, (N + SMALL_BAND - 1) / SMALL_BAND, 1, small_task, &j);
    } else {
        j.mc = LARGE_MC;
        j.nc = LARGE_NC; /* a multiple of every isa's n_align (32, 16) */
        j.nblocks = (N + j.nc - 1) / j.nc;
        /* A task decodes and packs its W panels once for its mc rows: grow the row block up to
         * LARGE_MC_MAX (X tile [mc, KC] still fits in L2) while there are enough tasks left to
         * balance the pool. Per-element arithmetic does not depend on mc. */
        while (j.mc < LARGE_MC_MAX && j.nblocks * ((M + 2 * j.mc - 1) / (2 * j.mc)) >= 4 * (int64_t)threads)
            j.mc *= 2;
        int64_t mblocks = (M + j.mc - 1) / j.mc;
        vsr_pool_for(p, mblocks * j.nblocks, 1, large_task, &j);
    }
    free(scratch);
    return true;
}

void vsr_gemm_f32(vsr_pool *p, const float *X, int64_t M, int64_t K, const float *W, int64_t N,
                  float *Y, int accumulate) {
    gemm_w w = {.fmt = GEMM_F32, .N = N, .K = K, .f32 = W};
    if (!gemm_run(p, &w, X, M, Y, accumulate)) vsr_gemm_f32_ref(X, M, K, W, N, Y, accumulate);
}

void vsr_gemm_bf16(vsr_pool *p, const float *X, int64_t M, int64_t K, const uint16_t *W,
                   int64_t N, float *Y, int accumulate) {
    gemm_w w = {.fmt = GEMM_BF16, .N = N, .K = K, .bf16 = W};
    if (!gemm_run(p, &w, X, M, Y, accumulate)) vsr_gemm_bf16_ref(X, M, K, W, N, Y, accumulate);
}

void vsr_gemm_int4(vsr_pool *p, const float *X, int64_t M, const vsr_int4_weight *q, float *Y,
                   int accumulate) {
    gemm_w w = {.N = q->N, .K = q->K, .packed = q->packed, .scale = q->scale_bf16, .zp = q->zp,
                .G = int4_groups(q)};
    int32_t *owned = NULL;
    if (!int4_column_order(q)) {
        w.fmt = GEMM_INT4_LANE;
        w.gidx = q->g_idx;
    } else if (q->group > 0 && q->group % 16 != 0) {
        /* A group that can end mid-vector: give every column its group explicitly. */
        owned = malloc((size_t)(q->K > 0 ? q->K : 1) * sizeof *owned);
        if (!owned) {
            vsr_gemm_int4_ref(X, M, q, Y, accumulate);
            return;
        }
        for (int64_t k = 0; k < q->K; k++) owned[k] = (int32_t)(k / q->group);
        w.fmt = GEMM_INT4_LANE;
        w.gidx = owned;
    } else {
        w.fmt = GEMM_INT4_UNIFORM;
        w.gsz = q->group > 0 ? q->group : (q->K > 0 ? q->K : 1);
    }
    if (!gemm_run(p, &w, X, M, Y, accumulate)) vsr_gemm_int4_ref(X, M, q, Y, accumulate);
    free(owned);
}
