/* src/backend/cuda/quant_int4.cu: int4 W4A16 (compressed-tensors pack-quantized: GPTQ
 * symmetric, AWQ asymmetric with zero points packed along N, act-order g_idx) on NVIDIA GPUs.
 *
 * Upload repacks the weight once, on the device, into the order the tensor cores want:
 *   tiles of 16 output rows x 64 columns (512 bytes); in a tile, lane l (of 32) holds one
 *   uint4 whose word j is the A fragment of mma.m16n8k16 for the 16 columns 16j..16j+15:
 *   nibble i of that word is row (l/4) + 8*(i&1), column 2*(l%4) + 8*((i>>1)&1) + (i>>2).
 *   So ((word >> 4i) & 0x000F000F) | 0x43004300 is the bf16 pair (128+u_lo, 128+u_hi) of
 *   A-register i, with no shuffles. Scales and zero points become one u32 per (group, row):
 *   bf16(128 + uzp) | bf16(scale) << 16, so dequantization is (t - bias) * scale in bf16x2:
 *   the subtraction is exact and the product rounds once, exactly as compressed-tensors (and
 *   vsr_dequant_int4_ref) round it.
 *   Act-order (g_idx): the columns are sorted by group at upload (a permutation, stable), and
 *   the activations are gathered through it when they are staged; a 16-column block must then
 *   lie in one group for the fused kernel (true for every group size that is a multiple of 16).
 *
 * M <= 256 under --dtype auto: the fused kernel (below) streams the packed tiles once per 8..64
 * tokens; activations are staged as bf16 B fragments. Warps of a block split K and reduce in
 * shared memory; blocks may split K further (ks), reducing deterministically: partial sums go
 * to a workspace and the last block to arrive for a tile adds them in split order, so results
 * never depend on timing. Tile configurations are chosen by autotune.cu. A second fused kernel
 * (k_i4_shared: activations converted straight into shared memory and shared by the block's warps,
 * one 16-row tile per warp) is in the same candidate list and the default at 1-8 rows.
 * At <= 16 rows, groups computable per 64-column chunk, the weight-streaming kernel k_i4_stream
 * (third pass; per-warp cp.async rings, BF16 activations) replaces both, with its own candidate list
 * ("-v3s" keys); VSR_CUDA_INT4_STREAM=0 / cuda_quant_force_int4_stream(0) keeps the two above.
 * The fourth and fifth passes' kernels (register-streaming k_i4_v4, kind 3; persistent stream-K k_i4_sk,
 * kind 4) passed their tests on the H200 but were no faster than k_i4_stream, and were removed (NOTES
 * "fourth pass", "fifth pass"); kinds 3 and 4 are unused so that kind 5 keeps its number.
 * The bulk-copy streaming kernel k_i4_bulk (sixth pass, kind 5, "-b6" keys; capability 9.0+) replaces k_i4_stream
 * under VSR_CUDA_INT4_BULK=1 / cuda_quant_force_int4_bulk(1); OFF by default (verified 2026-11-29c: every test
 * passes, but no faster: gate_up 1 row 28.1 us from BF16 against 26.5; NOTES "sixth pass").
 * The seventh pass's persistent compact configurations of it (k_i4_bulkp, kind 6, names ending "-p", listed with
 * kind 5's) were measured on the H200 (2026-11-29d) slower than the best kind-5 configuration at every shape
 * (gate_up 1 row 25.9 vs 24.7 us, down 23.6 vs 21.3, q_proj 18.1 vs 15.8; 16 rows 37.6-59.7 vs 28.0-41.7) and
 * were removed (NOTES "seventh pass"); kind 6 is unused.
 * At 17-256 rows the tensor-core tile kernel k_i4_mma (ninth pass, kind 7, "-m9" keys) replaces kinds 0 and 1:
 * blocks of NN x WN n-tiles and WM x 8 tokens, a cp.async pipeline of packed tiles, swizzled BF16 activation rows
 * (ldmatrix) and scale rows, each tile decoded once per chunk for all the block's tokens; VSR_CUDA_INT4_MMA=0 /
 * cuda_quant_force_int4_mma(0) keeps kinds 0 and 1 (1.2-2.4x slower on the H200; NOTES "Ninth session").
 * On capability 9.0 the wgmma kernel k_i4_wg (tenth pass, kind 8, "g-" names, listed after kind 7 under "-m10" keys)
 * multiplies on wgmma with the decoded weights as A and the tokens as N, fed by TMA from one producer thread; its
 * RS form is the default at 33-256 rows (gate_up 128 rows: 62.6 us against kind 7's 101.3); VSR_CUDA_INT4_WG=0 /
 * cuda_quant_force_int4_wg(0) lists kind 7 alone (NOTES "Tenth session").
 * cuda_int4_linear_bf16 takes BF16 activations; cuda_int4_linear rounds FP32 to BF16 for it.
 * Adding into y (the forward's down and o/out projections) at 17-256 rows: the product is stored into a scratch
 * buffer and added by a second pass (i4_launch_y; VSR_CUDA_INT4_ACC_SEP=0 for the epilogues' own loads).
 * Otherwise: unpack to BF16 [N, Kp] once per call into a workspace (k_i4_unpack16, 16-byte stores)
 * and use cuBLASLt (ops.cu). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h> /* CUtensorMap (the wgmma kernel's TMA descriptor) only: no libcuda link */
#include <cuda_bf16.h>

#define VSR_QUANT_INTERNAL_CUDA 1
#include "backend/cuda/fp8_gemm.h" /* tma_encode_2d_sw128 */
#include "backend/cuda/quant_internal.h"
#include "backend/cuda/ptx.cuh"

extern int quant_forced_int4_path(void);
extern int quant_forced_int4_cfg(void);
extern int quant_int4_stream_on(void);

/* the bulk-copy streaming kernel (kind 5, sixth pass, M <= 16): VSR_CUDA_INT4_BULK=1 (read once) or
 * cuda_quant_force_int4_bulk(1). OFF by default: verified on the H200 (2026-11-29c) but no faster than
 * k_i4_stream (NOTES "sixth pass") */
CUDA_ENV_KNOB(static, quant_int4_bulk_on, cuda_quant_force_int4_bulk, "VSR_CUDA_INT4_BULK", 0)

/* the tensor-core tile kernel (kind 7, ninth pass, 17-256 rows): on unless VSR_CUDA_INT4_MMA=0 (read once) or
 * cuda_quant_force_int4_mma(0), which keep kinds 0 and 1 there */
CUDA_ENV_KNOB(static, quant_int4_mma_on, cuda_quant_force_int4_mma, "VSR_CUDA_INT4_MMA", 1)

/* adding into y at 17-256 rows: the fused kernels store the product into a scratch buffer and a second pass adds it
 * into y, instead of each kernel's epilogue loading y itself (all blocks reach their epilogue together, so its round
 * trips to L2 were not hidden: 9-19 us a call on the H200, against 2-5 us for the second pass; bench/NOTES.md
 * "Eleventh session", call 5). The sums are the same (y + product). On unless VSR_CUDA_INT4_ACC_SEP=0 (read once)
 * or cuda_quant_force_int4_acc_sep(0). */
CUDA_ENV_KNOB(static, quant_int4_acc_sep_on, cuda_quant_force_int4_acc_sep, "VSR_CUDA_INT4_ACC_SEP", 1)

/* the wgmma kernel (kind 8, tenth pass, 17-256 rows, capability 9.0), listed with kind 7: on unless
 * VSR_CUDA_INT4_WG=0 (read once) or cuda_quant_force_int4_wg(0) */
CUDA_ENV_KNOB(static, quant_int4_wg_on, cuda_quant_force_int4_wg, "VSR_CUDA_INT4_WG", 1)

#define I4_MAX_FUSED_ROWS 256
#define I4_MAX_KS 16
/* cap on split-K partial sums: S * M * N floats */
#define I4_WS_CAP_FLOATS (16ll << 20)

static inline int64_t rup(int64_t a, int64_t b) { return (a + b - 1) / b * b; }
static inline unsigned nblocks(int64_t n, int per) { return (unsigned)((n + per - 1) / per); }

/* ---- upload-time repacking ---- */

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

/* one thread per (n-tile, 64-column chunk, lane): build that lane's uint4 */
__global__ void k_i4_repack(const uint32_t *__restrict__ packed, int64_t N, int64_t K, const int32_t *__restrict__ perm,
                            int64_t NT, int64_t KC, uint4 *__restrict__ out) {
    int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= NT * KC * 32) return;
    int lane = (int)(id & 31);
    int64_t kc = (id >> 5) % KC, nt = (id >> 5) / KC;
    int r = lane >> 2, c = (lane & 3) * 2;
    uint32_t words[4];
#pragma unroll
    for (int j = 0; j < 4; j++) {
        uint32_t wd = 0;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            int64_t n = nt * 16 + r + ((i & 1) ? 8 : 0);
            int64_t kp = kc * 64 + 16 * j + c + (((i >> 1) & 1) ? 8 : 0) + (i >> 2);
            int64_t k = perm ? perm[kp] : (kp < K ? kp : -1);
            uint32_t u = 8; /* padding: any finite value (its activation is zero) */
            if (n < N && k >= 0) u = (packed[n * (K / 8) + k / 8] >> (4 * (k % 8))) & 15u;
            wd |= u << (4 * i);
        }
        words[j] = wd;
    }
    out[id] = make_uint4(words[0], words[1], words[2], words[3]);
}

/* one thread per (group, row) */
__global__ void k_i4_scales(const uint16_t *__restrict__ scale, const uint32_t *__restrict__ zp, int64_t N, int G,
                            int64_t Np, uint32_t *__restrict__ out) {
    int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= (int64_t)G * Np) return;
    int64_t g = id / Np, n = id % Np;
    uint32_t uzp = 8, s = 0;
    if (n < N) {
        s = scale[n * G + g];
        if (zp) uzp = (zp[(n / 8) * G + g] >> (4 * (n % 8))) & 15u;
    }
    out[id] = (0x4300u | uzp) | (s << 16);
}

/* ---- activation staging ---- */

/* x FP32 [M, K] -> bf16 B fragments: [Mt][KC][32 lanes][8 u32]; u32 (2j + h) of a lane is step
 * j's b-register h: token (l/4), columns 16j + 2(l%4) + 8h + {0, 1}. Padding and tokens >= M are 0. */
__global__ void k_i4_stage_frag(const float *__restrict__ x, int64_t M, int64_t K, const int32_t *__restrict__ perm,
                                int64_t Mt, int64_t KC, uint4 *__restrict__ out) {
    int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= Mt * KC * 32) return;
    int lane = (int)(id & 31);
    int64_t kc = (id >> 5) % KC, tt = (id >> 5) / KC;
    int64_t t = tt * 8 + (lane >> 2);
    uint32_t v[8];
#pragma unroll
    for (int q = 0; q < 8; q++) {
        int j = q >> 1, h = q & 1;
        float f[2];
#pragma unroll
        for (int e = 0; e < 2; e++) {
            int64_t kp = kc * 64 + 16 * j + (lane & 3) * 2 + 8 * h + e;
            int64_t k = perm ? perm[kp] : (kp < K ? kp : -1);
            f[e] = (t < M && k >= 0) ? x[t * K + k] : 0.0f;
        }
        __nv_bfloat162 p = __floats2bfloat162_rn(f[0], f[1]);
        v[q] = *(uint32_t *)&p;
    }
    out[id * 2] = make_uint4(v[0], v[1], v[2], v[3]);
    out[id * 2 + 1] = make_uint4(v[4], v[5], v[6], v[7]);
}

/* x FP32 [M, K] -> bf16 rows [M, Kp] (permuted, zero padded) for the unpack path */
__global__ void k_i4_stage_rows(const float *__restrict__ x, int64_t M, int64_t K, const int32_t *__restrict__ perm,
                                int64_t Kp, __nv_bfloat16 *__restrict__ out) {
    int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= M * Kp) return;
    int64_t t = id / Kp, kp = id % Kp;
    int64_t k = perm ? perm[kp] : (kp < K ? kp : -1);
    out[id] = __float2bfloat16_rn(k >= 0 ? x[t * K + k] : 0.0f);
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

/* ---- the fused kernel ----
 * grid (NT n-tiles, ceil(Mt / MT) token groups, KS splits), block W warps. */
/* Sweep 1 streamed at ~1 TB/s at 1-16 rows: each group change loaded its scales inside the
 * multiply (a dependent global load per 64 columns); sweep 2 forcing 128 registers and 6 chunks
 * in flight did not help (slower). Now a chunk's scales are loaded with its weights. */
template <int MT, int W>
__global__ void __launch_bounds__(W * 32)
    k_i4_fused(const uint4 *__restrict__ wq, const uint32_t *__restrict__ sz, const int4 *__restrict__ kgrp4,
               const uint4 *__restrict__ xf, int64_t M, int64_t N, int64_t Np, int64_t KC, int64_t Mt, int KS,
               float *__restrict__ y, int accumulate, float *__restrict__ ws, unsigned *__restrict__ counters) {
    constexpr int U = MT >= 8 ? 1 : (MT >= 4 ? 2 : 4);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t nt = blockIdx.x;
    const int64_t tt0 = (int64_t)blockIdx.y * MT;
    const int z = blockIdx.z;
    const int64_t per = (KC + KS - 1) / KS;
    const int64_t kc0 = z * per, kc1 = kc0 + per < KC ? kc0 + per : KC;
    const int r = lane >> 2;
    const uint32_t *szr = sz + nt * 16 + r;

    float acc[MT][4];
#pragma unroll
    for (int t = 0; t < MT; t++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[t][e] = 0.0f;

    int gprev = -1;
    uint32_t br = 0, sr = 0, br8 = 0, sr8 = 0;
    for (int64_t kb = kc0 + warp; kb < kc1; kb += (int64_t)W * U) {
        uint4 wv[U];
        int4 gv[U];
        uint4 xv[U][MT][2];
        uint32_t s0v[U], s8v[U]; /* the chunk's scales, loaded with its weights (one group per chunk) */
#pragma unroll
        for (int u = 0; u < U; u++) {
            int64_t kc = kb + (int64_t)u * W;
            if (kc < kc1) {
                wv[u] = __ldg(wq + (nt * KC + kc) * 32 + lane);
                gv[u] = __ldg(kgrp4 + kc);
                if (gv[u].x == gv[u].w) { /* groups are non-decreasing along the (permuted) columns */
                    s0v[u] = __ldg(szr + (int64_t)gv[u].x * Np);
                    s8v[u] = __ldg(szr + (int64_t)gv[u].x * Np + 8);
                }
#pragma unroll
                for (int t = 0; t < MT; t++) {
                    if (tt0 + t < Mt) {
                        const uint4 *p = xf + (((tt0 + t) * KC + kc) * 32 + lane) * 2;
                        xv[u][t][0] = __ldg(p);
                        xv[u][t][1] = __ldg(p + 1);
                    }
                }
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (kb + (int64_t)u * W >= kc1) break;
            uint32_t wd[4] = {wv[u].x, wv[u].y, wv[u].z, wv[u].w};
            int gg[4] = {gv[u].x, gv[u].y, gv[u].z, gv[u].w};
            if (gg[0] == gg[3]) { /* prefetched: no dependent load inside the multiply */
                gprev = gg[0];
                br = prmt(s0v[u], 0x1010), sr = prmt(s0v[u], 0x3232);
                br8 = prmt(s8v[u], 0x1010), sr8 = prmt(s8v[u], 0x3232);
            }
#pragma unroll
            for (int j = 0; j < 4; j++) {
                if (gg[j] != gprev) { /* group smaller than 64: uniform across the warp */
                    gprev = gg[j];
                    uint32_t s0 = __ldg(szr + (int64_t)gprev * Np), s8 = __ldg(szr + (int64_t)gprev * Np + 8);
                    br = prmt(s0, 0x1010), sr = prmt(s0, 0x3232);
                    br8 = prmt(s8, 0x1010), sr8 = prmt(s8, 0x3232);
                }
                uint32_t a0 = dq2(wd[j], 0, br, sr), a1 = dq2(wd[j], 1, br8, sr8);
                uint32_t a2 = dq2(wd[j], 2, br, sr), a3 = dq2(wd[j], 3, br8, sr8);
#pragma unroll
                for (int t = 0; t < MT; t++) {
                    if (tt0 + t < Mt) {
                        uint32_t b0 = (j & 1) ? ((j & 2) ? xv[u][t][1].z : xv[u][t][0].z) : ((j & 2) ? xv[u][t][1].x : xv[u][t][0].x);
                        uint32_t b1 = (j & 1) ? ((j & 2) ? xv[u][t][1].w : xv[u][t][0].w) : ((j & 2) ? xv[u][t][1].y : xv[u][t][0].y);
                        mma16816(acc[t], a0, a1, a2, a3, b0, b1);
                    }
                }
            }
        }
    }

    /* reduce the W warps' partial sums in warp order */
    __shared__ float red[W][MT * 4][32];
    __shared__ int last_flag;
#pragma unroll
    for (int t = 0; t < MT; t++)
#pragma unroll
        for (int e = 0; e < 4; e++) red[warp][t * 4 + e][lane] = acc[t][e];
    __syncthreads();
    const int64_t tile = (int64_t)blockIdx.y * gridDim.x + nt;
    for (int idx = threadIdx.x; idx < MT * 4 * 32; idx += W * 32) {
        int te = idx >> 5, l = idx & 31, t = te >> 2, e = te & 3;
        float s = 0.0f;
#pragma unroll
        for (int w = 0; w < W; w++) s += red[w][te][l];
        int64_t n = nt * 16 + (l >> 2) + ((e & 2) ? 8 : 0);
        int64_t m = (tt0 + t) * 8 + (l & 3) * 2 + (e & 1);
        if (n >= N || m >= M) continue;
        if (KS == 1)
            y[m * N + n] = accumulate ? y[m * N + n] + s : s;
        else
            ws[((int64_t)z * M + m) * N + n] = s;
    }
    if (KS == 1) return;
    /* split K: the last block to arrive for this tile adds the partials in split order */
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned old = atomicAdd(counters + tile, 1u);
        last_flag = (old == (unsigned)KS - 1);
    }
    __syncthreads();
    if (!last_flag) return;
    __threadfence();
    for (int idx = threadIdx.x; idx < MT * 4 * 32; idx += W * 32) {
        int te = idx >> 5, l = idx & 31, t = te >> 2, e = te & 3;
        int64_t n = nt * 16 + (l >> 2) + ((e & 2) ? 8 : 0);
        int64_t m = (tt0 + t) * 8 + (l & 3) * 2 + (e & 1);
        if (n >= N || m >= M) continue;
        float s = 0.0f;
        for (int q = 0; q < KS; q++) s += __ldcg(ws + ((int64_t)q * M + m) * N + n);
        y[m * N + n] = accumulate ? y[m * N + n] + s : s;
    }
    if (threadIdx.x == 0) counters[tile] = 0; /* ready for the next launch (stream-ordered) */
}

/* ---- the shared-activation kernel (second pass) ----
 * Why: the kernel above re-reads each warp's activation fragments from L2 for its own 16 rows,
 * needs a separate staging launch, and serialises a group-index load before each scale load;
 * sweep 1 measured ~1 TB/s at 1-16 rows. Here each warp owns one 16-row n-tile over the block's
 * K range (no cross-warp reduction); the NW warps of a block share the activations, which the
 * block converts from FP32 straight into shared memory in B-fragment order (no staging launch),
 * S chunks at a time. Weights stream as one 16-byte load per lane per 64-column chunk, U chunks
 * per register group with the next group's loads issued before the current group's multiply.
 * The group of a chunk is computed (gchunks > 0) so its scales load beside its weights.
 * grid (token groups of MT*8, ceil(NT / NW), KS); token groups vary fastest so blocks re-reading
 * the same weights for other tokens run together (L2). Split K: partial sums to ws, the last
 * block of a tile adds them in split order (deterministic, as above). */
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

template <int U>
__device__ __forceinline__ void i4s_load(const i4p &p, int64_t nt, int64_t kcb, int64_t kc1, int lane, bool active,
                                         uint4 (&w)[U], uint32_t (&s0)[U], uint32_t (&s8)[U], int (&gf)[U]) {
    const uint32_t *szr = p.sz + nt * 16 + (lane >> 2);
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int64_t kc = kcb + u;
        gf[u] = -1;
        if (active && kc < kc1) {
            w[u] = __ldg(p.wq + (nt * p.KC + kc) * 32 + lane);
            int g;
            if (p.gchunks > 0) {
                g = (int)(kc / p.gchunks);
                g = g < p.G - 1 ? g : p.G - 1;
            } else {
                int4 g4 = __ldg(p.kgrp4 + kc);
                g = g4.x == g4.w ? g4.x : -1; /* -1: the chunk spans groups, looked up per 16 columns */
            }
            gf[u] = g;
            if (g >= 0) {
                s0[u] = __ldg(szr + (int64_t)g * p.Np);
                s8[u] = __ldg(szr + (int64_t)g * p.Np + 8);
            }
        }
    }
}

