/* tests/test_cuda_quant.c: the CUDA quantized GEMMs (FP8 W8A8, int4 W4A16) against the scalar
 * CPU references, their refusals, and the autotune cache across two processes.
 *
 * Error measure: normalised error ||y - ref||_2 / ||ref||_2 over the whole output. Thresholds:
 *  int4, against vsr_gemm_int4_ref on the activations rounded to BF16 (what the GPU multiplies:
 *    the dequantized weights are exact, so only FP32 summation order differs): 1e-5;
 *    against vsr_gemm_int4_ref on the FP32 activations (adds the BF16 rounding of x, ~2^-9 per
 *    element): 8e-3.
 *  FP8, against the product of the same quantized activations (per-row amax/448, e4m3 RNE
 *    saturating, computed here with vsr_f32_to_e4m3fn) and weights, in double, scaled: 3e-4
 *    (the H200's FP8 tensor cores accumulate with fewer bits than FP32 between cuBLASLt's
 *    promotions: K = 99 measured 1.1e-4, the other shapes under 1e-4); 4e-3 where the path says
 *    "bf16-out" (cuBLASLt's scaled product written as BF16, as torch's and vLLM's row-wise FP8 GEMMs
 *    write it, then widened: one more rounding of at most 2^-9 relative per element, ~1.3e-3 RMS,
 *    plus the 3e-4 above); plus 2e-3 x sqrt(max(K, 1024) / 1024) where the path says "fast" (fast
 *    accumulation, VSR_CUDA_FP8_FAST_ACCUM=1, as in vLLM's FP8 GEMMs on Hopper: the partial sums are
 *    never promoted into FP32, so the error grows like sqrt(K): the own kernel measured 5.7e-4 at
 *    K = 1000-1040); against the FP32 activations times the
 *    dequantized weights (vsr_gemm_bf16_ref on vsr_dequant_fp8_ref): 6e-2 (e4m3 keeps 3
 *    mantissa bits: ~2^-5 relative per activation).
 * Every output is poisoned with NaN first, so an unwritten element fails.
 * VSR_QUANT_TESTS=int4 runs only the int4 tests (int4_against_reference, int4_every_candidate,
 * int4_bf16_entry, int4_refusals): the quick GPU check of an int4 kernel change; VSR_QUANT_TESTS=fp8 skips
 * fp8_against_reference (the slowest FP8 test; the own kernel's and the routes' tests run); VSR_QUANT_TESTS=noint4
 * runs every test but the int4 ones (after a VSR_QUANT_TESTS=int4 run); VSR_QUANT_TESTS=autotune runs
 * autotune_two_processes alone; unset, every test runs.
 * Without CUDA in the build or without a device, prints "SKIP: no CUDA device (...)". */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/cpu/gemm.h"
#include "test.h"
#include "vsr/device.h"
#include "vsr/quant.h"
#ifdef VSR_HAVE_CUDA
#include "backend/backend_cuda.h"
#include "backend/cuda/quant_internal.h"
/* from src/backend/cuda/cuda_internal.h (a header for CUDA translation units only) */
struct cuda_ctx;
vsr_status cuda_fp8_linear_prequant(struct cuda_ctx *c, const uint8_t *xq, const float *sx, int64_t M,
                                    const vsr_bweight *w, float *y, int accumulate, vsr_err *err);
/* from cuda_internal.h (BF16 as its bits): the FP8 product kept in BF16 for a reader, unscaled with its
 * scales (d [M, ldd]; dsx NULL when d is scaled), or scaled into dst [M, N] */
vsr_status cuda_fp8_linear_bf16out(struct cuda_ctx *c, const float *x, const uint8_t *xq, const float *sx, int64_t M,
                                   const vsr_bweight *w, const uint16_t **d, int64_t *ldd, const float **dsx,
                                   const float **dsw, int *ran, vsr_err *err);
vsr_status cuda_fp8_linear_bf16_to(struct cuda_ctx *c, const float *x, const uint8_t *xq, const float *sx, int64_t M,
                                   const vsr_bweight *w, uint16_t *dst, int *ran, vsr_err *err);
/* from src/backend/cuda/quant_int4.cu: the bulk-copy streaming int4 kernel (<= 16 rows, sixth pass), 1 on, 0 off;
 * previous value, or -1 if unknown */
int cuda_quant_force_int4_bulk(int on);
/* the tensor-core tile int4 kernel (17-256 rows, ninth pass), 1 on, 0 off; previous value, or -1 if unknown */
int cuda_quant_force_int4_mma(int on);
/* the wgmma int4 kernel (17-256 rows, capability 9.0, tenth pass; listed with the tile kernel), likewise */
int cuda_quant_force_int4_wg(int on);
int cuda_quant_force_int4_acc_sep(int on);
int cuda_quant_force_int4_wide(int on);
/* from src/backend/cuda/quant_fp8.cu: fp8_scaled against x / s over n draws (counts: quotients >= 2^-12 that
 * differ, e4m3 codes that differ, draws on the multiply path) */
vsr_status cuda_fp8_div_check(struct cuda_ctx *c, uint64_t seed, int64_t n, int64_t counts[3], vsr_err *err);
#endif

