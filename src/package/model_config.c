/* config.json for the qwen3_5 family: the nested text_config of a Qwen3_5 checkpoint,
 * or a plain qwen3_5_text config at top level. Both transformers 4.x and 5.x
 * spellings: rope_theta at top level or inside rope_parameters (with
 * partial_rotary_factor, mrope_section, mrope_interleaved), torch_dtype or dtype,
 * layer_types or full_attention_interval. */
#include "vsr/model_config.h"

#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* Integer keys of the text config: name, where it goes, whether 32-bit, largest value,
 * whether it may be absent (then 0). */
typedef struct int_field {
    const char *key;
    size_t off;
    bool is_int32;
    int64_t max;
    bool optional;
} int_field;

#define TF(f) offsetof(vsr_text_config, f)
static const int_field text_int_fields[] = {
    {"vocab_size", TF(vocab_size), false, (int64_t)1 << 31, false},
    {"hidden_size", TF(hidden_size), false, (int64_t)1 << 20, false},
    {"intermediate_size", TF(intermediate_size), false, (int64_t)1 << 22, false},
    {"num_hidden_layers", TF(num_hidden_layers), true, VSR_MAX_LAYERS, false},
    {"num_attention_heads", TF(num_attention_heads), true, 4096, false},
    {"num_key_value_heads", TF(num_key_value_heads), true, 4096, false},
    {"head_dim", TF(head_dim), true, 8192, false},
    {"linear_num_key_heads", TF(linear_num_key_heads), true, 4096, false},
    {"linear_num_value_heads", TF(linear_num_value_heads), true, 4096, false},
    {"linear_key_head_dim", TF(linear_key_head_dim), true, 8192, false},
    {"linear_value_head_dim", TF(linear_value_head_dim), true, 8192, false},
    {"linear_conv_kernel_dim", TF(linear_conv_kernel_dim), true, 64, false},
    /* Optional as in the reference: the input limit is decision_config max_length, else this
     * (vsr_package_check refuses a package that declares neither). */
    {"max_position_embeddings", TF(max_position_embeddings), false, (int64_t)1 << 40, true},
};

static const char *const layer_type_names[] = {
    [VSR_LAYER_LINEAR_ATTENTION] = "linear_attention",
    [VSR_LAYER_FULL_ATTENTION] = "full_attention",
};

static const char *const allowed_dtypes[] = {"bfloat16", "float16", "float32", NULL};

int vsr_text_count_layers(const vsr_text_config *c, vsr_layer_type t) {
    int n = 0;
    for (int i = 0; i < c->num_hidden_layers && i < VSR_MAX_LAYERS; i++) n += c->layer_types[i] == t;
    return n;
}

static vsr_status get_number(const json_t *obj, const char *key, const char *where, bool required,
                             double *out, bool *present, vsr_err *err) {
    json_t *v = json_object_get(obj, key);
    *present = false;
    if (!v || json_is_null(v)) {
        if (required) return vsr_err_set(err, VSR_E_FORMAT, "%s: required key \"%s\" is missing", where, key);
        return VSR_OK;
    }
    if (!json_is_number(v))
        return vsr_err_set(err, VSR_E_FORMAT, "%s: \"%s\" must be a number", where, key);
    *out = json_number_value(v);
    *present = true;
    return VSR_OK;
}

static vsr_status get_bool(const json_t *obj, const char *key, const char *where, bool *out,
                           vsr_err *err) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return VSR_OK; /* keeps the default */
    if (!json_is_boolean(v))
        return vsr_err_set(err, VSR_E_FORMAT, "%s: \"%s\" must be true or false", where, key);
    *out = json_is_true(v);
    return VSR_OK;
}

/* Copies a string value into buf (n bytes). Missing: leaves buf as is unless required. */
static vsr_status get_string(const json_t *obj, const char *key, const char *where, bool required,
                             char *buf, size_t n, vsr_err *err) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        if (required) return vsr_err_set(err, VSR_E_FORMAT, "%s: required key \"%s\" is missing", where, key);
        return VSR_OK;
    }
    if (!json_is_string(v))
        return vsr_err_set(err, VSR_E_FORMAT, "%s: \"%s\" must be a string", where, key);
    if (json_string_length(v) >= n)
        return vsr_err_set(err, VSR_E_FORMAT, "%s: \"%s\" is longer than %zu bytes", where, key, n - 1);
    memcpy(buf, json_string_value(v), json_string_length(v) + 1);
    return VSR_OK;
}

