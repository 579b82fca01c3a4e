/* A checkpoint's weights across safetensors shards.
 *
 * `dir` holds either model.safetensors.index.json = {"metadata": {"total_size": N, ...},
 * "weight_map": {tensor: file}} plus the shards it names (used when present, as the reference
 * runtime's weight_files does, so this reader opens exactly the files the manifest check
 * lists) or model.safetensors. The index and the shards must agree exactly: every tensor the
 * index names is in the shard it names, every tensor of a shard is named by the index for
 * that shard, and no tensor is in two shards. Shard names must stay inside `dir`; files that
 * are symlinks may resolve into `dir` or, for a hub-cache snapshot (<repo>/snapshots/<commit>),
 * into that repo's blobs/ folder, where the hub keeps the real bytes. Shards the index does not
 * name are never opened. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/json_util.h"
#include "vsr/safetensors.h"

#define SINGLE_NAME "model.safetensors"
#define INDEX_NAME "model.safetensors.index.json"
#define INDEX_MAX_BYTES (64u << 20) /* real indexes are well under 10 MB */

struct vsr_weights {
    size_t n_shards;
    vsr_st_file **shards; /* in sorted shard-name order */
    size_t n_names;
    char **names;         /* index (if any) then sorted shard names */
    size_t n;
    const vsr_tensor **tensors; /* shard order, then data offset */
    const vsr_tensor **by_name; /* sorted by name */
    uint64_t total;
    void *overlay;                  /* vsr_weights_overlay: owner of the added tensors */
    void (*overlay_free)(void *);
};

