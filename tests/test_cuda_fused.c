/* tests/test_cuda_fused.c: what the CUDA backend does to save passes, held to "the same answer
 * as without it", bit for bit:
 *  - activation twins: a producer op declared with feed_linears (rmsnorm, swiglu, rmsnorm_gated,
 *    mul_sigmoid) writes the BF16 (or FP8) copy its linears read; the linears' outputs must equal
 *    those of the same ops without the declaration, a twin must be used when one exists (counted),
 *    and must never be used after its source was overwritten;
 *  - recorded forwards (CUDA graphs): a repeated shape is replayed with the next request's token
 *    ids; answers equal a backend with graphs off, for every request, recorded and replayed;
 *  - VSR_CUDA_PROFILE=1 changes no result.
 * Skips (saying so) without CUDA in the build or without a device. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/backend_cuda.h"
#include "backend/cuda/quant_internal.h"
#include "test.h"
#include "vsr/device.h"
#include "vsr/dtype.h"
#include "vsr/fixture.h"
#include "vsr/model.h"
#include "vsr/package.h"
#include "vsr/quant.h"

#ifdef VSR_HAVE_CUDA
extern int64_t vsr_cuda_stat_twin_hits, vsr_cuda_stat_graph_records, vsr_cuda_stat_graph_replays;
extern int vsr_cuda_graphs_off, vsr_cuda_profile_on, vsr_cuda_sole_twins_off; /* backend.cu switches */

static vsr_backend GB;
/* frees the device buffers given (any number of them) */
#define FREE_DEV(...)                                                                                                  \
    do {                                                                                                               \
        void *bufs_[] = {__VA_ARGS__};                                                                                 \
        for (size_t j_ = 0; j_ < sizeof bufs_ / sizeof *bufs_; j_++) GB.ops->buf_free(GB.ctx, bufs_[j_]);             \
    } while (0)
static vsr_device cuda_dev;

static float *hrand(int64_t n, float scale) {
    float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) p[i] = test_rndf() * scale;
    return p;
}
static void *up(const float *h, int64_t n) {
    void *d = NULL;
    vsr_err e;
    if (GB.ops->buf_alloc(GB.ctx, sizeof(float) * (size_t)(n ? n : 1), &d, &e)) return NULL;
    if (h) GB.ops->buf_set(GB.ctx, d, h, sizeof(float) * (size_t)n, &e);
    return d;
}
static float *down(const void *d, int64_t n) {
    float *h = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    vsr_err e;
    if (GB.ops->buf_get(GB.ctx, h, d, sizeof(float) * (size_t)n, &e)) {
        fprintf(stderr, "buf_get: %s\n", e.msg);
        for (int64_t i = 0; i < n; i++) h[i] = NAN;
    }
    return h;
}
static int same(const void *da, const void *db, int64_t n) {
    float *a = down(da, n), *b = down(db, n);
    int eq = !memcmp(a, b, sizeof(float) * (size_t)n);
    for (int64_t i = 0; eq && i < n; i++) eq = !isnan(a[i]);
    free(a), free(b);
    return eq;
}
static vsr_bweight *bf16_weight(int64_t N, int64_t K) {
    uint16_t *w = malloc(2 * (size_t)(N * K));
    for (int64_t i = 0; i < N * K; i++) w[i] = vsr_f32_to_bf16(test_rndf() * 0.05f);
    vsr_weight_view v = {.kind = VSR_WK_BF16, .N = N, .K = K, .w = w, .name = "test.bf16"};
    vsr_bweight *b = NULL;
    vsr_err e;
    CHECK_OK(GB.ops->weight_upload(GB.ctx, &v, &b, &e), e);
    free(w);
    return b;
}

/* An FP8 weight [N, K] quantized (per channel, round to nearest) from random BF16 of amplitude amp. */
static vsr_bweight *fp8_weight(int64_t N, int64_t K, float amp, const char *name) {
    uint16_t *wb = malloc(2 * (size_t)(N * K)), *ws = malloc(2 * (size_t)N);
    uint8_t *wq = malloc((size_t)(N * K));
    for (int64_t j = 0; j < N * K; j++) wb[j] = vsr_f32_to_bf16(test_rndf() * amp);
    vsr_quantize_fp8_rtn(wb, N, K, wq, ws);
    vsr_weight_view v = {.kind = VSR_WK_FP8, .N = N, .K = K, .w = wq, .scale = ws, .name = name};
    vsr_bweight *b = NULL;
    vsr_err e;
    CHECK_OK(GB.ops->weight_upload(GB.ctx, &v, &b, &e), e);
    free(wb), free(ws), free(wq);
    return b;
}

/* rmsnorm -> linear, with and without the declaration, over widths the row kernel takes
 * (multiples of 4) and one it does not (D % 4 != 0: no twin, same answer). */
TEST(twin_rmsnorm_bf16) {
    vsr_err e;
    static const int64_t Ds[] = {64, 1024, 5120, 8192, 102};
    for (size_t i = 0; i < sizeof Ds / sizeof *Ds; i++) {
        const int64_t M = 37, D = Ds[i], N = 96;
        float *hx = hrand(M * D, 3.0f), *hw = hrand(D, 0.5f);
        void *x = up(hx, M * D), *w = up(hw, D), *h1 = up(NULL, M * D), *h2 = up(NULL, M * D);
        void *y1 = up(NULL, M * N), *y2 = up(NULL, M * N), *s1 = up(NULL, 10 * N), *s2 = up(NULL, 10 * N);
        vsr_bweight *W = bf16_weight(N, D);
        int64_t hits0 = vsr_cuda_stat_twin_hits;
        CHECK_OK(GB.ops->rmsnorm(GB.ctx, x, D, M, D, w, 1.0f, 1e-6f, h1, D, &e), e);
        CHECK_OK(GB.ops->linear(GB.ctx, h1, M, W, y1, 0, &e), e);
        CHECK_OK(GB.ops->linear(GB.ctx, (float *)h1 + 5 * D, 10, W, s1, 0, &e), e);
        CHECK(vsr_cuda_stat_twin_hits == hits0); /* nothing declared: no twin */
        GB.ops->feed_linears(GB.ctx, h2, M, D, NULL, 0);
        CHECK_OK(GB.ops->rmsnorm(GB.ctx, x, D, M, D, w, 1.0f, 1e-6f, h2, D, &e), e);
        CHECK_OK(GB.ops->linear(GB.ctx, h2, M, W, y2, 0, &e), e);
        CHECK_OK(GB.ops->linear(GB.ctx, (float *)h2 + 5 * D, 10, W, s2, 0, &e), e); /* rows 5..14 */
        int64_t hits = vsr_cuda_stat_twin_hits - hits0;
        printf("  rmsnorm D=%lld: twin used by %lld linears\n", (long long)D, (long long)hits);
        CHECK_MSG(hits == (D % 4 ? 0 : 2), "D %lld: %lld twin hits", (long long)D, (long long)hits);
        CHECK_MSG(same(h1, h2, M * D), "D %lld: rmsnorm output differs with a twin", (long long)D);
        CHECK_MSG(same(y1, y2, M * N), "D %lld: linear differs reading the twin", (long long)D);
        CHECK_MSG(same(s1, s2, 10 * N), "D %lld: row-range linear differs reading the twin", (long long)D);

        /* overwrite the source: the next linear must read the new values, not the old twin */
        float *hz = hrand(M * D, 1.0f);
        vsr_err e2;
        GB.ops->buf_set(GB.ctx, h2, hz, sizeof(float) * (size_t)(M * D), &e2);
        GB.ops->buf_set(GB.ctx, h1, hz, sizeof(float) * (size_t)(M * D), &e2);
        hits0 = vsr_cuda_stat_twin_hits;
        CHECK_OK(GB.ops->linear(GB.ctx, h2, M, W, y2, 0, &e), e);
        CHECK_OK(GB.ops->linear(GB.ctx, h1, M, W, y1, 0, &e), e);
        CHECK_MSG(vsr_cuda_stat_twin_hits == hits0, "a twin was read after its source was overwritten");
        CHECK_MSG(same(y1, y2, M * N), "D %lld: linear after overwrite", (long long)D);
        /* a declaration another op's output clobbers is dropped */
        GB.ops->feed_linears(GB.ctx, h2, M, D, NULL, 0);
        CHECK_OK(GB.ops->add(GB.ctx, h2, x, M * D, &e), e);
        CHECK_OK(GB.ops->rmsnorm(GB.ctx, x, D, M, D, w, 1.0f, 1e-6f, h1, D, &e), e);
        hits0 = vsr_cuda_stat_twin_hits;
        CHECK_OK(GB.ops->linear(GB.ctx, h1, M, W, y1, 0, &e), e);
        CHECK_MSG(vsr_cuda_stat_twin_hits == hits0, "an undeclared output got a twin");
        GB.ops->weight_free(GB.ctx, W);
        FREE_DEV(x, w, h1, h2, y1, y2, s1, s2);
        free(hx), free(hw), free(hz);
    }
}

