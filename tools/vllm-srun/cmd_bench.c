/* vllm-srun bench: drives a running worker with concurrent /v1/decisions requests.
 *   vllm-srun bench [--host H] [--port P | --uds PATH] [--concurrency 1,8,64] [--requests N]
 *                   [--requests-file FILE.jsonl] [--verify] [--csv FILE]
 * Reports requests/s, p50/p95/p99 latency and the Server-Timing phases per level.
 * --verify first sends every distinct request alone, then checks that every
 * concurrent answer is 200 with an identical body, or 429 (overloaded). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "args.h"
#include "commands.h"
#include "http_client.h"
#include "vsr/decision.h"

typedef struct bench_req {
    char *body;
    size_t len;
    char *expected; /* --verify: the body answered alone */
} bench_req;

typedef struct sample {
    double latency_ms;
    double phase[7]; /* parse tokenize queue forward post serialize total */
    int status;
} sample;

typedef struct bench_run {
    const char *host, *uds;
    int port;
    bench_req *reqs;
    int n_reqs;
    int total;
    int next;
    pthread_mutex_t mu;
    sample *samples;
    int n_ok, n_429, n_err, n_mismatch;
    char first_error[512];
    int verify;
} bench_run;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static const char *const phase_names[7] = {"parse", "tokenize", "queue", "forward", "post", "serialize", "total"};

static void parse_timing(const char *s, double *ph) {
    for (int i = 0; i < 7; i++) {
        char key[32];
        snprintf(key, sizeof key, "%s;dur=", phase_names[i]);
        const char *p = strstr(s, key);
        ph[i] = p ? atof(p + strlen(key)) : NAN;
    }
}

