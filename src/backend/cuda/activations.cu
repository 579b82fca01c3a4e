/* src/backend/cuda/activations.cu: the elementwise ops (backend.h): mul_sigmoid (attention output gate,
 * x *= sigmoid(g)), swiglu (y = silu(g) * u), linear_swiglu (the gate|up linear with its product kept in BF16
 * where the GEMM can write it, then swiglu over it), add (y += x).
 *
 * One pass each, float4 a thread where aligned; with an FP8 twin a block per token (mul_sigmoid: 4 float4 a
 * thread; swiglu: rows wider than 8192 by a pair of CTAs, a thread-block cluster on capability 9.0+, the
 * pair's amax exchanged through distributed shared memory). silu and sigmoid from device_math.cuh.
 *
 * Floor: bytes read and written / 4.19 TB/s (memory-bound; bench_cuda's floor_us). Tests:
 * tests/test_cuda_ops.c (against the CPU oracle), tests/test_cuda_fused.c (twins, linear_swiglu against
 * linear + swiglu, the SwiGLU variants bit for bit). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/ops_internal.cuh" /* first: wraps the C headers in extern "C" */

__global__ void k_mul_sigmoid(float *x, int64_t M, int H, int hd, const float *__restrict__ g, int64_t gs, int64_t ghs,
                              __nv_bfloat16 *xb, int write_x) {
    int64_t n = M * H * (int64_t)hd;
    for (int64_t u = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; u < n; u += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = u / ((int64_t)H * hd);
        int rem = (int)(u % ((int64_t)H * hd)), h = rem / hd, i = rem % hd;
        float o = x[u] * sigmoid_d(g[r * gs + h * ghs + i]);
        if (write_x) x[u] = o;
        if (xb) xb[u] = __float2bfloat16_rn(o);
    }
}

/* SwiGLU's inputs with their FP8 scales applied when sc is given (linear_swiglu on an unscaled FP8
 * product: g = t * sx[r] * sg[c], the FP8 epilogue's order), else as they are */
struct sw_scales {
    const float *sx, *sg, *su; /* [M], [N], [N]; sx NULL: none */
};
__device__ __forceinline__ float4 sw_load4(const float *p) { return *(const float4 *)p; }
/* SwiGLU of columns 4i..4i+3 of row r from their loaded inputs a (gate), b (up), scaled first when sc is given
 * (every vectorised SwiGLU kernel: one formula, so their outputs agree bit for bit) */
__device__ __forceinline__ float4 sw_comb4(float4 a, float4 b, int i, int64_t r, const sw_scales &sc) {
    if (sc.sx) {
        const float s = sc.sx[r];
        const float4 wg = sw_load4(sc.sg + 4 * i), wu = sw_load4(sc.su + 4 * i);
        a = make_float4(a.x * s * wg.x, a.y * s * wg.y, a.z * s * wg.z, a.w * s * wg.w);
        b = make_float4(b.x * s * wu.x, b.y * s * wu.y, b.z * s * wu.z, b.w * s * wu.w);
    }
    return make_float4(silu_d(a.x) * b.x, silu_d(a.y) * b.y, silu_d(a.z) * b.z, silu_d(a.w) * b.w);
}

template <typename TI>
__global__ void k_swiglu(const TI *g, const TI *__restrict__ u, int64_t gs, int64_t N, int64_t n, float *y,
                         sw_scales sc) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / N, c = i % N;
        float a = ldf(g + r * gs + c), b = ldf(u + r * gs + c);
        if (sc.sx) a = a * sc.sx[r] * sc.sg[c], b = b * sc.sx[r] * sc.su[c];
        y[i] = silu_d(a) * b;
    }
}

/* y[i] += x[i]: four floats a thread where both are 16-byte aligned and n is a multiple of 4 */
__global__ void k_add(float *y, const float *__restrict__ x, int64_t n, int vec) {
    const int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (vec) {
        if (id * 4 >= n) return;
        float4 a = ((const float4 *)y)[id];
        const float4 b = ((const float4 *)x)[id];
        a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w;
        ((float4 *)y)[id] = a;
    } else if (id < n)
        y[id] += x[id];
}
extern "C" void cuda_add_into(cuda_ctx *c, float *y, const float *x, int64_t n) {
    const int vec = n % 4 == 0 && ((uintptr_t)y & 15) == 0 && ((uintptr_t)x & 15) == 0;
    k_add<<<blocks_for(vec ? n / 4 : n, 256), 256, 0, c->stream>>>(y, x, n, vec);
}

