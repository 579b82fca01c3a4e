/* The vela2 decider: opening it over a package, the /v1/decisions job (parse, run, response)
 * and the golden self-check. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vela2/decide_internal.h"

static vsr_status open_common(vsr_v2_decider *d, vsr_err *err) {
    vsr_status st = vsr_tokenizer_open(d->dir, &d->tok, err);
    if (st != VSR_OK) return st;
    char path[4200];
    snprintf(path, sizeof path, "%s/calibration.json", d->dir);
    if ((st = v2_calibration_load(path, &d->cal, err)) != VSR_OK) return st;
    d->broad = d->info.has_broad_head && d->cal.has_broad;
    static const char *const names[3] = {"pii", "halu", "relevance"};
    for (int i = 0; i < 3; i++)
        if (d->cal.schema[i]) d->presets[d->n_presets++] = names[i];
    if (d->info.max_length <= 0 || d->info.hybrid_rmax <= 0 || d->info.window <= 0 || d->info.stride <= 0)
        return vsr_err_set(err, VSR_E_FORMAT, "%s: config.json must declare max_length and span_layout (hybrid_rmax, "
                                              "window, stride) as positive numbers", d->dir);
    return VSR_OK;
}

vsr_status vsr_v2_decider_open(const vsr_package *pkg, vsr_v2_model *model, vsr_v2_decider **out, vsr_err *err) {
    *out = NULL;
    vsr_v2_decider *d = calloc(1, sizeof *d);
    if (!d) return vsr_err_set(err, VSR_E_NOMEM, "out of memory");
    snprintf(d->dir, sizeof d->dir, "%s", pkg->path);
    d->model = model;
    d->info = *vsr_v2_model_info(model);
    vsr_status st = open_common(d, err);
    if (st != VSR_OK) {
        vsr_v2_decider_free(d);
        return st;
    }
    *out = d;
    return VSR_OK;
}

vsr_status vsr_v2_decider_open_dir(const char *dir, const vsr_v2_info *info, vsr_v2_decider **out, vsr_err *err) {
    *out = NULL;
    vsr_v2_decider *d = calloc(1, sizeof *d);
    if (!d) return vsr_err_set(err, VSR_E_NOMEM, "out of memory");
    snprintf(d->dir, sizeof d->dir, "%s", dir);
    d->info = *info;
    vsr_status st = open_common(d, err);
    if (st != VSR_OK) {
        vsr_v2_decider_free(d);
        return st;
    }
    *out = d;
    return VSR_OK;
}

void vsr_v2_decider_free(vsr_v2_decider *d) {
    if (!d) return;
    vsr_tokenizer_free(d->tok);
    v2_calibration_free(&d->cal);
    free(d);
}

int64_t vsr_v2_decider_max_input_tokens(const vsr_v2_decider *d) { return d->info.max_length; }
bool vsr_v2_decider_has_broad_head(const vsr_v2_decider *d) { return d->broad; }

int vsr_v2_decider_presets(const vsr_v2_decider *d, const char **names, int max) {
    for (int i = 0; i < d->n_presets && i < max; i++) names[i] = d->presets[i];
    return d->n_presets;
}

/* ---- the job ---- */

static bool only_fields(const json_t *o, const char *const *allowed, const char *where, vsr_http_error *h) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)o, k, v) {
        bool ok = false;
        for (const char *const *a = allowed; *a; a++) ok |= !strcmp(*a, k);
        if (!ok) {
            vsr_http_fail(h, 400, "invalid_request", "%sunknown field '%s'", where, k);
            return false;
        }
    }
    return true;
}

