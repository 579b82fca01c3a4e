/* tests/test_cuda_ops.c: the CUDA backend against the CPU backend (the oracle), op by op and
 * end to end through vsr_model_forward_last on fixture packages.
 *
 * Error measure: normalised error max|gpu - cpu| / max|cpu| over the output. Thresholds per
 * op (stated at each check): ops computed in FP32 on both sides agree to ~1e-6 and are held
 * to 1e-4; linears round activations to BF16 on the GPU (linear.cu says why) and are held to
 * 1e-2; the BF16 readout rounds its result to bf16 on both sides (1 bf16 ulp = 2^-8).
 *
 * Without CUDA in the build, or without a usable device, the device-independent checks run
 * (backend selection and its refusals) and the program prints "SKIP: no CUDA device (...)". */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "backend/backend_cuda.h"
#include "test.h"
#include "vsr/device.h"
#include "vsr/dtype.h"
#include "vsr/fixture.h"
#include "vsr/model.h"
#include "vsr/package.h"

/* ---- device-independent: backend selection ---- */

TEST(for_device_cpu_and_refusals) {
    vsr_err e = {0};
    vsr_backend b = {0};
    CHECK_OK(vsr_backend_for_device(NULL, 1, NULL, NULL, &b, &e), e);
    CHECK(b.ops && !strcmp(b.ops->name, "cpu"));
    vsr_backend_destroy(&b);
    vsr_device cpu = {.kind = VSR_DEV_CPU};
    CHECK_OK(vsr_backend_for_device(&cpu, 1, NULL, NULL, &b, &e), e);
    CHECK(b.ops && !strcmp(b.ops->name, "cpu"));
    vsr_backend_destroy(&b);
    vsr_device rocm = {.kind = VSR_DEV_ROCM, .index = 1};
    vsr_status st = vsr_backend_for_device(&rocm, 1, NULL, NULL, &b, &e);
    CHECK_ERR(st, e, VSR_E_UNSUPPORTED, "rocm:1: this vllm-srun has no ROCm backend");
    CHECK(b.ops == NULL);
#ifndef VSR_HAVE_CUDA
    vsr_device cu = {.kind = VSR_DEV_CUDA, .index = 0};
    st = vsr_backend_for_device(&cu, 1, NULL, NULL, &b, &e);
    CHECK_ERR(st, e, VSR_E_UNSUPPORTED,
              "cuda:0: this vllm-srun was built without CUDA (nvcc was not found at build time)");
    CHECK(b.ops == NULL);
#else
    /* a CUDA ordinal no host has: refused with the device named, never the CPU instead */
    vsr_device cu = {.kind = VSR_DEV_CUDA, .index = 97};
    st = vsr_backend_for_device(&cu, 1, NULL, NULL, &b, &e);
    CHECK_ERR(st, e, VSR_E_DEVICE, "cuda:97: ");
    CHECK(b.ops == NULL);
#endif
}

#ifdef VSR_HAVE_CUDA

static vsr_backend GB, CB; /* GPU, CPU */
static vsr_device cuda_dev;

/* ---- helpers ---- */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) { /* uniform [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}
static float *hrand(int64_t n, float scale) {
    float *p = malloc(sizeof(float) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) p[i] = frand() * scale;
    return p;
}
static void *up(vsr_backend *b, const float *h, int64_t n) {
    void *d = NULL;
    vsr_err e;
    if (b->ops->buf_alloc(b->ctx, sizeof(float) * (size_t)(n ? n : 1), &d, &e)) return NULL;
    if (h) b->ops->buf_set(b->ctx, d, h, sizeof(float) * (size_t)n, &e);
    return d;
}
static float *down(vsr_backend *b, const void *d, int64_t n) {
    float *h = malloc(sizeof(float) * (size_t)(n ? n : 1));
    vsr_err e;
    if (b->ops->buf_get(b->ctx, h, d, sizeof(float) * (size_t)n, &e)) {
        fprintf(stderr, "buf_get: %s\n", e.msg);
        for (int64_t i = 0; i < n; i++) h[i] = NAN;
    }
    return h;
}
/* Both backends' output buffers, compared. */
typedef struct pair {
    void *g, *c;
    int64_t n;
} pair;
static pair both(const float *h, int64_t n) { return (pair){up(&GB, h, n), up(&CB, h, n), n}; }
static double cmp(pair p, const char *what, double tol) {
    float *a = down(&GB, p.g, p.n), *b = down(&CB, p.c, p.n);
    double r = test_nerr(a, b, p.n);
    printf("  %-48s n=%-9lld err %.3g (limit %.0e)\n", what, (long long)p.n, r, tol);
    CHECK_MSG(r <= tol, "%s: normalised error %.3g > %.0e", what, r, tol);
    free(a), free(b);
    return r;
}
static void pfree(pair p) {
    GB.ops->buf_free(GB.ctx, p.g);
    CB.ops->buf_free(CB.ctx, p.c);
}

typedef struct segset {
    int n;
    int64_t start[8], len[8], pos0[8];
    int64_t rows;
} segset;
static segset mkseg(int n, const int64_t *lens) {
    segset s = {.n = n};
    int64_t off = 0, mx = 0;
    for (int i = 0; i < n; i++) mx = lens[i] > mx ? lens[i] : mx;
    for (int i = 0; i < n; i++) s.start[i] = off, s.len[i] = lens[i], s.pos0[i] = mx - lens[i], off += lens[i];
    s.rows = off;
    return s;
}
static vsr_segs vs(const segset *s) { return (vsr_segs){s->n, s->start, s->len, s->pos0, 0, NULL}; }

static uint16_t *bf16_rand(int64_t n, float scale) {
    uint16_t *w = malloc(2 * (size_t)n);
    for (int64_t i = 0; i < n; i++) w[i] = vsr_f32_to_bf16(frand() * scale);
    return w;
}

/* ---- ops ---- */

TEST(op_linear_bf16_f32) {
    static const int64_t shapes[][3] = {{1, 64, 48}, {3, 131, 77}, {17, 256, 200}, {128, 1024, 512}, {5, 5120, 80}};
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        int64_t M = shapes[si][0], K = shapes[si][1], N = shapes[si][2];
        for (int kind = 0; kind < 2; kind++) {
            void *wh = kind == 0 ? (void *)bf16_rand(N * K, 0.05f) : (void *)hrand(N * K, 0.05f);
            vsr_weight_view v = {.kind = kind == 0 ? VSR_WK_BF16 : VSR_WK_F32, .N = N, .K = K, .w = wh, .name = "t.w"};
            vsr_bweight *wg = NULL, *wc = NULL;
            vsr_err e;
            CHECK_OK(GB.ops->weight_upload(GB.ctx, &v, &wg, &e), e);
            CHECK_OK(CB.ops->weight_upload(CB.ctx, &v, &wc, &e), e);
            CHECK(GB.ops->weight_bytes(GB.ctx, wg) == (uint64_t)(N * K * (kind == 0 ? 2 : 4)));
            float *x = hrand(M * K, 1.0f), *y0 = hrand(M * N, 0.5f);
            pair px = both(x, M * K);
            for (int acc = 0; acc < 2; acc++) {
                pair py = both(y0, M * N);
                CHECK_OK(GB.ops->linear(GB.ctx, px.g, M, wg, py.g, acc, &e), e);
                CHECK_OK(CB.ops->linear(CB.ctx, px.c, M, wc, py.c, acc, &e), e);
                char what[96];
                snprintf(what, sizeof what, "linear %s M%lld K%lld N%lld%s", kind ? "f32" : "bf16", (long long)M,
                         (long long)K, (long long)N, acc ? " +=" : "");
                /* bf16: activations rounded to bf16 on the GPU; f32: FP32 both sides */
                cmp(py, what, kind == 0 ? 1e-2 : 1e-4);
                pfree(py);
            }
            pfree(px);
            GB.ops->weight_free(GB.ctx, wg);
            CB.ops->weight_free(CB.ctx, wc);
            free(x), free(y0), free(wh);
        }
    }
}

