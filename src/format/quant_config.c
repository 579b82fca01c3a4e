/* config.json `quantization_config` -> vsr_quant_config (compressed-tensors-format.md
 * section 1). We serve exactly one config group of weights in one of three schemes and
 * refuse everything else with the seed's text (VSR_QUANT_REFUSAL_FORMATS) followed by
 * ": " and the key and value that made us refuse. Like compressed-tensors (pydantic
 * extra="forbid"), unknown keys anywhere are refused too: a key we do not know may
 * change what the tensors mean.
 *
 * Both spellings the library has written are accepted: <= 0.11 (no scale_dtype/zp_dtype,
 * observer "minmax") and newer ones (scale_dtype, zp_dtype, "memoryless_minmax",
 * "static_minmax", omitted null fields), with the format per group or only global. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <pcre2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/json_util.h"
#include "vsr/quant.h"

/* ---- scheme table ---- */

static const vsr_scheme_traits scheme_table[] = {
    [VSR_SCHEME_BF16] = {"bf16", NULL, "BF16 (unquantized)", 16.0},
    [VSR_SCHEME_FP8] = {"fp8", "float-quantized",
                        "FP8 W8A8 (E4M3, per-channel, dynamic per-token)", 8.0},
    /* 4 bits + one BF16 scale per 128 weights */
    [VSR_SCHEME_INT4] = {"int4", "pack-quantized",
                         "int4 W4A16 (GPTQ/AWQ, grouped, BF16 activations)", 4.0 + 16.0 / 128.0},
    /* 4 bits + one E4M3 scale per 16 weights */
    [VSR_SCHEME_NVFP4] = {"nvfp4", "nvfp4-pack-quantized",
                          "NVFP4 W4A4 (E2M1, E4M3 scales per 16, tensor global scale)",
                          4.0 + 8.0 / 16.0},
};
_Static_assert(sizeof scheme_table / sizeof scheme_table[0] == VSR_SCHEME_COUNT,
               "every vsr_scheme needs traits");

const char *vsr_quant_description(const vsr_quant_config *q) {
    if (q->scheme == VSR_SCHEME_NVFP4 && !q->input_activations)
        return "NVFP4 W4A16 (E2M1 weights, E4M3 scales per 16, tensor global scale; BF16 activations)";
    return vsr_scheme_info(q->scheme)->label;
}

const vsr_scheme_traits *vsr_scheme_info(vsr_scheme s) {
    return (s >= 0 && s < VSR_SCHEME_COUNT) ? &scheme_table[s] : NULL;
}

bool vsr_scheme_parse(const char *name, vsr_scheme *out) {
    for (int i = 0; name && i < VSR_SCHEME_COUNT; i++) {
        if (!strcmp(scheme_table[i].name, name)) {
            *out = (vsr_scheme)i;
            return true;
        }
    }
    return false;
}

/* ---- refusals ---- */

