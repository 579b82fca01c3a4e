#include "core/json_util.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

vsr_status vsr_json_only_keys(const json_t *obj, const char *const *allowed, const char *where,
                              vsr_err *err) {
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v) {
        bool ok = false;
        for (const char *const *a = allowed; *a; a++)
            if (!strcmp(*a, key)) ok = true;
        if (!ok) {
            char list[512] = "";
            size_t len = 0;
            for (const char *const *a = allowed; *a && len < sizeof list - 64; a++)
                len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", a == allowed ? "" : ", ", *a);
            return vsr_err_set(err, VSR_E_FORMAT, "%s: unknown key \"%s\" (expected one of %s)", where,
                               key, list);
        }
    }
    return VSR_OK;
}

vsr_status vsr_json_load_file(const char *path, const char *label, size_t max_bytes, json_t **out,
                              vsr_err *err) {
    const char *name = label ? label : path;
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT) return vsr_err_set(err, VSR_E_NOT_FOUND, "%s: file is missing", name);
        return vsr_err_set(err, VSR_E_IO, "%s: cannot open: %s", name, strerror(errno));
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (len < 0 || (size_t)len > max_bytes) {
        fclose(f);
        return vsr_err_set(err, VSR_E_FORMAT, "%s: %ld bytes is over the limit of %zu bytes", name, len,
                           max_bytes);
    }
    char *buf = malloc((size_t)len + 1);
    if (!buf) {
        fclose(f);
        return vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory", name);
    }
    size_t got = fread(buf, 1, (size_t)len, f);
    fclose(f);
    if (got != (size_t)len) {
        free(buf);
        return vsr_err_set(err, VSR_E_IO, "%s: short read", name);
    }
    json_error_t je;
    json_t *j = json_loadb(buf, (size_t)len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    free(buf);
    if (!j)
        return vsr_err_set(err, VSR_E_FORMAT, "%s: not valid JSON at line %d column %d: %s", name,
                           je.line, je.column, je.text);
    *out = j;
    return VSR_OK;
}

/* ---- Python-compatible canonical dump ---- */

static void puts_(vsr_strbuf *b, const char *s) { vsr_strbuf_puts(b, s); }

/* Decodes one UTF-8 code point; returns bytes consumed (1 on invalid, cp = U+FFFD). */
static size_t utf8_next(const unsigned char *s, size_t n, unsigned *cp) {
    unsigned c = s[0];
    if (c < 0x80) { *cp = c; return 1; }
    int len = (c >= 0xf0) ? 4 : (c >= 0xe0) ? 3 : (c >= 0xc0) ? 2 : 1;
    if (len == 1 || (size_t)len > n) { *cp = 0xfffd; return 1; }
    unsigned v = c & (0x3f >> (len - 1));
    for (int i = 1; i < len; i++) v = (v << 6) | (s[i] & 0x3f);
    *cp = v;
    return (size_t)len;
}

void vsr_json_put_string(vsr_strbuf *b, const char *s, size_t n, bool ensure_ascii) {
    char tmp[16];
    vsr_strbuf_put(b, "\"", 1);
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned cp;
        size_t k = utf8_next(u + i, n - i, &cp);
        i += k;
        switch (cp) {
        case '"': puts_(b, "\\\""); continue;
        case '\\': puts_(b, "\\\\"); continue;
        case '\n': puts_(b, "\\n"); continue;
        case '\r': puts_(b, "\\r"); continue;
        case '\t': puts_(b, "\\t"); continue;
        case '\b': puts_(b, "\\b"); continue;
        case '\f': puts_(b, "\\f"); continue;
        default: break;
        }
        if (!ensure_ascii && cp >= 0x20 && cp != 0x7f && k > 1) {
            vsr_strbuf_put(b, u + i - k, k);
            continue;
        }
        if (cp < 0x20 || (ensure_ascii && cp > 0x7e)) {
            if (cp >= 0x10000) {
                unsigned v = cp - 0x10000;
                snprintf(tmp, sizeof tmp, "\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
            } else {
                snprintf(tmp, sizeof tmp, "\\u%04x", cp);
            }
            puts_(b, tmp);
        } else {
            char c = (char)cp;
            vsr_strbuf_put(b, &c, 1);
        }
    }
    vsr_strbuf_put(b, "\"", 1);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Adds delta (+1 or -1) to the decimal digit string d (nd digits, no sign) in place;
 * returns the new digit count (nd + 1 when a carry adds a digit, and d then holds it). */
static int digits_step(char *d, int nd, int delta) {
    int i = nd - 1;
    if (delta > 0) {
        while (i >= 0 && d[i] == '9') d[i--] = '0';
        if (i >= 0) {
            d[i]++;
            return nd;
        }
        memmove(d + 1, d, (size_t)nd);
        d[0] = '1';
        return nd + 1;
    }
    while (i >= 0 && d[i] == '0') d[i--] = '9';
    if (i >= 0) d[i]--;
    return nd;
}

/* Python's float repr: the shortest digit string that round-trips (David Gay's mode 0), and
 * of those the one nearest the value, written in fixed notation when the decimal exponent
 * is in [-4, 16) (integral values keep ".0"), else as d.ddde+XX. For each length the
 * correctly rounded digits are tried, then their neighbours one unit in the last place
 * away: at a power of two the rounding interval is lopsided and a neighbour can round-trip
 * where the nearest digits do not. */
static void put_real(vsr_strbuf *b, double d) {
    char tmp[64], digits[40], cand[40], num[80];
    if (d == 0.0) {
        puts_(b, signbit(d) ? "-0.0" : "0.0");
        return;
    }
    if (!isfinite(d)) {
        puts_(b, isnan(d) ? "NaN" : d > 0 ? "Infinity" : "-Infinity");
        return;
    }
    bool neg = d < 0;
    double a = neg ? -d : d;
    int nd = 0, exp = 0;
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, a);
        /* tmp = d.ddde[+-]XX */
        int n = 0;
        const char *p = tmp;
        for (; *p && *p != 'e'; p++)
            if (*p != '.') digits[n++] = *p;
        digits[n] = 0;
        int e = atoi(p + 1);
        snprintf(num, sizeof num, "%se%d", digits, e - (n - 1));
        if (strtod(num, NULL) == a) {
            nd = n, exp = e;
            break;
        }
        bool found = false;
        for (int delta = -1; delta <= 1 && !found; delta += 2) {
            memcpy(cand, digits, (size_t)n + 1);
            int m = digits_step(cand, n, delta), ce = e + (m - n);
            cand[m] = 0;
            if (cand[0] == '0') { /* below 1.00eE comes 9.99e(E-1), with as many digits */
                memset(cand, '9', (size_t)n);
                cand[n] = 0;
                ce = e - 1;
            }
            snprintf(num, sizeof num, "%se%d", cand, ce - (m - 1));
            if (strtod(num, NULL) == a) {
                found = true;
                memcpy(digits, cand, (size_t)m + 1);
                nd = m, exp = ce;
            }
        }
        if (found) break;
    }
    while (nd > 1 && digits[nd - 1] == '0') digits[--nd] = 0;
    char out[64];
    size_t o = 0;
    if (neg) out[o++] = '-';
    if (exp >= -4 && exp < 16) {
        if (exp >= 0) {
            for (int i = 0; i <= exp; i++) out[o++] = i < nd ? digits[i] : '0';
            out[o++] = '.';
            if (nd > exp + 1)
                for (int i = exp + 1; i < nd; i++) out[o++] = digits[i];
            else
                out[o++] = '0';
        } else {
            out[o++] = '0';
            out[o++] = '.';
            for (int i = 0; i < -exp - 1; i++) out[o++] = '0';
            for (int i = 0; i < nd; i++) out[o++] = digits[i];
        }
        out[o] = 0;
    } else {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            for (int i = 1; i < nd; i++) out[o++] = digits[i];
        }
        snprintf(out + o, sizeof out - o, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
    puts_(b, out);
}

