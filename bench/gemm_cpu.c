/* bench/gemm_cpu.c: this machine's peak (FP32 FMA per core, memory bandwidth), then CPU GEMM
 * throughput for BF16 and int4 weights at Qwen3.5 0.8B-like projection shapes.
 *
 *   make -C bench gemm_cpu && build/bench/gemm_cpu [--peak-only] [--quick]
 *
 * Weights are cycled over enough copies to exceed the 32 MiB L3, so weight bytes come from
 * DRAM as they do in a real forward pass. Output: human-readable lines plus "csv," lines
 * (format,M,K,N,threads,seconds,gflops,weight_gbs) that bench/plot_gemm_cpu.py reads. */
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/gemm.h"
#include "backend/cpu/threadpool.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---------------------------------------------------------------- peak FMA */

/* 24 independent zmm chains (FMA latency x 2 pipes needs >= 8-10 in flight); no compiler
 * barrier inside the loop, which would serialise iterations. */
__attribute__((target("avx512f,fma"))) static double fma_kernel_avx512(int64_t iters) {
    __m512 a[24];
    for (int i = 0; i < 24; i++) a[i] = _mm512_set1_ps(1.0f + (float)i * 1e-3f);
    const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    for (int64_t t = 0; t < iters; t++) {
#pragma GCC unroll 24
        for (int i = 0; i < 24; i++) a[i] = _mm512_fmadd_ps(a[i], m, c);
    }
    float out[16];
    __m512 s = a[0];
    for (int i = 1; i < 24; i++) s = _mm512_add_ps(s, a[i]);
    _mm512_storeu_ps(out, s);
    return out[0];
}

__attribute__((target("avx2,fma"))) static double fma_kernel_avx2(int64_t iters) {
    __m256 a[12];
    for (int i = 0; i < 12; i++) a[i] = _mm256_set1_ps(1.0f + (float)i * 1e-3f);
    const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    for (int64_t t = 0; t < iters; t++) {
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) a[i] = _mm256_fmadd_ps(a[i], m, c);
    }
    float out[8];
    __m256 s = a[0];
    for (int i = 1; i < 12; i++) s = _mm256_add_ps(s, a[i]);
    _mm256_storeu_ps(out, s);
    return out[0];
}

typedef struct { int avx512; int64_t iters; double secs, sink; const float *buf; size_t n; } peak_arg;

static void *fma_thread(void *p) {
    peak_arg *a = p;
    double t0 = now();
    a->sink = a->avx512 ? fma_kernel_avx512(a->iters) : fma_kernel_avx2(a->iters);
    a->secs = now() - t0;
    return NULL;
}

/* GFLOP/s over `threads` threads running the register-only kernel at once */
static double peak_fma(int threads, int avx512) {
    int64_t iters = 200000000 / (avx512 ? 24 : 12);
    peak_arg a[8];
    pthread_t th[8];
    double best = 0;
    for (int rep = 0; rep < 7; rep++) { /* best of 7: the 2 cores are shared */
        for (int i = 0; i < threads; i++) {
            a[i] = (peak_arg){.avx512 = avx512, .iters = iters};
            pthread_create(&th[i], NULL, fma_thread, &a[i]);
        }
        double worst = 0;
        for (int i = 0; i < threads; i++) {
            pthread_join(th[i], NULL);
            if (a[i].secs > worst) worst = a[i].secs;
        }
        double flops = (double)threads * (double)iters * (avx512 ? 24 * 16 : 12 * 8) * 2.0;
        if (flops / worst / 1e9 > best) best = flops / worst / 1e9;
    }
    return best;
}

/* ---------------------------------------------------------------- bandwidth */

__attribute__((target("avx512f"))) static double read_stream(const float *p, size_t n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i + 64 <= n; i += 64) {
        s0 = _mm512_add_ps(s0, _mm512_load_ps(p + i));
        s1 = _mm512_add_ps(s1, _mm512_load_ps(p + i + 16));
        s2 = _mm512_add_ps(s2, _mm512_load_ps(p + i + 32));
        s3 = _mm512_add_ps(s3, _mm512_load_ps(p + i + 48));
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}

