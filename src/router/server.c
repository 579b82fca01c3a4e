/* The router's HTTP server (vsr/router_server.h) on the worker's stack: libmicrohttpd, event
 * driven (epoll, two polling threads), a request suspended while its upstream calls run. The
 * calls run on the upstream client's one thread (client.h); their callbacks advance the
 * request and resume its connection. A streamed answer is a callback response whose reader
 * suspends the connection when it has no bytes yet and is resumed when bytes arrive.
 *
 * Config snapshots are refcounted: a request keeps the snapshot it started with until it is
 * answered, so a SIGHUP swap never changes the rules under a request in flight. */
#include "vsr/router_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/strbuf.h"
#include "router/client.h"
#include "router/rmetrics.h"
#include "router/route.h"
#include "server/log.h"
#include "vsr/router.h"
#include "vsr/supervisor.h"

#define STREAM_HIGH_WATER (1u << 20)   /* pause the backend when this much waits for the client */
#define MAX_ANSWER_BYTES (256u << 20)  /* a buffered (non-streamed) answer */

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- config snapshots ---- */

typedef struct snapshot {
    int refs; /* atomic */
    int generation;
    vsr_router_config *cfg;
    rt_table *table;
} snapshot;

static void snap_unref(snapshot *s) {
    if (!s || __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL)) return;
    rt_table_free(s->table);
    vsr_router_config_free(s->cfg);
    free(s);
}

typedef struct rq rq;

typedef struct router {
    const vsr_router_serve_opts *o;
    struct MHD_Daemon *d;
    rt_client *client;
    rt_metrics *metrics;
    vsr_sup *sup;
    pthread_mutex_t mu; /* snap, the live list */
    snapshot *snap;
    rq *live;
    int inflight; /* atomic: requests not yet finished */
    int draining; /* atomic */
    size_t max_body;
} router;

static snapshot *snap_get(router *r) {
    pthread_mutex_lock(&r->mu);
    snapshot *s = r->snap;
    __atomic_add_fetch(&s->refs, 1, __ATOMIC_ACQ_REL);
    pthread_mutex_unlock(&r->mu);
    return s;
}

/* ---- requests ---- */

typedef enum route_kind { K_CHAT, K_DECISIONS, K_MODELS, K_HEALTH, K_READY, K_METRICS } route_kind;

typedef struct route {
    const char *path, *method;
    route_kind kind;
} route;

static const route routes[] = {
    {"/v1/chat/completions", "POST", K_CHAT}, {"/v1/decisions", "POST", K_DECISIONS},
    {"/v1/models", "GET", K_MODELS},          {"/health", "GET", K_HEALTH},
    {"/ready", "GET", K_READY},               {"/metrics", "GET", K_METRICS},
};
#define N_ROUTES (sizeof routes / sizeof routes[0])

typedef enum sub_purpose { P_DECISION, P_SPAN, P_FORWARD, P_UPSTREAM } sub_purpose;

/* One upstream call of a request. */
typedef struct sub {
    rq *q;
    sub_purpose purpose;
    const char *deployment; /* P_DECISION, P_SPAN, P_FORWARD (snapshot strings) */
    int span_call;          /* P_SPAN: index in the table's span calls */
    vsr_sup_target t;
    bool picked;
    rt_call *call;
    vsr_strbuf body;
    long status;
    char ctype[160], timing[512];
    rt_call_result res;
    char why[512];
    json_t *json; /* the parsed answer of a signal call (200 only) */
    char *lines;  /* the backend's headers (P_UPSTREAM) */
} sub;

struct rq {
    int refs; /* atomic: the connection, each call in flight, a streaming response */
    pthread_mutex_t mu;
    router *r;
    struct MHD_Connection *c;
    const route *route;
    const char *label;
    double t0;
    char *body;
    size_t len, cap;
    bool too_large, dispatched;
    snapshot *snap;
    char auth[1024]; /* the client's Authorization header, passed to backends */
    /* under mu */
    bool suspended, gone, ready, metered;
    int status;
    struct MHD_Response *resp;
    /* signals */
    int pending;
    sub sig[1 + RT_N_SIGNALS];
    int n_sig;
    json_t *chat; /* the parsed chat body */
    /* routing */
    const char *route_kind; /* "decision", "default", "explicit" */
    int decision;
    const vsr_rt_model *model;
    int backend, tried;
    sub up;
    /* a streamed answer (under mu) */
    bool streaming, up_done, up_paused;
    char *sbuf;
    size_t slen, soff, scap;
    rq *lprev, *lnext;
};

static void rq_unref(rq *q) {
    if (__atomic_sub_fetch(&q->refs, 1, __ATOMIC_ACQ_REL)) return;
    router *r = q->r;
    pthread_mutex_lock(&r->mu);
    if (q->lprev) q->lprev->lnext = q->lnext;
    else if (r->live == q) r->live = q->lnext;
    if (q->lnext) q->lnext->lprev = q->lprev;
    pthread_mutex_unlock(&r->mu);
    for (int i = 0; i < q->n_sig; i++) {
        rt_call_release(q->sig[i].call);
        vsr_strbuf_free(&q->sig[i].body);
        json_decref(q->sig[i].json);
    }
    rt_call_release(q->up.call);
    vsr_strbuf_free(&q->up.body);
    free(q->up.lines);
    json_decref(q->chat);
    if (q->resp) MHD_destroy_response(q->resp);
    free(q->body);
    free(q->sbuf);
    snap_unref(q->snap);
    pthread_mutex_destroy(&q->mu);
    free(q);
}

/* Resumes the connection if it is suspended (any thread). */
static void wake(rq *q) {
    bool resume = false;
    pthread_mutex_lock(&q->mu);
    if (q->suspended) {
        q->suspended = false;
        resume = true;
    }
    pthread_mutex_unlock(&q->mu);
    if (resume) MHD_resume_connection(q->c);
}

static void add_common_headers(rq *q, struct MHD_Response *resp) {
    if (!q->route_kind) return;
    MHD_add_response_header(resp, "x-vsr-route", q->route_kind);
    if (q->decision >= 0 && q->snap) MHD_add_response_header(resp, "x-vsr-decision", q->snap->cfg->decisions[q->decision].name);
    if (q->model) MHD_add_response_header(resp, "x-vsr-model", q->model->name);
    if (q->model && q->backend >= 0) {
        const vsr_rt_backend *b = &q->model->backends[q->backend];
        MHD_add_response_header(resp, "x-vsr-backend", b->name ? b->name : b->endpoint);
    }
}

static struct MHD_Response *buffer_response(const char *ctype, char *body, size_t len) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return NULL;
    }
    if (ctype && *ctype) MHD_add_response_header(resp, "Content-Type", ctype);
    return resp;
}

