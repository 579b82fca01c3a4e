/* The router's routing logic (src/router/route.h) on configs parsed from YAML: the questions
 * asked (one call to the decision model, one per span deployment), the priority order,
 * three-valued evaluation with AND/OR and on_unknown, the failure messages, the weighted pick
 * (boundaries and a seeded distribution), and the states built from a chat request. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "router/route.h"
#include "test.h"
#include "vsr/router.h"

static const char *YAML =
    "global:\n"
    "  model_catalog:\n"
    "    deployments:\n"
    "      d3: {provider: model_runtime, endpoint: 'http://127.0.0.1:1', served_name: d3}\n"
    "      spans: {provider: model_runtime, endpoint: 'http://127.0.0.1:2', served_name: sp}\n"
    "      spans2: {provider: model_runtime, endpoint: 'http://127.0.0.1:3', served_name: sp2}\n"
    "    bindings:\n"
    "      pii: spans\n"
    "      hallucination: HALU\n"
    "    system:\n"
    "      decision_model: {deployment: d3}\n"
    "providers:\n"
    "  models:\n"
    "    - name: small\n"
    "      backend_refs:\n"
    "        - {name: a, endpoint: 'http://127.0.0.1:9001', weight: 90}\n"
    "        - {name: z, endpoint: 'http://127.0.0.1:9003', weight: 0}\n"
    "        - {name: b, endpoint: 'http://127.0.0.1:9002', weight: 10}\n"
    "    - name: big\n"
    "      backend_refs: [{endpoint: 'http://127.0.0.1:9004'}]\n"
    "    - name: safe\n"
    "      backend_refs: [{endpoint: 'http://127.0.0.1:9005'}]\n"
    "  defaults:\n"
    "    default_model: small\n"
    "routing:\n"
    "  decisions:\n"
    "    - name: private\n"
    "      priority: 5\n"
    "      rules:\n"
    "        operator: OR\n"
    "        on_unknown: ONUNKNOWN\n"
    "        conditions:\n"
    "          - signal: pii\n"
    "          - signal: hallucination\n"
    "      modelRefs: [{model: safe}]\n"
    "    - name: hard-code\n"
    "      priority: 20\n"
    "      rules:\n"
    "        operator: AND\n"
    "        conditions:\n"
    "          - {question: domain, type: choice, instructions: Which domain?, criteria: {code: Programming, other: Else}, label: code}\n"
    "          - {question: hard, type: score, instructions: How hard?, criteria: [Easy, Medium, Hard], threshold: 0.5}\n"
    "      modelRefs: [{model: big}]\n"
    "    - name: code\n"
    "      priority: 5\n"
    "      rules:\n"
    "        operator: AND\n"
    "        conditions:\n"
    "          - {question: domain, type: choice, instructions: Which domain?, criteria: {code: Programming, other: Else}, label: code}\n"
    "          - {question: reason, type: noul, instructions: Needs reasoning?, threshold: 0.25}\n"
    "      modelRefs: [{model: big}]\n";

static char *subst(const char *s, const char *from, const char *to) {
    const char *p = strstr(s, from);
    if (!p) return strdup(s);
    size_t a = (size_t)(p - s), lf = strlen(from), lt = strlen(to);
    char *o = malloc(strlen(s) - lf + lt + 1);
    memcpy(o, s, a);
    memcpy(o + a, to, lt);
    strcpy(o + a + lt, p + lf);
    return o;
}

/* The config with the hallucination binding on `halu_dep` and on_unknown `ou`. */
static vsr_router_config *load(const char *halu_dep, const char *ou) {
    char *a = subst(YAML, "HALU", halu_dep);
    char *b = subst(a, "ONUNKNOWN", ou);
    vsr_router_config *c = vsr_router_config_parse(b, strlen(b), "route.yaml", NULL);
    free(a);
    free(b);
    char line[1024];
    for (int i = 0; c && i < c->n_errors; i++) fprintf(stderr, "  %s\n", vsr_rt_error_format(&c->errors[i], line, sizeof line));
    CHECK(c && c->n_errors == 0);
    return c;
}

