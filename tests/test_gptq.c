/* tests/test_gptq.c: GPTQ (src/quantize/gptq.c) against scalar references.
 *   - a diagonal Hessian propagates no error: GPTQ is round-to-nearest (compressed-tensors'
 *     arithmetic) except where RTN's BF16 rounding of w/s crosses a rounding boundary;
 *   - act-order group: g_idx is the rank of each column by decreasing H diagonal / group, and the
 *     scales are RTN's on that g_idx;
 *   - an independent textbook GPTQ (OBQ updates on the explicit inverse Hessian, column by column,
 *     FP64) chooses the same integers;
 *   - on correlated inputs GPTQ's output error is well below RTN's;
 *   - dead columns, the output-error measure against X directly, refusals;
 *   - the calibration Hessian's blocked accumulation (hessian.c) equals the plain loop bit for bit,
 *     on every ISA this CPU has, inline and over a pool, across calls and ragged shapes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/gemm.h"
#include "backend/cpu/threadpool.h"
#include "quantize/quant_internal.h"
#include "test.h"
#include "vsr/calibrate.h"
#include "vsr/dtype.h"
#include "vsr/quant.h"

static uint16_t *rand_weight(int64_t N, int64_t K, float amp) {
    uint16_t *w = malloc(sizeof *w * (size_t)(N * K));
    for (int64_t i = 0; i < N * K; i++) w[i] = vsr_f32_to_bf16(amp * test_rndf());
    return w;
}

/* X [T, K] with correlated channels: x = z A, A lower-triangular with a decaying band, plus a few
 * channels of larger scale (what real activations look like). Returns H = X^T X. */
static double *correlated_inputs(int64_t T, int64_t K, double **X_out) {
    double *X = calloc((size_t)(T * K), sizeof *X), *z = malloc(sizeof *z * (size_t)K);
    for (int64_t t = 0; t < T; t++) {
        for (int64_t k = 0; k < K; k++) z[k] = test_rndf();
        for (int64_t k = 0; k < K; k++) {
            double v = 0.0;
            for (int64_t j = k > 6 ? k - 6 : 0; j <= k; j++) v += z[j] * (1.0 / (1.0 + (double)(k - j)));
            X[t * K + k] = v * (k % 17 == 3 ? 8.0 : 1.0);
        }
    }
    double *H = calloc((size_t)(K * K), sizeof *H);
    for (int64_t t = 0; t < T; t++)
        for (int64_t a = 0; a < K; a++)
            for (int64_t b = 0; b < K; b++) H[a * K + b] += X[t * K + a] * X[t * K + b];
    free(z);
    if (X_out) *X_out = X;
    else free(X);
    return H;
}

static int nib(const uint32_t *packed, int64_t K, int64_t n, int64_t k) {
    return (int)((packed[n * (K / 8) + k / 8] >> (4 * (k % 8))) & 15u) - 8;
}

static double bf16r(double x) { return vsr_bf16_to_f32(vsr_f32_to_bf16((float)x)); }
static int round_clamp(double x) { return (int)nearbyint(x < -8 ? -8 : x > 7 ? 7 : x); }

/* With H diagonal no error propagates: every GPTQ integer is round(w/s + zp) of the exact quotient,
 * with RTN's scales and zero points, and equals RTN's integer except where RTN's BF16 rounding of
 * w/s (and of + zp) lands on the other side of a half (counted in *ties). */
