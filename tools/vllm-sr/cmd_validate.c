/* vllm-sr validate CONFIG [--store DIR]: exit 0 and one OK line, or
 * "Configuration validation failed:" then one line per error (path, line, column), exit 1. */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "common/cli.h"
#include "vsr/router.h"

static void usage(FILE *f) {
    fprintf(f, "usage: vllm-sr validate CONFIG.yaml [--store DIR]\n"
               "Checks a router config: every key known, every rule of the v0.3 subset (docs/router.md).\n"
               "--store is the package store consulted for packages that are not built in\n"
               "(default $HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub).\n");
}

int cmd_validate(int argc, char **argv) {
    const char *file = NULL, *store = NULL;
    for (int i = 1; i < argc; i++) {
        int r;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        if ((r = arg_value(argc, argv, &i, "--store", &store))) { if (r < 0) return 2; continue; }
        if ((r = arg_value(argc, argv, &i, "--config", &file))) { if (r < 0) return 2; continue; }
        if (argv[i][0] == '-' || file) {
            fprintf(stderr, "vllm-sr validate: unexpected argument %s\n", argv[i]);
            usage(stderr);
            return 2;
        }
        file = argv[i];
    }
    if (!file) {
        usage(stderr);
        return 2;
    }
    vsr_router_options opt = {.store_dir = store};
    vsr_router_config *c = vsr_router_config_load(file, &opt);
    if (!c) {
        fprintf(stderr, "vllm-sr validate: out of memory\n");
        return 1;
    }
    int rc = 0;
    if (c->n_errors) {
        fprintf(stderr, "Configuration validation failed:\n");
        char line[2048];
        for (int i = 0; i < c->n_errors; i++) fprintf(stderr, "  %s\n", vsr_rt_error_format(&c->errors[i], line, sizeof line));
        rc = 1;
    } else {
        printf("Configuration is valid: %s (%d deployment%s, %d binding%s, %d decision%s)\n", file, c->n_deployments,
               c->n_deployments == 1 ? "" : "s", c->n_bindings, c->n_bindings == 1 ? "" : "s", c->n_decisions,
               c->n_decisions == 1 ? "" : "s");
    }
    vsr_router_config_free(c);
    return rc;
}
