/* The worker's HTTP surface on libmicrohttpd: event-driven (epoll, two polling threads), decision
 * requests suspended while a fixed pool of handler threads parses them and the model's scheduler
 * runs them (server/http.h). Routes are a table; metrics are labelled only by the table's paths
 * ("other" for the rest); errors use reference-runtime.md 1.2. */
#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <malloc.h>
#include <limits.h>
#include <microhttpd.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "server/http.h"
#include "server/log.h"
#include "vsr/catalog.h"

#define API_VERSION "2.3.0"

extern const char vsr_openapi_yaml[];

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct timing {
    double parse, tokenize, queue, forward, post, serialize, total; /* seconds */
} timing;

typedef enum route_kind { R_DECISIONS, R_CLASSIFY, R_UNSUPPORTED, R_MODELS, R_HEALTH, R_LIVE, R_METRICS, R_OPENAPI } route_kind;

typedef struct route {
    const char *path;
    const char *method;
    route_kind kind;
    bool surface; /* carries Server-Timing */
} route;

static const route routes[] = {
    {"/v1/decisions", "POST", R_DECISIONS, true},
    {"/v1/systemone", "POST", R_DECISIONS, true},
    {"/v1/classify", "POST", R_CLASSIFY, true}, /* Vela 2.0 packages; 422 on Decision 3.0 */
    {"/v1/embeddings", "POST", R_UNSUPPORTED, true},
    {"/v1/rerank", "POST", R_UNSUPPORTED, true},
    {"/v1/models", "GET", R_MODELS, false},
    {"/health", "GET", R_HEALTH, false},
    {"/health/live", "GET", R_LIVE, false},
    {"/metrics", "GET", R_METRICS, false},
    {"/openapi.yaml", "GET", R_OPENAPI, false},
};
#define N_ROUTES (sizeof routes / sizeof routes[0])

static struct MHD_Response *make_response(const char *ctype, char *body, size_t len, const timing *t) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return NULL;
    }
    MHD_add_response_header(r, "Content-Type", ctype);
    if (t) {
        char st[320];
        snprintf(st, sizeof st,
                 "parse;dur=%.3f, tokenize;dur=%.3f, queue;dur=%.3f, forward;dur=%.3f, post;dur=%.3f, "
                 "serialize;dur=%.3f, total;dur=%.3f",
                 t->parse * 1e3, t->tokenize * 1e3, t->queue * 1e3, t->forward * 1e3, t->post * 1e3,
                 t->serialize * 1e3, t->total * 1e3);
        MHD_add_response_header(r, "Server-Timing", st);
    }
    return r;
}

static enum MHD_Result send_body(struct MHD_Connection *c, int status, const char *ctype, char *body,
                                 size_t len, const timing *t) {
    struct MHD_Response *r = make_response(ctype, body, len, t);
    if (!r) return MHD_NO;
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_json(struct MHD_Connection *c, int status, json_t *o, const timing *t) {
    char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(10));
    json_decref(o);
    if (!s) return MHD_NO;
    return send_body(c, status, "application/json", s, strlen(s), t);
}

/* ---- GET endpoints ---- */

/* The bytes the loaded weights take on the device (0 before the load). */
static uint64_t model_memory(srv_model *m) {
    pthread_mutex_lock(&m->mu);
    vsr_model *model = m->model;
    vsr_v2_model *v2 = m->v2 ? m->engine.v2_model : NULL;
    pthread_mutex_unlock(&m->mu);
    return model ? vsr_model_memory_bytes(model) : v2 ? vsr_v2_model_memory_bytes(v2) : 0;
}

/* The question limits both families share (the reference's: 2-255 options, 2-10 levels). */
static json_t *question_limits(int64_t max_input_tokens) {
    return json_pack("{s:I,s:i,s:i,s:i,s:i}", "max_input_tokens", (json_int_t)max_input_tokens, "min_options", 2,
                     "max_options", 255, "min_levels", 2, "max_levels", 10);
}

/* The card of a Vela 2.0 decoder package: its surfaces, question types, presets, heads and the
 * exact profile only (the batching profile is refused for it at startup). */
static void vela2_card(srv_model *m, json_t *card) {
    const vsr_package *p = m->pkg;
    const vsr_vela2_config *vc = p->vela2;
    const json_t *cal = vc ? vc->calibration : NULL;
    pthread_mutex_lock(&m->mu);
    vsr_v2_decider *d = m->v2;
    pthread_mutex_unlock(&m->mu);
    json_object_set_new(card, "model_name", vc && vc->model_name[0] ? json_string(vc->model_name) : json_null());
    json_object_set_new(card, "surfaces", json_pack("[ss]", "decisions", "classify"));
    json_object_set_new(card, "question_types", json_pack("[sssss]", "choice", "noul", "score", "set", "span"));
    json_object_set_new(card, "modalities", json_pack("[s]", "text"));
    json_t *presets = json_array();
    static const char *const names[3] = {"pii", "halu", "relevance"};
    static const char *const schemas[3] = {"pii_schema", "halu_schema", "relevance_schema"};
    for (int i = 0; i < 3; i++)
        if (cal && json_object_get(cal, schemas[i])) json_array_append_new(presets, json_string(names[i]));
    json_object_set_new(card, "presets", presets);
    bool broad = d ? vsr_v2_decider_has_broad_head(d) : vc && vc->has_broad_head;
    json_object_set_new(card, "span_heads", broad ? json_pack("[ss]", "router", "broad") : json_pack("[s]", "router"));
    /* /v1/classify's token heads (one per span preset); listed once the decision layer is open */
    json_object_set_new(card, "heads", d ? (json_t *)vsr_v2_classify_heads_json(d) : json_null());
    json_t *lim = question_limits(vc ? vc->max_length : 0);
    json_object_set_new(lim, "max_labels", json_integer(255));
    json_object_set_new(lim, "max_inputs", json_integer(2048));
    if (vc)
        json_object_set_new(lim, "span_layout", json_pack("{s:i,s:i,s:i}", "hybrid_rmax", vc->hybrid_rmax, "window",
                                                          vc->window, "stride", vc->stride));
    json_object_set_new(card, "limits", lim);
    json_object_set_new(card, "profile", json_string("exact"));
    json_object_set_new(card, "profiles",
                        json_pack("[{s:s,s:s,s:s}]", "name", "exact", "numerics", "exact", "description",
                                  "Each request alone, one tree per forward (the shared context with the blocks "
                                  "of its questions; a long span target's windows are trees of their own)."));
}

