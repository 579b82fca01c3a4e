/* src/backend/cuda/norms.cu: rmsnorm and rmsnorm_gated (backend.h).
 *
 * rmsnorm: y = x / sqrt(mean(x^2) + eps) * (off + w); a block per row held in registers (k_rmsnorm_row, as
 * many float4 a thread as the row needs, up to 8192 columns), or, for rows of 128-512 columns without a
 * twin (attention's q and k norms), a warp per row (k_rmsnorm_warp, bit-identical to the row kernel); else
 * one warp per row (k_rmsnorm). rmsnorm_gated: y = w * rmsnorm(x) * silu(z) per head row; a warp per row
 * (k_rmsnorm_gated, k_rmsnorm_gated4) or a token's rows by one CTA or a cluster of CTAs
 * (k_rmsnorm_gated_tok). Each writes its output's BF16 or FP8 twin in the same pass when the model declared
 * it (feed_linears).
 *
 * Floor: bytes read and written / 4.19 TB/s (memory-bound; bench_cuda's floor_us). Tests:
 * tests/test_cuda_ops.c (against the CPU oracle), tests/test_cuda_fused.c (twins bit-identical to the
 * linears' own conversion, the row and warp kernels bit-identical). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/ops_internal.cuh" /* first: wraps the C headers in extern "C" */

/* one warp per row */
__global__ void k_rmsnorm(const float *__restrict__ x, int64_t xs, int64_t M, int64_t D, const float *__restrict__ w,
                          float off, float eps, float *y, int64_t ys) {
    int64_t r = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x & 31;
    if (r >= M) return;
    const float *xr = x + r * xs;
    float ss = 0;
    for (int64_t i = lane; i < D; i += 32) ss += xr[i] * xr[i];
    ss = warp_sum(ss);
    float inv = rsqrtf(ss / (float)D + eps);
    float *yr = y + r * ys;
    for (int64_t i = lane; i < D; i += 32) yr[i] = (xr[i] * inv) * (off + w[i]);
}

template <typename TZ>
__global__ void k_rmsnorm_gated(const float *__restrict__ x, const TZ *__restrict__ z, int64_t zh, int64_t zs,
                                int64_t M, int64_t D, const float *__restrict__ w, float eps, float *y,
                                __nv_bfloat16 *yb) {
    int64_t r = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x & 31;
    if (r >= M) return;
    const float *xr = x + r * D;
    const TZ *zr = z + (r / zh) * zs + (r % zh) * D;
    float ss = 0;
    for (int64_t i = lane; i < D; i += 32) ss += xr[i] * xr[i];
    ss = warp_sum(ss);
    float inv = rsqrtf(ss / (float)D + eps);
    for (int64_t i = lane; i < D; i += 32) {
        float o = w[i] * (xr[i] * inv) * silu_d(ldf(zr + i));
        if (y) y[r * D + i] = o;
        if (yb) yb[r * D + i] = __float2bfloat16_rn(o);
    }
}

/* RMSNorm, one block per row held in registers, VEC float4 a thread (D % 4 == 0, D <= blockDim * 4 * VEC,
 * 16-byte aligned rows); the same formula as k_rmsnorm, the sum of squares reduced in another order. VEC is
 * the row's need (5 at the 27B width: 40 registers fewer than RN_VEC's 8, so more blocks a multiprocessor). */
template <int TW, int VEC>
__global__ void __launch_bounds__(256) k_rmsnorm_row(const float *__restrict__ x, int64_t xs, int D,
                                                     const float *__restrict__ w, float off, float eps,
                                                     float *__restrict__ y, int64_t ys, void *__restrict__ tw,
                                                     int64_t twld, float *__restrict__ tsx) {
    __shared__ float sh[33];
    const int64_t r = blockIdx.x;
    const float4 *xr = (const float4 *)(x + r * xs), *wr = (const float4 *)w;
    const int D4 = D >> 2;
    float4 v[VEC];
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < VEC; j++) {
        int i = threadIdx.x + j * blockDim.x;
        v[j] = i < D4 ? xr[i] : make_float4(0, 0, 0, 0);
        ss += sq4(v[j]);
    }
    ss = block_reduce(ss, sh, false);
    const float inv = rsqrtf(ss / (float)D + eps);
    float4 *yr = y ? (float4 *)(y + r * ys) : NULL;