static void *client_main(void *arg) {
    bench_run *b = arg;
    http_conn c;
    http_conn_init(&c, b->host, b->port, b->uds);
    for (;;) {
        pthread_mutex_lock(&b->mu);
        int i = b->next++;
        pthread_mutex_unlock(&b->mu);
        if (i >= b->total) break;
        bench_req *rq = &b->reqs[i % b->n_reqs];
        http_response r;
        char err[256];
        double t0 = now_ms();
        int rc = http_request(&c, "POST", "/v1/decisions", rq->body, rq->len, &r, err, sizeof err);
        double t1 = now_ms();
        sample *s = &b->samples[i];
        s->latency_ms = t1 - t0;
        s->status = rc == 0 ? r.status : -1;
        parse_timing(rc == 0 ? r.server_timing : "", s->phase);
        pthread_mutex_lock(&b->mu);
        if (rc != 0) {
            b->n_err++;
            if (!b->first_error[0]) snprintf(b->first_error, sizeof b->first_error, "request %d: %s", i, err);
        } else if (r.status == 200) {
            b->n_ok++;
            if (b->verify && rq->expected && strcmp(rq->expected, r.body)) {
                b->n_mismatch++;
                if (!b->first_error[0])
                    snprintf(b->first_error, sizeof b->first_error,
                             "request %d: the answer differs from the same request sent alone", i);
            }
        } else if (r.status == 429) {
            b->n_429++;
        } else {
            b->n_err++;
            if (!b->first_error[0])
                snprintf(b->first_error, sizeof b->first_error, "request %d: HTTP %d %.300s", i, r.status, r.body);
        }
        pthread_mutex_unlock(&b->mu);
        if (rc == 0) http_response_free(&r);
    }
    http_conn_close(&c);
    return NULL;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(const double *v, int n, double p) {
    if (n == 0) return NAN;
    int i = (int)ceil(p / 100.0 * n) - 1;
    if (i < 0) i = 0;
    if (i >= n) i = n - 1;
    return v[i];
}

static int load_requests(const char *path, bench_req **out) {
    if (!path) {
        bench_req *r = calloc(1, sizeof *r);
        r->body = strdup(vsr_golden_request());
        r->len = strlen(r->body);
        *out = r;
        return 1;
    }
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int n = 0, cap = 16;
    bench_req *r = calloc((size_t)cap, sizeof *r);
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    while ((len = getline(&line, &lcap, f)) > 0) {
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (!len) continue;
        if (n == cap) r = realloc(r, sizeof *r * (size_t)(cap *= 2));
        r[n].body = strdup(line);
        r[n].len = (size_t)len;
        r[n].expected = NULL;
        n++;
    }
    free(line);
    fclose(f);
    *out = r;
    return n;
}

int cmd_bench(int argc, char **argv) {
    const char *host = "127.0.0.1", *uds = NULL, *levels = "1,8,64", *file = NULL, *csv = NULL, *v;
    long long port = 8100, requests = 200;
    int verify = 0;
    for (int i = 1; i < argc; i++) {
        int r;
        if (!strcmp(argv[i], "--verify")) {
            verify = 1;
            continue;
        }
        if ((r = arg_value(argc, argv, &i, "--host", &host)) || (r = arg_value(argc, argv, &i, "--uds", &uds)) ||
            (r = arg_value(argc, argv, &i, "--concurrency", &levels)) ||
            (r = arg_value(argc, argv, &i, "--requests-file", &file)) ||
            (r = arg_value(argc, argv, &i, "--csv", &csv))) {
            if (r < 0) return 2;
            continue;
        }
        if ((r = arg_value(argc, argv, &i, "--port", &v))) {
            if (r < 0 || !arg_int("vllm-srun bench", "--port", v, 1, 65535, &port)) return 2;
            continue;
        }
        if ((r = arg_value(argc, argv, &i, "--requests", &v))) {
            if (r < 0 || !arg_int("vllm-srun bench", "--requests", v, 1, 100000000, &requests)) return 2;
            continue;
        }
        fprintf(stderr, "usage: vllm-srun bench [--host H] [--port P | --uds PATH] [--concurrency 1,8,64]\n"
                        "         [--requests N] [--requests-file FILE.jsonl] [--verify] [--csv FILE]\n");
        return 2;
    }
    bench_req *reqs = NULL;
    int n_reqs = load_requests(file, &reqs);
    if (n_reqs <= 0) {
        fprintf(stderr, "vllm-srun bench: cannot read requests from %s\n", file);
        return 2;
    }
    if (verify) { /* every distinct request alone first */
        http_conn c;
        http_conn_init(&c, host, (int)port, uds);
        for (int i = 0; i < n_reqs; i++) {
            http_response r;
            char err[256];
            if (http_request(&c, "POST", "/v1/decisions", reqs[i].body, reqs[i].len, &r, err, sizeof err) != 0) {
                fprintf(stderr, "vllm-srun bench: %s\n", err);
                return 1;
            }
            if (r.status != 200) {
                fprintf(stderr, "vllm-srun bench: request %d alone: HTTP %d %s\n", i, r.status, r.body);
                http_response_free(&r);
                return 1;
            }
            reqs[i].expected = r.body;
        }
        http_conn_close(&c);
    }
    FILE *cf = csv ? fopen(csv, "w") : NULL;
    if (cf)
        fprintf(cf, "concurrency,requests,ok,overloaded,errors,rps,p50_ms,p95_ms,p99_ms,parse_ms,tokenize_ms,"
                    "queue_ms,forward_ms,post_ms,serialize_ms,total_ms,overhead_p50_ms\n");
    printf("%6s %7s %6s %6s %6s %9s %8s %8s %8s | %s\n", "conc", "reqs", "ok", "429", "err", "req/s", "p50 ms",
           "p95 ms", "p99 ms", "mean Server-Timing ms: parse tokenize queue forward post serialize total; overhead p50 (latency-queue-forward)");
    int failed = 0;
    char *save = NULL, *lv = strdup(levels);
    for (char *tok = strtok_r(lv, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int conc = atoi(tok);
        if (conc < 1) continue;
        bench_run b = {.host = host, .uds = uds, .port = (int)port, .reqs = reqs, .n_reqs = n_reqs,
                       .total = (int)requests, .verify = verify};
        pthread_mutex_init(&b.mu, NULL);
        b.samples = calloc((size_t)requests, sizeof *b.samples);
        pthread_t *t = calloc((size_t)conc, sizeof *t);
        double t0 = now_ms();
        for (int i = 0; i < conc; i++) pthread_create(&t[i], NULL, client_main, &b);
        for (int i = 0; i < conc; i++) pthread_join(t[i], NULL);
        double wall = now_ms() - t0;
        double *lat = malloc(sizeof(double) * (size_t)requests), *ovh = malloc(sizeof(double) * (size_t)requests);
        double mean[7] = {0};
        int n = 0;
        for (int i = 0; i < requests; i++)
            if (b.samples[i].status == 200) {
                lat[n] = b.samples[i].latency_ms;
                /* what HTTP, JSON and tokenizing add: latency minus waiting and forwards */
                ovh[n] = b.samples[i].latency_ms - b.samples[i].phase[2] - b.samples[i].phase[3];
                for (int p = 0; p < 7; p++) mean[p] += b.samples[i].phase[p];
                n++;
            }
        for (int p = 0; p < 7; p++) mean[p] = n ? mean[p] / n : NAN;
        qsort(lat, (size_t)n, sizeof *lat, cmp_double);
        qsort(ovh, (size_t)n, sizeof *ovh, cmp_double);
        double rps = requests / (wall / 1e3);
        printf("%6d %7lld %6d %6d %6d %9.1f %8.2f %8.2f %8.2f | %.3f %.3f %.3f %.3f %.3f %.3f %.3f; %.3f\n", conc,
               requests, b.n_ok, b.n_429, b.n_err, rps, pct(lat, n, 50), pct(lat, n, 95), pct(lat, n, 99), mean[0],
               mean[1], mean[2], mean[3], mean[4], mean[5], mean[6], pct(ovh, n, 50));
        if (cf)
            fprintf(cf, "%d,%lld,%d,%d,%d,%.2f,%.3f,%.3f,%.3f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f\n", conc,
                    requests, b.n_ok, b.n_429, b.n_err, rps, pct(lat, n, 50), pct(lat, n, 95), pct(lat, n, 99),
                    mean[0], mean[1], mean[2], mean[3], mean[4], mean[5], mean[6], pct(ovh, n, 50));
        if (b.n_err || b.n_mismatch) {
            failed = 1;
            fprintf(stderr, "vllm-srun bench: concurrency %d: %d errors, %d answers differ from the same request "
                            "alone; first: %s\n", conc, b.n_err, b.n_mismatch, b.first_error);
        }
        if (verify)
            printf("verify: concurrency %d: %d of %lld answered 200 identical to the request alone, %d answered 429, "
                   "%d errors, %d mismatches\n", conc, b.n_ok - b.n_mismatch, requests, b.n_429, b.n_err,
                   b.n_mismatch);
        free(lat);
        free(ovh);
        free(t);
        free(b.samples);
        pthread_mutex_destroy(&b.mu);
    }
    free(lv);
    if (cf) fclose(cf);
    for (int i = 0; i < n_reqs; i++) {
        free(reqs[i].body);
        free(reqs[i].expected);
    }
    free(reqs);
    return failed;
}
