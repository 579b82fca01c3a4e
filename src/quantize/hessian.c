/* src/quantize/hessian.c: GPTQ's calibration Hessian, H += X^T X (FP64), the upper triangle.
 *
 * X is one calibration call's input [rows, K] (widened to FP64). The work is rows * K^2 / 2
 * multiply-adds per call: 83 % of `quantize --scheme w4a16-gptq` on the small fixture when it was
 * one scalar loop per element (perf, 2026-12-07). Here H is cut into blocks of 8 rows x 16
 * columns (only the blocks on or above the diagonal); a block is kept in registers (16 AVX-512
 * accumulators, or 128 scalars the compiler vectorizes) while all rows of X stream past, so each
 * x value loaded feeds 8 or 16 products. Blocks are shared out over the pool's workers.
 *
 * Numerics: every H[i][j] gets x[t][i] * x[t][j] added in order of t, a product rounded and then
 * a sum rounded (no fused multiply-add), exactly the order and rounding of the plain loop
 * qz_hessian_ref, so both give the same bits on every ISA (tests/test_gptq.c holds them to it).
 * A block that crosses the diagonal also fills a few entries below it; finish() in calibrate.c
 * overwrites the lower triangle from the upper. */
#include <stdint.h>
#include <string.h>

#include "backend/cpu/gemm.h" /* vsr_gemm_forced_isa: "scalar" forces the portable loop here too */
#include "backend/cpu/threadpool.h"
#include "quantize/quantize_internal.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define HESS_AVX512 1
#endif

enum { HB_I = 8, HB_J = 16 };

void qz_hessian_ref(double *H, const double *x, int64_t rows, int64_t K) {
    for (int64_t i = 0; i < K; i++)
        for (int64_t t = 0; t < rows; t++) {
            const double xi = x[t * K + i];
            for (int64_t j = i; j < K; j++) {
                const double p = xi * x[t * K + j];
                H[i * K + j] += p;
            }
        }
}

/* A whole 8 x 16 block with constant trip counts, so that the compiler keeps it in vector registers
 * (SSE2 on the x86-64-v2 baseline, AVX2 in the clone below); the same operations in the same order. */
#define FULL_BLOCK_BODY                                                                                           \
    double acc[HB_I][HB_J];                                                                                      \
    for (int a = 0; a < HB_I; a++)                                                                               \
        for (int b = 0; b < HB_J; b++) acc[a][b] = H[(i0 + a) * K + j0 + b];                                     \
    for (int64_t t = 0; t < rows; t++) {                                                                         \
        const double *restrict xt = x + t * K;                                                                   \
        for (int a = 0; a < HB_I; a++) {                                                                         \
            const double xi = xt[i0 + a];                                                                        \
            for (int b = 0; b < HB_J; b++) {                                                                     \
                const double p = xi * xt[j0 + b];                                                                \
                acc[a][b] += p;                                                                                  \
            }                                                                                                    \
        }                                                                                                        \
    }                                                                                                            \
    for (int a = 0; a < HB_I; a++)                                                                               \
        for (int b = 0; b < HB_J; b++) H[(i0 + a) * K + j0 + b] = acc[a][b];

static void full_block_portable(double *restrict H, const double *restrict x, int64_t rows, int64_t K, int64_t i0,
                                int64_t j0) {
    FULL_BLOCK_BODY
}
#if defined(__x86_64__)
__attribute__((target("avx2"))) static void full_block_avx2(double *restrict H, const double *restrict x,
                                                            int64_t rows, int64_t K, int64_t i0, int64_t j0) {
    FULL_BLOCK_BODY
}
#endif

/* One block: rows [i0, i0 + ni) x columns [j0, j0 + nj), ni <= 8, nj <= 16 (the ragged edges). */
static void block_portable(double *H, const double *x, int64_t rows, int64_t K, int64_t i0, int ni, int64_t j0,
                           int nj) {
    double acc[HB_I][HB_J];
    for (int a = 0; a < ni; a++) memcpy(acc[a], H + (i0 + a) * K + j0, sizeof(double) * (size_t)nj);
    for (int64_t t = 0; t < rows; t++) {
        const double *xt = x + t * K;
        double xj[HB_J];
        memcpy(xj, xt + j0, sizeof(double) * (size_t)nj);
        for (int a = 0; a < ni; a++) {
            const double xi = xt[i0 + a];
            for (int b = 0; b < nj; b++) {
                const double p = xi * xj[b];
                acc[a][b] += p;
            }
        }
    }
    for (int a = 0; a < ni; a++) memcpy(H + (i0 + a) * K + j0, acc[a], sizeof(double) * (size_t)nj);
}

#ifdef HESS_AVX512
#define AVX512_FN __attribute__((target("avx512f")))