/* SwiGLU, FP32 out plus an optional BF16 twin, 4 columns per thread (N, gs multiples of 4, 16-byte aligned):
 * g, u rows at stride gs, y and yb contiguous [M, N]. Block (r, b) takes row r's float4 columns b * SW4_T * SW4_U
 * onwards, every thread's SW4_U loads issued before any is used; no division (the grid-stride form split its index
 * into row and column with 64-bit divisions, and ran the BF16 model's SwiGLU at 1.45x its memory floor). */
#define SW4_T 256
#define SW4_U 2
template <typename TI>
__global__ void __launch_bounds__(SW4_T) k_swiglu4(const TI *g, const TI *__restrict__ u, int64_t gs, int N, float *y,
                                                   __nv_bfloat16 *yb, sw_scales sc) {
    const int64_t r = blockIdx.x;
    const int N4 = N >> 2, c0 = (int)blockIdx.y * SW4_T * SW4_U + (int)threadIdx.x;
    const TI *gr = g + r * gs, *ur = u + r * gs;
    typename raw4<TI>::type a[SW4_U], b[SW4_U];
#pragma unroll
    for (int k = 0; k < SW4_U; k++) {
        const int i = c0 + k * SW4_T;
        if (i < N4) a[k] = ld4raw(gr + 4 * i), b[k] = ld4raw(ur + 4 * i);
    }
#pragma unroll
    for (int k = 0; k < SW4_U; k++) {
        const int i = c0 + k * SW4_T;
        if (i >= N4) break;
        const float4 o = sw_comb4(wide4(a[k]), wide4(b[k]), i, r, sc);
        if (y) *(float4 *)(y + r * N + 4 * i) = o;
        if (yb) store_bf16x4(yb + r * N + 4 * i, o);
    }
}

/* SwiGLU with an FP8 twin: one block per row of N (N % 4 == 0, N <= blockDim * 4 * VEC), up to 1024
 * threads so the row's loads of many blocks stay in flight (the first version, 256 threads x 20
 * float4 at 104 registers, ran 2 blocks per SM and took twice the BF16 kernel's time at 27B shape) */
template <typename TI, int VEC>
__global__ void __launch_bounds__(1024) k_swiglu_row_fp8(const TI *g, const TI *__restrict__ u, int64_t gs, int N,
                                                         float *y, uint8_t *__restrict__ tw, int64_t twld,
                                                         float *__restrict__ tsx, sw_scales sc) {
    __shared__ float sh[33];
    const int64_t r = blockIdx.x;
    const TI *gr = g + r * gs, *ur = u + r * gs;
    float4 *yr = y ? (float4 *)(y + r * N) : NULL;
    const int N4 = N >> 2;
    float4 v[VEC];
#pragma unroll
    for (int j = 0; j < VEC; j++) {
        int i = threadIdx.x + j * blockDim.x;
        if (i < N4) {
            v[j] = sw_comb4(ld4f(gr + 4 * i), ld4f(ur + 4 * i), i, r, sc);
            if (yr) yr[i] = v[j];
        } else {
            v[j] = make_float4(0, 0, 0, 0);
        }
    }
    twin_row<TW_FP8, VEC>(v, N4, N, r, tw, twld, tsx, sh);
}

/* SwiGLU with an FP8 twin for wide rows, in two passes over the row: the first computes every output
 * (writing y when asked) for the row's amax, the second computes them again, the same arithmetic in
 * the same order, and quantizes. Nothing is held in registers across the reduction, so 512-thread
 * blocks run four to a multiprocessor and one row's reduction overlaps others' loads (the register
 * kernel above holds the row: at the 27B width one 1024-thread block per multiprocessor, its phases
 * serialised, 292 us at 8 x 512; it now takes rows up to 8192 wide). The second pass reads the row
 * again from L2 (4 rows x 70 KB per multiprocessor at the 27B width in BF16). Outputs, scales and
 * twin are bit-identical to k_swiglu_row_fp8's. */