TEST(op_weight_refusals) {
    vsr_err e;
    vsr_bweight *w = NULL;
    uint8_t bytes[64] = {0};
    vsr_weight_view v = {.kind = VSR_WK_NVFP4, .N = 8, .K = 8, .w = bytes, .name = "l.weight_packed"};
    vsr_status st = GB.ops->weight_upload(GB.ctx, &v, &w, &e);
    CHECK_ERR(st, e, VSR_E_DEVICE, VSR_REFUSAL_NVFP4);
    CHECK(strstr(e.msg, "l.weight_packed") != NULL);
    v.kind = VSR_WK_BF16, v.N = 0;
    st = GB.ops->weight_upload(GB.ctx, &v, &w, &e);
    CHECK_ERR(st, e, VSR_E_INVALID, "l.weight_packed: empty weight [0, 8]");
    v.kind = (vsr_wkind)42, v.N = 8;
    st = GB.ops->weight_upload(GB.ctx, &v, &w, &e);
    CHECK_ERR(st, e, VSR_E_INVALID, "unknown weight kind 42");
}

TEST(op_embed) {
    int64_t V = 1000, D = 96;
    uint16_t *t = bf16_rand(V * D, 1.0f);
    vsr_weight_view v = {.kind = VSR_WK_BF16, .N = V, .K = D, .w = t, .name = "embed_tokens.weight"};
    vsr_bweight *wg, *wc;
    vsr_err e;
    CHECK_OK(GB.ops->weight_upload(GB.ctx, &v, &wg, &e), e);
    CHECK_OK(CB.ops->weight_upload(CB.ctx, &v, &wc, &e), e);
    int32_t ids[7] = {0, 999, 5, 5, 123, 7, 998};
    pair y = both(NULL, 7 * D);
    CHECK_OK(GB.ops->embed(GB.ctx, wg, ids, 7, y.g, &e), e);
    CHECK_OK(CB.ops->embed(CB.ctx, wc, ids, 7, y.c, &e), e);
    cmp(y, "embed 7 ids", 0); /* exact: a widening copy */
    int32_t bad[2] = {3, 1000};
    vsr_status st = GB.ops->embed(GB.ctx, wg, bad, 2, y.g, &e);
    CHECK_ERR(st, e, VSR_E_INVALID, "token id 1000 at position 1 is outside the vocabulary [0, 1000)");
    pfree(y);
    GB.ops->weight_free(GB.ctx, wg);
    CB.ops->weight_free(CB.ctx, wc);
    free(t);
}

TEST(op_norms) {
    /* 64..512: the warp-per-row kernel (300 and 13 rows: a partial last block of 8); 257: the generic one */
    static const int64_t shapes[][2] = {{1, 64}, {7, 257}, {300, 256}, {9, 5120}, {13, 512}, {1000, 128}, {5, 132}};
    vsr_err e;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int64_t M = shapes[si][0], D = shapes[si][1];
        float *x = hrand(M * 2 * D, 3.0f), *w = hrand(D, 0.5f), *z = hrand(M * D, 4.0f);
        pair px = both(x, M * 2 * D), pw = both(w, D), pz = both(z, M * D), py = both(NULL, M * D);
        /* strided read (every other D block), contiguous write */
        CHECK_OK(GB.ops->rmsnorm(GB.ctx, px.g, 2 * D, M, D, pw.g, 1.0f, 1e-6f, py.g, D, &e), e);
        CHECK_OK(CB.ops->rmsnorm(CB.ctx, px.c, 2 * D, M, D, pw.c, 1.0f, 1e-6f, py.c, D, &e), e);
        char what[64];
        snprintf(what, sizeof what, "rmsnorm M%lld D%lld stride 2D", (long long)M, (long long)D);
        cmp(py, what, 1e-4);
        /* in place */
        CHECK_OK(GB.ops->rmsnorm(GB.ctx, px.g, 2 * D, M, D, pw.g, 0.0f, 1e-6f, px.g, 2 * D, &e), e);
        CHECK_OK(CB.ops->rmsnorm(CB.ctx, px.c, 2 * D, M, D, pw.c, 0.0f, 1e-6f, px.c, 2 * D, &e), e);
        snprintf(what, sizeof what, "rmsnorm in place M%lld D%lld", (long long)M, (long long)D);
        cmp(px, what, 1e-4);
        CHECK_OK(GB.ops->rmsnorm_gated(GB.ctx, px.g, pz.g, 1, D, M, D, pw.g, 1e-6f, py.g, &e), e);
        CHECK_OK(CB.ops->rmsnorm_gated(CB.ctx, px.c, pz.c, 1, D, M, D, pw.c, 1e-6f, py.c, &e), e);
        snprintf(what, sizeof what, "rmsnorm_gated M%lld D%lld", (long long)M, (long long)D);
        cmp(py, what, 1e-4);
        pfree(px), pfree(pw), pfree(pz), pfree(py);
        free(x), free(w), free(z);
    }
}

