/* src/backend/cpu/ops_cpu.c: the backend table (src/backend/backend.h) on the CPU.
 *
 * Device buffers are host memory; weights are the package mapping itself (upload
 * keeps the view: no copy, no unpacking). Linears go to the GEMM kernels in gemm.h,
 * everything else is here, parallelised over independent units (rows, heads,
 * sequences) with the thread pool. Each output element is computed by exactly one
 * worker in a fixed order, so results do not depend on the thread count or the
 * scheduling: runs are bit-identical. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define VSR_OPS_AVX512 1
#endif
#define MLP_ROWS_CPU 512 /* rows per MLP step: the [rows, I] intermediates stay near the caches */

#include "backend/backend.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/threadpool.h"
#include "vsr/device.h"
#include "vsr/dtype.h"

static const char *const wkind_names[] = {"bf16", "f32", "int4", "fp8", "nvfp4"};
_Static_assert(sizeof wkind_names / sizeof *wkind_names == VSR_WK_COUNT, "one name per weight kind");

const char *vsr_wkind_name(vsr_wkind k) {
    return (unsigned)k < VSR_WK_COUNT ? wkind_names[k] : "unknown";
}

typedef struct cpu_ctx {
    vsr_pool *pool;
} cpu_ctx;

struct vsr_bweight {
    vsr_weight_view v;
    vsr_int4_weight i4; /* int4 only */
    uint64_t bytes;
};

/* ---- memory ---- */

static void cpu_destroy(void *ctx) {
    cpu_ctx *c = ctx;
    if (!c) return;
    vsr_pool_free(c->pool);
    free(c);
}

static vsr_status cpu_buf_alloc(void *ctx, size_t bytes, void **out, vsr_err *err) {
    (void)ctx;
    /* 64-byte aligned for the SIMD kernels; calloc-like so a fresh arena holds no garbage. */
    void *p = NULL;
    size_t n = (bytes + 63) & ~(size_t)63;
    if (posix_memalign(&p, 64, n ? n : 64))
        return vsr_err_set(err, VSR_E_NOMEM, "cpu: cannot allocate %zu bytes of activations", bytes);
    *out = p;
    return VSR_OK;
}

static void cpu_buf_free(void *ctx, void *buf) {
    (void)ctx;
    free(buf);
}

static vsr_status cpu_buf_set(void *ctx, void *dst, const void *src, size_t n, vsr_err *err) {
    (void)ctx, (void)err;
    memcpy(dst, src, n);
    return VSR_OK;
}

static vsr_status cpu_buf_get(void *ctx, void *dst, const void *src, size_t n, vsr_err *err) {
    (void)ctx, (void)err;
    memcpy(dst, src, n);
    return VSR_OK;
}

/* ---- weights ---- */

static vsr_status cpu_weight_upload(void *ctx, const vsr_weight_view *v, vsr_bweight **out,
                                    vsr_err *err) {
    (void)ctx;
    const char *nm = v->name ? v->name : "(weight)";
    /* FP8 and NVFP4 packages are refused by the device gate before any weight is read;
     * the backend says the same rather than pretending it can run them. */
    if (v->kind == VSR_WK_FP8)
        return vsr_err_set(err, VSR_E_DEVICE, "%s: %s; the device is a CPU", nm, VSR_REFUSAL_FP8);
    if (v->kind == VSR_WK_NVFP4)
        return vsr_err_set(err, VSR_E_DEVICE, "%s: %s; the device is a CPU", nm, VSR_REFUSAL_NVFP4);
    if ((unsigned)v->kind >= VSR_WK_COUNT)
        return vsr_err_set(err, VSR_E_INVALID, "%s: unknown weight kind %d", nm, (int)v->kind);
    if (v->N <= 0 || v->K <= 0 || !v->w)
        return vsr_err_set(err, VSR_E_INVALID, "%s: empty weight [%lld, %lld]", nm, (long long)v->N,
                           (long long)v->K);
    vsr_bweight *b = calloc(1, sizeof *b);
    if (!b) return vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory", nm);
    b->v = *v;
    uint64_t NK = (uint64_t)v->N * (uint64_t)v->K;
    switch (v->kind) {
    case VSR_WK_BF16: b->bytes = NK * 2; break;
    case VSR_WK_F32: b->bytes = NK * 4; break;
    case VSR_WK_INT4: {
        if (v->K % 8 || (v->group <= 0 && v->group != -1) || !v->scale) {
            free(b);
            return vsr_err_set(err, VSR_E_INVALID,
                               "%s: int4 weight needs K a multiple of 8, a group and scales (K %lld, "
                               "group %d)",
                               nm, (long long)v->K, v->group);
        }
        int64_t gcols = v->group > 0 ? v->group : v->K, G = (v->K + gcols - 1) / gcols;
        b->i4 = (vsr_int4_weight){.packed = v->w, .scale_bf16 = v->scale, .zp = v->zp,
                                  .g_idx = v->g_idx, .group = v->group, .N = v->N, .K = v->K};
        b->bytes = NK / 2 + (uint64_t)v->N * G * 2 + (v->zp ? (uint64_t)(v->N / 8) * G * 4 : 0) +
                   (v->g_idx ? (uint64_t)v->K * 4 : 0);
        break;
    }
    default: break;
    }
    *out = b;
    return VSR_OK;
}

static void cpu_weight_free(void *ctx, vsr_bweight *w) {
    (void)ctx;
    free(w);
}

static uint64_t cpu_weight_bytes(void *ctx, const vsr_bweight *w) {
    (void)ctx;
    return w ? w->bytes : 0;
}

static vsr_status cpu_vec_upload(void *ctx, const float *host, int64_t n, float **out, vsr_err *err) {
    void *p = NULL;
    vsr_status st = cpu_buf_alloc(ctx, (size_t)n * sizeof(float), &p, err);
    if (st) return st;
    memcpy(p, host, (size_t)n * sizeof(float));
    *out = p;
    return VSR_OK;
}

