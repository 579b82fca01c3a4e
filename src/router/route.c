/* The router's routing logic (route.h): the questions, three-valued evaluation, the weighted pick. */
#include "router/route.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const signal_names[RT_N_SIGNALS] = {"pii", "hallucination"};
static const char *const signal_bindings[RT_N_SIGNALS] = {"pii_classifier", "hallucination_detector"};
static const char *const signal_qids[RT_N_SIGNALS] = {"pii", "halu"};

const char *rt_signal_qid(int signal) { return signal >= 0 && signal < RT_N_SIGNALS ? signal_qids[signal] : NULL; }

int rt_signal_index(const char *name) {
    for (int i = 0; name && i < RT_N_SIGNALS; i++)
        if (!strcmp(name, signal_names[i])) return i;
    return -1;
}

/* ---- the table ---- */

static json_t *question_json(const vsr_rt_condition *q) {
    json_t *o = json_object();
    json_object_set_new(o, "type", json_string(q->type));
    json_object_set_new(o, "instructions", json_string(q->instructions));
    if (q->n_criteria && q->criteria_desc) {
        json_t *m = json_object();
        for (int i = 0; i < q->n_criteria; i++) json_object_set_new(m, q->criteria[i], json_string(q->criteria_desc[i]));
        json_object_set_new(o, "criteria", m);
    } else if (q->n_criteria) {
        json_t *a = json_array();
        for (int i = 0; i < q->n_criteria; i++) json_array_append_new(a, json_string(q->criteria[i]));
        json_object_set_new(o, "criteria", a);
    }
    return o;
}

static const char *binding_deployment(const vsr_router_config *c, const char *binding) {
    for (int i = 0; i < c->n_bindings; i++)
        if (!strcmp(c->bindings[i].name, binding)) return c->bindings[i].deployment;
    return NULL;
}

static void add_used(rt_table *t, const char *key) {
    if (!key) return;
    for (int i = 0; i < t->n_used; i++)
        if (!strcmp(t->used[i], key)) return;
    t->used[t->n_used++] = key;
}

/* a goes before b: higher priority first, ties in config order. */
static bool before(const vsr_router_config *c, int a, int b) {
    if (c->decisions[a].priority != c->decisions[b].priority) return c->decisions[a].priority > c->decisions[b].priority;
    return a < b;
}

rt_table *rt_table_build(const vsr_router_config *c) {
    rt_table *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->cfg = c;
    t->order = calloc((size_t)c->n_decisions + 1, sizeof *t->order);
    t->used = calloc((size_t)c->n_bindings + 2, sizeof *t->used);
    if (!t->order || !t->used) {
        rt_table_free(t);
        return NULL;
    }
    for (int i = 0; i < c->n_decisions; i++) t->order[i] = i;
    /* insertion sort: stable, and the table is small */
    for (int i = 1; i < c->n_decisions; i++) {
        int v = t->order[i], j = i - 1;
        while (j >= 0 && before(c, v, t->order[j])) {
            t->order[j + 1] = t->order[j];
            j--;
        }
        t->order[j + 1] = v;
    }
    bool want[RT_N_SIGNALS] = {false};
    for (int i = 0; i < c->n_decisions; i++) {
        const vsr_rt_decision *d = &c->decisions[i];
        for (int j = 0; j < d->n_conditions; j++) {
            const vsr_rt_condition *q = &d->conditions[j];
            int sg = rt_signal_index(q->signal);
            if (sg >= 0) want[sg] = true;
            if (!q->question || !q->type) continue;
            if (!t->questions) t->questions = json_object();
            if (!json_object_get(t->questions, q->question))
                json_object_set_new(t->questions, q->question, question_json(q));
        }
    }
    add_used(t, c->decision_model); /* asked by the rules, and /v1/decisions forwards to it */
    for (int i = 0; i < c->n_bindings; i++) add_used(t, c->bindings[i].deployment);
    /* One call per span deployment, answering the signals some decision reads. */
    for (int sg = 0; sg < RT_N_SIGNALS; sg++) {
        const char *dep = want[sg] ? binding_deployment(c, signal_bindings[sg]) : NULL;
        if (!dep) continue;
        rt_span_call *call = NULL;
        for (int k = 0; k < t->n_span_calls; k++)
            if (!strcmp(t->span_calls[k].deployment, dep)) call = &t->span_calls[k];
        if (!call) {
            call = &t->span_calls[t->n_span_calls++];
            call->deployment = dep;
            call->questions = json_object();
        }
        call->signal[sg] = true;
        json_t *pq = json_object();
        json_object_set_new(pq, "preset", json_string(signal_qids[sg]));
        if (sg == RT_SIG_PII) json_object_set_new(pq, "over", json_string("request"));
        json_object_set_new(call->questions, signal_qids[sg], pq);
    }
    return t;
}

void rt_table_free(rt_table *t) {
    if (!t) return;
    free(t->order);
    free(t->used);
    json_decref(t->questions);
    for (int i = 0; i < t->n_span_calls; i++) json_decref(t->span_calls[i].questions);
    free(t);
}