/* conv1d.cu's float4 path (Kc 4, C % 4 == 0): runs of 8 tokens, channel blocks fastest (the
 * default), and under VSR_CUDA_CONV_RUNS=1 the previous run-fastest order with runs of 16 tokens
 * from 2048 rows on; sequences of 1, 2, 3 tokens, lengths off the run size, channel quads past
 * one block of 128; Kc 3 with C % 4 == 0 takes the generic kernel. */
static void conv_fast_cases(void) {
    static const struct { int n; int64_t lens[8]; int64_t C; int Kc; } cs[] = {
        {6, {1, 2, 3, 17, 40, 9}, 516, 4},
        {3, {1000, 1100, 7}, 64, 4},
        {8, {5, 1, 16, 33, 2, 8, 64, 3}, 128, 4},
        {2, {9, 30}, 132, 3},
    };
    for (size_t k = 0; k < sizeof cs / sizeof *cs; k++) {
        vsr_err e;
        segset s = mkseg(cs[k].n, cs[k].lens);
        vsr_segs sg = vs(&s);
        int64_t C = cs[k].C, T = s.rows;
        int Kc = cs[k].Kc;
        float *x = hrand(T * C, 2.0f), *w = hrand(C * Kc, 1.0f);
        pair px = both(x, T * C), pw = both(w, C * Kc), py = both(NULL, T * C);
        CHECK_OK(GB.ops->conv1d_silu(GB.ctx, px.g, C, &sg, C, pw.g, Kc, py.g, &e), e);
        CHECK_OK(CB.ops->conv1d_silu(CB.ctx, px.c, C, &sg, C, pw.c, Kc, py.c, &e), e);
        char what[96];
        snprintf(what, sizeof what, "conv1d_silu %d seqs T%lld C%lld Kc%d", cs[k].n, (long long)T, (long long)C, Kc);
        cmp(py, what, 1e-4);
        float *y1 = down(&GB, py.g, py.n); /* the run-fastest order: the same FMAs, so bit-identical */
        setenv("VSR_CUDA_CONV_RUNS", "1", 1);
        CHECK_OK(GB.ops->conv1d_silu(GB.ctx, px.g, C, &sg, C, pw.g, Kc, py.g, &e), e);
        unsetenv("VSR_CUDA_CONV_RUNS");
        float *y2 = down(&GB, py.g, py.n);
        CHECK_MSG(!memcmp(y1, y2, sizeof(float) * (size_t)py.n), "%s: run-fastest order differs", what);
        free(y1), free(y2);
        pfree(px), pfree(pw), pfree(py);
        free(x), free(w);
    }
}

TEST(op_conv_rope_elementwise) {
    vsr_err e;
    int64_t lens[3] = {5, 1, 33};
    segset s = mkseg(3, lens);
    vsr_segs sg = vs(&s);
    int64_t C = 77, T = s.rows;
    int Kc = 4;
    float *x = hrand(T * C, 2.0f), *w = hrand(C * Kc, 1.0f);
    pair px = both(x, T * C), pw = both(w, C * Kc), py = both(NULL, T * C);
    CHECK_OK(GB.ops->conv1d_silu(GB.ctx, px.g, C, &sg, C, pw.g, Kc, py.g, &e), e);
    CHECK_OK(CB.ops->conv1d_silu(CB.ctx, px.c, C, &sg, C, pw.c, Kc, py.c, &e), e);
    cmp(py, "conv1d_silu 3 seqs (5,1,33) C77 Kc4", 1e-4);
    conv_fast_cases();
    /* rope: H 3 heads of 40 inside rows of stride 130, rot 16 */
    int H = 3, hd = 40, rot = 16, half = 8;
    int64_t xs = 130, maxp = 64;
    float *ct = malloc(sizeof(float) * maxp * half), *st_ = malloc(sizeof(float) * maxp * half);
    for (int64_t p = 0; p < maxp; p++)
        for (int i = 0; i < half; i++) ct[p * half + i] = cosf(p * 0.1f * (i + 1)), st_[p * half + i] = sinf(p * 0.1f * (i + 1));
    float *q = hrand(T * xs, 1.0f);
    pair pq = both(q, T * xs), pc = both(ct, maxp * half), ps = both(st_, maxp * half);
    CHECK_OK(GB.ops->rope(GB.ctx, pq.g, xs, &sg, H, hd, rot, pc.g, ps.g, maxp, &e), e);
    CHECK_OK(CB.ops->rope(CB.ctx, pq.c, xs, &sg, H, hd, rot, pc.c, ps.c, maxp, &e), e);
    cmp(pq, "rope 3 heads of 40, rot 16, row stride 130", 1e-5);
    vsr_status st = GB.ops->rope(GB.ctx, pq.g, xs, &sg, H, hd, rot, pc.g, ps.g, 20, &e);
    CHECK_ERR(st, e, VSR_E_INVALID, "exceed the table of 20 positions");
    /* mul_sigmoid: x [T, H*hd], gate interleaved as in q_proj ([q | gate] per head) */
    float *xx = hrand(T * H * hd, 1.0f), *g = hrand(T * 2 * H * hd, 3.0f);
    pair pxx = both(xx, T * H * hd), pg = both(g, T * 2 * H * hd);
    CHECK_OK(GB.ops->mul_sigmoid(GB.ctx, pxx.g, T, H, hd, (float *)pg.g + hd, 2LL * H * hd, 2LL * hd, &e), e);
    CHECK_OK(CB.ops->mul_sigmoid(CB.ctx, pxx.c, T, H, hd, (float *)pg.c + hd, 2LL * H * hd, 2LL * hd, &e), e);
    cmp(pxx, "mul_sigmoid interleaved gate", 1e-5);
    /* swiglu in place into g, add */
    int64_t n = 1001;
    float *a = hrand(n, 4.0f), *b = hrand(n, 1.0f);
    pair pa = both(a, n), pb = both(b, n);
    CHECK_OK(GB.ops->swiglu(GB.ctx, pa.g, pb.g, 143, 7, 143, pa.g, &e), e);
    CHECK_OK(CB.ops->swiglu(CB.ctx, pa.c, pb.c, 143, 7, 143, pa.c, &e), e);
    cmp(pa, "swiglu 7x143 in place", 1e-5);
    CHECK_OK(GB.ops->add(GB.ctx, pa.g, pb.g, n, &e), e);
    CHECK_OK(CB.ops->add(CB.ctx, pa.c, pb.c, n, &e), e);
    cmp(pa, "add 1001", 1e-6);
    int64_t rows[4] = {38, 0, 5, 5};
    pair pgr = both(NULL, 4 * C);
    CHECK_OK(GB.ops->gather_rows(GB.ctx, px.g, rows, 4, C, pgr.g, &e), e);
    CHECK_OK(CB.ops->gather_rows(CB.ctx, px.c, rows, 4, C, pgr.c, &e), e);
    cmp(pgr, "gather_rows 4 of 39", 0);
    pfree(px), pfree(pw), pfree(py), pfree(pq), pfree(pc), pfree(ps), pfree(pxx), pfree(pg), pfree(pa), pfree(pb);
    pfree(pgr);
    free(x), free(w), free(ct), free(st_), free(q), free(xx), free(g), free(a), free(b);
}

