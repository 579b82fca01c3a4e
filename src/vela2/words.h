/* Words, units and the span decoder of the Vela 2.0 decision layer (reference-profiles-spans.md
 * section 3.3), as pure functions of text, token offsets and probabilities.
 *
 * Every offset here is a Unicode code point index into the text (end exclusive), as the
 * reference's Python strings index. */
#ifndef VSR_VELA2_WORDS_H
#define VSR_VELA2_WORDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vsr/error.h"

/* A UTF-8 text with its code points: cp[i] is code point i, byte[i] its first byte (byte[n]
 * = len), so code point ranges slice the UTF-8 bytes. */
typedef struct v2_text {
    const char *s;
    size_t len;
    int32_t n;
    uint32_t *cp;
    int32_t *byte;
} v2_text;

/* Decodes valid UTF-8 (jansson guarantees it for request strings). */
vsr_status v2_text_init(v2_text *t, const char *s, size_t len, vsr_err *err);
void v2_text_free(v2_text *t);

typedef struct v2_range {
    int32_t start, end;
} v2_range;

/* The `_WORD` units of the text (GLiNER2-style: CJK one by one, URLs, e-mails and handles
 * whole). *out is malloc'd (NULL when there are none). Returns the count, -1 on no memory. */
int v2_split_words(const v2_text *t, v2_range **out);

/* words_of: each word with the first non-empty token whose running end passes the word start;
 * words no token covers are dropped. tok[i] = token i's code point range (empty ranges are
 * tokens that stand for no text). words/first must hold n_units entries. Returns the count. */
int v2_words_of(const v2_range *units, int n_units, const v2_range *tok, int n_tok, v2_range *words,
                int32_t *first);

/* unit[i] = the `_UNIT` match holding code point i, or -1 (n + 1 entries, malloc'd). */
int32_t *v2_units(const v2_text *t);
/* The unit of a word: that of its first non-space code point, -1 when none. */
int32_t v2_word_unit(const v2_text *t, const int32_t *units, v2_range w);
/* Trims whitespace and EDGE characters, and a URL's CJK tail and trailing .,;:!?) */
v2_range v2_trim(const v2_text *t, v2_range r);
bool v2_py_space(uint32_t cp);

typedef struct v2_span {
    int label;           /* index into the question's labels */
    int32_t start, end;  /* code points, end exclusive */
    float probability;   /* mean over the span's words of that label's probability (float32) */
} v2_span;

/* decode_spans: probs is [n_words][n_labels] float32 (cast from the float64 sigmoid),
 * compared with the threshold in float32. *out is malloc'd (NULL when none). Returns the
 * count, -1 on no memory. */
int v2_decode_spans(const v2_text *t, const int32_t *units, const v2_range *words, int n_words,
                    const float *probs, int n_labels, double threshold, v2_span **out);

/* numpy's float32 mean (pairwise summation from 0, then one float32 division). */
float v2_mean_f32(const float *a, int n);

/* word_windows: token windows [a, b) over a part of `length` tokens that start at word starts
 * (first[] sorted or not, duplicates allowed) and never split a word. *out is malloc'd.
 * Returns the count, -1 on no memory. */
int v2_word_windows(const int32_t *first, int n_first, int length, int window, int stride,
                    v2_range **out);

/* The PII length rule: exp(interp(log(max(tokens, 1)), log n_tokens, log threshold)). */
double v2_pii_length_threshold(int64_t tokens, const double *n_tokens, const double *thresholds,
                               int n_anchors);

#endif
