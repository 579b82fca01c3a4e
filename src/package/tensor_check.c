/* Tensor cross-check of a qwen3_5 text model against its config and quantization scheme
 * (names, dtypes, shapes; modeling_qwen3_5.py in transformers 5.x gives the layout), the
 * readout, and the parameter counts. H heads, KV kv heads, d head_dim, Kd/Vd DeltaNet
 * key/value dims, Hv value heads, I intermediate size. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "package/package_internal.h"

#define TEXT_PREFIX_A "model.language_model."
#define TEXT_PREFIX_B "language_model."

static bool starts(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }
static bool ends(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcmp(s + n - m, suf);
}

static bool is_vision(const char *name) { return starts(name, "visual.") || starts(name, "model.visual."); }

/* Tensors of a quantized linear that are not parameters of the model. */
static const char *const aux_suffixes[] = {
    ".weight_scale", ".weight_zero_point", ".weight_g_idx", ".weight_shape", ".weight_global_scale",
    ".input_global_scale", ".input_scale", ".input_zero_point", ".k_scale", ".v_scale", ".output_scale", NULL,
};

static int64_t logical_params(const vsr_tensor *t) {
    for (const char *const *s = aux_suffixes; *s; s++)
        if (ends(t->name, *s)) return 0;
    if (ends(t->name, ".weight_packed") && t->ndim == 2) {
        /* int4: I32 words hold 8 values; nvfp4: U8 bytes hold 2. */
        if (t->dtype == VSR_DT_I32) return t->shape[0] * t->shape[1] * 8;
        if (t->dtype == VSR_DT_U8) return t->shape[0] * t->shape[1] * 2;
    }
    return t->numel;
}

/* The reference's prefix rules for a Decision 3.0 checkpoint (published-d3.md): every
 * tensor is under a text prefix (language_model., model.language_model.) or a vision prefix
 * (visual., model.visual.), with exactly one text prefix and at most one vision prefix. */
static vsr_status d3_prefixes(const vsr_package *p, vsr_err *err) {
    size_t n = vsr_weights_count(p->weights), text[2] = {0, 0}, vision[2] = {0, 0};
    for (size_t i = 0; i < n; i++) {
        const vsr_tensor *t = vsr_weights_at(p->weights, i);
        if (starts(t->name, "visual.")) vision[0]++;
        else if (starts(t->name, "model.visual.")) vision[1]++;
        else if (starts(t->name, TEXT_PREFIX_B)) text[0]++;
        else if (starts(t->name, TEXT_PREFIX_A)) text[1]++;
        else {
            char shown[300];
            return vsr_err_set(err, VSR_E_FORMAT,
                               "%s: checkpoint tensor %s belongs to no known module (text tensors start with "
                               "'language_model.' or 'model.language_model.', vision tensors with 'visual.' or "
                               "'model.visual.')",
                               t->file, vsr_py_repr_str(t->name, shown, sizeof shown));
        }
    }
    if (!text[0] && !text[1])
        return vsr_err_set(err, VSR_E_FORMAT,
                           "weights: checkpoint tensors use mixed name prefixes (no tensor is under \"%s\" or \"%s\": "
                           "exactly one text prefix is needed and the checkpoint has no text model)",
                           TEXT_PREFIX_B, TEXT_PREFIX_A);
    if (text[0] && text[1])
        return vsr_err_set(err, VSR_E_FORMAT,
                           "weights: checkpoint tensors use mixed name prefixes (text tensors under both \"%s\" (%zu) "
                           "and \"%s\" (%zu); exactly one text prefix is allowed)",
                           TEXT_PREFIX_A, text[1], TEXT_PREFIX_B, text[0]);
    if (vision[0] && vision[1])
        return vsr_err_set(err, VSR_E_FORMAT,
                           "weights: checkpoint tensors use mixed name prefixes (vision tensors under both "
                           "\"model.visual.\" (%zu) and \"visual.\" (%zu); at most one vision prefix is allowed)",
                           vision[1], vision[0]);
    return VSR_OK;
}

