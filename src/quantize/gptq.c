/* src/quantize/gptq.c: GPTQ (Frantar et al. 2022, arXiv:2210.17323) into compressed-tensors'
 * pack-quantized int4 layout.
 *
 * What llm-compressor's GPTQModifier does (0.14), and so what this does:
 *   - scales / zero points come from round-to-nearest min-max on the ORIGINAL weight before GPTQ
 *     runs (the observer), in compressed-tensors' BF16 arithmetic: vsr_quantize_int4_rtn;
 *   - act-order permutes columns by decreasing H diagonal; "weight"/static keeps column-range
 *     groups, "group"/dynamic forms the groups in permuted order and records weight_g_idx;
 *   - dead columns (zero diagonal): diagonal 1, weight 0;
 *   - dampening: damp * mean(diag H) added to the diagonal;
 *   - U = upper Cholesky factor of H^-1; column j in processing order is quantized with its
 *     group's scale and its error (w - q) / U[j][j] times U[j][j+1:] is subtracted from the
 *     columns not yet quantized.
 * Differences, on purpose: FP64 throughout (llm-compressor: FP32), and the error is propagated
 * row by row (rows are independent given U) instead of in lazy column blocks of 128: the same
 * arithmetic in another order. An indefinite Hessian is an error, not a silent RTN fallback. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/threadpool.h"
#include "quantize/quant_internal.h"
#include "vsr/calibrate.h"
#include "vsr/dtype.h"
#include "vsr/quant.h"

/* ---- dense FP64 linear algebra on K x K row-major matrices ---- */

/* In place: A = L L^T, lower triangle holds L (upper left as is). Returns the failing column
 * or -1. */
static int64_t cholesky_lower(double *A, int64_t K) {
    for (int64_t j = 0; j < K; j++) {
        double *aj = A + j * K;
        double d = aj[j];
        for (int64_t t = 0; t < j; t++) d -= aj[t] * aj[t];
        if (!(d > 0.0) || !isfinite(d)) return j;
        d = sqrt(d);
        aj[j] = d;
        for (int64_t i = j + 1; i < K; i++) {
            double *ai = A + i * K;
            double s = ai[j];
            for (int64_t t = 0; t < j; t++) s -= ai[t] * aj[t];
            ai[j] = s / d;
        }
    }
    return -1;
}

/* Hinv = (L L^T)^-1 from the lower factor L (lower triangle of A): M = L^-1 (lower), then
 * Hinv = M^T M. Writes the full symmetric Hinv. */
static int inverse_from_cholesky(const double *A, int64_t K, double *Hinv) {
    double *M = calloc((size_t)K * (size_t)K, sizeof *M);
    if (!M) return -1;
    for (int64_t j = 0; j < K; j++) { /* column j of L^-1 by forward substitution */
        M[j * K + j] = 1.0 / A[j * K + j];
        for (int64_t i = j + 1; i < K; i++) {
            double s = 0.0;
            for (int64_t t = j; t < i; t++) s += A[i * K + t] * M[t * K + j];
            M[i * K + j] = -s / A[i * K + i];
        }
    }
    /* Hinv[a][b] = sum_{t >= max(a,b)} M[t][a] M[t][b] */
    memset(Hinv, 0, sizeof(double) * (size_t)K * (size_t)K);
    for (int64_t t = 0; t < K; t++) {
        const double *mt = M + t * K;
        for (int64_t a = 0; a <= t; a++) {
            double ma = mt[a];
            if (ma == 0.0) continue;
            double *ha = Hinv + a * K;
            for (int64_t b = 0; b <= a; b++) ha[b] += ma * mt[b];
        }
    }
    for (int64_t a = 0; a < K; a++)
        for (int64_t b = 0; b < a; b++) Hinv[b * K + a] = Hinv[a * K + b];
    free(M);
    return 0;
}

/* ---- the column loop, rows in parallel ---- */

