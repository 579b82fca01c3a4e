/* decision_config.json of a Decision 3.0 package: the readout contract
 * (reference-runtime.md 4.1 step 2). Every rule has its own message. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "package/package_internal.h"

/* String keys with their allowed values; NULL default = required. */
typedef struct str_rule {
    const char *key;
    size_t off, size;
    const char *dflt;
    const char *const *allowed;
} str_rule;

static const char *const v_format_id[] = {"d3-code-readout-v1", NULL};
static const char *const v_prompt[] = {"d3", NULL};
static const char *const v_attention[] = {"causal", "noncausal_full_attention", NULL};
static const char *const v_pooling[] = {"last", NULL};
static const char *const v_readout[] = {"float32", "bfloat16", NULL};

#define DF(f) offsetof(vsr_decision_config, f), sizeof(((vsr_decision_config *)0)->f)
static const str_rule str_rules[] = {
    {"format_id", DF(format_id), NULL, v_format_id},
    {"prompt", DF(prompt), NULL, v_prompt},
    {"attention_mode", DF(attention_mode), "causal", v_attention},
    {"pooling", DF(pooling), "last", v_pooling},
    {"readout_dtype", DF(readout_dtype), "float32", v_readout},
};

static void list_values(const char *const *v, char *buf, size_t n) {
    size_t len = 0;
    buf[0] = 0;
    for (; *v && len + 8 < n; v++) len += (size_t)snprintf(buf + len, n - len, "%s\"%s\"", len ? " or " : "", *v);
}

void vsr_decision_config_free(vsr_decision_config *d) {
    if (!d) return;
    for (int i = 0; i < VSR_D3_CODES; i++) {
        free(d->codes[i]);
        d->codes[i] = NULL;
    }
    json_decref(d->json);
    d->json = NULL;
}

static int cmp_cstr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }
static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

