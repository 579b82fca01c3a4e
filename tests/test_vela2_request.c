/* The vela2 decision layer without a model: requests, the decoder layout (decoded back to text),
 * rows and windows, truncation, every refusal, and answers as a function of fed logits
 * (thresholds, spans with code point offsets, sets, choice/noul/score shapes, non-finite
 * logits). The package files come from the tiny vela2 fixture. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fixture/vela2_fixture.h"
#include "test.h"
#include "vsr/tokenizer.h"
#include "vsr/vela2_decide.h"

static char dir[256];
static vsr_v2_decider *dec, *dec_small;
static vsr_tokenizer *tok;

static vsr_v2_info tiny_info(int64_t max_length) {
    return (vsr_v2_info){.model_name = "tiny", .max_length = max_length, .pad_token_id = 151643, .head_dim = 32,
                         .span_d = 32, .span_slots = 8, .hybrid_rmax = 48, .window = 40, .stride = 32,
                         .window_above = 48, .has_broad_head = true, .hidden_size = 64};
}

static bool setup(void) {
    snprintf(dir, sizeof dir, "/tmp/vsr_test_vela2_request_%d", (int)getpid());
    vsr_v2_fixture_opts o = {.size = "tiny", .seed = 0};
    vsr_err err = {0};
    if (vsr_v2_fixture_write(dir, &o, NULL, NULL, &err) != VSR_OK) {
        fprintf(stderr, "fixture: %s\n", err.msg);
        return false;
    }
    vsr_v2_info info = tiny_info(4096);
    if (vsr_v2_decider_open_dir(dir, &info, &dec, &err) != VSR_OK) {
        fprintf(stderr, "decider: %s\n", err.msg);
        return false;
    }
    info = tiny_info(300);
    if (vsr_v2_decider_open_dir(dir, &info, &dec_small, &err) != VSR_OK) return false;
    return vsr_tokenizer_open(dir, &tok, &err) == VSR_OK;
}

static char *decode(const int32_t *ids, int n) {
    char *s = NULL;
    size_t len = 0;
    vsr_err err = {0};
    if (vsr_tokenizer_decode(tok, ids, (size_t)n, &s, &len, &err) != VSR_OK) return NULL;
    return s;
}

typedef struct trees {
    int n;
    char *ctx[32];
    int n_blocks[32];
    char *block[32][8];
    vsr_v2_block blk[32][8];
    char *word_tok[32][8][8]; /* the first 8 words' first tokens, decoded */
} trees;

static void collect(void *ctx, const vsr_v2_tree *t) {
    trees *tr = ctx;
    if (tr->n >= 32) return;
    int i = tr->n++;
    tr->ctx[i] = decode(t->ctx, t->n_ctx);
    tr->n_blocks[i] = t->n_blocks;
    for (int k = 0; k < t->n_blocks && k < 8; k++) {
        tr->block[i][k] = decode(t->blocks[k].ids, t->blocks[k].n_ids);
        tr->blk[i][k] = t->blocks[k];
        if (t->blocks[k].kind == VSR_V2_BLOCK_SPAN)
            for (int w = 0; w < t->blocks[k].n_words && w < 8; w++)
                tr->word_tok[i][k][w] = decode(&t->blocks[k].ids[t->blocks[k].word_pos[w]], 1);
    }
}

static void trees_free(trees *t) {
    for (int i = 0; i < t->n; i++) {
        free(t->ctx[i]);
        for (int k = 0; k < t->n_blocks[i] && k < 8; k++) {
            free(t->block[i][k]);
            for (int w = 0; w < 8; w++) free(t->word_tok[i][k][w]);
        }
    }
}

static vsr_v2_job *parse(vsr_v2_decider *d, const char *body, vsr_http_error *he) {
    memset(he, 0, sizeof *he);
    return vsr_v2_parse(d, body, strlen(body), "tiny", he);
}

