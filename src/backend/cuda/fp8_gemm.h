/* src/backend/cuda/fp8_gemm.h: the sm_90a FP8 W8A8 GEMM (fp8_gemm.cu) as quant_fp8.cu calls it.
 *   y[M, N] (+)= sx[m] * sw[n] * (xq[M, Kp] . wq[Np, Kp]^T), FP32 or BF16 out, e4m3 operands, row-major,
 *   Kp a multiple of 16, N <= Np, xq and wq 16-byte aligned (TMA).
 * fp8_gemm_wcache holds the weight's TMA descriptors (one per tile width), built on first use and
 * kept beside the weight (quant_fp8.cu's per-weight metadata). */
#ifndef VSR_CUDA_FP8_GEMM_H
#define VSR_CUDA_FP8_GEMM_H

#include <stdint.h>

#include "backend/cuda/cuda_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FP8_GEMM_WIDTHS 2 /* tile widths BN = 128, 256 */
typedef struct fp8_gemm_wcache {
    unsigned char map[FP8_GEMM_WIDTHS][128]; /* CUtensorMap bytes (copied into an aligned one at launch) */
    const void *w[FP8_GEMM_WIDTHS];          /* the weight pointer each map was built for (NULL: none) */
} fp8_gemm_wcache;

/* A TMA descriptor (the 128 bytes of a CUtensorMap, 64-byte aligned) for a 2-D tensor [rows, cols] of 1- or 2-byte
 * elements (BF16 when 2), row stride row_bytes (a multiple of 16), p 16-byte aligned: box [box_rows, 128 bytes], in
 * wgmma's 128-byte swizzle, out-of-bounds elements read as zero. 1 on success, 0 where the driver exports no encoder
 * or refuses the layout. (Also used by quant_int4.cu for int4_tile.cu's wgmma kernel.) */
int tma_encode_2d_sw128(void *map, int elem_bytes, const void *p, int64_t rows, int64_t cols, int64_t row_bytes,
                        int box_rows);
/* The kernel exists for this device (compute capability 9.0 and the sm_90a build) and the driver
 * exports cuTensorMapEncodeTiled. */
int fp8_gemm_usable(cuda_ctx *c);
/* What the kernel writes (y's row stride ldy, in elements, >= N):
 *   FG_OUT_F32          y FP32 (+)= sx[m] * sw[n] * acc, acc rounded to BF16 first when round_bf16;
 *   FG_OUT_BF16_RAW     y BF16 = bf16(acc), unscaled (the reader applies sx, sw: linear_swiglu's product);
 *   FG_OUT_BF16_SCALED  y BF16 = bf16(p * sx[m] * sw[n]), p = round_bf16 ? float(bf16(acc)) : acc (the kept
 *                       products: rounded once after the scales as cuBLASLt's outer-vector-scaled (b) writes
 *                       them, or twice as (b') + its scaling pass).
 * The BF16 outputs never accumulate. */
enum { FG_OUT_F32 = 0, FG_OUT_BF16_RAW = 1, FG_OUT_BF16_SCALED = 2 };

/* Runs the GEMM on c->stream; *ran = 0 (and VSR_OK) where it does not apply (alignment), so the
 * caller falls back. fast = 1: no FP32 promotion of the tensor-core partial sums between 128-wide
 * K blocks (cuBLASLt's FAST_ACCUM); 0: promoted every K block (pipelined: the next piece runs on the
 * tensor cores while the last is added; VSR_FP8_GEMM_PROMOTE=serial runs the first, one-at-a-time
 * schedule, bit-identical, for tests). The tile width, the grid cap and the path can be forced for
 * tests: VSR_FP8_GEMM_BN=128|256, VSR_FP8_GEMM_CTAS=n; bn_req = 128 or 256 asks for a width (the route
 * choice in quant_fp8.cu), 0 lets the waves x width rule pick. Writes the path name
 * ("fp8:wgmma(bn=..,promote|promote-serial|fast[,bf16-out|,bf16-raw|,bf16-scaled],ctas=..)") through
 * quant_set_last_path. */
vsr_status fp8_gemm_run(cuda_ctx *c, const uint8_t *xq, const float *sx, int64_t M, const uint8_t *wq,
                        const float *sw, int64_t N, int64_t Np, int64_t Kp, void *y, int64_t ldy, int out_kind,
                        int accumulate, int fast, int bn_req, int round_bf16, fp8_gemm_wcache *wc, int *ran,
                        vsr_err *err);

#ifdef __cplusplus
}
#endif
#endif
