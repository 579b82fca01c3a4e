#include "server/worker.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/log.h"
#include "vsr/catalog.h"
#include "vsr/progress.h"

#define COST_INIT 2e-5  /* seconds per token before the first forward (then an EMA) */
/* rows per coalesced forward: the CUDA backend's sequences per call and the largest row bucket
 * (195 rows of 64 clients' requests were refused by conv1d_silu on the H200 before this) */
#define SRV_MAX_BATCH_ROWS 128

static const char *const state_names[] = {"starting", "loading", "warming", "ready", "failed"};
const char *srv_state_name(srv_state s) { return state_names[s]; }

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void set_state(srv_model *m, srv_state s, const char *reason) {
    pthread_mutex_lock(&m->mu);
    m->state = s;
    snprintf(m->reason, sizeof m->reason, "%s", reason ? reason : "");
    pthread_mutex_unlock(&m->mu);
    if (s == SRV_FAILED)
        srv_log(SRV_LOG_ERROR, "model %s failed: %s", m->served_name, reason);
    else
        srv_log(SRV_LOG_INFO, "model %s: %s", m->served_name, srv_state_name(s));
}

vsr_status srv_model_prepare(srv_model *m, const vsr_serve_opts *o, srv_metrics *metrics,
                             vsr_err *err) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->wake, NULL);
    m->opts = o;
    m->metrics = metrics;
    m->max_queue = o->max_queue;
    m->max_queued_tokens = o->max_queued_tokens;
    m->coalesce = o->profile && !strcmp(o->profile, "batching");
    m->batch_wait_s = o->batch_wait_ms / 1000.0;
    m->max_batch_tokens = o->max_batch_tokens > 0 ? o->max_batch_tokens : 32768;
    m->token_cost = COST_INIT;
    m->state = SRV_STARTING;

    m->eopts = (vsr_engine_opts){.model = o->model,
                                 .revision = o->revision,
                                 .store_dir = o->store_dir,
                                 .device = o->device,
                                 .threads = o->threads,
                                 .dtype = o->dtype,
                                 .autotune_cache = o->autotune_cache,
                                 .show_progress = true,
                                 .quantize = o->quantize};
    vsr_status st = vsr_engine_prepare(&m->engine, &m->eopts, err);
    m->pkg = m->engine.pkg;
    if (st != VSR_OK) return st;
    /* A Vela 2.0 package's jobs run one tree per turn, each request's trees alone (exact): the
     * batching profile (rows of concurrent Decision 3.0 requests in shared forwards) does not apply. */
    if (m->pkg->family == VSR_FAMILY_VELA2 && m->coalesce)
        return vsr_err_set(err, VSR_E_UNSUPPORTED,
                           "--profile batching applies to Decision 3.0 packages only: %s is a Vela 2.0 decoder "
                           "package, whose requests run tree by tree under the exact profile (serve it with "
                           "--profile exact)", o->model);
    m->device = m->engine.device;
    snprintf(m->device_id, sizeof m->device_id, "%s", m->engine.device_id);
    if (o->served_name)
        snprintf(m->served_name, sizeof m->served_name, "%s", o->served_name);
    else if (m->pkg->repo[0])
        snprintf(m->served_name, sizeof m->served_name, "%s", m->pkg->repo);
    else {
        const char *slash = strrchr(m->pkg->path, '/');
        snprintf(m->served_name, sizeof m->served_name, "%.255s", slash ? slash + 1 : m->pkg->path);
    }
    return VSR_OK;
}

static void warm_progress(void *ctx, int done, int total) {
    (void)done, (void)total;
    vsr_progress_add(ctx, 1);
}

/* Shape buckets (issue 25): every bucket of at most --warmup-tokens run and recorded while the
 * worker says `warming`, so that no request pays planning, tuning or recording for them. */