static void *read_thread(void *p) {
    peak_arg *a = p;
    double t0 = now();
    a->sink = read_stream(a->buf, a->n);
    a->secs = now() - t0;
    return NULL;
}

/* streaming-read GB/s with `threads` threads each reading its half of a buffer >> L3 */
static double peak_read(int threads, const float *buf, size_t n) {
    double best = 0;
    for (int rep = 0; rep < 5; rep++) {
        peak_arg a[8];
        pthread_t th[8];
        size_t per = n / (size_t)threads / 64 * 64;
        double t0 = now();
        for (int i = 0; i < threads; i++) {
            a[i] = (peak_arg){.buf = buf + (size_t)i * per, .n = per};
            pthread_create(&th[i], NULL, read_thread, &a[i]);
        }
        for (int i = 0; i < threads; i++) pthread_join(th[i], NULL);
        double gbs = (double)per * threads * 4 / (now() - t0) / 1e9;
        if (gbs > best) best = gbs;
    }
    return best;
}

static double peak_memcpy(float *dst, const float *src, size_t n) {
    double best = 0;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = now();
        memcpy(dst, src, n * 4);
        double gbs = (double)n * 4 * 2 / (now() - t0) / 1e9; /* read + write bytes */
        if (gbs > best) best = gbs;
    }
    return best;
}

/* ---------------------------------------------------------------- GEMM */

typedef struct { const char *name; int64_t K, N; } shape;
/* Qwen3.5 0.8B-like: hidden 1024, intermediate 3584, 8 heads x 256, DeltaNet 16 x 128 */
static const shape shapes[] = {
    {"qkv 1024->3072", 1024, 3072},
    {"up 1024->3584", 1024, 3584},
    {"down 3584->1024", 3584, 1024},
    {"o 2048->1024", 2048, 1024},
};

static uint64_t rs = 88172645463325252ull;
static uint64_t rnd(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return rs; }

#define L3_EXCEED (96u << 20) /* cycle weight copies over more than L3 */

