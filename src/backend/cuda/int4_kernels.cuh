/* src/backend/cuda/int4_kernels.cuh: what the int4 W4A16 files share (quant_int4.cu: upload, staging, the
 * configurations, the tuner's lists and the hooks; int4_stream.cu: the weight-streaming kernels for 1-16 rows;
 * int4_tile.cu: the tile kernels for up to 256 rows, mma.sync and wgmma): the kernels' parameter blocks and shared
 * memory sizes, the device helpers more than one kernel family uses (split-K, fragment stores, decode, copies),
 * and the tables of kernel configurations the tuner lists (defined beside their kernels). */
#ifndef VSR_CUDA_INT4_KERNELS_CUH
#define VSR_CUDA_INT4_KERNELS_CUH

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h> /* CUtensorMap (the wgmma kernel's TMA descriptor) only: no libcuda link */
#include <cuda_bf16.h>

#define VSR_QUANT_INTERNAL_CUDA 1
#include "backend/cuda/fp8_gemm.h" /* tma_encode_2d_sw128 */
#include "backend/cuda/quant_internal.h"
#include "backend/cuda/ptx.cuh"

#define I4_MAX_FUSED_ROWS 256
#define I4_MAX_KS 16
/* cap on split-K partial sums: S * M * N floats */
#define I4_WS_CAP_FLOATS (16ll << 20)

static inline int64_t rup(int64_t a, int64_t b) { return (a + b - 1) / b * b; }
static inline unsigned nblocks(int64_t n, int per) { return (unsigned)((n + per - 1) / per); }

/* Split K: every block of an output tile adds itself to the tile's arrival counter; true in the
 * last one to arrive, which then sums the partials in split order (after every block's partials
 * are visible: the fences on both sides). Called by all threads of the block. */
__device__ __forceinline__ bool splitk_last_block(unsigned *counter, int KS) {
    __shared__ int last_flag;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last_flag = atomicAdd(counter, 1u) == (unsigned)KS - 1;
    __syncthreads();
    if (!last_flag) return false;
    __threadfence();
    return true;
}
/* Split K, in the last block: y[m, n] (+)= the KS partials ws[z][m][n] added in split order, for the
 * output columns n0 .. n0 + ncols - 1 (< N) of rows 0 .. vt - 1, by nthr threads; the counter reset
 * for the next launch (stream-ordered). */
__device__ __forceinline__ void splitk_sum(const float *ws, float *y, int64_t M, int64_t N, int KS, int accumulate,
                                           int64_t n0, int64_t ncols, int vt, int nthr, unsigned *counter) {
    /* SB elements a thread at a time, every load (partials, and y when accumulating) issued before any store: the
     * compiler keeps a load of y after an earlier store to y (they may alias), so one at a time each waited out
     * a round trip to L2 */
    constexpr int SB = 4;
    for (int64_t i0 = threadIdx.x; i0 < ncols * vt; i0 += (int64_t)SB * nthr) {
        float s[SB];
#pragma unroll
        for (int u = 0; u < SB; u++) {
            const int64_t idx = i0 + (int64_t)u * nthr, n = n0 + idx % ncols, m = idx / ncols;
            s[u] = 0.0f;
            if (idx >= ncols * vt || n >= N) continue;
            for (int zz = 0; zz < KS; zz++) s[u] += __ldcg(ws + ((int64_t)zz * M + m) * N + n);
            if (accumulate) s[u] = y[m * N + n] + s[u];
        }
#pragma unroll
        for (int u = 0; u < SB; u++) {
            const int64_t idx = i0 + (int64_t)u * nthr, n = n0 + idx % ncols, m = idx / ncols;
            if (idx < ncols * vt && n < N) y[m * N + n] = s[u];
        }
    }
    if (threadIdx.x == 0) *counter = 0;
}

/* A warp's finished mma.m16n8k16 accumulators, TN n-tiles of 16 rows from tile0 x MT token tiles of 8
 * (lane: rows r, r + 8 of a tile, tokens 2q, 2q + 1 of a token tile), into y (KS == 1: stored, or added
 * when accumulating) or into split z's partials ws[z][m][n]; nothing for tiles >= NT, rows >= N,
 * tokens >= M, or a warp that is not active. I: the kernel's index type. */
template <int TN, int MT, typename I>
__device__ __forceinline__ void i4_store_frags(const float (&acc)[TN][MT][4], bool active, I tile0, I NT, int r, int q,
                                               I M, I N, int KS, int z, int accumulate, float *y, float *ws) {
    /* accumulating, every y this lane adds to is loaded before any store (see splitk_sum) */
    float v[TN][MT][4];
#pragma unroll
    for (int t = 0; t < TN; t++)
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const I n = (tile0 + t) * 16 + r + ((e & 2) ? 8 : 0);
                const I m = mt * 8 + q * 2 + (e & 1);
                v[t][mt][e] = acc[t][mt][e];
                if (active && tile0 + t < NT && n < N && m < M && KS == 1 && accumulate)
                    v[t][mt][e] = y[(size_t)m * N + n] + v[t][mt][e];
            }
