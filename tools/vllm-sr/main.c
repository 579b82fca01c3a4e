/* vllm-sr: the router front end (issue #21). One table of subcommands; each is a file.
 * What exists so far: validate, model list|show, serve --engine, status, stop. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"

static const sr_command commands[] = {
    {"serve", cmd_serve, "serve MODEL[@REV] --engine: resolve the revision, record it, run vllm-srun serve"},
    {"validate", cmd_validate, "check a router config (YAML); every error with its path, line and column"},
    {"model", cmd_model, "list|show the deployments of a router config"},
    {"status", cmd_status, "print the active deployment state"},
    {"stop", cmd_stop, "stop the active deployment (SIGTERM to its process)"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: vllm-sr <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nRun 'vllm-sr <command> --help' for a command's options.\n");
}

int sr_arg_value(int argc, char **argv, int *i, const char *name, const char **out) {
    size_t n = strlen(name);
    const char *a = argv[*i];
    if (strncmp(a, name, n)) return 0;
    if (a[n] == '=') {
        *out = a + n + 1;
        return 1;
    }
    if (a[n]) return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "vllm-sr: %s needs a value\n", name);
        return -1;
    }
    *out = argv[++*i];
    return 1;
}

const char *sr_state_dir(char *buf, size_t n) {
    const char *d = getenv("VLLM_SR_STATE_DIR");
    if (d && *d) snprintf(buf, n, "%s", d);
    else {
        const char *home = getenv("HOME");
        snprintf(buf, n, "%s/.local/state/vllm-sr", home && *home ? home : "/tmp");
    }
    return buf;
}

const char *sr_state_file(char *buf, size_t n) {
    char d[3072];
    sr_state_dir(d, sizeof d);
    snprintf(buf, n, "%s/active.json", d);
    return buf;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "vllm-sr: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
