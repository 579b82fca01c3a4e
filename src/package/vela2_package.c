/* Vela 2.0 decoder packages (reference-profiles-spans.md 3.8; the reference's
 * families/vela2/package.py): config.json with format_version 1 and model_type "vela2-decoder"
 * (0.8B, 4B, 9B: a qwen3_5_text backbone read as a tree), calibration.json, tokenizer.json,
 * the weight shards listed by model.safetensors.index.json (backbone.*, the candidate head
 * head.*, set_bias, the router span head span2.*), the optional broad span head
 * broad_head.safetensors (span_broad.*), the optional MODEL_MANIFEST.json
 * {"format": "vela2-decoder-release/1", "files_sha256": {...}} and the optional SHA256SUMS.
 *
 * Read as strictly as a Decision 3.0 package: every file a load reads must be a regular file
 * inside the package, every digest the package records for it must match, the config and the
 * calibration are checked key by key, and every tensor is checked by name, dtype and shape.
 * The identity is the reference's sha256_json of {weight shard: sha256, broad_head.safetensors:
 * sha256}. Span packages stay BF16: a quantization_config is refused.
 *
 * Also here: what else config.json may name. "vela2-unified" (the 0.3B encoder) is refused with
 * a message saying this runtime serves the decoder packages only, and Vela 3 (the seed's
 * vllm-sr/vela3-fast, a newer release whose layout is not public) is refused unless its files
 * are the documented vela2-decoder layout. Bundled Python (vela2_inference.py) is never read. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "core/json_util.h"
#include "package/package_internal.h"
#include "vsr/catalog.h"
#include "vsr/hash.h"
#include "vsr/progress.h"

#define V2_FORMAT_VERSION 1
#define V2_DECODER "vela2-decoder"
#define V2_ENCODER "vela2-unified"
#define V2_MANIFEST_FORMAT "vela2-decoder-release/1"
#define V2_INDEX "model.safetensors.index.json"
#define V2_BROAD "broad_head.safetensors"
#define V2_SUMS "SHA256SUMS"
#define V2_BACKBONE "backbone."

/* The files every vela2 package loads besides the weights (COMMON_FILES). */
static const char *const common_files[] = {"config.json", "calibration.json", "tokenizer.json"};

/* ------------------------------------------------------------ small helpers */

static bool lexists(const char *dir, const char *name) {
    char p[PATH_MAX * 2];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return lstat(p, &sb) == 0;
}

static bool is_hex64(const char *s) {
    if (strlen(s) != 64) return false;
    for (int i = 0; i < 64; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
    return true;
}

/* A file the package must hold: a regular file inside it (links only into a hub snapshot's blobs). */
static vsr_status need_file(const vsr_package *p, const char *name, const char *why, char *real, size_t n,
                            vsr_err *err) {
    if (!lexists(p->path, name))
        return vsr_err_set(err, VSR_E_NOT_FOUND, "%s: file is missing from %s (%s)", name, p->path, why);
    vsr_status st = vsr_package_resolve_inside(p->path, name, "the package", real, n, err);
    if (st) return st;
    struct stat sb;
    if (stat(real, &sb) != 0 || !S_ISREG(sb.st_mode))
        return vsr_err_set(err, VSR_E_INVALID, "%s: not a regular file (%s)", name, why);
    return VSR_OK;
}

static vsr_status load_json(const vsr_package *p, const char *name, const char *why, json_t **out, vsr_err *err) {
    char real[PATH_MAX];
    vsr_status st = need_file(p, name, why, real, sizeof real, err);
    if (st) return st;
    return vsr_json_load_file(real, name, VSR_JSON_MAX_BYTES, out, err);
}

static const char *base_name(const char *repo) {
    const char *s = strrchr(repo, '/');
    return s ? s + 1 : repo;
}

static bool starts_ci(const char *s, const char *prefix) { return s && !strncasecmp(s, prefix, strlen(prefix)); }
static bool starts(const char *s, const char *prefix) { return !strncmp(s, prefix, strlen(prefix)); }

/* A positive integer key (required unless `dflt` >= 0, which is then used when absent). */
static vsr_status get_pos_int(const json_t *obj, const char *key, const char *where, int64_t dflt, int64_t max,
                              int64_t *out, vsr_err *err) {
    json_t *v = json_object_get(obj, key);
    if (!v && dflt >= 0) {
        *out = dflt;
        return VSR_OK;
    }
    if (!v) return vsr_err_set(err, VSR_E_FORMAT, "%s: required key \"%s\" is missing", where, key);
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > max)
        return vsr_err_set(err, VSR_E_FORMAT, "%s: \"%s\" must be an integer from 1 to %lld", where, key,
                           (long long)max);
    *out = json_integer_value(v);
    return VSR_OK;
}

/* ------------------------------------------------------------ what config.json names */

typedef enum v2_kind { V2_NONE, V2_IS_DECODER, V2_IS_ENCODER, V2_IS_VELA3, V2_IS_OTHER_VELA } v2_kind;

static v2_kind kind_of(const vsr_package *p, const json_t *cfg) {
    const char *mt = json_string_value(json_object_get(cfg, "model_type"));
    json_t *fv = json_object_get(cfg, "format_version");
    bool v1 = json_is_integer(fv) && json_integer_value(fv) == V2_FORMAT_VERSION;
    if (mt && v1 && !strcmp(mt, V2_DECODER)) return V2_IS_DECODER; /* the documented format, whatever the repo */
    if (starts_ci(base_name(p->repo), "vela3") || starts_ci(mt, "vela3") || starts_ci(mt, "vela-3"))
        return V2_IS_VELA3;
    if (mt && v1 && !strcmp(mt, V2_ENCODER)) return V2_IS_ENCODER;
    if (starts_ci(mt, "vela")) return V2_IS_OTHER_VELA;
    return V2_NONE;
}

bool vsr_vela2_claims(const vsr_package *p, const void *cfg) { return kind_of(p, cfg) != V2_NONE; }

void vsr_vela2_note_unpublished(const char *repo, vsr_err *err) {
    if (repo && starts_ci(base_name(repo), "vela3"))
        vsr_err_prefix(err,
                       "%s is a newer span release (Vela 3) whose package layout is not public; only Vela 2.0 "
                       "decoder packages (model_type \"vela2-decoder\") are served, and this one is not in the "
                       "store either",
                       repo);
}