static bool parse_options(vsr_v2_job *j, const json_t *jo, vsr_http_error *h) {
    if (!jo || json_is_null(jo)) return true;
    static const char *const fields[] = {"deadline_ms", "profile", "return_meta", "max_tokens", NULL};
    if (!json_is_object(jo)) {
        vsr_http_fail(h, 400, "invalid_request", "options must be an object");
        return false;
    }
    if (!only_fields(jo, fields, "options: ", h)) return false;
    if (!vsr_option_deadline_ms(json_object_get(jo, "deadline_ms"), &j->deadline_ms, h)) return false;
    const json_t *pr = json_object_get(jo, "profile");
    if (pr && !json_is_null(pr) && (!json_is_string(pr) || strcmp(json_string_value(pr), "exact"))) {
        vsr_http_fail(h, 400, "invalid_request", "options.profile: unknown profile '%s'; available: exact",
                      json_is_string(pr) ? json_string_value(pr) : "(not a string)");
        return false;
    }
    if (!vsr_option_return_meta(json_object_get(jo, "return_meta"), &j->return_meta, h)) return false;
    if (json_object_get(jo, "max_tokens")) {
        vsr_http_fail(h, 400, "invalid_request",
                      "options.max_tokens applies only to models with a scan budget; this model has none");
        return false;
    }
    return true;
}

static int count_valid(const vsr_v2_job *j) {
    int n = 0;
    for (int r = 0; r < j->n_req; r++)
        for (int i = 0; i < j->req[r].n_q; i++) n += !j->req[r].q[i].err_code;
    return n;
}

vsr_v2_job *vsr_v2_parse(const vsr_v2_decider *d, const char *body, size_t len, const char *served_name,
                         vsr_http_error *herr) {
    json_t *root = vsr_request_body(body, len, herr);
    if (!root) return NULL;
    vsr_v2_job *j = calloc(1, sizeof *j);
    bool ok = false;
    if (!j) {
        vsr_http_fail(herr, 500, "internal_error", "out of memory");
        goto done;
    }
    static const char *const top[] = {"model", "state", "questions", "images", "videos", "states", "options", NULL};
    static const char *const sub[] = {"state", "questions", "images", NULL};
    if (!json_is_object(root)) {
        vsr_http_fail(herr, 400, "invalid_request", "the body must be a JSON object");
        goto done;
    }
    if (!only_fields(root, top, "", herr)) goto done;
    j->broad = d->broad;
    if (!vsr_request_model(root, served_name, &j->model, herr)) goto done;
    if (!parse_options(j, json_object_get(root, "options"), herr)) goto done;
    const json_t *jss = json_object_get(root, "states");
    size_t n_states = 0;
    if (jss && !json_is_null(jss)) {
        if (!json_is_object(jss)) {
            vsr_http_fail(herr, 400, "invalid_request", "states must be an object of named states");
            goto done;
        }
        n_states = json_object_size(jss);
        if (n_states > 64) {
            vsr_http_fail(herr, 400, "invalid_request", "states holds %zu entries; at most 64 are allowed", n_states);
            goto done;
        }
    }
    j->req = calloc(1 + n_states, sizeof *j->req);
    if (!j->req) {
        vsr_http_fail(herr, 500, "internal_error", "out of memory");
        goto done;
    }
    j->n_req = 1;
    if (!v2_parse_request(d, &j->req[0], root, "", herr)) goto done;
    const char *name;
    json_t *so;
    if (n_states) json_object_foreach((json_t *)jss, name, so) {
            char where[160];
            snprintf(where, sizeof where, "states.%.128s: ", name);
            if (!json_is_object(so)) {
                vsr_http_fail(herr, 400, "invalid_request", "%sa state entry must be an object", where);
                goto done;
            }
            if (!only_fields(so, sub, where, herr)) goto done;
            v2_request *r = &j->req[j->n_req++];
            r->name = strdup(name);
            if (!v2_parse_request(d, r, so, where, herr)) goto done;
        }
    if (count_valid(j) == 0) {
        const v2_question *first = &j->req[0].q[0];
        vsr_http_fail(herr, 400, "invalid_request", "no valid question: %s: %s", first->id,
                      first->err_msg ? first->err_msg : first->err_code);
        goto done;
    }
    ok = true;
done:
    json_decref(root);
    if (!ok) {
        vsr_v2_job_free(j);
        return NULL;
    }
    return j;
}