/* ---- evaluation ---- */

static rt_tri question_eval(const vsr_rt_condition *q, const json_t *resp) {
    if (!resp) return RT_UNKNOWN;
    const json_t *a = json_object_get(json_object_get(resp, "answers"), q->question);
    if (!json_is_object(a) || json_object_get(a, "error")) return RT_UNKNOWN;
    if (!strcmp(q->type, "choice")) {
        const char *ch = json_string_value(json_object_get(a, "choice"));
        if (!ch) return RT_UNKNOWN;
        return !strcmp(ch, q->label) ? RT_TRUE : RT_FALSE;
    }
    const json_t *v = json_object_get(a, q->type); /* "noul" or "score" */
    if (!json_is_number(v)) return RT_UNKNOWN;
    double x = json_number_value(v);
    if (!isfinite(x)) return RT_UNKNOWN;
    return x >= q->threshold ? RT_TRUE : RT_FALSE;
}

static rt_tri signal_eval(int sg, const json_t *resp) {
    if (!resp) return RT_UNKNOWN;
    const char *qid = signal_qids[sg];
    const json_t *a = json_object_get(json_object_get(resp, "answers"), qid);
    if (!json_is_object(a) || json_object_get(a, "error")) return RT_UNKNOWN;
    const json_t *spans = json_object_get(json_object_get(resp, "spans"), qid);
    if (spans && !json_is_array(spans)) return RT_UNKNOWN;
    return json_array_size(spans) > 0 ? RT_TRUE : RT_FALSE;
}

rt_tri rt_condition_eval(const vsr_rt_condition *q, const rt_signals *s) {
    int sg = rt_signal_index(q->signal);
    if (sg >= 0) return signal_eval(sg, s->span[sg]);
    if (!q->question || !q->type) return RT_UNKNOWN;
    return question_eval(q, s->decision);
}

rt_tri rt_decision_eval(const vsr_rt_decision *d, const rt_signals *s) {
    bool any_unknown = false;
    for (int i = 0; i < d->n_conditions; i++) {
        rt_tri v = rt_condition_eval(&d->conditions[i], s);
        if (v == RT_UNKNOWN) any_unknown = true;
        else if (d->operator_or && v == RT_TRUE) return RT_TRUE;
        else if (!d->operator_or && v == RT_FALSE) return RT_FALSE;
    }
    if (any_unknown) return RT_UNKNOWN;
    return d->operator_or ? RT_FALSE : RT_TRUE;
}

/* Why a decision's answers are unknown, for the error message. */
static void unknown_reason(const vsr_rt_decision *d, const rt_signals *s, char *buf, size_t n) {
    for (int i = 0; i < d->n_conditions; i++) {
        const vsr_rt_condition *q = &d->conditions[i];
        if (rt_condition_eval(q, s) != RT_UNKNOWN) continue;
        int sg = rt_signal_index(q->signal);
        if (sg >= 0) {
            snprintf(buf, n, "signal %s is unknown: %s", q->signal,
                     s->span[sg] ? "the span deployment answered it with an error" : s->span_why[sg] ? s->span_why[sg] : "not asked");
        } else if (!s->decision) {
            snprintf(buf, n, "question '%s' is unknown: %s", q->question ? q->question : "?",
                     s->decision_why ? s->decision_why : "the decision model was not asked");
        } else {
            const json_t *a = json_object_get(json_object_get(s->decision, "answers"), q->question);
            const char *code = json_string_value(json_object_get(a, "error"));
            const char *msg = json_string_value(json_object_get(a, "message"));
            snprintf(buf, n, "question '%s' is unknown: the decision model answered %s%s%s", q->question,
                     code ? code : "no usable answer", msg ? ": " : "", msg ? msg : "");
        }
        return;
    }
    snprintf(buf, n, "unknown");
}

const vsr_rt_model *rt_find_model(const vsr_router_config *c, const char *name) {
    for (int i = 0; name && i < c->n_models; i++)
        if (c->models[i].name && !strcmp(c->models[i].name, name)) return &c->models[i];
    return NULL;
}

void rt_route(const rt_table *t, const rt_signals *s, rt_choice *out) {
    const vsr_router_config *c = t->cfg;
    memset(out, 0, sizeof *out);
    out->decision = -1;
    for (int k = 0; k < c->n_decisions; k++) {
        int i = t->order[k];
        const vsr_rt_decision *d = &c->decisions[i];
        rt_tri v = rt_decision_eval(d, s);
        if (v == RT_TRUE) {
            out->decision = i;
            out->model = d->n_model_refs ? d->model_refs[0] : NULL;
            return;
        }
        if (v == RT_UNKNOWN && d->fail_request) {
            char why[512];
            unknown_reason(d, s, why, sizeof why);
            out->fail = true;
            out->status = 503;
            snprintf(out->code, sizeof out->code, "decision_unknown");
            snprintf(out->why, sizeof out->why,
                     "decision '%s' (priority %d, on_unknown: fail_request) could not be evaluated: %s", d->name,
                     d->priority, why);
            return;
        }
    }
    if (c->default_model) {
        out->model = c->default_model;
        return;
    }
    out->fail = true;
    out->status = 503;
    snprintf(out->code, sizeof out->code, "no_route");
    snprintf(out->why, sizeof out->why,
             c->n_models ? "no routing decision matched and providers.defaults.default_model is not set"
                         : "the router has no providers.models to send chat completions to");
}

