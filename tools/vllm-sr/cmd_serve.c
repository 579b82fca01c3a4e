/* vllm-sr serve MODEL[@REV] [--revision R] --engine [--platform cuda|rocm|cpu] [--device D]
 *               [--host H] [--port P] [--store DIR]
 * Engine mode: resolves the revision once, from the local store (refs/ of the Hub cache
 * layout), into a commit; checks --platform against the host's devices; writes the active
 * deployment state ($VLLM_SR_STATE_DIR/active.json); then execs `vllm-srun serve` (the
 * binary beside this one) on that commit, in the foreground, in this same process (so the
 * recorded pid is the worker's).
 * Router mode (--config without --engine) is cmd_router.c. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "common/cli.h"
#include "vsr/catalog.h"
#include "vsr/device.h"
#include "vsr/package.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: vllm-sr serve MODEL[@REV] [--revision R] --engine [--platform cuda|rocm|cpu] [--device D]\n"
            "                     [--host H] [--port P] [--store DIR]\n"
            "Engine mode: resolve the revision (a commit, branch or tag) once from the local store, record\n"
            "the commit in the active deployment state ($VLLM_SR_STATE_DIR, default ~/.local/state/vllm-sr),\n"
            "then run `vllm-srun serve` on that commit in the foreground. `vllm-sr status` shows the state,\n"
            "`vllm-sr stop` stops it. Router mode: vllm-sr serve --config FILE (vllm-sr serve --config x --help).\n");
}

static int mkdirs(const char *path) {
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(tmp, 0700) && errno != EEXIST) return -1;
            *p = '/';
        }
    if (mkdir(tmp, 0700) && errno != EEXIST) return -1;
    return 0;
}

/* cuda|nvidia -> cuda, rocm|amd -> rocm, cpu -> cpu. */
static const char *platform_kind(const char *p) {
    if (!strcmp(p, "cuda") || !strcmp(p, "nvidia")) return "cuda";
    if (!strcmp(p, "rocm") || !strcmp(p, "amd")) return "rocm";
    if (!strcmp(p, "cpu")) return "cpu";
    return NULL;
}

