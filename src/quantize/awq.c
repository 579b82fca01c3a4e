/* src/quantize/awq.c: AWQ's per-input-channel scale search (Lin et al. 2023, arXiv:2306.00978)
 * as llm-compressor's AWQModifier (0.14) makes its candidates, with the loss measured exactly on
 * the calibration Hessian H = sum x x^T of the balance layers' shared input:
 *   loss(s) = sum_layers sum_tokens ||W x - Q(W s) (x / s)||^2 = sum_layers sum_rows e^T H e,
 *   e = w - q(w s) / s  (per output row).
 * Q is the final quantizer (round-to-nearest min-max in compressed-tensors' BF16 arithmetic on
 * bf16(W s)), so the chosen s is judged by exactly what will be stored. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/threadpool.h"
#include "quantize/quant_internal.h"
#include "vsr/calibrate.h"
#include "vsr/dtype.h"
#include "vsr/quant.h"

typedef struct awq_buf {
    uint16_t *ws;     /* bf16(W s) [N, K] */
    uint16_t *wq;     /* dequantized Q(W s) [N, K] */
    uint32_t *packed; /* [N, K/8] */
    uint16_t *scale;  /* [N, G] */
    uint32_t *zp;     /* [ceil(N/8), G] */
} awq_buf;

typedef struct loss_job {
    const uint16_t *w, *wq;
    const double *inv_s; /* [K] */
    const double *H;
    int64_t K;
    double *partial;
} loss_job;

static void loss_rows(void *ctx, int64_t lo, int64_t hi, int worker) {
    const loss_job *J = ctx;
    enum { R = 8 }; /* rows per H pass (qz_qform_rows) */
    double *e = malloc(sizeof *e * (size_t)(R * J->K)), q8[R];
    if (!e) {
        J->partial[worker] = NAN;
        return;
    }
    double acc = 0.0;
    for (int64_t n0 = lo; n0 < hi; n0 += R) {
        const int64_t nr = hi - n0 < R ? hi - n0 : R;
        for (int64_t r = 0; r < nr; r++) {
            const uint16_t *w = J->w + (n0 + r) * J->K, *q = J->wq + (n0 + r) * J->K;
            for (int64_t k = 0; k < J->K; k++)
                e[r * J->K + k] = (double)vsr_bf16_to_f32(w[k]) - (double)vsr_bf16_to_f32(q[k]) * J->inv_s[k];
        }
        qz_qform_rows(J->H, e, nr, J->K, q8);
        for (int64_t r = 0; r < nr; r++) acc += q8[r]; /* in row order, as one row at a time */
    }
    J->partial[worker] += acc;
    free(e);
}

/* Quantizes bf16(W diag(s)) into b and returns the layer's loss on H. */
static double try_layer(vsr_pool *pool, const vsr_awq_linear *L, int64_t K, int group, bool symmetric,
                        const float *s, const double *inv_s, const double *H, awq_buf *b, double *partial, int nw) {
    const int64_t N = L->N;
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++)
            b->ws[n * K + k] = vsr_f32_to_bf16(vsr_bf16_to_f32(L->w_bf16[n * K + k]) * s[k]);
    vsr_quantize_int4_rtn(b->ws, N, K, group, symmetric, NULL, b->packed, b->scale, symmetric ? NULL : b->zp);
    vsr_dequant_int4_ref(b->packed, b->scale, symmetric ? NULL : b->zp, NULL, N, K, group, b->wq);
    memset(partial, 0, sizeof *partial * (size_t)nw);
    loss_job J = {L->w_bf16, b->wq, inv_s, H, K, partial};
    vsr_pool_for(pool, N, 4, loss_rows, &J);
    double loss = 0.0;
    for (int i = 0; i < nw; i++) loss += partial[i];
    return loss;
}