#ifdef VSR_HAVE_CUDA
static uint64_t rng = 0x243f6a8885a308d3ull;
static float frand(void) { /* uniform [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}
static uint16_t f2bf(float f) { /* RNE, finite inputs */
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static float bf2f(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static double nerr(const float *y, const float *ref, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(y[i])) return INFINITY;
        double d = (double)y[i] - ref[i];
        num += d * d, den += (double)ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static vsr_backend GB;
static const int64_t ROWS[] = {1, 3, 8, 16, 33, 128, 256, 257, 1024};
#define NROWS ((int)(sizeof ROWS / sizeof ROWS[0]))

static void *dalloc(size_t bytes) {
    void *d = NULL;
    vsr_err e;
    if (GB.ops->buf_alloc(GB.ctx, bytes, &d, &e)) {
        fprintf(stderr, "buf_alloc: %s\n", e.msg);
        return NULL;
    }
    return d;
}
static void dset(void *d, const void *h, size_t n) {
    vsr_err e;
    if (GB.ops->buf_set(GB.ctx, d, h, n, &e)) fprintf(stderr, "buf_set: %s\n", e.msg);
}
static void dget(void *h, const void *d, size_t n) {
    vsr_err e;
    if (GB.ops->buf_get(GB.ctx, h, d, n, &e)) fprintf(stderr, "buf_get: %s\n", e.msg);
}

/* y = linear(x) on the GPU, poisoned first (or preloaded with y0 when accumulating) */
static vsr_status gpu_linear(const vsr_bweight *w, const float *x, int64_t M, int64_t K, int64_t N, const float *y0,
                             float *y, vsr_err *e) {
    float *dx = dalloc(sizeof(float) * (size_t)(M * K)), *dy = dalloc(sizeof(float) * (size_t)(M * N));
    vsr_status st = VSR_E_NOMEM;
    if (dx && dy) {
        for (int64_t i = 0; i < M * N; i++) y[i] = y0 ? y0[i] : NAN;
        dset(dx, x, sizeof(float) * (size_t)(M * K));
        dset(dy, y, sizeof(float) * (size_t)(M * N));
        st = GB.ops->linear(GB.ctx, dx, M, w, dy, y0 != NULL, e);
        if (!st) dget(y, dy, sizeof(float) * (size_t)(M * N));
    }
    GB.ops->buf_free(GB.ctx, dx);
    GB.ops->buf_free(GB.ctx, dy);
    return st;
}

/* ---- int4 ---- */

typedef struct i4case {
    int64_t N, K;
    int group;
    int sym, act_order;
} i4case;

typedef struct i4w {
    int64_t N, K;
    int group, G;
    uint32_t *packed, *zp;
    uint16_t *scale;
    int32_t *g_idx;
} i4w;

static void i4_make(const i4case *c, i4w *w) {
    memset(w, 0, sizeof *w);
    w->N = c->N, w->K = c->K, w->group = c->group;
    w->G = c->group > 0 ? (int)((c->K + c->group - 1) / c->group) : 1;
    uint16_t *wb = malloc(sizeof(uint16_t) * (size_t)(c->N * c->K));
    for (int64_t i = 0; i < c->N * c->K; i++) wb[i] = f2bf(frand() * 0.05f);
    if (c->act_order) { /* GPTQ: a shuffled column order, `group` columns per group */
        int32_t *perm = malloc(sizeof(int32_t) * (size_t)c->K);
        for (int64_t k = 0; k < c->K; k++) perm[k] = (int32_t)k;
        for (int64_t k = c->K - 1; k > 0; k--) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            int64_t j = (int64_t)(rng % (uint64_t)(k + 1));
            int32_t t = perm[k];
            perm[k] = perm[j], perm[j] = t;
        }
        w->g_idx = malloc(sizeof(int32_t) * (size_t)c->K);
        for (int64_t k = 0; k < c->K; k++) w->g_idx[perm[k]] = (int32_t)(k / c->group);
        free(perm);
    }
    w->packed = malloc(sizeof(uint32_t) * (size_t)(c->N * c->K / 8));
    w->scale = malloc(sizeof(uint16_t) * (size_t)(c->N * w->G));
    if (!c->sym) w->zp = malloc(sizeof(uint32_t) * (size_t)((c->N + 7) / 8 * w->G));
    vsr_quantize_int4_rtn(wb, c->N, c->K, c->group, c->sym, w->g_idx, w->packed, w->scale, w->zp);
    free(wb);
}
static void i4_free(i4w *w) { free(w->packed), free(w->zp), free(w->scale), free(w->g_idx); }
static vsr_weight_view i4_view(const i4w *w, const char *name) {
    return (vsr_weight_view){.kind = VSR_WK_INT4, .N = w->N, .K = w->K, .w = w->packed, .scale = w->scale,
                             .zp = w->zp, .g_idx = w->g_idx, .group = w->group, .name = name};
}
static vsr_int4_weight i4_cpu(const i4w *w) {
    return (vsr_int4_weight){.packed = w->packed, .scale_bf16 = w->scale, .zp = w->zp, .g_idx = w->g_idx,
                             .group = w->group, .N = w->N, .K = w->K};
}

/* Makes case c's weight and uploads it (named `name`); 0 (the failure checked, w freed) if the
 * upload failed. */
static int i4_upload(const i4case *c, const char *name, i4w *w, vsr_bweight **bw) {
    i4_make(c, w);
    vsr_weight_view v = i4_view(w, name);
    vsr_err e = {0};
    *bw = NULL;
    vsr_status st = GB.ops->weight_upload(GB.ctx, &v, bw, &e);
    CHECK_OK(st, e);
    if (st) i4_free(w);
    return st == VSR_OK;
}

static const i4case I4_CASES[] = {
    {40, 384, 128, 1, 0},  /* GPTQ, K = 3 groups of 128, N = 5 x 8 */
    {24, 160, 32, 0, 0},   /* AWQ zero points, K = 5 groups of 32, N = 3 x 8 */
    {56, 192, 64, 1, 1},   /* GPTQ act-order g_idx, K = 3 x 64 */
    {72, 200, -1, 0, 0},   /* channel, asymmetric, K = 25 x 8 (padded to 256) */
    {8, 96, 32, 0, 1},     /* AWQ + act-order, the smallest N */
    {16, 24, 8, 1, 0},     /* group 8: not fused (16-column blocks span groups): unpack path */
    /* the streaming kernel (<= 16 rows): many n-blocks with a partial last one, rings that wrap */
    {272, 1024, 64, 0, 0}, /* AWQ g64: a group per chunk, 17 n-tiles */
    {48, 4096, 128, 1, 0}, /* GPTQ, long K: 64 chunks per warp without a split (rings of 8-32 wrap) */
    {40, 1024, 128, 1, 1}, /* GPTQ act-order g128 (sorted into equal groups: computed per chunk) */
};

/* twice: the default <= 16-row kernel, then the bulk-copy kernel forced on */
static void int4_against_reference_pass(void);
TEST(int4_against_reference) {
    const int was = cuda_quant_force_int4_bulk(0);
    int4_against_reference_pass();
    cuda_quant_force_int4_bulk(1);
    int4_against_reference_pass();
    cuda_quant_force_int4_bulk(was);
}
static int device_cc(void) { /* 90 for 9.0: read, then restored */
    const int cc = cuda_quant_test_fake_cc(GB.ctx, 0, 0);
    cuda_quant_test_fake_cc(GB.ctx, cc / 10, cc % 10);
    return cc;
}
static void int4_against_reference_pass(void) {
    const int has_wide = device_cc() == 90; /* above 256 rows the wide list (wgmma, or the unpack candidate) */
    for (size_t ci = 0; ci < sizeof I4_CASES / sizeof I4_CASES[0]; ci++) {
        const i4case *c = &I4_CASES[ci];
        i4w w;
        vsr_bweight *bw;
        vsr_err e = {0};
        vsr_status st;
        if (!i4_upload(c, "test.int4", &w, &bw)) continue;
        vsr_int4_weight cw = i4_cpu(&w);
        int fusable = c->group == -1 || c->group % 16 == 0;
        for (int ri = 0; ri < NROWS; ri++) {
            int64_t M = ROWS[ri], N = c->N, K = c->K;
            float *x = malloc(sizeof(float) * (size_t)(M * K)), *xb = malloc(sizeof(float) * (size_t)(M * K));
            float *ref = malloc(sizeof(float) * (size_t)(M * N)), *refb = malloc(sizeof(float) * (size_t)(M * N));
            float *y = malloc(sizeof(float) * (size_t)(M * N)), *y0 = malloc(sizeof(float) * (size_t)(M * N));
            for (int64_t i = 0; i < M * K; i++) x[i] = frand(), xb[i] = bf2f(f2bf(x[i]));
            vsr_gemm_int4_ref(x, M, &cw, ref, 0);
            vsr_gemm_int4_ref(xb, M, &cw, refb, 0);
            /* automatic path, then each path forced */
            for (int mode = 0; mode <= 2; mode++) {
                if (mode == 1 && (!fusable || M > 256)) continue;
                cuda_quant_force_int4_path(mode);
                st = gpu_linear(bw, x, M, K, N, NULL, y, &e);
                CHECK_OK(st, e);
                const char *path = cuda_quant_last_path();
                int want_fused = mode == 1 || (mode == 0 && fusable && M <= 256);
                if (mode == 0 && fusable && M > 256 && has_wide)
                    CHECK_MSG(strncmp(path, "int4:fused(g-", 13) == 0 || strncmp(path, "int4:unpack", 11) == 0,
                              "case %zu M %lld: the wide list ran %s", ci, (long long)M, path);
                else
                    CHECK_MSG(strstr(path, want_fused ? "int4:fused" : "int4:unpack") != NULL,
                              "case %zu M %lld mode %d: path %s", ci, (long long)M, mode, path);
                double eb = nerr(y, refb, M * N), ef = nerr(y, ref, M * N);
                CHECK_MSG(eb <= 1e-5, "case %zu (N %lld K %lld g %d sym %d act %d) M %lld path %s: %.3g vs bf16-x ref",
                          ci, (long long)N, (long long)K, c->group, c->sym, c->act_order, (long long)M, path, eb);
                CHECK_MSG(ef <= 8e-3, "case %zu M %lld path %s: %.3g vs fp32-x ref", ci, (long long)M, path, ef);
            }
            cuda_quant_force_int4_path(0);
            /* accumulate: y = y0 + x W^T */
            for (int64_t i = 0; i < M * N; i++) y0[i] = frand();
            st = gpu_linear(bw, x, M, K, N, y0, y, &e);
            CHECK_OK(st, e);
            for (int64_t i = 0; i < M * N; i++) refb[i] += y0[i];
            CHECK_MSG(nerr(y, refb, M * N) <= 1e-5, "case %zu M %lld accumulate: %.3g", ci, (long long)M,
                      nerr(y, refb, M * N));
            free(x), free(xb), free(ref), free(refb), free(y), free(y0);
        }
        GB.ops->weight_free(GB.ctx, bw);
        i4_free(&w);
    }
}

/* every configuration of the fused kernels' autotune lists (every kernel, every split) on a few shapes:
 * each against the reference, each bit-identical on a second run; then the index past the list is
 * refused with its number. Rows 17-256 walk the tensor-core tile kernel's list (kind 7, and on capability 9.0 the
 * wgmma kernel's, kind 8, after it) in passes 0-1 and the previous kernels' (kinds 0, 1) with it switched off in
 * pass 2. Rows 300 and 520 (capability 9.0, pass 0) walk the wide list: kind 8 at BT >= 128 (token blocks that overlap
 * at the end) and the unpack candidate last. */
TEST(int4_every_candidate) {
    static const int cases[] = {0, 1, 2, 3, 6, 7, 8}; /* GPTQ g128 (computed groups), AWQ g32 (looked-up groups),
                                                       * act-order g64, channel-wise, and the streaming cases */
    static const int64_t rows[] = {1, 5, 8, 16, 24, 33, 100, 256, 300, 520};
    const size_t nc = sizeof cases / sizeof cases[0];
    int total = 0, total_stream = 0, total_bulk = 0, total_mma = 0, total_wg = 0, total_wide = 0, total_wunpack = 0;
    const int bulk_was = cuda_quant_force_int4_bulk(0), mma_was = cuda_quant_force_int4_mma(1);
    const int cc = cuda_quant_test_fake_cc(GB.ctx, 0, 0); /* read, then restored */
    cuda_quant_test_fake_cc(GB.ctx, cc / 10, cc % 10);
    const int has_bulk = cc >= 90; /* the bulk-copy kernel needs capability 9.0+ (else the third pass's runs) */
    const int has_wg = cc == 90;   /* the wgmma kernel: the build's sm_90a code */
    const int wg_was = cuda_quant_force_int4_wg(1), wide_was = cuda_quant_force_int4_wide(1);
    for (size_t cs = 0; cs < 3 * nc; cs++) {
        /* each case three times: the bulk-copy kernel's list (<= 16 rows; forced on), the third pass's
         * streaming kernel (bulk-copy off), then the previous kernels' (streaming off) */
        const size_t ci = cs % nc;
        const int pass = (int)(cs / nc), stream = pass < 2;
        const int bulk = pass == 0 && has_bulk;
        cuda_quant_force_int4_stream(stream);
        cuda_quant_force_int4_bulk(pass == 0);
        cuda_quant_force_int4_mma(pass < 2);
        const i4case *c = &I4_CASES[cases[ci]];
        i4w w;
        vsr_bweight *bw;
        vsr_err e = {0};
        vsr_status st;
        if (!i4_upload(c, "test.int4.cand", &w, &bw)) continue;
        vsr_int4_weight cw = i4_cpu(&w);
        for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++) {
            int64_t M = rows[ri], N = c->N, K = c->K;
            if (pass == 1 && M > 16) continue; /* above 16 rows passes 0 and 1 have the same list: walked once */
            if (M > 256 && (pass != 0 || !has_wg)) continue; /* the wide list: capability 9.0, once */
            const int want_wide = M > 256;
            /* the streaming list applies at <= 16 rows where the group of a 64-column chunk is computable */
            const int want_stream = stream && M <= 16 && c->group != 32;
            const int want_mma = pass < 2 && M > 16;
            float *x = malloc(sizeof(float) * (size_t)(M * K)), *xb = malloc(sizeof(float) * (size_t)(M * K));
            float *refb = malloc(sizeof(float) * (size_t)(M * N)), *y = malloc(sizeof(float) * (size_t)(M * N));
            float *y2 = malloc(sizeof(float) * (size_t)(M * N)), *y0 = malloc(sizeof(float) * (size_t)(M * N));
            for (int64_t i = 0; i < M * K; i++) x[i] = frand(), xb[i] = bf2f(f2bf(x[i]));
            for (int64_t i = 0; i < M * N; i++) y0[i] = frand();
            vsr_gemm_int4_ref(xb, M, &cw, refb, 0);
            int idx = 0;
            for (;; idx++) {
                cuda_quant_force_int4_cfg(idx);
                st = gpu_linear(bw, x, M, K, N, NULL, y, &e);
                if (st == VSR_E_INVALID) {
                    CHECK_MSG(strstr(e.msg, "no int4 fused candidate") != NULL, "%s", e.msg);
                    break;
                }
                CHECK_OK(st, e);
                if (st) break;
                char path[160];
                snprintf(path, sizeof path, "%s", cuda_quant_last_path());
                CHECK_MSG(strstr(path, "src=forced") != NULL, "path %s", path);
                const int is_wg = strncmp(path, "int4:fused(g-", 13) == 0;
                if (want_wide) { /* the wide list: kind 8, then the unpack candidate */
                    const int is_unpack = strncmp(path, "int4:unpack", 11) == 0;
                    CHECK_MSG(is_wg || is_unpack, "case %d M %lld: the wide list ran %s", cases[ci], (long long)M, path);
                    total_wide += is_wg, total_wunpack += is_unpack;
                } else
                CHECK_MSG((strncmp(path, "int4:fused(t-", 13) == 0) == (want_stream && !bulk) &&
                              (strncmp(path, "int4:fused(b-", 13) == 0) == (want_stream && bulk) &&
                              (strncmp(path, "int4:fused(m-", 13) == 0 || is_wg) == want_mma && (!is_wg || has_wg),
                          "case %d M %lld stream %d bulk %d mma %d: path %s", cases[ci], (long long)M, stream, bulk,
                          want_mma, path);
                total_stream += want_stream && !bulk, total_bulk += want_stream && bulk;
                total_mma += want_mma && !is_wg && !want_wide, total_wg += is_wg && !want_wide;
                double eb = nerr(y, refb, M * N);
                CHECK_MSG(eb <= 1e-5, "case %d M %lld %s: %.3g vs bf16-x ref", cases[ci], (long long)M, path, eb);
                CHECK(gpu_linear(bw, x, M, K, N, NULL, y2, &e) == VSR_OK &&
                      memcmp(y, y2, sizeof(float) * (size_t)(M * N)) == 0);
                /* accumulate through the same configuration (split K adds into y last) */
                CHECK_OK(gpu_linear(bw, x, M, K, N, y0, y2, &e), e);
                for (int64_t i = 0; i < M * N; i++) y[i] = refb[i] + y0[i];
                CHECK_MSG(nerr(y2, y, M * N) <= 1e-5, "case %d M %lld %s accumulate: %.3g", cases[ci], (long long)M, path,
                          nerr(y2, y, M * N));
                if (M > 16) { /* the other way of adding into y (the product stored, then added): the same bits */
                    float *y3 = malloc(sizeof(float) * (size_t)(M * N));
                    const int sep = cuda_quant_force_int4_acc_sep(1);
                    cuda_quant_force_int4_acc_sep(!sep);
                    CHECK_OK(gpu_linear(bw, x, M, K, N, y0, y3, &e), e);
                    CHECK_MSG(memcmp(y2, y3, sizeof(float) * (size_t)(M * N)) == 0,
                              "case %d M %lld %s: accumulating with the product %s differs", cases[ci], (long long)M, path,
                              sep ? "added by the epilogue" : "stored, then added");
                    cuda_quant_force_int4_acc_sep(sep);
                    free(y3);
                }
                total++;
            }
            CHECK_MSG(idx >= 2, "case %d M %lld: only %d candidates", cases[ci], (long long)M, idx);
            free(x), free(xb), free(refb), free(y), free(y2), free(y0);
        }
        cuda_quant_force_int4_cfg(-1);
        GB.ops->weight_free(GB.ctx, bw);
        i4_free(&w);
    }
    cuda_quant_force_int4_stream(1);
    CHECK(cuda_quant_force_int4_stream(2) == -1 && cuda_quant_force_int4_stream(1) == 1);
    CHECK(cuda_quant_force_int4_bulk(-1) == -1 && cuda_quant_force_int4_bulk(2) == -1);
    CHECK(cuda_quant_force_int4_bulk(1) == 0 && cuda_quant_force_int4_bulk(bulk_was) == 1); /* back to the default */
    CHECK(cuda_quant_force_int4_mma(-1) == -1 && cuda_quant_force_int4_mma(2) == -1);
    CHECK(cuda_quant_force_int4_mma(0) == 0 && cuda_quant_force_int4_mma(mma_was) == 0 &&
          cuda_quant_force_int4_mma(mma_was) == 1); /* the default is on */
    CHECK_MSG(!has_bulk || total_bulk >= 60, "only %d bulk-copy configurations checked", total_bulk);
    CHECK(cuda_quant_force_int4_acc_sep(-1) == -1 && cuda_quant_force_int4_acc_sep(2) == -1);
    CHECK(cuda_quant_force_int4_wg(-1) == -1 && cuda_quant_force_int4_wg(2) == -1);
    CHECK(cuda_quant_force_int4_wg(0) == 1 && cuda_quant_force_int4_wg(wg_was) == 0 &&
          cuda_quant_force_int4_wg(wg_was) == 1); /* the default is on */
    CHECK(cuda_quant_force_int4_wide(-1) == -1 && cuda_quant_force_int4_wide(2) == -1);
    if (has_wg) { /* the wide list switched off: the unpack path alone above 256 rows; back on: the list's default */
        const i4case *c = &I4_CASES[0];
        i4w w;
        vsr_bweight *bw;
        vsr_err e = {0};
        if (i4_upload(c, "test.int4.wide", &w, &bw)) {
            const int64_t M = 300;
            float *x = malloc(sizeof(float) * (size_t)(M * c->K)), *y = malloc(sizeof(float) * (size_t)(M * c->N));
            for (int64_t i = 0; i < M * c->K; i++) x[i] = frand();
            CHECK(cuda_quant_force_int4_wide(0) == 1);
            CHECK_OK(gpu_linear(bw, x, M, c->K, c->N, NULL, y, &e), e);
            CHECK_MSG(strcmp(cuda_quant_last_path(), "int4:unpack+bf16") == 0, "wide off: %s", cuda_quant_last_path());
            CHECK(cuda_quant_force_int4_wide(1) == 0);
            CHECK_OK(gpu_linear(bw, x, M, c->K, c->N, NULL, y, &e), e);
            CHECK_MSG(strstr(cuda_quant_last_path(), "src=default") != NULL, "wide on: %s", cuda_quant_last_path());
            free(x), free(y);
            GB.ops->weight_free(GB.ctx, bw);
            i4_free(&w);
        }
    }
    cuda_quant_force_int4_wide(wide_was);
    CHECK_MSG(total_mma >= 100, "only %d tensor-core tile configurations checked", total_mma);
    CHECK_MSG(!has_wg || total_wg >= 100, "only %d wgmma configurations checked", total_wg);
    /* the wide list: every case at both row counts ends with the unpack candidate (7 cases x 2 rows) */
    CHECK_MSG(!has_wg || (total_wide >= 100 && total_wunpack == 14), "the wide list: %d wgmma and %d unpack runs",
              total_wide, total_wunpack);
    printf("  int4: %d fused configurations checked (%d of the bulk-copy kernel, %d of the third pass's, %d of the "
           "tensor-core tile kernel's, %d of the wgmma kernel's, %d + %d unpack of the wide list)\n", total, total_bulk,
           total_stream, total_mma, total_wg, total_wide, total_wunpack);
}

