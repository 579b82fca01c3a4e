/* vllm-sr model list|show KEY --config CONFIG [--store DIR]: the deployments of a router
 * config, their artifact, the revision resolved from the store where it can be, device and
 * what they serve (family, and the roles the config gives them). */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "common/cli.h"
#include "vsr/catalog.h"
#include "vsr/package.h"
#include "vsr/router.h"

static void usage(FILE *f) {
    fprintf(f, "usage: vllm-sr model list --config CONFIG.yaml [--store DIR]\n"
               "       vllm-sr model show KEY --config CONFIG.yaml [--store DIR]\n");
}

/* The revision a deployment loads and where that was decided. */
static void resolve(const vsr_rt_deployment *d, const char *store, char *rev, size_t n, const char **where) {
    *where = "";
    if (!d->artifact) {
        snprintf(rev, n, "-");
        *where = d->endpoint || d->n_replicas ? "attached" : "";
        return;
    }
    if (d->artifact[0] == '/') {
        snprintf(rev, n, "-");
        *where = "local path";
        return;
    }
    const char *want = d->revision ? d->revision : vsr_catalog_default_revision(d->artifact);
    char snap[PATH_MAX], commit[41];
    vsr_err e = {0};
    if (!vsr_store_resolve(store, d->artifact, want ? want : "main", snap, sizeof snap, commit, &e)) {
        snprintf(rev, n, "%s", commit);
        *where = want ? "in the store" : "store refs/main";
        return;
    }
    snprintf(rev, n, "%s", want ? want : "?");
    *where = "not in the store";
}

static void roles(const vsr_router_config *c, const vsr_rt_deployment *d, char *buf, size_t n) {
    size_t at = 0;
    buf[0] = 0;
    if (c->decision_model && !strcmp(c->decision_model, d->key))
        at += (size_t)snprintf(buf + at, n - at, "decision_model");
    for (int i = 0; i < c->n_bindings && at < n; i++)
        if (!strcmp(c->bindings[i].deployment, d->key))
            at += (size_t)snprintf(buf + at, n - at, "%s%s (%s)", at ? ", " : "", c->bindings[i].name,
                                   c->bindings[i].contract);
    if (!at) snprintf(buf, n, "(unused: not started)");
}

static void placement(const vsr_rt_deployment *d, char *buf, size_t n) {
    if (!d->n_replicas) {
        snprintf(buf, n, "%s", d->endpoint ? d->endpoint : d->device ? d->device : "auto");
        return;
    }
    size_t at = 0;
    buf[0] = 0;
    for (int i = 0; i < d->n_replicas && at < n; i++) {
        const vsr_rt_replica *r = &d->replicas[i];
        at += (size_t)snprintf(buf + at, n - at, "%s%s", i ? "," : "", r->endpoint ? r->endpoint : r->device);
    }
}

int cmd_model(int argc, char **argv) {
    const char *sub = NULL, *key = NULL, *file = NULL, *store = NULL;
    for (int i = 1; i < argc; i++) {
        int r;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        if ((r = arg_value(argc, argv, &i, "--config", &file))) { if (r < 0) return 2; continue; }
        if ((r = arg_value(argc, argv, &i, "--store", &store))) { if (r < 0) return 2; continue; }
        if (argv[i][0] == '-') {
            fprintf(stderr, "vllm-sr model: unknown option %s\n", argv[i]);
            return 2;
        }
        if (!sub) sub = argv[i];
        else if (!key) key = argv[i];
        else {
            fprintf(stderr, "vllm-sr model: unexpected argument %s\n", argv[i]);
            return 2;
        }
    }
    if (!sub || (strcmp(sub, "list") && strcmp(sub, "show")) || (!strcmp(sub, "show") && !key) ||
        (!strcmp(sub, "list") && key)) {
        usage(stderr);
        return 2;
    }
    if (!file) {
        fprintf(stderr, "vllm-sr model %s: --config CONFIG.yaml is required\n", sub);
        return 2;
    }
    vsr_router_options opt = {.store_dir = store};
    vsr_router_config *c = vsr_router_config_load(file, &opt);
    if (!c) return 1;
    if (c->n_errors) {
        fprintf(stderr, "Configuration validation failed:\n");
        char line[2048];
        for (int i = 0; i < c->n_errors; i++) fprintf(stderr, "  %s\n", vsr_rt_error_format(&c->errors[i], line, sizeof line));
        vsr_router_config_free(c);
        return 1;
    }
    int rc = 0;
    char rev[64], place[4096], role[2048];
    const char *where, *src;
    if (!strcmp(sub, "list")) {
        printf("%-16s %-14s %-32s %-42s %-12s %s\n", "DEPLOYMENT", "PROVIDER", "ARTIFACT", "REVISION", "DEVICE", "SERVES");
        for (int i = 0; i < c->n_deployments; i++) {
            const vsr_rt_deployment *d = &c->deployments[i];
            resolve(d, store, rev, sizeof rev, &where);
            placement(d, place, sizeof place);
            roles(c, d, role, sizeof role);
            const char *fam = vsr_router_artifact_family(d, store, &src);
            printf("%-16s %-14s %-32s %-42s %-12s %s: %s\n", d->key,
                   d->provider == VSR_RT_MODEL_RUNTIME ? "model_runtime" : "http", d->artifact ? d->artifact : "-", rev,
                   place, fam ? fam : "family unknown", role);
        }
    } else {
        const vsr_rt_deployment *d = vsr_router_deployment(c, key);
        if (!d) {
            fprintf(stderr, "vllm-sr model show: Unknown model deployment '%s'\n", key);
            rc = 1;
        } else {
            resolve(d, store, rev, sizeof rev, &where);
            placement(d, place, sizeof place);
            roles(c, d, role, sizeof role);
            const char *fam = vsr_router_artifact_family(d, store, &src);
            printf("deployment:  %s (line %d)\n", d->key, d->line);
            printf("provider:    %s\n", d->provider == VSR_RT_MODEL_RUNTIME ? "model_runtime" : "http");
            printf("artifact:    %s\n", d->artifact ? d->artifact : "-");
            printf("revision:    %s%s%s%s\n", rev, *where ? " (" : "", where, *where ? ")" : "");
            printf("profile:     %s\n", d->profile);
            printf("placement:   %s%s\n", place, d->n_replicas ? " (replicas)" : "");
            if (d->served_name) printf("served_name: %s\n", d->served_name);
            if (d->public_name) printf("public_name: %s\n", d->public_name);
            printf("family:      %s%s%s%s\n", fam ? fam : "unknown (not built in and not in the store)", src ? " (from the " : "",
                   src ? src : "", src ? ")" : "");
            printf("serves:      %s\n", role);
        }
    }
    vsr_router_config_free(c);
    return rc;
}
