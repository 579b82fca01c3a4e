/* Word units, words_of, units, trimming, span decoding, windows and the PII length rule against
 * the independent Python implementation of the documented rules (tools/vela2_words_oracle.py,
 * its output committed as tests/data/vela2_words.json). Texts are compared by slicing the UTF-8
 * with the code point offsets, against Python's own slices. */
#include <jansson.h>
#include <math.h>

#include "test.h"
#include "vela2/words.h"

#ifndef VSR_TEST_DATA
#define VSR_TEST_DATA "tests/data"
#endif

static json_t *corpus;

static json_t *load(void) {
    if (corpus) return corpus;
    json_error_t je;
    corpus = json_load_file(VSR_TEST_DATA "/vela2_words.json", 0, &je);
    if (!corpus) fprintf(stderr, "cannot read vela2_words.json: %s\n", je.text);
    return corpus;
}

static v2_range pair(const json_t *a) {
    return (v2_range){(int32_t)json_integer_value(json_array_get(a, 0)), (int32_t)json_integer_value(json_array_get(a, 1))};
}

TEST(split_and_words_of) {
    json_t *d = load();
    CHECK(d != NULL);
    if (!d) return;
    size_t ci;
    json_t *c;
    int words_seen = 0;
    json_array_foreach(json_object_get(d, "cases"), ci, c) {
        const char *s = json_string_value(json_object_get(c, "text"));
        v2_text t;
        vsr_err err = {0};
        CHECK_OK(v2_text_init(&t, s, strlen(s), &err), err);
        v2_range *units = NULL;
        int n = v2_split_words(&t, &units);
        json_t *split = json_object_get(c, "split");
        CHECK_MSG(n == (int)json_array_size(split), "case %zu: %d words, want %zu", ci, n, json_array_size(split));
        for (int i = 0; i < n && i < (int)json_array_size(split); i++) {
            v2_range want = pair(json_array_get(split, (size_t)i));
            CHECK_MSG(units[i].start == want.start && units[i].end == want.end,
                      "case %zu word %d: [%d,%d) want [%d,%d)", ci, i, units[i].start, units[i].end, want.start,
                      want.end);
        }
        json_t *offs = json_object_get(c, "offsets");
        int n_tok = (int)json_array_size(offs);
        v2_range *tok = malloc(sizeof *tok * (size_t)(n_tok + 1));
        for (int i = 0; i < n_tok; i++) tok[i] = pair(json_array_get(offs, (size_t)i));
        v2_range *words = malloc(sizeof *words * (size_t)(n + 1));
        int32_t *first = malloc(sizeof *first * (size_t)(n + 1));
        int nw = v2_words_of(units, n, tok, n_tok, words, first);
        json_t *ww = json_object_get(c, "words");
        CHECK_MSG(nw == (int)json_array_size(ww), "case %zu: %d covered words, want %zu", ci, nw, json_array_size(ww));
        int32_t *umap = v2_units(&t);
        CHECK(umap != NULL);
        json_t *wu = json_object_get(c, "word_units");
        for (int i = 0; i < nw && i < (int)json_array_size(ww); i++) {
            json_t *w = json_array_get(ww, (size_t)i);
            CHECK_MSG(words[i].start == json_integer_value(json_array_get(w, 0)) &&
                          words[i].end == json_integer_value(json_array_get(w, 1)) &&
                          first[i] == json_integer_value(json_array_get(w, 2)),
                      "case %zu covered word %d", ci, i);
            if (json_is_array(wu))
                CHECK_MSG(v2_word_unit(&t, umap, words[i]) == json_integer_value(json_array_get(wu, (size_t)i)),
                          "case %zu word %d: unit %d want %lld", ci, i, v2_word_unit(&t, umap, words[i]),
                          (long long)json_integer_value(json_array_get(wu, (size_t)i)));
            words_seen++;
        }
        free(umap);
        free(units);
        free(tok);
        free(words);
        free(first);
        v2_text_free(&t);
    }
    CHECK(words_seen > 1000);
}

TEST(decode_spans) {
    json_t *d = load();
    if (!d) return;
    size_t ci;
    json_t *c;
    int spans_seen = 0;
    json_array_foreach(json_object_get(d, "cases"), ci, c) {
        const char *s = json_string_value(json_object_get(c, "text"));
        v2_text t;
        vsr_err err = {0};
        CHECK_OK(v2_text_init(&t, s, strlen(s), &err), err);
        json_t *ww = json_object_get(c, "words"), *labels = json_object_get(c, "labels");
        json_t *pr = json_object_get(c, "probabilities");
        int nw = (int)json_array_size(ww), nl = (int)json_array_size(labels);
        v2_range *words = malloc(sizeof *words * (size_t)(nw + 1));
        float *p = malloc(sizeof *p * (size_t)(nw * nl + 1));
        for (int i = 0; i < nw; i++) {
            words[i] = pair(json_array_get(ww, (size_t)i));
            for (int l = 0; l < nl; l++)
                p[i * nl + l] = (float)json_real_value(json_array_get(json_array_get(pr, (size_t)i), (size_t)l));
        }
        int32_t *umap = v2_units(&t);
        v2_span *sp = NULL;
        int n = v2_decode_spans(&t, umap, words, nw, p, nl, json_number_value(json_object_get(c, "threshold")), &sp);
        json_t *want = json_object_get(c, "spans");
        CHECK_MSG(n == (int)json_array_size(want), "case %zu: %d spans, want %zu", ci, n, json_array_size(want));
        for (int i = 0; i < n && i < (int)json_array_size(want); i++) {
            json_t *w = json_array_get(want, (size_t)i);
            const char *wt = json_string_value(json_object_get(w, "text"));
            int blen = t.byte[sp[i].end] - t.byte[sp[i].start];
            CHECK_MSG(sp[i].start == json_integer_value(json_object_get(w, "start")) &&
                          sp[i].end == json_integer_value(json_object_get(w, "end")) &&
                          !strcmp(json_string_value(json_array_get(labels, (size_t)sp[i].label)),
                                  json_string_value(json_object_get(w, "label"))),
                      "case %zu span %d: [%d,%d) label %d", ci, i, sp[i].start, sp[i].end, sp[i].label);
            CHECK_MSG((size_t)blen == strlen(wt) && !memcmp(s + t.byte[sp[i].start], wt, strlen(wt)),
                      "case %zu span %d: text '%.*s' want '%s'", ci, i, blen, s + t.byte[sp[i].start], wt);
            CHECK_MSG(sp[i].probability == (float)json_number_value(json_object_get(w, "probability")),
                      "case %zu span %d: probability %.9g want %.9g", ci, i, sp[i].probability,
                      json_number_value(json_object_get(w, "probability")));
            spans_seen++;
        }
        free(sp);
        free(umap);
        free(words);
        free(p);
        v2_text_free(&t);
    }
    CHECK(spans_seen > 200);
}