static struct MHD_Response *error_body(const char *code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static struct MHD_Response *error_body(const char *code, const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *o = json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", msg);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s ? buffer_response("application/json", s, strlen(s)) : NULL;
}

/* The answer is ready: hand it to the connection (resumed if suspended). Any thread. */
static void respond(rq *q, int status, struct MHD_Response *resp) {
    if (resp) add_common_headers(q, resp);
    pthread_mutex_lock(&q->mu);
    if (q->ready || q->gone) { /* answered already, or nobody to answer */
        pthread_mutex_unlock(&q->mu);
        if (resp) MHD_destroy_response(resp);
        return;
    }
    q->status = status;
    q->resp = resp;
    q->ready = true;
    pthread_mutex_unlock(&q->mu);
    wake(q);
}

static void metric_request(rq *q, int status) {
    if (q->metered) return;
    q->metered = true;
    char st[16];
    snprintf(st, sizeof st, "%d", status);
    const char *l1[] = {"endpoint", q->label, "status", st, NULL};
    rt_metrics_inc(q->r->metrics, RM_REQUESTS, l1);
    const char *l2[] = {"endpoint", q->label, NULL};
    rt_metrics_observe(q->r->metrics, RM_REQUEST_DURATION, mono() - q->t0, l2);
}

/* ---- calls to deployments ---- */

static const char *outcome_of(rt_call_result res, long status) {
    if (res == RT_CALL_TIMEOUT) return "timeout";
    if (res == RT_CALL_CONNECT) return "unavailable";
    if (res != RT_CALL_OK) return "failed";
    if (status == 429) return "overloaded";
    if (status == 503) return "unavailable";
    if (status >= 400 && status < 500) return "rejected";
    if (status >= 500) return "failed";
    return "ok";
}

static void sub_headers(void *arg, long status, const char *ctype, const char *timing, const char *lines) {
    sub *s = arg;
    s->status = status;
    snprintf(s->ctype, sizeof s->ctype, "%s", ctype ? ctype : "");
    snprintf(s->timing, sizeof s->timing, "%s", timing ? timing : "");
}

static bool sub_body(void *arg, const char *data, size_t n) {
    sub *s = arg;
    if (s->body.n + n > MAX_ANSWER_BYTES) s->body.oom = true;
    else vsr_strbuf_put(&s->body, data, n);
    return true;
}

/* Ends the supervisor's part of a deployment call and counts it. */
static void deployment_call_done(sub *s, const char *surface, double seconds) {
    router *r = s->q->r;
    if (s->picked) {
        if (s->res == RT_CALL_CONNECT || s->res == RT_CALL_TRANSPORT) vsr_sup_report_failure(r->sup, &s->t);
        vsr_sup_release(r->sup, &s->t);
        s->picked = false;
    }
    if (s->res == RT_CALL_CANCELLED) return;
    const char *l1[] = {"deployment", s->deployment, "outcome", outcome_of(s->res, s->status), NULL};
    rt_metrics_inc(r->metrics, RM_DEP_REQUESTS, l1);
    const char *l2[] = {"deployment", s->deployment, "surface", surface, NULL};
    rt_metrics_observe(r->metrics, RM_DEP_DURATION, seconds, l2);
}

static void unknown_metric(router *r, const char *deployment, const char *reason) {
    const char *l[] = {"deployment", deployment, "reason", reason, NULL};
    rt_metrics_inc(r->metrics, RM_UNKNOWN, l);
}

static void start_upstream(rq *q);

/* Every signal call has answered: decide, then call the backend. Client thread (or the
 * dispatching thread when nothing was asked). */
static void signals_done(rq *q) {
    rt_signals sg = {0};
    const rt_table *t = q->snap->table;
    for (int i = 0; i < q->n_sig; i++) {
        sub *s = &q->sig[i];
        if (s->purpose == P_DECISION) {
            sg.decision = s->json;
            sg.decision_why = s->why;
        } else {
            const rt_span_call *sc = &t->span_calls[s->span_call];
            for (int k = 0; k < RT_N_SIGNALS; k++)
                if (sc->signal[k]) {
                    sg.span[k] = s->json;
                    sg.span_why[k] = s->why;
                }
        }
    }
    rt_choice ch;
    rt_route(t, &sg, &ch);
    if (ch.fail) {
        q->route_kind = NULL;
        respond(q, ch.status, error_body(ch.code, "%s", ch.why));
        return;
    }
    q->decision = ch.decision;
    q->route_kind = ch.decision >= 0 ? "decision" : "default";
    q->model = rt_find_model(q->snap->cfg, ch.model);
    const char *l[] = {"decision", ch.decision >= 0 ? q->snap->cfg->decisions[ch.decision].name : "(default)", NULL};
    rt_metrics_inc(q->r->metrics, RM_DECISION_MATCHES, l);
    if (!q->model) {
        respond(q, 503, error_body("no_route", "model '%s' is not a providers.models name", ch.model));
        return;
    }
    start_upstream(q);
}

static void sig_done(void *arg, rt_call_result res, long status, const char *error, double seconds) {
    sub *s = arg;
    rq *q = s->q;
    s->res = res;
    s->status = status;
    deployment_call_done(s, "decisions", seconds);
    if (res != RT_CALL_OK) {
        snprintf(s->why, sizeof s->why, "the call to deployment '%s' failed (%s): %s", s->deployment,
                 rt_call_result_name(res), error ? error : "");
        unknown_metric(q->r, s->deployment, res == RT_CALL_TIMEOUT ? "timeout" : "unavailable");
    } else if (status != 200 || s->body.oom) {
        json_t *e = json_loadb(s->body.p ? s->body.p : "", s->body.n, 0, NULL);
        const char *m = json_string_value(json_object_get(json_object_get(e, "error"), "message"));
        snprintf(s->why, sizeof s->why, "deployment '%s' answered HTTP %ld%s%.400s", s->deployment, status, m ? ": " : "",
                 m ? m : "");
        json_decref(e);
        unknown_metric(q->r, s->deployment, status == 503 ? "not_ready" : "error");
    } else {
        json_error_t je;
        s->json = json_loadb(s->body.p ? s->body.p : "", s->body.n, 0, &je);
        if (!json_is_object(s->json)) {
            json_decref(s->json);
            s->json = NULL;
            snprintf(s->why, sizeof s->why, "deployment '%s' answered a body that is not a JSON object (%s)",
                     s->deployment, je.text);
            unknown_metric(q->r, s->deployment, "invalid_answer");
        }
    }
    bool last;
    pthread_mutex_lock(&q->mu);
    last = --q->pending == 0;
    bool gone = q->gone;
    pthread_mutex_unlock(&q->mu);
    if (last && !gone && res != RT_CALL_CANCELLED) signals_done(q);
    rq_unref(q);
}

/* Picks a ready replica and builds the call's URL. false (with why) when none is ready. */
static bool pick_target(rq *q, sub *s, const char *path, char *url, size_t n) {
    router *r = q->r;
    if (!r->sup || !vsr_sup_pick(r->sup, s->deployment, &s->t)) {
        snprintf(s->why, sizeof s->why, "deployment '%s' has no ready replica", s->deployment);
        return false;
    }
    s->picked = true;
    size_t l = strlen(s->t.url);
    snprintf(url, n, "%.*s%s", (int)(l && s->t.url[l - 1] == '/' ? l - 1 : l), s->t.url, path);
    return true;
}

static const rt_call_cb sig_cb = {sub_headers, sub_body, sig_done};

/* Starts one signal call; false when it could not start (its answer is then unknown). */
static bool start_signal(rq *q, sub *s, const json_t *state, const json_t *questions) {
    char url[1024];
    if (!pick_target(q, s, "/v1/decisions", url, sizeof url)) {
        unknown_metric(q->r, s->deployment, "no_ready_replica");
        const char *l[] = {"deployment", s->deployment, "outcome", "unavailable", NULL};
        rt_metrics_inc(q->r->metrics, RM_DEP_REQUESTS, l);
        return false;
    }
    int timeout = q->snap->cfg->signal_timeout_ms;
    char *body = rt_decisions_body(s->t.served_name, state, questions, 0);
    if (!body) {
        snprintf(s->why, sizeof s->why, "out of memory building the request to '%s'", s->deployment);
        vsr_sup_release(q->r->sup, &s->t);
        s->picked = false;
        return false;
    }
    rt_call_spec spec = {.url = url, .uds_path = s->t.uds_path, .body = body, .body_len = strlen(body), .timeout_ms = timeout};
    __atomic_add_fetch(&q->refs, 1, __ATOMIC_ACQ_REL);
    s->call = rt_client_submit(q->r->client, &spec, &sig_cb, s);
    free(body);
    if (!s->call) {
        __atomic_sub_fetch(&q->refs, 1, __ATOMIC_ACQ_REL);
        vsr_sup_release(q->r->sup, &s->t);
        s->picked = false;
        snprintf(s->why, sizeof s->why, "cannot start the call to '%s'", s->deployment);
        return false;
    }
    return true;
}

/* ---- the backend call ---- */

static bool up_body(void *arg, const char *data, size_t n) {
    sub *s = arg;
    rq *q = s->q;
    if (!q->streaming) return sub_body(arg, data, n);
    pthread_mutex_lock(&q->mu);
    if (q->slen + n > q->scap) {
        size_t cap = q->scap ? q->scap : 16384;
        while (cap < q->slen + n) cap *= 2;
        char *nb = realloc(q->sbuf, cap);
        if (!nb) {
            pthread_mutex_unlock(&q->mu);
            return true; /* dropped: out of memory */
        }
        q->sbuf = nb;
        q->scap = cap;
    }
    memcpy(q->sbuf + q->slen, data, n);
    q->slen += n;
    bool more = q->slen - q->soff < STREAM_HIGH_WATER;
    if (!more) q->up_paused = true;
    pthread_mutex_unlock(&q->mu);
    wake(q);
    return more;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    rq *q = cls;
    pthread_mutex_lock(&q->mu);
    size_t avail = q->slen - q->soff;
    if (avail) {
        size_t n = avail < max ? avail : max;
        memcpy(buf, q->sbuf + q->soff, n);
        q->soff += n;
        if (q->soff == q->slen) q->soff = q->slen = 0;
        bool resume = q->up_paused && q->slen - q->soff < STREAM_HIGH_WATER / 2;
        if (resume) q->up_paused = false;
        pthread_mutex_unlock(&q->mu);
        if (resume) rt_client_resume(q->r->client, q->up.call);
        return (ssize_t)n;
    }
    if (q->up_done) {
        pthread_mutex_unlock(&q->mu);
        return MHD_CONTENT_READER_END_OF_STREAM;
    }
    q->suspended = true; /* resumed by up_body or up_done */
    MHD_suspend_connection(q->c);
    pthread_mutex_unlock(&q->mu);
    return 0;
}

static void stream_free(void *cls) { rq_unref(cls); }

/* The backend's headers a client sees (hop-by-hop ones and those the router sets are not). */
static void pass_headers(struct MHD_Response *resp, const char *lines) {
    static const char *const skip[] = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-type",
                                       "date", "server", "upgrade", "te", "trailer", "proxy-connection"};
    for (const char *p = lines; p && *p;) {
        const char *eol = strchr(p, '\n');
        size_t n = eol ? (size_t)(eol - p) : strlen(p);
        const char *colon = memchr(p, ':', n);
        if (colon && colon > p) {
            char name[128], value[1024];
            size_t ln = (size_t)(colon - p), lv;
            const char *v = colon + 1;
            while (v < p + n && (*v == ' ' || *v == '\t')) v++;
            lv = (size_t)(p + n - v);
            while (lv && (v[lv - 1] == '\r' || v[lv - 1] == ' ')) lv--;
            bool keep = ln < sizeof name && lv < sizeof value && strncasecmp(p, "x-vsr-", 6);
            for (size_t i = 0; keep && i < sizeof skip / sizeof skip[0]; i++)
                if (strlen(skip[i]) == ln && !strncasecmp(p, skip[i], ln)) keep = false;
            if (keep) {
                memcpy(name, p, ln), name[ln] = 0;
                memcpy(value, v, lv), value[lv] = 0;
                MHD_add_response_header(resp, name, value);
            }
        }
        p = eol ? eol + 1 : p + n;
    }
}