/* ---- helpers ---- */

static inline float silu(float x) { return x / (1.0f + expf(-x)); }
static inline float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }
/* torch.nn.functional.softplus (beta 1, threshold 20). */
static inline float softplusf(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

#ifdef VSR_OPS_AVX512
/* AVX-512 versions of the elementwise and per-channel loops, chosen at run time (the library
 * is built for x86-64-v2). Same per-element operation order as the scalar loops; exp is a
 * vector polynomial (below) instead of libm's expf, within 2 ulp of it. */
#define AVX512_FN __attribute__((target("avx512f,avx512dq,fma")))

static int cpu_has_avx512(void) {
    static int v = -1;
    if (v < 0) {
        __builtin_cpu_init();
        v = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
            __builtin_cpu_supports("fma");
    }
    return v;
}

/* Read on every call (one atomic load when nothing is forced) so the test-only
 * vsr_gemm_force_isa("scalar" / "avx2+fma") also puts these ops on their scalar loops. */
static int have_avx512(void) {
    const char *forced = vsr_gemm_forced_isa();
    if (forced && strcmp(forced, "avx512") != 0) return 0;
    return cpu_has_avx512();
}

/* exp(x) on 16 lanes: Cephes expf (range reduction by ln 2 in two parts, degree-5 polynomial
 * on |r| <= ln2/2, relative error ~1e-7), 2^n applied with scalef; x clamped to the range
 * where expf is finite and normal-ish (below, exp underflows to ~1e-38, as good as 0 here). */
AVX512_FN static inline __m512 exp16(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.5f)), _mm512_set1_ps(88.7f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    __m512 y = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(y, n);
}

/* 1 / (1 + exp(-x)) */
AVX512_FN static inline __m512 sigmoid16(__m512 x) {
    __m512 one = _mm512_set1_ps(1.0f);
    return _mm512_div_ps(one, _mm512_add_ps(one, exp16(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}

/* x / (1 + exp(-x)), as silu() */
AVX512_FN static inline __m512 silu16(__m512 x) {
    return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), exp16(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}

static inline __mmask16 tail_mask(int64_t left) { return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1); }

/* y[i] = silu(g[i]) * u[i], i < n (y may alias g). */
AVX512_FN static void silu_mul_avx512(const float *g, const float *u, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask(n - i);
        __m512 v = silu16(_mm512_maskz_loadu_ps(m, g + i));
        _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, u + i)));
    }
}

/* x[i] *= sigmoid(g[i]), i < n. */
AVX512_FN static void mul_sigmoid_avx512(float *x, const float *g, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask(n - i);
        __m512 v = sigmoid16(_mm512_maskz_loadu_ps(m, g + i));
        _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), v));
    }
}

/* y[i] = w[i] * (x[i] * inv) * silu(z[i]), i < n. */
AVX512_FN static void gated_norm_avx512(const float *x, const float *z, const float *w, float inv, float *y,
                                        int64_t n) {
    __m512 vi = _mm512_set1_ps(inv);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask(n - i);
        __m512 a = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, w + i), _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), vi));
        _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(a, silu16(_mm512_maskz_loadu_ps(m, z + i))));
    }
}

/* sc[t] = exp(sc[t] - mx), t < n; returns the sum in t order. */
AVX512_FN static float exp_sub_avx512(float *sc, int64_t n, float mx) {
    __m512 vm = _mm512_set1_ps(mx);
    for (int64_t t = 0; t < n; t += 16) {
        __mmask16 m = tail_mask(n - t);
        _mm512_mask_storeu_ps(sc + t, m, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, sc + t), vm)));
    }
    float sum = 0;
    for (int64_t t = 0; t < n; t++) sum += sc[t];
    return sum;
}
#endif

const char *vsr_cpu_ops_isa(void) {
#ifdef VSR_OPS_AVX512
    if (have_avx512()) return "avx512";
#endif
    return "scalar";
}

