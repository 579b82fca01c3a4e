#include "server/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static srv_log_level current = SRV_LOG_INFO;
static const char *const names[] = {"error", "warn", "info", "debug"};

int srv_log_set_level(const char *name) {
    for (int i = 0; i < 4; i++)
        if (!strcmp(name, names[i])) {
            current = (srv_log_level)i;
            return 1;
        }
    return 0;
}

void srv_log(srv_log_level lv, const char *fmt, ...) {
    if (lv > current) return;
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    char ts[32];
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
    fprintf(stderr, "%s vllm-srun %s: %s\n", ts, names[lv], line);
}