static void check_rtn_equal(const uint16_t *w, int64_t N, int64_t K, int group, bool sym, const int32_t *g_idx,
                            const uint32_t *pk, const uint16_t *sc, const uint32_t *zp, int *ties) {
    int64_t G = group > 0 ? K / group : 1, words = K / 8;
    uint32_t *rp = calloc((size_t)(N * words), 4), *rz = calloc((size_t)((N + 7) / 8 * G), 4);
    uint16_t *rs = malloc(sizeof *rs * (size_t)(N * G));
    vsr_quantize_int4_rtn(w, N, K, group, sym, g_idx, rp, rs, sym ? NULL : rz);
    CHECK(!memcmp(rs, sc, sizeof *rs * (size_t)(N * G)));
    if (!sym) CHECK(!memcmp(rz, zp, 4 * (size_t)((N + 7) / 8 * G)));
    int bad = 0, bad_rtn = 0;
    *ties = 0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++) {
            int64_t g = group > 0 ? (g_idx ? g_idx[k] : k / group) : 0;
            double s = vsr_bf16_to_f32(sc[n * G + g]), z = sym ? 0 : vsr_int4_zp_get(zp, G, n, g);
            double wv = vsr_bf16_to_f32(w[n * K + k]);
            int exact = round_clamp(wv / s + z);
            int via_bf16 = round_clamp(sym ? bf16r(wv / s) : bf16r(bf16r(wv / s) + z));
            bad += nib(pk, K, n, k) != exact;
            bad_rtn += nib(rp, K, n, k) != via_bf16;
            *ties += exact != via_bf16;
        }
    CHECK_MSG(bad == 0, "%d integers are not round(w/s + zp)", bad);
    CHECK_MSG(bad_rtn == 0, "%d RTN integers not as recomputed", bad_rtn);
    free(rp), free(rz), free(rs);
}

TEST(diagonal_hessian_is_round_to_nearest) {
    test_rng_seed(11);
    const int64_t N = 24, K = 256;
    uint16_t *w = rand_weight(N, K, 0.5f);
    double *H = calloc((size_t)(K * K), sizeof *H);
    for (int64_t k = 0; k < K; k++) H[k * K + k] = 1.0 + (double)((k * 37) % 11); /* distinct-ish order */
    uint32_t *pk = malloc(4 * (size_t)(N * K / 8)), zp[3 * 2 * 4];
    uint16_t sc[24 * 2];
    int32_t gi[256];
    const int acts[3] = {VSR_ACTORDER_NONE, VSR_ACTORDER_WEIGHT, VSR_ACTORDER_GROUP};
    for (int sym = 0; sym < 2; sym++)
        for (int a = 0; a < 3; a++) {
            vsr_err err = {0};
            memset(zp, 0, sizeof zp);
            vsr_status st = vsr_gptq_quantize(w, N, K, H, 128, acts[a], 0.01, sym, pk, sc, zp, gi, &err);
            CHECK_OK(st, err);
            int ties = 0;
            check_rtn_equal(w, N, K, 128, sym, acts[a] == VSR_ACTORDER_GROUP ? gi : NULL, pk, sc, zp, &ties);
            CHECK_MSG(ties < N * K / 50, "%d of %lld on a BF16 rounding boundary", ties, (long long)(N * K));
        }
    free(w), free(H), free(pk);
}

TEST(actorder_group_g_idx_layout) {
    test_rng_seed(12);
    const int64_t N = 16, K = 64;
    uint16_t *w = rand_weight(N, K, 1.0f);
    double *H = correlated_inputs(200, K, NULL);
    int32_t gi[64];
    uint32_t pk[16 * 8];
    uint16_t sc[16 * 4];
    vsr_err err = {0};
    vsr_status st = vsr_gptq_quantize(w, N, K, H, 16, VSR_ACTORDER_GROUP, 0.01, true, pk, sc, NULL, gi, &err);
    CHECK_OK(st, err);
    /* rank of column k by decreasing diagonal (ties by index) / 16 */
    for (int64_t k = 0; k < K; k++) {
        int64_t rank = 0;
        for (int64_t j = 0; j < K; j++) {
            double a = H[j * K + j], b = H[k * K + k];
            if (a > b || (a == b && j < k)) rank++;
        }
        CHECK(gi[k] == (int32_t)(rank / 16));
    }
    int count[4] = {0};
    for (int64_t k = 0; k < K; k++) count[gi[k]]++;
    for (int g = 0; g < 4; g++) CHECK(count[g] == 16);
    /* scales are those of RTN with this g_idx (min-max over each group's columns of the original weight) */
    uint32_t rp[16 * 8];
    uint16_t rs[16 * 4];
    vsr_quantize_int4_rtn(w, N, K, 16, true, gi, rp, rs, NULL);
    CHECK(!memcmp(rs, sc, sizeof rs));
    /* and the dequantizer reads it: every dequantized value is a multiple of its group's scale */
    uint16_t deq[16 * 64];
    vsr_dequant_int4_ref(pk, sc, NULL, gi, N, K, 16, deq);
    int off = 0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++)
            off += deq[n * K + k] != vsr_f32_to_bf16((float)nib(pk, K, n, k) * vsr_bf16_to_f32(sc[n * 4 + gi[k]]));
    CHECK(off == 0);
    free(w), free(H);
}