TEST(table_questions_order_and_calls) {
    vsr_router_config *c = load("spans", "no_match");
    rt_table *t = c ? rt_table_build(c) : NULL;
    CHECK(t != NULL);
    if (!t) return;
    /* priority descending, ties in config order: hard-code(20), private(5), code(5) */
    CHECK(t->order[0] == 1 && t->order[1] == 0 && t->order[2] == 2);
    /* one definition per question id, every decision's questions */
    CHECK(json_object_size(t->questions) == 3);
    json_t *dom = json_object_get(t->questions, "domain");
    CHECK(!strcmp(json_string_value(json_object_get(dom, "type")), "choice"));
    CHECK(!strcmp(json_string_value(json_object_get(json_object_get(dom, "criteria"), "code")), "Programming"));
    json_t *hard = json_object_get(t->questions, "hard");
    CHECK(json_array_size(json_object_get(hard, "criteria")) == 3);
    CHECK(json_object_get(json_object_get(t->questions, "reason"), "criteria") == NULL);
    /* pii and hallucination on one deployment: one call with both presets */
    CHECK(t->n_span_calls == 1 && !strcmp(t->span_calls[0].deployment, "spans") && t->span_calls[0].signal[RT_SIG_PII] &&
          t->span_calls[0].signal[RT_SIG_HALU]);
    json_t *q = t->span_calls[0].questions;
    CHECK(!strcmp(json_string_value(json_object_get(json_object_get(q, "pii"), "preset")), "pii"));
    CHECK(!strcmp(json_string_value(json_object_get(json_object_get(q, "pii"), "over")), "request"));
    CHECK(!strcmp(json_string_value(json_object_get(json_object_get(q, "halu"), "preset")), "halu"));
    CHECK(t->n_used == 2 && !strcmp(t->used[0], "d3") && !strcmp(t->used[1], "spans"));
    rt_table_free(t);
    vsr_router_config_free(c);
    /* on two deployments: two calls */
    c = load("spans2", "no_match");
    t = c ? rt_table_build(c) : NULL;
    CHECK(t && t->n_span_calls == 2 && !strcmp(t->span_calls[1].deployment, "spans2") &&
          !t->span_calls[1].signal[RT_SIG_PII] && t->span_calls[1].signal[RT_SIG_HALU] && t->n_used == 3);
    rt_table_free(t);
    vsr_router_config_free(c);
}

/* A decision model answer: domain choice, hard score, reason noul (an error when code is set). */
static json_t *decision_answer(const char *domain, double hard, double reason, const char *reason_error) {
    json_t *a = json_object();
    json_object_set_new(a, "domain", json_pack("{s:s,s:s}", "type", "choice", "choice", domain));
    json_object_set_new(a, "hard", json_pack("{s:s,s:f}", "type", "score", "score", hard));
    if (reason_error)
        json_object_set_new(a, "reason", json_pack("{s:s,s:s,s:s}", "type", "noul", "error", reason_error, "message", "too long"));
    else json_object_set_new(a, "reason", json_pack("{s:s,s:f}", "type", "noul", "noul", reason));
    return json_pack("{s:s,s:o}", "model", "d3", "answers", a);
}

/* A span deployment answer (reference-profiles-spans.md 3.2): n_pii spans for pii, n_halu for halu. */
static json_t *span_answer(int n_pii, int n_halu, bool pii_error) {
    json_t *answers = json_object(), *spans = json_object();
    if (pii_error) json_object_set_new(answers, "pii", json_pack("{s:s,s:s}", "type", "span", "error", "max_length_exceeded"));
    else json_object_set_new(answers, "pii", json_pack("{s:s,s:f}", "type", "noul", "noul", n_pii ? 0.99 : 0.01));
    json_object_set_new(answers, "halu", json_pack("{s:s,s:f}", "type", "noul", "noul", n_halu ? 0.9 : 0.1));
    json_t *p = json_array(), *h = json_array();
    for (int i = 0; i < n_pii; i++)
        json_array_append_new(p, json_pack("{s:s,s:i,s:i,s:s,s:f}", "label", "PERSON", "start", 8, "end", 17, "text",
                                           "Tom Baker", "probability", 0.998));
    for (int i = 0; i < n_halu; i++)
        json_array_append_new(h, json_pack("{s:s,s:i,s:i,s:s,s:f}", "label", "unsupported", "start", 0, "end", 5, "text",
                                           "Adult", "probability", 0.97));
    json_object_set_new(spans, "pii", p);
    json_object_set_new(spans, "halu", h);
    return json_pack("{s:o,s:o,s:{s:f,s:f}}", "answers", answers, "spans", spans, "thresholds", "pii", 0.05, "halu", 0.55);
}

