/* POST /v1/classify on a Vela 2.0 decoder package: the token kind over the span heads
 * (reference-profiles-spans.md section 4, reference-runtime.md 1.5).
 *
 * The package's span presets are its heads: `pii` (the router span head with the pii schema's 17
 * labels, inputs: text) and `halu` (the router span head with the halu schema's label, inputs:
 * grounded {context, question, answer}, read over the answer). Each input becomes one request of a
 * vsr_v2_job holding that preset's span question, so a classify answer is exactly the span answer
 * /v1/decisions gives for the same text and preset: the same words, thresholds (the PII length rule
 * and sparse gate included), windows and decoding. Spans are decoded from word probabilities, not
 * BIO tags: `labels` lists the head's span labels. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vela2/decide_internal.h"

#define MAX_INPUTS 2048

enum { HEAD_PII, HEAD_HALU };
static const char *const head_names[2] = {"pii", "halu"};

typedef struct c_input {
    int req;            /* index into job->req, -1 when the input failed before layout */
    const char *code;   /* item error (static) */
    char *msg;
} c_input;

struct vsr_v2_classify {
    vsr_v2_job *job;
    const vsr_v2_decider *d;
    int head;
    int n_inputs;
    c_input *in;
    bool reject;        /* overflow: reject */
};

static bool blank(const char *s) {
    for (; *s; s++)
        if (*s != ' ' && *s != '\t' && *s != '\n' && *s != '\r' && *s != '\f' && *s != '\v') return false;
    return true;
}

static char *dupf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *dupf(const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return strdup(buf);
}

/* The heads this model has: a span preset whose schema calibration.json defines. */
static bool has_head(const vsr_v2_decider *d, int head) { return d->cal.schema[head] != NULL; }

int vsr_v2_classify_heads(const vsr_v2_decider *d, const char **names, int max) {
    int n = 0;
    for (int h = 0; h < 2; h++)
        if (has_head(d, h)) {
            if (n < max) names[n] = head_names[h];
            n++;
        }
    return n;
}

static const char *head_list(const vsr_v2_decider *d, char *buf, size_t n) {
    size_t o = 0;
    buf[0] = 0;
    o += (size_t)snprintf(buf + o, n - o, "[");
    bool first = true;
    for (int h = 0; h < 2 && o < n; h++)
        if (has_head(d, h)) {
            o += (size_t)snprintf(buf + o, n - o, "%s'%s'", first ? "" : ", ", head_names[h]);
            first = false;
        }
    if (o < n) snprintf(buf + o, n - o, "]");
    return buf;
}

static bool parse_options(vsr_v2_classify *c, vsr_v2_job *j, const json_t *jo, json_t **threshold, bool *truncate,
                          vsr_http_error *h) {
    if (!jo || json_is_null(jo)) return true;
    if (!json_is_object(jo)) {
        vsr_http_fail(h, 400, "invalid_request", "options must be an object");
        return false;
    }
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)jo, k, v) {
        if (!strcmp(k, "deadline_ms")) {
            if (!vsr_option_deadline_ms(v, &j->deadline_ms, h)) return false;
        } else if (!strcmp(k, "profile")) {
            if (!json_is_null(v) && (!json_is_string(v) || strcmp(json_string_value(v), "exact"))) {
                vsr_http_fail(h, 400, "invalid_request", "options.profile must be one of ['exact']");
                return false;
            }
        } else if (!strcmp(k, "return_meta")) {
            if (!vsr_option_return_meta(v, &j->return_meta, h)) return false;
        } else if (!strcmp(k, "overflow")) {
            const char *s = json_is_string(v) ? json_string_value(v) : "";
            if (!strcmp(s, "reject")) c->reject = true;
            else if (!strcmp(s, "truncate")) *truncate = true;
            else if (strcmp(s, "window")) {
                vsr_http_fail(h, 400, "invalid_request", "options.overflow must be one of ['reject', 'truncate', 'window']");
                return false;
            }
        } else if (!strcmp(k, "threshold")) {
            if (json_is_null(v)) continue;
            if (!json_is_number(v) || !(json_number_value(v) >= 0 && json_number_value(v) <= 1)) {
                vsr_http_fail(h, 400, "invalid_request", "options.threshold must be a number in [0, 1]");
                return false;
            }
            *threshold = v;
        } else if (!strcmp(k, "window")) {
            vsr_http_fail(h, 400, "invalid_request",
                          "options.window: this model reads a text longer than %d tokens in windows of its span_layout "
                          "(%d tokens every %d); other windows are not available (use overflow: window, truncate or reject)",
                          c->d->info.hybrid_rmax, c->d->info.window, c->d->info.stride);
            return false;
        } else if (!strcmp(k, "max_tokens")) {
            vsr_http_fail(h, 400, "invalid_request",
                          "options.max_tokens: this model reads each input whole (in windows past %d tokens); bound the "
                          "input with overflow: reject or truncate instead",
                          c->d->info.hybrid_rmax);
            return false;
        } else if (!strcmp(k, "return_tokens")) {
            vsr_http_fail(h, 400, "invalid_request",
                          "options.return_tokens: this model scores words, not tokens (spans are decoded from word "
                          "probabilities); per-token probabilities are not available");
            return false;
        } else {
            vsr_http_fail(h, 400, "invalid_request", "options: unknown field '%s'", k);
            return false;
        }
    }
    return true;
}