static vsr_status parse_layer_types(const json_t *tc, const char *where, vsr_text_config *c,
                                    vsr_err *err) {
    json_t *lt = json_object_get(tc, "layer_types");
    json_t *fai = json_object_get(tc, "full_attention_interval");
    if (lt && !json_is_null(lt)) {
        if (!json_is_array(lt))
            return vsr_err_set(err, VSR_E_FORMAT, "%s: \"layer_types\" must be an array of strings", where);
        if ((int64_t)json_array_size(lt) != c->num_hidden_layers)
            return vsr_err_set(err, VSR_E_FORMAT,
                               "%s: \"layer_types\" has %zu entries but num_hidden_layers is %d", where,
                               json_array_size(lt), c->num_hidden_layers);
        for (int i = 0; i < c->num_hidden_layers; i++) {
            json_t *e = json_array_get(lt, (size_t)i);
            int found = -1;
            if (json_is_string(e))
                for (int k = 0; k < 2; k++)
                    if (!strcmp(json_string_value(e), layer_type_names[k])) found = k;
            if (found < 0)
                return vsr_err_set(err, VSR_E_FORMAT,
                                   "%s: layer_types[%d] must be \"linear_attention\" or \"full_attention\"%s%s%s",
                                   where, i, json_is_string(e) ? " (found \"" : "",
                                   json_is_string(e) ? json_string_value(e) : "", json_is_string(e) ? "\")" : "");
            c->layer_types[i] = (vsr_layer_type)found;
        }
        return VSR_OK;
    }
    /* transformers' rule: layer i is full attention iff (i+1) % interval == 0; default 4. */
    int64_t interval = 4;
    if (fai && !json_is_null(fai)) {
        if (!json_is_integer(fai))
            return vsr_err_set(err, VSR_E_FORMAT, "%s: \"full_attention_interval\" must be an integer", where);
        interval = json_integer_value(fai);
        if (interval < 1 || interval > VSR_MAX_LAYERS)
            return vsr_err_set(err, VSR_E_FORMAT,
                               "%s: \"full_attention_interval\" must be between 1 and %d (found %lld)", where,
                               VSR_MAX_LAYERS, (long long)interval);
    }
    for (int i = 0; i < c->num_hidden_layers; i++)
        c->layer_types[i] = ((i + 1) % interval) ? VSR_LAYER_LINEAR_ATTENTION : VSR_LAYER_FULL_ATTENTION;
    return VSR_OK;
}

