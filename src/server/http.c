/* The worker's HTTP surface on libmicrohttpd (thread per connection: a handler may
 * block while its job waits for the model; the model itself runs only on the
 * scheduler thread). Routes are a table; errors use reference-runtime.md 1.2. */
#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
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

typedef struct req_ctx {
    char *body;
    size_t len, cap;
    bool too_large;
    bool responded;
    double t0;
} req_ctx;

typedef struct timing {
    double parse, tokenize, queue, forward, post, serialize, total; /* seconds */
} timing;

typedef enum route_kind { R_DECISIONS, R_UNSUPPORTED, R_MODELS, R_HEALTH, R_LIVE, R_METRICS, R_OPENAPI } route_kind;

typedef struct route {
    const char *path;
    const char *method;
    route_kind kind;
    bool surface; /* carries Server-Timing */
} route;

static const route routes[] = {
    {"/v1/decisions", "POST", R_DECISIONS, true},
    {"/v1/systemone", "POST", R_DECISIONS, true},
    {"/v1/classify", "POST", R_UNSUPPORTED, true},
    {"/v1/embeddings", "POST", R_UNSUPPORTED, true},
    {"/v1/rerank", "POST", R_UNSUPPORTED, true},
    {"/v1/models", "GET", R_MODELS, false},
    {"/health", "GET", R_HEALTH, false},
    {"/health/live", "GET", R_LIVE, false},
    {"/metrics", "GET", R_METRICS, false},
    {"/openapi.yaml", "GET", R_OPENAPI, false},
};
#define N_ROUTES (sizeof routes / sizeof routes[0])

static enum MHD_Result send_body(struct MHD_Connection *c, int status, const char *ctype, char *body,
                                 size_t len, const timing *t) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
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

static enum MHD_Result send_error(struct MHD_Connection *c, int status, const char *code,
                                  const char *msg, timing *t, double t0) {
    if (t) t->total = mono() - t0;
    json_t *e = json_object();
    json_object_set_new(e, "code", json_string(code));
    json_object_set_new(e, "message", json_string(msg));
    json_t *o = json_object();
    json_object_set_new(o, "error", e);
    return send_json(c, status, o, t);
}

/* ---- GET endpoints ---- */

static json_t *model_card(srv_http *h) {
    srv_model *m = h->model;
    const vsr_package *p = m->pkg;
    json_t *card = json_object();
    pthread_mutex_lock(&m->mu);
    srv_state state = m->state;
    char reason[VSR_ERR_MSG_MAX];
    snprintf(reason, sizeof reason, "%s", m->reason);
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
    json_object_set_new(fmt, "description", json_string(sch->label));
    if (p->quant.scheme == VSR_SCHEME_INT4) {
        json_object_set_new(fmt, "group_size", json_integer(p->quant.group_size));
        json_object_set_new(fmt, "symmetric", json_boolean(p->quant.symmetric));
        json_object_set_new(fmt, "act_order", json_boolean(p->quant.actorder_group));
    }
    json_object_set_new(card, "quantization", fmt);
    json_object_set_new(card, "surfaces", json_pack("[s]", "decisions"));
    json_object_set_new(card, "question_types", json_pack("[sss]", "choice", "noul", "score"));
    json_object_set_new(card, "modalities", json_pack("[s]", "text"));
    json_t *lim = json_object();
    json_object_set_new(lim, "max_input_tokens",
                        json_integer(m->decider ? vsr_decider_max_input_tokens(m->decider)
                                                : (p->decision.max_length > 0 ? p->decision.max_length
                                                                              : p->config.text.max_position_embeddings)));
    json_object_set_new(lim, "min_options", json_integer(2));
    json_object_set_new(lim, "max_options", json_integer(255));
    json_object_set_new(lim, "min_levels", json_integer(2));
    json_object_set_new(lim, "max_levels", json_integer(10));
    json_object_set_new(card, "limits", lim);
    json_object_set_new(card, "profile", json_string("exact"));
    json_object_set_new(card, "profiles", json_pack("[{s:s,s:s}]", "name", "exact", "numerics", "exact"));
    json_object_set_new(card, "engine", json_string("native"));
    json_object_set_new(card, "accelerator", json_string(vsr_device_kind_name(m->device.kind)));
    json_object_set_new(card, "device", json_string(m->device_id));
    json_object_set_new(card, "device_name", json_string(m->device.name));
    json_object_set_new(card, "dtype", json_string(p->quant.scheme == VSR_SCHEME_BF16 ? "bf16/fp32-readout"
                                                                                    : "quantized/fp32-readout"));
    json_object_set_new(card, "parameters", json_integer(p->has_manifest ? p->manifest.params_loaded : p->params_text));
    json_object_set_new(card, "memory_bytes", json_integer(m->model ? (json_int_t)vsr_model_memory_bytes(m->model) : 0));
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
                          .memory_bytes = m->model ? vsr_model_memory_bytes(m->model) : 0,
                          .ready = ready,
                          .queue_depth = depth};
    char *s = srv_metrics_render(h->metrics, &g);
    if (!s) return MHD_NO;
    return send_body(c, 200, "text/plain; version=0.0.4", s, strlen(s), NULL);
}

