/* vllm-srun serve MODEL[@REV] [--revision R] [--device auto|cpu|cuda[:N]|rocm[:N]] [--host H]
 *   [--port P] [--uds PATH] [--dtype auto|bfloat16] [--threads N] [--max-queue N]
 *   [--max-request-bytes N] [--autotune-cache DIR] [--store DIR] [--served-model-name NAME]
 *   [--log-level error|warn|info|debug] [--profile exact|batching] [--batch-wait-ms MS]
 *   [--max-batch-tokens N] and the connection limits of server/http.h
 *   (--max-connections, --max-connections-per-client, --request-timeout, --idle-timeout,
 *   --max-body-memory, --max-parse-backlog, --handler-threads). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/cli.h"
#include "commands.h"
#include "server/serve.h"
#include "vsr/server.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: vllm-srun serve MODEL[@REV] [--revision R] [--device auto|cpu|cuda[:N]|rocm[:N]]\n"
            "         [--host 127.0.0.1] [--port 8100] [--uds PATH] [--dtype auto|bfloat16]\n"
            "         [--threads N] [--max-queue 256] [--max-queued-tokens 4194304]\n"
            "         [--max-request-bytes 8388608]\n"
            "         [--autotune-cache DIR] [--store DIR] [--served-model-name NAME]\n"
            "         [--log-level error|warn|info|debug] [--quantize fp8-dynamic]\n"
            "         [--profile exact|batching] [--batch-wait-ms 2] [--max-batch-tokens 32768]\n"
            "         [--max-connections 2048] [--max-connections-per-client 256]\n"
            "         [--request-timeout 30] [--idle-timeout 15] [--max-body-memory 268435456]\n"
            "         [--max-parse-backlog 64] [--handler-threads 0]\n"
            "MODEL is org/name from the package store (Hugging Face cache layout) or an\n"
            "absolute package path. --revision takes a commit, a branch or a tag.\n"
            "--quantize fp8-dynamic quantizes a BF16 package's weights to FP8 while loading (where\n"
            "the device runs FP8; refused otherwise); /v1/models shows it as quantization.load_time.\n"
            "--warmup-tokens N (default 8192, 0 = none): where forwards are recorded (CUDA), every shape\n"
            "bucket of at most N tokens (rows x length) is run and recorded before the worker is ready.\n");
}

int cmd_serve(int argc, char **argv) {
    vsr_serve_opts o;
    vsr_serve_opts_default(&o);
    srv_http_limits lim;
    srv_http_limits_default(&lim);
    const char *v;
    long long x;
    for (int i = 1; i < argc; i++) {
        int r;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
#define OPT(name, field)                                                                           \
    if ((r = arg_value(argc, argv, &i, name, &v)) != 0) {                                          \
        if (r < 0) return 2;                                                                       \
        o.field = v;                                                                               \
        continue;                                                                                  \
    }
        OPT("--revision", revision)
        OPT("--device", device)
        OPT("--host", host)
        OPT("--uds", uds)
        OPT("--dtype", dtype)
        OPT("--autotune-cache", autotune_cache)
        OPT("--store", store_dir)
        OPT("--served-model-name", served_name)
        OPT("--log-level", log_level)
        OPT("--quantize", quantize)
        OPT("--profile", profile)
#undef OPT
        if ((r = arg_value(argc, argv, &i, "--batch-wait-ms", &v)) != 0 ||
            (r = arg_value(argc, argv, &i, "--batch-window-ms", &v)) != 0) {
            char *end;
            double ms = r > 0 ? strtod(v, &end) : -1;
            if (r < 0 || *end || !(ms >= 0 && ms <= 10000)) {
                if (r > 0) fprintf(stderr, "vllm-srun serve: --batch-wait-ms must be a number of milliseconds from 0 to 10000; got '%s'\n", v);
                return 2;
            }
            o.batch_wait_ms = ms;
            continue;
        }
#define NUM(name, field, lo, hi)                                                                   \
    if ((r = arg_value(argc, argv, &i, name, &v)) != 0) {                                          \
        if (r < 0 || !arg_int("vllm-srun serve", name, v, lo, hi, &x)) return 2;                   \
        o.field = x;                                                                               \
        continue;                                                                                  \
    }
        NUM("--port", port, 1, 65535)
        NUM("--threads", threads, 0, 1024)
        NUM("--max-queue", max_queue, 1, 1000000)
        NUM("--max-queued-tokens", max_queued_tokens, 1, 1LL << 40)
        NUM("--max-request-bytes", max_request_bytes, 1024, 1LL << 32)
        NUM("--max-batch-tokens", max_batch_tokens, 8, 1LL << 30)
        NUM("--warmup-tokens", warmup_tokens, 0, 1LL << 30)
#undef NUM
#define LIM(name, field, lo, hi)                                                                   \
    if ((r = arg_value(argc, argv, &i, name, &v)) != 0) {                                          \
        if (r < 0 || !arg_int("vllm-srun serve", name, v, lo, hi, &x)) return 2;                   \
        lim.field = x;                                                                             \
        continue;                                                                                  \
    }
        LIM("--max-connections", max_connections, 16, 1000000)
        LIM("--max-connections-per-client", max_connections_per_client, 0, 1000000)
        LIM("--request-timeout", request_timeout_s, 1, 86400)
        LIM("--idle-timeout", idle_timeout_s, 1, 86400)
        LIM("--max-body-memory", max_body_memory, 1024, 1LL << 40)
        LIM("--max-parse-backlog", max_parse_backlog, 1, 1000000)
        LIM("--handler-threads", handler_threads, 0, 256)
#undef LIM
        if (argv[i][0] == '-') {
            fprintf(stderr, "vllm-srun serve: unknown option %s\n", argv[i]);
            usage(stderr);
            return 2;
        }
        if (o.model) {
            fprintf(stderr, "vllm-srun serve: one MODEL only (got %s and %s)\n", o.model, argv[i]);
            return 2;
        }
        o.model = argv[i];
    }
    if (!o.model) {
        usage(stderr);
        return 2;
    }
    /* MODEL@REV and --revision must agree (an existing path is never split). */
    struct stat sb;
    const char *at = strrchr(o.model, '@');
    if (at && o.revision && stat(o.model, &sb) != 0 && strcmp(at + 1, o.revision) != 0) {
        fprintf(stderr, "vllm-srun serve: %s names revision %s but --revision says %s\n", o.model, at + 1,
                o.revision);
        return 2;
    }
    if (strcmp(o.profile, "exact") && strcmp(o.profile, "batching")) {
        fprintf(stderr, "vllm-srun serve: unknown profile '%s'; available: batching, exact\n", o.profile);
        return 2;
    }
    if (strcmp(o.dtype, "auto") && strcmp(o.dtype, "bfloat16")) {
        fprintf(stderr,
                "vllm-srun serve: --dtype must be auto or bfloat16 on this build; got '%s' "
                "(the package's format decides the weights; --dtype never changes precision silently)\n",
                o.dtype);
        return 2;
    }
    if (lim.max_body_memory < o.max_request_bytes) {
        fprintf(stderr, "vllm-srun serve: --max-body-memory %zu is below --max-request-bytes %zu\n",
                lim.max_body_memory, o.max_request_bytes);
        return 2;
    }
    return srv_serve(&o, &lim);
}