/* MINB: minimum resident blocks asked of the compiler (U = 4: 16 / NW, i.e. <= 128 registers and 16
 * warps per SM, no spills; U = 8 needs ~170 registers: 1, about 12 warps per SM) */
template <int MT, int NW, int S, int U, int MINB>
__global__ void __launch_bounds__(NW * 32, MINB) k_i4_shared(const i4p p) {
    static_assert(S % U == 0, "a register group never straddles a stage");
    __shared__ uint4 xs[MT * S * 2 * 32]; /* [t][chunk of stage][half][lane]: 1 KB per (t, chunk) */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t NT = p.Np / 16;
    const int64_t nt = (int64_t)blockIdx.y * NW + warp;
    const bool active = nt < NT;
    const int64_t m0 = (int64_t)blockIdx.x * MT * 8;
    const int z = blockIdx.z;
    const int64_t per = (p.KC + p.KS - 1) / p.KS;
    const int64_t kc0 = z * per < p.KC ? z * per : p.KC, kc1 = kc0 + per < p.KC ? kc0 + per : p.KC;
    const int ngroups = (int)((kc1 - kc0 + U - 1) / U);
    const int vt = (int)(p.M - m0 < MT * 8 ? p.M - m0 : MT * 8); /* valid tokens of this block */
    const int r = lane >> 2;
    const uint32_t *szr = p.sz + nt * 16 + r;

    float acc[MT][4];
#pragma unroll
    for (int t = 0; t < MT; t++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[t][e] = 0.0f;

    uint4 wn[U];
    uint32_t s0n[U], s8n[U];
    int gfn[U];
    if (ngroups > 0) i4s_load<U>(p, nt, kc0, kc1, lane, active, wn, s0n, s8n, gfn);
    uint32_t *xs32 = (uint32_t *)xs;
    for (int gi = 0; gi < ngroups; gi++) {
        const int64_t kcb = kc0 + (int64_t)gi * U;
        if ((gi * U) % S == 0) { /* stage the activations of chunks [kcb, kcb + S) */
            __syncthreads();     /* the previous stage's readers are done */
            const int64_t cs = kcb;
            const int ns = (int)(kc1 - cs < S ? kc1 - cs : S);
            /* tokens >= M are left unwritten: an mma output column depends on its own B column only,
             * and those columns are never stored */
            for (int idx = threadIdx.x; idx < vt * S * 32; idx += NW * 32) {
                const int tok = idx / (S * 32), cp = idx % (S * 32), ls = cp >> 5, c = (cp & 31) * 2;
                if (ls >= ns) continue;
                const int64_t m = m0 + tok, kp = (cs + ls) * 64 + c;
                float f0 = 0.0f, f1 = 0.0f;
                const int64_t k0 = p.perm ? p.perm[kp] : (kp < p.K ? kp : -1);
                const int64_t k1 = p.perm ? p.perm[kp + 1] : (kp + 1 < p.K ? kp + 1 : -1);
                if (k0 >= 0) f0 = p.x[m * p.K + k0];
                if (k1 >= 0) f1 = p.x[m * p.K + k1];
                __nv_bfloat162 b = __floats2bfloat162_rn(f0, f1);
                /* B fragment: lane (token % 8) * 4 + (column % 8) / 2, u32 q = 2 * (column / 16) + (column % 16) / 8 */
                const int t = tok >> 3, cc = c & 15, q = 2 * (c >> 4) + (cc >> 3);
                const int ld = (tok & 7) * 4 + ((cc & 7) >> 1);
                xs32[(((t * S + ls) * 2 + (q >> 2)) * 32 + ld) * 4 + (q & 3)] = *(uint32_t *)&b;
            }
            __syncthreads();
        }
        uint4 wc[U];
        uint32_t s0c[U], s8c[U];
        int gfc[U];
#pragma unroll
        for (int u = 0; u < U; u++) wc[u] = wn[u], s0c[u] = s0n[u], s8c[u] = s8n[u], gfc[u] = gfn[u];
        if (gi + 1 < ngroups) i4s_load<U>(p, nt, kcb + U, kc1, lane, active, wn, s0n, s8n, gfn);
        if (!active) continue;
        const int lsb = (gi * U) % S;
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t kc = kcb + u;
            if (kc >= kc1) break;
            const uint32_t wd[4] = {wc[u].x, wc[u].y, wc[u].z, wc[u].w};
            uint32_t br = prmt(s0c[u], 0x1010), sr = prmt(s0c[u], 0x3232);
            uint32_t br8 = prmt(s8c[u], 0x1010), sr8 = prmt(s8c[u], 0x3232);
            const int4 g4 = gfc[u] < 0 ? __ldg(p.kgrp4 + kc) : make_int4(0, 0, 0, 0);
            const int gg[4] = {g4.x, g4.y, g4.z, g4.w};
            const uint4 *xb = xs + (size_t)(lsb + u) * 2 * 32 + lane;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                if (gfc[u] < 0) { /* slow path: this 16-column block's own group */
                    const uint32_t a = __ldg(szr + (int64_t)gg[j] * p.Np), b8 = __ldg(szr + (int64_t)gg[j] * p.Np + 8);
                    br = prmt(a, 0x1010), sr = prmt(a, 0x3232), br8 = prmt(b8, 0x1010), sr8 = prmt(b8, 0x3232);
                }
                const uint32_t a0 = dq2(wd[j], 0, br, sr), a1 = dq2(wd[j], 1, br8, sr8);
                const uint32_t a2 = dq2(wd[j], 2, br, sr), a3 = dq2(wd[j], 3, br8, sr8);
#pragma unroll
                for (int t = 0; t < MT; t++) {
                    if (m0 + t * 8 < p.M) {
                        const uint4 v = xb[(size_t)t * S * 2 * 32 + (j >> 1) * 32];
                        const uint32_t b0 = (j & 1) ? v.z : v.x, b1 = (j & 1) ? v.w : v.y;
                        mma16816(acc[t], a0, a1, a2, a3, b0, b1);
                    }
                }
            }
        }
    }

    const int64_t tile = (int64_t)blockIdx.y * gridDim.x + blockIdx.x;
    if (active) {
#pragma unroll
        for (int t = 0; t < MT; t++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int64_t n = nt * 16 + r + ((e & 2) ? 8 : 0);
                const int64_t m = m0 + t * 8 + (lane & 3) * 2 + (e & 1);
                if (n >= p.N || m >= p.M) continue;
                if (p.KS == 1)
                    p.y[m * p.N + n] = p.accumulate ? p.y[m * p.N + n] + acc[t][e] : acc[t][e];
                else
                    p.ws[((int64_t)z * p.M + m) * p.N + n] = acc[t][e];
            }
    }
    if (p.KS == 1) return;
    if (!splitk_last_block(p.counters + tile, p.KS)) return;
    const int64_t nbase = (int64_t)blockIdx.y * NW * 16;
    for (int idx = threadIdx.x; idx < NW * 16 * MT * 8; idx += NW * 32) {
        const int64_t n = nbase + idx % (NW * 16), m = m0 + idx / (NW * 16);
        if (n >= p.N || m >= p.M) continue;
        float s = 0.0f;
        for (int q = 0; q < p.KS; q++) s += __ldcg(p.ws + ((int64_t)q * p.M + m) * p.N + n);
        p.y[m * p.N + n] = p.accumulate ? p.y[m * p.N + n] + s : s;
    }
    if (threadIdx.x == 0) p.counters[tile] = 0; /* ready for the next launch (stream-ordered) */
}

/* ---- the weight-streaming kernel (third pass, M <= 16) ----
 * Why: both kernels above stream the packed weights at ~1.1 TB/s at 1-16 rows (NOTES "CUDA GEMM
 * sweep"): each warp holds only 2-4 KB of loads in flight in registers, every block pays a chain of
 * dependent latencies (activation staging behind a barrier, register groups, the split-K tail), and
 * kind 0 re-reads activation fragments from L2 per warp. Here:
 *  - every warp runs its own cp.async ring of D 512-byte chunk slots in shared memory: a chunk's slot
 *    is refilled with chunk i + D as soon as chunk i is multiplied, so D loads stay in flight per warp
 *    for the warp's whole life, independent of registers (NW * D * 512 bytes per block);
 *  - the block's activations (M <= 16 rows x its K range, BF16, already permuted and padded by the
 *    caller or read in place) and the scales of its rows and groups are copied once into shared memory
 *    by cp.async in the same breath as the first weights, so the first multiply waits one latency;
 *    activation rows keep their natural layout with a 16-byte pad per row, so lane (token l/4, l%4)
 *    reads its B fragment words 8j + 4h + l%4 of a chunk without bank conflicts (row stride = 4 banks);
 *  - each warp owns TN 16-row n-tiles over the block's K range (no cross-warp reduction); the B
 *    fragments of a chunk are read once per warp and reused for its TN tiles; the weights are the A
 *    operand of mma.m16n8k16 (dequantized in registers as in the kernels above: exact subtraction,
 *    one rounding of the product);
 *  - grid (ceil(NT / (NW * TN)), KS): KS = 1 when the n-tiles alone give enough blocks, else a
 *    deterministic split-K (partials to ws, the last block of an n-block adds them in split order).
 * Needs groups computable per 64-column chunk (gchunks > 0). Tokens of the 8-token mma tile beyond M
 * read the last valid row (their outputs are never stored). */
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

template <int MT, int NW, int TN, int D>
__global__ void __launch_bounds__(NW * 32) k_i4_stream(const i4t p) {
    static_assert((D & (D - 1)) == 0 && D >= 2 && D % TN == 0, "D a power of two, a multiple of TN");
    extern __shared__ __align__(16) unsigned char i4t_sm[];
    constexpr int RB = NW * TN * 16; /* output rows of the block */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t NT = p.Np / 16;
    const int64_t n0 = (int64_t)blockIdx.x * RB;
    const int z = blockIdx.y;
    const int64_t kc0 = (int64_t)z * p.per < p.KC ? (int64_t)z * p.per : p.KC;
    const int64_t kc1 = kc0 + p.per < p.KC ? kc0 + p.per : p.KC;
    const int nk = (int)(kc1 - kc0);
    const int vt = (int)p.M; /* M <= MT * 8 (the launcher's rule) */
    const int RSW = p.per * 32 + 4; /* activation row stride in u32 words: 4 banks past a multiple of 32 */
    const int gA = i4t_grp(p, kc0), gB = nk > 0 ? i4t_grp(p, kc1 - 1) : gA, ng = gB - gA + 1;
    uint4 *ring = (uint4 *)i4t_sm;                                   /* [NW][D][32] */
    uint32_t *xs = (uint32_t *)(i4t_sm + (size_t)NW * D * 512);      /* [vt][RSW] */
    uint32_t *ss = xs + (size_t)vt * RSW;                            /* [ng][RB] */

    /* group 0 of every thread: activations (16-byte pieces of 8 columns) and scales */
    const int xp = nk * 8;
    for (int i = threadIdx.x; i < vt * xp; i += NW * 32) {
        const int tok = i / xp, c = i - tok * xp;
        const int64_t col = kc0 * 64 + (int64_t)c * 8;
        const bool ok = col < p.kvalid; /* kvalid is a multiple of 8: a piece is all in or all out */
        cp16(xs + (size_t)tok * RSW + c * 4, ok ? (const void *)(p.x + tok * p.ldx + col) : (const void *)p.x,
             ok ? 16 : 0);
    }
    for (int i = threadIdx.x; i < ng * (RB / 4); i += NW * 32) {
        const int g = i / (RB / 4), pc = i - g * (RB / 4);
        const int64_t n = n0 + pc * 4;
        const bool ok = n < p.Np; /* Np and n0 are multiples of 16 */
        cp16(ss + g * RB + pc * 4, ok ? (const void *)(p.sz + (int64_t)(gA + g) * p.Np + n) : (const void *)p.sz,
             ok ? 16 : 0);
    }
    cp_async_commit();

    /* this warp's chunk i: k-chunk kc0 + i / TN of n-tile ntb + i % TN; one commit group per chunk.
     * Shared addresses are 32-bit values computed once (opq) and the ring slot is carried by the loop: the
     * compiler otherwise rebuilt them from the thread index in every iteration (137 instructions per chunk,
     * ~30 of them address arithmetic; now ~107 at one token tile, 64 of them the dequantization). */
    const int nchunks = nk * TN;
    const int64_t ntb = n0 / 16 + (int64_t)warp * TN;
    const unsigned rbase = opq((unsigned)__cvta_generic_to_shared(ring + (size_t)warp * D * 32 + lane));
    const int64_t tstride = p.KC * 32; /* uint4 between this lane's words of consecutive n-tiles */
    const uint4 *src = p.wq + (ntb * p.KC + kc0) * 32 + lane; /* tile 0 of the next chunk column to issue */
    bool tact[TN];
#pragma unroll
    for (int t = 0; t < TN; t++) tact[t] = ntb + t < NT;
    /* prologue: chunks 0 .. D-1 (D is a multiple of TN) */
#pragma unroll
    for (int s = 0; s < D; s++) {
        const int t = s % TN;
        if (s < nchunks && tact[t]) cp16s(rbase + (unsigned)s * 512u, src + t * tstride);
        cp_async_commit();
        if (t == TN - 1) src += 32;
    }
    cp_async_wait<D>(); /* this thread's group 0 */
    __syncthreads(); /* everyone's */

    const int q = lane & 3, r = lane >> 2;
    unsigned xaddr[MT]; /* this lane's B words of chunk 0: row (token) * RSW + l%4 */
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        const int row = mt * 8 + r < vt ? mt * 8 + r : vt - 1;
        xaddr[mt] = opq((unsigned)__cvta_generic_to_shared(xs + (size_t)row * RSW + q));
    }
    const unsigned sbase = opq((unsigned)__cvta_generic_to_shared(ss + warp * TN * 16 + r));
    float acc[TN][MT][4];
#pragma unroll
    for (int t = 0; t < TN; t++)
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[t][mt][e] = 0.0f;

    /* the group of chunk kc0 + ci, kept incrementally (no division in the loop), clamped at use */
    int gq = (int)(kc0 / p.gchunks), gr = (int)(kc0 - (int64_t)gq * p.gchunks);
    unsigned roff = 0, slot = rbase; /* ring offset and address of the chunk being multiplied: both carried
                                      * by the loop, so the address is never rebuilt from the thread index */
    int left = nchunks - D; /* chunks still to issue */
    for (int ci = 0; ci < nk; ci++) {
        uint32_t b[MT][8]; /* b[mt][2j + h]: columns 16j + 8h + 2(l%4) + {0, 1} of token mt*8 + l/4 */
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int v = 0; v < 8; v++) b[mt][v] = lds32(xaddr[mt] + (unsigned)(ci * 128 + 16 * v));
        const unsigned sg = sbase + (unsigned)(((gq < p.G - 1 ? gq : p.G - 1) - gA) * RB * 4);
        if (++gr == p.gchunks) gr = 0, gq++;
#pragma unroll
        for (int t = 0; t < TN; t++) {
            cp_async_wait<D - 1>(); /* this chunk has landed (this thread's copy; each lane reads only its own) */
            if (tact[t]) {
                const uint4 wv = lds128(slot);
                const uint32_t s0 = lds32(sg + t * 64), s8 = lds32(sg + t * 64 + 32);
                const uint32_t br = prmt(s0, 0x1010), sr = prmt(s0, 0x3232);
                const uint32_t br8 = prmt(s8, 0x1010), sr8 = prmt(s8, 0x3232);
                const uint32_t wd[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const uint32_t a0 = dq2s(wd[j], 0, br, sr), a1 = dq2s(wd[j], 1, br8, sr8);
                    const uint32_t a2 = dq2s(wd[j], 2, br, sr), a3 = dq2s(wd[j], 3, br8, sr8);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) mma16816(acc[t][mt], a0, a1, a2, a3, b[mt][2 * j], b[mt][2 * j + 1]);
                }
                /* the slot's old contents are in registers and consumed: refill it with chunk i + D
                 * (same tile t, since D is a multiple of TN) */
                if (left > 0) cp16s(slot, src + t * tstride);
            }
            cp_async_commit();
            roff = (roff + 512u) & (unsigned)(D * 512 - 1);
            slot = roff ? slot + 512u : slot - (unsigned)((D - 1) * 512);
            left--;
            if (t == TN - 1) src += 32;
        }
    }
    cp_async_wait<0>();

    i4_store_frags<TN, MT, int64_t>(acc, true, ntb, NT, r, q, p.M, p.N, p.KS, z, p.accumulate, p.y, p.ws);
    if (p.KS == 1) return;
    /* split K: the last block to arrive for this n-block adds the partials in split order */
    if (!splitk_last_block(p.counters + blockIdx.x, p.KS)) return;
    splitk_sum(p.ws, p.y, p.M, p.N, p.KS, p.accumulate, n0, RB, vt, NW * 32, p.counters + blockIdx.x);
}

/* ---- the bulk-copy streaming kernel (sixth pass, kind 5, M <= 16) ----
 * Why (ncu, NOTES fifth pass): k_i4_stream, k_i4_v4 and k_i4_sk (the last two since removed) all stop at
 * 1.6-1.8 TB/s with DRAM ~33 % busy: 107-130 instructions per 512-byte chunk at ~2 IPC and ~1.1 eligible
 * warps of 16, so issue per byte and latency hiding bind, not bytes alone. Here the weights never pass
 * through registers on the way in and the per-chunk work is the dequantization and little else:
 *  - each warp streams its n-tiles' K slice (TN tiles x `per` chunks, contiguous per tile in the repacked
 *    layout) through its own shared-memory ring of R stages of S chunks per tile, each stage one
 *    cp.async.bulk per tile issued by lane 0 onto the stage's mbarrier (complete_tx): NW * R * S * TN * 512
 *    bytes in flight per block at no register cost; a stage is refilled as soon as the warp has multiplied
 *    it (its data is in registers and consumed: in-order issue);
 *  - the block's activations (M rows x its K slice, BF16) are staged once into shared memory already in
 *    B-fragment order (natural word 4v + q of a chunk at 8q + v, row stride 4 banks past a multiple of 32):
 *    two LDS.128 per chunk per token tile, conflict-free; the first weight stages are issued before this;
 *  - scales as 16-byte records {bias, scale of row r, bias, scale of row r + 8} in bf16x2 form per (group,
 *    tile, r), staged once: one LDS.128 per chunk and tile, no PRMT in the loop;
 *  - full stages run an unguarded unrolled loop of S chunks; only the last stage tests each chunk;
 *  - grid (ceil(NT / (NW * TN)), KS), KS chosen by autotune for whole waves; KS > 1: partials to ws and the
 *    last block of an n-block adds them in split order (deterministic), as k_i4_stream.
 * Same dequantization (exact subtraction, one rounding of the product) and mma order along K as k_i4_stream.
 * Needs groups computable per 64-column chunk (gchunks > 0), 16-byte aligned BF16 rows. Tokens of the
 * 8-token tile beyond M read the last valid row (never stored); warps past the last n-tile only join the
 * block's barriers; a warp's second tile past NT re-reads tile NT - 1 (never stored). */
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