/* ---- POST /v1/decisions ---- */

typedef struct gone_ctx {
    int fd;
} gone_ctx;

static bool client_gone(void *arg) {
    gone_ctx *g = arg;
    if (g->fd < 0) return false;
    struct pollfd p = {.fd = g->fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLHUP | POLLERR | POLLRDHUP)) return true;
    char b;
    ssize_t r = recv(g->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return r == 0;
}

static void count_question(void *ctx, const char *type, const char *outcome) {
    srv_metrics_question(ctx, type, outcome);
}

static enum MHD_Result h_decisions(srv_http *h, struct MHD_Connection *c, req_ctx *rc, timing *t,
                                   int *status_out) {
    srv_model *m = h->model;
    double t_parse = mono();
    t->parse = t_parse - rc->t0;
    pthread_mutex_lock(&m->mu);
    srv_state s = m->state;
    pthread_mutex_unlock(&m->mu);
    if (s != SRV_READY) {
        char msg[1024];
        snprintf(msg, sizeof msg, "model %s is not ready: %s%s%.400s", m->served_name, srv_state_name(s),
                 m->reason[0] ? ": " : "", m->reason);
        *status_out = 503;
        return send_error(c, 503, "not_ready", msg, t, rc->t0);
    }
    vsr_http_error he = {0};
    vsr_decision_job *dj = vsr_decision_parse(m->decider, rc->body ? rc->body : "", rc->len, m->served_name, &he);
    double t_tok = mono();
    t->tokenize = t_tok - t_parse;
    if (!dj) {
        *status_out = he.status;
        return send_error(c, he.status, he.code, he.message, t, rc->t0);
    }
    srv_job job = {.dj = dj, .tokens = vsr_decision_tokens(dj)};
    srv_submit sub = srv_model_submit(m, &job, vsr_decision_deadline_ms(dj));
    if (sub == SUBMIT_STOPPING) {
        vsr_decision_free(dj);
        *status_out = 503;
        return send_error(c, 503, "not_ready", "the worker is shutting down (SIGTERM); retry on another worker",
                          t, rc->t0);
    }
    if (sub == SUBMIT_TOO_MANY_TOKENS) {
        vsr_decision_free(dj);
        *status_out = 413;
        char msg[200];
        snprintf(msg, sizeof msg, "the request holds %lld tokens, over --max-queued-tokens %lld", job.tokens,
                 m->max_queued_tokens);
        return send_error(c, 413, "request_too_large", msg, t, rc->t0);
    }
    if (sub != SUBMIT_OK) {
        vsr_decision_free(dj);
        *status_out = 429;
        char msg[400];
        snprintf(msg, sizeof msg, "the queue of %s is full (%d jobs or %lld tokens); retry later", m->served_name,
                 m->max_queue, m->max_queued_tokens);
        return send_error(c, 429, "overloaded", msg, t, rc->t0);
    }
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    gone_ctx g = {.fd = ci ? ci->connect_fd : -1};
    if (!srv_model_wait(m, &job, client_gone, &g)) {
        /* The client went away: its work was withdrawn or cancelled; nothing to send. */
        vsr_decision_free(dj);
        *status_out = 499;
        return MHD_NO;
    }
    t->queue = job.t_start - job.t_enqueue;
    t->forward = job.expired ? 0 : job.forward_s;
    double t_post = mono();
    if (job.st != VSR_OK) {
        vsr_decision_free(dj);
        *status_out = 500;
        return send_error(c, 500, "internal_error", job.err.msg, t, rc->t0);
    }
    vsr_decision_outcomes(dj, count_question, h->metrics);
    srv_metrics_input_tokens(h->metrics, vsr_decision_tokens(dj));
    if (job.expired) srv_metrics_deadline_dropped(h->metrics, vsr_decision_rows(dj));
    vsr_decision_meta meta = {.model_id = m->served_name,
                              .revision = m->pkg->revision[0] ? m->pkg->revision : NULL,
                              .model_sha256 = m->pkg->model_sha256,
                              .device = m->device_id,
                              .accelerator = vsr_device_kind_name(m->device.kind),
                              .queue_ms = t->queue * 1e3,
                              .compute_ms = t->forward * 1e3};
    double t_ser = mono();
    t->post = t_ser - t_post;
    char *body = vsr_decision_response(dj, &meta);
    vsr_decision_free(dj);
    double t_end = mono();
    t->serialize = t_end - t_ser;
    t->total = t_end - rc->t0;
    *status_out = 200;
    if (!body) return send_error(c, 500, "internal_error", "out of memory writing the response", t, rc->t0);
    return send_body(c, 200, "application/json", body, strlen(body), t);
}

