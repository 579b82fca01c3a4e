/* `vllm-srun serve`: gate, listen, load in the background, serve until SIGTERM,
 * then drain: stop accepting, close idle connections and requests still being read at once,
 * answer every request received whole, and exit 0. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "server/http.h"
#include "server/log.h"
#include "server/metrics.h"
#include "server/serve.h"
#include "server/worker.h"
#include "vsr/server.h"

void vsr_serve_opts_default(vsr_serve_opts *o) {
    memset(o, 0, sizeof *o);
    o->device = "auto";
    o->host = "127.0.0.1";
    o->port = 8100;
    o->dtype = "auto";
    o->max_queue = 256;
    o->max_queued_tokens = 4194304;
    o->max_request_bytes = 8388608;
    o->log_level = "info";
    o->profile = "exact";
    o->batch_wait_ms = 2.0;
    o->max_batch_tokens = 32768;
    o->warmup_tokens = 8192;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int vsr_serve(const vsr_serve_opts *o) { return srv_serve(o, NULL); }

int srv_serve(const vsr_serve_opts *o, const srv_http_limits *lim) {
    if (!srv_log_set_level(o->log_level ? o->log_level : "info")) {
        fprintf(stderr, "vllm-srun serve: --log-level must be error, warn, info or debug; got '%s'\n",
                o->log_level);
        return 2;
    }
    /* Signals go to a waiting thread only: block them before any thread starts. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    srv_metrics *metrics = srv_metrics_new();
    srv_model model;
    vsr_err err = {0};
    if (srv_model_prepare(&model, o, metrics, &err) != VSR_OK) {
        fprintf(stderr, "vllm-srun serve: %s\n", err.msg);
        srv_model_free(&model);
        srv_metrics_free(metrics);
        return 1;
    }
    srv_log(SRV_LOG_INFO, "serving %s%s%s from %s on %s (%s)", model.served_name,
            model.pkg->revision[0] ? "@" : "", model.pkg->revision, model.pkg->path, model.device_id,
            model.device.name);
    srv_http http = {.opts = o, .model = &model, .metrics = metrics, .uds_fd = -1};
    if (lim) http.lim = *lim;
    else srv_http_limits_default(&http.lim);
    if (srv_http_start(&http, &err) != VSR_OK || srv_model_start(&model, &err) != VSR_OK) {
        fprintf(stderr, "vllm-srun serve: %s\n", err.msg);
        srv_http_stop(&http);
        srv_model_drain_and_stop(&model);
        srv_model_free(&model);
        srv_metrics_free(metrics);
        return 1;
    }
    if (o->uds) srv_log(SRV_LOG_INFO, "listening on unix:%s", o->uds);
    else srv_log(SRV_LOG_INFO, "listening on http://%s:%d", o->host, o->port);
    int sig = 0;
    sigwait(&sigs, &sig);
    srv_log(SRV_LOG_INFO, "%s: draining in-flight work", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    double t0 = now_s();
    srv_http_quiesce(&http);
    /* Every request received whole is answered by the running scheduler (the queue is bounded);
     * idle connections and requests still being read were closed by the quiesce, and an answer
     * being written gets --drain-write seconds (the monitor cuts it after that). */
    while (srv_http_pipeline(&http) > 0) {
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    srv_model_drain_and_stop(&model);
    srv_http_stop(&http);
    srv_log(SRV_LOG_INFO, "drained in %.3f s", now_s() - t0);
    srv_model_free(&model);
    srv_metrics_free(metrics);
    srv_log(SRV_LOG_INFO, "stopped");
    return 0;
}