TEST(windows) {
    json_t *d = load();
    if (!d) return;
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(d, "windows"), i, c) {
        json_t *f = json_object_get(c, "first");
        int nf = (int)json_array_size(f);
        int32_t *first = malloc(sizeof *first * (size_t)(nf + 1));
        for (int k = 0; k < nf; k++) first[k] = (int32_t)json_integer_value(json_array_get(f, (size_t)k));
        v2_range *w = NULL;
        int n = v2_word_windows(first, nf, (int)json_integer_value(json_object_get(c, "length")),
                                (int)json_integer_value(json_object_get(c, "window")),
                                (int)json_integer_value(json_object_get(c, "stride")), &w);
        json_t *want = json_object_get(c, "windows");
        CHECK_MSG(n == (int)json_array_size(want), "windows %zu: %d, want %zu", i, n, json_array_size(want));
        for (int k = 0; k < n && k < (int)json_array_size(want); k++) {
            v2_range e = pair(json_array_get(want, (size_t)k));
            CHECK_MSG(w[k].start == e.start && w[k].end == e.end, "windows %zu/%d: [%d,%d) want [%d,%d)", i, k,
                      w[k].start, w[k].end, e.start, e.end);
            if (nf) CHECK(w[k].end - w[k].start <= 1800); /* no word at all: one window of it all */
        }
        free(w);
        free(first);
    }
}

TEST(pii_length_rule) {
    json_t *d = load();
    if (!d) return;
    json_t *a = json_object_get(d, "pii_anchors");
    double nt[8], th[8];
    int na = (int)json_array_size(a);
    for (int k = 0; k < na; k++) {
        nt[k] = json_number_value(json_array_get(json_array_get(a, (size_t)k), 0));
        th[k] = json_number_value(json_array_get(json_array_get(a, (size_t)k), 1));
    }
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(d, "pii"), i, c) {
        double got = v2_pii_length_threshold(json_integer_value(json_object_get(c, "tokens")), nt, th, na);
        double want = json_number_value(json_object_get(c, "threshold"));
        CHECK_MSG(fabs(got - want) <= 1e-12 * want, "tokens %lld: %.17g want %.17g",
                  (long long)json_integer_value(json_object_get(c, "tokens")), got, want);
    }
}

/* Hand-checked cases of the rules themselves (so a wrong oracle cannot pass alone). */
TEST(documented_examples) {
    const char *s = "Hi, I'm Tom Baker (tom.baker@example.com). 東京 https://x.org/a).";
    v2_text t;
    vsr_err err = {0};
    CHECK_OK(v2_text_init(&t, s, strlen(s), &err), err);
    v2_range *u = NULL;
    int n = v2_split_words(&t, &u);
    /* Hi , I ' m Tom Baker ( tom.baker@example.com ) . 東 京 https://x.org/a ) . */
    CHECK(n == 16);
    CHECK(u[8].start == 19 && u[8].end == 40); /* the e-mail whole, code points 19..40 */
    CHECK(u[11].start == 43 && u[11].end == 44 && u[12].start == 44); /* CJK one by one */
    CHECK(u[13].start == 46 && u[13].end == 61); /* the URL without its trailing ")." */
    int32_t *units = v2_units(&t);
    /* "Tom Baker" labelled PERSON, the e-mail EMAIL: two spans, trimmed of the brackets */
    float p[16 * 2] = {0};
    p[5 * 2 + 0] = 0.99f;
    p[6 * 2 + 0] = 0.97f;
    p[8 * 2 + 1] = 0.9f;
    v2_span *sp = NULL;
    int ns = v2_decode_spans(&t, units, u, n, p, 2, 0.5, &sp);
    CHECK(ns == 2);
    if (ns == 2) {
        CHECK(sp[0].label == 0 && sp[0].start == 8 && sp[0].end == 17 && sp[0].probability == 0.98f);
        CHECK(sp[1].label == 1 && sp[1].start == 19 && sp[1].end == 40);
    }
    free(sp);
    /* threshold compared strictly: a word at exactly the threshold is not labelled */
    float q[16 * 2] = {0};
    q[5 * 2] = 0.5f;
    CHECK(v2_decode_spans(&t, units, u, n, q, 2, 0.5, &sp) == 0);
    free(units);
    free(u);
    v2_text_free(&t);
}

int main(void) {
    RUN(split_and_words_of);
    RUN(decode_spans);
    RUN(windows);
    RUN(pii_length_rule);
    RUN(documented_examples);
    json_decref(corpus);
    return test_summary();
}