static vsr_status refuse_kind(const vsr_package *p, v2_kind k, const json_t *cfg, vsr_err *err) {
    const char *mt = json_string_value(json_object_get(cfg, "model_type"));
    json_t *fv = json_object_get(cfg, "format_version");
    char fvs[64];
    if (json_is_integer(fv)) snprintf(fvs, sizeof fvs, "%lld", (long long)json_integer_value(fv));
    else snprintf(fvs, sizeof fvs, "%s", fv ? "not an integer" : "absent");
    const char *who = p->repo[0] ? p->repo : p->path;
    switch (k) {
    case V2_IS_ENCODER:
        return vsr_err_set(err, VSR_E_UNSUPPORTED,
                           "%s: config.json names model_type \"vela2-unified\" (the Vela 2.0 0.3B encoder: ModernBERT "
                           "with marker tokens); this runtime serves the Vela 2.0 decoder packages only (0.8B, 4B, "
                           "9B: model_type \"vela2-decoder\")",
                           who);
    case V2_IS_VELA3:
        return vsr_err_set(err, VSR_E_UNSUPPORTED,
                           "%s: a Vela 3 package (the seed's vllm-sr/vela3-fast) is a newer release whose layout is "
                           "not public; only the documented Vela 2.0 decoder layout is served (config.json "
                           "format_version 1, model_type \"vela2-decoder\"), and this package's config.json has "
                           "model_type \"%s\", format_version %s",
                           who, mt ? mt : "(none)", fvs);
    default:
        return vsr_err_set(err, VSR_E_UNSUPPORTED,
                           "%s: config.json names model_type \"%s\" with format_version %s, which is not a span "
                           "package layout this runtime reads (expected format_version 1 and model_type "
                           "\"vela2-decoder\")",
                           who, mt ? mt : "(none)", fvs);
    }
}

/* ------------------------------------------------------------ config.json */

static vsr_status parse_config(vsr_package *p, const json_t *cfg, vsr_err *err) {
    vsr_vela2_config *v = p->vela2;
    vsr_status st;
    const char *W = "config.json";
    json_t *arch = json_object_get(cfg, "architectures");
    if (arch && (!json_is_array(arch) || !json_array_size(arch) || !json_is_string(json_array_get(arch, 0))))
        return vsr_err_set(err, VSR_E_FORMAT, "%s: \"architectures\" must be a list of strings ([\"Vela2DecoderModel\"])",
                           W);
    if (json_is_array(arch))
        snprintf(p->config.architectures, sizeof p->config.architectures, "%s",
                 json_string_value(json_array_get(arch, 0)));
    json_t *mn = json_object_get(cfg, "model_name");
    if (!json_is_string(mn) || !json_string_length(mn) || json_string_length(mn) >= sizeof v->model_name)
        return vsr_err_set(err, VSR_E_FORMAT, "%s: \"model_name\" must be a non-empty string of at most %zu bytes", W,
                           sizeof v->model_name - 1);
    snprintf(v->model_name, sizeof v->model_name, "%s", json_string_value(mn));

    /* Span packages stay BF16 (the seed: only Decision 3.0 packages may be quantized). */
    json_t *bc = json_object_get(cfg, "backbone_config");
    json_t *qc = json_object_get(cfg, "quantization_config");
    if ((qc && !json_is_null(qc)) || (json_is_object(bc) && json_object_get(bc, "quantization_config") &&
                                      !json_is_null(json_object_get(bc, "quantization_config"))))
        return vsr_err_set(err, VSR_E_UNSUPPORTED,
                           "%s: config.json has a quantization_config, but a Vela 2.0 span package cannot carry "
                           "quantized weights: only Decision 3.0 packages may be quantized (serve this family's BF16 "
                           "package)",
                           p->repo[0] ? p->repo : p->path);
    if (!json_is_object(bc))
        return vsr_err_set(err, VSR_E_FORMAT,
                           "%s: \"backbone_config\" must be an object (the qwen3_5_text config of the backbone)", W);
    if ((st = vsr_model_config_parse(bc, "config.json: backbone_config", &p->config, err))) return st;
    if (strcmp(p->config.model_type, "qwen3_5_text"))
        return vsr_err_set(err, VSR_E_UNSUPPORTED,
                           "config.json: backbone_config must be a qwen3_5_text config (found model_type \"%s\")",
                           p->config.model_type);
    if (strcmp(p->config.text.dtype, "bfloat16") && strcmp(p->config.text.dtype, "float32"))
        return vsr_err_set(err, VSR_E_UNSUPPORTED,
                           "config.json: backbone_config dtype \"%s\": a Vela 2.0 backbone is bfloat16 (or float32)",
                           p->config.text.dtype);
    if (arch && json_is_array(arch)) /* keep the package's own architecture name, not the backbone's */
        snprintf(p->config.architectures, sizeof p->config.architectures, "%s",
                 json_string_value(json_array_get(arch, 0)));

    int64_t x;
    if ((st = get_pos_int(cfg, "head_dim", W, -1, 1 << 16, &x, err))) return st;
    v->head_dim = (int)x;
    json_t *sh = json_object_get(cfg, "span_head");
    if (sh && !json_is_null(sh) && !json_is_object(sh))
        return vsr_err_set(err, VSR_E_FORMAT, "%s: \"span_head\" must be an object {\"d\", \"slots\"}", W);
    json_t *shd = json_is_object(sh) ? sh : NULL;
    if (shd && (st = vsr_json_only_keys(shd, (const char *const[]){"d", "slots", NULL}, "config.json: span_head", err)))
        return st;
    if ((st = get_pos_int(shd, "d", "config.json: span_head", 256, 1 << 16, &x, err))) return st;
    v->span_d = (int)x;
    if ((st = get_pos_int(shd, "slots", "config.json: span_head", 64, 1 << 16, &x, err))) return st;
    v->span_slots = (int)x;
    json_t *pad = json_object_get(cfg, "pad_token_id");
    if (!json_is_integer(pad) || json_integer_value(pad) < 0 || json_integer_value(pad) >= p->config.text.vocab_size)
        return vsr_err_set(err, VSR_E_FORMAT, "%s: \"pad_token_id\" must be an integer from 0 to %lld (the vocabulary)",
                           W, (long long)p->config.text.vocab_size - 1);
    v->pad_token_id = (int32_t)json_integer_value(pad);
    json_t *ml = json_object_get(cfg, "max_length");
    if (!json_is_integer(ml) || json_integer_value(ml) < 16 || json_integer_value(ml) > (1 << 24))
        return vsr_err_set(err, VSR_E_FORMAT,
                           "%s: \"max_length\" must be an integer from 16 to %d (the tokens of one tree)", W, 1 << 24);
    v->max_length = json_integer_value(ml);

    json_t *sl = json_object_get(cfg, "span_layout");
    const char *SL = "config.json: span_layout";
    if (!json_is_object(sl))
        return vsr_err_set(err, VSR_E_FORMAT,
                           "%s: \"span_layout\" must be an object {\"hybrid_rmax\", \"window\", \"stride\", "
                           "\"window_above\"}",
                           W);
    static const char *const sl_keys[] = {"hybrid_rmax", "window", "stride", "window_above", NULL};
    int *dst[] = {&v->hybrid_rmax, &v->window, &v->stride, &v->window_above};
    for (int i = 0; sl_keys[i]; i++) {
        if ((st = get_pos_int(sl, sl_keys[i], SL, -1, v->max_length, &x, err))) return st;
        *dst[i] = (int)x;
    }
    if (v->window_above != v->hybrid_rmax)
        return vsr_err_set(err, VSR_E_FORMAT,
                           "%s: window_above (%d) must equal hybrid_rmax (%d): a span target is read in windows "
                           "exactly when it is too long to repeat",
                           SL, v->window_above, v->hybrid_rmax);
    if (v->stride > v->window)
        return vsr_err_set(err, VSR_E_FORMAT, "%s: stride (%d) must not exceed window (%d), or words fall between "
                           "windows", SL, v->stride, v->window);
    return VSR_OK;
}