vsr_status vsr_package_count(vsr_package *p, vsr_param_counts *out, vsr_err *err) {
    memset(out, 0, sizeof *out);
    vsr_status st;
    if (p->family == VSR_FAMILY_DECISION3 && (st = d3_prefixes(p, err))) return st;
    size_t n = vsr_weights_count(p->weights), na = 0, nb = 0, nm = 0;
    for (size_t i = 0; i < n; i++) {
        const char *name = vsr_weights_at(p->weights, i)->name;
        if (starts(name, TEXT_PREFIX_A)) na++;
        else if (starts(name, TEXT_PREFIX_B)) nb++;
        else if (starts(name, "model.") && !is_vision(name)) nm++;
    }
    const bool top_text = !strcmp(p->config.model_type, "qwen3_5_text");
    if (na && nb)
        return vsr_err_set(err, VSR_E_FORMAT,
                           "weights: tensors use both text prefixes \"%s\" (%zu) and \"%s\" (%zu); exactly one is "
                           "allowed",
                           TEXT_PREFIX_A, na, TEXT_PREFIX_B, nb);
    if (na) snprintf(p->text_prefix, sizeof p->text_prefix, "%s", TEXT_PREFIX_A);
    else if (nb) snprintf(p->text_prefix, sizeof p->text_prefix, "%s", TEXT_PREFIX_B);
    else if (top_text && nm) snprintf(p->text_prefix, sizeof p->text_prefix, "model.");
    else
        return vsr_err_set(err, VSR_E_FORMAT, "weights: no tensor starts with \"%s\" or \"%s\" (the text model)",
                           TEXT_PREFIX_A, TEXT_PREFIX_B);
    for (size_t i = 0; i < n; i++) {
        const vsr_tensor *t = vsr_weights_at(p->weights, i);
        if (starts(t->name, p->text_prefix) && !is_vision(t->name)) {
            out->text += logical_params(t);
            out->text_bytes += t->nbytes;
        } else if (is_vision(t->name)) {
            out->vision += t->numel;
        } else {
            out->other += t->numel;
        }
    }
    if (p->readout)
        for (size_t i = 0; i < vsr_st_count(p->readout); i++) {
            out->readout += vsr_st_at(p->readout, i)->numel;
            out->readout_bytes += vsr_st_at(p->readout, i)->nbytes;
        }
    return VSR_OK;
}

/* ---- expected tensors ---- */
typedef struct expect {
    char name[160];
    uint32_t dtypes; /* bit per vsr_dtype */
    int ndim;
    int64_t shape[3];
    const char *why; /* context for messages */
} expect;

typedef struct expect_list {
    expect *v;
    size_t n, cap;
    bool oom;
} expect_list;

#define DT(x) (1u << (x))

static void add(expect_list *l, const char *prefix, const char *name, uint32_t dtypes, int ndim, int64_t a,
                int64_t b, int64_t c, const char *why) {
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 256;
        expect *nv = realloc(l->v, nc * sizeof *nv);
        if (!nv) {
            l->oom = true;
            return;
        }
        l->v = nv;
        l->cap = nc;
    }
    expect *e = &l->v[l->n++];
    snprintf(e->name, sizeof e->name, "%s%s", prefix, name);
    e->dtypes = dtypes;
    e->ndim = ndim;
    e->shape[0] = a, e->shape[1] = b, e->shape[2] = c;
    e->why = why;
}

/* One Linear [N, K]: `.weight` when unquantized (BF16 package or ignored module), else
 * the scheme's tensors (compressed-tensors-format.md section 2). */