static int have_avx512(void) {
    static int v = -1;
    const char *forced = vsr_gemm_forced_isa();
    if (forced && strcmp(forced, "avx512") != 0) return 0;
    if (v < 0) {
        __builtin_cpu_init();
        v = __builtin_cpu_supports("avx512f");
    }
    return v;
}

/* "avx2+fma" and "avx512" (when forced) keep the AVX2 clone; "scalar" the baseline loop */
static int have_avx2(void) {
    const char *forced = vsr_gemm_forced_isa();
    if (forced && strcmp(forced, "scalar") == 0) return 0;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
}

AVX512_FN static void block_avx512(double *H, const double *x, int64_t rows, int64_t K, int64_t i0, int ni,
                                   int64_t j0, int nj) {
    const __mmask8 m0 = (__mmask8)(nj >= 8 ? 0xff : (1u << nj) - 1), m1 = (__mmask8)(nj > 8 ? (1u << (nj - 8)) - 1 : 0);
    __m512d acc[HB_I][2];
    for (int a = 0; a < HB_I; a++) {
        const double *h = H + (i0 + (a < ni ? a : 0)) * K + j0;
        acc[a][0] = _mm512_maskz_loadu_pd(m0, h);
        acc[a][1] = _mm512_maskz_loadu_pd(m1, h + 8);
    }
    for (int64_t t = 0; t < rows; t++) {
        const double *xt = x + t * K;
        const __m512d v0 = _mm512_maskz_loadu_pd(m0, xt + j0), v1 = _mm512_maskz_loadu_pd(m1, xt + j0 + 8);
        /* rows past ni read row i0 again (in range) and are never stored */
        for (int a = 0; a < HB_I; a++) {
            const __m512d s = _mm512_set1_pd(xt[i0 + (a < ni ? a : 0)]);
            acc[a][0] = _mm512_add_pd(acc[a][0], _mm512_mul_pd(s, v0));
            acc[a][1] = _mm512_add_pd(acc[a][1], _mm512_mul_pd(s, v1));
        }
    }
    for (int a = 0; a < ni; a++) {
        double *h = H + (i0 + a) * K + j0;
        _mm512_mask_storeu_pd(h, m0, acc[a][0]);
        _mm512_mask_storeu_pd(h + 8, m1, acc[a][1]);
    }
}
#endif

typedef struct hjob {
    double *H;
    const double *x;
    int64_t rows, K, n_jb; /* n_jb: column blocks per block row */
    int avx512, avx2;
} hjob;

/* Work items are the (block row, column block) pairs on or above the diagonal, numbered block row by block
 * row; item -> (ib, jb) by walking the rows (cheap against a block's rows x 128 products). */
static void run_items(void *ctx, int64_t lo, int64_t hi, int worker) {
    (void)worker;
    const hjob *J = ctx;
    int64_t ib = 0, first = 0; /* first item of block row ib */
    for (;;) {
        const int64_t jb0 = ib * HB_I / HB_J, n = J->n_jb - jb0;
        if (lo < first + n) break;
        first += n, ib++;
    }
    for (int64_t it = lo; it < hi; it++) {
        int64_t jb0 = ib * HB_I / HB_J;
        while (it >= first + (J->n_jb - jb0)) first += J->n_jb - jb0, ib++, jb0 = ib * HB_I / HB_J;
        const int64_t i0 = ib * HB_I, j0 = (jb0 + (it - first)) * HB_J;
        const int ni = (int)(J->K - i0 < HB_I ? J->K - i0 : HB_I), nj = (int)(J->K - j0 < HB_J ? J->K - j0 : HB_J);
#ifdef HESS_AVX512
        if (J->avx512) {
            block_avx512(J->H, J->x, J->rows, J->K, i0, ni, j0, nj);
            continue;
        }
#endif
        if (ni == HB_I && nj == HB_J) {
#if defined(__x86_64__)
            if (J->avx2) {
                full_block_avx2(J->H, J->x, J->rows, J->K, i0, j0);
                continue;
            }
#endif
            full_block_portable(J->H, J->x, J->rows, J->K, i0, j0);
            continue;
        }
        block_portable(J->H, J->x, J->rows, J->K, i0, ni, j0, nj);
    }
}

void qz_hessian_add(double *H, const double *x, int64_t rows, int64_t K, vsr_pool *pool) {
    if (rows <= 0 || K <= 0) return;
    hjob J = {H, x, rows, K, (K + HB_J - 1) / HB_J, 0, 0};
#ifdef HESS_AVX512
    J.avx512 = have_avx512();
    J.avx2 = have_avx2();
#endif
    const int64_t n_ib = (K + HB_I - 1) / HB_I;
    int64_t items = 0;
    for (int64_t ib = 0; ib < n_ib; ib++) items += J.n_jb - ib * HB_I / HB_J;
    vsr_pool_for(pool, items, 4, run_items, &J);
}