/* cuda_int4_linear_bf16: BF16 activations read in place (aligned), gathered (misaligned: 2 bytes off, or
 * act-order), widened (17-256 rows, previous kernels) or staged for the unpack path (> 256 rows); each
 * bit-identical to the FP32 entry on the same (BF16-representable) activations, and within the bound of
 * the reference; accumulating too */
static void int4_bf16_entry_pass(void) {
    static const int cases[] = {0, 1, 2, 3, 6};
    static const int64_t rows[] = {1, 5, 16, 40, 300};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const i4case *c = &I4_CASES[cases[ci]];
        i4w w;
        vsr_bweight *bw;
        vsr_err e = {0};
        vsr_status st;
        if (!i4_upload(c, "test.int4.bf16", &w, &bw)) continue;
        vsr_int4_weight cw = i4_cpu(&w);
        for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++) {
            const int64_t M = rows[ri], N = c->N, K = c->K;
            float *xb = malloc(sizeof(float) * (size_t)(M * K)), *refb = malloc(sizeof(float) * (size_t)(M * N));
            float *y32 = malloc(sizeof(float) * (size_t)(M * N)), *y = malloc(sizeof(float) * (size_t)(M * N));
            float *y0 = malloc(sizeof(float) * (size_t)(M * N));
            uint16_t *hb = malloc(sizeof(uint16_t) * (size_t)(M * K + 8));
            for (int64_t i = 0; i < M * K; i++) hb[i + 1] = f2bf(frand()), xb[i] = bf2f(hb[i + 1]);
            hb[0] = f2bf(1.0f);
            vsr_gemm_int4_ref(xb, M, &cw, refb, 0);
            CHECK_OK(gpu_linear(bw, xb, M, K, N, NULL, y32, &e), e); /* the FP32 entry */
            char path32[160];
            snprintf(path32, sizeof path32, "%s", cuda_quant_last_path());
            uint16_t *dx = dalloc(sizeof(uint16_t) * (size_t)(M * K + 8));
            float *dy = dalloc(sizeof(float) * (size_t)(M * N));
            for (int mis = 0; mis < 2 && dx && dy; mis++) {
                /* mis = 0: the rows at the allocation (aligned); 1: two bytes on (misaligned) */
                for (int64_t i = 0; i < M * K; i++) hb[i + (mis ? 1 : 0)] = f2bf(xb[i]);
                dset(dx, hb, sizeof(uint16_t) * (size_t)(M * K + 1));
                for (int acc = 0; acc < 2; acc++) {
                    for (int64_t i = 0; i < M * N; i++) y[i] = acc ? (y0[i] = frand()) : NAN;
                    dset(dy, y, sizeof(float) * (size_t)(M * N));
                    st = cuda_quant_int4_linear_bf16(GB.ctx, dx + mis, M, bw, dy, acc, &e);
                    CHECK_OK(st, e);
                    if (st) continue;
                    dget(y, dy, sizeof(float) * (size_t)(M * N));
                    const char *path = cuda_quant_last_path();
                    if (!acc) {
                        CHECK_MSG(strcmp(path, path32) == 0, "case %d M %lld: bf16 entry %s, fp32 entry %s", cases[ci],
                                  (long long)M, path, path32);
                        CHECK_MSG(memcmp(y, y32, sizeof(float) * (size_t)(M * N)) == 0,
                                  "case %d M %lld misaligned %d: bf16 entry differs from the fp32 entry (%s)", cases[ci],
                                  (long long)M, mis, path);
                        CHECK_MSG(nerr(y, refb, M * N) <= 1e-5, "case %d M %lld %s: %.3g", cases[ci], (long long)M, path,
                                  nerr(y, refb, M * N));
                    } else {
                        for (int64_t i = 0; i < M * N; i++) y0[i] += refb[i];
                        CHECK_MSG(nerr(y, y0, M * N) <= 1e-5, "case %d M %lld accumulate %s: %.3g", cases[ci],
                                  (long long)M, path, nerr(y, y0, M * N));
                    }
                }
            }
            GB.ops->buf_free(GB.ctx, dx);
            GB.ops->buf_free(GB.ctx, dy);
            free(xb), free(refb), free(y32), free(y), free(y0), free(hb);
        }
        GB.ops->weight_free(GB.ctx, bw);
        i4_free(&w);
    }
}

/* the BF16 entry with the default <= 16-row kernel, then with the bulk-copy kernel forced on */
TEST(int4_bf16_entry) {
    const int bulk_was = cuda_quant_force_int4_bulk(0);
    cuda_quant_force_int4_bulk(bulk_was);
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) cuda_quant_force_int4_bulk(1);
        int4_bf16_entry_pass();
    }
    cuda_quant_force_int4_bulk(bulk_was);
}