int64_t vsr_v2_job_tokens(const vsr_v2_job *j) {
    int64_t t = 0;
    for (int r = 0; r < j->n_req; r++) t += j->req[r].tokens;
    return t;
}
double vsr_v2_job_deadline_ms(const vsr_v2_job *j) { return j->deadline_ms; }
bool vsr_v2_job_return_meta(const vsr_v2_job *j) { return j->return_meta; }

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The blocks of a tree that are run (the span block that windows replace is not). A tree
 * whose questions all failed is skipped. */
static int tree_view(const v2_request *r, v2_tree *t, vsr_v2_tree *out, vsr_v2_block *blocks) {
    int n = 0;
    for (int k = 0; k < t->n_blocks; k++)
        if (t->blocks[k].read && !r->q[t->blocks[k].q].err_code) blocks[n++] = t->blocks[k].b;
    *out = (vsr_v2_tree){.ctx = t->ctx, .n_ctx = t->n_ctx, .n_blocks = n, .blocks = blocks};
    return n;
}

/* One forward over the blocks of a tree that are run (none: no forward). */
static vsr_status run_tree(vsr_v2_decider *d, const v2_request *rq, v2_tree *tr, vsr_forward_cb on_forward,
                           void *cb_ctx, vsr_err *err) {
    vsr_v2_block *blocks = malloc(sizeof *blocks * (size_t)(tr->n_blocks + 1));
    if (!blocks) return vsr_err_set(err, VSR_E_NOMEM, "out of memory");
    vsr_v2_tree view;
    int64_t tokens = tr->n_ctx;
    vsr_status st = VSR_OK;
    if (tree_view(rq, tr, &view, blocks) > 0) {
        for (int k = 0; k < view.n_blocks; k++) tokens += view.blocks[k].n_ids;
        double t0 = now_s();
        st = vsr_v2_forward(d->model, &view, 1, err);
        if (on_forward) on_forward(cb_ctx, view.n_blocks, tokens, now_s() - t0);
    }
    free(blocks);
    return st;
}

vsr_status vsr_v2_run(vsr_v2_decider *d, vsr_v2_job *j, const volatile int *cancel, vsr_forward_cb on_forward,
                      void *cb_ctx, vsr_err *err) {
    if (!d->model) return vsr_err_set(err, VSR_E_INVALID, "this decider has no model to run");
    for (int r = 0; r < j->n_req; r++) {
        v2_request *rq = &j->req[r];
        for (int t = 0; t < rq->n_trees; t++) {
            if (cancel && __atomic_load_n(cancel, __ATOMIC_RELAXED))
                return vsr_err_set(err, VSR_E_INVALID, "cancelled: the client went away");
            vsr_status st = run_tree(d, rq, &rq->trees[t], on_forward, cb_ctx, err);
            if (st != VSR_OK) return st;
        }
        v2_answer_request(d, rq);
    }
    return VSR_OK;
}

vsr_status vsr_v2_run_with(vsr_v2_decider *d, vsr_v2_job *j,
                           void (*fill)(void *ctx, int tree, int block, vsr_v2_block *b), void *ctx, vsr_err *err) {
    for (int r = 0; r < j->n_req; r++) {
        v2_request *rq = &j->req[r];
        for (int t = 0; t < rq->n_trees; t++)
            for (int k = 0; k < rq->trees[t].n_blocks; k++)
                if (rq->trees[t].blocks[k].read) fill(ctx, t, k, &rq->trees[t].blocks[k].b);
        v2_answer_request(d, rq);
    }
    return VSR_OK;
}