/* Which sequence holds packed row r (segments are sorted by start). */
static int seg_of_row(const vsr_segs *s, int64_t r) {
    int lo = 0, hi = s->n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (s->start[mid] <= r) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* ---- embed ---- */

typedef struct embed_job {
    const uint16_t *table;
    const int32_t *ids;
    int64_t D;
    float *y;
} embed_job;

static void embed_fn(void *p, int64_t b, int64_t e, int worker) {
    (void)worker;
    embed_job *j = p;
    for (int64_t t = b; t < e; t++) {
        const uint16_t *row = j->table + (int64_t)j->ids[t] * j->D;
        float *y = j->y + t * j->D;
        for (int64_t i = 0; i < j->D; i++) y[i] = vsr_bf16_to_f32(row[i]);
    }
}

static vsr_status cpu_embed(void *ctx, const vsr_bweight *table, const int32_t *ids, int64_t n,
                            float *y, vsr_err *err) {
    cpu_ctx *c = ctx;
    if (table->v.kind != VSR_WK_BF16)
        return vsr_err_set(err, VSR_E_UNSUPPORTED, "%s: the embedding table must be BF16 (found %s)",
                           table->v.name ? table->v.name : "embed_tokens", vsr_wkind_name(table->v.kind));
    for (int64_t t = 0; t < n; t++)
        if (ids[t] < 0 || ids[t] >= table->v.N)
            return vsr_err_set(err, VSR_E_INVALID, "token id %d at position %lld is outside the vocabulary "
                               "[0, %lld)", ids[t], (long long)t, (long long)table->v.N);
    embed_job j = {table->v.w, ids, table->v.K, y};
    vsr_pool_for(c->pool, n, 16, embed_fn, &j);
    return VSR_OK;
}

/* ---- linear ---- */

static vsr_status cpu_linear(void *ctx, const float *x, int64_t M, const vsr_bweight *w, float *y,
                             int accumulate, vsr_err *err) {
    cpu_ctx *c = ctx;
    switch (w->v.kind) {
    case VSR_WK_BF16: vsr_gemm_bf16(c->pool, x, M, w->v.K, w->v.w, w->v.N, y, accumulate); return VSR_OK;
    case VSR_WK_F32: vsr_gemm_f32(c->pool, x, M, w->v.K, w->v.w, w->v.N, y, accumulate); return VSR_OK;
    case VSR_WK_INT4: vsr_gemm_int4(c->pool, x, M, &w->i4, y, accumulate); return VSR_OK;
    default:
        return vsr_err_set(err, VSR_E_DEVICE, "%s: %s weights cannot run on the CPU",
                           w->v.name ? w->v.name : "linear", vsr_wkind_name(w->v.kind));
    }
}

/* ---- norms ---- */

typedef struct norm_job {
    const float *x, *z, *w;
    int64_t xs, ys, D, zh, zs; /* zh, zs: the gated norm's z rows per token and token stride */
    float off, eps;
    float *y;
} norm_job;

static void rmsnorm_fn(void *p, int64_t b, int64_t e, int worker) {
    (void)worker;
    norm_job *j = p;
    for (int64_t r = b; r < e; r++) {
        const float *x = j->x + r * j->xs;
        float *y = j->y + r * j->ys;
        double ss = 0;
        for (int64_t i = 0; i < j->D; i++) ss += (double)x[i] * x[i];
        float inv = 1.0f / sqrtf((float)(ss / (double)j->D) + j->eps);
        for (int64_t i = 0; i < j->D; i++) y[i] = (x[i] * inv) * (j->off + j->w[i]);
    }
}

static vsr_status cpu_rmsnorm(void *ctx, const float *x, int64_t xs, int64_t M, int64_t D,
                              const float *w, float off, float eps, float *y, int64_t ys, vsr_err *err) {
    (void)err;
    cpu_ctx *c = ctx;
    norm_job j = {.x = x, .w = w, .xs = xs, .ys = ys, .D = D, .off = off, .eps = eps, .y = y};
    vsr_pool_for(c->pool, M, 64, rmsnorm_fn, &j);
    return VSR_OK;
}

static void rmsnorm_gated_fn(void *p, int64_t b, int64_t e, int worker) {
    (void)worker;
    norm_job *j = p;
    for (int64_t r = b; r < e; r++) {
        const float *x = j->x + r * j->D, *z = j->z + (r / j->zh) * j->zs + (r % j->zh) * j->D;
        float *y = j->y + r * j->D;
        double ss = 0;
        for (int64_t i = 0; i < j->D; i++) ss += (double)x[i] * x[i];
        float inv = 1.0f / sqrtf((float)(ss / (double)j->D) + j->eps);
#ifdef VSR_OPS_AVX512
        if (have_avx512()) {
            gated_norm_avx512(x, z, j->w, inv, y, j->D);
            continue;
        }
#endif
        for (int64_t i = 0; i < j->D; i++) y[i] = j->w[i] * (x[i] * inv) * silu(z[i]);
    }
}

static vsr_status cpu_rmsnorm_gated(void *ctx, const float *x, const float *z, int64_t zh, int64_t zs, int64_t M,
                                    int64_t D, const float *w, float eps, float *y, vsr_err *err) {
    if (zh < 1 || zs < zh * D)
        return vsr_err_set(err, VSR_E_INVALID, "rmsnorm_gated: z holds %lld rows of %lld per token at stride %lld",
                           (long long)zh, (long long)D, (long long)zs);
    cpu_ctx *c = ctx;
    norm_job j = {.x = x, .z = z, .w = w, .D = D, .eps = eps, .y = y, .zh = zh, .zs = zs};
    vsr_pool_for(c->pool, M, 64, rmsnorm_gated_fn, &j);
    return VSR_OK;
}

/* ---- causal depthwise conv + silu ---- */

typedef struct conv_job {
    const float *x, *w;
    const vsr_segs *seg;
    int64_t C, xs; /* xs: x's row stride */
    int Kc;
    float *y;
    float *wT; /* [Kc, C]: w transposed, for the vector path */
} conv_job;

static void conv_fn(void *p, int64_t b, int64_t e, int worker) {
    (void)worker;
    conv_job *j = p;
    int s = seg_of_row(j->seg, b);
    for (int64_t r = b; r < e; r++) {
        while (r >= j->seg->start[s] + j->seg->len[s]) s++;
        int64_t t = r - j->seg->start[s]; /* position inside the sequence */
        float *y = j->y + r * j->C;
        for (int64_t ch = 0; ch < j->C; ch++) {
            const float *w = j->w + ch * j->Kc;
            float acc = 0;
            for (int k = 0; k < j->Kc; k++) {
                int64_t tt = t - (j->Kc - 1) + k;
                if (tt >= 0) acc += w[k] * j->x[(r - t + tt) * j->xs + ch];
            }
            y[ch] = silu(acc);
        }
    }
}

#ifdef VSR_OPS_AVX512
/* The same over 16 channels at a time, taps from wT [Kc, C] (w transposed by the caller). */
AVX512_FN static void conv_fn_avx512(void *p, int64_t b, int64_t e, int worker) {
    (void)worker;
    conv_job *j = p;
    const int64_t C = j->C;
    int s = seg_of_row(j->seg, b);
    for (int64_t r = b; r < e; r++) {
        while (r >= j->seg->start[s] + j->seg->len[s]) s++;
        int64_t t = r - j->seg->start[s];
        int k0 = t >= j->Kc - 1 ? 0 : (int)(j->Kc - 1 - t); /* first tap inside the sequence */
        float *y = j->y + r * C;
        for (int64_t ch = 0; ch < C; ch += 16) {
            __mmask16 m = tail_mask(C - ch);
            __m512 acc = _mm512_setzero_ps();
            for (int k = k0; k < j->Kc; k++) {
                const float *xr = j->x + (r - (j->Kc - 1) + k) * j->xs + ch;
                acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, j->wT + (int64_t)k * C + ch), _mm512_maskz_loadu_ps(m, xr),
                                      acc);
            }
            _mm512_mask_storeu_ps(y + ch, m, silu16(acc));
        }
    }
}
#endif

