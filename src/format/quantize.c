/* Round-to-nearest quantizers that write exactly what compressed-tensors 0.20 writes
 * for an RTN (min-max observer) quantization of a BF16 weight on the CPU, so fixtures
 * made here are byte-identical to the library's (tests/data/ct holds the proof).
 *
 * The library's arithmetic, step by step (quantization/utils/helpers.py::calculate_qparams,
 * lifecycle/forward_helpers.py::_quantize), with min/max taken over the BF16 weight:
 *   - torch computes a BF16 op as FP32 and rounds the result to BF16; bf16_div() below.
 *   - symmetric:  s = bf16(amax / (range/2))      range = qmax - qmin (15 int4, 896 fp8)
 *   - asymmetric: s = bf16(bf16(max - min) / 15), zp = round(clamp(bf16(-8 - bf16(min/s)), -8, 7))
 *     with min <= 0 <= max (0 must be representable), round = half to even.
 *   - a zero scale becomes the scale dtype's eps (BF16 2^-7, FP8 0.125).
 *   - quantize: x' = bf16(x / s) (+ zp, rounded to BF16 again), clamp to the range,
 *     round half to even (int) or cast RNE (fp8).
 * NVFP4 works in FP32 because its scales are FP8 and its global scale FP32:
 *   gs = f32(bf16(bf16(1 / amax) * 448*6)) (the observer hands BF16 min/max to
 *   generate_gparam, whose scalar / tensor torch evaluates as reciprocal-then-multiply),
 *   block scale = e4m3(gs * bf16(amax16 / 6)), element = e2m1(x / (e4m3(scale) / gs)).
 * On CUDA the library's Triton kernel divides in FP32 without the intermediate BF16
 * rounding of x / s, so GPU-made int4/FP8 packages can differ from these in rare ties. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "vsr/dtype.h"
#include "vsr/quant.h"

#define BF16_EPS 0.0078125f /* torch.finfo(torch.bfloat16).eps */
#define FP8_EPS 0.125f      /* compressed-tensors' eps for an FP8 scale */

static inline float bf16_round(float f) { return vsr_bf16_to_f32(vsr_f32_to_bf16(f)); }
static inline float bf16_div(float a, float b) { return bf16_round(a / b); }
static inline float clampf(float x, float lo, float hi) { return x < lo ? lo : x > hi ? hi : x; }

void vsr_quantize_fp8_rtn(const uint16_t *w_bf16, int64_t N, int64_t K, uint8_t *w_out,
                          uint16_t *scale_bf16_out) {
    for (int64_t n = 0; n < N; n++) {
        const uint16_t *row = w_bf16 + n * K;
        float amax = 0.0f;
        for (int64_t k = 0; k < K; k++) amax = fmaxf(amax, fabsf(vsr_bf16_to_f32(row[k])));
        float s = bf16_div(amax, 448.0f); /* 896 / 2 */
        if (s == 0.0f) s = BF16_EPS;
        scale_bf16_out[n] = vsr_f32_to_bf16(s);
        for (int64_t k = 0; k < K; k++) {
            float x = clampf(bf16_div(vsr_bf16_to_f32(row[k]), s), -448.0f, 448.0f);
            w_out[n * K + k] = vsr_f32_to_e4m3fn(x);
        }
    }
}

/* Group of column k: column order, or g_idx[k] (a g_idx holding -1 means column order). */
static bool g_idx_column_order(const int32_t *g_idx, int64_t K) {
    if (!g_idx) return true;
    for (int64_t k = 0; k < K; k++)
        if (g_idx[k] == -1) return true;
    return false;
}

