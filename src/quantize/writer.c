/* `vllm-srun quantize`: a verified BF16 Decision 3.0 package -> a compressed-tensors package.
 *
 * Streaming: the output keeps the source's shards (same names, same tensors per shard, the
 * quantized ones replaced by their compressed-tensors parameters). Each output shard is laid out
 * from names, dtypes and shapes alone (src/fixture/st_stream.c: the Python safetensors writer's
 * order), then its bytes are streamed; the quantized Linears of a decoder layer are computed
 * together when the shard first needs one of them (NVFP4 shares a global scale over q/k/v and
 * over gate/up; AWQ folds scales between a layer's modules) and dropped when the shard is done.
 * So memory holds one shard's quantized layers, and the source stays mapped read-only.
 *
 * Everything is written into OUT.tmpXXXXXX next to OUT and renamed to OUT at the end: a failed
 * run leaves nothing that looks like a package. */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/json_util.h"
#include "fixture/fx_json.h"
#include "fixture/st_stream.h"
#include "package/package_internal.h"
#include "quantize/quantize_internal.h"
#include "vsr/calibrate.h"
#include "vsr/hash.h"
#include "vsr/progress.h"
#include "vsr/quant.h"

#define INDEX_NAME "model.safetensors.index.json"
#define DEFAULT_SAMPLES 256
#define DEFAULT_GROUP 128

/* ------------------------------------------------------------------ options */

vsr_status vsr_quantize_check_opts(const vsr_quantize_opts *o, vsr_err *err) {
    vsr_qscheme s;
    if (!o->scheme) return vsr_err_set(err, VSR_E_INVALID, "--scheme is required (%s)", vsr_qscheme_names());
    if (!vsr_qscheme_parse(o->scheme, &s))
        return vsr_err_set(err, VSR_E_INVALID, "unknown scheme '%s' (expected %s)", o->scheme, vsr_qscheme_names());
    bool int4 = s == VSR_Q_W4A16_GPTQ || s == VSR_Q_W4A16_AWQ;
    if (int4 && !o->calibration)
        return vsr_err_set(err, VSR_E_INVALID,
                           "--scheme %s needs --calibration FILE.jsonl: GPTQ and AWQ choose the int4 values from "
                           "activations of representative prompts (a few hundred, like your production traffic); "
                           "without calibration use --scheme fp8-dynamic",
                           o->scheme);
    if (!int4 && o->calibration)
        return vsr_err_set(err, VSR_E_INVALID,
                           "--calibration applies to w4a16-gptq and w4a16-awq; %s is round-to-nearest and reads no "
                           "calibration data",
                           o->scheme);
    if (!o->calibration && o->samples)
        return vsr_err_set(err, VSR_E_INVALID, "--samples applies only with --calibration");
    if (o->samples < 0) return vsr_err_set(err, VSR_E_INVALID, "--samples must be positive, got %d", o->samples);
    if (o->group_size && !int4)
        return vsr_err_set(err, VSR_E_INVALID,
                           "--group-size applies to w4a16-gptq and w4a16-awq (%s has %s)", o->scheme,
                           s == VSR_Q_NVFP4 ? "groups of 16 by definition" : "one scale per output channel");
    if (o->group_size && (o->group_size < 8 || o->group_size % 8))
        return vsr_err_set(err, VSR_E_INVALID,
                           "--group-size must be a positive multiple of 8 (int4 packs 8 values per 32-bit word), got %d",
                           o->group_size);
    if (o->actorder && s != VSR_Q_W4A16_GPTQ)
        return vsr_err_set(err, VSR_E_INVALID, "--actorder applies only to w4a16-gptq (act-order is a GPTQ option)");
    if (o->n_ignore < 0 || o->n_ignore > VSR_QUANTIZE_MAX_IGNORE)
        return vsr_err_set(err, VSR_E_INVALID, "at most %d --ignore patterns", VSR_QUANTIZE_MAX_IGNORE);
    if (o->device && strcmp(o->device, "cpu") && !int4)
        return vsr_err_set(err, VSR_E_INVALID,
                           "--device applies to the calibration forward of w4a16-gptq and w4a16-awq; %s runs on the "
                           "CPU",
                           o->scheme);
    return VSR_OK;
}

/* ------------------------------------------------------------------ computed layers */

typedef struct qz_out {
    uint8_t *w8;       /* FP8 [N,K] or NVFP4 packed [N,K/2] */
    uint16_t *scale;   /* FP8 [N] / int4 [N,G] BF16 */
    uint8_t *scale8;   /* NVFP4 [N,K/16] E4M3 */
    uint32_t *packed;  /* int4 [N,K/8] */
    uint32_t *zp;      /* int4 [N/8,G] (asymmetric) */
    int32_t *gidx;     /* int4 [K] (act-order) */
    float gs;          /* NVFP4 global scale */
    bool ready;
} qz_out;

typedef struct qz_run {
    const vsr_package *p;
    qz_plan *pl;
    qz_out *out;          /* per plan linear */
    bool *unit_counted;   /* progress: units computed at least once */
    int n_units;
    int threads;
    vsr_progress *prog;
    const vsr_calib *calib;  /* w4a16-*: statistics of the calibration prompts */
    uint16_t **norm_in, **norm_post; /* AWQ: folded input/post-attention norms per layer, or NULL */
    double awq_rtn_loss, awq_best_loss; /* summed over the searches (the record shows the gain) */
} qz_run;

static int unit_of(const qz_plan *pl, int i) { return pl->lin[i].layer >= 0 ? pl->lin[i].layer : pl->n_layers + i; }

static void out_free(qz_out *o) {
    free(o->w8);
    free(o->scale);
    free(o->scale8);
    free(o->packed);
    free(o->zp);
    free(o->gidx);
    memset(o, 0, sizeof *o);
}

typedef struct nv_job {
    const uint16_t *w;
    int64_t N, K;
    float gs;
    qz_out *o;
} nv_job;

#define NV_ROWS 64
static void nv_task(void *ctx, int64_t t) {
    nv_job *j = ctx;
    int64_t r0 = t * NV_ROWS, r1 = r0 + NV_ROWS > j->N ? j->N : r0 + NV_ROWS;
    qz_nvfp4_rows(j->w + r0 * j->K, r1 - r0, j->K, j->gs, j->o->w8 + r0 * (j->K / 2), j->o->scale8 + r0 * (j->K / 16));
}

/* ---- int4: GPTQ and AWQ (src/quantize/gptq.c, awq.c) ---- */

