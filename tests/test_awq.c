/* tests/test_awq.c: AWQ's scale search (src/quantize/awq.c) against a scalar reference that
 * works on the activations X themselves (not on H):
 *   - every candidate's scales rebuilt from llm-compressor's formulas, its loss
 *     ||X W^T - (X/s) Q(bf16(W s))^T||^2 computed token by token: the search returns the minimum,
 *     its scales, and the quantized weights of that candidate bit for bit;
 *   - with salient input channels AWQ beats round-to-nearest; s = 1 is round-to-nearest;
 *   - the folds keep the layer function; refusals. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "vsr/calibrate.h"
#include "vsr/dtype.h"
#include "vsr/quant.h"

enum { K = 64, T = 300, GROUP = 32, NL = 2 };
static const int64_t Ns[NL] = {48, 40};

typedef struct fixture {
    double X[T * K];
    double H[K * K], xm[K];
    uint16_t *w[NL];
} fixture;

/* activations with a few salient channels (AWQ's premise) */
static void make_fixture(fixture *f, uint64_t seed) {
    test_rng_seed(seed);
    for (int t = 0; t < T; t++)
        for (int k = 0; k < K; k++) f->X[t * K + k] = test_rndf() * (k % 13 == 5 ? 12.0 : 1.0 + 0.02 * k);
    memset(f->H, 0, sizeof f->H);
    memset(f->xm, 0, sizeof f->xm);
    for (int t = 0; t < T; t++)
        for (int a = 0; a < K; a++) {
            f->xm[a] += fabs(f->X[t * K + a]) / T;
            for (int b = 0; b < K; b++) f->H[a * K + b] += f->X[t * K + a] * f->X[t * K + b];
        }
    for (int i = 0; i < NL; i++) {
        f->w[i] = malloc(sizeof(uint16_t) * (size_t)(Ns[i] * K));
        for (int64_t j = 0; j < Ns[i] * K; j++) f->w[i][j] = vsr_f32_to_bf16(0.1f * test_rndf());
    }
}

/* The reference: llm-compressor's scale formulas, then the loss on X token by token. */
static void ref_scales(const fixture *f, double ratio, bool duo, float *s) {
    double wm[K] = {0};
    int rows = 0;
    for (int i = 0; i < NL; i++) {
        for (int64_t n = 0; n < Ns[i]; n++)
            for (int g = 0; g < K / GROUP; g++) {
                double amax = 0;
                for (int k = g * GROUP; k < (g + 1) * GROUP; k++)
                    amax = fmax(amax, fabs(vsr_bf16_to_f32(f->w[i][n * K + k])));
                for (int k = g * GROUP; k < (g + 1) * GROUP; k++)
                    wm[k] += fabs(vsr_bf16_to_f32(f->w[i][n * K + k])) / (amax + 1e-6);
            }
        rows += (int)Ns[i];
    }
    double v[K], mx = 0, mn = INFINITY;
    for (int k = 0; k < K; k++) {
        wm[k] /= rows;
        v[k] = duo ? pow(f->xm[k], ratio) / (pow(wm[k], 1 - ratio) + 1e-4) : pow(f->xm[k], ratio);
        if (v[k] < 1e-4) v[k] = 1e-4;
        mx = fmax(mx, v[k]), mn = fmin(mn, v[k]);
    }
    for (int k = 0; k < K; k++) s[k] = (float)((double)(float)v[k] / sqrt(mx * mn));
}

static double ref_loss(const fixture *f, int i, const float *s, bool sym, uint32_t *pk, uint16_t *sc, uint32_t *zp) {
    int64_t N = Ns[i];
    uint16_t *ws = malloc(sizeof *ws * (size_t)(N * K)), *dq = malloc(sizeof *dq * (size_t)(N * K));
    for (int64_t n = 0; n < N; n++)
        for (int k = 0; k < K; k++) ws[n * K + k] = vsr_f32_to_bf16(vsr_bf16_to_f32(f->w[i][n * K + k]) * s[k]);
    vsr_quantize_int4_rtn(ws, N, K, GROUP, sym, NULL, pk, sc, sym ? NULL : zp);
    vsr_dequant_int4_ref(pk, sc, sym ? NULL : zp, NULL, N, K, GROUP, dq);
    double loss = 0;
    for (int t = 0; t < T; t++)
        for (int64_t n = 0; n < N; n++) {
            double y = 0, yq = 0;
            for (int k = 0; k < K; k++) {
                y += vsr_bf16_to_f32(f->w[i][n * K + k]) * f->X[t * K + k];
                yq += vsr_bf16_to_f32(dq[n * K + k]) * (f->X[t * K + k] / s[k]);
            }
            loss += (y - yq) * (y - yq);
        }
    free(ws), free(dq);
    return loss;
}

