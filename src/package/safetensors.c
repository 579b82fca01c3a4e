/* Strict safetensors reader (mmap / header-only / in-memory) and a deterministic writer.
 *
 * File layout (spec section 4):
 *   [0, 8)            u64 little-endian N, the header length
 *   [8, 8+N)          UTF-8 JSON object, right-padded with spaces
 *   [8+N, file end)   the byte buffer; every tensor's data_offsets are relative to it
 *
 * The reader validates the whole header (every entry, then the coverage of the byte
 * buffer) before it hands out a single tensor, so a caller never sees a half-valid file. */
#include "vsr/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/json_util.h"

#define METADATA_KEY "__metadata__"

struct vsr_st_file {
    char *label;
    void *map; /* our own mapping (vsr_st_open), else NULL */
    size_t map_len;
    uint64_t file_bytes;
    size_t n;
    vsr_tensor *tensors; /* sorted by data offset */
    size_t *by_name;     /* indexes into tensors, sorted by name (for vsr_st_find) */
    size_t n_meta;
    char **meta_keys; /* sorted */
    char **meta_vals;
};

/* ---------------------------------------------------------------- helpers */

static uint64_t read_le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* Returns the offset of the first byte that breaks UTF-8 (overlongs, surrogates and
 * code points past U+10FFFF included), or n if all of s is valid. */
static size_t utf8_invalid_at(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t len;
        uint32_t cp, min;
        if ((c & 0xe0) == 0xc0) len = 2, cp = c & 0x1f, min = 0x80;
        else if ((c & 0xf0) == 0xe0) len = 3, cp = c & 0x0f, min = 0x800;
        else if ((c & 0xf8) == 0xf0) len = 4, cp = c & 0x07, min = 0x10000;
        else return i;
        if (n - i < len) return i;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80) return i;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;
        i += len;
    }
    return n;
}

/* Checked numel and byte count for a shape: false on overflow (like the Rust
 * library, any intermediate product overflowing is an error even if a later dim is 0). */
static bool shape_numel(int ndim, const int64_t *shape, int64_t *numel) {
    uint64_t acc = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return false;
        if (__builtin_mul_overflow(acc, (uint64_t)shape[i], &acc)) return false;
        if (acc > (uint64_t)INT64_MAX) return false;
    }
    *numel = (int64_t)acc;
    return true;
}

/* numel x bits must be a whole number of bytes and not overflow. */
static bool numel_bytes(int64_t numel, int bits, uint64_t *nbits) {
    return !__builtin_mul_overflow((uint64_t)numel, (uint64_t)bits, nbits);
}

/* Metadata, in the reader and the writer alike: parallel key/value arrays sorted by key. */
static size_t meta_lower_bound(char *const *keys, size_t n, const char *key) {
    size_t lo = 0, hi = n; /* binary search: the first key >= key */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(keys[mid], key) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

typedef struct meta_pair {
    char *k, *v;
} meta_pair;
static int cmp_meta_pair(const void *a, const void *b) {
    return strcmp(((const meta_pair *)a)->k, ((const meta_pair *)b)->k);
}

/* Inserts the owned pair (k, v) at pos; the arrays have room for n + 1 entries. */
static void meta_insert(char **keys, char **vals, size_t *n, size_t pos, char *k, char *v) {
    memmove(keys + pos + 1, keys + pos, (*n - pos) * sizeof(char *));
    memmove(vals + pos + 1, vals + pos, (*n - pos) * sizeof(char *));
    keys[pos] = k;
    vals[pos] = v;
    (*n)++;
}

static void meta_free(char **keys, char **vals, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(keys[i]);
        free(vals[i]);
    }
    free(keys);
    free(vals);
}

static vsr_st_file *file_new(const char *label) {
    vsr_st_file *f = calloc(1, sizeof *f);
    if (!f) return NULL;
    f->label = strdup(label ? label : "");
    if (!f->label) {
        free(f);
        return NULL;
    }
    return f;
}

void vsr_st_close(vsr_st_file *f) {
    if (!f) return;
    for (size_t i = 0; i < f->n; i++) free((char *)f->tensors[i].name);
    free(f->tensors);
    free(f->by_name);
    meta_free(f->meta_keys, f->meta_vals, f->n_meta);
    if (f->map) munmap(f->map, f->map_len);
    free(f->label);
    free(f);
}

/* ---------------------------------------------------------------- header validation */

static const char *const entry_keys[] = {"dtype", "shape", "data_offsets", NULL};

