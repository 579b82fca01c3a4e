/* A closed-loop HTTP load generator for the router bench: C clients, each sending the same
 * POST body again as soon as its answer is in (keep-alive connections, libcurl multi, one
 * thread), and the latency of every request after the warm-up. Prints one line:
 *   label clients requests rps p50_ms p90_ms p99_ms errors
 *
 *   loadgen --url URL [--uds PATH] --body FILE --clients C --requests N [--warmup W] [--label L]
 *
 * An answer other than 200 counts as an error (its latency is not counted).
 * Build: cc -O2 -o loadgen loadgen.c -lcurl -lm */
#include <curl/curl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static size_t sink(char *p, size_t s, size_t n, void *u) { return s * n; }

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(const double *v, int n, double p) {
    if (!n) return 0;
    int i = (int)(p * (n - 1) + 0.5);
    return v[i];
}

int main(int argc, char **argv) {
    const char *url = NULL, *uds = NULL, *bodyf = NULL, *label = "run";
    int clients = 1, requests = 100, warmup = 20;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--url")) url = argv[i + 1];
        else if (!strcmp(argv[i], "--uds")) uds = argv[i + 1];
        else if (!strcmp(argv[i], "--body")) bodyf = argv[i + 1];
        else if (!strcmp(argv[i], "--clients")) clients = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--requests")) requests = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--warmup")) warmup = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--label")) label = argv[i + 1];
        else {
            fprintf(stderr, "loadgen: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (!url || !bodyf || clients < 1 || requests < 1) {
        fprintf(stderr, "usage: loadgen --url URL [--uds PATH] --body FILE --clients C --requests N [--warmup W] [--label L]\n");
        return 2;
    }
    FILE *f = fopen(bodyf, "rb");
    if (!f) {
        perror(bodyf);
        return 1;
    }
    static char body[1 << 20];
    size_t blen = fread(body, 1, sizeof body - 1, f);
    fclose(f);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    CURLM *m = curl_multi_init();
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    h = curl_slist_append(h, "Expect:");
    CURL **e = calloc((size_t)clients, sizeof *e);
    double *t0 = calloc((size_t)clients, sizeof *t0);
    double *lat = calloc((size_t)requests, sizeof *lat);
    int started = 0, done = 0, counted = 0, errors = 0, total = warmup + requests;
    double t_first = mono();
    for (int i = 0; i < clients && started < total; i++) {
        e[i] = curl_easy_init();
        curl_easy_setopt(e[i], CURLOPT_URL, url);
        if (uds) curl_easy_setopt(e[i], CURLOPT_UNIX_SOCKET_PATH, uds);
        curl_easy_setopt(e[i], CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(e[i], CURLOPT_POSTFIELDSIZE, (long)blen);
        curl_easy_setopt(e[i], CURLOPT_HTTPHEADER, h);
        curl_easy_setopt(e[i], CURLOPT_WRITEFUNCTION, sink);
        curl_easy_setopt(e[i], CURLOPT_TCP_NODELAY, 1L);
        curl_easy_setopt(e[i], CURLOPT_PRIVATE, (char *)(intptr_t)i);
        t0[i] = mono();
        curl_multi_add_handle(m, e[i]);
        started++;
    }
    while (done < total) {
        int running;
        curl_multi_perform(m, &running);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(m, &left))) {
            if (msg->msg != CURLMSG_DONE) continue;
            char *pi;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &pi);
            int i = (int)(intptr_t)pi;
            long code = 0;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &code);
            double t = mono() - t0[i];
            done++;
            if (done == warmup) t_first = mono();
            if (done > warmup) {
                if (msg->data.result != CURLE_OK || code != 200) errors++;
                else if (counted < requests) lat[counted++] = t;
            }
            curl_multi_remove_handle(m, e[i]);
            if (started < total) {
                t0[i] = mono();
                curl_multi_add_handle(m, e[i]);
                started++;
            }
        }
        curl_multi_poll(m, NULL, 0, 100, NULL);
    }
    double wall = mono() - t_first;
    qsort(lat, (size_t)counted, sizeof *lat, cmp);
    printf("%s %d %d %.1f %.3f %.3f %.3f %d\n", label, clients, counted, counted / wall, pct(lat, counted, 0.5) * 1e3,
           pct(lat, counted, 0.9) * 1e3, pct(lat, counted, 0.99) * 1e3, errors);
    return errors ? 1 : 0;
}