/* ------------------------------------------------------------ calibration.json */

static vsr_status need_number(const json_t *obj, const char *key, const char *where, double lo, double hi,
                              bool lo_open, bool required, vsr_err *err) {
    json_t *v = json_object_get(obj, key);
    if (!v) {
        if (required) return vsr_err_set(err, VSR_E_FORMAT, "%s: required key \"%s\" is missing", where, key);
        return VSR_OK;
    }
    double x = json_is_number(v) ? json_number_value(v) : NAN;
    if (!isfinite(x) || x < lo || x > hi || (lo_open && x == lo))
        return vsr_err_set(err, VSR_E_FORMAT, "%s: \"%s\" must be a number in %s%g, %g]", where, key,
                           lo_open ? "(" : "[", lo, hi);
    return VSR_OK;
}

static vsr_status need_string_list(const json_t *v, const char *where, bool nonempty, vsr_err *err) {
    if (!json_is_array(v) || (nonempty && !json_array_size(v)))
        return vsr_err_set(err, VSR_E_FORMAT, "%s must be a %slist of strings", where, nonempty ? "non-empty " : "");
    for (size_t i = 0; i < json_array_size(v); i++)
        if (!json_is_string(json_array_get(v, i)))
            return vsr_err_set(err, VSR_E_FORMAT, "%s[%zu] must be a string", where, i);
    return VSR_OK;
}

/* {text, labels: {name: description}} (pii_schema, halu_schema). */
static vsr_status check_span_schema(const json_t *cal, const char *key, vsr_err *err) {
    json_t *s = json_object_get(cal, key);
    if (!s) return VSR_OK;
    char w[96];
    snprintf(w, sizeof w, "calibration.json: %s", key);
    if (!json_is_object(s) || !json_is_string(json_object_get(s, "text")))
        return vsr_err_set(err, VSR_E_FORMAT, "%s must be an object with a string \"text\" and \"labels\"", w);
    json_t *l = json_object_get(s, "labels");
    if (!json_is_object(l) || !json_object_size(l) || json_object_size(l) > 255)
        return vsr_err_set(err, VSR_E_FORMAT, "%s.labels must be an object of 1 to 255 {label: description}", w);
    const char *k;
    json_t *d;
    json_object_foreach(l, k, d) {
        if (!json_is_string(d) || !*k)
            return vsr_err_set(err, VSR_E_FORMAT, "%s.labels[\"%.100s\"] must be a string description", w, k);
    }
    return VSR_OK;
}

