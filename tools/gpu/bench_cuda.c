/* tools/gpu/bench_cuda.c: per-op timings of the CUDA backend on d3-27B-shaped layer
 * dimensions (hidden 5120, 24/4 heads of 256, DeltaNet 16 key / 48 value heads of 128,
 * MLP 17408), one layer of each kind, at 3x128 and 8x512 tokens; then, when a package
 * folder is given, the whole forward of that package on the GPU.
 *   bench_cuda [package_dir]
 *   env: VSR_AUTOTUNE_DIR=DIR (the whole forward with --autotune-cache DIR),
 *        VSR_BENCH_E2E_ONLY=1 (skip the per-op tables), VSR_BENCH_PROFILE=1 (after the timed
 *        forwards, one forward per shape with every op timed: a table per shape)
 * Weights are random BF16 (timing does not depend on values). Each op runs REPS times
 * back to back after a warm-up; one synchronising copy closes the batch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "backend/backend_cuda.h"
#include "vsr/device.h"
#include "vsr/dtype.h"
#include "vsr/model.h"
#include "vsr/package.h"

#define REPS 20
extern int vsr_cuda_graphs_off, vsr_cuda_profile_on; /* backend.cu switches */
void vsr_cuda_profile_report(void);
int cuda_swiglu_set_1p(int on), cuda_gated_set_tok(int on); /* activations.cu, norms.cu A/B switches */
static vsr_backend B;
static vsr_err E;
static void *sync_buf;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}
static void die(const char *what) {
    fprintf(stderr, "%s: %s\n", what, E.msg);
    exit(1);
}
static void sync_dev(void) {
    float f;
    if (B.ops->buf_get(B.ctx, &f, sync_buf, 4, &E)) die("sync");
}
/* device buffers hold finite random values in [-1, 1) (uninitialised memory may hold NaN or denormals, which
 * send divisions down their slow path: the FP8 twins' timings were several times the real ones) */
static float *host_fill;
static int64_t host_fill_n;
static float *buf(int64_t n) {
    void *p;
    if (B.ops->buf_alloc(B.ctx, sizeof(float) * (size_t)n, &p, &E)) die("alloc");
    if (n > host_fill_n) {
        free(host_fill);
        host_fill = malloc(sizeof(float) * (size_t)n);
        if (!host_fill) die("host fill");
        uint64_t s = 0x9E3779B97F4A7C15ull;
        for (int64_t i = 0; i < n; i++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            host_fill[i] = (float)(s >> 40) / 8388608.0f - 1.0f;
        }
        host_fill_n = n;
    }
    if (B.ops->buf_set(B.ctx, p, host_fill, sizeof(float) * (size_t)n, &E)) die("fill");
    return p;
}
static uint16_t *host_w;
static vsr_bweight *wt(int64_t N, int64_t K, const char *name) {
    vsr_weight_view v = {.kind = VSR_WK_BF16, .N = N, .K = K, .w = host_w, .name = name};
    vsr_bweight *w;
    if (B.ops->weight_upload(B.ctx, &v, &w, &E)) die(name);
    return w;
}

typedef struct row { const char *op; double us, bytes, flops; } row;
static row rows[64];
static int nrows;
static double total_us;

/* VSR_BENCH_ONLY=TEXT: only the per-op rows whose name holds TEXT (e.g. one kernel under ncu) */
static const char *only_rows;
#define TIME(name, bytes_, flops_, call)                                                           \
    do {                                                                                           \
        if (only_rows && !strstr(name, only_rows)) break;                                          \
        if (call) die(name);                                                                       \
        sync_dev();                                                                                \
        double t0_ = now();                                                                        \
        for (int i_ = 0; i_ < REPS; i_++)                                                          \
            if (call) die(name);                                                                   \
        sync_dev();                                                                                \
        double us_ = (now() - t0_) / REPS * 1e6;                                                   \
        rows[nrows++] = (row){name, us_, (double)(bytes_), (double)(flops_)};                      \
        total_us += us_;                                                                           \
    } while (0)

/* the last row timed is an A/B alternative: out of the layer totals (meaningless under VSR_BENCH_ONLY) */
static void uncount(void) {
    if (!only_rows && nrows) total_us -= rows[nrows - 1].us;
}