static vsr_status add_linear(expect_list *l, const vsr_package *p, const char *module, int64_t N, int64_t K,
                             uint32_t wdt, vsr_err *err) {
    const vsr_quant_config *q = &p->quant;
    char pre[160];
    snprintf(pre, sizeof pre, "%s.", module);
    if (q->scheme == VSR_SCHEME_BF16) {
        add(l, pre, "weight", wdt, 2, N, K, 0, "an unquantized linear");
        return VSR_OK;
    }
    if (vsr_quant_module_ignored(q, module)) {
        add(l, pre, "weight", wdt, 2, N, K, 0, "a linear the quantization config ignores");
        return VSR_OK;
    }
    switch (q->scheme) {
    case VSR_SCHEME_FP8:
        add(l, pre, "weight", DT(VSR_DT_F8_E4M3), 2, N, K, 0, "an FP8 linear");
        add(l, pre, "weight_scale", DT(VSR_DT_BF16), 2, N, 1, 0, "an FP8 linear (per-channel scale)");
        break;
    case VSR_SCHEME_INT4: {
        if (K % 8)
            return vsr_err_set(err, VSR_E_FORMAT, "%s: in_features %lld is not a multiple of 8; int4 cannot pack it",
                               module, (long long)K);
        int64_t G = q->group_size > 0 ? (K + q->group_size - 1) / q->group_size : 1;
        add(l, pre, "weight_packed", DT(VSR_DT_I32), 2, N, K / 8, 0, "an int4 linear (8 values per int32)");
        add(l, pre, "weight_scale", DT(VSR_DT_BF16), 2, N, G, 0, "an int4 linear (one scale per group)");
        add(l, pre, "weight_shape", DT(VSR_DT_I64) | DT(VSR_DT_I32), 1, 2, 0, 0, "an int4 linear ([N, K])");
        if (!q->symmetric)
            add(l, pre, "weight_zero_point", DT(VSR_DT_I32), 2, (N + 7) / 8, G, 0,
                "an asymmetric int4 linear (zero points packed along N)");
        if (q->actorder_group) add(l, pre, "weight_g_idx", DT(VSR_DT_I32), 1, K, 0, 0, "an act-order int4 linear");
        break;
    }
    case VSR_SCHEME_NVFP4:
        if (K % 16)
            return vsr_err_set(err, VSR_E_FORMAT,
                               "%s: in_features %lld is not a multiple of 16; NVFP4 cannot group it", module,
                               (long long)K);
        add(l, pre, "weight_packed", DT(VSR_DT_U8), 2, N, K / 2, 0, "an NVFP4 linear (2 values per byte)");
        add(l, pre, "weight_scale", DT(VSR_DT_F8_E4M3), 2, N, K / 16, 0, "an NVFP4 linear (E4M3 block scales)");
        add(l, pre, "weight_global_scale", DT(VSR_DT_F32), 1, 1, 0, 0, "an NVFP4 linear");
        if (q->input_activations) add(l, pre, "input_global_scale", DT(VSR_DT_F32), 1, 1, 0, 0, "an NVFP4 W4A4 linear");
        break;
    default: break;
    }
    return VSR_OK;
}

static uint32_t config_dtype_mask(const vsr_text_config *c) {
    if (!strcmp(c->dtype, "float16")) return DT(VSR_DT_F16);
    if (!strcmp(c->dtype, "float32")) return DT(VSR_DT_F32);
    return DT(VSR_DT_BF16);
}

static int cmp_expect(const void *a, const void *b) { return strcmp(((const expect *)a)->name, ((const expect *)b)->name); }

static void fmt_shape(int ndim, const int64_t *s, char *buf, size_t n) {
    size_t len = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && len < n; i++) len += (size_t)snprintf(buf + len, n - len, "%s%lld", i ? ", " : "", (long long)s[i]);
    if (len < n) snprintf(buf + len, n - len, "]");
}

static void fmt_dtypes(uint32_t m, char *buf, size_t n) {
    size_t len = 0;
    buf[0] = 0;
    for (int d = 0; d < VSR_DT_COUNT && len < n; d++)
        if (m & DT(d)) len += (size_t)snprintf(buf + len, n - len, "%s%s", len ? " or " : "", vsr_dtype_info((vsr_dtype)d)->name);
}

static vsr_status check_one(const vsr_tensor *t, const expect *e, vsr_err *err) {
    char a[96], b[96];
    if (!(e->dtypes & DT(t->dtype))) {
        fmt_dtypes(e->dtypes, a, sizeof a);
        return vsr_err_set(err, VSR_E_FORMAT, "%s: tensor \"%s\" has dtype %s, expected %s for %s", t->file, t->name,
                           vsr_dtype_info(t->dtype)->name, a, e->why);
    }
    bool ok = t->ndim == e->ndim;
    for (int i = 0; ok && i < e->ndim; i++) ok = t->shape[i] == e->shape[i];
    if (!ok) {
        fmt_shape(t->ndim, t->shape, a, sizeof a);
        fmt_shape(e->ndim, e->shape, b, sizeof b);
        return vsr_err_set(err, VSR_E_FORMAT, "%s: tensor \"%s\" has shape %s, expected %s for %s", t->file, t->name,
                           a, b, e->why);
    }
    return VSR_OK;
}