static const char GOLDEN_STATE[] =
    "{\"request\":\"Hi, I'm Tom Baker (tom.baker@example.com). What is the maximum daily dose of paracetamol for an "
    "adult?\",\"source\":\"For adults, the maximum dose of paracetamol is 4 grams in 24 hours.\",\"answer\":\"Adults "
    "can take up to 6 grams of paracetamol in 24 hours.\"}";

TEST(layout_text) {
    char body[4096];
    snprintf(body, sizeof body,
             "{\"state\":%s,\"questions\":{\"pii\":{\"preset\":\"pii\",\"over\":\"request\"},"
             "\"ok\":{\"type\":\"noul\",\"instructions\":\"Is it fine?\"}}}",
             GOLDEN_STATE);
    vsr_http_error he;
    vsr_v2_job *j = parse(dec, body, &he);
    CHECK_MSG(j != NULL, "%s", he.message);
    if (!j) return;
    trees t = {0};
    vsr_v2_job_trees(j, collect, &t);
    CHECK(t.n == 1 && t.n_blocks[0] == 2); /* one row: the noul and the first span */
    CHECK(!strcmp(t.ctx[0],
                  "Context:\n<segment role=\"user\">\nHi, I'm Tom Baker (tom.baker@example.com). What is the maximum "
                  "daily dose of paracetamol for an adult?\n</segment>\n<segment role=\"context\">\nFor adults, the "
                  "maximum dose of paracetamol is 4 grams in 24 hours.\n</segment>\n<segment role=\"answer\">\nAdults "
                  "can take up to 6 grams of paracetamol in 24 hours.\n</segment>\n"));
    /* the noul: a two-option choice (no/yes) with the abstain option, over every part */
    CHECK(t.blk[0][0].kind == VSR_V2_BLOCK_CANDIDATE && t.blk[0][0].n_options == 3 && !t.blk[0][0].set_bias);
    CHECK_MSG(!strcmp(t.block[0][0],
                      "\n\nTask type: choice\nTarget: user, context, answer\nQuestion:\nIs it fine?\nOptions:\n<option>\n"
                      "{\"description\":\"No. The statement or question is not satisfied.\",\"key\":\"no\"}\n</option>\n"
                      "<option>\n{\"description\":\"Yes. The statement or question is satisfied.\",\"key\":\"yes\"}\n"
                      "</option>\n<option>\n{\"description\":\"None of the shown options applies.\",\"key\":\"[ABS]\"}\n"
                      "</option>\n\nSelect the single option best supported by the context and instructions.\nDecision:"),
              "%s", t.block[0][0]);
    CHECK(t.blk[0][0].query_pos == t.blk[0][0].n_ids - 1);
    /* the span block: 17 labels, the repeated target, the words at their first tokens */
    vsr_v2_block *s = &t.blk[0][1];
    CHECK(s->kind == VSR_V2_BLOCK_SPAN && s->n_labels == 17 && s->head == VSR_V2_HEAD_ROUTER);
    const char *b = t.block[0][1];
    CHECK(!strncmp(b, "\n\nTask type: span\nTarget: user\nQuestion:\nWhich spans are personal information?\nLabels:\n"
                      "<label>\n{\"description\":\"age\",\"key\":\"AGE\"}\n</label>", 130));
    CHECK(strstr(b, "\n\nText:\n<segment role=\"user\">\nHi, I'm Tom Baker (tom.baker@example.com). What") != NULL);
    size_t bl = strlen(b);
    const char *suffix = "\n</segment>\n\n\nMark every span of the target text that carries one of the labels.\nSpans:";
    CHECK(bl > strlen(suffix) && !strcmp(b + bl - strlen(suffix), suffix));
    CHECK_MSG(s->n_words == 23, "%d words", s->n_words);
    CHECK(t.word_tok[0][1][0] && !strcmp(t.word_tok[0][1][0], "Hi"));
    CHECK(t.word_tok[0][1][5] && !strcmp(t.word_tok[0][1][5], " Tom"));
    trees_free(&t);
    vsr_v2_job_free(j);
}

/* Word logits: label 0 high for the words whose text is in `hot`. */
typedef struct feed {
    const char *hot[8];
    float other;
    bool nan;
    int calls;
} feed;