static vsr_status cpu_conv1d_silu(void *ctx, const float *x, int64_t xs, const vsr_segs *seg, int64_t C,
                                  const float *w, int Kc, float *y, vsr_err *err) {
    if (xs < C)
        return vsr_err_set(err, VSR_E_INVALID, "conv1d_silu: row stride %lld is less than the %lld channels",
                           (long long)xs, (long long)C);
    cpu_ctx *c = ctx;
    if (seg->n <= 0) return VSR_OK;
    int64_t rows = seg->start[seg->n - 1] + seg->len[seg->n - 1];
    conv_job j = {x, w, seg, C, xs, Kc, y, NULL};
#ifdef VSR_OPS_AVX512
    float *wT = have_avx512() ? malloc(sizeof(float) * (size_t)C * (size_t)Kc) : NULL;
    if (wT) {
        for (int64_t ch = 0; ch < C; ch++)
            for (int k = 0; k < Kc; k++) wT[(int64_t)k * C + ch] = w[ch * Kc + k];
        j.wT = wT;
        vsr_pool_for(c->pool, rows, 16, conv_fn_avx512, &j);
        free(wT);
        return VSR_OK;
    }
#endif
    vsr_pool_for(c->pool, rows, 16, conv_fn, &j);
    return VSR_OK;
}

/* ---- gated delta rule ---- */

typedef struct delta_job {
    const float *qkv, *b, *a, *A_log, *dt_bias;
    int64_t qkv_stride, ba_stride;
    const vsr_segs *seg;
    int Hk, Hv, dk, dv;
    float *state, *out;
} delta_job;

static void l2norm_into(const float *x, int n, float *y, float extra_scale) {
    float ss = 0; /* FP32, summed in order, like transformers' (x*x).sum */
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    float inv = 1.0f / sqrtf(ss + 1e-6f);
    for (int i = 0; i < n; i++) y[i] = (x[i] * inv) * extra_scale;
}

/* One token's update of one head's state S [dk, dv], scalar (the oracle; any dv):
 *   S *= decay; kvm = S^T k; delta = (v - kvm) * beta; S += k (x) delta; o = S^T q. */
static void delta_step_scalar(float *S, int dk, int dv, const float *kn, const float *qn, const float *v,
                              float beta, float decay, float *kvm, float *o) {
    for (int i = 0; i < dv; i++) kvm[i] = 0;
    for (int kk = 0; kk < dk; kk++) {
        float *Sr = S + (int64_t)kk * dv;
        for (int i = 0; i < dv; i++) {
            Sr[i] *= decay;
            kvm[i] += Sr[i] * kn[kk];
        }
    }
    for (int i = 0; i < dv; i++) kvm[i] = (v[i] - kvm[i]) * beta; /* delta */
    for (int i = 0; i < dv; i++) o[i] = 0;
    for (int kk = 0; kk < dk; kk++) {
        float *Sr = S + (int64_t)kk * dv;
        float kq = kn[kk], qq = qn[kk];
        for (int i = 0; i < dv; i++) {
            Sr[i] += kq * kvm[i];
            o[i] += Sr[i] * qq;
        }
    }
}

#ifdef VSR_OPS_AVX512
/* The same step on AVX-512, column blocks of NV x 16 held in registers across the dk rows
 * (same per-element order over kk as the scalar step; FMA instead of mul + add). Each
 * column block is independent, so both passes run per block while it is in L1. */
#define DELTA_BLOCK(NV)                                                                            \
    do {                                                                                           \
        __m512 acc[NV], dl[NV];                                                                    \
        for (int u = 0; u < NV; u++) acc[u] = _mm512_setzero_ps();                                 \
        for (int kk = 0; kk < dk; kk++) {                                                          \
            float *Sr = S + (int64_t)kk * dv + c0;                                                 \
            __m512 kb = _mm512_set1_ps(kn[kk]);                                                    \
            for (int u = 0; u < NV; u++) {                                                         \
                __m512 x = _mm512_mul_ps(_mm512_loadu_ps(Sr + 16 * u), vdec);                      \
                _mm512_storeu_ps(Sr + 16 * u, x);                                                  \
                acc[u] = _mm512_fmadd_ps(x, kb, acc[u]);                                           \
            }                                                                                      \
        }                                                                                          \
        for (int u = 0; u < NV; u++) {                                                             \
            dl[u] = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(v + c0 + 16 * u), acc[u]), vbeta); \
            acc[u] = _mm512_setzero_ps();                                                          \
        }                                                                                          \
        for (int kk = 0; kk < dk; kk++) {                                                          \
            float *Sr = S + (int64_t)kk * dv + c0;                                                 \
            __m512 kb = _mm512_set1_ps(kn[kk]), qb = _mm512_set1_ps(qn[kk]);                       \
            for (int u = 0; u < NV; u++) {                                                         \
                __m512 x = _mm512_fmadd_ps(kb, dl[u], _mm512_loadu_ps(Sr + 16 * u));               \
                _mm512_storeu_ps(Sr + 16 * u, x);                                                  \
                acc[u] = _mm512_fmadd_ps(x, qb, acc[u]);                                           \
            }                                                                                      \
        }                                                                                          \
        for (int u = 0; u < NV; u++) _mm512_storeu_ps(o + c0 + 16 * u, acc[u]);                    \
    } while (0)