template <int MT, int NW, int TN, int R, int S>
__global__ void __launch_bounds__(NW * 32) k_i4_bulk(const i4b p) {
    static_assert((R & (R - 1)) == 0 && R >= 2 && S >= 1, "R a power of two");
#if I4B_SM90
    extern __shared__ __align__(128) unsigned char i4b_sm[];
    constexpr int RB = NW * TN * 16;          /* output rows of the block */
    constexpr unsigned STAGE = TN * S * 512u; /* bytes of one stage of one warp */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int n0t = (int)blockIdx.x * NW * TN; /* the block's first n-tile */
    const int z = blockIdx.y;
    const int kc0 = z * p.per < p.KC ? z * p.per : p.KC;
    const int kc1 = kc0 + p.per < p.KC ? kc0 + p.per : p.KC;
    const int nk = kc1 - kc0, nst = (nk + S - 1) / S;
    const int vt = p.M; /* M <= MT * 8 (the launcher's rule) */
    const int RSW = p.per * 32 + 4; /* activation row stride in u32 words: 4 banks past a multiple of 32 */
    const int gA0 = kc0 / p.gchunks, gA = gA0 < p.G - 1 ? gA0 : p.G - 1;
    const int gB0 = nk > 0 ? (kc1 - 1) / p.gchunks : gA0, gB = gB0 < p.G - 1 ? gB0 : p.G - 1;
    const int ng = gB - gA + 1;
    uint64_t *bars = (uint64_t *)(i4b_sm + (size_t)NW * R * STAGE);          /* [NW][R] */
    uint32_t *xs = (uint32_t *)(bars + NW * R);                               /* [vt][RSW] */
    uint4 *ss = (uint4 *)(xs + (size_t)vt * RSW);                             /* [ng][NW * TN][8] */

    const int wt0 = n0t + warp * TN; /* this warp's first n-tile */
    const bool wact = wt0 < p.NT && nk > 0;
    const unsigned ring_w = (unsigned)__cvta_generic_to_shared(i4b_sm + (size_t)warp * R * STAGE);
    const unsigned bar_w = (unsigned)__cvta_generic_to_shared(bars + warp * R);
    const uint4 *wsrc[TN]; /* tile t's chunk kc0 */
#pragma unroll
    for (int t = 0; t < TN; t++) {
        const int tile = wt0 + t < p.NT ? wt0 + t : p.NT - 1;
        wsrc[t] = p.wq + ((size_t)tile * p.KC + kc0) * 32;
    }
    /* stage st of this warp into its slot: S chunks per tile (fewer in the last), one bulk copy per tile */
    auto issue = [&](int st) {
        const int slot = st & (R - 1), c0 = st * S;
        const unsigned cnt = (unsigned)(nk - c0 < S ? nk - c0 : S), bytes = cnt * 512u;
        const unsigned bar = bar_w + 8u * slot;
        mbar_expect_tx(bar, TN * bytes);
#pragma unroll
        for (int t = 0; t < TN; t++) bulk_g2s(ring_w + slot * STAGE + t * S * 512u, wsrc[t] + (size_t)c0 * 32, bytes, bar);
    };
    if (lane == 0 && wact) {
#pragma unroll
        for (int s = 0; s < R; s++) mbar_init(bar_w + 8u * s, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#pragma unroll
        for (int s = 0; s < R; s++)
            if (s < nst) issue(s);
    }

    /* the block's activations in B-fragment order, and its scale records; every thread */
    const int xp = nk * 8; /* 16-byte pieces (8 columns) per row */
    for (int i = threadIdx.x; i < vt * xp; i += NW * 32) {
        const int tok = i / xp, c = i - tok * xp, ch = c >> 3, pc = c & 7;
        const int col = (kc0 + ch) * 64 + pc * 8;
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        if (col < p.kvalid) v = __ldg((const uint4 *)(p.x + (size_t)tok * p.ldx + col));
        uint32_t *d = xs + (size_t)tok * RSW + ch * 32 + pc; /* natural word 4pc + e -> 8e + pc */
        d[0] = v.x, d[8] = v.y, d[16] = v.z, d[24] = v.w;
    }
    for (int i = threadIdx.x; i < ng * NW * TN * 8; i += NW * 32) {
        const int g = i / (NW * TN * 8), rem = i - g * (NW * TN * 8), wt = rem >> 3, r = rem & 7;
        const int tile = n0t + wt < p.NT ? n0t + wt : p.NT - 1;
        const uint32_t *sp = p.sz + (size_t)(gA + g) * p.Np + (size_t)tile * 16 + r;
        const uint32_t s0 = __ldg(sp), s8 = __ldg(sp + 8);
        ss[i] = make_uint4(prmt(s0, 0x1010), prmt(s0, 0x3232), prmt(s8, 0x1010), prmt(s8, 0x3232));
    }
    __syncthreads();

    const int q = lane & 3, r = lane >> 2;
    float acc[TN][MT][4];
#pragma unroll
    for (int t = 0; t < TN; t++)
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[t][mt][e] = 0.0f;
    if (wact) {
        const uint4 *xb[MT]; /* this lane's fragment words of chunk 0: row (token) * RSW + 8 * (l % 4) */
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            const int row = mt * 8 + r < vt ? mt * 8 + r : vt - 1;
            xb[mt] = (const uint4 *)(xs + (size_t)row * RSW + q * 8);
        }
        const uint4 *sw = ss + warp * TN * 8 + r;
        int gq = kc0 / p.gchunks, gr = kc0 - gq * p.gchunks;
        /* chunk ci of the slice, its weights at ring address wa (tile t at + t * S * 512) */
        auto chunk = [&](int ci, unsigned wa) {
            uint32_t b[MT][8];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                const uint4 lo = xb[mt][ci * 8], hi = xb[mt][ci * 8 + 1];
                b[mt][0] = lo.x, b[mt][1] = lo.y, b[mt][2] = lo.z, b[mt][3] = lo.w;
                b[mt][4] = hi.x, b[mt][5] = hi.y, b[mt][6] = hi.z, b[mt][7] = hi.w;
            }
            const uint4 *sg = sw + ((gq < p.G - 1 ? gq : p.G - 1) - gA) * (NW * TN * 8);
            if (++gr == p.gchunks) gr = 0, gq++;
#pragma unroll
            for (int t = 0; t < TN; t++) {
                const uint4 sc = sg[t * 8];
                const uint4 wv = lds128(wa + t * S * 512u);
                const uint32_t wd[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const uint32_t a0 = dq2s(wd[j], 0, sc.x, sc.y), a1 = dq2s(wd[j], 1, sc.z, sc.w);
                    const uint32_t a2 = dq2s(wd[j], 2, sc.x, sc.y), a3 = dq2s(wd[j], 3, sc.z, sc.w);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) mma16816(acc[t][mt], a0, a1, a2, a3, b[mt][2 * j], b[mt][2 * j + 1]);
                }
            }
        };
        const unsigned lbase = ring_w + (unsigned)lane * 16u;
        for (int st = 0; st < nst; st++) {
            const int slot = st & (R - 1);
            mbar_wait(bar_w + 8u * slot, (unsigned)(st / R) & 1u);
            const unsigned sb = lbase + slot * STAGE;
            const int c0 = st * S;
            if (c0 + S <= nk) {
#pragma unroll
                for (int c = 0; c < S; c++) chunk(c0 + c, sb + c * 512u);
            } else {
                for (int c = 0; c < nk - c0; c++) chunk(c0 + c, sb + c * 512u);
            }
            __syncwarp(); /* every lane has multiplied the slot (its loads consumed): refill it */
            if (lane == 0 && st + R < nst) issue(st + R);
        }
    }

    i4_store_frags<TN, MT, int>(acc, wact, wt0, p.NT, r, q, p.M, p.N, p.KS, z, p.accumulate, p.y, p.ws);
    if (p.KS == 1) return;
    /* split K: the last block to arrive for this n-block adds the partials in split order */
    if (!splitk_last_block(p.counters + blockIdx.x, p.KS)) return;
    splitk_sum(p.ws, p.y, p.M, p.N, p.KS, p.accumulate, (int64_t)n0t * 16, RB, vt, NW * 32, p.counters + blockIdx.x);
#endif
}

/* ---- the tensor-core tile kernel (ninth pass, kind 7, 17-256 rows) ----
 * Why: above 16 rows kinds 0 and 1 ran at 70-100 TFLOP/s (sweep at 7ff43a7, gate_up: 32 rows 72.6 us against
 * 47.9 for BF16, 256 rows 445 us against 142 for unpack + cuBLASLt): each warp re-decoded its weights for
 * every 8-64 tokens, staged FP32 activations through registers, and loaded scales inside the multiply.
 * Here a block owns BN = NN * WN * 16 output rows and BM = WM * 8 tokens. Its K range (one split) streams
 * through an S-stage cp.async pipeline of 64-column chunks, each stage holding
 *   - the packed tiles of its n-tiles (NN * WN * 512 bytes, each lane's uint4 already an A fragment),
 *   - the activations, BM BF16 rows x 128 bytes, their 16-byte units XOR-swizzled by row (unit c of row r
 *     at c ^ (r & 7)) so that each 8-row ldmatrix reads 8 distinct bank groups; rows >= M and columns
 *     >= kvalid are zero-filled by the copy itself,
 *   - the scale rows of the chunk's groups: one row when the group is computable per chunk (gchunks > 0),
 *     else one per 16-column block from the upload's block groups (AWQ g32, irregular act-order).
 * Each warp decodes its WN tiles once per chunk (exact subtraction, one rounding, as every int4 kernel here)
 * and multiplies them with all BM tokens: 4 * WN * WM mma.m16n8k16 per chunk, the B fragments by
 * ldmatrix.x4 (two 16-column steps of 8 tokens each). Split K as the kernels above (deterministic: the last
 * block of an output tile adds the partials in split order). grid (token blocks, n-blocks, KS): token
 * blocks vary fastest, so blocks reading the same weights run together and share them in L2. */
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

/* A thread's share of every stage's copies, fixed for the block's life (the SASS of the first version rebuilt
 * these 64-bit addresses, and divided by gchunks, for every chunk: ~1,000 instructions per 32 mma). Pieces
 * are 16 bytes; a piece out of range (past the last n-tile, row >= M, column >= kvalid) is zero-filled by its
 * copy. Each issued chunk moves the tile sources on by 32 uint4 and the activation sources by 64 columns. */
template <int WM, int WN, int NN, int NW>
struct i4m_plan {
    static constexpr int XP = WM * 64 / (NW * 32);                     /* activation pieces per thread, NW * 4 rows apart */
    static constexpr int WP = (NN * WN * 32 + NW * 32 - 1) / (NW * 32); /* tile pieces per thread (at most), NW tiles apart */
    const uint4 *w;                                /* tile piece 0 */
    const __nv_bfloat16 *x;                        /* activation piece 0 */
    int64_t wstep, xstep;                          /* the distances between pieces, in uint4 and in elements */
    int wn, xn;                                    /* pieces in range: tiles of the block and < NT; rows < M */
    int xcol;                                      /* the pieces' column in chunk 0 of the range */
    unsigned xdst;                                 /* piece 0's swizzled offset in the stage (piece t: + t * NW * 512) */
    const uint32_t *sz;                            /* scale piece (threads < the stage's scale pieces), else NULL */
    int sj, gq, gr;                                /* its scale row (step); the group of the next chunk to issue */
};

template <int WM, int WN, int NN, int NW>
__device__ __forceinline__ void i4m_plan_init(i4m_plan<WM, WN, NN, NW> &pl, const i4m &p, int64_t kc0, int64_t nt0,
                                              int64_t m0, int vt) {
    constexpr int BN = NN * WN * 16;
    static_assert((WM * 64) % (NW * 32) == 0, "whole activation pieces per thread");
    const int64_t NT = p.Np / 16, lim64 = NT - nt0 < NN * WN ? NT - nt0 : NN * WN;
    const int lim = (int)lim64, tile = threadIdx.x >> 5, row = threadIdx.x >> 3, c = threadIdx.x & 7;
    pl.wn = tile < lim ? (lim - 1 - tile) / NW + 1 : 0;
    pl.w = p.wq + ((nt0 + tile) * p.KC + kc0) * 32 + (threadIdx.x & 31), pl.wstep = (int64_t)NW * p.KC * 32;
    pl.xn = row < vt ? (vt - 1 - row) / (NW * 4) + 1 : 0;
    pl.x = p.x + (m0 + row) * p.ldx + kc0 * 64 + c * 8, pl.xstep = (int64_t)NW * 4 * p.ldx;
    pl.xcol = (int)(kc0 * 64) + c * 8;
    pl.xdst = (unsigned)(row * 128 + ((c ^ (row & 7)) << 4)); /* (row + t * NW * 4) & 7 == row & 7 */
    const int nsp = (p.gchunks > 0 ? 1 : 4) * (BN / 4);
    const int u = threadIdx.x, pc = u % (BN / 4);
    const int64_t n = nt0 * 16 + pc * 4;
    pl.sz = u < nsp && n < p.Np ? p.sz + n : NULL; /* Np and the block's first row are multiples of 16 */
    pl.sj = u / (BN / 4);
    pl.gq = p.gchunks > 0 ? (int)(kc0 / p.gchunks) : 0, pl.gr = p.gchunks > 0 ? (int)(kc0 % p.gchunks) : 0;
}

/* the next chunk of the block's range (chunks are issued in order) into the stage at shared address st (every
 * thread; one commit by the caller); the plan's sources then move to the chunk after it */
template <bool PC, int WM, int WN, int NN, int NW>
__device__ __forceinline__ void i4m_issue(i4m_plan<WM, WN, NN, NW> &pl, const i4m &p, unsigned st, const int32_t *kgrp) {
    constexpr int TW = NN * WN * 512, TX = WM * 8 * 128, BN = NN * WN * 16;
#pragma unroll
    for (int t = 0; t < pl.WP; t++) {
        if (NN * WN * 32 % (NW * 32) != 0 && threadIdx.x + t * NW * 32 >= NN * WN * 32) break;
        const bool ok = t < pl.wn;
        cp_async16(st + (threadIdx.x + t * NW * 32) * 16, ok ? (const void *)(pl.w + t * pl.wstep) : (const void *)p.wq,
                   ok ? 16 : 0);
    }
    const bool colok = pl.xcol < p.kvalid; /* kvalid: a multiple of 8, so a piece is all in or all out */
#pragma unroll
    for (int t = 0; t < pl.XP; t++) {
        const bool ok = colok && t < pl.xn;
        cp_async16(st + TW + pl.xdst + t * NW * 512, ok ? (const void *)(pl.x + t * pl.xstep) : (const void *)p.x,
                   ok ? 16 : 0);
    }
    int g;
    if (PC) {
        g = pl.gq < p.G - 1 ? pl.gq : p.G - 1;
        if (++pl.gr == p.gchunks) pl.gr = 0, pl.gq++;
    } else
        g = pl.sz ? __ldg(kgrp + pl.sj) : 0; /* kgrp: this chunk's four block groups */
    if (pl.sz) cp_async16(st + TW + TX + (unsigned)(pl.sj * BN) * 4 + (threadIdx.x % (BN / 4)) * 16, pl.sz + (int64_t)g * p.Np, 16);
    pl.w += 32, pl.x += 64, pl.xcol += 64;
}

/* mma.m16n8k16 (BF16 in, FP32 accumulate) without `volatile`: a pure function of its operands, so the
 * compiler may interleave the decode of the next fragments with it */
