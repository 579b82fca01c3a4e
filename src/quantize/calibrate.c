/* src/quantize/calibrate.c: calibration statistics for GPTQ (H = sum x x^T) and AWQ (mean |x| per
 * input channel), gathered by running calibration samples through OUR forward with the model's
 * activation tap (vsr_model_set_tap) on the BF16 package, all layers in one pass.
 *
 * Linears that read one input share one statistics slot: q/k/v_proj (input_layernorm's output in a
 * full-attention layer), the DeltaNet in_proj_* (the same in a linear-attention layer), gate/up_proj
 * (post_attention_layernorm's output). Memory: 8 K^2 bytes per slot (K = the slot's input width). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/threadpool.h"
#include "quantize/quant_internal.h"
#include "vsr/calibrate.h"
#include "vsr/decision.h"
#include "vsr/hash.h"
#include "vsr/progress.h"
#include "vsr/safetensors.h"
#include "vsr/tokenizer.h"

typedef struct slot {
    char key[256]; /* the shared input's name: module prefix + input id */
    int64_t K, n_tokens;
    double *H, *absum; /* absum: sum |x| until finished, then the mean */
} slot;

struct vsr_calib {
    vsr_calib_layer *layers;
    int n, cap;
    slot *slots;
    int n_slots, cap_slots;
    bool want_h, want_act;
    const vsr_package *pkg;
    vsr_pool *pool;
    double *xd; /* [rows, K] FP64 copy of the tapped input */
    size_t xd_cap;
    char grp_key[256]; /* the input of the current group of sibling calls */
    int grp[8], n_grp;
    vsr_status st; /* first failure inside the tap */
    vsr_err err;
};

/* Module suffix -> the input it reads (siblings share it). */
static const struct {
    const char *suffix, *input;
} shared_inputs[] = {
    {"self_attn.q_proj", "self_attn.qkv<in>"},          {"self_attn.k_proj", "self_attn.qkv<in>"},
    {"self_attn.v_proj", "self_attn.qkv<in>"},          {"linear_attn.in_proj_qkv", "linear_attn.in_proj<in>"},
    {"linear_attn.in_proj_z", "linear_attn.in_proj<in>"}, {"linear_attn.in_proj_b", "linear_attn.in_proj<in>"},
    {"linear_attn.in_proj_a", "linear_attn.in_proj<in>"}, {"mlp.gate_proj", "mlp.gate_up<in>"},
    {"mlp.up_proj", "mlp.gate_up<in>"},
};

static void input_key(const char *module, char *key, size_t cap) {
    size_t ml = strlen(module);
    for (size_t i = 0; i < sizeof shared_inputs / sizeof *shared_inputs; i++) {
        size_t sl = strlen(shared_inputs[i].suffix);
        if (ml > sl && module[ml - sl - 1] == '.' && !strcmp(module + ml - sl, shared_inputs[i].suffix)) {
            snprintf(key, cap, "%.*s%s", (int)(ml - sl), module, shared_inputs[i].input);
            return;
        }
    }
    snprintf(key, cap, "%s<in>", module);
}

uint64_t vsr_calib_hessian_bytes(const char *const *modules, const int64_t *K, int n, int *n_inputs) {
    uint64_t bytes = 0;
    int distinct = 0;
    for (int i = 0; i < n; i++) {
        char key[256], other[256];
        input_key(modules[i], key, sizeof key);
        bool seen = false;
        for (int j = 0; j < i && !seen; j++) {
            input_key(modules[j], other, sizeof other);
            seen = !strcmp(key, other);
        }
        if (seen) continue;
        distinct++;
        bytes += 8u * (uint64_t)K[i] * (uint64_t)K[i];
    }
    if (n_inputs) *n_inputs = distinct;
    return bytes;
}

static slot *find_slot(vsr_calib *c, const char *key) {
    for (int i = 0; i < c->n_slots; i++)
        if (!strcmp(c->slots[i].key, key)) return &c->slots[i];
    return NULL;
}