static void bench_gemm(vsr_pool *pool, int threads, int quick) {
    static const int64_t Ms[] = {1, 8, 128, 512, 4096};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int64_t K = shapes[s].K, N = shapes[s].N;
        size_t bf16_bytes = (size_t)(N * K) * 2, int4_bytes = (size_t)(N * K) / 2 + (size_t)(N * (K / 128)) * 2;
        int copies_b = (int)(L3_EXCEED / bf16_bytes) + 1, copies_q = (int)(L3_EXCEED / int4_bytes) + 1;
        uint16_t **Wb = malloc(sizeof *Wb * (size_t)copies_b);
        for (int c = 0; c < copies_b; c++) {
            Wb[c] = malloc(bf16_bytes);
            for (int64_t i = 0; i < N * K; i++) Wb[c][i] = (uint16_t)(0x3c00 + (rnd() & 0x7ff) - 0x400) | (uint16_t)((rnd() & 1) << 15);
        }
        vsr_int4_weight *Wq = malloc(sizeof *Wq * (size_t)copies_q);
        for (int c = 0; c < copies_q; c++) {
            uint32_t *pk = malloc((size_t)(N * K / 8) * 4);
            uint16_t *sc = malloc((size_t)(N * (K / 128)) * 2);
            uint32_t *zp = malloc((size_t)((N + 7) / 8 * (K / 128)) * 4);
            for (int64_t i = 0; i < N * K / 8; i++) pk[i] = (uint32_t)rnd();
            for (int64_t i = 0; i < N * (K / 128); i++) sc[i] = 0x3c00 + (uint16_t)(rnd() & 0xff);
            for (int64_t i = 0; i < (N + 7) / 8 * (K / 128); i++) zp[i] = (uint32_t)rnd();
            Wq[c] = (vsr_int4_weight){pk, sc, zp, NULL, 128, N, K};
        }
        for (size_t mi = 0; mi < sizeof Ms / sizeof *Ms; mi++) {
            int64_t M = Ms[mi];
            if (quick && M > 512) continue;
            float *X = malloc((size_t)(M * K) * 4), *Y = malloc((size_t)(M * N) * 4);
            for (int64_t i = 0; i < M * K; i++) X[i] = (float)(rnd() % 2001) / 1000.0f - 1.0f;
            for (int fmt = 0; fmt < 2; fmt++) {
                double flops = 2.0 * (double)M * (double)N * (double)K;
                size_t wbytes = fmt ? int4_bytes : bf16_bytes;
                int copies = fmt ? copies_q : copies_b;
                /* warm-up call, then as many calls as fit ~0.4 s (at least 3) */
                if (fmt) vsr_gemm_int4(pool, X, M, &Wq[0], Y, 0);
                else vsr_gemm_bf16(pool, X, M, K, Wb[0], N, Y, 0);
                int reps = 0;
                double t0 = now(), t;
                do {
                    int c = reps % copies;
                    if (fmt) vsr_gemm_int4(pool, X, M, &Wq[c], Y, 0);
                    else vsr_gemm_bf16(pool, X, M, K, Wb[c], N, Y, 0);
                    reps++;
                    t = now() - t0;
                } while (reps < 3 || t < (quick ? 0.15 : 0.4));
                double sec = t / reps;
                printf("%-5s %-16s M %5lld threads %d: %9.3f ms  %7.1f GFLOP/s  %6.1f GB/s weights\n",
                       fmt ? "int4" : "bf16", shapes[s].name, (long long)M, threads, sec * 1e3,
                       flops / sec / 1e9, (double)wbytes / sec / 1e9);
                printf("csv,%s,%lld,%lld,%lld,%d,%.6e,%.3f,%.3f\n", fmt ? "int4" : "bf16",
                       (long long)M, (long long)K, (long long)N, threads, sec, flops / sec / 1e9,
                       (double)wbytes / sec / 1e9);
                fflush(stdout);
            }
            free(X);
            free(Y);
        }
        for (int c = 0; c < copies_b; c++) free(Wb[c]);
        for (int c = 0; c < copies_q; c++) {
            free((void *)Wq[c].packed); free((void *)Wq[c].scale_bf16); free((void *)Wq[c].zp);
        }
        free(Wb);
        free(Wq);
    }
}

int main(int argc, char **argv) {
    int peak_only = 0, quick = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--peak-only")) peak_only = 1;
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else { fprintf(stderr, "usage: %s [--peak-only] [--quick]\n", argv[0]); return 2; }
    }
    __builtin_cpu_init();
    int avx512 = __builtin_cpu_supports("avx512f");
    printf("gemm isa: %s\n", vsr_gemm_isa());
    for (int t = 1; t <= 2; t++)
        printf("peak fma %s %d thread(s): %.1f GFLOP/s\n", avx512 ? "avx512" : "avx2", t, peak_fma(t, avx512));
    if (avx512) printf("peak fma avx2 1 thread: %.1f GFLOP/s\n", peak_fma(1, 0));
    size_t n = (512u << 20) / 4;
    float *buf = aligned_alloc(64, n * 4), *dst = aligned_alloc(64, n * 4);
    for (size_t i = 0; i < n; i++) buf[i] = (float)(i & 1023);
    memset(dst, 0, n * 4);
    if (avx512)
        for (int t = 1; t <= 2; t++) printf("peak read %d thread(s): %.1f GB/s\n", t, peak_read(t, buf, n));
    printf("memcpy 512 MiB (read+write bytes): %.1f GB/s\n", peak_memcpy(dst, buf, n));
    free(buf);
    free(dst);
    if (peak_only) return 0;
    for (int t = 1; t <= 2; t++) {
        vsr_pool *pool = vsr_pool_new(t);
        bench_gemm(pool, t, quick);
        vsr_pool_free(pool);
    }
    return 0;
}
