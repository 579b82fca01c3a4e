/* vsr/supervisor.h: the router's workers (issue #21; reference-runtime.md 6.3).
 *
 * For every USED deployment (the caller decides which: decision_model, bindings, anything the
 * routing needs) the supervisor keeps one replica per `replicas` entry (one when the deployment
 * has no list):
 *  - managed (provider model_runtime, no endpoint): one `vllm-srun serve <artifact>
 *    [--revision R] --device D --served-model-name <key> --uds <sock> --profile P [--threads N]`
 *    process per replica (P: the deployment's profile, exact or batching; another is refused).
 *    Sockets live in a private directory (0700, ours, symlinks refused) under the state dir,
 *    or /tmp/vsr-<8hex> when a socket path would pass 100 bytes; worker stdout/stderr go to
 *    <state>/logs/<key>-<replica>.log. Readiness: GET /health over the socket answers 200. A worker that exits (or stops answering /health) is restarted after a back-off
 *    of 1 s doubling to 60 s; the back-off resets once a worker has stayed ready for 60 s.
 *    Workers get PR_SET_PDEATHSIG(SIGKILL), so they die with the router.
 *  - attached (endpoint [+ served_name]; provider http is always attached): GET /health
 *    decides ready; never started.
 * Fork happens on the monitor thread only (PR_SET_PDEATHSIG fires when the forking THREAD
 * ends), which lives until vsr_sup_stop has reaped every worker. The caller must not set
 * SIGCHLD to SIG_IGN (workers are reaped with waitpid on their pids).
 *
 * A monitor thread does all waiting; no call blocks on a worker except vsr_sup_stop and
 * vsr_sup_wait_ready. Every function is thread-safe (pick/release run on HTTP handler threads).
 */
#ifndef VSR_SUPERVISOR_H
#define VSR_SUPERVISOR_H

#include <stdbool.h>

#include "vsr/error.h"
#include "vsr/router.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vsr_sup vsr_sup;

typedef struct vsr_sup_opts {
    const char *state_dir;  /* sockets/ (0700) and logs/ go here; NULL: $VLLM_SR_STATE_DIR or
                               ~/.local/state/vllm-sr (as the rest of vllm-sr) */
    const char *worker_bin; /* vllm-srun; NULL: "vllm-srun" beside /proc/self/exe */
    const char *store_dir;  /* passed to workers as --store; NULL: the worker's default */
    int grace_ms;           /* SIGTERM -> SIGKILL on stop and on retiring a replica; 0: 10000 */
    int ready_timeout_ms;   /* a managed worker not ready after this is killed and restarted
                               (with back-off); 0: 600000 */
    int health_interval_ms; /* health poll period; 0: 500 */
    int backoff_min_ms;     /* first restart delay; 0: 1000 */
    int backoff_max_ms;     /* cap; 0: 60000 */
    int stable_ms;          /* ready this long resets the back-off; 0: 60000 */
    bool quiet;             /* no log lines at all */
    /* Where log lines go (one line, no newline); NULL: stderr as "vllm-sr: <line>". */
    void (*log)(void *ctx, const char *line);
    void *log_ctx;
} vsr_sup_opts;

typedef struct vsr_sup_target { /* one replica you may call now */
    char uds_path[256];         /* the worker's Unix socket ("" for an http(s) endpoint) */
    char url[512];              /* base URL: "http://localhost" for a socket, else the endpoint */
    char served_name[256];      /* the model name to put in requests */
    int deployment_index;       /* index in the config the replica was started from */
    int replica;                /* ordinal within its deployment */
    unsigned long long id;      /* identifies this replica instance (for release/report) */
} vsr_sup_target;

/* Starts every used deployment's replicas and returns at once (readiness is tracked by the
 * monitor thread). `used` holds deployment keys; unknown keys are an error. NULL with `err` set
 * when the state dir or socket dir cannot be made safely, or the worker binary is missing. */
vsr_sup *vsr_sup_start(const vsr_router_config *c, const char *const *used, int n_used,
                       const vsr_sup_opts *o, vsr_err *err);

/* A READY replica of `deployment`, round robin. false when none is ready (or the key is not
 * used). Every successful pick must be paired with vsr_sup_release once the call is over: a
 * replica retired by a reload is stopped only when its picks are released (or after grace). */
bool vsr_sup_pick(vsr_sup *s, const char *deployment, vsr_sup_target *out);
void vsr_sup_release(vsr_sup *s, const vsr_sup_target *t);

/* A call to t failed at transport level (connect refused, reset): the replica is marked not
 * ready until its next successful health check. Does not release. */
void vsr_sup_report_failure(vsr_sup *s, const vsr_sup_target *t);

/* Swaps in a new config. Replicas whose deployment key and placement (artifact, revision,
 * device, profile, endpoint, served name, ordinal) are unchanged keep running (and keep their
 * restart counts); new ones start; removed or changed ones are retired: a retired replica is
 * picked only while its deployment has no ready new replica (so a deployment switched from
 * BF16 to FP8 keeps serving while the new worker loads), then, once its picks are released (or
 * grace_ms passed), gets SIGTERM (the worker drains) and SIGKILL after grace_ms.
 * A placement that comes back (a rollback) before its retired replica got SIGTERM takes that
 * replica back (kept, same worker); one whose retired worker is already stopping starts a new
 * worker once the old one is reaped (same placement, same socket).
 * On error nothing changes. */
vsr_status vsr_sup_reload(vsr_sup *s, const vsr_router_config *c, const char *const *used,
                          int n_used, vsr_err *err);

/* Waits until every used deployment has at least one ready replica. false on timeout. */
bool vsr_sup_wait_ready(vsr_sup *s, int timeout_ms);

/* SIGTERM to every worker, waits up to grace_ms, SIGKILL the rest, reaps, frees s. */
void vsr_sup_stop(vsr_sup *s);

/* For /metrics and /ready: one call per replica, retired ones excluded. `state` is one of
 * "starting", "ready", "unhealthy", "backoff", "stopping" (managed) or "attached-ready",
 * "attached-down". `restarts` counts restarts of that replica since it was started. */
void vsr_sup_foreach(vsr_sup *s,
                     void (*cb)(void *ctx, const char *deployment, int replica, bool ready,
                                int restarts, const char *state),
                     void *ctx);

#ifdef __cplusplus
}
#endif

#endif