TEST(int4_refusals) {
    i4case c = {16, 24, 8, 1, 0};
    i4w w;
    i4_make(&c, &w);
    vsr_err e = {0};
    vsr_bweight *bw = NULL;
    vsr_weight_view v = i4_view(&w, "layers.0.mlp.up_proj");
    v.K = 20; /* not a multiple of 8 */
    CHECK_ERR(GB.ops->weight_upload(GB.ctx, &v, &bw, &e), e, VSR_E_FORMAT, "up_proj: int4 weight needs K a multiple of 8");
    v = i4_view(&w, "layers.0.mlp.up_proj");
    v.group = 12;
    CHECK_ERR(GB.ops->weight_upload(GB.ctx, &v, &bw, &e), e, VSR_E_FORMAT, "group size 12 is neither -1");
    v = i4_view(&w, "layers.0.mlp.up_proj");
    v.scale = NULL;
    CHECK_ERR(GB.ops->weight_upload(GB.ctx, &v, &bw, &e), e, VSR_E_FORMAT, "has no weight_scale");
    int32_t gi[24];
    for (int k = 0; k < 24; k++) gi[k] = k / 8;
    gi[5] = 3; /* G = 3 */
    v = i4_view(&w, "layers.0.mlp.up_proj");
    v.g_idx = gi;
    CHECK_ERR(GB.ops->weight_upload(GB.ctx, &v, &bw, &e), e, VSR_E_FORMAT, "weight_g_idx[5] = 3 is outside [0, 3)");
    /* a g_idx holding -1 is column order (as compressed-tensors): accepted */
    gi[5] = -1;
    CHECK_OK(GB.ops->weight_upload(GB.ctx, &v, &bw, &e), e);
    GB.ops->weight_free(GB.ctx, bw);
    bw = NULL;
    /* forcing the fused kernel where it cannot run is refused with the reason */
    v = i4_view(&w, "layers.0.mlp.up_proj");
    CHECK_OK(GB.ops->weight_upload(GB.ctx, &v, &bw, &e), e);
    float x[24 * 300], y[16 * 300];
    for (int i = 0; i < 24 * 300; i++) x[i] = frand();
    cuda_quant_force_int4_path(1);
    CHECK_ERR(gpu_linear(bw, x, 2, 24, 16, NULL, y, &e), e, VSR_E_UNSUPPORTED,
              "the fused int4 kernel takes at most 256 rows and 16-column blocks inside one group (M 2, group 8)");
    GB.ops->weight_free(GB.ctx, bw);
    i4_free(&w);
    i4case c2 = {16, 128, 128, 1, 0};
    i4_make(&c2, &w);
    v = i4_view(&w, "layers.0.mlp.down_proj");
    CHECK_OK(GB.ops->weight_upload(GB.ctx, &v, &bw, &e), e);
    float *x2 = malloc(sizeof(float) * 300 * 128), *y2 = malloc(sizeof(float) * 300 * 16);
    for (int i = 0; i < 300 * 128; i++) x2[i] = frand();
    CHECK_ERR(gpu_linear(bw, x2, 257, 128, 16, NULL, y2, &e), e, VSR_E_UNSUPPORTED, "(M 257, group 128)");
    cuda_quant_force_int4_path(0);
    CHECK_OK(gpu_linear(bw, x2, 257, 128, 16, NULL, y2, &e), e); /* automatic: unpack path */
    CHECK(cuda_quant_force_int4_path(7) == -1);
    /* explicit --dtype keeps the unpack-then-BF16 multiply at every row count */
    CHECK_OK(cuda_quant_set_options(GB.ctx, "bfloat16", NULL, &e), e);
    CHECK_OK(gpu_linear(bw, x2, 1, 128, 16, NULL, y2, &e), e);
    CHECK(strcmp(cuda_quant_last_path(), "int4:unpack+bf16") == 0);
    CHECK_OK(cuda_quant_set_options(GB.ctx, "auto", NULL, &e), e);
    CHECK_OK(gpu_linear(bw, x2, 1, 128, 16, NULL, y2, &e), e);
    CHECK(strncmp(cuda_quant_last_path(), "int4:fused", 10) == 0);
    GB.ops->weight_free(GB.ctx, bw);
    free(x2), free(y2);
    i4_free(&w);
}

/* ---- FP8 ---- */

typedef struct fp8case {
    int64_t N, K;
} fp8case;
static const fp8case F8_CASES[] = {
    {40, 384}, /* aligned */
    {24, 200}, /* K not a multiple of 16: padded rows */
    {27, 96},  /* N odd: the product goes through the workspace */
    {16, 99},  /* K odd: the general quantization kernel */
    {64, 5120},  /* the 27B model's K (hidden size): fast accumulation over long K */
    {32, 17408}, /* the 27B MLP's down projection K */
};

/* the GPU's activation quantization, restated on the host */
static void quant_rows(const float *x, int64_t M, int64_t K, uint8_t *q, float *s) {
    for (int64_t m = 0; m < M; m++) {
        float amax = 0;
        for (int64_t k = 0; k < K; k++) amax = fmaxf(amax, fabsf(x[m * K + k]));
        s[m] = amax > 0 ? amax / 448.0f : 1.0f;
        for (int64_t k = 0; k < K; k++) q[m * K + k] = vsr_f32_to_e4m3fn(x[m * K + k] / s[m]);
    }
}

/* FP8 test weights: random BF16 [N, K] (row magnitudes 1-7 x 0.05) quantized per channel (e4m3 wq, BF16 ws) */
static void fp8_weights(int64_t N, int64_t K, uint16_t *wb, uint8_t *wq, uint16_t *ws) {
    for (int64_t i = 0; i < N * K; i++) wb[i] = f2bf(frand() * 0.05f * (1 + (i % 7)));
    vsr_quantize_fp8_rtn(wb, N, K, wq, ws);
}

/* FP8 test activations x [M, K] (row 1 all zero when M > 2: scale 1), their per-row quantization (xq,
 * sx, as the GPU makes them) and refq = the product of the same quantized operands in double, scaled */
static void fp8_acts_ref(int64_t M, int64_t N, int64_t K, const uint8_t *wq, const uint16_t *ws, float *x, uint8_t *xq,
                         float *sx, float *refq) {
    for (int64_t i = 0; i < M * K; i++) x[i] = frand() * (1 + (i % 5));
    if (M > 2)
        for (int64_t k = 0; k < K; k++) x[1 * K + k] = 0;
    quant_rows(x, M, K, xq, sx);
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++)
                s += (double)vsr_e4m3fn_to_f32(xq[m * K + k]) * vsr_e4m3fn_to_f32(wq[n * K + k]);
            refq[m * N + n] = (float)(s * sx[m] * bf2f(ws[n]));
        }
}

/* the device is a Hopper H100/H200 (capability 9.0): the own FP8 wgmma kernel applies */
static int fp8_is_sm90(void) {
    int cc = cuda_quant_test_fake_cc(GB.ctx, 0, 0);
    cuda_quant_test_fake_cc(GB.ctx, cc / 10, cc % 10);
    return cc == 90;
}

/* the bound against the same-quantized reference for the path taken (see the top of this file) */
static double fp8_bound(const char *path, int64_t K) {
    double b = strstr(path, "bf16-out") ? 4e-3 : 3e-4;
    if (strstr(path, "fast")) b += 2e-3 * sqrt((double)(K > 1024 ? K : 1024) / 1024.0);
    return b;
}

TEST(fp8_against_reference) {
    for (size_t ci = 0; ci < sizeof F8_CASES / sizeof F8_CASES[0]; ci++) {
        int64_t N = F8_CASES[ci].N, K = F8_CASES[ci].K;
        uint16_t *wb = malloc(sizeof(uint16_t) * (size_t)(N * K)), *wd = malloc(sizeof(uint16_t) * (size_t)(N * K));
        uint8_t *wq = malloc((size_t)(N * K));
        uint16_t *ws = malloc(sizeof(uint16_t) * (size_t)N);
        fp8_weights(N, K, wb, wq, ws);
        vsr_dequant_fp8_ref(wq, ws, N, K, wd);
        vsr_weight_view v = {.kind = VSR_WK_FP8, .N = N, .K = K, .w = wq, .scale = ws, .name = "test.fp8"};
        vsr_bweight *bw = NULL;
        vsr_err e = {0};
        vsr_status st = GB.ops->weight_upload(GB.ctx, &v, &bw, &e);
        CHECK_OK(st, e);
        if (st) continue;
        /* device bytes: E4M3 padded to [N, K] rounded up to 16, plus the FP32 scales [Np] */
        int64_t Np = (N + 15) / 16 * 16;
        CHECK(GB.ops->weight_bytes(GB.ctx, bw) == (uint64_t)(Np * ((K + 15) / 16 * 16) + 4 * Np));
        for (int ri = 0; ri < NROWS; ri++) {
            int64_t M = ROWS[ri];
            float *x = malloc(sizeof(float) * (size_t)(M * K)), *sx = malloc(sizeof(float) * (size_t)M);
            uint8_t *xq = malloc((size_t)(M * K));
            float *refq = malloc(sizeof(float) * (size_t)(M * N)), *ref = malloc(sizeof(float) * (size_t)(M * N));
            float *y = malloc(sizeof(float) * (size_t)(M * N)), *y2 = malloc(sizeof(float) * (size_t)(M * N));
            fp8_acts_ref(M, N, K, wq, ws, x, xq, sx, refq);
            vsr_gemm_bf16_ref(x, M, K, wd, N, ref, 0);
            /* fast accumulation (VSR_CUDA_FP8_FAST_ACCUM=1) and promoted (the default), each through every path */
            for (int mi = 0; mi < 8; mi++) {
                const int mode = mi % 4, fast = mi < 4;
                /* 3: the own sm_90a kernel at every row count (VSR_FP8_GEMM=1; cuBLASLt elsewhere) */
                int fast_was = cuda_quant_set_fp8_fast_accum(fast);
                cuda_quant_force_fp8_path(mode == 3 ? 0 : mode);
                if (mode == 3) setenv("VSR_FP8_GEMM", "1", 1);
                st = gpu_linear(bw, x, M, K, N, NULL, y, &e);
                CHECK_OK(st, e);
                const char *path = cuda_quant_last_path();
                if (mode == 2) CHECK_MSG(!strncmp(path, "fp8:unscaled+epilogue", 21), "path %s", path);
                else if (mode == 3 && fp8_is_sm90()) CHECK_MSG(!strncmp(path, "fp8:wgmma", 9), "path %s", path);
                else CHECK_MSG(strncmp(path, "fp8:", 4) == 0, "path %s", path);
                /* where cuBLASLt has outer-vector scales, up to 128 rows take the unscaled FP32 product (c)
                 * (quant_fp8.cu FP8_UNSCALED_MAX_ROWS), from 129 rows (a) */
                if (mode == 0 && fp8_is_sm90() && cuda_quant_fp8_ovscale(GB.ctx))
                    CHECK_MSG((strstr(path, "(<= 128 rows") != NULL) == (M <= 128) &&
                                  (strstr(path, "outer-vec") != NULL) == (M > 128),
                              "M %lld: path %s", (long long)M, path);
                CHECK_MSG(!strstr(path, "fast") == !fast, "fast accumulation %d, path %s", fast, path);
                double eq = nerr(y, refq, M * N), ef = nerr(y, ref, M * N);
                if (mode == 0 || K > 1024)
                    printf("  fp8 N %lld K %lld M %lld: %s err %.3g\n", (long long)N, (long long)K, (long long)M, path, eq);
                CHECK_MSG(eq <= fp8_bound(path, K), "fp8 N %lld K %lld M %lld path %s: %.3g vs same-quantized ref",
                          (long long)N, (long long)K, (long long)M, path, eq);
                CHECK_MSG(ef <= 6e-2, "fp8 N %lld K %lld M %lld path %s: %.3g vs fp32 ref", (long long)N, (long long)K,
                          (long long)M, path, ef);
                /* deterministic run to run */
                st = gpu_linear(bw, x, M, K, N, NULL, y2, &e);
                CHECK(st == VSR_OK && memcmp(y, y2, sizeof(float) * (size_t)(M * N)) == 0);
                /* an explicit --dtype keeps the scaled product (a) at every row count (the rule above is --dtype
                 * auto's) */
                if (mode == 0 && fp8_is_sm90() && cuda_quant_fp8_ovscale(GB.ctx)) {
                    CHECK_OK(cuda_quant_set_options(GB.ctx, "bfloat16", NULL, &e), e);
                    CHECK_OK(gpu_linear(bw, x, M, K, N, NULL, y2, &e), e);
                    const char *pe = cuda_quant_last_path();
                    CHECK_MSG(!strncmp(pe, "fp8:scaled(outer-vec", 20) && nerr(y2, refq, M * N) <= fp8_bound(pe, K),
                              "explicit dtype, M %lld: path %s, %.3g", (long long)M, pe, nerr(y2, refq, M * N));
                    CHECK_OK(cuda_quant_set_options(GB.ctx, "auto", NULL, &e), e);
                }
                unsetenv("VSR_FP8_GEMM");
                cuda_quant_set_fp8_fast_accum(fast_was);
            }
            cuda_quant_force_fp8_path(0);
            for (int64_t i = 0; i < M * N; i++) y2[i] = frand();
            float *y0 = malloc(sizeof(float) * (size_t)(M * N));
            memcpy(y0, y2, sizeof(float) * (size_t)(M * N));
            CHECK_OK(gpu_linear(bw, x, M, K, N, y0, y, &e), e);
            for (int64_t i = 0; i < M * N; i++) refq[i] += y0[i];
            CHECK_MSG(nerr(y, refq, M * N) <= fp8_bound(cuda_quant_last_path(), K), "fp8 accumulate M %lld path %s: %.3g",
                      (long long)M, cuda_quant_last_path(), nerr(y, refq, M * N));
            free(y0), free(x), free(sx), free(xq), free(refq), free(ref), free(y), free(y2);
        }
        GB.ops->weight_free(GB.ctx, bw);
        free(wb), free(wd), free(wq), free(ws);
    }
    CHECK(cuda_quant_force_fp8_path(3) == -1);
}