static void up_headers(void *arg, long status, const char *ctype, const char *timing, const char *lines) {
    sub *s = arg;
    rq *q = s->q;
    sub_headers(arg, status, ctype, timing, lines);
    free(s->lines);
    s->lines = strdup(lines ? lines : "");
    if (!ctype || strncasecmp(ctype, "text/event-stream", 17)) return;
    /* A stream: answer now, pass the events through as they come. */
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, q, stream_free);
    if (!resp) return; /* answered from the buffer at the end instead */
    __atomic_add_fetch(&q->refs, 1, __ATOMIC_ACQ_REL);
    MHD_add_response_header(resp, "Content-Type", ctype);
    pass_headers(resp, lines);
    pthread_mutex_lock(&q->mu);
    q->streaming = true;
    pthread_mutex_unlock(&q->mu);
    respond(q, (int)status, resp);
}

static void backend_metrics(rq *q, const char *outcome, double seconds) {
    const vsr_rt_backend *b = &q->model->backends[q->backend];
    const char *bn = b->name ? b->name : b->endpoint;
    const char *l1[] = {"model", q->model->name, "backend", bn, "outcome", outcome, NULL};
    rt_metrics_inc(q->r->metrics, RM_BACKEND_REQUESTS, l1);
    const char *l2[] = {"model", q->model->name, "backend", bn, NULL};
    rt_metrics_observe(q->r->metrics, RM_BACKEND_DURATION, seconds, l2);
}