static void run_shape(int R, int L) {
    const int64_t D = 5120, I = 17408, H = 24, Hkv = 4, hd = 256, Hk = 16, Hv = 48, dk = 128, dv = 128, Kc = 4;
    const int64_t Kd = Hk * dk, Vd = Hv * dv, C = 2 * Kd + Vd, T = (int64_t)R * L;
    int64_t start[8], len[8], pos0[8];
    for (int r = 0; r < R; r++) start[r] = (int64_t)r * L, len[r] = L, pos0[r] = 0;
    vsr_segs sg = {R, start, len, pos0, 0, NULL};
    float *x = buf(T * D), *h = buf(T * D), *t0 = buf(T * 2 * H * hd), *t1 = buf(T * C), *t2 = buf(T * Vd),
          *t3 = buf(T * Vd), *t4 = buf(T * H * hd), *tb = buf(T * Hv), *ta = buf(T * Hv), *mg = buf(T * I),
          *mu = buf(T * I), *st = buf((int64_t)R * Hv * dk * dv), *so = buf(T * I), *go = buf(T * Vd);
    float *nw = buf(D), *cw = buf(C * Kc), *al = buf(Hv), *dt = buf(Hv), *cs = buf(8192 * 32), *sn = buf(8192 * 32);
    vsr_bweight *Wqkv = wt(C, D, "qkv"), *Wz = wt(Vd, D, "z"), *Wb = wt(Hv, D, "b"), *Wa = wt(Hv, D, "a"),
                *Wout = wt(D, Vd, "out"), *Wq = wt(2 * H * hd, D, "q"), *Wk = wt(Hkv * hd, D, "k"),
                *Wv = wt(Hkv * hd, D, "v"), *Wo = wt(D, H * hd, "o"), *Wg = wt(I, D, "gate"), *Wu = wt(I, D, "up"),
                *Wd = wt(D, I, "down");
    const vsr_backend_ops *o = B.ops;
    void *c = B.ctx;
    nrows = 0, total_us = 0;
#define LIN(nm, W, N, K, X, Y, acc) TIME(nm, 2.0 * (N) * (K) + 4.0 * T * ((K) + (N)), 2.0 * T * (N) * (K), o->linear(c, X, T, W, Y, acc, &E))
    /* DeltaNet layer */
    TIME("rmsnorm (input)", 8.0 * T * D, 0, o->rmsnorm(c, x, D, T, D, nw, 1.0f, 1e-6f, h, D, &E));
    LIN("linear in_proj_qkv", Wqkv, C, D, h, t0, 0);
    TIME("conv1d_silu", 8.0 * T * C, 2.0 * T * C * Kc, o->conv1d_silu(c, t0, C, &sg, C, cw, (int)Kc, t1, &E));
    LIN("linear in_proj_z", Wz, Vd, D, h, t2, 0);
    LIN("linear in_proj_b", Wb, Hv, D, h, tb, 0);
    LIN("linear in_proj_a", Wa, Hv, D, h, ta, 0);
    TIME("deltanet", 4.0 * T * (C + Vd), 6.0 * T * Hv * dk * dv,
         o->deltanet(c, t1, C, tb, ta, Hv, al, dt, &sg, (int)Hk, (int)Hv, (int)dk, (int)dv, st, t3, &E));
    /* the previous default (DeltaNet v5) on the same inputs, for A/B in one process; not in the totals */
    setenv("VSR_CUDA_DN_V5", "1", 1);
    TIME("deltanet (v5)", 4.0 * T * (C + Vd), 6.0 * T * Hv * dk * dv,
         o->deltanet(c, t1, C, tb, ta, Hv, al, dt, &sg, (int)Hk, (int)Hv, (int)dk, (int)dv, st, t3, &E));
    unsetenv("VSR_CUDA_DN_V5");
    uncount();
    /* the wgmma state kernel (VSR_CUDA_DN_V7=1, opt-in), likewise */
    setenv("VSR_CUDA_DN_V7", "1", 1);
    TIME("deltanet (v7)", 4.0 * T * (C + Vd), 6.0 * T * Hv * dk * dv,
         o->deltanet(c, t1, C, tb, ta, Hv, al, dt, &sg, (int)Hk, (int)Hv, (int)dk, (int)dv, st, t3, &E));
    unsetenv("VSR_CUDA_DN_V7");
    uncount();
    TIME("rmsnorm_gated", 12.0 * T * Vd, 0, o->rmsnorm_gated(c, t3, t2, 1, dv, T * Hv, dv, nw, 1e-6f, go, &E));
    LIN("linear out_proj (+=)", Wout, D, Vd, t2, x, 1);
    TIME("rmsnorm (post)", 8.0 * T * D, 0, o->rmsnorm(c, x, D, T, D, nw, 1.0f, 1e-6f, h, D, &E));
    LIN("linear gate", Wg, I, D, h, mg, 0);
    LIN("linear up", Wu, I, D, h, mu, 0);
    TIME("swiglu", 12.0 * T * I, 0, o->swiglu(c, mg, mu, I, T, I, so, &E)); /* out of place: inputs stay as drawn */
    LIN("linear down (+=)", Wd, D, I, so, x, 1);
    double dn_total = total_us;
    /* attention layer (its MLP is the same as above) */
    TIME("rmsnorm (input)", 8.0 * T * D, 0, o->rmsnorm(c, x, D, T, D, nw, 1.0f, 1e-6f, h, D, &E));
    LIN("linear q_proj (q|gate)", Wq, 2 * H * hd, D, h, t0, 0);
    TIME("rmsnorm q", 8.0 * T * H * hd, 0, o->rmsnorm(c, t0, 2 * hd, T * H, hd, nw, 1.0f, 1e-6f, t1, hd, &E));
    LIN("linear k_proj", Wk, Hkv * hd, D, h, t2, 0);
    TIME("rmsnorm k", 8.0 * T * Hkv * hd, 0, o->rmsnorm(c, t2, hd, T * Hkv, hd, nw, 1.0f, 1e-6f, t2, hd, &E));
    LIN("linear v_proj", Wv, Hkv * hd, D, h, t3, 0);
    TIME("rope q", 8.0 * T * H * 32, 0, o->rope(c, t1, H * hd, &sg, (int)H, hd, 64, cs, sn, 8192, &E));
    TIME("rope k", 8.0 * T * Hkv * 32, 0, o->rope(c, t2, Hkv * hd, &sg, (int)Hkv, hd, 64, cs, sn, 8192, &E));
    TIME("attention (non-causal)", 4.0 * T * (H + 2 * Hkv) * hd + 4.0 * T * H * hd, 4.0 * R * L * L * H * hd,
         o->attention(c, t1, H * hd, t2, t3, &sg, (int)H, (int)Hkv, (int)hd, 0.0625f, 0, t4, &E));
    TIME("attention (causal)", 4.0 * T * (H + 2 * Hkv) * hd + 4.0 * T * H * hd, 2.0 * R * L * L * H * hd,
         o->attention(c, t1, H * hd, t2, t3, &sg, (int)H, (int)Hkv, (int)hd, 0.0625f, 1, t4, &E));
    /* the other attention kernels on the same inputs (VSR_CUDA_ATTN_VER 3: wgmma with the softmax
     * overlapping P V; 1: the mma.sync kernel; "q": the Q load batched, the default; "s":
     * VSR_CUDA_ATTN_QBATCH=0, serial), for A/B in one process; not in the totals */
    static const char *att_alt[][4] = {{"3", "0", "attention (non-causal, v3s)", "attention (causal, v3s)"},
                                       {"2", "0", "attention (non-causal, v2s)", "attention (causal, v2s)"},
                                       {"3", "1", "attention (non-causal, v3q)", "attention (causal, v3q)"},
                                       {"1", "0", "attention (non-causal, v1)", "attention (causal, v1)"}};
    for (int ai = 0; ai < 4; ai++) {
        setenv("VSR_CUDA_ATTN_VER", att_alt[ai][0], 1);
        setenv("VSR_CUDA_ATTN_QBATCH", att_alt[ai][1], 1);
        for (int cz = 0; cz < 2; cz++) {
            TIME(att_alt[ai][2 + cz], 4.0 * T * (H + 2 * Hkv) * hd + 4.0 * T * H * hd,
                 (4.0 - 2.0 * cz) * R * L * L * H * hd,
                 o->attention(c, t1, H * hd, t2, t3, &sg, (int)H, (int)Hkv, (int)hd, 0.0625f, cz, t4, &E));
            uncount();
        }
    }
    unsetenv("VSR_CUDA_ATTN_VER");
    unsetenv("VSR_CUDA_ATTN_QBATCH");
    TIME("mul_sigmoid", 12.0 * T * H * hd, 0, o->mul_sigmoid(c, t4, T, (int)H, (int)hd, t0 + hd, 2 * H * hd, 2 * hd, &E));
    LIN("linear o_proj (+=)", Wo, D, H * hd, t4, x, 1);
    double at_total = total_us - dn_total;
    /* the producers' FP8 twins, as an FP8 model's forward runs them (one small FP8 weight held makes the
     * declared twins FP8), for A/B in one process; not in the totals */
    {
        static uint8_t q8[16 * 16];
        static uint16_t s8[16];
        for (int i = 0; i < 16; i++) s8[i] = vsr_f32_to_bf16(0.01f);
        vsr_weight_view fv = {.kind = VSR_WK_FP8, .N = 16, .K = 16, .w = q8, .scale = s8, .name = "fp8 (twins)"};
        vsr_bweight *W8;
        if (o->weight_upload(c, &fv, &W8, &E)) die("fp8 weight");
        const vsr_bweight *rd[1] = {W8};
        const double b0 = total_us;
        TIME("rmsnorm (fp8 twin, sole)", 5.0 * T * D, 0,
             (o->feed_linears(c, h, T, D, rd, 1), o->rmsnorm(c, x, D, T, D, nw, 1.0f, 1e-6f, h, D, &E)));
        TIME("swiglu (fp8 twin, sole)", 9.0 * T * I, 0,
             (o->feed_linears(c, so, T, I, rd, 1), o->swiglu(c, mg, mu, I, T, I, so, &E)));
        int was = cuda_swiglu_set_1p(0);
        TIME("swiglu (fp8 twin, sole, 2p)", 9.0 * T * I, 0,
             (o->feed_linears(c, so, T, I, rd, 1), o->swiglu(c, mg, mu, I, T, I, so, &E)));
        cuda_swiglu_set_1p(2);
        TIME("swiglu (fp8 twin, sole, one CTA)", 9.0 * T * I, 0,
             (o->feed_linears(c, so, T, I, rd, 1), o->swiglu(c, mg, mu, I, T, I, so, &E)));
        cuda_swiglu_set_1p(3);
        TIME("swiglu (fp8 twin, sole, pair U4)", 9.0 * T * I, 0,
             (o->feed_linears(c, so, T, I, rd, 1), o->swiglu(c, mg, mu, I, T, I, so, &E)));
        cuda_swiglu_set_1p(was);
        TIME("rmsnorm_gated (fp8 twin)", 9.0 * T * Vd, 0,
             (o->feed_linears(c, go, T, Vd, rd, 1), o->rmsnorm_gated(c, t3, t2, 1, dv, T * Hv, dv, nw, 1e-6f, go, &E)));
        was = cuda_gated_set_tok(0);
        TIME("rmsnorm_gated (by row)", 12.0 * T * Vd, 0, o->rmsnorm_gated(c, t3, t2, 1, dv, T * Hv, dv, nw, 1e-6f, go, &E));
        cuda_gated_set_tok(was);
        TIME("rmsnorm_gated (by token)", 12.0 * T * Vd, 0, o->rmsnorm_gated(c, t3, t2, 1, dv, T * Hv, dv, nw, 1e-6f, go, &E));
        was = cuda_gated_set_tok(3);
        TIME("rmsnorm_gated (by token, whole-token CTA)", 12.0 * T * Vd, 0,
             o->rmsnorm_gated(c, t3, t2, 1, dv, T * Hv, dv, nw, 1e-6f, go, &E));
        cuda_gated_set_tok(was);
        TIME("mul_sigmoid (fp8 twin, sole)", 9.0 * T * H * hd, 0,
             (o->feed_linears(c, t4, T, H * hd, rd, 1),
              o->mul_sigmoid(c, t4, T, (int)H, (int)hd, t0 + hd, 2 * H * hd, 2 * hd, &E)));
        /* linear_swiglu with FP8 weights (the stacked gate|up, e4m3 codes drawn finite, the input quantized by the
         * linear itself: no twin) whose SwiGLU reads the kept BF16 product and makes the FP8 twin the down
         * projection reads: its SwiGLU variants (VSR_CUDA_SWIGLU_1P) at the same GEMM */
        if (!only_rows || strstr(only_rows, "linear_swiglu")) {
            static uint8_t *q8gu;
            static uint16_t s8gu[2 * 17408];
            if (!q8gu) {
                q8gu = malloc((size_t)2 * I * D);
                if (!q8gu) die("fp8 gate|up host");
                uint64_t s = 0x2545F4914F6CDD1Dull;
                for (int64_t i = 0; i < 2 * I * D; i++) {
                    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
                    q8gu[i] = (uint8_t)((s >> 32) & 0xF7); /* exponent below 15: never the NaN code */
                }
                for (int64_t i = 0; i < 2 * I; i++) s8gu[i] = vsr_f32_to_bf16(0.002f);
            }
            vsr_weight_view gv = {.kind = VSR_WK_FP8, .N = 2 * I, .K = D, .w = q8gu, .scale = s8gu, .name = "fp8 gate|up"};
            vsr_bweight *Wgu8;
            float *wk = buf(T * 2 * I);
            if (o->weight_upload(c, &gv, &Wgu8, &E)) die("fp8 gate|up");
            static const struct { int mode; const char *name; } sv[] = {
                {1, "linear_swiglu (fp8 weights)"}, {3, "linear_swiglu (fp8 weights, other U)"},
                {2, "linear_swiglu (fp8 weights, one CTA)"}};
            for (int k = 0; k < 3; k++) {
                int was1 = cuda_swiglu_set_1p(sv[k].mode);
                TIME(sv[k].name, 2.0 * I * D + 4.0 * T * D + 6.0 * T * I, 4.0 * T * I * D,
                     (o->feed_linears(c, so, T, I, rd, 1), o->linear_swiglu(c, h, T, Wgu8, wk, so, &E)));
                cuda_swiglu_set_1p(was1);
            }
            o->weight_free(c, Wgu8);
            o->buf_free(c, wk);
        }
        total_us = b0;
        o->weight_free(c, W8);
    }
    printf("\n## %d rows x %d tokens (T = %lld)\n%-26s %10s %9s %9s %9s %9s\n", R, L, (long long)T, "op", "us", "GB/s",
           "TFLOP/s", "floor_us", "x_floor");
    for (int i = 0; i < nrows; i++) {
        double floor_us = fmax(rows[i].bytes / 4.19e12, rows[i].flops / 774e12) * 1e6;
        /* elementwise and the scans run in FP32 on CUDA cores: their flops floor uses the bf16
         * tensor rate only as a lower bound */
        printf("%-26s %10.1f %9.0f %9.1f %9.1f %9.2f\n", rows[i].op, rows[i].us, rows[i].bytes / rows[i].us / 1e3,
               rows[i].flops / rows[i].us / 1e6, floor_us, rows[i].us / floor_us);
    }
    printf("DeltaNet layer + MLP: %.1f us; attention layer (one attention variant counted twice, both listed) + "
           "its MLP: %.1f us\n", dn_total, at_total + (dn_total - rows[0].us) * 0 /* MLP listed once */);
    vsr_bweight *ws[] = {Wqkv, Wz, Wb, Wa, Wout, Wq, Wk, Wv, Wo, Wg, Wu, Wd};
    for (size_t i = 0; i < sizeof ws / sizeof *ws; i++) o->weight_free(c, ws[i]);
    float *bs[] = {x, h, t0, t1, t2, t3, t4, tb, ta, mg, mu, st, so, go, nw, cw, al, dt, cs, sn};
    for (size_t i = 0; i < sizeof bs / sizeof *bs; i++) o->buf_free(c, bs[i]);
}