static vsr_status warm_up(srv_model *m, vsr_err *err) {
    if (!m->model || !vsr_model_bucketed(m->model)) return VSR_OK; /* nothing is recorded (CPU) */
    if (m->opts->warmup_tokens <= 0) {
        srv_log(SRV_LOG_INFO, "warm-up: off (--warmup-tokens 0): each new shape bucket is recorded when first asked twice");
        return VSR_OK;
    }
    int n = vsr_model_buckets(m->model, m->opts->warmup_tokens, NULL, 0);
    vsr_progress *pg = vsr_progress_new("warm-up", (uint64_t)n, "buckets");
    vsr_model_warm_report rep;
    double t0 = mono();
    vsr_status st = vsr_model_warm(m->model, m->opts->warmup_tokens, warm_progress, pg, &rep, err);
    vsr_progress_done(pg);
    if (st) return st;
    srv_log(SRV_LOG_INFO, "warm-up: %d shape buckets up to %lld tokens recorded in %.1f s", rep.buckets,
            (long long)rep.max_tokens, mono() - t0);
    return VSR_OK;
}

static void *loader_main(void *arg) {
    srv_model *m = arg;
    vsr_err err = {0};
    set_state(m, SRV_LOADING, NULL);
    vsr_status st = vsr_engine_load(&m->engine, &m->eopts, &err);
    pthread_mutex_lock(&m->mu);
    m->model = m->engine.model;
    m->decider = m->engine.decider;
    m->v2 = m->engine.v2;
    if (m->decider) vsr_decider_set_profile(m->decider, m->opts->profile);
    pthread_mutex_unlock(&m->mu);
    if (st != VSR_OK) {
        set_state(m, SRV_FAILED, err.msg);
        return NULL;
    }
    set_state(m, SRV_WARMING, NULL);
    st = vsr_engine_golden(&m->engine, &err);
    m->golden = m->engine.golden;
    if (st != VSR_OK) {
        set_state(m, SRV_FAILED, err.msg);
        return NULL;
    }
    srv_log(SRV_LOG_INFO, "golden self-check: %s (%d/%d)%s%s", m->golden.status, m->golden.matched,
            m->golden.checked, m->golden.reason[0] ? ": " : "", m->golden.reason);
    if ((st = warm_up(m, &err)) != VSR_OK) {
        set_state(m, SRV_FAILED, err.msg);
        return NULL;
    }
    set_state(m, SRV_READY, NULL);
    return NULL;
}

static void on_forward(void *ctx, int rows, int64_t tokens, double seconds) {
    srv_model *m = ctx;
    srv_metrics_forward(m->metrics, rows, tokens, seconds);
}

/* ---- the scheduler ----
 * Jobs leave the FIFO for the active list as soon as the scheduler sees them. Each turn runs
 * ONE forward, for the active job whose expected finish (enqueued + tokens x cost per token,
 * the reference's order) is earliest: short work goes first, a long job still runs once the
 * work queued before its expected finish is done, and a small request waits for at most one
 * forward of a large one. Between forwards every active job's deadline and cancellation are
 * checked: rows not run by the deadline answer deadline_exceeded, the rest are kept.
 * Under a coalescing profile (batching), the rows of every coalescing job share forwards: longest
 * first, packed under --max-batch-tokens padded tokens, once the oldest of them has waited
 * --batch-wait-ms; at once when their work already fills a forward, or when a lone job finds the
 * worker idle after a forward of one job (see plan_forward). */

#define COST_SMOOTHING 0.1

static int64_t padded8(int64_t n) { return (n + 7) / 8 * 8; }

static bool coalesces(const srv_model *m, const srv_job *j) {
    return j->kind == SRV_JOB_D3 && m->coalesce && strcmp(vsr_decision_profile(j->dj), "exact");
}

/* Work left: a Decision 3.0 job's rows, a Vela 2.0 job's trees (-1: out of memory). */
static int work_left(const srv_job *j) {
    return j->kind == SRV_JOB_D3 ? vsr_decision_rows_left(j->dj) : vsr_v2_trees_left(j->v2);
}

