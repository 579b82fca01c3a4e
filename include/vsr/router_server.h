/* vsr/router_server.h: the router's HTTP server (`vllm-sr serve --config FILE`, issue #21).
 *
 * POST /v1/chat/completions (OpenAI format) is routed: the questions every decision needs go
 * to the decision deployment in one /v1/decisions call, the span signals (pii, hallucination)
 * to the deployments bound to them (their preset questions), the decisions are evaluated in
 * priority order, a backend of the chosen model is picked by weight and the request is proxied
 * (an SSE stream is passed through as it arrives). POST /v1/decisions forwards to the decision
 * deployment (or the used deployment `model` names). GET /v1/models, /health, /ready,
 * /metrics. SIGHUP re-reads and swaps the config (an invalid file keeps the old one); SIGTERM
 * stops accepting, drains what is in flight, stops the workers. docs/router.md. */
#ifndef VSR_ROUTER_SERVER_H
#define VSR_ROUTER_SERVER_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vsr_router_serve_opts {
    const char *config_path;
    const char *host;           /* NULL: listeners[0].address, else 127.0.0.1 */
    int port;                   /* 0: listeners[0].port, else 8899 */
    const char *store_dir;      /* for the config's capability checks and the workers */
    const char *state_dir;      /* the supervisor's sockets and logs; NULL: its default */
    const char *worker_bin;     /* NULL: vllm-srun beside vllm-sr */
    bool have_seed;             /* seed the weighted backend pick (tests) */
    unsigned long long seed;
    int grace_ms;               /* worker SIGTERM -> SIGKILL; 0: 10000 */
    int drain_timeout_ms;       /* SIGTERM: how long in-flight requests may take; 0: 30000 */
    int upstream_timeout_ms;    /* one backend call; 0: 600000 */
    int ready_timeout_ms;       /* a managed worker's load; 0: the supervisor's default */
    size_t max_request_bytes;   /* 0: 50331648 (48 MiB) */
    const char *log_level;      /* error, warn, info (default), debug */
} vsr_router_serve_opts;

/* Runs the router until SIGTERM/SIGINT; returns the process exit status (0 after a clean
 * drain, 1 when the config is invalid or the listener cannot start). */
int vsr_router_serve(const vsr_router_serve_opts *o);

#ifdef __cplusplus
}
#endif

#endif