__device__ __forceinline__ void mma16816f(float *d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                          uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* NN warps along N, each with WN n-tiles; KW = 1: a warp multiplies the whole chunk, KW = 2: warp w and warp
 * w + NN take its first and second 32 columns (twice the warps per SM for the same tile; their sums are added
 * in shared memory at the end, first + second). PC: the group computable per chunk (gchunks > 0; one scale
 * row a stage), else looked up per 16 columns. */
template <int WM, int WN, int NN, int KW, int S, bool PC>
__global__ void __launch_bounds__(NN * KW * 32, (WM * WN >= 16 ? 12 : 16) / (NN * KW)) k_i4_mma(const i4m p) {
    extern __shared__ __align__(128) unsigned char i4m_sm[];
    constexpr int NW = NN * KW, BN = NN * WN * 16, BM = WM * 8, TW = NN * WN * 512, TX = BM * 128;
    constexpr int ST = i4m_stage(WM, WN, NN, PC ? 1 : 4);
    static_assert(KW == 1 || KW == 2, "one or two warps per chunk");
    static_assert(KW == 1 || S * ST >= NN * 32 * WN * WM * 16, "the stages hold the second warps' sums");
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wi = warp % NN, kh = warp / NN;
    const int64_t NT = p.Np / 16;
    const int64_t m0 = (int64_t)blockIdx.x * BM, nt0 = (int64_t)blockIdx.y * (NN * WN);
    const int z = blockIdx.z;
    const int64_t kc0 = (int64_t)z * p.per < p.KC ? (int64_t)z * p.per : p.KC;
    const int64_t kc1 = kc0 + p.per < p.KC ? kc0 + p.per : p.KC;
    const int nk = (int)(kc1 - kc0);
    const int vt = (int)(p.M - m0 < BM ? p.M - m0 : BM); /* valid tokens of this block */
    const unsigned sm0 = smem_u32(i4m_sm);

    i4m_plan<WM, WN, NN, NW> pl;
    i4m_plan_init(pl, p, kc0, nt0, m0, vt);
    const int32_t *kg = p.kgrp + kc0 * 4; /* the next chunk's block groups (PC false) */
#pragma unroll
    for (int s = 0; s < S - 1; s++) {
        if (s < nk) i4m_issue<PC>(pl, p, sm0 + s * ST, kg), kg += 4;
        cp_async_commit();
    }

    float acc[WN][WM][4];
#pragma unroll
    for (int t = 0; t < WN; t++)
#pragma unroll
        for (int mt = 0; mt < WM; mt++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[t][mt][e] = 0.0f;
    const int q = lane & 3, r = lane >> 2;
    /* ldmatrix: lane l gives row l % 8 of matrix l / 8 (matrices: columns 0-7, 8-15 of step 2h, then of 2h + 1);
     * offsets in a stage, fixed for the block's life: the tiles, the scales, the B rows of each half */
    const int lr = lane & 7, lm = lane >> 3;
    const unsigned wof = (unsigned)((wi * WN * 32 + lane) * 16), sof = (unsigned)(TW + TX + (wi * WN * 16 + r) * 4);
    const unsigned xof0 = (unsigned)(TW + lr * 128 + ((lm ^ lr) << 4)), xof1 = (unsigned)(TW + lr * 128 + (((4 + lm) ^ lr) << 4));

    unsigned st = sm0, sti = sm0 + (S - 1) * ST; /* the stage multiplied and the stage issued next */
    for (int i = 0; i < nk; i++) {
        cp_async_wait<S - 2>(); /* chunk i has landed (this thread's copies) */
        __syncthreads();        /* everyone's; and stage (i - 1) % S is free */
        if (i + S - 1 < nk) i4m_issue<PC>(pl, p, sti, kg), kg += 4;
        cp_async_commit();
        sti = sti == sm0 + (S - 1) * ST ? sm0 : sti + ST;
        uint4 wv[WN];
#pragma unroll
        for (int t = 0; t < WN; t++) wv[t] = lds128(st + wof + t * 512);
        const unsigned sc = st + sof;
        uint32_t br[WN], sr[WN], br8[WN], sr8[WN];
#pragma unroll
        for (int hh = 0; hh < 2 / KW; hh++) {
            const int h = KW == 2 ? kh : hh;
            /* the B fragments of steps 2h, 2h + 1 first (their latency runs under the decode; asm volatile keeps
             * them after the barrier), then the A fragments, then the products */
            uint32_t b[WM][4];
#pragma unroll
            for (int mt = 0; mt < WM; mt++)
                ldsm_x4(st + (h ? xof1 : xof0) + mt * 1024, b[mt][0], b[mt][1], b[mt][2], b[mt][3]);
            uint32_t a[WN][2][4];
#pragma unroll
            for (int jj = 0; jj < 2; jj++) {
                const int j = 2 * h + jj;
#pragma unroll
                for (int t = 0; t < WN; t++) {
                    if ((hh == 0 && jj == 0) || !PC) {
                        const unsigned srow = sc + ((PC ? 0 : j) * BN + t * 16) * 4;
                        const uint32_t s0 = lds32(srow), s8 = lds32(srow + 32);
                        br[t] = prmt(s0, 0x1010), sr[t] = prmt(s0, 0x3232);
                        br8[t] = prmt(s8, 0x1010), sr8[t] = prmt(s8, 0x3232);
                    }
                    const uint32_t wd = j == 0 ? wv[t].x : j == 1 ? wv[t].y : j == 2 ? wv[t].z : wv[t].w;
                    a[t][jj][0] = dq2s(wd, 0, br[t], sr[t]), a[t][jj][1] = dq2s(wd, 1, br8[t], sr8[t]);
                    a[t][jj][2] = dq2s(wd, 2, br[t], sr[t]), a[t][jj][3] = dq2s(wd, 3, br8[t], sr8[t]);
                }
            }
#pragma unroll
            for (int mt = 0; mt < WM; mt++)
#pragma unroll
                for (int t = 0; t < WN; t++) {
                    mma16816f(acc[t][mt], a[t][0][0], a[t][0][1], a[t][0][2], a[t][0][3], b[mt][0], b[mt][1]);
                    mma16816f(acc[t][mt], a[t][1][0], a[t][1][1], a[t][1][2], a[t][1][3], b[mt][2], b[mt][3]);
                }
        }
        st = st == sm0 + (S - 1) * ST ? sm0 : st + ST;
    }
    cp_async_wait<0>();
    if (KW == 2) { /* the second warps' sums through the (now idle) stages: element e of lane l at e * NN * 32 + wi * 32 + l */
        float *red = (float *)i4m_sm;
        __syncthreads();
        if (kh == 1) {
#pragma unroll
            for (int t = 0; t < WN; t++)
#pragma unroll
                for (int mt = 0; mt < WM; mt++)
#pragma unroll
                    for (int e = 0; e < 4; e++) red[((t * WM + mt) * 4 + e) * NN * 32 + wi * 32 + lane] = acc[t][mt][e];
        }
        __syncthreads();
        if (kh == 0) {
#pragma unroll
            for (int t = 0; t < WN; t++)
#pragma unroll
                for (int mt = 0; mt < WM; mt++)
#pragma unroll
                    for (int e = 0; e < 4; e++) acc[t][mt][e] += red[((t * WM + mt) * 4 + e) * NN * 32 + wi * 32 + lane];
        }
    }

    if (kh == 0) {
#pragma unroll
        for (int t = 0; t < WN; t++) {
            const int64_t nt = nt0 + wi * WN + t;
            if (nt >= NT) continue;
            /* four token tiles at a time, their y loaded before any store when accumulating (see splitk_sum) */
#pragma unroll
            for (int g = 0; g < WM; g += 4) {
                float v[4][4];
#pragma unroll
                for (int mt = g; mt < g + 4 && mt < WM; mt++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int64_t n = nt * 16 + r + ((e & 2) ? 8 : 0);
                        const int64_t m = m0 + mt * 8 + q * 2 + (e & 1);
                        v[mt - g][e] = acc[t][mt][e];
                        if (n < p.N && m < p.M && p.KS == 1 && p.accumulate) v[mt - g][e] = p.y[m * p.N + n] + v[mt - g][e];
                    }
#pragma unroll
                for (int mt = g; mt < g + 4 && mt < WM; mt++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int64_t n = nt * 16 + r + ((e & 2) ? 8 : 0);
                        const int64_t m = m0 + mt * 8 + q * 2 + (e & 1);
                        if (n >= p.N || m >= p.M) continue;
                        if (p.KS == 1)
                            p.y[m * p.N + n] = v[mt - g][e];
                        else
                            p.ws[((int64_t)z * p.M + m) * p.N + n] = acc[t][mt][e];
                    }
            }
        }
    }
    if (p.KS == 1) return;
    /* split K: the last block to arrive for this output tile adds the partials in split order */
    const int64_t tile = (int64_t)blockIdx.y * gridDim.x + blockIdx.x;
    if (!splitk_last_block(p.counters + tile, p.KS)) return;
    splitk_sum(p.ws + m0 * p.N, p.y + m0 * p.N, p.M, p.N, p.KS, p.accumulate, nt0 * 16, BN, vt, NW * 32,
               p.counters + tile);
}

/* ---- the wgmma kernel (tenth pass, kind 8, 17-256 rows; compute capability 9.0, sm_90a code) ----
 * Why: kind 7 multiplies with mma.sync, each warp reading every token's B fragments from shared memory by
 * ldmatrix, with the decode in the same dependent chain; at 64-256 rows it reached 220-245 TFLOP/s (ninth
 * session's ncu: math-pipe throttle and fixed-latency waits) where cuBLASLt's BF16 runs wgmma, so int4 was slower
 * than BF16 from 64 rows. Here the multiply runs on wgmma, with the weights as its A and the tokens as its N:
 *   - a warpgroup owns 64 output rows, its warp w the n-tile nt0 + 4 wg + w; the warp decodes its packed tile
 *     (each lane's words are the A fragments of mma.m16n8k16, as the upload repacked them; exact subtraction, one
 *     BF16 rounding, as every int4 kernel here);
 *   - B is the stage's activation rows, BT = 32..256 tokens x 128 bytes (64 columns) in wgmma's 128-byte swizzle
 *     (16-byte unit c of row r at c ^ (r & 7)), which the TMA copy writes; one wgmma m64nBTk16 per 16 columns, four
 *     a chunk;
 *   - NWG warpgroups share a block's activation stages (BN = 64 NWG rows a block).
 * Pipeline: one producer thread fills S stages by TMA (the activation box; the packed tiles and scale rows by bulk
 * copies), each stage's full mbarrier completing with its bytes, and refills a stage when the consumers' empty
 * mbarrier says its products are done. Two consumer forms:
 *   - SS (RS false): the warp writes its fragments with stmatrix into the warpgroup's A buffer (64 rows x 128 bytes,
 *     the same swizzle, double-buffered), then a proxy fence (generic-proxy stores before wgmma's async-proxy
 *     reads) and a warpgroup barrier; step i issues chunk i's wgmma and waits for chunk i - 1's, so the decode of
 *     chunk i + 1 runs under chunk i's products;
 *   - RS: the fragments feed wgmma from registers; ptxas serialises every wgmma of a loop that writes registers
 *     an in-flight wgmma reads (C7513), so each chunk's products are waited for before the next decode, and the
 *     small stages (no A buffer) let 2-3 blocks share a multiprocessor and fill each other's gaps. The faster on
 *     the H200 (tenth session, call 6: gate_up 128 rows 62.6 us against the SS form's 95.3), and the default.
 * Measured on the H200 before the TMA producer (calls 1-3): with every thread copying by cp.async, each step's
 * proxy fence waited for the thread's copies still in flight, ~1 us a chunk at every shape; with one producer warp
 * of cp.async it issued ~350 instructions a chunk and the consumers waited for it (ncu: 18 % of their samples on the
 * full barrier, 21 % at the warpgroup barrier behind them). Split K deterministic as kind 7. The sm_80 build
 * compiles the body out; the host lists kind 8 only on devices of capability 9.0 (the build's sm_90a code). */
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define I4G_ON 1
#endif

/* Where kind 8's A operand comes from (the template's RS): a shared-memory buffer written by stmatrix (SS), or
 * registers, each chunk's products waited for before the next decode (RS). The eleventh session measured two more
 * forms on the H200 and removed them, slower at every shape: RS with two register sets, the next chunk decoded while
 * one runs; and a persistent stream-K grid (bench/NOTES.md "Eleventh session"). */

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

#ifdef I4G_ON
/* D (64 x BT, FP32) += A (64 x 16, K-major in shared memory) . B (16 x BT tokens, K-major in shared memory) */
template <int BT> __device__ __forceinline__ void i4g_mma(float (&d)[BT / 2], uint64_t da, uint64_t db) {
    if constexpr (BT == 32)
        asm volatile("wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {" WG_R0 "}, %16, %17, 1, 1, 1, 0, 0;\n"
                     : WG_OUT16(d, 0)
                     : "l"(da), "l"(db)
                     : "memory");
    else if constexpr (BT == 64)
        asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WG_REGS32 ", %32, %33, 1, 1, 1, 0, 0;\n"
                     : WG_OUT32(d)
                     : "l"(da), "l"(db)
                     : "memory");
    else if constexpr (BT == 96)
        asm volatile("wgmma.mma_async.sync.aligned.m64n96k16.f32.bf16.bf16 {" WG_R0 "," WG_R16 "," WG_R32 "}, %48, %49, 1, "
                     "1, 1, 0, 0;\n"
                     : WG_OUT32(d), WG_OUT16(d, 32)
                     : "l"(da), "l"(db)
                     : "memory");
    else if constexpr (BT == 112)
        asm volatile("wgmma.mma_async.sync.aligned.m64n112k16.f32.bf16.bf16 {" WG_R0 "," WG_R16 "," WG_R32 "," WG_R48_8
                     "}, %56, %57, 1, 1, 1, 0, 0;\n"
                     : WG_OUT32(d), WG_OUT16(d, 32), WG_OUT4(d, 48), WG_OUT4(d, 52)
                     : "l"(da), "l"(db)
                     : "memory");
    else if constexpr (BT == 128)
        asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " WG_REGS64 ", %64, %65, 1, 1, 1, 0, 0;\n"
                     : WG_OUT64(d)
                     : "l"(da), "l"(db)
                     : "memory");
    else
        asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " WG_REGS128
                     ", %128, %129, 1, 1, 1, 0, 0;\n"
                     : WG_OUT128(d)
                     : "l"(da), "l"(db)
                     : "memory");
}
__device__ __forceinline__ void stsm_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1),
                 "r"(r2), "r"(r3)
                 : "memory");
}
/* D (64 x BT, FP32) += A (64 x 16, BF16 fragments in registers: a warp's 16 rows as mma.m16n8k16's A) . B (16 x BT
 * tokens, K-major in shared memory) */
template <int BT>
__device__ __forceinline__ void i4g_mma_rs(float (&d)[BT / 2], const uint32_t (&a)[4], uint64_t db) {
    if constexpr (BT == 32)
        asm volatile("wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {" WG_R0 "}, {%16, %17, %18, %19}, %20, 1, 1, 1, 0;\n"
                     : WG_OUT16(d, 0)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db)
                     : "memory");
    else if constexpr (BT == 64)
        asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WG_REGS32 ", {%32, %33, %34, %35}, %36, 1, 1, 1, 0;\n"
                     : WG_OUT32(d)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db)
                     : "memory");
    else if constexpr (BT == 96)
        asm volatile("wgmma.mma_async.sync.aligned.m64n96k16.f32.bf16.bf16 {" WG_R0 "," WG_R16 "," WG_R32
                     "}, {%48, %49, %50, %51}, %52, 1, 1, 1, 0;\n"
                     : WG_OUT32(d), WG_OUT16(d, 32)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db)
                     : "memory");
    else if constexpr (BT == 112)
        asm volatile("wgmma.mma_async.sync.aligned.m64n112k16.f32.bf16.bf16 {" WG_R0 "," WG_R16 "," WG_R32 "," WG_R48_8
                     "}, {%56, %57, %58, %59}, %60, 1, 1, 1, 0;\n"
                     : WG_OUT32(d), WG_OUT16(d, 32), WG_OUT4(d, 48), WG_OUT4(d, 52)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db)
                     : "memory");
    else if constexpr (BT == 128)
        asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " WG_REGS64 ", {%64, %65, %66, %67}, %68, 1, 1, 1, 0;\n"
                     : WG_OUT64(d)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db)
                     : "memory");
    else
        asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " WG_REGS128
                     ", {%128, %129, %130, %131}, %132, 1, 1, 1, 0;\n"
                     : WG_OUT128(d)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db)
                     : "memory");
}
#endif

/* a consumer warp's A fragments of one chunk, from its packed tile's 16 bytes at w and its scale rows at s (this lane's
 * rows r, r + 8 of the n-tile; one row, or four when the group is looked up per 16 columns: BN entries apart): a[j] are
 * 16-column step j's four registers in mma.m16n8k16's A layout (exact subtraction, one rounding) */
#ifdef I4G_ON
template <int BN, bool PC> __device__ __forceinline__ void i4g_decode(uint32_t w, uint32_t s, uint32_t (&a)[4][4]) {
    const uint4 wv = lds128(w);
    uint32_t br = 0, sr = 0, br8 = 0, sr8 = 0;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        if (j == 0 || !PC) {
            const uint32_t srow = s + (uint32_t)((PC ? 0 : j) * BN) * 4;
            const uint32_t s0 = lds32(srow), s8 = lds32(srow + 32);
            br = prmt(s0, 0x1010), sr = prmt(s0, 0x3232), br8 = prmt(s8, 0x1010), sr8 = prmt(s8, 0x3232);
        }
        const uint32_t wd = j == 0 ? wv.x : j == 1 ? wv.y : j == 2 ? wv.z : wv.w;
        a[j][0] = dq2s(wd, 0, br, sr), a[j][1] = dq2s(wd, 1, br8, sr8);
        a[j][2] = dq2s(wd, 2, br, sr), a[j][3] = dq2s(wd, 3, br8, sr8);
    }
}
#endif

/* a consumer warp's accumulators (wgmma's D layout: element e of 8-token block j is row 16 w + lane / 4 + 8 (e >> 1) of
 * the warpgroup's 64, i.e. row lane / 4 + 8 (e >> 1) of the warp's n-tile nt, token mx + 8 j + 2 (lane % 4) + (e & 1))
 * into y (KS 1: stored, or added when accumulating) or split z's partials; only tokens m0 <= m < M (the block's own:
 * its box may start before m0, see k_i4_wg), nothing past N or the last n-tile */
#ifdef I4G_ON
template <int BT>
__device__ __forceinline__ void i4g_store(const i4m &p, const float (&acc)[BT / 2], int64_t nt, int64_t mx, int64_t m0,
                                          int z, int lane) {
    if (nt >= p.Np / 16) return;
    const int r = lane >> 2, t4 = lane & 3;
    /* four 8-token blocks at a time, their y loaded before any store when accumulating (see splitk_sum) */
#pragma unroll
    for (int g = 0; g < BT / 8; g += 4) {
        float v[4][4];
#pragma unroll
        for (int j = g; j < g + 4 && j < BT / 8; j++) /* BT 112: the last group holds two 8-token blocks */
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int64_t n = nt * 16 + r + ((e & 2) ? 8 : 0);
                const int64_t m = mx + j * 8 + t4 * 2 + (e & 1);
                v[j - g][e] = acc[4 * j + e];
                if (n < p.N && m >= m0 && m < p.M && p.KS == 1 && p.accumulate) v[j - g][e] = p.y[m * p.N + n] + v[j - g][e];
            }
#pragma unroll
        for (int j = g; j < g + 4 && j < BT / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int64_t n = nt * 16 + r + ((e & 2) ? 8 : 0);
                const int64_t m = mx + j * 8 + t4 * 2 + (e & 1);
                if (n >= p.N || m < m0 || m >= p.M) continue;
                if (p.KS == 1)
                    p.y[m * p.N + n] = v[j - g][e];
                else
                    p.ws[((int64_t)z * p.M + m) * p.N + n] = acc[4 * j + e];
            }
    }
}
#endif

/* BT tokens, NWG consumer warpgroups (64 output rows each) and one producer warp, S stages; PC: the group
 * computable per chunk (one scale row a stage), else looked up per 16 columns (four); RS: A in registers (below),
 * else through shared memory (SS) */
