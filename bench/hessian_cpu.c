/* bench/hessian_cpu.c: GPTQ's calibration Hessian accumulation (src/quantize/hessian.c) against its
 * floor and against the plain loop it replaced, on this CPU.
 *   make -C bench hessian_cpu && build/bench/hessian_cpu [threads]
 * Work per call: rows x K (K + 1) / 2 multiply-adds (the upper triangle). Floor: 16 FP64 multiply-adds
 * per cycle and core (two 512-bit multiplies and two 512-bit adds a cycle) at the clock given by
 * VSR_BENCH_GHZ (default 3.0). Reports the median of 5 calls of the blocked kernel on AVX-512, on its AVX2
 * clone and on the x86-64-v2 baseline (SSE2), and the plain loop (qz_hessian_ref) at 1 thread. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/gemm.h"
#include "backend/cpu/threadpool.h"
#include "quantize/quant_internal.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef int (*hfn)(double *, const double *, int64_t, int64_t, vsr_pool *);
static int ref_fn(double *H, const double *x, int64_t rows, int64_t K, vsr_pool *p) {
    (void)p;
    qz_hessian_ref(H, x, rows, K);
    return 0;
}

static double median_s(hfn f, double *H, const double *x, int64_t rows, int64_t K, vsr_pool *p, int reps) {
    double t[5];
    for (int r = 0; r < reps; r++) {
        double a = now();
        if (f(H, x, rows, K, p)) {
            fprintf(stderr, "hessian_cpu: out of memory\n");
            exit(1);
        }
        t[r] = now() - a;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_d);
    return t[reps / 2];
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 0;
    const char *g = getenv("VSR_BENCH_GHZ");
    double ghz = g ? atof(g) : 3.0;
    vsr_pool *pool = vsr_pool_new(threads);
    int nt = vsr_pool_size(pool);
    static const int64_t Ks[] = {256, 1024, 5120};
    const int64_t rows = 256;
    printf("Hessian accumulation, rows %lld, %d thread(s), floor at %.1f GHz x 16 multiply-adds/cycle/core\n",
           (long long)rows, nt, ghz);
    printf("%6s %10s %11s %9s %10s %9s %12s %9s %13s\n", "K", "floor ms", "avx512 ms", "of floor", "avx2 ms",
           "of floor", "baseline ms", "of floor", "plain ms (1t)");
    for (size_t i = 0; i < sizeof Ks / sizeof *Ks; i++) {
        int64_t K = Ks[i];
        double *x = malloc(sizeof *x * (size_t)(rows * K)), *H = calloc((size_t)(K * K), sizeof *H);
        for (int64_t k = 0; k < rows * K; k++) x[k] = (double)((k * 2654435761u) % 1000) / 997.0 - 0.5;
        double madds = (double)rows * (double)K * (double)(K + 1) / 2;
        double floor_s = madds / (16.0 * ghz * 1e9 * nt);
        vsr_gemm_force_isa(NULL);
        double tb = median_s(qz_hessian_add, H, x, rows, K, pool, 5);
        vsr_gemm_force_isa("avx2+fma");
        double ta = median_s(qz_hessian_add, H, x, rows, K, pool, K > 2048 ? 3 : 5);
        vsr_gemm_force_isa("scalar");
        double tp = median_s(qz_hessian_add, H, x, rows, K, pool, K > 2048 ? 3 : 5);
        vsr_gemm_force_isa(NULL);
        double tr = median_s(ref_fn, H, x, rows, K, NULL, K > 2048 ? 1 : 3);
        printf("%6lld %10.2f %11.2f %8.0f%% %10.2f %8.0f%% %12.2f %8.0f%% %13.2f\n", (long long)K, floor_s * 1e3,
               tb * 1e3, 100 * floor_s / tb, ta * 1e3, 100 * floor_s / ta, tp * 1e3, 100 * floor_s / tp, tr * 1e3);
        free(x), free(H);
    }
    /* AWQ's loss and GPTQ's output error: e^T H e for N rows (1 thread), 8 rows per pass over H against one */
    printf("\ne^T H e over N = 64 rows, 1 thread: H read once per 8 rows (qz_qform_rows) against once per row (vsr_qform)\n");
    printf("%6s %14s %14s %8s\n", "K", "8 rows/pass ms", "1 row/pass ms", "speedup");
    for (size_t i = 0; i < sizeof Ks / sizeof *Ks; i++) {
        const int64_t K = Ks[i], N = 64;
        double *Hq = malloc(sizeof *Hq * (size_t)(K * K)), *E = malloc(sizeof *E * (size_t)(N * K)), out[64];
        for (int64_t k = 0; k < K * K; k++) Hq[k] = (double)((k * 40503u) % 1000) / 991.0;
        for (int64_t k = 0; k < N * K; k++) E[k] = (double)((k * 2654435761u) % 1000) / 997.0 - 0.5;
        double t8[3], t1[3];
        for (int r = 0; r < 3; r++) {
            double a = now();
            qz_qform_rows(Hq, E, N, K, out);
            t8[r] = now() - a;
            a = now();
            for (int64_t n = 0; n < N; n++) out[n] = vsr_qform(Hq, E + n * K, K);
            t1[r] = now() - a;
        }
        qsort(t8, 3, sizeof *t8, cmp_d), qsort(t1, 3, sizeof *t1, cmp_d);
        printf("%6lld %14.2f %14.2f %7.1fx\n", (long long)K, t8[1] * 1e3, t1[1] * 1e3, t1[1] / t8[1]);
        free(Hq), free(E);
    }
    vsr_pool_free(pool);
    return 0;
}