static void fill(void *ctx, int tree, int block, vsr_v2_block *b) {
    feed *f = ctx;
    f->calls++;
    if (b->kind == VSR_V2_BLOCK_CANDIDATE) {
        for (int o = 0; o < b->n_options; o++) b->option_logits[o] = f->nan ? NAN : (float)o;
        return;
    }
    for (int w = 0; w < b->n_words; w++) {
        char *s = decode(&b->ids[b->word_pos[w]], 1);
        bool hot = false;
        for (int h = 0; h < 8 && f->hot[h]; h++) hot |= s && !strcmp(s, f->hot[h]);
        free(s);
        for (int l = 0; l < b->n_labels; l++) b->span_logits[w * b->n_labels + l] = hot && l == 0 ? 4.0f : f->other;
    }
}

static json_t *answer(vsr_v2_decider *d, const char *body, feed *f) {
    vsr_http_error he;
    vsr_v2_job *j = parse(d, body, &he);
    CHECK_MSG(j != NULL, "%s", he.message);
    if (!j) return NULL;
    vsr_err err = {0};
    CHECK_OK(vsr_v2_run_with(d, j, fill, f, &err), err);
    char *s = vsr_v2_response(j, NULL);
    vsr_v2_job_free(j);
    json_t *o = s ? json_loads(s, 0, NULL) : NULL;
    free(s);
    return o;
}

TEST(span_answers) {
    char body[4096];
    snprintf(body, sizeof body,
             "{\"state\":%s,\"questions\":{\"people\":{\"type\":\"span\",\"instructions\":\"Who is named?\","
             "\"criteria\":{\"PERSON\":\"a person's name\"},\"over\":\"request\"},"
             "\"claims\":{\"type\":\"span\",\"instructions\":\"Unsupported?\",\"labels\":[{\"key\":\"hallucinated\","
             "\"description\":\"x\"}],\"threshold\":0.9},"
             "\"places\":{\"type\":\"span\",\"instructions\":\"Which spans name a city?\",\"labels\":[{\"key\":\"city\","
             "\"description\":\"a city name\"}],\"head\":\"broad\",\"over\":\"source\"}}}",
             GOLDEN_STATE);
    feed f = {.hot = {"Tom", " Tom", " Baker", " grams", "6"}, .other = -6.0f};
    json_t *o = answer(dec, body, &f);
    if (!o) return;
    json_t *sp = json_object_get(o, "spans"), *th = json_object_get(o, "thresholds");
    /* people: PERSON over the request, the PII length rule on its token count */
    json_t *p = json_object_get(sp, "people");
    CHECK(json_array_size(p) == 1);
    json_t *e = json_array_get(p, 0);
    CHECK(!strcmp(json_string_value(json_object_get(e, "label")), "PERSON"));
    CHECK(json_integer_value(json_object_get(e, "start")) == 8 && json_integer_value(json_object_get(e, "end")) == 17);
    CHECK(!strcmp(json_string_value(json_object_get(e, "text")), "Tom Baker"));
    CHECK(fabs(json_real_value(json_object_get(e, "probability")) - 1.0 / (1.0 + exp(-4.0 / 0.4))) < 1e-6);
    double t_people = json_real_value(json_object_get(th, "people"));
    CHECK(t_people > 0.05 && t_people < 0.75); /* interpolated between 21 and 126 tokens */
    /* claims: a halu alias asked as "unsupported", answered as "hallucinated"; the given threshold */
    json_t *c = json_object_get(sp, "claims");
    CHECK(json_array_size(c) == 1);
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(c, 0), "label")), "hallucinated"));
    const char *ct = json_string_value(json_object_get(json_array_get(c, 0), "text"));
    CHECK_MSG(ct && !strcmp(ct, "6 grams"), "claims: '%s'", ct);
    CHECK(json_real_value(json_object_get(th, "claims")) == 0.9);
    /* places: the broad head at its temperature (1.0: sigmoid(4) = 0.982) and threshold */
    json_t *pl = json_array_get(json_object_get(sp, "places"), 0);
    CHECK(json_array_size(json_object_get(sp, "places")) == 1 && !strcmp(json_string_value(json_object_get(pl, "text")), "grams"));
    CHECK(fabs(json_real_value(json_object_get(pl, "probability")) - 1.0 / (1.0 + exp(-4.0))) < 1e-6);
    CHECK(json_real_value(json_object_get(th, "places")) == 0.55);
    json_t *heads = json_object_get(o, "span_heads");
    CHECK(!strcmp(json_string_value(json_object_get(heads, "places")), "broad"));
    CHECK(!strcmp(json_string_value(json_object_get(heads, "people")), "router"));
    CHECK(!strcmp(json_string_value(json_object_get(heads, "claims")), "router"));
    json_t *a = json_object_get(json_object_get(o, "answers"), "people");
    CHECK(!strcmp(json_string_value(json_object_get(a, "type")), "noul"));
    CHECK(json_real_value(json_object_get(a, "noul")) > 0.99);
    /* key order: answers, usage, spans, span_heads, thresholds */
    const char *order[] = {"model", "answers", "usage", "spans", "span_heads", "thresholds"};
    int k = 0;
    for (void *it = json_object_iter(o); it; it = json_object_iter_next(o, it), k++)
        CHECK(k < 6 && !strcmp(json_object_iter_key(it), order[k]));
    CHECK(json_integer_value(json_object_get(json_object_get(o, "usage"), "input_tokens")) > 100);
    json_decref(o);
}

