/* MODEL_MANIFEST.json, schema d3-package-manifest/1 (reference-runtime.md 4.1 step 1).
 * A refusal names what it breaks in the reference's words: a malformed manifest, the
 * model identity, or the parameter counts.
 * The file list is the union of files_sha256 and identity.files_sha256 (a name in both
 * must carry the same hash), sorted by name; files_bytes is optional and may only name
 * listed files. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "package/package_internal.h"
#include "vsr/hash.h"

static bool is_hex64(const char *s) {
    if (strlen(s) != 64) return false;
    for (int i = 0; i < 64; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
    return true;
}

bool vsr_package_name_safe(const char *name) {
    if (!name[0] || name[0] == '/' || strchr(name, '\\')) return false;
    for (const char *s = name;;) {
        const char *e = strchr(s, '/');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (len == 0) return false;
        if ((len == 1 && s[0] == '.') || (len == 2 && s[0] == '.' && s[1] == '.')) return false;
        if (!e) return true;
        s = e + 1;
    }
}

static bool path_inside(const char *p, const char *root) {
    size_t n = strlen(root);
    if (strncmp(p, root, n) != 0) return false;
    return p[n] == '\0' || p[n] == '/';
}

vsr_status vsr_package_resolve_inside(const char *dir, const char *name, const char *what,
                                      char *out, size_t out_n, vsr_err *err) {
    char dreal[PATH_MAX], joined[PATH_MAX * 2], real[PATH_MAX], blobs[PATH_MAX * 2], breal[PATH_MAX];
    if (!vsr_package_name_safe(name))
        return vsr_err_set(err, VSR_E_INVALID,
                           "%s: %s \"%s\" is not a relative path inside the package (absolute, empty, "
                           "\".\" or \"..\" components are refused)",
                           VSR_MANIFEST_NAME, what, name);
    if (!realpath(dir, dreal)) return vsr_err_set(err, VSR_E_IO, "%s: %s", dir, strerror(errno));
    snprintf(joined, sizeof joined, "%s/%s", dreal, name);
    if (!realpath(joined, real)) {
        if (errno == ENOENT || errno == ENOTDIR)
            return vsr_err_set(err, VSR_E_NOT_FOUND, "%s: listed in %s but missing from the package", name, what);
        return vsr_err_set(err, VSR_E_IO, "%s: %s", name, strerror(errno));
    }
    bool ok = path_inside(real, dreal);
    if (!ok) {
        /* A hub snapshot's files are links to <repo>/blobs/<hash>. */
        char *slash = strrchr(dreal, '/');
        if (slash && slash > dreal) {
            size_t plen = (size_t)(slash - dreal);
            const char *tail = "/snapshots";
            size_t tl = strlen(tail);
            if (plen >= tl && !strncmp(dreal + plen - tl, tail, tl)) {
                snprintf(blobs, sizeof blobs, "%.*s/blobs", (int)(plen - tl), dreal);
                if (realpath(blobs, breal)) ok = path_inside(real, breal);
            }
        }
    }
    if (!ok)
        return vsr_err_set(err, VSR_E_INVALID, "%s: %s \"%s\" resolves to %s, outside the package folder %s",
                           VSR_MANIFEST_NAME, what, name, real, dreal);
    if (out) snprintf(out, out_n, "%s", real);
    return VSR_OK;
}

void vsr_manifest_free(vsr_manifest *m) {
    if (!m) return;
    for (int i = 0; i < m->n_files; i++) free(m->files[i].name);
    free(m->files);
    m->files = NULL;
    m->n_files = 0;
}

static int cmp_file(const void *a, const void *b) {
    return strcmp(((const vsr_manifest_file *)a)->name, ((const vsr_manifest_file *)b)->name);
}

const vsr_manifest_file *vsr_manifest_find(const vsr_manifest *m, const char *name) {
    if (!m->files) return NULL;
    vsr_manifest_file key = {.name = (char *)name};
    return bsearch(&key, m->files, (size_t)m->n_files, sizeof key, cmp_file);
}