/* The sm_90a kernel through cuda_fp8_linear_prequant (activations quantized here, as a fused producer
 * would): shapes with partial row/column tiles, K tails inside a 128-byte block, several K blocks, more
 * tiles than CTAs (grid capped by VSR_FP8_GEMM_CTAS, so each CTA walks several tiles through the ring),
 * both tile widths, promoted and fast accumulation; the same-quantized reference (3e-4 promoted, 2e-3
 * fast: no FP32 promotion of the tensor cores' partial sums), accumulate, bit-identical rerun, every
 * element written (NaN poison), and the cuBLASLt path on the same prequantized input. */
typedef struct f8wcase {
    int64_t M, N, K;
    const char *bn, *ctas;
} f8wcase;
static const f8wcase F8W_CASES[] = {
    {1, 27, 96, "", ""},         /* one row, N odd, K < one block */
    {5, 17, 40, "256", ""},      /* N and K odd-sized, wide tile */
    {300, 300, 1000, "", ""},    /* partial tiles both ways, 8 K blocks, K tail */
    {257, 520, 1040, "256", "3"}, /* wide tiles, 3 CTAs walk 9 tiles */
    {1100, 2100, 200, "128", "7"}, /* 153 tiles on 7 CTAs, ring phases across many tiles */
    {1100, 2100, 200, "", ""},     /* the automatic width and grid */
};

TEST(fp8_wgmma_prequant) {
    if (!fp8_is_sm90()) {
        printf("  (fp8 wgmma: not a capability 9.0 device, cuBLASLt path only)\n");
    }
    struct cuda_ctx *cc = (struct cuda_ctx *)GB.ctx;
    for (size_t ci = 0; ci < sizeof F8W_CASES / sizeof F8W_CASES[0]; ci++) {
        const f8wcase *c = &F8W_CASES[ci];
        int64_t M = c->M, N = c->N, K = c->K, Kp = (K + 15) / 16 * 16;
        uint16_t *wb = malloc(sizeof(uint16_t) * (size_t)(N * K)), *ws = malloc(sizeof(uint16_t) * (size_t)N);
        uint8_t *wq = malloc((size_t)(N * K)), *xq = malloc((size_t)(M * K)), *xqp = calloc((size_t)(M * Kp), 1);
        float *x = malloc(sizeof(float) * (size_t)(M * K)), *sx = malloc(sizeof(float) * (size_t)M);
        float *refq = malloc(sizeof(float) * (size_t)(M * N)), *y = malloc(sizeof(float) * (size_t)(M * N));
        float *y2 = malloc(sizeof(float) * (size_t)(M * N)), *y0 = malloc(sizeof(float) * (size_t)(M * N));
        fp8_weights(N, K, wb, wq, ws);
        fp8_acts_ref(M, N, K, wq, ws, x, xq, sx, refq);
        for (int64_t m = 0; m < M; m++) memcpy(xqp + m * Kp, xq + m * K, (size_t)K);
        for (int64_t i = 0; i < M * N; i++) y0[i] = frand();
        vsr_weight_view v = {.kind = VSR_WK_FP8, .N = N, .K = K, .w = wq, .scale = ws, .name = "test.fp8w"};
        vsr_bweight *bw = NULL;
        vsr_err e = {0};
        vsr_status st = GB.ops->weight_upload(GB.ctx, &v, &bw, &e);
        CHECK_OK(st, e);
        uint8_t *dxq = dalloc((size_t)(M * Kp));
        float *dsx = dalloc(sizeof(float) * (size_t)M), *dy = dalloc(sizeof(float) * (size_t)(M * N));
        if (!st && dxq && dsx && dy) {
            dset(dxq, xqp, (size_t)(M * Kp));
            dset(dsx, sx, sizeof(float) * (size_t)M);
            setenv("VSR_FP8_GEMM_BN", c->bn, 1);
            setenv("VSR_FP8_GEMM_CTAS", c->ctas, 1);
            /* variant 0, 1: own kernel promoted (pipelined) / fast; 2, 3: cuBLASLt (VSR_FP8_GEMM=0) promoted /
             * fast; 4: own kernel, the serial promoted schedule, bit-identical to variant 0 */
            const int fast_was = cuda_quant_set_fp8_fast_accum(0);
            float *ypipe[2] = {malloc(sizeof(float) * (size_t)(M * N)), malloc(sizeof(float) * (size_t)(M * N))};
            for (int var = 0; var < 5; var++) {
                setenv("VSR_FP8_GEMM", var == 2 || var == 3 ? "0" : "1", 1);
                cuda_quant_set_fp8_fast_accum(var == 1 || var == 3);
                if (var == 4) setenv("VSR_FP8_GEMM_PROMOTE", "serial", 1);
                for (int acc = 0; acc <= 1; acc++) {
                    for (int rep = 0; rep < 2; rep++) {
                        float *out = rep ? y2 : y;
                        for (int64_t i = 0; i < M * N; i++) out[i] = acc ? y0[i] : NAN;
                        dset(dy, out, sizeof(float) * (size_t)(M * N));
                        st = cuda_fp8_linear_prequant(cc, dxq, dsx, M, bw, dy, acc, &e);
                        CHECK_OK(st, e);
                        dget(out, dy, sizeof(float) * (size_t)(M * N));
                    }
                    const char *path = cuda_quant_last_path();
                    if ((var < 2 || var == 4) && fp8_is_sm90()) CHECK_MSG(!strncmp(path, "fp8:wgmma", 9), "path %s", path);
                    if (var == 0 && fp8_is_sm90()) CHECK_MSG(strstr(path, ",promote,") != NULL, "path %s", path);
                    if (var == 4 && fp8_is_sm90()) CHECK_MSG(strstr(path, ",promote-serial,") != NULL, "path %s", path);
                    if (var == 0) memcpy(ypipe[acc], y, sizeof(float) * (size_t)(M * N));
                    if (var == 4)
                        CHECK_MSG(memcmp(y, ypipe[acc], sizeof(float) * (size_t)(M * N)) == 0,
                                  "fp8 prequant M %lld N %lld K %lld acc %d: serial and pipelined promotion differ (%.3g)",
                                  (long long)M, (long long)N, (long long)K, acc, nerr(y, ypipe[acc], M * N));
                    double err = 0, num = 0, den = 0;
                    for (int64_t i = 0; i < M * N; i++) {
                        double r = (double)refq[i] + (acc ? y0[i] : 0.0), d = (double)y[i] - r;
                        if (!isfinite(y[i])) num = INFINITY;
                        num += d * d, den += r * r;
                    }
                    err = sqrt(num / den);
                    double bound = fp8_bound(path, K);
                    printf("  fp8 prequant M %lld N %lld K %lld acc %d: %s err %.3g\n", (long long)M, (long long)N,
                           (long long)K, acc, path, err);
                    CHECK_MSG(err <= bound, "fp8 prequant M %lld N %lld K %lld acc %d path %s: %.3g > %.1g", (long long)M,
                              (long long)N, (long long)K, acc, path, err, bound);
                    CHECK_MSG(memcmp(y, y2, sizeof(float) * (size_t)(M * N)) == 0, "fp8 prequant rerun differs, path %s",
                              path);
                }
            }
            cuda_quant_set_fp8_fast_accum(fast_was);
            unsetenv("VSR_FP8_GEMM"), unsetenv("VSR_FP8_GEMM_BN"), unsetenv("VSR_FP8_GEMM_CTAS");
            unsetenv("VSR_FP8_GEMM_PROMOTE");
            free(ypipe[0]), free(ypipe[1]);
        }
        GB.ops->buf_free(GB.ctx, dxq), GB.ops->buf_free(GB.ctx, dsx), GB.ops->buf_free(GB.ctx, dy);
        if (bw) GB.ops->weight_free(GB.ctx, bw);
        free(wb), free(ws), free(wq), free(xq), free(xqp), free(x), free(sx), free(refq), free(y), free(y2), free(y0);
    }
}

TEST(fp8_refused_before_ada) {
    uint8_t wq[16 * 32] = {0};
    uint16_t ws[16];
    for (int i = 0; i < 16; i++) ws[i] = f2bf(1.0f);
    vsr_weight_view v = {.kind = VSR_WK_FP8, .N = 16, .K = 32, .w = wq, .scale = ws, .name = "layers.3.self_attn.q_proj"};
    vsr_bweight *bw = NULL;
    vsr_err e = {0};
    int real = cuda_quant_test_fake_cc(GB.ctx, 8, 0); /* an injected Ampere A100 */
    CHECK_ERR(GB.ops->weight_upload(GB.ctx, &v, &bw, &e), e, VSR_E_DEVICE,
              "layers.3.self_attn.q_proj: " VSR_REFUSAL_FP8 "; cuda:");
    CHECK(strstr(e.msg, "(compute capability 8.0)") != NULL);
    cuda_quant_test_fake_cc(GB.ctx, real / 10, real % 10);
    v.scale = NULL;
    CHECK_ERR(GB.ops->weight_upload(GB.ctx, &v, &bw, &e), e, VSR_E_FORMAT, "q_proj: FP8 weight has no weight_scale");
}

/* One FP8 linear shared by the route, kept-route and outer-vector tests: a weight [520, 1040]
 * uploaded, activations x [300, 1040] and their same-quantized reference refq (fp8_acts_ref). */