#pragma unroll
    for (int j = 0; j < VEC; j++) {
        int i = threadIdx.x + j * blockDim.x;
        if (i < D4) {
            float4 g = wr[i];
            v[j] = make_float4((v[j].x * inv) * (off + g.x), (v[j].y * inv) * (off + g.y), (v[j].z * inv) * (off + g.z),
                               (v[j].w * inv) * (off + g.w));
            if (y) yr[i] = v[j]; /* NULL: the twin is the only copy */
        }
    }
    twin_row<TW, VEC>(v, D4, D, r, tw, twld, tsx, sh);
}

/* RMSNorm of narrow rows (D % 4 == 0, D <= 128 * VEC; no twin): a warp per row, eight rows a block, the
 * row's x and weight loaded together. The attention's q and k norms (27B: 98,304 and 16,384 rows of 256
 * at 8 x 512) ran one 64-thread block per row in k_rmsnorm_row at ~1.6x the memory floor, bound by the
 * block launches. y may be x (each lane reads its columns before it writes them). */
template <int VEC>
__global__ void __launch_bounds__(256) k_rmsnorm_warp(const float *__restrict__ x, int64_t xs, int64_t M, int D,
                                                      const float *__restrict__ w, float off, float eps, float *y,
                                                      int64_t ys) {
    const int64_t r = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31, D4 = D >> 2;
    if (r >= M) return;
    const float4 *xr = (const float4 *)(x + r * xs), *wr = (const float4 *)w;
    float4 v[VEC], g[VEC];
#pragma unroll
    for (int j = 0; j < VEC; j++) {
        const int i = lane + 32 * j;
        v[j] = i < D4 ? xr[i] : make_float4(0, 0, 0, 0);
        g[j] = i < D4 ? wr[i] : make_float4(0, 0, 0, 0);
    }
    /* the sum of squares in k_rmsnorm_row's order, so a declared output (whose twin that kernel makes) is this
     * kernel's bit for bit: part j is what warp j of its ceil(D / 128) one-float4 threads sums (sq4, warp_sum's
     * tree), and block_reduce's lane 0 adds the warps' sums as (S0 + S2) + (S1 + S3) (the absent ones zero) */
    float S[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < VEC; j++) S[j] = warp_sum(sq4(v[j]));
    const float inv = rsqrtf(((S[0] + S[2]) + (S[1] + S[3])) / (float)D + eps);
    float4 *yr = (float4 *)(y + r * ys);
#pragma unroll
    for (int j = 0; j < VEC; j++) {
        const int i = lane + 32 * j;
        if (i < D4)
            yr[i] = make_float4((v[j].x * inv) * (off + g[j].x), (v[j].y * inv) * (off + g[j].y),
                                (v[j].z * inv) * (off + g[j].z), (v[j].w * inv) * (off + g[j].w));
    }
}

/* The gated norm's two steps per lane, shared by the row and token kernels below so that both round
 * alike: the lane's sum of squares over its float4s v[0..3], and one output float4 */
__device__ __forceinline__ float gated_ss4(const float4 (&v)[4]) {
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; j++) ss += sq4(v[j]);
    return ss;
}
__device__ __forceinline__ float4 gated_out4(float4 g, float4 v, float inv, float4 a) {
    return make_float4(g.x * (v.x * inv) * silu_d(a.x), g.y * (v.y * inv) * silu_d(a.y), g.z * (v.z * inv) * silu_d(a.z),
                       g.w * (v.w * inv) * silu_d(a.w));
}

