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
 * never depend on timing. Tile configurations are chosen by autotune.cu.
 * Otherwise: unpack to BF16 [N, Kp] once per call into a workspace and use cuBLASLt (ops.cu). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_bf16.h>

#define VSR_QUANT_INTERNAL_CUDA 1
#include "backend/cuda/quant_internal.h"

extern int quant_forced_int4_path(void);

#define I4_MAX_FUSED_ROWS 256
#define I4_MAX_KS 16
/* cap on split-K partial sums: S * M * N floats */
#define I4_WS_CAP_FLOATS (16ll << 20)

static inline int64_t rup(int64_t a, int64_t b) { return (a + b - 1) / b * b; }
static inline unsigned nblocks(int64_t n, int per) { return (unsigned)((n + per - 1) / per); }

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

/* unpack tiles -> bf16 W [N, Kp] (permuted column order), per-column groups colgrp[Kp] */
__global__ void k_i4_unpack(const uint4 *__restrict__ wq, const uint32_t *__restrict__ sz, const int32_t *__restrict__ colgrp,
                            int64_t N, int64_t Np, int64_t KC, __nv_bfloat16 *__restrict__ W) {
    int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t NT = Np / 16;
    if (id >= NT * KC * 32) return;
    int lane = (int)(id & 31);
    int64_t kc = (id >> 5) % KC, nt = (id >> 5) / KC;
    int64_t Kp = KC * 64;
    uint4 v = wq[id];
    uint32_t wd[4] = {v.x, v.y, v.z, v.w};
    int r = lane >> 2, c = (lane & 3) * 2;
#pragma unroll
    for (int j = 0; j < 4; j++) {
#pragma unroll
        for (int i = 0; i < 4; i++) { /* A-register i: row r + 8(i&1), columns c + 8(i>>1) + {0,1} */
            int64_t n = nt * 16 + r + ((i & 1) ? 8 : 0);
            int64_t k = kc * 64 + 16 * j + c + ((i >> 1) ? 8 : 0);
            if (n >= N) continue;
            uint32_t s0 = sz[(int64_t)colgrp[k] * Np + n], s1 = sz[(int64_t)colgrp[k + 1] * Np + n];
            uint32_t t = ((wd[j] >> (4 * i)) & 0x000F000Fu) | 0x43004300u;
            __nv_bfloat162 tv = *(__nv_bfloat162 *)&t;
            uint32_t b2 = (s0 & 0xFFFFu) | (s1 << 16), s2 = (s0 >> 16) | (s1 & 0xFFFF0000u);
            __nv_bfloat162 r2 = __hmul2(__hsub2(tv, *(__nv_bfloat162 *)&b2), *(__nv_bfloat162 *)&s2);
            *(__nv_bfloat162 *)(W + n * Kp + k) = r2;
        }
    }
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

/* ---- configurations ---- */

typedef struct i4_cfg {
    int mt, w, ks;
} i4_cfg;

typedef void (*i4_kern)(const uint4 *, const uint32_t *, const int4 *, const uint4 *, int64_t, int64_t, int64_t,
                        int64_t, int64_t, int, float *, int, float *, unsigned *);

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

#define I4_MAX_CAND 32
typedef struct i4_run {
    const vsr_bweight *w;
    const quant_wmeta *m;
    const uint4 *xf;
    int64_t M, Mt;
    i4_cfg cand[I4_MAX_CAND];
    char names[I4_MAX_CAND][32];
    const char *name_ptr[I4_MAX_CAND];
    int n;
} i4_run;

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
        size_t need = (size_t)(NT * ntg);
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
    i4_kern k = i4_kernel_for(cfg.mt, cfg.w);
    if (!k) return vsr_err_set(err, VSR_E_INTERNAL, "int4: no kernel for mt=%d w=%d", cfg.mt, cfg.w);
    dim3 grid((unsigned)NT, (unsigned)ntg, (unsigned)cfg.ks);
    k<<<grid, cfg.w * 32, 0, c->stream>>>((const uint4 *)r->w->w, (const uint32_t *)r->w->scale, (const int4 *)m->dev,
                                          r->xf, r->M, N, m->Np, KC, r->Mt, cfg.ks, y, accumulate, ws, q->counters);
    return cuda_check_launch(c, "int4 fused", err);
}

/* candidates for a token-tile bucket (depends on the bucket and shape only, never on M) */
static void i4_candidates(cuda_ctx *c, i4_run *r, int64_t bucket) {
    const quant_wmeta *m = r->m;
    int64_t NT = m->Np / 16, KC = m->Kp / 64, N = r->w->v.N;
    int mts[2] = {(int)(bucket > 8 ? 8 : bucket), (int)(bucket > 8 ? 4 : bucket / 2)};
    r->n = 0;
    for (int a = 0; a < 2; a++) {
        int mt = mts[a];
        if (mt < 1 || (a == 1 && mt == mts[0])) continue;
        int64_t ntg = (bucket + mt - 1) / mt;
        for (int w = 4; w <= 8; w *= 2)
            for (int ks = 1; ks <= I4_MAX_KS; ks *= 2) {
                if (ks > 1 && ks * w > KC) break;                         /* a warp gets >= 1 chunk */
                if (ks > 1 && (int64_t)ks * bucket * 8 * N > I4_WS_CAP_FLOATS) break;
                if (ks > 1 && NT * ntg * (ks / 2) >= 4 * c->sm_count) break; /* enough blocks already */
                if (r->n >= I4_MAX_CAND) break;
                r->cand[r->n] = (i4_cfg){mt, w, ks};
                snprintf(r->names[r->n], sizeof r->names[0], "mt%d-w%d-ks%d", mt, w, ks);
                r->name_ptr[r->n] = r->names[r->n];
                r->n++;
            }
    }
}