__attribute__((target("avx512f,fma"))) static void delta_step_avx512(float *S, int dk, int dv,
                                                                     const float *kn, const float *qn,
                                                                     const float *v, float beta,
                                                                     float decay, float *o) {
    const __m512 vdec = _mm512_set1_ps(decay), vbeta = _mm512_set1_ps(beta);
    int c0 = 0;
    for (; c0 + 128 <= dv; c0 += 128) DELTA_BLOCK(8);
    for (; c0 + 16 <= dv; c0 += 16) DELTA_BLOCK(1);
}
#undef DELTA_BLOCK

#endif

/* One (sequence, value head) pair: a sequential scan over the sequence's tokens. */
static void delta_fn(void *p, int64_t b, int64_t e, int worker) {
    (void)worker;
    delta_job *j = p;
    const int dk = j->dk, dv = j->dv;
    float qn[1024], kn[1024], kvm[1024]; /* dk, dv <= 1024: checked by the caller */
#ifdef VSR_OPS_AVX512
    const int vec = dv % 16 == 0 && have_avx512();
#endif
    for (int64_t u = b; u < e; u++) {
        int s = (int)(u / j->Hv), h = (int)(u % j->Hv);
        int hk = h / (j->Hv / j->Hk);
        float *S = j->state + ((int64_t)s * j->Hv + h) * dk * dv; /* [dk, dv] */
        memset(S, 0, sizeof(float) * (size_t)dk * dv);
        float negA = -expf(j->A_log[h]);
        float qscale = 1.0f / sqrtf((float)dk);
        int64_t Kd = (int64_t)j->Hk * dk;
        for (int64_t r = j->seg->start[s]; r < j->seg->start[s] + j->seg->len[s]; r++) {
            const float *row = j->qkv + r * j->qkv_stride;
            l2norm_into(row + (int64_t)hk * dk, dk, qn, qscale);
            l2norm_into(row + Kd + (int64_t)hk * dk, dk, kn, 1.0f);
            const float *v = row + 2 * Kd + (int64_t)h * dv;
            float beta = sigmoidf_(j->b[r * j->ba_stride + h]);
            float decay = expf(negA * softplusf(j->a[r * j->ba_stride + h] + j->dt_bias[h]));
            float *o = j->out + r * ((int64_t)j->Hv * dv) + (int64_t)h * dv;
#ifdef VSR_OPS_AVX512
            if (vec) {
                delta_step_avx512(S, dk, dv, kn, qn, v, beta, decay, o);
                continue;
            }
#endif
            delta_step_scalar(S, dk, dv, kn, qn, v, beta, decay, kvm, o);
        }
    }
}

static vsr_status cpu_deltanet(void *ctx, const float *qkv, int64_t qkv_stride, const float *b,
                               const float *a, int64_t ba_stride, const float *A_log, const float *dt_bias,
                               const vsr_segs *seg, int Hk, int Hv, int dk, int dv, float *state,
                               float *out, vsr_err *err) {
    cpu_ctx *c = ctx;
    if (dk > 1024 || dv > 1024 || Hk <= 0 || Hv % Hk)
        return vsr_err_set(err, VSR_E_UNSUPPORTED,
                           "deltanet: head dims up to 1024 and value heads a multiple of key heads "
                           "(dk %d, dv %d, Hk %d, Hv %d)",
                           dk, dv, Hk, Hv);
    if (ba_stride < Hv)
        return vsr_err_set(err, VSR_E_INVALID, "deltanet: b/a row stride %lld is less than the %d value heads",
                           (long long)ba_stride, Hv);
    delta_job j = {qkv, b, a, A_log, dt_bias, qkv_stride, ba_stride, seg, Hk, Hv, dk, dv, state, out};
    vsr_pool_for(c->pool, (int64_t)seg->n * Hv, 1, delta_fn, &j);
    return VSR_OK;
}

/* ---- rotary ---- */

typedef struct rope_job {
    float *x;
    int64_t xs, hs, max_pos;
    const vsr_segs *seg;
    int H, rot;
    const float *cos_t, *sin_t;
} rope_job;

static void rope_fn(void *p, int64_t b, int64_t e, int worker) {
    (void)worker;
    rope_job *j = p;
    int half = j->rot / 2;
    int s = seg_of_row(j->seg, b);
    for (int64_t r = b; r < e; r++) {
        while (r >= j->seg->start[s] + j->seg->len[s]) s++;
        int64_t pos = j->seg->pos0[s] + (r - j->seg->start[s]);
        const float *cs = j->cos_t + pos * half, *sn = j->sin_t + pos * half;
        for (int h = 0; h < j->H; h++) {
            float *x = j->x + r * j->xs + h * j->hs;
            for (int i = 0; i < half; i++) {
                /* rotate_half: [x1, x2] -> [x1*cos - x2*sin, x2*cos + x1*sin] */
                float x1 = x[i], x2 = x[i + half];
                x[i] = x1 * cs[i] - x2 * sn[i];
                x[i + half] = x2 * cs[i] + x1 * sn[i];
            }
        }
    }
}

static vsr_status cpu_rope(void *ctx, float *x, int64_t xs, const vsr_segs *seg, int H, int64_t hs,
                           int rot, const float *cos_t, const float *sin_t, int64_t max_pos,
                           vsr_err *err) {
    cpu_ctx *c = ctx;
    if (seg->n <= 0) return VSR_OK;
    for (int s = 0; s < seg->n; s++)
        if (seg->pos0[s] < 0 || seg->pos0[s] + seg->len[s] > max_pos)
            return vsr_err_set(err, VSR_E_INVALID,
                               "rope: positions %lld..%lld exceed the table of %lld positions",
                               (long long)seg->pos0[s], (long long)(seg->pos0[s] + seg->len[s] - 1),
                               (long long)max_pos);
    int64_t rows = seg->start[seg->n - 1] + seg->len[seg->n - 1];
    rope_job j = {x, xs, hs, max_pos, seg, H, rot, cos_t, sin_t};
    vsr_pool_for(c->pool, rows, 16, rope_fn, &j);
    return VSR_OK;
}

