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
 * Above 256 rows on capability 9.0 (eighteenth session): the wide list, kind 8 over token blocks of BT >= 128 rows and
 * the unpack path below as one more candidate ("unpack", kind 11), timed per shape and 128 rows (i4_candidates_wide).
 * Otherwise: unpack to BF16 [N, Kp] once per call into a workspace (k_i4_unpack16, 16-byte stores)
 * and use cuBLASLt (linear.cu).
 * Files: this one holds the upload (repacking), the activation staging, the unpack path, the candidate lists,
 * defaults and autotune keys, the launches and the hooks; the kernels of kinds 2 and 5 are in int4_stream.cu, of
 * kinds 0, 1, 7 and 8 in int4_tile.cu, what they share in int4_kernels.cuh.
 * Floor and target: bench/RESULTS.md, "int4 linears". Test: tests/test_cuda_quant.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h> /* CUtensorMap (the wgmma kernel's TMA descriptor) only: no libcuda link */
#include <cuda_bf16.h>

#define VSR_QUANT_INTERNAL_CUDA 1
#include "backend/cuda/fp8_gemm.h" /* tma_encode_2d_sw128 */
#include "backend/cuda/quant_internal.h"
#include "backend/cuda/ptx.cuh"
#include "backend/cuda/int4_kernels.cuh" /* the kernels (int4_stream.cu, int4_tile.cu) and their tables */

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

/* the wide list above 256 rows (eighteenth session; capability 9.0 under --dtype auto): the wgmma kernel at BT >= 128
 * tokens, its decode fused into the products, against the unpack path as one more candidate (i4_candidates_wide).
 * On by default since its first run (H100, twentieth session: the whole 27B-shape int4 forward at 1 x 512 in 62.3 ms
 * against 72.2 with the unpack path alone, bench/NOTES.md); VSR_CUDA_INT4_WIDE=0 (read once) or
 * cuda_quant_force_int4_wide(0) keep the unpack path alone */
CUDA_ENV_KNOB(static, quant_int4_wide_on, cuda_quant_force_int4_wide, "VSR_CUDA_INT4_WIDE", 1)


/* ---- upload-time repacking ---- */


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
 * pass's persistent configurations); kind 7: k_i4_mma (mt = WM, w = NN warps along N, u = WN, d = its I4M_TAB entry);
 * kind 8: k_i4_wg (mt = BT / 8, w = its n-tiles a block, d = its I4G_TAB entry); kind 11: the unpack candidate of the wide
 * list (unpack to BF16, then cuBLASLt: the path every row count above 256 took before the wide list). */

typedef struct i4_cfg {
    int kind, mt, w, ks, u; /* u: kind 1's chunks per register group; kinds 2 and 5: n-tiles per warp (TN) */
    int d;                  /* kind 2: ring slots per warp; kind 5: the entry of I4B_TAB */
} i4_cfg;



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
static unsigned g_i4m_attr[I4M_N][2];
static int g_i4m_static[I4M_N][2];
static size_t i4m_smem(const quant_wmeta *m, int ti) {
    return (size_t)I4M_TAB[ti].s * i4m_stage(I4M_TAB[ti].wm, I4M_TAB[ti].wn, I4M_TAB[ti].nn, m->gchunks > 0 ? 1 : 4);
}

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

/* room for every list: kinds 0-1 at most 60, kind 2 40, kind 5 48, kinds 7 and 8 (I4M_N + I4G_N) x 8 splits (264), the
 * wide list (kind 8 at BT >= 128 x 4 splits, and the unpack candidate);
 * a list that outgrew it would be cut short, so the check below keeps theirs within it */
#define I4_MAX_CAND 288
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
    if (cfg.kind == 11) return 1; /* the unpack candidate: no grid of its own */
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

/* the unpack path over staged rows (the wide list's kind 11): W unpacked to BF16 [N, Kp] into q->wtmp, then BF16 cuBLASLt
 * over r->xb ([M, Kp]; rows read in place with ldx K < Kp are gathered to Kp first), y (+)= the product */