/* DeltaNet output norm, one warp per row, 4 columns per lane (D % 4 == 0, D <= 32 * 4 * 4, x, z, w,
 * y 16-byte aligned): the same formula as k_rmsnorm_gated, the sum of squares in another order */
template <typename TZ>
__global__ void k_rmsnorm_gated4(const float *__restrict__ x, const TZ *__restrict__ z, int64_t zh, int64_t zs,
                                 int64_t M, int D, const float *__restrict__ w, float eps, float *__restrict__ y,
                                 __nv_bfloat16 *__restrict__ yb) {
    const int64_t r = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x & 31, D4 = D / 4;
    if (r >= M) return;
    const float4 *xr = (const float4 *)(x + r * D), *wr = (const float4 *)w;
    const TZ *zr = z + (r / zh) * zs + (r % zh) * D;
    float4 v[4], zv[4];
#pragma unroll
    for (int j = 0; j < 4; j++) { /* x and z loaded together: one memory latency per row, not two */
        int i = lane + 32 * j;
        v[j] = i < D4 ? xr[i] : make_float4(0, 0, 0, 0);
        zv[j] = i < D4 ? ld4f(zr + 4 * i) : make_float4(0, 0, 0, 0);
    }
    const float ss = warp_sum(gated_ss4(v));
    const float inv = rsqrtf(ss / (float)D + eps);
    float4 *yr = y ? (float4 *)(y + r * D) : NULL;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        int i = lane + 32 * j;
        if (i < D4) {
            const float4 o = gated_out4(wr[i], v[j], inv, zv[j]);
            if (yr) yr[i] = o;
            if (yb) store_bf16x4(yb + r * D + 4 * i, o);
        }
    }
}

/* DeltaNet output norm by token (where D % 4 == 0, D <= 128 and rows are 16-byte aligned, for every FP8 twin
 * and on grids of 8 blocks a multiprocessor or more; VSR_CUDA_GATED_TOK=0 keeps the row kernel above): one
 * 512-thread block per nh consecutive rows (a token's value heads: nh = the declared twin's K / D, else 32),
 * warp w taking rows w, w + 16, ..., all of
 * its x and z loads issued first and its rows' sums of squares reduced together (one shuffle tree for up to
 * HPW rows). The row kernel has 24 bytes in flight per lane and ran at ~1.7x its memory floor at 27B
 * 8 x 512 (~124 us in bench_cuda against ~72); it also could not make an FP8 twin, which needs the amax
 * over the whole token, so the FP8 out_proj quantized the FP32 output in a pass of its own. Per row the
 * same arithmetic as k_rmsnorm_gated4 (lane l holds columns 4l..4l+3, gated_ss4, warp_sum's tree,
 * gated_out4): y is bit-identical to it. The twin: BF16, or FP8 with the token's scale (as twin_row:
 * amax / 448, 1 for a zero token) and zeros out to twld. */
#define GT_W 16  /* warps a token */
#define GT_HPW 4 /* rows per warp held in registers at most (HPW): nh <= GT_W * GT_HPW */
/* CL > 1 (the default without an FP8 twin): a token's 16 warps in CL CTAs of 16 / CL warps (warp w of CTA q is
 * the token's warp q * 16 / CL + w: the same rows as CL = 1), so more, smaller CTAs share a multiprocessor and
 * their load and reduction phases overlap (27B 8 x 512, BF16 twin: 83 against 89 us). An FP8 twin needs the
 * token's amax, so CL = 1 (the same amax over a cluster of four CTAs through distributed shared memory was
 * slower: 104 against 94 us). */