/* A grounded input: an object of the string fields context, question and answer, the answer
 * required. */
static const char *const grounded_keys[] = {"context", "question", "answer"};

static bool grounded_ok(const json_t *in, int i, vsr_http_error *h) {
    if (!json_is_object(in)) {
        vsr_http_fail(h, 400, "invalid_request",
                      "input[%d]: head halu reads grounded inputs {context, question, answer}; got %s", i,
                      json_is_string(in) ? "a string" : "a value that is not an object");
        return false;
    }
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)in, k, v) {
        bool known = false;
        for (int f = 0; f < 3; f++) known |= !strcmp(k, grounded_keys[f]);
        if (!known) {
            vsr_http_fail(h, 400, "invalid_request",
                          "input[%d]: unknown field '%s'; a grounded input holds context, question and answer", i, k);
            return false;
        }
        if (!json_is_string(v)) {
            vsr_http_fail(h, 400, "invalid_request", "input[%d].%s must be a string", i, k);
            return false;
        }
    }
    if (!json_object_get(in, "answer")) {
        vsr_http_fail(h, 400, "invalid_request", "input[%d]: a grounded input needs an answer", i);
        return false;
    }
    return true;
}

/* The decision request an input stands for: the head's preset over the text it reads. */
static json_t *input_request(const vsr_v2_classify *c, const json_t *in, int i, json_t *threshold, bool truncate,
                             vsr_http_error *h, char **item_err) {
    if (c->head == HEAD_PII && !json_is_string(in)) {
        vsr_http_fail(h, 400, "invalid_request", "input[%d]: head pii reads text inputs (strings); got %s", i,
                      json_is_object(in) ? "an object" : "a value that is not a string");
        return NULL;
    }
    if (c->head == HEAD_HALU && !grounded_ok(in, i, h)) return NULL;
    json_t *state = json_object();
    if (c->head == HEAD_PII) {
        if (blank(json_string_value(in)))
            *item_err = dupf("input %d is empty or whitespace: there is no text to read", i);
        json_object_set(state, "request", (json_t *)in);
    } else {
        static const char *const as[] = {"source", "request", "answer"};
        if (blank(json_string_value(json_object_get(in, "answer"))))
            *item_err = dupf("input %d: the answer is empty or whitespace: there is no text to read", i);
        for (int f = 0; f < 3; f++) {
            const json_t *x = json_object_get(in, grounded_keys[f]);
            if (x && !blank(json_string_value(x))) json_object_set(state, as[f], (json_t *)x);
        }
    }
    json_t *q = json_pack("{s:s,s:s}", "preset", head_names[c->head], "over", c->head == HEAD_PII ? "request" : "answer");
    if (threshold) json_object_set(q, "threshold", threshold);
    if (truncate) json_object_set_new(q, "overflow", json_string("truncate"));
    json_t *qs = json_object();
    json_object_set_new(qs, head_names[c->head], q);
    return json_pack("{s:o,s:o}", "state", state, "questions", qs);
}

