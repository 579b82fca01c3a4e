/* AVX-512 (F, BW, VL, DQ) GEMM kernels: 16 floats per vector. The build stays
 * -march=x86-64-v2; only the functions below are compiled for AVX-512, and gemm.c calls
 * them only when the CPU reports the features.
 * int4 decode: 2 packed words -> 16 nibbles (permute, variable shift, mask), then one
 * vpermps through a 16-entry table of the row/group's BF16-rounded values (u - uzp) * s,
 * built in a register once per group. */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "backend/cpu/gemm_internal.h"
#include "vsr/dtype.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi2")

typedef __m512 V;
typedef __m512i VI;
typedef __m512 T;
#define VL 16
#define SM 4
#define SN 4
#define MR 8
#define SFX(name) name##_avx512

static inline __mmask16 lanes(int nv) { return (__mmask16)((1u << nv) - 1u); }
static inline V v_zero(void) { return _mm512_setzero_ps(); }
static inline V v_load(const float *p) { return _mm512_loadu_ps(p); }
static inline V v_loadn(const float *p, int nv) { return _mm512_maskz_loadu_ps(lanes(nv), p); }
static inline void v_store(float *p, V v) { _mm512_storeu_ps(p, v); }
static inline void v_storen(float *p, V v, int nv) { _mm512_mask_storeu_ps(p, lanes(nv), v); }
static inline V v_fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
static inline V v_add(V a, V b) { return _mm512_add_ps(a, b); }
static inline V v_bcast(const float *p) { return _mm512_set1_ps(*p); }
static inline float v_reduce(V v) { return _mm512_reduce_add_ps(v); }

/* BF16 -> FP32 is the 16 bits moved to the top. */
static inline V v_bf16(const uint16_t *p) {
    __m256i h = _mm256_loadu_si256((const __m256i *)p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
static inline V v_bf16n(const uint16_t *p, int nv) {
    __m256i h = _mm256_maskz_loadu_epi16(lanes(nv), p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* 16 nibbles starting at nibble 0 of words[0] (lane i = nibble i%8 of word i/8). */
static inline VI i_nib(const uint32_t *words, int nv) {
    __m128i x;
    if (nv > 8) {
        uint64_t two;
        memcpy(&two, words, sizeof two);
        x = _mm_cvtsi64_si128((long long)two);
    } else {
        x = _mm_cvtsi32_si128((int)words[0]);
    }
    const VI which = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    const VI shift = _mm512_set_epi32(28, 24, 20, 16, 12, 8, 4, 0, 28, 24, 20, 16, 12, 8, 4, 0);
    VI v = _mm512_permutexvar_epi32(which, _mm512_zextsi128_si512(x));
    return _mm512_and_si512(_mm512_srlv_epi32(v, shift), _mm512_set1_epi32(0xf));
}

/* FP32 -> BF16-representable FP32, exactly as vsr_f32_to_bf16: round to nearest even by
 * integer add 0x7fff + lsb and mask; NaN keeps its top half with the quiet bit set. */
static inline V round_bf16(V f) {
    VI b = _mm512_castps_si512(f);
    VI lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
    VI top = _mm512_set1_epi32((int)0xffff0000u);
    VI r = _mm512_and_si512(_mm512_add_epi32(_mm512_add_epi32(b, _mm512_set1_epi32(0x7fff)), lsb), top);
    __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(b, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    VI q = _mm512_and_si512(_mm512_or_si512(b, _mm512_set1_epi32(0x400000)), top);
    return _mm512_castsi512_ps(_mm512_mask_mov_epi32(r, nan, q));
}

/* table[u] = bf16((u - uzp) * s) for u = 0..15 */
static inline T t_build(int uzp, float s) {
    const VI iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    V q = _mm512_cvtepi32_ps(_mm512_sub_epi32(iota, _mm512_set1_epi32(uzp)));
    return round_bf16(_mm512_mul_ps(q, _mm512_set1_ps(s)));
}
static inline V t_look(T t, VI u) { return _mm512_permutexvar_ps(u, t); }

/* per-lane group: scale and zero point gathered from the row's lane_prep arrays */
static inline V v_lane(VI u, const int32_t *gi, int nv, const float *sc, const int32_t *uz) {
    VI g = nv == VL ? _mm512_loadu_si512(gi) : _mm512_maskz_loadu_epi32(lanes(nv), gi);
    V s = _mm512_i32gather_ps(g, sc, 4);
    VI z = _mm512_i32gather_epi32(g, uz, 4);
    return round_bf16(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(u, z)), s));
}

/* r[i][j] -> r[j][i] for a 16 x 16 block */
static inline void transpose_vl(V r[16]) {
    V t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    /* u[4i+j], 128-bit lane L: column 4L+j of rows 4i..4i+3 */
    for (int i = 0; i < 4; i++) {
        __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
        __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
        u[4 * i + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        u[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        u[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        u[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    for (int j = 0; j < 4; j++) {
        V ab_lo = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x44);
        V ab_hi = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xee);
        V cd_lo = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x44);
        V cd_hi = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xee);
        r[0 + j] = _mm512_shuffle_f32x4(ab_lo, cd_lo, 0x88);
        r[4 + j] = _mm512_shuffle_f32x4(ab_lo, cd_lo, 0xdd);
        r[8 + j] = _mm512_shuffle_f32x4(ab_hi, cd_hi, 0x88);
        r[12 + j] = _mm512_shuffle_f32x4(ab_hi, cd_hi, 0xdd);
    }
}

#include "backend/cpu/gemm_simd.inc"

#pragma GCC pop_options

const gemm_isa vsr_gemm_isa_avx512 = {"avx512", small_avx512, large_avx512, scratch_avx512, NR};
