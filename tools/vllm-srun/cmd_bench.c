/* vllm-srun bench: drives a running worker with concurrent /v1/decisions requests.
 *   vllm-srun bench [--host H] [--port P | --uds PATH] [--concurrency 1,8,64] [--requests N]
 *                   [--requests-file FILE.jsonl] [--verify] [--csv FILE]
 *                   [--sla-ms S [--max-concurrency M] [--variant NAME] [--eval FILE.json]]
 *                   [--profile NAME] [--latencies FILE.csv]
 * --profile sets options.profile in every request; --latencies writes every request's
 * (concurrency, request index, status, latency, queue, forward) for latency CDFs.
 * Reports requests/s, p50/p95/p99 latency and the Server-Timing phases per level, and from the
 * worker's /metrics before and after each level: the share of its wall time spent in forwards,
 * the forwards run and their mean rows (how well batching fills the device).
 * --sla-ms searches the largest concurrency whose p95 stays at or under S ms with no error and
 * no 429 (doubling from 1, then bisecting), and prints the load-test table row: variant, device,
 * max concurrency at SLA, its p95 and requests/s, and the eval agreement `compare --json` wrote.
 * --verify first sends every distinct request alone, then checks that every
 * concurrent answer is 200 with an identical body, or 429 (overloaded). */
#include <math.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "common/cli.h"
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

/* --profile: options.profile = NAME in every request body. */
static int set_profile(bench_req *reqs, int n, const char *profile) {
    for (int i = 0; i < n; i++) {
        json_error_t je;
        json_t *o = json_loadb(reqs[i].body, reqs[i].len, 0, &je);
        if (!json_is_object(o)) {
            fprintf(stderr, "vllm-srun bench: --profile: request %d is not a JSON object (%s)\n", i, je.text);
            json_decref(o);
            return 1;
        }
        json_t *opt = json_object_get(o, "options");
        if (!json_is_object(opt)) json_object_set_new(o, "options", opt = json_object());
        json_object_set_new(opt, "profile", json_string(profile));
        char *b = json_dumps(o, JSON_COMPACT);
        json_decref(o);
        if (!b) return 1;
        free(reqs[i].body);
        reqs[i].body = b;
        reqs[i].len = strlen(b);
    }
    return 0;
}

typedef struct bench_cfg {
    const char *host, *uds;
    int port;
    bench_req *reqs;
    int n_reqs;
    long long requests;
    int verify;
    FILE *lat_csv; /* --latencies, or NULL */
} bench_cfg;

/* The worker's forward counters (/metrics): seconds in forwards, forwards, rows. A level's
 * difference over its wall time is the share of it the device spent in forwards: what batching
 * and the scheduler leave idle between forwards, and how many rows each forward carried. */
typedef struct fwd_counters {
    double seconds, forwards, rows;
    bool ok;
} fwd_counters;

static double metric_value(const char *page, const char *name) {
    size_t n = strlen(name);
    for (const char *p = page; (p = strstr(p, name)); p += n)
        if ((p == page || p[-1] == '\n') && (p[n] == ' ' || p[n] == '{')) {
            const char *v = strchr(p, ' ');
            return v ? atof(v + 1) : NAN;
        }
    return NAN;
}

static fwd_counters scrape_forwards(const bench_cfg *g) {
    fwd_counters f = {0};
    http_conn c;
    http_conn_init(&c, g->host, g->port, g->uds);
    http_response r = {0};
    char err[256];
    if (http_request(&c, "GET", "/metrics", NULL, 0, &r, err, sizeof err) == 0 && r.status == 200) {
        f.seconds = metric_value(r.body, "vllm_srun_forward_duration_seconds_sum");
        f.forwards = metric_value(r.body, "vllm_srun_forward_duration_seconds_count");
        f.rows = metric_value(r.body, "vllm_srun_batch_rows_sum");
        f.ok = !isnan(f.seconds) && !isnan(f.forwards) && !isnan(f.rows);
    }
    http_response_free(&r);
    http_conn_close(&c);
    return f;
}

typedef struct level_result {
    int conc, n_ok, n_429, n_err, n_mismatch;
    double p95, rps;
} level_result;