#define REPS_E2E 9
static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void run_model(const char *dir) {
    vsr_device_list dl;
    if (vsr_devices_probe(&dl, &E)) die("probe");
    const vsr_device *d = NULL;
    for (int i = 0; i < dl.count; i++)
        if (dl.dev[i].kind == VSR_DEV_CUDA) d = &dl.dev[i];
    if (!d) { fprintf(stderr, "no CUDA device\n"); return; }
    vsr_package *p;
    if (vsr_package_open(dir, NULL, NULL, &p, &E) || vsr_package_map(p, &E)) die(dir);
    vsr_model *m;
    vsr_model_opts mo = {.device = d, .autotune_cache = getenv("VSR_AUTOTUNE_DIR")}; /* as --autotune-cache */
    double t0 = now();
    if (vsr_model_load(p, &mo, &m, &E)) die("load");
    printf("\n## whole forward of %s on %s: load %.2f s, weights %.3f GB on the device\n", dir, d->name, now() - t0,
           vsr_model_memory_bytes(m) / 1e9);
    int shapes[8][2] = {{3, 128}, {8, 512}};
    /* VSR_BENCH_REPS (default 9, at most 9) timed forwards per setting; VSR_BENCH_SHAPES=1: 3 x 128 only
     * (e.g. under compute-sanitizer); VSR_BENCH_E2E_SHAPES=RxL[,RxL...] (at most 8, R <= 8): those instead,
     * e.g. 1x100,3x128,8x512 (one router prompt of 100 tokens first) */
    const char *re = getenv("VSR_BENCH_REPS"), *se = getenv("VSR_BENCH_SHAPES"), *es = getenv("VSR_BENCH_E2E_SHAPES");
    int reps = re && atoi(re) > 0 && atoi(re) < REPS_E2E ? atoi(re) : REPS_E2E, n_shapes = se && atoi(se) == 1 ? 1 : 2;
    if (es && *es) {
        n_shapes = 0;
        for (const char *q = es; *q && n_shapes < 8;) {
            int R = 0, L = 0, used = 0;
            if (sscanf(q, "%dx%d%n", &R, &L, &used) != 2 || R < 1 || R > 8 || L < 1) die("VSR_BENCH_E2E_SHAPES: RxL[,RxL...]");
            shapes[n_shapes][0] = R, shapes[n_shapes][1] = L, n_shapes++;
            q += used;
            if (*q == ',') q++;
        }
    }
    for (int s = 0; s < n_shapes; s++) {
        int R = shapes[s][0], L = shapes[s][1];
        int32_t *ids[8];
        int lens[8];
        for (int r = 0; r < R; r++) {
            ids[r] = malloc(sizeof(int32_t) * (size_t)L), lens[r] = L;
            for (int i = 0; i < L; i++) ids[r][i] = (int32_t)((r * 7919 + i * 104729) % 150000);
        }
        float *hid = malloc(sizeof(float) * (size_t)R * (size_t)vsr_model_hidden_size(m)), lg[8 * 255];
        /* graphs on (the default): a first sighting, a recording, then replays; then graphs off */
        for (int g = 0; g < 2; g++) {
            vsr_cuda_graphs_off = g;
            if (vsr_model_forward_last(m, R, (const int32_t *const *)ids, lens, hid, lg, &E)) die("forward");
            double t[REPS_E2E];
            for (int k = 0; k < reps; k++) {
                double a = now();
                if (vsr_model_forward_last(m, R, (const int32_t *const *)ids, lens, hid, lg, &E)) die("forward");
                t[k] = now() - a;
            }
            printf("forward %d x %d, graphs %s: each run (ms, in order):", R, L, g ? "off" : "on");
            for (int k = 0; k < reps; k++) printf(" %.2f", t[k] * 1e3);
            printf("\n");
            qsort(t, (size_t)reps, sizeof *t, cmp_d);
            printf("forward %d x %d, graphs %s: best of %d %.2f ms, median %.2f ms\n", R, L, g ? "off" : "on", reps,
                   t[0] * 1e3, t[reps / 2] * 1e3);
        }
        vsr_cuda_graphs_off = 0;
        if (getenv("VSR_BENCH_PROFILE")) { /* one forward with every op timed (slower: events around each op) */
            vsr_cuda_profile_on = 1;
            if (vsr_model_forward_last(m, R, (const int32_t *const *)ids, lens, hid, lg, &E)) die("forward");
            vsr_cuda_profile_on = 0;
            fflush(stdout);
            vsr_cuda_profile_report();
        }
        for (int r = 0; r < R; r++) free(ids[r]);
        free(hid);
    }
    vsr_model_free(m);
    vsr_package_close(p);
}

int main(int argc, char **argv) {
    if (vsr_backend_cuda_new(0, &B, &E)) die("cuda backend");
    size_t nw = (size_t)17408 * 5120;
    host_w = malloc(2 * nw);
    uint64_t s = 88172645463325252ull;
    for (size_t i = 0; i < nw; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        host_w[i] = vsr_f32_to_bf16(((float)(s >> 40) / 16777216.0f - 0.5f) * 0.04f);
    }
    sync_buf = buf(16);
    /* VSR_BENCH_OP_SHAPE=8x512 (or 3x128): that per-op shape alone */
    const char *os = getenv("VSR_BENCH_OP_SHAPE");
    only_rows = getenv("VSR_BENCH_ONLY");
    if (!getenv("VSR_BENCH_E2E_ONLY")) {
        if (!os || !strcmp(os, "3x128")) run_shape(3, 128);
        if (!os || !strcmp(os, "8x512")) run_shape(8, 512);
    }
    vsr_backend_destroy(&B);
    free(host_w);
    if (argc > 1) run_model(argv[1]);
    return 0;
}
