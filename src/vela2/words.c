/* Word units and the span decoder (reference-profiles-spans.md 3.3; compared with the
 * independent Python implementation tools/vela2_words_oracle.py by tests/test_vela2_words.c).
 *
 * The reference runs its patterns with Python's `re` on str. PCRE2 in UTF + UCP mode reads the
 * same patterns the same way, with two classes written out: Python's \s (str.isspace: it
 * includes U+001C..U+001F, which PCRE2's \s does not) and \w, which PCRE2 10.42 with UCP
 * reads as \p{L}\p{N}_ exactly as Python 3.11 does (checked over every code point). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "vela2/words.h"

#include <math.h>
#include <pcre2.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* The packages' CJK class, code point for code point; the quirky U+8C48..U+FAFF range (an
 * NFC-normalised U+F900 in the released source) also covers Hangul and more, kept for parity. */
#define CJK                                                                                        \
    "\\x{2e80}-\\x{2fff}\\x{3000}-\\x{303f}\\x{3040}-\\x{30ff}\\x{3100}-\\x{31ff}\\x{3400}-\\x{4dbf}" \
    "\\x{4e00}-\\x{9fff}\\x{a000}-\\x{a4cf}\\x{ac00}-\\x{d7af}\\x{8c48}-\\x{faff}\\x{fe30}-\\x{fe4f}" \
    "\\x{ff00}-\\x{ffef}"
/* Python's \s on str (str.isspace). */
#define SP                                                                                         \
    "\\t\\n\\x0b\\f\\r\\x1c-\\x20\\x85\\xa0\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}"  \
    "\\x{205f}\\x{3000}"
#define TRAIL ".,;:!?)\\]}>\"'\\x{201d}\\x{2019}\\x{bb}"

/* _WORD (re.VERBOSE | re.IGNORECASE): URL, e-mail, handle, one CJK char, a word of letters and
 * digits joined by - or _, any other non-space char. */
static const char WORD_RE[] =
    "(?:https?://|www\\.)[^" SP CJK "]+?(?=[" TRAIL "]*(?![^" SP CJK "]))"
    "|[a-z0-9._%+-]+@[a-z0-9.-]+\\.[a-z]{2,}"
    "|@[a-z0-9_]+"
    "|[" CJK "]"
    "|[^\\W" CJK "]+(?:[-_][^\\W" CJK "]+)*"
    "|[^" SP "]";
/* _UNIT (no flags): a URL, a run of letters/digits (not CJK, not _) and @._-+, any non-space. */
#define UNIT_BODY "[^" SP "\\]\\)\\}>\\x{300c}\\x{300d}\\x{300e}\\x{300f}\"'\\x{201c}\\x{201d}" CJK "]"
static const char UNIT_RE[] = "(?:https?://|www\\.)" UNIT_BODY "+?(?=[.,;:!?]*(?!" UNIT_BODY "))"
                              "|(?:(?![" CJK "])[^\\W_]|[@._\\-+])+"
                              "|[^" SP "]";
static const char URL_START_RE[] = "(?:https?://|www\\.)";

static pcre2_code *re_word, *re_unit, *re_url;
static pthread_once_t re_once = PTHREAD_ONCE_INIT;

static pcre2_code *compile(const char *pat, uint32_t extra) {
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *c = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK | extra,
                                  &ec, &eo, NULL);
    if (c) pcre2_jit_compile(c, PCRE2_JIT_COMPLETE); /* same matches, faster; may be unavailable */
    return c;
}

static void re_init(void) {
    re_word = compile(WORD_RE, PCRE2_CASELESS);
    re_unit = compile(UNIT_RE, 0);
    re_url = compile(URL_START_RE, PCRE2_CASELESS | PCRE2_ANCHORED);
}

static bool re_ready(void) {
    pthread_once(&re_once, re_init);
    return re_word && re_unit && re_url;
}

bool v2_py_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f ||
           c == 0x3000;
}

static bool is_cjk(uint32_t c) {
    static const uint32_t r[][2] = {{0x2e80, 0x2fff}, {0x3000, 0x303f}, {0x3040, 0x30ff}, {0x3100, 0x31ff},
                                    {0x3400, 0x4dbf}, {0x4e00, 0x9fff}, {0xa000, 0xa4cf}, {0xac00, 0xd7af},
                                    {0x8c48, 0xfaff}, {0xfe30, 0xfe4f}, {0xff00, 0xffef}};
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++)
        if (c >= r[i][0] && c <= r[i][1]) return true;
    return false;
}