static vsr_status check_calibration(const json_t *cal, bool broad, vsr_err *err) {
    const char *W = "calibration.json";
    vsr_status st;
    char w[192];
    if (!json_is_object(cal)) return vsr_err_set(err, VSR_E_FORMAT, "%s must hold a JSON object", W);
    json_t *t = json_object_get(cal, "temperature");
    if (!json_is_object(t))
        return vsr_err_set(err, VSR_E_FORMAT, "%s: \"temperature\" must be an object of per-type temperatures", W);
    const char *k;
    json_t *v;
    json_object_foreach(t, k, v) {
        snprintf(w, sizeof w, "%s: temperature", W);
        if ((st = need_number(t, k, w, 0, 1e6, true, true, err))) return st;
    }
    json_t *th = json_object_get(cal, "thresholds");
    if (!json_is_object(th))
        return vsr_err_set(err, VSR_E_FORMAT, "%s: \"thresholds\" must be an object (\"set:*\", \"span:*\", ...)", W);
    snprintf(w, sizeof w, "%s: thresholds", W);
    json_object_foreach(th, k, v) if ((st = need_number(th, k, w, 0, 1, false, true, err))) return st;
    if ((st = need_number(th, "set:*", w, 0, 1, false, true, err)) ||
        (st = need_number(th, "span:*", w, 0, 1, false, true, err)))
        return st;
    json_t *pt = json_object_get(cal, "pii_types");
    if (pt && (st = need_string_list(pt, "calibration.json: pii_types", false, err))) return st;

    json_t *rule = json_object_get(cal, "pii_length_rule"), *buckets = json_object_get(cal, "pii_buckets");
    if (rule) {
        json_t *a = json_object_get(rule, "anchors");
        if (!json_is_object(rule) || !json_is_array(a) || !json_array_size(a))
            return vsr_err_set(err, VSR_E_FORMAT,
                               "%s: pii_length_rule must be {\"anchors\": [{\"n_tokens\", \"threshold\"}, ...]} with at "
                               "least one anchor",
                               W);
        double prev = 0;
        for (size_t i = 0; i < json_array_size(a); i++) {
            json_t *e = json_array_get(a, i);
            snprintf(w, sizeof w, "%s: pii_length_rule.anchors[%zu]", W, i);
            if (!json_is_object(e)) return vsr_err_set(err, VSR_E_FORMAT, "%s must be an object", w);
            if ((st = need_number(e, "n_tokens", w, 0, 1e12, true, true, err)) ||
                (st = need_number(e, "threshold", w, 0, 1, true, true, err)))
                return st;
            double n = json_number_value(json_object_get(e, "n_tokens"));
            if (n <= prev)
                return vsr_err_set(err, VSR_E_FORMAT, "%s: n_tokens must increase from anchor to anchor", w);
            prev = n;
        }
    } else if (buckets) {
        if (!json_is_array(buckets) || !json_array_size(buckets))
            return vsr_err_set(err, VSR_E_FORMAT, "%s: pii_buckets must be a non-empty list", W);
        for (size_t i = 0; i < json_array_size(buckets); i++) {
            json_t *e = json_array_get(buckets, i);
            snprintf(w, sizeof w, "%s: pii_buckets[%zu]", W, i);
            if (!json_is_object(e) || !json_is_string(json_object_get(e, "name")))
                return vsr_err_set(err, VSR_E_FORMAT, "%s must be {\"name\", \"max_tokens\", \"threshold\"}", w);
            if ((st = need_number(e, "max_tokens", w, 0, 1e12, false, true, err)) ||
                (st = need_number(e, "threshold", w, 0, 1, false, true, err)))
                return st;
        }
    }
    json_t *gate = json_object_get(cal, "pii_sparse_gate");
    if (gate) {
        snprintf(w, sizeof w, "%s: pii_sparse_gate", W);
        json_t *K = json_object_get(gate, "K");
        if (!json_is_object(gate) || (K && !json_is_integer(K)))
            return vsr_err_set(err, VSR_E_FORMAT, "%s must be {\"K\": integer, \"t_sparse\", \"probe_threshold\"}", w);
        if ((st = need_number(gate, "t_sparse", w, 0, 1, false, true, err)) ||
            (st = need_number(gate, "probe_threshold", w, 0, 1, false, false, err)))
            return st;
    }
    if ((st = check_span_schema(cal, "pii_schema", err)) || (st = check_span_schema(cal, "halu_schema", err)))
        return st;
    json_t *rel = json_object_get(cal, "relevance_schema");
    if (rel && (!json_is_object(rel) || !json_is_string(json_object_get(rel, "text")) ||
                !json_is_object(json_object_get(rel, "levels")) || !json_object_size(json_object_get(rel, "levels"))))
        return vsr_err_set(err, VSR_E_FORMAT,
                           "%s: relevance_schema must be {\"text\", \"levels\": {name: description}, \"values\"}", W);
    if (rel) {
        json_t *levels = json_object_get(rel, "levels"), *vals = json_object_get(rel, "values");
        if (!json_is_object(vals))
            return vsr_err_set(err, VSR_E_FORMAT, "%s: relevance_schema.values must be an object {level: number}", W);
        json_object_foreach(levels, k, v) {
            if (!json_is_string(v) || !json_is_number(json_object_get(vals, k)))
                return vsr_err_set(err, VSR_E_FORMAT,
                                   "%s: relevance_schema level \"%.100s\" needs a string description and a number in "
                                   "values",
                                   W, k);
        }
    }
    json_t *bh = json_object_get(cal, "broad_head");
    if (bh && !json_is_null(bh)) {
        snprintf(w, sizeof w, "%s: broad_head", W);
        if (!json_is_object(bh)) return vsr_err_set(err, VSR_E_FORMAT, "%s must be an object", w);
        if ((st = need_number(bh, "temperature", w, 0, 1e6, true, true, err)) ||
            (st = need_number(bh, "threshold", w, 0, 1, false, true, err)))
            return st;
        json_t *sets = json_object_get(bh, "router_label_sets");
        if (sets) {
            if (!json_is_array(sets))
                return vsr_err_set(err, VSR_E_FORMAT, "%s.router_label_sets must be a list of label lists", w);
            for (size_t i = 0; i < json_array_size(sets); i++) {
                char w2[256];
                snprintf(w2, sizeof w2, "%s.router_label_sets[%zu]", w, i);
                if ((st = need_string_list(json_array_get(sets, i), w2, true, err))) return st;
            }
        }
    } else if (broad) {
        return vsr_err_set(err, VSR_E_FORMAT,
                           "%s: the package ships %s but calibration.json has no \"broad_head\" block (its "
                           "temperature and threshold)",
                           W, V2_BROAD);
    }
    json_t *noul = json_object_get(cal, "noul_calibration");
    if (noul && !json_is_null(noul)) {
        snprintf(w, sizeof w, "%s: noul_calibration", W);
        json_t *d = json_object_get(noul, "default");
        if (!json_is_object(noul) || (d && !json_is_boolean(d)))
            return vsr_err_set(err, VSR_E_FORMAT, "%s must be {\"T\", \"b\", \"default\": true|false}", w);
        if ((st = need_number(noul, "T", w, 0, 1e6, true, true, err)) ||
            (st = need_number(noul, "b", w, -1e6, 1e6, false, true, err)))
            return st;
    }
    return VSR_OK;
}

/* ------------------------------------------------------------ manifest, sums, index */

static int cmp_file(const void *a, const void *b) {
    return strcmp(((const vsr_manifest_file *)a)->name, ((const vsr_manifest_file *)b)->name);
}