static vsr_status int4_alloc(const qz_plan *pl, const qz_linear *L, qz_out *o, vsr_err *err) {
    int64_t G = L->K / pl->group;
    o->packed = calloc((size_t)(L->N * L->K / 8), sizeof *o->packed);
    o->scale = malloc((size_t)(L->N * G) * sizeof *o->scale);
    if (pl->scheme == VSR_Q_W4A16_AWQ) o->zp = calloc((size_t)(((L->N + 7) / 8) * G), sizeof *o->zp);
    if (pl->actorder) o->gidx = malloc((size_t)L->K * sizeof *o->gidx);
    if (!o->packed || !o->scale || (pl->scheme == VSR_Q_W4A16_AWQ && !o->zp) || (pl->actorder && !o->gidx))
        return vsr_err_set(err, VSR_E_NOMEM, "quantize: out of memory at %s", L->module);
    return VSR_OK;
}

static const vsr_calib_layer *stats(const qz_run *r, const qz_linear *L, bool need_act, vsr_err *err,
                                    vsr_status *st) {
    const vsr_calib_layer *c = vsr_calib_find(r->calib, L->module);
    if (!c || !c->H || (need_act && !c->act_absmean) || c->K != L->K || c->n_tokens <= 0) {
        *st = vsr_err_set(err, VSR_E_INVALID,
                          "%s: no calibration statistics reached this Linear (the calibration prompts never ran it)",
                          L->module);
        return NULL;
    }
    *st = VSR_OK;
    return c;
}

typedef struct gptq_job {
    qz_run *r;
    const int *idx;
    vsr_status *st;
    vsr_err *errs;
} gptq_job;

static void gptq_task(void *ctx, int64_t t) {
    gptq_job *j = ctx;
    qz_run *r = j->r;
    const qz_plan *pl = r->pl;
    const qz_linear *L = &pl->lin[j->idx[t]];
    qz_out *o = &r->out[j->idx[t]];
    const vsr_calib_layer *c = stats(r, L, false, &j->errs[t], &j->st[t]);
    if (!c) return;
    if ((j->st[t] = int4_alloc(pl, L, o, &j->errs[t]))) return;
    /* llm-compressor's GPTQModifier: actorder "static" (WEIGHT) unless act-order groups, damp 0.01 */
    j->st[t] = vsr_gptq_quantize(L->w->data, L->N, L->K, c->H, pl->group,
                                 pl->actorder ? VSR_ACTORDER_GROUP : VSR_ACTORDER_WEIGHT, 0.01, true, o->packed,
                                 o->scale, NULL, pl->actorder ? o->gidx : NULL, &j->errs[t]);
    if (!j->st[t]) o->ready = true;
}

/* The Linears of a unit are independent for GPTQ: one per thread. */
static vsr_status gptq_unit(qz_run *r, const int *idx, int n, vsr_err *err) {
    vsr_status st[64] = {0};
    vsr_err errs[64];
    memset(errs, 0, sizeof errs);
    gptq_job j = {r, idx, st, errs};
    qz_parallel(n, r->threads, gptq_task, &j);
    for (int k = 0; k < n; k++)
        if (st[k]) {
            *err = errs[k];
            return st[k];
        }
    return VSR_OK;
}

static int find_module(const qz_plan *pl, int layer, const char *suffix) {
    for (int i = 0; i < pl->n_lin; i++) {
        const char *m = pl->lin[i].module;
        size_t a = strlen(m), b = strlen(suffix);
        if (pl->lin[i].layer == layer && pl->lin[i].quantized && a > b && !strcmp(m + a - b, suffix)) return i;
    }
    return -1;
}

static const vsr_tensor *layer_tensor(const qz_run *r, int layer, const char *rest) {
    char name[300];
    snprintf(name, sizeof name, "%slayers.%d.%s", r->p->text_prefix, layer, rest);
    return vsr_weights_find(r->p->weights, name);
}

/* One AWQ mapping: balance Linears `bal` (working BF16 copies) read x; search s, scale their
 * columns by s, fold 1/s into the producer (a norm with (1+w), or a producing Linear's rows). */
static vsr_status awq_map(qz_run *r, const int *bal, int nb, uint16_t **work, uint16_t *norm, uint16_t *prev,
                          int64_t prev_K, vsr_err *err) {
    const qz_plan *pl = r->pl;
    const qz_linear *L0 = &pl->lin[bal[0]];
    vsr_status st;
    const vsr_calib_layer *c = stats(r, L0, true, err, &st);
    if (!c) return st;
    int64_t K = L0->K, G = K / pl->group;
    vsr_awq_linear lin[3];
    memset(lin, 0, sizeof lin);
    float *s = malloc((size_t)K * sizeof *s);
    st = s ? VSR_OK : vsr_err_set(err, VSR_E_NOMEM, "quantize: out of memory");
    for (int b = 0; b < nb && !st; b++) {
        const qz_linear *L = &pl->lin[bal[b]];
        lin[b].w_bf16 = work[b];
        lin[b].N = L->N;
        lin[b].packed = malloc((size_t)(L->N * K / 8) * sizeof(uint32_t));
        lin[b].scale_bf16 = malloc((size_t)(L->N * G) * sizeof(uint16_t));
        lin[b].zp_packed = malloc((size_t)(((L->N + 7) / 8) * G) * sizeof(uint32_t));
        if (!lin[b].packed || !lin[b].scale_bf16 || !lin[b].zp_packed)
            st = vsr_err_set(err, VSR_E_NOMEM, "quantize: out of memory");
    }
    vsr_awq_result res;
    if (!st) st = vsr_awq_search(c->H, c->act_absmean, K, lin, nb, pl->group, false, VSR_AWQ_DUO, VSR_AWQ_GRID, s, &res, err);
    if (!st) {
        r->awq_rtn_loss += res.rtn_loss;
        r->awq_best_loss += res.best_loss;
        for (int b = 0; b < nb; b++) /* the balance weights become bf16(W diag(s)) */
            for (int64_t n = 0; n < pl->lin[bal[b]].N; n++)
                for (int64_t k = 0; k < K; k++)
                    work[b][n * K + k] = vsr_f32_to_bf16(vsr_bf16_to_f32(work[b][n * K + k]) * s[k]);
        if (norm) vsr_awq_fold_norm_offset1(norm, s, K);
        if (prev) vsr_awq_fold_linear_rows(prev, prev_K, s, K);
    }
    for (int b = 0; b < nb; b++) {
        free(lin[b].packed);
        free(lin[b].scale_bf16);
        free(lin[b].zp_packed);
    }
    free(s);
    return st;
}

static uint16_t *copy_bf16(const vsr_tensor *t) {
    uint16_t *c = t && t->dtype == VSR_DT_BF16 ? malloc(t->nbytes) : NULL;
    if (c) memcpy(c, t->data, t->nbytes);
    return c;
}

/* AWQ over a decoder layer, in llm-compressor's mapping order: input_layernorm -> q,k,v (full
 * attention), post_attention_layernorm -> gate,up, up -> down. v -> o is skipped as llm-compressor
 * skips it when v's outputs do not match o's inputs (grouped-query attention: KV*d != H*d); the
 * DeltaNet layers' input projections are ignored (BF16) and out_proj's input comes from a gated norm
 * shared across heads, so they get no mapping. Every quantized Linear is then quantized round-to-
 * nearest (min-max, asymmetric) from its smoothed weight, as llm-compressor's quantization step does. */
