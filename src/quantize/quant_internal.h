/* src/quantize/quant_internal.h: pieces GPTQ, AWQ and calibration share (not public). */
#ifndef VSR_QUANT_INTERNAL_H
#define VSR_QUANT_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

/* e^T H e for a K-vector e and symmetric H [K,K] (FP64). */
double vsr_qform(const double *H, const double *e, int64_t K);

/* Signed int4 q in [-8, 7] of column k into a pack-quantized row (word k/8, nibble k%8, +8). */
static inline void vsr_int4_put(uint32_t *row_words, int64_t k, int q) {
    row_words[k / 8] |= (uint32_t)(q + 8) << (4 * (k % 8));
}
/* Signed zero point of row n, group g from a zp tensor packed along N ([ceil(N/8), G]). */
static inline int vsr_int4_zp_get(const uint32_t *zp, int64_t G, int64_t n, int64_t g) {
    return (int)((zp[(n / 8) * G + g] >> (4 * (n % 8))) & 15u) - 8;
}

#endif