static json_t *model_card(srv_http *h) {
    srv_model *m = h->model;
    const vsr_package *p = m->pkg;
    json_t *card = json_object();
    pthread_mutex_lock(&m->mu);
    srv_state state = m->state;
    char reason[VSR_ERR_MSG_MAX];
    snprintf(reason, sizeof reason, "%s", m->reason);
    vsr_decider *decider = m->decider;
    pthread_mutex_unlock(&m->mu);
    json_object_set_new(card, "id", json_string(m->served_name));
    json_object_set_new(card, "object", json_string("model"));
    json_object_set_new(card, "owned_by", json_string("vllm-sr-c"));
    json_object_set_new(card, "family", json_string(vsr_family_name(p->family)));
    json_object_set_new(card, "repo", p->repo[0] ? json_string(p->repo) : json_null());
    json_object_set_new(card, "revision", p->revision[0] ? json_string(p->revision) : json_null());
    json_object_set_new(card, "path", json_string(p->path));
    json_object_set_new(card, "model_sha256", p->verified ? json_string(p->model_sha256) : json_null());
    json_object_set_new(card, "manifest_sha256",
                        p->has_manifest ? json_string(p->manifest.manifest_sha256) : json_null());
    json_t *fmt = json_object();
    const vsr_scheme_traits *sch = vsr_scheme_info(p->quant.scheme);
    json_object_set_new(fmt, "quant_method",
                        p->quant.scheme == VSR_SCHEME_BF16 ? json_null() : json_string("compressed-tensors"));
    json_object_set_new(fmt, "format", sch->ct_format ? json_string(sch->ct_format) : json_string("dense"));
    json_object_set_new(fmt, "scheme", json_string(sch->name));
    json_object_set_new(fmt, "description", json_string(vsr_quant_description(&p->quant)));
    if (p->quant.scheme == VSR_SCHEME_INT4) {
        json_object_set_new(fmt, "group_size", json_integer(p->quant.group_size));
        json_object_set_new(fmt, "symmetric", json_boolean(p->quant.symmetric));
        json_object_set_new(fmt, "act_order", json_boolean(p->quant.actorder_group));
    }
    /* weights quantized while loading (serve --quantize): the identity above is the BF16 package's */
    json_object_set_new(fmt, "load_time", m->engine.load_quantize ? json_string(m->engine.load_quantize) : json_null());
    json_object_set_new(card, "quantization", fmt);
    if (p->family == VSR_FAMILY_VELA2) {
        vela2_card(m, card);
    } else {
        json_object_set_new(card, "surfaces", json_pack("[s]", "decisions"));
        json_object_set_new(card, "question_types", json_pack("[sss]", "choice", "noul", "score"));
        json_object_set_new(card, "modalities", json_pack("[s]", "text"));
        json_object_set_new(card, "limits",
                            question_limits(decider ? vsr_decider_max_input_tokens(decider)
                                                    : p->decision.max_length > 0 ? p->decision.max_length
                                                                                 : p->config.text.max_position_embeddings));
        const char *profile = m->opts && m->opts->profile ? m->opts->profile : "exact";
        json_object_set_new(card, "profile", json_string(profile));
        json_t *profiles = json_pack("[{s:s,s:s,s:s}]", "name", "exact", "numerics", "exact", "description",
                                     "One request's questions as the released runtime batches them: eight of its "
                                     "rows per forward, never mixed with another request's.");
        if (!strcmp(profile, "batching")) {
            json_t *b = json_pack("{s:s,s:s,s:s,s:f,s:I}", "name", "batching", "numerics", "approximate",
                                  "description",
                                  "Questions of concurrent requests that ask for it share forwards (longest first, "
                                  "under max_batch_tokens padded tokens, after batch_wait_ms); answers move by "
                                  "rounding, within the GPU tolerance of exact.",
                                  "batch_wait_ms", m->opts->batch_wait_ms, "max_batch_tokens",
                                  (json_int_t)m->opts->max_batch_tokens);
            json_array_append_new(profiles, b);
        }
        json_object_set_new(card, "profiles", profiles);
    }
    json_object_set_new(card, "engine", json_string("native"));
    json_object_set_new(card, "accelerator", json_string(vsr_device_kind_name(m->device.kind)));
    json_object_set_new(card, "device", json_string(m->device_id));
    json_object_set_new(card, "device_name", json_string(m->device.name));
    if (p->family == VSR_FAMILY_VELA2) {
        json_object_set_new(card, "dtype", json_string("bf16/fp32-heads"));
        json_object_set_new(card, "parameters", json_integer(vsr_package_params_loaded(p)));
    } else {
        json_object_set_new(card, "dtype", json_string(p->quant.scheme == VSR_SCHEME_BF16 ? "bf16/fp32-readout"
                                                                                        : "quantized/fp32-readout"));
        json_object_set_new(card, "parameters",
                            json_integer(p->has_manifest ? p->manifest.params_loaded : p->params_text));
    }
    json_object_set_new(card, "memory_bytes", json_integer((json_int_t)model_memory(m)));
    json_object_set_new(card, "ready", json_boolean(state == SRV_READY));
    json_object_set_new(card, "status", json_string(srv_state_name(state)));
    json_object_set_new(card, "reason", reason[0] ? json_string(reason) : json_null());
    json_t *g = json_object();
    if (state == SRV_READY || (state == SRV_FAILED && m->golden.status[0])) {
        json_object_set_new(g, "status", json_string(m->golden.status));
        json_object_set_new(g, "checked", json_integer(m->golden.checked));
        json_object_set_new(g, "matched", json_integer(m->golden.matched));
        json_object_set_new(g, "reference", json_string(m->golden.reference));
        if (m->golden.reason[0]) json_object_set_new(g, "reason", json_string(m->golden.reason));
    } else {
        json_object_set_new(g, "status", json_string("pending"));
    }
    json_object_set_new(card, "golden", g);
    json_object_set_new(card, "verification",
                        json_string(p->builtin ? (p->builtin->published ? "published" : "builtin") : "local"));
    return card;
}

