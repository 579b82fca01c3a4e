/* A vela2 package's calibration.json (reference-profiles-spans.md 3.3 "Thresholds", 3.7, 3.8):
 * temperatures, thresholds, the PII rule and gate, the presets' schemas, the broad head and the
 * Noul calibration. Every value is checked where it is read, with the key named. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json_util.h"
#include "vela2/decide_internal.h"

#define CAL "calibration.json"

static vsr_status number(const json_t *o, const char *key, const char *where, bool positive, double dflt,
                         bool required, double *out, vsr_err *err) {
    const json_t *v = json_object_get(o, key);
    if (!v) {
        if (required) return vsr_err_set(err, VSR_E_FORMAT, CAL ": %s%s is required", where, key);
        *out = dflt;
        return VSR_OK;
    }
    if (!json_is_number(v) || !isfinite(json_number_value(v)) || (positive && !(json_number_value(v) > 0)))
        return vsr_err_set(err, VSR_E_FORMAT, CAL ": %s%s must be a %snumber", where, key,
                           positive ? "finite positive " : "finite ");
    *out = json_number_value(v);
    return VSR_OK;
}

static vsr_status load_pii(v2_calibration *c, vsr_err *err) {
    const json_t *types = json_object_get(c->raw, "pii_types");
    if (types) {
        if (!json_is_array(types)) return vsr_err_set(err, VSR_E_FORMAT, CAL ": pii_types must be an array of strings");
        c->pii_types = calloc(json_array_size(types) + 1, sizeof *c->pii_types);
        if (!c->pii_types) return vsr_err_set(err, VSR_E_NOMEM, "out of memory");
        size_t i;
        const json_t *v;
        json_array_foreach(types, i, v) {
            if (!json_is_string(v)) return vsr_err_set(err, VSR_E_FORMAT, CAL ": pii_types[%zu] must be a string", i);
            c->pii_types[c->n_pii++] = strdup(json_string_value(v));
        }
    }
    const json_t *rule = json_object_get(c->raw, "pii_length_rule");
    if (rule) {
        const json_t *a = json_is_object(rule) ? json_object_get(rule, "anchors") : NULL;
        if (!json_is_array(a) || json_array_size(a) < 1 || json_array_size(a) > 32)
            return vsr_err_set(err, VSR_E_FORMAT, CAL ": pii_length_rule.anchors must be an array of 1 to 32 "
                                                  "{n_tokens, threshold}");
        size_t i;
        const json_t *v;
        json_array_foreach(a, i, v) {
            char where[64];
            snprintf(where, sizeof where, "pii_length_rule.anchors[%zu].", i);
            vsr_status st;
            if ((st = number(v, "n_tokens", where, true, 0, true, &c->anchor_tokens[i], err)) != VSR_OK ||
                (st = number(v, "threshold", where, true, 0, true, &c->anchor_threshold[i], err)) != VSR_OK)
                return st;
            if (i && !(c->anchor_tokens[i] > c->anchor_tokens[i - 1]))
                return vsr_err_set(err, VSR_E_FORMAT, CAL ": pii_length_rule.anchors must have increasing n_tokens");
        }
        c->n_anchors = (int)json_array_size(a);
    }
    const json_t *b = json_object_get(c->raw, "pii_buckets");
    if (b) {
        if (!json_is_array(b) || json_array_size(b) > 16)
            return vsr_err_set(err, VSR_E_FORMAT, CAL ": pii_buckets must be an array of at most 16 "
                                                  "{name, max_tokens, threshold}");
        size_t i;
        const json_t *v;
        json_array_foreach(b, i, v) {
            char where[64];
            snprintf(where, sizeof where, "pii_buckets[%zu].", i);
            const json_t *nm = json_object_get(v, "name");
            if (!json_is_string(nm)) return vsr_err_set(err, VSR_E_FORMAT, CAL ": %sname must be a string", where);
            snprintf(c->bucket_name[i], sizeof c->bucket_name[i], "%s", json_string_value(nm));
            vsr_status st;
            if ((st = number(v, "max_tokens", where, true, 0, true, &c->bucket_max[i], err)) != VSR_OK ||
                (st = number(v, "threshold", where, false, 0, true, &c->bucket_threshold[i], err)) != VSR_OK)
                return st;
        }
        c->n_buckets = (int)json_array_size(b);
    }
    const json_t *g = json_object_get(c->raw, "pii_sparse_gate");
    if (g && !json_is_null(g)) {
        if (!json_is_object(g)) return vsr_err_set(err, VSR_E_FORMAT, CAL ": pii_sparse_gate must be an object");
        vsr_status st;
        if ((st = number(g, "K", "pii_sparse_gate.", false, -1, false, &c->gate_k, err)) != VSR_OK ||
            (st = number(g, "t_sparse", "pii_sparse_gate.", false, 0, true, &c->gate_t_sparse, err)) != VSR_OK ||
            (st = number(g, "probe_threshold", "pii_sparse_gate.", false, 0.5, false, &c->gate_probe, err)) != VSR_OK)
            return st;
        c->has_gate = json_object_size(g) > 0;
    }
    return VSR_OK;
}

static vsr_status load_schemas(v2_calibration *c, vsr_err *err) {
    static const char *const names[3] = {"pii_schema", "halu_schema", "relevance_schema"};
    for (int i = 0; i < 3; i++) {
        const json_t *s = json_object_get(c->raw, names[i]);
        if (!json_is_object(s)) continue; /* "A preset exists only if calibration.json has <name>_schema" */
        if (!json_is_string(json_object_get(s, "text")))
            return vsr_err_set(err, VSR_E_FORMAT, CAL ": %s.text must be a string", names[i]);
        const char *lk = i < 2 ? "labels" : "levels";
        const json_t *l = json_object_get(s, lk);
        if (!json_is_object(l) || json_object_size(l) < (i < 2 ? 1u : 2u) || json_object_size(l) > (i < 2 ? 255u : 10u))
            return vsr_err_set(err, VSR_E_FORMAT, CAL ": %s.%s must be an object of %s", names[i], lk,
                               i < 2 ? "1 to 255 labels" : "2 to 10 named levels");
        c->schema[i] = s;
    }
    return VSR_OK;
}