/* Reads the rope facts from rope_parameters (5.x) or the top level / rope_scaling (4.x). */
static vsr_status parse_rope(const json_t *tc, const char *where, vsr_text_config *c, vsr_err *err) {
    char w[160];
    json_t *rp = json_object_get(tc, "rope_parameters");
    if (rp && !json_is_null(rp) && !json_is_object(rp))
        return vsr_err_set(err, VSR_E_FORMAT, "%s: \"rope_parameters\" must be an object", where);
    json_t *rs = json_object_get(tc, "rope_scaling");
    if (rs && !json_is_null(rs) && !json_is_object(rs))
        return vsr_err_set(err, VSR_E_FORMAT, "%s: \"rope_scaling\" must be an object or null", where);
    if (rp && json_is_null(rp)) rp = NULL;
    if (rs && json_is_null(rs)) rs = NULL;

    bool have = false, p;
    double v = 0;
    vsr_status st;
    /* Each key: rope_parameters first, then the top level, then 4.x rope_scaling. */
    const json_t *srcs[3] = {rp, tc, rs};
    const char *src_names[3] = {"rope_parameters", NULL, "rope_scaling"};
    for (int s = 0; s < 3 && !have; s++) {
        if (!srcs[s]) continue;
        snprintf(w, sizeof w, "%s%s%s", where, src_names[s] ? "." : "", src_names[s] ? src_names[s] : "");
        if ((st = get_number(srcs[s], "rope_theta", w, false, &v, &p, err))) return st;
        if (p) have = true;
    }
    if (!have)
        return vsr_err_set(err, VSR_E_FORMAT,
                           "%s: required key \"rope_theta\" is missing (top level or in rope_parameters)", where);
    if (!isfinite(v) || v <= 0)
        return vsr_err_set(err, VSR_E_FORMAT, "%s: \"rope_theta\" must be a positive number", where);
    c->rope_theta = v;

    c->partial_rotary_factor = 0.25; /* transformers' default for qwen3_5 */
    for (int s = 0; s < 3; s++) {
        if (!srcs[s]) continue;
        snprintf(w, sizeof w, "%s%s%s", where, src_names[s] ? "." : "", src_names[s] ? src_names[s] : "");
        if ((st = get_number(srcs[s], "partial_rotary_factor", w, false, &v, &p, err))) return st;
        if (p) {
            c->partial_rotary_factor = v;
            break;
        }
    }
    if (!(c->partial_rotary_factor > 0 && c->partial_rotary_factor <= 1))
        return vsr_err_set(err, VSR_E_FORMAT, "%s: \"partial_rotary_factor\" must be in (0, 1] (found %g)",
                           where, c->partial_rotary_factor);

    c->mrope_section[0] = 11, c->mrope_section[1] = 11, c->mrope_section[2] = 10;
    c->mrope_interleaved = false;
    for (int s = 0; s < 3; s++) {
        if (!srcs[s]) continue;
        snprintf(w, sizeof w, "%s%s%s", where, src_names[s] ? "." : "", src_names[s] ? src_names[s] : "");
        json_t *ms = json_object_get(srcs[s], "mrope_section");
        if (ms && !json_is_null(ms)) {
            if (!json_is_array(ms) || json_array_size(ms) != 3)
                return vsr_err_set(err, VSR_E_FORMAT, "%s: \"mrope_section\" must be an array of 3 integers", w);
            for (int i = 0; i < 3; i++) {
                json_t *e = json_array_get(ms, (size_t)i);
                if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > 8192)
                    return vsr_err_set(err, VSR_E_FORMAT,
                                       "%s: \"mrope_section\" must be an array of 3 non-negative integers", w);
                c->mrope_section[i] = (int)json_integer_value(e);
            }
        }
        json_t *mi = json_object_get(srcs[s], "mrope_interleaved");
        if (mi && !json_is_null(mi)) {
            if (!json_is_boolean(mi))
                return vsr_err_set(err, VSR_E_FORMAT, "%s: \"mrope_interleaved\" must be true or false", w);
            c->mrope_interleaved = json_is_true(mi);
        }
    }
    return VSR_OK;
}