/* ---- dispatch ---- */

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
        *con_cls = rc;
        __atomic_add_fetch(&h->inflight, 1, __ATOMIC_SEQ_CST);
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > h->opts->max_request_bytes) {
            char msg[96];
            snprintf(msg, sizeof msg, "the request body exceeds %zu bytes", h->opts->max_request_bytes);
            rc->responded = true;
            timing t = {0};
            srv_metrics_request(h->metrics, url, 413, mono() - rc->t0);
            return send_error(c, 413, "request_too_large", msg, &t, rc->t0);
        }
        return MHD_YES;
    }
    if (rc->responded) {
        *upload_data_size = 0; /* discard the rest of an oversized body */
        return MHD_YES;
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (rc->too_large || rc->len + n > h->opts->max_request_bytes) {
            rc->too_large = true;
            return MHD_YES;
        }
        if (rc->len + n + 1 > rc->cap) {
            size_t cap = rc->cap ? rc->cap : 4096;
            while (cap < rc->len + n + 1) cap *= 2;
            char *b = realloc(rc->body, cap);
            if (!b) return MHD_NO;
            rc->body = b;
            rc->cap = cap;
        }
        memcpy(rc->body + rc->len, upload_data, n);
        rc->len += n;
        rc->body[rc->len] = 0;
        return MHD_YES;
    }
    /* The whole request is in. */
    rc->responded = true;
    const route *r = NULL;
    bool path_known = false;
    for (size_t i = 0; i < N_ROUTES; i++)
        if (!strcmp(url, routes[i].path)) {
            path_known = true;
            if (!strcmp(method, routes[i].method)) r = &routes[i];
        }
    timing t = {0};
    int status = 200;
    enum MHD_Result ret;
    if (!r) {
        char msg[300];
        status = path_known ? 405 : 404;
        if (path_known) snprintf(msg, sizeof msg, "method not allowed");
        else snprintf(msg, sizeof msg, "no route %.250s", url);
        ret = send_error(c, status, "invalid_request", msg, NULL, rc->t0);
    } else if (rc->too_large) {
        char msg[96];
        snprintf(msg, sizeof msg, "the request body exceeds %zu bytes", h->opts->max_request_bytes);
        status = 413;
        ret = send_error(c, 413, "request_too_large", msg, r->surface ? &t : NULL, rc->t0);
    } else {
        switch (r->kind) {
        case R_DECISIONS: ret = h_decisions(h, c, rc, &t, &status); break;
        case R_UNSUPPORTED: {
            char msg[400];
            snprintf(msg, sizeof msg, "%s is a Decision 3.0 model: it serves POST /v1/decisions, not %s",
                     h->model->served_name, url);
            status = 422;
            ret = send_error(c, 422, "unsupported_surface", msg, &t, rc->t0);
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
    }
    srv_metrics_request(h->metrics, r ? r->path : "other", status, mono() - rc->t0);
    srv_log(SRV_LOG_DEBUG, "%s %s %d %.3f ms", method, url, status, (mono() - rc->t0) * 1e3);
    return ret;
}

static void request_done(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    req_ctx *rc = *con_cls;
    srv_http *h = cls;
    if (rc) {
        __atomic_sub_fetch(&h->inflight, 1, __ATOMIC_SEQ_CST);
        free(rc->body);
        free(rc);
        *con_cls = NULL;
    }
}

static int listen_unix(const char *path, vsr_err *err) {
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof a.sun_path)
        return -(int)vsr_err_set(err, VSR_E_INVALID, "--uds %s: the path is longer than %zu bytes", path,
                                 sizeof a.sun_path - 1);
    snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -(int)vsr_err_set(err, VSR_E_IO, "--uds %s: socket: %s", path, strerror(errno));
    unlink(path); /* a stale socket from an earlier run */
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 128) != 0) {
        int e = errno;
        close(fd);
        return -(int)vsr_err_set(err, VSR_E_IO, "--uds %s: cannot listen: %s", path, strerror(e));
    }
    return fd;
}