static int dn_pad = 3; /* qkv row padding: 3 = odd stride (4-byte copies); 0 = 16-byte copies */
static int dn_repeat = 0; /* 1: also check that a second GPU run is bit-identical */
static int dn_vs_v5 = 0;  /* 1: also run v5 (VSR_CUDA_DN_V5=1) on the same inputs and compare it with the default */
static int dn_vs_v7 = 0;  /* 1: also run v7 (VSR_CUDA_DN_V7=1) on the same inputs: against the CPU and the default */
static void deltanet_case(int nseq, const int64_t *lens, int Hk, int Hv, int dk, int dv, double tol) {
    vsr_err e;
    segset s = mkseg(nseq, lens);
    vsr_segs sg = vs(&s);
    int64_t T = s.rows, Kd = (int64_t)Hk * dk, stride = 2 * Kd + (int64_t)Hv * dv + dn_pad; /* padded stride */
    float *qkv = hrand(T * stride, 1.0f), *b = hrand(T * Hv, 3.0f), *a = hrand(T * Hv, 3.0f);
    float *Al = hrand(Hv, 1.0f), *dt = hrand(Hv, 1.0f);
    pair pq = both(qkv, T * stride), pb = both(b, T * Hv), pa = both(a, T * Hv), pA = both(Al, Hv), pd = both(dt, Hv);
    pair pst = both(NULL, (int64_t)nseq * Hv * dk * dv), po = both(NULL, T * Hv * dv);
    CHECK_OK(GB.ops->deltanet(GB.ctx, pq.g, stride, pb.g, pa.g, Hv, pA.g, pd.g, &sg, Hk, Hv, dk, dv, pst.g, po.g, &e), e);
    CHECK_OK(CB.ops->deltanet(CB.ctx, pq.c, stride, pb.c, pa.c, Hv, pA.c, pd.c, &sg, Hk, Hv, dk, dv, pst.c, po.c, &e), e);
    char what[96];
    snprintf(what, sizeof what, "deltanet %d seqs T%lld Hk%d Hv%d dk%d dv%d", nseq, (long long)T, Hk, Hv, dk, dv);
    cmp(po, what, tol);
    if (dn_repeat) { /* run to run: bit-identical (no float atomics in any path) */
        float *o1 = down(&GB, po.g, po.n);
        CHECK_OK(GB.ops->deltanet(GB.ctx, pq.g, stride, pb.g, pa.g, Hv, pA.g, pd.g, &sg, Hk, Hv, dk, dv, pst.g, po.g, &e), e);
        float *o2 = down(&GB, po.g, po.n);
        CHECK_MSG(!memcmp(o1, o2, sizeof(float) * (size_t)po.n), "%s: second run differs", what);
        free(o1), free(o2);
    }
    if (dn_vs_v5) { /* v6 (default) against v5: the same math, but q and k are normalised by
                     * v6's intra kernel with another summation order, so the TF32 roundings of
                     * q, k (and all that follows) can move by one step: a limit, not memcmp */
        float *o6 = down(&GB, po.g, po.n);
        setenv("VSR_CUDA_DN_V5", "1", 1);
        CHECK_OK(GB.ops->deltanet(GB.ctx, pq.g, stride, pb.g, pa.g, Hv, pA.g, pd.g, &sg, Hk, Hv, dk, dv, pst.g, po.g, &e), e);
        unsetenv("VSR_CUDA_DN_V5");
        float *o5 = down(&GB, po.g, po.n);
        const double r = test_nerr(o6, o5, po.n);
        const int same = !memcmp(o6, o5, sizeof(float) * (size_t)po.n);
        /* FNV-1a of the default's output bits: compared across builds to show a rewrite bit-identical */
        uint64_t hsh = 1469598103934665603ull;
        for (size_t i = 0; i < sizeof(float) * (size_t)po.n; i++) hsh = (hsh ^ ((const uint8_t *)o6)[i]) * 1099511628211ull;
        printf("  %-48s v6 vs v5 err %.3g (limit 1e-3)%s, v6 output hash %016llx\n", what, r, same ? ", bit-identical" : "",
               (unsigned long long)hsh);
        CHECK_MSG(r <= 1e-3, "%s: v6 and v5 differ by %.3g", what, r);
        free(o6), free(o5);
    }
    if (dn_vs_v7) { /* v7 (wgmma state kernel) against the CPU (tol) and v6: the same roundings of every
                     * operand, only the tensor cores' order of the products differs; and run to run */
        float *o6 = down(&GB, po.g, po.n);
        setenv("VSR_CUDA_DN_V7", "1", 1);
        CHECK_OK(GB.ops->deltanet(GB.ctx, pq.g, stride, pb.g, pa.g, Hv, pA.g, pd.g, &sg, Hk, Hv, dk, dv, pst.g, po.g, &e), e);
        char w7[112];
        snprintf(w7, sizeof w7, "%s (v7)", what);
        cmp(po, w7, tol);
        float *o7 = down(&GB, po.g, po.n);
        CHECK_OK(GB.ops->deltanet(GB.ctx, pq.g, stride, pb.g, pa.g, Hv, pA.g, pd.g, &sg, Hk, Hv, dk, dv, pst.g, po.g, &e), e);
        unsetenv("VSR_CUDA_DN_V7");
        float *o7b = down(&GB, po.g, po.n);
        CHECK_MSG(!memcmp(o7, o7b, sizeof(float) * (size_t)po.n), "%s: second v7 run differs", what);
        const double r = test_nerr(o7, o6, po.n);
        printf("  %-48s v7 vs v6 err %.3g (limit 1e-3)%s\n", what, r,
               !memcmp(o7, o6, sizeof(float) * (size_t)po.n) ? ", bit-identical" : "");
        CHECK_MSG(r <= 1e-3, "%s: v7 and v6 differ by %.3g", what, r);
        free(o6), free(o7), free(o7b);
    }
    pfree(pq), pfree(pb), pfree(pa), pfree(pA), pfree(pd), pfree(pst), pfree(po);
    free(qkv), free(b), free(a), free(Al), free(dt);
}

