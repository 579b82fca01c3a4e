/* src/model/qwen35.c: the qwen3_5 text backbone (transformers' Qwen3_5TextModel) and the
 * Decision 3.0 readout, written against the backend table only (src/backend/backend.h).
 *
 * Per layer (D = hidden, T = tokens of the batch packed back to back):
 *   h = RMSNorm_(1+w)(x)
 *   linear_attention (Gated DeltaNet):
 *     qkv = h.Wqkv^T [T, 2Kd+Vd] -> causal depthwise conv + silu -> q | k | v
 *     z = h.Wz^T [T, Vd], b = h.Wb^T [T, Hv], a = h.Wa^T [T, Hv]
 *     o = gated delta rule(q, k, v, beta = sigmoid(b), g = -exp(A_log)*softplus(a + dt_bias))
 *     x += (w * RMSNorm(o) * silu(z)).Wout^T
 *   full_attention (gated):
 *     [q | gate] per head = h.Wq^T [T, H*2d]; q = RMSNorm_(1+w)(q), k = RMSNorm_(1+w)(h.Wk^T)
 *     partial rotary on the first rot dims of q and k; v = h.Wv^T
 *     x += (softmax(q.k^T/sqrt(d)) v * sigmoid(gate)).Wo^T   (causal or bidirectional)
 *   x += down(silu(gate(h2)) * up(h2)), h2 = RMSNorm_(1+w)(x)
 * then the final RMSNorm at each row's last token and the readout [255, D].
 *
 * Left padding is never materialised: padded positions cannot reach real tokens in
 * transformers (keys masked in attention; DeltaNet inputs zeroed, so its conv sees the
 * same zeros as its own padding and its state stays zero), so each row is computed as
 * its own packed sequence. Positions stay those of the padded batch (0..L-1 over the
 * padded length), as the reference runtime passes them. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/backend_cuda.h" /* vsr_backend_for_device: declarations only, no device API */
#include "vsr/model.h"
#include "vsr/safetensors.h"

#define MAX_ROWS_PLANNED 8 /* decision3 runs 8 questions per forward */
#define MLP_CHUNK 512      /* tokens per MLP step unless the backend asks otherwise (mlp_rows) */
#define BUCKET_MAX_ROWS 128     /* the CUDA backend's sequences per call */
#define BUCKET_MAX_TOKENS 65535 /* the CUDA backend's tokens per call (a launch's grid rows) */
/* Only forwards up to the warmed size are padded: above it a forward's launches are a small part of
 * its time and padding costs more than a recording saves (the H200's batching run at c=16 with every
 * forward padded: 97 req/s against 210 unpadded). vsr_model_warm sets it to its token limit. */
#define BUCKET_DEFAULT_LIMIT 8192

typedef struct layer {
    vsr_layer_type type;
    float *in_norm, *post_norm;                  /* [D] */
    vsr_bweight *qkv, *z, *b, *a, *out;           /* linear_attn */
    vsr_bweight *in_all;                          /* qkv|z|b|a stacked [C + Vd + 2Hv, D] (then those are NULL) */
    vsr_bweight *in_qz, *in_ba;                   /* else qkv|z [C + Vd, D] and b|a [2Hv, D] stacked apart */
    float *conv_w, *A_log, *dt_bias, *gnorm;      /* [C*Kc], [Hv], [Hv], [dv] */
    vsr_bweight *q, *k, *v, *o;                   /* self_attn */
    float *q_norm, *k_norm;                       /* [d] */
    vsr_bweight *gate, *up, *down;                /* mlp */
    vsr_bweight *gate_up;                         /* gate|up stacked [2I, D] (then gate, up are NULL) */
} layer;

struct vsr_model {
    const vsr_package *pkg;
    vsr_backend be;
    vsr_text_config c;
    int causal;
    int64_t D, I, Kd, Vd, C; /* hidden, intermediate, DeltaNet key/value dims, conv channels */
    int H, Hkv, hd, rot, Hk, Hv, dk, dv, Kc;
    float eps;
    vsr_bweight *embed, *readout;
    float *final_norm;
    layer *layers;
    vsr_st_file *readout_file;
    /* every backend allocation, freed together */
    void **bufs;
    int n_bufs, cap_bufs;
    vsr_bweight **ws;
    int n_ws, cap_ws;
    uint64_t weight_bytes;
    int mlp_stacked; /* some layer has gate|up stacked: the arena's mg holds [chunk, 2I] */
    int in_stacked;  /* some DeltaNet layer has qkv|z|b|a stacked: the arena's t0 holds [T, C + Vd + 2Hv] */
    int qz_stacked;  /* some DeltaNet layer has qkv|z stacked: t0 holds [T, C + Vd] */
    int ba_stacked;  /* some DeltaNet layer has b|a stacked: tb holds [T, 2Hv] */
    /* rotary tables [max_pos, rot/2] */
    float *cos_t, *sin_t;
    int64_t max_pos;
    float *inv_freq;
    /* activation arena */
    void *arena;
    int64_t arena_tokens, arena_rows, arena_gather; /* gather: rows the last layer finishes (>= rows) */
    pthread_mutex_t lock; /* one forward at a time: the arena is shared */
    /* activation tap (calibration): see vsr_model_set_tap */
    vsr_model_tap_fn tap;
    void *tap_ctx;
    float *tap_host;      /* host copy of the tapped input */
    size_t tap_host_cap;  /* floats */
    /* shape buckets (vsr_model_warm): 1 when forward_last pads to them */
    int buckets;
    int64_t bucket_limit;   /* tokens (rows x length) of the largest bucket padded to; larger run as they are */
    int64_t padded_forwards; /* forwards run padded to their bucket */
    int64_t max_len;        /* the package's longest input (tokens) */
    int64_t gather_tab_off; /* >= 0 while a bucketed forward runs: its gather indices in the row table */
};

/* ---- allocation bookkeeping ---- */

static vsr_status track_buf(vsr_model *m, void *p, vsr_err *err) {
    if (m->n_bufs == m->cap_bufs) {
        int nc = m->cap_bufs ? m->cap_bufs * 2 : 64;
        void **nb = realloc(m->bufs, sizeof *nb * (size_t)nc);
        if (!nb) {
            m->be.ops->buf_free(m->be.ctx, p);
            return vsr_err_set(err, VSR_E_NOMEM, "model: out of memory");
        }
        m->bufs = nb, m->cap_bufs = nc;
    }
    m->bufs[m->n_bufs++] = p;
    return VSR_OK;
}

static vsr_status track_w(vsr_model *m, vsr_bweight *w, vsr_err *err) {
    if (m->n_ws == m->cap_ws) {
        int nc = m->cap_ws ? m->cap_ws * 2 : 64;
        vsr_bweight **nw = realloc(m->ws, sizeof *nw * (size_t)nc);
        if (!nw) {
            m->be.ops->weight_free(m->be.ctx, w);
            return vsr_err_set(err, VSR_E_NOMEM, "model: out of memory");
        }
        m->ws = nw, m->cap_ws = nc;
    }
    m->ws[m->n_ws++] = w;
    m->weight_bytes += m->be.ops->weight_bytes(m->be.ctx, w);
    return VSR_OK;
}

/* ---- tensor lookup ---- */

static const vsr_tensor *find(const vsr_model *m, const char *mod, const char *param) {
    char name[512];
    snprintf(name, sizeof name, "%s%s%s%s", m->pkg->text_prefix, mod, param ? "." : "", param ? param : "");
    return vsr_weights_find(m->pkg->weights, name);
}

