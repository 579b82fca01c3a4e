/* vsr/progress.h: progress for long work (hashing, loading, quantizing, benchmarks).
 * Draws a single updating line on a terminal (stderr is a tty) and stays silent
 * otherwise, so logs carry only results. Thread-safe. */
#ifndef VSR_PROGRESS_H
#define VSR_PROGRESS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vsr_progress vsr_progress;

/* NULL-safe everywhere: a NULL progress does nothing. */
vsr_progress *vsr_progress_new(const char *what, uint64_t total_units, const char *unit);
void vsr_progress_add(vsr_progress *p, uint64_t units);
void vsr_progress_done(vsr_progress *p); /* finishes the line and frees */

#ifdef __cplusplus
}
#endif

#endif
