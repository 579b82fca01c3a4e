/* vllm-sr: the router front end (issue #21). One table of subcommands; each is a file.
 * What exists so far: validate, model list|show, serve --engine, status, stop. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "common/cli.h"

static const cli_command commands[] = {
    {"serve", cmd_serve, "serve MODEL[@REV] --engine: resolve the revision, record it, run vllm-srun serve"},
    {"validate", cmd_validate, "check a router config (YAML); every error with its path, line and column"},
    {"model", cmd_model, "list|show the deployments of a router config"},
    {"status", cmd_status, "print the active deployment state"},
    {"stop", cmd_stop, "stop the active deployment (SIGTERM to its process)"},
};

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
    return cli_main("vllm-sr", commands, sizeof commands / sizeof commands[0], argc, argv);
}