static vsr_status parse_metadata(vsr_st_file *f, json_t *meta, vsr_err *err) {
    if (!json_is_object(meta))
        return vsr_err_set(err, VSR_E_FORMAT, "%s: " METADATA_KEY " must be an object of strings",
                           f->label);
    size_t n = json_object_size(meta);
    f->meta_keys = calloc(n ? n : 1, sizeof *f->meta_keys);
    f->meta_vals = calloc(n ? n : 1, sizeof *f->meta_vals);
    if (!f->meta_keys || !f->meta_vals)
        return vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory reading " METADATA_KEY, f->label);
    /* Collected, then sorted once (O(n log n): a hostile header may hold many keys). The header
     * has no duplicate keys (JSON_REJECT_DUPLICATES), so the order is total. */
    meta_pair *pp = calloc(n ? n : 1, sizeof *pp);
    if (!pp) return vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory reading " METADATA_KEY, f->label);
    size_t m = 0;
    vsr_status st = VSR_OK;
    const char *k;
    json_t *v;
    json_object_foreach(meta, k, v) {
        if (!json_is_string(v)) {
            st = vsr_err_set(err, VSR_E_FORMAT, "%s: " METADATA_KEY " value of \"%s\" must be a string", f->label, k);
            break;
        }
        pp[m].k = strdup(k);
        pp[m].v = strdup(json_string_value(v));
        m++;
        if (!pp[m - 1].k || !pp[m - 1].v) {
            st = vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory reading " METADATA_KEY, f->label);
            break;
        }
    }
    if (st == VSR_OK) qsort(pp, m, sizeof *pp, cmp_meta_pair);
    /* the arrays own every string made, so vsr_st_close frees them on failure too */
    for (size_t i = 0; i < m; i++) {
        f->meta_keys[i] = pp[i].k;
        f->meta_vals[i] = pp[i].v;
    }
    f->n_meta = m;
    free(pp);
    return st;
}

/* A JSON integer in [0, INT64_MAX]. */
static bool json_nonneg_int(const json_t *v, int64_t *out) {
    if (!json_is_integer(v)) return false;
    json_int_t x = json_integer_value(v);
    if (x < 0) return false;
    *out = (int64_t)x;
    return true;
}

/* Validates one tensor entry and fills t (name not yet set). `begin`/`end` are buffer-relative. */
static vsr_status parse_entry(const char *label, const char *name, json_t *e, vsr_tensor *t,
                              uint64_t *begin, uint64_t *end, vsr_err *err) {
    if (!json_is_object(e))
        return vsr_err_set(err, VSR_E_FORMAT,
                           "%s: tensor \"%s\": entry must be an object with dtype, shape, data_offsets",
                           label, name);
    const char *k;
    json_t *v;
    json_object_foreach(e, k, v) {
        bool known = false;
        for (const char *const *a = entry_keys; *a; a++) known |= !strcmp(*a, k);
        if (!known)
            return vsr_err_set(err, VSR_E_FORMAT,
                               "%s: tensor \"%s\": unexpected key \"%s\" (expected only dtype, shape, "
                               "data_offsets)",
                               label, name, k);
    }
    for (const char *const *a = entry_keys; *a; a++)
        if (!json_object_get(e, *a))
            return vsr_err_set(err, VSR_E_FORMAT, "%s: tensor \"%s\": missing key \"%s\"", label, name,
                               *a);

    json_t *dt = json_object_get(e, "dtype");
    if (!json_is_string(dt))
        return vsr_err_set(err, VSR_E_FORMAT, "%s: tensor \"%s\": dtype must be a string", label, name);
    if (!vsr_dtype_parse(json_string_value(dt), &t->dtype))
        return vsr_err_set(err, VSR_E_FORMAT, "%s: tensor \"%s\": unknown dtype \"%s\"", label, name,
                           json_string_value(dt));

    json_t *shape = json_object_get(e, "shape");
    if (!json_is_array(shape))
        return vsr_err_set(err, VSR_E_FORMAT,
                           "%s: tensor \"%s\": shape must be an array of non-negative integers", label,
                           name);
    size_t nd = json_array_size(shape);
    if (nd > VSR_ST_MAX_DIMS)
        return vsr_err_set(err, VSR_E_FORMAT, "%s: tensor \"%s\": shape has %zu dims, more than %d",
                           label, name, nd, VSR_ST_MAX_DIMS);
    t->ndim = (int)nd;
    for (size_t i = 0; i < nd; i++)
        if (!json_nonneg_int(json_array_get(shape, i), &t->shape[i]))
            return vsr_err_set(err, VSR_E_FORMAT,
                               "%s: tensor \"%s\": shape[%zu] must be a non-negative integer", label,
                               name, i);
    if (!shape_numel(t->ndim, t->shape, &t->numel))
        return vsr_err_set(err, VSR_E_FORMAT, "%s: tensor \"%s\": element count of the shape overflows",
                           label, name);

    json_t *offs = json_object_get(e, "data_offsets");
    int64_t b, en;
    if (!json_is_array(offs) || json_array_size(offs) != 2 ||
        !json_nonneg_int(json_array_get(offs, 0), &b) || !json_nonneg_int(json_array_get(offs, 1), &en))
        return vsr_err_set(err, VSR_E_FORMAT,
                           "%s: tensor \"%s\": data_offsets must be two non-negative integers [begin, end]",
                           label, name);
    if (b > en)
        return vsr_err_set(err, VSR_E_FORMAT,
                           "%s: tensor \"%s\": data_offsets begin %lld is after end %lld", label, name,
                           (long long)b, (long long)en);

    int bits = vsr_dtype_info(t->dtype)->bits;
    uint64_t nbits;
    if (!numel_bytes(t->numel, bits, &nbits))
        return vsr_err_set(err, VSR_E_FORMAT, "%s: tensor \"%s\": byte size of the shape overflows",
                           label, name);
    if (nbits % 8)
        return vsr_err_set(err, VSR_E_FORMAT,
                           "%s: tensor \"%s\": %lld elements of %s (%d bits) are not a whole number of "
                           "bytes",
                           label, name, (long long)t->numel, json_string_value(dt), bits);
    if ((uint64_t)(en - b) != nbits / 8)
        return vsr_err_set(err, VSR_E_FORMAT,
                           "%s: tensor \"%s\": data_offsets span %lld bytes but shape x dtype %s needs "
                           "%llu bytes",
                           label, name, (long long)(en - b), json_string_value(dt),
                           (unsigned long long)(nbits / 8));
    t->nbytes = (size_t)(en - b);
    *begin = (uint64_t)b;
    *end = (uint64_t)en;
    return VSR_OK;
}

