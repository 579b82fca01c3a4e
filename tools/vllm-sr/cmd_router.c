/* vllm-sr serve --config CONFIG.yaml [--host H] [--port P] [--store DIR] [--state-dir DIR]
 *               [--seed N] [--drain-timeout-s S] [--grace-s S] [--log-level L]
 * Router mode: validate the config (errors print as `vllm-sr validate` prints them), start or
 * attach the deployments it uses, serve the routing API (vsr/router_server.h) until SIGTERM;
 * SIGHUP reloads the config. */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "common/cli.h"
#include "vsr/router_server.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: vllm-sr serve --config CONFIG.yaml [--host H] [--port P] [--store DIR] [--state-dir DIR]\n"
            "                     [--seed N] [--drain-timeout-s S] [--grace-s S] [--upstream-timeout-s S]\n"
            "                     [--max-request-bytes N] [--log-level error|warn|info|debug]\n"
            "Router mode: routes POST /v1/chat/completions by the config's decisions (docs/router.md).\n"
            "Listens on --host/--port, else listeners[0], else 127.0.0.1:8899. SIGHUP reloads the config,\n"
            "SIGTERM drains and stops. --seed makes the weighted backend choice repeatable.\n");
}

int cmd_serve_router(int argc, char **argv) {
    vsr_router_serve_opts o = {0};
    const char *port = NULL, *seed = NULL, *drain = NULL, *grace = NULL, *upto = NULL, *maxb = NULL;
    for (int i = 1; i < argc; i++) {
        int r;
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if ((r = arg_value(argc, argv, &i, "--config", &o.config_path))) { if (r < 0) return 2; continue; }
        if ((r = arg_value(argc, argv, &i, "--host", &o.host))) { if (r < 0) return 2; continue; }
        if ((r = arg_value(argc, argv, &i, "--port", &port))) { if (r < 0) return 2; continue; }
        if ((r = arg_value(argc, argv, &i, "--store", &o.store_dir))) { if (r < 0) return 2; continue; }
        if ((r = arg_value(argc, argv, &i, "--state-dir", &o.state_dir))) { if (r < 0) return 2; continue; }
        if ((r = arg_value(argc, argv, &i, "--seed", &seed))) { if (r < 0) return 2; continue; }
        if ((r = arg_value(argc, argv, &i, "--drain-timeout-s", &drain))) { if (r < 0) return 2; continue; }
        if ((r = arg_value(argc, argv, &i, "--grace-s", &grace))) { if (r < 0) return 2; continue; }
        if ((r = arg_value(argc, argv, &i, "--upstream-timeout-s", &upto))) { if (r < 0) return 2; continue; }
        if ((r = arg_value(argc, argv, &i, "--max-request-bytes", &maxb))) { if (r < 0) return 2; continue; }
        if ((r = arg_value(argc, argv, &i, "--log-level", &o.log_level))) { if (r < 0) return 2; continue; }
        if (a[0] == '-') fprintf(stderr, "vllm-sr serve: unknown option %s\n", a);
        else fprintf(stderr, "vllm-sr serve: MODEL arguments apply to engine mode (--engine); router mode reads its "
                             "deployments from --config (found %s)\n", a);
        usage(stderr);
        return 2;
    }
    long long v;
    if (port) {
        if (!arg_int("vllm-sr serve", "--port", port, 1, 65535, &v)) return 2;
        o.port = (int)v;
    }
    if (seed) {
        if (!arg_int("vllm-sr serve", "--seed", seed, 0, 9223372036854775807LL, &v)) return 2;
        o.seed = (unsigned long long)v;
        o.have_seed = true;
    }
    if (drain) {
        if (!arg_int("vllm-sr serve", "--drain-timeout-s", drain, 1, 86400, &v)) return 2;
        o.drain_timeout_ms = (int)(v * 1000);
    }
    if (grace) {
        if (!arg_int("vllm-sr serve", "--grace-s", grace, 1, 3600, &v)) return 2;
        o.grace_ms = (int)(v * 1000);
    }
    if (upto) {
        if (!arg_int("vllm-sr serve", "--upstream-timeout-s", upto, 1, 86400, &v)) return 2;
        o.upstream_timeout_ms = (int)(v * 1000);
    }
    if (maxb) {
        if (!arg_int("vllm-sr serve", "--max-request-bytes", maxb, 1024, 1LL << 32, &v)) return 2;
        o.max_request_bytes = (size_t)v;
    }
    return vsr_router_serve(&o);
}
