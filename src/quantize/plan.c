/* The recipe: which Linear modules of a BF16 Decision 3.0 package a scheme quantizes, and the
 * quantization_config compressed-tensors 0.20.1 writes for it.
 *
 * llm-compressor applies a recipe of patterns (targets "Linear", ignore [...]); when the model
 * is saved, compressed-tensors rebuilds the config from the modules
 * (QuantizationConfig.from_pretrained): `ignore` becomes the names of every module of a
 * quantized type ("Linear") that carries no scheme, in model.named_modules() order. We apply
 * the same patterns with the config parser's matcher (vsr_quant_module_ignored: exact names and
 * anchored `re:` regexes) and write the same names in the same order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json_util.h"
#include "quantize/quantize_internal.h"

static const char *const scheme_names[VSR_Q_COUNT] = {
    [VSR_Q_FP8_DYNAMIC] = "fp8-dynamic",
    [VSR_Q_W4A16_GPTQ] = "w4a16-gptq",
    [VSR_Q_W4A16_AWQ] = "w4a16-awq",
    [VSR_Q_NVFP4] = "nvfp4",
};

const char *vsr_qscheme_name(vsr_qscheme s) { return (s >= 0 && s < VSR_Q_COUNT) ? scheme_names[s] : "?"; }
const char *vsr_qscheme_names(void) { return "fp8-dynamic|w4a16-gptq|w4a16-awq|nvfp4"; }

bool vsr_qscheme_parse(const char *name, vsr_qscheme *out) {
    for (int i = 0; name && i < VSR_Q_COUNT; i++)
        if (!strcmp(name, scheme_names[i])) {
            *out = (vsr_qscheme)i;
            return true;
        }
    return false;
}

/* The published recipe (llm-compressor's Qwen3.5 examples plus the DeltaNet input projections,
 * whose outputs feed the recurrent state: kept BF16 in every published package). */
static const char *const default_ignore[] = {
    "lm_head",
    "re:.*embed_tokens$",
    "re:model.visual.*",
    "re:.*linear_attn.in_proj_qkv$",
    "re:.*linear_attn.in_proj_z$",
    "re:.*linear_attn.in_proj_a$",
    "re:.*linear_attn.in_proj_b$",
    NULL,
};
const char *const *vsr_quantize_default_ignore(void) { return default_ignore; }

static bool starts(const char *s, const char *p) { return !strncmp(s, p, strlen(p)); }
static bool ends(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcmp(s + n - m, suf);
}

/* transformers' module definition order inside a qwen3_5 decoder layer (Qwen3_5GatedDeltaNet
 * defines out_proj before the in_proj_*; named_modules() follows definition order), and inside a
 * vision block. Unknown names sort after the known ones, by name. */
static const char *const layer_order[] = {
    "linear_attn.out_proj", "linear_attn.in_proj_qkv", "linear_attn.in_proj_z", "linear_attn.in_proj_b",
    "linear_attn.in_proj_a", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
    "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", NULL,
};
static const char *const vision_block_order[] = {"attn.qkv", "attn.proj", "mlp.linear_fc1", "mlp.linear_fc2", NULL};

static int rank_in(const char *const *t, const char *rest) {
    for (int i = 0; t[i]; i++)
        if (!strcmp(t[i], rest)) return i;
    return 99;
}

/* Sort key: vision tower (Qwen3_5Model defines visual before language_model), then the text
 * layers, then lm_head. Within a block/layer the table rank. */
static long order_key(const char *module, const char *text_prefix, int *layer) {
    *layer = -1;
    const char *v = starts(module, "model.visual.") ? module + 13 : starts(module, "visual.") ? module + 7 : NULL;
    if (v) {
        int b;
        char rest[200];
        if (sscanf(v, "blocks.%d.%199s", &b, rest) == 2) return 1000000L + b * 100L + rank_in(vision_block_order, rest);
        return 1900000L; /* merger and the rest, after the blocks */
    }
    if (starts(module, text_prefix)) {
        int l;
        char rest[200];
        if (sscanf(module + strlen(text_prefix), "layers.%d.%199s", &l, rest) == 2) {
            *layer = l;
            return 2000000L + l * 100L + rank_in(layer_order, rest);
        }
        return 2000000L - 1;
    }
    return 9000000L; /* lm_head and anything else at the top level */
}

static int cmp_linear(const void *a, const void *b) {
    const qz_linear *x = a, *y = b;
    if (x->order != y->order) return x->order < y->order ? -1 : 1;
    return strcmp(x->module, y->module);
}