static vsr_status awq_unit(qz_run *r, int u, const int *idx, int n, vsr_err *err) {
    const qz_plan *pl = r->pl;
    vsr_status st = VSR_OK;
    uint16_t *work[64] = {0};
    for (int k = 0; k < n && !st; k++)
        if (!(work[k] = copy_bf16(pl->lin[idx[k]].w))) st = vsr_err_set(err, VSR_E_NOMEM, "quantize: out of memory");
    int layer = u < pl->n_layers ? u : -1;
    if (!st && layer >= 0) {
        const vsr_tensor *tin = layer_tensor(r, layer, "input_layernorm.weight"),
                         *tpost = layer_tensor(r, layer, "post_attention_layernorm.weight");
        free(r->norm_in[layer]);
        free(r->norm_post[layer]);
        r->norm_in[layer] = copy_bf16(tin);
        r->norm_post[layer] = copy_bf16(tpost);
        int q = find_module(pl, layer, "self_attn.q_proj"), kk = find_module(pl, layer, "self_attn.k_proj"),
            v = find_module(pl, layer, "self_attn.v_proj"), g = find_module(pl, layer, "mlp.gate_proj"),
            up = find_module(pl, layer, "mlp.up_proj"), dn = find_module(pl, layer, "mlp.down_proj");
        int lq = -1, lk = -1, lv = -1, lg = -1, lu = -1, ld = -1;
        for (int k = 0; k < n; k++) {
            lq = idx[k] == q ? k : lq, lk = idx[k] == kk ? k : lk, lv = idx[k] == v ? k : lv;
            lg = idx[k] == g ? k : lg, lu = idx[k] == up ? k : lu, ld = idx[k] == dn ? k : ld;
        }
        if (lq >= 0 && lk >= 0 && lv >= 0 && r->norm_in[layer]) {
            int bal[3] = {q, kk, v};
            uint16_t *w3[3] = {work[lq], work[lk], work[lv]};
            st = awq_map(r, bal, 3, w3, r->norm_in[layer], NULL, 0, err);
        }
        if (!st && lg >= 0 && lu >= 0 && r->norm_post[layer]) {
            int bal[2] = {g, up};
            uint16_t *w2[2] = {work[lg], work[lu]};
            st = awq_map(r, bal, 2, w2, r->norm_post[layer], NULL, 0, err);
        }
        if (!st && ld >= 0 && lu >= 0) {
            int bal[1] = {dn};
            uint16_t *w1[1] = {work[ld]};
            st = awq_map(r, bal, 1, w1, NULL, work[lu], pl->lin[up].K, err);
        }
    }
    for (int k = 0; k < n && !st; k++) {
        const qz_linear *L = &pl->lin[idx[k]];
        qz_out *o = &r->out[idx[k]];
        if ((st = int4_alloc(pl, L, o, err))) break;
        vsr_quantize_int4_rtn(work[k], L->N, L->K, pl->group, false, NULL, o->packed, o->scale, o->zp);
        o->ready = true;
    }
    for (int k = 0; k < n; k++) free(work[k]);
    return st;
}

/* Computes every quantized Linear of unit u. */
static vsr_status compute_unit(qz_run *r, int u, vsr_err *err) {
    qz_plan *pl = r->pl;
    int idx[64], n = 0;
    for (int i = 0; i < pl->n_lin && n < 64; i++)
        if (pl->lin[i].quantized && unit_of(pl, i) == u && !r->out[i].ready) idx[n++] = i;
    if (!n) return VSR_OK;
    if (pl->scheme == VSR_Q_W4A16_GPTQ || pl->scheme == VSR_Q_W4A16_AWQ) {
        vsr_status st = pl->scheme == VSR_Q_W4A16_GPTQ ? gptq_unit(r, idx, n, err) : awq_unit(r, u, idx, n, err);
        if (st) return st;
        if (!r->unit_counted[u]) {
            r->unit_counted[u] = true;
            vsr_progress_add(r->prog, 1);
        }
        return VSR_OK;
    }
    float gs[64], fused[3] = {0, 0, 0};
    if (pl->scheme == VSR_Q_NVFP4) {
        /* Each Linear's own global scale, then the minimum over each fused group. */
        for (int k = 0; k < n; k++) {
            const qz_linear *L = &pl->lin[idx[k]];
            gs[k] = qz_nvfp4_global_scale(qz_bf16_absmax(L->w->data, L->N * L->K));
            if (L->fuse && (fused[L->fuse] == 0 || gs[k] < fused[L->fuse])) fused[L->fuse] = gs[k];
        }
        /* A unit's outputs are computed and dropped together, so every member of a fused
         * group is pending here and shares the minimum. */
    }
    for (int k = 0; k < n; k++) {
        const qz_linear *L = &pl->lin[idx[k]];
        qz_out *o = &r->out[idx[k]];
        const uint16_t *w = L->w->data;
        if (pl->scheme == VSR_Q_FP8_DYNAMIC) {
            o->w8 = malloc((size_t)(L->N * L->K));
            o->scale = malloc((size_t)L->N * sizeof *o->scale);
            if (!o->w8 || !o->scale) goto oom;
            qz_fp8_parallel(w, L->N, L->K, r->threads, o->w8, o->scale);
        } else {
            o->gs = L->fuse ? fused[L->fuse] : gs[k];
            o->w8 = malloc((size_t)(L->N * L->K / 2));
            o->scale8 = malloc((size_t)(L->N * L->K / 16));
            if (!o->w8 || !o->scale8) goto oom;
            nv_job j = {w, L->N, L->K, o->gs, o};
            qz_parallel((L->N + NV_ROWS - 1) / NV_ROWS, r->threads, nv_task, &j);
        }
        o->ready = true;
    }
    if (!r->unit_counted[u]) {
        r->unit_counted[u] = true;
        vsr_progress_add(r->prog, 1);
    }
    return VSR_OK;
oom:
    return vsr_err_set(err, VSR_E_NOMEM, "quantize: out of memory quantizing layer %d", pl->lin[idx[0]].layer);
}

/* AWQ: the layer's norms are outputs too; computed with the layer (kept until the end: small). */
static vsr_status compute_unit_all(qz_run *r, int layer, vsr_err *err) {
    if (r->norm_in[layer] || r->norm_post[layer]) return VSR_OK;
    return compute_unit(r, layer, err);
}

/* ------------------------------------------------------------------ shard entries */

enum { P_PASS, P_FP8_W, P_FP8_S, P_NV_PACKED, P_NV_SCALE, P_NV_GS, P_I4_PACKED, P_I4_SCALE, P_I4_SHAPE, P_I4_ZP,
       P_I4_GIDX };