static void count_expired(void *ctx, const char *type, const char *outcome) {
    if (!strcmp(outcome, "deadline_exceeded")) ++*(int *)ctx;
}

/* The job leaves the scheduler (lock held): it is answered with what it has. */
static void finish_job(srv_model *m, srv_job *j, double now) {
    srv_job **p = &m->active;
    while (*p && *p != j) p = &(*p)->next;
    if (*p) *p = j->next;
    m->running--;
    m->queued--; /* pending from admission until answered */
    m->queued_tokens -= j->tokens;
    if (!j->t_start) j->t_start = now;
    j->t_done = now;
    j->state = JOB_DONE;
    if (j->on_done) j->on_done(j, j->on_done_arg);
    else pthread_cond_signal(&j->done);
}

/* Retires cancelled, expired and finished jobs (lock held). */
static void retire(srv_model *m, double now) {
    for (srv_job *j = m->active, *nx; j; j = nx) {
        nx = j->next;
        if (__atomic_load_n(&j->cancel, __ATOMIC_RELAXED)) {
            j->st = vsr_err_set(&j->err, VSR_E_INVALID, "cancelled: the client went away");
            finish_job(m, j, now);
            continue;
        }
        int left = work_left(j);
        if (left < 0) {
            j->st = vsr_err_set(&j->err, VSR_E_NOMEM, "out of memory planning the job's forwards");
            finish_job(m, j, now);
        } else if (left == 0) {
            finish_job(m, j, now);
        } else if (j->deadline > 0 && now > j->deadline) {
            j->dropped = left;
            j->expired = true;
            if (j->kind == SRV_JOB_D3) {
                vsr_decision_expire(j->dj); /* the rows already answered keep their answers */
            } else {
                /* the requests (states, classify inputs) whose trees all ran keep their answers */
                vsr_v2_expire(j->v2);
                j->dropped = 0;
                vsr_v2_outcomes(j->v2, count_expired, &j->dropped);
            }
            finish_job(m, j, now);
        }
    }
}

/* A pending row of a coalesced forward, for its order: the turn's job first, then longest first,
 * then as gathered (qsort is not stable; the index makes the order total). */
typedef struct order_row {
    vsr_row_ref ref;
    int64_t tokens;
    int first, idx;
} order_row;

static int cmp_order_row(const void *a, const void *b) {
    const order_row *x = a, *y = b;
    if (x->first != y->first) return y->first - x->first;
    if (x->tokens != y->tokens) return x->tokens < y->tokens ? 1 : -1;
    return x->idx - y->idx;
}

/* Picks the next forward (lock held). Returns its row count, 0 when nothing may run yet (then
 * *wait_until says when a coalescing job ripens), -1 on out of memory (job in *failed). When the
 * job whose turn it is is a Vela 2.0 job, *tree says so and 1 is returned: its next tree runs. */