/* The chunked kernel (deltanet.cu: batches whose longest sequence has >= 16 tokens, dk, dv <=
 * 128) multiplies on tensor cores in TF32 (10-bit mantissa, 2^-11 relative rounding of every
 * operand): a numpy emulation of it (TF32 rounding of every matmul input) gives a normalised
 * error of 6e-4..7e-4 on these very cases; the limit leaves 4x of that. A wrong chunk boundary,
 * decay or solve gives errors of order 1e-1..1. The recurrent scan (shorter batches) stays FP32. */
#define DN_CHUNK_TOL 3e-3
TEST(op_deltanet) {
    /* recurrent scan (longest sequence < 16 tokens): FP32, 1e-4 */
    deltanet_case(1, (int64_t[]){1}, 1, 1, 16, 16, 1e-4);
    deltanet_case(3, (int64_t[]){7, 1, 12}, 2, 6, 128, 128, 1e-4);
    deltanet_case(2, (int64_t[]){15, 3}, 1, 2, 24, 40, 1e-4); /* dk padded in registers */
    /* chunked: partial chunks, chunk-sized and 1-token sequences in one batch, padded dk, dv slices */
    deltanet_case(3, (int64_t[]){7, 1, 40}, 2, 4, 32, 32, DN_CHUNK_TOL);
    deltanet_case(2, (int64_t[]){65, 9}, 2, 6, 64, 48, DN_CHUNK_TOL); /* dv not a multiple of 32 */
    deltanet_case(2, (int64_t[]){130, 64}, 2, 6, 128, 128, DN_CHUNK_TOL);
    deltanet_case(1, (int64_t[]){20}, 1, 2, 24, 40, DN_CHUNK_TOL); /* dk not a multiple of 8 */
    deltanet_case(5, (int64_t[]){1, 63, 64, 65, 200}, 2, 6, 128, 128, DN_CHUNK_TOL);
    deltanet_case(2, (int64_t[]){129, 16}, 1, 2, 128, 96, DN_CHUNK_TOL); /* second dv slice partial */
    deltanet_case(1, (int64_t[]){70}, 1, 1, 128, 160, 1e-4); /* dv > 128: recurrent scan */
    /* aligned rows (16-byte copies of q, k, v in the intra-chunk kernel), 27B head ratio 1:3 */
    dn_pad = 0;
    deltanet_case(3, (int64_t[]){128, 128, 128}, 2, 6, 128, 128, DN_CHUNK_TOL);
    deltanet_case(5, (int64_t[]){1, 63, 64, 65, 200}, 2, 6, 128, 128, DN_CHUNK_TOL);
    deltanet_case(2, (int64_t[]){33, 17}, 1, 2, 24, 40, DN_CHUNK_TOL); /* dk, dv not multiples of 8 */
    deltanet_case(8, (int64_t[]){1, 2, 3, 17, 64, 70, 129, 9}, 1, 3, 64, 96, DN_CHUNK_TOL); /* many short */
    /* the default (v6) run twice and against v5, its intra kernel both one value head per block
     * (VSR_CUDA_DN6_GROUP=0, what these small grids pick) and all of a key head's value heads
     * per block (=1, what 8x512 picks); then v5 itself (VSR_CUDA_DN_V5: the previous default kept
     * for A/B). Edge paths: the next chunk's gc/beta copied while the
     * current runs (partial next chunk: 300 = 4 x 64 + 44; 1-chunk sequences copy nothing ahead),
     * both k/T buffer parities (5 chunks), 4-byte copies (dn_pad 3: v6's intra kernel reads q
     * by scalar loads) and 16-byte copies, dk not a multiple of 8 (q, k rows zero past dk) */
    dn_repeat = 1, dn_vs_v5 = 1;
    for (int grp = 0; grp < 2; grp++) {
        setenv("VSR_CUDA_DN6_GROUP", grp ? "1" : "0", 1);
        printf("  (v6 intra: %s)\n", grp ? "all value heads of a key head per block" : "one value head per block");
        dn_pad = 0;
        deltanet_case(3, (int64_t[]){300, 64, 1}, 2, 6, 128, 128, DN_CHUNK_TOL);
        deltanet_case(3, (int64_t[]){128, 128, 128}, 16, 48, 128, 128, DN_CHUNK_TOL); /* the 27B layer */
        deltanet_case(8, (int64_t[]){1, 2, 3, 17, 64, 70, 129, 9}, 1, 3, 64, 96, DN_CHUNK_TOL);
        dn_pad = 3;
        deltanet_case(5, (int64_t[]){1, 63, 64, 65, 200}, 2, 6, 128, 128, DN_CHUNK_TOL);
        deltanet_case(2, (int64_t[]){33, 130}, 1, 2, 24, 40, DN_CHUNK_TOL); /* dk, dv not multiples of 8 */
        deltanet_case(2, (int64_t[]){129, 16}, 1, 2, 128, 96, DN_CHUNK_TOL); /* second dv slice partial */
    }
    unsetenv("VSR_CUDA_DN6_GROUP");
    dn_pad = 0;
    dn_repeat = 0, dn_vs_v5 = 0;
    setenv("VSR_CUDA_DN_V5", "1", 1);
    deltanet_case(5, (int64_t[]){1, 63, 64, 65, 200}, 2, 6, 128, 128, DN_CHUNK_TOL);
    deltanet_case(3, (int64_t[]){128, 128, 128}, 16, 48, 128, 128, DN_CHUNK_TOL); /* the 27B layer */
    dn_pad = 3;
    deltanet_case(2, (int64_t[]){33, 130}, 1, 2, 24, 40, DN_CHUNK_TOL);
    deltanet_case(2, (int64_t[]){129, 16}, 1, 2, 128, 96, DN_CHUNK_TOL);
    dn_pad = 0;
    unsetenv("VSR_CUDA_DN_V5");
    /* v7 (VSR_CUDA_DN_V7=1: v6's intra kernel, the state kernel on wgmma; compute capability 9.0 only,
     * elsewhere v6 runs in its place and the comparison prints bit-identical): the 27B layer at 3 x 128
     * and 8 x 512, partial next chunks and 1-chunk sequences (300 = 4 x 64 + 44), both k/T buffer
     * parities, many short and odd lengths, a partial second dv slice (dv 96), dv 48, dk 24, 32, 64 and
     * 20 (not a multiple of 8: zero-padded like every dk < 128), 16-byte and 4-byte copies of V */
    dn_vs_v7 = 1;
    if (cuda_dev.cc_major != 9 || cuda_dev.cc_minor != 0) printf("  (v7 needs compute capability 9.0: v6 runs)\n");
    deltanet_case(3, (int64_t[]){128, 128, 128}, 16, 48, 128, 128, DN_CHUNK_TOL); /* the 27B layer */
    deltanet_case(8, (int64_t[]){512, 512, 512, 512, 512, 512, 512, 512}, 16, 48, 128, 128, DN_CHUNK_TOL);
    deltanet_case(3, (int64_t[]){300, 64, 1}, 2, 6, 128, 128, DN_CHUNK_TOL);
    deltanet_case(8, (int64_t[]){1, 2, 3, 17, 64, 70, 129, 9}, 1, 3, 64, 96, DN_CHUNK_TOL);
    dn_pad = 3;
    deltanet_case(5, (int64_t[]){1, 63, 64, 65, 200}, 2, 6, 128, 128, DN_CHUNK_TOL);
    deltanet_case(2, (int64_t[]){33, 130}, 1, 2, 24, 40, DN_CHUNK_TOL);
    deltanet_case(2, (int64_t[]){129, 16}, 1, 2, 128, 96, DN_CHUNK_TOL); /* second dv slice partial */
    deltanet_case(3, (int64_t[]){7, 1, 40}, 2, 4, 32, 32, DN_CHUNK_TOL);
    deltanet_case(2, (int64_t[]){65, 9}, 2, 6, 64, 48, DN_CHUNK_TOL);
    deltanet_case(2, (int64_t[]){70, 33}, 1, 2, 20, 40, DN_CHUNK_TOL); /* dk not a multiple of 8 */
    dn_vs_v7 = 0;
    dn_pad = 0;
    dn_pad = 3;
    vsr_err e;
    int64_t l1 = 1;
    segset s = mkseg(1, &l1);
    vsr_segs sg = vs(&s);
    vsr_status st = GB.ops->deltanet(GB.ctx, NULL, 0, NULL, NULL, 1, NULL, NULL, &sg, 1, 1, 256, 128, NULL, NULL, &e);
    CHECK_ERR(st, e, VSR_E_UNSUPPORTED, "key head dim up to 128");
}