vsr_status vsr_decision_config_parse(json_t *j, const char *label, vsr_decision_config *out,
                                     vsr_err *err) {
    const char *name = label ? label : "decision_config.json";
    memset(out, 0, sizeof *out);
    out->max_length = -1;
    out->temperature = 1.0;
    if (!json_is_object(j)) return vsr_err_set(err, VSR_E_FORMAT, "%s: must be a JSON object", name);

    json_t *fv = json_object_get(j, "format_version");
    if (!fv) return vsr_err_set(err, VSR_E_FORMAT, "%s: required key \"format_version\" is missing", name);
    if (!json_is_integer(fv) || json_integer_value(fv) != 1)
        return vsr_err_set(err, VSR_E_UNSUPPORTED, "%s: \"format_version\" must be 1", name);
    out->format_version = 1;

    for (size_t i = 0; i < sizeof str_rules / sizeof str_rules[0]; i++) {
        const str_rule *r = &str_rules[i];
        char *dst = (char *)out + r->off;
        char allowed[160];
        list_values(r->allowed, allowed, sizeof allowed);
        json_t *v = json_object_get(j, r->key);
        const char *s;
        if (!v || json_is_null(v)) {
            if (!r->dflt)
                return vsr_err_set(err, VSR_E_FORMAT, "%s: required key \"%s\" is missing (expected %s)", name,
                                   r->key, allowed);
            s = r->dflt;
        } else if (!json_is_string(v)) {
            return vsr_err_set(err, VSR_E_FORMAT, "%s: \"%s\" must be a string: %s", name, r->key, allowed);
        } else {
            s = json_string_value(v);
        }
        bool ok = false;
        for (const char *const *a = r->allowed; *a; a++) ok |= !strcmp(*a, s);
        if (!ok)
            return vsr_err_set(err, VSR_E_UNSUPPORTED, "%s: \"%s\" must be %s (found \"%.64s\")", name, r->key,
                               allowed, s);
        snprintf(dst, r->size, "%s", s);
    }

    json_t *t = json_object_get(j, "temperature");
    if (t && !json_is_null(t)) {
        if (!json_is_number(t))
            return vsr_err_set(err, VSR_E_FORMAT, "%s: \"temperature\" must be a number", name);
        out->temperature = json_number_value(t);
        if (!isfinite(out->temperature) || out->temperature <= 0)
            return vsr_err_set(err, VSR_E_FORMAT, "%s: \"temperature\" must be finite and > 0 (found %g)", name,
                               out->temperature);
    }

    json_t *ml = json_object_get(j, "max_length");
    if (ml && !json_is_null(ml)) {
        if (!json_is_integer(ml))
            return vsr_err_set(err, VSR_E_FORMAT, "%s: \"max_length\" must be null or an integer >= 16", name);
        if (json_integer_value(ml) < 16)
            return vsr_err_set(err, VSR_E_FORMAT, "%s: \"max_length\" must be null or an integer >= 16 (found %lld)",
                               name, (long long)json_integer_value(ml));
        out->max_length = json_integer_value(ml);
    }

    const char *opt_strings[] = {"base_model", "revision"};
    for (int i = 0; i < 2; i++) {
        json_t *v = json_object_get(j, opt_strings[i]);
        if (v && !json_is_null(v) && !json_is_string(v))
            return vsr_err_set(err, VSR_E_FORMAT, "%s: \"%s\" must be a string", name, opt_strings[i]);
    }

    json_t *codes = json_object_get(j, "codes"), *ids = json_object_get(j, "token_ids");
    if (!codes) return vsr_err_set(err, VSR_E_FORMAT, "%s: required key \"codes\" is missing", name);
    if (!ids) return vsr_err_set(err, VSR_E_FORMAT, "%s: required key \"token_ids\" is missing", name);
    if (!json_is_array(codes) || json_array_size(codes) != VSR_D3_CODES)
        return vsr_err_set(err, VSR_E_FORMAT, "%s: \"codes\" must be an array of %d strings (found %s%zu)", name,
                           VSR_D3_CODES, json_is_array(codes) ? "" : "a non-array, size ",
                           json_is_array(codes) ? json_array_size(codes) : 0);
    if (!json_is_array(ids) || json_array_size(ids) != VSR_D3_CODES)
        return vsr_err_set(err, VSR_E_FORMAT, "%s: \"token_ids\" must be an array of %d integers (found %s%zu)",
                           name, VSR_D3_CODES, json_is_array(ids) ? "" : "a non-array, size ",
                           json_is_array(ids) ? json_array_size(ids) : 0);
    for (int i = 0; i < VSR_D3_CODES; i++) {
        json_t *c = json_array_get(codes, (size_t)i), *id = json_array_get(ids, (size_t)i);
        if (!json_is_string(c) || json_string_length(c) == 0 ||
            strlen(json_string_value(c)) != json_string_length(c)) {
            vsr_decision_config_free(out);
            return vsr_err_set(err, VSR_E_FORMAT, "%s: codes[%d] must be a non-empty string", name, i);
        }
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) > INT32_MAX) {
            vsr_decision_config_free(out);
            return vsr_err_set(err, VSR_E_FORMAT, "%s: token_ids[%d] must be a non-negative 32-bit integer", name, i);
        }
        out->codes[i] = strdup(json_string_value(c));
        if (!out->codes[i]) {
            vsr_decision_config_free(out);
            return vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory", name);
        }
        out->token_ids[i] = (int32_t)json_integer_value(id);
    }
    /* Distinctness: sort copies and compare neighbours. */
    char *sc[VSR_D3_CODES];
    int32_t si[VSR_D3_CODES];
    memcpy(sc, out->codes, sizeof sc);
    memcpy(si, out->token_ids, sizeof si);
    qsort(sc, VSR_D3_CODES, sizeof sc[0], cmp_cstr);
    qsort(si, VSR_D3_CODES, sizeof si[0], cmp_i32);
    for (int i = 1; i < VSR_D3_CODES; i++) {
        if (!strcmp(sc[i], sc[i - 1])) {
            vsr_err_set(err, VSR_E_FORMAT, "%s: \"codes\" must be %d distinct entries (\"%.32s\" repeats)", name,
                        VSR_D3_CODES, sc[i]);
            vsr_decision_config_free(out);
            return VSR_E_FORMAT;
        }
        if (si[i] == si[i - 1]) {
            vsr_decision_config_free(out);
            return vsr_err_set(err, VSR_E_FORMAT, "%s: \"token_ids\" must be %d distinct entries (%d repeats)",
                               name, VSR_D3_CODES, (int)si[i]);
        }
    }
    out->json = json_incref(j);
    return VSR_OK;
}