static vsr_status i4_unpack_gemm(cuda_ctx *c, quant_state *q, const i4_run *r, float *y, int accumulate, vsr_err *err) {
    const vsr_bweight *w = r->w;
    const quant_wmeta *m = r->m;
    const int64_t M = r->M, N = w->v.N, K = w->v.K, Np = m->Np, Kp = m->Kp, KC = Kp / 64;
    vsr_status st;
    const __nv_bfloat16 *xa = r->xb;
    if (r->ldx != Kp) { /* in place (no act-order), K not a multiple of 64: q->act is free */
        if ((st = quant_grow(c, &q->act, &q->act_bytes, sizeof(__nv_bfloat16) * (size_t)(M * Kp), "int4 activations", err)))
            return st;
        k_i4_gather_bf16<<<nblocks(M * Kp, 256), 256, 0, c->stream>>>(r->xb, M, K, NULL, Kp, (__nv_bfloat16 *)q->act);
        if ((st = cuda_check_launch(c, "int4 stage rows", err))) return st;
        xa = (const __nv_bfloat16 *)q->act;
    }
    if ((st = quant_grow(c, &q->wtmp, &q->wtmp_bytes, sizeof(__nv_bfloat16) * (size_t)(N * Kp), "int4 unpacked weight", err)))
        return st;
    k_i4_unpack16<<<nblocks(Np / 16 * KC, 8), 256, 0, c->stream>>>(
        (const uint4 *)w->w, (const uint32_t *)w->scale, (const int32_t *)m->dev + Kp / 16, N, Np, KC,
        (__nv_bfloat16 *)q->wtmp);
    if ((st = cuda_check_launch(c, "int4 unpack", err))) return st;
    return cuda_gemm_bf16(c, xa, M, (const __nv_bfloat16 *)q->wtmp, N, Kp, y, accumulate, err);
}

