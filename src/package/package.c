/* A package from its name to verified, mapped weights. open reads metadata and
 * safetensors headers only; verify hashes every manifest file and checks identity,
 * tensors, parameters and built-in pins; map maps the weights. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/json_util.h"
#include "package/package_internal.h"
#include "package/pins.h"
#include "vsr/catalog.h"
#include "vsr/hash.h"
#include "vsr/progress.h"

static const char *const family_names[] = {
    [VSR_FAMILY_DECISION3] = "decision3",
    [VSR_FAMILY_SPAN] = "span",
    [VSR_FAMILY_VELA2] = "vela2",
    [VSR_FAMILY_UNKNOWN] = "unknown",
};
_Static_assert(sizeof family_names / sizeof family_names[0] == VSR_FAMILY_COUNT, "every family needs a name");

const char *vsr_family_name(vsr_family f) { return (f >= 0 && f < VSR_FAMILY_COUNT) ? family_names[f] : "unknown"; }

/* Files a Decision 3.0 manifest must list besides the weights (step 5). */
static const char *const d3_required[] = {"config.json",    "decision_config.json",  "readout.safetensors",
                                          "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"};
/* Files that enter the identity when present (step 6), besides the weight shards. */
static const char *const identity_files[] = {"readout.safetensors", "tokenizer.json", "tokenizer_config.json",
                                             "chat_template.jinja"};
/* A span package's token-classification head, when it is not in the weights. */
static const char *const span_head_files[] = {"classifier.safetensors", "token_classifier.safetensors", "score.safetensors"};

#define INDEX_NAME "model.safetensors.index.json"
#define SINGLE_NAME "model.safetensors"

