/* The model a worker serves: its load lifecycle and its scheduler (one thread
 * draining a bounded FIFO of jobs: Decision 3.0 decision jobs, or a Vela 2.0 package's decision
 * and classify jobs; HTTP threads never run the model). */
#ifndef VSR_SERVER_WORKER_H
#define VSR_SERVER_WORKER_H

#include <pthread.h>
#include <stdbool.h>

#include "server/metrics.h"
#include "vsr/decision.h"
#include "vsr/device.h"
#include "vsr/engine.h"
#include "vsr/package.h"
#include "vsr/server.h"
#include "vsr/vela2_decide.h"

typedef enum srv_state { SRV_STARTING, SRV_LOADING, SRV_WARMING, SRV_READY, SRV_FAILED } srv_state;
const char *srv_state_name(srv_state s);

typedef enum srv_job_state { JOB_QUEUED, JOB_RUNNING, JOB_DONE } srv_job_state;

typedef enum srv_job_kind {
    SRV_JOB_D3,      /* a Decision 3.0 /v1/decisions job (dj): one forward of rows per turn */
    SRV_JOB_V2,      /* a Vela 2.0 /v1/decisions job (v2): one tree per turn */
    SRV_JOB_V2_CLASSIFY, /* a Vela 2.0 /v1/classify job (v2c; its trees are vsr_v2_classify_job's) */
} srv_job_kind;

typedef struct srv_job {
    srv_job_kind kind;
    vsr_decision_job *dj;    /* SRV_JOB_D3 */
    vsr_v2_job *v2;          /* SRV_JOB_V2, and the classify's job under SRV_JOB_V2_CLASSIFY */
    vsr_v2_classify *v2c;    /* SRV_JOB_V2_CLASSIFY */
    srv_job_state state;
    volatile int cancel;     /* set by the HTTP thread when its client went away */
    vsr_status st;
    vsr_err err;
    double t_enqueue, t_start, t_done, deadline; /* monotonic seconds; deadline 0 = none */
    double forward_s;
    long long tokens;        /* tokens the job forwards (admission control) */
    bool expired;            /* the deadline passed with rows left: those answer deadline_exceeded */
    int dropped;             /* how many rows the deadline dropped */
    double finish;           /* expected finish: the scheduler's order */
    int forwards;            /* forwards that carried rows of this job */
    unsigned long forward_mark;
    pthread_cond_t done;     /* signalled when this job is done (srv_model_wait's waiter owns it) */
    /* Called by the scheduler (with the model's lock held, as its last use of the job) when a job
     * submitted with it is done; such a job is never waited for with srv_model_wait. */
    void (*on_done)(struct srv_job *j, void *arg);
    void *on_done_arg;
    struct srv_job *next;
} srv_job;

typedef struct srv_model {
    pthread_mutex_t mu;
    pthread_cond_t wake;     /* scheduler: work arrived or stopping */
    srv_state state;
    char reason[VSR_ERR_MSG_MAX];
    const vsr_serve_opts *opts;
    vsr_engine_opts eopts;
    vsr_engine engine;
    /* shorthands into engine, valid after prepare (pkg) and load (model, decider) */
    vsr_package *pkg;
    vsr_model *model;
    vsr_decider *decider;
    vsr_v2_decider *v2;      /* a Vela 2.0 package: its decision layer (decider is NULL) */
    vsr_device device;
    char device_id[32];
    vsr_golden_report golden;
    char served_name[256];
    srv_job *head, *tail;    /* arrived, not yet seen by the scheduler */
    srv_job *active;         /* being run, a forward at a time */
    int queued, running, max_queue; /* queued: pending from admission until answered */
    bool coalesce;           /* --profile batching: requests asking for it share forwards */
    double batch_wait_s;     /* --batch-wait-ms */
    int last_batch_jobs;     /* requests in the last coalesced forward: the window is held only when >= 2 */
    long long max_batch_tokens;
    double token_cost;       /* seconds per token, EMA over forwards */
    unsigned long forward_seq;
    long long queued_tokens, max_queued_tokens;
    bool stopping;
    pthread_t sched, loader;
    bool sched_started, loader_started;
    srv_metrics *metrics;
} srv_model;

/* Resolves, reads metadata and gates the package on the device: no weight read.
 * On failure returns the status and err says why (the process exits 1). */
vsr_status srv_model_prepare(srv_model *m, const vsr_serve_opts *o, srv_metrics *metrics,
                             vsr_err *err);
/* Starts the loader (verify, map, load, golden) and the scheduler threads. */
vsr_status srv_model_start(srv_model *m, vsr_err *err);
typedef enum srv_submit { SUBMIT_OK, SUBMIT_FULL, SUBMIT_TOO_MANY_TOKENS, SUBMIT_STOPPING } srv_submit;
/* Enqueues a job (all of it or none): SUBMIT_FULL when --max-queue jobs wait or its tokens would
 * take the queued tokens past --max-queued-tokens (429), SUBMIT_TOO_MANY_TOKENS when the job alone
 * holds more than that (413: it could never be admitted), SUBMIT_STOPPING after SIGTERM (503). */
srv_submit srv_model_submit(srv_model *m, srv_job *j, double deadline_ms);
/* Waits for the job. `client_gone` is polled; when it reports true the job is
 * withdrawn (queued) or cancelled (running). Returns false when abandoned. */
bool srv_model_wait(srv_model *m, srv_job *j, bool (*client_gone)(void *), void *ctx);
typedef enum srv_abandon { ABANDON_WITHDRAWN, ABANDON_CANCELLING, ABANDON_DONE } srv_abandon;
/* For a job submitted with on_done whose client went away: WITHDRAWN when it was still queued
 * (taken out; on_done will not be called), CANCELLING when it runs (it stops between forwards;
 * on_done follows), DONE when it had finished already (on_done was or is being called). */
srv_abandon srv_model_abandon(srv_model *m, srv_job *j);
/* Waits until the queue is empty and nothing runs, then stops the threads. */
void srv_model_drain_and_stop(srv_model *m);
void srv_model_free(srv_model *m);
int srv_model_queue_depth(srv_model *m);

#endif
