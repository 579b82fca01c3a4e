/* Prometheus metrics of the worker (reference-runtime.md section 8). Thread-safe. */
#ifndef VSR_SERVER_METRICS_H
#define VSR_SERVER_METRICS_H

#include <stdint.h>

typedef struct srv_metrics srv_metrics;

srv_metrics *srv_metrics_new(void);
void srv_metrics_free(srv_metrics *m);

void srv_metrics_request(srv_metrics *m, const char *endpoint, int status, double seconds);
void srv_metrics_question(srv_metrics *m, const char *type, const char *outcome);
void srv_metrics_input_tokens(srv_metrics *m, int64_t n);
void srv_metrics_queue_wait(srv_metrics *m, double seconds);
void srv_metrics_forward(srv_metrics *m, int rows, int64_t padded_tokens, double seconds);
void srv_metrics_deadline_dropped(srv_metrics *m, int questions);

typedef struct srv_model_gauges {
    const char *model, *revision, *family, *accelerator, *device, *profile;
    uint64_t memory_bytes;
    int ready;
    int queue_depth;
} srv_model_gauges;

/* Renders the exposition text (malloc'd). */
char *srv_metrics_render(srv_metrics *m, const srv_model_gauges *g);

#endif