static vsr_status check_readout(const vsr_package *p, vsr_err *err) {
    if (!p->readout) return VSR_OK;
    const vsr_text_config *c = &p->config.text;
    size_t n = vsr_st_count(p->readout);
    const vsr_tensor *w = vsr_st_find(p->readout, "weight");
    if (n != 1 || !w) {
        const char *other = "";
        for (size_t i = 0; i < n; i++)
            if (strcmp(vsr_st_at(p->readout, i)->name, "weight")) other = vsr_st_at(p->readout, i)->name;
        return vsr_err_set(err, VSR_E_FORMAT,
                           "readout.safetensors must hold exactly one tensor named weight (expected \"weight\" [%d, "
                           "%lld]; found %zu tensors%s%s%s)",
                           VSR_D3_CODES, (long long)c->hidden_size, n, *other ? ", e.g. \"" : "", other,
                           *other ? "\"" : "");
    }
    const int64_t want[2] = {VSR_D3_CODES, c->hidden_size};
    char got_s[96], want_s[64];
    vsr_py_repr_shape(w->ndim, w->shape, got_s, sizeof got_s);
    vsr_py_repr_shape(2, want, want_s, sizeof want_s);
    if (w->ndim != 2 || w->shape[0] != want[0] || w->shape[1] != want[1])
        return vsr_err_set(err, VSR_E_FORMAT, "readout.safetensors: %sreadout weight has shape %s, expected %s%s",
                           w->ndim != 2 ? "the readout weight must be a matrix: " : "", got_s, want_s,
                           w->ndim == 2 ? " (255 answer codes x text_config.hidden_size)" : "");
    bool f32 = strcmp(p->decision.readout_dtype, "bfloat16") != 0;
    expect e = {.dtypes = f32 ? DT(VSR_DT_F32) : DT(VSR_DT_BF16), .ndim = 2, .shape = {VSR_D3_CODES, c->hidden_size},
                .why = f32 ? "the readout (decision_config readout_dtype float32)"
                           : "the readout (decision_config readout_dtype bfloat16)"};
    return check_one(w, &e, err);
}