static vsr_status i4_launch(cuda_ctx *c, const i4_run *r, i4_cfg cfg, float *y, int accumulate, vsr_err *err) {
    quant_state *q;
    vsr_status st = quant_state_get(c, &q, err);
    if (st) return st;
    if (cfg.kind == 11) return i4_unpack_gemm(c, q, r, y, accumulate, err); /* the wide list's unpack candidate */
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
        if (ti < 0 || ti >= I4G_N || I4G_TAB[ti].bt != cfg.mt * 8 || !r->xb ||
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
    /* kind 11 (cuBLASLt) adds into y itself, and its unpacked weight is the scratch buffer */
    if (!accumulate || r->M <= 16 || cfg.kind == 11 || !quant_int4_acc_sep_on()) return i4_launch(c, r, cfg, y, accumulate, err);
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
    for (size_t ti = 0; ti < (size_t)I4T_N; ti++) {
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

/* kind 8's entry ti at `rows` rows into r's list: splits KSL[0..nks) (no split empty, >= 2 chunks each, the partials
 * within I4_WS_CAP_FLOATS) until the grid has per_sm blocks per multiprocessor, while the list holds fewer than cap;
 * false once it is full */
static bool i4_add_wg(cuda_ctx *c, i4_run *r, int ti, int64_t rows, const int *KSL, size_t nks, int per_sm, int cap) {
    const quant_wmeta *m = r->m;
    const int64_t NT = m->Np / 16, KC = m->Kp / 64, N = r->w->v.N;
    const int bt = I4G_TAB[ti].bt, nb = I4G_TAB[ti].nwg * 4; /* tokens, n-tiles a block */
    const int64_t blocks1 = (NT + nb - 1) / nb * ((rows + bt - 1) / bt);
    for (size_t b = 0; b < nks; b++) {
        const int ks = KSL[b];
        const int64_t per = (KC + ks - 1) / ks;
        if (ks > 1 && ((ks - 1) * per >= KC || per < 2)) break;
        if (ks > 1 && (int64_t)ks * rows * N > I4_WS_CAP_FLOATS) break;
        if (b > 0 && blocks1 * KSL[b - 1] >= per_sm * (int64_t)c->sm_count) break;
        if (r->n >= cap) return false;
        r->cand[r->n] = (i4_cfg){8, bt / 8, nb, ks, 1, ti};
        snprintf(r->names[r->n], sizeof r->names[0], "g-bt%d-wg%d-s%d%s-ks%d", bt, I4G_TAB[ti].nwg, I4G_TAB[ti].s,
                 I4G_TAB[ti].rs ? "r" : "", ks);
        r->name_ptr[r->n] = r->names[r->n];
        r->n++;
    }
    return true;
}

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
        const int mt = I4G_TAB[ti].bt / 8; /* token tiles */
        if (mt > bucket || 4 * mt < bucket) continue;
        const int pc = m->gchunks > 0;
        if (i4g_smem(m, ti) > i4_kern_maxdyn(c, (const void *)I4G_TAB[ti].k[pc], &g_i4g_static[ti][pc])) continue;
        if (!i4_add_wg(c, r, ti, bucket * 8, KSL, sizeof KSL / sizeof KSL[0], 4, I4_MAX_CAND)) return;
    }
}

/* the wide list above 256 rows (capability 9.0): kind 8's entries of BT >= 128 tokens, each with splits 1, 2, 3, 4 (no
 * split empty, >= 2 chunks each, the partials within I4_WS_CAP_FLOATS) until the grid has 2 blocks per multiprocessor,
 * then the unpack path as one more candidate (kind 11, "unpack"), so the tuner keeps it where it is faster. Depends on
 * the key's rows (M rounded up to 128) and the shape only. */
static void i4_candidates_wide(cuda_ctx *c, i4_run *r, int64_t rows) {
    static const int KSL[] = {1, 2, 3, 4};
    const quant_wmeta *m = r->m;
    r->n = 0;
    for (int ti = 0; ti < I4G_N; ti++) {
        const int pc = m->gchunks > 0;
        if (I4G_TAB[ti].bt < 128) continue;
        if (i4g_smem(m, ti) > i4_kern_maxdyn(c, (const void *)I4G_TAB[ti].k[pc], &g_i4g_static[ti][pc])) continue;
        i4_add_wg(c, r, ti, rows, KSL, sizeof KSL / sizeof KSL[0], 2, I4_MAX_CAND - 1); /* room for "unpack" */
    }
    r->cand[r->n] = (i4_cfg){11, 0, 0, 1, 0, 0};
    snprintf(r->names[r->n], sizeof r->names[0], "unpack");
    r->name_ptr[r->n] = r->names[r->n];
    r->n++;
}

/* the wide list's default (a forward being captured, or the tuner off): I4W_DEFAULT's configuration up to
 * I4W_FUSED_MAX_ROWS rows, else (or where it is not listed) the unpack candidate, the list's last. From the tuner's
 * choices on the H100 (bench/NOTES.md, twentieth session): at 512 rows the RS form on 128 tokens with one warpgroup
 * and three stages won on gate_up, down and o_proj (191 / 212 / 74 us; unpack 209 / ... ; the SS form on 256 tokens
 * with two warpgroups 216 / 255 / 94); at 4,096 rows unpack won on all three (1,005 against 1,344 us at gate_up). */
#define I4W_FUSED_MAX_ROWS 512
static const struct {
    int bt, nwg, s, rs, ks;
} I4W_DEFAULT = {128, 1, 3, 1, 1};
static int i4_default_wide(const i4_run *r) {
    if (r->M > I4W_FUSED_MAX_ROWS) return r->n - 1;
    for (int i = 0; i < r->n; i++) {
        const i4_cfg *g = &r->cand[i];
        if (g->kind == 8 && I4G_TAB[g->d].bt == I4W_DEFAULT.bt && I4G_TAB[g->d].nwg == I4W_DEFAULT.nwg &&
            I4G_TAB[g->d].s == I4W_DEFAULT.s && I4G_TAB[g->d].rs == I4W_DEFAULT.rs && g->ks == I4W_DEFAULT.ks)
            return i;
    }
    return r->n - 1;
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

/* the path a fused or wide choice reports (cuda_quant_last_path): the unpack candidate as the unpack path */
static void i4_set_path(i4_cfg cfg, const char *name, const char *src) {
    if (cfg.kind == 11)
        quant_set_last_path("int4:unpack+bf16(src=%s)", src);
    else
        quant_set_last_path("int4:fused(%s,src=%s)", name, src);
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
    /* the wide list above 256 rows (capability 9.0, --dtype auto, 16-column blocks inside one group): kind 8 fused, or
     * the unpack path, whichever the tuner keeps */
    const int wide = !fused && forced == 0 && quant_dtype_auto(c) && M > I4_MAX_FUSED_ROWS && m->fused_ok &&
                     i4_wg_listed(c) && quant_int4_wide_on();
    if (fused && !stream && !mma && !x) { /* the previous fused kernels read FP32: widen (exact) */
        if ((st = quant_grow(c, &q->wtmp, &q->wtmp_bytes, sizeof(float) * (size_t)(M * K), "int4 FP32 activations", err)))
            return st;
        k_i4_widen<<<nblocks(M * K, 256), 256, 0, c->stream>>>(xb, M * K, (float *)q->wtmp);
        if ((st = cuda_check_launch(c, "int4 widen", err))) return st;
        x = (const float *)q->wtmp;
    }
    if (fused || wide) {
        int64_t Mt = (M + 7) / 8;
        i4_run r; /* the candidate arrays (~16 KB) are written by the list builders only when a list is built */
        r.w = w, r.m = m, r.x = x, r.xb = NULL, r.ldx = 0, r.kvalid = 0, r.M = M, r.Mt = Mt, r.n = 0;
        int64_t bucket = 1;
        while (bucket < Mt) bucket *= 2;
        char key[96];
        if (stream || mma || wide) {
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
            /* the wide list: kept per 128 rows ("-r512-w18": 385-512 rows), timed at the range's top */
            if (wide) snprintf(rr, sizeof rr, "-r%lld", (long long)((M + 127) / 128 * 128));
            snprintf(key, sizeof key, "n%lld-k%lld-g%d-t%lld%s-%s", (long long)N, (long long)K, w->v.group,
                     (long long)(wide ? 0 : bucket), rr, wide ? "w18" : mma ? (i4_wg_listed(c) ? "m10" : "m9")
                     : bulk ? "b6" : "v3s");
        } else {
            /* "-v2": the second pass's candidate list (a cache from the first pass is not reused) */
            snprintf(key, sizeof key, "n%lld-k%lld-g%d-t%lld-v2", (long long)N, (long long)K, w->v.group,
                     (long long)bucket);
        }
        int fc = quant_forced_int4_cfg();
        const i4_memo *mo = fc < 0 ? i4_memo_find(q, key, m->gchunks > 0) : NULL;
        if (mo) { /* this key resolved before in this ctx: no list to build */
            i4_set_path(mo->cfg, mo->name, mo->src);
            return i4_launch_y(c, &r, mo->cfg, y, accumulate, err);
        }
        if (wide)
            i4_candidates_wide(c, &r, (M + 127) / 128 * 128);
        else if (!(stream || mma))
            i4_candidates(c, &r, bucket);
        else if (mma)
            i4_candidates_mma(c, &r, bucket);
        else if (bulk)
            i4_candidates_bulk(c, &r, bucket);
        else
            i4_candidates_stream(c, &r, bucket);
        if (r.n == 0)
            return vsr_err_set(err, VSR_E_INTERNAL, "cuda:%d: %s: no %s int4 configuration fits (N %lld K %lld)",
                               c->device, w->name, wide ? "wide" : mma ? "tensor-core tile" : stream ? "streaming" : "fused",
                               (long long)N, (long long)K);
        int choice = 0;
        const char *src = "default";
        if (fc >= 0) {
            if (fc >= r.n)
                return vsr_err_set(err, VSR_E_INVALID, "cuda:%d: %s: no int4 fused candidate %d (the list for %s has %d)",
                                   c->device, w->name, fc, key, r.n);
            choice = fc, src = "forced";
        } else if ((st = autotune_choose(c, "int4_fused", key, r.n, r.name_ptr,
                                         wide     ? i4_default_wide(&r)
                                         : mma    ? i4_default_mma(c, &r)
                                         : bulk   ? i4_default_bulk(c, &r)
                                         : stream ? i4_default_stream(c, &r)
                                                  : i4_default(c, &r),
                                         i4_tune_launch, &r,
                                         sizeof(float) * (size_t)(r.M * r.w->v.N), &choice, &src, err)))
            return st;
        i4_cfg cfg = r.cand[choice];
        i4_set_path(cfg, r.names[choice], src);
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