template <typename TZ, int TW, int CL, int HPW>
__global__ void __launch_bounds__(GT_W * 32 / CL, CL == 1 && HPW == 3 ? 3 : 1) k_rmsnorm_gated_tok(const float *__restrict__ x, const TZ *__restrict__ z,
                                                                  int zh, int64_t zs, int M, int nh, int D,
                                                                  const float *__restrict__ w, float eps,
                                                                  float *__restrict__ y, void *__restrict__ tw,
                                                                  int64_t twld, float *__restrict__ tsx) {
    __shared__ float sh[33];
    const int R = blockIdx.x / CL, rank = blockIdx.x % CL;
    const int lane = threadIdx.x & 31, warp = rank * (GT_W / CL) + (threadIdx.x >> 5);
    const bool on = lane < D / 4;
    const float4 zero = make_float4(0, 0, 0, 0);
    float4 v[HPW];
    typename raw4<TZ>::type zv[HPW];
#pragma unroll
    for (int j = 0; j < HPW; j++) {
        const int h = warp + GT_W * j, r = R * nh + h;
        const bool ok = on && h < nh && r < M;
        v[j] = ok ? *(const float4 *)(x + (int64_t)r * D + 4 * lane) : zero;
        if (ok) zv[j] = ld4raw(z + (int64_t)(r / zh) * zs + (int64_t)(r % zh) * D + 4 * lane);
    }
    float ss[HPW];
#pragma unroll
    for (int j = 0; j < HPW; j++) {
        const float4 vr[4] = {v[j], zero, zero, zero};
        ss[j] = gated_ss4(vr);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) /* warp_sum's tree, the rows interleaved */
#pragma unroll
        for (int j = 0; j < HPW; j++) ss[j] += __shfl_xor_sync(0xffffffffu, ss[j], o);
    const float4 g = on ? ((const float4 *)w)[lane] : zero;
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < HPW; j++) {
        const int h = warp + GT_W * j, r = R * nh + h;
        if (!on || h >= nh || r >= M) continue;
        const float inv = rsqrtf(ss[j] / (float)D + eps);
        const float4 o = gated_out4(g, v[j], inv, wide4(zv[j]));
        v[j] = o; /* kept for the FP8 twin */
        if (y) *(float4 *)(y + (int64_t)r * D + 4 * lane) = o;
        if (TW == TW_BF16) store_bf16x4((__nv_bfloat16 *)tw + (int64_t)r * D + 4 * lane, o);
        amax = fmaxf(amax, absmax4(o));
    }
    if (TW == TW_FP8) { /* the launcher's rule: whole tokens (M a multiple of nh) */
        static_assert(TW != TW_FP8 || CL == 1, "an FP8 twin needs the whole token's amax in one CTA");
        const fp8_div dv = twin_scale(amax, sh, tsx + R);
        uint8_t *q = (uint8_t *)tw + (int64_t)R * twld;
#pragma unroll
        for (int j = 0; j < HPW; j++) {
            const int h = warp + GT_W * j;
            if (on && h < nh) *(uint32_t *)(q + h * D + 4 * lane) = e4m3x4(v[j], dv);
        }
        for (int64_t i = (int64_t)nh * D + threadIdx.x; i < twld; i += blockDim.x) q[i] = 0;
    }
}

/* attention output gate, 4 columns per thread (hd, gs, ghs multiples of 4, x and g 16-byte aligned) */

/* k_rmsnorm_row with the twin t asks for (yo: y, or NULL where the twin is the only copy) */
template <int VEC>
static void rmsnorm_row_launch(cuda_ctx *c, const twin &t, unsigned M, int thr, const float *x, int64_t xs, int D,
                               const float *w, float off, float eps, float *y, float *yo, int64_t ys, void *tw,
                               int64_t twld) {
    if (t.kind == TW_FP8)
        k_rmsnorm_row<TW_FP8, VEC><<<M, thr, 0, c->stream>>>(x, xs, D, w, off, eps, yo, ys, tw, twld, t.sx);
    else if (t.kind == TW_BF16)
        k_rmsnorm_row<TW_BF16, VEC><<<M, thr, 0, c->stream>>>(x, xs, D, w, off, eps, yo, ys, tw, twld, NULL);
    else
        k_rmsnorm_row<TW_NONE, VEC><<<M, thr, 0, c->stream>>>(x, xs, D, w, off, eps, y, ys, NULL, 0, NULL);
}

