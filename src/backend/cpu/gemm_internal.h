/* src/backend/cpu/gemm_internal.h: what the GEMM driver (gemm.c) shares with the per-ISA
 * kernel files (gemm_avx512.c, gemm_avx2.c). Not a public interface.
 *
 * The driver resolves the weight into a gemm_w (format, group layout), splits the output
 * into tasks and hands each task to the chosen ISA's kernels:
 *   small: M <= 8 rows, dot-product form; W streamed once, every X row reused per W tile.
 *   large: M > 8, a W panel [KC x NR] decoded and transposed into scratch, then an
 *          MR x NR register-blocked outer-product micro-kernel over X rows. */
#ifndef VSR_BACKEND_CPU_GEMM_INTERNAL_H
#define VSR_BACKEND_CPU_GEMM_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "backend/cpu/gemm.h"

typedef enum gemm_fmt {
    GEMM_F32,
    GEMM_BF16,
    GEMM_INT4_UNIFORM, /* one group per 16-column segment: column order, group % 16 == 0 or channel */
    GEMM_INT4_LANE,    /* group per column from gidx (act-order g_idx, or odd group sizes) */
} gemm_fmt;

typedef struct gemm_w {
    gemm_fmt fmt;
    int64_t N, K;
    const float *f32;      /* [N,K] */
    const uint16_t *bf16;  /* [N,K] */
    /* int4 */
    const uint32_t *packed;  /* [N, K/8] */
    const uint16_t *scale;   /* [N, G] bf16 */
    const uint32_t *zp;      /* [ceil(N/8), G] or NULL */
    int64_t G;
    int64_t gsz;             /* UNIFORM: columns per group (K for channel) */
    const int32_t *gidx;     /* LANE: [K] group of each column */
} gemm_w;

#define GEMM_SMALL_M 8   /* M at or below this takes the small (GEMV-like) path */
#define GEMM_LARGE_NC 128 /* most output columns one large-path call covers */

typedef struct gemm_isa {
    const char *name;
    /* Y[0..M, n0..n1) for M <= GEMM_SMALL_M. */
    void (*small)(const gemm_w *w, const float *X, int64_t M, int64_t n0, int64_t n1, float *Y,
                  int accumulate, void *scratch);
    /* Y[m0..m1, n0..n1). */
    void (*large)(const gemm_w *w, const float *X, int64_t M, int64_t m0, int64_t m1, int64_t n0,
                  int64_t n1, float *Y, int accumulate, void *scratch);
    /* bytes of scratch each worker needs for this weight (64-byte aligned by the driver) */
    size_t (*scratch_bytes)(const gemm_w *w);
    int n_align; /* the large path's panel width; n blocks are multiples of it */
} gemm_isa;

extern const gemm_isa vsr_gemm_isa_avx512;
extern const gemm_isa vsr_gemm_isa_avx2;

#endif
