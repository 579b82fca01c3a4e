/* Running a parsed decision job's forwards, one forward at a time, so that the scheduler
 * (src/server/worker.c) can interleave the forwards of several jobs, check deadlines and
 * cancellation between them, and (under a coalescing profile) put rows of several jobs in one
 * forward. vsr_decision_run is the loop over one job that the CLI and the golden check use. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "decision/decision_impl.h"

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Flattens the valid questions into j->rows (once). */
static bool ensure_rows(vsr_decision_job *j) {
    if (j->rows) return true;
    int n = 0;
    for (int r = 0; r < j->n_req; r++)
        for (int i = 0; i < j->req[r].n_q; i++) n += j->req[r].q[i].err_code == NULL;
    size_t cap = (size_t)(n ? n : 1);
    j->rows = malloc(sizeof *j->rows * cap);
    j->row_req = malloc(sizeof *j->row_req * cap);
    j->row_ord = malloc(sizeof *j->row_ord * cap);
    if (!j->rows || !j->row_req || !j->row_ord) {
        free(j->rows), free(j->row_req), free(j->row_ord);
        j->rows = NULL, j->row_req = j->row_ord = NULL;
        return false;
    }
    int k = 0;
    for (int r = 0; r < j->n_req; r++) {
        int ord = 0;
        for (int i = 0; i < j->req[r].n_q; i++)
            if (!j->req[r].q[i].err_code) {
                j->rows[k] = &j->req[r].q[i];
                j->row_req[k] = r;
                j->row_ord[k++] = ord++;
            }
    }
    j->n_rows = n;
    j->next = 0;
    return true;
}

/* A row is done once answered or failed (a deadline or cancellation marks it failed). */
static bool row_done(const d3_question *q) { return q->answered || q->err_code; }

static void advance(vsr_decision_job *j) {
    while (j->next < j->n_rows && row_done(j->rows[j->next])) j->next++;
}

int vsr_decision_rows_left(vsr_decision_job *j) {
    if (!ensure_rows(j)) return -1;
    advance(j);
    int n = 0;
    for (int k = j->next; k < j->n_rows; k++) n += !row_done(j->rows[k]);
    return n;
}

int vsr_decision_next_forward(vsr_decision_job *j, vsr_row_ref *out) {
    if (!ensure_rows(j)) return -1;
    advance(j);
    int n = 0;
    for (int k = j->next; k < j->n_rows && n < VSR_D3_ROWS_PER_FORWARD; k++) {
        if (row_done(j->rows[k])) continue;
        /* one request's rows, 8 of them per forward counted from that request's first row */
        if (n && (j->row_req[k] != j->row_req[out[0].row] || j->row_ord[k] % VSR_D3_ROWS_PER_FORWARD == 0)) break;
        out[n++] = (vsr_row_ref){j, k};
    }
    return n;
}

int vsr_decision_pending(vsr_decision_job *j, vsr_row_ref *out, int max) {
    if (!ensure_rows(j)) return -1;
    advance(j);
    int n = 0;
    for (int k = j->next; k < j->n_rows && n < max; k++)
        if (!row_done(j->rows[k])) out[n++] = (vsr_row_ref){j, k};
    return n;
}

int64_t vsr_decision_row_tokens(const vsr_row_ref *r) { return (int64_t)r->job->rows[r->row]->n_ids; }

const char *vsr_decision_profile(const vsr_decision_job *j) { return j->profile; }

vsr_status vsr_decision_forward(vsr_decider *d, const vsr_row_ref *rows, int n, vsr_forward_cb on_forward,
                                void *cb_ctx, vsr_err *err) {
    if (n < 1) return vsr_err_set(err, VSR_E_INVALID, "forward: no rows");
    int64_t hidden = vsr_model_hidden_size(d->model);
    float *hbuf = malloc(sizeof(float) * (size_t)hidden * (size_t)n);
    float *logits = malloc(sizeof(float) * VSR_D3_CODES * (size_t)n);
    const int32_t **ids = calloc((size_t)n, sizeof *ids);
    int32_t **own = calloc((size_t)n, sizeof *own);
    int *lens = malloc(sizeof *lens * (size_t)n);
    vsr_status st = VSR_OK;
    int maxlen = 0;
    if (!hbuf || !logits || !ids || !own || !lens) {
        st = vsr_err_set(err, VSR_E_NOMEM, "out of memory for a forward of %d rows of hidden size %lld", n,
                         (long long)hidden);
        goto out;
    }
    for (int b = 0; b < n && st == VSR_OK; b++) {
        const d3_question *q = rows[b].job->rows[rows[b].row];
        /* head + tail of this row, for this forward only */
        if (!(own[b] = d3_question_ids(q)))
            st = vsr_err_set(err, VSR_E_NOMEM, "out of memory for a row of %zu tokens", q->n_ids);
        ids[b] = own[b];
        lens[b] = (int)q->n_ids;
        if (lens[b] > maxlen) maxlen = lens[b];
    }
    double t0 = now_seconds();
    if (st == VSR_OK) st = vsr_model_forward_last(d->model, n, ids, lens, hbuf, logits, err);
    if (on_forward) on_forward(cb_ctx, n, (int64_t)n * maxlen, now_seconds() - t0);
    for (int b = 0; b < n && st == VSR_OK; b++) {
        d3_question *q = rows[b].job->rows[rows[b].row];
        if (!d3_probs_from_logits(logits + (size_t)b * VSR_D3_CODES, q->n_opt, d->temperature, q->probs))
            st = vsr_err_set(err, VSR_E_INTERNAL, "the model produced a non-finite number");
        else
            q->answered = true;
    }
out:
    if (own)
        for (int b = 0; b < n; b++) free(own[b]);
    free(own);
    free(ids);
    free(lens);
    free(hbuf);
    free(logits);
    return st;
}

vsr_status vsr_decision_run(vsr_decider *d, vsr_decision_job *j, const volatile int *cancel,
                            vsr_forward_cb on_forward, void *cb_ctx, vsr_err *err) {
    /* Each request (the main one, then each `states` entry: the reference answers them as
     * separate requests) forwards its own rows, 8 at a time: positions run 0..L-1 over a
     * forward's padded length, so which rows share a forward changes the answers. */
    vsr_row_ref rows[VSR_D3_ROWS_PER_FORWARD];
    for (;;) {
        int n = vsr_decision_next_forward(j, rows);
        if (n < 0) return vsr_err_set(err, VSR_E_NOMEM, "out of memory");
        if (n == 0) return VSR_OK;
        if (cancel && __atomic_load_n(cancel, __ATOMIC_RELAXED))
            return vsr_err_set(err, VSR_E_INVALID, "cancelled: the client went away");
        vsr_status st = vsr_decision_forward(d, rows, n, on_forward, cb_ctx, err);
        if (st != VSR_OK) return st;
    }
}

void vsr_decider_set_profile(vsr_decider *d, const char *profile) {
    snprintf(d->served_profile, sizeof d->served_profile, "%s", profile && strcmp(profile, "exact") ? profile : "");
}

void vsr_decision_set_owner(vsr_decision_job *j, void *owner) { j->owner = owner; }
void *vsr_decision_job_owner(const vsr_decision_job *j) { return j->owner; }
