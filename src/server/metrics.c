#include "server/metrics.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/strbuf.h"

/* Histogram bucket bounds (seconds or counts), doubling series as the reference uses. */
#define N_DUR 13 /* 0.001 .. 4.096 s, then +Inf */
#define N_ROWS 9 /* 1 .. 256 */
#define N_TOK 13 /* 64 .. 262144 */

typedef struct {
    double le[16];
    int n;
    uint64_t counts[17]; /* per bucket (non-cumulative); [n] = +Inf */
    double sum;
    uint64_t total;
} histo;

typedef struct labelled {
    char key[96]; /* label set rendered, e.g. endpoint="/v1/decisions",status="200" */
    uint64_t count;
    histo h; /* used by labelled histograms */
    struct labelled *next;
} labelled;

struct srv_metrics {
    pthread_mutex_t mu;
    labelled *requests;   /* counter {endpoint,status} */
    labelled *questions;  /* counter {type,outcome} */
    labelled *req_dur;    /* histogram {endpoint} */
    uint64_t input_tokens;
    uint64_t deadline_dropped;
    histo queue, forward, rows, tokens;
};

static void histo_init(histo *h, double first, int n) {
    h->n = n;
    double v = first;
    for (int i = 0; i < n; i++, v *= 2) h->le[i] = v;
}

static void histo_observe(histo *h, double v) {
    int i = 0;
    while (i < h->n && v > h->le[i]) i++;
    h->counts[i]++;
    h->sum += v;
    h->total++;
}

srv_metrics *srv_metrics_new(void) {
    srv_metrics *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    pthread_mutex_init(&m->mu, NULL);
    histo_init(&m->queue, 0.001, N_DUR);
    histo_init(&m->forward, 0.001, N_DUR);
    histo_init(&m->rows, 1, N_ROWS);
    histo_init(&m->tokens, 64, N_TOK);
    return m;
}

static void free_list(labelled *l) {
    while (l) {
        labelled *n = l->next;
        free(l);
        l = n;
    }
}