#pragma unroll
    for (int t = 0; t < TN; t++)
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const I n = (tile0 + t) * 16 + r + ((e & 2) ? 8 : 0);
                const I m = mt * 8 + q * 2 + (e & 1);
                if (!active || tile0 + t >= NT || n >= N || m >= M) continue;
                if (KS == 1)
                    y[(size_t)m * N + n] = v[t][mt][e];
                else
                    ws[((size_t)z * M + m) * N + n] = acc[t][mt][e];
            }
}

/* ---- decode ---- */

__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t sel) {
    uint32_t r;
    asm("prmt.b32 %0, %1, %1, %2;" : "=r"(r) : "r"(a), "r"(sel));
    return r;
}

__device__ __forceinline__ uint32_t dq2(uint32_t word, int i, uint32_t bias2, uint32_t scale2) {
    uint32_t t = ((word >> (4 * i)) & 0x000F000Fu) | 0x43004300u;
    __nv_bfloat162 tv = *(__nv_bfloat162 *)&t, bv = *(__nv_bfloat162 *)&bias2, sv = *(__nv_bfloat162 *)&scale2;
    __nv_bfloat162 r = __hmul2(__hsub2(tv, bv), sv);
    return *(uint32_t *)&r;
}

__device__ __forceinline__ void mma16816(float *d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

typedef struct i4p {
    const uint4 *wq;
    const uint32_t *sz;
    const int4 *kgrp4;
    const float *x;
    const int32_t *perm;
    int64_t M, K, N, Np, KC;
    int G, gchunks, KS, accumulate;
    float *y, *ws;
    unsigned *counters;
} i4p;

typedef struct i4t {
    const uint4 *wq;
    const uint32_t *sz;
    const __nv_bfloat16 *x; /* bf16 [M, ldx], permuted column order, 16-byte aligned rows */
    int64_t M, N, Np, KC, ldx, kvalid; /* columns >= kvalid read as zero */
    int G, gchunks, KS, per, accumulate; /* per: chunks per split */
    float *y, *ws;
    unsigned *counters;
} i4t;

__device__ __forceinline__ void cp16(void *smem, const void *g, int bytes) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(g), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp16s(unsigned s, const void *g) { /* shared address already converted */
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(g) : "memory");
}
__device__ __forceinline__ uint4 lds128(unsigned s) { /* volatile: stays after the cp.async wait before it */
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(s));
    return v;
}
__device__ __forceinline__ uint32_t lds32(unsigned s) {
    uint32_t v;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(s));
    return v;
}
__device__ __forceinline__ unsigned opq(unsigned v) { /* a value the compiler cannot rebuild in a loop */
    asm volatile("mov.b32 %0, %0;" : "+r"(v));
    return v;
}

__device__ __forceinline__ int i4t_grp(const i4t &p, int64_t kc) {
    const int64_t g = kc / p.gchunks;
    return (int)(g < p.G - 1 ? g : p.G - 1);
}

/* dq2 with the mask and the exponent in one lop3 ((a & b) | c: LUT 0xEA); same value */
__device__ __forceinline__ uint32_t dq2s(uint32_t word, int i, uint32_t bias2, uint32_t scale2) {
    uint32_t t;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(t) : "r"(word >> (4 * i)), "r"(0x000F000Fu), "r"(0x43004300u));
    __nv_bfloat162 tv = *(__nv_bfloat162 *)&t, bv = *(__nv_bfloat162 *)&bias2, sv = *(__nv_bfloat162 *)&scale2;
    __nv_bfloat162 r = __hmul2(__hsub2(tv, bv), sv);
    return *(uint32_t *)&r;
}

/* dynamic shared memory of k_i4_stream: ring, activation rows, scales */
static __host__ __device__ inline size_t i4t_smem(int nw, int tn, int d, int64_t vt, int64_t per, int64_t ng) {
    return (size_t)nw * d * 512 + (size_t)vt * (size_t)(per * 128 + 16) + (size_t)ng * nw * tn * 16 * 4;
}

typedef struct i4b {
    const uint4 *wq;
    const uint32_t *sz;
    const __nv_bfloat16 *x; /* bf16 [M, ldx], permuted column order, 16-byte aligned rows */
    int M, N, NT, Np, KC, ldx, kvalid; /* columns >= kvalid read as zero (kvalid a multiple of 8) */
    int G, gchunks, KS, per, accumulate; /* per: chunks per split */
    float *y, *ws;
    unsigned *counters;
} i4b;

/* the bulk-copy and mbarrier instructions exist from sm_90 on; the sm_80 build compiles the kernel body out
 * (the launcher offers kind 5 only on capability 9.0+) */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define I4B_SM90 1
#else
#define I4B_SM90 0
#endif
/* global -> shared, bytes a multiple of 16, both 16-byte aligned; completes bytes on the mbarrier */
__device__ __forceinline__ void bulk_g2s(unsigned dst, const void *src, unsigned bytes, unsigned bar) {
#if I4B_SM90
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
#endif
}