vsr_status v2_calibration_load(const char *path, v2_calibration *c, vsr_err *err) {
    memset(c, 0, sizeof *c);
    vsr_status st = vsr_json_load_file(path, CAL, 16u << 20, &c->raw, err);
    if (st != VSR_OK) return st;
    if (!json_is_object(c->raw)) return vsr_err_set(err, VSR_E_FORMAT, CAL ": the document must be an object");
    const json_t *t = json_object_get(c->raw, "temperature");
    if (!json_is_object(t)) return vsr_err_set(err, VSR_E_FORMAT, CAL ": temperature must be an object");
    if ((st = number(t, "choice", "temperature.", true, 1.0, false, &c->t_choice, err)) != VSR_OK ||
        (st = number(t, "score", "temperature.", true, 1.0, false, &c->t_score, err)) != VSR_OK ||
        (st = number(t, "set", "temperature.", true, 1.0, false, &c->t_set, err)) != VSR_OK ||
        (st = number(t, "span", "temperature.", true, 1.0, false, &c->t_span, err)) != VSR_OK)
        return st;
    c->thresholds = json_object_get(c->raw, "thresholds");
    if (!json_is_object(c->thresholds)) return vsr_err_set(err, VSR_E_FORMAT, CAL ": thresholds must be an object");
    const char *k;
    json_t *v;
    json_object_foreach(c->thresholds, k, v) if (!json_is_number(v) || json_number_value(v) < 0 || json_number_value(v) > 1)
        return vsr_err_set(err, VSR_E_FORMAT, CAL ": thresholds.%s must be a number in [0, 1]", k);
    if (!json_object_get(c->thresholds, "span:*") || !json_object_get(c->thresholds, "set:*"))
        return vsr_err_set(err, VSR_E_FORMAT, CAL ": thresholds must hold \"span:*\" and \"set:*\"");
    if ((st = load_pii(c, err)) != VSR_OK || (st = load_schemas(c, err)) != VSR_OK) return st;
    const json_t *bh = json_object_get(c->raw, "broad_head");
    if (json_is_object(bh) && json_object_size(bh)) {
        if ((st = number(bh, "temperature", "broad_head.", true, 0, true, &c->broad_temperature, err)) != VSR_OK ||
            (st = number(bh, "threshold", "broad_head.", false, 0, true, &c->broad_threshold, err)) != VSR_OK)
            return st;
        const json_t *sets = json_object_get(bh, "router_label_sets");
        if (sets && !json_is_array(sets))
            return vsr_err_set(err, VSR_E_FORMAT, CAL ": broad_head.router_label_sets must be an array of label lists");
        c->router_label_sets = sets;
        c->has_broad = true;
    }
    const json_t *nc = json_object_get(c->raw, "noul_calibration");
    if (json_is_object(nc) && json_object_size(nc)) {
        if ((st = number(nc, "T", "noul_calibration.", true, 0, true, &c->noul_t, err)) != VSR_OK ||
            (st = number(nc, "b", "noul_calibration.", false, 0, true, &c->noul_b, err)) != VSR_OK)
            return st;
        c->has_noul_cal = true;
        c->noul_default = json_is_true(json_object_get(nc, "default"));
    }
    return VSR_OK;
}

void v2_calibration_free(v2_calibration *c) {
    for (int i = 0; i < c->n_pii; i++) free(c->pii_types[i]);
    free(c->pii_types);
    json_decref(c->raw);
    memset(c, 0, sizeof *c);
}

bool v2_is_pii_type(const v2_calibration *c, const char *label) {
    for (int i = 0; i < c->n_pii; i++)
        if (!strcmp(c->pii_types[i], label)) return true;
    return false;
}
