/* src/quantize/hessian.c: GPTQ's calibration Hessian, H += X^T X (FP64), the upper triangle.
 *
 * X is one calibration call's input [rows, K] (widened to FP64). The work is rows * K^2 / 2
 * multiply-adds per call: 83 % of `quantize --scheme w4a16-gptq` on the small fixture when it was
 * one scalar loop per element (perf, 2026-12-07).
 *
 * Here X is first repacked into panels of 8 columns, each panel [rows][8] contiguous and zero padded
 * past K (what a GEMM packs; O(rows K) against the O(rows K^2) that follows). H is cut into blocks of
 * 8 rows x 16 columns, only those on or above the diagonal; a block is kept in registers (16 AVX-512
 * accumulators, or 128 scalars the compiler vectorizes) while its three panels stream past in order
 * (two 8-column panels for the columns, one for the rows: 24 doubles per row of X, read sequentially),
 * so each value loaded feeds 8 or 16 products. Blocks are shared out over the pool's workers.
 *
 * Numerics: every H[i][j] gets x[t][i] * x[t][j] added in order of t, a product rounded and then a sum
 * rounded (no fused multiply-add), exactly the order and rounding of the plain loop qz_hessian_ref,
 * so both give the same bits on every ISA (tests/test_gptq.c holds them to it). A block that crosses
 * the diagonal also fills a few entries below it; finish() in calibrate.c overwrites the lower
 * triangle from the upper. Floor and figures: bench/hessian_cpu.c, bench/NOTES.md. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/gemm.h" /* vsr_gemm_forced_isa: a forced ISA ("scalar", "avx2+fma") holds here too */
#include "backend/cpu/threadpool.h"
#include "quantize/quant_internal.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define HESS_X86 1
#endif

enum { PW = 8, HB_I = 8, HB_J = 16 }; /* panel width; block rows and columns (HB_J = 2 panels) */

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

/* The block at rows [i0, i0 + 8) and columns [j0, j0 + 16) of a padded H (the caller stores the valid part):
 * pi the rows' panel, pj0 and pj1 the columns' two panels, each [rows][8]. acc holds the block in and out. */
#define BLOCK_BODY                                                                                               \
    for (int64_t t = 0; t < rows; t++) {                                                                        \
        const double *restrict xi = pi + t * PW, *restrict a0 = pj0 + t * PW, *restrict a1 = pj1 + t * PW;      \
        for (int a = 0; a < HB_I; a++) {                                                                        \
            const double s = xi[a];                                                                             \
            for (int b = 0; b < PW; b++) {                                                                      \
                const double p0 = s * a0[b], p1 = s * a1[b];                                                    \
                acc[a][b] += p0;                                                                                \
                acc[a][PW + b] += p1;                                                                           \
            }                                                                                                   \
        }                                                                                                       \
    }

static void block_portable(double acc[HB_I][HB_J], const double *restrict pi, const double *restrict pj0,
                           const double *restrict pj1, int64_t rows) {
    BLOCK_BODY
}

#ifdef HESS_X86
/* the same loop for AVX2 registers (no FMA: the products and sums stay separately rounded) */
__attribute__((target("avx2"))) static void block_avx2(double acc[HB_I][HB_J], const double *restrict pi,
                                                       const double *restrict pj0, const double *restrict pj1,
                                                       int64_t rows) {
    BLOCK_BODY
}

__attribute__((target("avx512f"))) static void block_avx512(double acc[HB_I][HB_J], const double *restrict pi,
                                                            const double *restrict pj0, const double *restrict pj1,
                                                            int64_t rows) {
    __m512d c[HB_I][2];
    for (int a = 0; a < HB_I; a++) c[a][0] = _mm512_loadu_pd(acc[a]), c[a][1] = _mm512_loadu_pd(acc[a] + PW);
    for (int64_t t = 0; t < rows; t++) {
        const __m512d v0 = _mm512_load_pd(pj0 + t * PW), v1 = _mm512_load_pd(pj1 + t * PW);
        const double *xi = pi + t * PW;
        for (int a = 0; a < HB_I; a++) {
            const __m512d s = _mm512_set1_pd(xi[a]);
            c[a][0] = _mm512_add_pd(c[a][0], _mm512_mul_pd(s, v0));
            c[a][1] = _mm512_add_pd(c[a][1], _mm512_mul_pd(s, v1));
        }
    }
    for (int a = 0; a < HB_I; a++) _mm512_storeu_pd(acc[a], c[a][0]), _mm512_storeu_pd(acc[a] + PW, c[a][1]);
}
#endif