static vsr_status refuse(vsr_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static vsr_status refuse(vsr_err *err, const char *fmt, ...) {
    char reason[VSR_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    return vsr_err_set(err, VSR_E_UNSUPPORTED, "%s: %s", VSR_QUANT_REFUSAL_FORMATS, reason);
}

/* Wraps an error another helper set (e.g. unknown keys) as a refusal. */
static vsr_status refuse_wrapped(vsr_err *err) {
    if (err) {
        vsr_err_prefix(err, "%s", VSR_QUANT_REFUSAL_FORMATS);
        err->code = VSR_E_UNSUPPORTED;
    }
    return VSR_E_UNSUPPORTED;
}

/* A short rendering of a JSON value for messages: strings quoted, others compact. */
static void json_show(const json_t *v, char *buf, size_t n) {
    if (!v) {
        snprintf(buf, n, "(absent)");
        return;
    }
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    snprintf(buf, n, "%s", s ? s : "?");
    if (s && strlen(s) >= n && n > 4) memcpy(buf + n - 4, "...", 4);
    free(s);
}

/* ---- QuantizationArgs ---- */

typedef enum { ST_NONE = -1, ST_TENSOR, ST_CHANNEL, ST_GROUP, ST_BLOCK, ST_TOKEN, ST_TENSOR_GROUP, ST_ATTN_HEAD } strategy;
static const char *const strategy_names[] = {"tensor", "channel", "group", "block",
                                             "token", "tensor_group", "attn_head", NULL};

typedef enum { DYN_FALSE, DYN_TRUE, DYN_LOCAL } dynamic_kind;
typedef enum { ACT_NONE, ACT_WEIGHT, ACT_GROUP } actorder_kind;

typedef struct qargs {
    int num_bits;
    bool is_float;
    bool symmetric;
    bool has_group_size;
    int group_size;
    strategy strat;
    dynamic_kind dynamic;
    actorder_kind actorder;
    const char *scale_dtype; /* NULL = null/absent */
    const char *zp_dtype;
} qargs;

static const char *const args_keys[] = {"num_bits", "type", "symmetric", "group_size", "strategy",
                                        "block_structure", "dynamic", "actorder", "scale_dtype",
                                        "zp_dtype", "observer", "observer_kwargs", NULL};

static int lookup_ci(const char *const *names, const char *s) {
    for (int i = 0; names[i]; i++)
        if (!strcasecmp(names[i], s)) return i;
    return -1;
}

/* Parses and validates one QuantizationArgs object the way the library's validators do
 * (defaults, strategy inference, the cross-field rules), then leaves the
 * scheme-specific rules to the caller. */
static vsr_status parse_args(const json_t *o, const char *where, qargs *a, vsr_err *err) {
    char shown[160];
    if (!json_is_object(o)) {
        json_show(o, shown, sizeof shown);
        return refuse(err, "%s is %s, expected an object", where, shown);
    }
    if (vsr_json_only_keys(o, args_keys, where, err) != VSR_OK) return refuse_wrapped(err);
    *a = (qargs){.num_bits = 8, .symmetric = true, .strat = ST_NONE};

    const json_t *v;
    if ((v = json_object_get(o, "num_bits"))) {
        if (!json_is_integer(v)) return refuse(err, "%s.num_bits is not an integer", where);
        a->num_bits = (int)json_integer_value(v);
    }
    if ((v = json_object_get(o, "type")) && !json_is_null(v)) {
        if (!json_is_string(v)) return refuse(err, "%s.type is not a string", where);
        const char *t = json_string_value(v);
        if (!strcasecmp(t, "float")) a->is_float = true;
        else if (strcasecmp(t, "int")) return refuse(err, "%s.type \"%s\" is neither int nor float", where, t);
    }
    if ((v = json_object_get(o, "symmetric"))) {
        if (!json_is_boolean(v)) return refuse(err, "%s.symmetric is not a boolean", where);
        a->symmetric = json_is_true(v);
    }
    if ((v = json_object_get(o, "group_size")) && !json_is_null(v)) {
        if (!json_is_integer(v)) return refuse(err, "%s.group_size is not an integer", where);
        json_int_t g = json_integer_value(v);
        if (g < -1 || g == 0 || g > 1 << 20)
            return refuse(err, "%s.group_size %lld is invalid (> 0 for groups, -1 for channel)", where,
                          (long long)g);
        a->has_group_size = true;
        a->group_size = (int)g;
    }
    if ((v = json_object_get(o, "strategy")) && !json_is_null(v)) {
        int s = json_is_string(v) ? lookup_ci(strategy_names, json_string_value(v)) : -1;
        if (s < 0) {
            json_show(v, shown, sizeof shown);
            return refuse(err, "%s.strategy %s is not a compressed-tensors strategy", where, shown);
        }
        a->strat = (strategy)s;
    }
    if ((v = json_object_get(o, "block_structure")) && !json_is_null(v)) {
        json_show(v, shown, sizeof shown);
        return refuse(err, "%s.block_structure %s: block-wise scales (FP8_BLOCK) are not served",
                      where, shown);
    }
    if ((v = json_object_get(o, "dynamic"))) {
        if (json_is_boolean(v)) a->dynamic = json_is_true(v) ? DYN_TRUE : DYN_FALSE;
        else if (json_is_string(v) && !strcasecmp(json_string_value(v), "local")) a->dynamic = DYN_LOCAL;
        else {
            json_show(v, shown, sizeof shown);
            return refuse(err, "%s.dynamic %s is not true, false or \"local\"", where, shown);
        }
    }
    if ((v = json_object_get(o, "actorder")) && !json_is_null(v)) {
        static const char *const weight_names[] = {"weight", "static", NULL};
        static const char *const group_names[] = {"group", "dynamic", NULL};
        if (json_is_boolean(v)) a->actorder = json_is_true(v) ? ACT_GROUP : ACT_NONE;
        else if (json_is_string(v) && lookup_ci(weight_names, json_string_value(v)) >= 0) a->actorder = ACT_WEIGHT;
        else if (json_is_string(v) && lookup_ci(group_names, json_string_value(v)) >= 0) a->actorder = ACT_GROUP;
        else {
            json_show(v, shown, sizeof shown);
            return refuse(err, "%s.actorder %s is not null, \"weight\"/\"static\" or \"group\"/\"dynamic\"",
                          where, shown);
        }
    }
    static const char *const dtype_keys[] = {"scale_dtype", "zp_dtype"};
    const char **dtype_out[] = {&a->scale_dtype, &a->zp_dtype};
    for (int i = 0; i < 2; i++) {
        if ((v = json_object_get(o, dtype_keys[i])) && !json_is_null(v)) {
            if (!json_is_string(v)) return refuse(err, "%s.%s is not a string", where, dtype_keys[i]);
            *dtype_out[i] = json_string_value(v);
        }
    }
    if ((v = json_object_get(o, "observer")) && !json_is_null(v) && !json_is_string(v))
        return refuse(err, "%s.observer is not a string", where);
    if ((v = json_object_get(o, "observer_kwargs")) && !json_is_null(v) && !json_is_object(v))
        return refuse(err, "%s.observer_kwargs is not an object", where);

    /* The library's model validator: infer the strategy, then the cross-field rules. */
    if (a->strat == ST_NONE)
        a->strat = !a->has_group_size ? ST_TENSOR : a->group_size > 0 ? ST_GROUP : ST_CHANNEL;
    bool grouped = a->strat == ST_GROUP || a->strat == ST_TENSOR_GROUP;
    if (a->strat == ST_TOKEN && a->dynamic == DYN_FALSE)
        return refuse(err, "%s: strategy \"token\" needs dynamic true", where);
    if (grouped && (!a->has_group_size || a->group_size <= 0))
        return refuse(err, "%s: strategy \"%s\" needs a positive group_size", where, strategy_names[a->strat]);
    if (a->has_group_size && a->group_size > 0 && !grouped)
        return refuse(err, "%s: group_size %d needs strategy \"group\" or \"tensor_group\", not \"%s\"",
                      where, a->group_size, strategy_names[a->strat]);
    if (a->has_group_size && a->group_size == -1 && a->strat != ST_CHANNEL)
        return refuse(err, "%s: group_size -1 means channel, but strategy is \"%s\"", where,
                      strategy_names[a->strat]);
    if (a->dynamic == DYN_LOCAL && a->strat != ST_TENSOR_GROUP)
        return refuse(err, "%s: dynamic \"local\" needs strategy \"tensor_group\"", where);
    return VSR_OK;
}

/* Shared checks with a message naming the key and the value found. */
static vsr_status want_int(vsr_err *err, const char *where, const char *key, int got, int want,
                           const char *scheme) {
    if (got == want) return VSR_OK;
    return refuse(err, "%s.%s is %d, expected %d for %s", where, key, got, want, scheme);
}

static vsr_status want_type(vsr_err *err, const char *where, const qargs *a, bool is_float,
                            const char *scheme) {
    if (a->is_float == is_float) return VSR_OK;
    return refuse(err, "%s.type is \"%s\", expected \"%s\" for %s", where, a->is_float ? "float" : "int",
                  is_float ? "float" : "int", scheme);
}

static vsr_status want_strategy(vsr_err *err, const char *where, const qargs *a, strategy s,
                                const char *scheme) {
    if (a->strat == s) return VSR_OK;
    return refuse(err, "%s.strategy is \"%s\", expected \"%s\" for %s", where, strategy_names[a->strat],
                  strategy_names[s], scheme);
}

static vsr_status want_symmetric(vsr_err *err, const char *where, const qargs *a, const char *scheme) {
    if (a->symmetric) return VSR_OK;
    return refuse(err, "%s.symmetric is false, expected true for %s", where, scheme);
}

static vsr_status want_no_actorder(vsr_err *err, const char *where, const qargs *a, const char *scheme) {
    if (a->actorder == ACT_NONE) return VSR_OK;
    return refuse(err, "%s.actorder is set; %s has no activation ordering", where, scheme);
}

static vsr_status want_dtype(vsr_err *err, const char *where, const char *key, const char *got,
                             const char *const *allowed, const char *scheme) {
    if (!got) return VSR_OK; /* null or absent: files before compressed-tensors 0.13 */
    for (const char *const *p = allowed; *p; p++)
        if (!strcmp(*p, got)) return VSR_OK;
    return refuse(err, "%s.%s is \"%s\", expected %s or null for %s", where, key, got, allowed[0], scheme);
}

static const char *const bf16_dtypes[] = {"torch.bfloat16", NULL};
static const char *const fp8_dtypes[] = {"torch.float8_e4m3fn", NULL};
static const char *const int8_dtypes[] = {"torch.int8", NULL};

#define TRY(x)                                                                                     \
    do {                                                                                           \
        vsr_status st_ = (x);                                                                      \
        if (st_ != VSR_OK) return st_;                                                             \
    } while (0)

static vsr_status check_int4(const qargs *w, const json_t *in, const char *where, const char *in_where,
                             vsr_quant_config *out, vsr_err *err) {
    const char *s = "pack-quantized (int4 W4A16)";
    TRY(want_int(err, where, "num_bits", w->num_bits, 4, s));
    TRY(want_type(err, where, w, false, s));
    if (w->strat != ST_GROUP && w->strat != ST_CHANNEL)
        return refuse(err, "%s.strategy is \"%s\", expected \"group\" or \"channel\" for %s", where,
                      strategy_names[w->strat], s);
    if (w->strat == ST_GROUP && w->group_size % 8 != 0)
        return refuse(err, "%s.group_size is %d, expected a multiple of 8 for %s", where, w->group_size, s);
    if (w->dynamic != DYN_FALSE) return refuse(err, "%s.dynamic is set, expected false (static weights) for %s", where, s);
    if (w->actorder == ACT_GROUP && w->strat != ST_GROUP)
        return refuse(err, "%s.actorder \"group\" needs strategy \"group\"", where);
    TRY(want_dtype(err, where, "scale_dtype", w->scale_dtype, bf16_dtypes, s));
    if (!w->symmetric) TRY(want_dtype(err, where, "zp_dtype", w->zp_dtype, int8_dtypes, s));
    else if (w->zp_dtype) TRY(want_dtype(err, where, "zp_dtype", w->zp_dtype, int8_dtypes, s));
    if (in && !json_is_null(in)) {
        char shown[120];
        json_show(in, shown, sizeof shown);
        return refuse(err, "%s is %s, expected null for %s (BF16 activations)", in_where, shown, s);
    }
    out->scheme = VSR_SCHEME_INT4;
    out->group_size = w->strat == ST_GROUP ? w->group_size : -1;
    out->symmetric = w->symmetric;
    out->actorder_group = w->actorder == ACT_GROUP;
    out->input_activations = false;
    return VSR_OK;
}

static vsr_status check_fp8(const qargs *w, const json_t *in, const char *where, const char *in_where,
                            vsr_quant_config *out, vsr_err *err) {
    const char *s = "float-quantized (FP8_DYNAMIC)";
    TRY(want_int(err, where, "num_bits", w->num_bits, 8, s));
    TRY(want_type(err, where, w, true, s));
    TRY(want_strategy(err, where, w, ST_CHANNEL, s));
    TRY(want_symmetric(err, where, w, s));
    if (w->dynamic != DYN_FALSE) return refuse(err, "%s.dynamic is set, expected false (static weights) for %s", where, s);
    TRY(want_no_actorder(err, where, w, s));
    TRY(want_dtype(err, where, "scale_dtype", w->scale_dtype, bf16_dtypes, s));
    TRY(want_dtype(err, where, "zp_dtype", w->zp_dtype, fp8_dtypes, s));
    if (!in || json_is_null(in))
        return refuse(err, "%s is null: FP8 weight-only (W8A16) is not served; %s quantizes activations per token",
                      in_where, s);
    qargs a;
    TRY(parse_args(in, in_where, &a, err));
    TRY(want_int(err, in_where, "num_bits", a.num_bits, 8, s));
    TRY(want_type(err, in_where, &a, true, s));
    if (a.dynamic != DYN_TRUE)
        return refuse(err, "%s.dynamic is %s: static activation quantization is not served, expected dynamic true",
                      in_where, a.dynamic == DYN_LOCAL ? "\"local\"" : "false");
    TRY(want_strategy(err, in_where, &a, ST_TOKEN, s));
    TRY(want_symmetric(err, in_where, &a, s));
    TRY(want_no_actorder(err, in_where, &a, s));
    TRY(want_dtype(err, in_where, "scale_dtype", a.scale_dtype, bf16_dtypes, s));
    TRY(want_dtype(err, in_where, "zp_dtype", a.zp_dtype, fp8_dtypes, s));
    out->scheme = VSR_SCHEME_FP8;
    out->group_size = -1;
    out->symmetric = true;
    out->input_activations = true;
    return VSR_OK;
}

static vsr_status check_nvfp4(const qargs *w, const json_t *in, const char *where, const char *in_where,
                              vsr_quant_config *out, vsr_err *err) {
    const char *s = "nvfp4-pack-quantized (NVFP4)";
    TRY(want_int(err, where, "num_bits", w->num_bits, 4, s));
    TRY(want_type(err, where, w, true, s));
    TRY(want_strategy(err, where, w, ST_TENSOR_GROUP, s));
    TRY(want_int(err, where, "group_size", w->group_size, 16, s));
    TRY(want_symmetric(err, where, w, s));
    if (w->dynamic != DYN_FALSE) return refuse(err, "%s.dynamic is set, expected false (static weights) for %s", where, s);
    TRY(want_no_actorder(err, where, w, s));
    TRY(want_dtype(err, where, "scale_dtype", w->scale_dtype, fp8_dtypes, s));
    TRY(want_dtype(err, where, "zp_dtype", w->zp_dtype, fp8_dtypes, s));
    out->scheme = VSR_SCHEME_NVFP4;
    out->group_size = 16;
    out->symmetric = true;
    out->input_activations = false;
    if (!in || json_is_null(in)) return VSR_OK; /* NVFP4A16 */
    qargs a;
    TRY(parse_args(in, in_where, &a, err));
    TRY(want_int(err, in_where, "num_bits", a.num_bits, 4, s));
    TRY(want_type(err, in_where, &a, true, s));
    TRY(want_strategy(err, in_where, &a, ST_TENSOR_GROUP, s));
    TRY(want_int(err, in_where, "group_size", a.group_size, 16, s));
    TRY(want_symmetric(err, in_where, &a, s));
    TRY(want_no_actorder(err, in_where, &a, s));
    /* "local": static global scale (input_global_scale), per-16 scales computed per call.
     * Some third-party files write false for the same layout; vLLM accepts both. */
    if (a.dynamic == DYN_TRUE)
        return refuse(err, "%s.dynamic is true, expected \"local\" or false (a static input_global_scale) for %s",
                      in_where, s);
    TRY(want_dtype(err, in_where, "scale_dtype", a.scale_dtype, fp8_dtypes, s));
    TRY(want_dtype(err, in_where, "zp_dtype", a.zp_dtype, fp8_dtypes, s));
    out->input_activations = true;
    return VSR_OK;
}

/* ---- formats ---- */

typedef vsr_status (*scheme_check)(const qargs *, const json_t *, const char *, const char *,
                                   vsr_quant_config *, vsr_err *);
static const struct {
    const char *format;
    scheme_check check;
} served_formats[] = {
    {"pack-quantized", check_int4},
    {"float-quantized", check_fp8},
    {"nvfp4-pack-quantized", check_nvfp4},
};

static int served_index(const char *format) {
    for (size_t i = 0; i < sizeof served_formats / sizeof served_formats[0]; i++)
        if (!strcmp(served_formats[i].format, format)) return (int)i;
    return -1;
}

/* ---- string lists ---- */

static vsr_status parse_string_list(const json_t *v, const char *where, char **dst, int max, int *n,
                                    vsr_err *err) {
    if (!json_is_array(v)) return refuse(err, "%s is not a list of strings", where);
    if (json_array_size(v) > (size_t)max)
        return refuse(err, "%s has %zu entries, more than the %d we accept", where, json_array_size(v), max);
    size_t i;
    const json_t *e;
    json_array_foreach(v, i, e) {
        if (!json_is_string(e) || json_string_length(e) == 0)
            return refuse(err, "%s[%zu] is not a non-empty string", where, i);
        dst[*n] = strdup(json_string_value(e));
        if (!dst[*n]) return vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory", where);
        (*n)++;
    }
    return VSR_OK;
}

static pcre2_code *compile_re(const char *pattern, char *emsg, size_t emsg_len) {
    int ec;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_ANCHORED, &ec, &off, NULL);
    if (!re && emsg) {
        PCRE2_UCHAR buf[160];
        pcre2_get_error_message(ec, buf, sizeof buf);
        snprintf(emsg, emsg_len, "%s at offset %zu", (const char *)buf, (size_t)off);
    }
    return re;
}

/* re.match semantics: anchored at the start only (the match may end anywhere). */
static bool re_match(const char *pattern, const char *subject) {
    pcre2_code *re = compile_re(pattern, NULL, 0);
    if (!re) return false;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int rc = md ? pcre2_match(re, (PCRE2_SPTR)subject, PCRE2_ZERO_TERMINATED, 0, 0, md, NULL) : -1;
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    return rc >= 0;
}

static vsr_status check_regexes(char *const *list, int n, const char *where, vsr_err *err) {
    for (int i = 0; i < n; i++) {
        if (strncmp(list[i], "re:", 3) != 0) continue;
        char emsg[200];
        pcre2_code *re = compile_re(list[i] + 3, emsg, sizeof emsg);
        if (!re) return refuse(err, "%s[%d] \"%s\" is not a valid regex: %s", where, i, list[i], emsg);
        pcre2_code_free(re);
    }
    return VSR_OK;
}

static bool name_matches(const char *entry, const char *module) {
    if (!strncmp(entry, "re:", 3)) return re_match(entry + 3, module);
    return !strcmp(entry, module);
}

bool vsr_quant_module_ignored(const vsr_quant_config *q, const char *module) {
    if (!q || !module) return false;
    for (int i = 0; i < q->n_ignore; i++)
        if (name_matches(q->ignore[i], module)) return true;
    return false;
}

static bool contains_ci(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    for (; *hay; hay++)
        if (!strncasecmp(hay, needle, n)) return true;
    return n == 0;
}

bool vsr_quant_module_targeted(const vsr_quant_config *q, const char *module, const char *class_name) {
    if (!q || q->scheme == VSR_SCHEME_BF16) return false;
    for (int i = 0; module && i < q->n_targets; i++)
        if (name_matches(q->targets[i], module)) return true;
    for (int i = 0; class_name && i < q->n_targets; i++)
        if (strncmp(q->targets[i], "re:", 3) && contains_ci(class_name, q->targets[i])) return true;
    return false;
}

/* ---- the config ---- */

static const char *const top_keys[] = {"quant_method", "format", "config_groups", "ignore",
                                       "quantization_status", "kv_cache_scheme",
                                       "global_compression_ratio", "sparsity_config",
                                       "transform_config", "version", "run_compressed",
                                       "moe_sparsity_config", NULL};
static const char *const scheme_keys[] = {"targets", "weights", "input_activations",
                                          "output_activations", "format", NULL};

static bool empty_or_null(const json_t *v) {
    return !v || json_is_null(v) || (json_is_object(v) && json_object_size(v) == 0);
}

/* kv_cache_scheme asks the runtime to keep K and V quantized (FP8, with stored k_scale and
 * v_scale). This runtime keeps its KV cache in BF16 and has no FP8 K/V path, so a package
 * that asks for one is refused rather than served with the request silently ignored;
 * null or absent is the ordinary case. */
static vsr_status parse_kv_cache(const json_t *v, vsr_err *err) {
    if (!v || json_is_null(v)) return VSR_OK;
    char shown[160];
    json_show(v, shown, sizeof shown);
    return refuse(err,
                  "quantization_config.kv_cache_scheme is %s: an FP8 K/V cache is not supported by this runtime "
                  "(it keeps K and V in BF16); re-export the checkpoint without kv_cache_scheme (null or absent)",
                  shown);
}

static vsr_status parse(const json_t *qc, vsr_quant_config *out, vsr_err *err) {
    char shown[160];
    const char *top = "quantization_config";
    if (!json_is_object(qc)) {
        json_show(qc, shown, sizeof shown);
        return refuse(err, "%s is %s, expected an object", top, shown);
    }
    /* The method first: an AWQ/GPTQ/FP8/ModelOpt config has other keys, and its method is
     * the useful thing to name. */
    const json_t *m = json_object_get(qc, "quant_method");
    if (!m || !json_is_string(m) || strcmp(json_string_value(m), "compressed-tensors")) {
        json_show(m, shown, sizeof shown);
        return refuse(err, "quantization_config.quant_method is %s, expected \"compressed-tensors\"", shown);
    }
    if (vsr_json_only_keys(qc, top_keys, top, err) != VSR_OK) return refuse_wrapped(err);

    const json_t *v = json_object_get(qc, "version");
    if (v && !json_is_null(v)) {
        if (!json_is_string(v)) return refuse(err, "quantization_config.version is not a string");
        snprintf(out->version, sizeof out->version, "%s", json_string_value(v));
    }
    v = json_object_get(qc, "quantization_status");
    if (!v || !json_is_string(v) || strcmp(json_string_value(v), "compressed")) {
        json_show(v, shown, sizeof shown);
        return refuse(err, "quantization_config.quantization_status is %s, expected \"compressed\" "
                           "(weights stored quantized)", shown);
    }
    /* moe_sparsity_config: written (null) by compressed-tensors 0.20 */
    static const char *const empty_keys[] = {"sparsity_config", "transform_config", "moe_sparsity_config"};
    static const char *const empty_why[] = {"sparse weights are not served",
                                            "transforms (rotations) are not served",
                                            "pruned experts are not served"};
    for (int i = 0; i < 3; i++) {
        v = json_object_get(qc, empty_keys[i]);
        if (!empty_or_null(v)) {
            json_show(v, shown, sizeof shown);
            return refuse(err, "quantization_config.%s is %s: %s", empty_keys[i], shown, empty_why[i]);
        }
    }
    v = json_object_get(qc, "global_compression_ratio");
    if (v && !json_is_null(v) && !json_is_number(v))
        return refuse(err, "quantization_config.global_compression_ratio is not a number or null");
    v = json_object_get(qc, "run_compressed");
    if (v && !json_is_null(v) && !json_is_boolean(v))
        return refuse(err, "quantization_config.run_compressed is not a boolean");

    /* Global format: optional when every group names its own. */
    const char *global_format = NULL;
    v = json_object_get(qc, "format");
    if (v && !json_is_null(v)) {
        if (!json_is_string(v)) return refuse(err, "quantization_config.format is not a string");
        global_format = json_string_value(v);
        if (served_index(global_format) < 0)
            return refuse(err, "quantization_config.format is \"%s\", expected \"pack-quantized\", "
                               "\"float-quantized\" or \"nvfp4-pack-quantized\"", global_format);
    }

    const json_t *groups = json_object_get(qc, "config_groups");
    if (!groups || !json_is_object(groups) || json_object_size(groups) == 0)
        return refuse(err, "quantization_config.config_groups is missing or empty: expected one group of weights");
    if (json_object_size(groups) != 1) {
        char names[256] = "";
        size_t len = 0;
        const char *k;
        const json_t *g;
        json_object_foreach((json_t *)groups, k, g) {
            if (len < sizeof names - 40) len += (size_t)snprintf(names + len, sizeof names - len, "%s\"%s\"", len ? ", " : "", k);
        }
        return refuse(err, "quantization_config.config_groups has %zu groups (%s), expected exactly one",
                      json_object_size(groups), names);
    }
    const char *gname = "";
    const json_t *g = NULL;
    {
        const char *k;
        const json_t *gv;
        json_object_foreach((json_t *)groups, k, gv) {
            gname = k;
            g = gv;
        }
    }
    snprintf(out->group_name, sizeof out->group_name, "%s", gname);
    char where[200], w_where[240], in_where[240];
    snprintf(where, sizeof where, "quantization_config.config_groups.%s", gname);
    if (json_is_array(g))
        return refuse(err, "%s is a preset shorthand (a list of targets), expected the expanded scheme "
                           "that compressed-tensors writes", where);
    if (!json_is_object(g)) return refuse(err, "%s is not an object", where);
    if (vsr_json_only_keys(g, scheme_keys, where, err) != VSR_OK) return refuse_wrapped(err);

    const char *format = global_format;
    v = json_object_get(g, "format");
    if (v && !json_is_null(v)) {
        if (!json_is_string(v)) return refuse(err, "%s.format is not a string", where);
        const char *gf = json_string_value(v);
        if (served_index(gf) < 0)
            return refuse(err, "%s.format is \"%s\", expected \"pack-quantized\", \"float-quantized\" or "
                               "\"nvfp4-pack-quantized\"", where, gf);
        if (global_format && strcmp(gf, global_format))
            return refuse(err, "%s.format \"%s\" disagrees with quantization_config.format \"%s\"", where, gf,
                          global_format);
        format = gf;
    }
    if (!format)
        return refuse(err, "quantization_config.format is missing and %s names no format", where);

    v = json_object_get(g, "targets");
    if (!v || !json_is_array(v) || json_array_size(v) == 0)
        return refuse(err, "%s.targets is missing or empty", where);
    snprintf(w_where, sizeof w_where, "%s.targets", where);
    TRY(parse_string_list(v, w_where, out->targets, VSR_QUANT_MAX_TARGETS, &out->n_targets, err));
    TRY(check_regexes(out->targets, out->n_targets, w_where, err));

    v = json_object_get(g, "output_activations");
    if (v && !json_is_null(v)) {
        json_show(v, shown, sizeof shown);
        return refuse(err, "%s.output_activations is %s: output quantization is not served", where, shown);
    }
    snprintf(w_where, sizeof w_where, "%s.weights", where);
    snprintf(in_where, sizeof in_where, "%s.input_activations", where);
    const json_t *wj = json_object_get(g, "weights");
    if (!wj || json_is_null(wj))
        return refuse(err, "%s is null: activation-only quantization is not served", w_where);
    qargs w;
    TRY(parse_args(wj, w_where, &w, err));
    const json_t *in = json_object_get(g, "input_activations");
    if (in && !json_is_null(in)) {
        /* The library: activations take no actorder and only these strategies. */
        qargs a;
        TRY(parse_args(in, in_where, &a, err));
        if (a.actorder != ACT_NONE) return refuse(err, "%s.actorder is set; activations take none", in_where);
        if (a.strat == ST_CHANNEL || a.strat == ST_BLOCK)
            return refuse(err, "%s.strategy \"%s\" is not valid for activations", in_where, strategy_names[a.strat]);
    }
    TRY(served_formats[served_index(format)].check(&w, in, w_where, in_where, out, err));

    TRY(parse_kv_cache(json_object_get(qc, "kv_cache_scheme"), err));

    v = json_object_get(qc, "ignore");
    if (v && !json_is_null(v)) {
        TRY(parse_string_list(v, "quantization_config.ignore", out->ignore, VSR_QUANT_MAX_IGNORE,
                              &out->n_ignore, err));
        TRY(check_regexes(out->ignore, out->n_ignore, "quantization_config.ignore", err));
    }
    return VSR_OK;
}

vsr_status vsr_quant_config_parse(const void *quantization_config_json, vsr_quant_config *out,
                                  vsr_err *err) {
    memset(out, 0, sizeof *out);
    out->scheme = VSR_SCHEME_BF16;
    out->group_size = -1;
    out->symmetric = true;
    const json_t *qc = quantization_config_json;
    if (!qc || json_is_null(qc)) return VSR_OK;
    vsr_status st = parse(qc, out, err);
    if (st != VSR_OK) {
        vsr_quant_config_free(out);
        out->scheme = VSR_SCHEME_BF16;
    }
    return st;
}

void vsr_quant_config_free(vsr_quant_config *q) {
    if (!q) return;
    for (int i = 0; i < q->n_ignore; i++) {
        free(q->ignore[i]);
        q->ignore[i] = NULL;
    }
    for (int i = 0; i < q->n_targets; i++) {
        free(q->targets[i]);
        q->targets[i] = NULL;
    }
    q->n_ignore = q->n_targets = 0;
}