/* A backend of the model other than the one tried, with a positive weight; -1 when none. */
static int other_backend(const rq *q) {
    for (int i = 0; i < q->model->n_backends; i++)
        if (i != q->backend && q->model->backends[i].weight > 0) return i;
    return -1;
}

static void up_done(void *arg, rt_call_result res, long status, const char *error, double seconds) {
    sub *s = arg;
    rq *q = s->q;
    s->res = res;
    if (res != RT_CALL_CANCELLED) backend_metrics(q, outcome_of(res, status), seconds);
    pthread_mutex_lock(&q->mu);
    bool streaming = q->streaming, gone = q->gone;
    pthread_mutex_unlock(&q->mu);
    const vsr_rt_backend *b = &q->model->backends[q->backend];
    if (streaming) {
        if (res != RT_CALL_OK && res != RT_CALL_CANCELLED) { /* the stream broke: say so in the stream */
            json_t *o = json_pack("{s:{s:s,s:s+}}", "error", "code", "upstream_failed", "message", "the backend's stream ended early: ",
                                  error ? error : rt_call_result_name(res));
            char *e = json_dumps(o, JSON_COMPACT);
            json_decref(o);
            if (e) {
                char ev[2400];
                int n = snprintf(ev, sizeof ev, "event: error\ndata: %s\n\n", e);
                free(e);
                up_body(s, ev, (size_t)(n < (int)sizeof ev ? n : (int)sizeof ev - 1));
            }
        }
        pthread_mutex_lock(&q->mu);
        q->up_done = true;
        pthread_mutex_unlock(&q->mu);
        wake(q);
    } else if (gone || res == RT_CALL_CANCELLED) {
        /* nobody to answer */
    } else if (res == RT_CALL_OK && !s->body.oom) {
        size_t n;
        char *body = vsr_strbuf_take(&s->body, &n);
        struct MHD_Response *resp = body ? buffer_response(s->ctype, body, n) : NULL;
        if (resp) pass_headers(resp, s->lines);
        respond(q, resp ? (int)status : 500,
                resp ? resp : error_body("internal_error", "out of memory holding the backend's answer"));
    } else if (res == RT_CALL_CONNECT && q->tried < 2 && other_backend(q) >= 0) {
        /* Nothing was sent: another backend of the model takes it (once). */
        int next = other_backend(q);
        srv_log(SRV_LOG_WARN, "backend '%s' (%s) of model '%s' refused the connection (%s); trying %s", b->name ? b->name : "",
                b->endpoint, q->model->name, error ? error : "", q->model->backends[next].endpoint);
        pthread_mutex_lock(&q->mu);
        rt_call *old = s->call;
        s->call = NULL;
        pthread_mutex_unlock(&q->mu);
        rt_call_release(old);
        vsr_strbuf_free(&s->body);
        q->backend = next;
        start_upstream(q);
    } else if (res == RT_CALL_CONNECT) {
        respond(q, 502, error_body("upstream_unavailable", "backend '%s' (%s) of model '%s' failed (%s): %s",
                                   b->name ? b->name : "", b->endpoint, q->model->name, rt_call_result_name(res),
                                   error ? error : ""));
    } else if (s->body.oom) {
        respond(q, 502, error_body("upstream_failed", "the answer of backend '%s' (%s) exceeds %u bytes", b->name ? b->name : "",
                                   b->endpoint, MAX_ANSWER_BYTES));
    } else {
        respond(q, res == RT_CALL_TIMEOUT ? 504 : 502,
                error_body(res == RT_CALL_TIMEOUT ? "upstream_timeout" : "upstream_unavailable",
                           "backend '%s' (%s) of model '%s' failed (%s): %s", b->name ? b->name : "", b->endpoint,
                           q->model->name, rt_call_result_name(res), error ? error : ""));
    }
    rq_unref(q);
}

static const rt_call_cb up_cb = {up_headers, up_body, up_done};

static void start_upstream(rq *q) {
    if (q->tried == 0) q->backend = rt_pick_backend(q->model, rt_rng_uniform());
    q->tried++;
    if (q->backend < 0) {
        respond(q, 503, error_body("no_route", "model '%s' has no backend with weight > 0", q->model->name));
        return;
    }
    const vsr_rt_backend *b = &q->model->backends[q->backend];
    json_object_set_new(q->chat, "model", json_string(q->model->name));
    char *body = json_dumps(q->chat, JSON_COMPACT);
    char url[1200];
    size_t l = strlen(b->endpoint);
    snprintf(url, sizeof url, "%.*s/v1/chat/completions", (int)(l && b->endpoint[l - 1] == '/' ? l - 1 : l), b->endpoint);
    const char *hdrs[2] = {q->auth[0] ? q->auth : NULL, NULL};
    rt_call_spec spec = {.url = url,
                         .body = body,
                         .body_len = body ? strlen(body) : 0,
                         .headers = hdrs,
                         .timeout_ms = q->r->o->upstream_timeout_ms > 0 ? q->r->o->upstream_timeout_ms : 600000};
    q->up.q = q;
    q->up.purpose = P_UPSTREAM;
    __atomic_add_fetch(&q->refs, 1, __ATOMIC_ACQ_REL);
    pthread_mutex_lock(&q->mu); /* request_done reads it under the lock */
    q->up.call = body && !q->gone ? rt_client_submit(q->r->client, &spec, &up_cb, &q->up) : NULL;
    pthread_mutex_unlock(&q->mu);
    free(body);
    if (!q->up.call) {
        __atomic_sub_fetch(&q->refs, 1, __ATOMIC_ACQ_REL);
        respond(q, 500, error_body("internal_error", "cannot start the call to backend '%s'", b->endpoint));
    }
}

/* ---- POST /v1/chat/completions ---- */

static bool is_auto(const char *m) { return !m || !*m || !strcmp(m, "auto") || !strcmp(m, "MoM"); }