/* swiglu -> linear (the MLP's down projection), rmsnorm_gated -> linear, mul_sigmoid -> linear */
TEST(twin_other_producers) {
    vsr_err e;
    const int64_t M = 29, I = 1000, N = 64, Hv = 6, dv = 32, H = 4, hd = 16;
    vsr_bweight *Wd = bf16_weight(N, I), *Wo = bf16_weight(N, Hv * dv), *Wa = bf16_weight(N, H * hd);
    float *hg = hrand(M * I, 2.0f), *hu = hrand(M * I, 2.0f);
    void *g1 = up(hg, M * I), *g2 = up(hg, M * I), *u = up(hu, M * I), *y1 = up(NULL, M * N), *y2 = up(NULL, M * N);
    int64_t hits0 = vsr_cuda_stat_twin_hits;
    CHECK_OK(GB.ops->swiglu(GB.ctx, g1, u, I, M, I, g1, &e), e);
    CHECK_OK(GB.ops->linear(GB.ctx, g1, M, Wd, y1, 0, &e), e);
    GB.ops->feed_linears(GB.ctx, g2, M, I, NULL, 0);
    CHECK_OK(GB.ops->swiglu(GB.ctx, g2, u, I, M, I, g2, &e), e);
    CHECK_OK(GB.ops->linear(GB.ctx, g2, M, Wd, y2, 0, &e), e);
    CHECK_MSG(vsr_cuda_stat_twin_hits == hits0 + 1, "swiglu twin not used");
    CHECK_MSG(same(g1, g2, M * I) && same(y1, y2, M * N), "swiglu twin changes the result");

    float *hx = hrand(M * Hv * dv, 1.5f), *hz = hrand(M * Hv * dv, 1.5f), *hw = hrand(dv, 1.0f);
    void *x = up(hx, M * Hv * dv), *z = up(hz, M * Hv * dv), *w = up(hw, dv), *o1 = up(NULL, M * Hv * dv),
         *o2 = up(NULL, M * Hv * dv);
    hits0 = vsr_cuda_stat_twin_hits;
    CHECK_OK(GB.ops->rmsnorm_gated(GB.ctx, x, z, 1, dv, M * Hv, dv, w, 1e-6f, o1, &e), e);
    CHECK_OK(GB.ops->linear(GB.ctx, o1, M, Wo, y1, 0, &e), e);
    GB.ops->feed_linears(GB.ctx, o2, M, Hv * dv, NULL, 0);
    CHECK_OK(GB.ops->rmsnorm_gated(GB.ctx, x, z, 1, dv, M * Hv, dv, w, 1e-6f, o2, &e), e);
    CHECK_OK(GB.ops->linear(GB.ctx, o2, M, Wo, y2, 0, &e), e);
    CHECK_MSG(vsr_cuda_stat_twin_hits == hits0 + 1, "rmsnorm_gated twin not used");
    CHECK_MSG(same(o1, o2, M * Hv * dv) && same(y1, y2, M * N), "rmsnorm_gated twin changes the result");

    float *ha = hrand(M * H * hd, 1.5f), *hgate = hrand(M * 2 * H * hd, 3.0f);
    void *a1 = up(ha, M * H * hd), *a2 = up(ha, M * H * hd), *gt = up(hgate, M * 2 * H * hd);
    hits0 = vsr_cuda_stat_twin_hits;
    CHECK_OK(GB.ops->mul_sigmoid(GB.ctx, a1, M, H, hd, (float *)gt + hd, 2 * H * hd, 2 * hd, &e), e);
    CHECK_OK(GB.ops->linear(GB.ctx, a1, M, Wa, y1, 0, &e), e);
    GB.ops->feed_linears(GB.ctx, a2, M, H * hd, NULL, 0);
    CHECK_OK(GB.ops->mul_sigmoid(GB.ctx, a2, M, H, hd, (float *)gt + hd, 2 * H * hd, 2 * hd, &e), e);
    CHECK_OK(GB.ops->linear(GB.ctx, a2, M, Wa, y2, 0, &e), e);
    CHECK_MSG(vsr_cuda_stat_twin_hits == hits0 + 1, "mul_sigmoid twin not used");
    CHECK_MSG(same(a1, a2, M * H * hd) && same(y1, y2, M * N), "mul_sigmoid twin changes the result");

    GB.ops->weight_free(GB.ctx, Wd), GB.ops->weight_free(GB.ctx, Wo), GB.ops->weight_free(GB.ctx, Wa);
    FREE_DEV(g1, g2, u, y1, y2, x, z, w, o1, o2, a1, a2, gt);
    free(hg), free(hu), free(hx), free(hz), free(hw), free(ha), free(hgate);
}

/* With FP8 weights held, rmsnorm and swiglu twins are FP8 with per-row scales: the FP8 linear
 * reading them must give exactly what it gives quantizing the FP32 input itself. */
TEST(twin_fp8) {
    if (cuda_dev.cc_major * 10 + cuda_dev.cc_minor < 89) {
        printf("  (FP8 twins not run: compute capability %d.%d has no FP8)\n", cuda_dev.cc_major, cuda_dev.cc_minor);
        return;
    }
    vsr_err e;
    static const int64_t Ks[] = {1024, 1000, 5120};
    for (size_t i = 0; i < sizeof Ks / sizeof *Ks; i++) {
        const int64_t M = 33, K = Ks[i], N = 80;
        vsr_bweight *W = fp8_weight(N, K, 0.05f, "test.fp8");
        float *hx = hrand(M * K, 3.0f), *hw = hrand(K, 0.5f);
        hx[7 * K + 3] = 0; /* a row that is not all zero but has zeros */
        for (int64_t j = 0; j < K; j++) hx[2 * K + j] = 0; /* an all-zero row: scale 1 */
        void *x = up(hx, M * K), *w = up(hw, K), *h1 = up(NULL, M * K), *h2 = up(NULL, M * K);
        void *y1 = up(NULL, M * N), *y2 = up(NULL, M * N);
        CHECK_OK(GB.ops->rmsnorm(GB.ctx, x, K, M, K, w, 1.0f, 1e-6f, h1, K, &e), e);
        CHECK_OK(GB.ops->linear(GB.ctx, h1, M, W, y1, 0, &e), e);
        int64_t hits0 = vsr_cuda_stat_twin_hits;
        GB.ops->feed_linears(GB.ctx, h2, M, K, NULL, 0);
        CHECK_OK(GB.ops->rmsnorm(GB.ctx, x, K, M, K, w, 1.0f, 1e-6f, h2, K, &e), e);
        CHECK_OK(GB.ops->linear(GB.ctx, h2, M, W, y2, 0, &e), e);
        int64_t hits = vsr_cuda_stat_twin_hits - hits0;
        printf("  fp8 K=%lld: twin used by %lld linears\n", (long long)K, (long long)hits);
        CHECK_MSG(hits == 1, "K %lld: the FP8 linear did not read the FP8 twin (%lld)", (long long)K, (long long)hits);
        CHECK_MSG(same(y1, y2, M * N), "K %lld: FP8 linear differs reading the FP8 twin", (long long)K);
        GB.ops->weight_free(GB.ctx, W);
        FREE_DEV(x, w, h1, h2, y1, y2);
        free(hx), free(hw);
    }
    /* swiglu's FP8 twin (one block per row, up to 1024 threads) feeding an FP8 down projection, from
     * the two halves of a stacked gate|up row, and as the only copy (declared reader) */
    static const int64_t Is[] = {17408, 1000, 64};
    for (size_t i = 0; i < sizeof Is / sizeof *Is; i++) {
        const int64_t M = 9, I = Is[i], N = 48;
        vsr_bweight *W = fp8_weight(N, I, 0.02f, "test.down");
        float *hgu = hrand(M * 2 * I, 3.0f);
        void *gu = up(hgu, M * 2 * I), *o1 = up(NULL, M * I), *o2 = up(NULL, M * I), *y1 = up(NULL, M * N),
             *y2 = up(NULL, M * N);
        CHECK_OK(GB.ops->swiglu(GB.ctx, gu, (float *)gu + I, 2 * I, M, I, o1, &e), e);
        CHECK_OK(GB.ops->linear(GB.ctx, o1, M, W, y1, 0, &e), e);
        const vsr_bweight *rd[1] = {W};
        int64_t hits0 = vsr_cuda_stat_twin_hits;
        GB.ops->feed_linears(GB.ctx, o2, M, I, rd, 1);
        CHECK_OK(GB.ops->swiglu(GB.ctx, gu, (float *)gu + I, 2 * I, M, I, o2, &e), e);
        CHECK_OK(GB.ops->linear(GB.ctx, o2, M, W, y2, 0, &e), e);
        printf("  fp8 swiglu twin I=%lld: used by %lld linears\n", (long long)I, (long long)(vsr_cuda_stat_twin_hits - hits0));
        CHECK_MSG(vsr_cuda_stat_twin_hits == hits0 + 1, "I %lld: the FP8 swiglu twin was not used", (long long)I);
        CHECK_MSG(same(y1, y2, M * N), "I %lld: FP8 down projection differs reading swiglu's FP8 twin", (long long)I);
        GB.ops->weight_free(GB.ctx, W);
        FREE_DEV(gu, o1, o2, y1, y2);
        free(hgu);
    }
}

/* Wide rows (more than 8192 columns) with an FP8 twin: the one-pass kernels (the default: a CTA pair per row on
 * capability 9.0+, with two or four loads in flight a thread; one CTA per row) and the two-pass one
 * (VSR_CUDA_SWIGLU_1P=0) give the same FP32 output and the same twin, bit for bit, from FP32 inputs (swiglu)
 * and from the BF16 product linear_swiglu keeps; the twin read by an FP8 down projection, which also gives
 * what it gives quantizing the FP32 output itself. */
int cuda_swiglu_set_1p(int on);
int cuda_env_mode(const char *name, int dflt, int maxv, int *cache);
int cuda_env_switch_set(const char *name, int dflt, int *cache, int on, int maxv);

/* A switch of several modes (VSR_CUDA_SWIGLU_1P, VSR_CUDA_GATED_TOK) reads one digit from the environment, in
 * range, else its default (before the eighth session "2" and "3" meant the default); read once; the tests'
 * setter replaces the value and returns the old one, refusing out-of-range ones. */
