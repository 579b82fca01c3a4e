/* identity.model_sha256 (reference-runtime.md 4.1 step 6):
 *   sha256(json.dumps({"files": F, "decision": D}, sort_keys=True, separators=(",",":")))
 * with Python's default ensure_ascii=True. F: name -> sha256 of the weight shards and
 * the identity files present; D: decision_config restricted to the identity keys.
 * Also Python's repr() of strings, JSON values and lists, for the reference's messages. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json_util.h"
#include "package/package_internal.h"
#include "vsr/hash.h"

static const char *const identity_decision_keys[] = {
    "format_version", "format_id", "prompt",      "base_model", "revision",   "codes",
    "token_ids",      "temperature", "attention_mode", "pooling", "max_length", "readout_dtype",
};

vsr_status vsr_identity_model_sha256(int n, const char *const *names, const char *const *sha256,
                                     const void *decision_json, char out[65], vsr_err *err) {
    const json_t *dec = decision_json;
    if (dec && !json_is_object(dec))
        return vsr_err_set(err, VSR_E_INVALID, "identity: the decision config must be a JSON object");
    json_t *files = json_object(), *d = json_object(), *root = json_object();
    vsr_status st = VSR_OK;
    if (!files || !d || !root) {
        st = vsr_err_set(err, VSR_E_NOMEM, "identity: out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++)
        if (json_object_set_new(files, names[i], json_string(sha256[i]))) {
            st = vsr_err_set(err, VSR_E_INVALID, "identity: file name \"%s\" is not valid UTF-8", names[i]);
            goto done;
        }
    if (dec)
        for (size_t i = 0; i < sizeof identity_decision_keys / sizeof identity_decision_keys[0]; i++) {
            json_t *v = json_object_get(dec, identity_decision_keys[i]);
            if (v) json_object_set(d, identity_decision_keys[i], v);
        }
    json_object_set(root, "files", files);
    json_object_set(root, "decision", d);
    char *s = vsr_json_dumps_python_compact(root);
    if (!s) {
        st = vsr_err_set(err, VSR_E_NOMEM, "identity: out of memory");
        goto done;
    }
    vsr_sha256_hex(s, strlen(s), out);
    free(s);
done:
    json_decref(files);
    json_decref(d);
    json_decref(root);
    return st;
}

vsr_status vsr_identity_files_sha256(int n, const char *const *names, const char *const *sha256, char out[65],
                                     vsr_err *err) {
    json_t *files = json_object();
    if (!files) return vsr_err_set(err, VSR_E_NOMEM, "identity: out of memory");
    for (int i = 0; i < n; i++)
        if (json_object_set_new(files, names[i], json_string(sha256[i]))) {
            json_decref(files);
            return vsr_err_set(err, VSR_E_INVALID, "identity: file name \"%s\" is not valid UTF-8", names[i]);
        }
    char *s = vsr_json_dumps_python(files, true, false, true);
    json_decref(files);
    if (!s) return vsr_err_set(err, VSR_E_NOMEM, "identity: out of memory");
    vsr_sha256_hex(s, strlen(s), out);
    free(s);
    return VSR_OK;
}

/* ---- Python renderings for messages (the reference's messages embed repr() and str(list)) ---- */

typedef struct pybuf {
    char *s;
    size_t n, len;
} pybuf;

static void pb_put(pybuf *b, const char *s, size_t k) {
    for (size_t i = 0; i < k; i++) {
        if (b->len + 1 < b->n) b->s[b->len] = s[i];
        b->len++;
    }
    if (b->n) b->s[b->len < b->n ? b->len : b->n - 1] = 0;
}
static void pb_str(pybuf *b, const char *s) { pb_put(b, s, strlen(s)); }

/* One UTF-8 sequence at s (at most `left` bytes): its code point and length, or -1 if invalid. */
static long utf8_cp(const unsigned char *s, size_t left, size_t *len) {
    unsigned char c = s[0];
    int k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!k || (size_t)k > left) return -1;
    long cp = k == 1 ? c : k == 2 ? (c & 0x1f) : k == 3 ? (c & 0x0f) : (c & 0x07);
    for (int i = 1; i < k; i++) {
        if ((s[i] & 0xc0) != 0x80) return -1;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    static const long min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[k] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return -1;
    *len = (size_t)k;
    return cp;
}