TEST(conditions_three_valued) {
    vsr_router_config *c = load("spans", "no_match");
    if (!c) return;
    const vsr_rt_decision *hard = &c->decisions[1], *code = &c->decisions[2], *priv = &c->decisions[0];
    json_t *d = decision_answer("code", 0.5, 0.25, NULL);
    rt_signals s = {.decision = d};
    CHECK(rt_condition_eval(&hard->conditions[0], &s) == RT_TRUE);
    CHECK(rt_condition_eval(&hard->conditions[1], &s) == RT_TRUE); /* score == threshold matches */
    CHECK(rt_condition_eval(&code->conditions[1], &s) == RT_TRUE); /* noul == threshold matches */
    json_decref(d);
    d = decision_answer("other", 0.4999, 0.2499, NULL);
    s.decision = d;
    CHECK(rt_condition_eval(&hard->conditions[0], &s) == RT_FALSE);
    CHECK(rt_condition_eval(&hard->conditions[1], &s) == RT_FALSE);
    CHECK(rt_condition_eval(&code->conditions[1], &s) == RT_FALSE);
    json_decref(d);
    d = decision_answer("code", 0.9, 0, "max_length_exceeded"); /* an item error is unknown */
    s.decision = d;
    CHECK(rt_condition_eval(&code->conditions[1], &s) == RT_UNKNOWN);
    CHECK(rt_decision_eval(code, &s) == RT_UNKNOWN);            /* AND: true, unknown */
    json_decref(d);
    d = decision_answer("other", 0.9, 0, "max_length_exceeded");
    s.decision = d;
    CHECK(rt_decision_eval(code, &s) == RT_FALSE);              /* AND: false, unknown */
    json_decref(d);
    s.decision = NULL;                                           /* the decision model is down */
    CHECK(rt_condition_eval(&hard->conditions[0], &s) == RT_UNKNOWN && rt_decision_eval(hard, &s) == RT_UNKNOWN);
    /* span signals: spans found -> true, none -> false, an error or no answer -> unknown */
    json_t *sp = span_answer(2, 0, false);
    s.span[RT_SIG_PII] = s.span[RT_SIG_HALU] = sp;
    CHECK(rt_condition_eval(&priv->conditions[0], &s) == RT_TRUE);
    CHECK(rt_condition_eval(&priv->conditions[1], &s) == RT_FALSE);
    CHECK(rt_decision_eval(priv, &s) == RT_TRUE);
    json_decref(sp);
    sp = span_answer(0, 0, true);
    s.span[RT_SIG_PII] = s.span[RT_SIG_HALU] = sp;
    CHECK(rt_condition_eval(&priv->conditions[0], &s) == RT_UNKNOWN);
    CHECK(rt_decision_eval(priv, &s) == RT_UNKNOWN);            /* OR: unknown, false */
    json_decref(sp);
    sp = span_answer(0, 1, true);
    s.span[RT_SIG_PII] = s.span[RT_SIG_HALU] = sp;
    CHECK(rt_decision_eval(priv, &s) == RT_TRUE);               /* OR: unknown, true */
    json_decref(sp);
    s.span[RT_SIG_PII] = s.span[RT_SIG_HALU] = NULL;
    CHECK(rt_decision_eval(priv, &s) == RT_UNKNOWN);
    vsr_router_config_free(c);
}