template <typename TI>
__device__ __forceinline__ float4 sw_out4(const TI *gr, const TI *ur, int i, int64_t r, const sw_scales &sc) {
    return sw_comb4(ld4f(gr + 4 * i), ld4f(ur + 4 * i), i, r, sc);
}

template <typename TI>
__global__ void __launch_bounds__(512) k_swiglu_fp8_2p(const TI *g, const TI *__restrict__ u, int64_t gs, int N, float *y,
                                                       uint8_t *__restrict__ tw, int64_t twld, float *__restrict__ tsx,
                                                       sw_scales sc) {
    __shared__ float sh[33];
    const int64_t r = blockIdx.x;
    const TI *gr = g + r * gs, *ur = u + r * gs;
    float4 *yr = y ? (float4 *)(y + r * N) : NULL;
    const int N4 = N >> 2;
    float amax = 0.0f;
    for (int i = threadIdx.x; i < N4; i += blockDim.x) {
        const float4 o = sw_out4(gr, ur, i, r, sc);
        if (yr) yr[i] = o;
        amax = fmaxf(amax, absmax4(o));
    }
    const fp8_div dv = twin_scale(amax, sh, tsx + r);
    uint8_t *q = tw + r * twld;
    for (int i = threadIdx.x; i < N4; i += blockDim.x) *(uint32_t *)(q + 4 * i) = e4m3x4(sw_out4(gr, ur, i, r, sc), dv);
    for (int64_t i = N + threadIdx.x; i < twld; i += blockDim.x) q[i] = 0;
}

/* The one-pass SwiGLU kernels' first step: columns [lo, hi) (float4 units) of row r into row[i - lo] (and yr[i]
 * when given), nt threads apart, every thread's U float4 pairs loaded (BF16 kept as loaded, widened at use: fewer
 * registers) before any is used; returns the thread's amax of what it wrote */
template <typename TI, int U>
__device__ __forceinline__ float sw_stage(const TI *gr, const TI *ur, int lo, int hi, int nt, int64_t r,
                                          const sw_scales &sc, float4 *row, float4 *yr) {
    float amax = 0.0f;
    for (int i0 = lo + (int)threadIdx.x; i0 < hi; i0 += U * nt) {
        typename raw4<TI>::type a[U], b[U];
#pragma unroll
        for (int j = 0; j < U; j++) {
            const int i = i0 + j * nt;
            if (i < hi) a[j] = ld4raw(gr + 4 * i), b[j] = ld4raw(ur + 4 * i);
        }
#pragma unroll
        for (int j = 0; j < U; j++) {
            const int i = i0 + j * nt;
            if (i < hi) {
                const float4 o = sw_comb4(wide4(a[j]), wide4(b[j]), i, r, sc);
                row[i - lo] = o;
                if (yr) yr[i] = o;
                amax = fmaxf(amax, absmax4(o));
            }
        }
    }
    return amax;
}

/* SwiGLU with an FP8 twin for wide rows in one pass over device memory (the default; VSR_CUDA_SWIGLU_1P=0
 * keeps k_swiglu_fp8_2p): the row's outputs go to shared memory (N * 4 bytes: 68 KB at the 27B width,
 * three blocks a multiprocessor) as they are computed for the amax, and are quantized from there, so the
 * row is read once (the two-pass kernel reads it twice, the second time mostly missing L2 at 8 x 512:
 * ~250 us a layer against a ~85 us one-pass floor). Loads are issued SW1_U float4 pairs at a time before
 * any is used. The same arithmetic per element as k_swiglu_fp8_2p (sw_comb4): outputs, scales and twin
 * bit-identical to it (tests/test_cuda_fused.c twin_fp8). */