/* ---- attention ---- */

typedef struct attn_job {
    const float *q, *k, *v;
    int64_t qs;
    const vsr_segs *seg;
    int H, Hkv, d, causal;
    float scale;
    float *out;
    float *scratch; /* per worker: max sequence length */
    int64_t max_len;
} attn_job;

/* One (query row, head) pair. */
static void attn_fn(void *p, int64_t b, int64_t e, int worker) {
    attn_job *j = p;
    float *sc = j->scratch + (int64_t)worker * j->max_len;
    const int d = j->d, rep = j->H / j->Hkv;
    const int64_t kvs = (int64_t)j->Hkv * d;
    int s = seg_of_row(j->seg, b / j->H);
    for (int64_t u = b; u < e; u++) {
        int64_t r = u / j->H;
        int h = (int)(u % j->H), hk = h / rep;
        while (r >= j->seg->start[s] + j->seg->len[s]) s++;
        int64_t s0 = j->seg->start[s];
        int64_t nk = j->causal ? r - s0 + 1 : j->seg->keys ? j->seg->keys[s] : j->seg->len[s];
        const float *q = j->q + r * j->qs + (int64_t)h * d;
        float mx = -INFINITY;
        for (int64_t t = 0; t < nk; t++) {
            const float *k = j->k + (s0 + t) * kvs + (int64_t)hk * d;
            float dot = 0;
            for (int i = 0; i < d; i++) dot += q[i] * k[i];
            sc[t] = dot * j->scale;
            if (sc[t] > mx) mx = sc[t];
        }
        float sum = 0;
        for (int64_t t = 0; t < nk; t++) {
            sc[t] = expf(sc[t] - mx);
            sum += sc[t];
        }
        float inv = 1.0f / sum;
        float *o = j->out + r * ((int64_t)j->H * d) + (int64_t)h * d;
        for (int i = 0; i < d; i++) o[i] = 0;
        for (int64_t t = 0; t < nk; t++) {
            const float *v = j->v + (s0 + t) * kvs + (int64_t)hk * d;
            float pr = sc[t] * inv;
            for (int i = 0; i < d; i++) o[i] += pr * v[i];
        }
    }
}

/* Blocked attention: one unit = (sequence, kv head, block of ATT_QB query rows). The unit
 * gathers its kv head's K [nk, d] and V^T [d, nk] once, stacks the rep query heads sharing
 * it and runs S = Q K^T and O = P V through the FP32 GEMM (on the worker's own thread),
 * with the softmax in between (FP32, max-subtracted, probabilities p = e * (1/sum) as the
 * per-row path does). Causal blocks read keys [0, block end) and mask the triangle to exact
 * zeros. Each output element is still written by exactly one unit: thread-count independent. */
enum { ATT_QB = 64 };

typedef struct attn_blk_job {
    const float *q, *k, *v;
    int64_t qs;
    const vsr_segs *seg;
    int H, Hkv, d, causal;
    float scale;
    float *out;
    int64_t nqb_total, max_len;
    const int64_t *unit_seg; /* first unit index of each sequence: [n_seg + 1] */
    float *ws;               /* per worker: ws_floats */
    int64_t ws_floats;
} attn_blk_job;

static void attn_blk_fn(void *p, int64_t b, int64_t e, int worker) {
    attn_blk_job *j = p;
    const int d = j->d, rep = j->H / j->Hkv;
    const int64_t kvs = (int64_t)j->Hkv * d, ldo = (int64_t)j->H * d, qbr = (int64_t)rep * ATT_QB;
    float *Kh = j->ws + (int64_t)worker * j->ws_floats; /* [max_len, d] */
    float *VT = Kh + j->max_len * d;                     /* [d, max_len] */
    float *Qb = VT + j->max_len * d;                     /* [rep * ATT_QB, d] */
    float *Sb = Qb + qbr * d;                            /* [rep * ATT_QB, max_len] */
    float *Ob = Sb + qbr * j->max_len;                   /* [rep * ATT_QB, d] */
    for (int64_t u = b; u < e; u++) {
        int s = 0;
        while (u >= j->unit_seg[s + 1]) s++;
        int64_t loc = u - j->unit_seg[s], len = j->seg->len[s], s0 = j->seg->start[s];
        int64_t nqb = (len + ATT_QB - 1) / ATT_QB;
        int hk = (int)(loc / nqb);
        int64_t q0 = (loc % nqb) * ATT_QB, q1 = q0 + ATT_QB < len ? q0 + ATT_QB : len, nq = q1 - q0;
        int64_t nk = j->causal ? q1 : j->seg->keys ? j->seg->keys[s] : len;
        for (int64_t t = 0; t < nk; t++) {
            const float *kr = j->k + (s0 + t) * kvs + (int64_t)hk * d;
            const float *vr = j->v + (s0 + t) * kvs + (int64_t)hk * d;
            memcpy(Kh + t * d, kr, sizeof(float) * (size_t)d);
            for (int c = 0; c < d; c++) VT[(int64_t)c * nk + t] = vr[c];
        }
        /* The rep query heads of this kv head stacked: row hh * nq + i is head hk*rep + hh,
         * query q0 + i. One GEMM each for the scores and the output: K and V^T packed once. */
        for (int hh = 0; hh < rep; hh++)
            for (int64_t i = 0; i < nq; i++)
                memcpy(Qb + ((int64_t)hh * nq + i) * d, j->q + (s0 + q0 + i) * j->qs + (int64_t)(hk * rep + hh) * d,
                       sizeof(float) * (size_t)d);
        vsr_gemm_f32(NULL, Qb, rep * nq, d, Kh, nk, Sb, 0);
        for (int64_t ri = 0; ri < rep * nq; ri++) {
            float *sc = Sb + ri * nk;
            int64_t lim = j->causal ? q0 + ri % nq + 1 : nk;
            float mx = -INFINITY;
            for (int64_t t = 0; t < lim; t++) {
                sc[t] *= j->scale;
                if (sc[t] > mx) mx = sc[t];
            }
            float sum = 0;
#ifdef VSR_OPS_AVX512
            if (have_avx512()) {
                sum = exp_sub_avx512(sc, lim, mx);
            } else
#endif
            {
                for (int64_t t = 0; t < lim; t++) {
                    sc[t] = expf(sc[t] - mx);
                    sum += sc[t];
                }
            }
            float inv = 1.0f / sum;
            for (int64_t t = 0; t < lim; t++) sc[t] *= inv;
            for (int64_t t = lim; t < nk; t++) sc[t] = 0.0f;
        }
        vsr_gemm_f32(NULL, Sb, rep * nq, nk, VT, d, Ob, 0);
        for (int hh = 0; hh < rep; hh++)
            for (int64_t i = 0; i < nq; i++)
                memcpy(j->out + (s0 + q0 + i) * ldo + (int64_t)(hk * rep + hh) * d, Ob + ((int64_t)hh * nq + i) * d,
                       sizeof(float) * (size_t)d);
    }
}

