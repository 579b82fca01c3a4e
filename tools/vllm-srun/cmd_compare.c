/* vllm-srun compare PKG_A PKG_B --requests FILE.jsonl [--device D] [--max-flip-rate R]
 *   [--max-prob-diff P] [--csv F] [--json F] [--plot F.png [--plot-size WxH]]
 * The evaluation gate of a quantized package against its baseline: both packages answer every
 * request of the file (one /v1/decisions body per line) and their answers are compared per
 * question type (src/engine/compare.c). Exits 1 when a limit is exceeded, naming it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cli.h"
#include "commands.h"
#include "vsr/compare.h"
#include "vsr/engine.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: vllm-srun compare PKG_A PKG_B --requests FILE.jsonl [--device auto|cpu|cuda[:N]|rocm[:N]]\n"
            "         [--revision-a R] [--revision-b R] [--store DIR] [--threads N]\n"
            "         [--max-flip-rate R] [--max-prob-diff P] [--csv F.csv] [--json F.json]\n"
            "         [--plot F.png] [--plot-size WxH]\n"
            "A is the baseline (BF16), B the candidate. Each line of the requests file is a /v1/decisions\n"
            "body. Exit status: 0 within the limits, 1 a limit exceeded or a package/request failed,\n"
            "2 usage.\n");
}

static bool parse_rate(const char *name, const char *v, double *out) {
    char *end;
    double x = strtod(v, &end);
    if (!*v || *end || !(x >= 0.0) || x > 1e300) {
        fprintf(stderr, "vllm-srun compare: %s must be a non-negative number (found '%s')\n", name, v);
        return false;
    }
    *out = x;
    return true;
}

static const char *served_name(const vsr_engine *e) {
    const char *slash = strrchr(e->pkg->path, '/');
    return e->pkg->repo[0] ? e->pkg->repo : slash ? slash + 1 : e->pkg->path;
}

/* Answers one request body on one engine: the response (malloc'd), or NULL with the request's
 * refusal in *he (he->status != 0) or a run failure in err. */
static char *answer(vsr_engine *e, const char *body, size_t len, vsr_http_error *he, vsr_err *err) {
    memset(he, 0, sizeof *he);
    vsr_decision_job *j = vsr_decision_parse(e->decider, body, len, served_name(e), he);
    if (!j) return NULL;
    char *resp = NULL;
    if (vsr_decision_run(e->decider, j, NULL, NULL, NULL, err) == VSR_OK) {
        resp = vsr_decision_response(j, NULL);
        if (!resp) vsr_err_set(err, VSR_E_NOMEM, "out of memory writing a response");
    }
    vsr_decision_free(j);
    return resp;
}