static vsr_status parse_text(const json_t *tc, const json_t *top, const char *top_name, const char *where,
                             vsr_text_config *c, vsr_err *err) {
    vsr_status st;
    memset(c, 0, sizeof *c);
    /* (For a top-level qwen3_5_text config the caller has checked model_type already.) */
    json_t *mt = json_object_get(tc, "model_type");
    if (!json_is_string(mt) || strcmp(json_string_value(mt), "qwen3_5_text")) {
        char shown[96];
        if (json_is_string(mt)) snprintf(shown, sizeof shown, "found \"%.64s\"", json_string_value(mt));
        else snprintf(shown, sizeof shown, "%s", mt ? "found a non-string" : "it is missing");
        return vsr_err_set(err, VSR_E_UNSUPPORTED,
                           "%s needs a qwen3_5_text text_config (text_config model_type must be \"qwen3_5_text\", %s)",
                           top_name, shown);
    }
    snprintf(c->model_type, sizeof c->model_type, "qwen3_5_text");
    for (size_t i = 0; i < sizeof text_int_fields / sizeof text_int_fields[0]; i++) {
        const int_field *f = &text_int_fields[i];
        json_t *v = json_object_get(tc, f->key);
        if ((!v || json_is_null(v)) && f->optional) continue;
        if (!v || json_is_null(v))
            return vsr_err_set(err, VSR_E_FORMAT, "%s: required key \"%s\" is missing", where, f->key);
        if (!json_is_integer(v))
            return vsr_err_set(err, VSR_E_FORMAT, "%s: \"%s\" must be an integer", where, f->key);
        int64_t x = json_integer_value(v);
        if (x <= 0)
            return vsr_err_set(err, VSR_E_FORMAT, "%s: \"%s\" must be positive (found %lld)", where, f->key,
                               (long long)x);
        if (x > f->max)
            return vsr_err_set(err, VSR_E_FORMAT, "%s: \"%s\" is %lld, above the limit of %lld", where, f->key,
                               (long long)x, (long long)f->max);
        if (f->is_int32) *(int *)((char *)c + f->off) = (int)x;
        else *(int64_t *)((char *)c + f->off) = x;
    }
    bool p;
    if ((st = get_number(tc, "rms_norm_eps", where, true, &c->rms_norm_eps, &p, err))) return st;
    if (!(c->rms_norm_eps > 0 && c->rms_norm_eps < 1))
        return vsr_err_set(err, VSR_E_FORMAT, "%s: \"rms_norm_eps\" must be in (0, 1)", where);

    snprintf(c->hidden_act, sizeof c->hidden_act, "silu");
    if ((st = get_string(tc, "hidden_act", where, false, c->hidden_act, sizeof c->hidden_act, err))) return st;
    if (strcmp(c->hidden_act, "silu"))
        return vsr_err_set(err, VSR_E_UNSUPPORTED, "%s: hidden_act must be \"silu\" (found \"%s\")", where,
                           c->hidden_act);

    /* tie_word_embeddings: the nested text config wins, then the wrapper's. */
    c->tie_word_embeddings = false;
    if (top && top != tc && (st = get_bool(top, "tie_word_embeddings", "config.json", &c->tie_word_embeddings, err)))
        return st;
    if ((st = get_bool(tc, "tie_word_embeddings", where, &c->tie_word_embeddings, err))) return st;
    if ((st = get_bool(tc, "attention_bias", where, &c->attention_bias, err))) return st;
    if (c->attention_bias)
        return vsr_err_set(err, VSR_E_UNSUPPORTED, "%s: attention_bias true is not a qwen3_5 checkpoint", where);

    /* dtype (5.x) or torch_dtype (4.x), in the text config or the wrapper; default bfloat16. */
    snprintf(c->dtype, sizeof c->dtype, "bfloat16");
    const json_t *dsrc[2] = {top, tc};
    for (int s = 0; s < 2; s++) {
        if (!dsrc[s]) continue;
        const char *w = dsrc[s] == tc ? where : "config.json";
        if ((st = get_string(dsrc[s], "torch_dtype", w, false, c->dtype, sizeof c->dtype, err))) return st;
        if ((st = get_string(dsrc[s], "dtype", w, false, c->dtype, sizeof c->dtype, err))) return st;
    }
    bool dt_ok = false;
    for (const char *const *d = allowed_dtypes; *d; d++) dt_ok |= !strcmp(*d, c->dtype);
    if (!dt_ok)
        return vsr_err_set(err, VSR_E_FORMAT, "%s: dtype \"%s\" is not one of bfloat16, float16, float32", where,
                           c->dtype);

    /* Shape rules the model code relies on. */
    if (c->num_attention_heads % c->num_key_value_heads)
        return vsr_err_set(err, VSR_E_FORMAT,
                           "%s: num_attention_heads (%d) must be a multiple of num_key_value_heads (%d)", where,
                           c->num_attention_heads, c->num_key_value_heads);
    if (c->linear_num_value_heads % c->linear_num_key_heads)
        return vsr_err_set(err, VSR_E_FORMAT,
                           "%s: linear_num_value_heads (%d) must be a multiple of linear_num_key_heads (%d)", where,
                           c->linear_num_value_heads, c->linear_num_key_heads);
    if ((st = parse_rope(tc, where, c, err))) return st;
    double rot = c->head_dim * c->partial_rotary_factor;
    if (rot != floor(rot) || ((int64_t)rot) % 2 || rot < 2)
        return vsr_err_set(err, VSR_E_FORMAT,
                           "%s: head_dim (%d) x partial_rotary_factor (%g) must be an even whole number of rotary "
                           "dimensions",
                           where, c->head_dim, c->partial_rotary_factor);
    if ((st = parse_layer_types(tc, where, c, err))) return st;
    return VSR_OK;
}