TEST(route_priority_default_and_failures) {
    vsr_router_config *c = load("spans", "no_match");
    rt_table *t = c ? rt_table_build(c) : NULL;
    if (!t) return;
    rt_choice ch;
    json_t *d = decision_answer("code", 0.8, 0.9, NULL), *sp = span_answer(1, 0, false);
    rt_signals s = {.decision = d, .span = {sp, sp}};
    rt_route(t, &s, &ch); /* hard-code (20) beats private and code (5) */
    CHECK(!ch.fail && ch.decision == 1 && !strcmp(ch.model, "big"));
    json_decref(d);
    d = decision_answer("code", 0.1, 0.9, NULL);
    s.decision = d;
    rt_route(t, &s, &ch); /* private (5, first in config order) beats code (5) */
    CHECK(!ch.fail && ch.decision == 0 && !strcmp(ch.model, "safe"));
    json_decref(sp);
    sp = span_answer(0, 0, false);
    s.span[0] = s.span[1] = sp;
    rt_route(t, &s, &ch);
    CHECK(!ch.fail && ch.decision == 2 && !strcmp(ch.model, "big"));
    json_decref(d);
    d = decision_answer("other", 0.1, 0.9, NULL);
    s.decision = d;
    rt_route(t, &s, &ch); /* nothing matches: the default model */
    CHECK(!ch.fail && ch.decision == -1 && !strcmp(ch.model, "small"));
    /* the span deployment is down, on_unknown: no_match -> skipped */
    s.span[0] = s.span[1] = NULL;
    s.span_why[0] = s.span_why[1] = "deployment 'spans' has no ready replica";
    rt_route(t, &s, &ch);
    CHECK(!ch.fail && ch.decision == -1);
    json_decref(d);
    json_decref(sp);
    rt_table_free(t);
    vsr_router_config_free(c);

    /* on_unknown: fail_request -> the request fails, naming the decision and why */
    c = load("spans", "fail_request");
    t = c ? rt_table_build(c) : NULL;
    if (!t) return;
    d = decision_answer("other", 0.1, 0.9, NULL);
    s = (rt_signals){.decision = d, .span_why = {"deployment 'spans' has no ready replica", "deployment 'spans' has no ready replica"}};
    rt_route(t, &s, &ch);
    CHECK(ch.fail && ch.status == 503 && !strcmp(ch.code, "decision_unknown"));
    CHECK_MSG(!strcmp(ch.why, "decision 'private' (priority 5, on_unknown: fail_request) could not be evaluated: signal pii "
                              "is unknown: deployment 'spans' has no ready replica"),
              "%s", ch.why);
    /* a higher-priority decision that matches wins before the unknown one is reached */
    json_decref(d);
    d = decision_answer("code", 0.9, 0.9, NULL);
    s.decision = d;
    rt_route(t, &s, &ch);
    CHECK(!ch.fail && ch.decision == 1);
    json_decref(d);
    rt_table_free(t);
    vsr_router_config_free(c);
}

TEST(route_unknown_messages_and_no_default) {
    char *y = subst(YAML, "  defaults:\n    default_model: small\n", "");
    char *y2 = subst(y, "HALU", "spans");
    char *y3 = subst(y2, "ONUNKNOWN", "no_match");
    char *y4 = subst(y3, "          - {question: domain, type: choice, instructions: Which domain?, criteria: {code: "
                         "Programming, other: Else}, label: code}\n          - {question: hard",
                     "          - {question: hard");
    vsr_router_config *c = vsr_router_config_parse(y4, strlen(y4), "x.yaml", NULL);
    free(y), free(y2), free(y3), free(y4);
    CHECK(c && c->n_errors == 0);
    rt_table *t = c && !c->n_errors ? rt_table_build(c) : NULL;
    if (!t) {
        vsr_router_config_free(c);
        return;
    }
    json_t *d = decision_answer("other", 0.1, 0.1, NULL), *sp = span_answer(0, 0, false);
    rt_signals s = {.decision = d, .span = {sp, sp}};
    rt_choice ch;
    rt_route(t, &s, &ch);
    CHECK(ch.fail && ch.status == 503 && !strcmp(ch.code, "no_route") &&
          !strcmp(ch.why, "no routing decision matched and providers.defaults.default_model is not set"));
    json_decref(d);
    json_decref(sp);
    rt_table_free(t);
    vsr_router_config_free(c);
    /* a config without providers */
    const char *bare = "global:\n  model_catalog:\n    deployments:\n      d3: {endpoint: 'http://h:1', served_name: x}\n"
                       "    system:\n      decision_model: {deployment: d3}\n";
    c = vsr_router_config_parse(bare, strlen(bare), "bare.yaml", NULL);
    t = c ? rt_table_build(c) : NULL;
    CHECK(t && !t->questions && t->n_span_calls == 0 && t->n_used == 1);
    s = (rt_signals){0};
    if (t) rt_route(t, &s, &ch);
    CHECK(ch.fail && !strcmp(ch.why, "the router has no providers.models to send chat completions to"));
    rt_table_free(t);
    vsr_router_config_free(c);
}