template <int BT, int NWG, int S, bool PC, bool RS>
__global__ void __launch_bounds__(NWG * 128 + 32, 1) k_i4_wg(const i4m p, const __grid_constant__ CUtensorMap xm) {
#ifdef I4G_ON
    constexpr int NC = NWG * 128, BN = NWG * 64, XB = BT * 128, WB = NWG * 2048;
    constexpr int ST = i4g_stage(BT, NWG, PC ? 1 : 4), WP = NWG * 4;
    static_assert(S >= 2, "stages");
    extern __shared__ __align__(1024) unsigned char i4g_sm[];
    const uint32_t sm0 = (smem_u32(i4g_sm) + 1023u) & ~1023u;
    const uint32_t full0 = sm0 + S * ST + (RS ? 0 : NWG * 16384), empty0 = full0 + S * 8; /* mbarriers: + 8 s */
    const int tid = threadIdx.x, lane = tid & 31, wi = tid >> 5, wg = wi >> 2;
    const int64_t NT = p.Np / 16, m0 = (int64_t)blockIdx.x * BT, nt0 = (int64_t)blockIdx.y * (NWG * 4);
    /* the activation box's first row: the last token block of M > BT rows starts at M - BT, so the box never reaches
     * past M (the copy engine's zero fill of rows past the tensor was slow on the H200: gate_up at 144 rows in two
     * 128-token blocks took 158 us, at 256 rows 113; twelfth session, call 6); the rows it shares with the block
     * before are multiplied again and not stored. Each token's products are the same whichever column carries it. */
    const int64_t mx = p.M > BT && m0 + BT > p.M ? p.M - BT : m0;
    const int z = blockIdx.z;
    const int64_t kc0 = (int64_t)z * p.per < p.KC ? (int64_t)z * p.per : p.KC;
    const int64_t kc1 = kc0 + p.per < p.KC ? kc0 + p.per : p.KC;
    const int nk = (int)(kc1 - kc0);
    const int vt = (int)(p.M - m0 < BT ? p.M - m0 : BT);
    if (tid == 0)
        for (int s = 0; s < S; s++) mbar_init(full0 + 8 * s, 1), mbar_init(empty0 + 8 * s, NWG * 4);
    __syncthreads();

    float acc[BT / 2];
#pragma unroll
    for (int i = 0; i < BT / 2; i++) acc[i] = 0.0f;
    if (wi == NWG * 4) {
        /* the producer (one thread): chunk i into stage i % S once the consumers have released chunk i - S, all by
         * TMA onto the stage's full mbarrier: the activation box (BT rows x 64 columns, swizzled by the copy; rows
         * >= M and columns >= kvalid zero), the block's packed tiles (512 bytes each) and its scale rows */
        if (lane == 0) {
            const int nwt = NT - nt0 < WP ? (int)(NT - nt0) : WP; /* tiles of the block that exist */
            const uint32_t sbytes = (uint32_t)(p.Np - nt0 * 16 < BN ? p.Np - nt0 * 16 : BN) * 4;
            const uint32_t tx = (uint32_t)XB + (uint32_t)nwt * 512 + (PC ? 1 : 4) * sbytes;
            int gq = p.gchunks > 0 ? (int)(kc0 / p.gchunks) : 0, gr = p.gchunks > 0 ? (int)(kc0 % p.gchunks) : 0;
            const int32_t *kg = p.kgrp + kc0 * 4;
            for (int i = 0; i < nk; i++) {
                const int s = i % S;
                if (i >= S) mbar_wait(empty0 + 8 * s, (unsigned)((i / S - 1) & 1));
                const uint32_t st = sm0 + s * ST, bar = full0 + 8 * s;
                const int64_t kc = kc0 + i;
                mbar_expect_tx(bar, tx);
                tma_load_2d(st, &xm, bar, (int)(kc * 64), (int)mx);
                for (int t = 0; t < nwt; t++) bulk_g2s(st + XB + t * 512, p.wq + ((nt0 + t) * p.KC + kc) * 32, 512, bar);
                if (PC) {
                    const int g = gq < p.G - 1 ? gq : p.G - 1;
                    bulk_g2s(st + XB + WB, p.sz + (int64_t)g * p.Np + nt0 * 16, sbytes, bar);
                    if (++gr == p.gchunks) gr = 0, gq++;
                } else {
#pragma unroll
                    for (int j = 0; j < 4; j++)
                        bulk_g2s(st + XB + WB + (uint32_t)(j * BN) * 4, p.sz + (int64_t)__ldg(kg + j) * p.Np + nt0 * 16,
                                 sbytes, bar);
                    kg += 4;
                }
            }
        }
    } else if (RS) {
        /* A in registers (wgmma's RS form): each warp's decoded fragments feed the warpgroup's wgmma directly, with
         * no A buffer, proxy fence or warpgroup barrier; the products are waited for before the next decode writes
         * those registers (ptxas serialises wgmma otherwise, C7513), so a block's decode and products alternate and
         * other blocks on the multiprocessor fill the gaps (the stages are small: 2-4 blocks a multiprocessor) */
        const int r = lane >> 2;
        const uint32_t wof = XB + tid * 16, sof = XB + WB + (uint32_t)(wi * 16 + r) * 4;
        const uint64_t xd0 = wg_desc_k128(sm0);
        for (int i = 0; i < nk; i++) {
            const int s = i % S;
            const uint32_t st = sm0 + s * ST;
            mbar_wait(full0 + 8 * s, (unsigned)((i / S) & 1)); /* chunk i has landed */
            uint32_t a[4][4];
            i4g_decode<BN, PC>(st + wof, st + sof, a);
            const uint64_t xd = xd0 + (uint64_t)((s * ST) >> 4);
            wg_fence();
#pragma unroll
            for (int j = 0; j < 4; j++) i4g_mma_rs<BT>(acc, a[j], xd + 2 * j);
            wg_commit();
            wg_wait<0>(); /* chunk i's products are done: its A registers, and its stage for the producer */
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) reg_fence(a[j][e]);
            if (lane == 0) mbar_arrive(empty0 + 8 * s);
        }
        reg_fence<BT / 2>(acc);
        i4g_store<BT>(p, acc, nt0 + wi, mx, m0, z, lane);
    } else {
        const int r = lane >> 2;
        const uint32_t wof = XB + tid * 16, sof = XB + WB + (uint32_t)(wi * 16 + r) * 4;
        /* A buffers: warpgroup wg's at ab0 (+ 8 KB for odd chunks); stmatrix: lane l gives row l % 8 of matrix l / 8
         * (a0: rows 0-7 of the fragment's first 8 columns, a1: rows 8-15, a2 / a3: the next 8 columns) */
        const uint32_t ab0 = sm0 + S * ST + (uint32_t)wg * 16384;
        const int mrow = (wi & 3) * 16 + (lane & 7) + 8 * ((lane >> 3) & 1), mcol = lane >> 4;
        const uint32_t aof = (uint32_t)mrow * 128;
        const uint64_t xd0 = wg_desc_k128(sm0), ad0 = wg_desc_k128(ab0);
        for (int i = 0; i < nk; i++) {
            const int s = i % S;
            const uint32_t st = sm0 + s * ST, ab = ab0 + (uint32_t)(i & 1) * 8192;
            mbar_wait(full0 + 8 * s, (unsigned)((i / S) & 1)); /* chunk i has landed */
            uint32_t a[4][4];
            i4g_decode<BN, PC>(st + wof, st + sof, a);
#pragma unroll
            for (int j = 0; j < 4; j++)
                stsm_x4(ab + aof + (uint32_t)(((2 * j + mcol) ^ (lane & 7)) << 4), a[j][0], a[j][1], a[j][2], a[j][3]);
            fence_proxy_async(); /* the A rows (written through the generic proxy), visible to wgmma */
            asm volatile("bar.sync %0, 128;" ::"r"(1 + wg) : "memory"); /* the warpgroup's four warps' A rows */
            const uint64_t xd = xd0 + (uint64_t)((s * ST) >> 4), ad = ad0 + (uint64_t)(((i & 1) * 8192) >> 4);
            wg_fence();
#pragma unroll
            for (int j = 0; j < 4; j++) i4g_mma<BT>(acc, ad + 2 * j, xd + 2 * j);
            wg_commit();
            wg_wait<1>(); /* chunk i - 1's products are done: its A buffer, and its stage for the producer */
            if (i > 0 && lane == 0) mbar_arrive(empty0 + 8 * ((i - 1) % S));
        }
        wg_wait<0>();
        reg_fence<BT / 2>(acc);
        i4g_store<BT>(p, acc, nt0 + wi, mx, m0, z, lane);
    }
    if (p.KS == 1) return;
    const int64_t tile = (int64_t)blockIdx.y * gridDim.x + blockIdx.x;
    if (!splitk_last_block(p.counters + tile, p.KS)) return;
    splitk_sum(p.ws + m0 * p.N, p.y + m0 * p.N, p.M, p.N, p.KS, p.accumulate, nt0 * 16, BN, vt, NC + 32,
               p.counters + tile);
#endif
}

/* bf16 x [M, K] -> bf16 [M, Kp] (permuted, zero padded): act-order or unaligned input for the
 * streaming kernel, and the unpack path's rows when the caller gives BF16 */
__global__ void k_i4_gather_bf16(const __nv_bfloat16 *__restrict__ x, int64_t M, int64_t K,
                                 const int32_t *__restrict__ perm, int64_t Kp, __nv_bfloat16 *__restrict__ out) {
    int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= M * Kp) return;
    int64_t t = id / Kp, kp = id % Kp;
    int64_t k = perm ? perm[kp] : (kp < K ? kp : -1);
    out[id] = k >= 0 ? x[t * K + k] : __float2bfloat16_rn(0.0f);
}

/* bf16 -> FP32 (exact), for the previous fused kernels when the caller gives BF16 */
__global__ void k_i4_widen(const __nv_bfloat16 *__restrict__ x, int64_t n, float *__restrict__ out) {
    int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id < n) out[id] = __bfloat162float(x[id]);
}

/* unpack tiles -> bf16 W [N, Kp] (permuted column order), per-column groups colgrp[Kp] (non-decreasing).
 * Second pass: one warp per 16 x 64 tile, read once (512 B, coalesced) into shared memory; each lane
 * then writes four 16-byte runs of 8 columns, 8 lanes covering one row's 128 bytes (sweep 1's
 * version wrote 4-byte pieces scattered over 16 rows and ran at ~0.4 TB/s). */
__global__ void __launch_bounds__(256) k_i4_unpack16(const uint4 *__restrict__ wq, const uint32_t *__restrict__ sz,
                                                     const int32_t *__restrict__ colgrp, int64_t N, int64_t Np,
                                                     int64_t KC, __nv_bfloat16 *__restrict__ W) {
    __shared__ uint4 tile[8][32];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t tid = (int64_t)blockIdx.x * 8 + warp, NT = Np / 16, Kp = KC * 64;
    if (tid >= NT * KC) return; /* whole warps leave: no block-wide barrier below */
    tile[warp][lane] = __ldg(wq + tid * 32 + lane);
    __syncwarp();
    const uint32_t *tw = (const uint32_t *)tile[warp];
    const int64_t nt = tid / KC, kc = tid % KC;
#pragma unroll
    for (int pq = 0; pq < 4; pq++) {
        const int item = lane + 32 * pq, rr = item >> 3, cb = item & 7;
        const int64_t n = nt * 16 + rr;
        if (n >= N) continue;
        const int j = cb >> 1, cc0 = (cb & 1) * 8;
        const int64_t k = kc * 64 + j * 16 + cc0;
        const int ilo = (rr >= 8 ? 1 : 0) | (cc0 ? 2 : 0); /* nibble of the even column; +4 the odd one */
        const int g0 = colgrp[k], g7 = colgrp[k + 7];
        uint32_t o[4];
        uint32_t b2 = 0, s2 = 0;
        if (g0 == g7) {
            const uint32_t s = __ldg(sz + (int64_t)g0 * Np + n);
            b2 = prmt(s, 0x1010), s2 = prmt(s, 0x3232);
        }
#pragma unroll
        for (int pp = 0; pp < 4; pp++) { /* columns k + 2pp, k + 2pp + 1 come from lane (rr % 8) * 4 + pp */
            if (g0 != g7) {
                const uint32_t sa = __ldg(sz + (int64_t)colgrp[k + 2 * pp] * Np + n);
                const uint32_t sb = __ldg(sz + (int64_t)colgrp[k + 2 * pp + 1] * Np + n);
                b2 = (sa & 0xFFFFu) | (sb << 16), s2 = (sa >> 16) | (sb & 0xFFFF0000u);
            }
            const uint32_t wd = tw[((rr & 7) * 4 + pp) * 4 + j];
            const uint32_t t = ((wd >> (4 * ilo)) & 0x000F000Fu) | 0x43004300u;
            __nv_bfloat162 r2 = __hmul2(__hsub2(*(const __nv_bfloat162 *)&t, *(const __nv_bfloat162 *)&b2),
                                        *(const __nv_bfloat162 *)&s2);
            o[pp] = *(uint32_t *)&r2;
        }
        *(uint4 *)(W + n * Kp + k) = make_uint4(o[0], o[1], o[2], o[3]);
    }
}

/* ---- configurations ----
 * kind 0: k_i4_fused (staged fragments, warps split K inside a block), w warps;
 * kind 1: k_i4_shared (activations shared in shared memory, one n-tile per warp), w = NW warps;
 * kind 2: k_i4_stream; kind 5: k_i4_bulk (3 and 4 were the removed fourth and fifth passes; 6 the removed seventh
 * pass's persistent configurations); kind 7: k_i4_mma (mt = WM, w = NN warps along N, u = WN, d = its I4M_TAB entry). */

typedef struct i4_cfg {
    int kind, mt, w, ks, u; /* u: kind 1's chunks per register group; kinds 2 and 5: n-tiles per warp (TN) */
    int d;                  /* kind 2: ring slots per warp; kind 5: the entry of I4B_TAB */
} i4_cfg;

typedef void (*i4_kern)(const uint4 *, const uint32_t *, const int4 *, const uint4 *, int64_t, int64_t, int64_t,
                        int64_t, int64_t, int, float *, int, float *, unsigned *);
typedef void (*i4s_kern)(const i4p);

static i4_kern i4_kernel_for(int mt, int w) {
    static const struct {
        int mt, w;
        i4_kern k;
    } tab[] = {
        {1, 4, k_i4_fused<1, 4>}, {1, 8, k_i4_fused<1, 8>}, {2, 4, k_i4_fused<2, 4>}, {2, 8, k_i4_fused<2, 8>},
        {4, 4, k_i4_fused<4, 4>}, {4, 8, k_i4_fused<4, 8>}, {8, 4, k_i4_fused<8, 4>}, {8, 8, k_i4_fused<8, 8>},
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (tab[i].mt == mt && tab[i].w == w) return tab[i].k;
    return NULL;
}

/* shared-activation kernels: S chunks per stage keep shared memory at MT * S KB <= 32 KB;
 * U chunks per register group (8 while the accumulators are few) */
static const struct {
    int mt, nw, u;
    i4s_kern k;
} I4S_TAB[] = {
    {1, 4, 8, k_i4_shared<1, 4, 16, 8, 1>}, {1, 8, 8, k_i4_shared<1, 8, 16, 8, 1>},
    {2, 4, 8, k_i4_shared<2, 4, 16, 8, 1>}, {2, 8, 8, k_i4_shared<2, 8, 16, 8, 1>},
    {1, 4, 4, k_i4_shared<1, 4, 16, 4, 4>}, {1, 8, 4, k_i4_shared<1, 8, 16, 4, 2>},
    {2, 4, 4, k_i4_shared<2, 4, 16, 4, 4>}, {2, 8, 4, k_i4_shared<2, 8, 16, 4, 2>},
    {4, 4, 4, k_i4_shared<4, 4, 8, 4, 4>},  {4, 8, 4, k_i4_shared<4, 8, 8, 4, 2>},
    {8, 4, 4, k_i4_shared<8, 4, 4, 4, 1>},  {8, 8, 4, k_i4_shared<8, 8, 4, 4, 1>},
};
/* kind 2, the streaming kernel (M <= 16): MT token tiles, NW warps, TN n-tiles per warp, D ring slots */
typedef void (*i4t_kern)(const i4t);
static const struct {
    int mt, nw, tn, d;
    i4t_kern k;
} I4T_TAB[] = {
    {1, 4, 1, 16, k_i4_stream<1, 4, 1, 16>}, {1, 8, 1, 8, k_i4_stream<1, 8, 1, 8>}, {1, 4, 2, 16, k_i4_stream<1, 4, 2, 16>},
    {1, 8, 2, 8, k_i4_stream<1, 8, 2, 8>},   {1, 4, 1, 32, k_i4_stream<1, 4, 1, 32>},
    {2, 4, 1, 16, k_i4_stream<2, 4, 1, 16>}, {2, 8, 1, 8, k_i4_stream<2, 8, 1, 8>}, {2, 4, 2, 16, k_i4_stream<2, 4, 2, 16>},
    {2, 8, 2, 8, k_i4_stream<2, 8, 2, 8>},   {2, 4, 1, 32, k_i4_stream<2, 4, 1, 32>},
};
#define I4T_N ((int)(sizeof I4T_TAB / sizeof I4T_TAB[0]))
static int i4t_index(int mt, int nw, int tn, int d) { /* the entry of I4T_TAB, or -1 */
    for (int i = 0; i < I4T_N; i++)
        if (I4T_TAB[i].mt == mt && I4T_TAB[i].nw == nw && I4T_TAB[i].tn == tn && I4T_TAB[i].d == d) return i;
    return -1;
}
static unsigned g_i4t_attr[I4T_N];
static int g_i4t_static[I4T_N];

#define I4_MAX_DEV 16
/* the slot of this device in the per-device "done" bitmasks and tables (devices past I4_MAX_DEV share 0) */
static inline int i4_dev_slot(const cuda_ctx *c) { return c->device >= 0 && c->device < I4_MAX_DEV ? c->device : 0; }
static int g_i4_optin[I4_MAX_DEV], g_i4_smsm[I4_MAX_DEV];
/* the device's opt-in shared memory per block and shared memory per multiprocessor (read once per device) */
static void i4_dev_limits(cuda_ctx *c, int *optin, int *smsm) {
    const int d = i4_dev_slot(c);
    if (!g_i4_optin[d]) {
        int a = 0, b = 0;
        if (cudaDeviceGetAttribute(&a, cudaDevAttrMaxSharedMemoryPerBlockOptin, c->device) != cudaSuccess || a <= 0)
            a = 48 * 1024, cudaGetLastError();
        if (cudaDeviceGetAttribute(&b, cudaDevAttrMaxSharedMemoryPerMultiprocessor, c->device) != cudaSuccess || b <= 0)
            b = a, cudaGetLastError();
        g_i4_smsm[d] = b, g_i4_optin[d] = a;
    }
    *optin = g_i4_optin[d], *smsm = g_i4_smsm[d];
}

static i4s_kern i4s_kernel_for(int mt, int nw, int u) {
    for (size_t i = 0; i < sizeof I4S_TAB / sizeof I4S_TAB[0]; i++)
        if (I4S_TAB[i].mt == mt && I4S_TAB[i].nw == nw && I4S_TAB[i].u == u) return I4S_TAB[i].k;
    return NULL;
}

/* kind 5, the bulk-copy streaming kernel (M <= 16): MT token tiles, NW warps, TN n-tiles per warp, R ring
 * stages of S chunks per tile (ring per block: NW * R * S * TN * 512 bytes: 32 or 64 KB) */
typedef void (*i4b_kern)(const i4b);
static const struct {
    int mt, nw, tn, r, s;
    i4b_kern k;
} I4B_TAB[] = {
    {1, 8, 1, 4, 4, k_i4_bulk<1, 8, 1, 4, 4>}, {1, 4, 1, 4, 4, k_i4_bulk<1, 4, 1, 4, 4>},
    {1, 8, 1, 4, 2, k_i4_bulk<1, 8, 1, 4, 2>}, {1, 4, 2, 4, 2, k_i4_bulk<1, 4, 2, 4, 2>},
    {2, 8, 1, 4, 4, k_i4_bulk<2, 8, 1, 4, 4>}, {2, 4, 1, 4, 4, k_i4_bulk<2, 4, 1, 4, 4>},
    {2, 8, 1, 4, 2, k_i4_bulk<2, 8, 1, 4, 2>}, {2, 4, 2, 4, 2, k_i4_bulk<2, 4, 2, 4, 2>},
};
#define I4B_N ((int)(sizeof I4B_TAB / sizeof I4B_TAB[0]))
static int g_i4b_regs[I4B_N], g_i4b_static[I4B_N];
static unsigned g_i4b_attr[I4B_N];
static void i4b_attrs(int ti) { /* registers and static shared memory (read once) */
    if (!g_i4b_regs[ti]) {
        cudaFuncAttributes fa;
        const int ok = cudaFuncGetAttributes(&fa, I4B_TAB[ti].k) == cudaSuccess;
        cudaGetLastError();
        g_i4b_static[ti] = ok ? (int)fa.sharedSizeBytes : 1024;
        g_i4b_regs[ti] = ok && fa.numRegs > 0 ? fa.numRegs : 128;
    }
}
static size_t i4b_maxdyn(cuda_ctx *c, int ti) { /* the opt-in limit less the static shared memory */
    int optin, smsm;
    i4_dev_limits(c, &optin, &smsm);
    i4b_attrs(ti);
    return optin > g_i4b_static[ti] ? (size_t)(optin - g_i4b_static[ti]) : 0;
}
static int i4b_occupancy(cuda_ctx *c, int ti, size_t smem) { /* resident blocks per SM at smem bytes */
    i4b_attrs(ti);
    int optin, smsm;
    i4_dev_limits(c, &optin, &smsm);
    const int nw = I4B_TAB[ti].nw, wregs = (g_i4b_regs[ti] * 32 + 255) / 256 * 256;
    int occ = 65536 / (wregs * nw);
    const int by_smem = (int)((size_t)smsm / (smem + (size_t)g_i4b_static[ti] + 1024));
    if (by_smem < occ) occ = by_smem;
    if (64 / nw < occ) occ = 64 / nw;
    return occ < 1 ? 1 : occ;
}
/* kind 7, the tensor-core tile kernel (17-256 rows): WM token tiles of 8, WN n-tiles per warp, NW warps, S
 * pipeline stages (shared memory S * i4m_stage: 34-100 KB) */
typedef void (*i4m_kern)(const i4m);
typedef void (*i4g_kern)(const i4m, const CUtensorMap);
#define I4M_K(wm, wn, nn, kw, s) wm, wn, nn, kw, s, {k_i4_mma<wm, wn, nn, kw, s, false>, k_i4_mma<wm, wn, nn, kw, s, true>}
static const struct {
    int wm, wn, nn, kw, s; /* NN warps along N, KW per chunk: NN * KW warps */
    i4m_kern k[2];         /* [gchunks > 0] */
} I4M_TAB[] = {
    {I4M_K(4, 1, 4, 1, 8)}, {I4M_K(4, 2, 4, 1, 8)}, {I4M_K(4, 2, 4, 1, 4)}, {I4M_K(8, 1, 4, 1, 6)},
    {I4M_K(8, 2, 4, 1, 6)}, {I4M_K(8, 2, 4, 1, 4)}, {I4M_K(16, 1, 4, 1, 4)}, {I4M_K(4, 1, 4, 2, 8)},
    {I4M_K(8, 1, 4, 2, 6)}, {I4M_K(8, 2, 4, 2, 4)},
};
#undef I4M_K
#define I4M_N ((int)(sizeof I4M_TAB / sizeof I4M_TAB[0]))
static unsigned g_i4m_attr[I4M_N][2];
static int g_i4m_static[I4M_N][2];
static size_t i4m_smem(const quant_wmeta *m, int ti) {
    return (size_t)I4M_TAB[ti].s * i4m_stage(I4M_TAB[ti].wm, I4M_TAB[ti].wn, I4M_TAB[ti].nn, m->gchunks > 0 ? 1 : 4);
}

/* kind 8, the wgmma kernel (17-256 rows, capability 9.0): BT tokens, NWG warpgroups of 64 output rows, S stages
 * (shared memory i4g_smem_bytes: 43-161 KB); rs: A in registers (the RS form: no A buffers, so 2-4 blocks a
 * multiprocessor), else the SS form */
#define I4G_K(bt, nwg, s, rs) bt, nwg, s, rs, {k_i4_wg<bt, nwg, s, false, rs>, k_i4_wg<bt, nwg, s, true, rs>}
static const struct {
    int bt, nwg, s, rs; /* rs: A in registers */
    i4g_kern k[2];      /* [gchunks > 0] */
} I4G_TAB[] = {
    {I4G_K(32, 1, 8, 0)},  {I4G_K(64, 1, 8, 0)},  {I4G_K(64, 2, 5, 0)},  {I4G_K(128, 1, 4, 0)}, {I4G_K(128, 2, 4, 0)},
    {I4G_K(256, 1, 4, 0)}, {I4G_K(256, 2, 3, 0)}, {I4G_K(32, 1, 6, 1)},  {I4G_K(64, 1, 4, 1)},  {I4G_K(64, 2, 4, 1)},
    {I4G_K(128, 1, 3, 1)}, {I4G_K(128, 1, 4, 1)}, {I4G_K(128, 2, 3, 1)}, {I4G_K(256, 1, 3, 1)}, {I4G_K(64, 1, 3, 1)},
    {I4G_K(128, 1, 2, 1)}, {I4G_K(256, 1, 2, 1)},
    /* twelfth session: RS at 96 and 112 tokens, so 65-96 and 97-112 rows (a 100-token router prompt) pad less than
     * to 128 */
    {I4G_K(96, 1, 3, 1)},  {I4G_K(96, 1, 4, 1)},  {I4G_K(112, 1, 3, 1)}, {I4G_K(112, 1, 4, 1)},
};
#undef I4G_K
#define I4G_N ((int)(sizeof I4G_TAB / sizeof I4G_TAB[0]))
static unsigned g_i4g_attr[I4G_N][2];
static int g_i4g_static[I4G_N][2];
static size_t i4g_smem(const quant_wmeta *m, int ti) {
    return (size_t)i4g_smem_bytes(I4G_TAB[ti].bt, I4G_TAB[ti].nwg, I4G_TAB[ti].s, m->gchunks > 0 ? 1 : 4, I4G_TAB[ti].rs);
}

/* the opt-in dynamic shared memory limit of kernel k (the device's less k's static shared memory, read once
 * into *stat as bytes + 1) */
static size_t i4_kern_maxdyn(cuda_ctx *c, const void *k, int *stat) {
    int optin, smsm;
    i4_dev_limits(c, &optin, &smsm);
    if (!*stat) {
        cudaFuncAttributes fa;
        *stat = cudaFuncGetAttributes(&fa, k) == cudaSuccess ? (int)fa.sharedSizeBytes + 1 : 1024 + 1;
        cudaGetLastError();
    }
    return optin > *stat - 1 ? (size_t)(optin - (*stat - 1)) : 0;
}

/* kind 5: chunks per split, and the shared memory of table entry ti at vt rows */
static int64_t i4b_per(int64_t KC, int ks) { return (KC + ks - 1) / ks; }
static size_t i4b_cfg_smem(const quant_wmeta *m, int ti, int ks, int64_t vt) {
    const int64_t per = i4b_per(m->Kp / 64, ks);
    int64_t ng = (per - 1) / m->gchunks + 2;
    if (ng > m->G) ng = m->G;
    return i4b_smem(I4B_TAB[ti].nw, I4B_TAB[ti].tn, I4B_TAB[ti].r, I4B_TAB[ti].s, vt, per, ng);
}

/* All of the SM's shared memory as carveout, and the dynamic limit maxdyn, for kernel k: set once per kernel
 * and device (bit i4_dev_slot in *done) */
static vsr_status i4_attrs_once(cuda_ctx *c, const void *k, unsigned *done, size_t maxdyn, const char *what,
                                vsr_err *err) {
    const unsigned bit = 1u << i4_dev_slot(c);
    if (*done & bit) return VSR_OK;
    char msg[96];
    vsr_status st;
    snprintf(msg, sizeof msg, "%s: carveout", what);
    if ((st = cuda_check(c, cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout, 100), msg, err)))
        return st;
    snprintf(msg, sizeof msg, "%s: shared memory attribute", what);
    if ((st = cuda_check(c, cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)maxdyn), msg, err)))
        return st;
    *done |= bit;
    return VSR_OK;
}