/* wm[k]: mean over every balance row of |w| / (max |w| of its group + 1e-6). */
static void weight_means(const vsr_awq_linear *lin, int n_lin, int64_t K, int group, double *wm) {
    const int64_t gs = group > 0 ? group : K;
    int64_t rows = 0;
    memset(wm, 0, sizeof *wm * (size_t)K);
    for (int i = 0; i < n_lin; i++) {
        for (int64_t n = 0; n < lin[i].N; n++) {
            const uint16_t *w = lin[i].w_bf16 + n * K;
            for (int64_t g0 = 0; g0 < K; g0 += gs) {
                double amax = 0.0;
                for (int64_t k = g0; k < g0 + gs; k++) amax = fmax(amax, fabs((double)vsr_bf16_to_f32(w[k])));
                for (int64_t k = g0; k < g0 + gs; k++) wm[k] += fabs((double)vsr_bf16_to_f32(w[k])) / (amax + 1e-6);
            }
        }
        rows += lin[i].N;
    }
    for (int64_t k = 0; k < K; k++) wm[k] /= (double)rows;
}

/* One candidate's scales, as llm-compressor computes them (then normalised by sqrt(max*min)). */
static void candidate(const double *xm, const double *wm, int64_t K, double ratio, bool duo, float *s) {
    double mx = 0.0, mn = INFINITY;
    for (int64_t k = 0; k < K; k++) {
        double v = duo ? pow(xm[k], ratio) / (pow(wm[k], 1.0 - ratio) + 1e-4) : pow(xm[k], ratio);
        v = v < 1e-4 ? 1e-4 : v;
        s[k] = (float)v;
        mx = fmax(mx, v), mn = fmin(mn, v);
    }
    double norm = sqrt(mx * mn);
    for (int64_t k = 0; k < K; k++) {
        double v = s[k] / norm;
        s[k] = isfinite(v) ? (float)v : 1.0f;
    }
}