static enum MHD_Result h_models(srv_http *h, struct MHD_Connection *c) {
    json_t *o = json_object();
    json_object_set_new(o, "object", json_string("list"));
    json_object_set_new(o, "api_version", json_string(API_VERSION));
    json_object_set_new(o, "data", json_pack("[o]", model_card(h)));
    json_t *lim = json_object();
    json_object_set_new(lim, "max_request_bytes", json_integer((json_int_t)h->opts->max_request_bytes));
    json_object_set_new(lim, "max_queue", json_integer(h->opts->max_queue));
    json_object_set_new(lim, "max_queued_tokens", json_integer(h->opts->max_queued_tokens));
    json_object_set_new(o, "limits", lim);
    return send_json(c, 200, o, NULL);
}

static enum MHD_Result h_health(srv_http *h, struct MHD_Connection *c) {
    srv_model *m = h->model;
    pthread_mutex_lock(&m->mu);
    srv_state s = m->state;
    json_t *o = json_object();
    json_object_set_new(o, "api_version", json_string(API_VERSION));
    json_object_set_new(o, "status", json_string(srv_state_name(s)));
    json_object_set_new(o, "reason", m->reason[0] ? json_string(m->reason) : json_null());
    json_object_set_new(o, "model", json_string(m->served_name));
    pthread_mutex_unlock(&m->mu);
    return send_json(c, s == SRV_READY ? 200 : 503, o, NULL);
}

static enum MHD_Result h_metrics(srv_http *h, struct MHD_Connection *c) {
    srv_model *m = h->model;
    pthread_mutex_lock(&m->mu);
    int ready = m->state == SRV_READY;
    int depth = m->queued;
    pthread_mutex_unlock(&m->mu);
    srv_model_gauges g = {.model = m->served_name,
                          .revision = m->pkg->revision[0] ? m->pkg->revision : "local",
                          .family = vsr_family_name(m->pkg->family),
                          .accelerator = vsr_device_kind_name(m->device.kind),
                          .device = m->device_id,
                          .profile = m->opts && m->opts->profile ? m->opts->profile : "exact",
                          .memory_bytes = model_memory(m),
                          .ready = ready,
                          .queue_depth = depth};
    char *s = srv_metrics_render(h->metrics, &g);
    if (!s) return MHD_NO;
    return send_body(c, 200, "text/plain; version=0.0.4", s, strlen(s), NULL);
}

/* ---- connections: phases, the whole-request deadline, the drain ---- */

typedef enum conn_phase { PH_READING, PH_HANDLING, PH_WRITING } conn_phase;

/* One open connection. READING: headers or body of a request are being read, or the connection
 * waits idle for its next request; HANDLING: suspended while a handler thread and the model work;
 * WRITING: an answer is being written. The monitor cuts (shutdown) a connection whose READING or
 * WRITING phase outlasts --request-timeout, and at SIGTERM every READING one at once. */
struct srv_conn {
    int fd;
    conn_phase phase;
    double t_phase;
    bool cut;
    srv_conn *prev, *next;
};

static void conn_set_phase(srv_http *h, srv_conn *sc, conn_phase ph) {
    if (!sc) return;
    pthread_mutex_lock(&h->cmu);
    sc->phase = ph;
    sc->t_phase = mono();
    pthread_mutex_unlock(&h->cmu);
}

static void conn_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                        enum MHD_ConnectionNotificationCode code) {
    srv_http *h = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        srv_conn *sc = calloc(1, sizeof *sc);
        if (!sc) return; /* untracked: libmicrohttpd's idle timeout still closes it */
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        sc->fd = ci ? ci->connect_fd : -1;
        sc->phase = PH_READING;
        sc->t_phase = mono();
        pthread_mutex_lock(&h->cmu);
        sc->next = h->conns;
        if (h->conns) h->conns->prev = sc;
        h->conns = sc;
        h->n_conns++;
        if (__atomic_load_n(&h->draining, __ATOMIC_SEQ_CST) && sc->fd >= 0) {
            shutdown(sc->fd, SHUT_RDWR);
            sc->cut = true;
        }
        pthread_mutex_unlock(&h->cmu);
        *socket_context = sc;
    } else {
        srv_conn *sc = *socket_context;
        if (!sc) return;
        /* libmicrohttpd calls this before it closes the socket: under cmu the monitor never
         * shuts down a descriptor that was closed and reused. */
        pthread_mutex_lock(&h->cmu);
        if (sc->prev) sc->prev->next = sc->next;
        else h->conns = sc->next;
        if (sc->next) sc->next->prev = sc->prev;
        h->n_conns--;
        pthread_mutex_unlock(&h->cmu);
        free(sc);
        *socket_context = NULL;
    }
}

static void sweep(srv_http *h) {
    double now = mono();
    bool dr = __atomic_load_n(&h->draining, __ATOMIC_SEQ_CST);
    pthread_mutex_lock(&h->cmu);
    for (srv_conn *sc = h->conns; sc; sc = sc->next) {
        if (sc->cut || sc->fd < 0 || sc->phase == PH_HANDLING) continue;
        double lim = sc->phase == PH_READING ? (dr ? 0 : h->lim.request_timeout_s)
                                             : (dr ? h->lim.drain_write_s : h->lim.request_timeout_s);
        if (now - sc->t_phase >= lim) {
            shutdown(sc->fd, SHUT_RDWR);
            sc->cut = true;
        }
    }
    pthread_mutex_unlock(&h->cmu);
}

/* ---- requests ---- */

typedef struct req_ctx req_ctx;

struct srv_task {
    req_ctx *rc;
    int kind; /* T_PARSE, T_FINISH */
    srv_task *next;          /* the handler queue */
    srv_task *wprev, *wnext; /* the monitor's watch list */
    bool watched, cancelling;
};
enum { T_PARSE, T_FINISH };