typedef struct {
    uint64_t begin, end;
    size_t idx;
} span;

static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

typedef struct {
    const char *name;
    size_t idx;
} name_idx;

static int cmp_by_name(const void *a, const void *b) {
    return strcmp(((const name_idx *)a)->name, ((const name_idx *)b)->name);
}

/* Object nesting depth at byte `pos` of a JSON text (strings skipped): 1 = top level. */
static int depth_at(const char *s, size_t pos) {
    int depth = 0;
    bool in_str = false;
    for (size_t i = 0; i < pos; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') in_str = false;
        } else if (c == '"') in_str = true;
        else if (c == '{' || c == '[') depth++;
        else if (c == '}' || c == ']') depth--;
    }
    return depth;
}

/* Jansson reports a duplicate key without naming it; the key is the last JSON string that
 * ends before the error position. Copies it into out (truncated) or "?" if not found. */
static void duplicate_key_near(const char *hdr, size_t pos, char *out, size_t cap) {
    snprintf(out, cap, "?");
    if (pos == 0) return;
    size_t i = pos;
    while (i > 0 && hdr[i - 1] != '"') i--;
    if (i == 0) return;
    size_t close = i - 1, open = close;
    while (open > 0) {
        open--;
        if (hdr[open] == '"') {
            size_t bs = 0;
            while (open - bs > 0 && hdr[open - bs - 1] == '\\') bs++;
            if (bs % 2 == 0) break;
        }
    }
    size_t n = close - open - 1;
    if (n >= cap) n = cap - 1;
    memcpy(out, hdr + open + 1, n);
    out[n] = 0;
}

/* Validates header bytes [hdr, hdr+hlen) against a byte buffer of data_len bytes that starts at
 * absolute file position data_pos; data may be NULL (header-only mode). */