/* Runs one concurrency level, prints its row (and CSV row); returns 1 on errors or mismatches. */
static int run_level(const bench_cfg *g, int conc, FILE *cf, level_result *out) {
    long long requests = g->requests;
    int verify = g->verify, failed = 0;
    bench_run b = {.host = g->host, .uds = g->uds, .port = g->port, .reqs = g->reqs, .n_reqs = g->n_reqs,
                   .total = (int)requests, .verify = verify};
    pthread_mutex_init(&b.mu, NULL);
    b.samples = calloc((size_t)requests, sizeof *b.samples);
    pthread_t *t = calloc((size_t)conc, sizeof *t);
    fwd_counters f0 = scrape_forwards(g);
    double t0 = now_ms();
    for (int i = 0; i < conc; i++) pthread_create(&t[i], NULL, client_main, &b);
    for (int i = 0; i < conc; i++) pthread_join(t[i], NULL);
    double wall = now_ms() - t0;
    fwd_counters f1 = scrape_forwards(g);
    /* NAN where /metrics could not be read (an older worker, or a router in front) */
    double fwds = f0.ok && f1.ok ? f1.forwards - f0.forwards : NAN;
    double busy = f0.ok && f1.ok ? 100.0 * (f1.seconds - f0.seconds) / (wall / 1e3) : NAN;
    double rows_per = fwds > 0 ? (f1.rows - f0.rows) / fwds : NAN;
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
    if (g->lat_csv)
        for (int i = 0; i < requests; i++)
            fprintf(g->lat_csv, "%d,%d,%d,%.3f,%.3f,%.3f\n", conc, i, b.samples[i].status, b.samples[i].latency_ms,
                    b.samples[i].phase[2], b.samples[i].phase[3]);
    printf("%6d %7lld %6d %6d %6d %9.1f %8.2f %8.2f %8.2f | %.3f %.3f %.3f %.3f %.3f %.3f %.3f; %.3f | %.0f %.0f %.1f\n",
           conc, requests, b.n_ok, b.n_429, b.n_err, rps, pct(lat, n, 50), pct(lat, n, 95), pct(lat, n, 99),
           mean[0], mean[1], mean[2], mean[3], mean[4], mean[5], mean[6], pct(ovh, n, 50), busy, fwds, rows_per);
    if (cf)
        fprintf(cf, "%d,%lld,%d,%d,%d,%.2f,%.3f,%.3f,%.3f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.1f,%.0f,%.2f\n",
                conc, requests, b.n_ok, b.n_429, b.n_err, rps, pct(lat, n, 50), pct(lat, n, 95), pct(lat, n, 99),
                mean[0], mean[1], mean[2], mean[3], mean[4], mean[5], mean[6], pct(ovh, n, 50), busy, fwds, rows_per);
    if (b.n_err || b.n_mismatch) {
        failed = 1;
        fprintf(stderr, "vllm-srun bench: concurrency %d: %d errors, %d answers differ from the same request "
                        "alone; first: %s\n", conc, b.n_err, b.n_mismatch, b.first_error);
    }
    if (verify)
        printf("verify: concurrency %d: %d of %lld answered 200 identical to the request alone, %d answered 429, "
               "%d errors, %d mismatches\n", conc, b.n_ok - b.n_mismatch, requests, b.n_429, b.n_err,
               b.n_mismatch);
    *out = (level_result){.conc = conc, .n_ok = b.n_ok, .n_429 = b.n_429, .n_err = b.n_err,
                          .n_mismatch = b.n_mismatch, .p95 = pct(lat, n, 95), .rps = rps};
    free(lat);
    free(ovh);
    free(t);
    free(b.samples);
    pthread_mutex_destroy(&b.mu);
    return failed;
}

