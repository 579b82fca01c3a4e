/* src/backend/cuda/int4_tile.cu: the int4 W4A16 tile kernels, y[M, N] (+)= x[M, K] . dequant(W)^T for up to
 * 256 rows (k_i4_wg at any row count: above 256 rows in the wide list), the packed weights in mma.m16n8k16
 * A-fragment order (quant_int4.cu repacks them at upload):
 *   k_i4_fused  (kind 0) staged BF16 fragments, the block's warps split K and reduce in shared memory
 *   k_i4_shared (kind 1) activations converted straight into shared memory, one 16-row tile per warp
 *   k_i4_mma    (kind 7, 17-256 rows) blocks of NN x WN n-tiles and WM x 8 tokens, a cp.async pipeline of packed
 *               tiles, swizzled BF16 activation rows (ldmatrix), each tile decoded once per chunk for all tokens
 *   k_i4_wg     (kind 8, 17-256 rows, capability 9.0, sm_90a) wgmma with the decoded weights as A and the tokens as
 *               N, fed by TMA from one producer warp; RS (A in registers) the default at 33-256 rows
 * and the configuration tables the tuner lists (I4M_TAB, I4G_TAB, kinds 0-1's). Which kernel runs, with which
 * configuration, is quant_int4.cu's (the candidate lists, defaults and autotune keys).
 *
 * Floor: max(packed weights and scales read / 4.19 TB/s, 2 M N K / the BF16 tensor-core peak: mma.sync ~600-660
 * TFLOP/s, wgmma 774) (bench/RESULTS.md, "int4 linears"; gate_up at 128 rows: 34.5 us). Test:
 * tests/test_cuda_quant.c (every listed configuration against the CPU dequantized reference, bit-identical
 * reruns, split-K and adding into y). */
#include "backend/cuda/int4_kernels.cuh"

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

/* ---- the configurations of these kernels that the tuner lists (quant_int4.cu) ---- */

i4_kern i4_kernel_for(int mt, int w) {
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

i4s_kern i4s_kernel_for(int mt, int nw, int u) {
    for (size_t i = 0; i < sizeof I4S_TAB / sizeof I4S_TAB[0]; i++)
        if (I4S_TAB[i].mt == mt && I4S_TAB[i].nw == nw && I4S_TAB[i].u == u) return I4S_TAB[i].k;
    return NULL;
}

/* kind 7, the tensor-core tile kernel (17-256 rows): WM token tiles of 8, WN n-tiles per warp, NW warps, S
 * pipeline stages (shared memory S * i4m_stage: 34-100 KB) */
#define I4M_K(wm, wn, nn, kw, s) wm, wn, nn, kw, s, {k_i4_mma<wm, wn, nn, kw, s, false>, k_i4_mma<wm, wn, nn, kw, s, true>}
const i4m_ent I4M_TAB[] = {
    {I4M_K(4, 1, 4, 1, 8)}, {I4M_K(4, 2, 4, 1, 8)}, {I4M_K(4, 2, 4, 1, 4)}, {I4M_K(8, 1, 4, 1, 6)},
    {I4M_K(8, 2, 4, 1, 6)}, {I4M_K(8, 2, 4, 1, 4)}, {I4M_K(16, 1, 4, 1, 4)}, {I4M_K(4, 1, 4, 2, 8)},
    {I4M_K(8, 1, 4, 2, 6)}, {I4M_K(8, 2, 4, 2, 4)},
};
#undef I4M_K
static_assert(sizeof I4M_TAB / sizeof I4M_TAB[0] == I4M_N, "I4M_N (int4_kernels.cuh) counts I4M_TAB");

/* kind 8, the wgmma kernel (17-256 rows, and above 256 rows in the wide list; capability 9.0): BT tokens, NWG
 * warpgroups of 64 output rows, S stages (shared memory i4g_smem_bytes: 43-185 KB); rs: A in registers (the RS form: no A buffers, so 2-4 blocks a
 * multiprocessor), else the SS form */
#define I4G_K(bt, nwg, s, rs) bt, nwg, s, rs, {k_i4_wg<bt, nwg, s, false, rs>, k_i4_wg<bt, nwg, s, true, rs>}
const i4g_ent I4G_TAB[] = {
    {I4G_K(32, 1, 8, 0)},  {I4G_K(64, 1, 8, 0)},  {I4G_K(64, 2, 5, 0)},  {I4G_K(128, 1, 4, 0)}, {I4G_K(128, 2, 4, 0)},
    {I4G_K(256, 1, 4, 0)}, {I4G_K(256, 2, 3, 0)}, {I4G_K(32, 1, 6, 1)},  {I4G_K(64, 1, 4, 1)},  {I4G_K(64, 2, 4, 1)},
    {I4G_K(128, 1, 3, 1)}, {I4G_K(128, 1, 4, 1)}, {I4G_K(128, 2, 3, 1)}, {I4G_K(256, 1, 3, 1)}, {I4G_K(64, 1, 3, 1)},
    {I4G_K(128, 1, 2, 1)}, {I4G_K(256, 1, 2, 1)},
    /* twelfth session: RS at 96 and 112 tokens, so 65-96 and 97-112 rows (a 100-token router prompt) pad less than
     * to 128 */
    {I4G_K(96, 1, 3, 1)},  {I4G_K(96, 1, 4, 1)},  {I4G_K(112, 1, 3, 1)}, {I4G_K(112, 1, 4, 1)},
    /* eighteenth session, for the wide list (above 256 rows, i4_candidates_wide): the SS form with two warpgroups on
     * 256 tokens and four stages, the RS form with two warpgroups on 128 (RS with two on 256: ptxas serialises its
     * wgmma for want of registers, C7512, so it is not listed) */
    {I4G_K(256, 2, 4, 0)}, {I4G_K(128, 2, 4, 1)},
};
#undef I4G_K
static_assert(sizeof I4G_TAB / sizeof I4G_TAB[0] == I4G_N, "I4G_N (int4_kernels.cuh) counts I4G_TAB");