int cmd_compare(int argc, char **argv) {
    vsr_engine_opts oa = {.device = "auto", .dtype = "auto", .show_progress = true};
    const char *pkg[2] = {NULL, NULL}, *requests = NULL, *csv = NULL, *json = NULL, *plot = NULL,
               *plot_size = "800x400", *rev_b = NULL, *v;
    double max_flip = -1, max_dp = -1;
    int npkg = 0;
    long long x;
    for (int i = 1; i < argc; i++) {
        int r;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        if ((r = arg_value(argc, argv, &i, "--device", &oa.device)) ||
            (r = arg_value(argc, argv, &i, "--store", &oa.store_dir)) ||
            (r = arg_value(argc, argv, &i, "--requests", &requests)) ||
            (r = arg_value(argc, argv, &i, "--csv", &csv)) || (r = arg_value(argc, argv, &i, "--json", &json)) ||
            (r = arg_value(argc, argv, &i, "--plot", &plot)) ||
            (r = arg_value(argc, argv, &i, "--plot-size", &plot_size))) {
            if (r < 0) return 2;
            continue;
        }
        if ((r = arg_value(argc, argv, &i, "--revision-a", &v))) {
            if (r < 0) return 2;
            oa.revision = v;
            continue;
        }
        if ((r = arg_value(argc, argv, &i, "--revision-b", &v))) {
            if (r < 0) return 2;
            rev_b = v;
            continue;
        }
        if ((r = arg_value(argc, argv, &i, "--threads", &v))) {
            if (r < 0 || !arg_int("vllm-srun compare", "--threads", v, 0, 1024, &x)) return 2;
            oa.threads = (int)x;
            continue;
        }
        if ((r = arg_value(argc, argv, &i, "--max-flip-rate", &v))) {
            if (r < 0 || !parse_rate("--max-flip-rate", v, &max_flip)) return 2;
            continue;
        }
        if ((r = arg_value(argc, argv, &i, "--max-prob-diff", &v))) {
            if (r < 0 || !parse_rate("--max-prob-diff", v, &max_dp)) return 2;
            continue;
        }
        if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "vllm-srun compare: unknown option %s\n", argv[i]);
            usage(stderr);
            return 2;
        }
        if (npkg == 2) {
            fprintf(stderr, "vllm-srun compare: takes two packages (found a third: %s)\n", argv[i]);
            return 2;
        }
        pkg[npkg++] = argv[i];
    }
    if (npkg != 2 || !requests) {
        usage(stderr);
        return 2;
    }
    int pw = 0, ph = 0;
    if (sscanf(plot_size, "%dx%d", &pw, &ph) != 2 || pw < 120 || ph < 80 || pw > 8192 || ph > 8192) {
        fprintf(stderr, "vllm-srun compare: --plot-size must be WxH within 120x80 .. 8192x8192 (found '%s')\n",
                plot_size);
        return 2;
    }
    FILE *rf = fopen(requests, "rb");
    if (!rf) {
        fprintf(stderr, "vllm-srun compare: cannot read --requests %s\n", requests);
        return 2;
    }
    /* the lines: count them first for the progress bar */
    long n_lines = 0;
    {
        char *line = NULL;
        size_t cap = 0;
        ssize_t n;
        while ((n = getline(&line, &cap, rf)) > 0) {
            const char *p = line;
            while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n') p++;
            if (*p) n_lines++;
        }
        free(line);
        rewind(rf);
    }
    if (n_lines == 0) {
        fprintf(stderr, "vllm-srun compare: --requests %s holds no request\n", requests);
        fclose(rf);
        return 1;
    }

    /* One package at a time: A answers every request, is closed, then B loads and answers them, so
     * that the device holds one package's weights at a time (a 27B BF16 package and its FP8 twin do
     * not fit one 80 GB GPU together). Answers are kept on the host until both have run. */
    vsr_engine e[2];
    memset(e, 0, sizeof e);
    vsr_err err = {0};
    vsr_compare c;
    vsr_compare_init(&c);
    int rc = 1;
    struct compare_line { int lineno; char *resp[2]; vsr_http_error he[2]; } *lines = calloc((size_t)n_lines, sizeof *lines);
    long n_read = 0;
    bool failed = !lines;
    if (!lines) fprintf(stderr, "vllm-srun compare: out of memory for %ld requests\n", n_lines);
    for (int k = 0; k < 2 && !failed; k++) {
        vsr_engine_opts o = oa;
        o.model = pkg[k];
        if (k == 1) o.revision = rev_b;
        if (vsr_engine_prepare(&e[k], &o, &err) != VSR_OK || vsr_engine_load(&e[k], &o, &err) != VSR_OK) {
            fprintf(stderr, "vllm-srun compare: %s: %s\n", pkg[k], err.msg);
            failed = true;
            break;
        }
        fprintf(stderr, "vllm-srun compare: %s = %s on %s\n", k ? "B" : "A",
                e[k].pkg->repo[0] ? e[k].pkg->repo : e[k].pkg->path, e[k].device_id);
        vsr_progress *prog = vsr_progress_new(k ? "compare B" : "compare A", (uint64_t)n_lines, "requests");
        char *line = NULL;
        size_t cap = 0;
        ssize_t len;
        int lineno = 0;
        long at = 0;
        rewind(rf);
        while (!failed && at < n_lines && (len = getline(&line, &cap, rf)) > 0) {
            lineno++;
            while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
            const char *p = line;
            while (*p == ' ' || *p == '\t') p++;
            if (!*p) continue;
            struct compare_line *l = &lines[at++];
            l->lineno = lineno;
            l->resp[k] = answer(&e[k], line, (size_t)len, &l->he[k], &err);
            if (!l->resp[k] && !l->he[k].status) {
                fprintf(stderr, "vllm-srun compare: line %d: %s: %s\n", lineno, k ? "B" : "A", err.msg);
                failed = true;
            }
            vsr_progress_add(prog, 1);
        }
        vsr_progress_done(prog);
        free(line);
        if (k == 0) n_read = at;
        vsr_engine_close(&e[k]); /* the next package gets the whole device */
        memset(&e[k], 0, sizeof e[k]);
    }
    long refused = 0;
    for (long i = 0; i < n_read && !failed; i++) {
        struct compare_line *l = &lines[i];
        const char *ra = l->resp[0], *rb = l->resp[1];
        const vsr_http_error *ha = &l->he[0], *hb = &l->he[1];
        if (!ra) {
            /* A refused the request: B must refuse it the same way */
            if (rb || hb->status != ha->status || strcmp(hb->code, ha->code)) {
                fprintf(stderr, "vllm-srun compare: line %d: A refused the request (HTTP %d %s: %s) but B %s\n",
                        l->lineno, ha->status, ha->code, ha->message, rb ? "answered it" : "refused it otherwise");
                failed = true;
            } else {
                fprintf(stderr, "vllm-srun compare: line %d: both refused the request (HTTP %d %s: %s)\n",
                        l->lineno, ha->status, ha->code, ha->message);
                refused++;
            }
        } else if (!rb) {
            fprintf(stderr, "vllm-srun compare: line %d: B refused the request (HTTP %d %s: %s) but A answered it\n",
                    l->lineno, hb->status, hb->code, hb->message);
            failed = true;
        } else if (vsr_compare_add_responses(&c, l->lineno, ra, rb, &err) != VSR_OK) {
            fprintf(stderr, "vllm-srun compare: %s\n", err.msg);
            failed = true;
        }
    }
    if (failed) goto out;
    if (vsr_compare_count(&c) == 0) {
        fprintf(stderr, "vllm-srun compare: no question was answered by both packages (%ld requests refused)\n",
                refused);
        goto out;
    }

    vsr_compare_report(&c, pkg[0], pkg[1], stdout);
    if (refused) printf("(%ld requests refused by both packages and not compared)\n", refused);
    if (csv && vsr_compare_write_csv(&c, csv, &err) != VSR_OK) {
        fprintf(stderr, "vllm-srun compare: %s\n", err.msg);
        goto out;
    }
    if (json && vsr_compare_write_json(&c, pkg[0], pkg[1], json, &err) != VSR_OK) {
        fprintf(stderr, "vllm-srun compare: %s\n", err.msg);
        goto out;
    }
    if (plot && vsr_compare_plot_png(&c, plot, pw, ph, &err) != VSR_OK) {
        fprintf(stderr, "vllm-srun compare: %s\n", err.msg);
        goto out;
    }
    char why[512];
    int bad = vsr_compare_check(&c, max_flip, max_dp, why, sizeof why);
    if (bad) {
        printf("\nFAIL: %d limit%s exceeded:\n%s", bad, bad > 1 ? "s" : "", why);
        fprintf(stderr, "vllm-srun compare: %s", why);
        goto out;
    }
    if (max_flip >= 0 || max_dp >= 0) printf("\nPASS: within the limits\n");
    rc = 0;
out:
    for (int k = 0; k < 2; k++) vsr_engine_close(&e[k]); /* safe on a zeroed or half-prepared engine */
    for (long i = 0; lines && i < n_lines; i++) free(lines[i].resp[0]), free(lines[i].resp[1]);
    free(lines);
    vsr_compare_free(&c);
    fclose(rf);
    return rc;
}