typedef enum { ISA_BASE, ISA_AVX2, ISA_AVX512 } hess_isa;

static hess_isa pick_isa(void) {
#ifdef HESS_X86
    const char *forced = vsr_gemm_forced_isa();
    __builtin_cpu_init();
    if (forced && strcmp(forced, "scalar") == 0) return ISA_BASE;
    if ((!forced || strcmp(forced, "avx512") == 0) && __builtin_cpu_supports("avx512f")) return ISA_AVX512;
    if (__builtin_cpu_supports("avx2")) return ISA_AVX2;
#endif
    return ISA_BASE;
}

typedef struct hjob {
    double *H;
    const double *xp; /* [n_panels][rows][8] */
    int64_t rows, K, n_jb; /* n_jb: column blocks per block row */
    hess_isa isa;
} hjob;

static void run_block(const hjob *J, int64_t i0, int64_t j0) {
    const int64_t K = J->K, rows = J->rows, pstride = rows * PW;
    const int ni = (int)(K - i0 < HB_I ? K - i0 : HB_I), nj = (int)(K - j0 < HB_J ? K - j0 : HB_J);
    const double *pi = J->xp + (i0 / PW) * pstride, *pj0 = J->xp + (j0 / PW) * pstride;
    /* a block's second column panel past the last one (K <= j0 + 8) reads the first again: never stored */
    const double *pj1 = j0 + PW < K ? pj0 + pstride : pj0;
    double acc[HB_I][HB_J];
    for (int a = 0; a < HB_I; a++)
        for (int b = 0; b < HB_J; b++) acc[a][b] = a < ni && b < nj ? J->H[(i0 + a) * K + j0 + b] : 0.0;
    switch (J->isa) {
#ifdef HESS_X86
    case ISA_AVX512: block_avx512(acc, pi, pj0, pj1, rows); break;
    case ISA_AVX2: block_avx2(acc, pi, pj0, pj1, rows); break;
#endif
    default: block_portable(acc, pi, pj0, pj1, rows); break;
    }
    for (int a = 0; a < ni; a++) memcpy(J->H + (i0 + a) * K + j0, acc[a], sizeof(double) * (size_t)nj);
}

/* Work items are the (block row, column block) pairs on or above the diagonal, numbered block row by block
 * row; item -> (ib, jb) by walking the rows (cheap against a block's rows x 128 products). */
static void run_items(void *ctx, int64_t lo, int64_t hi, int worker) {
    (void)worker;
    const hjob *J = ctx;
    int64_t ib = 0, first = 0; /* first item of block row ib */
    while (lo >= first + (J->n_jb - ib * HB_I / HB_J)) first += J->n_jb - ib * HB_I / HB_J, ib++;
    for (int64_t it = lo; it < hi; it++) {
        while (it >= first + (J->n_jb - ib * HB_I / HB_J)) first += J->n_jb - ib * HB_I / HB_J, ib++;
        run_block(J, ib * HB_I, (ib * HB_I / HB_J + (it - first)) * HB_J);
    }
}

typedef struct pjob {
    double *xp;
    const double *x;
    int64_t rows, K;
} pjob;

static void pack_panels(void *ctx, int64_t lo, int64_t hi, int worker) {
    (void)worker;
    const pjob *P = ctx;
    for (int64_t p = lo; p < hi; p++) {
        double *d = P->xp + p * P->rows * PW;
        const int64_t c0 = p * PW, nc = P->K - c0 < PW ? P->K - c0 : PW;
        for (int64_t t = 0; t < P->rows; t++) {
            const double *s = P->x + t * P->K + c0;
            for (int64_t c = 0; c < PW; c++) d[t * PW + c] = c < nc ? s[c] : 0.0;
        }
    }
}