static bool file_exists(const char *dir, const char *name) {
    char p[PATH_MAX * 2];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

static bool lexists(const char *dir, const char *name) {
    char p[PATH_MAX * 2];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return lstat(p, &sb) == 0;
}

void vsr_package_close(vsr_package *p) {
    if (!p) return;
    vsr_weights_close(p->weights);
    vsr_st_close(p->readout);
    vsr_vela2_free(p);
    vsr_quant_config_free(&p->quant);
    vsr_decision_config_free(&p->decision);
    vsr_manifest_free(&p->manifest);
    free(p);
}

/* Splits `model` into a Hub repo + revision or an absolute local path. */
static vsr_status parse_name(vsr_package *p, const char *model, const char *revision, bool *is_local, vsr_err *err) {
    struct stat sb;
    *is_local = false;
    if (!model || !*model) return vsr_err_set(err, VSR_E_INVALID, "no model named (org/name, org/name@rev or an absolute path)");
    if (model[0] == '/' && stat(model, &sb) == 0) {
        if (revision && *revision)
            return vsr_err_set(err, VSR_E_INVALID, "%s: revision applies only to Hub repositories", model);
        if (!S_ISDIR(sb.st_mode)) return vsr_err_set(err, VSR_E_INVALID, "%s: not a package folder", model);
        if (!realpath(model, p->path)) return vsr_err_set(err, VSR_E_IO, "%s: %s", model, strerror(errno));
        *is_local = true;
        return VSR_OK;
    }
    char name[512];
    if (strlen(model) >= sizeof name) return vsr_err_set(err, VSR_E_INVALID, "model name is too long");
    snprintf(name, sizeof name, "%s", model);
    const char *at_rev = NULL;
    char *at = strrchr(name, '@');
    if (at) {
        *at = 0;
        at_rev = at + 1;
        if (!*at_rev) return vsr_err_set(err, VSR_E_INVALID, "%s: empty revision after '@'", model);
    }
    if (name[0] == '/') {
        if (at_rev || (revision && *revision))
            return vsr_err_set(err, VSR_E_INVALID, "%s: revision applies only to Hub repositories", model);
        return vsr_err_set(err, VSR_E_NOT_FOUND, "%s: no such package folder", model);
    }
    if (!vsr_repo_name_valid(name))
        return vsr_err_set(err, VSR_E_INVALID,
                           "\"%s\" must be a Hub repository ID (org/name) or an absolute package path", model);
    if (at_rev && revision && *revision && strcmp(at_rev, revision))
        return vsr_err_set(err, VSR_E_INVALID, "%s: the revision after '@' (%s) conflicts with --revision %s", model,
                           at_rev, revision);
    /* No revision given: a repo the catalogue knows loads its pinned revision (a built-in needs
     * none); any other repo loads what the store's refs/main names. */
    const char *pinned = (at_rev || (revision && *revision)) ? NULL : vsr_catalog_default_revision(name);
    const char *rev = at_rev ? at_rev : (revision && *revision) ? revision : pinned ? pinned : "main";
    if (strlen(name) >= sizeof p->repo || strlen(rev) >= sizeof p->requested_revision)
        return vsr_err_set(err, VSR_E_INVALID, "model name or revision is too long");
    snprintf(p->repo, sizeof p->repo, "%.255s", name);
    snprintf(p->requested_revision, sizeof p->requested_revision, "%.255s", rev);
    return VSR_OK;
}

/* The weight files in manifest order (step 4), read from the index without touching any
 * shard: the index then its sorted, distinct weight_map values; else model.safetensors. */
static vsr_status weight_file_list(const char *dir, char ***names, size_t *n, vsr_err *err) {
    *names = NULL;
    *n = 0;
    char path[PATH_MAX * 2];
    if (!lexists(dir, INDEX_NAME)) {
        if (!lexists(dir, SINGLE_NAME))
            return vsr_err_set(err, VSR_E_NOT_FOUND, "the package has no model*.safetensors weights (neither %s nor %s)",
                               SINGLE_NAME, INDEX_NAME);
        *names = calloc(1, sizeof **names);
        if (!*names || !((*names)[0] = strdup(SINGLE_NAME))) return vsr_err_set(err, VSR_E_NOMEM, "out of memory");
        *n = 1;
        return VSR_OK;
    }
    char real[PATH_MAX];
    vsr_status st = vsr_package_resolve_inside(dir, INDEX_NAME, "the package", real, sizeof real, err);
    if (st) return st;
    snprintf(path, sizeof path, "%s", real);
    json_t *j;
    if ((st = vsr_json_load_file(path, INDEX_NAME, VSR_JSON_MAX_BYTES, &j, err))) return st;
    json_t *wm = json_object_get(j, "weight_map");
    if (!json_is_object(wm) || json_object_size(wm) == 0) {
        json_decref(j);
        return vsr_err_set(err, VSR_E_FORMAT,
                           "%s has no weight_map (\"weight_map\" must be a non-empty object of tensor -> file)",
                           INDEX_NAME);
    }
    char **v = calloc(json_object_size(wm) + 1, sizeof *v);
    if (!v) {
        json_decref(j);
        return vsr_err_set(err, VSR_E_NOMEM, "out of memory");
    }
    size_t k = 0;
    v[k++] = strdup(INDEX_NAME);
    const char *key;
    json_t *val;
    json_object_foreach(wm, key, val) {
        if (!json_is_string(val)) {
            st = vsr_err_set(err, VSR_E_FORMAT, "%s: weight_map[\"%.200s\"] must be a file name", INDEX_NAME, key);
            break;
        }
        const char *f = json_string_value(val);
        if (!vsr_package_name_safe(f)) {
            st = vsr_err_set(err, VSR_E_INVALID,
                             "%s: weight_map[\"%.200s\"] names \"%.200s\", which is not a relative path inside the "
                             "package (absolute, empty, \".\" or \"..\" components are refused)",
                             INDEX_NAME, key, f);
            break;
        }
        bool dup = false;
        for (size_t i = 1; i < k; i++) dup |= !strcmp(v[i], f);
        if (!dup) v[k++] = strdup(f);
    }
    json_decref(j);
    for (size_t i = 0; i < k; i++)
        if (!v[i] && !st) st = vsr_err_set(err, VSR_E_NOMEM, "out of memory");
    if (st) {
        for (size_t i = 0; i < k; i++) free(v[i]);
        free(v);
        return st;
    }
    /* shards sorted after the index */
    for (size_t a = 1; a < k; a++)
        for (size_t b = a + 1; b < k; b++)
            if (strcmp(v[a], v[b]) > 0) {
                char *t = v[a];
                v[a] = v[b];
                v[b] = t;
            }
    *names = v;
    *n = k;
    return VSR_OK;
}

static void free_list(char **v, size_t n) {
    for (size_t i = 0; i < n; i++) free(v[i]);
    free(v);
}

static int cmp_cstr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* "MODEL_MANIFEST.json does not list [...]": the names (sorted, the first five, as a Python
 * list) of the files a load reads that the manifest leaves out. */
static vsr_status refuse_unlisted(const char **unlisted, size_t n, vsr_err *err) {
    char list[600];
    qsort(unlisted, n, sizeof *unlisted, cmp_cstr);
    vsr_py_repr_list(unlisted, n < 5 ? n : 5, list, sizeof list);
    return vsr_err_set(err, VSR_E_INTEGRITY,
                       "%s does not list %s (files_sha256 must list every file a load reads; unlisted files are "
                       "never read)",
                       VSR_MANIFEST_NAME, list);
}

/* Step 5 plus path safety: every file a load reads is listed, every listed file exists
 * inside the package, and files_bytes matches the size on disk. */
static vsr_status check_listed(vsr_package *p, char **wnames, size_t wn, vsr_err *err) {
    const vsr_manifest *m = &p->manifest;
    vsr_status st;
    const char *unlisted[sizeof d3_required / sizeof d3_required[0] + 2 + 64];
    size_t nu = 0, cap = sizeof unlisted / sizeof unlisted[0];
    if (p->family == VSR_FAMILY_DECISION3) {
        for (size_t i = 0; i < sizeof d3_required / sizeof d3_required[0]; i++)
            if (!vsr_manifest_find(m, d3_required[i])) unlisted[nu++] = d3_required[i];
        /* As the reference: the image processor settings when there is a vision config and the file. */
        if (p->config.has_vision && lexists(p->path, "preprocessor_config.json") &&
            !vsr_manifest_find(m, "preprocessor_config.json"))
            unlisted[nu++] = "preprocessor_config.json";
    } else if (!vsr_manifest_find(m, "config.json")) {
        unlisted[nu++] = "config.json";
    }
    for (size_t i = 0; i < wn && nu < cap; i++)
        if (!vsr_manifest_find(m, wnames[i])) unlisted[nu++] = wnames[i];
    if (nu) return refuse_unlisted(unlisted, nu, err);
    for (int i = 0; i < m->n_files; i++) {
        char real[PATH_MAX];
        if ((st = vsr_package_resolve_inside(p->path, m->files[i].name, "files_sha256", real, sizeof real, err)))
            return st;
        struct stat sb;
        if (stat(real, &sb) != 0 || !S_ISREG(sb.st_mode))
            return vsr_err_set(err, VSR_E_INTEGRITY, "%s: listed in files_sha256 but not a regular file",
                               m->files[i].name);
        if (m->files[i].bytes >= 0 && (int64_t)sb.st_size != m->files[i].bytes)
            return vsr_err_set(err, VSR_E_INTEGRITY,
                               "%s: size differs from MODEL_MANIFEST.json (files_bytes says %lld bytes, the file has %lld)",
                               m->files[i].name, (long long)m->files[i].bytes, (long long)sb.st_size);
    }
    return VSR_OK;
}

static vsr_status load_json(const vsr_package *p, const char *name, json_t **out, vsr_err *err) {
    char real[PATH_MAX];
    if (!lexists(p->path, name)) return vsr_err_set(err, VSR_E_NOT_FOUND, "%s: file is missing from %s", name, p->path);
    vsr_status st = vsr_package_resolve_inside(p->path, name, "the package", real, sizeof real, err);
    if (st) return st;
    return vsr_json_load_file(real, name, VSR_JSON_MAX_BYTES, out, err);
}

static vsr_family detect_family(const vsr_package *p, const json_t *cfg) {
    /* decision_config.json makes a Decision 3.0 package; its rules then apply (config.json
     * must describe a qwen3_5 model, the readout must be there). */
    if (lexists(p->path, "decision_config.json")) return VSR_FAMILY_DECISION3;
    json_t *arch = json_object_get(cfg, "architectures");
    for (size_t i = 0; i < json_array_size(arch); i++) {
        const char *a = json_string_value(json_array_get(arch, i));
        size_t n = a ? strlen(a) : 0, m = strlen("ForTokenClassification");
        if (n >= m && !strcmp(a + n - m, "ForTokenClassification")) return VSR_FAMILY_SPAN;
    }
    for (size_t i = 0; i < sizeof span_head_files / sizeof span_head_files[0]; i++)
        if (lexists(p->path, span_head_files[i])) return VSR_FAMILY_SPAN;
    return VSR_FAMILY_UNKNOWN;
}

static vsr_status open_inner(vsr_package *p, const char *model, const char *revision, const char *store_dir,
                             vsr_err *err) {
    bool local;
    vsr_status st;
    if ((st = parse_name(p, model, revision, &local, err))) return st;
    if (!local) {
        char snap[PATH_MAX];
        if ((st = vsr_store_resolve(store_dir, p->repo, p->requested_revision, snap, sizeof snap, p->revision, err))) {
            vsr_vela2_note_unpublished(p->repo, err);
            return st;
        }
        snprintf(p->path, sizeof p->path, "%s", snap);
    }

    json_t *cfg = NULL;
    if ((st = load_json(p, "config.json", &cfg, err))) return st;
    if (vsr_vela2_claims(p, cfg)) { /* Vela 2.0 decoder packages: src/package/vela2_package.c */
        st = vsr_vela2_open(p, cfg, err);
        json_decref(cfg);
        if (!st && p->repo[0]) p->builtin = vsr_catalog_find(p->repo, p->revision);
        return st;
    }
    st = vsr_model_config_parse(cfg, "config.json", &p->config, err);
    if (!st) {
        json_t *qc = json_object_get(cfg, "quantization_config");
        st = vsr_quant_config_parse(qc && !json_is_null(qc) ? qc : NULL, &p->quant, err);
        if (st) vsr_err_prefix(err, "config.json: quantization_config");
    }
    if (!st) p->family = detect_family(p, cfg);
    json_decref(cfg);
    if (st) return st;
    if (p->family == VSR_FAMILY_DECISION3 && strcmp(p->config.model_type, "qwen3_5"))
        return vsr_err_set(err, VSR_E_UNSUPPORTED,
                           "config.json must describe a qwen3_5 model (found model_type \"%s\"; a Decision 3.0 package "
                           "is a Qwen3_5Model checkpoint with a qwen3_5_text text_config)",
                           p->config.model_type);

    if (p->quant.scheme != VSR_SCHEME_BF16 && p->family != VSR_FAMILY_DECISION3)
        return vsr_err_set(err, VSR_E_UNSUPPORTED,
                           "%s: a %s package cannot carry quantized weights (%s); only Decision 3.0 packages can "
                           "(serve this family's BF16 package)",
                           local ? p->path : p->repo, vsr_family_name(p->family),
                           vsr_scheme_info(p->quant.scheme)->label);

    if (p->family == VSR_FAMILY_DECISION3) {
        json_t *dj = NULL;
        if ((st = load_json(p, "decision_config.json", &dj, err))) return st;
        st = vsr_decision_config_parse(dj, "decision_config.json", &p->decision, err);
        json_decref(dj);
        if (st) return st;
    }

    if (lexists(p->path, VSR_MANIFEST_NAME)) {
        char real[PATH_MAX];
        if ((st = vsr_package_resolve_inside(p->path, VSR_MANIFEST_NAME, "the package", real, sizeof real, err)))
            return st;
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
        st = vsr_manifest_parse(buf, n, VSR_MANIFEST_NAME, &p->manifest, err);
        free(buf);
        if (st) return st;
        p->has_manifest = true;
    } else if (p->family == VSR_FAMILY_DECISION3) {
        return vsr_err_set(err, VSR_E_NOT_FOUND,
                           "%s: file is missing; a Decision 3.0 package carries its manifest (schema %s)",
                           VSR_MANIFEST_NAME, VSR_MANIFEST_SCHEMA);
    }

    /* Which weight files will be read, decided before any of them is opened. */
    char **wnames = NULL;
    size_t wn = 0;
    if ((st = weight_file_list(p->path, &wnames, &wn, err))) return st;
    if (p->has_manifest) st = check_listed(p, wnames, wn, err);
    for (size_t i = 0; !st && i < wn; i++) {
        char real[PATH_MAX];
        st = vsr_package_resolve_inside(p->path, wnames[i], "the weights", real, sizeof real, err);
        struct stat sb;
        if (!st && stat(real, &sb) == 0) p->weight_file_bytes += (uint64_t)sb.st_size;
    }
    free_list(wnames, wn);
    if (st) return st;

    if ((st = vsr_weights_open(p->path, VSR_WEIGHTS_HEADERS, &p->weights, err))) return st;
    /* The reader must have opened exactly the files we listed. */
    for (size_t i = 0; i < vsr_weights_file_count(p->weights); i++) {
        const char *wf = vsr_weights_file_name(p->weights, i);
        if (p->has_manifest && !vsr_manifest_find(&p->manifest, wf)) return refuse_unlisted(&wf, 1, err);
    }
    if (p->family == VSR_FAMILY_DECISION3) {
        char real[PATH_MAX];
        if ((st = vsr_package_resolve_inside(p->path, "readout.safetensors", "the package", real, sizeof real, err)))
            return st;
        if ((st = vsr_st_open_header(real, "readout.safetensors", &p->readout, err))) return st;
    }

    vsr_param_counts c;
    if ((st = vsr_package_count(p, &c, err))) return st;
    p->params_text = c.text;
    p->params_vision = c.vision;
    p->params_readout = c.readout;
    p->device_weight_bytes = c.text_bytes + c.readout_bytes;
    if (p->repo[0]) p->builtin = vsr_catalog_find(p->repo, p->revision);
    return VSR_OK;
}

vsr_status vsr_package_open(const char *model, const char *revision, const char *store_dir, vsr_package **out,
                            vsr_err *err) {
    *out = NULL;
    vsr_package *p = calloc(1, sizeof *p);
    if (!p) return vsr_err_set(err, VSR_E_NOMEM, "out of memory opening a package");
    p->decision.max_length = -1;
    vsr_status st = open_inner(p, model, revision, store_dir, err);
    if (st) {
        vsr_package_close(p);
        return st;
    }
    *out = p;
    return VSR_OK;
}

void vsr_package_gate_request(const vsr_package *p, vsr_gate_request *out) {
    memset(out, 0, sizeof *out);
    out->quantized_family_ok = p->family == VSR_FAMILY_DECISION3;
    /* Both qwen3_5 families keep BF16 weights and activations on every device. */
    out->needs_bf16 = p->family != VSR_FAMILY_UNKNOWN;
    out->scheme = p->quant.scheme;
    out->weight_bytes = p->device_weight_bytes;
    out->reserve_bytes = vsr_gate_reserve_bytes(p->device_weight_bytes);
}

static bool is_identity_file(const vsr_package *p, const char *name) {
    for (size_t i = 0; i < sizeof identity_files / sizeof identity_files[0]; i++)
        if (!strcmp(name, identity_files[i])) return true;
    /* the weight shards, not the index */
    for (size_t i = 0; i < vsr_weights_file_count(p->weights); i++)
        if (!strcmp(name, vsr_weights_file_name(p->weights, i))) {
            size_t n = strlen(name);
            return n > 12 && !strcmp(name + n - 12, ".safetensors");
        }
    return false;
}

uint64_t vsr_package_verify_bytes(const vsr_package *p) {
    if (!p) return 0;
    if (!p->has_manifest) return p->weight_file_bytes;
    uint64_t t = 0;
    for (int i = 0; i < p->manifest.n_files; i++)
        if (p->manifest.files[i].bytes > 0) t += (uint64_t)p->manifest.files[i].bytes;
    return t ? t : p->weight_file_bytes;
}

vsr_status vsr_package_verify(vsr_package *p, int threads, vsr_progress *progress, vsr_err *err) {
    if (p->family == VSR_FAMILY_VELA2) return vsr_vela2_verify(p, threads, progress, err);
    vsr_status st = VSR_OK;
    p->verified = false;
    size_t n = 0;
    char **paths = NULL, (*sums)[65] = NULL;
    uint64_t *bytes = NULL;
    const char **names = NULL;
    const char **idn = NULL, **ids = NULL;

    /* What gets hashed: the manifest's files, or (no manifest) the identity files present. */
    size_t cap = p->has_manifest ? (size_t)p->manifest.n_files
                                 : vsr_weights_file_count(p->weights) + sizeof identity_files / sizeof identity_files[0];
    paths = calloc(cap + 1, sizeof *paths);
    names = calloc(cap + 1, sizeof *names);
    sums = calloc(cap + 1, sizeof *sums);
    bytes = calloc(cap + 1, sizeof *bytes);
    idn = calloc(cap + 1, sizeof *idn);
    ids = calloc(cap + 1, sizeof *ids);
    if (!paths || !names || !sums || !bytes || !idn || !ids) {
        st = vsr_err_set(err, VSR_E_NOMEM, "verify: out of memory");
        goto done;
    }
    if (p->has_manifest) {
        for (int i = 0; i < p->manifest.n_files; i++) names[n++] = p->manifest.files[i].name;
    } else {
        for (size_t i = 0; i < vsr_weights_file_count(p->weights); i++)
            names[n++] = vsr_weights_file_name(p->weights, i);
        for (size_t i = 0; i < sizeof identity_files / sizeof identity_files[0]; i++)
            if (file_exists(p->path, identity_files[i])) names[n++] = identity_files[i];
    }
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        char real[PATH_MAX];
        if ((st = vsr_package_resolve_inside(p->path, names[i], "files_sha256", real, sizeof real, err))) goto done;
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
    for (size_t i = 0; p->has_manifest && i < n; i++) {
        const vsr_manifest_file *f = &p->manifest.files[i];
        if (f->bytes >= 0 && (uint64_t)f->bytes != bytes[i]) {
            st = vsr_err_set(err, VSR_E_INTEGRITY,
                             "%s: size differs from MODEL_MANIFEST.json (files_bytes says %lld bytes, the file has %llu)",
                             f->name, (long long)f->bytes, (unsigned long long)bytes[i]);
            goto done;
        }
    }
    /* Every changed file (names sorted, the first five), the first one in detail. */
    {
        const char *changed[5];
        size_t nc = 0, first = 0;
        for (size_t i = 0; p->has_manifest && i < n; i++)
            if (strcmp(p->manifest.files[i].sha256, sums[i])) {
                if (!nc) first = i;
                if (nc < 5) changed[nc] = p->manifest.files[i].name;
                nc++;
            }
        if (nc) {
            char list[600];
            vsr_py_repr_list(changed, nc < 5 ? nc : 5, list, sizeof list);
            st = vsr_err_set(err, VSR_E_INTEGRITY,
                             "package files differ from MODEL_MANIFEST.json: %s (%s: sha256 mismatch: manifest says %s, "
                             "file has %s%s)",
                             list, p->manifest.files[first].name, p->manifest.files[first].sha256, sums[first],
                             nc > 1 ? "; the others differ too" : "");
            goto done;
        }
    }

    /* identity.model_sha256 (step 6) */
    int k = 0;
    for (size_t i = 0; i < n; i++)
        if (is_identity_file(p, names[i])) {
            idn[k] = names[i];
            ids[k] = sums[i];
            k++;
        }
    if ((st = vsr_identity_model_sha256(k, idn, ids, p->decision.json, p->model_sha256, err))) goto done;
    if (p->has_manifest && strcmp(p->model_sha256, p->manifest.model_sha256)) {
        st = vsr_err_set(err, VSR_E_INTEGRITY,
                         "model identity differs from the scored checkpoint in MODEL_MANIFEST.json (the manifest "
                         "records model_sha256 %s, the package computes %s)",
                         p->manifest.model_sha256, p->model_sha256);
        goto done;
    }

    /* Tensors against config and scheme, the readout, the parameter counts (step 7) and
     * the input limit: the checks that need no file bytes (tensor_check.c). */
    if ((st = vsr_package_check(p, err))) goto done;

    /* A pinned built-in must be exactly the recorded package (step 8). */
    if (p->builtin) {
        const vsr_builtin *b = p->builtin;
        if ((st = vsr_package_check_pins(p, n, names, (const char(*)[65])sums, err))) goto done;
        if (b->model_sha256 && strcmp(b->model_sha256, p->model_sha256)) {
            st = vsr_err_set(err, VSR_E_INTEGRITY,
                             "%s@%s: model_sha256 is %s but the catalogue pins %s for this built-in package", p->repo,
                             p->revision, p->model_sha256, b->model_sha256);
            goto done;
        }
        if (b->manifest_sha256 && (!p->has_manifest || strcmp(b->manifest_sha256, p->manifest.manifest_sha256))) {
            st = vsr_err_set(err, VSR_E_INTEGRITY,
                             "%s@%s: manifest_sha256 is %s but the catalogue pins %s for this built-in package",
                             p->repo, p->revision, p->has_manifest ? p->manifest.manifest_sha256 : "(no manifest)",
                             b->manifest_sha256);
            goto done;
        }
    }
    p->verified = true;
done:
    for (size_t i = 0; paths && i < n; i++) free(paths[i]);
    free(paths);
    free(names);
    free(sums);
    free(bytes);
    free(idn);
    free(ids);
    return st;
}

vsr_status vsr_package_map(vsr_package *p, vsr_err *err) {
    vsr_weights *w = NULL;
    vsr_status st = vsr_weights_open(p->path, VSR_WEIGHTS_MAP, &w, err);
    if (st) return st;
    /* Same files and tensors as the headers we checked. */
    bool same = vsr_weights_count(w) == vsr_weights_count(p->weights) &&
                vsr_weights_file_count(w) == vsr_weights_file_count(p->weights);
    for (size_t i = 0; same && i < vsr_weights_file_count(w); i++)
        same = !strcmp(vsr_weights_file_name(w, i), vsr_weights_file_name(p->weights, i));
    if (!same) {
        vsr_weights_close(w);
        return vsr_err_set(err, VSR_E_INTEGRITY, "%s: the weight files changed between open and map", p->path);
    }
    vsr_weights_close(p->weights);
    p->weights = w;
    if (p->vela2 && (st = vsr_vela2_map(p, err))) return st;
    if (p->readout) {
        char real[PATH_MAX];
        vsr_st_file *r = NULL;
        if ((st = vsr_package_resolve_inside(p->path, "readout.safetensors", "the package", real, sizeof real, err)))
            return st;
        if ((st = vsr_st_open(real, "readout.safetensors", &r, err))) return st;
        vsr_st_close(p->readout);
        p->readout = r;
    }
    return VSR_OK;
}