#define SW1_U 4
template <typename TI>
__global__ void __launch_bounds__(512) k_swiglu_fp8_1p(const TI *g, const TI *__restrict__ u, int64_t gs, int N, float *y,
                                                       uint8_t *__restrict__ tw, int64_t twld, float *__restrict__ tsx,
                                                       sw_scales sc) {
    extern __shared__ float4 sw_row[]; /* [N / 4] */
    __shared__ float sh[33];
    const int64_t r = blockIdx.x;
    const TI *gr = g + r * gs, *ur = u + r * gs;
    float4 *yr = y ? (float4 *)(y + r * N) : NULL;
    const int N4 = N >> 2, nt = (int)blockDim.x;
    const float amax = sw_stage<TI, SW1_U>(gr, ur, 0, N4, nt, r, sc, sw_row, yr);
    const fp8_div dv = twin_scale(amax, sh, tsx + r); /* its barriers order sw_row's stores before the reads below */
    uint8_t *q = tw + r * twld;
    for (int i = threadIdx.x; i < N4; i += nt) *(uint32_t *)(q + 4 * i) = e4m3x4(sw_row[i], dv);
    for (int64_t i = N + threadIdx.x; i < twld; i += nt) q[i] = 0;
}

/* SwiGLU with an FP8 twin for wide rows, one pass, a row by a pair of CTAs (a thread-block cluster of 2; the
 * default on capability 9.0+): each CTA computes half the row into its shared memory (34 KB at the 27B width)
 * with its half's amax, the pair exchanges the two through distributed shared memory, and each quantizes its
 * half. k_swiglu_fp8_1p's whole-row CTA (512 threads at 59 registers: two a multiprocessor, 136 KB) ran the
 * 27B FP8 forward's SwiGLU at 221 us at 8 x 512 against an 85 us floor (its BF16 product read once, the FP8
 * twin written): with two big CTAs an SM spent much of its time with both in their reduction and store phases.
 * Six 256-thread half-row CTAs an SM (209 KB of shared memory, <= 42 registers) keep more loads in flight and
 * their phases apart. Per element the same arithmetic (sw_comb4), and the row's amax is a max: outputs,
 * scales and twin are bit-identical to k_swiglu_fp8_1p's. */
#define SWC_T 256
/* U: float4 pairs a thread loads before using any: 4 from BF16 (linear_swiglu's kept product), 2 from FP32, so 32
 * bytes of each input a thread are in flight and six CTAs fit a multiprocessor (<= 42 registers: FP32 at 4
 * spills); VSR_CUDA_SWIGLU_1P=3 swaps them (A/B) */
template <typename TI, int U>
__global__ void __launch_bounds__(SWC_T, 6) k_swiglu_fp8_cl(const TI *g, const TI *__restrict__ u, int64_t gs, int N,
                                                            float *y, uint8_t *__restrict__ tw, int64_t twld,
                                                            float *__restrict__ tsx, sw_scales sc) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ float4 sw_row[]; /* [half] */
    __shared__ float sh[33], slot;
    const unsigned rank = blockIdx.x & 1; /* the CTA's rank in its cluster of 2 along x */
    const int64_t r = blockIdx.x >> 1;
    const TI *gr = g + r * gs, *ur = u + r * gs;
    float4 *yr = y ? (float4 *)(y + r * N) : NULL;
    const int N4 = N >> 2, half = (N4 + 1) >> 1, lo = (int)rank * half, hi = min(N4, lo + half);
    const float amax = sw_stage<TI, U>(gr, ur, lo, hi, SWC_T, r, sc, sw_row, yr);
    /* block_reduce's barriers order sw_row's stores before the reads below */
    const float s = fp8_row_scale(cluster_max<2>(block_reduce(amax, sh, true), &slot));
    if (rank == 0 && threadIdx.x == 0) tsx[r] = s;
    const fp8_div dv = fp8_div_of(s);
    uint8_t *q = tw + r * twld;
    for (int i = lo + (int)threadIdx.x; i < hi; i += SWC_T) *(uint32_t *)(q + 4 * i) = e4m3x4(sw_row[i - lo], dv);
    if (rank == 1)
        for (int64_t i = N + threadIdx.x; i < twld; i += SWC_T) q[i] = 0;
    cluster_exit();
#endif
}