/* room for every list: kinds 0-1 at most 60, kind 2 40, kind 5 48, kinds 7 and 8 (I4M_N + I4G_N) x 8 splits (248);
 * a list that outgrew it would be cut short, so the check below keeps theirs within it */
#define I4_MAX_CAND 256
#define I4M_KS_N 8 /* the splits kinds 7 and 8 list (i4_candidates_mma) */
static_assert((I4M_N + I4G_N) * I4M_KS_N <= I4_MAX_CAND, "every kind-7 and kind-8 configuration fits the candidate list");
typedef struct i4_run {
    const vsr_bweight *w;
    const quant_wmeta *m;
    const float *x;   /* the caller's FP32 activations (kind 1 reads them directly) */
    const __nv_bfloat16 *xb; /* kinds 2, 5, 7, 8: bf16 [M, ldx] in permuted order, columns >= kvalid read as zero */
    int64_t ldx, kvalid;
    int64_t M, Mt;
    i4_cfg cand[I4_MAX_CAND];
    char names[I4_MAX_CAND][32];
    const char *name_ptr[I4_MAX_CAND];
    int n;
} i4_run;

static int64_t i4_tiles(const i4_run *r, i4_cfg cfg) { /* blocks of the grid (all splits) */
    int64_t NT = r->m->Np / 16, ntg = (r->Mt + cfg.mt - 1) / cfg.mt;
    if (cfg.kind == 2 || cfg.kind == 5) return (NT + cfg.w * cfg.u - 1) / (cfg.w * cfg.u) * cfg.ks;
    if (cfg.kind == 7 || cfg.kind == 8)
        return (NT + cfg.w * cfg.u - 1) / (cfg.w * cfg.u) * ((r->M + cfg.mt * 8 - 1) / (cfg.mt * 8)) * cfg.ks;
    return (cfg.kind ? (NT + cfg.w - 1) / cfg.w : NT) * ntg * cfg.ks;
}

/* kind 2: shared memory of a configuration at vt rows (per: chunks per split) */
static size_t i4t_cfg_smem(const quant_wmeta *m, i4_cfg cfg, int64_t vt) {
    int64_t KC = m->Kp / 64, per = (KC + cfg.ks - 1) / cfg.ks;
    int64_t ng = (per - 1) / m->gchunks + 2;
    if (ng > m->G) ng = m->G;
    return i4t_smem(cfg.w, cfg.u, cfg.d, vt, per, ng);
}

static vsr_status i4_launch(cuda_ctx *c, const i4_run *r, i4_cfg cfg, float *y, int accumulate, vsr_err *err) {
    quant_state *q;
    vsr_status st = quant_state_get(c, &q, err);
    if (st) return st;
    const quant_wmeta *m = r->m;
    int64_t NT = m->Np / 16, KC = m->Kp / 64, N = r->w->v.N;
    int64_t ntg = (r->Mt + cfg.mt - 1) / cfg.mt;
    float *ws = NULL;
    if (cfg.ks > 1) {
        if ((st = quant_grow(c, &q->aux, &q->aux_bytes, sizeof(float) * (size_t)(cfg.ks * r->M * N), "int4 split-K", err)))
            return st;
        size_t need = (size_t)(NT * ntg); /* >= the tiles of either kind */
        if (need > q->counters_n) {
            if (q->counters) {
                if ((st = cuda_check(c, cudaStreamSynchronize(c->stream), "int4: synchronize", err))) return st;
                cudaFree(q->counters);
                q->counters = NULL, q->counters_n = 0;
            }
            void *p;
            if ((st = cuda_check(c, cudaMalloc(&p, need * sizeof(unsigned)), "int4 split-K counters: cudaMalloc", err)))
                return st;
            if ((st = cuda_check(c, cudaMemsetAsync(p, 0, need * sizeof(unsigned), c->stream), "int4 counters: memset", err))) {
                cudaFree(p);
                return st;
            }
            q->counters = (unsigned *)p, q->counters_n = need;
        }
        ws = (float *)q->aux;
    }
    if (cfg.kind == 5) {
        const int ti = cfg.d;
        const int64_t per = i4b_per(KC, cfg.ks);
        if (ti < 0 || ti >= I4B_N || I4B_TAB[ti].mt != cfg.mt || r->M > cfg.mt * 8 || !r->xb || m->gchunks <= 0 ||
            ((uintptr_t)r->xb & 15) || (r->ldx & 7) || (cfg.ks - 1) * per >= KC)
            return vsr_err_set(err, VSR_E_INTERNAL, "int4: no bulk-copy streaming kernel for entry %d mt=%d ks=%d (M %lld)",
                               ti, cfg.mt, cfg.ks, (long long)r->M);
        if (NT * KC > INT32_MAX / 32 || (int64_t)m->G * m->Np > INT32_MAX || r->M * r->ldx > INT32_MAX)
            return vsr_err_set(err, VSR_E_UNSUPPORTED, "int4: weight too large for the bulk-copy kernel's 32-bit indices "
                               "(N %lld K %lld)", (long long)N, (long long)r->w->v.K);
        const size_t smem = i4b_cfg_smem(m, ti, cfg.ks, r->M), maxdyn = i4b_maxdyn(c, ti);
        if (smem > maxdyn)
            return vsr_err_set(err, VSR_E_INTERNAL, "int4: bulk-copy streaming kernel needs %zu bytes of shared memory (at "
                               "most %zu)", smem, maxdyn);
        if ((st = i4_attrs_once(c, (const void *)I4B_TAB[ti].k, &g_i4b_attr[ti], maxdyn, "int4 bulk-copy kernel", err)))
            return st;
        i4b p = {(const uint4 *)r->w->w, (const uint32_t *)r->w->scale, r->xb, (int)r->M, (int)N, (int)NT, (int)m->Np,
                 (int)KC, (int)r->ldx, (int)r->kvalid, m->G, m->gchunks, cfg.ks, (int)per, accumulate, y, ws,
                 q->counters};
        const int nwt = I4B_TAB[ti].nw * I4B_TAB[ti].tn;
        dim3 grid((unsigned)((NT + nwt - 1) / nwt), (unsigned)cfg.ks);
        I4B_TAB[ti].k<<<grid, I4B_TAB[ti].nw * 32, smem, c->stream>>>(p);
        return cuda_check_launch(c, "int4 fused (bulk-copy streaming)", err);
    }
    if (cfg.kind == 7) {
        const int ti = cfg.d;
        const int64_t per = (KC + cfg.ks - 1) / cfg.ks;
        if (ti < 0 || ti >= I4M_N || I4M_TAB[ti].wm != cfg.mt || r->M > I4_MAX_FUSED_ROWS || !r->xb ||
            ((uintptr_t)r->xb & 15) || (r->ldx & 7) || (cfg.ks - 1) * per >= KC)
            return vsr_err_set(err, VSR_E_INTERNAL, "int4: no tensor-core tile kernel for entry %d mt=%d ks=%d (M %lld)", ti,
                               cfg.mt, cfg.ks, (long long)r->M);
        const int pc = m->gchunks > 0;
        const void *k = (const void *)I4M_TAB[ti].k[pc];
        const size_t smem = i4m_smem(m, ti), maxdyn = i4_kern_maxdyn(c, k, &g_i4m_static[ti][pc]);
        if (smem > maxdyn)
            return vsr_err_set(err, VSR_E_INTERNAL, "int4: tensor-core tile kernel needs %zu bytes of shared memory (at "
                               "most %zu)", smem, maxdyn);
        if ((st = i4_attrs_once(c, k, &g_i4m_attr[ti][pc], maxdyn, "int4 tensor-core tile kernel", err))) return st;
        i4m p = {(const uint4 *)r->w->w, (const uint32_t *)r->w->scale, (const int32_t *)m->dev, r->xb, r->M, N, m->Np,
                 KC, r->ldx, r->kvalid, m->G, m->gchunks, cfg.ks, (int)per, accumulate, y, ws, q->counters};
        const int bn = I4M_TAB[ti].nn * I4M_TAB[ti].wn, bm = I4M_TAB[ti].wm * 8;
        dim3 grid((unsigned)((r->M + bm - 1) / bm), (unsigned)((NT + bn - 1) / bn), (unsigned)cfg.ks);
        I4M_TAB[ti].k[pc]<<<grid, I4M_TAB[ti].nn * I4M_TAB[ti].kw * 32, smem, c->stream>>>(p);
        return cuda_check_launch(c, "int4 fused (tensor-core tiles)", err);
    }
    if (cfg.kind == 8) {
        const int ti = cfg.d;
        const int64_t per = (KC + cfg.ks - 1) / cfg.ks;
        if (ti < 0 || ti >= I4G_N || I4G_TAB[ti].bt != cfg.mt * 8 || r->M > I4_MAX_FUSED_ROWS || !r->xb ||
            ((uintptr_t)r->xb & 15) || (r->ldx & 7) || (cfg.ks - 1) * per >= KC || c->cc_major != 9 || c->cc_minor != 0)
            return vsr_err_set(err, VSR_E_INTERNAL, "int4: no wgmma kernel for entry %d mt=%d ks=%d (M %lld, capability "
                               "%d.%d)", ti, cfg.mt, cfg.ks, (long long)r->M, c->cc_major, c->cc_minor);
        const int pc = m->gchunks > 0;
        const void *k = (const void *)I4G_TAB[ti].k[pc];
        const size_t smem = i4g_smem(m, ti), maxdyn = i4_kern_maxdyn(c, k, &g_i4g_static[ti][pc]);
        if (smem > maxdyn)
            return vsr_err_set(err, VSR_E_INTERNAL, "int4: wgmma kernel needs %zu bytes of shared memory (at most %zu)",
                               smem, maxdyn);
        if ((st = i4_attrs_once(c, k, &g_i4g_attr[ti][pc], maxdyn, "int4 wgmma kernel", err))) return st;
        i4m p = {(const uint4 *)r->w->w, (const uint32_t *)r->w->scale, (const int32_t *)m->dev, r->xb, r->M, N, m->Np,
                 KC, r->ldx, r->kvalid, m->G, m->gchunks, cfg.ks, (int)per, accumulate, y, ws, q->counters};
        const int bn = I4G_TAB[ti].nwg * 4, bt = I4G_TAB[ti].bt;
        alignas(64) CUtensorMap xm;
        if (!tma_encode_2d_sw128(&xm, 2, r->xb, r->M, r->kvalid, r->ldx * 2, bt))
            return vsr_err_set(err, VSR_E_INTERNAL, "int4: wgmma kernel: the driver refused the activations' TMA "
                               "descriptor (M %lld, row stride %lld)", (long long)r->M, (long long)r->ldx);
        dim3 grid((unsigned)((r->M + bt - 1) / bt), (unsigned)((NT + bn - 1) / bn), (unsigned)cfg.ks);
        I4G_TAB[ti].k[pc]<<<grid, I4G_TAB[ti].nwg * 128 + 32, smem, c->stream>>>(p, xm);
        return cuda_check_launch(c, "int4 fused (wgmma)", err);
    }
    if (cfg.kind == 2) {
        const int ti = i4t_index(cfg.mt, cfg.w, cfg.u, cfg.d);
        if (ti < 0 || r->M > cfg.mt * 8 || !r->xb || m->gchunks <= 0)
            return vsr_err_set(err, VSR_E_INTERNAL, "int4: no streaming kernel for mt=%d nw=%d tn=%d d=%d (M %lld)",
                               cfg.mt, cfg.w, cfg.u, cfg.d, (long long)r->M);
        const i4t_kern k = I4T_TAB[ti].k;
        const size_t smem = i4t_cfg_smem(m, cfg, r->M), maxdyn = i4_kern_maxdyn(c, (const void *)k, &g_i4t_static[ti]);
        if (smem > maxdyn)
            return vsr_err_set(err, VSR_E_INTERNAL, "int4: streaming kernel needs %zu bytes of shared memory (at most %zu)",
                               smem, maxdyn);
        /* as much shared memory as the SM has (the weights bypass L1): several blocks per SM; set once */
        if ((st = i4_attrs_once(c, (const void *)k, &g_i4t_attr[ti], maxdyn, "int4 streaming kernel", err))) return st;
        i4t p = {(const uint4 *)r->w->w, (const uint32_t *)r->w->scale, r->xb, r->M, N, m->Np, KC, r->ldx, r->kvalid,
                 m->G, m->gchunks, cfg.ks, (int)((KC + cfg.ks - 1) / cfg.ks), accumulate, y, ws, q->counters};
        dim3 grid((unsigned)((NT + cfg.w * cfg.u - 1) / (cfg.w * cfg.u)), (unsigned)cfg.ks);
        k<<<grid, cfg.w * 32, smem, c->stream>>>(p);
        return cuda_check_launch(c, "int4 fused (streaming)", err);
    }
    if (cfg.kind == 1) {
        i4s_kern k = i4s_kernel_for(cfg.mt, cfg.w, cfg.u);
        if (!k)
            return vsr_err_set(err, VSR_E_INTERNAL, "int4: no shared-activation kernel for mt=%d nw=%d u=%d", cfg.mt, cfg.w,
                               cfg.u);
        i4p p = {(const uint4 *)r->w->w, (const uint32_t *)r->w->scale, (const int4 *)m->dev, r->x, r->w->g_idx,
                 r->M, r->w->v.K, N, m->Np, KC, m->G, m->gchunks, cfg.ks, accumulate, y, ws, q->counters};
        dim3 grid((unsigned)ntg, (unsigned)((NT + cfg.w - 1) / cfg.w), (unsigned)cfg.ks);
        k<<<grid, cfg.w * 32, 0, c->stream>>>(p);
        return cuda_check_launch(c, "int4 fused (shared activations)", err);
    }
    i4_kern k = i4_kernel_for(cfg.mt, cfg.w);
    if (!k) return vsr_err_set(err, VSR_E_INTERNAL, "int4: no kernel for mt=%d w=%d", cfg.mt, cfg.w);
    /* kind 0 multiplies staged bf16 fragments: stage them (part of its cost, timed with it) */
    if ((st = quant_grow(c, &q->act, &q->act_bytes, (size_t)(r->Mt * KC * 32 * 32), "int4 activations", err))) return st;
    k_i4_stage_frag<<<nblocks(r->Mt * KC * 32, 256), 256, 0, c->stream>>>(r->x, r->M, r->w->v.K, r->w->g_idx, r->Mt, KC,
                                                                         (uint4 *)q->act);
    if ((st = cuda_check_launch(c, "int4 stage", err))) return st;
    dim3 grid((unsigned)NT, (unsigned)ntg, (unsigned)cfg.ks);
    k<<<grid, cfg.w * 32, 0, c->stream>>>((const uint4 *)r->w->w, (const uint32_t *)r->w->scale, (const int4 *)m->dev,
                                          (const uint4 *)q->act, r->M, N, m->Np, KC, r->Mt, cfg.ks, y, accumulate, ws,
                                          q->counters);
    return cuda_check_launch(c, "int4 fused", err);
}