/* ---- stepwise running (the server's scheduler; helper HB) ----
 * The same forwards as vsr_v2_run, one tree per call, so a scheduler can check deadlines and
 * cancellation and let other jobs run between trees. A request is answered when its last tree
 * has run; requests with no tree (every question failed before layout) need no answering. */

int vsr_v2_trees_left(const vsr_v2_job *j) {
    int n = 0;
    for (int r = j->next_req; r < j->n_req; r++) n += j->req[r].n_trees - (r == j->next_req ? j->next_tree : 0);
    return n;
}

int64_t vsr_v2_next_tree_tokens(const vsr_v2_job *j) {
    int r = j->next_req, t = j->next_tree;
    while (r < j->n_req && t >= j->req[r].n_trees) r++, t = 0;
    if (r >= j->n_req) return 0;
    const v2_request *rq = &j->req[r];
    const v2_tree *tr = &rq->trees[t];
    int64_t tokens = 0;
    for (int k = 0; k < tr->n_blocks; k++)
        if (tr->blocks[k].read && !rq->q[tr->blocks[k].q].err_code) tokens += tr->blocks[k].b.n_ids;
    return tokens ? tokens + tr->n_ctx : 0;
}

vsr_status vsr_v2_run_tree(vsr_v2_decider *d, vsr_v2_job *j, vsr_forward_cb on_forward, void *cb_ctx, vsr_err *err) {
    if (!d->model) return vsr_err_set(err, VSR_E_INVALID, "this decider has no model to run");
    while (j->next_req < j->n_req && j->next_tree >= j->req[j->next_req].n_trees) j->next_req++, j->next_tree = 0;
    if (j->next_req >= j->n_req) return VSR_OK; /* nothing left */
    v2_request *rq = &j->req[j->next_req];
    vsr_status st = run_tree(d, rq, &rq->trees[j->next_tree], on_forward, cb_ctx, err);
    if (st != VSR_OK) return st;
    if (++j->next_tree >= rq->n_trees) {
        v2_answer_request(d, rq);
        j->next_req++;
        j->next_tree = 0;
    }
    return VSR_OK;
}

/* ---- end of the stepwise block ---- */

void vsr_v2_job_trees(const vsr_v2_job *j, void (*fn)(void *ctx, const vsr_v2_tree *t), void *ctx) {
    for (int r = 0; r < j->n_req; r++)
        for (int t = 0; t < j->req[r].n_trees; t++) {
            v2_tree *tr = &j->req[r].trees[t];
            vsr_v2_block *blocks = malloc(sizeof *blocks * (size_t)(tr->n_blocks + 1));
            if (!blocks) return;
            vsr_v2_tree view;
            tree_view(&j->req[r], tr, &view, blocks);
            fn(ctx, &view);
            free(blocks);
        }
}

void vsr_v2_expire(vsr_v2_job *j) {
    for (int r = 0; r < j->n_req; r++)
        for (int i = 0; i < j->req[r].n_q; i++) {
            v2_question *q = &j->req[r].q[i];
            if (!q->err_code && !q->answered)
                v2_qfail(q, "deadline_exceeded", "the deadline passed before this question was run");
        }
}

void vsr_v2_outcomes(const vsr_v2_job *j, void (*fn)(void *ctx, const char *type, const char *outcome), void *ctx) {
    for (int r = 0; r < j->n_req; r++)
        for (int i = 0; i < j->req[r].n_q; i++) {
            const v2_question *q = &j->req[r].q[i];
            fn(ctx, q->kind >= 0 ? v2_kind_names[q->kind] : "unknown",
               q->err_code ? q->err_code : q->answered ? "answered" : "unanswered");
        }
}

char *vsr_v2_response(const vsr_v2_job *j, const vsr_decision_meta *meta) {
    bool broad = j->broad;
    json_t *o = v2_request_json(&j->req[0], j->model, broad);
    if (j->n_req > 1) {
        json_t *states = json_object();
        for (int r = 1; r < j->n_req; r++) json_object_set_new(states, j->req[r].name, v2_request_json(&j->req[r], j->model, broad));
        json_object_set_new(o, "states", states);
    }
    if (j->return_meta && meta) json_object_set_new(o, "meta", vsr_decision_meta_json(meta, j->model, "exact"));
    char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(10));
    json_decref(o);
    return s;
}