__global__ void k_mul_sigmoid4(float *x, int64_t M, int H, int hd, const float *__restrict__ g, int64_t gs, int64_t ghs,
                               __nv_bfloat16 *xb, int write_x) {
    const int hd4 = hd / 4;
    const int64_t row4 = (int64_t)H * hd4, n4 = M * row4;
    for (int64_t u = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; u < n4; u += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = u / row4;
        const int rem = (int)(u - r * row4), h = rem / hd4, i = (rem - h * hd4) * 4;
        float4 a = ((float4 *)x)[u], b = *(const float4 *)(g + r * gs + h * ghs + i);
        float4 o = make_float4(a.x * sigmoid_d(b.x), a.y * sigmoid_d(b.y), a.z * sigmoid_d(b.z), a.w * sigmoid_d(b.w));
        if (write_x) ((float4 *)x)[u] = o;
        if (xb) store_bf16x4(xb + 4 * u, o);
    }
}

/* attention output gate with an FP8 twin (an FP8 o_proj reads it; it quantized the FP32 output in a pass of
 * its own before): one block per token of H * hd / 16 threads rounded up to whole warps, MS_VEC float4 each
 * (H * hd <= 1024 * 4 * MS_VEC; hd, gs, ghs multiples of 4, 16-byte aligned), every x and g load issued
 * first, then twin_row (the token's scale). The same arithmetic per element as k_mul_sigmoid4. (Its first form, 256
 * threads holding RN_VEC = 8 float4 of x and of g, ran 2 blocks a multiprocessor: 125 us at 27B 8 x 512
 * against the BF16 twin's 72.) */
#define MS_VEC 4
__global__ void __launch_bounds__(1024) k_mul_sigmoid_row_fp8(float *x, int H, int hd, const float *__restrict__ g,
                                                              int64_t gs, int64_t ghs, uint8_t *__restrict__ tw,
                                                              int64_t twld, float *__restrict__ tsx, int write_x) {
    __shared__ float sh[33];
    const int64_t r = blockIdx.x;
    const int hd4 = hd / 4, D4 = H * hd4;
    float4 *xr = (float4 *)x + r * D4;
    float4 v[MS_VEC], gv[MS_VEC];
#pragma unroll
    for (int j = 0; j < MS_VEC; j++) {
        const int i = threadIdx.x + j * blockDim.x, h = i / hd4;
        if (i < D4) v[j] = xr[i], gv[j] = *(const float4 *)(g + r * gs + h * ghs + (i - h * hd4) * 4);
        else v[j] = gv[j] = make_float4(0, 0, 0, 0);
    }
#pragma unroll
    for (int j = 0; j < MS_VEC; j++) {
        const int i = threadIdx.x + j * blockDim.x;
        const float4 a = v[j], b = gv[j];
        v[j] = make_float4(a.x * sigmoid_d(b.x), a.y * sigmoid_d(b.y), a.z * sigmoid_d(b.z), a.w * sigmoid_d(b.w));
        if (write_x && i < D4) xr[i] = v[j];
    }
    twin_row<TW_FP8, MS_VEC>(v, D4, 4 * D4, r, tw, twld, tsx, sh);
}

vsr_status cu_mul_sigmoid(void *ctx, float *x, int64_t M, int H, int hd, const float *g, int64_t gs, int64_t ghs,
                                 vsr_err *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    ENTER(c);
    int64_t n = M * H * (int64_t)hd;
    if (n <= 0) return VSR_OK;
    PROF(c, "mul_sigmoid");
    vsr_status st;
    if ((st = kp_guard(c, x, sizeof(float) * (size_t)n, "mul_sigmoid", err)) ||
        (st = kp_guard(c, g, sizeof(float) * (size_t)((M - 1) * gs + (H - 1) * ghs + hd), "mul_sigmoid", err)))
        return st;
    const int vec = hd % 4 == 0 && gs % 4 == 0 && ghs % 4 == 0 && ((uintptr_t)x & 15) == 0 && ((uintptr_t)g & 15) == 0;
    /* an FP8 twin where the declared rows are the tokens (the FP8 o_proj's input) */
    const cuda_ctx_priv *pv = priv(c);
    const int rowk = vec && pv->req_x == x && pv->req_K == (int64_t)H * hd && pv->req_rows == M &&
                     (int64_t)H * hd <= 1024 * 4 * MS_VEC && M <= 0x7fffffff;
    twin t;
    if ((st = twin_start(c, x, n, rowk, 1, &t, err))) return st;
    if (t.kind == TW_FP8)
        k_mul_sigmoid_row_fp8<<<(unsigned)M, (unsigned)(((int64_t)H * hd / 4 + 32 * MS_VEC - 1) / (32 * MS_VEC) * 32), 0,
                                c->stream>>>(x, H, hd, g, gs, ghs, (uint8_t *)t.data, t.Kp, t.sx, !t.sole);
    else if (vec)
        k_mul_sigmoid4<<<blocks_for(n / 4, 256) > 8192 ? 8192 : blocks_for(n / 4, 256), 256, 0, c->stream>>>(
            x, M, H, hd, g, gs, ghs, (__nv_bfloat16 *)t.data, !t.sole);
    else
        k_mul_sigmoid<<<blocks_for(n, 256) > 4096 ? 4096 : blocks_for(n, 256), 256, 0, c->stream>>>(
            x, M, H, hd, g, gs, ghs, (__nv_bfloat16 *)t.data, !t.sole);
    if ((st = cuda_check_launch(c, "mul_sigmoid", err))) return st;
    twin_commit(c, &t);
    return VSR_OK;
}