/* Runs on an MHD thread once the body is in and the connection suspended. */
static void chat_dispatch(rq *q) {
    json_error_t je;
    q->chat = json_loadb(q->body ? q->body : "", q->len, 0, &je);
    if (!json_is_object(q->chat)) {
        respond(q, 400, error_body("invalid_request", "the body is not a JSON object: %s (line %d, column %d)", je.text,
                                   je.line, je.column));
        return;
    }
    char err[300];
    json_t *state = rt_chat_state(q->chat, err, sizeof err);
    if (!state) {
        respond(q, 400, error_body("invalid_request", "%s", err));
        return;
    }
    const vsr_router_config *c = q->snap->cfg;
    const rt_table *t = q->snap->table;
    const char *want = json_string_value(json_object_get(q->chat, "model"));
    if (!is_auto(want)) {
        q->model = rt_find_model(c, want);
        if (!q->model) {
            char names[1024] = "";
            for (int i = 0; i < c->n_models; i++)
                snprintf(names + strlen(names), sizeof names - strlen(names), ", %s", c->models[i].name);
            respond(q, 404, error_body("model_not_found",
                                       "model '%s' is not served by this router; send \"auto\" (routing by decisions)%s%s",
                                       want, c->n_models ? " or one of" : "", names + (c->n_models ? 1 : 0)));
            json_decref(state);
            return;
        }
        q->route_kind = "explicit";
        q->decision = -1;
        const char *l[] = {"decision", "(explicit)", NULL};
        rt_metrics_inc(q->r->metrics, RM_DECISION_MATCHES, l);
        json_decref(state);
        start_upstream(q);
        return;
    }
    /* The calls: the decision model (every question) and each span deployment. */
    q->n_sig = 0;
    if (t->questions && c->decision_model) {
        sub *s = &q->sig[q->n_sig++];
        *s = (sub){.q = q, .purpose = P_DECISION, .deployment = c->decision_model};
    }
    json_t *span_state = t->n_span_calls ? rt_span_state(q->chat) : NULL;
    for (int i = 0; i < t->n_span_calls; i++) {
        sub *s = &q->sig[q->n_sig++];
        *s = (sub){.q = q, .purpose = P_SPAN, .deployment = t->span_calls[i].deployment, .span_call = i};
    }
    pthread_mutex_lock(&q->mu);
    q->pending = q->n_sig + 1; /* +1: this dispatch, so the last call cannot finish before every one started */
    pthread_mutex_unlock(&q->mu);
    for (int i = 0; i < q->n_sig; i++) {
        sub *s = &q->sig[i];
        bool ok = s->purpose == P_DECISION ? start_signal(q, s, state, t->questions)
                                           : start_signal(q, s, span_state, t->span_calls[s->span_call].questions);
        if (!ok) {
            pthread_mutex_lock(&q->mu);
            q->pending--;
            pthread_mutex_unlock(&q->mu);
        }
    }
    json_decref(state);
    json_decref(span_state);
    pthread_mutex_lock(&q->mu);
    bool last = --q->pending == 0;
    pthread_mutex_unlock(&q->mu);
    if (last) signals_done(q);
}

/* ---- POST /v1/decisions: forwarded ---- */

static void fwd_done(void *arg, rt_call_result res, long status, const char *error, double seconds) {
    sub *s = arg;
    rq *q = s->q;
    s->res = res;
    s->status = status;
    deployment_call_done(s, "decisions", seconds);
    if (res == RT_CALL_OK && !s->body.oom) {
        size_t n;
        char *body = vsr_strbuf_take(&s->body, &n);
        struct MHD_Response *resp = body ? buffer_response(s->ctype, body, n) : NULL;
        if (resp && s->timing[0]) MHD_add_response_header(resp, "Server-Timing", s->timing);
        if (resp) MHD_add_response_header(resp, "x-vsr-deployment", s->deployment);
        respond(q, resp ? (int)status : 500, resp ? resp : error_body("internal_error", "out of memory"));
    } else if (res != RT_CALL_CANCELLED) {
        respond(q, res == RT_CALL_TIMEOUT ? 504 : 502,
                error_body(res == RT_CALL_TIMEOUT ? "upstream_timeout" : "upstream_unavailable",
                           "the call to deployment '%s' failed (%s): %s", s->deployment, rt_call_result_name(res),
                           error ? error : "answer too large"));
    }
    rq_unref(q);
}

static const rt_call_cb fwd_cb = {sub_headers, sub_body, fwd_done};

static bool is_used(const rt_table *t, const char *key) {
    for (int i = 0; i < t->n_used; i++)
        if (!strcmp(t->used[i], key)) return true;
    return false;
}

static void decisions_dispatch(rq *q) {
    const vsr_router_config *c = q->snap->cfg;
    json_error_t je;
    json_t *o = json_loadb(q->body ? q->body : "", q->len, 0, &je);
    if (!json_is_object(o)) {
        json_decref(o);
        respond(q, 400, error_body("invalid_request", "the body is not a JSON object: %s (line %d, column %d)", je.text,
                                   je.line, je.column));
        return;
    }
    /* `model` names a used deployment (key or public_name); absent: the decision model. */
    const char *want = json_string_value(json_object_get(o, "model"));
    const char *dep = NULL;
    if (!want) dep = c->decision_model;
    for (int i = 0; want && !dep && i < c->n_deployments; i++) {
        const vsr_rt_deployment *d = &c->deployments[i];
        if ((!strcmp(d->key, want) || (d->public_name && !strcmp(d->public_name, want))) && is_used(q->snap->table, d->key))
            dep = d->key;
    }
    if (!dep) {
        if (want) respond(q, 404, error_body("model_not_found", "model '%s' is not a deployment this router uses", want));
        else respond(q, 404, error_body("model_not_found", "the router has no decision_model; name a deployment in model"));
        json_decref(o); /* `want` lives in o */
        return;
    }
    sub *s = &q->sig[0];
    q->n_sig = 1;
    *s = (sub){.q = q, .purpose = P_FORWARD, .deployment = dep};
    char url[1024];
    if (!pick_target(q, s, "/v1/decisions", url, sizeof url)) {
        json_decref(o);
        const char *l[] = {"deployment", dep, "outcome", "unavailable", NULL};
        rt_metrics_inc(q->r->metrics, RM_DEP_REQUESTS, l);
        respond(q, 503, error_body("not_ready", "%s", s->why));
        return;
    }
    json_object_set_new(o, "model", json_string(s->t.served_name));
    char *body = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    rt_call_spec spec = {.url = url, .uds_path = s->t.uds_path, .body = body, .body_len = body ? strlen(body) : 0,
                         .timeout_ms = q->r->o->upstream_timeout_ms > 0 ? q->r->o->upstream_timeout_ms : 600000};
    __atomic_add_fetch(&q->refs, 1, __ATOMIC_ACQ_REL);
    s->call = body ? rt_client_submit(q->r->client, &spec, &fwd_cb, s) : NULL;
    free(body);
    if (!s->call) {
        __atomic_sub_fetch(&q->refs, 1, __ATOMIC_ACQ_REL);
        vsr_sup_release(q->r->sup, &s->t);
        s->picked = false;
        respond(q, 500, error_body("internal_error", "cannot start the call to '%s'", dep));
    }
}

/* ---- GET endpoints ---- */

typedef struct dep_state {
    const char *key;
    int ready, replicas, restarts;
} dep_state;

typedef struct dep_walk {
    dep_state d[256];
    int n;
    vsr_strbuf *b; /* when set, per-replica metric lines */
} dep_walk;

static void walk_cb(void *ctx, const char *deployment, int replica, bool ready, int restarts, const char *state) {
    dep_walk *w = ctx;
    dep_state *d = NULL;
    for (int i = 0; i < w->n; i++)
        if (!strcmp(w->d[i].key, deployment)) d = &w->d[i];
    if (!d && w->n < 256) {
        d = &w->d[w->n++];
        *d = (dep_state){.key = deployment};
    }
    if (d) {
        d->replicas++;
        d->ready += ready;
        d->restarts += restarts;
    }
    if (w->b) {
        char e[200];
        vsr_strbuf_printf(w->b, "vsr_model_runtime_replica_ready{deployment=\"%s\",replica=\"%d\",state=\"%s\"} %d\n",
                          rt_metrics_esc(deployment, e, sizeof e), replica, state, ready ? 1 : 0);
    }
}