struct req_ctx {
    srv_http *h;
    struct MHD_Connection *c;
    srv_conn *sc;
    const route *r;       /* NULL: no route for this method and path */
    const char *label;    /* the metrics label: a route's path or "other" */
    char *body;
    size_t len, cap, received;
    int reject;           /* a status decided before the body was read (the body is discarded) */
    char reject_code[32];
    char reject_msg[300];
    bool early_sent;      /* the refusal was sent before the body (the connection closes) */
    bool dispatched;      /* handed to the handler threads */
    int ready;            /* (atomic) the handler threads' answer is in resp */
    int abandoned;        /* (atomic) the client went away: close without answering */
    struct MHD_Response *resp;
    int status;
    timing t;
    double t0;
    srv_job job;
    srv_task task;
};

static bool is_vela2(const srv_http *h) { return h->model->pkg->family == VSR_FAMILY_VELA2; }

/* The routes whose bodies are read and handed to the handler threads. */
static bool takes_body(const srv_http *h, const route *r) {
    return r->kind == R_DECISIONS || (r->kind == R_CLASSIFY && is_vela2(h));
}

static const route *find_route(const char *url, const char *method, bool *path_known) {
    const route *r = NULL;
    *path_known = false;
    for (size_t i = 0; i < N_ROUTES; i++)
        if (!strcmp(url, routes[i].path)) {
            *path_known = true;
            if (!strcmp(method, routes[i].method)) r = &routes[i];
        }
    return r;
}

static bool path_is_surface(const char *url) {
    for (size_t i = 0; i < N_ROUTES; i++)
        if (!strcmp(url, routes[i].path) && routes[i].surface) return true;
    return false;
}

static void body_release(srv_http *h, req_ctx *rc) {
    if (rc->cap) __atomic_sub_fetch(&h->body_bytes, rc->cap, __ATOMIC_SEQ_CST);
    free(rc->body);
    rc->body = NULL;
    rc->len = rc->cap = 0;
}

static void set_reject(req_ctx *rc, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void set_reject(req_ctx *rc, int status, const char *code, const char *fmt, ...) {
    rc->reject = status;
    snprintf(rc->reject_code, sizeof rc->reject_code, "%s", code);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rc->reject_msg, sizeof rc->reject_msg, fmt, ap);
    va_end(ap);
}

static struct MHD_Response *error_response(const char *code, const char *msg, timing *t, double t0) {
    if (t) t->total = mono() - t0;
    json_t *e = json_object();
    json_object_set_new(e, "code", json_string(code));
    json_object_set_new(e, "message", json_string(msg));
    json_t *o = json_object();
    json_object_set_new(o, "error", e);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s ? make_response("application/json", s, strlen(s), t) : NULL;
}

/* ---- handler threads: parse, submit, and write the answer of a finished job ---- */

static void task_push(srv_http *h, srv_task *t) {
    pthread_mutex_lock(&h->pmu);
    t->next = NULL;
    if (h->q_tail) h->q_tail->next = t;
    else h->q_head = t;
    h->q_tail = t;
    pthread_cond_signal(&h->pcond);
    pthread_mutex_unlock(&h->pmu);
}

static void watch_remove_locked(srv_http *h, srv_task *t) {
    if (!t->watched) return;
    if (t->wprev) t->wprev->wnext = t->wnext;
    else h->watch = t->wnext;
    if (t->wnext) t->wnext->wprev = t->wprev;
    t->watched = false;
}

/* Ends the handler threads' part: the answer (or the abandonment) is recorded, then the
 * connection resumes. Nothing may touch rc after MHD_resume_connection. */
static void complete(req_ctx *rc, int status, struct MHD_Response *resp) {
    srv_http *h = rc->h;
    rc->status = status;
    rc->resp = resp;
    srv_metrics_request(h->metrics, rc->label, status, mono() - rc->t0);
    srv_log(SRV_LOG_DEBUG, "POST %s %d %.3f ms", rc->r->path, status, (mono() - rc->t0) * 1e3);
    __atomic_store_n(&rc->ready, 1, __ATOMIC_SEQ_CST);
    MHD_resume_connection(rc->c);
}

static void complete_error(req_ctx *rc, int status, const char *code, const char *msg) {
    complete(rc, status, error_response(code, msg, &rc->t, rc->t0));
}

static void job_done(srv_job *j, void *arg) { /* the scheduler, with the model's lock held */
    req_ctx *rc = arg;
    rc->task.kind = T_FINISH;
    task_push(rc->h, &rc->task);
}

static void job_free(srv_job *j) {
    if (j->kind == SRV_JOB_D3) vsr_decision_free(j->dj);
    else if (j->kind == SRV_JOB_V2) vsr_v2_job_free(j->v2);
    else vsr_v2_classify_free(j->v2c);
    j->dj = NULL;
    j->v2 = NULL;
    j->v2c = NULL;
}