TEST(presets_and_gate) {
    /* a request of ~300 tokens: the PII length rule gives under 0.05 (past 126 tokens) */
    char text[2048] = "";
    for (int i = 0; i < 60; i++) strcat(text, i == 30 ? "Tom said hi. " : "We said hi. ");
    char body[4096];
    snprintf(body, sizeof body,
             "{\"state\":{\"request\":\"%s\",\"answer\":\"Fine.\"},\"questions\":{\"pii\":{\"preset\":\"pii\","
             "\"over\":\"request\"},\"halu\":{\"preset\":\"halu\"},\"rel\":{\"preset\":\"relevance\"}}}",
             text);
    feed f = {.hot = {" Tom"}, .other = -8.0f};
    json_t *o = answer(dec, body, &f);
    if (!o) return;
    json_t *th = json_object_get(o, "thresholds");
    /* one span at the probe threshold (<= K = 3): the sparse gate lifts the PII threshold to 0.1 */
    CHECK_MSG(json_real_value(json_object_get(th, "pii")) == 0.1, "%g", json_real_value(json_object_get(th, "pii")));
    CHECK(json_array_size(json_object_get(json_object_get(o, "spans"), "pii")) == 1);
    /* many hot words: no gate, the length rule's value stays */
    feed g = {.hot = {" We", " said", " hi"}, .other = -8.0f};
    json_t *o2 = answer(dec, body, &g);
    double t2 = o2 ? json_real_value(json_object_get(json_object_get(o2, "thresholds"), "pii")) : 1;
    CHECK_MSG(t2 < 0.05 && t2 > 0.005919, "%g", t2);
    json_decref(o2);
    CHECK(json_real_value(json_object_get(th, "halu")) == 0.55);
    json_t *rel = json_object_get(json_object_get(o, "answers"), "rel");
    CHECK(!strcmp(json_string_value(json_object_get(rel, "type")), "score"));
    CHECK(json_object_size(json_object_get(rel, "probabilities")) == json_object_size(json_object_get(rel, "legend")));
    json_decref(o);
}