/* A Linear weight: a 2-D `.weight` that is not an embedding (token or position) or a norm. */
static bool is_linear_weight(const vsr_tensor *t, char *module, size_t n) {
    if (t->ndim != 2 || !ends(t->name, ".weight")) return false;
    size_t len = strlen(t->name) - 7;
    if (len >= n) return false;
    memcpy(module, t->name, len);
    module[len] = 0;
    const char *last = strrchr(module, '.');
    last = last ? last + 1 : module;
    return !strstr(last, "embed") && !strstr(last, "norm");
}

static int fuse_group(const char *module) {
    if (ends(module, "self_attn.q_proj") || ends(module, "self_attn.k_proj") || ends(module, "self_attn.v_proj"))
        return 1;
    if (ends(module, "mlp.gate_proj") || ends(module, "mlp.up_proj")) return 2;
    return 0;
}

/* The recipe's patterns go through the config parser, so a bad regex gets its message. */
static vsr_status compile_recipe(const vsr_package *p, const char *const *extra, int n_extra, vsr_quant_config *out,
                                 vsr_err *err) {
    bool visual_top = false;
    for (size_t i = 0; i < vsr_weights_count(p->weights); i++)
        if (starts(vsr_weights_at(p->weights, i)->name, "visual.")) visual_top = true;
    json_t *qc = json_pack("{s:s,s:s,s:s,s:{s:{s:[s],s:{s:i,s:s,s:s,s:b,s:b},s:{s:i,s:s,s:s,s:b,s:b}}}}",
                           "quant_method", "compressed-tensors", "format", "float-quantized", "quantization_status",
                           "compressed", "config_groups", "group_0", "targets", "Linear", "weights", "num_bits", 8,
                           "type", "float", "strategy", "channel", "symmetric", 1, "dynamic", 0, "input_activations",
                           "num_bits", 8, "type", "float", "strategy", "token", "symmetric", 1, "dynamic", 1);
    json_t *ign = json_array();
    for (int i = 0; default_ignore[i]; i++)
        json_array_append_new(ign, json_string(visual_top && !strcmp(default_ignore[i], "re:model.visual.*")
                                                   ? "re:visual.*"
                                                   : default_ignore[i]));
    for (int i = 0; i < n_extra; i++) {
        if (!extra[i] || !*extra[i]) {
            json_decref(ign);
            json_decref(qc);
            return vsr_err_set(err, VSR_E_INVALID, "--ignore needs a module name or a \"re:\" regex, got an empty one");
        }
        json_array_append_new(ign, json_string(extra[i]));
    }
    json_object_set_new(qc, "ignore", ign);
    vsr_status st = vsr_quant_config_parse(qc, out, err);
    json_decref(qc);
    if (st) {
        /* "<seed text>: quantization_config.ignore[i] ..." reads as a refusal of a package; say whose */
        const char *m = strstr(err->msg, "quantization_config.ignore");
        char why[VSR_ERR_MSG_MAX];
        snprintf(why, sizeof why, "%s", m ? m + strlen("quantization_config.") : err->msg);
        return vsr_err_set(err, VSR_E_INVALID, "--ignore: the recipe's %s", why);
    }
    return VSR_OK;
}

static vsr_status plan_make(const vsr_package *p, vsr_qscheme s, int group, bool actorder, const char *const *extra,
                            int n_extra, qz_plan *pl, vsr_err *err) {
    pl->scheme = s;
    pl->group = group;
    pl->actorder = actorder;
    pl->n_layers = p->config.text.num_hidden_layers;
    vsr_status st = compile_recipe(p, extra, n_extra, &pl->recipe, err);
    if (st) return st;
    size_t n = vsr_weights_count(p->weights);
    pl->lin = calloc(n ? n : 1, sizeof *pl->lin);
    if (!pl->lin) return vsr_err_set(err, VSR_E_NOMEM, "quantize: out of memory");
    for (size_t i = 0; i < n; i++) {
        const vsr_tensor *t = vsr_weights_at(p->weights, i);
        qz_linear *L = &pl->lin[pl->n_lin];
        if (!is_linear_weight(t, L->module, sizeof L->module)) continue;
        L->w = t;
        L->N = t->shape[0];
        L->K = t->shape[1];
        L->order = order_key(L->module, p->text_prefix, &L->layer);
        L->fuse = fuse_group(L->module);
        L->quantized = !vsr_quant_module_ignored(&pl->recipe, L->module);
        pl->n_lin++;
        if (!L->quantized) continue;
        pl->n_quant++;
        if (t->dtype != VSR_DT_BF16)
            return vsr_err_set(err, VSR_E_UNSUPPORTED, "%s: dtype %s; the quantizers read BF16 weights", t->name,
                               vsr_dtype_info(t->dtype)->name);
        if ((uintptr_t)t->data % 2)
            return vsr_err_set(err, VSR_E_UNSUPPORTED,
                               "%s (%s): data at file offset %llu is not aligned to its 2-byte elements; rewrite the "
                               "file with the safetensors writer",
                               t->name, t->file, (unsigned long long)t->offset);
        if (s == VSR_Q_NVFP4 && L->K % 16)
            return vsr_err_set(err, VSR_E_UNSUPPORTED,
                               "%s: in_features %lld is not a multiple of 16; NVFP4 cannot group it (add it to --ignore)",
                               L->module, (long long)L->K);
        if ((s == VSR_Q_W4A16_GPTQ || s == VSR_Q_W4A16_AWQ) && L->K % group)
            return vsr_err_set(err, VSR_E_INVALID,
                               "--group-size %d does not divide in_features %lld of %s (every quantized Linear needs "
                               "K %% G == 0; pick a divisor or add the module to --ignore)",
                               group, (long long)L->K, L->module);
    }
    if (!pl->n_quant)
        return vsr_err_set(err, VSR_E_INVALID, "the recipe leaves no Linear module to quantize (%d Linear modules, all "
                                               "ignored)", pl->n_lin);
    qsort(pl->lin, (size_t)pl->n_lin, sizeof *pl->lin, cmp_linear);
    return VSR_OK;
}