void vsr_v2_job_free(vsr_v2_job *j) {
    if (!j) return;
    for (int r = 0; r < j->n_req; r++) v2_request_free(&j->req[r]);
    free(j->req);
    free(j->model);
    free(j);
}

/* ---- golden ---- */

/* The family's golden question set (reference-profiles-spans.md 3.1, family.py). */
static const char GOLDEN[] =
    "{\"state\":{\"request\":\"Hi, I'm Tom Baker (tom.baker@example.com). What is the maximum daily dose of "
    "paracetamol for an adult?\",\"source\":\"For adults, the maximum dose of paracetamol is 4 grams in 24 hours.\","
    "\"answer\":\"Adults can take up to 6 grams of paracetamol in 24 hours.\"},"
    "\"questions\":{\"pii\":{\"preset\":\"pii\",\"over\":\"request\"},\"halu\":{\"preset\":\"halu\"},"
    "\"places\":{\"type\":\"span\",\"instructions\":\"Which spans name a city?\",\"labels\":[{\"key\":\"city\","
    "\"description\":\"a city name\"}],\"threshold\":0.5,\"head\":\"broad\"}}}";
/* Without a broad head the `places` question asks the router head (head is valid only on
 * models with a broad head). */
static const char GOLDEN_NO_BROAD[] =
    "{\"state\":{\"request\":\"Hi, I'm Tom Baker (tom.baker@example.com). What is the maximum daily dose of "
    "paracetamol for an adult?\",\"source\":\"For adults, the maximum dose of paracetamol is 4 grams in 24 hours.\","
    "\"answer\":\"Adults can take up to 6 grams of paracetamol in 24 hours.\"},"
    "\"questions\":{\"pii\":{\"preset\":\"pii\",\"over\":\"request\"},\"halu\":{\"preset\":\"halu\"},"
    "\"places\":{\"type\":\"span\",\"instructions\":\"Which spans name a city?\",\"labels\":[{\"key\":\"city\","
    "\"description\":\"a city name\"}],\"threshold\":0.5}}}";

const char *vsr_v2_golden_request(void) { return GOLDEN; }

static bool close_json(const json_t *got, const json_t *want, double tol, char *why, size_t n, const char *path) {
    if (json_is_number(want)) {
        if (!json_is_number(got) || !(fabs(json_number_value(got) - json_number_value(want)) <= tol)) {
            snprintf(why, n, "%s: %.6g against the recorded %.6g (tolerance %g)", path,
                     json_is_number(got) ? json_number_value(got) : NAN, json_number_value(want), tol);
            return false;
        }
        return true;
    }
    if (json_is_object(want)) {
        if (!json_is_object(got) || json_object_size(got) != json_object_size(want)) {
            snprintf(why, n, "%s differs in form from the recorded answer", path);
            return false;
        }
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)want, k, v) {
            char sub[256];
            snprintf(sub, sizeof sub, "%.120s.%.120s", path, k);
            if (!close_json(json_object_get(got, k), v, tol, why, n, sub)) return false;
        }
        return true;
    }
    if (json_is_array(want)) {
        if (!json_is_array(got) || json_array_size(got) != json_array_size(want)) {
            snprintf(why, n, "%s: %zu entries against the recorded %zu", path,
                     json_is_array(got) ? json_array_size(got) : 0, json_array_size(want));
            return false;
        }
        for (size_t i = 0; i < json_array_size(want); i++) {
            char sub[256];
            snprintf(sub, sizeof sub, "%.200s[%zu]", path, i);
            if (!close_json(json_array_get(got, i), json_array_get(want, i), tol, why, n, sub)) return false;
        }
        return true;
    }
    if (!json_equal((json_t *)got, (json_t *)want)) {
        snprintf(why, n, "%s differs from the recorded answer", path);
        return false;
    }
    return true;
}

