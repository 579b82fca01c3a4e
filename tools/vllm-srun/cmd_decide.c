/* vllm-srun decide PKG [--revision R] [--device D] [--store DIR] [--threads N] --request FILE.json
 * Answers one /v1/decisions request body with the same gating, identity check and
 * golden self-check as the server, and prints the response JSON. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/cli.h"
#include "commands.h"
#include "vsr/engine.h"

static void usage(FILE *f) {
    fprintf(f, "usage: vllm-srun decide PKG [--revision R] [--device auto|cpu|cuda[:N]|rocm[:N]]\n"
               "         [--store DIR] [--threads N] --request FILE.json|-\n");
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static void print_refusal(const vsr_http_error *he) {
    json_t *o2 = json_pack("{s:{s:s,s:s}}", "error", "code", he->code, "message", he->message);
    char *s = json_dumps(o2, JSON_COMPACT);
    printf("%s\n", s);
    free(s);
    json_decref(o2);
    fprintf(stderr, "vllm-srun decide: HTTP %d %s\n", he->status, he->code);
}

/* A vela2 package: the same request through the span family's decision layer. */
static int decide_vela2(vsr_engine *e, const char *body, size_t len, const char *served) {
    vsr_http_error he = {0};
    vsr_err err = {0};
    vsr_v2_job *j = vsr_v2_parse(e->v2, body, len, served, &he);
    if (!j) {
        print_refusal(&he);
        return 1;
    }
    double t0 = now_ms();
    if (vsr_v2_run(e->v2, j, NULL, NULL, NULL, &err) != VSR_OK) {
        fprintf(stderr, "vllm-srun decide: %s\n", err.msg);
        vsr_v2_job_free(j);
        return 1;
    }
    vsr_decision_meta meta = {.model_id = served,
                              .revision = e->pkg->revision[0] ? e->pkg->revision : NULL,
                              .model_sha256 = e->pkg->model_sha256,
                              .device = e->device_id,
                              .accelerator = vsr_device_kind_name(e->device.kind),
                              .compute_ms = now_ms() - t0};
    char *resp = vsr_v2_response(j, &meta);
    vsr_v2_job_free(j);
    if (!resp) return 1;
    printf("%s\n", resp);
    free(resp);
    return 0;
}

int cmd_decide(int argc, char **argv) {
    vsr_engine_opts o = {.device = "auto", .dtype = "auto", .show_progress = true};
    const char *request = NULL, *v;
    long long x;
    for (int i = 1; i < argc; i++) {
        int r;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        if ((r = arg_value(argc, argv, &i, "--revision", &o.revision)) ||
            (r = arg_value(argc, argv, &i, "--device", &o.device)) ||
            (r = arg_value(argc, argv, &i, "--store", &o.store_dir)) ||
            (r = arg_value(argc, argv, &i, "--request", &request))) {
            if (r < 0) return 2;
            continue;
        }
        if ((r = arg_value(argc, argv, &i, "--threads", &v))) {
            if (r < 0 || !arg_int("vllm-srun decide", "--threads", v, 0, 1024, &x)) return 2;
            o.threads = (int)x;
            continue;
        }
        if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "vllm-srun decide: unknown option %s\n", argv[i]);
            usage(stderr);
            return 2;
        }
        o.model = argv[i];
    }
    if (!o.model || !request) {
        usage(stderr);
        return 2;
    }
    size_t len = 0;
    char *body = cli_read_file(request, &len);
    if (!body) {
        fprintf(stderr, "vllm-srun decide: cannot read --request %s\n", request);
        return 2;
    }
    vsr_engine e;
    vsr_err err = {0};
    int rc = 1;
    if (vsr_engine_prepare(&e, &o, &err) != VSR_OK || vsr_engine_load(&e, &o, &err) != VSR_OK ||
        vsr_engine_golden(&e, &err) != VSR_OK) {
        fprintf(stderr, "vllm-srun decide: %s\n", err.msg);
        goto out;
    }
    fprintf(stderr, "vllm-srun decide: %s on %s, golden self-check %s%s%s\n",
            e.pkg->repo[0] ? e.pkg->repo : e.pkg->path, e.device_id, e.golden.status,
            e.golden.reason[0] ? ": " : "", e.golden.reason);
    /* The model id: the repo, or the folder name of a local package (as the server does). */
    const char *slash = strrchr(e.pkg->path, '/');
    const char *served = e.pkg->repo[0] ? e.pkg->repo : slash ? slash + 1 : e.pkg->path;
    vsr_http_error he = {0};
    if (e.v2) {
        rc = decide_vela2(&e, body, len, served);
        goto out;
    }
    vsr_decision_job *j = vsr_decision_parse(e.decider, body, len, served, &he);
    if (!j) {
        json_t *o2 = json_pack("{s:{s:s,s:s}}", "error", "code", he.code, "message", he.message);
        char *s = json_dumps(o2, JSON_COMPACT);
        printf("%s\n", s);
        free(s);
        json_decref(o2);
        fprintf(stderr, "vllm-srun decide: HTTP %d %s\n", he.status, he.code);
        goto out;
    }
    double t0 = now_ms();
    if (vsr_decision_run(e.decider, j, NULL, NULL, NULL, &err) != VSR_OK) {
        fprintf(stderr, "vllm-srun decide: %s\n", err.msg);
        vsr_decision_free(j);
        goto out;
    }
    vsr_decision_meta meta = {.model_id = served ? served : e.pkg->path,
                              .revision = e.pkg->revision[0] ? e.pkg->revision : NULL,
                              .model_sha256 = e.pkg->model_sha256,
                              .device = e.device_id,
                              .accelerator = vsr_device_kind_name(e.device.kind),
                              .compute_ms = now_ms() - t0};
    char *resp = vsr_decision_response(j, &meta);
    vsr_decision_free(j);
    if (resp) {
        printf("%s\n", resp);
        free(resp);
        rc = 0;
    }
out:
    free(body);
    vsr_engine_close(&e);
    return rc;
}