static bool is_edge(uint32_t c) {
    static const uint32_t e[] = {'[', ']', '(', ')', '{', '}', '<', '>', 0x300c, 0x300d, 0x300e, 0x300f,
                                 0x3010, 0x3011, 0x300a, 0x300b, 0x3008, 0x3009, '"', '\'', 0x201c, 0x201d,
                                 0x2018, 0x2019, 0xab, 0xbb, 0x2039, 0x203a};
    for (size_t i = 0; i < sizeof e / sizeof e[0]; i++)
        if (c == e[i]) return true;
    return false;
}

static bool is_url_trail(uint32_t c) { return c && strchr(".,;:!?)", (int)c) && c < 0x80; }

vsr_status v2_text_init(v2_text *t, const char *s, size_t len, vsr_err *err) {
    memset(t, 0, sizeof *t);
    t->s = s;
    t->len = len;
    t->cp = malloc(sizeof *t->cp * (len + 1));
    t->byte = malloc(sizeof *t->byte * (len + 1));
    if (!t->cp || !t->byte) {
        v2_text_free(t);
        return vsr_err_set(err, VSR_E_NOMEM, "out of memory for a text of %zu bytes", len);
    }
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    int32_t n = 0;
    while (i < len) {
        uint32_t c = u[i];
        int k = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
        if (i + (size_t)k > len) {
            v2_text_free(t);
            return vsr_err_set(err, VSR_E_INVALID, "the text is not valid UTF-8 (byte %zu)", i);
        }
        if (k > 1) {
            c &= 0x3fu >> (k - 1);
            for (int j = 1; j < k; j++) c = (c << 6) | (u[i + (size_t)j] & 0x3fu);
        }
        t->byte[n] = (int32_t)i;
        t->cp[n++] = c;
        i += (size_t)k;
    }
    t->byte[n] = (int32_t)len;
    t->n = n;
    return VSR_OK;
}

void v2_text_free(v2_text *t) {
    free(t->cp);
    free(t->byte);
    t->cp = NULL;
    t->byte = NULL;
}

/* The code point at byte offset b (a match boundary, so always a code point start). */
static int32_t cp_at(const v2_text *t, size_t b) {
    int32_t lo = 0, hi = t->n;
    while (lo < hi) {
        int32_t mid = (lo + hi) / 2;
        if ((size_t)t->byte[mid] < b) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Python's finditer over the text: every match in order (none of these patterns matches the
 * empty string). Calls fn with code point ranges; returns the count or -1. */
static int find_all(const pcre2_code *re, const v2_text *t, void (*fn)(void *, int, v2_range), void *ctx) {
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    if (!md) return -1;
    int count = 0;
    size_t at = 0;
    while (at < t->len) {
        int rc = pcre2_match(re, (PCRE2_SPTR)t->s, t->len, at, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc < 0) break;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        if (ov[1] <= ov[0]) break; /* cannot happen: no alternative matches empty */
        fn(ctx, count++, (v2_range){cp_at(t, ov[0]), cp_at(t, ov[1])});
        at = ov[1];
    }
    pcre2_match_data_free(md);
    return count;
}

typedef struct range_list {
    v2_range *r;
    int n, cap;
    bool oom;
} range_list;

static void push_range(void *ctx, int i, v2_range r) {
    range_list *l = ctx;
    if (l->oom) return;
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 64;
        v2_range *p = realloc(l->r, sizeof *p * (size_t)cap);
        if (!p) {
            l->oom = true;
            return;
        }
        l->r = p;
        l->cap = cap;
    }
    l->r[l->n++] = r;
}

int v2_split_words(const v2_text *t, v2_range **out) {
    *out = NULL;
    if (!re_ready()) return -1;
    range_list l = {0};
    if (find_all(re_word, t, push_range, &l) < 0 || l.oom) {
        free(l.r);
        return -1;
    }
    *out = l.r;
    return l.n;
}

int v2_words_of(const v2_range *units, int n_units, const v2_range *tok, int n_tok, v2_range *words,
                int32_t *first) {
    if (n_units == 0 || n_tok == 0) return 0;
    int32_t *reach = malloc(sizeof *reach * (size_t)n_tok);
    if (!reach) return -1;
    int32_t best = -1;
    for (int i = 0; i < n_tok; i++) {
        if (tok[i].end > tok[i].start && tok[i].end > best) best = tok[i].end;
        reach[i] = best;
    }
    int n = 0;
    for (int w = 0; w < n_units; w++) {
        /* the first token whose running end passes the word start (reach is non-decreasing) */
        int lo = 0, hi = n_tok;
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (reach[mid] <= units[w].start) lo = mid + 1;
            else hi = mid;
        }
        int k = lo;
        while (k < n_tok && !(tok[k].end > tok[k].start)) k++;
        if (k < n_tok && tok[k].start < units[w].end) {
            words[n] = units[w];
            first[n++] = k;
        }
    }
    free(reach);
    return n;
}