typedef struct f8one {
    int64_t M, N, K;
    uint16_t *wb, *ws;
    uint8_t *wq, *xq;
    float *x, *sx, *refq;
    vsr_bweight *bw;
} f8one;
static vsr_status f8one_make(f8one *f, const char *name, vsr_err *e) {
    *f = (f8one){.M = 300, .N = 520, .K = 1040};
    const int64_t M = f->M, N = f->N, K = f->K;
    f->wb = malloc(sizeof(uint16_t) * (size_t)(N * K)), f->ws = malloc(sizeof(uint16_t) * (size_t)N);
    f->wq = malloc((size_t)(N * K)), f->xq = malloc((size_t)(M * K));
    f->x = malloc(sizeof(float) * (size_t)(M * K)), f->sx = malloc(sizeof(float) * (size_t)M);
    f->refq = malloc(sizeof(float) * (size_t)(M * N));
    fp8_weights(N, K, f->wb, f->wq, f->ws);
    fp8_acts_ref(M, N, K, f->wq, f->ws, f->x, f->xq, f->sx, f->refq);
    vsr_weight_view v = {.kind = VSR_WK_FP8, .N = N, .K = K, .w = f->wq, .scale = f->ws, .name = name};
    return GB.ops->weight_upload(GB.ctx, &v, &f->bw, e);
}
static void f8one_free(f8one *f) {
    if (f->bw) GB.ops->weight_free(GB.ctx, f->bw);
    free(f->wb), free(f->ws), free(f->wq), free(f->xq), free(f->x), free(f->sx), free(f->refq);
}
/* the tag cuda_quant_last_path() carries for each route (cuda_quant_force_fp8_route 0, 1, 2) */
static const char *const ROUTE_TAGS[3] = {"[route lt,", "[route wg128,", "[route wg256,"};
/* the route a path names, -1 for none */
static int route_in_path(const char *path) {
    int r = -1;
    for (int i = 0; i < 3; i++)
        if (strstr(path, ROUTE_TAGS[i])) r = i;
    return r;
}
/* The FP8 route tests' case (f8one_make) on a capability 9.0 device; elsewhere it says so and makes nothing:
 * 0. *st: the upload's status. */
static int f8one_sm90(f8one *f, const char *name, const char *what, vsr_status *st, vsr_err *e) {
    if (!fp8_is_sm90()) {
        printf("  (%s: not a capability 9.0 device)\n", what);
        return 0;
    }
    *st = f8one_make(f, name, e);
    CHECK_OK(*st, *e);
    return 1;
}

/* The FP8 route on capability 9.0 (VSR_FP8_GEMM unset, quant_fp8.cu "route"): each route forced
 * (cuBLASLt; the own kernel at width 128 and 256, its products rounded to BF16 as (b') rounds them)
 * against the same-quantized reference, accumulating, bit-identical on a rerun, its path naming it;
 * then the automatic choice with an autotune directory: timed once, recorded as fp8_route-*.json, and
 * the same answer as the route it names, forced. */
TEST(fp8_route) {
    CHECK(cuda_quant_force_fp8_route(3) == -2 && cuda_quant_force_fp8_route(-2) == -2);
    f8one f;
    vsr_err e = {0};
    vsr_status st;
    if (!f8one_sm90(&f, "test.route", "fp8 route", &st, &e)) return;
    const int64_t M = f.M, N = f.N, K = f.K;
    const float *x = f.x, *refq = f.refq;
    const vsr_bweight *bw = f.bw;
    float *ra = malloc(sizeof(float) * (size_t)(M * N)), *y = malloc(sizeof(float) * (size_t)(M * N));
    float *y2 = malloc(sizeof(float) * (size_t)(M * N)), *y0 = malloc(sizeof(float) * (size_t)(M * N));
    float *ylt = malloc(sizeof(float) * (size_t)(M * N));
    for (int64_t i = 0; i < M * N; i++) y0[i] = frand(), ra[i] = refq[i] + y0[i];
    int prev = -1; /* the knob returns its previous setting */
    for (int route = 0; route < 3 && !st; route++)
        for (int acc = 0; acc <= 1; acc++) {
            CHECK(cuda_quant_force_fp8_route(route) == prev);
            prev = route;
            CHECK_OK(gpu_linear(bw, x, M, K, N, acc ? y0 : NULL, y, &e), e);
            char path[160];
            snprintf(path, sizeof path, "%s", cuda_quant_last_path());
            CHECK_MSG(strstr(path, ROUTE_TAGS[route]) != NULL && strstr(path, ",forced]") != NULL, "route %d: path %s", route,
                      path);
            /* the own kernel rounds its product to BF16 exactly where cuBLASLt's path does: (b') without
             * outer-vector scales; with them (a) both keep FP32 products */
            if (route > 0)
                CHECK_MSG(!strncmp(path, "fp8:wgmma(", 10) && strstr(path, "bn=") &&
                              strstr(path, route == 1 ? "bn=128" : "bn=256") &&
                              !strstr(path, "bf16-out") == !!cuda_quant_fp8_ovscale(GB.ctx),
                          "route %d: path %s", route, path);
            double err = nerr(y, acc ? ra : refq, M * N);
            printf("  fp8 route %d acc %d: %s err %.3g\n", route, acc, path, err);
            CHECK_MSG(err <= fp8_bound(path, K), "fp8 route %d acc %d path %s: %.3g", route, acc, path, err);
            CHECK_OK(gpu_linear(bw, x, M, K, N, acc ? y0 : NULL, y2, &e), e);
            CHECK_MSG(memcmp(y, y2, sizeof(float) * (size_t)(M * N)) == 0, "fp8 route %d rerun differs", route);
            if (!acc && route == 0) memcpy(ylt, y, sizeof(float) * (size_t)(M * N));
            /* the routes differ in the order of the sums only (both round the product to BF16) */
            if (!acc && route > 0)
                CHECK_MSG(nerr(y, ylt, M * N) <= fp8_bound(path, K), "route %d vs cuBLASLt: %.3g", route,
                          nerr(y, ylt, M * N));
        }
    CHECK(cuda_quant_force_fp8_route(-1) == 2);
    /* automatic with a cache directory: timed, recorded, and the answer of the route it names */
    char dir[600];
    snprintf(dir, sizeof dir, "%s/route", test_tmpdir());
    CHECK_OK(cuda_quant_set_options(GB.ctx, NULL, dir, &e), e);
    if (!st) {
        CHECK_OK(gpu_linear(bw, x, M, K, N, NULL, y, &e), e);
        char path[160];
        snprintf(path, sizeof path, "%s", cuda_quant_last_path());
        printf("  fp8 route, automatic: %s\n", path);
        CHECK_MSG(strstr(path, ",timed]") != NULL, "path %s", path);
        const int chosen = route_in_path(path);
        CHECK(chosen >= 0);
        if (chosen >= 0) {
            cuda_quant_force_fp8_route(chosen);
            CHECK_OK(gpu_linear(bw, x, M, K, N, NULL, y2, &e), e);
            CHECK_MSG(memcmp(y, y2, sizeof(float) * (size_t)(M * N)) == 0, "automatic route differs from %s forced",
                      ROUTE_TAGS[chosen]);
            cuda_quant_force_fp8_route(-1);
        }
        char cmd[800];
        snprintf(cmd, sizeof cmd, "ls %s/fp8_route-*-m300-n520-k1040-a0-*.json >/dev/null 2>&1", dir);
        CHECK_MSG(system(cmd) == 0, "no fp8_route record in %s", dir);
    }
    CHECK_OK(cuda_quant_set_options(GB.ctx, NULL, "", &e), e);
    f8one_free(&f);
    free(ra), free(y), free(y2), free(y0), free(ylt);
}

/* The FP8 products kept in BF16 for a reader (linear_swiglu's unscaled product with its scales,
 * keep_product_bf16's scaled one) on each route forced: cuBLASLt, the own kernel at width 128 and 256
 * (its BF16 outputs, "bf16-raw" / "bf16-scaled"). Each against the same-quantized reference (the BF16
 * rounding bound), bit-identical on a rerun, the routes within that bound of each other; then the
 * automatic choice with an autotune directory: timed, recorded under its own key (kept1 / kept2), and
 * the answer of the route it names, forced. */
static void kept_to_f32(const uint16_t *d, int64_t ldd, const float *dsx, const float *dsw, int64_t M, int64_t N,
                        float *y) {
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            float v = bf2f(d[m * ldd + n]);
            y[m * N + n] = dsx ? v * dsx[m] * dsw[n] : v;
        }
}
/* runs one kept product (kind 1: bf16out, 2: bf16_to) and brings it back as FP32 [M, N] */
static vsr_status kept_once(const vsr_bweight *bw, const float *dx, int64_t M, int64_t N, int kind, uint16_t *ddst,
                            float *y, vsr_err *e) {
    struct cuda_ctx *cc = (struct cuda_ctx *)GB.ctx;
    int ran = 0;
    vsr_status st;
    if (kind == 1) {
        const uint16_t *d = NULL;
        const float *dsx = NULL, *dsw = NULL;
        int64_t ldd = 0;
        if ((st = cuda_fp8_linear_bf16out(cc, dx, NULL, NULL, M, bw, &d, &ldd, &dsx, &dsw, &ran, e))) return st;
        if (!ran) return vsr_err_set(e, VSR_E_INTERNAL, "kept product did not run");
        uint16_t *h = malloc(sizeof(uint16_t) * (size_t)(M * ldd));
        float *hsx = malloc(sizeof(float) * (size_t)M), *hsw = malloc(sizeof(float) * (size_t)N);
        dget(h, d, sizeof(uint16_t) * (size_t)(M * ldd));
        if (dsx) dget(hsx, dsx, sizeof(float) * (size_t)M), dget(hsw, dsw, sizeof(float) * (size_t)N);
        kept_to_f32(h, ldd, dsx ? hsx : NULL, hsw, M, N, y);
        free(h), free(hsx), free(hsw);
        return VSR_OK;
    }
    uint16_t *h = malloc(sizeof(uint16_t) * (size_t)(M * N));
    for (int64_t i = 0; i < M * N; i++) h[i] = 0x7fc0; /* NaN poison */
    dset(ddst, h, sizeof(uint16_t) * (size_t)(M * N));
    if ((st = cuda_fp8_linear_bf16_to(cc, dx, NULL, NULL, M, bw, ddst, &ran, e))) return free(h), st;
    if (!ran) return free(h), vsr_err_set(e, VSR_E_INTERNAL, "kept product did not run");
    dget(h, ddst, sizeof(uint16_t) * (size_t)(M * N));
    kept_to_f32(h, N, NULL, NULL, M, N, y);
    free(h);
    return VSR_OK;
}