static vsr_status add_layer(vsr_calib *c, const char *module, int64_t K, slot **out) {
    char key[256];
    input_key(module, key, sizeof key);
    slot *s = find_slot(c, key);
    if (!s) {
        if (c->n_slots == c->cap_slots) {
            int nc = c->cap_slots ? 2 * c->cap_slots : 32;
            slot *ns = realloc(c->slots, sizeof *ns * (size_t)nc);
            if (!ns) return vsr_err_set(&c->err, VSR_E_NOMEM, "calibration: out of memory");
            /* layers get their slot's pointers in finish(), after the last move */
            c->slots = ns, c->cap_slots = nc;
        }
        s = &c->slots[c->n_slots];
        memset(s, 0, sizeof *s);
        snprintf(s->key, sizeof s->key, "%s", key);
        s->K = K;
        if (c->want_h && !(s->H = calloc((size_t)K * (size_t)K, sizeof *s->H)))
            return vsr_err_set(&c->err, VSR_E_NOMEM, "calibration: out of memory for the %lld x %lld Hessian of %s",
                               (long long)K, (long long)K, module);
        if (c->want_act && !(s->absum = calloc((size_t)K, sizeof *s->absum)))
            return vsr_err_set(&c->err, VSR_E_NOMEM, "calibration: out of memory");
        c->n_slots++;
    }
    if (s->K != K)
        return vsr_err_set(&c->err, VSR_E_INTERNAL, "calibration: %s reads %lld inputs, its sibling %lld", module,
                           (long long)K, (long long)s->K);
    if (c->n == c->cap) {
        int nc = c->cap ? 2 * c->cap : 64;
        vsr_calib_layer *nl = realloc(c->layers, sizeof *nl * (size_t)nc);
        if (!nl) return vsr_err_set(&c->err, VSR_E_NOMEM, "calibration: out of memory");
        c->layers = nl, c->cap = nc;
    }
    vsr_calib_layer *L = &c->layers[c->n++];
    memset(L, 0, sizeof *L);
    snprintf(L->module, sizeof L->module, "%s", module);
    L->K = K;
    char wname[300];
    snprintf(wname, sizeof wname, "%s.weight", module);
    const vsr_tensor *t = vsr_weights_find(c->pkg->weights, wname);
    L->N = t && t->ndim == 2 ? t->shape[0] : 0;
    *out = s;
    return VSR_OK;
}

static vsr_calib_layer *find_layer(vsr_calib *c, const char *module) {
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->layers[i].module, module)) return &c->layers[i];
    return NULL;
}

static void on_tap(void *ctx, const char *module, const float *x, int64_t rows, int64_t K) {
    vsr_calib *c = ctx;
    if (c->st) return;
    char key[256];
    input_key(module, key, sizeof key);
    vsr_calib_layer *L = find_layer(c, module);
    slot *s = NULL;
    if (!L) {
        if ((c->st = add_layer(c, module, K, &s))) return;
        L = &c->layers[c->n - 1];
    } else
        s = find_slot(c, key);
    if (L->K != K) {
        c->st = vsr_err_set(&c->err, VSR_E_INTERNAL, "calibration: %s read %lld inputs, now %lld", module,
                            (long long)L->K, (long long)K);
        return;
    }
    L->n_tokens += rows;
    /* Siblings are called back to back with one input: it counts once, for the first of them. A
     * call starts a new group when its input differs or its module was already called in this one
     * (the next MLP chunk calls gate_proj again). */
    int li = (int)(L - c->layers);
    bool same = !strcmp(c->grp_key, key) && c->n_grp < 8;
    for (int i = 0; same && i < c->n_grp; i++)
        if (c->grp[i] == li) same = false;
    if (same) {
        c->grp[c->n_grp++] = li;
        return;
    }
    snprintf(c->grp_key, sizeof c->grp_key, "%s", key);
    c->grp[0] = li, c->n_grp = 1;
    s->n_tokens += rows;
    size_t n = (size_t)rows * (size_t)K;
    if (n > c->xd_cap) {
        double *nb = realloc(c->xd, sizeof *nb * n);
        if (!nb) {
            c->st = vsr_err_set(&c->err, VSR_E_NOMEM, "calibration: out of memory for a [%lld, %lld] input of %s",
                                (long long)rows, (long long)K, module);
            return;
        }
        c->xd = nb, c->xd_cap = n;
    }
    for (size_t i = 0; i < n; i++) c->xd[i] = x[i];
    if (s->absum)
        for (int64_t t = 0; t < rows; t++)
            for (int64_t k = 0; k < K; k++) s->absum[k] += fabs(c->xd[t * K + k]);
    if (s->H && qz_hessian_add(s->H, c->xd, rows, K, c->pool)) /* upper triangle; finish() mirrors it */
        c->st = vsr_err_set(&c->err, VSR_E_NOMEM, "calibration: out of memory for the packed [%lld, %lld] input of %s",
                            (long long)rows, (long long)K, module);
}

/* ---- the calibration file ---- */