/* The eval column from `compare --json`: "agreement (flips of questions)". */
static int read_eval(const char *path, char *cell, size_t n) {
    json_error_t je;
    json_t *o = json_load_file(path, 0, &je);
    json_t *ag = o ? json_object_get(o, "agreement") : NULL;
    json_t *fl = o ? json_object_get(o, "flips") : NULL, *q = o ? json_object_get(o, "questions") : NULL;
    if (!json_is_number(ag) || !json_is_integer(fl) || !json_is_integer(q)) {
        fprintf(stderr, "vllm-srun bench: --eval %s: %s\n", path,
                o ? "not a `vllm-srun compare --json` summary (agreement, flips, questions)" : je.text);
        json_decref(o);
        return 1;
    }
    snprintf(cell, n, "%.4f agreement (%lld flips of %lld)", json_number_value(ag), (long long)json_integer_value(fl),
             (long long)json_integer_value(q));
    json_decref(o);
    return 0;
}

/* Variant and device from the worker's /v1/models ("id (scheme)", "device_name (device)"). */
static void model_card(const bench_cfg *g, char *variant, size_t vn, char *device, size_t dn) {
    snprintf(variant, vn, "?");
    snprintf(device, dn, "?");
    http_conn c;
    http_conn_init(&c, g->host, g->port, g->uds);
    http_response r;
    char err[256];
    if (http_request(&c, "GET", "/v1/models", NULL, 0, &r, err, sizeof err) == 0) {
        json_t *o = r.status == 200 ? json_loads(r.body, 0, NULL) : NULL;
        json_t *card = json_array_get(json_object_get(o, "data"), 0);
        const char *id = json_string_value(json_object_get(card, "id"));
        const char *sch = json_string_value(json_object_get(json_object_get(card, "quantization"), "scheme"));
        const char *dev = json_string_value(json_object_get(card, "device"));
        const char *dname = json_string_value(json_object_get(card, "device_name"));
        if (id) snprintf(variant, vn, "%s (%s)", id, sch ? sch : "?");
        if (dev) snprintf(device, dn, "%s (%s)", dname ? dname : dev, dev);
        json_decref(o);
        http_response_free(&r);
    }
    http_conn_close(&c);
}

/* A level meets the SLA: every request answered 200 (no 429, no error) with p95 <= sla. */
static bool meets(const level_result *r, long long requests, double sla) {
    return r->n_ok == requests && r->n_mismatch == 0 && r->p95 <= sla;
}

/* Doubles the concurrency from 1 while the SLA holds (up to max), then bisects between the last
 * level that held and the first that did not. Prints the load-test table row. */
static int sla_search(const bench_cfg *g, double sla, int max, FILE *cf, const char *variant,
                      const char *eval_cell) {
    level_result best = {0}, lr;
    int failed = 0, lo = 0, hi = 0;
    for (int c = 1;; c = c * 2 > max && c < max ? max : c * 2) {
        if (run_level(g, c, cf, &lr)) failed = 1;
        if (!meets(&lr, g->requests, sla)) {
            hi = c;
            break;
        }
        best = lr;
        lo = c;
        if (c >= max) break;
    }
    while (hi && hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if (run_level(g, mid, cf, &lr)) failed = 1;
        if (meets(&lr, g->requests, sla)) {
            best = lr;
            lo = mid;
        } else
            hi = mid;
    }
    char var[160], dev[160];
    model_card(g, var, sizeof var, dev, sizeof dev);
    if (variant) snprintf(var, sizeof var, "%s", variant);
    printf("\n| Variant | Device | Max concurrency at SLA (p95 <= %g ms) | p95 ms | Requests/s | Eval |\n", sla);
    printf("|---|---|---|---|---|---|\n");
    if (lo)
        printf("| %s | %s | %d%s | %.2f | %.1f | %s |\n", var, dev, lo, hi ? "" : " (the --max-concurrency)",
               best.p95, best.rps, eval_cell);
    else
        printf("| %s | %s | 0 (concurrency 1 misses the SLA: p95 %.2f ms) | - | - | %s |\n", var, dev, lr.p95,
               eval_cell);
    return failed;
}

