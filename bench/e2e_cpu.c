/* bench/e2e_cpu.c: end-to-end CPU latency of Decision 3.0 requests (issue 3, "Speed").
 *
 *   build/bench/e2e_cpu PKG [--threads N] [--warmup W] [--runs N] [--json OUT.json]
 *                           [--only golden|q8x512]
 *
 * Loads PKG through the engine exactly as `serve`/`decide` do (prepare, load: manifest
 * verify, map, model, decider), then for two requests
 *   golden:  vsr_golden_request() (3 questions, one forward of 3 rows)
 *   q8x512:  8 questions over a state of ~512 tokens (one forward of 8 rows)
 * parses them with vsr_decision_parse (real validation, prompt rendering, tokenization)
 * and times vsr_decision_run: W warm-up runs, then N timed runs; prints min / median / max.
 * The token ids of every row and our answer probabilities go to --json, so
 * bench/e2e_cpu_torch.py runs the same inputs in transformers and checks it did the same
 * work. Benchmark only: no assertion here beyond "the request ran". */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "decision/decision_impl.h" /* rows' token ids and probabilities (internal, read-only) */
#include "vsr/engine.h"

#define STATE_TOKENS 512

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* A routing-style state of exactly STATE_TOKENS tokens: varied English (so BPE does real
 * work), cut at a token boundary and decoded back (ASCII, so the cut is clean). */
static char *make_state(const vsr_tokenizer *tok, vsr_err *err) {
    static const char *const sent[] = {
        "The user asks for a detailed comparison of three database engines under write-heavy load. ",
        "They mention that latency spikes appear every few minutes when compaction runs. ",
        "A previous answer suggested tuning the memtable size, which did not help. ",
        "The service runs on 12 nodes with 64 GB of memory each and NVMe disks. ",
        "Please explain the trade-offs, give concrete settings, and estimate the cost. ",
        "Include a short Python script that replays the workload from a CSV trace. ",
        "The team also wants to know whether switching to a log-structured design is worth it. ",
        "Budget is limited, and the migration must finish within two quarters. ",
    };
    size_t cap = 16384, n = 0;
    char *buf = malloc(cap);
    if (!buf) return NULL;
    buf[0] = 0;
    for (int i = 0; n + 200 < cap && i < 64; i++) {
        const char *s = sent[(i * 5 + i / 8) % 8];
        memcpy(buf + n, s, strlen(s) + 1);
        n += strlen(s);
    }
    int32_t *ids = NULL;
    size_t nid = 0;
    if (vsr_tokenizer_encode(tok, buf, n, &ids, &nid, err)) {
        free(buf);
        return NULL;
    }
    free(buf);
    char *text = NULL;
    size_t tl = 0;
    if (nid < STATE_TOKENS) {
        vsr_err_set(err, VSR_E_INTERNAL, "state text has only %zu tokens", nid);
        free(ids);
        return NULL;
    }
    vsr_status st = vsr_tokenizer_decode(tok, ids, STATE_TOKENS, &text, &tl, err);
    free(ids);
    return st ? NULL : text;
}

/* 8 questions of the three types, as a client would send them. */
static char *make_q8_request(const char *state) {
    json_t *q = json_object();
    static const char *const choice_ins[] = {"Which domain does this request belong to?",
                                             "Which model tier should answer it?",
                                             "Which tool is needed first?"};
    for (int i = 0; i < 8; i++) {
        char id[32];
        snprintf(id, sizeof id, "q%d", i);
        json_t *o;
        if (i % 3 == 0)
            o = json_pack("{s:s,s:s,s:{s:s,s:s,s:s,s:s}}", "type", "choice", "instructions", choice_ins[i / 3],
                          "criteria", "code", "Programming", "math", "Mathematics", "data", "Databases",
                          "other", "Anything else");
        else if (i % 3 == 1)
            o = json_pack("{s:s,s:s}", "type", "noul", "instructions",
                          i == 1 ? "Does answering this request need multi-step reasoning?"
                                 : "Is the request safe to answer without review?");
        else
            o = json_pack("{s:s,s:s,s:[s,s,s,s,s]}", "type", "score", "instructions",
                          "How difficult is this request?", "criteria", "Trivial", "Easy", "Moderate", "Hard",
                          "Expert");
        if (!o) { /* a format error here would silently drop a question */
            json_decref(q);
            return NULL;
        }
        json_object_set_new(q, id, o);
    }
    json_t *body = json_pack("{s:s,s:o}", "state", state, "questions", q);
    char *s = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    return s;
}

typedef struct fwd_acc {
    double seconds;
    int forwards;
    int64_t padded;
} fwd_acc;

static void on_fwd(void *ctx, int rows, int64_t padded, double seconds) {
    (void)rows;
    fwd_acc *a = ctx;
    a->seconds += seconds, a->forwards++, a->padded += padded;
}