/* MODEL_MANIFEST.json: {"format": "vela2-decoder-release/1", "files_sha256": {name: sha256}}. */
static vsr_status parse_manifest(vsr_package *p, vsr_err *err) {
    char real[PATH_MAX];
    vsr_status st = need_file(p, VSR_MANIFEST_NAME, "the release manifest", real, sizeof real, err);
    if (st) return st;
    FILE *f = fopen(real, "rb");
    if (!f) return vsr_err_set(err, VSR_E_IO, "%s: %s", VSR_MANIFEST_NAME, strerror(errno));
    char *buf = malloc(VSR_JSON_MAX_BYTES + 1);
    size_t n = buf ? fread(buf, 1, VSR_JSON_MAX_BYTES + 1, f) : 0;
    fclose(f);
    if (!buf) return vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory", VSR_MANIFEST_NAME);
    if (n > VSR_JSON_MAX_BYTES) {
        free(buf);
        return vsr_err_set(err, VSR_E_FORMAT, "%s: larger than %u bytes", VSR_MANIFEST_NAME, VSR_JSON_MAX_BYTES);
    }
    vsr_sha256_hex(buf, n, p->manifest.manifest_sha256);
    json_error_t je;
    json_t *j = json_loadb(buf, n, JSON_REJECT_DUPLICATES, &je);
    free(buf);
    if (!j) return vsr_err_set(err, VSR_E_FORMAT, "%s: not valid JSON (line %d: %s)", VSR_MANIFEST_NAME, je.line, je.text);
    const char *fmt = json_string_value(json_object_get(j, "format"));
    json_t *fs = json_object_get(j, "files_sha256");
    if (!json_is_object(j) || !fmt || strcmp(fmt, V2_MANIFEST_FORMAT)) {
        st = vsr_err_set(err, VSR_E_FORMAT, "%s: \"format\" must be \"%s\" (found %s%s%s)", VSR_MANIFEST_NAME,
                         V2_MANIFEST_FORMAT, fmt ? "\"" : "", fmt ? fmt : "none", fmt ? "\"" : "");
    } else if (!json_is_object(fs) || !json_object_size(fs)) {
        st = vsr_err_set(err, VSR_E_FORMAT, "%s: \"files_sha256\" must be a non-empty object {file: sha256}",
                         VSR_MANIFEST_NAME);
    }
    if (!st) {
        p->manifest.files = calloc(json_object_size(fs), sizeof *p->manifest.files);
        if (!p->manifest.files) st = vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory", VSR_MANIFEST_NAME);
        const char *k;
        json_t *v;
        json_object_foreach(fs, k, v) {
            if (st) break;
            if (!json_is_string(v) || !is_hex64(json_string_value(v)))
                st = vsr_err_set(err, VSR_E_FORMAT, "%s: files_sha256[\"%.200s\"] must be 64 lowercase hex digits",
                                 VSR_MANIFEST_NAME, k);
            else if (!strcmp(k, VSR_MANIFEST_NAME))
                st = vsr_err_set(err, VSR_E_FORMAT, "%s: files_sha256 must not list the manifest itself",
                                 VSR_MANIFEST_NAME);
            else if (!vsr_package_name_safe(k))
                st = vsr_err_set(err, VSR_E_INVALID,
                                 "%s: files_sha256 names \"%.200s\", which is not a relative path inside the package "
                                 "(absolute, empty, \".\" or \"..\" components are refused)",
                                 VSR_MANIFEST_NAME, k);
            else {
                vsr_manifest_file *mf = &p->manifest.files[p->manifest.n_files++];
                mf->name = strdup(k);
                memcpy(mf->sha256, json_string_value(v), 65);
                mf->bytes = -1;
                if (!mf->name) st = vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory", VSR_MANIFEST_NAME);
            }
        }
    }
    json_decref(j);
    if (st) return st;
    qsort(p->manifest.files, (size_t)p->manifest.n_files, sizeof *p->manifest.files, cmp_file);
    snprintf(p->manifest.schema, sizeof p->manifest.schema, "%s", V2_MANIFEST_FORMAT);
    snprintf(p->manifest.model_name, sizeof p->manifest.model_name, "%s", p->vela2->model_name);
    p->manifest.params_text = p->manifest.params_vision = p->manifest.params_readout = p->manifest.params_loaded = -1;
    p->has_manifest = true;
    /* Every listed file must be there (it is verified when the load reads it). */
    for (int i = 0; i < p->manifest.n_files; i++) {
        char r2[PATH_MAX];
        if ((st = vsr_package_resolve_inside(p->path, p->manifest.files[i].name, "files_sha256", r2, sizeof r2, err)))
            return st;
        struct stat sb;
        if (stat(r2, &sb) != 0 || !S_ISREG(sb.st_mode))
            return vsr_err_set(err, VSR_E_INTEGRITY, "%s: listed in files_sha256 but not a regular file",
                               p->manifest.files[i].name);
    }
    return VSR_OK;
}

/* The weight shards: the sorted, distinct values of the index's weight_map. */
static vsr_status shard_list(vsr_package *p, char ***out, size_t *n, vsr_err *err) {
    json_t *j;
    *out = NULL;
    *n = 0;
    if (!lexists(p->path, V2_INDEX))
        return vsr_err_set(err, VSR_E_NOT_FOUND,
                           "%s: file is missing from %s (a vela2-decoder package lists its weight shards there)",
                           V2_INDEX, p->path);
    vsr_status st = load_json(p, V2_INDEX, "the weight index", &j, err);
    if (st) return st;
    json_t *wm = json_object_get(j, "weight_map");
    if (!json_is_object(wm) || !json_object_size(wm)) {
        json_decref(j);
        return vsr_err_set(err, VSR_E_FORMAT, "%s lists no valid shards (\"weight_map\" must be a non-empty object)",
                           V2_INDEX);
    }
    char **v = calloc(json_object_size(wm), sizeof *v);
    size_t k = 0;
    const char *key;
    json_t *val;
    if (!v) st = vsr_err_set(err, VSR_E_NOMEM, "out of memory");
    json_object_foreach(wm, key, val) {
        if (st) break;
        const char *f = json_string_value(val);
        if (!f || !vsr_package_name_safe(f)) {
            st = vsr_err_set(err, VSR_E_FORMAT,
                             "%s lists no valid shards (weight_map[\"%.200s\"] must name a file inside the package)",
                             V2_INDEX, key);
            break;
        }
        bool dup = false;
        for (size_t i = 0; i < k; i++) dup |= !strcmp(v[i], f);
        if (!dup && !(v[k++] = strdup(f))) st = vsr_err_set(err, VSR_E_NOMEM, "out of memory");
    }
    json_decref(j);
    if (!st) {
        for (size_t a = 0; a < k; a++)
            for (size_t b = a + 1; b < k; b++)
                if (strcmp(v[a], v[b]) > 0) {
                    char *t = v[a];
                    v[a] = v[b], v[b] = t;
                }
        *out = v;
        *n = k;
        return VSR_OK;
    }
    for (size_t i = 0; i < k; i++) free(v[i]);
    free(v);
    return st;
}

/* SHA256SUMS lines "digest  name" (name may start with '*'), as the reference reads them. */
typedef struct v2_sum {
    char name[512];
    char sha[65];
} v2_sum;

static vsr_status read_sums(const vsr_package *p, v2_sum **out, size_t *n, vsr_err *err) {
    *out = NULL;
    *n = 0;
    if (!lexists(p->path, V2_SUMS)) return VSR_OK;
    char real[PATH_MAX];
    vsr_status st = need_file(p, V2_SUMS, "the package's digest list", real, sizeof real, err);
    if (st) return st;
    FILE *f = fopen(real, "r");
    if (!f) return vsr_err_set(err, VSR_E_IO, "%s: %s", V2_SUMS, strerror(errno));
    char line[1024];
    size_t cap = 0, lineno = 0;
    while (!st && fgets(line, sizeof line, f)) {
        lineno++;
        char *s = line;
        while (isspace((unsigned char)*s)) s++;
        size_t len = strlen(s);
        while (len && isspace((unsigned char)s[len - 1])) s[--len] = 0;
        if (!len) continue;
        char *sp = strchr(s, ' ');
        char *name = sp ? sp + 1 : NULL;
        if (sp) *sp = 0;
        while (name && (*name == ' ' || *name == '*')) name++;
        if (!name || !*name || !is_hex64(s) || strlen(name) >= sizeof(*out)->name) {
            st = vsr_err_set(err, VSR_E_FORMAT, "%s: line %zu is not \"<64 lowercase hex digits>  <file name>\"",
                             V2_SUMS, lineno);
            break;
        }
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            v2_sum *nv = realloc(*out, cap * sizeof *nv);
            if (!nv) {
                st = vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory", V2_SUMS);
                break;
            }
            *out = nv;
        }
        snprintf((*out)[*n].name, sizeof(*out)->name, "%s", name);
        memcpy((*out)[*n].sha, s, 65);
        (*n)++;
    }
    fclose(f);
    if (st) {
        free(*out);
        *out = NULL;
        *n = 0;
    }
    return st;
}