void vsr_weights_close(vsr_weights *w) {
    if (!w) return;
    if (w->overlay_free) w->overlay_free(w->overlay);
    for (size_t i = 0; i < w->n_shards; i++) vsr_st_close(w->shards[i]);
    free(w->shards);
    for (size_t i = 0; i < w->n_names; i++) free(w->names[i]);
    free(w->names);
    free(w->tensors);
    free(w->by_name);
    free(w);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int cmp_tensor_name(const void *a, const void *b) {
    const vsr_tensor *x = *(const vsr_tensor *const *)a, *y = *(const vsr_tensor *const *)b;
    int c = strcmp(x->name, y->name);
    return c ? c : strcmp(x->file, y->file);
}

/* true if `p` is `root` or inside it (both real paths). */
static bool path_inside(const char *p, const char *root) {
    size_t n = strlen(root);
    if (strncmp(p, root, n) != 0) return false;
    return p[n] == '\0' || p[n] == '/' || (n == 1 && root[0] == '/');
}

/* Lexical rules for a file name from the index: relative, no ".." component, not empty. */
static bool name_lexically_safe(const char *name) {
    if (!*name || name[0] == '/') return false;
    for (const char *s = name; *s;) {
        const char *e = strchr(s, '/');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (len == 2 && s[0] == '.' && s[1] == '.') return false;
        s += len + (e ? 1 : 0);
    }
    return true;
}

/* Resolves dir/name and checks that the result stays inside the package: dir's real path
 * or, for a hub snapshot, the repo's blobs/ folder. */
static vsr_status resolve_inside(const char *dir, const char *dreal, const char *blobs,
                                 const char *name, const char *what, char *out, vsr_err *err) {
    char joined[PATH_MAX];
    if (snprintf(joined, sizeof joined, "%s/%s", dir, name) >= (int)sizeof joined)
        return vsr_err_set(err, VSR_E_INVALID, "%s: %s \"%s\": path too long", dir, what, name);
    if (!realpath(joined, out)) {
        if (errno == ENOENT || errno == ENOTDIR)
            return vsr_err_set(err, VSR_E_NOT_FOUND, "%s: %s \"%s\" is missing", dir, what, name);
        return vsr_err_set(err, VSR_E_IO, "%s: %s \"%s\": %s", dir, what, name, strerror(errno));
    }
    if (path_inside(out, dreal) || (blobs[0] && path_inside(out, blobs))) return VSR_OK;
    return vsr_err_set(err, VSR_E_INVALID,
                       "%s: %s \"%s\" resolves to %s, outside the package folder", dir, what, name,
                       out);
}

/* <repo>/blobs when dreal is <repo>/snapshots/<commit>, else "". */
static void hub_blobs_dir(const char *dreal, char *out) {
    out[0] = '\0';
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", dreal);
    char *slash = strrchr(tmp, '/');
    if (!slash || slash == tmp) return;
    *slash = '\0'; /* tmp = <repo>/snapshots */
    char *s2 = strrchr(tmp, '/');
    if (!s2 || strcmp(s2 + 1, "snapshots") != 0) return;
    *s2 = '\0'; /* tmp = <repo> */
    char blobs[PATH_MAX];
    if (snprintf(blobs, sizeof blobs, "%s/blobs", tmp) >= (int)sizeof blobs) return;
    if (!realpath(blobs, out)) out[0] = '\0';
}

static bool exists_l(const char *dir, const char *name) {
    char p[PATH_MAX];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return lstat(p, &sb) == 0;
}

static vsr_status open_shard(const char *real, const char *name, vsr_weights_mode mode,
                             vsr_st_file **out, vsr_err *err) {
    return mode == VSR_WEIGHTS_MAP ? vsr_st_open(real, name, out, err)
                                   : vsr_st_open_header(real, name, out, err);
}

/* Reads and checks the index; fills a sorted, de-duplicated list of shard names. */
static vsr_status read_index(const char *dir, json_t **root_out, char ***shards_out, size_t *n_out,
                             vsr_err *err) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, INDEX_NAME);
    json_t *root = NULL;
    vsr_status st = vsr_json_load_file(path, INDEX_NAME, INDEX_MAX_BYTES, &root, err);
    if (st) return st;
    char **names = NULL;
    size_t n = 0;
    if (!json_is_object(root)) {
        st = vsr_err_set(err, VSR_E_FORMAT, INDEX_NAME ": must be a JSON object");
        goto fail;
    }
    json_t *meta = json_object_get(root, "metadata");
    if (meta) {
        if (!json_is_object(meta)) {
            st = vsr_err_set(err, VSR_E_FORMAT, INDEX_NAME ": \"metadata\" must be an object");
            goto fail;
        }
        json_t *ts = json_object_get(meta, "total_size");
        if (ts && !(json_is_integer(ts) && json_integer_value(ts) >= 0)) {
            st = vsr_err_set(err, VSR_E_FORMAT,
                             INDEX_NAME ": metadata.total_size must be a non-negative integer");
            goto fail;
        }
    }
    json_t *wm = json_object_get(root, "weight_map");
    if (!json_is_object(wm) || json_object_size(wm) == 0) {
        st = vsr_err_set(err, VSR_E_FORMAT,
                         INDEX_NAME " has no weight_map (\"weight_map\" must be a non-empty object {tensor: file})");
        goto fail;
    }
    names = calloc(json_object_size(wm), sizeof *names);
    if (!names) {
        st = vsr_err_set(err, VSR_E_NOMEM, INDEX_NAME ": out of memory");
        goto fail;
    }
    const char *t;
    json_t *v;
    json_object_foreach(wm, t, v) {
        if (!json_is_string(v)) {
            st = vsr_err_set(err, VSR_E_FORMAT,
                             INDEX_NAME ": weight_map[\"%s\"] must be a file name string", t);
            goto fail;
        }
        const char *file = json_string_value(v);
        if (!name_lexically_safe(file)) {
            st = vsr_err_set(err, VSR_E_INVALID,
                             INDEX_NAME ": weight_map[\"%s\"] = \"%s\": shard names must be relative "
                             "paths inside the package (no leading '/', no '..')",
                             t, file);
            goto fail;
        }
        bool seen = false;
        for (size_t i = 0; i < n && !seen; i++) seen = !strcmp(names[i], file);
        if (!seen) { /* few shards, so a linear scan is fine */
            if (!(names[n] = strdup(file))) {
                st = vsr_err_set(err, VSR_E_NOMEM, INDEX_NAME ": out of memory");
                goto fail;
            }
            n++;
        }
    }
    qsort(names, n, sizeof *names, cmp_str);
    *root_out = root;
    *shards_out = names;
    *n_out = n;
    return VSR_OK;