/* Textbook GPTQ / OBQ (Frantar & Alistarh 2022, eq. 2-3) on the explicit inverse: quantize column j
 * (processing order), w_F -= (w_j - q_j) / Hinv_jj * Hinv_{j,F}, then Hinv <- Hinv - Hinv_{:,j}
 * Hinv_{j,:} / Hinv_jj. Gauss-Jordan inverse; FP64. Returns the integers [N, K] (original order). */
static int *reference_gptq(const uint16_t *w, int64_t N, int64_t K, const double *H0, int group, bool actorder_weight,
                           double damp, const uint16_t *sc, bool sym, const uint32_t *zp) {
    int64_t G = K / group;
    int64_t *perm = malloc(sizeof *perm * (size_t)K);
    for (int64_t k = 0; k < K; k++) perm[k] = k;
    if (actorder_weight) /* selection sort, stable, decreasing diagonal */
        for (int64_t i = 0; i < K; i++) {
            int64_t best = i;
            for (int64_t j = i + 1; j < K; j++)
                if (H0[perm[j] * K + perm[j]] > H0[perm[best] * K + perm[best]]) best = j;
            int64_t t = perm[best];
            memmove(perm + i + 1, perm + i, sizeof *perm * (size_t)(best - i));
            perm[i] = t;
        }
    double *A = malloc(sizeof *A * (size_t)(K * 2 * K));
    double mean = 0;
    for (int64_t k = 0; k < K; k++) mean += H0[k * K + k];
    mean /= (double)K;
    for (int64_t a = 0; a < K; a++)
        for (int64_t b = 0; b < 2 * K; b++)
            A[a * 2 * K + b] = b < K ? H0[perm[a] * K + perm[b]] + (a == b ? damp * mean : 0) : (b - K == a);
    for (int64_t c = 0; c < K; c++) { /* Gauss-Jordan, the matrix is SPD: no pivoting */
        double p = A[c * 2 * K + c];
        for (int64_t b = 0; b < 2 * K; b++) A[c * 2 * K + b] /= p;
        for (int64_t r = 0; r < K; r++) {
            if (r == c) continue;
            double f = A[r * 2 * K + c];
            for (int64_t b = 0; b < 2 * K; b++) A[r * 2 * K + b] -= f * A[c * 2 * K + b];
        }
    }
    int *Q = malloc(sizeof *Q * (size_t)(N * K));
    double *Hi = malloc(sizeof *Hi * (size_t)(K * K)), *row = malloc(sizeof *row * (size_t)K);
    for (int64_t n = 0; n < N; n++) {
        for (int64_t a = 0; a < K; a++)
            for (int64_t b = 0; b < K; b++) Hi[a * K + b] = A[a * 2 * K + K + b];
        for (int64_t j = 0; j < K; j++) row[j] = vsr_bf16_to_f32(w[n * K + perm[j]]);
        for (int64_t j = 0; j < K; j++) {
            int64_t g = perm[j] / group;
            double s = vsr_bf16_to_f32(sc[n * G + g]), z = sym ? 0 : vsr_int4_zp_get(zp, G, n, g);
            double x = row[j] / s + z;
            x = x < -8 ? -8 : x > 7 ? 7 : x;
            int q = (int)nearbyint(x);
            Q[n * K + perm[j]] = q;
            double e = (row[j] - (q - z) * s) / Hi[j * K + j];
            for (int64_t f = j + 1; f < K; f++) row[f] -= e * Hi[j * K + f];
            double d = Hi[j * K + j];
            for (int64_t a = j + 1; a < K; a++)
                for (int64_t b = j + 1; b < K; b++) Hi[a * K + b] -= Hi[a * K + j] * Hi[j * K + b] / d;
        }
    }
    free(perm), free(A), free(Hi), free(row);
    return Q;
}