static vsr_status need_shape(const vsr_tensor *t, int ndim, const int64_t *shape, vsr_err *err) {
    bool ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = t->shape[i] == shape[i];
    if (ok) return VSR_OK;
    char want[128] = "", got[128] = "";
    for (int i = 0; i < ndim; i++)
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", i ? ", " : "", (long long)shape[i]);
    for (int i = 0; i < t->ndim; i++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    return vsr_err_set(err, VSR_E_FORMAT, "%s (%s): shape [%s], expected [%s]", t->name, t->file, got, want);
}

static vsr_status need_data(const vsr_tensor *t, vsr_err *err) {
    if (!t->data)
        return vsr_err_set(err, VSR_E_INVALID,
                           "%s: the package's weights are not mapped (call vsr_package_map before "
                           "vsr_model_load)",
                           t->name);
    int bytes = vsr_dtype_info(t->dtype)->bits / 8;
    if (bytes > 1 && (uintptr_t)t->data % (uintptr_t)bytes)
        return vsr_err_set(err, VSR_E_UNSUPPORTED,
                           "%s (%s): data at file offset %llu is not aligned to its %d-byte elements; "
                           "rewrite the file with the safetensors writer",
                           t->name, t->file, (unsigned long long)t->offset, bytes);
    return VSR_OK;
}

/* A small per-channel tensor (BF16, F16 or F32, numel n) widened to FP32 and uploaded. */
static vsr_status load_vec(vsr_model *m, const char *mod, const char *param, int ndim,
                           const int64_t *shape, float **out, vsr_err *err) {
    const vsr_tensor *t = find(m, mod, param);
    if (!t)
        return vsr_err_set(err, VSR_E_NOT_FOUND, "tensor %s%s%s%s is missing from the package",
                           m->pkg->text_prefix, mod, param ? "." : "", param ? param : "");
    vsr_status st = need_shape(t, ndim, shape, err);
    if (!st) st = need_data(t, err);
    if (st) return st;
    if (t->dtype != VSR_DT_BF16 && t->dtype != VSR_DT_F32 && t->dtype != VSR_DT_F16)
        return vsr_err_set(err, VSR_E_FORMAT, "%s: dtype %s, expected BF16, F16 or F32", t->name,
                           vsr_dtype_info(t->dtype)->name);
    float *h = malloc(sizeof(float) * (size_t)(t->numel ? t->numel : 1));
    if (!h) return vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory", t->name);
    const uint8_t *d = t->data;
    for (int64_t i = 0; i < t->numel; i++) {
        if (t->dtype == VSR_DT_F32) {
            memcpy(&h[i], d + 4 * i, 4);
        } else {
            uint16_t u;
            memcpy(&u, d + 2 * i, 2);
            h[i] = t->dtype == VSR_DT_BF16 ? vsr_bf16_to_f32(u) : vsr_f16_to_f32(u);
        }
    }
    st = m->be.ops->vec_upload(m->be.ctx, h, t->numel, out, err);
    free(h);
    if (st) return vsr_err_prefix(err, "%s", t->name);
    m->weight_bytes += (uint64_t)t->numel * sizeof(float);
    return track_buf(m, *out, err);
}

static vsr_status need_dtype(const vsr_tensor *t, vsr_dtype dt, vsr_err *err) {
    if (t->dtype == dt) return VSR_OK;
    return vsr_err_set(err, VSR_E_FORMAT, "%s (%s): dtype %s, expected %s", t->name, t->file,
                       vsr_dtype_info(t->dtype)->name, vsr_dtype_info(dt)->name);
}

/* One linear [N, K] in whichever stored form the package has: `.weight` (BF16, or FP8 with
 * `.weight_scale`), or `.weight_packed` (int4 I32 or NVFP4 U8) with its scales, checked and viewed
 * in place in the mapping. The backend decides whether it can run that form. */
static vsr_status linear_view(vsr_model *m, const char *mod, int64_t N, int64_t K, vsr_weight_view *out,
                              vsr_err *err) {
    vsr_weight_view v = {.N = N, .K = K};
    const vsr_tensor *w = find(m, mod, "weight"), *p = find(m, mod, "weight_packed");
    vsr_status st;
    if (w) {
        v.name = w->name;
        if ((st = need_shape(w, 2, (int64_t[]){N, K}, err)) || (st = need_data(w, err))) return st;
        v.w = w->data;
        if (w->dtype == VSR_DT_BF16) {
            v.kind = VSR_WK_BF16;
        } else if (w->dtype == VSR_DT_F8_E4M3) {
            v.kind = VSR_WK_FP8;
            const vsr_tensor *s = find(m, mod, "weight_scale");
            v.scale = s ? s->data : NULL;
        } else {
            return vsr_err_set(err, VSR_E_FORMAT, "%s: dtype %s, expected BF16 (or F8_E4M3 with weight_scale)",
                               w->name, vsr_dtype_info(w->dtype)->name);
        }
    } else if (p) {
        v.name = p->name;
        if (p->dtype == VSR_DT_U8) { /* NVFP4: the backend refuses or runs it */
            v.kind = VSR_WK_NVFP4;
            v.w = p->data;
        } else {
            if ((st = need_dtype(p, VSR_DT_I32, err))) return st;
            if (K % 8)
                return vsr_err_set(err, VSR_E_FORMAT, "%s: int4 needs in_features a multiple of 8 (K %lld)",
                                   p->name, (long long)K);
            int group = m->pkg->quant.group_size;
            int64_t gcols = group > 0 ? group : K;
            int64_t G = (K + gcols - 1) / gcols;
            if ((st = need_shape(p, 2, (int64_t[]){N, K / 8}, err)) || (st = need_data(p, err))) return st;
            const vsr_tensor *s = find(m, mod, "weight_scale");
            if (!s) return vsr_err_set(err, VSR_E_NOT_FOUND, "%s: weight_scale is missing", p->name);
            if ((st = need_dtype(s, VSR_DT_BF16, err)) || (st = need_shape(s, 2, (int64_t[]){N, G}, err)) ||
                (st = need_data(s, err)))
                return st;
            const vsr_tensor *sh = find(m, mod, "weight_shape");
            if (sh && sh->data && sh->numel == 2 && (sh->dtype == VSR_DT_I64 || sh->dtype == VSR_DT_I32)) {
                int64_t n0, k0;
                if (sh->dtype == VSR_DT_I64) {
                    memcpy(&n0, sh->data, 8);
                    memcpy(&k0, (const char *)sh->data + 8, 8);
                } else {
                    int32_t a[2];
                    memcpy(a, sh->data, 8);
                    n0 = a[0], k0 = a[1];
                }
                if (n0 != N || k0 != K)
                    return vsr_err_set(err, VSR_E_FORMAT, "%s: weight_shape is [%lld, %lld], expected [%lld, %lld]",
                                       sh->name, (long long)n0, (long long)k0, (long long)N, (long long)K);
            }
            const vsr_tensor *zp = find(m, mod, "weight_zero_point");
            if (zp) {
                if ((st = need_dtype(zp, VSR_DT_I32, err)) ||
                    (st = need_shape(zp, 2, (int64_t[]){(N + 7) / 8, G}, err)) || (st = need_data(zp, err)))
                    return st;
            } else if (!m->pkg->quant.symmetric) {
                return vsr_err_set(err, VSR_E_NOT_FOUND, "%s: asymmetric int4 needs weight_zero_point", p->name);
            }
            const vsr_tensor *gi = find(m, mod, "weight_g_idx");
            if (gi) {
                if ((st = need_dtype(gi, VSR_DT_I32, err)) || (st = need_shape(gi, 1, (int64_t[]){K}, err)) ||
                    (st = need_data(gi, err)))
                    return st;
                const int32_t *g = gi->data;
                for (int64_t k = 0; k < K; k++)
                    if (g[k] < -1 || g[k] >= G)
                        return vsr_err_set(err, VSR_E_FORMAT, "%s: g_idx[%lld] = %d is outside [0, %lld)",
                                           gi->name, (long long)k, g[k], (long long)G);
            }
            v.kind = VSR_WK_INT4;
            v.w = p->data;
            v.scale = s->data;
            v.zp = zp ? zp->data : NULL;
            v.g_idx = gi ? gi->data : NULL;
            v.group = group > 0 ? group : -1;
        }
    } else {
        return vsr_err_set(err, VSR_E_NOT_FOUND,
                           "tensor %s%s.weight (or .weight_packed) is missing from the package",
                           m->pkg->text_prefix, mod);
    }
    *out = v;
    return VSR_OK;
}

static vsr_status load_linear(vsr_model *m, const char *mod, int64_t N, int64_t K, vsr_bweight **out,
                              vsr_err *err) {
    vsr_weight_view v;
    vsr_status st;
    if ((st = linear_view(m, mod, N, K, &v, err)) || (st = m->be.ops->weight_upload(m->be.ctx, &v, out, err))) return st;
    return track_w(m, *out, err);
}

/* Linears reading the same input as one weight where the backend stacks them (one GEMM reads the
 * input once and fills the wide output's column slices), else apart. parts[i] goes to *sep[i]
 * when not stacked. Stacked only for BF16, FP8 and int4 parts of one kind (act-order int4 parts
 * with their own g_idx are refused by the backend and stay apart). */
static vsr_status load_stacked(vsr_model *m, vsr_weight_view *parts, int n, vsr_bweight **stacked,
                               vsr_bweight **const *sep, vsr_err *err) {
    vsr_status st;
    vsr_wkind k = parts[0].kind;
    int same = k == VSR_WK_BF16 || k == VSR_WK_FP8 || k == VSR_WK_INT4;
    for (int i = 1; i < n; i++) same &= parts[i].kind == k;
    *stacked = NULL;
    if (m->be.ops->weight_upload_cat && same) {
        st = m->be.ops->weight_upload_cat(m->be.ctx, parts, n, stacked, err);
        if (!st) return track_w(m, *stacked, err);
        if (st != VSR_E_UNSUPPORTED) return st;
        *stacked = NULL;
    }
    for (int i = 0; i < n; i++)
        if ((st = m->be.ops->weight_upload(m->be.ctx, &parts[i], sep[i], err)) || (st = track_w(m, *sep[i], err)))
            return st;
    return VSR_OK;
}

/* gate_proj and up_proj as one [2I, D] weight where the backend stacks them (one GEMM reads the
 * MLP input once; swiglu reads the two halves of its output row), else apart. */
static vsr_status load_mlp_in(vsr_model *m, layer *L, int l, vsr_err *err) {
    char g[128], u[128];
    snprintf(g, sizeof g, "layers.%d.mlp.gate_proj", l);
    snprintf(u, sizeof u, "layers.%d.mlp.up_proj", l);
    vsr_weight_view parts[2];
    vsr_status st;
    if ((st = linear_view(m, g, m->I, m->D, &parts[0], err)) || (st = linear_view(m, u, m->I, m->D, &parts[1], err)))
        return st;
    vsr_bweight **sep[2] = {&L->gate, &L->up};
    return load_stacked(m, parts, 2, &L->gate_up, sep, err);
}

/* The DeltaNet input projections in_proj_qkv | in_proj_z | in_proj_b | in_proj_a, stacked like the MLP's. */
static vsr_status load_dn_in(vsr_model *m, layer *L, int l, vsr_err *err) {
    static const char *const names[4] = {"in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a"};
    const int64_t Ns[4] = {m->C, m->Vd, m->Hv, m->Hv};
    vsr_weight_view parts[4];
    vsr_status st;
    for (int i = 0; i < 4; i++) {
        char mod[128];
        snprintf(mod, sizeof mod, "layers.%d.linear_attn.%s", l, names[i]);
        if ((st = linear_view(m, mod, Ns[i], m->D, &parts[i], err))) return st;
    }
    vsr_bweight **sep[4] = {&L->qkv, &L->z, &L->b, &L->a};
    if (parts[0].kind == parts[2].kind) return load_stacked(m, parts, 4, &L->in_all, sep, err);
    /* parts of two kinds (W4A16 keeps in_proj_b, in_proj_a in BF16): qkv|z and b|a, each stacked where it can be */
    if ((st = load_stacked(m, parts, 2, &L->in_qz, sep, err))) return st;
    return load_stacked(m, parts + 2, 2, &L->in_ba, sep + 2, err);
}

/* ---- rotary tables ---- */

/* Rebuilds cos/sin for positions [0, n) as transformers computes them: inv_freq in FP32
 * (1 / theta^(2i/rot)), angle = float(pos) * inv_freq in FP32, then cos/sin in FP32.
 * Text-only M-RoPE gives every section the same position, so the interleave is a no-op. */
static vsr_status rope_tables(vsr_model *m, int64_t n, vsr_err *err) {
    if (n <= m->max_pos) return VSR_OK;
    int half = m->rot / 2;
    size_t bytes = sizeof(float) * (size_t)n * (size_t)half;
    float *hc = malloc(bytes), *hs = malloc(bytes);
    void *dc = NULL, *ds = NULL;
    vsr_status st = VSR_OK;
    if (!hc || !hs) {
        st = vsr_err_set(err, VSR_E_NOMEM, "rotary tables for %lld positions: out of memory", (long long)n);
        goto out;
    }
    for (int64_t p = 0; p < n; p++)
        for (int i = 0; i < half; i++) {
            float ang = (float)p * m->inv_freq[i];
            hc[p * half + i] = cosf(ang);
            hs[p * half + i] = sinf(ang);
        }
    if ((st = m->be.ops->buf_alloc(m->be.ctx, bytes, &dc, err)) ||
        (st = m->be.ops->buf_alloc(m->be.ctx, bytes, &ds, err)) ||
        (st = m->be.ops->buf_set(m->be.ctx, dc, hc, bytes, err)) ||
        (st = m->be.ops->buf_set(m->be.ctx, ds, hs, bytes, err)))
        goto out;
    m->be.ops->buf_free(m->be.ctx, m->cos_t);
    m->be.ops->buf_free(m->be.ctx, m->sin_t);
    m->cos_t = dc, m->sin_t = ds, m->max_pos = n;
    dc = ds = NULL;
out:
    if (dc) m->be.ops->buf_free(m->be.ctx, dc);
    if (ds) m->be.ops->buf_free(m->be.ctx, ds);
    free(hc);
    free(hs);
    return st;
}

/* ---- the activation arena ---- */

/* Buffers carved from one allocation, for T packed tokens and R rows:
 *   x [T, D] residual            h [T, D] normed input
 *   t0 [T, max(C, 2Hd, Vd)] (or the stacked input projections' width)  t1 [T, max(C, Hd)]
 *   t2, t3 [T, max(Vd, Hkv d)]
 *   t4 [T, Hd]                   tb, ta [T, Hv] (tb [T, 2Hv] when b|a are stacked)
 *   mg, mu [min(T, MLP_CHUNK), I]  MLP intermediates
 *   xl, cl [G, max(D, Vd, Hd, 255)] gathered rows of the final layer (each row's last token, or
 *                                the positions vsr_model_forward_gather asks for); logits
 *   st [R, Hv, dk, dv]           per-row DeltaNet state */
typedef struct arena {
    float *x, *h, *t0, *t1, *t2, *t3, *t4, *tb, *ta, *mg, *mu, *xl, *cl, *st;
} arena;

static int64_t max3(int64_t a, int64_t b, int64_t c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }

static int64_t mlp_chunk(const vsr_model *m) { return m->be.ops->mlp_rows > 0 ? m->be.ops->mlp_rows : MLP_CHUNK; }

static size_t arena_layout(const vsr_model *m, int64_t T, int64_t R, int64_t G, arena *a, float *base) {
    int64_t w0 = max3(m->C, 2LL * m->H * m->hd, m->Vd), w1 = max3(m->C, (int64_t)m->H * m->hd, 0);
    if (m->in_stacked && w0 < m->C + m->Vd + 2LL * m->Hv) w0 = m->C + m->Vd + 2LL * m->Hv;
    if (m->qz_stacked && w0 < m->C + m->Vd) w0 = m->C + m->Vd;
    int64_t w2 = max3(m->Vd, (int64_t)m->Hkv * m->hd, 0), w4 = (int64_t)m->H * m->hd;
    int64_t wl = max3(max3(m->D, m->Vd, w4), VSR_D3_CODES, 0), ch = T < mlp_chunk(m) ? T : mlp_chunk(m);
    int64_t sizes[] = {T * m->D, T * m->D, T * w0, T * w1, T * w2, T * w2, T * w4, T * m->Hv * (m->ba_stacked ? 2 : 1), T * m->Hv,
                       ch * m->I * (m->mlp_stacked ? 2 : 1), ch * m->I, G * wl, G * wl, R * m->Hv * m->dk * m->dv};
    float **slots[] = {&a->x, &a->h, &a->t0, &a->t1, &a->t2, &a->t3, &a->t4, &a->tb, &a->ta,
                       &a->mg, &a->mu, &a->xl, &a->cl, &a->st};
    _Static_assert(sizeof sizes / sizeof *sizes == sizeof slots / sizeof *slots, "one size per slot");
    size_t off = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        if (base) *slots[i] = base + off;
        off += ((size_t)sizes[i] + 15) & ~(size_t)15; /* 64-byte aligned slots */
    }
    return off * sizeof(float);
}