/* TEST-ONLY (vsr_cpu_attention_force_path): 1 = always the per-query path. */
static _Atomic int g_attn_rows;

int vsr_cpu_attention_force_path(const char *name) {
    if (!name) g_attn_rows = 0;
    else if (strcmp(name, "rows") == 0) g_attn_rows = 1;
    else return -1;
    return 0;
}

static vsr_status cpu_attention(void *ctx, const float *q, int64_t qs, const float *k, const float *v,
                                const vsr_segs *seg, int H, int Hkv, int d, float scale, int causal,
                                float *out, vsr_err *err) {
    cpu_ctx *c = ctx;
    if (seg->n <= 0) return VSR_OK;
    if (Hkv <= 0 || H % Hkv)
        return vsr_err_set(err, VSR_E_UNSUPPORTED, "attention: %d query heads over %d kv heads", H, Hkv);
    int64_t max_len = 0;
    for (int s = 0; s < seg->n; s++)
        if (seg->len[s] > max_len) max_len = seg->len[s];
    int workers = vsr_pool_size(c->pool);
    if (workers < 1) workers = 1;
    /* Blocked path: per worker K and V^T of one kv head, a query block, its scores and output. */
    int64_t qbr = (int64_t)(H / Hkv) * ATT_QB;
    int64_t ws_floats = 2 * max_len * d + 2 * qbr * d + qbr * max_len;
    ws_floats = (ws_floats + 15) & ~(int64_t)15;
    int64_t *unit_seg = g_attn_rows ? NULL : malloc(sizeof(int64_t) * ((size_t)seg->n + 1));
    float *ws = NULL;
    if (unit_seg && !posix_memalign((void **)&ws, 64, sizeof(float) * (size_t)ws_floats * (size_t)workers)) {
        unit_seg[0] = 0;
        for (int s = 0; s < seg->n; s++)
            unit_seg[s + 1] = unit_seg[s] + (int64_t)Hkv * ((seg->len[s] + ATT_QB - 1) / ATT_QB);
        attn_blk_job bj = {q, k, v, qs, seg, H, Hkv, d, causal, scale, out, 0, max_len, unit_seg, ws, ws_floats};
        vsr_pool_for(c->pool, unit_seg[seg->n], 1, attn_blk_fn, &bj);
        free(ws);
        free(unit_seg);
        return VSR_OK;
    }
    free(unit_seg);
    /* Not enough memory for the blocked workspace (or the test-only switch asked for it):
     * the per-row path needs only max_len. */
    float *scratch = malloc(sizeof(float) * (size_t)max_len * (size_t)workers);
    if (!scratch) return vsr_err_set(err, VSR_E_NOMEM, "attention: no memory for %lld scores", (long long)max_len);
    int64_t rows = seg->start[seg->n - 1] + seg->len[seg->n - 1];
    attn_job j = {q, k, v, qs, seg, H, Hkv, d, causal, scale, out, scratch, max_len};
    vsr_pool_for(c->pool, rows * H, 4, attn_fn, &j);
    free(scratch);
    return VSR_OK;
}

/* ---- elementwise ---- */

typedef struct ew_job {
    float *x;
    const float *g, *u;
    int64_t gs, ghs, N;
    int H, hd;
    float *y;
} ew_job;

static void mul_sigmoid_fn(void *p, int64_t b, int64_t e, int worker) {
    (void)worker;
    ew_job *j = p;
    for (int64_t r = b; r < e; r++)
        for (int h = 0; h < j->H; h++) {
            float *x = j->x + r * ((int64_t)j->H * j->hd) + (int64_t)h * j->hd;
            const float *g = j->g + r * j->gs + h * j->ghs;
#ifdef VSR_OPS_AVX512
            if (have_avx512()) {
                mul_sigmoid_avx512(x, g, j->hd);
                continue;
            }
#endif
            for (int i = 0; i < j->hd; i++) x[i] *= sigmoidf_(g[i]);
        }
}

static vsr_status cpu_mul_sigmoid(void *ctx, float *x, int64_t M, int H, int hd, const float *g,
                                  int64_t gs, int64_t ghs, vsr_err *err) {
    (void)err;
    cpu_ctx *c = ctx;
    ew_job j = {.x = x, .g = g, .gs = gs, .ghs = ghs, .H = H, .hd = hd};
    vsr_pool_for(c->pool, M, 16, mul_sigmoid_fn, &j);
    return VSR_OK;
}