TEST(matches_textbook_gptq) {
    test_rng_seed(13);
    const int64_t N = 12, K = 48;
    uint16_t *w = rand_weight(N, K, 1.0f);
    double *H = correlated_inputs(300, K, NULL);
    for (int mode = 0; mode < 4; mode++) {
        bool sym = mode & 1, act = mode & 2;
        uint32_t pk[12 * 6], zp[2 * 3] = {0};
        uint16_t sc[12 * 3];
        vsr_err err = {0};
        vsr_status st = vsr_gptq_quantize(w, N, K, H, 16, act ? VSR_ACTORDER_WEIGHT : VSR_ACTORDER_NONE, 0.01, sym,
                                          pk, sc, zp, NULL, &err);
        CHECK_OK(st, err);
        int *Q = reference_gptq(w, N, K, H, 16, act, 0.01, sc, sym, zp);
        int same = 0;
        for (int64_t n = 0; n < N; n++)
            for (int64_t k = 0; k < K; k++) same += Q[n * K + k] == nib(pk, K, n, k);
        CHECK_MSG(same == N * K, "mode %d: %d of %lld integers agree with the textbook GPTQ", mode, same,
                  (long long)(N * K));
        free(Q);
    }
    free(w), free(H);
}

TEST(beats_rtn_on_correlated_inputs) {
    test_rng_seed(14);
    const int64_t N = 64, K = 128, T = 512;
    uint16_t *w = rand_weight(N, K, 0.2f);
    double *X;
    double *H = correlated_inputs(T, K, &X);
    uint32_t *pk = malloc(4 * (size_t)(N * K / 8)), zp[8 * 4];
    uint16_t sc[64 * 4], *deq = malloc(2 * (size_t)(N * K)), *rdeq = malloc(2 * (size_t)(N * K));
    int32_t gi[128];
    for (int sym = 0; sym < 2; sym++) {
        uint32_t rz[8 * 4];
        uint16_t rs[64 * 4];
        vsr_quantize_int4_rtn(w, N, K, 32, sym, NULL, pk, rs, sym ? NULL : rz);
        vsr_dequant_int4_ref(pk, rs, sym ? NULL : rz, NULL, N, K, 32, rdeq);
        double e_rtn = vsr_quant_output_error(w, rdeq, NULL, N, K, H, T);
        const int acts[3] = {VSR_ACTORDER_NONE, VSR_ACTORDER_WEIGHT, VSR_ACTORDER_GROUP};
        for (int a = 0; a < 3; a++) {
            vsr_err err = {0};
            vsr_status st = vsr_gptq_quantize(w, N, K, H, 32, acts[a], 0.01, sym, pk, sc, zp, gi, &err);
            CHECK_OK(st, err);
            vsr_dequant_int4_ref(pk, sc, sym ? NULL : zp, acts[a] == VSR_ACTORDER_GROUP ? gi : NULL, N, K, 32, deq);
            double e = vsr_quant_output_error(w, deq, NULL, N, K, H, T);
            CHECK_MSG(e < 0.8 * e_rtn, "sym %d actorder %d: GPTQ error %g, RTN %g", sym, acts[a], e, e_rtn);
            printf("  sym %d actorder %d: output error GPTQ %.4g, RTN %.4g (%.2fx)\n", sym, acts[a], e, e_rtn,
                   e / e_rtn);
        }
    }
    /* the measure is the RMS over tokens of ||(W - Wq) x||, computed from H */
    double direct = 0;
    for (int64_t t = 0; t < T; t++)
        for (int64_t n = 0; n < N; n++) {
            double y = 0;
            for (int64_t k = 0; k < K; k++)
                y += ((double)vsr_bf16_to_f32(w[n * K + k]) - vsr_bf16_to_f32(deq[n * K + k])) * X[t * K + k];
            direct += y * y;
        }
    direct = sqrt(direct / (double)T);
    double viaH = vsr_quant_output_error(w, deq, NULL, N, K, H, T);
    CHECK_MSG(fabs(direct - viaH) <= 1e-9 * direct, "direct %.12g, via H %.12g", direct, viaH);
    free(w), free(H), free(X), free(pk), free(deq), free(rdeq);
}