fail:
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    json_decref(root);
    return st;
}

/* Cross-checks the index against the opened shards. */
static vsr_status check_against_index(vsr_weights *w, json_t *wm, vsr_err *err) {
    /* A tensor in two shards (the sorted list has it twice in a row). */
    for (size_t i = 1; i < w->n; i++)
        if (!strcmp(w->by_name[i - 1]->name, w->by_name[i]->name))
            return vsr_err_set(err, VSR_E_FORMAT, "tensor \"%s\" is in two shards: %s and %s",
                               w->by_name[i]->name, w->by_name[i - 1]->file, w->by_name[i]->file);
    /* Every tensor of a shard is named by the index, for that shard. */
    for (size_t i = 0; i < w->n; i++) {
        const vsr_tensor *t = w->tensors[i];
        json_t *v = json_object_get(wm, t->name);
        if (!v)
            return vsr_err_set(err, VSR_E_FORMAT,
                               "%s: tensor \"%s\" is not named in " INDEX_NAME, t->file, t->name);
        if (strcmp(json_string_value(v), t->file) != 0)
            return vsr_err_set(err, VSR_E_FORMAT,
                               "%s: tensor \"%s\" is here but " INDEX_NAME " names shard %s", t->file,
                               t->name, json_string_value(v));
    }
    /* Every tensor the index names is in its shard. */
    const char *name;
    json_t *v;
    json_object_foreach(wm, name, v) {
        const char *file = json_string_value(v);
        const vsr_tensor *t = NULL;
        for (size_t s = 0; s < w->n_shards && !t; s++)
            if (!strcmp(vsr_st_label(w->shards[s]), file)) t = vsr_st_find(w->shards[s], name);
        if (!t)
            return vsr_err_set(err, VSR_E_FORMAT,
                               INDEX_NAME " names tensor \"%s\" in %s, but that shard does not hold it",
                               name, file);
    }
    return VSR_OK;
}

vsr_status vsr_weights_open(const char *dir, vsr_weights_mode mode, vsr_weights **out, vsr_err *err) {
    *out = NULL;
    char dreal[PATH_MAX], blobs[PATH_MAX], real[PATH_MAX];
    if (!realpath(dir, dreal)) {
        if (errno == ENOENT || errno == ENOTDIR)
            return vsr_err_set(err, VSR_E_NOT_FOUND, "%s: package folder is missing", dir);
        return vsr_err_set(err, VSR_E_IO, "%s: %s", dir, strerror(errno));
    }
    hub_blobs_dir(dreal, blobs);

    vsr_weights *w = calloc(1, sizeof *w);
    if (!w) return vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory", dir);
    json_t *index = NULL;
    char **shard_names = NULL;
    size_t n_shards = 0;
    vsr_status st = VSR_OK;

    if (exists_l(dir, INDEX_NAME)) {
        if ((st = resolve_inside(dir, dreal, blobs, INDEX_NAME, "index", real, err))) goto fail;
        if ((st = read_index(dir, &index, &shard_names, &n_shards, err))) {
            vsr_err_prefix(err, "%s", dir);
            goto fail;
        }
    } else if (exists_l(dir, SINGLE_NAME)) {
        shard_names = calloc(1, sizeof *shard_names);
        if (!shard_names || !(shard_names[0] = strdup(SINGLE_NAME))) {
            st = vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory", dir);
            goto fail;
        }
        n_shards = 1;
    } else {
        st = vsr_err_set(err, VSR_E_NOT_FOUND,
                         "%s: the package has no model*.safetensors weights (neither " SINGLE_NAME " nor " INDEX_NAME
                         " is present)",
                         dir);
        goto fail;
    }

    w->names = calloc(n_shards + 1, sizeof *w->names);
    w->shards = calloc(n_shards, sizeof *w->shards);
    if (!w->names || !w->shards) {
        st = vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory", dir);
        goto fail;
    }
    if (index && !(w->names[w->n_names++] = strdup(INDEX_NAME))) {
        st = vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory", dir);
        goto fail;
    }
    size_t total_tensors = 0;
    for (size_t i = 0; i < n_shards; i++) {
        const char *what = index ? "shard" : "weights file";
        if ((st = resolve_inside(dir, dreal, blobs, shard_names[i], what, real, err))) goto fail;
        if ((st = open_shard(real, shard_names[i], mode, &w->shards[w->n_shards], err))) {
            vsr_err_prefix(err, "%s", dir);
            goto fail;
        }
        total_tensors += vsr_st_count(w->shards[w->n_shards++]);
        w->names[w->n_names++] = shard_names[i];
        shard_names[i] = NULL; /* now owned by w->names */
    }

    w->tensors = calloc(total_tensors ? total_tensors : 1, sizeof *w->tensors);
    w->by_name = calloc(total_tensors ? total_tensors : 1, sizeof *w->by_name);
    if (!w->tensors || !w->by_name) {
        st = vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory", dir);
        goto fail;
    }
    for (size_t s = 0; s < w->n_shards; s++)
        for (size_t i = 0; i < vsr_st_count(w->shards[s]); i++) {
            const vsr_tensor *t = vsr_st_at(w->shards[s], i);
            w->tensors[w->n] = w->by_name[w->n] = t;
            w->n++;
            w->total += t->nbytes;
        }
    qsort(w->by_name, w->n, sizeof *w->by_name, cmp_tensor_name);
    if (index && (st = check_against_index(w, json_object_get(index, "weight_map"), err))) {
        vsr_err_prefix(err, "%s", dir);
        goto fail;
    }
    for (size_t i = 0; i < n_shards; i++) free(shard_names[i]);
    free(shard_names);
    json_decref(index);
    *out = w;
    return VSR_OK;
fail:
    for (size_t i = 0; i < n_shards; i++) free(shard_names ? shard_names[i] : NULL);
    free(shard_names);
    json_decref(index);
    vsr_weights_close(w);
    return st;
}