static int find_linear(const qz_plan *pl, const char *tensor_name) {
    size_t n = strlen(tensor_name);
    if (n < 8 || strcmp(tensor_name + n - 7, ".weight")) return -1;
    for (int i = 0; i < pl->n_lin; i++)
        if (pl->lin[i].quantized && strlen(pl->lin[i].module) == n - 7 && !strncmp(pl->lin[i].module, tensor_name, n - 7))
            return i;
    return -1;
}

static vsr_status entry_add(fx_st_entry *e, size_t *n, const char *module, const char *suffix, vsr_dtype dt, int ndim,
                            int64_t a, int64_t b, int src, int part, vsr_err *err) {
    fx_st_entry *x = &e[(*n)++];
    memset(x, 0, sizeof *x);
    if ((size_t)snprintf(x->name, sizeof x->name, "%s%s", module, suffix) >= sizeof x->name)
        return vsr_err_set(err, VSR_E_UNSUPPORTED, "tensor name %s%s is longer than %zu bytes", module, suffix,
                           sizeof x->name - 1);
    x->dtype = dt;
    x->ndim = ndim;
    x->shape[0] = a;
    x->shape[1] = b;
    uint64_t numel = ndim == 1 ? (uint64_t)a : (uint64_t)a * (uint64_t)b;
    x->nbytes = numel * (uint64_t)vsr_dtype_info(dt)->bits / 8;
    x->src = src;
    x->part = part;
    return VSR_OK;
}

/* The output entries of one source shard: passthrough tensors keep name/dtype/shape (src =
 * index in `tensors`), quantized Linears become their scheme's parameters (src = linear). */
static vsr_status shard_entries(const qz_plan *pl, const vsr_tensor **tensors, size_t nt, fx_st_entry *e, size_t *ne,
                                vsr_err *err) {
    vsr_status st = VSR_OK;
    *ne = 0;
    for (size_t i = 0; i < nt && !st; i++) {
        const vsr_tensor *t = tensors[i];
        int li = find_linear(pl, t->name);
        if (li < 0) {
            if (t->ndim > 5)
                return vsr_err_set(err, VSR_E_UNSUPPORTED, "%s: %d dimensions; the writer copies up to 5", t->name, t->ndim);
            fx_st_entry *x = &e[(*ne)++];
            memset(x, 0, sizeof *x);
            if ((size_t)snprintf(x->name, sizeof x->name, "%s", t->name) >= sizeof x->name)
                return vsr_err_set(err, VSR_E_UNSUPPORTED, "tensor name %s is longer than %zu bytes", t->name,
                                   sizeof x->name - 1);
            x->dtype = t->dtype;
            x->ndim = t->ndim;
            memcpy(x->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
            x->nbytes = t->nbytes;
            x->src = (int)i;
            x->part = P_PASS;
            continue;
        }
        const qz_linear *L = &pl->lin[li];
        if (pl->scheme == VSR_Q_FP8_DYNAMIC) {
            st = entry_add(e, ne, L->module, ".weight", VSR_DT_F8_E4M3, 2, L->N, L->K, li, P_FP8_W, err);
            if (!st) st = entry_add(e, ne, L->module, ".weight_scale", VSR_DT_BF16, 2, L->N, 1, li, P_FP8_S, err);
        } else if (pl->scheme == VSR_Q_W4A16_GPTQ || pl->scheme == VSR_Q_W4A16_AWQ) {
            int64_t G = L->K / pl->group;
            st = entry_add(e, ne, L->module, ".weight_packed", VSR_DT_I32, 2, L->N, L->K / 8, li, P_I4_PACKED, err);
            if (!st) st = entry_add(e, ne, L->module, ".weight_scale", VSR_DT_BF16, 2, L->N, G, li, P_I4_SCALE, err);
            if (!st) st = entry_add(e, ne, L->module, ".weight_shape", VSR_DT_I64, 1, 2, 0, li, P_I4_SHAPE, err);
            if (!st && pl->scheme == VSR_Q_W4A16_AWQ)
                st = entry_add(e, ne, L->module, ".weight_zero_point", VSR_DT_I32, 2, (L->N + 7) / 8, G, li, P_I4_ZP, err);
            if (!st && pl->actorder)
                st = entry_add(e, ne, L->module, ".weight_g_idx", VSR_DT_I32, 1, L->K, 0, li, P_I4_GIDX, err);
        } else {
            st = entry_add(e, ne, L->module, ".weight_packed", VSR_DT_U8, 2, L->N, L->K / 2, li, P_NV_PACKED, err);
            if (!st) st = entry_add(e, ne, L->module, ".weight_scale", VSR_DT_F8_E4M3, 2, L->N, L->K / 16, li, P_NV_SCALE, err);
            if (!st) st = entry_add(e, ne, L->module, ".weight_global_scale", VSR_DT_F32, 1, 1, 0, li, P_NV_GS, err);
        }
    }
    return st;
}

static vsr_status write_entry(qz_run *r, const vsr_tensor **tensors, const fx_st_entry *e, fx_sink *sink, vsr_err *err) {
    if (e->part == P_PASS) {
        const uint8_t *d = tensors[e->src]->data;
        int layer;
        char rest[64];
        const char *tp = r->p->text_prefix;
        /* AWQ folds 1/s into the layer norms: those come from the computed layer */
        if (r->pl->scheme == VSR_Q_W4A16_AWQ && !strncmp(e->name, tp, strlen(tp)) &&
            sscanf(e->name + strlen(tp), "layers.%d.%63s", &layer, rest) == 2 && layer >= 0 &&
            layer < r->pl->n_layers &&
            (!strcmp(rest, "input_layernorm.weight") || !strcmp(rest, "post_attention_layernorm.weight"))) {
            vsr_status st = compute_unit_all(r, layer, err);
            if (st) return st;
            uint16_t *ov = !strcmp(rest, "input_layernorm.weight") ? r->norm_in[layer] : r->norm_post[layer];
            if (ov) d = (const uint8_t *)ov;
        }
        enum { CHUNK = 64 << 20 };
        vsr_status st = VSR_OK;
        for (uint64_t off = 0; off < e->nbytes && !st; off += CHUNK)
            st = fx_sink_write(sink, d + off, e->nbytes - off < CHUNK ? (size_t)(e->nbytes - off) : CHUNK, err);
        return st;
    }
    qz_out *o = &r->out[e->src];
    if (!o->ready) {
        vsr_status st = compute_unit(r, unit_of(r->pl, e->src), err);
        if (st) return st;
    }
    switch (e->part) {
    case P_FP8_W:
    case P_NV_PACKED: return fx_sink_write(sink, o->w8, e->nbytes, err);
    case P_FP8_S: return fx_sink_write(sink, o->scale, e->nbytes, err);
    case P_NV_SCALE: return fx_sink_write(sink, o->scale8, e->nbytes, err);
    case P_NV_GS: return fx_sink_write(sink, &o->gs, sizeof o->gs, err);
    case P_I4_PACKED: return fx_sink_write(sink, o->packed, e->nbytes, err);
    case P_I4_SCALE: return fx_sink_write(sink, o->scale, e->nbytes, err);
    case P_I4_ZP: return fx_sink_write(sink, o->zp, e->nbytes, err);
    case P_I4_GIDX: return fx_sink_write(sink, o->gidx, e->nbytes, err);
    case P_I4_SHAPE: {
        int64_t shp[2] = {r->pl->lin[e->src].N, r->pl->lin[e->src].K};
        return fx_sink_write(sink, shp, sizeof shp, err);
    }
    default: return vsr_err_set(err, VSR_E_INTERNAL, "quantize: part %d of %s", e->part, e->name);
    }
}

/* ------------------------------------------------------------------ files */

typedef struct qz_file {
    char name[256];
    char sha[65];
    uint64_t bytes;
    bool identity;
} qz_file;

typedef struct qz_files {
    qz_file *f;
    int n, cap;
} qz_files;

static qz_file *files_add(qz_files *fs, const char *name, bool identity) {
    if (fs->n == fs->cap) {
        int nc = fs->cap ? fs->cap * 2 : 32;
        qz_file *nf = realloc(fs->f, sizeof *nf * (size_t)nc);
        if (!nf) return NULL;
        fs->f = nf;
        fs->cap = nc;
    }
    qz_file *f = &fs->f[fs->n++];
    memset(f, 0, sizeof *f);
    snprintf(f->name, sizeof f->name, "%s", name);
    f->identity = identity;
    return f;
}

/* Files that enter identity.model_sha256 besides the weight shards (reference-runtime.md 4.1 step 6). */
static bool is_identity_name(const char *name) {
    static const char *const ids[] = {"readout.safetensors", "tokenizer.json", "tokenizer_config.json",
                                      "chat_template.jinja", NULL};
    for (int i = 0; ids[i]; i++)
        if (!strcmp(ids[i], name)) return true;
    return false;
}

static vsr_status write_bytes(const char *dir, const char *name, const char *text, size_t n, qz_files *fs,
                              bool identity, vsr_err *err) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    fx_sink *s = NULL;
    vsr_status st = fx_sink_open(path, name, NULL, &s, err);
    if (st) return st;
    if ((st = fx_sink_write(s, text, n, err))) {
        fx_sink_abort(s);
        return st;
    }
    qz_file *f = files_add(fs, name, identity);
    if (!f) {
        fx_sink_abort(s);
        return vsr_err_set(err, VSR_E_NOMEM, "quantize: out of memory");
    }
    return fx_sink_close(s, f->sha, &f->bytes, err);
}

