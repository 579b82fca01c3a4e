/* src/quantize/quant_internal.h: pieces GPTQ, AWQ and calibration share (not public). */
#ifndef VSR_QUANT_INTERNAL_H
#define VSR_QUANT_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

/* e^T H e for a K-vector e and symmetric H [K,K] (FP64). */
double vsr_qform(const double *H, const double *e, int64_t K);

/* H [K, K] += x^T x over x [rows, K] (FP64), the upper triangle (entries below the diagonal are left
 * undefined: mirror the upper one when done), blocked and shared over the pool (NULL: inline); the same
 * bits as qz_hessian_ref, the plain loop, on every ISA (hessian.c). -1 when its packed copy of x
 * (8 rows K bytes) cannot be allocated, H untouched. */
typedef struct vsr_pool vsr_pool;
int qz_hessian_add(double *H, const double *x, int64_t rows, int64_t K, vsr_pool *pool);
void qz_hessian_ref(double *H, const double *x, int64_t rows, int64_t K);
/* out[r] = vsr_qform(H, E[r], K) for the rows of E [nrows, K], bit for bit, H read once per 8 rows (hessian.c). */
void qz_qform_rows(const double *H, const double *E, int64_t nrows, int64_t K, double *out);

/* Signed int4 q in [-8, 7] of column k into a pack-quantized row (word k/8, nibble k%8, +8). */
static inline void vsr_int4_put(uint32_t *row_words, int64_t k, int q) {
    row_words[k / 8] |= (uint32_t)(q + 8) << (4 * (k % 8));
}
/* Signed zero point of row n, group g from a zp tensor packed along N ([ceil(N/8), G]). */
static inline int vsr_int4_zp_get(const uint32_t *zp, int64_t G, int64_t n, int64_t g) {
    return (int)((zp[(n / 8) * G + g] >> (4 * (n % 8))) & 15u) - 8;
}

#endif