static void pb_repr_str(pybuf *b, const char *str, size_t n) {
    /* Python picks single quotes unless the text has one and no double quote. */
    bool has_sq = memchr(str, '\'', n) != NULL, has_dq = memchr(str, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    pb_put(b, &q, 1);
    const unsigned char *s = (const unsigned char *)str;
    for (size_t i = 0; i < n;) {
        size_t k = 1;
        long cp = utf8_cp(s + i, n - i, &k);
        char tmp[16];
        if (cp < 0) { /* not UTF-8: shown as the byte (Python would not get here) */
            snprintf(tmp, sizeof tmp, "\\x%02x", s[i]);
            pb_str(b, tmp);
            i++;
            continue;
        }
        if (cp == '\\' || cp == q) {
            tmp[0] = '\\', tmp[1] = (char)cp;
            pb_put(b, tmp, 2);
        } else if (cp == '\n') pb_str(b, "\\n");
        else if (cp == '\r') pb_str(b, "\\r");
        else if (cp == '\t') pb_str(b, "\\t");
        else if (cp < 0x20 || (cp >= 0x7f && cp <= 0xa0) || cp == 0xad) {
            snprintf(tmp, sizeof tmp, "\\x%02lx", cp);
            pb_str(b, tmp);
        } else {
            pb_put(b, (const char *)s + i, k);
        }
        i += k;
    }
    pb_put(b, &q, 1);
}

/* repr(float): the shortest digits that read back, in fixed notation for exponents -4..15
 * (always with a decimal point), else d.ddde+XX. */
static void pb_repr_real(pybuf *b, double v) {
    char tmp[64];
    if (v != v) {
        pb_str(b, "nan");
        return;
    }
    if (v > 1.7976931348623157e308 || v < -1.7976931348623157e308) {
        pb_str(b, v < 0 ? "-inf" : "inf");
        return;
    }
    int prec = 1;
    for (; prec < 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, v);
        if (strtod(tmp, NULL) == v) break;
    }
    snprintf(tmp, sizeof tmp, "%.*e", prec - 1, v);
    /* tmp: [-]d[.ddd]e[+-]XX */
    char digits[32];
    size_t nd = 0;
    const char *p = tmp;
    bool neg = *p == '-';
    if (neg) p++;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    digits[nd] = 0;
    int exp10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') digits[--nd] = 0;
    char out[64];
    size_t o = 0;
    if (neg) out[o++] = '-';
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 < 0) {
            out[o++] = '0', out[o++] = '.';
            for (int i = 0; i < -exp10 - 1; i++) out[o++] = '0';
            for (size_t i = 0; i < nd; i++) out[o++] = digits[i];
        } else {
            for (int i = 0; i <= exp10; i++) out[o++] = (size_t)i < nd ? digits[i] : '0';
            out[o++] = '.';
            if ((size_t)exp10 + 1 < nd)
                for (size_t i = (size_t)exp10 + 1; i < nd; i++) out[o++] = digits[i];
            else out[o++] = '0';
        }
        out[o] = 0;
    } else {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            for (size_t i = 1; i < nd; i++) out[o++] = digits[i];
        }
        snprintf(out + o, sizeof out - o, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    }
    pb_str(b, out);
}

static void pb_repr_json(pybuf *b, const json_t *v, int depth) {
    char tmp[32];
    if (!v || json_is_null(v)) pb_str(b, "None");
    else if (json_is_true(v)) pb_str(b, "True");
    else if (json_is_false(v)) pb_str(b, "False");
    else if (json_is_string(v)) pb_repr_str(b, json_string_value(v), json_string_length(v));
    else if (json_is_integer(v)) {
        snprintf(tmp, sizeof tmp, "%lld", (long long)json_integer_value(v));
        pb_str(b, tmp);
    } else if (json_is_real(v)) pb_repr_real(b, json_real_value(v));
    else if (depth > 8) pb_str(b, "...");
    else if (json_is_array(v)) {
        pb_str(b, "[");
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) pb_str(b, ", ");
            pb_repr_json(b, json_array_get(v, i), depth + 1);
        }
        pb_str(b, "]");
    } else if (json_is_object(v)) {
        const char *k;
        json_t *x;
        bool first = true;
        pb_str(b, "{");
        json_object_foreach((json_t *)v, k, x) {
            if (!first) pb_str(b, ", ");
            first = false;
            pb_repr_str(b, k, strlen(k));
            pb_str(b, ": ");
            pb_repr_json(b, x, depth + 1);
        }
        pb_str(b, "}");
    }
}

const char *vsr_py_repr_str(const char *s, char *buf, size_t n) {
    pybuf b = {buf, n, 0};
    if (n) buf[0] = 0;
    pb_repr_str(&b, s, strlen(s));
    return buf;
}

const char *vsr_py_repr_json(const void *json, char *buf, size_t n) {
    pybuf b = {buf, n, 0};
    if (n) buf[0] = 0;
    pb_repr_json(&b, json, 0);
    return buf;
}

const char *vsr_py_repr_list(const char *const *names, size_t count, char *buf, size_t n) {
    pybuf b = {buf, n, 0};
    if (n) buf[0] = 0;
    pb_str(&b, "[");
    for (size_t i = 0; i < count; i++) {
        if (i) pb_str(&b, ", ");
        pb_repr_str(&b, names[i], strlen(names[i]));
    }
    pb_str(&b, "]");
    return buf;
}

const char *vsr_py_repr_shape(int ndim, const int64_t *shape, char *buf, size_t n) {
    pybuf b = {buf, n, 0};
    char tmp[32];
    if (n) buf[0] = 0;
    pb_str(&b, "[");
    for (int i = 0; i < ndim; i++) {
        snprintf(tmp, sizeof tmp, "%s%lld", i ? ", " : "", (long long)shape[i]);
        pb_str(&b, tmp);
    }
    pb_str(&b, "]");
    return buf;
}
