/* vllm-sr status: prints the active deployment state; vllm-sr stop: SIGTERM to its pid,
 * waits for it to exit (SIGKILL after --grace seconds, default 10), removes the state. */
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "common/cli.h"

static json_t *load_state(char *file, size_t n) {
    sr_state_file(file, n);
    json_error_t je;
    json_t *st = json_load_file(file, 0, &je);
    if (!st && access(file, F_OK) == 0) fprintf(stderr, "vllm-sr: %s is not valid JSON: %s\n", file, je.text);
    return st;
}

/* Running: signalable and not a zombie (a zombie has exited; its parent has not reaped it yet). */
static bool alive(pid_t pid) {
    if (pid <= 0 || (kill(pid, 0) != 0 && errno != EPERM)) return false;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return true;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *rp = strrchr(buf, ')');
    return !(rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X'));
}

int cmd_status(int argc, char **argv) {
    if (argc > 1) {
        if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
            printf("usage: vllm-sr status\nPrints the active deployment state ($VLLM_SR_STATE_DIR/active.json).\n");
            return 0;
        }
        fprintf(stderr, "vllm-sr status: unexpected argument %s\n", argv[1]);
        return 2;
    }
    char file[4096];
    json_t *st = load_state(file, sizeof file);
    if (!st) {
        printf("no active deployment (%s does not exist)\n", file);
        return 1;
    }
    pid_t pid = (pid_t)json_integer_value(json_object_get(st, "pid"));
    printf("state:    %s\n", file);
    printf("mode:     %s\n", json_string_value(json_object_get(st, "mode")));
    printf("model:    %s\n", json_string_value(json_object_get(st, "model")));
    const char *req = json_string_value(json_object_get(st, "requested_revision"));
    const char *rev = json_string_value(json_object_get(st, "revision"));
    printf("revision: %s%s%s%s\n", rev ? rev : "- (local path)", req ? " (requested " : "", req ? req : "", req ? ")" : "");
    printf("device:   %s\n", json_string_value(json_object_get(st, "device")));
    printf("listen:   %s:%s\n", json_string_value(json_object_get(st, "host")), json_string_value(json_object_get(st, "port")));
    printf("pid:      %d (%s)\n", (int)pid, alive(pid) ? "running" : "not running");
    json_decref(st);
    return 0;
}

int cmd_stop(int argc, char **argv) {
    long grace = 10;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int r;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: vllm-sr stop [--grace SECONDS]\nSIGTERM to the active deployment's process, SIGKILL after the "
                   "grace period (10 s).\n");
            return 0;
        }
        if ((r = arg_value(argc, argv, &i, "--grace", &v))) {
            if (r < 0) return 2;
            char *end;
            grace = strtol(v, &end, 10);
            if (*end || grace < 0 || grace > 3600) {
                fprintf(stderr, "vllm-sr stop: --grace must be 0 to 3600 seconds\n");
                return 2;
            }
            continue;
        }
        fprintf(stderr, "vllm-sr stop: unexpected argument %s\n", argv[i]);
        return 2;
    }
    char file[4096];
    json_t *st = load_state(file, sizeof file);
    if (!st) {
        printf("no active deployment (%s does not exist)\n", file);
        return 1;
    }
    pid_t pid = (pid_t)json_integer_value(json_object_get(st, "pid"));
    json_decref(st);
    if (!alive(pid)) {
        printf("the active deployment (pid %d) is not running; state removed\n", (int)pid);
        unlink(file);
        return 0;
    }
    if (kill(pid, SIGTERM)) {
        fprintf(stderr, "vllm-sr stop: cannot signal pid %d: %s\n", (int)pid, strerror(errno));
        return 1;
    }
    struct timespec ts = {0, 50 * 1000 * 1000};
    for (long waited = 0; alive(pid) && waited < grace * 20; waited++) nanosleep(&ts, NULL);
    bool killed = false;
    if (alive(pid)) {
        kill(pid, SIGKILL);
        killed = true;
        for (int i = 0; alive(pid) && i < 100; i++) nanosleep(&ts, NULL);
    }
    unlink(file);
    printf("stopped pid %d%s\n", (int)pid, killed ? " (SIGKILL after the grace period)" : "");
    return 0;
}