/* Wide FP8-twin rows (VSR_CUDA_SWIGLU_1P; cuda_swiglu_set_1p for the test): 1 (the default) one pass, by a
 * pair of CTAs where the device has clusters (capability 9.0+), else by one; 2 one pass by one CTA; 3 as 1 with
 * the other number of loads in flight a thread (k_swiglu_fp8_cl's U; A/B); 0 the two-pass kernel (A/B) */
static int g_sw1p_on = -1;
extern "C" int cuda_swiglu_set_1p(int on) { return cuda_env_switch_set("VSR_CUDA_SWIGLU_1P", 1, &g_sw1p_on, on, 3); }

/* SwiGLU from FP32 (cu_swiglu) or BF16 (linear_swiglu's kept product) g, u, with y's twin when
 * declared; the caller has checked gs >= N and opened the profile scope. */
template <typename TI>
static vsr_status swiglu_run(cuda_ctx *c, const TI *g, const TI *u, int64_t gs, int64_t M, int64_t N, float *y,
                             sw_scales sc, vsr_err *err) {
    const int64_t n = M * N;
    const uintptr_t al = sizeof(TI) * 4 - 1; /* 4 elements: float4, or 4 BF16 (8 bytes) */
    int vec = ((uintptr_t)g & al) == 0 && ((uintptr_t)u & al) == 0 && ((uintptr_t)y & 15) == 0 && N % 4 == 0 &&
              gs % 4 == 0;
    int rowk = vec && N <= SW_MAX_N && M <= 0x7fffffff;
    twin t;
    vsr_status st = twin_start(c, y, n, rowk, vec, &t, err);
    if (st) return st;
    float *yo = t.sole ? NULL : y;
    if (t.kind == TW_FP8) {
        int64_t n4 = N / 4, thr = (n4 + 31) / 32 * 32;
        thr = thr > 1024 ? 1024 : thr;
        const int mode = cuda_env_mode("VSR_CUDA_SWIGLU_1P", 1, 3, &g_sw1p_on);
        if (n4 > 2048 && (mode == 1 || mode == 3) && c->cc_major >= 9) { /* wide rows, one pass, a CTA pair per row */
            const size_t smem = sizeof(float4) * (size_t)((n4 + 1) / 2);
            constexpr int U = sizeof(TI) == 2 ? 4 : 2, Ualt = 6 - U; /* 32 bytes of each input in flight a thread */
            auto kern = mode == 1 ? k_swiglu_fp8_cl<TI, U> : k_swiglu_fp8_cl<TI, Ualt>;
            if ((st = cuda_check(c, cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
                                 "swiglu: shared memory of the CTA-pair FP8 kernel", err)))
                return st;
            cudaLaunchConfig_t cfg = {};
            cudaLaunchAttribute at[1];
            at[0].id = cudaLaunchAttributeClusterDimension;
            at[0].val.clusterDim.x = 2, at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = 1;
            cfg.gridDim = dim3((unsigned)(2 * M)), cfg.blockDim = dim3(SWC_T), cfg.dynamicSmemBytes = smem;
            cfg.stream = c->stream, cfg.attrs = at, cfg.numAttrs = 1;
            uint8_t *tq = (uint8_t *)t.data;
            const int Ni = (int)N;
            if ((st = cuda_check(c, cudaLaunchKernelEx(&cfg, kern, g, u, gs, Ni, yo, tq, t.Kp, t.sx, sc),
                                 "swiglu: the CTA-pair FP8 kernel", err)))
                return st;
        } else if (n4 > 2048 && mode) { /* wide rows, one pass */
            const size_t smem = sizeof(float4) * (size_t)n4; /* N <= SW_MAX_N: at most 128 KB */
            if ((st = cuda_check(c, cudaFuncSetAttribute(k_swiglu_fp8_1p<TI>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                         (int)smem),
                                 "swiglu: shared memory of the one-pass FP8 kernel", err)))
                return st;
            k_swiglu_fp8_1p<TI><<<(unsigned)M, 512, smem, c->stream>>>(g, u, gs, (int)N, yo, (uint8_t *)t.data, t.Kp,
                                                                       t.sx, sc);
        } else if (n4 > 2048) /* wide rows: two passes, four blocks a multiprocessor (see k_swiglu_fp8_2p) */
            k_swiglu_fp8_2p<TI><<<(unsigned)M, 512, 0, c->stream>>>(g, u, gs, (int)N, yo, (uint8_t *)t.data, t.Kp, t.sx,
                                                                   sc);
        else /* the row in registers, up to 4 float4 a thread */
            k_swiglu_row_fp8<TI, 4><<<(unsigned)M, (unsigned)thr, 0, c->stream>>>(g, u, gs, (int)N, yo,
                                                                                (uint8_t *)t.data, t.Kp, t.sx, sc);
    }
    else if (vec && M <= 0x7fffffff && N <= 0x7fffffff)
        k_swiglu4<TI><<<dim3((unsigned)M, (unsigned)((N / 4 + SW4_T * SW4_U - 1) / (SW4_T * SW4_U))), SW4_T, 0, c->stream>>>(
            g, u, gs, (int)N, yo, (__nv_bfloat16 *)t.data, sc);
    else
        k_swiglu<TI><<<blocks_for(n, 256) > 8192 ? 8192 : blocks_for(n, 256), 256, 0, c->stream>>>(g, u, gs, N, n, y,
                                                                                                  sc);
    if ((st = cuda_check_launch(c, "swiglu", err))) return st;
    twin_commit(c, &t);
    return VSR_OK;
}