static vsr_status arena_reserve(vsr_model *m, int64_t T, int64_t R, int64_t G, vsr_err *err) {
    if (G < R) G = R;
    if (T <= m->arena_tokens && R <= m->arena_rows && G <= m->arena_gather) return VSR_OK;
    if (T < m->arena_tokens) T = m->arena_tokens;
    if (R < m->arena_rows) R = m->arena_rows;
    if (G < m->arena_gather) G = m->arena_gather;
    size_t bytes = arena_layout(m, T, R, G, &(arena){0}, NULL);
    void *p;
    vsr_status st = m->be.ops->buf_alloc(m->be.ctx, bytes, &p, err);
    if (st) return vsr_err_prefix(err, "activations for %lld tokens x %lld rows", (long long)T, (long long)R);
    m->be.ops->buf_free(m->be.ctx, m->arena);
    m->arena = p, m->arena_tokens = T, m->arena_rows = R, m->arena_gather = G;
    return VSR_OK;
}

/* ---- load ---- */

void vsr_model_free(vsr_model *m) {
    if (!m) return;
    if (m->be.ops) {
        for (int i = 0; i < m->n_ws; i++) m->be.ops->weight_free(m->be.ctx, m->ws[i]);
        for (int i = 0; i < m->n_bufs; i++) m->be.ops->buf_free(m->be.ctx, m->bufs[i]);
        m->be.ops->buf_free(m->be.ctx, m->cos_t);
        m->be.ops->buf_free(m->be.ctx, m->sin_t);
        m->be.ops->buf_free(m->be.ctx, m->arena);
        vsr_backend_destroy(&m->be);
    }
    vsr_st_close(m->readout_file);
    free(m->ws);
    free(m->bufs);
    free(m->layers);
    free(m->inv_freq);
    free(m->tap_host);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

static vsr_status load_layer(vsr_model *m, int l, vsr_err *err) {
    layer *L = &m->layers[l];
    char mod[128];
    vsr_status st;
    L->type = m->c.layer_types[l];
    const int64_t D = m->D;
#define P(fmt) (snprintf(mod, sizeof mod, "layers.%d." fmt, l), mod)
    if ((st = load_vec(m, P("input_layernorm"), "weight", 1, (int64_t[]){D}, &L->in_norm, err)) ||
        (st = load_vec(m, P("post_attention_layernorm"), "weight", 1, (int64_t[]){D}, &L->post_norm, err)))
        return st;
    if (L->type == VSR_LAYER_LINEAR_ATTENTION) {
        if ((st = load_dn_in(m, L, l, err)) || (st = load_linear(m, P("linear_attn.out_proj"), D, m->Vd, &L->out, err)) ||
            (st = load_vec(m, P("linear_attn.conv1d"), "weight", 3, (int64_t[]){m->C, 1, m->Kc}, &L->conv_w, err)) ||
            (st = load_vec(m, P("linear_attn.A_log"), NULL, 1, (int64_t[]){m->Hv}, &L->A_log, err)) ||
            (st = load_vec(m, P("linear_attn.dt_bias"), NULL, 1, (int64_t[]){m->Hv}, &L->dt_bias, err)) ||
            (st = load_vec(m, P("linear_attn.norm"), "weight", 1, (int64_t[]){m->dv}, &L->gnorm, err)))
            return st;
    } else {
        int64_t Hd = (int64_t)m->H * m->hd, KVd = (int64_t)m->Hkv * m->hd;
        if ((st = load_linear(m, P("self_attn.q_proj"), 2 * Hd, D, &L->q, err)) ||
            (st = load_linear(m, P("self_attn.k_proj"), KVd, D, &L->k, err)) ||
            (st = load_linear(m, P("self_attn.v_proj"), KVd, D, &L->v, err)) ||
            (st = load_linear(m, P("self_attn.o_proj"), D, Hd, &L->o, err)) ||
            (st = load_vec(m, P("self_attn.q_norm"), "weight", 1, (int64_t[]){m->hd}, &L->q_norm, err)) ||
            (st = load_vec(m, P("self_attn.k_norm"), "weight", 1, (int64_t[]){m->hd}, &L->k_norm, err)))
            return st;
        if (find(m, P("self_attn.q_proj"), "bias"))
            return vsr_err_set(err, VSR_E_UNSUPPORTED, "%s.bias: attention biases are not supported (attention_bias "
                               "is false in qwen3_5)", mod);
    }
    if ((st = load_mlp_in(m, L, l, err)) || (st = load_linear(m, P("mlp.down_proj"), D, m->I, &L->down, err)))
        return st;
    if (L->gate_up) m->mlp_stacked = 1;
    if (L->in_all) m->in_stacked = 1;
    if (L->in_qz) m->qz_stacked = 1;
    if (L->in_ba) m->ba_stacked = 1;
#undef P
    return VSR_OK;
}

static vsr_status load_readout(vsr_model *m, vsr_err *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/readout.safetensors", m->pkg->path);
    vsr_status st = vsr_st_open(path, "readout.safetensors", &m->readout_file, err);
    if (st) return st;
    const vsr_tensor *t = vsr_st_find(m->readout_file, "weight");
    if (!t) return vsr_err_set(err, VSR_E_NOT_FOUND, "readout.safetensors: tensor \"weight\" is missing");
    if ((st = need_shape(t, 2, (int64_t[]){VSR_D3_CODES, m->D}, err)) || (st = need_data(t, err))) return st;
    vsr_weight_view v = {.N = VSR_D3_CODES, .K = m->D, .w = t->data, .name = "readout.safetensors:weight"};
    if (t->dtype == VSR_DT_F32) v.kind = VSR_WK_F32;
    else if (t->dtype == VSR_DT_BF16) v.kind = VSR_WK_BF16;
    else
        return vsr_err_set(err, VSR_E_FORMAT, "readout.safetensors: weight dtype %s, expected F32 or BF16",
                           vsr_dtype_info(t->dtype)->name);
    const char *want = m->pkg->decision.readout_dtype;
    if (want[0] && strcmp(want, v.kind == VSR_WK_F32 ? "float32" : "bfloat16"))
        return vsr_err_set(err, VSR_E_FORMAT, "readout.safetensors: weight is %s but decision_config.json says "
                           "readout_dtype \"%s\"", vsr_dtype_info(t->dtype)->name, want);
    if ((st = m->be.ops->weight_upload(m->be.ctx, &v, &m->readout, err))) return st;
    return track_w(m, m->readout, err);
}

vsr_status vsr_model_load(const vsr_package *pkg, const vsr_model_opts *opts, vsr_model **out, vsr_err *err) {
    *out = NULL;
    if (!pkg) return vsr_err_set(err, VSR_E_INVALID, "model: no package");
    if (!pkg->weights)
        return vsr_err_set(err, VSR_E_INVALID, "%s: the package has no weights open", pkg->path);
    /* vela2: the backbone alone (backbone.*, plain positions, causal); its heads are src/vela2/model.c's. */
    if (pkg->family != VSR_FAMILY_DECISION3 && pkg->family != VSR_FAMILY_VELA2)
        return vsr_err_set(err, VSR_E_UNSUPPORTED, "%s: family %s has no model implementation here (expected "
                           "decision3 or vela2)", pkg->path, vsr_family_name(pkg->family));
    vsr_model_opts o = opts ? *opts : (vsr_model_opts){0};
    const vsr_text_config *c = &pkg->config.text;
    if (c->num_hidden_layers <= 0 || c->num_hidden_layers > VSR_MAX_LAYERS || c->hidden_size <= 0)
        return vsr_err_set(err, VSR_E_FORMAT, "%s: text_config has %d layers of hidden size %lld", pkg->path,
                           c->num_hidden_layers, (long long)c->hidden_size);
    if (strcmp(c->hidden_act, "silu") && c->hidden_act[0])
        return vsr_err_set(err, VSR_E_UNSUPPORTED, "%s: hidden_act \"%s\" (only silu)", pkg->path, c->hidden_act);
    vsr_model *m = calloc(1, sizeof *m);
    if (!m) return vsr_err_set(err, VSR_E_NOMEM, "model: out of memory");
    pthread_mutex_init(&m->lock, NULL);
    m->pkg = pkg;
    m->c = *c;
    m->causal = strcmp(pkg->decision.attention_mode, "noncausal_full_attention") != 0;
    m->D = c->hidden_size, m->I = c->intermediate_size;
    m->H = c->num_attention_heads, m->Hkv = c->num_key_value_heads, m->hd = c->head_dim;
    m->rot = (int)(c->head_dim * c->partial_rotary_factor);
    m->Hk = c->linear_num_key_heads, m->Hv = c->linear_num_value_heads;
    m->dk = c->linear_key_head_dim, m->dv = c->linear_value_head_dim, m->Kc = c->linear_conv_kernel_dim;
    m->Kd = vsr_text_linear_key_dim(c), m->Vd = vsr_text_linear_value_dim(c), m->C = 2 * m->Kd + m->Vd;
    m->eps = (float)c->rms_norm_eps;
    vsr_status st;
    if (vsr_text_count_layers(c, VSR_LAYER_FULL_ATTENTION) &&
        (m->H <= 0 || m->Hkv <= 0 || m->H % m->Hkv || m->rot % 2 || m->rot <= 0 || m->rot > m->hd)) {
        st = vsr_err_set(err, VSR_E_FORMAT, "%s: attention heads %d over %d kv heads with %d rotary dims of %d",
                         pkg->path, m->H, m->Hkv, m->rot, m->hd);
        goto fail;
    }
    if (vsr_text_count_layers(c, VSR_LAYER_LINEAR_ATTENTION) &&
        (m->Hk <= 0 || m->Hv % m->Hk || m->Kc <= 0 || m->dk <= 0 || m->dv <= 0)) {
        st = vsr_err_set(err, VSR_E_FORMAT, "%s: linear attention %d value heads over %d key heads, conv %d",
                         pkg->path, m->Hv, m->Hk, m->Kc);
        goto fail;
    }
    /* The device's backend, or a refusal naming why (never a silent CPU fallback). */
    if ((st = vsr_backend_for_device(o.device, o.threads, o.dtype, o.autotune_cache, &m->be, err))) goto fail;

    if (!(m->layers = calloc((size_t)c->num_hidden_layers, sizeof *m->layers))) {
        st = vsr_err_set(err, VSR_E_NOMEM, "model: out of memory");
        goto fail;
    }
    const vsr_tensor *emb = find(m, "embed_tokens", "weight");
    if (!emb) {
        st = vsr_err_set(err, VSR_E_NOT_FOUND, "tensor %sembed_tokens.weight is missing", pkg->text_prefix);
        goto fail;
    }
    if ((st = need_shape(emb, 2, (int64_t[]){c->vocab_size, m->D}, err)) || (st = need_data(emb, err)) ||
        (st = need_dtype(emb, VSR_DT_BF16, err)))
        goto fail;
    vsr_weight_view ev = {.kind = VSR_WK_BF16, .N = c->vocab_size, .K = m->D, .w = emb->data, .name = emb->name};
    if ((st = m->be.ops->weight_upload(m->be.ctx, &ev, &m->embed, err)) || (st = track_w(m, m->embed, err)))
        goto fail;
    for (int l = 0; l < c->num_hidden_layers; l++)
        if ((st = load_layer(m, l, err))) goto fail;
    if ((st = load_vec(m, "norm", "weight", 1, (int64_t[]){m->D}, &m->final_norm, err))) goto fail;
    if (pkg->family == VSR_FAMILY_DECISION3 && (st = load_readout(m, err))) goto fail;

    if (m->rot > 0) {
        int half = m->rot / 2;
        if (!(m->inv_freq = malloc(sizeof(float) * (size_t)half))) {
            st = vsr_err_set(err, VSR_E_NOMEM, "model: out of memory");
            goto fail;
        }
        for (int i = 0; i < half; i++)
            m->inv_freq[i] = 1.0f / powf((float)c->rope_theta, (float)(2 * i) / (float)m->rot);
    }
    /* Sized for the largest batch: 8 rows of the longest input; lazily committed pages, so
     * only what a forward touches is resident. Halved until it fits; grows on demand. */
    int64_t max_tokens = pkg->decision.max_length > 0 ? pkg->decision.max_length : c->max_position_embeddings;
    if (pkg->vela2) max_tokens = pkg->vela2->max_length;
    if (max_tokens <= 0) max_tokens = 4096;
    if (m->rot > 0 && (st = rope_tables(m, max_tokens, err))) goto fail;
    m->max_len = max_tokens;
    m->gather_tab_off = -1;
    m->bucket_limit = BUCKET_DEFAULT_LIMIT;
    /* Shape buckets where forwards are recorded; VSR_BUCKETS=0 turns them off, =1 on for any backend
     * (tests: the CPU pads as the GPU does). */
    const char *bk = getenv("VSR_BUCKETS");
    m->buckets = pkg->family == VSR_FAMILY_DECISION3 &&
                 (bk && *bk ? strcmp(bk, "0") != 0
                            : m->be.ops->graph_begin && m->be.ops->rows_stage && m->be.ops->gather_rows_staged);
    for (int64_t T = MAX_ROWS_PLANNED * max_tokens;; T /= 2) {
        if (!(st = arena_reserve(m, T, MAX_ROWS_PLANNED, MAX_ROWS_PLANNED, err))) break;
        if (T <= 512) goto fail;
    }
    *out = m;
    return VSR_OK;
fail:
    vsr_model_free(m);
    return st;
}

int64_t vsr_model_hidden_size(const vsr_model *m) { return m ? m->D : 0; }

uint64_t vsr_model_memory_bytes(const vsr_model *m) { return m ? m->weight_bytes : 0; }

/* ---- forward ---- */

#define B m->be.ops
#define X m->be.ctx

/* The next op writes x [rows, K], the input of linears (see feed_linears in backend.h); when
 * `readers` (NULL-terminated, up to 4) are all that will ever read x, the backend may skip x's
 * FP32 copy. */
static void feed(vsr_model *m, const float *x, int64_t rows, int64_t K, const vsr_bweight *r0, const vsr_bweight *r1,
                 const vsr_bweight *r2, const vsr_bweight *r3) {
    const vsr_bweight *rd[4] = {r0, r1, r2, r3};
    int n = 0;
    while (n < 4 && rd[n]) n++;
    if (m->tap) n = 0; /* the tap reads the FP32 x too */
    if (B->feed_linears) B->feed_linears(X, x, rows, K, rd, n);
}

void vsr_model_set_tap(vsr_model *m, vsr_model_tap_fn fn, void *ctx) {
    if (!m) return;
    pthread_mutex_lock(&m->lock);
    m->tap = fn, m->tap_ctx = ctx;
    pthread_mutex_unlock(&m->lock);
}

/* Hands x [rows, K] (the input of the linears `what`, a NULL-terminated list of module names
 * under layers.<l>.) to the tap, copied to the host once. */
static vsr_status tap(vsr_model *m, const layer *L, const float *x, int64_t rows, int64_t K, vsr_err *err,
                      const char *const *what) {
    if (!m->tap) return VSR_OK;
    size_t n = (size_t)rows * (size_t)K;
    if (n > m->tap_host_cap) {
        float *nb = realloc(m->tap_host, sizeof(float) * n);
        if (!nb) return vsr_err_set(err, VSR_E_NOMEM, "model: out of memory for the activation tap");
        m->tap_host = nb, m->tap_host_cap = n;
    }
    vsr_status st = B->buf_get(X, m->tap_host, x, sizeof(float) * n, err);
    if (st) return st;
    for (; *what; what++) {
        char name[512];
        snprintf(name, sizeof name, "%slayers.%d.%s", m->pkg->text_prefix, (int)(L - m->layers), *what);
        m->tap(m->tap_ctx, name, m->tap_host, rows, K);
    }
    return VSR_OK;
}
#define TAP(x, rows, K, ...) tap(m, L, (x), (rows), (K), err, (const char *const[]){__VA_ARGS__, NULL})
#define NONE NULL, NULL, NULL, NULL

/* Gated DeltaNet over h [T, D]; leaves the out_proj input in *core [T, Vd]. */
static vsr_status deltanet_layer(vsr_model *m, const layer *L, const arena *a, int64_t T, const vsr_segs *sg,
                                 int last, float **core, vsr_err *err) {
    vsr_status st;
    /* The input projections: one stacked GEMM into t0 [T, C + Vd + 2Hv] (qkv | z | b | a per row),
     * or qkv (with z stacked: t0 [T, C + Vd]; else apart: qkv into t0, z into t2) and b, a (stacked:
     * tb [T, 2Hv]; else apart: into tb, ta). The ops after read their slices at a row stride either
     * way; the gated norm writes wherever z is not. */
    const float *z, *bb, *aa;
    int64_t qs, zs, bs;
    float *out;
    if ((st = TAP(a->h, T, m->D, "linear_attn.in_proj_qkv", "linear_attn.in_proj_z", "linear_attn.in_proj_b",
                  "linear_attn.in_proj_a")))
        return st;
    if (L->in_all) {
        qs = zs = bs = m->C + m->Vd + 2LL * m->Hv;
        z = a->t0 + m->C, bb = z + m->Vd, aa = bb + m->Hv, out = a->t2;
        if (B->keep_product_bf16) B->keep_product_bf16(X, a->t0, T, qs); /* read by conv, deltanet, gated norm only */
        if ((st = B->linear(X, a->h, T, L->in_all, a->t0, 0, err))) return st;
    } else {
        if (L->in_qz) {
            qs = zs = m->C + m->Vd;
            z = a->t0 + m->C, out = a->t2;
            if ((st = B->linear(X, a->h, T, L->in_qz, a->t0, 0, err))) return st;
        } else {
            qs = m->C, zs = m->Vd;
            z = a->t2, out = a->t0; /* qkv in t0 is dead once the conv has run */
            if ((st = B->linear(X, a->h, T, L->qkv, a->t0, 0, err)) || (st = B->linear(X, a->h, T, L->z, a->t2, 0, err)))
                return st;
        }
        if (L->in_ba) {
            bs = 2LL * m->Hv, bb = a->tb, aa = a->tb + m->Hv;
            if ((st = B->linear(X, a->h, T, L->in_ba, a->tb, 0, err))) return st;
        } else {
            bs = m->Hv, bb = a->tb, aa = a->ta;
            if ((st = B->linear(X, a->h, T, L->b, a->tb, 0, err)) || (st = B->linear(X, a->h, T, L->a, a->ta, 0, err)))
                return st;
        }
    }
    if ((st = B->conv1d_silu(X, a->t0, qs, sg, m->C, L->conv_w, m->Kc, a->t1, err)) ||
        (st = B->deltanet(X, a->t1, m->C, bb, aa, bs, L->A_log, L->dt_bias, sg, m->Hk, m->Hv, m->dk, m->dv, a->st,
                          a->t3, err)) ||
        (feed(m, out, T, m->Vd, last ? NULL : L->out, NULL, NULL, NULL), 0) ||
        (st = B->rmsnorm_gated(X, a->t3, z, m->Hv, zs, T * m->Hv, m->dv, L->gnorm, m->eps, out, err)) ||
        (st = TAP(out, T, m->Vd, "linear_attn.out_proj")))
        return st;
    *core = out;
    return VSR_OK;
}

/* Gated full attention over h [T, D]; leaves the o_proj input in *core [T, H*d]. */
static vsr_status attention_layer(vsr_model *m, const layer *L, const arena *a, int64_t T, const vsr_segs *sg,
                                  int last, float **core, vsr_err *err) {
    const int H = m->H, Hkv = m->Hkv, d = m->hd;
    vsr_status st;
    /* q_proj rows hold per head [q (d) | gate (d)]: (token, head) pairs are rows of 2d. */
    if ((st = TAP(a->h, T, m->D, "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")) ||
        (st = B->linear(X, a->h, T, L->q, a->t0, 0, err)) ||
        (st = B->rmsnorm(X, a->t0, 2 * d, T * H, d, L->q_norm, 1.0f, m->eps, a->t1, d, err)) ||
        (st = B->linear(X, a->h, T, L->k, a->t2, 0, err)) ||
        (st = B->rmsnorm(X, a->t2, d, T * Hkv, d, L->k_norm, 1.0f, m->eps, a->t2, d, err)) ||
        (st = B->linear(X, a->h, T, L->v, a->t3, 0, err)) ||
        (st = B->rope(X, a->t1, (int64_t)H * d, sg, H, d, m->rot, m->cos_t, m->sin_t, m->max_pos, err)) ||
        (st = B->rope(X, a->t2, (int64_t)Hkv * d, sg, Hkv, d, m->rot, m->cos_t, m->sin_t, m->max_pos, err)) ||
        (st = B->attention(X, a->t1, (int64_t)H * d, a->t2, a->t3, sg, H, Hkv, d, 1.0f / sqrtf((float)d),
                           m->causal, a->t4, err)) ||
        (feed(m, a->t4, T, (int64_t)H * d, last ? NULL : L->o, NULL, NULL, NULL), 0) ||
        (st = B->mul_sigmoid(X, a->t4, T, H, d, a->t0 + d, 2LL * H * d, 2LL * d, err)) ||
        (st = TAP(a->t4, T, (int64_t)H * d, "self_attn.o_proj")))
        return st;
    *core = a->t4;
    return VSR_OK;
}

/* x [T, D] += down(silu(gate(h)) * up(h)), h = RMSNorm(x), in chunks of MLP_CHUNK tokens. */
static vsr_status mlp(vsr_model *m, const layer *L, const arena *a, float *x, float *h, int64_t T, vsr_err *err) {
    vsr_status st;
    /* one step reads all of h: the gate/up linears are its only readers */
    if (T <= mlp_chunk(m)) feed(m, h, T, m->D, L->gate_up ? L->gate_up : L->gate, L->gate_up ? NULL : L->up, NULL, NULL);
    else feed(m, h, T, m->D, NONE);
    if ((st = B->rmsnorm(X, x, m->D, T, m->D, L->post_norm, 1.0f, m->eps, h, m->D, err))) return st;
    const int64_t chunk = mlp_chunk(m);
    for (int64_t t0 = 0; t0 < T; t0 += chunk) {
        int64_t n = T - t0 < chunk ? T - t0 : chunk;
        const float *hc = h + t0 * m->D;
        /* gate and up: one stacked GEMM into mg [n, 2I] (gate | up per row; SwiGLU into mu), or two
         * into mg and mu (SwiGLU in place in mg) */
        const float *g = a->mg, *u;
        int64_t gs;
        float *y;
        if ((st = TAP(hc, n, m->D, "mlp.gate_proj", "mlp.up_proj"))) return st;
        if (L->gate_up && B->linear_swiglu) { /* the backend runs the product and SwiGLU as one op */
            if ((feed(m, a->mu, n, m->I, L->down, NULL, NULL, NULL), 0) ||
                (st = B->linear_swiglu(X, hc, n, L->gate_up, a->mg, a->mu, err)) ||
                (st = TAP(a->mu, n, m->I, "mlp.down_proj")) ||
                (st = B->linear(X, a->mu, n, L->down, x + t0 * m->D, 1, err)))
                return st;
            continue;
        }
        if (L->gate_up) {
            u = a->mg + m->I, gs = 2 * m->I, y = a->mu;
            if ((st = B->linear(X, hc, n, L->gate_up, a->mg, 0, err))) return st;
        } else {
            u = a->mu, gs = m->I, y = a->mg;
            if ((st = B->linear(X, hc, n, L->gate, a->mg, 0, err)) || (st = B->linear(X, hc, n, L->up, a->mu, 0, err)))
                return st;
        }
        if ((feed(m, y, n, m->I, L->down, NULL, NULL, NULL), 0) || (st = B->swiglu(X, g, u, gs, n, m->I, y, err)) ||
            (st = TAP(y, n, m->I, "mlp.down_proj")) || (st = B->linear(X, y, n, L->down, x + t0 * m->D, 1, err)))
            return st;
    }
    return VSR_OK;
}

/* gather_rows; in a bucketed forward, with the indices the backend reads from the staged row table. */
static vsr_status gather(vsr_model *m, const float *src, const int64_t *rows, int64_t n, int64_t D, float *dst,
                         vsr_err *err) {
    if (m->gather_tab_off >= 0 && B->gather_rows_staged)
        return B->gather_rows_staged(X, src, rows, m->gather_tab_off, n, D, dst, err);
    return B->gather_rows(X, src, rows, n, D, dst, err);
}

/* The forward's device work, embedding to readout: the final-norm hidden rows of the G gathered
 * tokens (`last`: indices into the packed tokens) into a->h, the logits (when asked) into a->cl. */
static vsr_status run_ops(vsr_model *m, const arena *a, int64_t G, int64_t T, const int32_t *all, const vsr_segs *sg,
                          const int64_t *last, int want_logits, vsr_err *err) {
    vsr_status st;
    if ((st = B->embed(X, m->embed, all, T, a->x, err))) return st;
    const int nl = m->c.num_hidden_layers;
    for (int l = 0; l < nl; l++) {
        const layer *L = &m->layers[l];
        float *core;
        if (L->type == VSR_LAYER_LINEAR_ATTENTION) { /* the input projections, stacked or apart: at most four */
            const vsr_bweight *in[7] = {L->in_all, L->in_qz, L->qkv, L->z, L->in_ba, L->b, L->a}, *rd[4] = {0};
            for (int i = 0, n = 0; i < 7; i++)
                if (in[i] && n < 4) rd[n++] = in[i];
            feed(m, a->h, T, m->D, rd[0], rd[1], rd[2], rd[3]);
        } else
            feed(m, a->h, T, m->D, L->q, L->k, L->v, NULL);
        if ((st = B->rmsnorm(X, a->x, m->D, T, m->D, L->in_norm, 1.0f, m->eps, a->h, m->D, err))) return st;
        /* the last layer gathers its core rows in FP32: their linear is not the only reader. While
         * tapping, it runs on all tokens like the others (calibration sees every token). */
        const int last_rows = l + 1 == nl && !m->tap;
        st = L->type == VSR_LAYER_LINEAR_ATTENTION ? deltanet_layer(m, L, a, T, sg, last_rows, &core, err)
                                                   : attention_layer(m, L, a, T, sg, last_rows, &core, err);
        if (st) return st;
        const vsr_bweight *Wout = L->type == VSR_LAYER_LINEAR_ATTENTION ? L->out : L->o;
        int64_t cw = L->type == VSR_LAYER_LINEAR_ATTENTION ? m->Vd : (int64_t)m->H * m->hd;
        if (!last_rows) {
            if ((st = B->linear(X, core, T, Wout, a->x, 1, err)) || (st = mlp(m, L, a, a->x, a->h, T, err))) return st;
            if (l + 1 == nl && (st = gather(m, a->x, last, G, m->D, a->xl, err))) return st;
        } else {
            /* Only the gathered tokens are read: finish the last layer on those G rows. */
            if ((st = gather(m, core, last, G, cw, a->cl, err)) ||
                (st = gather(m, a->x, last, G, m->D, a->xl, err)) ||
                (st = B->linear(X, a->cl, G, Wout, a->xl, 1, err)) || (st = mlp(m, L, a, a->xl, a->h, G, err)))
                return st;
        }
    }
    if ((st = B->rmsnorm(X, a->xl, m->D, G, m->D, m->final_norm, 1.0f, m->eps, a->h, m->D, err))) return st;
    if (want_logits && (st = B->readout(X, a->h, G, m->readout, a->cl, err))) return st;
    return VSR_OK;
}

/* Everything run_ops' op sequence depends on besides the token ids (FNV-1a): the row lengths,
 * whether positions are plain, and the gathered tokens. */
static uint64_t graph_key(const vsr_model *m, int R, const int *lens, int want_logits, int plain, int64_t G,
                          const int64_t *gather) {
    uint64_t h = 1469598103934665603ull;
    const uint64_t vals[] = {(uint64_t)R, (uint64_t)want_logits, (uint64_t)(uintptr_t)m->arena,
                             (uint64_t)m->arena_tokens, (uint64_t)m->arena_rows, (uint64_t)(uintptr_t)m->cos_t,
                             (uint64_t)(uintptr_t)m->sin_t, (uint64_t)m->max_pos, (uint64_t)plain, (uint64_t)G,
                             (uint64_t)m->arena_gather};
    for (size_t i = 0; i < sizeof vals / sizeof *vals; i++) h = (h ^ vals[i]) * 1099511628211ull;
    for (int r = 0; r < R; r++) h = (h ^ (uint64_t)lens[r]) * 1099511628211ull;
    for (int64_t g = 0; g < G; g++) h = (h ^ (uint64_t)gather[g]) * 1099511628211ull;
    return h;
}

/* Graphs replay their recorded gather indices; more than this many reach the device through a
 * host copy that a replay would read again after it is freed, so such forwards are not recorded. */
#define GRAPH_MAX_GATHER 256

/* run_ops, where the backend records forwards (graphs): replayed from its recording of `key` with
 * these ids (and the staged row table), or run and recorded (a recording that fails is run again
 * unrecorded). */
static vsr_status run_recorded(vsr_model *m, int graphs, uint64_t key, const arena *a, int64_t G, int64_t T,
                               const int32_t *all, const vsr_segs *sg, const int64_t *last, int want_logits,
                               vsr_err *err) {
    int replayed = 0;
    vsr_status st;
    if (graphs && (st = B->graph_begin(X, key, all, T, &replayed, err))) return st;
    if (replayed) return VSR_OK;
    st = run_ops(m, a, G, T, all, sg, last, want_logits, err);
    if (graphs) {
        int rerun = 0;
        vsr_status st2 = B->graph_end(X, st, &rerun, err);
        if (rerun) st = run_ops(m, a, G, T, all, sg, last, want_logits, err);
        else if (!st) st = st2;
    }
    return st;
}

/* ---- shape buckets ----
 * A recording (CUDA graph) replays one shape: rows x their lengths. Real traffic rarely repeats
 * one, so a bucketed model pads every forward_last batch to a bucket: each row to one length
 * bucket (that of the batch's longest row), the row count to a row bucket (rows of pad tokens).
 * Row r keeps its tokens at the start of its slot and its positions (those of the left-padded
 * batch, Lmax - len + i); the pad tokens follow it, so nothing a real token computes reads them:
 * the DeltaNet recurrence and its convolution are causal, and attention reads each row's first
 * keys[r] = len[r] keys only (causal or not); each row's last real token is gathered. What
 * differs per request within a bucket (each row's rotary start, the gathered indices, the keys
 * read) goes in the row table (rows_stage) that a replay copies with the ids.
 * Lengths: multiples of 16 up to 128, then four steps per octave (160, 192, 224, 256, 320, ...):
 * at most 25 % padding, about 11 % on average. Rows: 1-4, then two steps per octave (6, 8, 12,
 * 16, 24, ...). */

int64_t vsr_model_bucket_len(int64_t L) {
    if (L <= 128) return L <= 16 ? 16 : (L + 15) / 16 * 16;
    int64_t p = 128;
    while (p * 2 < L) p *= 2;       /* p < L <= 2p */
    int64_t step = p / 4;
    return (L + step - 1) / step * step;
}

int vsr_model_bucket_rows(int R) {
    if (R <= 4) return R < 1 ? 1 : R;
    int p = 4;
    while (p * 2 < R) p *= 2;       /* p < R <= 2p */
    int step = p / 2;
    return (R + step - 1) / step * step;
}

bool vsr_model_bucketed(const vsr_model *m) { return m && m->buckets; }

int64_t vsr_model_padded_forwards(const vsr_model *m) { return m ? m->padded_forwards : 0; }

int64_t vsr_model_shape_tokens(const vsr_model *m, int rows, int64_t len) {
    return m && m->buckets ? vsr_model_bucket_rows(rows) * vsr_model_bucket_len(len) : (int64_t)rows * len;
}

static uint64_t bucket_key(const vsr_model *m, int Rb, int64_t Lb, int want_logits) {
    uint64_t h = 1469598103934665603ull;
    const uint64_t vals[] = {0x6275636b6574ull /* "bucket" */, (uint64_t)Rb, (uint64_t)Lb, (uint64_t)want_logits,
                             (uint64_t)(uintptr_t)m->arena, (uint64_t)m->arena_tokens, (uint64_t)m->arena_rows,
                             (uint64_t)m->arena_gather, (uint64_t)(uintptr_t)m->cos_t, (uint64_t)(uintptr_t)m->sin_t,
                             (uint64_t)m->max_pos};
    for (size_t i = 0; i < sizeof vals / sizeof *vals; i++) h = (h ^ vals[i]) * 1099511628211ull;
    return h;
}

/* forward_last's batch padded to its bucket (see above); rows validated by the caller. */
static vsr_status forward_bucketed(vsr_model *m, int R, const int32_t *const *ids, const int *lens, int64_t Lmax,
                                   float *hidden, float *logits, vsr_err *err) {
    const int64_t Lb = vsr_model_bucket_len(Lmax);
    const int Rb = vsr_model_bucket_rows(R);
    const int64_t T = (int64_t)Rb * Lb;
    vsr_status st;
    if ((st = arena_reserve(m, T, Rb, Rb, err))) return st;
    /* the last pad token's position: pos0 <= Lmax - 1, plus Lb - 1 */
    if (m->rot > 0 && (st = rope_tables(m, Lmax + Lb, err))) return st;
    arena a;
    arena_layout(m, m->arena_tokens, m->arena_rows, m->arena_gather, &a, m->arena);
    int64_t *segbuf = malloc(sizeof(int64_t) * 5 * (size_t)Rb);
    int32_t *all = malloc(sizeof(int32_t) * (size_t)T);
    if (!segbuf || !all) {
        free(segbuf);
        free(all);
        return vsr_err_set(err, VSR_E_NOMEM, "forward: out of memory");
    }
    /* the row table: pos0[Rb], the gathered indices last[Rb], the keys each row reads keys[Rb] */
    int64_t *start = segbuf, *len = segbuf + Rb, *tab = segbuf + 2 * Rb, *pos0 = tab, *last = tab + Rb,
            *keys = tab + 2 * Rb;
    const int32_t pad = 0; /* any id: nothing real reads a pad token */
    for (int r = 0; r < Rb; r++) {
        const int n = r < R ? lens[r] : 0;
        start[r] = (int64_t)r * Lb, len[r] = Lb;
        pos0[r] = r < R ? Lmax - n : 0;
        last[r] = start[r] + (r < R ? n - 1 : Lb - 1);
        keys[r] = r < R ? n : Lb;
        if (n) memcpy(all + start[r], ids[r], sizeof(int32_t) * (size_t)n);
        for (int64_t t = n; t < Lb; t++) all[start[r] + t] = pad;
    }
    vsr_segs sg = {Rb, start, len, pos0, 1, keys};
    m->padded_forwards++;
    const int want_logits = logits != NULL, graphs = B->graph_begin && !m->tap;
    m->gather_tab_off = Rb;
    if (B->rows_stage && (st = B->rows_stage(X, tab, 3 * (int64_t)Rb, err))) goto out;
    if ((st = run_recorded(m, graphs, graphs ? bucket_key(m, Rb, Lb, want_logits) : 0, &a, Rb, T, all, &sg, last,
                           want_logits, err)))
        goto out;
    /* the real rows come first among the gathered */
    if (hidden && (st = B->buf_get(X, hidden, a.h, sizeof(float) * (size_t)R * (size_t)m->D, err))) goto out;
    if (logits) st = B->buf_get(X, logits, a.cl, sizeof(float) * (size_t)R * VSR_D3_CODES, err);
out:
    m->gather_tab_off = -1;
    free(segbuf);
    free(all);
    return st;
}

/* n_pos == NULL: each row's last token, positions of the left-padded batch (decision3).
 * Else row r's tokens at pos[r][0..n_pos[r]) (0-based within the row), plain positions 0..len-1. */
static vsr_status forward_locked(vsr_model *m, int R, const int32_t *const *ids, const int *lens,
                                 const int *n_pos, const int32_t *const *pos, float *hidden, float *logits,
                                 vsr_err *err) {
    int64_t T = 0, Lmax = 0, G = 0;
    for (int r = 0; r < R; r++) {
        if (!ids[r] || lens[r] < 1)
            return vsr_err_set(err, VSR_E_INVALID, "forward: row %d has no tokens (length %d)", r, lens[r]);
        T += lens[r];
        if (lens[r] > Lmax) Lmax = lens[r];
        if (!n_pos) {
            G++;
            continue;
        }
        if (n_pos[r] < 0 || (n_pos[r] > 0 && !pos[r]))
            return vsr_err_set(err, VSR_E_INVALID, "forward: row %d asks for %d positions", r, n_pos[r]);
        for (int i = 0; i < n_pos[r]; i++)
            if (pos[r][i] < 0 || pos[r][i] >= lens[r])
                return vsr_err_set(err, VSR_E_INVALID, "forward: row %d: position %d is outside the row (%d tokens)",
                                   r, pos[r][i], lens[r]);
        G += n_pos[r];
    }
    if (G < 1) return vsr_err_set(err, VSR_E_INVALID, "forward: no position to read");
    if (!n_pos && m->buckets && vsr_model_bucket_rows(R) <= BUCKET_MAX_ROWS &&
        vsr_model_bucket_rows(R) * vsr_model_bucket_len(Lmax) <= m->bucket_limit)
        return forward_bucketed(m, R, ids, lens, Lmax, hidden, logits, err);
    vsr_status st;
    if ((st = arena_reserve(m, T, R, G, err))) return st;
    if (m->rot > 0 && (st = rope_tables(m, Lmax, err))) return st;
    arena a;
    arena_layout(m, m->arena_tokens, m->arena_rows, m->arena_gather, &a, m->arena);
    int64_t *segbuf = malloc(sizeof(int64_t) * (3 * (size_t)R + (size_t)G));
    int32_t *all = malloc(sizeof(int32_t) * (size_t)T);
    if (!segbuf || !all) {
        free(segbuf);
        free(all);
        return vsr_err_set(err, VSR_E_NOMEM, "forward: out of memory");
    }
    int64_t *start = segbuf, *len = segbuf + R, *pos0 = segbuf + 2 * R, *last = segbuf + 3 * R;
    for (int r = 0, off = 0, g = 0; r < R; off += lens[r], r++) {
        start[r] = off, len[r] = lens[r];
        /* left padding: the padded batch's column index; plain: every row from 0 */
        pos0[r] = n_pos ? 0 : Lmax - lens[r];
        if (!n_pos) last[g++] = off + lens[r] - 1;
        else
            for (int i = 0; i < n_pos[r]; i++) last[g++] = off + pos[r][i];
        memcpy(all + off, ids[r], sizeof(int32_t) * (size_t)lens[r]);
    }
    vsr_segs sg = {R, start, len, pos0, 0, NULL};
    const int want_logits = logits != NULL, graphs = B->graph_begin && !m->tap && G <= GRAPH_MAX_GATHER;
    if ((st = run_recorded(m, graphs, graphs ? graph_key(m, R, lens, want_logits, n_pos != NULL, G, last) : 0, &a, G,
                           T, all, &sg, last, want_logits, err)))
        goto out;
    if (hidden && (st = B->buf_get(X, hidden, a.h, sizeof(float) * (size_t)(G * m->D), err))) goto out;
    if (logits) st = B->buf_get(X, logits, a.cl, sizeof(float) * (size_t)G * VSR_D3_CODES, err);
out:
    free(segbuf);
    free(all);
    return st;
}

/* ---- warm-up ---- */

static int cmp_bucket_desc(const void *a, const void *b) {
    const int64_t *x = a, *y = b;
    int64_t tx = x[0] * x[1], ty = y[0] * y[1];
    return tx < ty ? 1 : tx > ty ? -1 : (x[1] < y[1] ? 1 : x[1] > y[1] ? -1 : 0);
}

int vsr_model_buckets(const vsr_model *m, int64_t max_tokens, int64_t (*out)[2], int max_out) {
    if (!m || !m->buckets) return 0;
    int n = 0;
    const int64_t top = vsr_model_bucket_len(m->max_len);
    for (int64_t L = 16; L <= top; L = vsr_model_bucket_len(L + 1))
        for (int R = 1; R <= BUCKET_MAX_ROWS && (int64_t)R * L <= max_tokens && (int64_t)R * L <= BUCKET_MAX_TOKENS;
             R = vsr_model_bucket_rows(R + 1)) {
            if (out && n < max_out) out[n][0] = R, out[n][1] = L;
            n++;
        }
    return n;
}

vsr_status vsr_model_warm(vsr_model *m, int64_t max_tokens, vsr_model_warm_fn progress, void *ctx,
                          vsr_model_warm_report *rep, vsr_err *err) {
    vsr_model_warm_report r = {0};
    if (rep) *rep = r;
    if (!m) return vsr_err_set(err, VSR_E_INVALID, "warm-up: no model");
    int n = vsr_model_buckets(m, max_tokens, NULL, 0);
    if (n == 0) return VSR_OK;
    int64_t (*bk)[2] = malloc(sizeof *bk * (size_t)n);
    if (!bk) return vsr_err_set(err, VSR_E_NOMEM, "warm-up: out of memory");
    vsr_model_buckets(m, max_tokens, bk, n);
    /* largest first: workspaces reach their size before the small shapes are recorded */
    qsort(bk, (size_t)n, sizeof *bk, cmp_bucket_desc);
    int64_t maxT = bk[0][0] * bk[0][1], maxL = 0;
    int maxR = 0;
    for (int i = 0; i < n; i++) {
        if (bk[i][0] > maxR) maxR = (int)bk[i][0];
        if (bk[i][1] > maxL) maxL = bk[i][1];
    }
    vsr_status st = VSR_OK;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)maxT);
    const int32_t **rows = malloc(sizeof *rows * (size_t)maxR);
    int *lens = malloc(sizeof *lens * (size_t)maxR);
    float *hid = malloc(sizeof(float) * (size_t)maxR * (size_t)m->D);
    float *lg = malloc(sizeof(float) * (size_t)maxR * VSR_D3_CODES);
    if (!ids || !rows || !lens || !hid || !lg) {
        st = vsr_err_set(err, VSR_E_NOMEM, "warm-up: out of memory");
        goto out;
    }
    const int64_t vocab = m->c.vocab_size > 1 ? m->c.vocab_size : 2;
    for (int64_t t = 0; t < maxT; t++) ids[t] = (int32_t)(1 + (t * 7919) % (vocab - 1));
    pthread_mutex_lock(&m->lock);
    m->bucket_limit = max_tokens < BUCKET_MAX_TOKENS ? max_tokens : BUCKET_MAX_TOKENS;
    /* the arena and the rotary tables at their largest now, so that no later forward moves them */
    st = arena_reserve(m, maxT, maxR, maxR, err);
    if (!st && m->rot > 0) st = rope_tables(m, 2 * maxL, err);
    pthread_mutex_unlock(&m->lock);
    for (int i = 0; i < n && !st; i++) {
        const int R = (int)bk[i][0];
        const int64_t L = bk[i][1];
        for (int rr = 0; rr < R; rr++) rows[rr] = ids + (int64_t)rr * L, lens[rr] = (int)L;
        /* twice: a shape is recorded at its second sighting */
        for (int k = 0; k < 2 && !st; k++) st = vsr_model_forward_last(m, R, rows, lens, hid, lg, err);
        if (st) vsr_err_prefix(err, "warm-up of bucket %d x %lld tokens", R, (long long)L);
        r.buckets++;
        if (R * L > r.max_tokens) r.max_tokens = R * L;
        if (progress) progress(ctx, i + 1, n);
    }