/* deployment keys point into the supervisor: copy what is kept */
static void walk(router *r, dep_walk *w) {
    w->n = 0;
    if (r->sup) vsr_sup_foreach(r->sup, walk_cb, w);
}

static const dep_state *find_dep(const dep_walk *w, const char *key) {
    for (int i = 0; key && i < w->n; i++)
        if (!strcmp(w->d[i].key, key)) return &w->d[i];
    return NULL;
}

static char *dup_json(json_t *o) {
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

static struct MHD_Response *get_models(router *r, snapshot *sn) {
    json_t *data = json_array();
    json_array_append_new(data, json_pack("{s:s,s:s,s:s,s:s}", "id", "auto", "object", "model", "owned_by", "vllm-sr",
                                          "description", "routed by the config's decisions"));
    for (int i = 0; i < sn->cfg->n_models; i++) {
        const vsr_rt_model *m = &sn->cfg->models[i];
        json_t *be = json_array();
        for (int j = 0; j < m->n_backends; j++)
            json_array_append_new(be, json_pack("{s:s?,s:s,s:f}", "name", m->backends[j].name, "endpoint",
                                                m->backends[j].endpoint, "weight", m->backends[j].weight));
        json_array_append_new(data, json_pack("{s:s,s:s,s:s,s:o}", "id", m->name, "object", "model", "owned_by", "vllm-sr",
                                              "backends", be));
    }
    dep_walk *w = calloc(1, sizeof *w);
    if (w) walk(r, w);
    json_t *deps = json_array();
    for (int i = 0; i < sn->table->n_used; i++) {
        const char *k = sn->table->used[i];
        const dep_state *d = w ? find_dep(w, k) : NULL;
        const char *role = sn->cfg->decision_model && !strcmp(sn->cfg->decision_model, k) ? "decision_model" : "binding";
        json_array_append_new(deps, json_pack("{s:s,s:s,s:i,s:i}", "id", k, "role", role, "ready_replicas",
                                              d ? d->ready : 0, "replicas", d ? d->replicas : 0));
    }
    free(w);
    json_t *o = json_pack("{s:s,s:o,s:o,s:i}", "object", "list", "data", data, "deployments", deps, "config_generation",
                          sn->generation);
    char *s = dup_json(o);
    return s ? buffer_response("application/json", s, strlen(s)) : NULL;
}

static struct MHD_Response *get_ready(router *r, snapshot *sn, int *status) {
    dep_walk *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    walk(r, w);
    const char *dm = sn->cfg->decision_model;
    const dep_state *d = find_dep(w, dm);
    bool ready = !dm || (d && d->ready > 0);
    bool draining = __atomic_load_n(&r->draining, __ATOMIC_ACQUIRE);
    json_t *deps = json_object();
    for (int i = 0; i < w->n; i++)
        json_object_set_new(deps, w->d[i].key, json_pack("{s:i,s:i}", "ready", w->d[i].ready, "replicas", w->d[i].replicas));
    free(w);
    const char *st = draining ? "draining" : ready ? "ready" : "not_ready";
    json_t *o = json_pack("{s:s,s:s?,s:o}", "status", st, "decision_model", dm, "deployments", deps);
    if (!ready && !draining && dm)
        json_object_set_new(o, "reason", json_sprintf("decision deployment '%s' has no ready replica", dm));
    *status = ready && !draining ? 200 : 503;
    char *s = dup_json(o);
    return s ? buffer_response("application/json", s, strlen(s)) : NULL;
}

static struct MHD_Response *get_metrics(router *r, snapshot *sn) {
    vsr_strbuf b = {0};
    rt_metrics_render(r->metrics, &b);
    dep_walk *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    vsr_strbuf_printf(&b, "# HELP vsr_model_runtime_replica_ready 1 when the replica answers its health check.\n"
                          "# TYPE vsr_model_runtime_replica_ready gauge\n");
    w->b = &b;
    walk(r, w);
    vsr_strbuf_printf(&b, "# HELP vsr_model_runtime_ready 1 when the deployment has a ready replica.\n"
                          "# TYPE vsr_model_runtime_ready gauge\n");
    char e[200];
    for (int i = 0; i < w->n; i++)
        vsr_strbuf_printf(&b, "vsr_model_runtime_ready{deployment=\"%s\"} %d\n", rt_metrics_esc(w->d[i].key, e, sizeof e),
                          w->d[i].ready > 0);
    vsr_strbuf_printf(&b, "# HELP vsr_model_runtime_restarts_total Worker restarts, summed over the deployment's replicas.\n"
                          "# TYPE vsr_model_runtime_restarts_total counter\n");
    for (int i = 0; i < w->n; i++)
        vsr_strbuf_printf(&b, "vsr_model_runtime_restarts_total{deployment=\"%s\"} %d\n",
                          rt_metrics_esc(w->d[i].key, e, sizeof e), w->d[i].restarts);
    free(w);
    vsr_strbuf_printf(&b,
                      "# HELP vsr_router_config_generation The config in use (1 at start, +1 per applied reload).\n"
                      "# TYPE vsr_router_config_generation gauge\nvsr_router_config_generation %d\n"
                      "# HELP vsr_router_inflight_requests Requests received and not yet answered.\n"
                      "# TYPE vsr_router_inflight_requests gauge\nvsr_router_inflight_requests %d\n",
                      sn->generation, __atomic_load_n(&r->inflight, __ATOMIC_ACQUIRE));
    size_t n;
    char *s = vsr_strbuf_take(&b, &n);
    return s ? buffer_response("text/plain; version=0.0.4", s, n) : NULL;
}

/* ---- the MHD handlers ---- */

static enum MHD_Result queue(rq *q, int status, struct MHD_Response *resp) {
    if (!resp) return MHD_NO;
    metric_request(q, status);
    enum MHD_Result ret = MHD_queue_response(q->c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result access_handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                      const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    router *r = cls;
    rq *q = *con_cls;
    if (!q) {
        q = calloc(1, sizeof *q);
        if (!q) return MHD_NO;
        pthread_mutex_init(&q->mu, NULL);
        q->refs = 1;
        q->r = r;
        q->c = c;
        q->t0 = mono();
        q->decision = -1;
        q->backend = -1;
        q->label = "other";
        for (size_t i = 0; i < N_ROUTES; i++)
            if (!strcmp(url, routes[i].path)) {
                q->label = routes[i].path;
                if (!strcmp(method, routes[i].method)) q->route = &routes[i];
            }
        const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
        if (auth && strlen(auth) < sizeof q->auth - 16) snprintf(q->auth, sizeof q->auth, "Authorization: %s", auth);
        __atomic_add_fetch(&r->inflight, 1, __ATOMIC_ACQ_REL);
        pthread_mutex_lock(&r->mu);
        q->lnext = r->live;
        if (r->live) r->live->lprev = q;
        r->live = q;
        pthread_mutex_unlock(&r->mu);
        *con_cls = q;
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (q->too_large || !q->route || q->route->kind == K_MODELS || q->route->kind >= K_HEALTH) return MHD_YES;
        if (q->len + n > r->max_body) {
            q->too_large = true;
            free(q->body);
            q->body = NULL;
            q->len = q->cap = 0;
            return MHD_YES;
        }
        if (q->len + n + 1 > q->cap) {
            size_t cap = q->cap ? q->cap : 4096;
            while (cap < q->len + n + 1) cap *= 2;
            char *nb = realloc(q->body, cap);
            if (!nb) return MHD_NO;
            q->body = nb;
            q->cap = cap;
        }
        memcpy(q->body + q->len, upload, n);
        q->len += n;
        q->body[q->len] = 0;
        return MHD_YES;
    }
    if (q->dispatched) { /* resumed with an answer */
        pthread_mutex_lock(&q->mu);
        struct MHD_Response *resp = q->resp;
        int status = q->status;
        q->resp = NULL;
        pthread_mutex_unlock(&q->mu);
        if (!resp) return MHD_NO;
        return queue(q, status, resp);
    }
    if (!q->route) {
        bool known = strcmp(q->label, "other") != 0;
        return queue(q, known ? 405 : 404,
                     known ? error_body("invalid_request", "method not allowed")
                           : error_body("invalid_request", "no route %.250s", url));
    }
    if (q->too_large)
        return queue(q, 413, error_body("request_too_large", "the request body exceeds %zu bytes", r->max_body));
    snapshot *sn = snap_get(r);
    enum MHD_Result ret;
    int status = 200;
    switch (q->route->kind) {
    case K_HEALTH: {
        bool draining = __atomic_load_n(&r->draining, __ATOMIC_ACQUIRE);
        json_t *o = json_pack("{s:s,s:i,s:s}", "status", draining ? "draining" : "ok", "config_generation", sn->generation,
                              "config", sn->cfg->file);
        char *s = dup_json(o);
        ret = queue(q, draining ? 503 : 200, s ? buffer_response("application/json", s, strlen(s)) : NULL);
        break;
    }
    case K_READY: {
        struct MHD_Response *resp = get_ready(r, sn, &status);
        ret = queue(q, status, resp);
        break;
    }
    case K_MODELS: ret = queue(q, 200, get_models(r, sn)); break;
    case K_METRICS: ret = queue(q, 200, get_metrics(r, sn)); break;
    default:
        if (__atomic_load_n(&r->draining, __ATOMIC_ACQUIRE)) {
            ret = queue(q, 503, error_body("not_ready", "the router is shutting down (SIGTERM); retry on another router"));
            break;
        }
        /* Suspend first, then start the calls: their answers resume the connection. */
        q->snap = sn;
        sn = NULL;
        q->dispatched = true;
        pthread_mutex_lock(&q->mu);
        q->suspended = true;
        MHD_suspend_connection(c);
        pthread_mutex_unlock(&q->mu);
        if (q->route->kind == K_CHAT) chat_dispatch(q);
        else decisions_dispatch(q);
        return MHD_YES;
    }
    snap_unref(sn);
    return ret;
}

static void request_done(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    rq *q = *con_cls;
    router *r = cls;
    if (!q) return;
    *con_cls = NULL;
    if (!q->metered) metric_request(q, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? 200 : 499);
    /* Calls still running have nobody to answer. */
    pthread_mutex_lock(&q->mu);
    q->gone = true;
    for (int i = 0; i < q->n_sig; i++)
        if (q->sig[i].call) rt_client_cancel(r->client, q->sig[i].call);
    if (q->up.call) rt_client_cancel(r->client, q->up.call);
    /* An answer never queued (the client left first): a stream's response holds a reference
     * to q, so it is destroyed here, not when q is freed. */
    struct MHD_Response *unsent = q->resp;
    q->resp = NULL;
    pthread_mutex_unlock(&q->mu);
    if (unsent) MHD_destroy_response(unsent);
    __atomic_sub_fetch(&r->inflight, 1, __ATOMIC_ACQ_REL);
    rq_unref(q);
}

static void mhd_logger(void *cls, const char *fmt, va_list ap) { srv_logv(SRV_LOG_DEBUG, fmt, ap); }

/* ---- config load, reload ---- */

static void print_errors(const vsr_router_config *c, FILE *f) {
    fprintf(f, "Configuration validation failed:\n");
    char line[2048];
    for (int i = 0; i < c->n_errors; i++) fprintf(f, "  %s\n", vsr_rt_error_format(&c->errors[i], line, sizeof line));
}

static snapshot *snap_load(const vsr_router_serve_opts *o, int generation, vsr_router_config **bad) {
    vsr_router_options opt = {.store_dir = o->store_dir};
    vsr_router_config *c = vsr_router_config_load(o->config_path, &opt);
    *bad = NULL;
    if (!c) return NULL;
    if (c->n_errors) {
        *bad = c;
        return NULL;
    }
    snapshot *s = calloc(1, sizeof *s);
    if (s) s->table = rt_table_build(c);
    if (!s || !s->table) {
        free(s);
        vsr_router_config_free(c);
        return NULL;
    }
    s->refs = 1;
    s->cfg = c;
    s->generation = generation;
    return s;
}

static void reload(router *r) {
    int gen = r->snap->generation + 1;
    vsr_router_config *bad;
    snapshot *s = snap_load(r->o, gen, &bad);
    const char *refused[] = {"result", "refused", NULL}, *applied[] = {"result", "applied", NULL};
    if (!s) {
        srv_log(SRV_LOG_ERROR, "SIGHUP: %s is invalid; keeping the config in use (generation %d)%s", r->o->config_path,
                r->snap->generation, bad ? ":" : " (out of memory)");
        char line[2048];
        for (int i = 0; bad && i < bad->n_errors; i++)
            srv_log(SRV_LOG_ERROR, "  %s", vsr_rt_error_format(&bad->errors[i], line, sizeof line));
        vsr_router_config_free(bad);
        rt_metrics_inc(r->metrics, RM_RELOADS, refused);
        return;
    }
    if (r->sup) {
        vsr_err err = {0};
        if (vsr_sup_reload(r->sup, s->cfg, s->table->used, s->table->n_used, &err) != VSR_OK) {
            srv_log(SRV_LOG_ERROR, "SIGHUP: the workers of %s cannot be started (%s); keeping the config in use",
                    r->o->config_path, err.msg);
            snap_unref(s);
            rt_metrics_inc(r->metrics, RM_RELOADS, refused);
            return;
        }
    }
    pthread_mutex_lock(&r->mu);
    snapshot *old = r->snap;
    r->snap = s;
    pthread_mutex_unlock(&r->mu);
    snap_unref(old); /* freed when the last request that holds it is answered */
    rt_metrics_inc(r->metrics, RM_RELOADS, applied);
    srv_log(SRV_LOG_INFO, "SIGHUP: applied %s (generation %d: %d deployments, %d decisions, %d models)", r->o->config_path,
            gen, s->cfg->n_deployments, s->cfg->n_decisions, s->cfg->n_models);
}

static void sup_log(void *ctx, const char *line) { srv_log(SRV_LOG_INFO, "%s", line); }

/* ---- the drain ---- */

static void drain(router *r) {
    __atomic_store_n(&r->draining, 1, __ATOMIC_RELEASE);
    int fd = MHD_quiesce_daemon(r->d);
    if (fd >= 0) close(fd); /* the port is free at once */
    int limit = r->o->drain_timeout_ms > 0 ? r->o->drain_timeout_ms : 30000;
    double t0 = mono();
    while (__atomic_load_n(&r->inflight, __ATOMIC_ACQUIRE) > 0 && (mono() - t0) * 1e3 < limit) {
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    int left = __atomic_load_n(&r->inflight, __ATOMIC_ACQUIRE);
    if (left) {
        srv_log(SRV_LOG_WARN, "drain: %d requests still in flight after %d ms; ending them", left, limit);
        /* Each is answered 503 (or its stream ends); request_done then cancels its calls. */
        pthread_mutex_lock(&r->mu);
        int n = 0;
        for (rq *q = r->live; q; q = q->lnext) n++;
        rq **all = calloc((size_t)n + 1, sizeof *all);
        n = 0;
        for (rq *q = r->live; all && q; q = q->lnext) {
            __atomic_add_fetch(&q->refs, 1, __ATOMIC_ACQ_REL);
            all[n++] = q;
        }
        pthread_mutex_unlock(&r->mu);
        for (int i = 0; i < n; i++) {
            rq *q = all[i];
            pthread_mutex_lock(&q->mu);
            bool streaming = q->streaming;
            if (streaming) q->up_done = true;
            pthread_mutex_unlock(&q->mu);
            if (streaming) wake(q);
            else respond(q, 503, error_body("not_ready", "the router stopped (SIGTERM) before this request was answered"));
            rq_unref(q);
        }
        free(all);
        t0 = mono();
        while (__atomic_load_n(&r->inflight, __ATOMIC_ACQUIRE) > 0 && mono() - t0 < 2) {
            struct timespec ts = {0, 10 * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
}

/* ---- main ---- */

int vsr_router_serve(const vsr_router_serve_opts *o) {
    srv_log_set_program("vllm-sr");
    if (!srv_log_set_level(o->log_level ? o->log_level : "info")) {
        fprintf(stderr, "vllm-sr serve: --log-level must be error, warn, info or debug; got '%s'\n", o->log_level);
        return 2;
    }
    vsr_router_config *bad;
    snapshot *first = snap_load(o, 1, &bad);
    if (!first) {
        if (bad) print_errors(bad, stderr);
        else fprintf(stderr, "vllm-sr serve: out of memory loading %s\n", o->config_path);
        vsr_router_config_free(bad);
        return 1;
    }
    /* Signals go to this thread only: block them before any thread starts. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    rt_rng_seed(o->have_seed ? o->seed : ((unsigned long long)time(NULL) << 20) ^ (unsigned long long)getpid());

    router r = {.o = o, .snap = first, .max_body = o->max_request_bytes ? o->max_request_bytes : 50331648};
    pthread_mutex_init(&r.mu, NULL);
    r.metrics = rt_metrics_new();
    r.client = rt_client_new();
    const vsr_router_config *c = first->cfg;
    const char *host = o->host ? o->host : c->n_listeners ? c->listeners[0].address : "127.0.0.1";
    int port = o->port ? o->port : c->n_listeners ? c->listeners[0].port : 8899;
    int rc = 1;
    if (!r.metrics || !r.client) {
        fprintf(stderr, "vllm-sr serve: out of memory starting the router\n");
        goto out;
    }
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &a.sin_addr) != 1) {
        fprintf(stderr, "vllm-sr serve: --host %s: expected an IPv4 address such as 127.0.0.1 or 0.0.0.0\n", host);
        goto out;
    }
    if (first->table->n_used) {
        vsr_sup_opts so = {.state_dir = o->state_dir, .worker_bin = o->worker_bin, .store_dir = o->store_dir,
                           .grace_ms = o->grace_ms, .ready_timeout_ms = o->ready_timeout_ms, .log = sup_log};
        vsr_err err = {0};
        r.sup = vsr_sup_start(c, first->table->used, first->table->n_used, &so, &err);
        if (!r.sup) {
            fprintf(stderr, "vllm-sr serve: cannot start the workers: %s\n", err.msg);
            goto out;
        }
    }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    r.d = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, access_handler, &r, MHD_OPTION_SOCK_ADDR,
                           (struct sockaddr *)&a, MHD_OPTION_NOTIFY_COMPLETED, request_done, &r,
                           MHD_OPTION_CONNECTION_LIMIT, 4096u, MHD_OPTION_CONNECTION_TIMEOUT, 60u,
                           MHD_OPTION_THREAD_POOL_SIZE, 2u, MHD_OPTION_EXTERNAL_LOGGER, mhd_logger, &r, MHD_OPTION_END);
    if (!r.d) {
        fprintf(stderr, "vllm-sr serve: cannot listen on %s:%d (is the port in use?)\n", host, port);
        goto out;
    }
    srv_log(SRV_LOG_INFO, "router listening on http://%s:%d (config %s: %d deployments used, %d decisions, %d models)",
            host, port, o->config_path, first->table->n_used, c->n_decisions, c->n_models);
    for (;;) {
        int sig = 0;
        sigwait(&sigs, &sig);
        if (sig == SIGHUP) {
            reload(&r);
            continue;
        }
        srv_log(SRV_LOG_INFO, "%s: draining in-flight requests", sig == SIGTERM ? "SIGTERM" : "SIGINT");
        break;
    }
    double t0 = mono();
    drain(&r);
    MHD_stop_daemon(r.d);
    r.d = NULL;
    srv_log(SRV_LOG_INFO, "drained in %.3f s; stopping the workers", mono() - t0);
    rc = 0;
out:
    if (r.d) MHD_stop_daemon(r.d);
    rt_client_free(r.client);
    if (r.sup) vsr_sup_stop(r.sup);
    snap_unref(r.snap);
    rt_metrics_free(r.metrics);
    pthread_mutex_destroy(&r.mu);
    if (rc == 0) srv_log(SRV_LOG_INFO, "stopped");
    return rc;
}
