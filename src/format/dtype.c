#include "vsr/dtype.h"

#include <math.h>
#include <string.h>

static const vsr_dtype_traits dtype_table[] = {
    [VSR_DT_BOOL] = {"BOOL", 8},
    [VSR_DT_U8] = {"U8", 8},
    [VSR_DT_I8] = {"I8", 8},
    [VSR_DT_I16] = {"I16", 16},
    [VSR_DT_U16] = {"U16", 16},
    [VSR_DT_I32] = {"I32", 32},
    [VSR_DT_U32] = {"U32", 32},
    [VSR_DT_I64] = {"I64", 64},
    [VSR_DT_U64] = {"U64", 64},
    [VSR_DT_F16] = {"F16", 16},
    [VSR_DT_BF16] = {"BF16", 16},
    [VSR_DT_F32] = {"F32", 32},
    [VSR_DT_F64] = {"F64", 64},
    [VSR_DT_C64] = {"C64", 64},
    [VSR_DT_F8_E4M3] = {"F8_E4M3", 8},
    [VSR_DT_F8_E5M2] = {"F8_E5M2", 8},
    [VSR_DT_F8_E4M3FNUZ] = {"F8_E4M3FNUZ", 8},
    [VSR_DT_F8_E5M2FNUZ] = {"F8_E5M2FNUZ", 8},
    [VSR_DT_F8_E8M0] = {"F8_E8M0", 8},
    [VSR_DT_F4] = {"F4", 4},
    [VSR_DT_F6_E2M3] = {"F6_E2M3", 6},
    [VSR_DT_F6_E3M2] = {"F6_E3M2", 6},
};
_Static_assert(sizeof dtype_table / sizeof dtype_table[0] == VSR_DT_COUNT,
               "every vsr_dtype needs a traits entry");

const vsr_dtype_traits *vsr_dtype_info(vsr_dtype dt) {
    return (dt >= 0 && dt < VSR_DT_COUNT) ? &dtype_table[dt] : NULL;
}

bool vsr_dtype_parse(const char *s, vsr_dtype *out) {
    for (int i = 0; i < VSR_DT_COUNT; i++) {
        if (strcmp(dtype_table[i].name, s) == 0) {
            *out = (vsr_dtype)i;
            return true;
        }
    }
    return false;
}

float vsr_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    union { uint32_t u; float f; } v;
    if (exp == 0) {
        float m = (float)man * (1.0f / 16777216.0f); /* man * 2^-24 */
        return sign ? -m : m;
    } else if (exp == 31) {
        v.u = sign | 0x7f800000u | (man << 13);
    } else {
        v.u = sign | ((exp + 112u) << 23) | (man << 13);
    }
    return v.f;
}

uint16_t vsr_f32_to_f16(float f) {
    union { float f; uint32_t u; } v = {.f = f};
    uint32_t sign = (v.u >> 16) & 0x8000u;
    uint32_t a = v.u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to inf */
    if (a < 0x38800000u) {                                   /* subnormal or zero in f16 */
        union { uint32_t u; float f; } t = {.u = a};
        float scaled = t.f * 16777216.0f; /* to units of 2^-24, then RNE */
        uint32_t m = (uint32_t)rintf(scaled); /* default rounding mode: to nearest even */
        return (uint16_t)(sign | m);
    }
    uint32_t lsb = (a >> 13) & 1u;
    a += 0xfffu + lsb;
    return (uint16_t)(sign | (((a >> 23) - 112u) << 10) | ((a >> 13) & 0x3ffu));
}