size_t vsr_weights_count(const vsr_weights *w) { return w ? w->n : 0; }

const vsr_tensor *vsr_weights_at(const vsr_weights *w, size_t i) {
    return (w && i < w->n) ? w->tensors[i] : NULL;
}

const vsr_tensor *vsr_weights_find(const vsr_weights *w, const char *name) {
    if (!w || !name) return NULL;
    size_t lo = 0, hi = w->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(w->by_name[mid]->name, name);
        if (c == 0) return w->by_name[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

size_t vsr_weights_file_count(const vsr_weights *w) { return w ? w->n_names : 0; }

const char *vsr_weights_file_name(const vsr_weights *w, size_t i) {
    return (w && i < w->n_names) ? w->names[i] : NULL;
}

uint64_t vsr_weights_total_bytes(const vsr_weights *w) { return w ? w->total : 0; }

vsr_status vsr_weights_overlay(vsr_weights *w, const vsr_tensor *add, size_t n_add, void *owner,
                               void (*owner_free)(void *), vsr_err *err) {
    if (w->overlay_free)
        return vsr_err_set(err, VSR_E_INVALID, "weights: an overlay is already applied");
    size_t cap = w->n + n_add;
    const vsr_tensor **t = realloc(w->tensors, (cap ? cap : 1) * sizeof *t);
    if (t) w->tensors = t;
    const vsr_tensor **b = t ? realloc(w->by_name, (cap ? cap : 1) * sizeof *b) : NULL;
    if (b) w->by_name = b;
    if (!t || !b) return vsr_err_set(err, VSR_E_NOMEM, "weights: out of memory for the overlay");
    for (size_t i = 0; i < n_add; i++) {
        const vsr_tensor *old = vsr_weights_find(w, add[i].name);
        if (old) {
            for (size_t k = 0; k < w->n; k++) {
                if (w->tensors[k] == old) w->tensors[k] = &add[i];
                if (w->by_name[k] == old) w->by_name[k] = &add[i];
            }
            w->total -= old->nbytes;
        } else {
            w->tensors[w->n] = w->by_name[w->n] = &add[i];
            w->n++;
            qsort(w->by_name, w->n, sizeof *w->by_name, cmp_tensor_name);
        }
        w->total += add[i].nbytes;
    }
    w->overlay = owner;
    w->overlay_free = owner_free;
    return VSR_OK;
}