int qz_hessian_add(double *H, const double *x, int64_t rows, int64_t K, vsr_pool *pool) {
    if (rows <= 0 || K <= 0) return 0;
    const int64_t n_panels = (K + PW - 1) / PW;
    double *xp = aligned_alloc(64, sizeof(double) * (size_t)(n_panels * rows * PW));
    if (!xp) return -1;
    pjob P = {xp, x, rows, K};
    vsr_pool_for(pool, n_panels, 1, pack_panels, &P);
    hjob J = {H, xp, rows, K, (K + HB_J - 1) / HB_J, pick_isa()};
    const int64_t n_ib = (K + HB_I - 1) / HB_I;
    int64_t items = 0;
    for (int64_t ib = 0; ib < n_ib; ib++) items += J.n_jb - ib * HB_I / HB_J;
    vsr_pool_for(pool, items, 4, run_items, &J);
    free(xp);
    return 0;
}

/* ---- e^T H e for many rows e (AWQ's loss, GPTQ's output error) ----
 * vsr_qform (gptq.c) reads all of H per row: K^2 doubles, from L3 or memory once K passes ~256. Here up
 * to 8 rows share each H row read. Per row the arithmetic is vsr_qform's exactly: for each i with
 * e[i] != 0, four partial sums over j = 0, 4, 8, ... (+1, +2, +3) in order, the K % 4 tail into the first,
 * ((a0 + a1) + (a2 + a3)) times e[i] added to the total; an AVX2 register holds the four partial sums
 * (multiplies and adds separately rounded, as the scalar loop). Rows with e[i] == 0 add nothing, as
 * vsr_qform skips them. */
enum { QR = 8 };

double vsr_qform(const double *H, const double *e, int64_t K) {
    double acc = 0.0;
    for (int64_t i = 0; i < K; i++) {
        if (e[i] == 0.0) continue;
        const double *h = H + i * K;
        double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        int64_t j = 0;
        /* products and sums rounded separately (one statement each: no compiler contracts them into fused
         * multiply-adds), the order hessian.c's qz_qform_rows repeats bit for bit */
        for (; j + 4 <= K; j += 4) {
            const double p0 = h[j] * e[j], p1 = h[j + 1] * e[j + 1], p2 = h[j + 2] * e[j + 2], p3 = h[j + 3] * e[j + 3];
            a0 += p0, a1 += p1, a2 += p2, a3 += p3;
        }
        for (; j < K; j++) {
            const double p = h[j] * e[j];
            a0 += p;
        }
        const double p = e[i] * ((a0 + a1) + (a2 + a3));
        acc += p;
    }
    return acc;
}

#ifdef HESS_X86
__attribute__((target("avx2"))) static void qform8_avx2(const double *H, const double *E, int nr, int64_t K,
                                                        double *out) {
    double acc[QR] = {0};
    const int64_t K4 = K / 4 * 4;
    for (int64_t i = 0; i < K; i++) {
        const double *h = H + i * K;
        __m256d v[QR];
        for (int r = 0; r < QR; r++) v[r] = _mm256_setzero_pd();
        for (int64_t j = 0; j < K4; j += 4) {
            const __m256d hv = _mm256_loadu_pd(h + j);
            for (int r = 0; r < nr; r++) v[r] = _mm256_add_pd(v[r], _mm256_mul_pd(hv, _mm256_loadu_pd(E + r * K + j)));
        }
        for (int r = 0; r < nr; r++) {
            const double *e = E + r * K;
            if (e[i] == 0.0) continue;
            double a[4];
            _mm256_storeu_pd(a, v[r]);
            for (int64_t j = K4; j < K; j++) {
                const double p = h[j] * e[j];
                a[0] += p;
            }
            const double d = (a[0] + a[1]) + (a[2] + a[3]), p = e[i] * d;
            acc[r] += p;
        }
    }
    for (int r = 0; r < nr; r++) out[r] = acc[r];
}
#endif

void qz_qform_rows(const double *H, const double *E, int64_t nrows, int64_t K, double *out) {
#ifdef HESS_X86
    const char *forced = vsr_gemm_forced_isa();
    __builtin_cpu_init();
    if (!(forced && strcmp(forced, "scalar") == 0) && __builtin_cpu_supports("avx2")) {
        for (int64_t r0 = 0; r0 < nrows; r0 += QR)
            qform8_avx2(H, E + r0 * K, (int)(nrows - r0 < QR ? nrows - r0 : QR), K, out + r0);
        return;
    }
#endif
    for (int64_t r = 0; r < nrows; r++) out[r] = vsr_qform(H, E + r * K, K);
}