TEST(dead_columns_are_zero) {
    test_rng_seed(15);
    const int64_t N = 8, K = 32;
    uint16_t *w = rand_weight(N, K, 1.0f);
    double *H = correlated_inputs(100, K, NULL);
    for (int64_t k = 0; k < K; k++) H[5 * K + k] = H[k * K + 5] = 0.0; /* channel 5 never active */
    uint32_t pk[8 * 4];
    uint16_t sc[8];
    vsr_err err = {0};
    vsr_status st = vsr_gptq_quantize(w, N, K, H, -1, VSR_ACTORDER_WEIGHT, 0.01, true, pk, sc, NULL, NULL, &err);
    CHECK_OK(st, err);
    for (int64_t n = 0; n < N; n++) CHECK(nib(pk, K, n, 5) == 0);
    free(w), free(H);
}

TEST(refusals) {
    uint16_t w[8 * 16] = {0};
    double H[16 * 16] = {0};
    for (int k = 0; k < 16; k++) H[k * 16 + k] = 1;
    uint32_t pk[8 * 2], zp[2];
    uint16_t sc[8 * 2];
    int32_t gi[16];
    vsr_err err = {0};
    vsr_status st = vsr_gptq_quantize(w, 8, 12, H, -1, 0, 0.01, true, pk, sc, NULL, NULL, &err);
    CHECK_ERR(st, err, VSR_E_INVALID, "in_features 12 is not a multiple of 8");
    st = vsr_gptq_quantize(w, 8, 16, H, 24, 0, 0.01, true, pk, sc, NULL, NULL, &err);
    CHECK_ERR(st, err, VSR_E_INVALID, "group size 24 does not divide in_features 16");
    st = vsr_gptq_quantize(w, 8, 16, H, -1, VSR_ACTORDER_GROUP, 0.01, true, pk, sc, NULL, gi, &err);
    CHECK_ERR(st, err, VSR_E_INVALID, "act-order group needs a group size > 0");
    st = vsr_gptq_quantize(w, 8, 16, H, 8, VSR_ACTORDER_GROUP, 0.01, true, pk, sc, NULL, NULL, &err);
    CHECK_ERR(st, err, VSR_E_INVALID, "no g_idx output given");
    st = vsr_gptq_quantize(w, 8, 16, H, 8, 0, 0.01, false, pk, sc, NULL, NULL, &err);
    CHECK_ERR(st, err, VSR_E_INVALID, "asymmetric quantization writes zero points");
    st = vsr_gptq_quantize(w, 8, 16, H, 8, 0, -0.5, true, pk, sc, NULL, NULL, &err);
    CHECK_ERR(st, err, VSR_E_INVALID, "dampening fraction -0.5");
    st = vsr_gptq_quantize(w, 8, 16, H, 8, 7, 0.01, true, pk, sc, NULL, NULL, &err);
    CHECK_ERR(st, err, VSR_E_INVALID, "actorder 7");
    st = vsr_gptq_quantize(w, 8, 16, NULL, 8, 0, 0.01, true, pk, sc, NULL, NULL, &err);
    CHECK_ERR(st, err, VSR_E_INVALID, "needs a weight, a Hessian and outputs");
    /* indefinite: a negative eigenvalue no dampening of 0 removes */
    H[3 * 16 + 4] = H[4 * 16 + 3] = 2.0;
    st = vsr_gptq_quantize(w, 8, 16, H, 8, 0, 0.0, true, pk, sc, zp, NULL, &err);
    CHECK_ERR(st, err, VSR_E_INVALID, "the Hessian is not positive definite after dampening 0");
}