static int plan_forward(srv_model *m, double now, vsr_row_ref **rows, int *cap, double *wait_until,
                        srv_job **failed, srv_job **tree) {
    srv_job *best = NULL;
    *wait_until = 0;
    /* The window is held while requests come together: another coalescing job is here, or the last
     * coalesced forward was shared. A request that finds the worker idle after one alone runs at once
     * (waiting could gather nothing); a job that has had a forward is never held again. Gathering
     * stops early once the jobs' work fills a forward. */
    int64_t gathered = 0;
    int gathered_rows = 0, gathered_jobs = 0;
    for (srv_job *j = m->active; j; j = j->next)
        if (coalesces(m, j))
            gathered += j->tokens, gathered_rows += vsr_decision_rows_left(j->dj), gathered_jobs++;
    bool hold = (gathered_jobs >= 2 || m->last_batch_jobs >= 2) && gathered < m->max_batch_tokens &&
                gathered_rows < SRV_MAX_BATCH_ROWS;
    for (srv_job *j = m->active; j; j = j->next) {
        if (coalesces(m, j) && hold && !j->t_start && now - j->t_enqueue < m->batch_wait_s) {
            double ripe = j->t_enqueue + m->batch_wait_s;
            if (!*wait_until || ripe < *wait_until) *wait_until = ripe;
            continue;
        }
        if (!best || j->finish < best->finish) best = j;
    }
    if (!best) return 0;
    if (best->kind != SRV_JOB_D3) {
        *tree = best;
        return 1;
    }
    if (*cap < VSR_D3_ROWS_PER_FORWARD) {
        vsr_row_ref *r = realloc(*rows, sizeof **rows * VSR_D3_ROWS_PER_FORWARD);
        if (!r) return *failed = best, -1;
        *rows = r, *cap = VSR_D3_ROWS_PER_FORWARD;
    }
    if (!coalesces(m, best)) {
        int n = vsr_decision_next_forward(best->dj, *rows);
        if (n < 0) *failed = best;
        return n;
    }
    /* The oldest coalescing job is ripe: every coalescing job that has arrived joins (the window
     * bounds the oldest's wait; a job that came a moment ago does not wait for a later forward).
     * The rows of the job whose turn it is (earliest expected finish) come first, so a small
     * request waits for at most one forward of a large one here too; then every other row, longest
     * first (stable: request order within a length), packed under the token budget. */
    const int total = gathered_rows; /* every coalescing job's rows left, counted above */
    if (total > *cap) {
        vsr_row_ref *r = realloc(*rows, sizeof **rows * (size_t)total);
        if (!r) return *failed = best, -1;
        *rows = r, *cap = total;
    }
    const int nfirst = vsr_decision_pending(best->dj, *rows, total);
    if (nfirst < 0) return *failed = best, -1;
    int n = nfirst;
    for (srv_job *j = m->active; j; j = j->next)
        if (coalesces(m, j) && j != best) {
            int k = vsr_decision_pending(j->dj, *rows + n, total - n);
            if (k < 0) return *failed = j, -1;
            n += k;
        }
    vsr_row_ref *r = *rows;
    order_row *ord = malloc(sizeof *ord * (size_t)(n ? n : 1));
    if (!ord) return *failed = best, -1;
    for (int i = 0; i < n; i++)
        ord[i] = (order_row){r[i], vsr_decision_row_tokens(&r[i]), i < nfirst, i};
    qsort(ord, (size_t)n, sizeof *ord, cmp_order_row);
    for (int i = 0; i < n; i++) r[i] = ord[i].ref;
    free(ord);
    int64_t width = 0;
    int take = 0;
    while (take < n) {
        int64_t w = padded8(vsr_decision_row_tokens(&r[take]));
        int64_t nw = w > width ? w : width;
        /* the forward's shape as the model runs it: its bucket where it pads (vsr_model_bucket_*) */
        int64_t shape = vsr_model_shape_tokens(m->model, take + 1, nw);
        if (take && (shape > m->max_batch_tokens || take >= SRV_MAX_BATCH_ROWS)) break;
        width = nw;
        take++;
    }
    return take;
}

/* One turn of a Vela 2.0 job (lock held on entry and exit; released while the tree runs). */
static void run_tree(srv_model *m, srv_job *j, double now) {
    if (!j->t_start) j->t_start = now;
    int64_t tokens = vsr_v2_next_tree_tokens(j->v2);
    pthread_mutex_unlock(&m->mu);
    vsr_err err = {0};
    double t0 = mono();
    vsr_status st = vsr_v2_run_tree(m->v2, j->v2, on_forward, m, &err);
    double dt = mono() - t0;
    pthread_mutex_lock(&m->mu);
    if (tokens > 0 && st == VSR_OK) {
        m->token_cost = (1 - COST_SMOOTHING) * m->token_cost + COST_SMOOTHING * dt / (double)tokens;
        j->forward_s += dt;
        j->forwards++;
    }
    m->forward_seq++;
    if (st != VSR_OK) { /* the job answers 500 with the forward's reason */
        j->st = st;
        j->err = err;
        finish_job(m, j, mono());
    }
}