static vsr_status parse_header(vsr_st_file *f, const char *hdr, size_t hlen, const uint8_t *data,
                               uint64_t data_pos, uint64_t data_len, vsr_err *err) {
    const char *L = f->label;
    size_t bad = utf8_invalid_at((const uint8_t *)hdr, hlen);
    if (bad < hlen)
        return vsr_err_set(err, VSR_E_FORMAT, "%s: header is not valid UTF-8 (byte %zu of the header)",
                           L, bad);
    json_error_t je;
    json_t *root = json_loadb(hdr, hlen, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        if (json_error_code(&je) == json_error_duplicate_key) {
            char key[256];
            size_t at = (size_t)je.position <= hlen ? (size_t)je.position : hlen;
            duplicate_key_near(hdr, at, key, sizeof key);
            if (depth_at(hdr, at) == 1)
                return vsr_err_set(err, VSR_E_FORMAT,
                                   "%s: tensor \"%s\": duplicate name in the header (near byte %zu)", L,
                                   key, at);
            return vsr_err_set(err, VSR_E_FORMAT,
                               "%s: duplicate key \"%s\" inside a header entry (near byte %zu)", L, key,
                               at);
        }
        return vsr_err_set(err, VSR_E_FORMAT,
                           "%s: header is not valid JSON (byte %d of the header): %s", L, je.position,
                           je.text);
    }
    vsr_status st = VSR_OK;
    span *spans = NULL;
    if (!json_is_object(root)) {
        st = vsr_err_set(err, VSR_E_FORMAT, "%s: header must be a JSON object", L);
        goto out;
    }
    /* After the object check so that " {}" gets this message and "[]" the one above. */
    if (hdr[0] != '{') {
        st = vsr_err_set(err, VSR_E_FORMAT, "%s: header must start with '{'", L);
        goto out;
    }

    size_t cap = json_object_size(root);
    f->tensors = calloc(cap ? cap : 1, sizeof *f->tensors);
    spans = calloc(cap ? cap : 1, sizeof *spans);
    if (!f->tensors || !spans) {
        st = vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory reading the header", L);
        goto out;
    }
    const char *name;
    json_t *e;
    json_object_foreach(root, name, e) {
        if (!strcmp(name, METADATA_KEY)) {
            if ((st = parse_metadata(f, e, err))) goto out;
            continue;
        }
        vsr_tensor t = {0};
        uint64_t b = 0, en = 0;
        if ((st = parse_entry(L, name, e, &t, &b, &en, err))) goto out;
        t.name = strdup(name);
        if (!t.name) {
            st = vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory reading the header", L);
            goto out;
        }
        t.file = f->label;
        t.offset = data_pos + b;
        spans[f->n] = (span){b, en, f->n};
        f->tensors[f->n++] = t;
    }

    /* The byte buffer must be covered exactly: sorted by begin, each begin is the previous
     * end, the first begins at 0 and the last ends at the buffer's end. */
    qsort(spans, f->n, sizeof *spans, cmp_span);
    uint64_t pos = 0;
    for (size_t i = 0; i < f->n; i++) {
        const vsr_tensor *t = &f->tensors[spans[i].idx];
        if (spans[i].begin > pos) {
            st = vsr_err_set(err, VSR_E_FORMAT,
                             "%s: tensor \"%s\": data_offsets begin %llu leaves a hole after byte %llu "
                             "(offsets must be contiguous)",
                             L, t->name, (unsigned long long)spans[i].begin, (unsigned long long)pos);
            goto out;
        }
        if (spans[i].begin < pos) {
            st = vsr_err_set(err, VSR_E_FORMAT,
                             "%s: tensor \"%s\": data_offsets begin %llu overlaps the previous tensor "
                             "ending at %llu (offsets must be contiguous)",
                             L, t->name, (unsigned long long)spans[i].begin, (unsigned long long)pos);
            goto out;
        }
        if (spans[i].end > data_len) {
            st = vsr_err_set(err, VSR_E_FORMAT,
                             "%s: tensor \"%s\": data_offsets end %llu is past the end of the %llu-byte "
                             "data buffer (file truncated?)",
                             L, t->name, (unsigned long long)spans[i].end, (unsigned long long)data_len);
            goto out;
        }
        pos = spans[i].end;
    }
    if (pos != data_len) {
        st = vsr_err_set(err, VSR_E_FORMAT,
                         "%s: tensors cover %llu bytes but the data buffer holds %llu bytes (the last "
                         "data_offsets end must equal the buffer length)",
                         L, (unsigned long long)pos, (unsigned long long)data_len);
        goto out;
    }

    /* Reorder tensors by data offset and build the name index. */
    vsr_tensor *sorted = calloc(f->n ? f->n : 1, sizeof *sorted);
    name_idx *names = calloc(f->n ? f->n : 1, sizeof *names);
    f->by_name = calloc(f->n ? f->n : 1, sizeof *f->by_name);
    if (!sorted || !names || !f->by_name) {
        free(sorted);
        free(names);
        st = vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory reading the header", L);
        goto out;
    }
    for (size_t i = 0; i < f->n; i++) {
        sorted[i] = f->tensors[spans[i].idx];
        sorted[i].data = data ? data + (sorted[i].offset - data_pos) : NULL;
        names[i] = (name_idx){sorted[i].name, i};
    }
    free(f->tensors);
    f->tensors = sorted;
    qsort(names, f->n, sizeof *names, cmp_by_name);
    for (size_t i = 0; i < f->n; i++) f->by_name[i] = names[i].idx;
    free(names);
out:
    free(spans);
    json_decref(root);
    return st;
}

/* Checks the 8-byte prefix against the file size; on success *hlen is the header length. */
static vsr_status check_prefix(const char *label, const uint8_t *prefix, uint64_t file_bytes,
                               uint64_t *hlen, vsr_err *err) {
    if (file_bytes < 8)
        return vsr_err_set(err, VSR_E_FORMAT,
                           "%s: file is %llu bytes, shorter than the 8-byte header length", label,
                           (unsigned long long)file_bytes);
    uint64_t n = read_le64(prefix);
    if (n == 0) return vsr_err_set(err, VSR_E_FORMAT, "%s: header length is 0", label);
    if (n > VSR_ST_MAX_HEADER_BYTES)
        return vsr_err_set(err, VSR_E_FORMAT,
                           "%s: header length %llu is over the limit of %llu bytes", label,
                           (unsigned long long)n, VSR_ST_MAX_HEADER_BYTES);
    if (n > file_bytes - 8)
        return vsr_err_set(err, VSR_E_FORMAT,
                           "%s: header length %llu runs past the end of the %llu-byte file", label,
                           (unsigned long long)n, (unsigned long long)file_bytes);
    *hlen = n;
    return VSR_OK;
}