TEST(env_mode) {
    static const struct {
        const char *value;
        int want;
    } cases[] = {{"0", 0}, {"2", 2}, {"3", 3}, {"4", 1}, {"12", 1}, {"x", 1}, {"", 1}, {NULL, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (cases[i].value) setenv("VSR_TEST_ENV_MODE", cases[i].value, 1);
        else unsetenv("VSR_TEST_ENV_MODE");
        int cache = -1;
        const int got = cuda_env_mode("VSR_TEST_ENV_MODE", 1, 3, &cache);
        CHECK_MSG(got == cases[i].want, "VSR_TEST_ENV_MODE=%s: mode %d, want %d", cases[i].value ? cases[i].value : "(unset)",
                  got, cases[i].want);
        setenv("VSR_TEST_ENV_MODE", "0", 1); /* read once: a later change is not seen */
        CHECK(cuda_env_mode("VSR_TEST_ENV_MODE", 1, 3, &cache) == got);
        CHECK(cuda_env_switch_set("VSR_TEST_ENV_MODE", 1, &cache, 4, 3) == -1 &&
              cuda_env_switch_set("VSR_TEST_ENV_MODE", 1, &cache, 2, 3) == got && cache == 2);
    }
    unsetenv("VSR_TEST_ENV_MODE");
}

TEST(swiglu_fp8_one_pass) {
    if (cuda_dev.cc_major * 10 + cuda_dev.cc_minor < 89) {
        printf("  (not run: compute capability %d.%d has no FP8)\n", cuda_dev.cc_major, cuda_dev.cc_minor);
        return;
    }
    CHECK(cuda_swiglu_set_1p(4) == -1 && cuda_swiglu_set_1p(-1) == -1);
    vsr_err e;
    const int64_t M = 37, K = 128, N = 48;
    static const int64_t Is[] = {8196, 17408, 32768};
    enum { NP = 4 };
    static const int modes[NP] = {1, 3, 2, 0}; /* the last, two passes, is the reference */
    static const char *names[NP] = {"CTA pair", "CTA pair, the other loads in flight", "one CTA", "two passes"};
    for (size_t c = 0; c < sizeof Is / sizeof *Is; c++) {
        const int64_t I = Is[c];
        vsr_bweight *Wd = fp8_weight(N, I, 0.02f, "test.down"), *WG = fp8_weight(2 * I, K, 0.05f, "test.gate_up");
        float *hgu = hrand(M * 2 * I, 3.0f), *hx = hrand(M * K, 1.0f);
        for (int64_t j = 0; j < 2 * I; j++) hgu[5 * 2 * I + j] = 0; /* an all-zero row: scale 1 */
        void *gu = up(hgu, M * 2 * I), *x = up(hx, M * K), *work = up(NULL, M * 2 * I), *ref = up(NULL, M * N);
        void *o[NP], *y[NP], *ls[NP], *ly[NP];
        const vsr_bweight *rd[1] = {Wd};
        for (int pass = 0; pass < NP; pass++) {
            const int was = cuda_swiglu_set_1p(modes[pass]);
            o[pass] = up(NULL, M * I), y[pass] = up(NULL, M * N), ls[pass] = up(NULL, M * I), ly[pass] = up(NULL, M * N);
            /* the FP32 output and its twin (declared without readers: not the only copy) */
            GB.ops->feed_linears(GB.ctx, o[pass], M, I, NULL, 0);
            CHECK_OK(GB.ops->swiglu(GB.ctx, gu, (float *)gu + I, 2 * I, M, I, o[pass], &e), e);
            int64_t hits0 = vsr_cuda_stat_twin_hits;
            CHECK_OK(GB.ops->linear(GB.ctx, o[pass], M, Wd, y[pass], 0, &e), e);
            CHECK_MSG(vsr_cuda_stat_twin_hits == hits0 + 1, "I %lld %s: the twin was not read", (long long)I, names[pass]);
            /* linear_swiglu: SwiGLU over the kept BF16 product, its twin (the only copy) read by the down
             * projection */
            GB.ops->feed_linears(GB.ctx, ls[pass], M, I, rd, 1);
            CHECK_OK(GB.ops->linear_swiglu(GB.ctx, x, M, WG, work, ls[pass], &e), e);
            CHECK_OK(GB.ops->linear(GB.ctx, ls[pass], M, Wd, ly[pass], 0, &e), e);
            cuda_swiglu_set_1p(was);
        }
        /* the down projection quantizing the FP32 output itself (no twin) */
        void *plain = up(NULL, M * I);
        CHECK_OK(GB.ops->swiglu(GB.ctx, gu, (float *)gu + I, 2 * I, M, I, plain, &e), e);
        CHECK_OK(GB.ops->linear(GB.ctx, plain, M, Wd, ref, 0, &e), e);
        const int er = same(y[NP - 1], ref, M * N);
        for (int pass = 0; pass < NP - 1; pass++) {
            const int eo = same(o[pass], o[NP - 1], M * I), ey = same(y[pass], y[NP - 1], M * N),
                      el = same(ly[pass], ly[NP - 1], M * N);
            printf("  swiglu FP8 twin I=%lld, %s against two passes: output %s, down projection %s (FP32 input), %s "
                   "(linear_swiglu's BF16 product)\n", (long long)I, names[pass], eo ? "same" : "DIFFERS",
                   ey ? "same" : "DIFFERS", el ? "same" : "DIFFERS");
            CHECK_MSG(eo && ey && el, "I %lld: the SwiGLU FP8 twin (%s) differs from the two-pass one", (long long)I,
                      names[pass]);
        }
        printf("  swiglu FP8 twin I=%lld: two passes against quantizing the output itself %s\n", (long long)I,
               er ? "same" : "DIFFERS");
        CHECK_MSG(er, "I %lld: the SwiGLU FP8 twin differs from quantizing the output", (long long)I);
        GB.ops->weight_free(GB.ctx, Wd), GB.ops->weight_free(GB.ctx, WG);
        FREE_DEV(gu, x, work, ref, plain);
        for (int pass = 0; pass < NP; pass++)
            GB.ops->buf_free(GB.ctx, o[pass]), GB.ops->buf_free(GB.ctx, y[pass]), GB.ops->buf_free(GB.ctx, ls[pass]),
                GB.ops->buf_free(GB.ctx, ly[pass]);
        free(hgu), free(hx);
    }
}

/* rmsnorm_gated by token (the default on large grids and for FP8 twins) against the row kernel
 * (VSR_CUDA_GATED_TOK=0): the same output bit for bit, with z strided as the model's kept product is (zh heads per token) and in partial 32-row groups when
 * undeclared; declared for an FP8 out_proj, its FP8 twin (one scale per token, which the row kernel cannot
 * make) gives that linear exactly what quantizing the FP32 output gives, also as the only copy. */
int cuda_gated_set_tok(int on);
TEST(gated_norm_by_token) {
    vsr_err e;
    CHECK(cuda_gated_set_tok(4) == -1 && cuda_gated_set_tok(-1) == -1);
    /* 48 rows a token: three a warp; 64 (declared, for the FP8 twin): four */
    static const struct { int64_t T, Hv, dv; } cs[] = {{37, 48, 128}, {29, 6, 32}, {5, 3, 100}, {7, 64, 64}};
    const int fp8 = cuda_dev.cc_major * 10 + cuda_dev.cc_minor >= 89;
    for (size_t k = 0; k < sizeof cs / sizeof *cs; k++) {
        const int64_t T = cs[k].T, Hv = cs[k].Hv, dv = cs[k].dv, Vd = Hv * dv, zs = Vd + 64, N = 40;
        float *hx = hrand(T * Vd, 1.5f), *hz = hrand(T * zs, 2.0f), *hw = hrand(dv, 1.0f);
        for (int64_t j = 0; j < Vd; j++) hx[3 * Vd + j] = 0; /* a zero token: FP8 scale 1 */
        void *x = up(hx, T * Vd), *z = up(hz, T * zs), *w = up(hw, dv), *o[3], *yl[2];
        /* 0: by token in quarter-token CTAs (forced: these grids are small); 1: the row kernel; 2: by token in
         * whole-token CTAs */
        static const int modes[3] = {2, 0, 3};
        for (int pass = 0; pass < 3; pass++) {
            const int was = cuda_gated_set_tok(modes[pass]);
            o[pass] = up(NULL, T * Vd);
            CHECK_OK(GB.ops->rmsnorm_gated(GB.ctx, x, z, Hv, zs, T * Hv, dv, w, 1e-6f, o[pass], &e), e);
            cuda_gated_set_tok(was);
        }
        const int eq = same(o[0], o[1], T * Vd) && same(o[2], o[1], T * Vd);
        int tw = -1, sole = -1;
        if (fp8) { /* an FP8 out_proj reading the twin, declared (FP32 also written) and as the only copy (whole-
                    * token CTAs: the token's amax; under the default and mode 3 alike) */
            vsr_bweight *W = fp8_weight(N, Vd, 0.05f, "test.out_proj");
            void *ref = up(NULL, T * N), *o2 = up(NULL, T * Vd);
            CHECK_OK(GB.ops->linear(GB.ctx, o[1], T, W, ref, 0, &e), e);
            tw = sole = 1;
            for (int m = 0; m < 2; m++) {
                const int was = cuda_gated_set_tok(m ? 3 : 1);
                for (int p = 0; p < 2; p++) {
                    const vsr_bweight *rd[1] = {W};
                    yl[p] = up(NULL, T * N);
                    GB.ops->feed_linears(GB.ctx, o2, T, Vd, p ? rd : NULL, p);
                    CHECK_OK(GB.ops->rmsnorm_gated(GB.ctx, x, z, Hv, zs, T * Hv, dv, w, 1e-6f, o2, &e), e);
                    int64_t hits0 = vsr_cuda_stat_twin_hits;
                    CHECK_OK(GB.ops->linear(GB.ctx, o2, T, W, yl[p], 0, &e), e);
                    const int hit = vsr_cuda_stat_twin_hits == hits0 + 1, ok = same(yl[p], ref, T * N);
                    if (p) sole = sole && hit && ok;
                    else tw = tw && hit && ok && same(o2, o[1], T * Vd);
                }
                cuda_gated_set_tok(was);
                GB.ops->buf_free(GB.ctx, yl[0]), GB.ops->buf_free(GB.ctx, yl[1]);
            }
            GB.ops->weight_free(GB.ctx, W);
            GB.ops->buf_free(GB.ctx, ref), GB.ops->buf_free(GB.ctx, o2);
        }
        printf("  rmsnorm_gated T=%lld Hv=%lld dv=%lld: by token (quarter- and whole-token CTAs) against by row %s; "
               "FP8 twin for out_proj %s, as the only copy %s\n", (long long)T, (long long)Hv, (long long)dv,
               eq ? "bit-identical" : "DIFFERS", tw < 0 ? "(no FP8)" : tw ? "read, same answer" : "WRONG",
               sole < 0 ? "(no FP8)" : sole ? "same" : "WRONG");
        CHECK_MSG(eq, "T %lld Hv %lld dv %lld: the token kernel differs from the row kernel", (long long)T, (long long)Hv,
                  (long long)dv);
        CHECK_MSG(tw != 0 && sole != 0, "T %lld Hv %lld dv %lld: the FP8 twin was not read or changed the out_proj",
                  (long long)T, (long long)Hv, (long long)dv);
        FREE_DEV(x, z, w, o[0], o[1], o[2]);
        free(hx), free(hz), free(hw);
    }
}

/* mul_sigmoid (the attention output gate) declared for an FP8 o_proj: its FP8 twin, one scale per token, gives
 * that linear exactly what quantizing the FP32 output gives, and the FP32 output is the undeclared op's bit
 * for bit; also as the only copy. The gate is every other head_dim block of a [T, 2 H hd] row, as the model's. */
TEST(mul_sigmoid_fp8_twin) {
    if (cuda_dev.cc_major * 10 + cuda_dev.cc_minor < 89) {
        printf("  (not run: compute capability %d.%d has no FP8)\n", cuda_dev.cc_major, cuda_dev.cc_minor);
        return;
    }
    vsr_err e;
    static const struct { int64_t T, H, hd; } cs[] = {{37, 24, 256}, {9, 4, 16}, {3, 1, 100}};
    for (size_t k = 0; k < sizeof cs / sizeof *cs; k++) {
        const int64_t T = cs[k].T, H = cs[k].H, hd = cs[k].hd, D = H * hd, N = 48;
        float *ha = hrand(T * D, 1.5f), *hg = hrand(T * 2 * D, 3.0f);
        for (int64_t j = 0; j < D; j++) ha[(T / 2) * D + j] = 0; /* a zero token: scale 1 */
        vsr_bweight *W = fp8_weight(N, D, 0.05f, "test.o_proj");
        void *a0 = up(ha, T * D), *a1 = up(ha, T * D), *a2 = up(ha, T * D), *gt = up(hg, T * 2 * D), *y0 = up(NULL, T * N),
             *y1 = up(NULL, T * N), *y2 = up(NULL, T * N);
        CHECK_OK(GB.ops->mul_sigmoid(GB.ctx, a0, T, (int)H, (int)hd, (float *)gt + hd, 2 * D, 2 * hd, &e), e);
        CHECK_OK(GB.ops->linear(GB.ctx, a0, T, W, y0, 0, &e), e);
        const vsr_bweight *rd[1] = {W};
        int64_t hits0 = vsr_cuda_stat_twin_hits;
        GB.ops->feed_linears(GB.ctx, a1, T, D, NULL, 0);
        CHECK_OK(GB.ops->mul_sigmoid(GB.ctx, a1, T, (int)H, (int)hd, (float *)gt + hd, 2 * D, 2 * hd, &e), e);
        CHECK_OK(GB.ops->linear(GB.ctx, a1, T, W, y1, 0, &e), e);
        GB.ops->feed_linears(GB.ctx, a2, T, D, rd, 1);
        CHECK_OK(GB.ops->mul_sigmoid(GB.ctx, a2, T, (int)H, (int)hd, (float *)gt + hd, 2 * D, 2 * hd, &e), e);
        CHECK_OK(GB.ops->linear(GB.ctx, a2, T, W, y2, 0, &e), e);
        const int hits = (int)(vsr_cuda_stat_twin_hits - hits0), ex = same(a0, a1, T * D), e1 = same(y0, y1, T * N),
                  e2 = same(y0, y2, T * N);
        printf("  mul_sigmoid T=%lld H=%lld hd=%lld: FP8 twin read by %d of 2 o_proj calls; output %s, o_proj %s, as "
               "the only copy %s\n", (long long)T, (long long)H, (long long)hd, hits, ex ? "same" : "DIFFERS",
               e1 ? "same" : "DIFFERS", e2 ? "same" : "DIFFERS");
        CHECK_MSG(hits == 2 && ex && e1 && e2, "T %lld H %lld hd %lld: mul_sigmoid's FP8 twin", (long long)T, (long long)H,
                  (long long)hd);
        GB.ops->weight_free(GB.ctx, W);
        FREE_DEV(a0, a1, a2, gt, y0, y1, y2);
        free(ha), free(hg);
    }
}

/* Narrow RMSNorm rows (128 <= D <= 512) run a warp a row when nothing is declared and k_rmsnorm_row when a twin
 * is: the same output bit for bit (the model declares some norms and not others, and golden answers must not
 * depend on which), over widths of one to four warps' worth and one past a warp boundary; 64 takes the row
 * kernel both ways. (The first run on the H200 differed at 64, when the warp kernel took it: the two kernels'
 * sums of squares were fused in different orders; sq4 in ops_internal.cuh now fixes the order.) */
TEST(rmsnorm_narrow_declared) {
    vsr_err e;
    static const int64_t Ds[] = {64, 128, 132, 256, 384, 500, 512};
    const int64_t M = 45;
    for (size_t k = 0; k < sizeof Ds / sizeof *Ds; k++) {
        const int64_t D = Ds[k];
        float *hx = hrand(M * D, 3.0f), *hw = hrand(D, 0.5f);
        void *x = up(hx, M * D), *w = up(hw, D), *y0 = up(NULL, M * D), *y1 = up(NULL, M * D);
        CHECK_OK(GB.ops->rmsnorm(GB.ctx, x, D, M, D, w, 1.0f, 1e-6f, y0, D, &e), e);
        GB.ops->feed_linears(GB.ctx, y1, M, D, NULL, 0); /* a twin, the FP32 output also written */
        CHECK_OK(GB.ops->rmsnorm(GB.ctx, x, D, M, D, w, 1.0f, 1e-6f, y1, D, &e), e);
        const int eq = same(y0, y1, M * D);
        printf("  rmsnorm D=%lld undeclared (a warp a row from 128) against declared (the row kernel): %s\n", (long long)D,
               eq ? "bit-identical" : "DIFFERS");
        CHECK_MSG(eq, "rmsnorm D %lld: the warp kernel differs from the row kernel", (long long)D);
        FREE_DEV(x, w, y0, y1);
        free(hx), free(hw);
    }
}

/* Declared readers: when every one of them reads the twin, the FP32 output is not written (the
 * buffer keeps what it held) and the readers still get the same answer; a reader that cannot read
 * the twin (an F32 weight) keeps the FP32 output; a linear the model did not declare, on a sole
 * twin it cannot read, is an error rather than a read of stale memory. */
TEST(sole_twins) {
    vsr_err e;
    const int64_t M = 23, D = 1024, N = 64, I = 512;
    vsr_bweight *W = bf16_weight(N, D), *Wd = bf16_weight(N, I);
    float *hf = hrand(N * D, 0.05f);
    vsr_weight_view fv = {.kind = VSR_WK_F32, .N = N, .K = D, .w = hf, .name = "test.f32"};
    vsr_bweight *WF = NULL;
    CHECK_OK(GB.ops->weight_upload(GB.ctx, &fv, &WF, &e), e);
    float *hx = hrand(M * D, 3.0f), *hw = hrand(D, 0.5f);
    void *x = up(hx, M * D), *w = up(hw, D), *h1 = up(NULL, M * D), *h2 = up(NULL, M * D), *y1 = up(NULL, M * N),
         *y2 = up(NULL, M * N);
    CHECK_OK(GB.ops->rmsnorm(GB.ctx, x, D, M, D, w, 1.0f, 1e-6f, h1, D, &e), e);
    CHECK_OK(GB.ops->linear(GB.ctx, h1, M, W, y1, 0, &e), e);
    const vsr_bweight *rd[2] = {W, W};
    GB.ops->feed_linears(GB.ctx, h2, M, D, rd, 2);
    CHECK_OK(GB.ops->rmsnorm(GB.ctx, x, D, M, D, w, 1.0f, 1e-6f, h2, D, &e), e);
    CHECK_OK(GB.ops->linear(GB.ctx, h2, M, W, y2, 0, &e), e);
    CHECK_OK(GB.ops->linear(GB.ctx, (float *)h2 + 3 * D, 5, W, (float *)y2 + 3 * N, 0, &e), e);
    CHECK_MSG(same(y1, y2, M * N), "a sole twin changes the linear's answer");
    float *z = down(h2, M * D);
    int untouched = 1;
    for (int64_t i = 0; i < M * D; i++) untouched &= z[i] == 0.0f;
    CHECK_MSG(untouched, "the FP32 output was written although every declared reader reads the twin");
    free(z);
    /* an undeclared reader that cannot read it: refused, naming the weight */
    CHECK_ERR(GB.ops->linear(GB.ctx, h2, M, WF, y2, 0, &e), e, VSR_E_INTERNAL, "test.f32: its input exists only as");
    /* a declared reader that cannot read the twin: the FP32 output is written */
    const vsr_bweight *rd2[2] = {W, WF};
    GB.ops->feed_linears(GB.ctx, h2, M, D, rd2, 2);
    CHECK_OK(GB.ops->rmsnorm(GB.ctx, x, D, M, D, w, 1.0f, 1e-6f, h2, D, &e), e);
    CHECK_MSG(same(h1, h2, M * D), "FP32 output missing with an F32 reader declared");
    CHECK_OK(GB.ops->linear(GB.ctx, h2, M, WF, y2, 0, &e), e);
    /* swiglu's sole twin feeding the down projection */
    float *hg = hrand(M * I, 2.0f), *hu = hrand(M * I, 2.0f);
    void *g = up(hg, M * I), *u = up(hu, M * I), *o1 = up(NULL, M * I), *o2 = up(NULL, M * I);
    CHECK_OK(GB.ops->swiglu(GB.ctx, g, u, I, M, I, o1, &e), e);
    CHECK_OK(GB.ops->linear(GB.ctx, o1, M, Wd, y1, 0, &e), e);
    const vsr_bweight *rd3[1] = {Wd};
    GB.ops->feed_linears(GB.ctx, o2, M, I, rd3, 1);
    CHECK_OK(GB.ops->swiglu(GB.ctx, g, u, I, M, I, o2, &e), e);
    CHECK_OK(GB.ops->linear(GB.ctx, o2, M, Wd, y2, 0, &e), e);
    CHECK_MSG(same(y1, y2, M * N), "swiglu's sole twin changes the down projection");
    GB.ops->weight_free(GB.ctx, W), GB.ops->weight_free(GB.ctx, Wd), GB.ops->weight_free(GB.ctx, WF);
    FREE_DEV(x, w, h1, h2, y1, y2, g, u, o1, o2);
    free(hf), free(hx), free(hw), free(hg), free(hu);
}

/* ---- stacked weights (gate|up) and the strided SwiGLU that reads their product ---- */

/* A linear on [A; B] stacked must give, row by row, A's outputs then B's: the same products as
 * the two linears apart (the GEMM may pick another tiling for the wider N: allow the FP32
 * accumulation-order difference only). */
static void stacked_case(const char *what, vsr_weight_view *parts, int64_t M) {
    vsr_err e;
    const int64_t K = parts[0].K, N0 = parts[0].N, N1 = parts[1].N, N = N0 + N1;
    vsr_bweight *W0 = NULL, *W1 = NULL, *WS = NULL;
    CHECK_OK(GB.ops->weight_upload(GB.ctx, &parts[0], &W0, &e), e);
    CHECK_OK(GB.ops->weight_upload(GB.ctx, &parts[1], &W1, &e), e);
    CHECK_OK(GB.ops->weight_upload_cat(GB.ctx, parts, 2, &WS, &e), e);
    if (!W0 || !W1 || !WS) return;
    CHECK_MSG(GB.ops->weight_bytes(GB.ctx, WS) >= GB.ops->weight_bytes(GB.ctx, W0) + GB.ops->weight_bytes(GB.ctx, W1) ||
                  parts[0].kind == VSR_WK_INT4,
              "%s: stacked weight holds fewer bytes than its parts", what);
    float *hx = hrand(M * K, 1.0f);
    void *x = up(hx, M * K), *y0 = up(NULL, M * N0), *y1 = up(NULL, M * N1), *ys = up(NULL, M * N);
    CHECK_OK(GB.ops->linear(GB.ctx, x, M, W0, y0, 0, &e), e);
    CHECK_OK(GB.ops->linear(GB.ctx, x, M, W1, y1, 0, &e), e);
    CHECK_OK(GB.ops->linear(GB.ctx, x, M, WS, ys, 0, &e), e);
    float *a = down(y0, M * N0), *b = down(y1, M * N1), *c = down(ys, M * N);
    float *ref = malloc(sizeof(float) * (size_t)(M * N));
    for (int64_t r = 0; r < M; r++) {
        memcpy(ref + r * N, a + r * N0, sizeof(float) * (size_t)N0);
        memcpy(ref + r * N + N0, b + r * N1, sizeof(float) * (size_t)N1);
    }
    double d = test_nerr(c, ref, M * N);
    printf("  stacked %s M=%lld: normalised difference %.3g\n", what, (long long)M, d);
    CHECK_MSG(d <= 1e-5, "%s M %lld: stacked linear differs from its parts by %.3g", what, (long long)M, d);
    free(a), free(b), free(c), free(ref), free(hx);
    GB.ops->weight_free(GB.ctx, W0), GB.ops->weight_free(GB.ctx, W1), GB.ops->weight_free(GB.ctx, WS);
    GB.ops->buf_free(GB.ctx, x), GB.ops->buf_free(GB.ctx, y0), GB.ops->buf_free(GB.ctx, y1), GB.ops->buf_free(GB.ctx, ys);
}

TEST(stacked_weights) {
    const int64_t K = 256, N0 = 96, N1 = 160;
    uint16_t *w0 = malloc(2 * (size_t)(N0 * K)), *w1 = malloc(2 * (size_t)(N1 * K));
    for (int64_t i = 0; i < N0 * K; i++) w0[i] = vsr_f32_to_bf16(test_rndf() * 0.05f);
    for (int64_t i = 0; i < N1 * K; i++) w1[i] = vsr_f32_to_bf16(test_rndf() * 0.05f);
    vsr_weight_view bf[2] = {{.kind = VSR_WK_BF16, .N = N0, .K = K, .w = w0, .name = "gate"},
                             {.kind = VSR_WK_BF16, .N = N1, .K = K, .w = w1, .name = "up"}};
    stacked_case("bf16", bf, 1);
    stacked_case("bf16", bf, 37);
    /* int4, asymmetric group 64 (zero points stacked 8 rows to a word) */
    const int group = 64, G = (int)(K / group);
    uint32_t *p0 = malloc(4 * (size_t)(N0 * K / 8)), *p1 = malloc(4 * (size_t)(N1 * K / 8));
    uint16_t *s0 = malloc(2 * (size_t)(N0 * G)), *s1 = malloc(2 * (size_t)(N1 * G));
    uint32_t *z0 = malloc(4 * (size_t)(N0 / 8 * G)), *z1 = malloc(4 * (size_t)(N1 / 8 * G));
    vsr_quantize_int4_rtn(w0, N0, K, group, false, NULL, p0, s0, z0);
    vsr_quantize_int4_rtn(w1, N1, K, group, false, NULL, p1, s1, z1);
    vsr_weight_view i4[2] = {{.kind = VSR_WK_INT4, .N = N0, .K = K, .w = p0, .scale = s0, .zp = z0, .group = group, .name = "gate"},
                             {.kind = VSR_WK_INT4, .N = N1, .K = K, .w = p1, .scale = s1, .zp = z1, .group = group, .name = "up"}};
    stacked_case("int4", i4, 3);
    stacked_case("int4", i4, 300);
    /* refusals: parts the backend cannot stack are refused as unsupported (the model keeps them apart) */
    vsr_err e;
    vsr_bweight *W = NULL;
    int32_t *gi0 = malloc(4 * (size_t)K), *gi1 = malloc(4 * (size_t)K);
    for (int64_t k = 0; k < K; k++) gi0[k] = (int32_t)(k / group), gi1[k] = (int32_t)((K - 1 - k) / group);
    vsr_weight_view act[2] = {i4[0], i4[1]};
    act[0].g_idx = gi0, act[1].g_idx = gi1;
    CHECK_ERR(GB.ops->weight_upload_cat(GB.ctx, act, 2, &W, &e), e, VSR_E_UNSUPPORTED, "g_idx cannot be stacked");
    vsr_weight_view mixed[2] = {bf[0], i4[1]};
    CHECK_ERR(GB.ops->weight_upload_cat(GB.ctx, mixed, 2, &W, &e), e, VSR_E_UNSUPPORTED, "cannot be stacked");
    CHECK(W == NULL);
    if (cuda_dev.cc_major * 10 + cuda_dev.cc_minor >= 89) {
        uint8_t *q0 = malloc((size_t)(N0 * K)), *q1 = malloc((size_t)(N1 * K));
        uint16_t *f0 = malloc(2 * (size_t)N0), *f1 = malloc(2 * (size_t)N1);
        vsr_quantize_fp8_rtn(w0, N0, K, q0, f0);
        vsr_quantize_fp8_rtn(w1, N1, K, q1, f1);
        vsr_weight_view f8[2] = {{.kind = VSR_WK_FP8, .N = N0, .K = K, .w = q0, .scale = f0, .name = "gate"},
                                 {.kind = VSR_WK_FP8, .N = N1, .K = K, .w = q1, .scale = f1, .name = "up"}};
        stacked_case("fp8", f8, 5);
        stacked_case("fp8", f8, 300);
        free(q0), free(q1), free(f0), free(f1);
    }
    free(w0), free(w1), free(p0), free(p1), free(s0), free(s1), free(z0), free(z1), free(gi0), free(gi1);
}

/* swiglu reading the two halves of a [M, 2N] row (stride 2N) into a contiguous y, with its twin */
TEST(swiglu_strided) {
    vsr_err e;
    vsr_backend cb;
    CHECK_OK(vsr_backend_cpu_new(1, &cb, &e), e);
    static const int64_t Ns[] = {1000, 37, 2600}; /* 2600: two column blocks of k_swiglu4, the second partial */
    for (size_t i = 0; i < sizeof Ns / sizeof *Ns; i++) {
        const int64_t M = 21, N = Ns[i];
        float *hgu = hrand(M * 2 * N, 3.0f), *yc = malloc(sizeof(float) * (size_t)(M * N));
        CHECK_OK(cb.ops->swiglu(cb.ctx, hgu, hgu + N, 2 * N, M, N, yc, &e), e);
        void *gu = up(hgu, M * 2 * N), *y = up(NULL, M * N);
        GB.ops->feed_linears(GB.ctx, y, M, N, NULL, 0);
        CHECK_OK(GB.ops->swiglu(GB.ctx, gu, (float *)gu + N, 2 * N, M, N, y, &e), e);
        float *yg = down(y, M * N);
        double d = test_nerr(yg, yc, M * N);
        printf("  swiglu stride %lld N %lld: GPU vs CPU %.3g\n", (long long)(2 * N), (long long)N, d);
        CHECK_MSG(d <= 1e-6, "strided swiglu N %lld: %.3g", (long long)N, d);
        CHECK_ERR(GB.ops->swiglu(GB.ctx, gu, gu, N - 1, M, N, y, &e), e, VSR_E_INVALID, "row stride");
        free(hgu), free(yc), free(yg);
        GB.ops->buf_free(GB.ctx, gu), GB.ops->buf_free(GB.ctx, y);
    }
    vsr_backend_destroy(&cb);
}

/* ---- linear_swiglu: the gate|up product and SwiGLU in one op ---- */

/* y = silu(g) * u from one stacked gate|up weight, against the CPU backend's FP32 linear + swiglu on
 * the same weight: BF16 keeps the product in BF16 (within BF16 rounding: 8e-3 of the largest
 * output); int4 takes the FP32 product (bit-identical to the GPU's own linear + swiglu). FP8 (the
 * CPU has none: its FP8 linear is held to the reference in test_cuda_quant) is held to the GPU's own
 * FP8 linear + swiglu: bit for bit where that linear widens the same BF16 product (b') (its path
 * "bf16-kept"), which the fused op reads; where cuBLASLt has outer-vector scales
 * (cuda_quant_fp8_ovscale) the linear's product is FP32 (a) and the kept one the scaled product in
 * BF16 (b): within BF16 rounding (8e-3) and not bit-identical. Then y's twin for the down projection,
 * declared and sole, as swiglu's. */
static void linear_swiglu_case(const char *what, vsr_weight_view *parts, int64_t M, int kept) {
    vsr_err e;
    if (parts[0].kind == VSR_WK_FP8 && cuda_quant_fp8_ovscale(GB.ctx)) kept = 1;
    vsr_backend cb;
    CHECK_OK(vsr_backend_cpu_new(1, &cb, &e), e);
    const int cpu_ref = parts[0].kind != VSR_WK_FP8;
    const int64_t K = parts[0].K, I = parts[0].N, N2 = 2 * I;
    vsr_bweight *WG = NULL, *WC = NULL;
    CHECK_OK(GB.ops->weight_upload_cat(GB.ctx, parts, 2, &WG, &e), e);
    if (cpu_ref && cb.ops->weight_upload_cat) CHECK_OK(cb.ops->weight_upload_cat(cb.ctx, parts, 2, &WC, &e), e);
    vsr_bweight *WC0 = NULL, *WC1 = NULL;
    if (cpu_ref && !WC) {
        CHECK_OK(cb.ops->weight_upload(cb.ctx, &parts[0], &WC0, &e), e);
        CHECK_OK(cb.ops->weight_upload(cb.ctx, &parts[1], &WC1, &e), e);
    }
    if (!WG || (cpu_ref && !WC && (!WC0 || !WC1))) return;
    float *hx = hrand(M * K, 1.0f), *gu = malloc(sizeof(float) * (size_t)(M * N2)), *yc = malloc(sizeof(float) * (size_t)(M * I));
    if (!cpu_ref) {
    } else if (WC) {
        CHECK_OK(cb.ops->linear(cb.ctx, hx, M, WC, gu, 0, &e), e);
        CHECK_OK(cb.ops->swiglu(cb.ctx, gu, gu + I, N2, M, I, yc, &e), e);
    } else {
        float *g = malloc(sizeof(float) * (size_t)(M * I)), *u = malloc(sizeof(float) * (size_t)(M * I));
        CHECK_OK(cb.ops->linear(cb.ctx, hx, M, WC0, g, 0, &e), e);
        CHECK_OK(cb.ops->linear(cb.ctx, hx, M, WC1, u, 0, &e), e);
        CHECK_OK(cb.ops->swiglu(cb.ctx, g, u, I, M, I, yc, &e), e);
        free(g), free(u);
    }
    void *x = up(hx, M * K), *work = up(NULL, M * N2), *y = up(NULL, M * I), *w2 = up(NULL, M * N2), *y2 = up(NULL, M * I);
    CHECK_OK(GB.ops->linear_swiglu(GB.ctx, x, M, WG, work, y, &e), e);
    if (!cpu_ref)
        CHECK_MSG(strstr(cuda_quant_last_path(), "bf16-kept") != NULL, "%s M %lld: path %s", what, (long long)M,
                  cuda_quant_last_path());
    float *yg = down(y, M * I);
    double d = cpu_ref ? test_nerr(yg, yc, M * I) : 0.0;
    /* the GPU's own linear + swiglu: the same answer bit for bit unless the product was kept in BF16 */
    CHECK_OK(GB.ops->linear(GB.ctx, x, M, WG, w2, 0, &e), e);
    CHECK_OK(GB.ops->swiglu(GB.ctx, w2, (float *)w2 + I, N2, M, I, y2, &e), e);
    int eq = same(y, y2, M * I);
    if (!cpu_ref) { /* FP8: against the GPU's own linear + swiglu */
        float *y2h = down(y2, M * I);
        d = test_nerr(yg, y2h, M * I);
        free(y2h);
    }
    printf("  linear_swiglu %s M=%lld I=%lld: against the CPU %.3g%s, %s the GPU's linear + swiglu\n", what,
           (long long)M, (long long)I, d, cpu_ref ? "" : " (no CPU FP8: the GPU's linear + swiglu)", eq ? "bit-identical to" : "differs from");
    CHECK_MSG(d <= 8e-3, "%s M %lld: linear_swiglu is %.3g from the CPU's linear + swiglu", what, (long long)M, d);
    CHECK_MSG(kept ? !eq : eq, "%s M %lld: the product was %s in BF16, expected %s", what, (long long)M,
              eq ? "not kept" : "kept", kept ? "kept" : "the FP32 product");
    /* y's twin feeding a down projection (I -> 64), declared with the down weight as sole reader */
    vsr_bweight *Wd = bf16_weight(64, I);
    void *o1 = up(NULL, M * 64), *o2 = up(NULL, M * 64), *y3 = up(NULL, M * I);
    CHECK_OK(GB.ops->linear(GB.ctx, y, M, Wd, o1, 0, &e), e);
    const vsr_bweight *rd[1] = {Wd};
    int64_t hits0 = vsr_cuda_stat_twin_hits;
    GB.ops->feed_linears(GB.ctx, y3, M, I, rd, 1);
    CHECK_OK(GB.ops->linear_swiglu(GB.ctx, x, M, WG, work, y3, &e), e);
    CHECK_OK(GB.ops->linear(GB.ctx, y3, M, Wd, o2, 0, &e), e);
    if (parts[0].kind != VSR_WK_FP8) { /* an FP8 model's twins are FP8: a BF16 reader takes FP32 y */
        CHECK_MSG(vsr_cuda_stat_twin_hits > hits0, "%s M %lld: the down projection did not read y's twin", what, (long long)M);
        CHECK_MSG(same(o1, o2, M * 64), "%s M %lld: the down projection differs reading y's twin", what, (long long)M);
    }
    GB.ops->weight_free(GB.ctx, Wd);
    free(hx), free(gu), free(yc), free(yg);
    FREE_DEV(x, work, y, w2, y2, o1, o2, y3);
    GB.ops->weight_free(GB.ctx, WG);
    if (WC) cb.ops->weight_free(cb.ctx, WC);
    if (WC0) cb.ops->weight_free(cb.ctx, WC0);
    if (WC1) cb.ops->weight_free(cb.ctx, WC1);
    vsr_backend_destroy(&cb);
}

/* The model's sequence: RMSNorm writing the twin gate|up reads (declared, the only copy), then
 * linear_swiglu, whose SwiGLU makes y's own twin: the same y as the undeclared ops, bit for bit. (For
 * FP8 the unscaled product's row scales come from the input twin, which y's twin then overwrites.) */
static void swiglu_chain(const char *what, vsr_weight_view *parts, int64_t M) {
    vsr_err e;
    const int64_t K = parts[0].K, I = parts[0].N;
    vsr_bweight *WG = NULL;
    CHECK_OK(GB.ops->weight_upload_cat(GB.ctx, parts, 2, &WG, &e), e);
    if (!WG) return;
    float *hx = hrand(M * K, 2.0f), *hw = hrand(K, 0.5f);
    void *x = up(hx, M * K), *w = up(hw, K), *h1 = up(NULL, M * K), *h2 = up(NULL, M * K), *work = up(NULL, M * 2 * I),
         *y1 = up(NULL, M * I), *y2 = up(NULL, M * I);
    CHECK_OK(GB.ops->rmsnorm(GB.ctx, x, K, M, K, w, 1.0f, 1e-6f, h1, K, &e), e);
    CHECK_OK(GB.ops->linear_swiglu(GB.ctx, h1, M, WG, work, y1, &e), e);
    const vsr_bweight *rd[1] = {WG};
    GB.ops->feed_linears(GB.ctx, h2, M, K, rd, 1);
    CHECK_OK(GB.ops->rmsnorm(GB.ctx, x, K, M, K, w, 1.0f, 1e-6f, h2, K, &e), e);
    GB.ops->feed_linears(GB.ctx, y2, M, I, NULL, 0);
    CHECK_OK(GB.ops->linear_swiglu(GB.ctx, h2, M, WG, work, y2, &e), e);
    int eq = same(y1, y2, M * I);
    printf("  linear_swiglu %s M=%lld after a sole input twin, making y's twin: %s\n", what, (long long)M,
           eq ? "bit-identical" : "DIFFERS");
    CHECK_MSG(eq, "%s M %lld: linear_swiglu on the input twin, making y's twin, differs from the undeclared ops", what,
              (long long)M);
    GB.ops->weight_free(GB.ctx, WG);
    FREE_DEV(x, w, h1, h2, work, y1, y2);
    free(hx), free(hw);
}

TEST(linear_swiglu) {
    const int64_t K = 256, I = 520;
    uint16_t *w0 = malloc(2 * (size_t)(I * K)), *w1 = malloc(2 * (size_t)(I * K));
    for (int64_t i = 0; i < I * K; i++) w0[i] = vsr_f32_to_bf16(test_rndf() * 0.1f);
    for (int64_t i = 0; i < I * K; i++) w1[i] = vsr_f32_to_bf16(test_rndf() * 0.1f);
    vsr_weight_view bf[2] = {{.kind = VSR_WK_BF16, .N = I, .K = K, .w = w0, .name = "gate"},
                             {.kind = VSR_WK_BF16, .N = I, .K = K, .w = w1, .name = "up"}};
    linear_swiglu_case("bf16", bf, 1, 1);
    linear_swiglu_case("bf16", bf, 37, 1);
    linear_swiglu_case("bf16", bf, 300, 1);
    swiglu_chain("bf16", bf, 300);
    const int group = 64, G = (int)(K / group);
    uint32_t *p0 = malloc(4 * (size_t)(I * K / 8)), *p1 = malloc(4 * (size_t)(I * K / 8));
    uint16_t *s0 = malloc(2 * (size_t)(I * G)), *s1 = malloc(2 * (size_t)(I * G));
    vsr_quantize_int4_rtn(w0, I, K, group, true, NULL, p0, s0, NULL);
    vsr_quantize_int4_rtn(w1, I, K, group, true, NULL, p1, s1, NULL);
    vsr_weight_view i4[2] = {{.kind = VSR_WK_INT4, .N = I, .K = K, .w = p0, .scale = s0, .group = group, .name = "gate"},
                             {.kind = VSR_WK_INT4, .N = I, .K = K, .w = p1, .scale = s1, .group = group, .name = "up"}};
    linear_swiglu_case("int4", i4, 5, 0);
    linear_swiglu_case("int4", i4, 300, 0);
    if (cuda_dev.cc_major * 10 + cuda_dev.cc_minor >= 89) {
        uint8_t *q0 = malloc((size_t)(I * K)), *q1 = malloc((size_t)(I * K));
        uint16_t *f0 = malloc(2 * (size_t)I), *f1 = malloc(2 * (size_t)I);
        vsr_quantize_fp8_rtn(w0, I, K, q0, f0);
        vsr_quantize_fp8_rtn(w1, I, K, q1, f1);
        vsr_weight_view f8[2] = {{.kind = VSR_WK_FP8, .N = I, .K = K, .w = q0, .scale = f0, .name = "gate"},
                                 {.kind = VSR_WK_FP8, .N = I, .K = K, .w = q1, .scale = f1, .name = "up"}};
        linear_swiglu_case("fp8", f8, 37, 0);  /* the same BF16 product at every row count */
        linear_swiglu_case("fp8", f8, 300, 0); /* the BF16 product the FP8 linear makes, read as it is */
        swiglu_chain("fp8", f8, 300);
        swiglu_chain("fp8", f8, 37);
        free(q0), free(q1), free(f0), free(f1);
    }
    /* a weight of an odd number of outputs is not a gate|up pair */
    vsr_err e;
    vsr_bweight *W = bf16_weight(81, K);
    void *x = up(NULL, 4 * K), *work = up(NULL, 4 * 81), *y = up(NULL, 4 * 81);
    CHECK_ERR(GB.ops->linear_swiglu(GB.ctx, x, 4, W, work, y, &e), e, VSR_E_INVALID, "even number of outputs, not 81");
    GB.ops->weight_free(GB.ctx, W);
    GB.ops->buf_free(GB.ctx, x), GB.ops->buf_free(GB.ctx, work), GB.ops->buf_free(GB.ctx, y);
    free(w0), free(w1), free(p0), free(p1), free(s0), free(s1);
}

/* ---- keep_product_bf16: a stacked projection's product held only in BF16 for its op readers ---- */

/* The DeltaNet input projection's consumers (conv1d_silu on its qkv columns, rmsnorm_gated on z,
 * deltanet on b and a) reading the product kept in BF16, against the same ops on the FP32 product:
 * within BF16 rounding for BF16 and FP8 weights (FP8: the scaled product rounded to BF16 once
 * more); ignored (FP32 written, bit-identical) for int4. Any other
 * op reading the kept product is refused, and a later FP32 write ends it. */
static void keep_case(const char *what, const vsr_weight_view *wv, int64_t T, int kept) {
    vsr_err e;
    const int Hk = 2, Hv = 4, dk = 32, dv = 32;
    const int64_t K = wv->K, C = 2 * Hk * dk + Hv * dv, Vd = (int64_t)Hv * dv, N = C + Vd + 2 * Hv;
    if (wv->N != N) {
        CHECK_MSG(0, "keep_case: weight of %lld outputs, expected %lld", (long long)wv->N, (long long)N);
        return;
    }
    vsr_bweight *W = NULL;
    CHECK_OK(GB.ops->weight_upload(GB.ctx, wv, &W, &e), e);
    if (!W) return;
    int64_t start[2] = {0, T / 3}, len[2] = {T / 3, T - T / 3}, pos0[2] = {0, 0};
    vsr_segs sg = {2, start, len, pos0, 0, NULL};
    float *hx = hrand(T * K, 1.0f), *hcw = hrand(C * 4, 0.5f), *hg = hrand(T * Vd, 1.0f), *hn = hrand(dv, 0.5f),
          *hA = hrand(Hv, 0.5f), *hd = hrand(Hv, 0.5f);
    void *x = up(hx, T * K), *cw = up(hcw, C * 4), *xg = up(hg, T * Vd), *nw = up(hn, dv), *A = up(hA, Hv),
         *dt = up(hd, Hv), *stt = up(NULL, 2 * Hv * dk * dv);
    void *y[2], *cv[2], *gn[2], *dn[2];
    for (int i = 0; i < 2; i++) { /* i = 0: the FP32 product; 1: declared */
        y[i] = up(NULL, T * N), cv[i] = up(NULL, T * C), gn[i] = up(NULL, T * Vd), dn[i] = up(NULL, T * Vd);
        if (i == 1) GB.ops->keep_product_bf16(GB.ctx, y[i], T, N);
        CHECK_OK(GB.ops->linear(GB.ctx, x, T, W, y[i], 0, &e), e);
        if (i == 1 && wv->kind == VSR_WK_FP8 && kept)
            CHECK_MSG(strstr(cuda_quant_last_path(), "bf16-kept") != NULL, "%s: path %s", what, cuda_quant_last_path());
        float *yi = (float *)y[i];
        CHECK_OK(GB.ops->conv1d_silu(GB.ctx, yi, N, &sg, C, cw, 4, cv[i], &e), e);
        CHECK_OK(GB.ops->rmsnorm_gated(GB.ctx, xg, yi + C, Hv, N, T * Hv, dv, nw, 1e-6f, gn[i], &e), e);
        CHECK_OK(GB.ops->deltanet(GB.ctx, cv[i], C, yi + C + Vd, yi + C + Vd + Hv, N, A, dt, &sg, Hk, Hv, dk, dv, stt,
                                  dn[i], &e), e);
    }
    float *c0 = down(cv[0], T * C), *c1 = down(cv[1], T * C), *g0 = down(gn[0], T * Vd), *g1 = down(gn[1], T * Vd),
          *d0 = down(dn[0], T * Vd), *d1 = down(dn[1], T * Vd);
    double ec = test_nerr(c1, c0, T * C), eg = test_nerr(g1, g0, T * Vd), ed = test_nerr(d1, d0, T * Vd);
    printf("  kept product %s T=%lld: conv %.3g, gated norm %.3g, deltanet %.3g from the FP32 product's\n", what,
           (long long)T, ec, eg, ed);
    if (kept) {
        CHECK_MSG(ec <= 8e-3 && eg <= 8e-3 && ed <= 1e-2, "%s: the kept product's readers are further than BF16 "
                  "rounding from the FP32 product's (conv %.3g, norm %.3g, deltanet %.3g)", what, ec, eg, ed);
        CHECK_MSG(ec > 0, "%s: conv reading the kept product gave the FP32 product's answer bit for bit", what);
    } else {
        CHECK_MSG(ec == 0 && eg == 0 && ed == 0, "%s: expected bit-identical readers (conv %.3g, norm %.3g, deltanet %.3g)",
                  what, ec, eg, ed);
    }
    if (kept) {
        /* an op that cannot read it, and reading it back, are refused; a later FP32 write ends it */
        void *h = up(NULL, T * N);
        float *yk = (float *)y[1];
        CHECK_ERR(GB.ops->rmsnorm(GB.ctx, yk, N, T, N, nw, 1.0f, 1e-6f, h, N, &e), e, VSR_E_INTERNAL, "held only in BF16");
        CHECK_ERR(GB.ops->swiglu(GB.ctx, yk, yk + 8, N, T, 8, h, &e), e, VSR_E_INTERNAL, "held only in BF16");
        CHECK_ERR(GB.ops->linear(GB.ctx, yk, T, W, h, 0, &e), e, VSR_E_INTERNAL, "held only in BF16");
        float tmp[4];
        CHECK_ERR(GB.ops->buf_get(GB.ctx, tmp, yk + 3, sizeof tmp, &e), e, VSR_E_INTERNAL, "buf_get");
        /* deltanet's b in the kept product but its a elsewhere (in FP32): refused, not read half-converted */
        void *af = up(NULL, T * N);
        CHECK_ERR(GB.ops->deltanet(GB.ctx, cv[1], C, yk + C + Vd, (float *)af + C + Vd + Hv, N, A, dt, &sg, Hk, Hv, dk,
                                   dv, stt, dn[1], &e),
                  e, VSR_E_INTERNAL, "both or neither");
        GB.ops->buf_free(GB.ctx, af);
        CHECK_OK(GB.ops->linear(GB.ctx, x, T, W, yk, 0, &e), e); /* undeclared: FP32 */
        CHECK_MSG(same(y[0], y[1], T * N), "%s: the FP32 product after the kept one differs", what);
        GB.ops->buf_free(GB.ctx, h);
    }
    free(c0), free(c1), free(g0), free(g1), free(d0), free(d1);
    free(hx), free(hcw), free(hg), free(hn), free(hA), free(hd);
    FREE_DEV(x, cw, xg, nw, A, dt, stt, y[0], y[1], cv[0], cv[1], gn[0], gn[1], dn[0], dn[1]);
    GB.ops->weight_free(GB.ctx, W);
}

TEST(keep_product_bf16) {
    const int64_t K = 128, N = 2 * 2 * 32 + 4 * 32 + 4 * 32 + 2 * 4;
    uint16_t *wb = malloc(2 * (size_t)(N * K));
    for (int64_t i = 0; i < N * K; i++) wb[i] = vsr_f32_to_bf16(test_rndf() * 0.1f);
    vsr_weight_view bf = {.kind = VSR_WK_BF16, .N = N, .K = K, .w = wb, .name = "in_proj"};
    keep_case("bf16", &bf, 40, 1);
    keep_case("bf16", &bf, 300, 1);
    const int group = 64;
    uint32_t *pk = malloc(4 * (size_t)(N * K / 8));
    uint16_t *sc = malloc(2 * (size_t)(N * (K / group)));
    vsr_quantize_int4_rtn(wb, N, K, group, true, NULL, pk, sc, NULL);
    vsr_weight_view i4 = {.kind = VSR_WK_INT4, .N = N, .K = K, .w = pk, .scale = sc, .group = group, .name = "in_proj"};
    keep_case("int4 (declaration ignored)", &i4, 40, 0);
    if (cuda_dev.cc_major * 10 + cuda_dev.cc_minor >= 89) {
        uint8_t *q = malloc((size_t)(N * K));
        uint16_t *f = malloc(2 * (size_t)N);
        vsr_quantize_fp8_rtn(wb, N, K, q, f);
        vsr_weight_view f8 = {.kind = VSR_WK_FP8, .N = N, .K = K, .w = q, .scale = f, .name = "in_proj"};
        keep_case("fp8", &f8, 40, 1);
        keep_case("fp8", &f8, 300, 1);
        free(q), free(f);
    }
    free(wb), free(pk), free(sc);
}

/* mul_sigmoid and rmsnorm_gated on their 4-wide and scalar paths against the CPU backend */
TEST(vector_and_scalar_paths) {
    vsr_err e;
    vsr_backend cb;
    CHECK_OK(vsr_backend_cpu_new(1, &cb, &e), e);
    static const int hds[] = {6, 16, 128};
    for (size_t i = 0; i < 3; i++) {
        const int64_t M = 19, H = 3, hd = hds[i];
        float *hx = hrand(M * H * hd, 1.0f), *hg = hrand(M * 2 * H * hd, 3.0f), *hz = hrand(M * H * hd, 2.0f),
              *hw = hrand(hd, 1.0f), *yc = malloc(sizeof(float) * (size_t)(M * H * hd));
        void *x = up(hx, M * H * hd), *g = up(hg, M * 2 * H * hd), *z = up(hz, M * H * hd), *w = up(hw, hd),
             *y = up(NULL, M * H * hd);
        CHECK_OK(GB.ops->rmsnorm_gated(GB.ctx, x, z, 1, hd, M * H, hd, w, 1e-6f, y, &e), e);
        CHECK_OK(cb.ops->rmsnorm_gated(cb.ctx, hx, hz, 1, hd, M * H, hd, hw, 1e-6f, yc, &e), e);
        float *yg = down(y, M * H * hd);
        double d = test_nerr(yg, yc, M * H * hd);
        CHECK_MSG(d <= 1e-5, "rmsnorm_gated D %lld: %.3g", (long long)hd, d);
        free(yg);
        CHECK_OK(GB.ops->mul_sigmoid(GB.ctx, x, M, (int)H, (int)hd, (float *)g + hd, 2 * H * hd, 2 * hd, &e), e);
        CHECK_OK(cb.ops->mul_sigmoid(cb.ctx, hx, M, (int)H, (int)hd, hg + hd, 2 * H * hd, 2 * hd, &e), e);
        yg = down(x, M * H * hd);
        double d2 = test_nerr(yg, hx, M * H * hd);
        printf("  hd %lld: rmsnorm_gated %.3g, mul_sigmoid %.3g (GPU vs CPU)\n", (long long)hd, d, d2);
        CHECK_MSG(d2 <= 1e-5, "mul_sigmoid hd %lld: %.3g", (long long)hd, d2);
        free(yg), free(hx), free(hg), free(hz), free(hw), free(yc);
        FREE_DEV(x, g, z, w, y);
    }
    vsr_backend_destroy(&cb);
}

/* conv1d_silu on the first C columns of wider rows, rmsnorm_gated with z inside wider rows: GPU
 * against the CPU backend (both paths of each: aligned float4 and scalar) */
TEST(strided_conv_and_gated_norm) {
    vsr_err e;
    vsr_backend cb;
    CHECK_OK(vsr_backend_cpu_new(1, &cb, &e), e);
    int64_t start[3] = {0, 9, 10}, len[3] = {9, 1, 30}, pos0[3] = {0, 0, 0};
    vsr_segs sg = {3, start, len, pos0, 0, NULL};
    const int64_t rows = 40, Kc = 4;
    static const int64_t Cs[][2] = {{64, 160}, {64, 162}, {36, 40}}; /* C, stride (162: unaligned rows) */
    for (int i = 0; i < 3; i++) {
        const int64_t C = Cs[i][0], S = Cs[i][1];
        float *hx = hrand(rows * S, 2.0f), *hw = hrand(C * Kc, 1.0f), *yc = malloc(sizeof(float) * (size_t)(rows * C));
        void *x = up(hx, rows * S), *w = up(hw, C * Kc), *y = up(NULL, rows * C);
        CHECK_OK(GB.ops->conv1d_silu(GB.ctx, x, S, &sg, C, w, (int)Kc, y, &e), e);
        CHECK_OK(cb.ops->conv1d_silu(cb.ctx, hx, S, &sg, C, hw, (int)Kc, yc, &e), e);
        float *yg = down(y, rows * C);
        double d = test_nerr(yg, yc, rows * C);
        printf("  conv1d_silu C %lld stride %lld: GPU vs CPU %.3g\n", (long long)C, (long long)S, d);
        CHECK_MSG(d <= 1e-5, "strided conv C %lld stride %lld: %.3g", (long long)C, (long long)S, d);
        CHECK_ERR(GB.ops->conv1d_silu(GB.ctx, x, C - 1, &sg, C, w, (int)Kc, y, &e), e, VSR_E_INVALID, "row stride");
        free(hx), free(hw), free(yc), free(yg);
        GB.ops->buf_free(GB.ctx, x), GB.ops->buf_free(GB.ctx, w), GB.ops->buf_free(GB.ctx, y);
    }
    static const int64_t Gs[][3] = {{128, 3, 400}, {128, 3, 386}, {6, 4, 30}}; /* D, zh, stride */
    for (int i = 0; i < 3; i++) {
        const int64_t D = Gs[i][0], zh = Gs[i][1], S = Gs[i][2], T = 13, M = T * zh;
        float *hx = hrand(M * D, 2.0f), *hz = hrand(T * S, 3.0f), *hw = hrand(D, 1.0f), *yc = malloc(sizeof(float) * (size_t)(M * D));
        void *x = up(hx, M * D), *z = up(hz, T * S), *w = up(hw, D), *y = up(NULL, M * D);
        CHECK_OK(GB.ops->rmsnorm_gated(GB.ctx, x, (float *)z + 4, zh, S, M, D, w, 1e-6f, y, &e), e);
        CHECK_OK(cb.ops->rmsnorm_gated(cb.ctx, hx, hz + 4, zh, S, M, D, hw, 1e-6f, yc, &e), e);
        float *yg = down(y, M * D);
        double d = test_nerr(yg, yc, M * D);
        printf("  rmsnorm_gated D %lld zh %lld stride %lld: GPU vs CPU %.3g\n", (long long)D, (long long)zh, (long long)S, d);
        CHECK_MSG(d <= 1e-5, "strided gated norm D %lld: %.3g", (long long)D, d);
        CHECK_ERR(GB.ops->rmsnorm_gated(GB.ctx, x, z, zh, zh * D - 1, M, D, w, 1e-6f, y, &e), e, VSR_E_INVALID, "per token at stride");
        free(hx), free(hz), free(hw), free(yc), free(yg);
        GB.ops->buf_free(GB.ctx, x), GB.ops->buf_free(GB.ctx, z), GB.ops->buf_free(GB.ctx, w), GB.ops->buf_free(GB.ctx, y);
    }
    /* deltanet with b and a as columns of wider rows: bit-identical to the compact ones (27B heads) */
    {
        const int Hk = 16, Hv = 48, dk = 128, dv = 128;
        int64_t st2[2] = {0, 70}, ln2[2] = {70, 58}, p2[2] = {0, 12};
        vsr_segs s2 = {.n = 2, .start = st2, .len = ln2, .pos0 = p2};
        const int64_t T = 128, qs = 2 * Hk * dk + Hv * dv, bs = 2 * Hv + 6160;
        float *hq = hrand(T * qs, 1.0f), *hba = hrand(T * bs, 2.0f), *hbc = malloc(sizeof(float) * (size_t)(2 * T * Hv)),
              *hA = hrand(Hv, 1.0f), *hd = hrand(Hv, 1.0f);
        for (int64_t r = 0; r < T; r++)
            for (int h = 0; h < Hv; h++)
                hbc[r * Hv + h] = hba[r * bs + 6144 + h], hbc[T * Hv + r * Hv + h] = hba[r * bs + 6144 + Hv + h];
        void *q = up(hq, T * qs), *bw = up(hba, T * bs), *bcd = up(hbc, 2 * T * Hv), *A = up(hA, Hv), *d = up(hd, Hv),
             *stt = up(NULL, 2 * Hv * dk * dv), *o1 = up(NULL, T * Hv * dv), *o2 = up(NULL, T * Hv * dv);
        CHECK_OK(GB.ops->deltanet(GB.ctx, q, qs, bcd, (float *)bcd + T * Hv, Hv, A, d, &s2, Hk, Hv, dk, dv, stt, o1, &e), e);
        CHECK_OK(GB.ops->deltanet(GB.ctx, q, qs, (float *)bw + 6144, (float *)bw + 6144 + Hv, bs, A, d, &s2, Hk, Hv, dk,
                                  dv, stt, o2, &e), e);
        CHECK_MSG(same(o1, o2, T * Hv * dv), "deltanet with strided b/a differs from compact b/a");
        CHECK_ERR(GB.ops->deltanet(GB.ctx, q, qs, bcd, bcd, Hv - 1, A, d, &s2, Hk, Hv, dk, dv, stt, o2, &e), e,
                  VSR_E_INVALID, "b/a row stride 47");
        free(hq), free(hba), free(hbc), free(hA), free(hd);
        FREE_DEV(q, bw, bcd, A, d, stt, o1, o2);
    }
    vsr_backend_destroy(&cb);
}

/* ---- recorded forwards ---- */

static vsr_status load(vsr_package *p, vsr_model **m, vsr_err *e) {
    vsr_model_opts o = {.device = &cuda_dev};
    return vsr_model_load(p, &o, m, e);
}

static void graphs_on_package(const char *scheme) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/pkg-%s", test_tmpdir(), scheme);
    vsr_fixture_opts fo = {.family = "decision3", .size = "tiny", .scheme = scheme, .seed = 11};
    vsr_err e;
    vsr_package *p = NULL;
    vsr_status st = vsr_fixture_write(dir, &fo, NULL, &e);
    if (!st) st = vsr_package_open(dir, NULL, NULL, &p, &e);
    if (!st) st = vsr_package_map(p, &e);
    CHECK_OK(st, e);
    if (st) {
        vsr_package_close(p);
        return;
    }
    vsr_model *mg = NULL, *mp = NULL, *mo = NULL;
    CHECK_OK(load(p, &mg, &e), e);
    CHECK_OK(load(p, &mo, &e), e); /* run with graphs off and every FP32 output written */
    CHECK_OK(load(p, &mp, &e), e); /* run with the profile on */
    if (!mg || !mo || !mp) goto out;
    {
        enum { R = 3, MAXL = 50 };
        const int shapes[2][R] = {{7, 50, 19}, {12, 3, 30}};
        int64_t D = vsr_model_hidden_size(mg);
        int64_t rec0 = vsr_cuda_stat_graph_records, rep0 = vsr_cuda_stat_graph_replays;
        /* two shapes interleaved, new ids each time: first sighting, recording, replays */
        for (int it = 0; it < 8; it++) {
            const int *lens = shapes[it % 2];
            int32_t *ids[R];
            for (int r = 0; r < R; r++) {
                ids[r] = malloc(sizeof(int32_t) * MAXL);
                for (int i = 0; i < lens[r]; i++) ids[r][i] = (int32_t)((test_rndf() + 1.0f) * 75000.0f) % 151000;
            }
            float hg[R * 256], ho[R * 256], hp[R * 256], lg[R * 255], lo[R * 255], lp[R * 255];
            CHECK(D <= 256);
            CHECK_OK(vsr_model_forward_last(mg, R, (const int32_t *const *)ids, lens, hg, lg, &e), e);
            vsr_cuda_graphs_off = 1, vsr_cuda_sole_twins_off = 1; /* op by op, every FP32 output written */
            CHECK_OK(vsr_model_forward_last(mo, R, (const int32_t *const *)ids, lens, ho, lo, &e), e);
            vsr_cuda_graphs_off = 0, vsr_cuda_sole_twins_off = 0, vsr_cuda_profile_on = 1;
            CHECK_OK(vsr_model_forward_last(mp, R, (const int32_t *const *)ids, lens, hp, lp, &e), e);
            vsr_cuda_profile_on = 0;
            CHECK_MSG(!memcmp(hg, ho, sizeof(float) * (size_t)(R * D)) && !memcmp(lg, lo, sizeof lg),
                      "%s: forward %d differs with graphs on", scheme, it);
            CHECK_MSG(!memcmp(hp, ho, sizeof(float) * (size_t)(R * D)) && !memcmp(lp, lo, sizeof lp),
                      "%s: forward %d differs with the profile on", scheme, it);
            /* a bad id on a replayed shape is refused before anything runs */
            if (it >= 4) {
                ids[1][2] = 1 << 30;
                vsr_status sb = vsr_model_forward_last(mg, R, (const int32_t *const *)ids, lens, hg, lg, &e);
                CHECK_ERR(sb, e, VSR_E_INVALID, "outside the vocabulary");
            }
            for (int r = 0; r < R; r++) free(ids[r]);
        }
        int64_t rec = vsr_cuda_stat_graph_records - rec0, rep = vsr_cuda_stat_graph_replays - rep0;
        printf("  %s: %lld forwards recorded, %lld replayed\n", scheme, (long long)rec, (long long)rep);
        CHECK_MSG(rec == 2, "%s: %lld recordings (expected one per shape)", scheme, (long long)rec);
        CHECK_MSG(rep == 4, "%s: %lld replays (expected 4)", scheme, (long long)rep);
    }
out:
    vsr_model_free(mg);
    vsr_model_free(mo);
    vsr_model_free(mp); /* prints the profile table to stderr */
    vsr_package_close(p);
}