static char *golden_once(vsr_v2_decider *d, vsr_err *err) {
    vsr_http_error he = {0};
    const char *body = d->broad ? GOLDEN : GOLDEN_NO_BROAD;
    vsr_v2_job *j = vsr_v2_parse(d, body, strlen(body), NULL, &he);
    if (!j) {
        vsr_err_set(err, VSR_E_INTERNAL, "the golden request was refused: %s", he.message);
        return NULL;
    }
    char *s = NULL;
    if (vsr_v2_run(d, j, NULL, NULL, NULL, err) == VSR_OK) s = vsr_v2_response(j, NULL);
    vsr_v2_job_free(j);
    return s;
}

/* The answers, spans and thresholds: what the golden record holds. */
static json_t *golden_view(const char *resp) {
    json_t *o = resp ? json_loads(resp, 0, NULL) : NULL;
    if (!o) return NULL;
    json_t *v = json_object();
    static const char *const keys[] = {"answers", "spans", "thresholds"};
    for (int i = 0; i < 3; i++)
        if (json_object_get(o, keys[i])) json_object_set(v, keys[i], json_object_get(o, keys[i]));
    json_decref(o);
    return v;
}

vsr_status vsr_v2_golden_check(vsr_v2_decider *d, const char *recorded, const char *device_class, double tol,
                               vsr_golden_report *out, vsr_err *err) {
    memset(out, 0, sizeof *out);
    snprintf(out->reference, sizeof out->reference, "%s", device_class);
    char *a = golden_once(d, err), *b = a ? golden_once(d, err) : NULL;
    if (!a || !b) {
        snprintf(out->status, sizeof out->status, "failed");
        snprintf(out->reason, sizeof out->reason, "%.500s", err->msg);
        free(a);
        return VSR_OK;
    }
    json_t *va = golden_view(a), *vb = golden_view(b);
    json_t *answers = va ? json_object_get(va, "answers") : NULL;
    int nq = answers ? (int)json_object_size(answers) : 0;
    out->checked = 2 * nq;
    out->answers_json = va ? json_dumps(va, JSON_COMPACT | JSON_REAL_PRECISION(10)) : NULL;
    if (!va || !vb || strcmp(a, b)) {
        snprintf(out->status, sizeof out->status, "failed");
        snprintf(out->reason, sizeof out->reason, "not deterministic: two runs of the golden request gave different answers");
    } else {
        for (void *it = json_object_iter(answers); it; it = json_object_iter_next(answers, it))
            if (json_object_get(json_object_iter_value(it), "error")) {
                snprintf(out->status, sizeof out->status, "failed");
                snprintf(out->reason, sizeof out->reason, "golden question %s failed: %.300s", json_object_iter_key(it),
                         json_string_value(json_object_get(json_object_iter_value(it), "message")));
            }
        json_t *rec = recorded ? json_loads(recorded, 0, NULL) : NULL;
        json_t *want = rec ? json_object_get(rec, device_class) : NULL;
        if (out->status[0]) {
        } else if (!want) {
            snprintf(out->status, sizeof out->status, "unverified");
            snprintf(out->reason, sizeof out->reason,
                     "no recorded answers for device class %s; checked determinism and form only", device_class);
        } else {
            char why[400] = "";
            bool all = close_json(va, want, tol, why, sizeof why, "golden");
            out->matched = all ? 2 * nq : 0;
            snprintf(out->status, sizeof out->status, all ? "matched" : "failed");
            if (!all) snprintf(out->reason, sizeof out->reason, "golden answers differ: %s", why);
        }
        json_decref(rec);
    }
    json_decref(va);
    json_decref(vb);
    free(a);
    free(b);
    return VSR_OK;
}