vsr_status vsr_model_config_parse(const void *config_json, const char *label, vsr_model_config *out,
                                  vsr_err *err) {
    const json_t *root = config_json;
    const char *name = label ? label : "config.json";
    char where[160];
    vsr_status st;
    memset(out, 0, sizeof *out);
    if (!json_is_object(root))
        return vsr_err_set(err, VSR_E_FORMAT, "%s must describe a qwen3_5 model (it is not a JSON object)", name);
    if ((st = get_string(root, "model_type", name, true, out->model_type, sizeof out->model_type, err)))
        return vsr_err_prefix(err, "%s must describe a qwen3_5 model", name);
    json_t *arch = json_object_get(root, "architectures");
    if (arch && !json_is_null(arch)) {
        if (!json_is_array(arch))
            return vsr_err_set(err, VSR_E_FORMAT, "%s: \"architectures\" must be an array of strings", name);
        for (size_t i = 0; i < json_array_size(arch); i++)
            if (!json_is_string(json_array_get(arch, i)))
                return vsr_err_set(err, VSR_E_FORMAT, "%s: architectures[%zu] must be a string", name, i);
        if (json_array_size(arch))
            snprintf(out->architectures, sizeof out->architectures, "%s", json_string_value(json_array_get(arch, 0)));
    }
    json_t *qc = json_object_get(root, "quantization_config");
    out->has_quantization_config = qc && !json_is_null(qc);

    if (!strcmp(out->model_type, "qwen3_5")) {
        json_t *tc = json_object_get(root, "text_config");
        if (!tc || json_is_null(tc))
            return vsr_err_set(err, VSR_E_FORMAT, "%s needs a qwen3_5_text text_config (required key \"text_config\" is missing)",
                               name);
        if (!json_is_object(tc))
            return vsr_err_set(err, VSR_E_FORMAT, "%s needs a qwen3_5_text text_config (\"text_config\" must be an object)",
                               name);
        json_t *vc = json_object_get(root, "vision_config");
        if (vc && !json_is_null(vc)) {
            if (!json_is_object(vc))
                return vsr_err_set(err, VSR_E_FORMAT,
                                   "%s vision_config must be a qwen3_5_vision config (\"vision_config\" must be an object)",
                                   name);
            json_t *vt = json_object_get(vc, "model_type");
            char shown[96];
            if (!json_is_string(vt) || strcmp(json_string_value(vt), "qwen3_5_vision")) {
                if (json_is_string(vt)) snprintf(shown, sizeof shown, "\"%.64s\"", json_string_value(vt));
                else snprintf(shown, sizeof shown, "%s", vt ? "a non-string" : "nothing");
                return vsr_err_set(err, VSR_E_UNSUPPORTED,
                                   "%s vision_config must be a qwen3_5_vision config (vision_config.model_type must be "
                                   "\"qwen3_5_vision\", found %s)",
                                   name, shown);
            }
            snprintf(out->vision_model_type, sizeof out->vision_model_type, "qwen3_5_vision");
            out->has_vision = true;
        }
        snprintf(where, sizeof where, "%s: text_config", name);
        return parse_text(tc, root, name, where, &out->text, err);
    }
    if (!strcmp(out->model_type, "qwen3_5_text")) return parse_text(root, NULL, name, name, &out->text, err);
    return vsr_err_set(err, VSR_E_UNSUPPORTED,
                       "%s must describe a qwen3_5 model: model_type \"%s\" is not supported (expected \"qwen3_5\", "
                       "or \"qwen3_5_text\" for a text-only checkpoint)",
                       name, out->model_type);
}
