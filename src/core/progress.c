#include "vsr/progress.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct vsr_progress {
    pthread_mutex_t mu;
    char what[96];
    char unit[16];
    uint64_t total, done;
    double start, last_draw;
    int tty;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

vsr_progress *vsr_progress_new(const char *what, uint64_t total_units, const char *unit) {
    vsr_progress *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    pthread_mutex_init(&p->mu, NULL);
    snprintf(p->what, sizeof p->what, "%s", what ? what : "");
    snprintf(p->unit, sizeof p->unit, "%s", unit ? unit : "");
    p->total = total_units;
    p->start = now_s();
    p->tty = isatty(STDERR_FILENO) && !getenv("VSR_NO_PROGRESS");
    return p;
}

static void draw(vsr_progress *p, int final) {
    double t = now_s() - p->start;
    double frac = p->total ? (double)p->done / (double)p->total : 0.0;
    int bar = (int)(frac * 30.0);
    char b[31];
    for (int i = 0; i < 30; i++) b[i] = i < bar ? '#' : '.';
    b[30] = 0;
    int bytes = strcmp(p->unit, "B") == 0;
    if (bytes)
        fprintf(stderr, "\r%s [%s] %5.1f%% %.1f/%.1f MiB %.0f MiB/s%s", p->what, b, frac * 100.0,
                p->done / 1048576.0, p->total / 1048576.0, t > 0 ? p->done / 1048576.0 / t : 0.0,
                final ? "\n" : "");
    else
        fprintf(stderr, "\r%s [%s] %5.1f%% %llu/%llu %s%s", p->what, b, frac * 100.0,
                (unsigned long long)p->done, (unsigned long long)p->total, p->unit,
                final ? "\n" : "");
    fflush(stderr);
}

void vsr_progress_add(vsr_progress *p, uint64_t units) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->done += units;
    double t = now_s();
    if (p->tty && t - p->last_draw > 0.1) {
        p->last_draw = t;
        draw(p, 0);
    }
    pthread_mutex_unlock(&p->mu);
}

void vsr_progress_done(vsr_progress *p) {
    if (!p) return;
    if (p->tty) draw(p, 1);
    pthread_mutex_destroy(&p->mu);
    free(p);
}