typedef struct unit_fill {
    int32_t *unit;
} unit_fill;

static void fill_unit(void *ctx, int i, v2_range r) {
    unit_fill *f = ctx;
    for (int32_t c = r.start; c < r.end; c++) f->unit[c] = i;
}

int32_t *v2_units(const v2_text *t) {
    if (!re_ready()) return NULL;
    int32_t *u = malloc(sizeof *u * ((size_t)t->n + 1));
    if (!u) return NULL;
    for (int32_t i = 0; i <= t->n; i++) u[i] = -1;
    unit_fill f = {u};
    if (find_all(re_unit, t, fill_unit, &f) < 0) {
        free(u);
        return NULL;
    }
    return u;
}

int32_t v2_word_unit(const v2_text *t, const int32_t *units, v2_range w) {
    int32_t i = w.start;
    while (i < w.end && v2_py_space(t->cp[i])) i++;
    return i < w.end && i < t->n ? units[i] : -1;
}

static bool url_start_at(const v2_text *t, int32_t at) {
    if (!re_ready() || at >= t->n) return false;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re_url, NULL);
    if (!md) return false;
    int rc = pcre2_match(re_url, (PCRE2_SPTR)t->s, t->len, (PCRE2_SIZE)t->byte[at], PCRE2_NO_UTF_CHECK, md, NULL);
    pcre2_match_data_free(md);
    return rc >= 0;
}

v2_range v2_trim(const v2_text *t, v2_range r) {
    int32_t s = r.start, e = r.end;
    while (s < e && (v2_py_space(t->cp[s]) || is_edge(t->cp[s]))) s++;
    while (e > s && (v2_py_space(t->cp[e - 1]) || is_edge(t->cp[e - 1]))) e--;
    if (!url_start_at(t, s)) return (v2_range){s, e};
    for (int32_t i = s; i < e; i++)
        if (is_cjk(t->cp[i])) {
            e = i;
            break;
        }
    while (e > s && (is_url_trail(t->cp[e - 1]) || is_edge(t->cp[e - 1]) || v2_py_space(t->cp[e - 1]))) e--;
    return (v2_range){s, e};
}

/* numpy's pairwise summation of float32 (PW_BLOCKSIZE 128, 8 partial sums). */
static float pairwise_f32(const float *a, int n) {
    if (n < 8) {
        float r = 0.0f;
        for (int i = 0; i < n; i++) r += a[i];
        return r;
    }
    if (n <= 128) {
        float r[8];
        for (int j = 0; j < 8; j++) r[j] = a[j];
        int i;
        for (i = 8; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; j++) r[j] += a[i + j];
        float res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) res += a[i];
        return res;
    }
    int n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise_f32(a, n2) + pairwise_f32(a + n2, n - n2);
}

float v2_mean_f32(const float *a, int n) {
    float s = 0.0f + pairwise_f32(a, n);
    return s / (float)n;
}