vsr_v2_classify *vsr_v2_classify_parse(const vsr_v2_decider *d, const char *body, size_t len, const char *served_name,
                                       vsr_http_error *herr) {
    json_t *root = vsr_request_body(body, len, herr);
    if (!root) return NULL;
    vsr_v2_classify *c = calloc(1, sizeof *c);
    vsr_v2_job *j = c ? calloc(1, sizeof *j) : NULL;
    bool ok = false;
    char heads[64];
    if (!c || !j) {
        free(c);
        c = NULL;
        vsr_http_fail(herr, 500, "internal_error", "out of memory");
        goto done;
    }
    c->d = d;
    c->job = j;
    if (!json_is_object(root)) {
        vsr_http_fail(herr, 400, "invalid_request", "the body must be a JSON object");
        goto done;
    }
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v) {
        if (strcmp(k, "model") && strcmp(k, "input") && strcmp(k, "head") && strcmp(k, "options")) {
            vsr_http_fail(herr, 400, "invalid_request", "unknown field '%s'", k);
            goto done;
        }
    }
    if (!vsr_request_model(root, served_name, &j->model, herr)) goto done;
    if (!vsr_v2_classify_heads(d, NULL, 0)) {
        vsr_http_fail(herr, 422, "unsupported_surface",
                      "%s has no span preset (calibration.json defines neither pii_schema nor halu_schema), so no token "
                      "head for POST /v1/classify", j->model);
        goto done;
    }
    const json_t *jh = json_object_get(root, "head");
    c->head = has_head(d, HEAD_PII) ? HEAD_PII : HEAD_HALU;
    if (jh && !json_is_null(jh)) {
        const char *hn = json_is_string(jh) ? json_string_value(jh) : NULL;
        int found = -1;
        for (int hh = 0; hh < 2 && hn; hh++)
            if (!strcmp(hn, head_names[hh]) && has_head(d, hh)) found = hh;
        if (found < 0) {
            vsr_http_fail(herr, 400, "invalid_request", "head must be one of %s", head_list(d, heads, sizeof heads));
            goto done;
        }
        c->head = found;
    }
    json_t *threshold = NULL;
    bool truncate = false;
    if (!parse_options(c, j, json_object_get(root, "options"), &threshold, &truncate, herr)) goto done;
    const json_t *ji = json_object_get(root, "input");
    if (!ji) {
        vsr_http_fail(herr, 400, "invalid_request", "input is required");
        goto done;
    }
    json_t *list = json_is_array(ji) ? json_incref((json_t *)ji) : json_pack("[O]", ji);
    size_t n = json_array_size(list);
    if (n == 0 || n > MAX_INPUTS) {
        vsr_http_fail(herr, 400, "invalid_request", n ? "at most %d inputs per request" : "input must hold at least one input",
                      MAX_INPUTS);
        json_decref(list);
        goto done;
    }
    c->in = calloc(n, sizeof *c->in);
    j->req = calloc(n, sizeof *j->req);
    if (!c->in || !j->req) {
        json_decref(list);
        vsr_http_fail(herr, 500, "internal_error", "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        c_input *in = &c->in[i];
        in->req = -1;
        c->n_inputs++;
        char *item = NULL;
        json_t *rq = input_request(c, json_array_get(list, i), (int)i, threshold, truncate, herr, &item);
        if (!rq) {
            json_decref(list);
            goto done;
        }
        if (item) {
            in->code = "invalid_input";
            in->msg = item;
            json_decref(rq);
            continue;
        }
        v2_request *r = &j->req[j->n_req];
        char where[48];
        snprintf(where, sizeof where, "input[%zu]: ", i);
        vsr_http_error he = {0};
        bool parsed = v2_parse_request(d, r, rq, where, &he);
        json_decref(rq);
        j->n_req++; /* freed with the job either way */
        if (!parsed) {
            if (he.status >= 500) {
                *herr = he;
                json_decref(list);
                goto done;
            }
            in->code = "invalid_input";
            in->msg = strdup(he.message);
            continue;
        }
        in->req = j->n_req - 1;
        v2_question *q = &r->q[0];
        if (!q->err_code && c->reject) {
            const v2_part *part = &r->parts[v2_part_index(r, q->over[0])];
            if (part->n_ids > d->info.hybrid_rmax)
                v2_qfail(q, "max_length_exceeded",
                         "input %zu holds %d tokens, over the %d this model reads at once (overflow: reject); use "
                         "overflow: window or truncate",
                         i, part->n_ids, d->info.hybrid_rmax);
        }
    }
    json_decref(list);
    ok = true;
done:
    json_decref(root);
    if (!ok) {
        vsr_v2_classify_free(c);
        return NULL;
    }
    return c;
}

vsr_v2_job *vsr_v2_classify_job(vsr_v2_classify *c) { return c->job; }
int64_t vsr_v2_classify_tokens(const vsr_v2_classify *c) { return vsr_v2_job_tokens(c->job); }
double vsr_v2_classify_deadline_ms(const vsr_v2_classify *c) { return c->job->deadline_ms; }

vsr_status vsr_v2_classify_run(vsr_v2_decider *d, vsr_v2_classify *c, const volatile int *cancel, vsr_err *err) {
    return vsr_v2_run(d, c->job, cancel, NULL, NULL, err);
}

static json_t *head_labels(const vsr_v2_decider *d, int head) {
    json_t *a = json_array();
    const json_t *labels = json_object_get(d->cal.schema[head], "labels");
    const char *k;
    json_t *v;
    if (json_is_object(labels)) json_object_foreach((json_t *)labels, k, v) json_array_append_new(a, json_string(k));
    else if (json_is_array(labels))
        for (size_t i = 0; i < json_array_size(labels); i++) {
            const json_t *e = json_array_get(labels, i);
            const json_t *key = json_is_object(e) ? json_object_get(e, "key") : e;
            if (json_is_string(key)) json_array_append_new(a, json_string(json_string_value(key)));
        }
    return a;
}