static void run_parse(req_ctx *rc) {
    srv_http *h = rc->h;
    srv_model *m = h->model;
    double t_parse = mono();
    rc->t.parse = t_parse - rc->t0;
    vsr_http_error he = {0};
    const char *body = rc->body ? rc->body : "";
    double deadline_ms = 0;
    rc->job = (srv_job){.on_done = job_done, .on_done_arg = rc};
    bool parsed = false;
    if (rc->r->kind == R_CLASSIFY) { /* routed here for Vela 2.0 packages only */
        vsr_v2_classify *c = vsr_v2_classify_parse(m->v2, body, rc->len, m->served_name, &he);
        if ((parsed = c)) {
            rc->job.kind = SRV_JOB_V2_CLASSIFY;
            rc->job.v2c = c;
            rc->job.v2 = vsr_v2_classify_job(c);
            rc->job.tokens = vsr_v2_classify_tokens(c);
            deadline_ms = vsr_v2_classify_deadline_ms(c);
        }
    } else if (m->v2) {
        vsr_v2_job *j = vsr_v2_parse(m->v2, body, rc->len, m->served_name, &he);
        if ((parsed = j)) {
            rc->job.kind = SRV_JOB_V2;
            rc->job.v2 = j;
            rc->job.tokens = vsr_v2_job_tokens(j);
            deadline_ms = vsr_v2_job_deadline_ms(j);
        }
    } else {
        vsr_decision_job *dj = vsr_decision_parse(m->decider, body, rc->len, m->served_name, &he);
        if ((parsed = dj)) {
            rc->job.kind = SRV_JOB_D3;
            rc->job.dj = dj;
            rc->job.tokens = vsr_decision_tokens(dj);
            deadline_ms = vsr_decision_deadline_ms(dj);
        }
    }
    body_release(h, rc); /* the job holds what it needs */
    __atomic_sub_fetch(&h->backlog, 1, __ATOMIC_SEQ_CST);
    rc->t.tokenize = mono() - t_parse;
    if (!parsed) {
        complete_error(rc, he.status, he.code, he.message);
        return;
    }
    pthread_mutex_lock(&h->wmu); /* watched before it can finish */
    srv_task *t = &rc->task;
    t->wprev = NULL;
    t->wnext = h->watch;
    if (h->watch) h->watch->wprev = t;
    h->watch = t;
    t->watched = true;
    pthread_mutex_unlock(&h->wmu);
    srv_submit sub = srv_model_submit(m, &rc->job, deadline_ms);
    if (sub == SUBMIT_OK) return;
    pthread_mutex_lock(&h->wmu);
    watch_remove_locked(h, t);
    pthread_mutex_unlock(&h->wmu);
    long long tokens = rc->job.tokens;
    job_free(&rc->job);
    char msg[400];
    if (sub == SUBMIT_STOPPING) {
        complete_error(rc, 503, "not_ready", "the worker is shutting down (SIGTERM); retry on another worker");
    } else if (sub == SUBMIT_TOO_MANY_TOKENS) {
        snprintf(msg, sizeof msg, "the request holds %lld tokens, over --max-queued-tokens %lld", tokens,
                 m->max_queued_tokens);
        complete_error(rc, 413, "request_too_large", msg);
    } else {
        snprintf(msg, sizeof msg, "the queue of %s is full (%d jobs or %lld tokens); retry later", m->served_name,
                 m->max_queue, m->max_queued_tokens);
        complete_error(rc, 429, "overloaded", msg);
    }
}

static void count_question(void *ctx, const char *type, const char *outcome) {
    srv_metrics_question(ctx, type, outcome);
}

static void run_finish(req_ctx *rc) {
    srv_http *h = rc->h;
    srv_model *m = h->model;
    pthread_mutex_lock(&h->wmu);
    watch_remove_locked(h, &rc->task);
    pthread_mutex_unlock(&h->wmu);
    srv_job *job = &rc->job;
    timing *t = &rc->t;
    if (__atomic_load_n(&rc->abandoned, __ATOMIC_SEQ_CST)) {
        /* The client went away: its work was withdrawn or cancelled; nothing to send. */
        job_free(job);
        complete(rc, 499, NULL);
        return;
    }
    t->queue = job->t_start - job->t_enqueue;
    t->forward = job->forward_s;
    double t_post = mono();
    if (job->st != VSR_OK) {
        char msg[VSR_ERR_MSG_MAX];
        snprintf(msg, sizeof msg, "%s", job->err.msg);
        job_free(job);
        complete_error(rc, 500, "internal_error", msg);
        return;
    }
    if (job->kind == SRV_JOB_D3) vsr_decision_outcomes(job->dj, count_question, h->metrics);
    else vsr_v2_outcomes(job->v2, count_question, h->metrics);
    srv_metrics_input_tokens(h->metrics, job->tokens);
    if (job->dropped) srv_metrics_deadline_dropped(h->metrics, job->dropped);
    vsr_decision_meta meta = {.model_id = m->served_name,
                              .revision = m->pkg->revision[0] ? m->pkg->revision : NULL,
                              .model_sha256 = m->pkg->model_sha256,
                              .device = m->device_id,
                              .accelerator = vsr_device_kind_name(m->device.kind),
                              .queue_ms = t->queue * 1e3,
                              .compute_ms = t->forward * 1e3};
    double t_ser = mono();
    t->post = t_ser - t_post;
    char *body = job->kind == SRV_JOB_D3 ? vsr_decision_response(job->dj, &meta)
                 : job->kind == SRV_JOB_V2 ? vsr_v2_response(job->v2, &meta)
                                           : vsr_v2_classify_response(job->v2c, &meta);
    job_free(job);
    double t_end = mono();
    t->serialize = t_end - t_ser;
    t->total = t_end - rc->t0;
    if (!body) {
        complete_error(rc, 500, "internal_error", "out of memory writing the response");
        return;
    }
    complete(rc, 200, make_response("application/json", body, strlen(body), t));
}

static void *handler_main(void *arg) {
    srv_http *h = arg;
    for (;;) {
        pthread_mutex_lock(&h->pmu);
        while (!h->q_head && !__atomic_load_n(&h->stop_threads, __ATOMIC_SEQ_CST))
            pthread_cond_wait(&h->pcond, &h->pmu);
        srv_task *t = h->q_head;
        if (!t) {
            pthread_mutex_unlock(&h->pmu);
            break;
        }
        h->q_head = t->next;
        if (!h->q_head) h->q_tail = NULL;
        pthread_mutex_unlock(&h->pmu);
        if (t->kind == T_PARSE) run_parse(t->rc);
        else run_finish(t->rc);
    }
    return NULL;
}

static bool client_gone(int fd) {
    if (fd < 0) return false;
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLHUP | POLLERR | POLLRDHUP)) return true;
    char b;
    ssize_t r = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return r == 0;
}

/* Every 100 ms: jobs whose clients went away are withdrawn or cancelled, and connections past
 * their deadline are cut. */
static void *monitor_main(void *arg) {
    srv_http *h = arg;
    int idle_ticks = 0;
    bool trimmed = true;
    while (!__atomic_load_n(&h->stop_threads, __ATOMIC_SEQ_CST)) {
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, NULL);
        /* After a busy spell, once nothing has been in flight for a second, hand the freed heap
         * back to the system (request bodies and jobs come and go in large blocks). */
        if (__atomic_load_n(&h->inflight, __ATOMIC_SEQ_CST) > 0) {
            idle_ticks = 0;
            trimmed = false;
        } else if (!trimmed && ++idle_ticks >= 10) {
            malloc_trim(0);
            trimmed = true;
        }
        pthread_mutex_lock(&h->wmu);
        for (srv_task *t = h->watch, *nx; t; t = nx) {
            nx = t->wnext;
            if (t->cancelling || !client_gone(t->rc->sc ? t->rc->sc->fd : -1)) continue;
            srv_abandon a = srv_model_abandon(h->model, &t->rc->job);
            if (a == ABANDON_DONE) continue; /* its answer is being written */
            __atomic_store_n(&t->rc->abandoned, 1, __ATOMIC_SEQ_CST);
            if (a == ABANDON_WITHDRAWN) {
                watch_remove_locked(h, t);
                t->kind = T_FINISH;
                task_push(h, t);
            } else {
                t->cancelling = true; /* the scheduler's job_done follows */
            }
        }
        pthread_mutex_unlock(&h->wmu);
        sweep(h);
    }
    return NULL;
}

