/* vllm-srun render PKG [--revision R] [--store DIR] --request FILE.json|-
 * The prompt and token ids of every question of one /v1/decisions request body, without
 * loading weights: the package's metadata, its tokenizer and the decision layer's load
 * checks (chat template, tokenizer rules, answer codes), then the request's validation,
 * rendering and tokenizing exactly as the server does them. One compact JSON object a
 * line, in request order (main request, then each `states` entry):
 *   {"state":null|"<name>","question":"<id>","prompt":"<text>","ids":[...]}
 *   {"state":...,"question":"<id>","error":{"code":"...","message":"..."}}  (item error)
 * A request-level error prints {"error":{"code","message"}} and exits 1. Strings are
 * written as Python's json.dumps(ensure_ascii=False) writes them. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cli.h"
#include "commands.h"
#include "core/json_util.h"
#include "core/strbuf.h"
#include "vsr/decision.h"
#include "vsr/package.h"

static void usage(FILE *f) {
    fprintf(f, "usage: vllm-srun render PKG [--revision R] [--store DIR] --request FILE.json|-\n\n"
               "Prints, for every question of the request body, the rendered prompt and its token\n"
               "ids as one JSON line: {\"state\",\"question\",\"prompt\",\"ids\"}, or {\"state\",\"question\",\n"
               "\"error\":{\"code\",\"message\"}} for a question that fails validation. No weight is read.\n");
}

static void put_str(vsr_strbuf *b, const char *s) {
    if (!s) vsr_strbuf_puts(b, "null");
    else vsr_json_put_string(b, s, strlen(s), false);
}

static void print_item(void *ctx, const vsr_decision_item *it) {
    vsr_strbuf *b = ctx;
    b->n = 0;
    vsr_strbuf_puts(b, "{\"state\":");
    put_str(b, it->state);
    vsr_strbuf_puts(b, ",\"question\":");
    put_str(b, it->question);
    if (it->err_code) {
        vsr_strbuf_puts(b, ",\"error\":{\"code\":");
        put_str(b, it->err_code);
        vsr_strbuf_puts(b, ",\"message\":");
        put_str(b, it->err_msg ? it->err_msg : "");
        vsr_strbuf_puts(b, "}}\n");
    } else {
        vsr_strbuf_puts(b, ",\"prompt\":");
        put_str(b, it->prompt);
        vsr_strbuf_puts(b, ",\"ids\":[");
        char num[16];
        for (size_t i = 0; i < it->n_ids; i++) {
            int k = snprintf(num, sizeof num, i ? ",%d" : "%d", it->ids[i]);
            vsr_strbuf_put(b, num, (size_t)k);
        }
        vsr_strbuf_puts(b, "]}\n");
    }
    if (!b->oom) fwrite(b->p, 1, b->n, stdout);
    else fputs("{\"error\":{\"code\":\"internal_error\",\"message\":\"out of memory\"}}\n", stdout);
}

int cmd_render(int argc, char **argv) {
    const char *model = NULL, *revision = NULL, *store = NULL, *request = NULL;
    for (int i = 1; i < argc; i++) {
        int r;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        if ((r = arg_value(argc, argv, &i, "--revision", &revision)) ||
            (r = arg_value(argc, argv, &i, "--store", &store)) ||
            (r = arg_value(argc, argv, &i, "--request", &request))) {
            if (r < 0) return 2;
            continue;
        }
        if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "vllm-srun render: unknown option %s\n", argv[i]);
            usage(stderr);
            return 2;
        }
        if (model) {
            fprintf(stderr, "vllm-srun render: one package at a time ('%s' is extra)\n", argv[i]);
            return 2;
        }
        model = argv[i];
    }
    if (!model || !request) {
        usage(stderr);
        return 2;
    }
    size_t len = 0;
    char *body = cli_read_file(request, &len);
    if (!body) {
        fprintf(stderr, "vllm-srun render: cannot read --request %s\n", request);
        return 2;
    }
    vsr_package *pkg = NULL;
    vsr_decider *d = NULL;
    vsr_err err = {0};
    int rc = 1;
    if (vsr_package_open(model, revision, store, &pkg, &err) != VSR_OK ||
        vsr_decider_open(pkg, NULL, &d, &err) != VSR_OK) {
        fprintf(stderr, "vllm-srun render: %s\n", err.msg);
        goto out;
    }
    /* The model id a request may name: the repo, or the folder name of a local package. */
    const char *slash = strrchr(pkg->path, '/');
    const char *served = pkg->repo[0] ? pkg->repo : slash ? slash + 1 : pkg->path;
    vsr_http_error he = {0};
    vsr_decision_job *j = vsr_decision_parse(d, body, len, served, &he);
    if (!j) {
        vsr_strbuf b = {0};
        vsr_strbuf_puts(&b, "{\"error\":{\"code\":");
        put_str(&b, he.code);
        vsr_strbuf_puts(&b, ",\"message\":");
        put_str(&b, he.message);
        vsr_strbuf_puts(&b, "}}\n");
        if (!b.oom) fwrite(b.p, 1, b.n, stdout);
        vsr_strbuf_free(&b);
        fprintf(stderr, "vllm-srun render: HTTP %d %s\n", he.status, he.code);
        goto out;
    }
    vsr_strbuf b = {0};
    vsr_decision_foreach(j, print_item, &b);
    vsr_strbuf_free(&b);
    vsr_decision_free(j);
    rc = fflush(stdout) == 0 ? 0 : 1;
out:
    free(body);
    vsr_decider_free(d);
    vsr_package_close(pkg);
    return rc;
}
