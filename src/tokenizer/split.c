/* Pre-tokenization with the Qwen2 split pattern, two ways:
 *   vsr_split_fast   a hand-written walk over character classes (utf8proc categories);
 *   vsr_split_pcre2  the pattern itself through PCRE2, kept as the oracle.
 * Both give what Hugging Face `tokenizers` (Oniguruma, "Isolated" split) gives: every
 * match is a piece and so is every gap between matches (the pattern has none). */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer/tokenizer_internal.h"

/* ---------------- UTF-8 ---------------- */

size_t vsr_utf8_invalid_at(const char *str, size_t n) {
    const uint8_t *s = (const uint8_t *)str;
    size_t i = 0;
    while (i < n) {
        /* ASCII fast path, 8 bytes at a time */
        while (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= n) break;
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t need;
        uint32_t min;
        if (c >= 0xC2 && c <= 0xDF) need = 1, min = 0x80;
        else if (c >= 0xE0 && c <= 0xEF) need = 2, min = 0x800;
        else if (c >= 0xF0 && c <= 0xF4) need = 3, min = 0x10000;
        else return i;
        if (i + need >= n) return i; /* truncated */
        uint32_t cp = c & (0x3Fu >> need);
        for (size_t k = 1; k <= need; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return i;
            cp = (cp << 6) | (s[i + k] & 0x3Fu);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
        i += need + 1;
    }
    return (size_t)-1;
}

/* Decodes one code point of valid UTF-8 at s[i]; *len gets its byte count. */
static inline uint32_t dec(const uint8_t *s, size_t i, size_t *len) {
    uint8_t c = s[i];
    if (c < 0x80) return *len = 1, c;
    if (c < 0xE0) return *len = 2, ((uint32_t)(c & 0x1F) << 6) | (s[i + 1] & 0x3Fu);
    if (c < 0xF0)
        return *len = 3,
               ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3Fu);
    return *len = 4, ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[i + 1] & 0x3F) << 12) |
                         ((uint32_t)(s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3Fu);
}

/* ---------------- character classes ---------------- */

enum { CL_P = 0, CL_L = 1, CL_N = 2, CL_WS = 3, CL_NL = 4 }; /* NL: \r or \n (also whitespace) */

/* Oniguruma's Unicode \s (= the White_Space property): U+0009-000D, U+0020, U+0085,
 * U+00A0, U+1680, U+2000-200A, U+2028, U+2029, U+202F, U+205F, U+3000. Not U+180E,
 * U+200B, U+FEFF or U+001C-001F (checked against `tokenizers` by the corpus). */
bool vsr_is_white_space(uint32_t c) {
    if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0D);
    if (c < 0x85) return false;
    return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
           c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

static uint8_t class_slow(uint32_t c) {
    if (c == '\r' || c == '\n') return CL_NL;
    if (vsr_is_white_space(c)) return CL_WS;
    switch (utf8proc_category((utf8proc_int32_t)c)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
        return CL_L;
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
        return CL_N;
    default:
        return CL_P;
    }
}

/* Class of every BMP code point, built once (64 KiB). */
static uint8_t bmp_class[0x10000];
static pthread_once_t bmp_once = PTHREAD_ONCE_INIT;
static void bmp_init(void) {
    for (uint32_t c = 0; c < 0x10000; c++) bmp_class[c] = class_slow(c);
}

static inline uint8_t cls(uint32_t c) { return c < 0x10000 ? bmp_class[c] : class_slow(c); }

bool vsr_is_alnum(uint32_t c) {
    pthread_once(&bmp_once, bmp_init);
    uint8_t k = cls(c);
    return k == CL_L || k == CL_N;
}

/* Case-insensitive letter of a contraction suffix: folds S/s/U+017F (long s) to 's'. */
static inline uint32_t fold(uint32_t c) {
    if (c >= 'A' && c <= 'Z') return c + 32;
    if (c == 0x17F) return 's';
    return c;
}

/* Walks the Qwen2 pattern's alternatives in order at each position (leftmost-first
 * semantics, each alternative's backtracking resolved by hand):
 *   1 (?i:'s|'t|'re|'ve|'m|'ll|'d)   2 [^\r\n\p{L}\p{N}]?\p{L}+   3 \p{N}
 *   4 ' '?[^\s\p{L}\p{N}]+[\r\n]*    5 \s*[\r\n]+   6 \s+(?!\S)   7 \s+ */