TEST(candidate_answers) {
    const char *body =
        "{\"state\":\"Write a Python function that merges two sorted lists.\",\"questions\":{"
        "\"domain\":{\"type\":\"choice\",\"instructions\":\"Which domain?\",\"criteria\":{\"code\":\"Programming\","
        "\"math\":null}},\"reasoning\":{\"type\":\"noul\",\"instructions\":\"Multi-step?\"},"
        "\"difficulty\":{\"type\":\"score\",\"instructions\":\"How hard?\",\"criteria\":[\"Trivial\",\"Moderate\",\"Hard\"]},"
        "\"topics\":{\"type\":\"set\",\"instructions\":\"Which topics?\",\"criteria\":{\"lists\":\"l\",\"sorting\":\"s\"},"
        "\"threshold\":0.6}}}";
    feed f = {.other = 0};
    json_t *o = answer(dec, body, &f);
    if (!o) return;
    json_t *an = json_object_get(o, "answers");
    json_t *dom = json_object_get(an, "domain");
    /* logits 0, 1 (abstain 2) at T 1.3: math wins; the abstain probability reported apart */
    CHECK(!strcmp(json_string_value(json_object_get(dom, "choice")), "math"));
    double pm = 1.0 / (1.0 + exp(-1.0 / 1.3));
    CHECK(fabs(json_real_value(json_object_get(json_object_get(dom, "probabilities"), "math")) - pm) < 1e-9);
    CHECK(fabs(json_real_value(json_object_get(dom, "confidence")) - (2 * pm - 1)) < 1e-9);
    double z = 1 + exp(1 / 1.3) + exp(2 / 1.3);
    CHECK(fabs(json_real_value(json_object_get(dom, "abstain_probability")) - exp(2 / 1.3) / z) < 1e-9);
    CHECK(fabs(json_real_value(json_object_get(json_object_get(an, "reasoning"), "noul")) - pm) < 1e-9);
    json_t *sc = json_object_get(an, "difficulty");
    double e0 = 1, e1 = exp(1 / 1.1), e2 = exp(2 / 1.1), zs = e0 + e1 + e2;
    double mean = (e1 + 2 * e2) / zs, var = (mean * mean * e0 + (1 - mean) * (1 - mean) * e1 + (2 - mean) * (2 - mean) * e2) / zs;
    CHECK(fabs(json_real_value(json_object_get(sc, "score")) - mean) < 1e-9);
    CHECK(fabs(json_real_value(json_object_get(sc, "confidence")) - (1 - var / ((9.0 - 1) / 12))) < 1e-9);
    CHECK(!strcmp(json_string_value(json_object_get(json_object_get(sc, "legend"), "2")), "Hard"));
    /* set: sigmoid(logit / 1.05) per label, answers["topics.<label>"], sets and thresholds */
    double p1 = 1.0 / (1.0 + exp(-1.0 / 1.05));
    CHECK(fabs(json_real_value(json_object_get(json_object_get(an, "topics.sorting"), "noul")) - p1) < 1e-9);
    json_t *set = json_object_get(json_object_get(o, "sets"), "topics");
    CHECK(json_array_size(json_object_get(set, "selected")) == 1);
    CHECK(!strcmp(json_string_value(json_array_get(json_object_get(set, "selected"), 0)), "sorting"));
    CHECK(json_real_value(json_object_get(json_object_get(o, "thresholds"), "topics")) == 0.6);
    CHECK(json_object_get(o, "span_heads") == NULL);
    json_decref(o);
    /* non-finite logits: invalid_model_output on each question */
    feed bad = {.nan = true};
    o = answer(dec, body, &bad);
    if (!o) return;
    CHECK(!strcmp(json_string_value(json_object_get(json_object_get(json_object_get(o, "answers"), "domain"), "error")),
                  "invalid_model_output"));
    json_decref(o);
}