vsr_status vsr_st_parse(const char *label, const uint8_t *buf, size_t len, vsr_st_file **out,
                        vsr_err *err) {
    *out = NULL;
    vsr_st_file *f = file_new(label ? label : "<memory>");
    if (!f) return vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory", label ? label : "<memory>");
    f->file_bytes = len;
    uint64_t hlen = 0;
    vsr_status st = check_prefix(f->label, buf, len, &hlen, err);
    if (!st)
        st = parse_header(f, (const char *)buf + 8, (size_t)hlen, buf + 8 + hlen, 8 + hlen,
                          len - 8 - hlen, err);
    if (st) {
        vsr_st_close(f);
        return st;
    }
    *out = f;
    return VSR_OK;
}

static vsr_status open_fd(const char *path, const char *label, int *fd, uint64_t *size,
                          vsr_err *err) {
    *fd = open(path, O_RDONLY | O_CLOEXEC);
    if (*fd < 0) {
        if (errno == ENOENT) return vsr_err_set(err, VSR_E_NOT_FOUND, "%s: file is missing", label);
        return vsr_err_set(err, VSR_E_IO, "%s: cannot open: %s", label, strerror(errno));
    }
    struct stat sb;
    if (fstat(*fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        vsr_status st = vsr_err_set(err, VSR_E_IO, "%s: not a regular file", label);
        close(*fd);
        *fd = -1;
        return st;
    }
    *size = (uint64_t)sb.st_size;
    return VSR_OK;
}

/* vsr_st_open: maps the whole file, so tensors point into it. */
static vsr_status load_mapped(vsr_st_file *f, int fd, uint64_t hlen, vsr_err *err) {
    const char *L = f->label;
    if (f->file_bytes > SIZE_MAX) return vsr_err_set(err, VSR_E_IO, "%s: file too large to map", L);
    f->map_len = (size_t)f->file_bytes;
    void *m = mmap(NULL, f->map_len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED)
        return vsr_err_set(err, VSR_E_IO, "%s: cannot map %zu bytes: %s", L, f->map_len, strerror(errno));
    f->map = m;
    const uint8_t *base = m;
    return parse_header(f, (const char *)base + 8, (size_t)hlen, base + 8 + hlen, 8 + hlen,
                        f->file_bytes - 8 - hlen, err);
}

/* vsr_st_open_header: reads only the header bytes; tensors get no data pointer. */
static vsr_status load_header_only(vsr_st_file *f, int fd, uint64_t hlen, vsr_err *err) {
    const char *L = f->label;
    char *hdr = malloc((size_t)hlen);
    if (!hdr)
        return vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory for a %llu-byte header", L,
                           (unsigned long long)hlen);
    vsr_status st = VSR_OK;
    for (size_t got = 0; got < hlen;) {
        ssize_t r = pread(fd, hdr + got, (size_t)hlen - got, (off_t)(8 + got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            st = vsr_err_set(err, VSR_E_IO, "%s: short read of the header: %s", L,
                             r < 0 ? strerror(errno) : "end of file");
            break;
        }
        got += (size_t)r;
    }
    if (!st) st = parse_header(f, hdr, (size_t)hlen, NULL, 8 + hlen, f->file_bytes - 8 - hlen, err);
    free(hdr);
    return st;
}

/* Both file readers: open, check the 8-byte prefix against the file size, then load the
 * header mapped or header-only. */
static vsr_status open_file(const char *path, const char *label, bool map, vsr_st_file **out,
                            vsr_err *err) {
    *out = NULL;
    const char *L = label ? label : path;
    vsr_st_file *f = file_new(L);
    if (!f) return vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory", L);
    int fd;
    vsr_status st = open_fd(path, L, &fd, &f->file_bytes, err);
    if (st) {
        vsr_st_close(f);
        return st;
    }
    uint8_t prefix[8] = {0};
    uint64_t hlen = 0;
    if (f->file_bytes >= 8 && pread(fd, prefix, 8, 0) != 8)
        st = vsr_err_set(err, VSR_E_IO, "%s: cannot read the header length: %s", L, strerror(errno));
    else if (!(st = check_prefix(L, prefix, f->file_bytes, &hlen, err)))
        st = map ? load_mapped(f, fd, hlen, err) : load_header_only(f, fd, hlen, err);
    close(fd);
    if (st) {
        vsr_st_close(f);
        return st;
    }
    *out = f;
    return VSR_OK;
}

vsr_status vsr_st_open(const char *path, const char *label, vsr_st_file **out, vsr_err *err) {
    return open_file(path, label, true, out, err);
}

vsr_status vsr_st_open_header(const char *path, const char *label, vsr_st_file **out, vsr_err *err) {
    return open_file(path, label, false, out, err);
}

/* ---------------------------------------------------------------- accessors */

size_t vsr_st_count(const vsr_st_file *f) { return f ? f->n : 0; }

const vsr_tensor *vsr_st_at(const vsr_st_file *f, size_t i) {
    return (f && i < f->n) ? &f->tensors[i] : NULL;
}

const vsr_tensor *vsr_st_find(const vsr_st_file *f, const char *name) {
    if (!f || !name) return NULL;
    size_t lo = 0, hi = f->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const vsr_tensor *t = &f->tensors[f->by_name[mid]];
        int c = strcmp(t->name, name);
        if (c == 0) return t;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

const char *vsr_st_metadata(const vsr_st_file *f, const char *key) {
    if (!f || !key) return NULL;
    size_t i = meta_lower_bound(f->meta_keys, f->n_meta, key); /* the keys are sorted */
    return i < f->n_meta && !strcmp(f->meta_keys[i], key) ? f->meta_vals[i] : NULL;
}

uint64_t vsr_st_file_bytes(const vsr_st_file *f) { return f ? f->file_bytes : 0; }
const char *vsr_st_label(const vsr_st_file *f) { return f ? f->label : NULL; }

/* ---------------------------------------------------------------- writer */

/* The reference writer (Rust safetensors `Dtype`, derive(Ord)) lays tensors out by
 * descending rank, then name. Rank is the enum's declaration order, which groups by
 * element size; within a size the order is fixed by this table, not by the name. */
static const int layout_rank[VSR_DT_COUNT] = {
    [VSR_DT_BOOL] = 0,         [VSR_DT_F4] = 1,           [VSR_DT_F6_E2M3] = 2,
    [VSR_DT_F6_E3M2] = 3,      [VSR_DT_U8] = 4,           [VSR_DT_I8] = 5,
    [VSR_DT_F8_E5M2] = 6,      [VSR_DT_F8_E4M3] = 7,      [VSR_DT_F8_E8M0] = 8,
    [VSR_DT_F8_E4M3FNUZ] = 9,  [VSR_DT_F8_E5M2FNUZ] = 10, [VSR_DT_I16] = 11,
    [VSR_DT_U16] = 12,         [VSR_DT_F16] = 13,         [VSR_DT_BF16] = 14,
    [VSR_DT_I32] = 15,         [VSR_DT_U32] = 16,         [VSR_DT_F32] = 17,
    [VSR_DT_C64] = 18,         [VSR_DT_F64] = 19,         [VSR_DT_I64] = 20,
    [VSR_DT_U64] = 21,
};

typedef struct {
    char *name;
    vsr_dtype dtype;
    int ndim;
    int64_t shape[VSR_ST_MAX_DIMS];
    uint8_t *data;
    size_t nbytes;
} wtensor;

struct vsr_st_writer {
    wtensor *t;
    size_t n, cap;
    char **mk, **mv; /* metadata, kept sorted by key */
    size_t nm;
    bool has_meta;
};

vsr_st_writer *vsr_st_writer_new(void) { return calloc(1, sizeof(vsr_st_writer)); }

void vsr_st_writer_free(vsr_st_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n; i++) {
        free(w->t[i].name);
        free(w->t[i].data);
    }
    free(w->t);
    meta_free(w->mk, w->mv, w->nm);
    free(w);
}

static bool valid_utf8_str(const char *s) {
    size_t n = strlen(s);
    return utf8_invalid_at((const uint8_t *)s, n) == n;
}

vsr_status vsr_st_writer_add(vsr_st_writer *w, const char *name, vsr_dtype dtype, int ndim,
                             const int64_t *shape, const void *data, size_t nbytes, vsr_err *err) {
    if (!w || !name) return vsr_err_set(err, VSR_E_INVALID, "safetensors writer: NULL argument");
    if (!valid_utf8_str(name))
        return vsr_err_set(err, VSR_E_INVALID, "safetensors writer: tensor name is not valid UTF-8");
    if (!strcmp(name, METADATA_KEY))
        return vsr_err_set(err, VSR_E_INVALID,
                           "safetensors writer: tensor \"%s\": name is reserved for metadata", name);
    const vsr_dtype_traits *ti = vsr_dtype_info(dtype);
    if (!ti)
        return vsr_err_set(err, VSR_E_INVALID, "safetensors writer: tensor \"%s\": unknown dtype %d",
                           name, (int)dtype);
    if (ndim < 0 || ndim > VSR_ST_MAX_DIMS || (ndim > 0 && !shape))
        return vsr_err_set(err, VSR_E_INVALID,
                           "safetensors writer: tensor \"%s\": ndim %d is outside 0..%d", name, ndim,
                           VSR_ST_MAX_DIMS);
    int64_t numel;
    uint64_t nbits;
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0)
            return vsr_err_set(err, VSR_E_INVALID,
                               "safetensors writer: tensor \"%s\": shape[%d] = %lld is negative", name, i,
                               (long long)shape[i]);
    if (!shape_numel(ndim, shape, &numel) || !numel_bytes(numel, ti->bits, &nbits))
        return vsr_err_set(err, VSR_E_INVALID,
                           "safetensors writer: tensor \"%s\": element count overflows", name);
    if (nbits % 8)
        return vsr_err_set(err, VSR_E_INVALID,
                           "safetensors writer: tensor \"%s\": %lld elements of %s are not a whole "
                           "number of bytes",
                           name, (long long)numel, ti->name);
    if (nbytes != nbits / 8)
        return vsr_err_set(err, VSR_E_INVALID,
                           "safetensors writer: tensor \"%s\": %zu bytes given but shape x %s needs %llu",
                           name, nbytes, ti->name, (unsigned long long)(nbits / 8));
    if (nbytes && !data)
        return vsr_err_set(err, VSR_E_INVALID, "safetensors writer: tensor \"%s\": NULL data", name);
    for (size_t i = 0; i < w->n; i++)
        if (!strcmp(w->t[i].name, name))
            return vsr_err_set(err, VSR_E_INVALID,
                               "safetensors writer: tensor \"%s\": added twice", name);
    if (w->n == w->cap) {
        size_t c = w->cap ? w->cap * 2 : 16;
        wtensor *q = realloc(w->t, c * sizeof *q);
        if (!q) return vsr_err_set(err, VSR_E_NOMEM, "safetensors writer: out of memory");
        w->t = q;
        w->cap = c;
    }
    wtensor t = {.dtype = dtype, .ndim = ndim, .nbytes = nbytes};
    for (int i = 0; i < ndim; i++) t.shape[i] = shape[i];
    t.name = strdup(name);
    t.data = malloc(nbytes ? nbytes : 1);
    if (!t.name || !t.data) {
        free(t.name);
        free(t.data);
        return vsr_err_set(err, VSR_E_NOMEM, "safetensors writer: tensor \"%s\": out of memory", name);
    }
    if (nbytes) memcpy(t.data, data, nbytes);
    w->t[w->n++] = t;
    return VSR_OK;
}