static json_t *bench_request(vsr_engine *e, const char *name, const char *body, int warmup, int runs) {
    vsr_http_error he = {0};
    vsr_err err = {0};
    vsr_decision_job *j = vsr_decision_parse(e->decider, body, strlen(body), NULL, &he);
    if (!j) {
        fprintf(stderr, "e2e_cpu: %s refused: HTTP %d %s\n", name, he.status, he.message);
        return NULL;
    }
    const d3_request *rq = &j->req[0];
    for (int i = 0; i < rq->n_q; i++)
        if (rq->q[i].err_code) {
            fprintf(stderr, "e2e_cpu: %s question %s: %s\n", name, rq->q[i].id, rq->q[i].err_msg);
            vsr_decision_free(j);
            return NULL;
        }
    double *t = calloc((size_t)runs, sizeof *t), *tf = calloc((size_t)runs, sizeof *tf);
    fwd_acc acc = {0};
    for (int r = 0; r < warmup + runs; r++) {
        acc = (fwd_acc){0};
        double t0 = now_s();
        if (vsr_decision_run(e->decider, j, NULL, on_fwd, &acc, &err) != VSR_OK) {
            fprintf(stderr, "e2e_cpu: %s: %s\n", name, err.msg);
            free(t), free(tf);
            vsr_decision_free(j);
            return NULL;
        }
        if (r >= warmup) t[r - warmup] = (now_s() - t0) * 1e3, tf[r - warmup] = acc.seconds * 1e3;
    }
    json_t *times = json_array();
    for (int r = 0; r < runs; r++) json_array_append_new(times, json_real(t[r]));
    qsort(t, (size_t)runs, sizeof *t, cmp_d);
    qsort(tf, (size_t)runs, sizeof *tf, cmp_d);
    int64_t real = 0;
    json_t *rows = json_array();
    for (int i = 0; i < rq->n_q; i++) {
        const d3_question *q = &rq->q[i];
        json_t *ids = json_array(), *pr = json_array();
        for (size_t k = 0; k < q->n_ids; k++) json_array_append_new(ids, json_integer(q->ids[k]));
        for (int k = 0; k < q->n_opt; k++) json_array_append_new(pr, json_real(q->probs[k]));
        json_array_append_new(rows, json_pack("{s:s,s:i,s:o,s:o}", "id", q->id, "n_opt", q->n_opt, "ids", ids,
                                              "probs", pr));
        real += (int64_t)q->n_ids;
    }
    printf("%-8s rows %d  tokens %lld (padded %lld, %d forward%s)  ms: min %.1f  median %.1f  max %.1f"
           "  (forward median %.1f)\n",
           name, rq->n_q, (long long)real, (long long)acc.padded, acc.forwards, acc.forwards == 1 ? "" : "s", t[0],
           t[runs / 2], t[runs - 1], tf[runs / 2]);
    fflush(stdout);
    json_t *out = json_pack("{s:s,s:i,s:I,s:I,s:o,s:f,s:f,s:f,s:o}", "name", name, "forwards", acc.forwards,
                            "tokens", (json_int_t)real, "padded_tokens", (json_int_t)acc.padded, "times_ms", times,
                            "min_ms", t[0], "median_ms", t[runs / 2], "max_ms", t[runs - 1], "rows", rows);
    free(t), free(tf);
    vsr_decision_free(j);
    return out;
}

int main(int argc, char **argv) {
    const char *pkg = NULL, *json_out = NULL, *only = NULL;
    int threads = 0, warmup = 1, runs = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warmup") && i + 1 < argc) warmup = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc) runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json") && i + 1 < argc) json_out = argv[++i];
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else if (argv[i][0] != '-' && !pkg) pkg = argv[i];
        else {
            fprintf(stderr, "usage: e2e_cpu PKG [--threads N] [--warmup W] [--runs N] [--json OUT] "
                            "[--only golden|q8x512]\n");
            return 2;
        }
    }
    if (!pkg || runs < 1 || warmup < 0) {
        fprintf(stderr, "usage: e2e_cpu PKG [--threads N] [--warmup W] [--runs N] [--json OUT]\n");
        return 2;
    }
    vsr_engine e;
    vsr_engine_opts o = {.model = pkg, .device = "cpu", .dtype = "auto", .threads = threads};
    vsr_err err = {0};
    double t0 = now_s();
    if (vsr_engine_prepare(&e, &o, &err) != VSR_OK || vsr_engine_load(&e, &o, &err) != VSR_OK) {
        fprintf(stderr, "e2e_cpu: %s\n", err.msg);
        vsr_engine_close(&e);
        return 1;
    }
    printf("package %s: %.2f GB of weights, loaded (with manifest verify) in %.1f s; %d threads\n", pkg,
           vsr_model_memory_bytes(e.model) / 1e9, now_s() - t0, threads);
    int rc = 1;
    char *state = NULL, *q8 = NULL;
    json_t *reqs = json_array();
    if (!only || !strcmp(only, "golden")) {
        json_t *r = bench_request(&e, "golden", vsr_golden_request(), warmup, runs);
        if (!r) goto out;
        json_array_append_new(reqs, r);
    }
    if (!only || !strcmp(only, "q8x512")) {
        if (!(state = make_state(vsr_decider_tokenizer(e.decider), &err))) {
            fprintf(stderr, "e2e_cpu: state: %s\n", err.msg);
            goto out;
        }
        if (!(q8 = make_q8_request(state))) {
            fprintf(stderr, "e2e_cpu: cannot build the 8-question request\n");
            goto out;
        }
        json_t *r = bench_request(&e, "q8x512", q8, warmup, runs);
        if (!r) goto out;
        json_array_append_new(reqs, r);
    }
    if (json_out) {
        json_t *doc = json_pack("{s:s,s:i,s:i,s:i,s:f,s:O}", "package", pkg, "threads", threads, "warmup", warmup,
                                "runs", runs, "temperature", e.decider->temperature, "requests", reqs);
        if (json_dump_file(doc, json_out, JSON_COMPACT)) {
            fprintf(stderr, "e2e_cpu: cannot write %s\n", json_out);
            json_decref(doc);
            goto out;
        }
        json_decref(doc);
    }
    rc = 0;
out:
    json_decref(reqs);
    free(state);
    free(q8);
    vsr_engine_close(&e);
    return rc;
}