static vsr_status write_json_file(const char *dir, const char *name, const json_t *j, bool newline, qz_files *fs,
                                  vsr_err *err) {
    char *text = vsr_fx_json_pretty(j, newline);
    if (!text) return vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory", name);
    vsr_status st = write_bytes(dir, name, text, strlen(text), fs, false, err);
    free(text);
    return st;
}

/* Byte-for-byte copy of a package file into the output (subfolders created as needed). */
static vsr_status copy_file(const vsr_package *p, const char *name, const char *dir, qz_files *fs, vsr_err *err) {
    char src[PATH_MAX], dst[PATH_MAX * 2];
    vsr_status st = vsr_package_resolve_inside(p->path, name, "files_sha256", src, sizeof src, err);
    if (st) return st;
    snprintf(dst, sizeof dst, "%s/%s", dir, name);
    for (char *s = dst + strlen(dir) + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            mkdir(dst, 0755);
            *s = '/';
        }
    FILE *in = fopen(src, "rb");
    if (!in) return vsr_err_set(err, VSR_E_IO, "%s: cannot read: %s", name, strerror(errno));
    fx_sink *s = NULL;
    if ((st = fx_sink_open(dst, name, NULL, &s, err))) {
        fclose(in);
        return st;
    }
    char *buf = malloc(1 << 20);
    size_t k;
    if (!buf) st = vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory", name);
    while (!st && (k = fread(buf, 1, 1 << 20, in)) > 0) st = fx_sink_write(s, buf, k, err);
    if (!st && ferror(in)) st = vsr_err_set(err, VSR_E_IO, "%s: read failed", name);
    free(buf);
    fclose(in);
    if (st) {
        fx_sink_abort(s);
        return st;
    }
    qz_file *f = files_add(fs, name, is_identity_name(name));
    if (!f) {
        fx_sink_abort(s);
        return vsr_err_set(err, VSR_E_NOMEM, "quantize: out of memory");
    }
    return fx_sink_close(s, f->sha, &f->bytes, err);
}

static bool is_weight_file(const vsr_package *p, const char *name) {
    for (size_t i = 0; i < vsr_weights_file_count(p->weights); i++)
        if (!strcmp(vsr_weights_file_name(p->weights, i), name)) return true;
    return false;
}

/* ------------------------------------------------------------------ the package */

static const char *scheme_suffix(vsr_qscheme s) {
    static const char *const sfx[VSR_Q_COUNT] = {"-FP8-Dynamic", "-W4A16-GPTQ", "-W4A16-AWQ", "-NVFP4A16"};
    return sfx[s];
}

static json_t *record_json(const vsr_package *p, const qz_plan *pl, const vsr_quantize_opts *o, const char *calib_sha,
                           int samples_used) {
    json_t *src = json_pack("{s:s,s:s,s:s}", "model_name", p->manifest.model_name, "model_sha256", p->model_sha256,
                            "manifest_sha256", p->manifest.manifest_sha256);
    if (p->repo[0]) {
        json_object_set_new(src, "repo", json_string(p->repo));
        json_object_set_new(src, "revision", json_string(p->revision));
    }
    json_t *calib = json_null();
    if (o->calibration) {
        const char *base = strrchr(o->calibration, '/');
        calib = json_pack("{s:s,s:s,s:i}", "file", base ? base + 1 : o->calibration, "sha256", calib_sha, "samples",
                          samples_used);
    }
    json_t *patterns = json_array();
    for (int i = 0; i < pl->recipe.n_ignore; i++) json_array_append_new(patterns, json_string(pl->recipe.ignore[i]));
    const char *method = pl->scheme == VSR_Q_W4A16_GPTQ  ? "GPTQ"
                         : pl->scheme == VSR_Q_W4A16_AWQ ? "AWQ"
                                                         : "round-to-nearest (min-max)";
    json_t *recipe = json_pack("{s:s,s:[s],s:o}", "method", method, "targets", "Linear", "ignore_patterns", patterns);
    if (pl->scheme == VSR_Q_W4A16_GPTQ || pl->scheme == VSR_Q_W4A16_AWQ)
        json_object_set_new(recipe, "group_size", json_integer(pl->group));
    if (pl->scheme == VSR_Q_W4A16_GPTQ) json_object_set_new(recipe, "actorder", json_boolean(pl->actorder));
    if (pl->scheme == VSR_Q_NVFP4)
        json_object_set_new(recipe, "fused_global_scales", json_pack("[ss]", "q_proj,k_proj,v_proj", "gate_proj,up_proj"));
    return json_pack("{s:s,s:s,s:s,s:s,s:o,s:o,s:o,s:i,s:i}", "schema", "vllm-srun-quantization-record/1", "scheme",
                     vsr_qscheme_name(pl->scheme), "tool", "vllm-srun quantize", "tool_version",
                     VSR_QUANTIZE_TOOL_VERSION " (compressed-tensors " VSR_QUANTIZE_CT_VERSION " format)", "source",
                     src, "recipe", recipe, "calibration", calib, "quantized_modules", pl->n_quant, "ignored_modules",
                     pl->n_lin - pl->n_quant);
}

