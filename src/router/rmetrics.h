/* The router's Prometheus metrics (reference-runtime.md 8, "Router frontend"), thread-safe.
 * Series are created on first use and rendered in first-seen order. */
#ifndef VSR_ROUTER_RMETRICS_H
#define VSR_ROUTER_RMETRICS_H

#include <stdbool.h>

#include "core/strbuf.h"

typedef enum rt_family {
    RM_REQUESTS,          /* counter   vsr_router_requests_total{endpoint,status} */
    RM_REQUEST_DURATION,  /* histogram vsr_router_request_duration_seconds{endpoint} */
    RM_DEP_REQUESTS,      /* counter   vsr_model_runtime_requests_total{deployment,outcome} */
    RM_DEP_DURATION,      /* histogram vsr_model_runtime_request_duration_seconds{deployment,surface} */
    RM_UNKNOWN,           /* counter   vsr_model_runtime_unknown_answers_total{deployment,reason} */
    RM_DECISION_MATCHES,  /* counter   vsr_router_decision_matches_total{decision} */
    RM_BACKEND_REQUESTS,  /* counter   vsr_router_backend_requests_total{model,backend,outcome} */
    RM_BACKEND_DURATION,  /* histogram vsr_router_backend_duration_seconds{model,backend} */
    RM_RELOADS,           /* counter   vsr_router_config_reloads_total{result} */
    RM_N_FAMILIES
} rt_family;

typedef struct rt_metrics rt_metrics;

rt_metrics *rt_metrics_new(void);
void rt_metrics_free(rt_metrics *m);
/* `labels` is NULL-terminated name/value pairs: "deployment", "d3", "outcome", "ok", NULL. */
void rt_metrics_inc(rt_metrics *m, rt_family f, const char *const *labels);
void rt_metrics_observe(rt_metrics *m, rt_family f, double seconds, const char *const *labels);
/* Appends every family's exposition text. */
void rt_metrics_render(rt_metrics *m, vsr_strbuf *b);
/* A label value escaped for the text format (backslash, quote, newline), cut to fit. */
const char *rt_metrics_esc(const char *in, char *out, size_t n);

#endif