TEST(hessian_blocked_equals_plain_loop) {
    static const int64_t Ks[] = {1, 7, 8, 9, 16, 17, 37, 100, 256};
    static const int64_t Rs[] = {1, 5, 64};
    static const char *const isas[] = {NULL, "avx2+fma", "scalar"}; /* NULL: the automatic choice (AVX-512 here) */
    vsr_pool *pool = vsr_pool_new(3);
    CHECK(pool != NULL);
    test_rng_seed(11);
    int cases = 0;
    for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++)
        for (size_t ri = 0; ri < sizeof Rs / sizeof *Rs; ri++) {
            const int64_t K = Ks[ki], R = Rs[ri];
            double *x = malloc(sizeof *x * (size_t)(R * K)), *x2 = malloc(sizeof *x2 * (size_t)(R * K));
            double *ref = calloc((size_t)(K * K), sizeof *ref), *got = malloc(sizeof *got * (size_t)(K * K));
            /* full 53-bit values (products of widened floats are exact, and would hide a fused multiply-add) */
            for (int64_t i = 0; i < R * K; i++)
                x[i] = test_rndf() * 3.0 + test_rndf() * 1e-9, x2[i] = i % 5 ? test_rndf() / 3.0 : 0.0;
            qz_hessian_ref(ref, x, R, K); /* two calls: the second adds to the first's sums */
            qz_hessian_ref(ref, x2, R, K);
            for (size_t ii = 0; ii < sizeof isas / sizeof *isas; ii++) {
                if (vsr_gemm_force_isa(isas[ii]) != 0) continue; /* not on this CPU */
                for (int p = 0; p < 2; p++) {
                    memset(got, 0, sizeof *got * (size_t)(K * K));
                    CHECK(qz_hessian_add(got, x, R, K, p ? pool : NULL) == 0);
                    CHECK(qz_hessian_add(got, x2, R, K, p ? pool : NULL) == 0);
                    int64_t bad = 0;
                    for (int64_t i = 0; i < K; i++)
                        for (int64_t j = i; j < K; j++) bad += memcmp(&got[i * K + j], &ref[i * K + j], sizeof(double)) != 0;
                    CHECK_MSG(bad == 0, "K %lld rows %lld isa %s pool %d: %lld of the upper triangle differ", (long long)K,
                              (long long)R, isas[ii] ? isas[ii] : "auto", p, (long long)bad);
                    cases++;
                }
            }
            free(x), free(x2), free(ref), free(got);
        }
    vsr_gemm_force_isa(NULL);
    vsr_pool_free(pool);
    CHECK(cases >= 2 * 9 * 3 * 2);
}


TEST(qform_rows_equal_qform) {
    static const int64_t Ks[] = {1, 3, 4, 9, 64, 130};
    static const int64_t Ns[] = {1, 7, 8, 19};
    test_rng_seed(5);
    int cases = 0;
    for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++)
        for (size_t ni = 0; ni < sizeof Ns / sizeof *Ns; ni++) {
            const int64_t K = Ks[ki], N = Ns[ni];
            double *H = malloc(sizeof *H * (size_t)(K * K)), *E = malloc(sizeof *E * (size_t)(N * K));
            double *got = malloc(sizeof *got * (size_t)N);
            for (int64_t i = 0; i < K * K; i++) H[i] = test_rndf() + test_rndf() * 1e-9;
            for (int64_t i = 0; i < N * K; i++) E[i] = i % 7 == 3 ? 0.0 : test_rndf() / 3.0; /* zeros are skipped */
            for (int isa = 0; isa < 2; isa++) {
                vsr_gemm_force_isa(isa ? "scalar" : NULL);
                qz_qform_rows(H, E, N, K, got);
                int64_t bad = 0;
                for (int64_t r = 0; r < N; r++) {
                    const double want = vsr_qform(H, E + r * K, K);
                    bad += memcmp(&want, &got[r], sizeof want) != 0;
                }
                CHECK_MSG(bad == 0, "K %lld rows %lld isa %s: %lld rows differ", (long long)K, (long long)N,
                          isa ? "scalar" : "auto", (long long)bad);
                cases++;
            }
            free(H), free(E), free(got);
        }
    vsr_gemm_force_isa(NULL);
    CHECK(cases == 6 * 4 * 2);
}

int main(void) {
    RUN(diagonal_hessian_is_round_to_nearest);
    RUN(actorder_group_g_idx_layout);
    RUN(matches_textbook_gptq);
    RUN(beats_rtn_on_correlated_inputs);
    RUN(dead_columns_are_zero);
    RUN(refusals);
    RUN(hessian_blocked_equals_plain_loop);
    RUN(qform_rows_equal_qform);
    return test_summary();
}