/* ------------------------------------------------------------ open */

/* Tensors outside the backbone that the main weights carry: the candidate head, set_bias and
 * the router span head. */
bool vsr_vela2_head_tensor(const char *name) {
    return starts(name, "head.") || !strcmp(name, "set_bias") || starts(name, "span2.");
}

static vsr_status count_params(vsr_package *p, vsr_err *err) {
    int64_t text = 0, heads = 0;
    uint64_t text_bytes = 0, head_bytes = 0;
    for (size_t i = 0; i < vsr_weights_count(p->weights); i++) {
        const vsr_tensor *t = vsr_weights_at(p->weights, i);
        if (starts(t->name, V2_BACKBONE)) {
            text += t->numel;
            text_bytes += t->nbytes;
        } else if (vsr_vela2_head_tensor(t->name)) {
            heads += t->numel;
            head_bytes += t->nbytes;
        } else {
            return vsr_err_set(err, VSR_E_FORMAT,
                               "%s: unexpected tensor \"%s\": a vela2-decoder package holds backbone.*, head.*, "
                               "set_bias and span2.* (the broad head's span_broad.* live in %s)",
                               t->file, t->name, V2_BROAD);
        }
    }
    if (!text) return vsr_err_set(err, VSR_E_FORMAT, "weights: no tensor starts with \"%s\" (the backbone)", V2_BACKBONE);
    for (size_t i = 0; p->broad_head && i < vsr_st_count(p->broad_head); i++) {
        heads += vsr_st_at(p->broad_head, i)->numel;
        head_bytes += vsr_st_at(p->broad_head, i)->nbytes;
    }
    snprintf(p->text_prefix, sizeof p->text_prefix, "%s", V2_BACKBONE);
    p->params_text = text;
    p->params_heads = heads;
    /* The backbone on the device; the heads are widened to FP32 on the host (src/vela2/model.c). */
    p->device_weight_bytes = text_bytes;
    (void)head_bytes;
    return VSR_OK;
}

vsr_status vsr_vela2_open(vsr_package *p, const void *cfg_json, vsr_err *err) {
    const json_t *cfg = cfg_json;
    v2_kind k = kind_of(p, cfg);
    if (k != V2_IS_DECODER) return refuse_kind(p, k, cfg, err);
    p->family = VSR_FAMILY_VELA2;
    if (!(p->vela2 = calloc(1, sizeof *p->vela2))) return vsr_err_set(err, VSR_E_NOMEM, "out of memory");
    vsr_status st = parse_config(p, cfg, err);
    if (st) return st;
    p->vela2->has_broad_head = lexists(p->path, V2_BROAD);
    json_t *cal = NULL;
    if ((st = load_json(p, "calibration.json", "a vela2 package's temperatures and thresholds", &cal, err))) return st;
    p->vela2->calibration = cal;
    if ((st = check_calibration(cal, p->vela2->has_broad_head, err))) return st;
    char real[PATH_MAX];
    if ((st = need_file(p, "tokenizer.json", "the package's tokenizer", real, sizeof real, err))) return st;
    if (lexists(p->path, VSR_MANIFEST_NAME) && (st = parse_manifest(p, err))) return st;

    /* The weights the load reads, decided before any of them is opened. */
    char **shards = NULL;
    size_t ns = 0;
    if ((st = shard_list(p, &shards, &ns, err))) return st;
    for (size_t i = 0; !st && i < ns; i++) {
        st = vsr_package_resolve_inside(p->path, shards[i], "the weights", real, sizeof real, err);
        struct stat sb;
        if (!st && stat(real, &sb) == 0) p->weight_file_bytes += (uint64_t)sb.st_size;
        /* The manifest holds the weights' digests: each shard must be listed. */
        if (!st && p->has_manifest && !vsr_manifest_find(&p->manifest, shards[i]))
            st = vsr_err_set(err, VSR_E_INTEGRITY,
                             "%s does not list the weight shard %s (files_sha256 must hold every weight file's digest)",
                             VSR_MANIFEST_NAME, shards[i]);
    }
    for (size_t i = 0; i < ns; i++) free(shards[i]);
    free(shards);
    if (st) return st;
    if ((st = vsr_weights_open(p->path, VSR_WEIGHTS_HEADERS, &p->weights, err))) return st;
    if (p->vela2->has_broad_head) {
        if ((st = need_file(p, V2_BROAD, "the broad span head", real, sizeof real, err)) ||
            (st = vsr_st_open_header(real, V2_BROAD, &p->broad_head, err)))
            return st;
        if (p->has_manifest && !vsr_manifest_find(&p->manifest, V2_BROAD))
            return vsr_err_set(err, VSR_E_INTEGRITY,
                               "%s does not list %s (files_sha256 must hold every weight file's digest)",
                               VSR_MANIFEST_NAME, V2_BROAD);
        const vsr_tensor *K = vsr_st_find(p->broad_head, "span_broad.K.weight");
        const vsr_tensor *S = vsr_st_find(p->broad_head, "span_broad.slot.weight");
        if (!K || K->ndim != 2 || !S || S->ndim != 2)
            return vsr_err_set(err, VSR_E_FORMAT,
                               "%s: the broad head needs span_broad.K.weight [d, hidden] and span_broad.slot.weight "
                               "[slots, hidden] (its d and slots are read from them)",
                               V2_BROAD);
        p->vela2->broad_d = (int)K->shape[0];
        p->vela2->broad_slots = (int)S->shape[0];
    }
    return count_params(p, err);
}

void vsr_vela2_free(vsr_package *p) {
    if (!p) return;
    vsr_st_close(p->broad_head);
    p->broad_head = NULL;
    if (p->vela2) json_decref(p->vela2->calibration);
    free(p->vela2);
    p->vela2 = NULL;
}

vsr_status vsr_vela2_map(vsr_package *p, vsr_err *err) {
    if (!p->broad_head) return VSR_OK;
    char real[PATH_MAX];
    vsr_st_file *r = NULL;
    vsr_status st = need_file(p, V2_BROAD, "the broad span head", real, sizeof real, err);
    if (st || (st = vsr_st_open(real, V2_BROAD, &r, err))) return st;
    if (vsr_st_count(r) != vsr_st_count(p->broad_head)) {
        vsr_st_close(r);
        return vsr_err_set(err, VSR_E_INTEGRITY, "%s: the file changed between open and map", V2_BROAD);
    }
    vsr_st_close(p->broad_head);
    p->broad_head = r;
    return VSR_OK;
}