void vsr_quantize_int4_rtn(const uint16_t *w_bf16, int64_t N, int64_t K, int group, bool symmetric,
                           const int32_t *g_idx, uint32_t *packed_out, uint16_t *scale_bf16_out,
                           uint32_t *zp_out) {
    int64_t G = group > 0 ? (K + group - 1) / group : 1;
    int64_t words = (K + 7) / 8;
    bool column_order = g_idx_column_order(g_idx, K);
    memset(packed_out, 0, (size_t)(N * words) * sizeof *packed_out);
    if (!symmetric && zp_out) memset(zp_out, 0, (size_t)(((N + 7) / 8) * G) * sizeof *zp_out);
    for (int64_t n = 0; n < N; n++) {
        const uint16_t *row = w_bf16 + n * K;
        for (int64_t g = 0; g < G; g++) {
            /* Min and max of the group's columns (in BF16, exact). */
            float mn = 0.0f, mx = 0.0f; /* clamped so that 0 stays representable */
            for (int64_t k = 0; k < K; k++) {
                int64_t grp = group > 0 ? (column_order ? k / group : g_idx[k]) : 0;
                if (grp != g) continue;
                float x = vsr_bf16_to_f32(row[k]);
                mn = fminf(mn, x);
                mx = fmaxf(mx, x);
            }
            float s, zp = 0.0f;
            if (symmetric) {
                s = bf16_div(fmaxf(fabsf(mn), fabsf(mx)), 7.5f); /* 15 / 2 */
                if (s == 0.0f) s = BF16_EPS;
            } else {
                s = bf16_div(bf16_round(mx - mn), 15.0f);
                if (s == 0.0f) {
                    /* The library computes zp from 0/0 = NaN here; its int8 cast of NaN
                     * gives 0 on x86. Such a group is all zeros, so any zp in range is
                     * exact; 0 matches what it stores. */
                    s = BF16_EPS;
                    zp = 0.0f;
                } else {
                    zp = clampf(bf16_round(-8.0f - bf16_div(mn, s)), -8.0f, 7.0f);
                    zp = roundevenf(zp);
                }
                int64_t w = (n / 8) * G + g;
                if (zp_out) zp_out[w] |= (uint32_t)((int)zp + 8) << (4 * (n % 8));
            }
            scale_bf16_out[n * G + g] = vsr_f32_to_bf16(s);
            for (int64_t k = 0; k < K; k++) {
                int64_t grp = group > 0 ? (column_order ? k / group : g_idx[k]) : 0;
                if (grp != g) continue;
                float x = bf16_div(vsr_bf16_to_f32(row[k]), s);
                if (!symmetric) x = bf16_round(x + zp);
                int q = (int)roundevenf(clampf(x, -8.0f, 7.0f));
                packed_out[n * words + k / 8] |= (uint32_t)(q + 8) << (4 * (k % 8));
            }
        }
    }
}

void vsr_quantize_nvfp4_rtn(const uint16_t *w_bf16, int64_t N, int64_t K, uint8_t *packed_out,
                            uint8_t *scale_e4m3_out, float *global_scale_out) {
    int64_t G = K / 16;
    float amax = 0.0f;
    for (int64_t i = 0; i < N * K; i++) amax = fmaxf(amax, fabsf(vsr_bf16_to_f32(w_bf16[i])));
    amax = fmaxf(amax, 0x1p-126f); /* torch.finfo(bf16).tiny */
    /* Python's 2688.0 / tensor is tensor.reciprocal() * 2688 in torch: two BF16 roundings. */
    float gs = bf16_round(bf16_div(1.0f, amax) * (448.0f * 6.0f));
    if (!isfinite(gs)) gs = 1.0f; /* the library's nan_to_num(nan=1, posinf=1) */
    *global_scale_out = gs;
    memset(packed_out, 0, (size_t)(N * K / 2));
    for (int64_t n = 0; n < N; n++) {
        for (int64_t b = 0; b < G; b++) {
            const uint16_t *blk = w_bf16 + n * K + b * 16;
            float bmax = 0.0f;
            for (int i = 0; i < 16; i++) bmax = fmaxf(bmax, fabsf(vsr_bf16_to_f32(blk[i])));
            float local = gs * bf16_div(bmax, 6.0f); /* exact in FP32: two BF16 values */
            uint8_t code = vsr_f32_to_e4m3fn(clampf(local, -448.0f, 448.0f));
            if (vsr_e4m3fn_to_f32(code) == 0.0f) code = vsr_f32_to_e4m3fn(FP8_EPS);
            scale_e4m3_out[n * G + b] = code;
            float q = vsr_e4m3fn_to_f32(code) / gs;
            for (int i = 0; i < 16; i++) {
                float x = clampf(vsr_bf16_to_f32(blk[i]) / q, -6.0f, 6.0f);
                int64_t k = b * 16 + i;
                packed_out[n * (K / 2) + k / 2] |= (uint8_t)(vsr_f32_to_e2m1(x) << (4 * (k % 2)));
            }
        }
    }
}