/* ---- dispatch ---- */

static enum MHD_Result queue_now(srv_http *h, struct MHD_Connection *c, req_ctx *rc, int status,
                                 struct MHD_Response *resp) {
    if (!resp) return MHD_NO;
    conn_set_phase(h, rc->sc, PH_WRITING);
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static bool header_is(struct MHD_Connection *c, const char *name, const char *value) {
    const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
    return v && strcasestr(v, value);
}

static enum MHD_Result access_handler(void *cls, struct MHD_Connection *c, const char *url,
                                      const char *method, const char *version,
                                      const char *upload_data, size_t *upload_data_size,
                                      void **con_cls) {
    srv_http *h = cls;
    req_ctx *rc = *con_cls;
    if (!rc) {
        rc = calloc(1, sizeof *rc);
        if (!rc) return MHD_NO;
        rc->t0 = mono();
        rc->h = h;
        rc->c = c;
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        rc->sc = ci ? ci->socket_context : NULL;
        *con_cls = rc;
        __atomic_add_fetch(&h->inflight, 1, __ATOMIC_SEQ_CST);
        bool path_known;
        rc->r = find_route(url, method, &path_known);
        rc->label = rc->r ? rc->r->path : "other";
        bool surface = path_is_surface(url);
        if (path_known) /* a known path with another method: labelled by its path */
            for (size_t i = 0; i < N_ROUTES && !rc->r; i++)
                if (!strcmp(url, routes[i].path)) rc->label = routes[i].path;
        if (!rc->r) {
            if (path_known) set_reject(rc, 405, "invalid_request", "method not allowed");
            else set_reject(rc, 404, "invalid_request", "no route %.250s", url);
        }
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        unsigned long long n = 0;
        if (cl) {
            errno = 0;
            n = strtoull(cl, NULL, 10);
            if (errno) n = ULLONG_MAX;
        }
        if (!rc->reject && n > h->opts->max_request_bytes)
            set_reject(rc, 413, "request_too_large", "the request body exceeds %zu bytes", h->opts->max_request_bytes);
        if (rc->reject) {
            /* Refused before its body: a client waiting for 100 Continue, or one whose body is
             * past what we read and discard, gets the answer now (the connection then closes);
             * any other reads its whole body (discarded) first, so it sees the answer. */
            bool expect = header_is(c, "Expect", "100-continue");
            bool has_body = n > 0 || header_is(c, MHD_HTTP_HEADER_TRANSFER_ENCODING, "chunked");
            if (has_body && (expect || n > h->lim.max_discard_bytes + h->opts->max_request_bytes)) {
                rc->early_sent = true;
                srv_metrics_request(h->metrics, rc->label, rc->reject, mono() - rc->t0);
                timing t = {0};
                return queue_now(h, c, rc, rc->reject,
                                 error_response(rc->reject_code, rc->reject_msg, surface ? &t : NULL, rc->t0));
            }
        }
        return MHD_YES;
    }
    if (rc->early_sent) {
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        rc->received += n;
        if (rc->reject || !takes_body(h, rc->r)) {
            /* discarded; past the bound the connection closes */
            return rc->received > h->lim.max_discard_bytes + h->opts->max_request_bytes ? MHD_NO : MHD_YES;
        }
        if (rc->len + n > h->opts->max_request_bytes) {
            body_release(h, rc);
            set_reject(rc, 413, "request_too_large", "the request body exceeds %zu bytes", h->opts->max_request_bytes);
            return MHD_YES;
        }
        if (rc->len + n + 1 > rc->cap) {
            size_t cap = rc->cap ? rc->cap : 4096;
            while (cap < rc->len + n + 1) cap *= 2;
            if (cap > h->opts->max_request_bytes + 1) cap = h->opts->max_request_bytes + 1;
            size_t grow = cap - rc->cap;
            size_t held = __atomic_add_fetch(&h->body_bytes, grow, __ATOMIC_SEQ_CST);
            if (held > h->lim.max_body_memory) {
                __atomic_sub_fetch(&h->body_bytes, grow, __ATOMIC_SEQ_CST);
                body_release(h, rc);
                set_reject(rc, 429, "overloaded",
                           "the worker holds its limit of request bodies in memory (%zu bytes); retry later",
                           h->lim.max_body_memory);
                return MHD_YES;
            }
            char *b = realloc(rc->body, cap);
            if (!b) {
                __atomic_sub_fetch(&h->body_bytes, grow, __ATOMIC_SEQ_CST);
                return MHD_NO;
            }
            rc->body = b;
            rc->cap = cap;
        }
        memcpy(rc->body + rc->len, upload_data, n);
        rc->len += n;
        rc->body[rc->len] = 0;
        return MHD_YES;
    }
    /* The whole request is in. */
    if (rc->dispatched) { /* resumed: the handler threads' answer */
        if (!__atomic_load_n(&rc->ready, __ATOMIC_SEQ_CST) || !rc->resp) return MHD_NO;
        struct MHD_Response *resp = rc->resp;
        rc->resp = NULL;
        return queue_now(h, c, rc, rc->status, resp);
    }
    int status = 200;
    enum MHD_Result ret;
    timing t = {0};
    if (rc->reject) {
        status = rc->reject;
        bool surface = rc->r ? rc->r->surface : path_is_surface(url);
        ret = queue_now(h, c, rc, status, error_response(rc->reject_code, rc->reject_msg, surface ? &t : NULL, rc->t0));
    } else {
        route_kind kind = rc->r->kind;
        if (kind == R_CLASSIFY && !is_vela2(h)) kind = R_UNSUPPORTED;
        switch (kind) {
        case R_CLASSIFY:
        case R_DECISIONS: {
            srv_model *m = h->model;
            pthread_mutex_lock(&m->mu);
            srv_state s = m->state;
            char reason[VSR_ERR_MSG_MAX];
            snprintf(reason, sizeof reason, "%s", m->reason);
            pthread_mutex_unlock(&m->mu);
            char msg[1024];
            if (s != SRV_READY) {
                snprintf(msg, sizeof msg, "model %s is not ready: %s%s%.400s", m->served_name, srv_state_name(s),
                         reason[0] ? ": " : "", reason);
                status = 503;
                ret = queue_now(h, c, rc, status, error_response("not_ready", msg, &t, rc->t0));
                break;
            }
            if (__atomic_load_n(&h->draining, __ATOMIC_SEQ_CST)) {
                status = 503;
                ret = queue_now(h, c, rc, status,
                                error_response("not_ready", "the worker is shutting down (SIGTERM); retry on another worker",
                                               &t, rc->t0));
                break;
            }
            if (__atomic_add_fetch(&h->backlog, 1, __ATOMIC_SEQ_CST) > h->lim.max_parse_backlog) {
                __atomic_sub_fetch(&h->backlog, 1, __ATOMIC_SEQ_CST);
                snprintf(msg, sizeof msg, "%d requests of %s wait to be parsed; retry later", h->lim.max_parse_backlog,
                         m->served_name);
                status = 429;
                ret = queue_now(h, c, rc, status, error_response("overloaded", msg, &t, rc->t0));
                break;
            }
            rc->dispatched = true;
            __atomic_add_fetch(&h->pipeline, 1, __ATOMIC_SEQ_CST);
            conn_set_phase(h, rc->sc, PH_HANDLING);
            MHD_suspend_connection(c);
            rc->task.rc = rc;
            rc->task.kind = T_PARSE;
            task_push(h, &rc->task);
            return MHD_YES; /* counted when answered */
        }
        case R_UNSUPPORTED: {
            char msg[400];
            if (is_vela2(h))
                snprintf(msg, sizeof msg, "%s is a Vela 2.0 model: it serves POST /v1/decisions and POST /v1/classify, not %s",
                         h->model->served_name, url);
            else
                snprintf(msg, sizeof msg, "%s is a Decision 3.0 model: it serves POST /v1/decisions, not %s",
                         h->model->served_name, url);
            status = 422;
            ret = queue_now(h, c, rc, status, error_response("unsupported_surface", msg, &t, rc->t0));
            break;
        }
        case R_MODELS: ret = h_models(h, c); break;
        case R_HEALTH: {
            pthread_mutex_lock(&h->model->mu);
            status = h->model->state == SRV_READY ? 200 : 503;
            pthread_mutex_unlock(&h->model->mu);
            ret = h_health(h, c);
            break;
        }
        case R_LIVE: {
            json_t *o = json_pack("{s:s,s:s}", "api_version", API_VERSION, "status", "alive");
            ret = send_json(c, 200, o, NULL);
            break;
        }
        case R_METRICS: ret = h_metrics(h, c); break;
        case R_OPENAPI: {
            char *y = strdup(vsr_openapi_yaml);
            ret = y ? send_body(c, 200, "application/yaml", y, strlen(y), NULL) : MHD_NO;
            break;
        }
        default: ret = MHD_NO; break;
        }
        if (kind != R_DECISIONS && kind != R_CLASSIFY && kind != R_UNSUPPORTED) conn_set_phase(h, rc->sc, PH_WRITING);
    }
    srv_metrics_request(h->metrics, rc->label, status, mono() - rc->t0);
    srv_log(SRV_LOG_DEBUG, "%s %s %d %.3f ms", method, rc->label, status, (mono() - rc->t0) * 1e3);
    return ret;
}

static void request_done(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    req_ctx *rc = *con_cls;
    srv_http *h = cls;
    if (rc) {
        conn_set_phase(h, rc->sc, PH_READING); /* a kept-alive connection waits for its next request */
        body_release(h, rc);
        if (rc->resp) MHD_destroy_response(rc->resp);
        if (rc->dispatched) __atomic_sub_fetch(&h->pipeline, 1, __ATOMIC_SEQ_CST);
        __atomic_sub_fetch(&h->inflight, 1, __ATOMIC_SEQ_CST);
        free(rc);
        *con_cls = NULL;
    }
}

/* A path where a socket may be created: nothing there, or a stale socket (nothing listening),
 * which is removed. Anything else is refused, never unlinked. */
static int claim_uds_path(const char *path, vsr_err *err) {
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT) return 0;
        return -(int)vsr_err_set(err, VSR_E_IO, "--uds %s: %s", path, strerror(errno));
    }
    if (!S_ISSOCK(st.st_mode))
        return -(int)vsr_err_set(err, VSR_E_INVALID,
                                 "--uds %s: the path exists and is not a socket; refusing to remove it (choose "
                                 "another path or remove it yourself)",
                                 path);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -(int)vsr_err_set(err, VSR_E_IO, "--uds %s: socket: %s", path, strerror(errno));
    int rc = connect(fd, (struct sockaddr *)&a, sizeof a);
    int e = errno;
    close(fd);
    if (rc == 0 || (e != ECONNREFUSED && e != ENOENT))
        return -(int)vsr_err_set(err, VSR_E_IO,
                                 "--uds %s: another process is listening on this socket; refusing to replace it",
                                 path);
    if (unlink(path) != 0 && errno != ENOENT)
        return -(int)vsr_err_set(err, VSR_E_IO, "--uds %s: cannot remove the stale socket: %s", path, strerror(errno));
    srv_log(SRV_LOG_INFO, "--uds %s: removed a stale socket (nothing listened on it)", path);
    return 0;
}