typedef struct gptq_job {
    int64_t N, K, G;
    const double *U;       /* upper factor of H^-1, K x K, in processing order */
    double *W;             /* [N, K] in processing order, updated in place */
    const int64_t *grp;    /* [K] group of processing column j */
    const int64_t *perm;   /* [K] original column of processing column j */
    const uint16_t *scale; /* [N, G] bf16 */
    const uint32_t *zp;    /* packed or NULL (symmetric) */
    uint32_t *packed;      /* [N, K/8] */
} gptq_job;

#define ROW_TILE 8

static void gptq_rows(void *ctx, int64_t lo, int64_t hi, int worker) {
    (void)worker;
    const gptq_job *J = ctx;
    const int64_t K = J->K, words = K / 8;
    for (int64_t r0 = lo; r0 < hi; r0 += ROW_TILE) {
        int64_t nr = hi - r0 < ROW_TILE ? hi - r0 : ROW_TILE;
        double err[ROW_TILE];
        for (int64_t j = 0; j < K; j++) {
            const double *u = J->U + j * K;
            const double d = u[j];
            for (int64_t r = 0; r < nr; r++) {
                int64_t n = r0 + r;
                double *w = J->W + n * K;
                double s = vsr_bf16_to_f32(J->scale[n * J->G + J->grp[j]]);
                double z = J->zp ? (double)vsr_int4_zp_get(J->zp, J->G, n, J->grp[j]) : 0.0;
                double x = w[j] / s + z;
                x = x < -8.0 ? -8.0 : x > 7.0 ? 7.0 : x;
                int q = (int)nearbyint(x); /* round half to even (default rounding mode) */
                double deq = ((double)q - z) * s;
                err[r] = (w[j] - deq) / d;
                vsr_int4_put(J->packed + n * words, J->perm[j], q); /* zp included, as CT stores it */
            }
            for (int64_t r = 0; r < nr; r++) {
                double e = err[r];
                if (e == 0.0) continue;
                double *w = J->W + (r0 + r) * K;
                for (int64_t t = j + 1; t < K; t++) w[t] -= e * u[t];
            }
        }
    }
}

static void stable_argsort_desc(const double *v, int64_t K, int64_t *idx);