vsr_status cu_swiglu(void *ctx, const float *g, const float *u, int64_t gs, int64_t M, int64_t N, float *y,
                           vsr_err *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    ENTER(c);
    if (M * N <= 0) return VSR_OK;
    if (gs < N)
        return vsr_err_set(err, VSR_E_INVALID, "swiglu: row stride %lld is less than the width %lld", (long long)gs,
                           (long long)N);
    PROF(c, "swiglu");
    vsr_status st;
    if ((st = kp_guard(c, g, sizeof(float) * (size_t)((M - 1) * gs + N), "swiglu", err)) ||
        (st = kp_guard(c, u, sizeof(float) * (size_t)((M - 1) * gs + N), "swiglu", err)))
        return st;
    return swiglu_run(c, g, u, gs, M, N, y, sw_scales{NULL, NULL, NULL}, err);
}

/* linear_swiglu's GEMM for BF16 and FP8 weights, the product kept in BF16 where their GEMM can write it
 * (cuBLASLt D BF16: half the product's bytes written, and SwiGLU reads half): *gu [M, *ld] and the scales
 * its reader applies (an unscaled FP8 product); *gu NULL where this GEMM could not keep it */
static vsr_status swiglu_product(cuda_ctx *c, const float *x, int64_t M, const vsr_bweight *w, float *work,
                                 const __nv_bfloat16 **gu, int64_t *ld, sw_scales *sc, vsr_err *err) {
    const int64_t N = w->v.N / 2, K = w->v.K;
    vsr_status st;
    if ((st = sole_twin_readable(c, x, M, w, err)) || (st = kp_guard(c, x, sizeof(float) * (size_t)(M * K), w->name, err)))
        return st;
    if (w->v.kind == VSR_WK_BF16) {
        const __nv_bfloat16 *xb;
        /* the BF16 product lives in the caller's work buffer (FP32 [M, 2N] holds it twice over) */
        if ((st = bf16_input(c, x, M, K, &xb, err)) ||
            (st = cuda_gemm_bf16_out_bf16(c, xb, M, (const __nv_bfloat16 *)w->w, 2 * N, K, (__nv_bfloat16 *)work, err)))
            return vsr_err_prefix(err, "%s", w->name);
        twin_clobber(c, work, sizeof(float) * (size_t)(M * 2 * N));
        *gu = (const __nv_bfloat16 *)work;
        return VSR_OK;
    }
    const float *sx = NULL;
    const void *xq = twin_find(c, x, M, K, TW_FP8, &sx);
    int ran = 0;
    const float *dsx = NULL, *dsw = NULL;
    if ((st = cuda_fp8_linear_bf16out(c, x, (const uint8_t *)xq, sx, M, w, gu, ld, &dsx, &dsw, &ran, err)))
        return vsr_err_prefix(err, "%s", w->name);
    if (!ran) *gu = NULL;
    else *sc = sw_scales{dsx, dsw, dsw ? dsw + N : NULL};
    return VSR_OK;
}