static vsr_status read_file(const char *path, char **buf, size_t *len, vsr_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return vsr_err_set(err, VSR_E_IO, "%s: cannot open the calibration file", path);
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap + 1);
    while (b) {
        size_t r = fread(b + n, 1, cap - n, f);
        n += r;
        if (n < cap) break;
        char *nb = realloc(b, 2 * cap + 1);
        if (!nb) free(b);
        b = nb, cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (!b) return vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory", path);
    if (bad) {
        free(b);
        return vsr_err_set(err, VSR_E_IO, "%s: read failed", path);
    }
    b[n] = 0;
    *buf = b, *len = n;
    return VSR_OK;
}

static vsr_status run_text(vsr_calib *c, vsr_model *m, vsr_decider *d, const char *path, int line, const char *text,
                           vsr_err *err) {
    int32_t *ids = NULL;
    size_t n = 0;
    vsr_status st = vsr_tokenizer_encode(vsr_decider_tokenizer(d), text, strlen(text), &ids, &n, err);
    if (st) return vsr_err_prefix(err, "%s line %d", path, line);
    int64_t max = vsr_decider_max_input_tokens(d);
    if (n == 0) st = vsr_err_set(err, VSR_E_INVALID, "%s line %d: \"text\" encodes to no tokens", path, line);
    else if (max > 0 && (int64_t)n > max)
        st = vsr_err_set(err, VSR_E_INVALID, "%s line %d: \"text\" has %zu tokens, more than the model's %lld", path,
                         line, n, (long long)max);
    else {
        const int32_t *rows[1] = {ids};
        int lens[1] = {(int)n};
        st = vsr_model_forward_last(m, 1, rows, lens, NULL, NULL, err);
    }
    free(ids);
    (void)c;
    return st;
}

static vsr_status run_request(vsr_model *m, vsr_decider *d, const char *path, int line, const char *body, size_t len,
                              vsr_err *err) {
    (void)m;
    vsr_http_error herr = {0};
    vsr_decision_job *j = vsr_decision_parse(d, body, len, NULL, &herr);
    if (!j)
        return vsr_err_set(err, VSR_E_INVALID, "%s line %d: not a valid decision request: %s", path, line,
                           herr.message);
    vsr_status st = vsr_decision_rows(j) > 0 ? vsr_decision_run(d, j, NULL, NULL, NULL, err)
                                             : vsr_err_set(err, VSR_E_INVALID,
                                                           "%s line %d: the decision request has no valid question",
                                                           path, line);
    vsr_decision_free(j);
    if (st) vsr_err_prefix(err, "%s line %d", path, line);
    return st;
}

static void finish(vsr_calib *c) {
    for (int i = 0; i < c->n_slots; i++) {
        slot *s = &c->slots[i];
        if (s->H)
            for (int64_t a = 0; a < s->K; a++)
                for (int64_t b = 0; b < a; b++) s->H[a * s->K + b] = s->H[b * s->K + a];
        if (s->absum && s->n_tokens > 0)
            for (int64_t k = 0; k < s->K; k++) s->absum[k] /= (double)s->n_tokens;
    }
    for (int i = 0; i < c->n; i++) {
        char key[256];
        input_key(c->layers[i].module, key, sizeof key);
        slot *s = find_slot(c, key);
        c->layers[i].H = s->H;
        c->layers[i].act_absmean = s->absum;
    }
}