int rt_pick_backend(const vsr_rt_model *m, double u) {
    double total = 0;
    for (int i = 0; i < m->n_backends; i++)
        if (m->backends[i].weight > 0) total += m->backends[i].weight;
    if (total <= 0) return -1;
    double x = u * total, acc = 0;
    int last = -1;
    for (int i = 0; i < m->n_backends; i++) {
        if (m->backends[i].weight <= 0) continue;
        acc += m->backends[i].weight;
        last = i;
        if (x < acc) return i;
    }
    return last; /* u rounding at the top */
}

/* ---- request bodies ---- */

/* A message's content as text: a string, or the text parts of an array joined by "\n". */
static char *content_text(const json_t *content) {
    if (json_is_string(content)) return strdup(json_string_value(content));
    if (!json_is_array(content)) return strdup("");
    size_t n = 0, cap = 64;
    char *out = malloc(cap);
    if (!out) return NULL;
    out[0] = 0;
    size_t i;
    const json_t *part;
    json_array_foreach(content, i, part) {
        const char *text = json_string_value(json_object_get(part, "text"));
        if (!text) continue;
        size_t l = strlen(text);
        if (n + l + 2 > cap) {
            while (n + l + 2 > cap) cap *= 2;
            char *nb = realloc(out, cap);
            if (!nb) {
                free(out);
                return NULL;
            }
            out = nb;
        }
        if (n) out[n++] = '\n';
        memcpy(out + n, text, l + 1);
        n += l;
    }
    return out;
}

json_t *rt_chat_state(const json_t *body, char *err, size_t n) {
    const json_t *msgs = json_object_get(body, "messages");
    if (!json_is_array(msgs) || !json_array_size(msgs)) {
        snprintf(err, n, "messages must be a non-empty array of {role, content}");
        return NULL;
    }
    json_t *state = json_array();
    size_t i;
    const json_t *m;
    json_array_foreach(msgs, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!role) {
            snprintf(err, n, "messages[%zu] needs role (a string)", i);
            json_decref(state);
            return NULL;
        }
        char *text = content_text(json_object_get(m, "content"));
        json_array_append_new(state, json_pack("{s:s,s:s}", "role", role, "content", text ? text : ""));
        free(text);
    }
    return state;
}

static void append_block(char **acc, const char *text) {
    if (!text || !*text) return;
    size_t a = *acc ? strlen(*acc) : 0, l = strlen(text);
    char *nb = realloc(*acc, a + l + 3);
    if (!nb) return;
    if (a) memcpy(nb + a, "\n\n", 2), a += 2;
    memcpy(nb + a, text, l + 1);
    *acc = nb;
}

json_t *rt_span_state(const json_t *body) {
    const json_t *msgs = json_object_get(body, "messages");
    char *request = NULL, *source = NULL, *answer = NULL;
    size_t i;
    const json_t *m;
    json_array_foreach(msgs, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        char *text = content_text(json_object_get(m, "content"));
        if (!role || !text) {
            free(text);
            continue;
        }
        if (!strcmp(role, "user")) {
            free(request);
            request = text;
            continue;
        }
        if (!strcmp(role, "assistant")) {
            free(answer);
            answer = text;
            continue;
        }
        append_block(&source, text); /* system, developer, tool */
        free(text);
    }
    json_t *st = json_object();
    if (request && *request) json_object_set_new(st, "request", json_string(request));
    if (source && *source) json_object_set_new(st, "source", json_string(source));
    if (answer && *answer) json_object_set_new(st, "answer", json_string(answer));
    free(request), free(source), free(answer);
    return st;
}

char *rt_decisions_body(const char *model, const json_t *state, const json_t *questions, int deadline_ms) {
    json_t *o = json_object();
    if (model && *model) json_object_set_new(o, "model", json_string(model));
    json_object_set(o, "state", (json_t *)state);
    json_object_set(o, "questions", (json_t *)questions);
    if (deadline_ms > 0) json_object_set_new(o, "options", json_pack("{s:i}", "deadline_ms", deadline_ms));
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

/* ---- the generator ---- */

static pthread_mutex_t rng_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned long long rng_state = 0x9e3779b97f4a7c15ULL;

void rt_rng_seed(unsigned long long seed) {
    pthread_mutex_lock(&rng_mu);
    rng_state = seed;
    pthread_mutex_unlock(&rng_mu);
}

double rt_rng_uniform(void) {
    pthread_mutex_lock(&rng_mu);
    unsigned long long z = (rng_state += 0x9e3779b97f4a7c15ULL);
    pthread_mutex_unlock(&rng_mu);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}