/* i4_launch for the caller's y: adding into y at 17-256 rows (unless VSR_CUDA_INT4_ACC_SEP=0), the product into a
 * scratch buffer (quant_state.wtmp: unused by the fused path otherwise) and then cuda_add_into */
static vsr_status i4_launch_y(cuda_ctx *c, const i4_run *r, i4_cfg cfg, float *y, int accumulate, vsr_err *err) {
    if (!accumulate || r->M <= 16 || !quant_int4_acc_sep_on()) return i4_launch(c, r, cfg, y, accumulate, err);
    quant_state *q;
    vsr_status st = quant_state_get(c, &q, err);
    const int64_t n = r->M * r->w->v.N;
    if (st || (st = quant_grow(c, &q->wtmp, &q->wtmp_bytes, sizeof(float) * (size_t)n, "int4 product", err)) ||
        (st = i4_launch(c, r, cfg, (float *)q->wtmp, 0, err)))
        return st;
    cuda_add_into(c, y, (const float *)q->wtmp, n);
    return cuda_check_launch(c, "int4 add into y", err);
}

static void i4_add(i4_run *r, int kind, int mt, int w, int ks, int u) {
    if (r->n >= I4_MAX_CAND) return;
    r->cand[r->n] = (i4_cfg){kind, mt, w, ks, u, 0};
    if (kind)
        snprintf(r->names[r->n], sizeof r->names[0], "s-mt%d-nw%d-u%d-ks%d", mt, w, u, ks);
    else
        snprintf(r->names[r->n], sizeof r->names[0], "mt%d-w%d-ks%d", mt, w, ks);
    r->name_ptr[r->n] = r->names[r->n];
    r->n++;
}

/* candidates for a token-tile bucket (depends on the bucket and shape only, never on M);
 * the shared-activation kernel's first (the default's list) */
static void i4_candidates(cuda_ctx *c, i4_run *r, int64_t bucket) {
    const quant_wmeta *m = r->m;
    int64_t NT = m->Np / 16, KC = m->Kp / 64, N = r->w->v.N;
    r->n = 0;
    /* kind 1: MT up to 8 token tiles; NW 4 or 8; split K while a split keeps >= 4 chunks and the
     * grid has fewer than 8 blocks per multiprocessor */
    int smt[2] = {(int)(bucket > 8 ? 8 : bucket), (int)(bucket > 8 ? 4 : bucket / 2)};
    for (int a = 0; a < 2; a++) {
        int mt = smt[a];
        if (mt < 1 || (a == 1 && mt == smt[0])) continue;
        int64_t ntg = (bucket + mt - 1) / mt;
        for (int u = 4; u <= (mt <= 2 ? 8 : 4); u *= 2)
            for (int nw = 4; nw <= 8; nw *= 2)
                for (int ks = 1; ks <= I4_MAX_KS; ks *= 2) {
                    if (ks > 1 && KC / ks < 4) break;
                    if (ks > 1 && (int64_t)ks * bucket * 8 * N > I4_WS_CAP_FLOATS) break;
                    if (ks > 1 && (NT + nw - 1) / nw * ntg * (ks / 2) >= 8 * c->sm_count) break;
                    i4_add(r, 1, mt, nw, ks, u);
                }
    }
    /* kind 0 (sweep 1's kernel), still a candidate for the autotuner */
    int mts[2] = {(int)(bucket > 8 ? 8 : bucket), (int)(bucket > 8 ? 4 : bucket / 2)};
    for (int a = 0; a < 2; a++) {
        int mt = mts[a];
        if (mt < 1 || (a == 1 && mt == mts[0])) continue;
        int64_t ntg = (bucket + mt - 1) / mt;
        for (int w = 4; w <= 8; w *= 2)
            for (int ks = 1; ks <= I4_MAX_KS; ks *= 2) {
                if (ks > 1 && ks * w > KC) break;                         /* a warp gets >= 1 chunk */
                if (ks > 1 && (int64_t)ks * bucket * 8 * N > I4_WS_CAP_FLOATS) break;
                if (ks > 1 && NT * ntg * (ks / 2) >= 4 * c->sm_count) break; /* enough blocks already */
                i4_add(r, 0, mt, w, ks, 0);
            }
    }
}

/* kind 2's list for bucket 1 (<= 8 rows) or 2 (<= 16 rows): every table configuration of that MT, with
 * the splits that fit shared memory at 8 * bucket rows; more splits only while the grid is short of
 * 8 blocks per multiprocessor. Depends on the bucket and shape only. */
static void i4_candidates_stream(cuda_ctx *c, i4_run *r, int64_t bucket) {
    const quant_wmeta *m = r->m;
    int64_t NT = m->Np / 16, KC = m->Kp / 64, N = r->w->v.N;
    int optin = 0;
    if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, c->device) != cudaSuccess || optin <= 0)
        optin = 48 * 1024, cudaGetLastError();
    r->n = 0;
    for (size_t ti = 0; ti < sizeof I4T_TAB / sizeof I4T_TAB[0]; ti++) {
        if (I4T_TAB[ti].mt != (int)bucket) continue;
        const int nw = I4T_TAB[ti].nw, tn = I4T_TAB[ti].tn, d = I4T_TAB[ti].d;
        const int64_t nb = (NT + nw * tn - 1) / (nw * tn);
        int added = 0;
        int64_t prev_blocks = 0;
        for (int ks = 1; ks <= I4_MAX_KS; ks++) {
            if (ks > 2 && (ks & (ks - 1)) && ks != 3 && ks != 6 && ks != 12) continue; /* 1,2,3,4,6,8,12,16 */
            const int64_t per = (KC + ks - 1) / ks;
            if (ks > 1 && ((ks - 1) * per >= KC || per < 2)) break; /* no empty split, >= 2 chunks each */
            if (ks > 1 && (int64_t)ks * bucket * 8 * N > I4_WS_CAP_FLOATS) break;
            if (added && prev_blocks >= 8 * c->sm_count) break;
            i4_cfg g = {2, (int)bucket, nw, ks, tn, d};
            if (i4t_cfg_smem(m, g, bucket * 8) > (size_t)optin) continue;
            if (r->n >= I4_MAX_CAND) return;
            r->cand[r->n] = g;
            snprintf(r->names[r->n], sizeof r->names[0], "t-mt%d-nw%d-tn%d-d%d-ks%d", (int)bucket, nw, tn, d, ks);
            r->name_ptr[r->n] = r->names[r->n];
            r->n++;
            added = 1, prev_blocks = nb * ks;
        }
    }
}

/* kind 5's list for bucket 1 (<= 8 rows) or 2 (<= 16 rows): the table's kernels of that MT, each with the
 * splits whose shared memory fits at 8 * bucket rows, no split empty and >= 2 chunks each, at most 16 blocks
 * per multiprocessor. Depends on the bucket and shape only. */
static void i4_candidates_bulk(cuda_ctx *c, i4_run *r, int64_t bucket) {
    static const int KSL[] = {1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16};
    const quant_wmeta *m = r->m;
    const int64_t NT = m->Np / 16, KC = m->Kp / 64, N = r->w->v.N;
    r->n = 0;
    for (int ti = 0; ti < I4B_N; ti++) {
        if (I4B_TAB[ti].mt != (int)bucket) continue;
        const int nw = I4B_TAB[ti].nw, tn = I4B_TAB[ti].tn;
        const int64_t nb = (NT + nw * tn - 1) / (nw * tn);
        for (size_t b = 0; b < sizeof KSL / sizeof KSL[0]; b++) {
            const int ks = KSL[b];
            const int64_t per = i4b_per(KC, ks);
            if (ks > 1 && ((ks - 1) * per >= KC || per < 2)) break; /* no empty split, >= 2 chunks each */
            if (ks > 1 && (int64_t)ks * bucket * 8 * N > I4_WS_CAP_FLOATS) break;
            if (nb * ks > 16 * (int64_t)c->sm_count) break;
            if (i4b_cfg_smem(m, ti, ks, bucket * 8) > i4b_maxdyn(c, ti)) continue;
            if (r->n >= I4_MAX_CAND) return;
            r->cand[r->n] = (i4_cfg){5, (int)bucket, nw, ks, tn, ti};
            snprintf(r->names[r->n], sizeof r->names[0], "b-mt%d-nw%d-tn%d-r%d-s%d-ks%d", (int)bucket, nw, tn,
                     I4B_TAB[ti].r, I4B_TAB[ti].s, ks);
            r->name_ptr[r->n] = r->names[r->n];
            r->n++;
        }
    }
}

/* kind 8 is listed (after kind 7): capability 9.0 (the build's sm_90a code), the driver's TMA encoder (which
 * fp8_gemm_usable also needs), not switched off */
static int i4_wg_listed(cuda_ctx *c) { return c->cc_major == 9 && c->cc_minor == 0 && quant_int4_wg_on() && fp8_gemm_usable(c); }

/* kind 7's list for buckets 4-32 (17-256 rows): the table's entries of 1-4 token blocks at the bucket's rows
 * (WM <= bucket <= 4 WM), each with splits 1, 2, 3, 4, 6, 8, 12, 16 (no split empty, >= 2 chunks each)
 * until the grid has 4 blocks per multiprocessor. Depends on the bucket and shape only. */
static void i4_candidates_mma(cuda_ctx *c, i4_run *r, int64_t bucket) {
    static const int KSL[I4M_KS_N] = {1, 2, 3, 4, 6, 8, 12, 16};
    const quant_wmeta *m = r->m;
    const int64_t NT = m->Np / 16, KC = m->Kp / 64, N = r->w->v.N;
    r->n = 0;
    for (int ti = 0; ti < I4M_N; ti++) {
        const int wm = I4M_TAB[ti].wm, wn = I4M_TAB[ti].wn, nw = I4M_TAB[ti].nn; /* warps along N */
        if (wm > bucket || 4 * wm < bucket) continue;
        const int pc = m->gchunks > 0;
        if (i4m_smem(m, ti) > i4_kern_maxdyn(c, (const void *)I4M_TAB[ti].k[pc], &g_i4m_static[ti][pc])) continue;
        const int64_t blocks1 = (NT + nw * wn - 1) / (nw * wn) * ((bucket + wm - 1) / wm);
        for (size_t b = 0; b < sizeof KSL / sizeof KSL[0]; b++) {
            const int ks = KSL[b];
            const int64_t per = (KC + ks - 1) / ks;
            if (ks > 1 && ((ks - 1) * per >= KC || per < 2)) break;
            if (ks > 1 && (int64_t)ks * bucket * 8 * N > I4_WS_CAP_FLOATS) break;
            if (b > 0 && blocks1 * KSL[b - 1] >= 4 * (int64_t)c->sm_count) break;
            if (r->n >= I4_MAX_CAND) return;
            r->cand[r->n] = (i4_cfg){7, wm, nw, ks, wn, ti};
            snprintf(r->names[r->n], sizeof r->names[0], "m-wm%d-wn%d-nn%d-kw%d-s%d-ks%d", wm, wn, nw, I4M_TAB[ti].kw,
                     I4M_TAB[ti].s, ks);
            r->name_ptr[r->n] = r->names[r->n];
            r->n++;
        }
    }
    /* kind 8 (capability 9.0: the build's sm_90a code), by the same rules: BT / 8 token tiles for WM */
    if (!i4_wg_listed(c)) return;
    for (int ti = 0; ti < I4G_N; ti++) {
        const int mt = I4G_TAB[ti].bt / 8, nb = I4G_TAB[ti].nwg * 4; /* token tiles, n-tiles a block */
        if (mt > bucket || 4 * mt < bucket) continue;
        const int pc = m->gchunks > 0;
        if (i4g_smem(m, ti) > i4_kern_maxdyn(c, (const void *)I4G_TAB[ti].k[pc], &g_i4g_static[ti][pc])) continue;
        const int64_t blocks1 = (NT + nb - 1) / nb * ((bucket + mt - 1) / mt);
        for (size_t b = 0; b < sizeof KSL / sizeof KSL[0]; b++) {
            const int ks = KSL[b];
            const int64_t per = (KC + ks - 1) / ks;
            if (ks > 1 && ((ks - 1) * per >= KC || per < 2)) break;
            if (ks > 1 && (int64_t)ks * bucket * 8 * N > I4_WS_CAP_FLOATS) break;
            if (b > 0 && blocks1 * KSL[b - 1] >= 4 * (int64_t)c->sm_count) break;
            if (r->n >= I4_MAX_CAND) return;
            r->cand[r->n] = (i4_cfg){8, mt, nb, ks, 1, ti};
            snprintf(r->names[r->n], sizeof r->names[0], "g-bt%d-wg%d-s%d%s-ks%d", I4G_TAB[ti].bt, I4G_TAB[ti].nwg,
                     I4G_TAB[ti].s, I4G_TAB[ti].rs ? "r" : "", ks);
            r->name_ptr[r->n] = r->names[r->n];
            r->n++;
        }
    }
}

/* the default at 17-256 rows (no autotune cache), from the tuner's choices on the H200 (bench/NOTES.md):
 *   - 33-256 rows where kind 8 is listed (tenth session, calls 6-7; twelfth, calls 4-6): its RS form, one warpgroup,
 *     BT 64 with 4 stages at 33-64 rows, BT 96 with 4 at 65-96 and (two blocks) 129-192, BT 112 with 4 at 97-112 and
 *     193-224, BT 128 with 3 at 113-128 and 225-256;
 *   - else kind 7 (ninth session, call 4): one n-tile per warp, one warp per chunk, WM = 4 token tiles at 17-32
 *     rows, 8 at 33-128, 16 at 129-256 (so the table's S: 8, 6, 4);
 * each with the smallest split giving >= 2 blocks per multiprocessor, else the largest listed */
static const struct {
    int mt_max, bt, s; /* up to mt_max token tiles of 8: kind 8's RS form with BT tokens a block and s stages */
} I4G_DEFAULT[] = {{8, 64, 4}, {12, 96, 4}, {14, 112, 4}, {16, 128, 3}, {24, 96, 4}, {28, 112, 4}, {32, 128, 3}};
static int i4_default_mma(cuda_ctx *c, const i4_run *r) {
    int best = -1;
    if (r->Mt > 4) {
        size_t d = 0;
        while (d + 1 < sizeof I4G_DEFAULT / sizeof I4G_DEFAULT[0] && r->Mt > I4G_DEFAULT[d].mt_max) d++;
        const int bt = I4G_DEFAULT[d].bt, s = I4G_DEFAULT[d].s;
        for (int i = 0; i < r->n; i++) {
            const i4_cfg *g = &r->cand[i];
            if (g->kind != 8 || I4G_TAB[g->d].bt != bt || I4G_TAB[g->d].s != s || !I4G_TAB[g->d].rs ||
                I4G_TAB[g->d].nwg != 1)
                continue;
            best = i;
            if (i4_tiles(r, *g) >= 2 * c->sm_count) break;
        }
        if (best >= 0) return best;
    }
    const int wm = r->Mt <= 4 ? 4 : r->Mt <= 16 ? 8 : 16; /* Mt: token tiles of 8 */
    for (int i = 0; i < r->n; i++) {
        const i4_cfg *g = &r->cand[i];
        if (g->kind != 7 || g->mt != wm || g->u != 1 || I4M_TAB[g->d].kw != 1) continue;
        best = i;
        if (i4_tiles(r, *g) >= 2 * c->sm_count) break;
    }
    return best < 0 ? 0 : best;
}

/* kind 5's default (no autotune cache): the candidate with the least estimated time on the busiest
 * multiprocessor: its blocks times (chunks per warp + a ramp of 8 chunks per block), scaled up when fewer
 * than 16 warps are resident, plus the split-K partials; at the bucket's rows (depends on the key only) */
static int i4_default_bulk(cuda_ctx *c, const i4_run *r) {
    const quant_wmeta *m = r->m;
    const int64_t KC = m->Kp / 64, N = r->w->v.N, sm = c->sm_count > 0 ? c->sm_count : 1;
    double best_cost = 1e300;
    int best = 0;
    for (int i = 0; i < r->n; i++) {
        const i4_cfg *g = &r->cand[i];
        const int ti = g->d;
        const int64_t per = i4b_per(KC, g->ks), blocks = i4_tiles(r, *g), vt = (int64_t)g->mt * 8;
        const int occ = i4b_occupancy(c, ti, i4b_cfg_smem(m, ti, g->ks, vt));
        const int64_t on_sm = (blocks + sm - 1) / sm, resident = on_sm < occ ? on_sm : occ;
        double warps = (double)(resident * g->w);
        if (warps > 16) warps = 16;
        double cost = (double)on_sm * ((double)g->w * g->u * (per + 8)) * (16.0 / warps);
        if (g->ks > 1) cost += (double)g->ks * vt * N * 8 / 512.0 / sm + 64.0 * g->ks;
        if (cost < best_cost) best_cost = cost, best = i;
    }
    return best;
}

/* kind 2's default: 4 warps, one n-tile each, 16 slots; the smallest split giving >= 4 blocks per
 * multiprocessor whose shared memory leaves room for 3 blocks per multiprocessor (~96 KB of weights in
 * flight per SM); else the largest split listed */
static int i4_default_stream(cuda_ctx *c, const i4_run *r) {
    int best = -1;
    for (int i = 0; i < r->n; i++) {
        const i4_cfg *g = &r->cand[i];
        if (g->w != 4 || g->u != 1 || g->d != 16) continue;
        best = i;
        if (i4_tiles(r, *g) >= 4 * c->sm_count && i4t_cfg_smem(r->m, *g, r->M) <= 72 * 1024) break;
    }
    return best < 0 ? 0 : best;
}

static int i4_default(cuda_ctx *c, const i4_run *r) {
    /* Sweep 2's timings (NOTES "Second pass"): the shared-activation kernel wins or ties at one token
     * tile (1-8 rows) on the long-K and small shapes and is 2x slower from two tiles up, where the
     * first kernel stays the default. One tile: kind 1, 8 warps, 4 chunks per group, the smallest split
     * giving three blocks per multiprocessor; else kind 0, the first MT, 4 warps, the smallest split
     * giving two blocks per multiprocessor (sweep 1's rule). */
    int kind = r->Mt == 1 ? 1 : 0, best = -1, mt0 = 1;
    for (int i = r->n - 1; i >= 0; i--)
        if (r->cand[i].kind == kind) mt0 = r->cand[i].mt; /* the kind's first MT */
    for (int i = 0; i < r->n; i++) {
        const i4_cfg *g = &r->cand[i];
        if (g->kind != kind || g->mt != mt0 || g->w != (kind ? 8 : 4) || (kind && g->u != 4)) continue;
        best = i;
        if (i4_tiles(r, *g) >= (kind ? 3 : 2) * c->sm_count) break;
    }
    return best < 0 ? 0 : best;
}

/* autotune launch of configuration `cand` into out (a failed launch is an error, not a skip) */
static int i4_tune_launch(cuda_ctx *c, int cand, void *arg, void *out, vsr_err *err) {
    i4_run *r = (i4_run *)arg;
    return i4_launch(c, r, r->cand[cand], (float *)out, 0, err) == VSR_OK ? 0 : -1;
}

/* ---- hooks ---- */

