/* The router's metrics (rmetrics.h). */
#include "router/rmetrics.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_LE 14 /* 0.0005 s doubling to 4.096 s, then +Inf */

typedef struct series {
    char key[320];
    uint64_t count;
    uint64_t buckets[N_LE + 1];
    double sum;
    struct series *next;
} series;

typedef struct family_info {
    const char *name, *help;
    bool histogram;
} family_info;

static const family_info families[RM_N_FAMILIES] = {
    [RM_REQUESTS] = {"vsr_router_requests_total", "Requests the router answered, by endpoint and HTTP status.", false},
    [RM_REQUEST_DURATION] = {"vsr_router_request_duration_seconds",
                             "Time from a request's arrival to its answer's headers (streams: to the first byte).", true},
    [RM_DEP_REQUESTS] = {"vsr_model_runtime_requests_total",
                         "Calls to a deployment, by outcome (ok, timeout, unavailable, overloaded, rejected, failed).", false},
    [RM_DEP_DURATION] = {"vsr_model_runtime_request_duration_seconds", "Duration of calls to a deployment.", true},
    [RM_UNKNOWN] = {"vsr_model_runtime_unknown_answers_total",
                    "Signal calls whose answers were unknown to the rules, by reason.", false},
    [RM_DECISION_MATCHES] = {"vsr_router_decision_matches_total",
                             "Chat requests routed by each decision ((default): none matched, (explicit): the request "
                             "named a model).",
                             false},
    [RM_BACKEND_REQUESTS] = {"vsr_router_backend_requests_total",
                             "Calls to providers' backends, by model, backend and outcome.", false},
    [RM_BACKEND_DURATION] = {"vsr_router_backend_duration_seconds",
                             "Duration of backend calls (to the last byte of the answer).", true},
    [RM_RELOADS] = {"vsr_router_config_reloads_total", "SIGHUP config reloads, by result (applied, refused).", false},
};

struct rt_metrics {
    pthread_mutex_t mu;
    series *f[RM_N_FAMILIES];
};

const char *rt_metrics_esc(const char *in, char *out, size_t n) {
    size_t j = 0;
    for (const char *p = in ? in : ""; *p && j + 3 < n; p++) {
        if (*p == '\\' || *p == '"' || *p == '\n') {
            out[j++] = '\\';
            out[j++] = *p == '\n' ? 'n' : *p;
        } else {
            out[j++] = *p;
        }
    }
    out[j] = 0;
    return out;
}

static void render_key(const char *const *labels, char *key, size_t n) {
    size_t at = 0;
    key[0] = 0;
    for (int i = 0; labels && labels[i] && labels[i + 1] && at < n; i += 2) {
        char v[200];
        at += (size_t)snprintf(key + at, n - at, "%s%s=\"%s\"", i ? "," : "", labels[i],
                               rt_metrics_esc(labels[i + 1], v, sizeof v));
    }
}

static series *find(rt_metrics *m, rt_family f, const char *key) {
    series **p = &m->f[f];
    for (; *p; p = &(*p)->next)
        if (!strcmp((*p)->key, key)) return *p;
    series *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    snprintf(s->key, sizeof s->key, "%s", key);
    *p = s;
    return s;
}

rt_metrics *rt_metrics_new(void) {
    rt_metrics *m = calloc(1, sizeof *m);
    if (m) pthread_mutex_init(&m->mu, NULL);
    return m;
}

void rt_metrics_free(rt_metrics *m) {
    if (!m) return;
    for (int f = 0; f < RM_N_FAMILIES; f++)
        for (series *s = m->f[f], *n; s; s = n) {
            n = s->next;
            free(s);
        }
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void rt_metrics_inc(rt_metrics *m, rt_family f, const char *const *labels) {
    char key[320];
    render_key(labels, key, sizeof key);
    pthread_mutex_lock(&m->mu);
    series *s = find(m, f, key);
    if (s) s->count++;
    pthread_mutex_unlock(&m->mu);
}

static double le(int i) { return 0.0005 * (double)(1u << i); }

void rt_metrics_observe(rt_metrics *m, rt_family f, double seconds, const char *const *labels) {
    char key[320];
    render_key(labels, key, sizeof key);
    int b = 0;
    while (b < N_LE && seconds > le(b)) b++;
    pthread_mutex_lock(&m->mu);
    series *s = find(m, f, key);
    if (s) {
        s->count++;
        s->buckets[b]++;
        s->sum += seconds;
    }
    pthread_mutex_unlock(&m->mu);
}

void rt_metrics_render(rt_metrics *m, vsr_strbuf *b) {
    pthread_mutex_lock(&m->mu);
    for (int f = 0; f < RM_N_FAMILIES; f++) {
        const family_info *fi = &families[f];
        vsr_strbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", fi->name, fi->help, fi->name,
                          fi->histogram ? "histogram" : "counter");
        for (series *s = m->f[f]; s; s = s->next) {
            const char *sep = s->key[0] ? "," : "";
            if (!fi->histogram) {
                vsr_strbuf_printf(b, "%s{%s} %llu\n", fi->name, s->key, (unsigned long long)s->count);
                continue;
            }
            uint64_t cum = 0;
            for (int i = 0; i < N_LE; i++) {
                cum += s->buckets[i];
                vsr_strbuf_printf(b, "%s_bucket{%s%sle=\"%g\"} %llu\n", fi->name, s->key, sep, le(i),
                                  (unsigned long long)cum);
            }
            cum += s->buckets[N_LE];
            vsr_strbuf_printf(b, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", fi->name, s->key, sep, (unsigned long long)cum);
            vsr_strbuf_printf(b, "%s_sum{%s} %.9g\n%s_count{%s} %llu\n", fi->name, s->key, s->sum, fi->name, s->key,
                              (unsigned long long)s->count);
        }
    }
    pthread_mutex_unlock(&m->mu);
}