vsr_status vsr_st_writer_set_metadata(vsr_st_writer *w, const char *key, const char *value,
                                      vsr_err *err) {
    if (!w || !key || !value) return vsr_err_set(err, VSR_E_INVALID, "safetensors writer: NULL argument");
    if (!valid_utf8_str(key) || !valid_utf8_str(value))
        return vsr_err_set(err, VSR_E_INVALID,
                           "safetensors writer: metadata \"%s\": key and value must be valid UTF-8", key);
    size_t pos = meta_lower_bound(w->mk, w->nm, key);
    char *v = strdup(value);
    if (!v) return vsr_err_set(err, VSR_E_NOMEM, "safetensors writer: out of memory");
    if (pos < w->nm && !strcmp(w->mk[pos], key)) { /* replace */
        free(w->mv[pos]);
        w->mv[pos] = v;
        w->has_meta = true;
        return VSR_OK;
    }
    char *k = strdup(key);
    char **nk = realloc(w->mk, (w->nm + 1) * sizeof *nk);
    if (nk) w->mk = nk;
    char **nv = realloc(w->mv, (w->nm + 1) * sizeof *nv);
    if (nv) w->mv = nv;
    if (!k || !nk || !nv) {
        free(k);
        free(v);
        return vsr_err_set(err, VSR_E_NOMEM, "safetensors writer: out of memory");
    }
    meta_insert(w->mk, w->mv, &w->nm, pos, k, v);
    w->has_meta = true;
    return VSR_OK;
}