int vsr_split_fast(const char *str, size_t n, vsr_piece_fn fn, void *ctx) {
    pthread_once(&bmp_once, bmp_init);
    const uint8_t *s = (const uint8_t *)str;
    size_t i = 0;
    while (i < n) {
        size_t l0, l1 = 0, end;
        uint32_t c0 = dec(s, i, &l0);
        uint8_t k0 = cls(c0);
        uint32_t c1 = 0;
        uint8_t k1 = 0xFF; /* class of the next char; 0xFF: none */
        if (i + l0 < n) {
            c1 = dec(s, i + l0, &l1);
            k1 = cls(c1);
        }
        if (c0 == '\'' && k1 != 0xFF) { /* 1 */
            uint32_t f1 = fold(c1);
            end = 0;
            if (f1 == 's' || f1 == 't' || f1 == 'm' || f1 == 'd') end = i + l0 + l1;
            else if ((f1 == 'r' || f1 == 'v' || f1 == 'l') && i + l0 + l1 < n) {
                size_t l2;
                uint32_t f2 = fold(dec(s, i + l0 + l1, &l2));
                if ((f1 == 'l' && f2 == 'l') || (f1 != 'l' && f2 == 'e')) end = i + l0 + l1 + l2;
            }
            if (end) goto emit;
        }
        if (k0 == CL_L || ((k0 == CL_P || k0 == CL_WS) && k1 == CL_L)) { /* 2 */
            end = k0 == CL_L ? i + l0 : i + l0 + l1;
            while (end < n) {
                size_t l;
                if (cls(dec(s, end, &l)) != CL_L) break;
                end += l;
            }
            goto emit;
        }
        if (k0 == CL_N) { /* 3 */
            end = i + l0;
            goto emit;
        }
        if (k0 == CL_P || (c0 == ' ' && k1 == CL_P)) { /* 4 */
            end = k0 == CL_P ? i + l0 : i + l0 + l1;
            while (end < n) {
                size_t l;
                if (cls(dec(s, end, &l)) != CL_P) break;
                end += l;
            }
            while (end < n && (s[end] == '\r' || s[end] == '\n')) end++;
            goto emit;
        }
        { /* k0 is whitespace: 5, 6, 7 over the whitespace run [i, j) */
            size_t j = i, last_nl = (size_t)-1, last_start = i;
            while (j < n) {
                size_t l;
                uint8_t k = cls(dec(s, j, &l));
                if (k != CL_WS && k != CL_NL) break;
                if (k == CL_NL) last_nl = j;
                last_start = j;
                j += l;
            }
            if (last_nl != (size_t)-1) end = last_nl + 1; /* 5: up to the last \r or \n */
            else if (j == n || last_start == i) end = j;  /* 6 at the end, or 7 */
            else end = last_start;                        /* 6: leave the last one */
        }
    emit:;
        int rc = fn(ctx, i, end);
        if (rc) return rc;
        i = end;
    }
    return 0;
}

/* ---------------- PCRE2 ---------------- */

#define WS_ITEMS "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

vsr_status vsr_pcre_split_init(vsr_pcre_split *p, const char *pat, vsr_err *err) {
    memset(p, 0, sizeof *p);
    /* Rewrite \s and \S (the only escapes whose meaning differs between the two engines). */
    size_t cap = strlen(pat) * 8 + 512, o = 0;
    char *q = malloc(cap);
    if (!q) return vsr_err_set(err, VSR_E_NOMEM, "tokenizer split pattern: out of memory");
    bool in_class = false;
    for (size_t i = 0; pat[i]; i++) {
        if (o + 200 > cap) {
            free(q);
            return vsr_err_set(err, VSR_E_INTERNAL, "tokenizer split pattern: too long");
        }
        char c = pat[i];
        if (c == '\\' && pat[i + 1]) {
            char e = pat[++i];
            const char *rep = NULL;
            if (e == 's') rep = in_class ? WS_ITEMS : "[" WS_ITEMS "]";
            else if (e == 'S' && !in_class) rep = "[^" WS_ITEMS "]";
            else if (e == 'S') {
                free(q);
                return vsr_err_set(err, VSR_E_UNSUPPORTED,
                                   "tokenizer split pattern: \\S inside a character class");
            }
            if (rep) {
                memcpy(q + o, rep, strlen(rep));
                o += strlen(rep);
            }
            else q[o++] = '\\', q[o++] = e;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = true;
            q[o++] = c;
            if (pat[i + 1] == '^') q[o++] = pat[++i];
            if (pat[i + 1] == ']') q[o++] = pat[++i]; /* a leading ] is literal */
            continue;
        }
        if (in_class && c == ']') in_class = false;
        q[o++] = c;
    }
    q[o] = 0;
    int ec;
    PCRE2_SIZE eo;
    p->code = pcre2_compile((PCRE2_SPTR)q, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
    if (!p->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        vsr_err_set(err, VSR_E_FORMAT, "tokenizer split pattern: PCRE2 rejects it at offset %zu: %s",
                    (size_t)eo, (const char *)msg);
        free(q);
        return VSR_E_FORMAT;
    }
    free(q);
    p->jit = pcre2_jit_compile(p->code, PCRE2_JIT_COMPLETE) == 0;
    return VSR_OK;
}

void vsr_pcre_split_free(vsr_pcre_split *p) {
    if (p && p->code) pcre2_code_free(p->code);
    if (p) p->code = NULL;
}

int vsr_split_pcre2(const vsr_pcre_split *p, pcre2_match_data *md, const char *s, size_t n,
                    vsr_piece_fn fn, void *ctx) {
    size_t off = 0;
    while (off < n) {
        int rc = p->jit ? pcre2_jit_match(p->code, (PCRE2_SPTR)s, n, off, PCRE2_NOTEMPTY, md, NULL)
                        : pcre2_match(p->code, (PCRE2_SPTR)s, n, off, PCRE2_NOTEMPTY | PCRE2_NO_UTF_CHECK,
                                      md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) return -1;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        if (ov[0] > off) { /* a gap between matches is a piece of its own */
            int r = fn(ctx, off, ov[0]);
            if (r) return r;
        }
        int r = fn(ctx, ov[0], ov[1]);
        if (r) return r;
        off = ov[1];
    }
    if (off < n) return fn(ctx, off, n);
    return 0;
}