static vsr_status add_files(const json_t *obj, const char *where, const char *name, vsr_manifest *m,
                            vsr_err *err) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)obj, k, v) {
        if (!json_is_string(v) || !is_hex64(json_string_value(v)))
            return vsr_err_set(err, VSR_E_FORMAT, "%s: %s[\"%.200s\"] must be 64 lowercase hex digits", name,
                               where, k);
        if (!strcmp(k, VSR_MANIFEST_NAME))
            return vsr_err_set(err, VSR_E_FORMAT, "%s: %s must not list the manifest itself", name, where);
        if (!vsr_package_name_safe(k))
            return vsr_err_set(err, VSR_E_INVALID,
                               "%s: %s names \"%.200s\", which is not a relative path inside the package "
                               "(absolute, empty, \".\" or \"..\" components are refused)",
                               name, where, k);
        bool dup = false;
        for (int i = 0; i < m->n_files; i++) {
            if (strcmp(m->files[i].name, k)) continue;
            if (strcmp(m->files[i].sha256, json_string_value(v)))
                return vsr_err_set(err, VSR_E_FORMAT,
                                   "%s: \"%.200s\" has sha256 %s in files_sha256 but %s in identity.files_sha256",
                                   name, k, m->files[i].sha256, json_string_value(v));
            dup = true;
        }
        if (dup) continue;
        vsr_manifest_file *nf = realloc(m->files, (size_t)(m->n_files + 1) * sizeof *nf);
        if (!nf) return vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory", name);
        m->files = nf;
        vsr_manifest_file *f = &m->files[m->n_files];
        f->name = strdup(k);
        if (!f->name) return vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory", name);
        snprintf(f->sha256, sizeof f->sha256, "%s", json_string_value(v));
        f->bytes = -1;
        m->n_files++;
    }
    return VSR_OK;
}

static const char *const param_keys[] = {"text", "vision", "readout", "loaded"};

/* The reference's word for what a parse error breaks; the default is a malformed manifest. */
#define CAT_MALFORMED "unknown or malformed Decision 3.0 package manifest"
#define CAT_IDENTITY "model identity differs from the scored checkpoint in MODEL_MANIFEST.json"
#define CAT_PARAMS "tensor counts differ from the manifest's parameter counts"

static vsr_status parse_doc(const json_t *j, const char *name, vsr_manifest *m, const char **cat, vsr_err *err) {
    vsr_status st;
    *cat = CAT_MALFORMED;
    if (!json_is_object(j)) return vsr_err_set(err, VSR_E_FORMAT, "%s: must be a JSON object", name);
    json_t *schema = json_object_get(j, "schema");
    if (!schema) return vsr_err_set(err, VSR_E_FORMAT, "%s: required key \"schema\" is missing", name);
    if (!json_is_string(schema) || strcmp(json_string_value(schema), VSR_MANIFEST_SCHEMA))
        return vsr_err_set(err, VSR_E_UNSUPPORTED, "%s: \"schema\" must be \"%s\" (found %s%.64s%s)", name,
                           VSR_MANIFEST_SCHEMA, json_is_string(schema) ? "\"" : "a non-string",
                           json_is_string(schema) ? json_string_value(schema) : "",
                           json_is_string(schema) ? "\"" : "");
    snprintf(m->schema, sizeof m->schema, "%s", VSR_MANIFEST_SCHEMA);

    json_t *mn = json_object_get(j, "model_name");
    if (mn && !json_is_null(mn)) {
        if (!json_is_string(mn)) return vsr_err_set(err, VSR_E_FORMAT, "%s: \"model_name\" must be a string", name);
        snprintf(m->model_name, sizeof m->model_name, "%s", json_string_value(mn));
    }

    json_t *fs = json_object_get(j, "files_sha256");
    if (!fs) return vsr_err_set(err, VSR_E_FORMAT, "%s: required key \"files_sha256\" is missing", name);
    if (!json_is_object(fs) || json_object_size(fs) == 0)
        return vsr_err_set(err, VSR_E_FORMAT, "%s: \"files_sha256\" must be a non-empty object of file -> sha256",
                           name);
    if ((st = add_files(fs, "files_sha256", name, m, err))) return st;

    *cat = CAT_IDENTITY;
    json_t *id = json_object_get(j, "identity");
    if (!id) return vsr_err_set(err, VSR_E_FORMAT, "%s: required key \"identity\" is missing", name);
    if (!json_is_object(id)) return vsr_err_set(err, VSR_E_FORMAT, "%s: \"identity\" must be an object", name);
    json_t *ms = json_object_get(id, "model_sha256");
    if (!ms) return vsr_err_set(err, VSR_E_FORMAT, "%s: required key \"identity.model_sha256\" is missing", name);
    if (!json_is_string(ms) || !is_hex64(json_string_value(ms)))
        return vsr_err_set(err, VSR_E_FORMAT, "%s: \"identity.model_sha256\" must be 64 lowercase hex digits", name);
    snprintf(m->model_sha256, sizeof m->model_sha256, "%s", json_string_value(ms));
    *cat = CAT_MALFORMED; /* identity.files_sha256 must agree with files_sha256 */
    json_t *ifs = json_object_get(id, "files_sha256");
    if (ifs && !json_is_null(ifs)) {
        if (!json_is_object(ifs))
            return vsr_err_set(err, VSR_E_FORMAT, "%s: \"identity.files_sha256\" must be an object", name);
        if ((st = add_files(ifs, "identity.files_sha256", name, m, err))) return st;
    }
    json_t *idd = json_object_get(id, "decision");
    if (idd && !json_is_null(idd) && !json_is_object(idd))
        return vsr_err_set(err, VSR_E_FORMAT, "%s: \"identity.decision\" must be an object", name);
    if (m->n_files > 1) qsort(m->files, (size_t)m->n_files, sizeof m->files[0], cmp_file);
    *cat = CAT_MALFORMED;

    json_t *fb = json_object_get(j, "files_bytes");
    if (fb && !json_is_null(fb)) {
        if (!json_is_object(fb))
            return vsr_err_set(err, VSR_E_FORMAT, "%s: manifest files_bytes must be an object of file -> bytes", name);
        const char *k;
        json_t *v;
        json_object_foreach(fb, k, v) {
            if (!json_is_integer(v) || json_integer_value(v) < 0)
                return vsr_err_set(err, VSR_E_FORMAT, "%s: files_bytes[\"%.200s\"] must be a non-negative integer",
                                   name, k);
            vsr_manifest_file *f = (vsr_manifest_file *)vsr_manifest_find(m, k);
            if (!f)
                return vsr_err_set(err, VSR_E_FORMAT, "%s: files_bytes names \"%.200s\", which files_sha256 does not list",
                                   name, k);
            f->bytes = json_integer_value(v);
        }
    }

    int64_t *pv[4] = {&m->params_text, &m->params_vision, &m->params_readout, &m->params_loaded};
    for (int i = 0; i < 4; i++) *pv[i] = -1;
    *cat = CAT_PARAMS;
    json_t *pp = json_object_get(j, "parameters");
    if (pp && !json_is_null(pp)) {
        if (!json_is_object(pp)) return vsr_err_set(err, VSR_E_FORMAT, "%s: \"parameters\" must be an object", name);
        for (int i = 0; i < 4; i++) {
            json_t *v = json_object_get(pp, param_keys[i]);
            if (!v) continue;
            if (!json_is_integer(v) || json_integer_value(v) < 0)
                return vsr_err_set(err, VSR_E_FORMAT, "%s: \"parameters.%s\" must be a non-negative integer", name,
                                   param_keys[i]);
            *pv[i] = json_integer_value(v);
        }
    }
    return VSR_OK;
}