vsr_status srv_http_start(srv_http *h, vsr_err *err) {
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
    if (h->opts->uds) {
        int fd = listen_unix(h->opts->uds, err);
        if (fd < 0) return err->code;
        h->uds_fd = fd;
        h->daemon = MHD_start_daemon(flags, 0, NULL, NULL, access_handler, h, MHD_OPTION_LISTEN_SOCKET, fd,
                                     MHD_OPTION_NOTIFY_COMPLETED, request_done, h,
                                     MHD_OPTION_CONNECTION_LIMIT, 1024u, MHD_OPTION_CONNECTION_TIMEOUT, 600u,
                                     MHD_OPTION_END);
    } else {
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)h->opts->port)};
        if (inet_pton(AF_INET, h->opts->host, &a.sin_addr) != 1)
            return vsr_err_set(err, VSR_E_INVALID, "--host %s: expected an IPv4 address such as 127.0.0.1 or 0.0.0.0",
                               h->opts->host);
        h->daemon = MHD_start_daemon(flags, (uint16_t)h->opts->port, NULL, NULL, access_handler, h,
                                     MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&a, MHD_OPTION_NOTIFY_COMPLETED,
                                     request_done, h, MHD_OPTION_CONNECTION_LIMIT, 1024u,
                                     MHD_OPTION_CONNECTION_TIMEOUT, 600u, MHD_OPTION_END);
    }
    if (!h->daemon) {
        if (h->opts->uds)
            return vsr_err_set(err, VSR_E_IO, "cannot serve HTTP on unix socket %s", h->opts->uds);
        return vsr_err_set(err, VSR_E_IO, "cannot listen on %s:%d (is the port in use?)", h->opts->host,
                           h->opts->port);
    }
    return VSR_OK;
}

int srv_http_inflight(srv_http *h) { return __atomic_load_n(&h->inflight, __ATOMIC_SEQ_CST); }

void srv_http_quiesce(srv_http *h) {
    if (h->daemon) MHD_quiesce_daemon(h->daemon);
}

void srv_http_stop(srv_http *h) {
    if (h->daemon) MHD_stop_daemon(h->daemon);
    h->daemon = NULL;
    if (h->uds_fd > 0) {
        close(h->uds_fd);
        unlink(h->opts->uds);
        h->uds_fd = -1;
    }
}