TEST(windows_and_truncation) {
    /* an answer of ~120 tokens: over hybrid_rmax 48, read in windows of <= 40 tokens */
    char text[2048] = "";
    for (int i = 0; i < 30; i++) strcat(text, i == 17 ? "Tom Baker went home. " : "We walked on. ");
    char body[4096];
    snprintf(body, sizeof body,
             "{\"state\":{\"request\":\"Summarise.\",\"answer\":\"%s\"},\"questions\":{\"who\":{\"type\":\"span\","
             "\"instructions\":\"Names?\",\"criteria\":{\"PERSON\":\"a name\"},\"require_full_input\":true}}}",
             text);
    vsr_http_error he;
    vsr_v2_job *j = parse(dec, body, &he);
    CHECK_MSG(j != NULL, "%s", he.message);
    if (!j) return;
    trees t = {0};
    vsr_v2_job_trees(j, collect, &t);
    CHECK(t.n >= 4);
    CHECK(t.n_blocks[0] == 0); /* the row's span block is replaced by the windows */
    for (int i = 1; i < t.n; i++) {
        CHECK(t.n_blocks[i] == 1 && t.blk[i][0].kind == VSR_V2_BLOCK_SPAN && t.blk[i][0].n_words > 0);
        CHECK(strstr(t.ctx[i], "<segment role=\"answer\">\n") != NULL);
    }
    trees_free(&t);
    vsr_v2_job_free(j);
    feed f = {.hot = {" Tom", " Baker"}, .other = -6.0f};
    json_t *o = answer(dec, body, &f);
    if (!o) return;
    json_t *e = json_array_get(json_object_get(json_object_get(o, "spans"), "who"), 0);
    CHECK(e && !strcmp(json_string_value(json_object_get(e, "text")), "Tom Baker"));
    CHECK(json_integer_value(json_object_get(e, "start")) == 17 * 14 && json_integer_value(json_object_get(e, "end")) == 17 * 14 + 9);
    CHECK(!strcmp(json_string_value(json_object_get(json_object_get(json_object_get(o, "answers"), "who"),
                                                    "input_coverage")), "complete"));
    json_decref(o);
    /* a model of 300 tokens: 17 labels alone do not fit */
    snprintf(body, sizeof body, "{\"state\":%s,\"questions\":{\"pii\":{\"preset\":\"pii\"},"
                                "\"ok\":{\"type\":\"noul\",\"instructions\":\"Fine?\"}}}", GOLDEN_STATE);
    j = parse(dec_small, body, &he);
    CHECK(j == NULL && he.status == 400 && strstr(he.message, "no valid question: pii: question 'pii' cannot fit the "
                                                              "model's input: the questions alone exceed the input by"));
    vsr_v2_job_free(j);
}

typedef struct refusal {
    const char *question;
    const char *message;
} refusal;