/* Rewrites "<name>: detail" as "<name>: <category>: detail", so every manifest refusal holds
 * the reference's words. */
static vsr_status categorize(vsr_status st, const char *name, const char *cat, vsr_err *err) {
    if (!err || st == VSR_E_NOMEM) return st;
    char detail[VSR_ERR_MSG_MAX];
    size_t nl = strlen(name);
    const char *d = err->msg;
    if (!strncmp(d, name, nl) && d[nl] == ':' && d[nl + 1] == ' ') d += nl + 2;
    snprintf(detail, sizeof detail, "%s", d);
    return vsr_err_set(err, st, "%s: %s: %s", name, cat, detail);
}

vsr_status vsr_manifest_parse_json(const json_t *j, const char *label, vsr_manifest *out, vsr_err *err) {
    const char *name = label ? label : VSR_MANIFEST_NAME, *cat = CAT_MALFORMED;
    memset(out, 0, sizeof *out);
    vsr_status st = parse_doc(j, name, out, &cat, err);
    if (st) {
        vsr_manifest_free(out);
        categorize(st, name, cat, err);
    }
    return st;
}

vsr_status vsr_manifest_parse(const char *bytes, size_t n, const char *label, vsr_manifest *out,
                              vsr_err *err) {
    const char *name = label ? label : VSR_MANIFEST_NAME;
    memset(out, 0, sizeof *out);
    json_error_t je;
    json_t *j = json_loadb(bytes, n, JSON_REJECT_DUPLICATES, &je);
    if (!j)
        return vsr_err_set(err, VSR_E_FORMAT, "%s: " CAT_MALFORMED ": not valid JSON at line %d column %d: %s", name,
                           je.line, je.column, je.text);
    vsr_status st = vsr_manifest_parse_json(j, name, out, err);
    json_decref(j);
    if (st == VSR_OK) vsr_sha256_hex(bytes, n, out->manifest_sha256);
    return st;
}