vsr_status vsr_awq_search(const double *H, const double *act_absmean, int64_t K, vsr_awq_linear *lin, int n_lin,
                          int group, bool symmetric, int scaling, int n_grid, float *scales_out,
                          vsr_awq_result *res, vsr_err *err) {
    if (!H || !act_absmean || !lin || n_lin < 1 || !scales_out || K <= 0)
        return vsr_err_set(err, VSR_E_INVALID, "awq: needs a Hessian, activation means, balance layers and an output");
    if (K % 8)
        return vsr_err_set(err, VSR_E_INVALID, "awq: in_features %lld is not a multiple of 8", (long long)K);
    if (!(group == -1 || (group > 0 && K % group == 0)))
        return vsr_err_set(err, VSR_E_INVALID, "awq: group size %d does not divide in_features %lld", group,
                           (long long)K);
    if (scaling < VSR_AWQ_DUO || scaling > VSR_AWQ_BOTH)
        return vsr_err_set(err, VSR_E_INVALID, "awq: scaling mode %d (expected duo, plain or both)", scaling);
    if (n_grid < 3 || n_grid > 1000)
        return vsr_err_set(err, VSR_E_INVALID, "awq: grid of %d points (expected 3..1000)", n_grid);
    for (int i = 0; i < n_lin; i++)
        if (!lin[i].w_bf16 || lin[i].N <= 0 || !lin[i].packed || !lin[i].scale_bf16 || (!symmetric && !lin[i].zp_packed))
            return vsr_err_set(err, VSR_E_INVALID, "awq: balance layer %d has no weight or no outputs", i);
    for (int64_t k = 0; k < K; k++)
        if (!(act_absmean[k] >= 0.0) || !isfinite(act_absmean[k]))
            return vsr_err_set(err, VSR_E_INVALID, "awq: activation mean of channel %lld is %g (expected finite >= 0)",
                               (long long)k, act_absmean[k]);

    /* the candidates: (ratio, duo) */
    int nc = 0;
    double ratios[2 * 1000 + 1];
    bool duos[2 * 1000 + 1];
    if (scaling == VSR_AWQ_DUO) {
        ratios[nc] = 0.0, duos[nc++] = false; /* identity */
        for (int i = 0; i < n_grid - 1; i++) ratios[nc] = (double)i / (n_grid - 2), duos[nc++] = true;
    } else if (scaling == VSR_AWQ_PLAIN) {
        for (int i = 0; i < n_grid; i++) ratios[nc] = (double)i / (n_grid - 1), duos[nc++] = false;
    } else {
        int half = n_grid / 2 < 2 ? 2 : n_grid / 2;
        for (int i = 0; i < half; i++)
            for (int d = 0; d < 2; d++) ratios[nc] = (double)i / (half - 1), duos[nc++] = d;
    }

    const int64_t G = group > 0 ? K / group : 1;
    int64_t Nmax = 0;
    for (int i = 0; i < n_lin; i++) Nmax = lin[i].N > Nmax ? lin[i].N : Nmax;
    vsr_status st = VSR_OK;
    vsr_pool *pool = vsr_pool_new(0);
    int nw = vsr_pool_size(pool);
    awq_buf b = {malloc(sizeof(uint16_t) * (size_t)(Nmax * K)), malloc(sizeof(uint16_t) * (size_t)(Nmax * K)),
                 malloc(sizeof(uint32_t) * (size_t)(Nmax * K / 8)), malloc(sizeof(uint16_t) * (size_t)(Nmax * G)),
                 calloc((size_t)((Nmax + 7) / 8 * G), sizeof(uint32_t))};
    double *wm = malloc(sizeof *wm * (size_t)K), *inv_s = malloc(sizeof *inv_s * (size_t)K);
    double *partial = malloc(sizeof *partial * (size_t)nw);
    float *s = malloc(sizeof *s * (size_t)K);
    if (!b.ws || !b.wq || !b.packed || !b.scale || !b.zp || !wm || !inv_s || !partial || !s) {
        st = vsr_err_set(err, VSR_E_NOMEM, "awq: out of memory for %d balance layers of in_features %lld", n_lin,
                         (long long)K);
        goto out;
    }
    weight_means(lin, n_lin, K, group, wm);
    double best = INFINITY, rtn = NAN;
    int best_c = -1;
    for (int c = 0; c < nc; c++) {
        candidate(act_absmean, wm, K, ratios[c], duos[c], s);
        for (int64_t k = 0; k < K; k++) inv_s[k] = 1.0 / (double)s[k];
        double loss = 0.0;
        for (int i = 0; i < n_lin; i++) loss += try_layer(pool, &lin[i], K, group, symmetric, s, inv_s, H, &b, partial, nw);
        if (ratios[c] == 0.0 && !duos[c]) rtn = loss;
        if (loss < best) best = loss, best_c = c;
    }
    if (best_c < 0) {
        st = vsr_err_set(err, VSR_E_INVALID, "awq: no candidate gave a finite loss (NaN or Inf in the statistics)");
        goto out;
    }
    candidate(act_absmean, wm, K, ratios[best_c], duos[best_c], scales_out);
    for (int64_t k = 0; k < K; k++) inv_s[k] = 1.0 / (double)scales_out[k];
    for (int i = 0; i < n_lin; i++) {
        awq_buf o = {b.ws, b.wq, lin[i].packed, lin[i].scale_bf16, symmetric ? b.zp : lin[i].zp_packed};
        lin[i].loss = try_layer(pool, &lin[i], K, group, symmetric, scales_out, inv_s, H, &o, partial, nw);
    }
    if (res) *res = (vsr_awq_result){ratios[best_c], duos[best_c], best, rtn, nc};
out:
    vsr_pool_free(pool);
    free(b.ws), free(b.wq), free(b.packed), free(b.scale), free(b.zp);
    free(wm), free(inv_s), free(partial), free(s);
    return st;
}

void vsr_awq_fold_norm_offset1(uint16_t *norm_w_bf16, const float *s, int64_t K) {
    for (int64_t k = 0; k < K; k++) {
        float w = vsr_bf16_to_f32(norm_w_bf16[k]);
        norm_w_bf16[k] = vsr_f32_to_bf16((1.0f + w) / s[k] - 1.0f);
    }
}

void vsr_awq_fold_linear_rows(uint16_t *w_prev_bf16, int64_t Kp, const float *s, int64_t K) {
    for (int64_t k = 0; k < K; k++)
        for (int64_t j = 0; j < Kp; j++)
            w_prev_bf16[k * Kp + j] = vsr_f32_to_bf16(vsr_bf16_to_f32(w_prev_bf16[k * Kp + j]) / s[k]);
}
