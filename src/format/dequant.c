/* Scalar reference dequantizers: the oracle every kernel is tested against. Each one
 * reproduces compressed-tensors' decompression bit for bit (spec sections 2.1-2.3):
 *   FP8:   W = bf16( e4m3fn(w) * s[n] )                 bf16 x bf16 product, rounded once
 *   int4:  W = bf16( (u - uzp) * s[n, grp(k)] )          u, uzp unsigned nibbles (+8 offset)
 *   NVFP4: W = bf16( e2m1(nib) * f32(e4m3(s) / gs) )     quotient and product in FP32
 * The FP8 and int4 products are exact in FP32 (at most 4 x 8 and 5 x 8 significant bits),
 * so rounding the FP32 product to BF16 is the single rounding torch does in BF16. The
 * NVFP4 path mirrors torch's promotion to FP32 (fp8 scale / f32 global scale), which
 * rounds the quotient and the product in FP32 before the final cast to BF16. */
#include <stdint.h>

#include "vsr/dtype.h"
#include "vsr/quant.h"

void vsr_dequant_fp8_ref(const uint8_t *w, const uint16_t *scale_bf16, int64_t N, int64_t K,
                         uint16_t *out_bf16) {
    for (int64_t n = 0; n < N; n++) {
        float s = vsr_bf16_to_f32(scale_bf16[n]);
        for (int64_t k = 0; k < K; k++)
            out_bf16[n * K + k] = vsr_f32_to_bf16(vsr_e4m3fn_to_f32(w[n * K + k]) * s);
    }
}

/* Nibble i of a little-endian packed row (element 0 in the low nibble of word 0). */
static inline unsigned nibble_at(const uint32_t *row, int64_t i) {
    return (row[i / 8] >> (4 * (i % 8))) & 0xfu;
}

void vsr_dequant_int4_ref(const uint32_t *packed, const uint16_t *scale_bf16, const uint32_t *zp,
                          const int32_t *g_idx, int64_t N, int64_t K, int group,
                          uint16_t *out_bf16) {
    int64_t words = (K + 7) / 8;                          /* [N, ceil(K/8)] */
    int64_t G = group > 0 ? (K + group - 1) / group : 1;  /* scale [N, G] */
    /* compressed-tensors treats a g_idx holding any -1 as "not initialised": column order. */
    bool column_order = g_idx == NULL;
    for (int64_t k = 0; g_idx && k < K && !column_order; k++)
        if (g_idx[k] == -1) column_order = true;
    for (int64_t n = 0; n < N; n++) {
        const uint32_t *row = packed + n * words;
        for (int64_t k = 0; k < K; k++) {
            int64_t grp = group > 0 ? (column_order ? k / group : g_idx[k]) : 0;
            int u = (int)nibble_at(row, k);
            /* Zero points [ceil(N/8), G] are packed along dim 0: row n is nibble n%8 of
             * word (n/8, grp). Symmetric schemes have none: the offset is 8. */
            int uzp = zp ? (int)((zp[(n / 8) * G + grp] >> (4 * (n % 8))) & 0xfu) : 8;
            float s = vsr_bf16_to_f32(scale_bf16[n * G + grp]);
            out_bf16[n * K + k] = vsr_f32_to_bf16((float)(u - uzp) * s);
        }
    }
}

void vsr_dequant_nvfp4_ref(const uint8_t *packed, const uint8_t *scale_e4m3, float global_scale,
                           int64_t N, int64_t K, uint16_t *out_bf16) {
    int64_t G = K / 16;
    for (int64_t n = 0; n < N; n++) {
        for (int64_t k = 0; k < K; k++) {
            uint8_t byte = packed[n * (K / 2) + k / 2];
            uint8_t nib = (k % 2 == 0) ? (byte & 0xf) : (byte >> 4); /* low nibble first */
            float q = vsr_e4m3fn_to_f32(scale_e4m3[n * G + k / 16]) / global_scale;
            out_bf16[n * K + k] = vsr_f32_to_bf16(vsr_e2m1_to_f32(nib) * q);
        }
    }
}