/* The model card's `heads` (one per span preset). */
json_t *vsr_v2_classify_heads_json(const vsr_v2_decider *d) {
    json_t *a = json_array();
    for (int h = 0; h < 2; h++) {
        if (!has_head(d, h)) continue;
        json_t *o = json_object();
        json_object_set_new(o, "name", json_string(head_names[h]));
        json_object_set_new(o, "kind", json_string("token"));
        json_object_set_new(o, "labels", head_labels(d, h));
        json_object_set_new(o, "inputs", json_string(h == HEAD_PII ? "text" : "grounded"));
        json_object_set_new(o, "span_head", json_string("router"));
        if (h == HEAD_PII) {
            json_object_set_new(o, "default_threshold", json_null());
            json_object_set_new(o, "threshold_rule",
                                json_string(d->cal.n_anchors ? "pii_length_rule" : d->cal.n_buckets ? "pii_buckets"
                                                                                                      : "thresholds"));
        } else {
            const json_t *t = json_object_get(d->cal.thresholds, "span:halu");
            if (!t) t = json_object_get(d->cal.thresholds, "span:*");
            json_object_set_new(o, "default_threshold", t ? json_real(json_number_value(t)) : json_null());
        }
        json_object_set_new(o, "overflow", json_string("window"));
        json_object_set_new(o, "window", json_pack("{s:i,s:i}", "tokens", d->info.window, "overlap",
                                                   d->info.window > d->info.stride ? d->info.window - d->info.stride : 0));
        json_object_set_new(o, "max_unwindowed_tokens", json_integer(d->info.hybrid_rmax));
        json_array_append_new(a, o);
    }
    return a;
}

static json_t *result_json(const vsr_v2_classify *c, int i) {
    const c_input *in = &c->in[i];
    json_t *o = json_object();
    json_object_set_new(o, "index", json_integer(i));
    if (in->req < 0) {
        json_object_set_new(o, "error", json_string(in->code));
        if (in->msg) json_object_set_new(o, "message", json_string(in->msg));
        return o;
    }
    const v2_request *r = &c->job->req[in->req];
    const v2_question *q = &r->q[0];
    json_t *full = v2_request_json(r, c->job->model, false);
    json_t *ans = json_object_get(json_object_get(full, "answers"), q->id);
    if (json_object_get(ans, "error")) {
        json_object_set(o, "error", json_object_get(ans, "error"));
        if (json_object_get(ans, "message")) json_object_set(o, "message", json_object_get(ans, "message"));
        json_decref(full);
        return o;
    }
    json_t *spans = json_object_get(json_object_get(full, "spans"), q->id);
    json_object_set_new(o, "spans", spans ? json_incref(spans) : json_array());
    const json_t *th = json_object_get(json_object_get(full, "thresholds"), q->id);
    if (th) json_object_set(o, "threshold", (json_t *)th);
    const v2_part *part = &r->parts[v2_part_index(r, q->over[0])];
    int windows = 0;
    for (int t = 0; t < r->n_trees; t++) windows += r->trees[t].window;
    bool truncated = q->truncate && part->n_ids > c->d->info.hybrid_rmax;
    json_t *inp = json_object();
    json_object_set_new(inp, "tokens", json_integer(part->n_ids));
    json_object_set_new(inp, "processed_tokens", json_integer(truncated ? c->d->info.hybrid_rmax : part->n_ids));
    json_object_set_new(inp, "truncated", json_boolean(truncated));
    json_object_set_new(inp, "windows", json_integer(windows ? windows : 1));
    json_object_set_new(o, "input", inp);
    json_decref(full);
    return o;
}

char *vsr_v2_classify_response(const vsr_v2_classify *c, const vsr_decision_meta *meta) {
    json_t *o = json_object();
    json_object_set_new(o, "model", json_string(c->job->model));
    json_object_set_new(o, "head", json_string(head_names[c->head]));
    json_object_set_new(o, "kind", json_string("token"));
    json_object_set_new(o, "labels", head_labels(c->d, c->head));
    json_t *results = json_array();
    for (int i = 0; i < c->n_inputs; i++) json_array_append_new(results, result_json(c, i));
    json_object_set_new(o, "results", results);
    json_object_set_new(o, "usage", json_pack("{s:I,s:i}", "input_tokens", (json_int_t)vsr_v2_job_tokens(c->job),
                                              "output_tokens", 0));
    if (c->job->return_meta && meta)
        json_object_set_new(o, "meta", vsr_decision_meta_json(meta, c->job->model, "exact"));
    char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(10));
    json_decref(o);
    return s;
}

void vsr_v2_classify_free(vsr_v2_classify *c) {
    if (!c) return;
    vsr_v2_job_free(c->job);
    for (int i = 0; i < c->n_inputs; i++) free(c->in[i].msg);
    free(c->in);
    free(c);
}