/* Head dims 32/64/128/256 run on the BF16 tensor-core kernels (attention.cu): q, k, v and the
 * probabilities are rounded to BF16 (2^-9 relative each) with FP32 accumulation, so they get the
 * BF16 linears' budget, 1e-2 (measured on the H200: bench/NOTES.md "### Tensor-core attention").
 * Other head dims stay on the FP32 kernel and its 1e-4. qpad > 0 makes q's row stride odd
 * (the kernels' unvectorised Q load). Head dims 64/128/256 are checked on every kernel version
 * (VSR_CUDA_ATTN_VER: 2 and 3 are the wgmma kernels where the device is sm_90, each also with
 * VSR_CUDA_ATTN_QBATCH=1; 1 is mma.sync), each against the CPU op; the output is poisoned (NaN)
 * before each, so a row left unwritten fails. */
static void attn_case_p(int nseq, const int64_t *lens, int H, int Hkv, int d, int causal, int qpad) {
    vsr_err e;
    segset s = mkseg(nseq, lens);
    vsr_segs sg = vs(&s);
    int64_t T = s.rows, qs = 2LL * H * d + qpad; /* q inside a wider row, as in q_proj's output */
    float *q = hrand(T * qs, 1.0f), *k = hrand(T * Hkv * d, 1.0f), *v = hrand(T * Hkv * d, 1.0f);
    pair pq = both(q, T * qs), pk = both(k, T * Hkv * d), pv = both(v, T * Hkv * d), po = both(NULL, T * H * d);
    float scale = 1.0f / sqrtf((float)d) * 2.0f; /* sharper than 1/sqrt(d): exercises the running max */
    CHECK_OK(CB.ops->attention(CB.ctx, pq.c, qs, pk.c, pv.c, &sg, H, Hkv, d, scale, causal, po.c, &e), e);
    int tc = d == 32 || d == 64 || d == 128 || d == 256, wg = d == 64 || d == 128 || d == 256;
    float *nan = malloc(sizeof(float) * (size_t)(T * H * d));
    for (int64_t i = 0; i < T * H * d; i++) nan[i] = NAN;
    /* version, Q load batched (VSR_CUDA_ATTN_QBATCH), label */
    static const char *vers[][3] = {{"2", "0", "v2"}, {"3", "0", "v3"}, {"2", "1", "v2q"}, {"3", "1", "v3q"},
                                    {"1", "0", "v1"}};
    for (int vi = 0; vi < (wg ? 5 : 1); vi++) {
        setenv("VSR_CUDA_ATTN_VER", vers[vi][0], 1);
        setenv("VSR_CUDA_ATTN_QBATCH", vers[vi][1], 1);
        CHECK_OK(GB.ops->buf_set(GB.ctx, po.g, nan, sizeof(float) * (size_t)(T * H * d), &e), e);
        CHECK_OK(GB.ops->attention(GB.ctx, pq.g, qs, pk.g, pv.g, &sg, H, Hkv, d, scale, causal, po.g, &e), e);
        char what[112];
        snprintf(what, sizeof what, "attention %s %d seqs T%lld H%d/%d d%d%s%s%s%s", causal ? "causal" : "full", nseq,
                 (long long)T, H, Hkv, d, tc ? " bf16-tc" : " fp32", qpad ? " q-stride-odd" : "", wg ? " " : "",
                 wg ? vers[vi][2] : "");
        cmp(po, what, tc ? 1e-2 : 1e-4);
    }
    unsetenv("VSR_CUDA_ATTN_VER");
    unsetenv("VSR_CUDA_ATTN_QBATCH");
    free(nan);
    pfree(pq), pfree(pk), pfree(pv), pfree(po);
    free(q), free(k), free(v);
}
static void attn_case(int nseq, const int64_t *lens, int H, int Hkv, int d, int causal) {
    attn_case_p(nseq, lens, H, Hkv, d, causal, 0);
}