static void *sched_main(void *arg) {
    srv_model *m = arg;
    vsr_row_ref *rows = NULL;
    int cap = 0;
    pthread_mutex_lock(&m->mu);
    for (;;) {
        while (!m->head && !m->active && !m->stopping) pthread_cond_wait(&m->wake, &m->mu);
        if (!m->head && !m->active && m->stopping) break;
        double now = mono();
        while (m->head) { /* every arrival joins the active list */
            srv_job *j = m->head;
            m->head = j->next;
            if (!m->head) m->tail = NULL;
            j->state = JOB_RUNNING;
            j->finish = j->t_enqueue + (double)j->tokens * m->token_cost;
            j->next = m->active;
            m->active = j;
            m->running++;
            srv_metrics_queue_wait(m->metrics, now - j->t_enqueue);
        }
        retire(m, now);
        double wait_until;
        srv_job *failed = NULL, *tree = NULL;
        int n = plan_forward(m, now, &rows, &cap, &wait_until, &failed, &tree);
        if (n < 0) {
            failed->st = vsr_err_set(&failed->err, VSR_E_NOMEM, "out of memory planning a forward");
            finish_job(m, failed, now);
            continue;
        }
        if (n == 0) {
            if (wait_until > 0) { /* hold the batching window */
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                double d = wait_until - now;
                ts.tv_sec += (time_t)d;
                ts.tv_nsec += (long)((d - (double)(time_t)d) * 1e9);
                if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
                pthread_cond_timedwait(&m->wake, &m->mu, &ts);
            }
            continue;
        }
        if (tree) { /* a Vela 2.0 job: its next tree */
            run_tree(m, tree, now);
            continue;
        }
        int64_t tokens = 0;
        for (int i = 0; i < n; i++) {
            srv_job *j = (srv_job *)vsr_decision_job_owner(rows[i].job);
            if (!j->t_start) j->t_start = now;
            tokens += vsr_decision_row_tokens(&rows[i]);
        }
        pthread_mutex_unlock(&m->mu);
        vsr_err err = {0};
        double t0 = mono();
        vsr_status st = vsr_decision_forward(m->decider, rows, n, on_forward, m, &err);
        double dt = mono() - t0;
        pthread_mutex_lock(&m->mu);
        if (tokens > 0 && st == VSR_OK)
            m->token_cost = (1 - COST_SMOOTHING) * m->token_cost + COST_SMOOTHING * dt / (double)tokens;
        int jobs = 0;
        bool coalesced = false;
        for (int i = 0; i < n; i++) {
            srv_job *j = (srv_job *)vsr_decision_job_owner(rows[i].job);
            if (j->forward_mark == m->forward_seq + 1) continue; /* counted once per forward */
            j->forward_mark = m->forward_seq + 1;
            jobs++;
            coalesced |= coalesces(m, j);
            j->forward_s += dt;
            j->forwards++;
            if (st != VSR_OK && j->st == VSR_OK) {
                j->st = st;
                j->err = err;
            }
        }
        if (coalesced) m->last_batch_jobs = jobs;
        m->forward_seq++;
        if (st != VSR_OK) /* the jobs of a failed forward answer 500 with its reason */
            for (srv_job *j = m->active, *nx; j; j = nx) {
                nx = j->next;
                if (j->st != VSR_OK) finish_job(m, j, mono());
            }
    }
    pthread_mutex_unlock(&m->mu);
    free(rows);
    return NULL;
}

vsr_status srv_model_start(srv_model *m, vsr_err *err) {
    if (pthread_create(&m->sched, NULL, sched_main, m) != 0)
        return vsr_err_set(err, VSR_E_INTERNAL, "cannot start the scheduler thread");
    m->sched_started = true;
    if (pthread_create(&m->loader, NULL, loader_main, m) != 0)
        return vsr_err_set(err, VSR_E_INTERNAL, "cannot start the loader thread");
    m->loader_started = true;
    return VSR_OK;
}