vsr_status vsr_package_check_tensors(const vsr_package *p, vsr_err *err) {
    const vsr_text_config *c = &p->config.text;
    const char *P = p->text_prefix;
    const uint32_t wdt = config_dtype_mask(c), vdt = wdt | DT(VSR_DT_F32);
    const int64_t hid = c->hidden_size, H = c->num_attention_heads, KV = c->num_key_value_heads, d = c->head_dim;
    const int64_t Kd = vsr_text_linear_key_dim(c), Vd = vsr_text_linear_value_dim(c), Hv = c->linear_num_value_heads;
    const int64_t I = c->intermediate_size, conv = 2 * Kd + Vd;
    expect_list l = {0};
    vsr_status st = VSR_OK;
    char mod[200], pre[160];

    add(&l, P, "embed_tokens.weight", wdt, 2, c->vocab_size, hid, 0, "the token embedding");
    add(&l, P, "norm.weight", vdt, 1, hid, 0, 0, "the final norm");
    for (int i = 0; i < c->num_hidden_layers && !st; i++) {
        snprintf(pre, sizeof pre, "%slayers.%d.", P, i);
        add(&l, pre, "input_layernorm.weight", vdt, 1, hid, 0, 0, "a layer norm");
        add(&l, pre, "post_attention_layernorm.weight", vdt, 1, hid, 0, 0, "a layer norm");
        if (c->layer_types[i] == VSR_LAYER_FULL_ATTENTION) {
            /* Gated attention: q_proj yields [q | gate] per head, hence 2*H*d rows. */
            const struct { const char *n; int64_t N, K; } lin[] = {
                {"self_attn.q_proj", 2 * H * d, hid}, {"self_attn.k_proj", KV * d, hid},
                {"self_attn.v_proj", KV * d, hid},   {"self_attn.o_proj", hid, H * d}};
            for (size_t k = 0; k < 4 && !st; k++) {
                snprintf(mod, sizeof mod, "%s%s", pre, lin[k].n);
                st = add_linear(&l, p, mod, lin[k].N, lin[k].K, wdt, err);
            }
            add(&l, pre, "self_attn.q_norm.weight", vdt, 1, d, 0, 0, "a full-attention layer (per-head q norm)");
            add(&l, pre, "self_attn.k_norm.weight", vdt, 1, d, 0, 0, "a full-attention layer (per-head k norm)");
        } else {
            const struct { const char *n; int64_t N, K; } lin[] = {
                {"linear_attn.in_proj_qkv", conv, hid}, {"linear_attn.in_proj_z", Vd, hid},
                {"linear_attn.in_proj_b", Hv, hid},     {"linear_attn.in_proj_a", Hv, hid},
                {"linear_attn.out_proj", hid, Vd}};
            for (size_t k = 0; k < 5 && !st; k++) {
                snprintf(mod, sizeof mod, "%s%s", pre, lin[k].n);
                st = add_linear(&l, p, mod, lin[k].N, lin[k].K, wdt, err);
            }
            add(&l, pre, "linear_attn.conv1d.weight", wdt, 3, conv, 1, c->linear_conv_kernel_dim,
                "a DeltaNet layer (depthwise conv over q|k|v)");
            add(&l, pre, "linear_attn.dt_bias", vdt, 1, Hv, 0, 0, "a DeltaNet layer");
            add(&l, pre, "linear_attn.A_log", vdt, 1, Hv, 0, 0, "a DeltaNet layer");
            add(&l, pre, "linear_attn.norm.weight", vdt, 1, c->linear_value_head_dim, 0, 0,
                "a DeltaNet layer (gated norm over a value head)");
        }
        const struct { const char *n; int64_t N, K; } mlp[] = {
            {"mlp.gate_proj", I, hid}, {"mlp.up_proj", I, hid}, {"mlp.down_proj", hid, I}};
        for (size_t k = 0; k < 3 && !st; k++) {
            snprintf(mod, sizeof mod, "%s%s", pre, mlp[k].n);
            st = add_linear(&l, p, mod, mlp[k].N, mlp[k].K, wdt, err);
        }
    }
    if (st) goto done;
    if (l.oom) {
        st = vsr_err_set(err, VSR_E_NOMEM, "tensor check: out of memory");
        goto done;
    }
    /* Every expected tensor, in layer order, so the first problem reported is the first in the model. */
    for (size_t i = 0; i < l.n; i++) {
        const vsr_tensor *t = vsr_weights_find(p->weights, l.v[i].name);
        if (!t) {
            char a[96], b[96];
            fmt_dtypes(l.v[i].dtypes, a, sizeof a);
            fmt_shape(l.v[i].ndim, l.v[i].shape, b, sizeof b);
            st = vsr_err_set(err, VSR_E_FORMAT, "weights: tensor \"%s\" is missing (expected %s %s for %s)",
                             l.v[i].name, a, b, l.v[i].why);
            goto done;
        }
        if ((st = check_one(t, &l.v[i], err))) goto done;
    }
    /* Then nothing else under the text prefix, and nothing unknown outside it. */
    qsort(l.v, l.n, sizeof *l.v, cmp_expect);
    for (size_t i = 0; i < vsr_weights_count(p->weights); i++) {
        const vsr_tensor *t = vsr_weights_at(p->weights, i);
        if (is_vision(t->name)) continue; /* counted as vision parameters, never loaded */
        if (starts(t->name, P)) {
            expect key;
            snprintf(key.name, sizeof key.name, "%s", t->name);
            if (!bsearch(&key, l.v, l.n, sizeof *l.v, cmp_expect)) {
                st = vsr_err_set(err, VSR_E_FORMAT,
                                 "%s: unexpected tensor \"%s\" (%s): not part of this qwen3_5 text model under its "
                                 "config and %s scheme",
                                 t->file, t->name, vsr_dtype_info(t->dtype)->name, vsr_scheme_info(p->quant.scheme)->name);
                goto done;
            }
            continue;
        }
        if (!strcmp(t->name, "lm_head.weight") && !c->tie_word_embeddings) {
            /* Untied checkpoints keep their LM head; Decision 3.0 reads the readout instead. */
            expect e = {.dtypes = wdt, .ndim = 2, .shape = {c->vocab_size, hid}, .why = "the LM head"};
            if ((st = check_one(t, &e, err))) goto done;
            continue;
        }
        if (p->family == VSR_FAMILY_SPAN && (starts(t->name, "score.") || starts(t->name, "classifier."))) continue;
        if (p->family == VSR_FAMILY_VELA2 && vsr_vela2_head_tensor(t->name)) continue; /* vsr_vela2_check */
        st = vsr_err_set(err, VSR_E_FORMAT,
                         "%s: unexpected tensor \"%s\": neither under the text prefix \"%s\" nor a vision tensor",
                         t->file, t->name, P);
        goto done;
    }
    st = check_readout(p, err);
done:
    free(l.v);
    return st;
}