typedef struct qz_ctx {
    vsr_package *p;
    qz_plan pl;
    qz_run run;
    qz_files fs;
    char tmp[PATH_MAX];
    bool tmp_made;
} qz_ctx;

static vsr_status write_shards(qz_ctx *c, json_t *weight_map, uint64_t *total, vsr_err *err) {
    const vsr_package *p = c->p;
    size_t nt_all = vsr_weights_count(p->weights);
    const vsr_tensor **tensors = calloc(nt_all ? nt_all : 1, sizeof *tensors);
    fx_st_entry *e = calloc(nt_all * 3 + 1, sizeof *e);
    if (!tensors || !e) {
        free(tensors);
        free(e);
        return vsr_err_set(err, VSR_E_NOMEM, "quantize: out of memory");
    }
    vsr_status st = VSR_OK;
    *total = 0;
    for (size_t fi = 0; fi < vsr_weights_file_count(p->weights) && !st; fi++) {
        const char *shard = vsr_weights_file_name(p->weights, fi);
        if (!strcmp(shard, INDEX_NAME)) continue;
        size_t nt = 0, ne = 0;
        for (size_t i = 0; i < nt_all; i++)
            if (!strcmp(vsr_weights_at(p->weights, i)->file, shard)) tensors[nt++] = vsr_weights_at(p->weights, i);
        if ((st = shard_entries(&c->pl, tensors, nt, e, &ne, err))) break;
        size_t hlen = 0;
        char *header = fx_st_layout(e, ne, &hlen);
        if (!header) {
            st = vsr_err_set(err, VSR_E_UNSUPPORTED, "%s: cannot lay out the header (out of memory or a dtype the writer "
                                                     "does not know)", shard);
            break;
        }
        char path[PATH_MAX * 2];
        snprintf(path, sizeof path, "%s/%s", c->tmp, shard);
        fx_sink *sink = NULL;
        if ((st = fx_sink_open(path, shard, NULL, &sink, err))) {
            free(header);
            break;
        }
        unsigned char lenb[8];
        for (int i = 0; i < 8; i++) lenb[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
        st = fx_sink_write(sink, lenb, 8, err);
        if (!st) st = fx_sink_write(sink, header, hlen, err);
        free(header);
        for (size_t i = 0; i < ne && !st; i++) {
            st = write_entry(&c->run, tensors, &e[i], sink, err);
            *total += e[i].nbytes;
            if (weight_map) json_object_set_new(weight_map, e[i].name, json_string(shard));
        }
        if (st) {
            fx_sink_abort(sink);
            break;
        }
        qz_file *f = files_add(&c->fs, shard, true);
        if (!f) {
            fx_sink_abort(sink);
            st = vsr_err_set(err, VSR_E_NOMEM, "quantize: out of memory");
            break;
        }
        st = fx_sink_close(sink, f->sha, &f->bytes, err);
        for (int i = 0; i < c->pl.n_lin; i++) out_free(&c->run.out[i]); /* this shard's layers */
    }
    free(tensors);
    free(e);
    return st;
}

static int cmp_qz_file(const void *a, const void *b) { return strcmp(((const qz_file *)a)->name, ((const qz_file *)b)->name); }

static vsr_status write_manifest(qz_ctx *c, const vsr_quantize_opts *o, vsr_quantize_info *info, vsr_err *err) {
    const vsr_package *p = c->p;
    char mpath[PATH_MAX];
    json_t *man = NULL;
    vsr_status st = vsr_package_resolve_inside(p->path, VSR_MANIFEST_NAME, "the package", mpath, sizeof mpath, err);
    if (!st) st = vsr_json_load_file(mpath, VSR_MANIFEST_NAME, VSR_JSON_MAX_BYTES, &man, err);
    if (st) return st;
    qsort(c->fs.f, (size_t)c->fs.n, sizeof *c->fs.f, cmp_qz_file);
    const char *names[128], *shas[128];
    int ni = 0;
    json_t *fsha = json_object(), *fbytes = json_object(), *idf = json_object();
    for (int i = 0; i < c->fs.n; i++) {
        json_object_set_new(fsha, c->fs.f[i].name, json_string(c->fs.f[i].sha));
        json_object_set_new(fbytes, c->fs.f[i].name, json_integer((json_int_t)c->fs.f[i].bytes));
        if (c->fs.f[i].identity && ni < 128) {
            names[ni] = c->fs.f[i].name;
            shas[ni++] = c->fs.f[i].sha;
            json_object_set_new(idf, c->fs.f[i].name, json_string(c->fs.f[i].sha));
        }
    }
    char model_sha[65];
    if ((st = vsr_identity_model_sha256(ni, names, shas, p->decision.json, model_sha, err))) goto done;
    char mname[128];
    if (o->model_name) snprintf(mname, sizeof mname, "%s", o->model_name);
    else snprintf(mname, sizeof mname, "%.100s%s", p->manifest.model_name[0] ? p->manifest.model_name : "model",
                  scheme_suffix(c->pl.scheme));
    json_object_set_new(man, "model_name", json_string(mname));
    json_object_set_new(man, "files_sha256", fsha);
    json_object_set_new(man, "files_bytes", fbytes);
    fsha = fbytes = NULL;
    json_t *id = json_object_get(man, "identity");
    if (!json_is_object(id)) {
        id = json_object();
        json_object_set_new(man, "identity", id);
    }
    json_object_set_new(id, "model_sha256", json_string(model_sha));
    json_object_set_new(id, "files_sha256", idf);
    idf = NULL;
    json_object_set_new(man, "quantization",
                        json_pack("{s:s,s:s,s:s}", "scheme", vsr_qscheme_name(c->pl.scheme), "record",
                                  VSR_QUANTIZE_RECORD_NAME, "source_model_sha256", p->model_sha256));
    qz_files mf = {0};
    if ((st = write_json_file(c->tmp, VSR_MANIFEST_NAME, man, true, &mf, err))) goto done;
    if (info) {
        snprintf(info->model_name, sizeof info->model_name, "%s", mname);
        memcpy(info->model_sha256, model_sha, 65);
        memcpy(info->manifest_sha256, mf.f[0].sha, 65);
    }
    free(mf.f);
done:
    json_decref(fsha);
    json_decref(fbytes);
    json_decref(idf);
    json_decref(man);
    return st;
}

static vsr_status make_tmp(qz_ctx *c, const char *out_dir, vsr_err *err) {
    struct stat sb;
    if (lstat(out_dir, &sb) == 0)
        return vsr_err_set(err, VSR_E_INVALID, "%s already exists; quantize writes a new folder (remove it or pick "
                                               "another OUT)", out_dir);
    if ((size_t)snprintf(c->tmp, sizeof c->tmp, "%s.tmpXXXXXX", out_dir) >= sizeof c->tmp - 1)
        return vsr_err_set(err, VSR_E_INVALID, "%s: path too long", out_dir);
    if (!mkdtemp(c->tmp))
        return vsr_err_set(err, VSR_E_IO, "%s: cannot create a folder next to it: %s", out_dir, strerror(errno));
    c->tmp_made = true;
    return VSR_OK;
}

static void remove_tmp(qz_ctx *c) {
    if (!c->tmp_made) return;
    char path[PATH_MAX * 2];
    for (int i = 0; i < c->fs.n; i++) {
        snprintf(path, sizeof path, "%s/%s", c->tmp, c->fs.f[i].name);
        unlink(path);
    }
    snprintf(path, sizeof path, "%s/%s", c->tmp, VSR_MANIFEST_NAME);
    unlink(path);
    rmdir(c->tmp); /* fails (and leaves it) only if something else was put there */
}

static vsr_status open_source(qz_ctx *c, const char *src, const char *store_dir, const vsr_quantize_opts *o,
                              vsr_err *err) {
    vsr_status st = vsr_package_open(src, NULL, store_dir, &c->p, err);
    /* named once: most of the reader's messages start with the package already */
    if (st) return strncmp(err->msg, src, strlen(src)) ? vsr_err_prefix(err, "%s", src) : st;
    vsr_package *p = c->p;
    if (p->quant.scheme != VSR_SCHEME_BF16)
        return vsr_err_set(err, VSR_E_INVALID, "%s is not a BF16 package: its weights are already %s; quantize reads a "
                                               "BF16 package",
                           src, vsr_scheme_info(p->quant.scheme)->label);
    if (p->family != VSR_FAMILY_DECISION3)
        return vsr_err_set(err, VSR_E_UNSUPPORTED,
                           "%s: --scheme %s is not allowed for a %s package: only Decision 3.0 packages may carry "
                           "quantized weights (serve this family's BF16 package)",
                           src, o->scheme, vsr_family_name(p->family));
    vsr_progress *pr = o->progress ? vsr_progress_new("verify source", vsr_package_verify_bytes(p), "B") : NULL;
    st = vsr_package_verify(p, o->threads, pr, err);
    vsr_progress_done(pr);
    if (st) return vsr_err_prefix(err, "%s: the source package does not verify", src);
    return vsr_package_map(p, err);
}

vsr_status qz_calib_memory_check(uint64_t need, int n_inputs, uint64_t avail, vsr_err *err) {
    if (need <= avail) return VSR_OK;
    const double gib = 1024.0 * 1024.0 * 1024.0;
    return vsr_err_set(err, VSR_E_NOMEM,
                       "calibration needs %.1f GiB of host memory for the Hessians of %d Linear inputs (8 K^2 bytes "
                       "each, every layer's held at once); this host has %.1f GiB available: quantize with --scheme "
                       "fp8-dynamic or nvfp4 (no calibration), or on a host with more memory",
                       (double)need / gib, n_inputs, (double)avail / gib);
}

/* The decoder layers' Linears (those the forward's tap reports) against the host's available memory. */
static vsr_status check_calib_memory(const qz_plan *pl, const vsr_device_list *devs, vsr_err *err) {
    const char **names = malloc(sizeof *names * (size_t)(pl->n_lin ? pl->n_lin : 1));
    int64_t *Ks = malloc(sizeof *Ks * (size_t)(pl->n_lin ? pl->n_lin : 1));
    if (!names || !Ks) {
        free(names), free(Ks);
        return vsr_err_set(err, VSR_E_NOMEM, "quantize: out of memory");
    }
    int n = 0;
    for (int i = 0; i < pl->n_lin; i++)
        if (pl->lin[i].layer >= 0) names[n] = pl->lin[i].module, Ks[n] = pl->lin[i].K, n++;
    int n_inputs = 0;
    uint64_t need = vsr_calib_hessian_bytes(names, Ks, n, &n_inputs);
    free(names), free(Ks);
    for (int i = 0; i < devs->count; i++)
        if (devs->dev[i].kind == VSR_DEV_CPU) return qz_calib_memory_check(need, n_inputs, devs->dev[i].mem_free, err);
    return VSR_OK; /* no host memory figure (the CPU probe always gives one) */
}

/* Runs the calibration prompts through our own forward of the BF16 package (H5's calibrate.c). */
static vsr_status collect(qz_ctx *c, const vsr_quantize_opts *o, vsr_calib **calib, char sha[65], int *used,
                          vsr_err *err) {
    vsr_model_opts mo = {.threads = o->threads, .dtype = "auto"};
    vsr_device_list devs;
    vsr_status st = vsr_devices_probe(&devs, err);
    if (st) return st;
    vsr_gate_request gr;
    vsr_package_gate_request(c->p, &gr);
    int chosen = -1;
    if ((st = vsr_place(&devs, o->device ? o->device : "cpu", &gr, &chosen, err)))
        return vsr_err_prefix(err, "--device %s (the calibration forward)", o->device ? o->device : "cpu");
    mo.device = &devs.dev[chosen];
    if ((st = check_calib_memory(&c->pl, &devs, err))) return st;
    bool gptq = c->pl.scheme == VSR_Q_W4A16_GPTQ;
    st = vsr_calib_collect(c->p, o->calibration, o->samples ? o->samples : DEFAULT_SAMPLES, true, !gptq, &mo, calib,
                           sha, used, err);
    if (st) /* the calibration reader names the file itself */
        return strncmp(err->msg, o->calibration, strlen(o->calibration))
                   ? vsr_err_prefix(err, "--calibration %s", o->calibration)
                   : vsr_err_prefix(err, "--calibration");
    return VSR_OK;
}

vsr_status vsr_quantize_package(const char *src, const char *store_dir, const char *out_dir, const vsr_quantize_opts *o,
                                vsr_quantize_info *info, vsr_err *err) {
    vsr_status st = vsr_quantize_check_opts(o, err);
    if (st) return st;
    if (info) memset(info, 0, sizeof *info);
    qz_ctx c;
    memset(&c, 0, sizeof c);
    json_t *cfg = NULL, *index = NULL, *rec = NULL;
    vsr_qscheme s;
    vsr_qscheme_parse(o->scheme, &s);
    {
        struct stat sb;
        if (lstat(out_dir, &sb) == 0)
            return vsr_err_set(err, VSR_E_INVALID, "%s already exists; quantize writes a new folder (remove it or pick "
                                                   "another OUT)", out_dir);
    }
    if ((st = open_source(&c, src, store_dir, o, err))) goto done;
    int group = o->group_size ? o->group_size : DEFAULT_GROUP;
    if ((st = qz_plan_make(c.p, s, group, o->actorder, o->ignore, o->n_ignore, &c.pl, err))) goto done;
    char calib_sha[65] = "";
    int samples_used = 0;
    vsr_calib *calib = NULL;
    if (s == VSR_Q_W4A16_GPTQ || s == VSR_Q_W4A16_AWQ) {
        if ((st = collect(&c, o, &calib, calib_sha, &samples_used, err))) goto done;
    }
    if ((st = make_tmp(&c, out_dir, err))) goto done;

    c.run = (qz_run){.p = c.p, .pl = &c.pl, .threads = o->threads, .calib = calib};
    c.run.norm_in = calloc((size_t)c.pl.n_layers + 1, sizeof *c.run.norm_in);
    c.run.norm_post = calloc((size_t)c.pl.n_layers + 1, sizeof *c.run.norm_post);
    c.run.n_units = c.pl.n_layers + c.pl.n_lin;
    c.run.out = calloc((size_t)c.pl.n_lin, sizeof *c.run.out);
    c.run.unit_counted = calloc((size_t)c.run.n_units, sizeof *c.run.unit_counted);
    if (!c.run.out || !c.run.unit_counted || !c.run.norm_in || !c.run.norm_post) {
        st = vsr_err_set(err, VSR_E_NOMEM, "quantize: out of memory");
        goto done;
    }
    int units = 0;
    for (int u = 0; u < c.run.n_units; u++)
        for (int i = 0; i < c.pl.n_lin; i++)
            if (c.pl.lin[i].quantized && unit_of(&c.pl, i) == u) {
                units++;
                break;
            }
    c.run.prog = o->progress ? vsr_progress_new("quantize: layers", (uint64_t)units, "layers") : NULL;

    bool sharded = false;
    for (size_t i = 0; i < vsr_weights_file_count(c.p->weights); i++)
        if (!strcmp(vsr_weights_file_name(c.p->weights, i), INDEX_NAME)) sharded = true;
    json_t *wmap = sharded ? json_object() : NULL;
    uint64_t total = 0;
    st = write_shards(&c, wmap, &total, err);
    vsr_progress_done(c.run.prog);
    c.run.prog = NULL;
    if (st) {
        json_decref(wmap);
        goto done;
    }
    if (sharded) {
        /* The source index's metadata, with the new total_size. */
        char ipath[PATH_MAX];
        json_t *src_index = NULL;
        st = vsr_package_resolve_inside(c.p->path, INDEX_NAME, "the package", ipath, sizeof ipath, err);
        if (!st) st = vsr_json_load_file(ipath, INDEX_NAME, 64u << 20, &src_index, err);
        if (st) {
            json_decref(wmap);
            goto done;
        }
        json_t *md = json_object_get(src_index, "metadata");
        md = json_is_object(md) ? json_deep_copy(md) : json_object();
        json_object_set_new(md, "total_size", json_integer((json_int_t)total));
        json_decref(src_index);
        index = json_pack("{s:o,s:o}", "metadata", md, "weight_map", wmap);
        if ((st = write_json_file(c.tmp, INDEX_NAME, index, true, &c.fs, err))) goto done;
    }
    /* config.json as compressed-tensors rewrites it: indent 2, sorted keys, no newline. */
    char cpath[PATH_MAX];
    if ((st = vsr_package_resolve_inside(c.p->path, "config.json", "the package", cpath, sizeof cpath, err)) ||
        (st = vsr_json_load_file(cpath, "config.json", VSR_JSON_MAX_BYTES, &cfg, err)))
        goto done;
    json_object_set_new(cfg, "quantization_config", qz_config_json(&c.pl));
    if ((st = write_json_file(c.tmp, "config.json", cfg, false, &c.fs, err))) goto done;
    for (int i = 0; i < c.p->manifest.n_files; i++) {
        const char *name = c.p->manifest.files[i].name;
        if (!strcmp(name, "config.json") || !strcmp(name, INDEX_NAME) || !strcmp(name, VSR_QUANTIZE_RECORD_NAME) ||
            is_weight_file(c.p, name))
            continue;
        if ((st = copy_file(c.p, name, c.tmp, &c.fs, err))) goto done;
    }
    rec = record_json(c.p, &c.pl, o, calib_sha, samples_used);
    if (s == VSR_Q_W4A16_AWQ) /* the search's own measure of its gain (exact output loss on H) */
        json_object_set_new(json_object_get(rec, "recipe"), "awq_loss",
                            json_pack("{s:f,s:f}", "round_to_nearest", c.run.awq_rtn_loss, "searched", c.run.awq_best_loss));
    if ((st = write_json_file(c.tmp, VSR_QUANTIZE_RECORD_NAME, rec, true, &c.fs, err))) goto done;
    if ((st = write_manifest(&c, o, info, err))) goto done;
    chmod(c.tmp, 0755); /* mkdtemp made it 0700; a package folder is as readable as its files */
    if (rename(c.tmp, out_dir) != 0) {
        st = vsr_err_set(err, VSR_E_IO, "%s: cannot rename %s to it: %s", out_dir, c.tmp, strerror(errno));
        goto done;
    }
    c.tmp_made = false;
    if (info) {
        memcpy(info->source_model_sha256, c.p->model_sha256, 65);
        info->n_quantized = c.pl.n_quant;
        info->n_ignored = c.pl.n_lin - c.pl.n_quant;
        info->weight_bytes_in = vsr_weights_total_bytes(c.p->weights);
        info->weight_bytes_out = total;
        for (size_t i = 0; i < vsr_weights_file_count(c.p->weights); i++)
            if (strcmp(vsr_weights_file_name(c.p->weights, i), INDEX_NAME)) info->n_shards++;
        snprintf(info->calibration_sha256, sizeof info->calibration_sha256, "%s", calib_sha);
        info->samples_used = samples_used;
    }
done:
    vsr_progress_done(c.run.prog);
    if (st) remove_tmp(&c);
    for (int i = 0; c.run.out && i < c.pl.n_lin; i++) out_free(&c.run.out[i]);
    free(c.run.out);
    free(c.run.unit_counted);
    for (int i = 0; c.run.norm_in && i < c.pl.n_layers; i++) {
        free(c.run.norm_in[i]);
        free(c.run.norm_post[i]);
    }
    free(c.run.norm_in);
    free(c.run.norm_post);
    vsr_calib_free(calib);
    free(c.fs.f);
    json_decref(cfg);
    json_decref(index);
    json_decref(rec);
    qz_plan_free(&c.pl);
    vsr_package_close(c.p);
    return st;
}