TEST(refusals) {
    static const refusal cases[] = {
        {"{\"type\":\"spam\",\"instructions\":\"x\"}", "type must be one of ['noul', 'choice', 'score', 'set', 'span']"},
        {"{\"type\":\"span\",\"criteria\":{\"a\":\"b\"}}", "instructions is required"},
        {"{\"type\":\"span\",\"instructions\":\"  \",\"criteria\":{\"a\":\"b\"}}", "instructions must not be empty or whitespace"},
        {"{\"type\":\"span\",\"instructions\":\"x\",\"criteria\":{\"a\":\"b\"},\"labels\":[{\"key\":\"a\"}]}", "use criteria or labels, not both"},
        {"{\"type\":\"span\",\"instructions\":\"x\",\"criteria\":{}}", "criteria must name 1 to 255 labels"},
        {"{\"type\":\"span\",\"instructions\":\"x\",\"criteria\":{\"a\":\"b\"},\"threshold\":1.5}", "threshold must be a number in [0, 1]"},
        {"{\"type\":\"span\",\"instructions\":\"x\",\"criteria\":{\"a\":\"b\"},\"head\":\"left\"}", "head must be one of ['router', 'broad']"},
        {"{\"type\":\"span\",\"instructions\":\"x\",\"criteria\":{\"a\":\"b\"},\"overflow\":\"drop\"}", "overflow must be one of ['window', 'truncate']"},
        {"{\"type\":\"span\",\"instructions\":\"x\",\"criteria\":{\"a\":\"b\"},\"over\":[\"request\",\"answer\"]}", "a span question reads one part"},
        {"{\"type\":\"span\",\"instructions\":\"x\",\"criteria\":{\"a\":\"b\"},\"over\":\"nowhere\"}", "'nowhere' is not a field of the state"},
        {"{\"type\":\"span\",\"instructions\":\"x\",\"criteria\":{\"a\":\"b\"},\"over\":[]}", "over must not be empty"},
        {"{\"type\":\"span\",\"instructions\":\"x\",\"criteria\":{\"a\":\"b\"},\"over\":3}", "over must be a state key, a part name or a list of them"},
        {"{\"type\":\"span\",\"instructions\":\"x\",\"criteria\":{\"a\":\"b\"},\"levels\":[1]}", "span questions do not take ['levels']"},
        {"{\"type\":\"choice\",\"instructions\":\"x\",\"criteria\":{\"a\":\"b\",\"c\":null},\"threshold\":0.5}", "choice questions do not take ['threshold']"},
        {"{\"type\":\"span\",\"instructions\":\"x\",\"criteria\":{\"a\":\"b\"},\"overflow\":\"truncate\",\"require_full_input\":true}",
         "require_full_input cannot be combined with overflow: truncate"},
        {"{\"preset\":\"toxic\"}", "preset must be one of ['pii', 'halu', 'relevance']"},
        {"{\"preset\":\"pii\",\"head\":\"router\"}", "a preset question takes only preset, type, over, threshold and overflow"},
        {"{\"preset\":\"pii\",\"type\":\"set\"}", "preset pii is a span question"},
        {"{\"type\":\"choice\",\"instructions\":\"x\",\"criteria\":{\"a\":\"b\"}}", "criteria must name 2 to 255 options"},
        {"{\"type\":\"noul\",\"instructions\":\"x\",\"criteria\":{\"maybe\":\"b\"}}", "noul criteria may contain only false and true"},
        {"{\"type\":\"score\",\"instructions\":\"x\",\"criteria\":[\"a\"]}", "criteria must list 2 to 10 levels"},
        {"{\"type\":\"choice\",\"instructions\":\"x\",\"criteria\":{\"a\":\"b\"},\"choices\":[]}", "use criteria or choices, not both"},
        {"{\"type\":\"choice\",\"instructions\":\"x\",\"choices\":[{\"key\":\"a\"},{\"key\":\"a\"}]}", "choices keys must be unique nonempty strings"},
        {"{\"type\":\"set\",\"instructions\":\"x\",\"criteria\":{\"b\":\"c\"}}", "a label answer s.<label> is another question's ID"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char body[2048];
        snprintf(body, sizeof body, "{\"state\":%s,\"questions\":{\"s\":%s,\"s.b\":{\"type\":\"noul\",\"instructions\":\"ok\"}}}",
                 GOLDEN_STATE, cases[i].question);
        vsr_http_error he;
        vsr_v2_job *j = parse(dec, body, &he);
        CHECK_MSG(j != NULL, "case %zu: %s", i, he.message);
        if (!j) continue;
        char *s = vsr_v2_response(j, NULL);
        json_t *o = json_loads(s, 0, NULL);
        json_t *a = json_object_get(json_object_get(o, "answers"), "s");
        CHECK_MSG(a && !strcmp(json_string_value(json_object_get(a, "error")), "invalid_question") &&
                      !strcmp(json_string_value(json_object_get(a, "message")), cases[i].message),
                  "case %zu: %s", i, s);
        json_decref(o);
        free(s);
        vsr_v2_job_free(j);
    }
    /* a model without a broad head */
    vsr_v2_info info = tiny_info(4096);
    info.has_broad_head = false;
    vsr_v2_decider *nb = NULL;
    vsr_err err = {0};
    CHECK_OK(vsr_v2_decider_open_dir(dir, &info, &nb, &err), err);
    char body[2048];
    snprintf(body, sizeof body, "{\"state\":%s,\"questions\":{\"s\":{\"type\":\"span\",\"instructions\":\"x\","
                                "\"criteria\":{\"a\":\"b\"},\"head\":\"broad\"},\"t\":{\"preset\":\"halu\"}}}", GOLDEN_STATE);
    vsr_http_error he;
    vsr_v2_job *j = nb ? parse(nb, body, &he) : NULL;
    if (j) {
        char *s = vsr_v2_response(j, NULL);
        CHECK(strstr(s, "\"message\":\"this model has no broad span head\"") != NULL);
        vsr_v2_job_free(j);
        free(s);
    }
    vsr_v2_decider_free(nb);
    /* request-level refusals */
    static const refusal reqs[] = {
        {"{\"state\":\"  \",\"questions\":{\"a\":{\"preset\":\"pii\"}}}", "state must not be empty or whitespace"},
        {"{\"state\":{},\"questions\":{\"a\":{\"preset\":\"pii\"}}}", "state must be a non-empty string, JSON object or JSON array"},
        {"{\"state\":{\"answer\":\" \"},\"questions\":{\"a\":{\"preset\":\"pii\"}}}", "the answer part of the state is empty"},
        {"{\"state\":\"x\",\"questions\":{}}", "questions must be an object with at least one question"},
        {"{\"state\":\"x\",\"questions\":{\"a\":{\"preset\":\"pii\"}},\"images\":[\"data:\"]}", "this model has no image modality: the Vela 2.0 packages read text only"},
        {"{\"state\":\"x\",\"questions\":{\"a\":{\"preset\":\"pii\"}},\"extra\":1}", "unknown field 'extra'"},
        {"{\"state\":\"x\",\"questions\":{\"a\":{\"type\":\"x\"}}}", "no valid question: a: type must be one of"},
    };
    for (size_t i = 0; i < sizeof reqs / sizeof reqs[0]; i++) {
        j = parse(dec, reqs[i].question, &he);
        CHECK_MSG(j == NULL && he.status == 400 && strstr(he.message, reqs[i].message), "request %zu: %s", i, he.message);
        vsr_v2_job_free(j);
    }
    j = parse(dec, "{\"model\":\"other\",\"state\":\"x\",\"questions\":{\"a\":{\"preset\":\"pii\"}}}", &he);
    CHECK(j == NULL && he.status == 404 && !strcmp(he.code, "model_not_found"));
}

TEST(state_parts_and_clipping) {
    /* two context keys: key blocks "source:\n..." joined by a blank line; over one key clips */
    const char *body = "{\"state\":{\"source\":\"Paris is big.\",\"notes\":\"Tom lives in Lyon.\",\"answer\":\"ok\"},"
                       "\"questions\":{\"who\":{\"type\":\"span\",\"instructions\":\"Names?\",\"criteria\":{\"PERSON\":\"n\"},"
                       "\"over\":\"notes\"}}}";
    vsr_http_error he;
    vsr_v2_job *j = parse(dec, body, &he);
    CHECK_MSG(j != NULL, "%s", he.message);
    if (!j) return;
    trees t = {0};
    vsr_v2_job_trees(j, collect, &t);
    CHECK(t.n == 1 && strstr(t.ctx[0], "<segment role=\"context\">\nsource:\nParis is big.\n\nnotes:\nTom lives in Lyon.\n</segment>"));
    CHECK(t.n_blocks[0] == 1 && strstr(t.block[0][0], "Target: context\n"));
    trees_free(&t);
    vsr_v2_job_free(j);
    feed f = {.hot = {"Tom", " Paris"}, .other = -6.0f};
    json_t *o = answer(dec, body, &f);
    if (!o) return;
    json_t *sp = json_object_get(json_object_get(o, "spans"), "who");
    CHECK(json_array_size(sp) == 1); /* Paris lies outside the key */
    json_t *e = json_array_get(sp, 0);
    CHECK(e && json_integer_value(json_object_get(e, "start")) == 0 && json_integer_value(json_object_get(e, "end")) == 3 &&
          !strcmp(json_string_value(json_object_get(e, "text")), "Tom"));
    json_decref(o);
}

int main(void) {
    if (!setup()) {
        fprintf(stderr, "setup failed\n");
        return 1;
    }
    RUN(layout_text);
    RUN(span_answers);
    RUN(presets_and_gate);
    RUN(candidate_answers);
    RUN(windows_and_truncation);
    RUN(refusals);
    RUN(state_parts_and_clipping);
    vsr_v2_decider_free(dec);
    vsr_v2_decider_free(dec_small);
    vsr_tokenizer_free(tok);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return test_summary();
}