extern "C" vsr_status cuda_int4_upload(cuda_ctx *c, const vsr_weight_view *v, vsr_bweight *b, vsr_err *err) {
    const char *nm = b->name;
    int64_t N = v->N, K = v->K;
    if (K % 8 != 0)
        return vsr_err_set(err, VSR_E_FORMAT, "cuda:%d: %s: int4 weight needs K a multiple of 8 (K %lld)", c->device, nm,
                           (long long)K);
    if (!v->scale)
        return vsr_err_set(err, VSR_E_FORMAT, "cuda:%d: %s: int4 weight has no weight_scale", c->device, nm);
    if (!(v->group == -1 || (v->group > 0 && v->group % 8 == 0)))
        return vsr_err_set(err, VSR_E_FORMAT, "cuda:%d: %s: int4 group size %d is neither -1 (channel) nor a positive "
                           "multiple of 8", c->device, nm, v->group);
    int G = v->group > 0 ? (int)((K + v->group - 1) / v->group) : 1;
    int64_t Np = rup(N, 16), Kp = rup(K, 64), NT = Np / 16, KC = Kp / 64;

    /* act-order: sort columns by group (stable); a g_idx holding -1 means column order */
    int column_order = v->g_idx == NULL || v->group <= 0;
    for (int64_t k = 0; !column_order && k < K; k++)
        if (v->g_idx[k] == -1) column_order = 1;
    if (!column_order)
        for (int64_t k = 0; k < K; k++)
            if (v->g_idx[k] < 0 || v->g_idx[k] >= G)
                return vsr_err_set(err, VSR_E_FORMAT, "cuda:%d: %s: weight_g_idx[%lld] = %d is outside [0, %d)", c->device,
                                   nm, (long long)k, v->g_idx[k], G);
    int32_t *perm = NULL, *grp = (int32_t *)calloc((size_t)(Kp / 16 + Kp), sizeof(int32_t));
    if (!grp) return vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory", nm);
    int32_t *kgrp = grp, *colgrp = grp + Kp / 16;
    if (!column_order) {
        perm = (int32_t *)malloc(sizeof(int32_t) * (size_t)Kp);
        int64_t *cnt = (int64_t *)calloc((size_t)G + 1, sizeof(int64_t));
        if (!perm || !cnt) {
            free(perm), free(cnt), free(grp);
            return vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory", nm);
        }
        for (int64_t k = 0; k < K; k++) cnt[v->g_idx[k] + 1]++;
        for (int g = 0; g < G; g++) cnt[g + 1] += cnt[g];
        for (int64_t k = 0; k < K; k++) perm[cnt[v->g_idx[k]]++] = (int32_t)k; /* counting sort: stable */
        for (int64_t k = K; k < Kp; k++) perm[k] = -1;
        free(cnt);
    }
    int fused_ok = 1;
    for (int64_t kp = 0; kp < Kp; kp++) {
        int64_t k = perm ? perm[kp] : (kp < K ? kp : -1);
        int32_t g = k < 0 ? (kp > 0 ? colgrp[kp - 1] : 0) : (v->group > 0 ? (column_order ? (int32_t)(k / v->group) : v->g_idx[k]) : 0);
        colgrp[kp] = g;
        if (kp % 16 == 0) kgrp[kp / 16] = g;
        else if (k >= 0 && kgrp[kp / 16] != g) fused_ok = 0;
    }

    /* chunk groups by arithmetic: channel-wise, or groups of a multiple of 64 columns laid out in order
     * (column order, or act-order whose sorted groups all hold `group` columns) */
    int gchunks = 0;
    if (v->group <= 0)
        gchunks = (int)KC;
    else if (v->group % 64 == 0) {
        int regular = 1;
        for (int64_t kp = 0; regular && kp < K; kp++) regular = colgrp[kp] == (int32_t)(kp / v->group);
        if (regular) gchunks = v->group / 64;
    }
    quant_wmeta *m = (quant_wmeta *)calloc(1, sizeof *m);
    void *d_packed = NULL, *d_scale = NULL, *d_zp = NULL;
    vsr_status st = VSR_OK;
    if (!m) st = vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory", nm);
    size_t zp_bytes = v->zp ? sizeof(uint32_t) * (size_t)((N + 7) / 8) * (size_t)G : 0;
    size_t wq_bytes = (size_t)(Np * Kp / 2), sz_bytes = sizeof(uint32_t) * (size_t)G * (size_t)Np;
    size_t grp_bytes = sizeof(int32_t) * (size_t)(Kp / 16 + Kp), perm_bytes = perm ? sizeof(int32_t) * (size_t)Kp : 0;
    if (!st) st = cuda_upload_bytes(c, v->w, (size_t)(N * (K / 8)) * 4, nm, &d_packed, err);
    if (!st) st = cuda_upload_bytes(c, v->scale, sizeof(uint16_t) * (size_t)N * (size_t)G, nm, &d_scale, err);
    if (!st && v->zp) st = cuda_upload_bytes(c, v->zp, zp_bytes, nm, &d_zp, err);
    if (!st && perm) st = cuda_upload_bytes(c, perm, perm_bytes, nm, (void **)&b->g_idx, err);
    if (!st) st = cuda_upload_bytes(c, grp, grp_bytes, nm, &m->dev, err);
    if (!st) st = cuda_check(c, cudaMalloc(&b->w, wq_bytes), "int4 tiles: cudaMalloc", err);
    if (!st) st = cuda_check(c, cudaMalloc(&b->scale, sz_bytes), "int4 scales: cudaMalloc", err);
    if (!st) {
        k_i4_repack<<<nblocks(NT * KC * 32, 256), 256, 0, c->stream>>>((const uint32_t *)d_packed, N, K, b->g_idx, NT, KC,
                                                                       (uint4 *)b->w);
        st = cuda_check_launch(c, "int4 repack", err);
    }
    if (!st) {
        k_i4_scales<<<nblocks((int64_t)G * Np, 256), 256, 0, c->stream>>>((const uint16_t *)d_scale, (const uint32_t *)d_zp,
                                                                          N, G, Np, (uint32_t *)b->scale);
        st = cuda_check_launch(c, "int4 scales", err);
    }
    if (!st) st = cuda_check(c, cudaStreamSynchronize(c->stream), "int4 upload: synchronize", err);
    cudaFree(d_packed), cudaFree(d_scale), cudaFree(d_zp);
    free(perm), free(grp);
    if (st) {
        if (st != VSR_E_NOMEM) vsr_err_prefix(err, "%s", nm);
        cudaFree(b->w), cudaFree(b->scale), cudaFree(b->g_idx);
        b->w = b->scale = NULL, b->g_idx = NULL;
        if (m) cudaFree(m->dev);
        free(m);
        return st;
    }
    m->Np = Np, m->Kp = Kp, m->G = G, m->fused_ok = fused_ok, m->gchunks = gchunks;
    b->q = m;
    b->zp = NULL; /* folded into b->scale */
    b->bytes = wq_bytes + sz_bytes + grp_bytes + perm_bytes;
    return VSR_OK;
}

/* The configuration each key resolved to in this ctx (the key names the kernel family, shape and token bucket: all
 * its candidate list depends on), so that later calls skip rebuilding the list. At 17-256 rows the list holds up to
 * ~200 named configurations, tens of microseconds of host time a call: more than a small linear's kernel (kv_proj at
 * 64 rows, ~15 us), whose launches it then paced outside CUDA graphs. src: "timed", "cache" or "default" (static). */
struct i4_memo {
    char key[96];
    int pc; /* and whether the weight's group is computable per chunk (the lists' shared memory differs) */
    i4_cfg cfg;
    char name[32];
    const char *src;
};
static const i4_memo *i4_memo_find(const quant_state *q, const char *key, int pc) {
    for (int i = 0; i < q->n_i4memo; i++)
        if (q->i4memo[i].pc == pc && strcmp(q->i4memo[i].key, key) == 0) return &q->i4memo[i];
    return NULL;
}
static vsr_status i4_memo_add(cuda_ctx *c, quant_state *q, const char *key, int pc, i4_cfg cfg, const char *name,
                              const char *src, vsr_err *err) {
    if (q->n_i4memo == q->cap_i4memo) {
        const int cap = q->cap_i4memo ? 2 * q->cap_i4memo : 32;
        i4_memo *t = (i4_memo *)realloc(q->i4memo, sizeof *t * (size_t)cap);
        if (!t) return vsr_err_set(err, VSR_E_NOMEM, "cuda:%d: out of memory (int4 configurations)", c->device);
        q->i4memo = t, q->cap_i4memo = cap;
    }
    i4_memo *e = &q->i4memo[q->n_i4memo++];
    snprintf(e->key, sizeof e->key, "%s", key);
    snprintf(e->name, sizeof e->name, "%s", name);
    e->pc = pc, e->cfg = cfg, e->src = src;
    return VSR_OK;
}

/* y (+)= x W^T from FP32 x (xb NULL) or BF16 xb (x NULL), both [M, K] on the device. */
static vsr_status i4_linear_any(cuda_ctx *c, const float *x, const __nv_bfloat16 *xb, int64_t M, const vsr_bweight *w,
                                float *y, int accumulate, vsr_err *err) {
    if (M <= 0) return VSR_OK;
    const quant_wmeta *m = (const quant_wmeta *)w->q;
    if (!m) return vsr_err_set(err, VSR_E_INTERNAL, "cuda:%d: %s: int4 weight was not uploaded", c->device, w->name);
    quant_state *q;
    vsr_status st = quant_state_get(c, &q, err);
    if (st) return st;
    int64_t N = w->v.N, K = w->v.K, Kp = m->Kp, Np = m->Np, KC = Kp / 64;
    int forced = quant_forced_int4_path();
    int fused = forced == 1 || (forced == 0 && quant_dtype_auto(c) && M <= I4_MAX_FUSED_ROWS);
    if (fused && (M > I4_MAX_FUSED_ROWS || !m->fused_ok)) {
        if (forced == 1)
            return vsr_err_set(err, VSR_E_UNSUPPORTED, "cuda:%d: %s: the fused int4 kernel takes at most %d rows and "
                               "16-column blocks inside one group (M %lld, group %d)", c->device, w->name,
                               I4_MAX_FUSED_ROWS, (long long)M, w->v.group);
        fused = 0;
    }
    /* the streaming kernel (kind 2) at <= 16 rows, groups computable per chunk; VSR_CUDA_INT4_STREAM=0 or
     * cuda_quant_force_int4_stream(0) keeps the previous fused kernels (their own candidate list and key) */
    const int stream = fused && M <= 16 && m->gchunks > 0 && quant_int4_stream_on();
    /* the bulk-copy kernel (kind 5, sixth pass): capability 9.0+ (cp.async.bulk, mbarrier transactions) */
    const int bulk = stream && c->cc_major >= 9 && quant_int4_bulk_on();
    /* the tensor-core tile kernel (kind 7) at 17-256 rows, any groups the fused kernels take */
    const int mma = fused && M > 16 && quant_int4_mma_on();
    if (fused && !stream && !mma && !x) { /* the previous fused kernels read FP32: widen (exact) */
        if ((st = quant_grow(c, &q->wtmp, &q->wtmp_bytes, sizeof(float) * (size_t)(M * K), "int4 FP32 activations", err)))
            return st;
        k_i4_widen<<<nblocks(M * K, 256), 256, 0, c->stream>>>(xb, M * K, (float *)q->wtmp);
        if ((st = cuda_check_launch(c, "int4 widen", err))) return st;
        x = (const float *)q->wtmp;
    }
    if (fused) {
        int64_t Mt = (M + 7) / 8;
        i4_run r; /* the candidate arrays (~16 KB) are written by the list builders only when a list is built */
        r.w = w, r.m = m, r.x = x, r.xb = NULL, r.ldx = 0, r.kvalid = 0, r.M = M, r.Mt = Mt, r.n = 0;
        int64_t bucket = 1;
        while (bucket < Mt) bucket *= 2;
        char key[96];
        if (stream || mma) {
            /* BF16 rows in permuted order: the caller's in place when they are (no act-order, 16-byte
             * aligned), else one staging pass (FP32 -> BF16, or a BF16 gather) into [M, Kp] */
            if (xb && !w->g_idx && ((uintptr_t)xb & 15) == 0) {
                r.xb = xb, r.ldx = K, r.kvalid = K;
            } else {
                if ((st = quant_grow(c, &q->act, &q->act_bytes, sizeof(__nv_bfloat16) * (size_t)(M * Kp),
                                     "int4 activations", err)))
                    return st;
                if (x)
                    k_i4_stage_rows<<<nblocks(M * Kp, 256), 256, 0, c->stream>>>(x, M, K, w->g_idx, Kp,
                                                                                (__nv_bfloat16 *)q->act);
                else
                    k_i4_gather_bf16<<<nblocks(M * Kp, 256), 256, 0, c->stream>>>(xb, M, K, w->g_idx, Kp,
                                                                                  (__nv_bfloat16 *)q->act);
                if ((st = cuda_check_launch(c, "int4 stage rows", err))) return st;
                r.xb = (const __nv_bfloat16 *)q->act, r.ldx = Kp, r.kvalid = Kp;
            }
            /* "-v3s": the streaming kernel's list (kinds 0 and 1 keep "-v2"); "-b6": the bulk-copy kernel's; "-m9":
             * the tensor-core tile kernel's, "-m10" with the wgmma kernel's listed after it (the removed kernels'
             * "-v4" and "-p5" entries are never asked for) */
            /* above 64 rows the tile kernels' choice is timed and kept per 16 rows ("-r112": 97-112 rows): every
             * listed block height (BT, 8 WM) is a multiple of 16 tokens, so its count of token blocks is the same for
             * every M of the range, and a choice timed at 96 rows (BT 96, one block) is never replayed at 100 (two) */
            char rr[24] = "";
            if (mma && Mt > 8) snprintf(rr, sizeof rr, "-r%lld", (long long)((M + 15) / 16 * 16));
            snprintf(key, sizeof key, "n%lld-k%lld-g%d-t%lld%s-%s", (long long)N, (long long)K, w->v.group,
                     (long long)bucket, rr, mma ? (i4_wg_listed(c) ? "m10" : "m9")
                     : bulk ? "b6" : "v3s");
        } else {
            /* "-v2": the second pass's candidate list (a cache from the first pass is not reused) */
            snprintf(key, sizeof key, "n%lld-k%lld-g%d-t%lld-v2", (long long)N, (long long)K, w->v.group,
                     (long long)bucket);
        }
        int fc = quant_forced_int4_cfg();
        const i4_memo *mo = fc < 0 ? i4_memo_find(q, key, m->gchunks > 0) : NULL;
        if (mo) { /* this key resolved before in this ctx: no list to build */
            quant_set_last_path("int4:fused(%s,src=%s)", mo->name, mo->src);
            return i4_launch_y(c, &r, mo->cfg, y, accumulate, err);
        }
        if (!(stream || mma))
            i4_candidates(c, &r, bucket);
        else if (mma)
            i4_candidates_mma(c, &r, bucket);
        else if (bulk)
            i4_candidates_bulk(c, &r, bucket);
        else
            i4_candidates_stream(c, &r, bucket);
        if (r.n == 0)
            return vsr_err_set(err, VSR_E_INTERNAL, "cuda:%d: %s: no %s int4 configuration fits (N %lld K %lld)",
                               c->device, w->name, mma ? "tensor-core tile" : stream ? "streaming" : "fused",
                               (long long)N, (long long)K);
        int choice = 0;
        const char *src = "default";
        if (fc >= 0) {
            if (fc >= r.n)
                return vsr_err_set(err, VSR_E_INVALID, "cuda:%d: %s: no int4 fused candidate %d (the list for %s has %d)",
                                   c->device, w->name, fc, key, r.n);
            choice = fc, src = "forced";
        } else if ((st = autotune_choose(c, "int4_fused", key, r.n, r.name_ptr,
                                         mma      ? i4_default_mma(c, &r)
                                         : bulk   ? i4_default_bulk(c, &r)
                                         : stream ? i4_default_stream(c, &r)
                                                  : i4_default(c, &r),
                                         i4_tune_launch, &r,
                                         sizeof(float) * (size_t)(r.M * r.w->v.N), &choice, &src, err)))
            return st;
        i4_cfg cfg = r.cand[choice];
        quant_set_last_path("int4:fused(%s,src=%s)", r.names[choice], src);
        /* remembered as the autotune remembers it: not a forced choice, nor one made inside a graph capture */
        if (fc < 0 && strcmp(src, "default(capturing)") != 0 &&
            (st = i4_memo_add(c, q, key, m->gchunks > 0, cfg, r.names[choice], src, err)))
            return st;
        return i4_launch_y(c, &r, cfg, y, accumulate, err);
    }
    /* unpack once per call, then BF16 cuBLASLt */
    size_t xb_bytes = sizeof(__nv_bfloat16) * (size_t)(M * Kp), wb_bytes = sizeof(__nv_bfloat16) * (size_t)(N * Kp);
    if ((st = quant_grow(c, &q->act, &q->act_bytes, xb_bytes, "int4 activations", err)) ||
        (st = quant_grow(c, &q->wtmp, &q->wtmp_bytes, wb_bytes, "int4 unpacked weight", err)))
        return st;
    if (x)
        k_i4_stage_rows<<<nblocks(M * Kp, 256), 256, 0, c->stream>>>(x, M, K, w->g_idx, Kp, (__nv_bfloat16 *)q->act);
    else
        k_i4_gather_bf16<<<nblocks(M * Kp, 256), 256, 0, c->stream>>>(xb, M, K, w->g_idx, Kp, (__nv_bfloat16 *)q->act);
    if ((st = cuda_check_launch(c, "int4 stage rows", err))) return st;
    k_i4_unpack16<<<nblocks(Np / 16 * KC, 8), 256, 0, c->stream>>>(
        (const uint4 *)w->w, (const uint32_t *)w->scale, (const int32_t *)m->dev + Kp / 16, N, Np, KC,
        (__nv_bfloat16 *)q->wtmp);
    if ((st = cuda_check_launch(c, "int4 unpack", err))) return st;
    quant_set_last_path("int4:unpack+bf16");
    return cuda_gemm_bf16(c, (const __nv_bfloat16 *)q->act, M, (const __nv_bfloat16 *)q->wtmp, N, Kp, y, accumulate, err);
}

/* FP32 activations: the streaming and tensor-core tile kernels get them rounded to BF16 (and permuted) by one
 * staging pass (k_i4_stage_rows) and then run exactly as from cuda_int4_linear_bf16; kinds 0 and 1 read FP32
 * as before (they would otherwise widen BF16 back). */
extern "C" vsr_status cuda_int4_linear(cuda_ctx *c, const float *x, int64_t M, const vsr_bweight *w, float *y,
                                       int accumulate, vsr_err *err) {
    return i4_linear_any(c, x, NULL, M, w, y, accumulate, err);
}

/* BF16 activations [M, K] (row stride K): read in place by the streaming and tensor-core tile kernels when
 * 16-byte aligned and not act-order; gathered into [M, Kp] otherwise; widened to FP32 for kinds 0 and 1 (1-16
 * rows with groups not computable per chunk, or a kernel switched off); gathered to BF16 rows for the unpack path. */
extern "C" vsr_status cuda_int4_linear_bf16(cuda_ctx *c, const __nv_bfloat16 *xb, int64_t M, const vsr_bweight *w,
                                            float *y, int accumulate, vsr_err *err) {
    return i4_linear_any(c, NULL, xb, M, w, y, accumulate, err);
}

extern "C" vsr_status cuda_quant_int4_linear_bf16(void *ctx, const void *xb, int64_t M, const struct vsr_bweight *w,
                                                  float *y, int accumulate, vsr_err *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    if (!c) return vsr_err_set(err, VSR_E_INVALID, "cuda: no backend context");
    return cuda_int4_linear_bf16(c, (const __nv_bfloat16 *)xb, M, w, y, accumulate, err);
}