/* Python's json encoder with `indent`: a newline, then `indent` spaces per level. */
static void newline(vsr_strbuf *b, const vsr_json_style *st, int level) {
    vsr_strbuf_put(b, "\n", 1);
    for (int i = 0; i < level * st->indent; i++) vsr_strbuf_put(b, " ", 1);
}

static void dump(vsr_strbuf *b, const json_t *v, const vsr_json_style *st, int level) {
    /* Python's separators: (",", ": ") with an indent, else (", ", ": ") or compact (",", ":"). */
    bool pretty = st->indent >= 0;
    const char *item_sep = pretty || st->compact ? "," : ", ";
    const char *kv_sep = !pretty && st->compact ? ":" : ": ";
    char tmp[48];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        size_t n = json_object_size(v), i = 0;
        if (!n) { /* Python writes an empty container as "{}" even with an indent */
            puts_(b, "{}");
            break;
        }
        const char **keys = malloc(n * sizeof *keys);
        if (!keys) { b->oom = true; return; }
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)v, k, x) keys[i++] = k;
        if (st->sort_keys) qsort(keys, n, sizeof *keys, cmp_str);
        vsr_strbuf_put(b, "{", 1);
        for (i = 0; i < n; i++) {
            if (i) puts_(b, item_sep);
            if (pretty) newline(b, st, level + 1);
            vsr_json_put_string(b, keys[i], strlen(keys[i]), st->ensure_ascii);
            puts_(b, kv_sep);
            dump(b, json_object_get(v, keys[i]), st, level + 1);
        }
        if (pretty) newline(b, st, level);
        vsr_strbuf_put(b, "}", 1);
        free(keys);
        break;
    }
    case JSON_ARRAY:
        if (!json_array_size(v)) {
            puts_(b, "[]");
            break;
        }
        vsr_strbuf_put(b, "[", 1);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) puts_(b, item_sep);
            if (pretty) newline(b, st, level + 1);
            dump(b, json_array_get(v, i), st, level + 1);
        }
        if (pretty) newline(b, st, level);
        vsr_strbuf_put(b, "]", 1);
        break;
    case JSON_STRING:
        vsr_json_put_string(b, json_string_value(v), json_string_length(v), st->ensure_ascii);
        break;
    case JSON_INTEGER:
        snprintf(tmp, sizeof tmp, "%lld", (long long)json_integer_value(v));
        puts_(b, tmp);
        break;
    case JSON_REAL: put_real(b, json_real_value(v)); break;
    case JSON_TRUE: puts_(b, "true"); break;
    case JSON_FALSE: puts_(b, "false"); break;
    case JSON_NULL: puts_(b, "null"); break;
    }
}

void vsr_json_dump_python(vsr_strbuf *b, const json_t *v, const vsr_json_style *st) {
    dump(b, v, st, 0);
}

char *vsr_json_dumps_python(const json_t *v, bool sort_keys, bool ensure_ascii, bool compact) {
    vsr_json_style st = {.sort_keys = sort_keys, .ensure_ascii = ensure_ascii, .compact = compact, .indent = -1};
    vsr_strbuf b = {0};
    dump(&b, v, &st, 0);
    return vsr_strbuf_take(&b, NULL);
}

char *vsr_json_dumps_python_compact(const json_t *v) {
    return vsr_json_dumps_python(v, true, true, true);
}