vsr_status cu_rmsnorm(void *ctx, const float *x, int64_t xs, int64_t M, int64_t D, const float *w, float off,
                             float eps, float *y, int64_t ys, vsr_err *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    ENTER(c);
    if (M <= 0) return VSR_OK;
    vsr_status st = kp_guard(c, x, sizeof(float) * (size_t)((M - 1) * xs + D), "rmsnorm", err);
    if (st) return st;
    int rowk = D % 4 == 0 && D <= 256 * 4 * RN_VEC && xs % 4 == 0 && ys % 4 == 0 && ((uintptr_t)x & 15) == 0 &&
               ((uintptr_t)y & 15) == 0 && ((uintptr_t)w & 15) == 0 && M <= 0x7fffffff;
    twin t;
    if ((st = twin_start(c, y, ys == D ? M * D : 0, rowk, rowk, &t, err))) return st;
    char pname[72] = "";
    if (vsr_cuda_profile_on > 0) prof_producer_name(pname, sizeof pname, "rmsnorm", D, M, &t);
    PROF(c, pname);
    if (!rowk) {
        k_rmsnorm<<<blocks_for(M, 8), 256, 0, c->stream>>>(x, xs, M, D, w, off, eps, y, ys);
        twin_clobber(c, y, sizeof(float) * (size_t)((M - 1) * ys + D));
        return cuda_check_launch(c, "rmsnorm", err);
    }
    /* narrow rows: a warp per row, from 128 columns (a whole warp of float4s). At 64 its output differed from the
     * row kernel's in one test on the H200 (session 7, call 5): ptxas had fused the two kernels' sums of squares
     * in different orders, which sq4 now spells out; rows narrower than 128 stay on the row kernel until that
     * has run on a GPU. */
    if (t.kind == TW_NONE && D >= 128 && D <= 32 * 4 * 4) {
        const unsigned nb = (unsigned)((M + 7) / 8);
        if (D <= 128) k_rmsnorm_warp<1><<<nb, 256, 0, c->stream>>>(x, xs, M, (int)D, w, off, eps, y, ys);
        else if (D <= 256) k_rmsnorm_warp<2><<<nb, 256, 0, c->stream>>>(x, xs, M, (int)D, w, off, eps, y, ys);
        else k_rmsnorm_warp<4><<<nb, 256, 0, c->stream>>>(x, xs, M, (int)D, w, off, eps, y, ys);
        if ((st = cuda_check_launch(c, "rmsnorm", err))) return st;
        if (ys != D) twin_clobber(c, y, sizeof(float) * (size_t)((M - 1) * ys + D));
        return VSR_OK;
    }
    /* a block per row: as many warps as the row has float4s, up to 8 */
    int thr = (int)((D / 4 + 31) / 32 * 32);
    thr = thr > 256 ? 256 : thr;
    if ((int64_t)thr * 4 * RN_VEC < D) thr = 256;
    void *tw = t.data;
    int64_t twld = t.kind == TW_FP8 ? t.Kp : D;
    float *yo = t.sole ? NULL : y; /* the twin alone when its readers are all that read y */
    const int need = (int)((D / 4 + thr - 1) / thr); /* float4 a thread */
    if (need <= 4) rmsnorm_row_launch<4>(c, t, (unsigned)M, thr, x, xs, (int)D, w, off, eps, y, yo, ys, tw, twld);
    else if (need == 5) rmsnorm_row_launch<5>(c, t, (unsigned)M, thr, x, xs, (int)D, w, off, eps, y, yo, ys, tw, twld);
    else rmsnorm_row_launch<RN_VEC>(c, t, (unsigned)M, thr, x, xs, (int)D, w, off, eps, y, yo, ys, tw, twld);
    if ((st = cuda_check_launch(c, "rmsnorm", err))) return st;
    if (ys != D) twin_clobber(c, y, sizeof(float) * (size_t)((M - 1) * ys + D));
    twin_commit(c, &t);
    return VSR_OK;
}