int cmd_serve(int argc, char **argv) {
    const char *models[64];
    int n_models = 0;
    const char *revision = NULL, *platform = NULL, *device = NULL, *host = "127.0.0.1", *port = "8100",
               *store = NULL, *config = NULL;
    bool engine = false, have_revision = false;
    /* --config without --engine is router mode, with its own options. */
    bool has_config = false, has_engine = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--config") || !strncmp(argv[i], "--config=", 9)) has_config = true;
        if (!strcmp(argv[i], "--engine") || !strcmp(argv[i], "-e")) has_engine = true;
    }
    if (has_config && !has_engine) return cmd_serve_router(argc, argv);
    for (int i = 1; i < argc; i++) {
        int r;
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--engine") || !strcmp(a, "-e")) { engine = true; continue; }
        if ((r = arg_value(argc, argv, &i, "--revision", &revision))) { if (r < 0) return 2; have_revision = true; continue; }
        if ((r = arg_value(argc, argv, &i, "--platform", &platform))) { if (r < 0) return 2; continue; }
        if ((r = arg_value(argc, argv, &i, "--device", &device))) { if (r < 0) return 2; continue; }
        if ((r = arg_value(argc, argv, &i, "--host", &host))) { if (r < 0) return 2; continue; }
        if ((r = arg_value(argc, argv, &i, "--port", &port))) { if (r < 0) return 2; continue; }
        if ((r = arg_value(argc, argv, &i, "--store", &store))) { if (r < 0) return 2; continue; }
        if ((r = arg_value(argc, argv, &i, "--config", &config))) { if (r < 0) return 2; continue; }
        if ((r = arg_value(argc, argv, &i, "--model", &a))) { if (r < 0) return 2; }
        else if (a[0] == '-') {
            fprintf(stderr, "vllm-sr serve: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
        if (n_models == 64) {
            fprintf(stderr, "vllm-sr serve: too many MODEL arguments\n");
            return 2;
        }
        models[n_models++] = a;
    }
    if (!engine) {
        fprintf(stderr, "vllm-sr serve: router mode needs --config CONFIG.yaml; engine mode is "
                        "`vllm-sr serve MODEL --engine` (docs/router.md)\n");
        return 2;
    }
    if (config) {
        fprintf(stderr, "vllm-sr serve: --config applies to the Router stack, not to --engine\n");
        return 2;
    }
    if (n_models == 0) {
        usage(stderr);
        return 2;
    }
    if (have_revision && (!revision || !*revision)) {
        fprintf(stderr, "vllm-sr serve: --revision must be a non-empty branch, tag or commit\n");
        return 2;
    }
    if (have_revision && n_models > 1) {
        fprintf(stderr, "vllm-sr serve: --revision applies to a single MODEL; use MODEL@REVISION for several\n");
        return 2;
    }
    if (n_models > 1) {
        fprintf(stderr, "vllm-sr serve: engine mode runs one vllm-srun worker, which serves one MODEL (got %d); "
                        "several models need the Router stack (vllm-sr serve --config CONFIG.yaml)\n", n_models);
        return 2;
    }
    /* MODEL@REV, split at the last '@' unless the whole argument is an existing path. */
    char repo[1024];
    const char *rev = revision;
    struct stat sb;
    bool local = stat(models[0], &sb) == 0 || models[0][0] == '/' || models[0][0] == '.';
    snprintf(repo, sizeof repo, "%s", models[0]);
    if (!local) {
        char *at = strrchr(repo, '@');
        if (at) {
            *at = 0;
            if (!at[1]) {
                fprintf(stderr, "vllm-sr serve: %s: --revision must be a non-empty branch, tag or commit "
                                "(nothing after '@')\n", models[0]);
                return 2;
            }
            if (rev && strcmp(rev, at + 1)) {
                fprintf(stderr, "vllm-sr serve: %s names revision %s but --revision says %s\n", models[0], at + 1, rev);
                return 2;
            }
            rev = models[0] + (at - repo) + 1;
        }
    }
    if (local && rev) {
        fprintf(stderr, "vllm-sr serve: --revision applies only to Hub repositories (%s is a local path)\n", repo);
        return 2;
    }
    /* --platform: the accelerator family the worker must use; a host without it fails now. */
    if (platform) {
        const char *kind = platform_kind(platform);
        if (!kind) {
            fprintf(stderr, "vllm-sr serve: --platform must be cuda, rocm or cpu (found \"%s\")\n", platform);
            return 2;
        }
        if (device && strcmp(device, "auto") && strncmp(device, kind, strlen(kind))) {
            fprintf(stderr, "vllm-sr serve: --device %s does not belong to --platform %s\n", device, platform);
            return 2;
        }
        vsr_device_list devs;
        vsr_err e = {0};
        if (vsr_devices_probe(&devs, &e)) {
            fprintf(stderr, "vllm-sr serve: --platform %s: cannot probe this host's devices: %s\n", platform, e.msg);
            return 1;
        }
        bool found = false;
        char seen[1024] = "";
        size_t at = 0;
        for (int i = 0; i < devs.count; i++) {
            char id[32];
            vsr_device_id(&devs.dev[i], id, sizeof id);
            if (!strcmp(vsr_device_kind_name(devs.dev[i].kind), kind)) found = true;
            if (at < sizeof seen) at += (size_t)snprintf(seen + at, sizeof seen - at, "%s%s", i ? ", " : "", id);
        }
        if (!found) {
            for (char *q = devs.notes; *q; q++)
                if (*q == '\n') *q = ';';
            fprintf(stderr, "vllm-sr serve: --platform %s: this host has no %s device (devices: %s)%s%s\n", platform,
                    !strcmp(kind, "cuda") ? "NVIDIA (CUDA)" : !strcmp(kind, "rocm") ? "AMD (ROCm)" : "CPU", seen,
                    devs.notes[0] ? "; " : "", devs.notes);
            return 1;
        }
        if (!device || !strcmp(device, "auto")) device = kind;
    }
    char commit[41] = "", snap[PATH_MAX] = "";
    if (!local) {
        const char *want = rev ? rev : vsr_catalog_default_revision(repo);
        vsr_err e = {0};
        if (vsr_store_resolve(store, repo, want ? want : "main", snap, sizeof snap, commit, &e)) {
            if (rev)
                fprintf(stderr, "vllm-sr serve: %s@%s: Model revision is not cached; connect to the Hub or specify a "
                                "cached commit (%s)\n", repo, rev, e.msg);
            else fprintf(stderr, "vllm-sr serve: %s\n", e.msg);
            return 1;
        }
    }
    if (!device) device = "auto";

    /* The worker binary beside this one. */
    char self[PATH_MAX], worker[PATH_MAX + 16];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        fprintf(stderr, "vllm-sr serve: cannot find this program's path: %s\n", strerror(errno));
        return 1;
    }
    self[n] = 0;
    char *slash = strrchr(self, '/');
    if (slash) *slash = 0;
    snprintf(worker, sizeof worker, "%s/vllm-srun", self);
    if (access(worker, X_OK)) {
        fprintf(stderr, "vllm-sr serve: the worker %s is missing or not executable\n", worker);
        return 1;
    }

    /* The active deployment state. */
    char dir[3072], file[4096], tmp[4200];
    sr_state_dir(dir, sizeof dir);
    if (mkdirs(dir)) {
        fprintf(stderr, "vllm-sr serve: cannot create the state folder %s: %s\n", dir, strerror(errno));
        return 1;
    }
    sr_state_file(file, sizeof file);
    char model_arg[1200];
    if (local) snprintf(model_arg, sizeof model_arg, "%s", repo);
    else snprintf(model_arg, sizeof model_arg, "%s@%s", repo, commit);
    json_t *st = json_pack("{s:s, s:i, s:s, s:s?, s:s?, s:s, s:s, s:s, s:s, s:I}", "mode", "engine", "pid",
                           (int)getpid(), "model", repo, "requested_revision", rev, "revision", local ? NULL : commit,
                           "device", device, "host", host, "port", port, "worker", worker, "started_at",
                           (json_int_t)time(NULL));
    if (platform) json_object_set_new(st, "platform", json_string(platform));
    if (store) json_object_set_new(st, "store", json_string(store));
    snprintf(tmp, sizeof tmp, "%s.tmp", file);
    if (!st || json_dump_file(st, tmp, JSON_INDENT(2) | JSON_SORT_KEYS) || rename(tmp, file)) {
        fprintf(stderr, "vllm-sr serve: cannot write the active deployment state %s: %s\n", file, strerror(errno));
        json_decref(st);
        return 1;
    }
    json_decref(st);
    if (!local)
        fprintf(stderr, "vllm-sr: %s revision %s resolved to %s; state in %s\n", repo, rev ? rev : "(default)", commit,
                file);
    fflush(stderr);
    const char *args[16];
    int k = 0;
    args[k++] = worker;
    args[k++] = "serve";
    args[k++] = model_arg;
    args[k++] = "--device";
    args[k++] = device;
    args[k++] = "--host";
    args[k++] = host;
    args[k++] = "--port";
    args[k++] = port;
    if (store) {
        args[k++] = "--store";
        args[k++] = store;
    }
    args[k] = NULL;
    execv(worker, (char *const *)args);
    fprintf(stderr, "vllm-sr serve: cannot run %s: %s\n", worker, strerror(errno));
    unlink(file);
    return 1;
}