int cmd_bench(int argc, char **argv) {
    const char *host = "127.0.0.1", *uds = NULL, *levels = "1,8,64", *file = NULL, *csv = NULL, *v;
    const char *variant = NULL, *eval = NULL, *profile = NULL, *latencies = NULL;
    long long port = 8100, requests = 200, max_conc = 256;
    double sla_ms = -1;
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
            (r = arg_value(argc, argv, &i, "--csv", &csv)) ||
            (r = arg_value(argc, argv, &i, "--variant", &variant)) ||
            (r = arg_value(argc, argv, &i, "--eval", &eval)) ||
            (r = arg_value(argc, argv, &i, "--profile", &profile)) ||
            (r = arg_value(argc, argv, &i, "--latencies", &latencies))) {
            if (r < 0) return 2;
            continue;
        }
        if ((r = arg_value(argc, argv, &i, "--sla-ms", &v))) {
            char *end;
            if (r < 0) return 2;
            sla_ms = strtod(v, &end);
            if (!*v || *end || !(sla_ms > 0) || !isfinite(sla_ms)) {
                fprintf(stderr, "vllm-srun bench: --sla-ms must be a positive number of milliseconds (found '%s')\n", v);
                return 2;
            }
            continue;
        }
        if ((r = arg_value(argc, argv, &i, "--max-concurrency", &v))) {
            if (r < 0 || !arg_int("vllm-srun bench", "--max-concurrency", v, 1, 4096, &max_conc)) return 2;
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
                        "         [--requests N] [--requests-file FILE.jsonl] [--verify] [--csv FILE]\n"
                        "         [--sla-ms S [--max-concurrency M] [--variant NAME] [--eval FILE.json]]\n"
                        "         [--profile NAME] [--latencies FILE.csv]\n");
        return 2;
    }
    if ((eval || variant) && sla_ms < 0) {
        fprintf(stderr, "vllm-srun bench: --eval and --variant go with --sla-ms\n");
        return 2;
    }
    char eval_cell[96] = "-";
    if (eval && read_eval(eval, eval_cell, sizeof eval_cell)) return 2;
    bench_req *reqs = NULL;
    int n_reqs = load_requests(file, &reqs);
    if (n_reqs <= 0) {
        fprintf(stderr, "vllm-srun bench: cannot read requests from %s\n", file);
        return 2;
    }
    if (profile && set_profile(reqs, n_reqs, profile)) return 2;
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
    FILE *lf = latencies ? fopen(latencies, "w") : NULL;
    if ((csv && !cf) || (latencies && !lf)) {
        fprintf(stderr, "vllm-srun bench: cannot write %s\n", csv && !cf ? csv : latencies);
        return 2;
    }
    if (lf) fprintf(lf, "concurrency,request,status,latency_ms,queue_ms,forward_ms\n");
    if (cf)
        fprintf(cf, "concurrency,requests,ok,overloaded,errors,rps,p50_ms,p95_ms,p99_ms,parse_ms,tokenize_ms,"
                    "queue_ms,forward_ms,post_ms,serialize_ms,total_ms,overhead_p50_ms,device_busy_pct,forwards,"
                    "rows_per_forward\n");
    printf("%6s %7s %6s %6s %6s %9s %8s %8s %8s | %s\n", "conc", "reqs", "ok", "429", "err", "req/s", "p50 ms",
           "p95 ms", "p99 ms", "mean Server-Timing ms: parse tokenize queue forward post serialize total; overhead p50 (latency-queue-forward)"
           " | in forwards %, forwards, rows per forward");
    int failed = 0;
    bench_cfg cfg = {.host = host, .uds = uds, .port = (int)port, .reqs = reqs, .n_reqs = n_reqs,
                     .requests = requests, .verify = verify, .lat_csv = lf};
    if (sla_ms > 0) {
        failed = sla_search(&cfg, sla_ms, (int)max_conc, cf, variant, eval_cell);
    } else {
        char *save = NULL, *lv = strdup(levels);
        for (char *tok = strtok_r(lv, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            int conc = atoi(tok);
            if (conc < 1) continue;
            level_result lr;
            if (run_level(&cfg, conc, cf, &lr)) failed = 1;
        }
        free(lv);
    }
    if (cf) fclose(cf);
    if (lf) fclose(lf);
    for (int i = 0; i < n_reqs; i++) {
        free(reqs[i].body);
        free(reqs[i].expected);
    }
    free(reqs);
    return failed;
}
