/* The worker's HTTP listener (TCP or a Unix socket).
 *
 * libmicrohttpd runs event-driven (epoll) on a small pool of polling threads; no thread per
 * connection. GET endpoints are answered on the polling threads. A decision request, once its
 * whole body is in, is suspended and handed to a fixed pool of handler threads (parse, validate,
 * tokenize, submit); a monitor thread watches the clients of submitted jobs (a client that went
 * away has its job withdrawn or cancelled) and cuts connections past the whole-request deadline.
 * When the scheduler finishes a job, a handler thread writes the response and resumes the
 * connection. Every bound is in srv_http_limits (docs/server.md lists them with their errors). */
#ifndef VSR_SERVER_HTTP_H
#define VSR_SERVER_HTTP_H

#include <pthread.h>

#include "server/metrics.h"
#include "server/worker.h"
#include "vsr/server.h"

typedef struct srv_http_limits {
    int max_connections;            /* 2048 open connections in all (capped by RLIMIT_NOFILE) */
    int max_connections_per_client; /* 256 per client IP address; 0 = no cap */
    int request_timeout_s;          /* 30: headers and body of one request, and writing its answer */
    int idle_timeout_s;             /* 15: no byte either way on a connection (keep-alive included) */
    int handler_threads;            /* 0: 2 to 4 by the CPU count (bounds concurrent parses) */
    int max_parse_backlog;          /* 64 decision requests received and waiting to be parsed */
    size_t max_body_memory;         /* 268435456: request body bytes held at once, all connections */
    size_t max_discard_bytes;       /* 67108864: a refused body is read and discarded up to --max-request-bytes + this */
    int drain_write_s;              /* 5: at SIGTERM, how long an answer may take to be written */
} srv_http_limits;

void srv_http_limits_default(srv_http_limits *l);

typedef struct srv_conn srv_conn;
typedef struct srv_task srv_task;

typedef struct srv_http {
    const vsr_serve_opts *opts;
    srv_http_limits lim;
    srv_model *model;
    srv_metrics *metrics;
    struct MHD_Daemon *daemon;
    int uds_fd;
    int inflight;      /* requests received and not yet completed (atomic) */
    int pipeline;      /* decision requests handed to the handler threads, not yet completed (atomic) */
    int backlog;       /* of them, waiting to be parsed (atomic) */
    size_t body_bytes; /* request body bytes held (atomic) */
    int draining;      /* SIGTERM seen (atomic) */
    /* open connections, for the deadline sweep and the drain */
    pthread_mutex_t cmu;
    srv_conn *conns;
    int n_conns;
    /* handler threads and their queue */
    pthread_mutex_t pmu;
    pthread_cond_t pcond;
    srv_task *q_head, *q_tail;
    int stop_threads;
    pthread_t *handlers;
    int n_handlers;
    /* jobs submitted to the scheduler whose clients the monitor watches */
    pthread_mutex_t wmu;
    srv_task *watch;
    pthread_t monitor;
    int monitor_started;
    int sync_ready;
} srv_http;

vsr_status srv_http_start(srv_http *h, vsr_err *err);
/* Stops accepting new connections and closes idle connections and requests still being read
 * (at once); requests received whole are answered. */
void srv_http_quiesce(srv_http *h);
/* Decision requests received whole and not yet answered (or their answer not yet written). */
int srv_http_pipeline(srv_http *h);
void srv_http_stop(srv_http *h);
/* Requests in progress (being read, waiting for the model, or being answered). */
int srv_http_inflight(srv_http *h);

#endif