/* Header strings are escaped the way the reference writer's serde_json does, which is
 * Python's json with ensure_ascii=False (see vsr_json_put_string): ", \ and the controls
 * escaped, DEL and non-ASCII UTF-8 as is. Names and metadata were checked to be UTF-8 when
 * added, as that writer requires. */
static void put_json_string(vsr_strbuf *b, const char *s) { vsr_json_put_string(b, s, strlen(s), false); }

static int cmp_layout(const void *a, const void *b) {
    const wtensor *x = *(const wtensor *const *)a, *y = *(const wtensor *const *)b;
    int rx = layout_rank[x->dtype], ry = layout_rank[y->dtype];
    if (rx != ry) return ry - rx; /* descending rank */
    return strcmp(x->name, y->name);
}

static vsr_status write_all(int fd, const void *p, size_t n, const char *path, vsr_err *err) {
    const char *c = p;
    while (n) {
        ssize_t r = write(fd, c, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return vsr_err_set(err, VSR_E_IO, "%s: write failed: %s", path, strerror(errno));
        c += r;
        n -= (size_t)r;
    }
    return VSR_OK;
}

vsr_status vsr_st_writer_save(vsr_st_writer *w, const char *path, vsr_err *err) {
    if (!w || !path) return vsr_err_set(err, VSR_E_INVALID, "safetensors writer: NULL argument");
    const wtensor **order = malloc((w->n ? w->n : 1) * sizeof *order);
    if (!order) return vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory", path);
    for (size_t i = 0; i < w->n; i++) order[i] = &w->t[i];
    qsort(order, w->n, sizeof *order, cmp_layout);

    /* Header: "__metadata__" first (sorted keys), then the tensors in layout order with their
     * keys in the reference writer's order: dtype, shape, data_offsets. */
    vsr_strbuf b = {0};
    vsr_strbuf_put(&b, "{", 1);
    bool first = true;
    if (w->has_meta) {
        vsr_strbuf_puts(&b, "\"" METADATA_KEY "\":{");
        for (size_t i = 0; i < w->nm; i++) {
            if (i) vsr_strbuf_put(&b, ",", 1);
            put_json_string(&b, w->mk[i]);
            vsr_strbuf_put(&b, ":", 1);
            put_json_string(&b, w->mv[i]);
        }
        vsr_strbuf_put(&b, "}", 1);
        first = false;
    }
    uint64_t off = 0;
    for (size_t i = 0; i < w->n; i++) {
        const wtensor *t = order[i];
        if (!first) vsr_strbuf_put(&b, ",", 1);
        first = false;
        put_json_string(&b, t->name);
        vsr_strbuf_puts(&b, ":{\"dtype\":");
        put_json_string(&b, vsr_dtype_info(t->dtype)->name);
        vsr_strbuf_puts(&b, ",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) vsr_strbuf_printf(&b, "%s%lld", d ? "," : "", (long long)t->shape[d]);
        vsr_strbuf_printf(&b, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                          (unsigned long long)(off + t->nbytes));
        off += t->nbytes;
    }
    vsr_strbuf_put(&b, "}", 1);
    while (!b.oom && b.n % 8) vsr_strbuf_put(&b, " ", 1);
    if (b.oom) {
        free(order);
        vsr_strbuf_free(&b);
        return vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory building the header", path);
    }
    uint8_t prefix[8];
    for (int i = 0; i < 8; i++) prefix[i] = (uint8_t)((uint64_t)b.n >> (8 * i));

    size_t plen = strlen(path);
    char *tmp = malloc(plen + 16);
    vsr_status st = VSR_OK;
    int fd = -1;
    bool created = false;
    if (!tmp) {
        st = vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory", path);
        goto out;
    }
    snprintf(tmp, plen + 16, "%s.tmp.XXXXXX", path);
    fd = mkstemp(tmp);
    if (fd < 0) {
        st = vsr_err_set(err, VSR_E_IO, "%s: cannot create a temporary file: %s", path, strerror(errno));
        goto out;
    }
    created = true;
    /* mkstemp makes 0600; give the file the usual 0666 & ~umask. */
    mode_t um = umask(0);
    umask(um);
    if (fchmod(fd, 0666 & ~um) != 0) {
        st = vsr_err_set(err, VSR_E_IO, "%s: chmod failed: %s", tmp, strerror(errno));
        goto out;
    }
    if ((st = write_all(fd, prefix, 8, tmp, err)) || (st = write_all(fd, b.p, b.n, tmp, err)))
        goto out;
    for (size_t i = 0; i < w->n; i++)
        if ((st = write_all(fd, order[i]->data, order[i]->nbytes, tmp, err))) goto out;
    if (fsync(fd) != 0) {
        st = vsr_err_set(err, VSR_E_IO, "%s: fsync failed: %s", tmp, strerror(errno));
        goto out;
    }
    if (close(fd) != 0) {
        fd = -1;
        st = vsr_err_set(err, VSR_E_IO, "%s: close failed: %s", tmp, strerror(errno));
        goto out;
    }
    fd = -1;
    if (rename(tmp, path) != 0) {
        st = vsr_err_set(err, VSR_E_IO, "%s: cannot rename the temporary file into place: %s", path,
                         strerror(errno));
        goto out;
    }
    created = false; /* renamed into place */
out:
    if (fd >= 0) close(fd);
    if (created) unlink(tmp);
    free(tmp);
    free(order);
    vsr_strbuf_free(&b);
    return st;
}