TEST(weighted_pick) {
    vsr_router_config *c = load("spans", "no_match");
    if (!c) return;
    const vsr_rt_model *m = rt_find_model(c, "small");
    CHECK(m && m->n_backends == 3);
    if (!m) return;
    /* cumulative over positive weights: a [0, 0.9), b [0.9, 1); z (weight 0) never */
    CHECK(rt_pick_backend(m, 0.0) == 0);
    CHECK(rt_pick_backend(m, 0.8999) == 0);
    CHECK(rt_pick_backend(m, 0.9) == 2);
    CHECK(rt_pick_backend(m, 0.9999999) == 2);
    CHECK(rt_pick_backend(rt_find_model(c, "big"), 0.7) == 0); /* weight defaults to 1 */
    vsr_rt_backend zero[2] = {{.endpoint = "http://x", .weight = 0}, {.endpoint = "http://y", .weight = 0}};
    vsr_rt_model mz = {.name = "z", .n_backends = 2, .backends = zero};
    CHECK(rt_pick_backend(&mz, 0.5) == -1);
    /* seeded: the same seed gives the same draws; 100000 draws give b its 10 % share */
    rt_rng_seed(42);
    double first = rt_rng_uniform();
    rt_rng_seed(42);
    CHECK(rt_rng_uniform() == first);
    int counts[3] = {0};
    for (int i = 0; i < 100000; i++) {
        double u = rt_rng_uniform();
        CHECK(u >= 0 && u < 1);
        counts[rt_pick_backend(m, u)]++;
    }
    CHECK_MSG(counts[1] == 0 && fabs(counts[2] / 100000.0 - 0.10) < 0.005, "a %d z %d b %d", counts[0], counts[1], counts[2]);
    vsr_router_config_free(c);
}

TEST(chat_states) {
    const char *body = "{\"model\":\"auto\",\"messages\":["
                       "{\"role\":\"system\",\"content\":\"You are terse.\"},"
                       "{\"role\":\"user\",\"content\":\"first\"},"
                       "{\"role\":\"assistant\",\"content\":\"an answer\"},"
                       "{\"role\":\"tool\",\"content\":\"42\"},"
                       "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Hi, I'm Tom\"},"
                       "{\"type\":\"image_url\",\"image_url\":{\"url\":\"x\"}},{\"type\":\"text\",\"text\":\"bye\"}]}]}";
    json_t *b = json_loads(body, 0, NULL);
    char err[256];
    json_t *st = rt_chat_state(b, err, sizeof err);
    CHECK(json_array_size(st) == 5);
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(st, 4), "content")), "Hi, I'm Tom\nbye"));
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(st, 0), "role")), "system"));
    json_t *sp = rt_span_state(b);
    CHECK(!strcmp(json_string_value(json_object_get(sp, "request")), "Hi, I'm Tom\nbye"));
    CHECK(!strcmp(json_string_value(json_object_get(sp, "source")), "You are terse.\n\n42"));
    CHECK(!strcmp(json_string_value(json_object_get(sp, "answer")), "an answer"));
    char *req = rt_decisions_body("vllm-sr-c/d3-tiny", st, json_object_get(b, "messages"), 0);
    json_t *rq = json_loads(req, 0, NULL);
    CHECK(rq && !strcmp(json_string_value(json_object_get(rq, "model")), "vllm-sr-c/d3-tiny") &&
          json_array_size(json_object_get(rq, "state")) == 5 && !json_object_get(rq, "options"));
    free(req);
    json_decref(rq);
    json_decref(sp);
    json_decref(st);
    json_decref(b);
    /* refusals */
    b = json_loads("{\"model\":\"auto\"}", 0, NULL);
    CHECK(!rt_chat_state(b, err, sizeof err) && !strcmp(err, "messages must be a non-empty array of {role, content}"));
    json_decref(b);
    b = json_loads("{\"messages\":[{\"content\":\"x\"}]}", 0, NULL);
    CHECK(!rt_chat_state(b, err, sizeof err) && !strcmp(err, "messages[0] needs role (a string)"));
    json_decref(b);
}

int main(void) {
    RUN(table_questions_order_and_calls);
    RUN(conditions_three_valued);
    RUN(route_priority_default_and_failures);
    RUN(route_unknown_messages_and_no_default);
    RUN(weighted_pick);
    RUN(chat_states);
    return test_summary();
}