vsr_status vsr_gptq_quantize(const uint16_t *w_bf16, int64_t N, int64_t K, const double *H, int group,
                             int actorder, double damp, bool symmetric, uint32_t *packed, uint16_t *scale_bf16,
                             uint32_t *zp_packed, int32_t *g_idx, vsr_err *err) {
    if (!w_bf16 || !H || !packed || !scale_bf16 || N <= 0 || K <= 0)
        return vsr_err_set(err, VSR_E_INVALID, "gptq: needs a weight, a Hessian and outputs (N %lld, K %lld)",
                           (long long)N, (long long)K);
    if (K % 8)
        return vsr_err_set(err, VSR_E_INVALID, "gptq: in_features %lld is not a multiple of 8 (int4 packs 8 per word)",
                           (long long)K);
    if (!(group == -1 || (group > 0 && K % group == 0)))
        return vsr_err_set(err, VSR_E_INVALID,
                           "gptq: group size %d does not divide in_features %lld (expected -1 or a divisor)", group,
                           (long long)K);
    if (actorder < VSR_ACTORDER_NONE || actorder > VSR_ACTORDER_WEIGHT)
        return vsr_err_set(err, VSR_E_INVALID, "gptq: actorder %d (expected none, group or weight)", actorder);
    if (actorder == VSR_ACTORDER_GROUP && group <= 0)
        return vsr_err_set(err, VSR_E_INVALID, "gptq: act-order group needs a group size > 0 (got %d)", group);
    if (actorder == VSR_ACTORDER_GROUP && !g_idx)
        return vsr_err_set(err, VSR_E_INVALID, "gptq: act-order group writes weight_g_idx: no g_idx output given");
    if (!symmetric && !zp_packed)
        return vsr_err_set(err, VSR_E_INVALID, "gptq: asymmetric quantization writes zero points: no output given");
    if (!(damp >= 0.0) || !isfinite(damp))
        return vsr_err_set(err, VSR_E_INVALID, "gptq: dampening fraction %g (expected a finite value >= 0)", damp);

    const int64_t G = group > 0 ? K / group : 1;
    const size_t KK = (size_t)K * (size_t)K;
    vsr_status st = VSR_OK;
    int64_t *perm = malloc(sizeof *perm * (size_t)K), *grp = malloc(sizeof *grp * (size_t)K);
    double *diag = malloc(sizeof *diag * (size_t)K), *A = malloc(sizeof *A * KK), *U = malloc(sizeof *U * KK);
    double *W = malloc(sizeof *W * (size_t)N * (size_t)K);
    uint16_t *wp = NULL;
    uint32_t *scratch = malloc(sizeof *scratch * (size_t)N * (size_t)(K / 8));
    if (!perm || !grp || !diag || !A || !U || !W || !scratch) {
        st = vsr_err_set(err, VSR_E_NOMEM, "gptq: out of memory for a [%lld, %lld] weight", (long long)N,
                         (long long)K);
        goto out;
    }
    for (int64_t k = 0; k < K; k++) diag[k] = H[k * K + k], perm[k] = k;
    if (actorder != VSR_ACTORDER_NONE) stable_argsort_desc(diag, K, perm);

    /* scales and zero points of the original weight (the observer's min-max RTN) */
    if (actorder == VSR_ACTORDER_GROUP) {
        if (!(wp = malloc(sizeof *wp * (size_t)N * (size_t)K))) {
            st = vsr_err_set(err, VSR_E_NOMEM, "gptq: out of memory");
            goto out;
        }
        for (int64_t n = 0; n < N; n++)
            for (int64_t j = 0; j < K; j++) wp[n * K + j] = w_bf16[n * K + perm[j]];
        vsr_quantize_int4_rtn(wp, N, K, group, symmetric, NULL, scratch, scale_bf16, symmetric ? NULL : zp_packed);
        for (int64_t j = 0; j < K; j++) grp[j] = j / group, g_idx[perm[j]] = (int32_t)(j / group);
    } else {
        vsr_quantize_int4_rtn(w_bf16, N, K, group, symmetric, NULL, scratch, scale_bf16,
                              symmetric ? NULL : zp_packed);
        for (int64_t j = 0; j < K; j++) grp[j] = group > 0 ? perm[j] / group : 0;
    }

    /* permuted Hessian and weight; dead columns; dampening */
    for (int64_t a = 0; a < K; a++)
        for (int64_t b = 0; b < K; b++) A[a * K + b] = H[perm[a] * K + perm[b]];
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < K; j++) W[n * K + j] = vsr_bf16_to_f32(w_bf16[n * K + perm[j]]);
    double mean = 0.0;
    for (int64_t j = 0; j < K; j++) {
        if (A[j * K + j] == 0.0) {
            A[j * K + j] = 1.0;
            for (int64_t n = 0; n < N; n++) W[n * K + j] = 0.0;
        }
        mean += A[j * K + j];
    }
    mean /= (double)K;
    for (int64_t j = 0; j < K; j++) A[j * K + j] += damp * mean;

    int64_t bad = cholesky_lower(A, K);
    if (bad >= 0) {
        st = vsr_err_set(err, VSR_E_INVALID,
                         "gptq: the Hessian is not positive definite after dampening %g (pivot %lld of %lld); "
                         "raise the dampening fraction or calibrate on more samples",
                         damp, (long long)bad, (long long)K);
        goto out;
    }
    if (inverse_from_cholesky(A, K, U)) {
        st = vsr_err_set(err, VSR_E_NOMEM, "gptq: out of memory");
        goto out;
    }
    /* U = upper Cholesky factor of H^-1: H^-1 = L2 L2^T, U = L2^T */
    if ((bad = cholesky_lower(U, K)) >= 0) {
        st = vsr_err_set(err, VSR_E_INVALID, "gptq: the inverse Hessian lost definiteness at pivot %lld of %lld "
                         "(ill-conditioned; raise the dampening fraction)", (long long)bad, (long long)K);
        goto out;
    }
    for (int64_t a = 0; a < K; a++)
        for (int64_t b = a; b < K; b++) A[a * K + b] = U[b * K + a]; /* A's upper triangle = U */
    for (int64_t a = 0; a < K; a++)
        for (int64_t b = 0; b < a; b++) A[a * K + b] = 0.0;

    memset(packed, 0, sizeof *packed * (size_t)N * (size_t)(K / 8));
    gptq_job J = {N, K, G, A, W, grp, perm, scale_bf16, symmetric ? NULL : zp_packed, packed};
    vsr_pool *pool = vsr_pool_new(0);
    vsr_pool_for(pool, N, ROW_TILE, gptq_rows, &J);
    vsr_pool_free(pool);