/* ------------------------------------------------------------ tensors */

typedef struct head_tensor {
    const char *name; /* after the head's prefix */
    int ndim;
    char d0, d1;      /* 'H' hidden, 'P' projection (head_dim or d), 'S' slots, '1' one */
} head_tensor;

/* heads/candidate.py's CandidateHead(hidden, head_dim). */
static const head_tensor candidate_tensors[] = {
    {"candidate_norm.weight", 1, 'H', 0}, {"candidate_norm.bias", 1, 'H', 0}, {"query_norm.weight", 1, 'H', 0},
    {"query_norm.bias", 1, 'H', 0},       {"key.weight", 2, 'P', 'H'},        {"query.weight", 2, 'P', 'H'},
    {"candidate_mlp.weight", 2, 'P', 'H'}, {"candidate_mlp.bias", 1, 'P', 0}, {"query_mlp.weight", 2, 'P', 'H'},
    {"scalar.weight", 2, '1', 'P'},
};
/* heads/span.py's SpanHead(hidden, d, slots); o is shipped but never read. */
static const head_tensor span_tensors[] = {
    {"wn.weight", 1, 'H', 0}, {"wn.bias", 1, 'H', 0},  {"ln.weight", 1, 'H', 0}, {"ln.bias", 1, 'H', 0},
    {"slot.weight", 2, 'S', 'H'}, {"K.weight", 2, 'P', 'H'}, {"Q.weight", 2, 'P', 'H'}, {"M.weight", 2, 'P', 'H'},
    {"M.bias", 1, 'P', 0},    {"N.weight", 2, 'P', 'H'}, {"v.weight", 2, '1', 'P'}, {"o.weight", 2, '1', 'H'},
    {"o.bias", 1, '1', 0},
};

static int64_t dim_of(char c, int64_t H, int64_t P, int64_t S) {
    return c == 'H' ? H : c == 'P' ? P : c == 'S' ? S : 1;
}

typedef const vsr_tensor *(*find_fn)(const void *src, const char *name);
static const vsr_tensor *find_w(const void *src, const char *name) { return vsr_weights_find(src, name); }
static const vsr_tensor *find_st(const void *src, const char *name) { return vsr_st_find(src, name); }

static vsr_status check_head(const void *src, find_fn find, const char *prefix, const head_tensor *ts, size_t n,
                             int64_t H, int64_t P, int64_t S, const char *what, vsr_err *err) {
    for (size_t i = 0; i < n; i++) {
        char name[128];
        snprintf(name, sizeof name, "%s%s", prefix, ts[i].name);
        const vsr_tensor *t = find(src, name);
        int64_t want[2] = {dim_of(ts[i].d0, H, P, S), dim_of(ts[i].d1, H, P, S)};
        char ws[64];
        vsr_py_repr_shape(ts[i].ndim, want, ws, sizeof ws);
        if (!t)
            return vsr_err_set(err, VSR_E_FORMAT, "weights: tensor \"%s\" is missing (expected %s for %s)", name, ws,
                               what);
        if (t->dtype != VSR_DT_F32 && t->dtype != VSR_DT_BF16 && t->dtype != VSR_DT_F16)
            return vsr_err_set(err, VSR_E_FORMAT, "%s: tensor \"%s\" has dtype %s, expected F32, BF16 or F16 for %s",
                               t->file, name, vsr_dtype_info(t->dtype)->name, what);
        bool ok = t->ndim == ts[i].ndim;
        for (int d = 0; ok && d < t->ndim; d++) ok = t->shape[d] == want[d];
        if (!ok) {
            char gs[96];
            vsr_py_repr_shape(t->ndim, t->shape, gs, sizeof gs);
            return vsr_err_set(err, VSR_E_FORMAT, "%s: tensor \"%s\" has shape %s, expected %s for %s", t->file, name,
                               gs, ws, what);
        }
    }
    return VSR_OK;
}

static bool known_head_name(const char *name, const char *prefix, const head_tensor *ts, size_t n) {
    if (!starts(name, prefix)) return false;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(name + strlen(prefix), ts[i].name)) return true;
    return false;
}

#define NUM(a) (sizeof(a) / sizeof((a)[0]))

vsr_status vsr_vela2_check(const vsr_package *p, vsr_err *err) {
    const vsr_vela2_config *v = p->vela2;
    const int64_t H = p->config.text.hidden_size;
    vsr_status st;
    if (!v) return vsr_err_set(err, VSR_E_INVALID, "%s: not an opened vela2 package", p->path);
    /* The backbone against its config; tensors outside backbone. are the heads (checked below). */
    if ((st = vsr_package_check_tensors(p, err))) return st;
    if ((st = check_head(p->weights, find_w, "head.", candidate_tensors, NUM(candidate_tensors), H, v->head_dim, 0,
                         "the candidate head (head_dim in config.json)", err)) ||
        (st = check_head(p->weights, find_w, "span2.", span_tensors, NUM(span_tensors), H, v->span_d, v->span_slots,
                         "the router span head (span_head in config.json)", err)))
        return st;
    const vsr_tensor *sb = vsr_weights_find(p->weights, "set_bias");
    if (!sb || sb->numel != 1 || sb->ndim > 1 || (sb->dtype != VSR_DT_F32 && sb->dtype != VSR_DT_BF16))
        return vsr_err_set(err, VSR_E_FORMAT,
                           "weights: tensor \"set_bias\" must be one F32 or BF16 value (shape [] or [1]; %s)",
                           sb ? "found another shape or dtype" : "it is missing");
    for (size_t i = 0; i < vsr_weights_count(p->weights); i++) {
        const vsr_tensor *t = vsr_weights_at(p->weights, i);
        if ((starts(t->name, "head.") && !known_head_name(t->name, "head.", candidate_tensors, NUM(candidate_tensors))) ||
            (starts(t->name, "span2.") && !known_head_name(t->name, "span2.", span_tensors, NUM(span_tensors))))
            return vsr_err_set(err, VSR_E_FORMAT, "%s: unexpected tensor \"%s\": not part of the %s head", t->file,
                               t->name, starts(t->name, "head.") ? "candidate" : "router span");
    }
    if (p->broad_head) {
        if ((st = check_head(p->broad_head, find_st, "span_broad.", span_tensors, NUM(span_tensors), H, v->broad_d,
                             v->broad_slots, "the broad span head", err)))
            return st;
        for (size_t i = 0; i < vsr_st_count(p->broad_head); i++) {
            const vsr_tensor *t = vsr_st_at(p->broad_head, i);
            if (!known_head_name(t->name, "span_broad.", span_tensors, NUM(span_tensors)))
                return vsr_err_set(err, VSR_E_FORMAT, "%s: unexpected tensor \"%s\": not part of the broad span head",
                                   V2_BROAD, t->name);
        }
    }
    return VSR_OK;
}

