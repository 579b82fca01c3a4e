#include "server/worker.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/log.h"
#include "vsr/catalog.h"
#include "vsr/progress.h"

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
    m->state = SRV_STARTING;

    m->eopts = (vsr_engine_opts){.model = o->model,
                                 .revision = o->revision,
                                 .store_dir = o->store_dir,
                                 .device = o->device,
                                 .threads = o->threads,
                                 .dtype = o->dtype,
                                 .autotune_cache = o->autotune_cache,
                                 .show_progress = true};
    vsr_status st = vsr_engine_prepare(&m->engine, &m->eopts, err);
    m->pkg = m->engine.pkg;
    if (st != VSR_OK) return st;
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

static void *loader_main(void *arg) {
    srv_model *m = arg;
    vsr_err err = {0};
    set_state(m, SRV_LOADING, NULL);
    vsr_status st = vsr_engine_load(&m->engine, &m->eopts, &err);
    pthread_mutex_lock(&m->mu);
    m->model = m->engine.model;
    m->decider = m->engine.decider;
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
    set_state(m, SRV_READY, NULL);
    return NULL;
}

static void on_forward(void *ctx, int rows, int64_t tokens, double seconds) {
    srv_model *m = ctx;
    srv_metrics_forward(m->metrics, rows, tokens, seconds);
}

static void *sched_main(void *arg) {
    srv_model *m = arg;
    pthread_mutex_lock(&m->mu);
    for (;;) {
        while (!m->head && !m->stopping) pthread_cond_wait(&m->wake, &m->mu);
        if (!m->head && m->stopping) break;
        srv_job *j = m->head;
        m->head = j->next;
        if (!m->head) m->tail = NULL;
        m->queued--;
        m->queued_tokens -= j->tokens;
        double now = mono();
        j->t_start = now;
        if (j->deadline > 0 && now > j->deadline) {
            vsr_decision_expire(j->dj);
            j->expired = true;
            j->st = VSR_OK;
            j->state = JOB_DONE;
            j->t_done = now;
            if (j->on_done) j->on_done(j, j->on_done_arg);
            else pthread_cond_signal(&j->done);
            continue;
        }
        j->state = JOB_RUNNING;
        m->running++;
        pthread_mutex_unlock(&m->mu);
        srv_metrics_queue_wait(m->metrics, j->t_start - j->t_enqueue);
        j->st = vsr_decision_run(m->decider, j->dj, &j->cancel, on_forward, m, &j->err);
        double t_end = mono();
        pthread_mutex_lock(&m->mu);
        m->running--;
        j->forward_s = t_end - j->t_start;
        j->t_done = t_end;
        j->state = JOB_DONE;
        if (j->on_done) j->on_done(j, j->on_done_arg);
        else pthread_cond_signal(&j->done);
    }
    pthread_mutex_unlock(&m->mu);
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
