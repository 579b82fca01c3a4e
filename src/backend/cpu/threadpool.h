/* src/backend/cpu/threadpool.h: a fixed pool of worker threads for the CPU kernels.
 *
 * The caller's thread is worker 0, so vsr_pool_new(2) starts one extra thread. Work is
 * handed out in chunks from a shared counter, so uneven chunks balance themselves.
 * A NULL pool runs the whole range inline on the caller's thread (worker 0). */
#ifndef VSR_BACKEND_CPU_THREADPOOL_H
#define VSR_BACKEND_CPU_THREADPOOL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vsr_pool vsr_pool;

/* 0 = every online core; the caller's thread is one worker. NULL if threads cannot start. */
vsr_pool *vsr_pool_new(int threads);
void vsr_pool_free(vsr_pool *p); /* NULL is a no-op */
int vsr_pool_size(const vsr_pool *p); /* 1 for NULL */
/* Parallel for over [0,n) in chunks of at least `grain`; fn(ctx, begin, end, worker_index)
 * with worker_index in [0, vsr_pool_size(p)). Blocks until done. Safe to call from one
 * thread at a time (not re-entrant from inside fn). */
void vsr_pool_for(vsr_pool *p, int64_t n, int64_t grain,
                  void (*fn)(void *ctx, int64_t begin, int64_t end, int worker), void *ctx);

#ifdef __cplusplus
}
#endif

#endif