out:
    free(bk);
    free(ids);
    free(rows);
    free(lens);
    free(hid);
    free(lg);
    if (rep) *rep = r;
    return st;
}

vsr_status vsr_model_forward_last(vsr_model *m, int n_rows, const int32_t *const *ids, const int *lens,
                                  float *hidden, float *logits, vsr_err *err) {
    if (!m) return vsr_err_set(err, VSR_E_INVALID, "forward: no model");
    if (n_rows < 1 || !ids || !lens)
        return vsr_err_set(err, VSR_E_INVALID, "forward: need at least one row (got %d)", n_rows);
    pthread_mutex_lock(&m->lock);
    vsr_status st = forward_locked(m, n_rows, ids, lens, NULL, NULL, hidden, logits, err);
    pthread_mutex_unlock(&m->lock);
    return st;
}

vsr_status vsr_model_forward_gather(vsr_model *m, int n_rows, const int32_t *const *ids, const int *lens,
                                    const int *n_pos, const int32_t *const *pos, float *hidden, vsr_err *err) {
    if (!m) return vsr_err_set(err, VSR_E_INVALID, "forward: no model");
    if (n_rows < 1 || !ids || !lens || !n_pos || !pos)
        return vsr_err_set(err, VSR_E_INVALID, "forward: need at least one row (got %d)", n_rows);
    pthread_mutex_lock(&m->lock);
    vsr_status st = forward_locked(m, n_rows, ids, lens, n_pos, pos, hidden, NULL, err);
    pthread_mutex_unlock(&m->lock);
    return st;
}