vsr_status vsr_calib_collect(const vsr_package *bf16_pkg, const char *calibration_jsonl, int samples,
                             bool want_hessian, bool want_act, const vsr_model_opts *mo, vsr_calib **out,
                             char sha256_hex[65], int *n_used, vsr_err *err) {
    *out = NULL;
    if (n_used) *n_used = 0;
    if (!bf16_pkg || !calibration_jsonl)
        return vsr_err_set(err, VSR_E_INVALID, "calibration: needs a package and a calibration file");
    if (bf16_pkg->quant.scheme != VSR_SCHEME_BF16)
        return vsr_err_set(err, VSR_E_INVALID, "%s: calibration runs on a BF16 package (this one is %s)",
                           bf16_pkg->path, vsr_scheme_info(bf16_pkg->quant.scheme)->name);
    if (!want_hessian && !want_act)
        return vsr_err_set(err, VSR_E_INVALID, "calibration: asked for neither Hessians nor activation means");
    char *buf = NULL;
    size_t len = 0;
    vsr_status st = read_file(calibration_jsonl, &buf, &len, err);
    if (st) return st;
    char sha[65];
    vsr_sha256_hex(buf, len, sha);
    /* count the samples first, so the progress line has a total and bad lines fail early */
    int total = 0, line = 0;
    for (char *p = buf; p < buf + len; line++) {
        char *e = memchr(p, '\n', (size_t)(buf + len - p));
        size_t l = e ? (size_t)(e - p) : (size_t)(buf + len - p);
        size_t t = 0;
        while (t < l && (p[t] == ' ' || p[t] == '\t' || p[t] == '\r')) t++;
        if (t < l) total++;
        p += l + 1;
    }
    if (total == 0) {
        free(buf);
        return vsr_err_set(err, VSR_E_INVALID, "%s: no calibration samples (expected JSON lines)", calibration_jsonl);
    }
    if (samples > 0 && samples < total) total = samples;

    vsr_calib *c = calloc(1, sizeof *c);
    vsr_model *m = NULL;
    vsr_decider *d = NULL;
    vsr_model_opts o = mo ? *mo : (vsr_model_opts){0};
    if (!c) {
        free(buf);
        return vsr_err_set(err, VSR_E_NOMEM, "calibration: out of memory");
    }
    c->want_h = want_hessian, c->want_act = want_act, c->pkg = bf16_pkg;
    c->pool = vsr_pool_new(o.threads);
    if ((st = vsr_model_load(bf16_pkg, &o, &m, err)) || (st = vsr_decider_open(bf16_pkg, m, &d, err))) goto fail;
    vsr_model_set_tap(m, on_tap, c);
    vsr_progress *pr = vsr_progress_new("calibrate: samples", (uint64_t)total, "samples");
    int used = 0;
    line = 0;
    for (char *p = buf; p < buf + len && used < total;) {
        char *e = memchr(p, '\n', (size_t)(buf + len - p));
        size_t l = e ? (size_t)(e - p) : (size_t)(buf + len - p);
        line++;
        char *q = p;
        p += l + 1;
        size_t t = 0;
        while (t < l && (q[t] == ' ' || q[t] == '\t' || q[t] == '\r')) t++;
        if (t == l) continue;
        json_error_t je;
        json_t *root = json_loadb(q, l, 0, &je);
        if (!root || !json_is_object(root)) {
            st = vsr_err_set(err, VSR_E_INVALID, "%s line %d: expected a JSON object ({\"text\": ...} or a decision "
                             "request with \"state\" and \"questions\")%s%s", calibration_jsonl, line,
                             root ? "" : ": ", root ? "" : je.text);
            json_decref(root);
            break;
        }
        json_t *text = json_object_get(root, "text");
        if (text && json_is_string(text))
            st = run_text(c, m, d, calibration_jsonl, line, json_string_value(text), err);
        else if (text)
            st = vsr_err_set(err, VSR_E_INVALID, "%s line %d: \"text\" must be a string", calibration_jsonl, line);
        else if (json_object_get(root, "questions"))
            st = run_request(m, d, calibration_jsonl, line, q, l, err);
        else
            st = vsr_err_set(err, VSR_E_INVALID, "%s line %d: a sample needs \"text\" (a string) or \"questions\" "
                             "(a decision request)", calibration_jsonl, line);
        json_decref(root);
        if (!st && c->st) st = vsr_err_set(err, c->err.code, "%s", c->err.msg);
        if (st) break;
        used++;
        vsr_progress_add(pr, 1);
    }
    vsr_progress_done(pr);
    vsr_model_set_tap(m, NULL, NULL);
    if (st) goto fail;
    if (c->n == 0) {
        st = vsr_err_set(err, VSR_E_INTERNAL, "calibration: the forward reported no linear inputs");
        goto fail;
    }
    finish(c);
    vsr_decider_free(d);
    vsr_model_free(m);
    free(buf);
    free(c->xd), c->xd = NULL;
    vsr_pool_free(c->pool), c->pool = NULL;
    memcpy(sha256_hex, sha, 65);
    if (n_used) *n_used = used;
    *out = c;
    return VSR_OK;
fail:
    vsr_decider_free(d);
    vsr_model_free(m);
    free(buf);
    vsr_calib_free(c);
    return st;
}

const vsr_calib_layer *vsr_calib_find(const vsr_calib *c, const char *module) {
    if (!c || !module) return NULL;
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->layers[i].module, module)) return &c->layers[i];
    return NULL;
}

int vsr_calib_count(const vsr_calib *c) { return c ? c->n : 0; }

const vsr_calib_layer *vsr_calib_at(const vsr_calib *c, int i) {
    return c && i >= 0 && i < c->n ? &c->layers[i] : NULL;
}

void vsr_calib_free(vsr_calib *c) {
    if (!c) return;
    for (int i = 0; i < c->n_slots; i++) free(c->slots[i].H), free(c->slots[i].absum);
    free(c->slots);
    free(c->layers);
    free(c->xd);
    vsr_pool_free(c->pool);
    free(c);
}