void srv_metrics_free(srv_metrics *m) {
    if (!m) return;
    free_list(m->requests);
    free_list(m->questions);
    free_list(m->req_dur);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

/* A label value as the Prometheus text format wants it: backslash, double quote and newline
 * escaped; the result is cut (at a character boundary of the escaped text) to fit. */
static const char *esc(const char *in, char *out, size_t n) {
    size_t j = 0;
    for (const char *p = in ? in : ""; *p && j + 3 < n; p++) {
        if (*p == '\\' || *p == '"') {
            out[j++] = '\\';
            out[j++] = *p;
        } else if (*p == '\n') {
            out[j++] = '\\';
            out[j++] = 'n';
        } else {
            out[j++] = *p;
        }
    }
    out[j] = 0;
    return out;
}

static labelled *find(labelled **list, const char *key, int histogram) {
    for (labelled *l = *list; l; l = l->next)
        if (!strcmp(l->key, key)) return l;
    labelled *l = calloc(1, sizeof *l);
    if (!l) return NULL;
    snprintf(l->key, sizeof l->key, "%s", key);
    if (histogram) histo_init(&l->h, 0.001, N_DUR);
    /* append to keep first-seen order stable */
    labelled **p = list;
    while (*p) p = &(*p)->next;
    *p = l;
    return l;
}

void srv_metrics_request(srv_metrics *m, const char *endpoint, int status, double seconds) {
    char key[96], e[64];
    esc(endpoint, e, sizeof e);
    pthread_mutex_lock(&m->mu);
    snprintf(key, sizeof key, "endpoint=\"%s\",status=\"%d\"", e, status);
    labelled *l = find(&m->requests, key, 0);
    if (l) l->count++;
    snprintf(key, sizeof key, "endpoint=\"%s\"", e);
    l = find(&m->req_dur, key, 1);
    if (l) histo_observe(&l->h, seconds);
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_question(srv_metrics *m, const char *type, const char *outcome) {
    char key[96], a[40], b[40];
    snprintf(key, sizeof key, "type=\"%s\",outcome=\"%s\"", esc(type, a, sizeof a), esc(outcome, b, sizeof b));
    pthread_mutex_lock(&m->mu);
    labelled *l = find(&m->questions, key, 0);
    if (l) l->count++;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_input_tokens(srv_metrics *m, int64_t n) {
    pthread_mutex_lock(&m->mu);
    m->input_tokens += (uint64_t)n;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_queue_wait(srv_metrics *m, double seconds) {
    pthread_mutex_lock(&m->mu);
    histo_observe(&m->queue, seconds);
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_forward(srv_metrics *m, int rows, int64_t padded_tokens, double seconds) {
    pthread_mutex_lock(&m->mu);
    histo_observe(&m->forward, seconds);
    histo_observe(&m->rows, rows);
    histo_observe(&m->tokens, (double)padded_tokens);
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_deadline_dropped(srv_metrics *m, int questions) {
    pthread_mutex_lock(&m->mu);
    m->deadline_dropped += (uint64_t)questions;
    pthread_mutex_unlock(&m->mu);
}

static void render_histo(vsr_strbuf *b, const char *name, const char *labels, const histo *h) {
    uint64_t cum = 0;
    const char *sep = labels[0] ? "," : "";
    for (int i = 0; i < h->n; i++) {
        cum += h->counts[i];
        vsr_strbuf_printf(b, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, sep, h->le[i],
                          (unsigned long long)cum);
    }
    cum += h->counts[h->n];
    vsr_strbuf_printf(b, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep,
                      (unsigned long long)cum);
    if (labels[0]) {
        vsr_strbuf_printf(b, "%s_sum{%s} %.9g\n%s_count{%s} %llu\n", name, labels, h->sum, name,
                          labels, (unsigned long long)h->total);
    } else {
        vsr_strbuf_printf(b, "%s_sum %.9g\n%s_count %llu\n", name, h->sum, name,
                          (unsigned long long)h->total);
    }
}

char *srv_metrics_render(srv_metrics *m, const srv_model_gauges *g) {
    vsr_strbuf b = {0};
    char model[1100], rev[300], fam[100], acc[100], dev[100];
    esc(g->model, model, sizeof model);
    esc(g->revision, rev, sizeof rev);
    esc(g->family, fam, sizeof fam);
    esc(g->accelerator, acc, sizeof acc);
    esc(g->device, dev, sizeof dev);
    pthread_mutex_lock(&m->mu);
    vsr_strbuf_printf(
        &b, "# HELP vllm_srun_requests_total Requests answered, by endpoint and HTTP status.\n"
            "# TYPE vllm_srun_requests_total counter\n");
    for (labelled *l = m->requests; l; l = l->next)
        vsr_strbuf_printf(&b, "vllm_srun_requests_total{%s} %llu\n", l->key,
                          (unsigned long long)l->count);
    vsr_strbuf_printf(&b, "# HELP vllm_srun_questions_total Questions, by type and outcome.\n"
                          "# TYPE vllm_srun_questions_total counter\n");
    for (labelled *l = m->questions; l; l = l->next)
        vsr_strbuf_printf(&b, "vllm_srun_questions_total{%s} %llu\n", l->key,
                          (unsigned long long)l->count);
    vsr_strbuf_printf(
        &b,
        "# HELP vllm_srun_input_tokens_total Tokens forwarded.\n"
        "# TYPE vllm_srun_input_tokens_total counter\nvllm_srun_input_tokens_total %llu\n",
        (unsigned long long)m->input_tokens);
    vsr_strbuf_printf(&b, "# HELP vllm_srun_request_duration_seconds Handler time per request.\n"
                          "# TYPE vllm_srun_request_duration_seconds histogram\n");
    for (labelled *l = m->req_dur; l; l = l->next)
        render_histo(&b, "vllm_srun_request_duration_seconds", l->key, &l->h);
    vsr_strbuf_printf(&b,
                      "# HELP vllm_srun_queue_duration_seconds Time a job waited for the model.\n"
                      "# TYPE vllm_srun_queue_duration_seconds histogram\n");
    render_histo(&b, "vllm_srun_queue_duration_seconds", "", &m->queue);
    vsr_strbuf_printf(
        &b, "# HELP vllm_srun_forward_duration_seconds Time of one forward with readout.\n"
            "# TYPE vllm_srun_forward_duration_seconds histogram\n");
    render_histo(&b, "vllm_srun_forward_duration_seconds", "", &m->forward);
    vsr_strbuf_printf(
        &b,
        "# HELP vllm_srun_batch_rows Rows per forward.\n# TYPE vllm_srun_batch_rows histogram\n");
    render_histo(&b, "vllm_srun_batch_rows", "", &m->rows);
    vsr_strbuf_printf(&b, "# HELP vllm_srun_batch_tokens Padded tokens per forward.\n"
                          "# TYPE vllm_srun_batch_tokens histogram\n");
    render_histo(&b, "vllm_srun_batch_tokens", "", &m->tokens);
    vsr_strbuf_printf(
        &b,
        "# HELP vllm_srun_deadline_dropped_questions_total Questions dropped at their deadline.\n"
        "# TYPE vllm_srun_deadline_dropped_questions_total counter\n"
        "vllm_srun_deadline_dropped_questions_total %llu\n",
        (unsigned long long)m->deadline_dropped);
    pthread_mutex_unlock(&m->mu);
    vsr_strbuf_printf(&b,
                      "# HELP vllm_srun_queue_depth Jobs admitted and not yet answered (queued or between forwards).\n# TYPE "
                      "vllm_srun_queue_depth gauge\n"
                      "vllm_srun_queue_depth %d\n",
                      g->queue_depth);
    vsr_strbuf_printf(
        &b,
        "# HELP vllm_srun_ready 1 when every model is ready.\n# TYPE vllm_srun_ready gauge\n"
        "vllm_srun_ready %d\n",
        g->ready);
    vsr_strbuf_printf(
        &b,
        "# HELP vllm_srun_model_memory_bytes Bytes the loaded weights take on the device.\n"
        "# TYPE vllm_srun_model_memory_bytes gauge\n"
        "vllm_srun_model_memory_bytes{model=\"%s\"} %llu\n",
        model, (unsigned long long)g->memory_bytes);
    vsr_strbuf_printf(
        &b,
        "# HELP vllm_srun_model_info The loaded model.\n# TYPE vllm_srun_model_info gauge\n"
        "vllm_srun_model_info{model=\"%s\",revision=\"%s\",family=\"%s\",engine=\"native\","
        "accelerator=\"%s\",device=\"%s\",profile=\"%s\"} 1\n",
        model, rev, fam, acc, dev, g->profile ? g->profile : "exact");
    return vsr_strbuf_take(&b, NULL); /* NULL when out of memory: no half page */
}
