/* The worker's HTTP listener (TCP or a Unix socket). */
#ifndef VSR_SERVER_HTTP_H
#define VSR_SERVER_HTTP_H

#include "server/metrics.h"
#include "server/worker.h"
#include "vsr/server.h"

typedef struct srv_http {
    const vsr_serve_opts *opts;
    srv_model *model;
    srv_metrics *metrics;
    struct MHD_Daemon *daemon;
    int uds_fd;
    int inflight; /* requests received and not yet completed (atomic) */
} srv_http;

vsr_status srv_http_start(srv_http *h, vsr_err *err);
/* Stops accepting new connections; existing ones finish. */
void srv_http_quiesce(srv_http *h);
void srv_http_stop(srv_http *h);
/* Requests in progress (being read, waiting for the model, or being answered). */
int srv_http_inflight(srv_http *h);

#endif