static int i4_default(cuda_ctx *c, const i4_run *r) {
    /* the first mt, 4 warps, the smallest split giving two blocks per multiprocessor */
    const quant_wmeta *m = r->m;
    int64_t NT = m->Np / 16;
    int best = 0;
    for (int i = 0; i < r->n; i++) {
        const i4_cfg *g = &r->cand[i];
        if (g->mt != r->cand[0].mt || g->w != 4) continue;
        best = i;
        int64_t ntg = (r->Mt + g->mt - 1) / g->mt;
        if (NT * ntg * g->ks >= 2 * c->sm_count) break;
    }
    return best;
}

static float i4_time(cuda_ctx *c, int cand, void *arg, vsr_err *err) {
    i4_run *r = (i4_run *)arg;
    quant_state *q;
    if (quant_state_get(c, &q, err)) return -1;
    if (quant_grow(c, &q->tune_out, &q->tune_out_bytes, sizeof(float) * (size_t)(r->M * r->w->v.N), "autotune output",
                   err))
        return -1;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0), cudaEventCreate(&e1);
    float ms = -1;
    if (i4_launch(c, r, r->cand[cand], (float *)q->tune_out, 0, err) == VSR_OK) { /* warm-up */
        const int reps = 5;
        cudaEventRecord(e0, c->stream);
        int ok = 1;
        for (int i = 0; i < reps && ok; i++) ok = i4_launch(c, r, r->cand[cand], (float *)q->tune_out, 0, err) == VSR_OK;
        cudaEventRecord(e1, c->stream);
        if (ok && cuda_check(c, cudaEventSynchronize(e1), "autotune: synchronize", err) == VSR_OK) {
            cudaEventElapsedTime(&ms, e0, e1);
            ms /= reps;
        } else
            ms = -1;
    }
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    return ms < 0 ? -1 : ms * 1000.0f;
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
    m->Np = Np, m->Kp = Kp, m->G = G, m->fused_ok = fused_ok;
    b->q = m;
    b->zp = NULL; /* folded into b->scale */
    b->bytes = wq_bytes + sz_bytes + grp_bytes + perm_bytes;
    return VSR_OK;
}

extern "C" vsr_status cuda_int4_linear(cuda_ctx *c, const float *x, int64_t M, const vsr_bweight *w, float *y,
                                       int accumulate, vsr_err *err) {
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
    if (fused) {
        int64_t Mt = (M + 7) / 8;
        if ((st = quant_grow(c, &q->act, &q->act_bytes, (size_t)(Mt * KC * 32 * 32), "int4 activations", err))) return st;
        k_i4_stage_frag<<<nblocks(Mt * KC * 32, 256), 256, 0, c->stream>>>(x, M, K, w->g_idx, Mt, KC, (uint4 *)q->act);
        if ((st = cuda_check_launch(c, "int4 stage", err))) return st;
        i4_run r;
        memset(&r, 0, sizeof r);
        r.w = w, r.m = m, r.xf = (const uint4 *)q->act, r.M = M, r.Mt = Mt;
        int64_t bucket = 1;
        while (bucket < Mt) bucket *= 2;
        i4_candidates(c, &r, bucket);
        char key[96];
        snprintf(key, sizeof key, "n%lld-k%lld-g%d-t%lld", (long long)N, (long long)K, w->v.group, (long long)bucket);
        int choice = 0;
        const char *src = "default";
        if ((st = autotune_choose(c, "int4_fused", key, r.n, r.name_ptr, i4_default(c, &r), i4_time, &r, &choice, &src,
                                  err)))
            return st;
        i4_cfg cfg = r.cand[choice];
        quant_set_last_path("int4:fused(mt=%d,w=%d,ks=%d,src=%s)", cfg.mt, cfg.w, cfg.ks, src);
        return i4_launch(c, &r, cfg, y, accumulate, err);
    }
    /* unpack once per call, then BF16 cuBLASLt */
    size_t xb_bytes = sizeof(__nv_bfloat16) * (size_t)(M * Kp), wb_bytes = sizeof(__nv_bfloat16) * (size_t)(N * Kp);
    if ((st = quant_grow(c, &q->act, &q->act_bytes, xb_bytes, "int4 activations", err)) ||
        (st = quant_grow(c, &q->wtmp, &q->wtmp_bytes, wb_bytes, "int4 unpacked weight", err)))
        return st;
    k_i4_stage_rows<<<nblocks(M * Kp, 256), 256, 0, c->stream>>>(x, M, K, w->g_idx, Kp, (__nv_bfloat16 *)q->act);
    if ((st = cuda_check_launch(c, "int4 stage rows", err))) return st;
    k_i4_unpack<<<nblocks(Np / 16 * KC * 32, 256), 256, 0, c->stream>>>(
        (const uint4 *)w->w, (const uint32_t *)w->scale, (const int32_t *)m->dev + Kp / 16, N, Np, KC,
        (__nv_bfloat16 *)q->wtmp);
    if ((st = cuda_check_launch(c, "int4 unpack", err))) return st;
    quant_set_last_path("int4:unpack+bf16");
    return cuda_gemm_bf16(c, (const __nv_bfloat16 *)q->act, M, (const __nv_bfloat16 *)q->wtmp, N, Kp, y, accumulate, err);
}