/* ---- everything a load checks before reading a tensor byte ---- */

static const char *const param_names[] = {"text", "vision", "readout", "loaded"};

vsr_status vsr_package_check(const vsr_package *p, vsr_err *err) {
    vsr_status st;
    if (p->family == VSR_FAMILY_VELA2) return vsr_vela2_check(p, err);
    if (p->family != VSR_FAMILY_UNKNOWN && (st = vsr_package_check_tensors(p, err))) return st;
    if (p->family == VSR_FAMILY_DECISION3 && p->params_vision > 0 && !p->config.has_vision)
        return vsr_err_set(err, VSR_E_FORMAT,
                           "the checkpoint has vision weights but no vision_config (%lld vision parameters; config.json "
                           "has no vision_config)",
                           (long long)p->params_vision);
    if (p->has_manifest) {
        /* A Decision 3.0 manifest must record all four counts (the reference compares each);
         * other families' manifests are checked on the counts they record. */
        const vsr_manifest *m = &p->manifest;
        const int64_t recorded[4] = {m->params_text, m->params_vision, m->params_readout, m->params_loaded};
        const int64_t counted[4] = {p->params_text, p->params_vision, p->params_readout,
                                    p->params_text + p->params_vision + p->params_readout};
        for (int i = 0; i < 4; i++) {
            if (recorded[i] == counted[i] || (recorded[i] < 0 && p->family != VSR_FAMILY_DECISION3)) continue;
            if (recorded[i] < 0)
                return vsr_err_set(err, VSR_E_INTEGRITY,
                                   "%s: tensor counts differ from the manifest's parameter counts (parameters.%s is "
                                   "missing; the weights hold %lld)",
                                   VSR_MANIFEST_NAME, param_names[i], (long long)counted[i]);
            return vsr_err_set(err, VSR_E_INTEGRITY,
                               "%s: tensor counts differ from the manifest's parameter counts (parameters.%s is %lld but "
                               "the weights hold %lld)",
                               VSR_MANIFEST_NAME, param_names[i], (long long)recorded[i], (long long)counted[i]);
        }
    }
    /* The input limit: decision_config max_length, else text_config max_position_embeddings
     * (the reference's `max_length or max_position_embeddings`), at least 16 tokens. */
    if (p->family != VSR_FAMILY_UNKNOWN) {
        int64_t mpe = p->config.text.max_position_embeddings;
        int64_t limit = p->decision.max_length > 0 ? p->decision.max_length : mpe;
        if (limit < 16) {
            char mpe_s[48];
            if (mpe > 0) snprintf(mpe_s, sizeof mpe_s, "%lld", (long long)mpe);
            else snprintf(mpe_s, sizeof mpe_s, "absent");
            return vsr_err_set(err, VSR_E_FORMAT,
                               "the package declares no usable input limit (decision_config.json max_length is %s and "
                               "config.json max_position_embeddings is %s; one of them must be an integer >= 16)",
                               p->family == VSR_FAMILY_DECISION3 ? "null" : "not used by this family", mpe_s);
        }
    }
    return VSR_OK;
}