vsr_status qz_plan_make(const vsr_package *p, vsr_qscheme s, int group, bool actorder, const char *const *extra,
                        int n_extra, qz_plan *pl, vsr_err *err) {
    memset(pl, 0, sizeof *pl);
    vsr_status st = plan_make(p, s, group, actorder, extra, n_extra, pl, err);
    if (st) qz_plan_free(pl); /* a refused plan holds nothing (freeing it again is harmless) */
    return st;
}

void qz_plan_free(qz_plan *pl) {
    free(pl->lin);
    vsr_quant_config_free(&pl->recipe);
    memset(pl, 0, sizeof *pl);
}

/* QuantizationArgs as compressed-tensors 0.20.1 serializes them: actorder, block_structure and
 * scale_dtype only when set, observer and zp_dtype only when set explicitly (never by a preset),
 * empty observer_kwargs omitted. */
static json_t *args(int bits, const char *type, const char *strategy, json_t *group, bool sym, json_t *dynamic) {
    return json_pack("{s:i,s:s,s:s,s:o,s:b,s:o}", "num_bits", bits, "type", type, "strategy", strategy, "group_size",
                     group, "symmetric", sym, "dynamic", dynamic);
}

json_t *qz_config_json(const qz_plan *pl) {
    const char *fmt;
    json_t *w, *in = json_null();
    switch (pl->scheme) {
    case VSR_Q_FP8_DYNAMIC: /* preset FP8_DYNAMIC */
        fmt = "float-quantized";
        w = args(8, "float", "channel", json_null(), true, json_false());
        json_decref(in);
        in = args(8, "float", "token", json_null(), true, json_true());
        break;
    case VSR_Q_W4A16_GPTQ: /* preset W4A16 + GPTQModifier's actorder ("static" unless act-order groups) */
        fmt = "pack-quantized";
        w = args(4, "int", "group", json_integer(pl->group), true, json_false());
        json_object_set_new(w, "actorder", json_string(pl->actorder ? "group" : "static"));
        break;
    case VSR_Q_W4A16_AWQ: /* preset W4A16_ASYM */
        fmt = "pack-quantized";
        w = args(4, "int", "group", json_integer(pl->group), false, json_false());
        break;
    default: /* VSR_Q_NVFP4: preset NVFP4A16 */
        fmt = "nvfp4-pack-quantized";
        w = args(4, "float", "tensor_group", json_integer(16), true, json_false());
        json_object_set_new(w, "scale_dtype", json_string("torch.float8_e4m3fn"));
        break;
    }
    json_t *ignore = json_array();
    for (int i = 0; i < pl->n_lin; i++)
        if (!pl->lin[i].quantized) json_array_append_new(ignore, json_string(pl->lin[i].module));
    json_t *group = json_pack("{s:s,s:o,s:n,s:[s],s:o}", "format", fmt, "input_activations", in, "output_activations",
                              "targets", "Linear", "weights", w);
    return json_pack("{s:{s:o},s:s,s:n,s:o,s:n,s:n,s:s,s:s,s:{},s:{},s:s}", "config_groups", "group_0", group, "format",
                     fmt, "global_compression_ratio", "ignore", ignore, "kv_cache_scheme", "moe_sparsity_config",
                     "quant_method", "compressed-tensors", "quantization_status", "compressed", "sparsity_config",
                     "transform_config", "version", VSR_QUANTIZE_CT_VERSION);
}