static int listen_unix(const char *path, vsr_err *err) {
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof a.sun_path)
        return -(int)vsr_err_set(err, VSR_E_INVALID, "--uds %s: the path is longer than %zu bytes", path,
                                 sizeof a.sun_path - 1);
    snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
    if (claim_uds_path(path, err) < 0) return -1;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -(int)vsr_err_set(err, VSR_E_IO, "--uds %s: socket: %s", path, strerror(errno));
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 128) != 0) {
        int e = errno;
        close(fd);
        return -(int)vsr_err_set(err, VSR_E_IO, "--uds %s: cannot listen: %s", path, strerror(e));
    }
    return fd;
}

static void mhd_logger(void *cls, const char *fmt, va_list ap) { srv_logv(SRV_LOG_DEBUG, fmt, ap); }

void srv_http_limits_default(srv_http_limits *l) {
    *l = (srv_http_limits){.max_connections = 2048,
                           .max_connections_per_client = 256,
                           .request_timeout_s = 30,
                           .idle_timeout_s = 15,
                           .handler_threads = 0,
                           .max_parse_backlog = 64,
                           .max_body_memory = 268435456,
                           .max_discard_bytes = 67108864,
                           .drain_write_s = 5};
}

vsr_status srv_http_start(srv_http *h, vsr_err *err) {
    srv_http_limits *l = &h->lim;
    if (!l->max_connections) srv_http_limits_default(l);
    /* Every connection is a descriptor: raise the soft limit to the hard one and keep 64 spare. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        if (rl.rlim_cur < rl.rlim_max) {
            rl.rlim_cur = rl.rlim_max;
            setrlimit(RLIMIT_NOFILE, &rl);
            getrlimit(RLIMIT_NOFILE, &rl);
        }
        if (rl.rlim_cur != RLIM_INFINITY && (rlim_t)l->max_connections + 64 > rl.rlim_cur) {
            int cap = rl.rlim_cur > 128 ? (int)(rl.rlim_cur - 64) : 64;
            srv_log(SRV_LOG_WARN, "--max-connections %d lowered to %d (open-file limit %llu)", l->max_connections, cap,
                    (unsigned long long)rl.rlim_cur);
            l->max_connections = cap;
        }
    }
    if (l->handler_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        l->handler_threads = n < 2 ? 2 : n > 4 ? 4 : (int)n;
    }
    pthread_mutex_init(&h->cmu, NULL);
    pthread_mutex_init(&h->pmu, NULL);
    pthread_mutex_init(&h->wmu, NULL);
    pthread_cond_init(&h->pcond, NULL);
    h->sync_ready = 1;
    h->handlers = calloc((size_t)l->handler_threads, sizeof *h->handlers);
    if (!h->handlers) return vsr_err_set(err, VSR_E_NOMEM, "out of memory starting the handler threads");
    for (int i = 0; i < l->handler_threads; i++) {
        if (pthread_create(&h->handlers[i], NULL, handler_main, h) != 0)
            return vsr_err_set(err, VSR_E_INTERNAL, "cannot start the handler threads");
        h->n_handlers++;
    }
    if (pthread_create(&h->monitor, NULL, monitor_main, h) != 0)
        return vsr_err_set(err, VSR_E_INTERNAL, "cannot start the connection monitor thread");
    h->monitor_started = 1;

    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)h->opts->port)};
    if (h->opts->uds) {
        int fd = listen_unix(h->opts->uds, err);
        if (fd < 0) return err->code;
        h->uds_fd = fd;
    } else if (inet_pton(AF_INET, h->opts->host, &a.sin_addr) != 1) {
        return vsr_err_set(err, VSR_E_INVALID, "--host %s: expected an IPv4 address such as 127.0.0.1 or 0.0.0.0",
                           h->opts->host);
    }
    h->daemon = MHD_start_daemon(
        flags, h->opts->uds ? 0 : (uint16_t)h->opts->port, NULL, NULL, access_handler, h,
        h->opts->uds ? MHD_OPTION_LISTEN_SOCKET : MHD_OPTION_SOCK_ADDR,
        h->opts->uds ? (intptr_t)h->uds_fd : (intptr_t)(struct sockaddr *)&a, MHD_OPTION_NOTIFY_COMPLETED,
        request_done, h, MHD_OPTION_NOTIFY_CONNECTION, conn_notify, h, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)l->max_connections, MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)l->max_connections_per_client,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)l->idle_timeout_s, MHD_OPTION_THREAD_POOL_SIZE, 2u,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)65536, MHD_OPTION_EXTERNAL_LOGGER, mhd_logger, h,
        MHD_OPTION_END);
    if (!h->daemon) {
        if (h->opts->uds)
            return vsr_err_set(err, VSR_E_IO, "cannot serve HTTP on unix socket %s", h->opts->uds);
        return vsr_err_set(err, VSR_E_IO, "cannot listen on %s:%d (is the port in use?)", h->opts->host,
                           h->opts->port);
    }
    return VSR_OK;
}

int srv_http_inflight(srv_http *h) { return __atomic_load_n(&h->inflight, __ATOMIC_SEQ_CST); }
int srv_http_pipeline(srv_http *h) { return __atomic_load_n(&h->pipeline, __ATOMIC_SEQ_CST); }

void srv_http_quiesce(srv_http *h) {
    if (!h->daemon) return;
    int fd = MHD_quiesce_daemon(h->daemon);
    if (fd >= 0 && fd != h->uds_fd) close(fd); /* the TCP port is free at once */
    __atomic_store_n(&h->draining, 1, __ATOMIC_SEQ_CST);
    sweep(h);
}

void srv_http_stop(srv_http *h) {
    if (h->sync_ready) {
        pthread_mutex_lock(&h->pmu); /* the handler threads read the flag under this lock */
        __atomic_store_n(&h->stop_threads, 1, __ATOMIC_SEQ_CST);
        pthread_cond_broadcast(&h->pcond);
        pthread_mutex_unlock(&h->pmu);
        if (h->monitor_started) pthread_join(h->monitor, NULL);
        for (int i = 0; i < h->n_handlers; i++) pthread_join(h->handlers[i], NULL);
        free(h->handlers);
        h->handlers = NULL;
        h->n_handlers = 0;
        h->monitor_started = 0;
    }
    if (h->daemon) MHD_stop_daemon(h->daemon);
    h->daemon = NULL;
    if (h->uds_fd > 0) {
        close(h->uds_fd);
        unlink(h->opts->uds);
        h->uds_fd = -1;
    }
    if (h->sync_ready) {
        pthread_mutex_destroy(&h->cmu);
        pthread_mutex_destroy(&h->pmu);
        pthread_mutex_destroy(&h->wmu);
        pthread_cond_destroy(&h->pcond);
        h->sync_ready = 0;
    }
}