srv_submit srv_model_submit(srv_model *m, srv_job *j, double deadline_ms) {
    pthread_mutex_lock(&m->mu);
    if (m->stopping || m->queued >= m->max_queue || j->tokens > m->max_queued_tokens ||
        m->queued_tokens + j->tokens > m->max_queued_tokens) {
        srv_submit why = m->stopping                        ? SUBMIT_STOPPING
                         : j->tokens > m->max_queued_tokens ? SUBMIT_TOO_MANY_TOKENS
                                                            : SUBMIT_FULL;
        pthread_mutex_unlock(&m->mu);
        return why;
    }
    j->state = JOB_QUEUED;
    if (j->kind == SRV_JOB_D3) vsr_decision_set_owner(j->dj, j);
    if (!j->on_done) pthread_cond_init(&j->done, NULL);
    j->t_enqueue = mono();
    j->deadline = deadline_ms > 0 ? j->t_enqueue + deadline_ms / 1000.0 : 0;
    j->next = NULL;
    if (m->tail) m->tail->next = j;
    else m->head = j;
    m->tail = j;
    m->queued++;
    m->queued_tokens += j->tokens;
    pthread_cond_signal(&m->wake);
    pthread_mutex_unlock(&m->mu);
    return SUBMIT_OK;
}

static bool unlink_job(srv_model *m, srv_job *j) {
    srv_job **p = &m->head, *prev = NULL;
    while (*p && *p != j) {
        prev = *p;
        p = &(*p)->next;
    }
    if (!*p) return false;
    *p = j->next;
    if (m->tail == j) m->tail = prev;
    m->queued--;
    m->queued_tokens -= j->tokens;
    return true;
}

bool srv_model_wait(srv_model *m, srv_job *j, bool (*client_gone)(void *), void *ctx) {
    pthread_mutex_lock(&m->mu);
    bool abandoned = false;
    while (j->state != JOB_DONE) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000000L; /* how often a waiting handler checks its client */
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&j->done, &m->mu, &ts);
        if (j->state == JOB_DONE || abandoned) continue;
        pthread_mutex_unlock(&m->mu);
        bool gone = client_gone && client_gone(ctx);
        pthread_mutex_lock(&m->mu);
        if (!gone) continue;
        abandoned = true;
        if (j->state == JOB_QUEUED && unlink_job(m, j)) {
            j->state = JOB_DONE;
            break;
        }
        __atomic_store_n(&j->cancel, 1, __ATOMIC_RELAXED); /* running: stops between forwards */
    }
    pthread_mutex_unlock(&m->mu);
    pthread_cond_destroy(&j->done);
    return !abandoned;
}

srv_abandon srv_model_abandon(srv_model *m, srv_job *j) {
    pthread_mutex_lock(&m->mu);
    srv_abandon r = ABANDON_DONE;
    if (j->state == JOB_QUEUED && unlink_job(m, j)) {
        j->state = JOB_DONE;
        r = ABANDON_WITHDRAWN;
    } else if (j->state == JOB_RUNNING) {
        __atomic_store_n(&j->cancel, 1, __ATOMIC_RELAXED); /* stops between forwards */
        r = ABANDON_CANCELLING;
    }
    pthread_mutex_unlock(&m->mu);
    return r;
}

int srv_model_queue_depth(srv_model *m) {
    pthread_mutex_lock(&m->mu);
    int q = m->queued;
    pthread_mutex_unlock(&m->mu);
    return q;
}

void srv_model_drain_and_stop(srv_model *m) {
    pthread_mutex_lock(&m->mu);
    m->stopping = true;
    pthread_cond_broadcast(&m->wake);
    pthread_mutex_unlock(&m->mu);
    if (m->sched_started) pthread_join(m->sched, NULL);
    if (m->loader_started) pthread_join(m->loader, NULL);
    m->sched_started = m->loader_started = false;
}

void srv_model_free(srv_model *m) {
    vsr_engine_close(&m->engine);
    pthread_cond_destroy(&m->wake);
    pthread_mutex_destroy(&m->mu);
}
