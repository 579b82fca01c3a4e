#include "server/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static srv_log_level current = SRV_LOG_INFO;
static const char *const names[] = {"error", "warn", "info", "debug"};
static const char *program = "vllm-srun";

void srv_log_set_program(const char *name) { program = name; }

int srv_log_set_level(const char *name) {
    for (int i = 0; i < 4; i++)
        if (!strcmp(name, names[i])) {
            current = (srv_log_level)i;
            return 1;
        }
    return 0;
}

void srv_log(srv_log_level lv, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    srv_logv(lv, fmt, ap);
    va_end(ap);
}

void srv_logv(srv_log_level lv, const char *fmt, va_list ap) {
    if (lv > current) return;
    char line[2048];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && line[n - 1] == '\n') line[--n] = 0; /* libmicrohttpd's messages end in one */
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    char ts[32];
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
    fprintf(stderr, "%s %s %s: %s\n", ts, program, names[lv], line);
}