static void run_mode(int scaling, bool sym) {
    static fixture f;
    make_fixture(&f, 21 + (uint64_t)scaling);
    uint32_t pk[NL][48 * K / 8], zp[NL][6 * 2] = {{0}}, rpk[48 * K / 8], rzp[6 * 2];
    uint16_t sc[NL][48 * 2], rsc[48 * 2];
    vsr_awq_linear lin[NL];
    for (int i = 0; i < NL; i++) lin[i] = (vsr_awq_linear){f.w[i], Ns[i], pk[i], sc[i], zp[i], 0};
    float s[K];
    vsr_awq_result res;
    vsr_err err = {0};
    vsr_status st = vsr_awq_search(f.H, f.xm, K, lin, NL, GROUP, sym, scaling, 20, s, &res, &err);
    CHECK_OK(st, err);
    /* the reference candidate list (llm-compressor's _get_grid_search_params) */
    double best = INFINITY, rtn = NAN, best_r = -1;
    bool best_d = false;
    int n = 0;
    for (int c = 0; c < 40; c++) {
        double r;
        bool d;
        if (scaling == VSR_AWQ_DUO) {
            if (c >= 20) break;
            r = c == 0 ? 0 : (double)(c - 1) / 18, d = c != 0;
        } else if (scaling == VSR_AWQ_PLAIN) {
            if (c >= 20) break;
            r = (double)c / 19, d = false;
        } else {
            if (c >= 20) break;
            r = (double)(c / 2) / 9, d = c % 2;
        }
        float cs[K];
        ref_scales(&f, r, d, cs);
        double loss = 0;
        for (int i = 0; i < NL; i++) loss += ref_loss(&f, i, cs, sym, rpk, rsc, rzp);
        if (r == 0 && !d) rtn = loss;
        if (loss < best) best = loss, best_r = r, best_d = d;
        n++;
    }
    CHECK(res.candidates == n);
    CHECK_MSG(fabs(res.best_loss - best) <= 1e-9 * best, "best loss %.12g, reference %.12g", res.best_loss, best);
    CHECK_MSG(fabs(res.rtn_loss - rtn) <= 1e-9 * rtn, "s=1 loss %.12g, reference %.12g", res.rtn_loss, rtn);
    CHECK(fabs(res.best_ratio - best_r) < 1e-12 && res.best_duo == best_d);
    /* s = 1 is a candidate (except in the plain grid, where ratio 0 gives it too): never worse; on
     * these salient channels clearly better with zero points (symmetric gains little here) */
    CHECK(best <= rtn);
    if (!sym) CHECK_MSG(best < 0.9 * rtn, "scaling %d: AWQ %.4g, RTN %.4g", scaling, best, rtn);
    printf("  scaling %d sym %d: loss AWQ %.4g (ratio %.3f%s), RTN %.4g (%.2fx), %d candidates\n", scaling, sym, best,
           best_r, best_d ? " duo" : "", rtn, best / rtn, n);
    float rs[K];
    ref_scales(&f, best_r, best_d, rs);
    CHECK(!memcmp(rs, s, sizeof rs));
    double sum = 0;
    for (int i = 0; i < NL; i++) {
        double l = ref_loss(&f, i, rs, sym, rpk, rsc, rzp);
        sum += lin[i].loss;
        CHECK(fabs(lin[i].loss - l) <= 1e-9 * l);
        CHECK(!memcmp(rpk, pk[i], sizeof(uint32_t) * (size_t)(Ns[i] * K / 8)));
        CHECK(!memcmp(rsc, sc[i], sizeof(uint16_t) * (size_t)(Ns[i] * 2)));
        if (!sym) CHECK(!memcmp(rzp, zp[i], sizeof(uint32_t) * (size_t)((Ns[i] + 7) / 8 * 2)));
    }
    CHECK(fabs(sum - res.best_loss) <= 1e-9 * sum);
    for (int i = 0; i < NL; i++) free(f.w[i]);
}