/* k_rmsnorm_gated_tok with the twin t asks for: none, BF16 or FP8 (CL = 1 only); CL CTAs a token; rows a warp
 * HPW = 3 for tokens of up to 48 rows (the 27B layer's: the FP8 twin's CTA then fits three a multiprocessor), else
 * GT_HPW */
#define GT_CL 4
template <typename TZ, int CL, int HPW>
static void gated_tok_launch_hpw(cuda_ctx *c, unsigned nt, const float *x, const TZ *z, int zh, int64_t zs, int M,
                                 int nh, int D, const float *w, float eps, float *yo, const twin &t) {
    const unsigned th = GT_W * 32 / CL, nb = nt * CL;
    if (t.kind == TW_FP8)
        k_rmsnorm_gated_tok<TZ, TW_FP8, 1, HPW><<<nt, GT_W * 32, 0, c->stream>>>(x, z, zh, zs, M, nh, D, w, eps, yo, t.data,
                                                                               t.Kp, t.sx);
    else if (t.kind == TW_BF16)
        k_rmsnorm_gated_tok<TZ, TW_BF16, CL, HPW><<<nb, th, 0, c->stream>>>(x, z, zh, zs, M, nh, D, w, eps, yo, t.data, 0,
                                                                          NULL);
    else
        k_rmsnorm_gated_tok<TZ, TW_NONE, CL, HPW><<<nb, th, 0, c->stream>>>(x, z, zh, zs, M, nh, D, w, eps, yo, NULL, 0,
                                                                          NULL);
}
template <typename TZ, int CL>
static void gated_tok_launch(cuda_ctx *c, unsigned nt, const float *x, const TZ *z, int zh, int64_t zs, int M, int nh,
                             int D, const float *w, float eps, float *yo, const twin &t) {
    if (nh <= GT_W * 3) gated_tok_launch_hpw<TZ, CL, 3>(c, nt, x, z, zh, zs, M, nh, D, w, eps, yo, t);
    else gated_tok_launch_hpw<TZ, CL, GT_HPW>(c, nt, x, z, zh, zs, M, nh, D, w, eps, yo, t);
}

/* VSR_CUDA_GATED_TOK=0: rmsnorm_gated by the row kernel, no FP8 twin (A/B); cuda_gated_set_tok for the test:
 * 0 off, 1 the default (by the grid's size), 2 the token kernel wherever it applies, 3 as 2 in whole-token CTAs
 * also without an FP8 twin (the kernel before quarter-token CTAs) */
static int g_gated_tok_on = -1;
extern "C" int cuda_gated_set_tok(int on) { return cuda_env_switch_set("VSR_CUDA_GATED_TOK", 1, &g_gated_tok_on, on, 3); }

