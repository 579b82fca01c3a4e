/* vsr/dtype.h: the safetensors element types and their traits (one table). */
#ifndef VSR_DTYPE_H
#define VSR_DTYPE_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum vsr_dtype {
    VSR_DT_BOOL,
    VSR_DT_U8,
    VSR_DT_I8,
    VSR_DT_I16,
    VSR_DT_U16,
    VSR_DT_I32,
    VSR_DT_U32,
    VSR_DT_I64,
    VSR_DT_U64,
    VSR_DT_F16,
    VSR_DT_BF16,
    VSR_DT_F32,
    VSR_DT_F64,
    VSR_DT_C64,
    VSR_DT_F8_E4M3,
    VSR_DT_F8_E5M2,
    VSR_DT_F8_E4M3FNUZ,
    VSR_DT_F8_E5M2FNUZ,
    VSR_DT_F8_E8M0,
    VSR_DT_F4,
    VSR_DT_F6_E2M3,
    VSR_DT_F6_E3M2,
    VSR_DT_COUNT
} vsr_dtype;

typedef struct vsr_dtype_traits {
    const char *name; /* the safetensors header string, e.g. "BF16" */
    int bits;         /* bits per element: 1..64 (F4 = 4, F6 = 6) */
} vsr_dtype_traits;

const vsr_dtype_traits *vsr_dtype_info(vsr_dtype dt);
/* Parses a safetensors dtype string; returns false for an unknown one. */
bool vsr_dtype_parse(const char *s, vsr_dtype *out);

/* Scalar conversions used everywhere as the reference (exact, round-to-nearest-even). */
static inline float vsr_bf16_to_f32(uint16_t h) {
    union { uint32_t u; float f; } v = {.u = (uint32_t)h << 16};
    return v.f;
}
static inline uint16_t vsr_f32_to_bf16(float f) {
    union { float f; uint32_t u; } v = {.f = f};
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40); /* quiet NaN */
    uint32_t lsb = (v.u >> 16) & 1u;
    return (uint16_t)((v.u + 0x7fffu + lsb) >> 16);
}
float vsr_f16_to_f32(uint16_t h);
uint16_t vsr_f32_to_f16(float f);

#ifdef __cplusplus
}
#endif

#endif