/* dynamic shared memory of k_i4_bulk: rings, mbarriers, activations (vt rows), scale records (ng groups) */
static __host__ __device__ inline size_t i4b_smem(int nw, int tn, int r, int s, int64_t vt, int64_t per, int64_t ng) {
    return (size_t)nw * r * tn * s * 512 + (size_t)nw * r * 8 + (size_t)vt * (size_t)(per * 128 + 16) +
           (size_t)ng * nw * tn * 128;
}

typedef struct i4m {
    const uint4 *wq;
    const uint32_t *sz;
    const int32_t *kgrp;    /* group of each 16-column block (gchunks == 0) */
    const __nv_bfloat16 *x; /* bf16 [M, ldx], permuted column order, 16-byte aligned rows */
    int64_t M, N, Np, KC, ldx, kvalid; /* columns >= kvalid read as zero */
    int G, gchunks, KS, per, accumulate; /* per: chunks per split */
    float *y, *ws;
    unsigned *counters;
} i4m;

/* shared memory of one stage: tiles, activations, scale rows (1 when computable per chunk, else 4) */
static __host__ __device__ constexpr int i4m_stage(int wm, int wn, int nn, int srows) {
    return nn * wn * 512 + wm * 8 * 128 + srows * nn * wn * 16 * 4;
}

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define I4G_ON 1
#endif

/* Where kind 8's A operand comes from (the template's RS): a shared-memory buffer written by stmatrix (SS), or
 * registers, each chunk's products waited for before the next decode (RS). The eleventh session measured two more
 * forms on the H200 and removed them, slower at every shape: RS with two register sets, the next chunk decoded while
 * one runs; and a persistent stream-K grid (bench/notes/2026-11-30-cuda-sessions.md "Eleventh session"). */

/* shared memory of one stage (1024-aligned: the activation rows come first and are wgmma's operand): activation
 * rows, packed tiles, scale rows */
static __host__ __device__ constexpr int i4g_stage(int bt, int nwg, int srows) {
    return (bt * 128 + nwg * 2048 + srows * nwg * 64 * 4 + 1023) / 1024 * 1024;
}
/* the whole dynamic shared memory: S stages, two 8 KB A buffers a warpgroup (none when A is in registers), two
 * mbarriers a stage, 1024 to align */
static __host__ __device__ constexpr int i4g_smem_bytes(int bt, int nwg, int s, int srows, bool rs) {
    return s * i4g_stage(bt, nwg, srows) + (rs ? 0 : nwg * 2 * 8192) + s * 16 + 1024;
}

/* ---- the kernel configurations (tables defined beside their kernels; quant_int4.cu lists and launches them) ----
 * kind 0: k_i4_fused, kind 1: k_i4_shared, kind 7: k_i4_mma, kind 8: k_i4_wg (int4_tile.cu); kind 2: k_i4_stream,
 * kind 5: k_i4_bulk (int4_stream.cu) */
typedef void (*i4_kern)(const uint4 *, const uint32_t *, const int4 *, const uint4 *, int64_t, int64_t, int64_t,
                        int64_t, int64_t, int, float *, int, float *, unsigned *);
typedef void (*i4s_kern)(const i4p);
typedef void (*i4t_kern)(const i4t);
typedef void (*i4b_kern)(const i4b);
typedef void (*i4m_kern)(const i4m);
typedef void (*i4g_kern)(const i4m, const CUtensorMap);
/* kind 0's kernel for (mt, w), kind 1's for (mt, nw, u); NULL when none is built */
i4_kern i4_kernel_for(int mt, int w);
i4s_kern i4s_kernel_for(int mt, int nw, int u);
/* kind 2: MT token tiles, NW warps, TN n-tiles per warp, D ring slots */
typedef struct i4t_ent {
    int mt, nw, tn, d;
    i4t_kern k;
} i4t_ent;
#define I4T_N 10
extern const i4t_ent I4T_TAB[];
/* kind 5: MT token tiles, NW warps, TN n-tiles per warp, R ring stages of S chunks per tile */
typedef struct i4b_ent {
    int mt, nw, tn, r, s;
    i4b_kern k;
} i4b_ent;
#define I4B_N 8
extern const i4b_ent I4B_TAB[];
/* kind 7: WM token tiles of 8, WN n-tiles per warp, NN warps along N, KW per chunk (NN * KW warps), S stages */
typedef struct i4m_ent {
    int wm, wn, nn, kw, s; /* NN warps along N, KW per chunk: NN * KW warps */
    i4m_kern k[2];         /* [gchunks > 0] */
} i4m_ent;
#define I4M_N 10
extern const i4m_ent I4M_TAB[];
/* kind 8: BT tokens, NWG warpgroups of 64 output rows, S stages, rs: A in registers */
typedef struct i4g_ent {
    int bt, nwg, s, rs; /* rs: A in registers */
    i4g_kern k[2];      /* [gchunks > 0] */
} i4g_ent;
#define I4G_N 23
extern const i4g_ent I4G_TAB[];

#endif