vsr_status cu_rmsnorm_gated(void *ctx, const float *x, const float *z, int64_t zh, int64_t zs, int64_t M,
                                   int64_t D, const float *w, float eps, float *y, vsr_err *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    ENTER(c);
    if (zh < 1 || zs < zh * D)
        return vsr_err_set(err, VSR_E_INVALID, "rmsnorm_gated: z holds %lld rows of %lld per token at stride %lld",
                           (long long)zh, (long long)D, (long long)zs);
    if (M <= 0) return VSR_OK;
    /* z may be a stacked projection's product kept in BF16 (keep_product_bf16) */
    const __nv_bfloat16 *zb = kp_find(c, z, (M - 1) / zh + 1, zs, zh * D);
    vsr_status st;
    if ((st = kp_guard(c, x, sizeof(float) * (size_t)(M * D), "rmsnorm_gated", err)) ||
        (!zb && (st = kp_guard(c, z, sizeof(float) * (size_t)(((M - 1) / zh) * zs + zh * D), "rmsnorm_gated", err))))
        return st;
    int vec = D % 4 == 0 && D <= 32 * 4 * 4 && zs % 4 == 0 && ((uintptr_t)x & 15) == 0 &&
              ((uintptr_t)(zb ? (const void *)zb : (const void *)z) & (zb ? 7 : 15)) == 0 && ((uintptr_t)w & 15) == 0 &&
              ((uintptr_t)y & 15) == 0;
    /* the token kernel: rows grouped by the declared twin's row (a token's heads; FP8 twins need that), else
     * by 32. Without an FP8 twin to make it takes only grids of 8 blocks a multiprocessor or more: at 27B
     * 3 x 128 (384 blocks) the row kernel is faster (bench_cuda, call 7: 10.2 against 10.8 us). */
    const cuda_ctx_priv *pv = priv(c);
    const int64_t dK = pv->req_x == y && pv->req_rows * pv->req_K == M * D ? pv->req_K : 0;
    const int mode = cuda_env_mode("VSR_CUDA_GATED_TOK", 1, 3, &g_gated_tok_on); /* 0 off, 1 by size, 2 always, 3 always in whole-token CTAs */
    int tok = mode && vec && D <= 128 && M < 0x7fffffff && zh < 0x7fffffff;
    const int64_t nh = dK > 0 && dK % D == 0 && dK / D <= GT_W * GT_HPW ? dK / D : 32;
    const int tok_fp8 = tok && dK == nh * D && pv->n_fp8_w > 0;
    if (mode == 1 && !tok_fp8 && (M + nh - 1) / nh < 8LL * c->sm_count) tok = 0;
    twin t;
    if ((st = twin_start(c, y, M * D, tok && dK == nh * D, 1, &t, err))) return st;
    char pname[72] = "";
    if (vsr_cuda_profile_on > 0) prof_producer_name(pname, sizeof pname, tok ? "rmsnorm_gated by token" : "rmsnorm_gated",
                                                    D, M, &t);
    PROF(c, pname);
    float *yo = t.sole ? NULL : y;
    __nv_bfloat16 *tb = (__nv_bfloat16 *)t.data;
    const unsigned nb = blocks_for(M, 8);
    if (tok) {
        const unsigned nt = (unsigned)((M + nh - 1) / nh);
        /* CTAs of a quarter token, but whole tokens for an FP8 twin (its amax over a cluster of four quarter-token
         * CTAs was slower: 104 against 94 us at 27B 8 x 512, session 7 call 2) and under mode 3 (A/B) */
        const bool quarter = mode != 3 && t.kind != TW_FP8;
        if (quarter && zb) gated_tok_launch<__nv_bfloat16, GT_CL>(c, nt, x, zb, (int)zh, zs, (int)M, (int)nh, (int)D, w, eps, yo, t);
        else if (quarter) gated_tok_launch<float, GT_CL>(c, nt, x, z, (int)zh, zs, (int)M, (int)nh, (int)D, w, eps, yo, t);
        else if (zb) gated_tok_launch<__nv_bfloat16, 1>(c, nt, x, zb, (int)zh, zs, (int)M, (int)nh, (int)D, w, eps, yo, t);
        else gated_tok_launch<float, 1>(c, nt, x, z, (int)zh, zs, (int)M, (int)nh, (int)D, w, eps, yo, t);
    } else if (vec && zb) k_rmsnorm_gated4<<<nb, 256, 0, c->stream>>>(x, zb, zh, zs, M, (int)D, w, eps, yo, tb);
    else if (vec) k_rmsnorm_gated4<<<nb, 256, 0, c->stream>>>(x, z, zh, zs, M, (int)D, w, eps, yo, tb);
    else if (zb) k_rmsnorm_gated<<<nb, 256, 0, c->stream>>>(x, zb, zh, zs, M, D, w, eps, yo, tb);
    else k_rmsnorm_gated<<<nb, 256, 0, c->stream>>>(x, z, zh, zs, M, D, w, eps, yo, tb);
    if ((st = cuda_check_launch(c, "rmsnorm_gated", err))) return st;
    twin_commit(c, &t);
    return VSR_OK;
}