TEST(op_attention) {
    for (int causal = 0; causal < 2; causal++) {
        attn_case(1, (int64_t[]){1}, 1, 1, 32, causal);
        attn_case(3, (int64_t[]){5, 1, 70}, 4, 2, 32, causal);
        attn_case(2, (int64_t[]){33, 100}, 6, 2, 256, causal);
        attn_case(2, (int64_t[]){17, 9}, 3, 3, 40, causal); /* odd head dim */
        attn_case(1, (int64_t[]){300}, 8, 1, 64, causal);
        attn_case(3, (int64_t[]){130, 7, 65}, 12, 2, 128, causal); /* GQA 6, rows not a multiple of 64 */
        attn_case(2, (int64_t[]){257, 130}, 24, 4, 256, causal);   /* the 27B shape: 24/4 heads of 256 */
        attn_case_p(2, (int64_t[]){31, 40}, 6, 1, 64, causal, 1);
        /* 9 key tiles of 64 (the last 8 keys), 17 blocks of 128 rows, the last with one live
         * warpgroup: the wgmma kernels' pipelines past their first tiles */
        attn_case(1, (int64_t[]){520}, 8, 2, 256, causal);
    }
    vsr_err e;
    int64_t l1 = 1;
    segset s = mkseg(1, &l1);
    vsr_segs sg = vs(&s);
    vsr_status st = GB.ops->attention(GB.ctx, NULL, 0, NULL, NULL, &sg, 4, 3, 32, 1.0f, 1, NULL, &e);
    CHECK_ERR(st, e, VSR_E_UNSUPPORTED, "4 query heads over 3 kv heads");
    st = GB.ops->attention(GB.ctx, NULL, 0, NULL, NULL, &sg, 4, 2, 512, 1.0f, 1, NULL, &e);
    CHECK_ERR(st, e, VSR_E_UNSUPPORTED, "head dim 512 (at most 256)");
}

TEST(op_readout) {
    int64_t M = 3, D = 200, N = 255;
    vsr_err e;
    for (int kind = 0; kind < 2; kind++) {
        void *wh = kind == 0 ? (void *)hrand(N * D, 0.1f) : (void *)bf16_rand(N * D, 0.1f);
        vsr_weight_view v = {.kind = kind == 0 ? VSR_WK_F32 : VSR_WK_BF16, .N = N, .K = D, .w = wh, .name = "readout"};
        vsr_bweight *wg, *wc;
        CHECK_OK(GB.ops->weight_upload(GB.ctx, &v, &wg, &e), e);
        CHECK_OK(CB.ops->weight_upload(CB.ctx, &v, &wc, &e), e);
        float *h = hrand(M * D, 2.0f);
        pair ph = both(h, M * D), pl = both(NULL, M * N);
        CHECK_OK(GB.ops->readout(GB.ctx, ph.g, M, wg, pl.g, &e), e);
        CHECK_OK(CB.ops->readout(CB.ctx, ph.c, M, wc, pl.c, &e), e);
        /* f32: FP32 both sides; bf16: both round h and the result to bf16: at most one bf16 ulp
         * apart where the FP32 sums straddle a rounding boundary */
        cmp(pl, kind == 0 ? "readout f32 3x200 . 255" : "readout bf16 3x200 . 255", kind == 0 ? 1e-5 : 8e-3);
        pfree(ph), pfree(pl);
        GB.ops->weight_free(GB.ctx, wg);
        CB.ops->weight_free(CB.ctx, wc);
        free(h), free(wh);
    }
}

/* ---- end to end: fixture packages through vsr_model_forward_last ---- */

static void softmax(const float *l, int n, double *p) {
    double mx = -INFINITY, s = 0;
    for (int i = 0; i < n; i++) mx = l[i] > mx ? l[i] : mx;
    for (int i = 0; i < n; i++) s += p[i] = exp(l[i] - mx);
    for (int i = 0; i < n; i++) p[i] /= s;
}