out:
    free(perm), free(grp), free(diag), free(A), free(U), free(W), free(wp), free(scratch);
    return st;
}

/* ---- helpers ---- */

static const double *sort_keys;
static int cmp_desc(const void *a, const void *b) {
    int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
    double x = sort_keys[i], y = sort_keys[j];
    if (x > y) return -1;
    if (x < y) return 1;
    return i < j ? -1 : i > j; /* ties keep column order */
}

static pthread_mutex_t sort_lock = PTHREAD_MUTEX_INITIALIZER;

static void stable_argsort_desc(const double *v, int64_t K, int64_t *idx) {
    for (int64_t k = 0; k < K; k++) idx[k] = k;
    pthread_mutex_lock(&sort_lock);
    sort_keys = v;
    qsort(idx, (size_t)K, sizeof *idx, cmp_desc);
    pthread_mutex_unlock(&sort_lock);
}

typedef struct err_job {
    const uint16_t *w, *wq;
    const float *ratio;
    int64_t K;
    const double *H;
    double *partial; /* per worker */
} err_job;

static void err_rows(void *ctx, int64_t lo, int64_t hi, int worker) {
    const err_job *J = ctx;
    enum { R = 8 }; /* rows per H pass (qz_qform_rows) */
    double *e = malloc(sizeof *e * (size_t)(R * J->K)), q8[R];
    if (!e) {
        J->partial[worker] = NAN; /* the caller sees NaN */
        return;
    }
    double acc = 0.0;
    for (int64_t n0 = lo; n0 < hi; n0 += R) {
        const int64_t nr = hi - n0 < R ? hi - n0 : R;
        for (int64_t r = 0; r < nr; r++) {
            const int64_t n = n0 + r;
            for (int64_t k = 0; k < J->K; k++) {
                double q = vsr_bf16_to_f32(J->wq[n * J->K + k]);
                if (J->ratio) q *= (double)J->ratio[k];
                e[r * J->K + k] = (double)vsr_bf16_to_f32(J->w[n * J->K + k]) - q;
            }
        }
        qz_qform_rows(J->H, e, nr, J->K, q8);
        for (int64_t r = 0; r < nr; r++) acc += q8[r]; /* in row order, as one row at a time */
    }
    J->partial[worker] += acc;
    free(e);
}

double vsr_quant_output_error(const uint16_t *w_bf16, const uint16_t *wq_bf16, const float *in_ratio, int64_t N,
                              int64_t K, const double *H, int64_t n_tokens) {
    vsr_pool *pool = vsr_pool_new(0);
    int nw = vsr_pool_size(pool);
    double *partial = calloc((size_t)nw, sizeof *partial);
    if (!partial) {
        vsr_pool_free(pool);
        return NAN;
    }
    err_job J = {w_bf16, wq_bf16, in_ratio, K, H, partial};
    vsr_pool_for(pool, N, 4, err_rows, &J);
    vsr_pool_free(pool);
    double s = 0.0;
    for (int i = 0; i < nw; i++) s += partial[i];
    free(partial);
    return sqrt(s / (double)(n_tokens > 0 ? n_tokens : 1));
}