/* VSR_CUDA_LINEAR_SWIGLU=0: linear_swiglu as the FP32 linear + swiglu (A/B timing in separate processes) */
static int g_lsw_on = -1;

/* linear_swiglu (backend.h): BF16 and FP8 weights keep the product in BF16 where their GEMM can write
 * it (swiglu_product); otherwise (int4, F32, FP8 below its BF16-product rows) the FP32 linear into work,
 * then swiglu. */
vsr_status cu_linear_swiglu(void *ctx, const float *x, int64_t M, const vsr_bweight *w, float *work, float *y,
                                   vsr_err *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    ENTER(c);
    if (M <= 0) return VSR_OK;
    const int64_t N2 = w->v.N, N = N2 / 2, K = w->v.K;
    if (N2 % 2)
        return vsr_err_set(err, VSR_E_INVALID, "%s: linear_swiglu needs a stacked gate|up weight of an even number "
                           "of outputs, not %lld", w->name, (long long)N2);
    vsr_status st;
    priv(c)->kp_req = NULL; /* a keep_product_bf16 declaration is for the next linear only */
    if ((w->v.kind == VSR_WK_BF16 || w->v.kind == VSR_WK_FP8) && cuda_env_switch("VSR_CUDA_LINEAR_SWIGLU", 1, &g_lsw_on)) {
        char pname[72] = "", sname[72] = "";
        if (vsr_cuda_profile_on > 0) { /* two rows: the GEMM, and the SwiGLU over its kept product */
            snprintf(pname, sizeof pname, "linear_swiglu %s %lld->%lld M=%lld", wkind_names_cuda[w->v.kind],
                     (long long)K, (long long)N2, (long long)M);
            snprintf(sname, sizeof sname, "  its swiglu (%s) M=%lld", wkind_names_cuda[w->v.kind], (long long)M);
        }
        const __nv_bfloat16 *gu = NULL;
        int64_t ld = N2;
        sw_scales sc = {NULL, NULL, NULL};
        {
            PROF(c, pname);
            if ((st = swiglu_product(c, x, M, w, work, &gu, &ld, &sc, err))) return st;
        }
        if (gu) {
            PROF(c, sname);
            return swiglu_run(c, gu, gu + N, ld, M, N, y, sc, err);
        }
    }
    /* the FP32 product, then SwiGLU over its two halves */
    if ((st = cu_linear(ctx, x, M, w, work, 0, err)) || (st = cu_swiglu(ctx, work, work + N, N2, M, N, y, err)))
        return st;
    return VSR_OK;
}

vsr_status cu_add(void *ctx, float *y, const float *x, int64_t n, vsr_err *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    ENTER(c);
    if (n <= 0) return VSR_OK;
    PROF(c, "add");
    vsr_status st;
    if ((st = kp_guard(c, x, sizeof(float) * (size_t)n, "add", err)) ||
        (st = kp_guard(c, y, sizeof(float) * (size_t)n, "add", err)))
        return st;
    twin_clobber(c, y, sizeof(float) * (size_t)n);
    cuda_add_into(c, y, x, n);
    return cuda_check_launch(c, "add", err);
}