TEST(fp8_kept_route) {
    f8one f;
    vsr_err e = {0};
    vsr_status st;
    if (!f8one_sm90(&f, "test.kept", "fp8 kept route", &st, &e)) return;
    const int64_t M = f.M, N = f.N, K = f.K;
    const float *x = f.x, *refq = f.refq;
    const vsr_bweight *bw = f.bw;
    float *y = malloc(sizeof(float) * (size_t)(M * N)), *y2 = malloc(sizeof(float) * (size_t)(M * N));
    float *ylt[3] = {NULL, malloc(sizeof(float) * (size_t)(M * N)), malloc(sizeof(float) * (size_t)(M * N))};
    float *dx = dalloc(sizeof(float) * (size_t)(M * K));
    uint16_t *ddst = dalloc(sizeof(uint16_t) * (size_t)(M * N));
    if (!st && dx && ddst) {
        dset(dx, x, sizeof(float) * (size_t)(M * K));
        for (int kind = 1; kind <= 2; kind++)
            for (int route = 0; route < 3; route++) {
                cuda_quant_force_fp8_route(route);
                CHECK_OK(kept_once(bw, dx, M, N, kind, ddst, y, &e), e);
                char path[200];
                snprintf(path, sizeof path, "%s", cuda_quant_last_path());
                CHECK_MSG(strstr(path, route ? ROUTE_TAGS[route] : "fp8:") != NULL, "kept %d route %d: path %s", kind, route,
                          path);
                /* the own kernel writes what cuBLASLt writes: the scaled product rounded once with
                 * outer-vector scales (b), else the product rounded (b') (and, kept 2, scaled and rounded) */
                if (route)
                    CHECK_MSG(!strncmp(path, "fp8:wgmma(", 10) && strstr(path, route == 1 ? "bn=128" : "bn=256") &&
                                  strstr(path, cuda_quant_fp8_ovscale(GB.ctx) ? ",bf16-scaled,"
                                               : kind == 1                   ? ",bf16-raw,"
                                                                             : ",bf16-scaled(product rounded),") &&
                                  strstr(path, ",forced]"),
                              "kept %d route %d: path %s", kind, route, path);
                else CHECK_MSG(strstr(path, "bf16-kept") != NULL, "kept %d route 0: path %s", kind, path);
                /* the unscaled product rounded to BF16, then (kept 2) the scaled one rounded again */
                const double bound = 4e-3 + (kind == 2 ? 4e-3 : 0.0);
                double err = nerr(y, refq, M * N);
                printf("  fp8 kept %d route %d: %s err %.3g\n", kind, route, path, err);
                CHECK_MSG(err <= bound, "fp8 kept %d route %d path %s: %.3g > %.1g", kind, route, path, err, bound);
                CHECK_OK(kept_once(bw, dx, M, N, kind, ddst, y2, &e), e);
                CHECK_MSG(memcmp(y, y2, sizeof(float) * (size_t)(M * N)) == 0, "fp8 kept %d route %d rerun differs",
                          kind, route);
                if (route == 0) memcpy(ylt[kind], y, sizeof(float) * (size_t)(M * N));
                else
                    CHECK_MSG(nerr(y, ylt[kind], M * N) <= bound, "kept %d route %d vs cuBLASLt: %.3g", kind, route,
                              nerr(y, ylt[kind], M * N));
            }
        cuda_quant_force_fp8_route(-1);
        char dir[600];
        snprintf(dir, sizeof dir, "%s/kept_route", test_tmpdir());
        CHECK_OK(cuda_quant_set_options(GB.ctx, NULL, dir, &e), e);
        for (int kind = 1; kind <= 2; kind++) {
            CHECK_OK(kept_once(bw, dx, M, N, kind, ddst, y, &e), e);
            char path[200];
            snprintf(path, sizeof path, "%s", cuda_quant_last_path());
            printf("  fp8 kept %d, automatic: %s\n", kind, path);
            const int chosen = route_in_path(path) > 0 ? route_in_path(path) : 0;
            /* cuBLASLt's own path names carry no route tag; the record says it was timed */
            char cmd[900];
            snprintf(cmd, sizeof cmd, "ls %s/fp8_route-*-m300-n520-k1040-kept%d-*.json >/dev/null 2>&1", dir, kind);
            CHECK_MSG(system(cmd) == 0, "no kept%d fp8_route record in %s", kind, dir);
            if (chosen) CHECK_MSG(strstr(path, ",timed]") != NULL, "path %s", path);
            cuda_quant_force_fp8_route(chosen);
            CHECK_OK(kept_once(bw, dx, M, N, kind, ddst, y2, &e), e);
            CHECK_MSG(memcmp(y, y2, sizeof(float) * (size_t)(M * N)) == 0, "automatic kept %d route differs from %d forced",
                      kind, chosen);
            cuda_quant_force_fp8_route(-1);
        }
        CHECK_OK(cuda_quant_set_options(GB.ctx, NULL, "", &e), e);
    }
    GB.ops->buf_free(GB.ctx, dx), GB.ops->buf_free(GB.ctx, ddst);
    f8one_free(&f);
    free(y), free(y2), free(ylt[1]), free(ylt[2]);
}

/* Kept products at few rows (linear_swiglu's, keep_product_bf16's) on cuBLASLt's route: under --dtype auto, up to
 * 128 rows, where cuBLASLt has outer-vector scales, the unscaled FP32 product then one pass into BF16 (the numerics
 * of (b): one rounding of the scaled product), as the linear takes (c) there; from 129 rows, and under an
 * explicit --dtype at every row count, (b) itself. Each against the same-quantized reference, bit-identical on a
 * rerun, and the two ways within the bound of each other. */
TEST(fp8_kept_small_rows) {
    f8one f;
    vsr_err e = {0};
    vsr_status st;
    if (!f8one_sm90(&f, "test.kept.small", "fp8 kept small rows", &st, &e)) return;
    if (!cuda_quant_fp8_ovscale(GB.ctx)) {
        printf("  (fp8 kept small rows: this cuBLASLt has no outer-vector scales)\n");
        f8one_free(&f);
        return;
    }
    static const int64_t rows[] = {1, 17, 128, 129};
    const int64_t N = f.N, K = f.K;
    float *y = malloc(sizeof(float) * (size_t)(f.M * N)), *y2 = malloc(sizeof(float) * (size_t)(f.M * N));
    float *dx = dalloc(sizeof(float) * (size_t)(f.M * K));
    uint16_t *ddst = dalloc(sizeof(uint16_t) * (size_t)(f.M * N));
    if (!st && dx && ddst) {
        dset(dx, f.x, sizeof(float) * (size_t)(f.M * K));
        cuda_quant_force_fp8_route(0);
        for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++)
            for (int kind = 1; kind <= 2; kind++) {
                const int64_t M = rows[ri];
                CHECK_OK(kept_once(f.bw, dx, M, N, kind, ddst, y, &e), e);
                char path[200];
                snprintf(path, sizeof path, "%s", cuda_quant_last_path());
                const int small = M <= 128;
                CHECK_MSG(strstr(path, small ? "fp8:unscaled(<= 128 rows,bf16-kept," : "fp8:scaled(outer-vec,bf16-kept,") !=
                              NULL,
                          "kept %d M %lld: path %s", kind, (long long)M, path);
                const double err = nerr(y, f.refq, M * N);
                CHECK_MSG(err <= 4e-3, "kept %d M %lld %s: %.3g vs the same-quantized reference", kind, (long long)M, path,
                          err);
                CHECK_OK(kept_once(f.bw, dx, M, N, kind, ddst, y2, &e), e);
                CHECK_MSG(memcmp(y, y2, sizeof(float) * (size_t)(M * N)) == 0, "kept %d M %lld: rerun differs", kind,
                          (long long)M);
                if (small) { /* an explicit --dtype keeps (b) */
                    CHECK_OK(cuda_quant_set_options(GB.ctx, "bfloat16", NULL, &e), e);
                    CHECK_OK(kept_once(f.bw, dx, M, N, kind, ddst, y2, &e), e);
                    const char *pe = cuda_quant_last_path();
                    CHECK_MSG(strstr(pe, "fp8:scaled(outer-vec,bf16-kept,") != NULL, "explicit dtype, kept %d M %lld: %s",
                              kind, (long long)M, pe);
                    CHECK_MSG(nerr(y2, y, M * N) <= 4e-3, "kept %d M %lld: (b) against the small-row way: %.3g", kind,
                              (long long)M, nerr(y2, y, M * N));
                    CHECK_OK(cuda_quant_set_options(GB.ctx, "auto", NULL, &e), e);
                }
                printf("  fp8 kept %d M %lld: %s err %.3g\n", kind, (long long)M, path, err);
            }
        cuda_quant_force_fp8_route(-1);
    }
    GB.ops->buf_free(GB.ctx, dx), GB.ops->buf_free(GB.ctx, ddst);
    f8one_free(&f);
    free(y), free(y2);
}

/* Outer-vector scales in cuBLASLt (cuda_quant_fp8_ovscale; cuda_quant_set_fp8_ovscale(0), as
 * VSR_CUDA_FP8_OVSCALE=0, turns them off): with
 * them the FP8 linear is (a), FP32 products scaled inside the GEMM (FP32 bound, no "bf16" in its path),
 * and a kept product (b), the scaled product in BF16 with no scales left for its reader; off, the
 * linear is (b') ("bf16-out") and the kept product unscaled with its scales. Both against the
 * same-quantized reference. Where this cuBLASLt has none, only the second half runs. */
TEST(fp8_ovscale) {
    f8one f;
    vsr_err e = {0};
    vsr_status st;
    if (!f8one_sm90(&f, "test.ov", "fp8 ovscale", &st, &e)) return;
    const int64_t M = f.M, N = f.N, K = f.K;
    const float *x = f.x, *refq = f.refq;
    const vsr_bweight *bw = f.bw;
    float *y = malloc(sizeof(float) * (size_t)(M * N));
    float *dx = dalloc(sizeof(float) * (size_t)(M * K));
    const int ov = cuda_quant_fp8_ovscale(GB.ctx);
    printf("  fp8 ovscale: cuBLASLt %s outer-vector-scaled FP8 algorithms\n", ov ? "offers" : "offers no");
    const int was = cuda_quant_force_fp8_route(0);
    if (!st && dx) {
        dset(dx, x, sizeof(float) * (size_t)(M * K));
        for (int off = ov ? 0 : 1; off <= 1; off++) {
            const int ov_was = off ? cuda_quant_set_fp8_ovscale(0) : -1;
            CHECK(cuda_quant_fp8_ovscale(GB.ctx) == (off ? 0 : 1));
            CHECK_OK(gpu_linear(bw, x, M, K, N, NULL, y, &e), e);
            char path[200];
            snprintf(path, sizeof path, "%s", cuda_quant_last_path());
            double err = nerr(y, refq, M * N);
            printf("  fp8 ovscale %s: linear %s err %.3g\n", off ? "off" : "on", path, err);
            if (off) CHECK_MSG(strstr(path, "bf16-out") != NULL, "ovscale off: path %s", path);
            else CHECK_MSG(!strncmp(path, "fp8:scaled(outer-vec,", 21) && !strstr(path, "bf16"), "ovscale on: path %s", path);
            CHECK_MSG(err <= fp8_bound(path, K), "ovscale %s: %.3g", off ? "off" : "on", err);
            const uint16_t *d = NULL;
            const float *dsx = NULL, *dsw = NULL;
            int64_t ldd = 0;
            int ran = 0;
            CHECK_OK(cuda_fp8_linear_bf16out((struct cuda_ctx *)GB.ctx, dx, NULL, NULL, M, bw, &d, &ldd, &dsx, &dsw, &ran, &e),
                     e);
            snprintf(path, sizeof path, "%s", cuda_quant_last_path());
            CHECK_MSG(ran && (off ? dsx != NULL : dsx == NULL), "ovscale %s: kept product ran %d, scales %s, path %s",
                      off ? "off" : "on", ran, dsx ? "left" : "applied", path);
            if (ran) {
                uint16_t *h = malloc(sizeof(uint16_t) * (size_t)(M * ldd));
                float *hsx = malloc(sizeof(float) * (size_t)M), *hsw = malloc(sizeof(float) * (size_t)N);
                dget(h, d, sizeof(uint16_t) * (size_t)(M * ldd));
                if (dsx) dget(hsx, dsx, sizeof(float) * (size_t)M), dget(hsw, dsw, sizeof(float) * (size_t)N);
                kept_to_f32(h, ldd, dsx ? hsx : NULL, hsw, M, N, y);
                err = nerr(y, refq, M * N);
                printf("  fp8 ovscale %s: kept %s err %.3g\n", off ? "off" : "on", path, err);
                CHECK_MSG(err <= 4e-3, "ovscale %s: kept product %.3g", off ? "off" : "on", err);
                free(h), free(hsx), free(hsw);
            }
            if (off) cuda_quant_set_fp8_ovscale(ov_was);
        }
    }
    cuda_quant_force_fp8_route(was);
    GB.ops->buf_free(GB.ctx, dx);
    f8one_free(&f);
    free(y);
}

