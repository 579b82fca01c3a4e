/* Thread pool: workers wait on a generation counter (a short spin, then a condition
 * variable), take chunks from an atomic cursor, and the last one to finish wakes the
 * caller. The spin keeps back-to-back GEMV calls (one per linear layer, ~10-100 us each)
 * from paying a futex wake-up every time, while idle workers still sleep. */
#include "backend/cpu/threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

enum { SPIN_ITERS = 4000 };

typedef void (*pool_fn)(void *ctx, int64_t begin, int64_t end, int worker);

struct vsr_pool {
    int size;                 /* workers including the caller */
    pthread_t *threads;       /* size - 1 */
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    _Atomic uint64_t gen;     /* bumped once per vsr_pool_for */
    bool stop;
    /* the current job; written before gen is bumped */
    pool_fn fn;
    void *ctx;
    int64_t n, chunk;
    _Atomic int64_t next;
    _Atomic int pending;      /* helper threads still working on this generation */
};

typedef struct { vsr_pool *p; int index; } worker_arg;

static void run_chunks(vsr_pool *p, int worker) {
    for (;;) {
        int64_t b = atomic_fetch_add_explicit(&p->next, p->chunk, memory_order_relaxed);
        if (b >= p->n) break;
        int64_t e = b + p->chunk < p->n ? b + p->chunk : p->n;
        p->fn(p->ctx, b, e, worker);
    }
}

static void *worker_main(void *arg) {
    worker_arg wa = *(worker_arg *)arg;
    free(arg);
    vsr_pool *p = wa.p;
    uint64_t seen = 0;
    for (;;) {
        int spins = 0;
        while (atomic_load_explicit(&p->gen, memory_order_acquire) == seen && spins < SPIN_ITERS) {
            CPU_RELAX();
            spins++;
        }
        pthread_mutex_lock(&p->mu);
        while (atomic_load_explicit(&p->gen, memory_order_acquire) == seen && !p->stop)
            pthread_cond_wait(&p->cv_work, &p->mu);
        bool stop = p->stop;
        seen = atomic_load_explicit(&p->gen, memory_order_acquire);
        pthread_mutex_unlock(&p->mu);
        if (stop) return NULL;
        run_chunks(p, wa.index);
        if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->cv_done);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

vsr_pool *vsr_pool_new(int threads) {
    if (threads <= 0) {
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        threads = online > 0 ? (int)online : 1;
    }
    vsr_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->size = 1;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_work, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    if (threads > 1) {
        p->threads = calloc((size_t)threads - 1, sizeof *p->threads);
        if (!p->threads) {
            vsr_pool_free(p);
            return NULL;
        }
        for (int i = 1; i < threads; i++) {
            worker_arg *wa = malloc(sizeof *wa);
            if (!wa) break;
            *wa = (worker_arg){p, i};
            if (pthread_create(&p->threads[i - 1], NULL, worker_main, wa) != 0) {
                free(wa);
                break;
            }
            p->size++;
        }
        if (p->size != threads) { /* partial start: shut down what started, report failure */
            vsr_pool_free(p);
            return NULL;
        }
    }
    return p;
}

void vsr_pool_free(vsr_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->size - 1; i++) pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->cv_work);
    pthread_cond_destroy(&p->cv_done);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p);
}

int vsr_pool_size(const vsr_pool *p) { return p ? p->size : 1; }

void vsr_pool_for(vsr_pool *p, int64_t n, int64_t grain, pool_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (!p || p->size == 1 || n <= grain) {
        fn(ctx, 0, n, 0);
        return;
    }
    /* ~4 chunks per worker: enough to even out, few enough to keep the cursor cold. */
    int64_t chunk = (n + 4 * (int64_t)p->size - 1) / (4 * (int64_t)p->size);
    if (chunk < grain) chunk = grain;
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->chunk = chunk;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    atomic_store_explicit(&p->pending, p->size - 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);

    run_chunks(p, 0);

    int spins = 0;
    while (atomic_load_explicit(&p->pending, memory_order_acquire) != 0 && spins < SPIN_ITERS) {
        CPU_RELAX();
        spins++;
    }
    if (atomic_load_explicit(&p->pending, memory_order_acquire) != 0) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load_explicit(&p->pending, memory_order_acquire) != 0)
            pthread_cond_wait(&p->cv_done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
}