/* ------------------------------------------------------------ verify */

static int cmp_cstr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* "<what>: ['a', 'b']" with the names sorted, the first five. */
static vsr_status refuse_list(const char **names, size_t n, const char *what, vsr_err *err) {
    char list[600];
    qsort(names, n, sizeof *names, cmp_cstr);
    vsr_py_repr_list(names, n < 5 ? n : 5, list, sizeof list);
    return vsr_err_set(err, VSR_E_INTEGRITY, "%s: %s", what, list);
}

vsr_status vsr_vela2_verify(vsr_package *p, int threads, vsr_progress *progress, vsr_err *err) {
    vsr_status st = VSR_OK;
    p->verified = false;
    /* What a load reads (loaded_files): the common files, the shards, the index, the broad head
     * and the manifest when present. */
    size_t nw = vsr_weights_file_count(p->weights), cap = NUM(common_files) + nw + 2, n = 0;
    const char **names = calloc(cap, sizeof *names), **bad = calloc(cap, sizeof *bad);
    char **paths = calloc(cap, sizeof *paths), (*sums)[65] = calloc(cap, sizeof *sums);
    uint64_t *bytes = calloc(cap, sizeof *bytes);
    v2_sum *listed = NULL;
    size_t nlisted = 0, nbad = 0;
    if (!names || !bad || !paths || !sums || !bytes) {
        st = vsr_err_set(err, VSR_E_NOMEM, "verify: out of memory");
        goto done;
    }
    for (size_t i = 0; i < NUM(common_files); i++) names[n++] = common_files[i];
    for (size_t i = 0; i < nw; i++) names[n++] = vsr_weights_file_name(p->weights, i); /* index, then shards */
    if (p->broad_head) names[n++] = V2_BROAD;
    if (p->has_manifest) names[n++] = VSR_MANIFEST_NAME;
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        char real[PATH_MAX];
        if ((st = need_file(p, names[i], "a file the load reads", real, sizeof real, err))) goto done;
        if (!(paths[i] = strdup(real))) {
            st = vsr_err_set(err, VSR_E_NOMEM, "verify: out of memory");
            goto done;
        }
        struct stat sb;
        if (stat(real, &sb) == 0) total += (uint64_t)sb.st_size;
    }
    vsr_progress *own = NULL;
    if (!progress) progress = own = vsr_progress_new("verify: sha256", total, "B");
    st = vsr_sha256_files(n, (const char *const *)paths, sums, bytes, threads, progress, err);
    vsr_progress_done(own);
    if (st) goto done;

    /* SHA256SUMS, when present, for every loaded file it names. */
    if ((st = read_sums(p, &listed, &nlisted, err))) goto done;
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < nlisted; k++)
            if (!strcmp(listed[k].name, names[i]) && strcmp(listed[k].sha, sums[i])) {
                bad[nbad++] = names[i];
                break;
            }
    if (nbad) {
        st = refuse_list(bad, nbad, "files differ from SHA256SUMS", err);
        goto done;
    }
    /* The manifest's digests: the weights first (the reference's check), then any other loaded file
     * it lists. */
    for (int pass = 0; p->has_manifest && pass < 2 && !nbad; pass++)
        for (size_t i = 0; i < n; i++) {
            bool weight = (i >= NUM(common_files) + 1 && i < NUM(common_files) + nw) || !strcmp(names[i], V2_BROAD);
            if (weight != (pass == 0) || !strcmp(names[i], VSR_MANIFEST_NAME)) continue;
            const vsr_manifest_file *mf = vsr_manifest_find(&p->manifest, names[i]);
            if (mf && strcmp(mf->sha256, sums[i])) bad[nbad++] = names[i];
        }
    if (nbad) {
        bool weights = false;
        for (size_t i = 0; i < nbad; i++)
            weights |= strstr(bad[i], ".safetensors") && strcmp(bad[i], V2_INDEX);
        st = refuse_list(bad, nbad, weights ? "weights differ from MODEL_MANIFEST.json" : "files differ from MODEL_MANIFEST.json", err);
        goto done;
    }
    /* model_sha256 = sha256_json({shard: sha256, broad_head.safetensors: sha256}). */
    {
        const char *idn[256 + 1], *ids[256 + 1];
        int k = 0;
        for (size_t i = 0; i < n && k < 256; i++) {
            bool shard = i >= NUM(common_files) + 1 && i < NUM(common_files) + nw;
            if (shard || !strcmp(names[i], V2_BROAD)) {
                idn[k] = names[i];
                ids[k++] = sums[i];
            }
        }
        if ((st = vsr_identity_files_sha256(k, idn, ids, p->model_sha256, err))) goto done;
    }
    /* A built-in by name (vllm-sr-c/vela2-*) must be exactly the recorded package, as for Decision
     * 3.0 built-ins (package.c step 8): a weight changed with the manifest and SHA256SUMS rewritten
     * to match still has another identity, and a changed calibration another manifest. */
    if (p->builtin && p->builtin->model_sha256 && strcmp(p->builtin->model_sha256, p->model_sha256)) {
        st = vsr_err_set(err, VSR_E_INTEGRITY, "%s@%s: model_sha256 is %s but the catalogue pins %s for this built-in package",
                         p->repo, p->revision, p->model_sha256, p->builtin->model_sha256);
        goto done;
    }
    if (p->builtin && p->builtin->manifest_sha256 &&
        (!p->has_manifest || strcmp(p->builtin->manifest_sha256, p->manifest.manifest_sha256))) {
        st = vsr_err_set(err, VSR_E_INTEGRITY,
                         "%s@%s: manifest_sha256 is %s but the catalogue pins %s for this built-in package", p->repo,
                         p->revision, p->has_manifest ? p->manifest.manifest_sha256 : "(no manifest)",
                         p->builtin->manifest_sha256);
        goto done;
    }
    if ((st = vsr_vela2_check(p, err))) goto done;
    p->verified = true;
done:
    for (size_t i = 0; paths && i < n; i++) free(paths[i]);
    free(paths);
    free(names);
    free(bad);
    free(sums);
    free(bytes);
    free(listed);
    return st;
}
