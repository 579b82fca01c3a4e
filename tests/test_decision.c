/* The decision layer on the tiny built-in package: prompts and ids against an
 * independent oracle (tools/make_prompt_oracle.py: Python json.dumps, jinja2 with the
 * package's chat template, Hugging Face tokenizers), answer formulas, validation,
 * the golden self-check statuses, and the decider's load refusals. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decision/decision_impl.h"
#include "fixture/builtin.h"
#include "test.h"
#include "vsr/engine.h"
#include "vsr/fixture.h"
#include "vsr/hash.h"

static vsr_engine eng;
static char pkg_dir[4096];
static bool loaded;

static void setup(void) {
    if (loaded) return;
    const vsr_builtin *b = vsr_builtin_fixture_find("vllm-sr-c/d3-tiny");
    vsr_fixture_opts fo;
    vsr_builtin_fixture_opts(b, &fo);
    snprintf(pkg_dir, sizeof pkg_dir, "%s/d3-tiny", test_tmpdir());
    vsr_err err = {0};
    vsr_status st = vsr_fixture_write(pkg_dir, &fo, NULL, &err);
    CHECK_OK(st, err);
    vsr_engine_opts o = {.model = pkg_dir, .device = "cpu", .threads = 2};
    st = vsr_engine_prepare(&eng, &o, &err);
    CHECK_OK(st, err);
    if (st == VSR_OK) st = vsr_engine_load(&eng, &o, &err);
    CHECK_OK(st, err);
    loaded = st == VSR_OK;
}

static d3_question *find_q(vsr_decision_job *j, const char *id) {
    for (int i = 0; i < j->req[0].n_q; i++)
        if (!strcmp(j->req[0].q[i].id, id)) return &j->req[0].q[i];
    return NULL;
}

TEST(prompts_match_oracle) {
    setup();
    if (!loaded) return;
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/data/decision/prompts.json", getenv("VSR_REPO") ? getenv("VSR_REPO") : ".");
    json_error_t je;
    json_t *cases = json_load_file(path, 0, &je);
    CHECK_MSG(cases != NULL, "%s: %s", path, je.text);
    if (!cases) return;
    size_t i;
    json_t *c;
    int n = 0;
    json_array_foreach(cases, i, c) {
        char *body = json_dumps(json_object_get(c, "request"), JSON_COMPACT);
        vsr_http_error he = {0};
        vsr_decision_job *j = vsr_decision_parse(eng.decider, body, strlen(body), NULL, &he);
        CHECK_MSG(j != NULL, "case %zu refused: %s", i, he.message);
        free(body);
        if (!j) continue;
        const char *qid = json_string_value(json_object_get(c, "question"));
        d3_question *q = find_q(j, qid);
        CHECK(q != NULL);
        if (q) {
            const char *want = json_string_value(json_object_get(c, "prompt"));
            char *prompt = d3_question_prompt(q);
            int32_t *qids = d3_question_ids(q);
            CHECK_MSG(prompt && !strcmp(prompt, want), "case %zu question %s: prompt differs:\n--- ours\n%s\n--- oracle\n%s",
                      i, qid, prompt ? prompt : "(null)", want);
            /* The shared head and the question's tail, tokenized apart, give the oracle's ids
             * of the whole prompt tokenized at once. */
            json_t *ids = json_object_get(c, "ids");
            bool same = qids && q->n_ids == json_array_size(ids);
            for (size_t k = 0; same && k < q->n_ids; k++)
                same = qids[k] == json_integer_value(json_array_get(ids, k));
            CHECK_MSG(same, "case %zu question %s: ids differ (%zu vs %zu tokens)", i, qid, q->n_ids,
                      json_array_size(ids));
            free(prompt);
            free(qids);
            n++;
        }
        vsr_decision_free(j);
    }
    CHECK(n >= 9);
    json_decref(cases);
}

/* describe(v) is Python's json.dumps(v, ensure_ascii=False): the expected strings are what
 * Python 3.11 prints for json.dumps(json.loads(text)). Floats are repr's shortest round trip,
 * including powers of two, where the rounding interval is lopsided. */
