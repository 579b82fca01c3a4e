/* The small float formats of compressed-tensors checkpoints (spec section 2.4):
 * E4M3FN (weights and NVFP4 block scales), E4M3FNUZ (ROCm gfx942) and E2M1 (NVFP4
 * elements). Decoding follows the definitions; encoding is round-to-nearest-even and
 * saturates at the largest finite value, as compressed-tensors clamps before casting. */
#include <math.h>
#include <stdint.h>

#include "vsr/quant.h"

float vsr_e4m3fn_to_f32(uint8_t v) {
    int e = (v >> 3) & 0xf, m = v & 7;
    if ((v & 0x7f) == 0x7f) return NAN; /* 0x7F / 0xFF: the only NaNs; there is no Inf */
    float mag = e == 0 ? ldexpf((float)m, -9)                    /* subnormal m * 2^-9 */
                       : ldexpf(1.0f + (float)m / 8.0f, e - 7); /* (1 + m/8) * 2^(e-7) */
    return (v & 0x80) ? -mag : mag;
}

float vsr_e4m3fnuz_to_f32(uint8_t v) {
    if (v == 0x80) return NAN; /* the only NaN; no -0, no Inf */
    int e = (v >> 3) & 0xf, m = v & 7;
    float mag = e == 0 ? ldexpf((float)m, -10) : ldexpf(1.0f + (float)m / 8.0f, e - 8);
    return (v & 0x80) ? -mag : mag;
}

uint8_t vsr_f32_to_e4m3fn(float f) {
    uint8_t sign = signbit(f) ? 0x80 : 0;
    if (isnan(f)) return 0x7f | sign;
    float a = fabsf(f);
    if (a >= 448.0f) return 0x7e | sign; /* saturate (torch's cast would give NaN past 464) */
    if (a < 0x1p-6f) {
        /* Subnormal range in units of 2^-9; q == 8 is exactly the smallest normal 0x08. */
        return (uint8_t)(sign | (uint8_t)roundevenf(a * 512.0f));
    }
    int e;
    float mant = frexpf(a, &e); /* a = mant * 2^e, mant in [0.5, 1) */
    e -= 1;                     /* a = (2 mant) * 2^e, 2 mant in [1, 2) */
    int m = (int)roundevenf((2.0f * mant - 1.0f) * 8.0f);
    if (m == 8) {
        m = 0;
        e++;
    }
    int code = ((e + 7) << 3) | m;
    if (code > 0x7e) code = 0x7e; /* 464 > a >= 448 handled above; keeps NaN unreachable */
    return (uint8_t)(sign | code);
}

static const float e2m1_mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

float vsr_e2m1_to_f32(uint8_t nibble) {
    float mag = e2m1_mag[nibble & 7];
    return (nibble & 8) ? -mag : mag;
}

/* Round-to-nearest-even on the grid 0, .5, 1, 1.5, 2, 3, 4, 6. The boundaries are the
 * ones compressed-tensors' cast_to_fp4 uses (ties go to the even code: .25->0, .75->1,
 * 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4). The sign bit is set for negative inputs, so
 * negatives that round to zero keep it (-0.1 -> 0x8) while -0.0 gives 0x0: the library
 * multiplies by torch.sign(x), which is 0 for -0.0, and its packer reads the sign bit. */
uint8_t vsr_f32_to_e2m1(float f) {
    uint8_t sign = f < 0.0f ? 8 : 0;
    float a = fabsf(f);
    uint8_t idx;
    if (isnan(f)) idx = 7;
    else if (a <= 0.25f) idx = 0;
    else if (a < 0.75f) idx = 1;
    else if (a <= 1.25f) idx = 2;
    else if (a < 1.75f) idx = 3;
    else if (a <= 2.5f) idx = 4;
    else if (a < 3.5f) idx = 5;
    else if (a <= 5.0f) idx = 6;
    else idx = 7;
    return (uint8_t)(sign | idx);
}