static void swiglu_fn(void *p, int64_t b, int64_t e, int worker) {
    (void)worker;
    ew_job *j = p;
    if (j->gs != j->N) { /* strided halves: row by row */
        for (int64_t r = b; r < e; r++) {
            const float *g = j->g + r * j->gs, *u = j->u + r * j->gs;
            float *y = j->y + r * j->N;
#ifdef VSR_OPS_AVX512
            if (have_avx512()) {
                silu_mul_avx512(g, u, y, j->N);
                continue;
            }
#endif
            for (int64_t i = 0; i < j->N; i++) y[i] = silu(g[i]) * u[i];
        }
        return;
    }
#ifdef VSR_OPS_AVX512
    if (have_avx512()) {
        silu_mul_avx512(j->g + b * j->N, j->u + b * j->N, j->y + b * j->N, (e - b) * j->N);
        return;
    }
#endif
    for (int64_t i = b * j->N; i < e * j->N; i++) j->y[i] = silu(j->g[i]) * j->u[i];
}

static vsr_status cpu_swiglu(void *ctx, const float *g, const float *u, int64_t gu_stride, int64_t M, int64_t N,
                             float *y, vsr_err *err) {
    if (gu_stride < N)
        return vsr_err_set(err, VSR_E_INVALID, "swiglu: row stride %lld is less than the width %lld",
                           (long long)gu_stride, (long long)N);
    cpu_ctx *c = ctx;
    ew_job j = {.g = g, .u = u, .gs = gu_stride, .N = N, .y = y};
    vsr_pool_for(c->pool, M, 8, swiglu_fn, &j);
    return VSR_OK;
}

static void add_fn(void *p, int64_t b, int64_t e, int worker) {
    (void)worker;
    ew_job *j = p;
    for (int64_t i = b; i < e; i++) j->y[i] += j->g[i];
}

static vsr_status cpu_add(void *ctx, float *y, const float *x, int64_t n, vsr_err *err) {
    (void)err;
    cpu_ctx *c = ctx;
    ew_job j = {.g = x, .y = y};
    vsr_pool_for(c->pool, n, 1 << 14, add_fn, &j);
    return VSR_OK;
}

static vsr_status cpu_gather_rows(void *ctx, const float *src, const int64_t *rows, int64_t n,
                                  int64_t D, float *dst, vsr_err *err) {
    (void)ctx, (void)err;
    for (int64_t r = 0; r < n; r++) memmove(dst + r * D, src + rows[r] * D, sizeof(float) * (size_t)D);
    return VSR_OK;
}

/* ---- readout ---- */

static vsr_status cpu_readout(void *ctx, const float *h, int64_t M, const vsr_bweight *R, float *logits,
                              vsr_err *err) {
    cpu_ctx *c = ctx;
    const int64_t N = R->v.N, D = R->v.K;
    if (R->v.kind == VSR_WK_F32) {
        vsr_gemm_f32(c->pool, h, M, D, R->v.w, N, logits, 0);
        return VSR_OK;
    }
    if (R->v.kind != VSR_WK_BF16)
        return vsr_err_set(err, VSR_E_UNSUPPORTED, "readout: weight must be F32 or BF16 (found %s)",
                           vsr_wkind_name(R->v.kind));
    /* torch: bf16 @ bf16 accumulates in FP32 and rounds the result to bf16. */
    float *hb = malloc(sizeof(float) * (size_t)(M * D));
    if (!hb) return vsr_err_set(err, VSR_E_NOMEM, "readout: out of memory");
    for (int64_t i = 0; i < M * D; i++) hb[i] = vsr_bf16_to_f32(vsr_f32_to_bf16(h[i]));
    vsr_gemm_bf16(c->pool, hb, M, D, R->v.w, N, logits, 0);
    for (int64_t i = 0; i < M * N; i++) logits[i] = vsr_bf16_to_f32(vsr_f32_to_bf16(logits[i]));
    free(hb);
    return VSR_OK;
}

static const vsr_backend_ops cpu_ops = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .buf_alloc = cpu_buf_alloc,
    .buf_free = cpu_buf_free,
    .buf_set = cpu_buf_set,
    .buf_get = cpu_buf_get,
    .weight_upload = cpu_weight_upload,
    .weight_free = cpu_weight_free,
    .weight_bytes = cpu_weight_bytes,
    .vec_upload = cpu_vec_upload,
    .embed = cpu_embed,
    .linear = cpu_linear,
    .rmsnorm = cpu_rmsnorm,
    .rmsnorm_gated = cpu_rmsnorm_gated,
    .conv1d_silu = cpu_conv1d_silu,
    .deltanet = cpu_deltanet,
    .rope = cpu_rope,
    .attention = cpu_attention,
    .mul_sigmoid = cpu_mul_sigmoid,
    .swiglu = cpu_swiglu,
    .add = cpu_add,
    .gather_rows = cpu_gather_rows,
    .readout = cpu_readout,
    .mlp_rows = MLP_ROWS_CPU,
};

vsr_status vsr_backend_cpu_new(int threads, vsr_backend *out, vsr_err *err) {
    if (threads < 0) return vsr_err_set(err, VSR_E_INVALID, "cpu: threads must be >= 0 (got %d)", threads);
    if (threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (int)n : 1;
    }
    cpu_ctx *c = calloc(1, sizeof *c);
    if (!c) return vsr_err_set(err, VSR_E_NOMEM, "cpu: out of memory");
    c->pool = vsr_pool_new(threads);
    if (!c->pool) {
        free(c);
        return vsr_err_set(err, VSR_E_NOMEM, "cpu: cannot start %d worker threads", threads);
    }
    out->ops = &cpu_ops;
    out->ctx = c;
    return VSR_OK;
}