TEST(describe_is_python_json_dumps) {
    static const char *const cases[][2] = {
        {"7.120236347223045e-307", "7.120236347223045e-307"}, /* a power of two */
        {"5e-324", "5e-324"},
        {"1e16", "1e+16"},
        {"1e15", "1000000000000000.0"},
        {"0.1", "0.1"},
        {"1e-7", "1e-07"},
        {"1.5e300", "1.5e+300"},
        {"-0.0", "-0.0"},
        {"1E+2", "100.0"},
        {"12345678901234567890.0", "1.2345678901234567e+19"},
        {"0.0001", "0.0001"},
        {"0.00001", "1e-05"},
        {"2.2250738585072014e-308", "2.2250738585072014e-308"},
        {"9007199254740993", "9007199254740993"},
        {"-9223372036854775808", "-9223372036854775808"},
        {"1.7976931348623157e308", "1.7976931348623157e+308"},
        {"-0", "0"},
        {"{\"b\": [1, 2.5, {}], \"a\": [], \"c\": null, \"d\": true}", "{\"b\": [1, 2.5, {}], \"a\": [], \"c\": null, \"d\": true}"},
        {"[\"\\u00e9\\u0001\\u007f\\\"\\\\\\n\\ud83d\\ude00\\u2028\"]", "[\"\xc3\xa9\\u0001\x7f\\\"\\\\\\n\xf0\x9f\x98\x80\xe2\x80\xa8\"]"},
        {"\"a string as it is \\n\"", "a string as it is \n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_error_t je;
        json_t *v = json_loads(cases[i][0], JSON_DECODE_ANY, &je);
        CHECK_MSG(v != NULL, "case %zu: %s", i, je.text);
        if (!v) continue;
        char *got = d3_value_text(v);
        CHECK_MSG(got && !strcmp(got, cases[i][1]), "case %zu: %s: got %s want %s", i, cases[i][0], got, cases[i][1]);
        free(got);
        json_decref(v);
    }
    /* state and instructions defaults */
    json_t *e = json_string(""), *o = json_object(), *a = json_array(), *z = json_integer(0);
    char *t1 = d3_state_text(e), *t2 = d3_state_text(o), *t3 = d3_state_text(a), *t4 = d3_state_text(json_null());
    CHECK(!strcmp(t1, "(empty)") && !strcmp(t2, "{}") && !strcmp(t3, "[]") && !strcmp(t4, "(empty)"));
    char *i1 = d3_instructions_text(o), *i2 = d3_instructions_text(a), *i3 = d3_instructions_text(z);
    CHECK(!strcmp(i1, D3_DEFAULT_INSTRUCTIONS) && !strcmp(i2, D3_DEFAULT_INSTRUCTIONS) &&
          !strcmp(i3, D3_DEFAULT_INSTRUCTIONS));
    free(t1), free(t2), free(t3), free(t4), free(i1), free(i2), free(i3);
    json_decref(e), json_decref(o), json_decref(a), json_decref(z);
}

static void collect(void *ctx, const vsr_decision_item *it) {
    char *buf = ctx;
    size_t n = strlen(buf);
    snprintf(buf + n, 512 - n, "%s/%s:%s;", it->state ? it->state : "-", it->question,
             it->err_code ? it->err_code : it->prompt && it->ids && it->n_ids ? "ok" : "?");
}

/* vsr_decision_foreach: main request first, then each state, questions in request order. */
TEST(foreach_order) {
    setup();
    if (!loaded) return;
    const char *b = "{\"state\":\"s\",\"questions\":{\"z\":{\"type\":\"noul\",\"instructions\":\"x\"},"
                    "\"a\":{\"type\":\"noul\",\"instructions\":\" \"}},\"states\":{\"t2\":{\"state\":{},"
                    "\"questions\":{\"m\":{\"type\":\"noul\",\"instructions\":\"y\"}}},\"t1\":{\"state\":\"\","
                    "\"questions\":{\"k\":{\"type\":\"noul\",\"instructions\":[]}}}}}";
    vsr_http_error he = {0};
    vsr_decision_job *j = vsr_decision_parse(eng.decider, b, strlen(b), NULL, &he);
    CHECK_MSG(j != NULL, "%s", he.message);
    if (!j) return;
    char buf[512] = "";
    vsr_decision_foreach(j, collect, buf);
    CHECK_MSG(!strcmp(buf, "-/z:ok;-/a:invalid_question;t2/m:ok;t1/k:ok;"), "%s", buf);
    vsr_decision_free(j);
}

/* A `states` entry is answered as its own request: its rows never share a forward with the
 * main request's (positions run over a forward's padded length), so its answers are
 * bit-identical to the same state sent alone. */
TEST(states_batch_alone) {
    setup();
    if (!loaded) return;
    const char *both = "{\"state\":\"a much longer main state, so that a shared forward would pad the short row on "
                       "the left by many tokens and move its positions\",\"questions\":{\"m\":{\"type\":\"noul\","
                       "\"instructions\":\"long?\"}},\"states\":{\"s\":{\"state\":\"short\",\"questions\":{\"q\":"
                       "{\"type\":\"score\",\"instructions\":\"how?\",\"criteria\":[\"a\",\"b\",\"c\"]}}}}}";
    const char *alone = "{\"state\":\"short\",\"questions\":{\"q\":{\"type\":\"score\",\"instructions\":\"how?\","
                        "\"criteria\":[\"a\",\"b\",\"c\"]}}}";
    vsr_http_error he = {0};
    vsr_err err = {0};
    vsr_decision_job *jb = vsr_decision_parse(eng.decider, both, strlen(both), NULL, &he);
    vsr_decision_job *ja = vsr_decision_parse(eng.decider, alone, strlen(alone), NULL, &he);
    CHECK(jb && ja);
    if (jb && ja) {
        CHECK_OK(vsr_decision_run(eng.decider, jb, NULL, NULL, NULL, &err), err);
        CHECK_OK(vsr_decision_run(eng.decider, ja, NULL, NULL, NULL, &err), err);
        CHECK(jb->n_req == 2 && jb->req[1].q[0].answered && ja->req[0].q[0].answered);
        CHECK_MSG(!memcmp(jb->req[1].q[0].probs, ja->req[0].q[0].probs, 3 * sizeof(double)),
                  "state answered in a shared forward: %.17g vs %.17g", jb->req[1].q[0].probs[0],
                  ja->req[0].q[0].probs[0]);
    }
    vsr_decision_free(jb);
    vsr_decision_free(ja);
}

TEST(answer_formulas) {
    double u[4] = {0.25, 0.25, 0.25, 0.25}, one[3] = {1, 0, 0};
    CHECK(fabs(d3_confidence(u, 4)) < 1e-12);
    CHECK(fabs(d3_confidence(one, 3) - 1.0) < 1e-12);
    float logits[3] = {1.0f, 2.0f, 3.0f};
    double p[3];
    CHECK(d3_probs_from_logits(logits, 3, 0.5, p));
    double z = exp(2.0) + exp(4.0) + exp(6.0);
    CHECK(fabs(p[0] - exp(2.0) / z) < 1e-12 && fabs(p[2] - exp(6.0) / z) < 1e-12);
    float bad[2] = {1.0f, NAN};
    CHECK(!d3_probs_from_logits(bad, 2, 1.0, p));
    float inf[2] = {INFINITY, 0.0f};
    CHECK(!d3_probs_from_logits(inf, 2, 1.0, p));
    /* a tie goes to the first option */
    d3_question q = {.type = D3_CHOICE, .n_opt = 2};
    char *keys[2] = {"a", "b"};
    q.keys = keys;
    q.probs[0] = q.probs[1] = 0.5;
    json_t *a = d3_answer_json(&q);
    CHECK(!strcmp(json_string_value(json_object_get(a, "choice")), "a"));
    json_decref(a);
    /* score = sum i p_i */
    d3_question s = {.type = D3_SCORE, .n_opt = 3};
    char *sk[3] = {"0", "1", "2"}, *lg[3] = {"x", "y", "z"};
    s.keys = sk;
    s.legend = lg;
    s.probs[0] = 0.2, s.probs[1] = 0.3, s.probs[2] = 0.5;
    a = d3_answer_json(&s);
    CHECK(fabs(json_real_value(json_object_get(a, "score")) - 1.3) < 1e-12);
    CHECK(!strcmp(json_string_value(json_object_get(json_object_get(a, "legend"), "2")), "z"));
    json_decref(a);
}

TEST(answers_are_probabilities) {
    setup();
    if (!loaded) return;
    const char *body = vsr_golden_request();
    vsr_http_error he = {0};
    vsr_decision_job *j = vsr_decision_parse(eng.decider, body, strlen(body), NULL, &he);
    CHECK(j != NULL);
    if (!j) return;
    vsr_err err = {0};
    vsr_status st = vsr_decision_run(eng.decider, j, NULL, NULL, NULL, &err);
    CHECK_OK(st, err);
    for (int i = 0; i < j->req[0].n_q; i++) {
        d3_question *q = &j->req[0].q[i];
        double sum = 0;
        for (int k = 0; k < q->n_opt; k++) {
            CHECK(q->probs[k] >= 0 && q->probs[k] <= 1);
            sum += q->probs[k];
        }
        CHECK(fabs(sum - 1.0) < 1e-9);
        CHECK(q->answered);
    }
    vsr_decision_free(j);
}

TEST(golden_statuses) {
    setup();
    if (!loaded) return;
    vsr_golden_report r;
    vsr_err err = {0};
    CHECK_OK(vsr_golden_check(eng.decider, NULL, "cpu", 1e-3, &r, &err), err);
    CHECK(!strcmp(r.status, "unverified"));
    CHECK(r.checked == 6 && r.answers_json != NULL);
    /* what was recorded matches itself */
    char rec[8192];
    snprintf(rec, sizeof rec, "{\"cpu\":%s}", r.answers_json);
    vsr_golden_report m;
    CHECK_OK(vsr_golden_check(eng.decider, rec, "cpu", 1e-3, &m, &err), err);
    CHECK_MSG(!strcmp(m.status, "matched") && m.matched == 6, "%s %d: %s", m.status, m.matched, m.reason);
    /* another device class has no record: unverified */
    vsr_golden_report g;
    CHECK_OK(vsr_golden_check(eng.decider, rec, "cuda", 0.02, &g, &err), err);
    CHECK(!strcmp(g.status, "unverified"));
    /* a changed probability beyond the tolerance fails and says which */
    json_t *a = json_loads(r.answers_json, 0, NULL);
    json_t *noul = json_object_get(json_object_get(a, "reasoning"), "noul");
    json_real_set(noul, json_real_value(noul) + 0.01);
    char *s = json_dumps(a, JSON_COMPACT | JSON_REAL_PRECISION(17));
    snprintf(rec, sizeof rec, "{\"cpu\":%s}", s);
    vsr_golden_report f;
    CHECK_OK(vsr_golden_check(eng.decider, rec, "cpu", 1e-3, &f, &err), err);
    CHECK_MSG(!strcmp(f.status, "failed") && strstr(f.reason, "reasoning.noul"), "%s: %s", f.status, f.reason);
    /* a change within the tolerance still matches */
    json_real_set(noul, json_real_value(noul) - 0.01 + 5e-4);
    free(s);
    s = json_dumps(a, JSON_COMPACT | JSON_REAL_PRECISION(17));
    snprintf(rec, sizeof rec, "{\"cpu\":%s}", s);
    vsr_golden_report w;
    CHECK_OK(vsr_golden_check(eng.decider, rec, "cpu", 1e-3, &w, &err), err);
    CHECK(!strcmp(w.status, "matched"));
    free(s);
    json_decref(a);
    vsr_golden_report_free(&r);
    vsr_golden_report_free(&m);
    vsr_golden_report_free(&g);
    vsr_golden_report_free(&f);
    vsr_golden_report_free(&w);
}

TEST(builtin_golden_recorded_and_matching) {
    /* The built-in default records CPU answers, and our forward still gives them. */
    setup();
    if (!loaded) return;
    const vsr_builtin *b = vsr_builtin_fixture_find("vllm-sr-c/d3-tiny");
    CHECK_MSG(b->golden_json != NULL, "vllm-sr-c/d3-tiny has no recorded golden answers");
    if (!b->golden_json) return;
    vsr_golden_report r;
    vsr_err err = {0};
    CHECK_OK(vsr_golden_check(eng.decider, b->golden_json, "cpu", 1e-3, &r, &err), err);
    CHECK_MSG(!strcmp(r.status, "matched"), "%s: %s", r.status, r.reason);
    vsr_golden_report_free(&r);
}

TEST(validation_messages) {
    setup();
    if (!loaded) return;
    struct {
        const char *body;
        int status;
        const char *needle;
    } cases[] = {
        {"{", 400, "not valid JSON"},
        {"\"s\"", 400, "must be a JSON object"},
        {"{\"state\":\"s\"}", 400, "questions must be an object"},
        {"{\"state\":\"s\",\"questions\":{\"q\":{\"type\":\"noul\",\"instructions\":\"x\"}},\"model\":\"other\"}", 404,
         "is not served here"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        vsr_http_error he = {0};
        vsr_decision_job *j = vsr_decision_parse(eng.decider, cases[i].body, strlen(cases[i].body), "me", &he);
        CHECK(j == NULL);
        vsr_decision_free(j);
        CHECK_MSG(he.status == cases[i].status && strstr(he.message, cases[i].needle), "case %zu: %d %s", i,
                  he.status, he.message);
    }
    /* instructions: blank text gets the reference's message (Python's whitespace, so U+3000
     * too); other types are not text */
    struct {
        const char *instr, *needle;
    } bad_instr[] = {
        {"\"\"", "instructions must not be empty or whitespace"},
        {"\" \\t\\n \"", "instructions must not be empty or whitespace"},
        {"\"\\u3000\\u00a0\\u2028\\u001c\"", "instructions must not be empty or whitespace"},
        {"0", "instructions must be non-blank text, an object or an array"},
        {"false", "instructions must be non-blank text, an object or an array"},
        {"null", "instructions is required"},
    };
    for (size_t i = 0; i < sizeof bad_instr / sizeof bad_instr[0]; i++) {
        char b[512];
        snprintf(b, sizeof b,
                 "{\"state\":\"s\",\"questions\":{\"ok\":{\"type\":\"noul\",\"instructions\":\"x\"},"
                 "\"bad\":{\"type\":\"noul\",\"instructions\":%s}}}",
                 bad_instr[i].instr);
        vsr_http_error h2 = {0};
        vsr_decision_job *jb = vsr_decision_parse(eng.decider, b, strlen(b), NULL, &h2);
        CHECK_MSG(jb != NULL, "instr case %zu: %s", i, h2.message);
        if (!jb) continue;
        d3_question *q = find_q(jb, "bad");
        CHECK_MSG(q && q->err_code && !strcmp(q->err_code, "invalid_question") && strstr(q->err_msg, bad_instr[i].needle),
                  "instr case %zu: %s", i, q && q->err_msg ? q->err_msg : "(accepted)");
        vsr_decision_free(jb);
    }
    /* a null state is refused (the state is required: text, an object or an array) */
    const char *nb = "{\"state\":null,\"questions\":{\"q\":{\"type\":\"noul\",\"instructions\":\"x\"}}}";
    vsr_http_error h3 = {0};
    vsr_decision_job *jn = vsr_decision_parse(eng.decider, nb, strlen(nb), NULL, &h3);
    CHECK(jn == NULL && h3.status == 400 && strstr(h3.message, "state must be text, an object or an array"));
    vsr_decision_free(jn);
    /* an item-level error keeps its sibling */
    const char *body = "{\"state\":\"s\",\"questions\":{\"ok\":{\"type\":\"noul\",\"instructions\":\"x\"},"
                       "\"bad\":{\"type\":\"score\",\"instructions\":\"x\",\"criteria\":[\"a\"]}}}";
    vsr_http_error he = {0};
    vsr_decision_job *j = vsr_decision_parse(eng.decider, body, strlen(body), NULL, &he);
    CHECK(j != NULL);
    if (j) {
        CHECK(vsr_decision_rows(j) == 1);
        d3_question *bad = find_q(j, "bad");
        CHECK(bad && bad->err_code && !strcmp(bad->err_code, "invalid_question") &&
              strstr(bad->err_msg, "criteria must list 2 to 10 levels"));
        vsr_decision_free(j);
    }
}

TEST(decider_refusals) {
    setup();
    if (!loaded) return;
    vsr_err err = {0};
    vsr_decider *d = NULL;
    /* a code that does not encode to its recorded token id */
    vsr_package *p = eng.pkg;
    int32_t saved = p->decision.token_ids[7];
    p->decision.token_ids[7] = saved + 1;
    vsr_status st = vsr_decider_open(p, eng.model, &d, &err);
    CHECK_ERR(st, err, VSR_E_INTEGRITY, "checkpoint answer codes differ from its tokenizer");
    CHECK_ERR(st, err, VSR_E_INTEGRITY, "expected exactly token_ids[7]");
    p->decision.token_ids[7] = saved;
    /* an unknown chat template */
    char path[4200];
    snprintf(path, sizeof path, "%s/chat_template.jinja", p->path);
    size_t n;
    char *orig = test_read_file(path, &n);
    test_write_file(path, "{{ messages }}", 14);
    char want[160], sha12[65];
    vsr_sha256_hex("{{ messages }}", 14, sha12);
    snprintf(want, sizeof want, "chat_template.jinja (sha256 %.12s) is not a chat template the decision3 family renders",
             sha12);
    st = vsr_decider_open(p, eng.model, &d, &err);
    CHECK_ERR(st, err, VSR_E_UNSUPPORTED, want);
    test_write_file(path, orig, n);
    free(orig);
    /* tokenizer_config.json edited to break one published rule at a time */
    snprintf(path, sizeof path, "%s/tokenizer_config.json", p->path);
    orig = test_read_file(path, &n);
    struct {
        const char *key, *value; /* value as JSON; NULL: delete the key */
        vsr_status code;
        const char *needle;
    } rules[] = {
        {"add_bos_token", "true", VSR_E_UNSUPPORTED, "the tokenizer must not add a prefix space or a BOS token"},
        {"add_prefix_space", "true", VSR_E_UNSUPPORTED, "the tokenizer must not add a prefix space or a BOS token"},
        {"tokenizer_class", "\"LlamaTokenizerFast\"", VSR_E_UNSUPPORTED,
         "unsupported tokenizer class 'LlamaTokenizerFast'"},
        {"tokenizer_class", NULL, VSR_E_UNSUPPORTED, "unsupported tokenizer class 'None'"},
        {"pad_token", "null", VSR_E_UNSUPPORTED, "the tokenizer has no pad token"},
        {"added_tokens_decoder", "[]", VSR_E_FORMAT, "added_tokens_decoder must be an object"},
        /* <|im_start|> listed at another id than the one it gets */
        {"added_tokens_decoder", "{\"151643\":{\"content\":\"<|endoftext|>\"},\"151645\":{\"content\":\"<|im_start|>\"}}",
         VSR_E_FORMAT, "special token '<|im_start|>' does not get ID 151645"},
        /* the fast class and explicit nulls/false are accepted */
        {"tokenizer_class", "\"Qwen2TokenizerFast\"", VSR_OK, ""},
        {"add_prefix_space", "null", VSR_OK, ""},
    };
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
        json_t *tc = json_loads(orig, 0, NULL);
        if (rules[i].value) json_object_set_new(tc, rules[i].key, json_loads(rules[i].value, JSON_DECODE_ANY, NULL));
        else json_object_del(tc, rules[i].key);
        json_dump_file(tc, path, 0);
        json_decref(tc);
        d = NULL;
        st = vsr_decider_open(p, eng.model, &d, &err);
        if (rules[i].code == VSR_OK) CHECK_OK(st, err);
        else CHECK_ERR(st, err, rules[i].code, rules[i].needle);
        vsr_decider_free(d);
        d = NULL;
    }
    test_write_file(path, orig, n);
    free(orig);
    /* restored: opens again */
    st = vsr_decider_open(p, eng.model, &d, &err);
    CHECK_OK(st, err);
    vsr_decider_free(d);
    /* the fixture's template and the three published ones are known, nothing else */
    char sha[65];
    vsr_sha256_hex(vsr_fixture_chat_template, strlen(vsr_fixture_chat_template), sha);
    extern const char *const vsr_d3_known_templates[];
    const char *want_known[] = {sha, "273d8e0e683b885071fb17e08d71e5f2a5ddfb5309756181681de4f5a1822d80",
                                "a4aee8afcf2e0711942cf848899be66016f8d14a889ff9ede07bca099c28f715",
                                "c3cf9e34abf4f9e36c2d72165aa9c132d3e2a725b6c2586aaa3a8af9d7a81041"};
    int n_known = 0;
    for (const char *const *t = vsr_d3_known_templates; *t; t++) n_known++;
    CHECK(n_known == 4);
    for (int i = 0; i < 4; i++) {
        bool known = false;
        for (const char *const *t = vsr_d3_known_templates; *t; t++) known |= !strcmp(*t, want_known[i]);
        CHECK_MSG(known, "template %s is not known", want_known[i]);
    }
}

/* The prompt is tokenized in two parts (the request's shared head, each question's tail):
 * for states that end in every kind of whitespace, punctuation, digits, special-token text and
 * non-ASCII, the two parts' ids equal the whole prompt tokenized at once. Then a state past the
 * input limit fails every question from the head alone, naming the limit. */
TEST(head_tail_split_is_exact) {
    setup();
    if (!loaded) return;
    static const char *const states[] = {
        "plain", "ends with a space ", "ends with spaces   ", "ends with a newline\n", "ends with \r\n",
        "tabs\t\t", "\n\n\n", "   ", "digits 12345", "punct !?.", "quote'", "it's", "<|im_end|>",
        "<|im_start|>user\n", "caf\xc3\xa9", "\xe4\xb8\xad\xe6\x96\x87\xe3\x80\x80", "emoji \xf0\x9f\x98\x80 ",
        "nbsp\xc2\xa0", "combining e\xcc\x81", "\xe2\x80\xa8 line sep", "x\n \n", "end\n\n ", "Question",
    };
    const vsr_tokenizer *tok = vsr_decider_tokenizer(eng.decider);
    for (size_t i = 0; i < sizeof states / sizeof states[0]; i++) {
        json_t *req = json_pack("{s:s,s:{s:{s:s,s:s},s:{s:s,s:s,s:[s,s]}}}", "state", states[i], "questions", "a",
                                "type", "noul", "instructions", " leading space?", "b", "type", "score",
                                "instructions", "\nnewline first", "criteria", "x", "y");
        char *body = json_dumps(req, JSON_COMPACT);
        json_decref(req);
        vsr_http_error he = {0};
        vsr_decision_job *j = vsr_decision_parse(eng.decider, body, strlen(body), NULL, &he);
        free(body);
        CHECK_MSG(j != NULL, "state %zu refused: %s", i, he.message);
        if (!j) continue;
        for (int k = 0; k < j->req[0].n_q; k++) {
            const d3_question *q = &j->req[0].q[k];
            CHECK_MSG(!q->err_code, "state %zu: %s", i, q->err_msg ? q->err_msg : "");
            if (q->err_code) continue;
            char *prompt = d3_question_prompt(q);
            int32_t *split = d3_question_ids(q), *whole = NULL;
            size_t n = 0;
            vsr_err e = {0};
            CHECK_OK(vsr_tokenizer_encode(tok, prompt, strlen(prompt), &whole, &n, &e), e);
            bool same = n == q->n_ids && split && whole && !memcmp(split, whole, n * sizeof *whole);
            CHECK_MSG(same, "state %zu question %s: head+tail %zu tokens, whole %zu", i, q->id, q->n_ids, n);
            CHECK(q->n_head > 0 && q->n_head < q->n_ids);
            free(prompt);
            free(split);
            free(whole);
        }
        /* one head for the request */
        CHECK(j->req[0].q[0].head_ids == j->req[0].q[1].head_ids);
        vsr_decision_free(j);
    }

    /* A state longer than the input limit: every question fails on the head, the tail is
     * never tokenized (ids stay empty), and the message names the limit. */
    int64_t limit = vsr_decider_max_input_tokens(eng.decider);
    size_t len = (size_t)limit * 4 + 16;
    char *big = malloc(len + 1);
    for (size_t k = 0; k < len; k++) big[k] = "ab c"[k % 4];
    big[len] = 0;
    json_t *qs = json_object();
    for (int k = 0; k < 200; k++) {
        char id[16];
        snprintf(id, sizeof id, "q%d", k);
        json_object_set_new(qs, id, json_pack("{s:s,s:s}", "type", "noul", "instructions", "Is it long?"));
    }
    /* the whole request past the limit: refused as a request, with the head's message */
    json_t *req = json_pack("{s:s,s:O}", "state", big, "questions", qs);
    char *body = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    vsr_http_error he = {0};
    vsr_decision_job *j = vsr_decision_parse(eng.decider, body, strlen(body), NULL, &he);
    free(body);
    char want[160];
    snprintf(want, sizeof want, "over the maximum context length of %lld tokens; nothing was truncated",
             (long long)limit);
    CHECK(j == NULL && he.status == 400 && strstr(he.message, "(the system turn and the state alone)") &&
          strstr(he.message, want));
    vsr_decision_free(j);
    /* a `states` entry past the limit beside a valid main request: its 200 questions fail alone */
    req = json_pack("{s:s,s:{s:{s:s,s:s}},s:{s:{s:s,s:o}}}", "state", "short", "questions", "ok", "type", "noul",
                    "instructions", "Fine?", "states", "long", "state", big, "questions", qs);
    body = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    free(big);
    j = vsr_decision_parse(eng.decider, body, strlen(body), NULL, &he);
    free(body);
    CHECK_MSG(j != NULL, "refused: %d %s", he.status, he.message);
    if (j) {
        CHECK(j->n_req == 2 && !j->req[0].q[0].err_code);
        int failed = 0;
        for (int k = 0; k < j->req[1].n_q; k++) {
            const d3_question *q = &j->req[1].q[k];
            failed += q->err_code && !strcmp(q->err_code, "max_length_exceeded") && q->ids == NULL &&
                      strstr(q->err_msg, "(the system turn and the state alone)") && strstr(q->err_msg, want);
        }
        CHECK_MSG(failed == 200, "%d of 200 questions failed on the head", failed);
        CHECK(vsr_decision_tokens(j) == (int64_t)j->req[0].q[0].n_ids);
        vsr_decision_free(j);
    }
}

int main(void) {
    RUN(answer_formulas);
    RUN(describe_is_python_json_dumps);
    RUN(foreach_order);
    RUN(states_batch_alone);
    RUN(prompts_match_oracle);
    RUN(head_tail_split_is_exact);
    RUN(answers_are_probabilities);
    RUN(validation_messages);
    RUN(golden_statuses);
    RUN(builtin_golden_recorded_and_matching);
    RUN(decider_refusals);
    if (loaded) vsr_engine_close(&eng);
    return test_summary();
}