static uint64_t e2e_rng;
static float e2e_rand(void) { /* uniform [-1, 1), seeded per package (e2e) */
    e2e_rng ^= e2e_rng << 13, e2e_rng ^= e2e_rng >> 7, e2e_rng ^= e2e_rng << 17;
    return (float)((e2e_rng >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

static void e2e(const char *scheme, const char *mode) {
    e2e_rng = 0x2545f4914f6cdd1dull;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/pkg-%s-%s", test_tmpdir(), scheme, mode ? mode : "default");
    vsr_fixture_opts o = {.family = "decision3", .size = "tiny", .scheme = scheme, .seed = 7, .attention_mode = mode,
                          .actorder = !strcmp(scheme, "w4a16-gptq")};
    vsr_err e;
    vsr_status st = vsr_fixture_write(dir, &o, NULL, &e);
    CHECK_OK(st, e);
    if (st) return;
    vsr_package *p = NULL;
    if ((st = vsr_package_open(dir, NULL, NULL, &p, &e)) || (st = vsr_package_map(p, &e))) {
        CHECK_OK(st, e);
        vsr_package_close(p);
        return;
    }
    vsr_model *mc = NULL, *mg = NULL;
    vsr_device cpu = {.kind = VSR_DEV_CPU};
    vsr_model_opts oc = {.device = &cpu, .threads = 2}, og = {.device = &cuda_dev};
    CHECK_OK(st = vsr_model_load(p, &oc, &mc, &e), e);
    vsr_status sg = vsr_model_load(p, &og, &mg, &e);
    if (sg && strstr(e.msg, "not implemented in this build")) {
        printf("  e2e %s: not run on CUDA: %s\n", scheme, e.msg);
        vsr_model_free(mc);
        vsr_package_close(p);
        return;
    }
    CHECK_OK(sg, e);
    if (st || sg) goto out;
    {
        CHECK(vsr_model_memory_bytes(mg) == vsr_model_memory_bytes(mc) || strcmp(scheme, "bf16"));
        enum { R = 5 };
        static const int lens[R] = {1, 9, 40, 23, 64};
        int32_t *ids[R];
        for (int r = 0; r < R; r++) {
            ids[r] = malloc(sizeof(int32_t) * (size_t)lens[r]);
            /* ids from their own stream, so op tests added above do not change these inputs */
            for (int i = 0; i < lens[r]; i++) ids[r][i] = (int32_t)((e2e_rand() + 1.0f) * 70000.0f) % 151000;
        }
        int64_t D = vsr_model_hidden_size(mc);
        float *hc = malloc(sizeof(float) * R * D), *hg = malloc(sizeof(float) * R * D), *hg2 = malloc(sizeof(float) * R * D);
        float lc[R * 255], lg[R * 255], lg2[R * 255];
        CHECK_OK(vsr_model_forward_last(mc, R, (const int32_t *const *)ids, lens, hc, lc, &e), e);
        CHECK_OK(vsr_model_forward_last(mg, R, (const int32_t *const *)ids, lens, hg, lg, &e), e);
        CHECK_OK(vsr_model_forward_last(mg, R, (const int32_t *const *)ids, lens, hg2, lg2, &e), e);
        double herr = test_nerr(hg, hc, R * D), maxdp = 0;
        for (int r = 0; r < R; r++) {
            double pc[255], pg[255];
            softmax(lc + r * 255, 255, pc);
            softmax(lg + r * 255, 255, pg);
            for (int i = 0; i < 255; i++) maxdp = fmax(maxdp, fabs(pc[i] - pg[i]));
        }
        printf("  e2e tiny %s %s: hidden normalised error %.3g, max |p_gpu - p_cpu| %.3g, logits err %.3g\n", scheme,
               mode ? mode : "noncausal", herr, maxdp, test_nerr(lg, lc, R * 255));
        CHECK_MSG(maxdp <= 0.02, "answers differ by %.3g (limit 0.02)", maxdp);
        /* The answers are held to the 0.02. The hidden states (max |diff| / max |ref| over 5 x
         * 64 values, after BF16 activations in every linear and BF16 q, k, v, p in attention) measured
         * 0.0046 to 0.0215 over the inputs of five H200 runs (bench/records: the ids then came from
         * the shared stream, so every op test added above changed them); the limit leaves that spread
         * room without hiding a real fault (an FP32-vs-BF16 slip or a wrong kernel is 10x larger). */
        CHECK_MSG(herr <= 3e-2, "hidden states normalised error %.3g (limit 3e-2)", herr);
        CHECK_MSG(!memcmp(hg, hg2, sizeof(float) * R * D) && !memcmp(lg, lg2, sizeof lg), "CUDA runs differ run to run");
        for (int r = 0; r < R; r++) free(ids[r]);
        free(hc), free(hg), free(hg2);
    }
out:
    vsr_model_free(mg);
    vsr_model_free(mc);
    vsr_package_close(p);
}

TEST(e2e_tiny_bf16) {
    e2e("bf16", NULL);
    e2e("bf16", "causal");
}
TEST(e2e_tiny_int4) {
    e2e("w4a16-gptq", NULL);
    e2e("w4a16-awq", NULL);
}

#endif

int main(void) {
    RUN(for_device_cpu_and_refusals);
#ifdef VSR_HAVE_CUDA
    char why[VSR_ERR_MSG_MAX + 600];
    if (!test_find_cuda(&cuda_dev, &GB, why, sizeof why)) {
        printf("SKIP: no CUDA device (%s)\n", why);
        return test_summary() ? 1 : 77; /* 77: skipped (tests/run.sh) */
    }
    vsr_err e;
    if (vsr_backend_cpu_new(2, &CB, &e)) {
        fprintf(stderr, "cpu backend: %s\n", e.msg);
        return 1;
    }
    printf("CUDA device: %s (cc %d.%d)\n", cuda_dev.name, cuda_dev.cc_major, cuda_dev.cc_minor);
    RUN(op_weight_refusals);
    RUN(op_linear_bf16_f32);
    RUN(op_embed);
    RUN(op_norms);
    RUN(op_conv_rope_elementwise);
    RUN(op_deltanet);
    RUN(op_attention);
    RUN(op_readout);
    RUN(e2e_tiny_bf16);
    RUN(e2e_tiny_int4);
    vsr_backend_destroy(&GB);
    vsr_backend_destroy(&CB);
#else
    printf("SKIP: no CUDA device (this build has no CUDA: nvcc was not found at build time)\n");
    return test_summary() ? 1 : 77; /* 77: skipped (tests/run.sh) */
#endif
    return test_summary();
}