/* ---- autotune across processes ---- */

static const char *g_self;

/* child: one process using DIR; writes its outputs, then timings and loads, to OUT */
static int autotune_child(const char *dir, const char *outpath) {
    vsr_err e = {0};
    if (vsr_backend_cuda_new(0, &GB, &e)) {
        fprintf(stderr, "child: %s\n", e.msg);
        return 2;
    }
    if (cuda_quant_set_options(GB.ctx, "auto", dir, &e)) return 3;
    rng = 0x5151;
    i4case c = {1024, 2048, 128, 0, 0};
    i4w w;
    i4_make(&c, &w);
    vsr_weight_view v = i4_view(&w, "child.int4");
    vsr_bweight *bw = NULL;
    if (GB.ops->weight_upload(GB.ctx, &v, &bw, &e)) {
        fprintf(stderr, "child upload: %s\n", e.msg);
        return 4;
    }
    FILE *f = fopen(outpath, "wb");
    if (!f) return 5;
    static const int64_t ms[] = {1, 16, 40, 100};
    for (int i = 0; i < 4; i++) {
        int64_t M = ms[i];
        float *x = malloc(sizeof(float) * (size_t)(M * c.K)), *y = malloc(sizeof(float) * (size_t)(M * c.N));
        for (int64_t j = 0; j < M * c.K; j++) x[j] = frand();
        if (gpu_linear(bw, x, M, c.K, c.N, NULL, y, &e)) {
            fprintf(stderr, "child linear: %s\n", e.msg);
            return 6;
        }
        fprintf(stderr, "child M %lld: %s\n", (long long)M, cuda_quant_last_path());
        fwrite(y, sizeof(float), (size_t)(M * c.N), f);
        free(x), free(y);
    }
    long t = cuda_quant_autotune_timings(), l = cuda_quant_autotune_loads();
    fwrite(&t, sizeof t, 1, f);
    fwrite(&l, sizeof l, 1, f);
    fclose(f);
    GB.ops->weight_free(GB.ctx, bw);
    vsr_backend_destroy(&GB);
    i4_free(&w);
    return 0;
}

static int run_child(const char *dir, const char *out) {
    pid_t p = fork();
    if (p == 0) {
        execl(g_self, g_self, "--autotune-child", dir, out, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    if (p < 0 || waitpid(p, &status, 0) < 0) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Every FP8 activation quantizer divides by the row's scale as a multiply and two FMAs from the correctly
 * rounded reciprocal (device_math.cuh fp8_scaled): over 2^26 draws, bit for bit the division where an e4m3
 * code can tell the quotients apart, and the same e4m3 codes everywhere. */
TEST(fp8_scale_division) {
    const int cc = cuda_quant_test_fake_cc(GB.ctx, 0, 0); /* read, then restored */
    cuda_quant_test_fake_cc(GB.ctx, cc / 10, cc % 10);
    if (cc < 89) {
        printf("  (not run: compute capability %d.%d has no FP8)\n", cc / 10, cc % 10);
        return;
    }
    vsr_err e;
    int64_t n = 1LL << 26, counts[3] = {-1, -1, -1};
    CHECK_OK(cuda_fp8_div_check((struct cuda_ctx *)GB.ctx, 0x5eed5eedull, n, counts, &e), e);
    printf("  fp8_scaled against x / s, %lld draws (%lld on the multiply path): %lld quotients and %lld e4m3 codes "
           "differ\n", (long long)n, (long long)counts[2], (long long)counts[0], (long long)counts[1]);
    CHECK_MSG(counts[0] == 0 && counts[1] == 0, "fp8_scaled differs from x / s: %lld quotients, %lld codes",
              (long long)counts[0], (long long)counts[1]);
    CHECK_MSG(counts[2] > n / 2 && counts[2] < n, "the draws should cover both paths (%lld of %lld multiplied)",
              (long long)counts[2], (long long)n);
}

TEST(autotune_two_processes) {
    char dir[600], o1[700], o2[700];
    snprintf(dir, sizeof dir, "%s/tune", test_tmpdir());
    snprintf(o1, sizeof o1, "%s/out1.bin", test_tmpdir());
    snprintf(o2, sizeof o2, "%s/out2.bin", test_tmpdir());
    CHECK(run_child(dir, o1) == 0);
    CHECK(run_child(dir, o2) == 0);
    size_t n1 = 0, n2 = 0;
    char *b1 = test_read_file(o1, &n1), *b2 = test_read_file(o2, &n2);
    CHECK(b1 && b2 && n1 == n2 && n1 > 2 * sizeof(long));
    if (b1 && b2 && n1 == n2 && n1 > 2 * sizeof(long)) {
        size_t ny = n1 - 2 * sizeof(long);
        CHECK_MSG(memcmp(b1, b2, ny) == 0, "the two processes' answers differ");
        long t1, l1, t2, l2;
        memcpy(&t1, b1 + ny, sizeof t1), memcpy(&l1, b1 + ny + sizeof(long), sizeof l1);
        memcpy(&t2, b2 + ny, sizeof t2), memcpy(&l2, b2 + ny + sizeof(long), sizeof l2);
        printf("  autotune: first process timed %ld keys, loaded %ld; second timed %ld, loaded %ld\n", t1, l1, t2, l2);
        CHECK(t1 == 4 && l1 == 0); /* four token-tile buckets: 1, 2, 8 (40 rows = 5 tiles), 16 (100 rows = 13 tiles) */
        CHECK(t2 == 0 && l2 == 4);
    }
    free(b1), free(b2);
    /* a cache file that is not ours is refused with its name */
    char path[900];
    snprintf(path, sizeof path, "%s/bad", test_tmpdir());
    vsr_err e = {0};
    vsr_backend save = GB;
    CHECK_OK(cuda_quant_set_options(GB.ctx, NULL, path, &e), e);
    i4case c = {64, 256, 128, 1, 0};
    i4w w;
    i4_make(&c, &w);
    vsr_weight_view v = i4_view(&w, "t.int4");
    vsr_bweight *bw = NULL;
    CHECK_OK(GB.ops->weight_upload(GB.ctx, &v, &bw, &e), e);
    float x[2 * 256], y[2 * 64];
    for (int i = 0; i < 2 * 256; i++) x[i] = frand();
    CHECK_OK(gpu_linear(bw, x, 2, 256, 64, NULL, y, &e), e); /* times and records */
    CHECK(strstr(cuda_quant_last_path(), "src=timed") != NULL);
    char file[1200];
    snprintf(file, sizeof file, "%s/int4_fused-", path);
    char cmd[1400];
    /* int4 candidates stream a weight: timed cold, with L2 read through before each launch (autotune.cu) */
    snprintf(cmd, sizeof cmd, "grep -q '\"l2\": \"flushed\"' %s*.json", file);
    CHECK_MSG(system(cmd) == 0, "the int4 autotune file does not say its candidates were timed with L2 flushed");
    /* corrupt the file, and use a fresh backend (nothing remembered in memory) */
    snprintf(cmd, sizeof cmd, "for f in %s*.json; do echo '{\"format\":\"other\"}' > \"$f\"; done", file);
    CHECK(system(cmd) == 0);
    GB.ops->weight_free(GB.ctx, bw);
    vsr_backend g2;
    CHECK_OK(vsr_backend_cuda_new(0, &g2, &e), e);
    GB = g2;
    CHECK_OK(cuda_quant_set_options(GB.ctx, NULL, path, &e), e);
    CHECK_OK(GB.ops->weight_upload(GB.ctx, &v, &bw, &e), e);
    CHECK_ERR(gpu_linear(bw, x, 2, 256, 64, NULL, y, &e), e, VSR_E_FORMAT, "autotune cache file ");
    CHECK(strstr(e.msg, "expected {\"format\":\"vsr-autotune/1\"") != NULL);
    GB.ops->weight_free(GB.ctx, bw);
    /* a directory that is a file */
    char notdir[900];
    snprintf(notdir, sizeof notdir, "%s/afile", test_tmpdir());
    test_write_file(notdir, "x", 1);
    CHECK_OK(cuda_quant_set_options(GB.ctx, NULL, notdir, &e), e);
    CHECK_OK(GB.ops->weight_upload(GB.ctx, &v, &bw, &e), e);
    CHECK_ERR(gpu_linear(bw, x, 2, 256, 64, NULL, y, &e), e, VSR_E_IO, "not a directory");
    GB.ops->weight_free(GB.ctx, bw);
    vsr_backend_destroy(&GB);
    GB = save;
    i4_free(&w);
}

#endif /* VSR_HAVE_CUDA */

int main(int argc, char **argv) {
#ifdef VSR_HAVE_CUDA
    if (argc == 4 && strcmp(argv[1], "--autotune-child") == 0) return autotune_child(argv[2], argv[3]);
    g_self = "/proc/self/exe";
    (void)argv;
    vsr_err e = {0};
    if (vsr_backend_cuda_new(0, &GB, &e)) {
        printf("SKIP: no CUDA device (%s)\n", e.msg);
        return test_summary() ? 1 : 77; /* 77: skipped (tests/run.sh) */
    }
    const char *only = getenv("VSR_QUANT_TESTS");
    if (only && strcmp(only, "autotune") == 0) { /* the two-process autotune test alone */
        RUN(autotune_two_processes);
        vsr_backend_destroy(&GB);
        return test_summary();
    }
    if (!(only && strcmp(only, "noint4") == 0)) {
        RUN(int4_against_reference);
        RUN(int4_every_candidate);
        RUN(int4_bf16_entry);
        RUN(int4_refusals);
    }
    if (only && strcmp(only, "int4") == 0) { /* the int4 tests only (see the header) */
        vsr_backend_destroy(&GB);
        return test_summary();
    }
    if (!(only && strcmp(only, "fp8") == 0)) RUN(fp8_against_reference);
    RUN(fp8_wgmma_prequant);
    RUN(fp8_route);
    RUN(fp8_kept_route);
    RUN(fp8_kept_small_rows);
    RUN(fp8_ovscale);
    RUN(fp8_refused_before_ada);
    RUN(fp8_scale_division);
    RUN(autotune_two_processes);
    vsr_backend_destroy(&GB);
#else
    (void)argc, (void)argv;
    printf("SKIP: no CUDA device (this build has no CUDA: nvcc was not found at build time)\n");
    return test_summary() ? 1 : 77; /* 77: skipped (tests/run.sh) */
#endif
    return test_summary();
}
