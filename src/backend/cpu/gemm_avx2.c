/* AVX2 + FMA GEMM kernels: 8 floats per vector, 16 registers (so smaller blocks: 4 x 2 in
 * the small path, a 6 x 16 micro-kernel). Compiled for AVX2 only inside this file; gemm.c
 * calls them only when the CPU reports AVX2, FMA and F16C.
 * int4 decode: 1 packed word -> 8 nibbles (broadcast, variable shift, mask), then the
 * 16-entry table lookup as two vpermps and a blend on nibble bit 3. */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "backend/cpu/gemm_internal.h"
#include "vsr/dtype.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,bmi2")

typedef __m256 V;
typedef __m256i VI;
typedef struct { __m256 lo, hi; } T;
#define VL 8
#define SM 4
#define SN 2
#define MR 6
#define SFX(name) name##_avx2

static inline __m256i lanes(int nv) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(nv), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
static inline V v_zero(void) { return _mm256_setzero_ps(); }
static inline V v_load(const float *p) { return _mm256_loadu_ps(p); }
static inline V v_loadn(const float *p, int nv) { return _mm256_maskload_ps(p, lanes(nv)); }
static inline void v_store(float *p, V v) { _mm256_storeu_ps(p, v); }
static inline void v_storen(float *p, V v, int nv) { _mm256_maskstore_ps(p, lanes(nv), v); }
static inline V v_fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
static inline V v_add(V a, V b) { return _mm256_add_ps(a, b); }
static inline V v_bcast(const float *p) { return _mm256_broadcast_ss(p); }
static inline float v_reduce(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline V v_bf16(const uint16_t *p) {
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
static inline V v_bf16n(const uint16_t *p, int nv) {
    uint16_t tmp[8] = {0};
    memcpy(tmp, p, (size_t)nv * sizeof *p);
    return v_bf16(tmp);
}

/* 8 nibbles of words[0], lane i = nibble i */
static inline VI i_nib(const uint32_t *words, int nv) {
    (void)nv;
    const VI shift = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    VI v = _mm256_srlv_epi32(_mm256_set1_epi32((int)words[0]), shift);
    return _mm256_and_si256(v, _mm256_set1_epi32(0xf));
}

/* as vsr_f32_to_bf16, see gemm_avx512.c */
static inline V round_bf16(V f) {
    VI b = _mm256_castps_si256(f);
    VI lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
    VI top = _mm256_set1_epi32((int)0xffff0000u);
    VI r = _mm256_and_si256(_mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7fff)), lsb), top);
    VI nan = _mm256_cmpgt_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x7fffffff)),
                                _mm256_set1_epi32(0x7f800000));
    VI q = _mm256_and_si256(_mm256_or_si256(b, _mm256_set1_epi32(0x400000)), top);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(r, q, nan));
}

static inline T t_build(int uzp, float s) {
    const VI iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    VI z = _mm256_set1_epi32(uzp);
    V sv = _mm256_set1_ps(s);
    T t;
    t.lo = round_bf16(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(iota, z)), sv));
    t.hi = round_bf16(_mm256_mul_ps(
        _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_add_epi32(iota, _mm256_set1_epi32(8)), z)), sv));
    return t;
}
static inline V t_look(T t, VI u) {
    V lo = _mm256_permutevar8x32_ps(t.lo, u), hi = _mm256_permutevar8x32_ps(t.hi, u);
    return _mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_slli_epi32(u, 28)));
}

static inline V v_lane(VI u, const int32_t *gi, int nv, const float *sc, const int32_t *uz) {
    VI g = nv == VL ? _mm256_loadu_si256((const __m256i *)gi) : _mm256_maskload_epi32(gi, lanes(nv));
    V s = _mm256_i32gather_ps(sc, g, 4);
    VI z = _mm256_i32gather_epi32(uz, g, 4);
    return round_bf16(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(u, z)), s));
}

static inline void transpose_vl(V r[8]) {
    V t[8], s[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    /* s[4i+j], 128-bit lane L: column 4L+j of rows 4i..4i+3 */
    for (int i = 0; i < 2; i++) {
        s[4 * i + 0] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        s[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xee);
        s[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        s[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
    }
    for (int j = 0; j < 4; j++) {
        r[j] = _mm256_permute2f128_ps(s[j], s[4 + j], 0x20);
        r[4 + j] = _mm256_permute2f128_ps(s[j], s[4 + j], 0x31);
    }
}

#include "backend/cpu/gemm_simd.inc"

#pragma GCC pop_options

const gemm_isa vsr_gemm_isa_avx2 = {"avx2+fma", small_avx2, large_avx2, scratch_avx2, NR};