int v2_decode_spans(const v2_text *t, const int32_t *units, const v2_range *words, int n_words,
                    const float *probs, int n_labels, double threshold, v2_span **out) {
    *out = NULL;
    if (n_words <= 0 || n_labels <= 0) return 0;
    int *label = malloc(sizeof *label * (size_t)n_words);
    float *bestp = malloc(sizeof *bestp * (size_t)n_words);
    int32_t *wunit = malloc(sizeof *wunit * (size_t)n_words);
    float *tmp = malloc(sizeof *tmp * (size_t)n_words);
    v2_span *spans = NULL;
    int n_spans = -1;
    if (!label || !bestp || !wunit || !tmp) goto done;
    float thr = (float)threshold; /* the packages compare in float32 */
    for (int w = 0; w < n_words; w++) {
        const float *row = probs + (size_t)w * (size_t)n_labels;
        int b = 0;
        for (int l = 1; l < n_labels; l++)
            if (row[l] > row[b]) b = l;
        bestp[w] = row[b];
        label[w] = row[b] > thr ? b : -1;
        wunit[w] = v2_word_unit(t, units, words[w]);
    }
    /* Inside one unit run: conflicting labels go to the largest summed probability (the first
     * label to appear on a tie), and the gap between the first and last labelled word is
     * filled with that label. */
    for (int i = 0; i < n_words;) {
        int j = i;
        while (j + 1 < n_words && wunit[j + 1] == wunit[i]) j++;
        if (wunit[i] >= 0) {
            int lo = -1, hi = -1;
            bool mixed = false;
            for (int k = i; k <= j; k++)
                if (label[k] >= 0) {
                    if (lo < 0) lo = k;
                    else if (label[k] != label[lo]) mixed = true;
                    hi = k;
                }
            if (lo >= 0 && mixed) {
                /* votes in order of first appearance; sums in float64 as Python floats */
                int winner = -1;
                double top = -1.0;
                for (int k = lo; k <= hi; k++) {
                    if (label[k] < 0) continue;
                    bool seen = false;
                    for (int q = lo; q < k; q++)
                        if (label[q] == label[k]) seen = true;
                    if (seen) continue;
                    double sum = 0.0;
                    for (int q = k; q <= hi; q++)
                        if (label[q] == label[k]) sum += (double)bestp[q];
                    if (sum > top) {
                        top = sum;
                        winner = label[k];
                    }
                }
                for (int k = lo; k <= hi; k++)
                    if (label[k] >= 0) label[k] = winner;
            }
            if (lo >= 0)
                for (int k = lo + 1; k < hi; k++)
                    if (label[k] < 0) label[k] = label[lo];
        }
        i = j + 1;
    }
    spans = malloc(sizeof *spans * (size_t)n_words);
    if (!spans) goto done;
    n_spans = 0;
    for (int i = 0; i < n_words;) {
        if (label[i] < 0) {
            i++;
            continue;
        }
        int j = i;
        while (j + 1 < n_words && label[j + 1] == label[i]) j++;
        v2_range r = v2_trim(t, (v2_range){words[i].start, words[j].end});
        if (r.end > r.start) {
            for (int k = i; k <= j; k++) tmp[k - i] = probs[(size_t)k * (size_t)n_labels + (size_t)label[i]];
            spans[n_spans++] = (v2_span){label[i], r.start, r.end, v2_mean_f32(tmp, j - i + 1)};
        }
        i = j + 1;
    }
done:
    free(label);
    free(bestp);
    free(wunit);
    free(tmp);
    if (n_spans <= 0) {
        free(spans);
        spans = NULL;
    }
    *out = spans;
    return n_spans;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Index of the first element >= v in sorted s. */
static int lower_bound(const int32_t *s, int n, int32_t v) {
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (s[mid] < v) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

int v2_word_windows(const int32_t *first, int n_first, int length, int window, int stride, v2_range **out) {
    *out = NULL;
    int32_t *s = malloc(sizeof *s * (size_t)(n_first > 0 ? n_first : 1));
    if (!s) return -1;
    memcpy(s, first, sizeof *s * (size_t)n_first);
    qsort(s, (size_t)n_first, sizeof *s, cmp_i32);
    int n = 0;
    for (int i = 0; i < n_first; i++)
        if (n == 0 || s[i] != s[n - 1]) s[n++] = s[i];
    int cap = 8, count = 0;
    v2_range *w = malloc(sizeof *w * (size_t)cap);
    if (!w) {
        free(s);
        return -1;
    }
    if (n == 0) {
        w[0] = (v2_range){0, length};
        free(s);
        *out = w;
        return 1;
    }
    int32_t start = s[0];
    for (;;) {
        int64_t limit = (int64_t)start + window;
        int32_t end;
        if (limit >= length) {
            end = length;
        } else {
            int inside = lower_bound(s, n, (int32_t)limit) - 1; /* last word start < limit */
            end = inside >= 0 && s[inside] > start ? s[inside] : (int32_t)limit;
        }
        if (count == cap) {
            cap *= 2;
            v2_range *p = realloc(w, sizeof *p * (size_t)cap);
            if (!p) {
                free(w);
                free(s);
                return -1;
            }
            w = p;
        }
        w[count++] = (v2_range){start, end};
        if (end >= length) break;
        int later = lower_bound(s, n, start + stride); /* first word start in [start+stride, end) */
        start = later < n && s[later] < end ? s[later] : end;
    }
    free(s);
    *out = w;
    return count;
}

double v2_pii_length_threshold(int64_t tokens, const double *n_tokens, const double *thresholds, int n) {
    double x = log((double)(tokens > 1 ? tokens : 1));
    double x0 = log(n_tokens[0]), xn = log(n_tokens[n - 1]);
    if (x <= x0) return exp(log(thresholds[0]));
    if (x >= xn) return exp(log(thresholds[n - 1]));
    int k = 0;
    while (k + 2 < n && log(n_tokens[k + 1]) < x) k++;
    double xa = log(n_tokens[k]), xb = log(n_tokens[k + 1]);
    double ya = log(thresholds[k]), yb = log(thresholds[k + 1]);
    return exp(ya + (x - xa) * (yb - ya) / (xb - xa));
}
