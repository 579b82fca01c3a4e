/* decision_config.json of a Decision 3.0 package: the readout contract
 * (reference-runtime.md 4.1 step 2). Every rule has its own message, which holds the
 * reference runtime's words (published-d3.md) verbatim. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "package/package_internal.h"

#define D3_FORMAT_ID "d3-code-readout-v1"

static const char *const v_prompt[] = {"d3", NULL};
static const char *const v_attention[] = {"causal", "noncausal_full_attention", NULL};
static const char *const v_pooling[] = {"last", NULL};
static const char *const v_readout[] = {"float32", "bfloat16", NULL};

static bool one_of(const char *s, const char *const *allowed) {
    for (; *allowed; allowed++)
        if (!strcmp(s, *allowed)) return true;
    return false;
}

/* An optional string key with a default when absent. Present but null or not a string is
 * refused as the reference does (its `config.get(key, default)` only defaults an absent key).
 * Returns false when the value is not one of `allowed`; `shown` gets Python's repr of it. */
static bool opt_string(const json_t *j, const char *key, const char *dflt, const char *const *allowed, char *dst,
                       size_t dst_n, char *shown, size_t shown_n) {
    json_t *v = json_object_get(j, key);
    vsr_py_repr_json(v, shown, shown_n);
    const char *s = !v ? dflt : json_is_string(v) ? json_string_value(v) : NULL;
    if (!s || strlen(s) != (v ? json_string_length(v) : strlen(s)) || !one_of(s, allowed)) return false;
    snprintf(dst, dst_n, "%s", s);
    return true;
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

/* The reference's checks in its order (format, prompt, attention mode, pooling, readout
 * dtype, temperature, codes and token IDs, max_length), each message holding the
 * reference's words verbatim with what was found. */
vsr_status vsr_decision_config_parse(json_t *j, const char *label, vsr_decision_config *out,
                                     vsr_err *err) {
    const char *name = label ? label : "decision_config.json";
    char shown[160];
    memset(out, 0, sizeof *out);
    out->max_length = -1;
    out->temperature = 1.0;
    if (!json_is_object(j)) return vsr_err_set(err, VSR_E_FORMAT, "%s must be an object", name);

    json_t *fv = json_object_get(j, "format_version");
    if (!fv)
        return vsr_err_set(err, VSR_E_UNSUPPORTED,
                           "%s: unsupported decision_config.json format (required key \"format_version\" is missing; "
                           "expected 1)",
                           name);
    if (!json_is_integer(fv) || json_integer_value(fv) != 1)
        return vsr_err_set(err, VSR_E_UNSUPPORTED,
                           "%s: unsupported decision_config.json format (\"format_version\" must be 1, found %s)", name,
                           vsr_py_repr_json(fv, shown, sizeof shown));
    out->format_version = 1;
    json_t *fi = json_object_get(j, "format_id");
    if (!fi)
        return vsr_err_set(err, VSR_E_UNSUPPORTED,
                           "%s: unsupported decision_config.json format (required key \"format_id\" is missing; "
                           "expected \"" D3_FORMAT_ID "\")",
                           name);
    if (!json_is_string(fi) || strcmp(json_string_value(fi), D3_FORMAT_ID))
        return vsr_err_set(err, VSR_E_UNSUPPORTED,
                           "%s: unsupported decision_config.json format (\"format_id\" must be \"" D3_FORMAT_ID
                           "\", found %s)",
                           name, vsr_py_repr_json(fi, shown, sizeof shown));
    snprintf(out->format_id, sizeof out->format_id, "%s", D3_FORMAT_ID);

    /* The prompt family is required here: the reference recognises a Decision 3.0 package
     * by format_id and prompt together, so a package without one is not served as d3. */
    if (!json_object_get(j, "prompt"))
        return vsr_err_set(err, VSR_E_FORMAT, "%s: required key \"prompt\" is missing (expected \"d3\")", name);
    if (!opt_string(j, "prompt", "d3", v_prompt, out->prompt, sizeof out->prompt, shown, sizeof shown))
        return vsr_err_set(err, VSR_E_UNSUPPORTED, "%s: unknown prompt family %s (expected 'd3')", name, shown);
    if (!opt_string(j, "attention_mode", "causal", v_attention, out->attention_mode, sizeof out->attention_mode, shown,
                    sizeof shown))
        return vsr_err_set(err, VSR_E_UNSUPPORTED,
                           "%s: unknown attention mode %s (expected 'causal' or 'noncausal_full_attention')", name,
                           shown);
    if (!opt_string(j, "pooling", "last", v_pooling, out->pooling, sizeof out->pooling, shown, sizeof shown))
        return vsr_err_set(err, VSR_E_UNSUPPORTED, "%s: unsupported pooling %s (expected 'last')", name, shown);
    if (!opt_string(j, "readout_dtype", "float32", v_readout, out->readout_dtype, sizeof out->readout_dtype, shown,
                    sizeof shown))
        return vsr_err_set(err, VSR_E_UNSUPPORTED, "%s: readout_dtype must be float32 or bfloat16 (found %s)", name,
                           shown);

    json_t *t = json_object_get(j, "temperature");
    if (t) {
        /* An integer or a float; null and booleans are refused, as the reference's type test does. */
        if (json_is_number(t)) out->temperature = json_number_value(t);
        if (!json_is_number(t) || !isfinite(out->temperature) || out->temperature <= 0)
            return vsr_err_set(err, VSR_E_FORMAT, "%s: temperature must be positive and finite (found %s)", name,
                               vsr_py_repr_json(t, shown, sizeof shown));
    }

    const char *opt_strings[] = {"base_model", "revision"};
    for (int i = 0; i < 2; i++) {
        json_t *v = json_object_get(j, opt_strings[i]);
        if (v && !json_is_null(v) && !json_is_string(v))
            return vsr_err_set(err, VSR_E_FORMAT, "%s: \"%s\" must be a string", name, opt_strings[i]);
    }

#define CODES_MSG "%s: decision_config.json needs 255 distinct answer codes and token IDs ("
    json_t *codes = json_object_get(j, "codes"), *ids = json_object_get(j, "token_ids");
    if (!codes) return vsr_err_set(err, VSR_E_FORMAT, CODES_MSG "required key \"codes\" is missing)", name);
    if (!ids) return vsr_err_set(err, VSR_E_FORMAT, CODES_MSG "required key \"token_ids\" is missing)", name);
    if (!json_is_array(codes) || json_array_size(codes) != VSR_D3_CODES)
        return vsr_err_set(err, VSR_E_FORMAT, CODES_MSG "\"codes\" must be an array of %d strings, found %s%zu)", name,
                           VSR_D3_CODES, json_is_array(codes) ? "" : "a non-array, size ",
                           json_is_array(codes) ? json_array_size(codes) : 0);
    if (!json_is_array(ids) || json_array_size(ids) != VSR_D3_CODES)
        return vsr_err_set(err, VSR_E_FORMAT, CODES_MSG "\"token_ids\" must be an array of %d integers, found %s%zu)",
                           name, VSR_D3_CODES, json_is_array(ids) ? "" : "a non-array, size ",
                           json_is_array(ids) ? json_array_size(ids) : 0);
    for (int i = 0; i < VSR_D3_CODES; i++) {
        json_t *c = json_array_get(codes, (size_t)i), *id = json_array_get(ids, (size_t)i);
        if (!json_is_string(c) || json_string_length(c) == 0 ||
            strlen(json_string_value(c)) != json_string_length(c)) {
            vsr_decision_config_free(out);
            return vsr_err_set(err, VSR_E_FORMAT, CODES_MSG "codes[%d] must be a non-empty string, found %s)", name, i,
                               vsr_py_repr_json(c, shown, sizeof shown));
        }
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) > INT32_MAX) {
            vsr_decision_config_free(out);
            return vsr_err_set(err, VSR_E_FORMAT,
                               CODES_MSG "token_ids[%d] must be a non-negative 32-bit integer, found %s)", name, i,
                               vsr_py_repr_json(id, shown, sizeof shown));
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
            vsr_err_set(err, VSR_E_FORMAT, CODES_MSG "\"codes\" must be %d distinct entries; \"%.32s\" repeats)", name,
                        VSR_D3_CODES, sc[i]);
            vsr_decision_config_free(out);
            return VSR_E_FORMAT;
        }
        if (si[i] == si[i - 1]) {
            vsr_decision_config_free(out);
            return vsr_err_set(err, VSR_E_FORMAT, CODES_MSG "\"token_ids\" must be %d distinct entries; %d repeats)",
                               name, VSR_D3_CODES, (int)si[i]);
        }
    }
#undef CODES_MSG

    json_t *ml = json_object_get(j, "max_length");
    if (ml && !json_is_null(ml)) {
        if (!json_is_integer(ml) || json_integer_value(ml) < 16) {
            vsr_decision_config_free(out);
            return vsr_err_set(err, VSR_E_FORMAT, "%s: max_length must be null or an integer >= 16 (found %s)", name,
                               vsr_py_repr_json(ml, shown, sizeof shown));
        }
        out->max_length = json_integer_value(ml);
    }
    out->json = json_incref(j);
    return VSR_OK;
}