TEST(search_matches_reference_duo_asym) { run_mode(VSR_AWQ_DUO, false); }
TEST(search_matches_reference_duo_sym) { run_mode(VSR_AWQ_DUO, true); }
TEST(search_matches_reference_plain) { run_mode(VSR_AWQ_PLAIN, false); }
TEST(search_matches_reference_both) { run_mode(VSR_AWQ_BOTH, false); }

TEST(folds_keep_the_function) {
    float s[8] = {0.5f, 2.0f, 1.25f, 3.0f, 0.75f, 1.0f, 4.0f, 0.3f};
    uint16_t norm[8], prev[8 * 3];
    for (int k = 0; k < 8; k++) norm[k] = vsr_f32_to_bf16(0.1f * (float)k - 0.3f);
    for (int i = 0; i < 24; i++) prev[i] = vsr_f32_to_bf16(0.05f * (float)i - 0.5f);
    uint16_t n2[8], p2[24];
    memcpy(n2, norm, sizeof n2), memcpy(p2, prev, sizeof p2);
    vsr_awq_fold_norm_offset1(n2, s, 8);
    vsr_awq_fold_linear_rows(p2, 3, s, 8);
    for (int k = 0; k < 8; k++) {
        /* (1 + w') = (1 + w) / s to BF16 precision of w' */
        double want = (1.0 + vsr_bf16_to_f32(norm[k])) / s[k], got = 1.0 + vsr_bf16_to_f32(n2[k]);
        CHECK_MSG(fabs(got - want) <= fabs(want - 1.0) * 0x1p-8 + 1e-7, "k %d: %g vs %g", k, got, want);
        for (int j = 0; j < 3; j++) {
            double pw = vsr_bf16_to_f32(prev[k * 3 + j]) / s[k], pg = vsr_bf16_to_f32(p2[k * 3 + j]);
            CHECK(fabs(pg - pw) <= fabs(pw) * 0x1p-8);
        }
    }
}

TEST(refusals) {
    double H[16 * 16] = {0}, xm[16] = {0};
    uint16_t w[8 * 16] = {0};
    uint32_t pk[16], zp[2];
    uint16_t sc[16];
    float s[16];
    vsr_awq_linear lin = {w, 8, pk, sc, zp, 0};
    vsr_err err = {0};
    vsr_status st = vsr_awq_search(H, xm, 12, &lin, 1, -1, false, 0, 20, s, NULL, &err);
    CHECK_ERR(st, err, VSR_E_INVALID, "in_features 12 is not a multiple of 8");
    st = vsr_awq_search(H, xm, 16, &lin, 1, 24, false, 0, 20, s, NULL, &err);
    CHECK_ERR(st, err, VSR_E_INVALID, "group size 24 does not divide in_features 16");
    st = vsr_awq_search(H, xm, 16, &lin, 1, 8, false, 5, 20, s, NULL, &err);
    CHECK_ERR(st, err, VSR_E_INVALID, "scaling mode 5");
    st = vsr_awq_search(H, xm, 16, &lin, 1, 8, false, 0, 2, s, NULL, &err);
    CHECK_ERR(st, err, VSR_E_INVALID, "grid of 2 points");
    st = vsr_awq_search(H, xm, 16, &lin, 0, 8, false, 0, 20, s, NULL, &err);
    CHECK_ERR(st, err, VSR_E_INVALID, "needs a Hessian, activation means, balance layers");
    lin.zp_packed = NULL;
    st = vsr_awq_search(H, xm, 16, &lin, 1, 8, false, 0, 20, s, NULL, &err);
    CHECK_ERR(st, err, VSR_E_INVALID, "balance layer 0 has no weight or no outputs");
    lin.zp_packed = zp;
    xm[3] = NAN;
    st = vsr_awq_search(H, xm, 16, &lin, 1, 8, false, 0, 20, s, NULL, &err);
    CHECK_ERR(st, err, VSR_E_INVALID, "activation mean of channel 3 is nan");
}

int main(void) {
    RUN(search_matches_reference_duo_asym);
    RUN(search_matches_reference_duo_sym);
    RUN(search_matches_reference_plain);
    RUN(search_matches_reference_both);
    RUN(folds_keep_the_function);
    RUN(refusals);
    return test_summary();
}