TEST(graphs_replay_bit_identical) {
    graphs_on_package("bf16");
    graphs_on_package("w4a16-gptq");
    if (cuda_dev.cc_major * 10 + cuda_dev.cc_minor >= 89) graphs_on_package("fp8");
}

#endif

int main(void) {
#ifdef VSR_HAVE_CUDA
    RUN(env_mode); /* host code: runs without a GPU too */
    char why[VSR_ERR_MSG_MAX + 600];
    if (!test_find_cuda(&cuda_dev, &GB, why, sizeof why)) {
        printf("SKIP: no CUDA device (%s)\n", why);
        return test_summary() ? 1 : 77; /* 77: skipped (tests/run.sh) */
    }
    printf("CUDA device: %s (cc %d.%d)\n", cuda_dev.name, cuda_dev.cc_major, cuda_dev.cc_minor);
    vsr_cuda_graphs_off = 0, vsr_cuda_profile_on = 0; /* whatever the environment says */
    RUN(twin_rmsnorm_bf16);
    RUN(twin_other_producers);
    RUN(twin_fp8);
    RUN(swiglu_fp8_one_pass);
    RUN(gated_norm_by_token);
    RUN(mul_sigmoid_fp8_twin);
    RUN(rmsnorm_narrow_declared);
    RUN(sole_twins);
    RUN(stacked_weights);
    RUN(swiglu_strided);
    RUN(linear_swiglu);
    RUN(keep_product_bf16);
    RUN(vector_and_scalar_paths);
    RUN(strided_conv_and_gated_norm);
    RUN(graphs_replay_bit_identical);
    vsr_backend_destroy(&GB);
#else
    printf("SKIP: no CUDA device (this build has no CUDA: nvcc was not found at build time)\n");
    return test_summary() ? 1 : 77; /* 77: skipped (tests/run.sh) */
#endif
    return test_summary();
}
