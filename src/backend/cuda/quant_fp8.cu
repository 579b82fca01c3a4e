/* src/backend/cuda/quant_fp8.cu: FP8 W8A8 (compressed-tensors float-quantized: E4M3FN weights
 * with a per-channel BF16 scale [N, 1]; activations quantized per token at run time).
 *
 *   x FP32 [M, K] --(k_fp8_quant: one pass over x)--> xq e4m3 [M, Kp], sx FP32 [M]
 *       sx[m] = amax(|x[m, :]|) / 448 (1 for an all-zero row), xq = e4m3_rne_satfinite(x / sx)
 *   scaled:   y = sx[m] * sw[n] * (xq . wq^T)   one cuBLASLt FP8 matmul with outer-vector FP32
 *             scales (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F on A and B, CUDA 12.9+)
 *   unscaled: t = xq . wq^T in FP32 (cuBLASLt FP8, no scales), then y = t * sx[m] * sw[n] in an
 *             epilogue kernel: the seed's Ada rule (capability 8.9, >= 256 rows, --dtype auto);
 *             also the fallback where cuBLASLt offers no outer-vector algorithm for a shape.
 * Weights stay E4M3 on the device, padded with zeros to [Np, Kp] = [N, K] rounded up to 16
 * (cuBLASLt's FP8 operands need 16-byte leading dimensions, and it offered no FP8 algorithm for
 * N = 27 on the H200); the padded activation columns are zero too.
 * Outer-vector scales (fifth session): cuBLASLt 13.1 (CUDA 13.0's) offers them on the H200 (the "ovscale"
 * kernels torch._scaled_mm runs) only when the scale pointers are set before the heuristic query, which
 * plan_get now does; until then every query found none, hence the paths below. Where they exist
 * (fp8_ovscale: probed once per ctx, VSR_CUDA_FP8_OVSCALE=0 turns them off) a linear takes (a), its
 * product in FP32 scaled inside the GEMM (accumulating through beta), and a kept product (b), the scaled
 * product rounded to BF16 once: faster than (b') and no rounding of the linear's product. Where they do
 * not (an older cuBLASLt, or the switch off): under --dtype auto the product is kept in BF16 at every row count (as torch's and
 * vLLM's FP8 linears write it; the same rounding whatever the batch): (b) outer-vector scales into a
 * BF16 workspace, then a pass y = (y +) float(d); where cuBLASLt has no such algorithm (the H200),
 * (b') the unscaled product into BF16, then y = (y +) float(t) * sx[m] * sw[n] (half the bytes of
 * the FP32 product, written and read back); (c) the unscaled product in FP32 + the epilogue where
 * neither runs. VSR_CUDA_FP8_BF16=0, and a forced scaled path, keep the order before: (a) outer-
 * vector scales into FP32, (b) from FP8_BF16_MIN_ROWS rows (every row count when forced), (c). A BF16
 * product rounds each element once more (relative 2^-9 at most); see tests/test_cuda_quant.c.
 * linear_swiglu and keep_product_bf16 read that BF16 product directly (kept_product below; the same bf16_product as the linear);
 * at <= FP8_UNSCALED_MAX_ROWS rows under --dtype auto, as the linear's (c), the unscaled FP32 product scaled into BF16 in one
 * pass (kept_lt_small: (b)'s numerics without its 128-row tile).
 * Accumulation: promoted into FP32 by default; VSR_CUDA_FP8_FAST_ACCUM=1 accumulates fast
 * (CUBLASLT_MATMUL_DESC_FAST_ACCUM, as vLLM's FP8 GEMMs on Hopper; why it is not the default:
 * quant_common.cu); a plan is per setting, its path says ",fast".
 * cuBLASLt is asked for up to FP8_ALGOS algorithms; with --autotune-cache each is timed once per
 * shape (kernel "fp8_lt") and the winner recorded, else the heuristic's first is used.
 * Two steps: cuda_fp8_linear quantizes x (fp8_quantize) and calls cuda_fp8_linear_prequant, which a
 * producer op that quantizes its own output can call directly. On capability 9.0 the route below times
 * the own sm_90a wgmma kernel (fp8_gemm.cu: scales and accumulate in its epilogue) against these paths
 * per shape with --autotune-cache; VSR_FP8_GEMM=1 puts every product on it.
 * Floor: max(bytes / 4.19 TB/s, 2 M N K / 1,345 TFLOP/s FP8); targets and today's figures: bench/RESULTS.md ("FP8 GEMM",
 * "27B-shaped end to end"). Test: tests/test_cuda_quant.c (every path against the same-quantized reference, the
 * quantizer bit for bit, routes, kept products), tests/test_cuda_fused.c (FP8 twins read by these linears). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#define VSR_QUANT_INTERNAL_CUDA 1
#include "backend/cuda/quant_internal.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/fp8_gemm.h"
#include "vsr/device.h"

extern int quant_forced_fp8_path(void);
extern int quant_fp8_fast_accum(void);

#define FP8_PLANS 64
#define FP8_ALGOS 8
#define FP8_BF16_MIN_ROWS 128
/* Up to this many rows, under --dtype auto, a linear takes (c) even where (a) exists: cuBLASLt's outer-vector-scaled kernels are
 * 128-row tiles, 1.2-1.9x slower at 1-64 rows than the unscaled product's small-tile algorithms plus the
 * epilogue (bench/NOTES.md, eighth session, call 6: down at one row 35.2 against 68.0 us). (c) keeps (a)'s
 * numerics: an FP32 product, both scales applied after the sum, no BF16 rounding. */
#define FP8_UNSCALED_MAX_ROWS 128
enum { D_F32 = 0, D_F32_SCALED = 1, D_BF16_SCALED = 2, D_BF16 = 3 }; /* a plan's output type and scales */
static inline int dmode_scaled(int d) { return d == D_F32_SCALED || d == D_BF16_SCALED; }
static inline int dmode_bf16(int d) { return d == D_BF16_SCALED || d == D_BF16; }
#define QROW_THREADS 256
#define QROW_VEC 20 /* float4 per thread held in registers: rows up to 256*4*20 = 20480 */

static inline int64_t rup(int64_t a, int64_t b) { return (a + b - 1) / b * b; }

/* BF16 products (the default under --dtype auto, at every row count, so a request's answer does not
 * depend on how many rows share its batch): the FP8 product is rounded to BF16 once, as torch's and
 * vLLM's FP8 linears write it, through (b) or (b') below. VSR_CUDA_FP8_BF16=0 keeps FP32 products
 * (the order before 2026-11-29b: (a), then (b) from FP8_BF16_MIN_ROWS rows, then (c)). */
static int fp8_bf16_products(void) {
    static int on = -1;
    return cuda_env_switch("VSR_CUDA_FP8_BF16", 1, &on);
}

/* ---- activation quantization: one block per row ---- */

__device__ __forceinline__ float block_max(float v, float *sh) {
    for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    if (l == 0) sh[w] = v;
    __syncthreads();
    if (w == 0) {
        v = l < (int)(blockDim.x >> 5) ? sh[l] : 0.0f;
        for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
        if (l == 0) sh[32] = v;
    }
    __syncthreads();
    return sh[32];
}

__device__ __forceinline__ uint8_t to_e4m3(float f) {
    return (uint8_t)__nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3);
}

/* fast form: K % 4 == 0, K <= QROW_THREADS * 4 * QROW_VEC, rows 16-byte aligned; reads x once */
__global__ void __launch_bounds__(QROW_THREADS) k_fp8_quant_vec(const float *__restrict__ x, int64_t K, int64_t Kp,
                                                                uint8_t *__restrict__ xq, float *__restrict__ sx) {
    __shared__ float sh[33];
    const int64_t m = blockIdx.x;
    const float4 *xr = (const float4 *)(x + m * K);
    const int K4 = (int)(K / 4);
    float4 v[QROW_VEC];
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < QROW_VEC; j++) {
        int i = threadIdx.x + j * QROW_THREADS;
        v[j] = i < K4 ? __ldg(xr + i) : make_float4(0, 0, 0, 0);
        amax = fmaxf(amax, absmax4(v[j]));
    }
    amax = block_max(amax, sh);
    const float s = fp8_row_scale(amax);
    if (threadIdx.x == 0) sx[m] = s;
    const fp8_div d = fp8_div_of(s);
    uint32_t *qr = (uint32_t *)(xq + m * Kp);
#pragma unroll
    for (int j = 0; j < QROW_VEC; j++) {
        int i = threadIdx.x + j * QROW_THREADS;
        if (i < K4)
            qr[i] = (uint32_t)to_e4m3(fp8_scaled(v[j].x, d)) | (uint32_t)to_e4m3(fp8_scaled(v[j].y, d)) << 8 |
                    (uint32_t)to_e4m3(fp8_scaled(v[j].z, d)) << 16 | (uint32_t)to_e4m3(fp8_scaled(v[j].w, d)) << 24;
    }
    for (int64_t i = K + threadIdx.x; i < Kp; i += QROW_THREADS) xq[m * Kp + i] = 0;
}

/* Test hook: fp8_scaled (device_math.cuh) against x / s over n draws of (x, s): s = amax / 448 with amax
 * 2^-86 .. 2^114 (both sides of fp8_div_of's range), x = amax times a fraction in [-1, 1), a quarter of them
 * scaled down by up to 2^-40, an eighth set on an e4m3 rounding midpoint times s. counts: [0] quotients of
 * magnitude >= 2^-12 that differ in any bit, [1] e4m3 codes that differ, [2] draws on the multiply path. */
__device__ __forceinline__ uint64_t mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
__global__ void k_fp8_div_check(uint64_t seed, int64_t n, unsigned long long *counts) {
    unsigned long long c0 = 0, c1 = 0, c2 = 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const uint64_t h = mix64(seed ^ (uint64_t)i), h2 = mix64(h);
        const float amax = ldexpf(1.0f + (float)(h & 0xffffff) / 16777216.0f, (int)((h >> 24) % 201) - 86);
        const float s = amax / 448.0f;
        float x = amax * ((float)(int32_t)(uint32_t)h2 / 2147483648.0f);
        if (((h2 >> 32) & 3) == 0) x = ldexpf(x, -(int)((h2 >> 34) % 41));
        if (((h2 >> 40) & 7) == 1) { /* a midpoint between two e4m3 codes (3 fraction bits: odd sixteenths) */
            const float mid = ldexpf((float)(17 + 2 * (int)((h2 >> 43) % 16)) / 16.0f, (int)((h2 >> 47) % 15) - 7);
            x = ((h2 >> 52) & 1 ? -mid : mid) * s;
        }
        const fp8_div d = fp8_div_of(s);
        const float a = x / s, b = fp8_scaled(x, d);
        c0 += fabsf(a) >= 0x1p-12f && __float_as_uint(a) != __float_as_uint(b);
        c1 += to_e4m3(a) != to_e4m3(b);
        c2 += !d.divide;
    }
    atomicAdd(counts, c0), atomicAdd(counts + 1, c1), atomicAdd(counts + 2, c2);
}
extern "C" vsr_status cuda_fp8_div_check(cuda_ctx *c, uint64_t seed, int64_t n, int64_t counts[3], vsr_err *err) {
    unsigned long long *d = NULL, h[3] = {0, 0, 0};
    vsr_status st = cuda_check(c, cudaMalloc((void **)&d, sizeof h), "fp8 division check", err);
    if (st) return st;
    if (!(st = cuda_check(c, cudaMemsetAsync(d, 0, sizeof h, c->stream), "fp8 division check", err))) {
        k_fp8_div_check<<<1024, 256, 0, c->stream>>>(seed, n, d);
        if (!(st = cuda_check_launch(c, "fp8 division check", err)))
            st = cuda_check(c, cudaMemcpyAsync(h, d, sizeof h, cudaMemcpyDeviceToHost, c->stream), "fp8 division check", err);
        if (!st) st = cuda_check(c, cudaStreamSynchronize(c->stream), "fp8 division check", err);
    }
    cudaFree(d);
    for (int i = 0; i < 3; i++) counts[i] = (int64_t)h[i];
    return st;
}

/* general form: any K; two passes over the row (the second from L2) */
__global__ void __launch_bounds__(QROW_THREADS) k_fp8_quant_gen(const float *__restrict__ x, int64_t K, int64_t Kp,
                                                                uint8_t *__restrict__ xq, float *__restrict__ sx) {
    __shared__ float sh[33];
    const int64_t m = blockIdx.x;
    const float *xr = x + m * K;
    float amax = 0.0f;
    for (int64_t i = threadIdx.x; i < K; i += QROW_THREADS) amax = fmaxf(amax, fabsf(xr[i]));
    amax = block_max(amax, sh);
    const float s = fp8_row_scale(amax);
    if (threadIdx.x == 0) sx[m] = s;
    const fp8_div d = fp8_div_of(s);
    for (int64_t i = threadIdx.x; i < Kp; i += QROW_THREADS) xq[m * Kp + i] = i < K ? to_e4m3(fp8_scaled(xr[i], d)) : 0;
}

/* y[m, n] = (accumulate ? y : 0) + t[m, n] (* sx[m] * sw[n] when scaled); t row stride ldt */
__global__ void k_fp8_epilogue(const float *__restrict__ t, int64_t ldt, const float *__restrict__ sx,
                               const float *__restrict__ sw, int64_t M, int64_t N, float *__restrict__ y, int accumulate) {
    int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= M * N) return;
    int64_t m = id / N, n = id % N;
    float v = t[m * ldt + n];
    if (sx) v = v * sx[m] * sw[n];
    y[id] = accumulate ? y[id] + v : v;
}

/* The same, one row per blockIdx.y and 4 columns per thread (float4 where N and ldt allow): sweep 2's
 * autotune timings put cuBLASLt's FP32-out FP8 GEMM alone at 1.10 ms for 8192 x 5120 -> 17408, but
 * the whole linear at 2.0 ms; the flat kernel above spent most of the difference on two 64-bit
 * divisions per element. Same arithmetic order: (t * sx[m]) * sw[n]. */
__global__ void k_fp8_epilogue_rows(const float *__restrict__ t, int64_t ldt, const float *__restrict__ sx,
                                    const float *__restrict__ sw, int64_t N, float *__restrict__ y, int accumulate) {
    const int64_t m = blockIdx.y, n = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (n >= N) return;
    const float *tr = t + m * ldt;
    float *yr = y + m * N;
    if (N % 4 == 0 && ldt % 4 == 0) {
        float4 v = *(const float4 *)(tr + n);
        if (sx) {
            const float s = sx[m];
            const float4 w = *(const float4 *)(sw + n);
            v.x = v.x * s * w.x, v.y = v.y * s * w.y, v.z = v.z * s * w.z, v.w = v.w * s * w.w;
        }
        if (accumulate) {
            const float4 o = *(const float4 *)(yr + n);
            v.x = o.x + v.x, v.y = o.y + v.y, v.z = o.z + v.z, v.w = o.w + v.w;
        }
        *(float4 *)(yr + n) = v;
        return;
    }
    for (int64_t i = n; i < n + 4 && i < N; i++) {
        float v = tr[i];
        if (sx) v = v * sx[m] * sw[i];
        yr[i] = accumulate ? yr[i] + v : v;
    }
}

/* launches the row epilogue (the flat one past 65535 rows, gridDim.y's limit) */
static void fp8_epilogue(cuda_ctx *c, const float *t, int64_t ldt, const float *sx, const float *sw, int64_t M, int64_t N,
                         float *y, int accumulate) {
    if (M <= 65535) {
        dim3 grid((unsigned)((N + 1023) / 1024), (unsigned)M);
        k_fp8_epilogue_rows<<<grid, 256, 0, c->stream>>>(t, ldt, sx, sw, N, y, accumulate);
    } else
        k_fp8_epilogue<<<(unsigned)((M * N + 255) / 256), 256, 0, c->stream>>>(t, ldt, sx, sw, M, N, y, accumulate);
}

/* From the unscaled product rounded to BF16 (t [M, ldt], path (b')):
 *   SCALE_TO_BF16 = 0: y[m, n] (+)= float(t) * sx[m] * sw[n], y FP32 [M, N] (the FP32 epilogue's order);
 *   SCALE_TO_BF16 = 1: yb[m, n] = bf16(float(t) * sx[m] * sw[n]), yb BF16 [M, N] (may be t itself when
 *   ldt == N: each element is read before it is written by the same thread).
 * 8 columns per thread when N, ldt are multiples of 8 (16-byte rows), else one. */
template <int SCALE_TO_BF16>
__global__ void k_fp8_epilogue_bf16(const __nv_bfloat16 *t, int64_t ldt, const float *__restrict__ sx,
                                    const float *__restrict__ sw, int64_t M, int64_t N, void *out, int accumulate) {
    const int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (N % 8 == 0 && ldt % 8 == 0) {
        const int64_t n8 = N / 8;
        if (id >= M * n8) return;
        const int64_t m = id / n8, n = (id % n8) * 8;
        uint4 v = *(const uint4 *)(t + m * ldt + n);
        const __nv_bfloat162 *h = (const __nv_bfloat162 *)&v;
        const float s = sx[m];
        float o[8];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float2 f = __bfloat1622float2(h[j]);
            o[2 * j] = f.x * s * sw[n + 2 * j], o[2 * j + 1] = f.y * s * sw[n + 2 * j + 1];
        }
        if (SCALE_TO_BF16) {
            uint4 r;
            __nv_bfloat162 *rh = (__nv_bfloat162 *)&r;
#pragma unroll
            for (int j = 0; j < 4; j++) rh[j] = __floats2bfloat162_rn(o[2 * j], o[2 * j + 1]);
            *(uint4 *)((__nv_bfloat16 *)out + m * N + n) = r;
        } else {
            float4 *yo = (float4 *)((float *)out + m * N + n);
            float4 lo = make_float4(o[0], o[1], o[2], o[3]), hi = make_float4(o[4], o[5], o[6], o[7]);
            if (accumulate) {
                float4 y0 = yo[0], y1 = yo[1];
                lo.x = y0.x + lo.x, lo.y = y0.y + lo.y, lo.z = y0.z + lo.z, lo.w = y0.w + lo.w;
                hi.x = y1.x + hi.x, hi.y = y1.y + hi.y, hi.z = y1.z + hi.z, hi.w = y1.w + hi.w;
            }
            yo[0] = lo, yo[1] = hi;
        }
        return;
    }
    if (id >= M * N) return;
    const int64_t m = id / N, n = id % N;
    const float v = __bfloat162float(t[m * ldt + n]) * sx[m] * sw[n];
    if (SCALE_TO_BF16) ((__nv_bfloat16 *)out)[id] = __float2bfloat16_rn(v);
    else ((float *)out)[id] = accumulate ? ((float *)out)[id] + v : v;
}

/* From the unscaled FP32 product (t [M, ldt], path (c)): o[m, n] = bf16(t * sx[m] * sw[n]), o BF16 [M, ldo]: the
 * scaled product rounded once, as (b) writes it. 8 columns per thread when N, ldt, ldo are multiples of 8. */
__global__ void k_fp8_f32_scaled_bf16(const float *__restrict__ t, int64_t ldt, const float *__restrict__ sx,
                                      const float *__restrict__ sw, int64_t M, int64_t N, __nv_bfloat16 *__restrict__ o,
                                      int64_t ldo) {
    const int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (N % 8 == 0 && ldt % 8 == 0 && ldo % 8 == 0) {
        const int64_t n8 = N / 8;
        if (id >= M * n8) return;
        const int64_t m = id / n8, n = (id % n8) * 8;
        const float4 a = *(const float4 *)(t + m * ldt + n), b = *(const float4 *)(t + m * ldt + n + 4);
        const float4 wa = *(const float4 *)(sw + n), wb = *(const float4 *)(sw + n + 4);
        const float s = sx[m];
        uint4 r;
        __nv_bfloat162 *rh = (__nv_bfloat162 *)&r;
        rh[0] = __floats2bfloat162_rn(a.x * s * wa.x, a.y * s * wa.y), rh[1] = __floats2bfloat162_rn(a.z * s * wa.z, a.w * s * wa.w);
        rh[2] = __floats2bfloat162_rn(b.x * s * wb.x, b.y * s * wb.y), rh[3] = __floats2bfloat162_rn(b.z * s * wb.z, b.w * s * wb.w);
        *(uint4 *)(o + m * ldo + n) = r;
        return;
    }
    if (id >= M * N) return;
    const int64_t m = id / N, n = id % N;
    o[m * ldo + n] = __float2bfloat16_rn(t[m * ldt + n] * sx[m] * sw[n]);
}

static vsr_status fp8_epilogue_bf16(cuda_ctx *c, const __nv_bfloat16 *t, int64_t ldt, const float *sx, const float *sw,
                                    int64_t M, int64_t N, void *out, int to_bf16, int accumulate, vsr_err *err) {
    const int64_t items = (N % 8 == 0 && ldt % 8 == 0) ? M * (N / 8) : M * N;
    const unsigned blocks = (unsigned)((items + 255) / 256);
    if (to_bf16) k_fp8_epilogue_bf16<1><<<blocks, 256, 0, c->stream>>>(t, ldt, sx, sw, M, N, out, 0);
    else k_fp8_epilogue_bf16<0><<<blocks, 256, 0, c->stream>>>(t, ldt, sx, sw, M, N, out, accumulate);
    return cuda_check_launch(c, "FP8 epilogue (BF16 product)", err);
}

/* y[m, n] = (accumulate ? y : 0) + d[m, n] (BF16, row stride ldd); 8 outputs per thread when aligned */
__global__ void k_fp8_bf16_out(const __nv_bfloat16 *__restrict__ d, int64_t ldd, int64_t M, int64_t N,
                               float *__restrict__ y, int accumulate) {
    int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (N % 8 == 0 && ldd % 8 == 0) {
        int64_t n8 = N / 8;
        if (id >= M * n8) return;
        int64_t m = id / n8, n = (id % n8) * 8;
        uint4 v = *(const uint4 *)(d + m * ldd + n);
        const __nv_bfloat162 *h = (const __nv_bfloat162 *)&v;
        float4 *yo = (float4 *)(y + m * N + n);
        float2 a = __bfloat1622float2(h[0]), b = __bfloat1622float2(h[1]), c2 = __bfloat1622float2(h[2]),
               e = __bfloat1622float2(h[3]);
        float4 lo = make_float4(a.x, a.y, b.x, b.y), hi = make_float4(c2.x, c2.y, e.x, e.y);
        if (accumulate) {
            float4 y0 = yo[0], y1 = yo[1];
            lo.x += y0.x, lo.y += y0.y, lo.z += y0.z, lo.w += y0.w;
            hi.x += y1.x, hi.y += y1.y, hi.z += y1.z, hi.w += y1.w;
        }
        yo[0] = lo, yo[1] = hi;
        return;
    }
    if (id >= M * N) return;
    int64_t m = id / N, n = id % N;
    float v = __bfloat162float(d[m * ldd + n]);
    y[id] = accumulate ? y[id] + v : v;
}

/* ---- cuBLASLt plans ---- */

struct fp8_plan {
    int used;
    int64_t M, N, Kp, ldd;
    int dmode, fast;
    int ok; /* 0: no algorithm (remembered so we do not ask again) */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algos[FP8_ALGOS];
    int n_algos, chosen; /* chosen: index into algos, -1 until the first run decides */
    const char *src;     /* "default", "timed", "cache" */
};

static void plan_free(fp8_plan *p) {
    if (!p->used) return;
    if (p->desc) cublasLtMatmulDescDestroy(p->desc);
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->ld) cublasLtMatrixLayoutDestroy(p->ld);
    memset(p, 0, sizeof *p);
}

extern "C" void fp8_plans_free(quant_state *q) {
    if (!q->plans) return;
    for (int i = 0; i < q->n_plans; i++) plan_free(&q->plans[i]);
    free(q->plans);
    q->plans = NULL;
    q->n_plans = q->next_plan = 0;
}

/* column-major view: D[N, M] (ld ldd) = op(Wq)[N, Kp] . Xq[Kp, M]; Wq stored Kp x N, transposed */
static vsr_status plan_get(cuda_ctx *c, quant_state *q, int64_t M, int64_t N, int64_t Kp, int64_t ldd, int dmode,
                           fp8_plan **out, vsr_err *err) {
    int fast = quant_fp8_fast_accum();
    if (!q->plans) {
        q->plans = (fp8_plan *)calloc(FP8_PLANS, sizeof(fp8_plan));
        if (!q->plans) return vsr_err_set(err, VSR_E_NOMEM, "cuda:%d: out of memory (FP8 plans)", c->device);
        q->n_plans = FP8_PLANS;
    }
    for (int i = 0; i < q->n_plans; i++) {
        fp8_plan *p = &q->plans[i];
        if (p->used && p->M == M && p->N == N && p->Kp == Kp && p->ldd == ldd && p->dmode == dmode && p->fast == fast) {
            *out = p;
            return VSR_OK;
        }
    }
    fp8_plan *p = &q->plans[q->next_plan];
    q->next_plan = (q->next_plan + 1) % q->n_plans;
    plan_free(p);
    p->used = 1, p->M = M, p->N = N, p->Kp = Kp, p->ldd = ldd, p->dmode = dmode, p->fast = fast;
    p->chosen = -1, p->src = "default";
    *out = p;
    cublasOperation_t tA = CUBLAS_OP_T, tB = CUBLAS_OP_N;
    int8_t fa = (int8_t)fast;
    if (cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&p->la, CUDA_R_8F_E4M3, (uint64_t)Kp, (uint64_t)N, Kp) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_8F_E4M3, (uint64_t)Kp, (uint64_t)M, Kp) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&p->ld, dmode_bf16(dmode) ? CUDA_R_16BF : CUDA_R_32F, (uint64_t)N, (uint64_t)M,
                                   ldd) != CUBLAS_STATUS_SUCCESS) {
        plan_free(p);
        return vsr_err_set(err, VSR_E_DEVICE, "cuda:%d: cuBLASLt: cannot create an FP8 matmul description", c->device);
    }
    cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &tA, sizeof tA);
    cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tB, sizeof tB);
    cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fa, sizeof fa);
    if (dmode_scaled(dmode)) {
        int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
        if (cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode) !=
                CUBLAS_STATUS_SUCCESS ||
            cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode) !=
                CUBLAS_STATUS_SUCCESS)
            return VSR_OK; /* p->ok = 0: this cuBLASLt has no outer-vector scales */
        /* the scale pointers set before the heuristic: without them (NULL until run_plan sets the real
         * ones) cuBLASLt 13.1 offers no outer-vector algorithm at all; with them it offers the "ovscale"
         * kernels torch._scaled_mm runs (bench/NOTES.md, fifth session). A placeholder: any device address. */
        const void *ph = c->lt_ws;
        if (cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &ph, sizeof ph) !=
                CUBLAS_STATUS_SUCCESS ||
            cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &ph, sizeof ph) !=
                CUBLAS_STATUS_SUCCESS)
            return VSR_OK;
    }
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    size_t ws = c->lt_ws_bytes;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    cublasLtMatmulHeuristicResult_t res[FP8_ALGOS];
    int found = 0;
    cublasStatus_t s =
        cublasLtMatmulAlgoGetHeuristic(c->lt, p->desc, p->la, p->lb, p->ld, p->ld, pref, FP8_ALGOS, res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (s == CUBLAS_STATUS_SUCCESS)
        for (int i = 0; i < found && i < FP8_ALGOS; i++)
            if (res[i].state == CUBLAS_STATUS_SUCCESS) p->algos[p->n_algos++] = res[i].algo;
    p->ok = p->n_algos > 0;
    return VSR_OK;
}

static cublasStatus_t plan_matmul(cuda_ctx *c, fp8_plan *p, int ai, const void *wq, const void *xq, void *d,
                                  int accumulate) {
    float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    return cublasLtMatmul(c->lt, p->desc, &alpha, wq, p->la, xq, p->lb, &beta, d, p->ld, d, p->ld, &p->algos[ai],
                          c->lt_ws, c->lt_ws_bytes, c->stream);
}

typedef struct fp8_tune {
    fp8_plan *p;
    const void *wq, *xq;
} fp8_tune;

/* autotune launch of algorithm `cand` into out; one cuBLASLt refuses is skipped (very slow) */
static int fp8_launch(cuda_ctx *c, int cand, void *arg, void *out, vsr_err *err) {
    (void)err;
    fp8_tune *t = (fp8_tune *)arg;
    if (plan_matmul(c, t->p, cand, t->wq, t->xq, out, 0) == CUBLAS_STATUS_SUCCESS) return 0;
    (void)cudaGetLastError();
    return TUNE_SKIP;
}

/* VSR_CUDA_FP8_OVSCALE=0: cuBLASLt's outer-vector-scaled algorithms are not used (the paths of a cuBLASLt
 * without them: (b') and (c)); read once, as the other switches; cuda_quant_set_fp8_ovscale overrides it
 * (tests compare both in one process) */
static int g_ovscale_on = -1;
static int ovscale_off(void) { return !cuda_env_switch("VSR_CUDA_FP8_OVSCALE", 1, &g_ovscale_on); }
extern "C" int cuda_quant_set_fp8_ovscale(int on) {
    return cuda_env_switch_set("VSR_CUDA_FP8_OVSCALE", 1, &g_ovscale_on, on ? 1 : 0, 1);
}

static vsr_status run_plan(cuda_ctx *c, fp8_plan *p, const void *wq, const void *xq, const float *sw, const float *sx,
                           void *d, int accumulate, int *ran, vsr_err *err) {
    *ran = 0;
    if (!p->ok || (dmode_scaled(p->dmode) && ovscale_off())) return VSR_OK;
    if (dmode_scaled(p->dmode)) {
        if (cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sw, sizeof sw) ||
            cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sx, sizeof sx)) {
            p->ok = 0;
            return VSR_OK;
        }
    }
    if (p->chosen < 0) {
        int choice = 0;
        const char *src = "default";
        if (p->n_algos > 1 && c->autotune_dir[0]) {
            char key[128];
            snprintf(key, sizeof key, "m%lld-n%lld-k%lld-ld%lld-d%d-f%d", (long long)p->M, (long long)p->N, (long long)p->Kp,
                     (long long)p->ldd, p->dmode, p->fast);
            fp8_tune t = {p, wq, xq};
            vsr_status st = autotune_choose_indexed(c, "fp8_lt", key, p->n_algos, fp8_launch, &t,
                                                    sizeof(float) * (size_t)(p->M * p->ldd), &choice, &src, err);
            if (st) return st;
        }
        p->chosen = choice, p->src = src;
    }
    cublasStatus_t s = plan_matmul(c, p, p->chosen, wq, xq, d, accumulate);
    if (s == CUBLAS_STATUS_NOT_SUPPORTED || s == CUBLAS_STATUS_INVALID_VALUE) {
        p->ok = 0; /* fall back, and remember */
        return VSR_OK;
    }
    if (s != CUBLAS_STATUS_SUCCESS)
        return vsr_err_set(err, VSR_E_DEVICE, "cuda:%d: cuBLASLt FP8 matmul [%lld x %lld] . [%lld x %lld]^T: status %d",
                           c->device, (long long)p->M, (long long)p->Kp, (long long)p->N, (long long)p->Kp, (int)s);
    *ran = 1;
    return VSR_OK;
}

/* Whether cuBLASLt offers outer-vector-scaled FP8 algorithms here (probed once per ctx at one shape,
 * FP32 and BF16 out; VSR_CUDA_FP8_OVSCALE=0 or cuda_quant_set_fp8_ovscale(0) answers no). With
 * them, FP8 linears take (a), FP32 products scaled inside the GEMM (no BF16 rounding, no pass over the
 * product), and kept products (b), the scaled product rounded to BF16 once; without, (b') as before. */
static int fp8_ovscale(cuda_ctx *c, quant_state *q) {
    if (ovscale_off()) return 0;
    if (!q->fp8_ov) {
        fp8_plan *p;
        vsr_err err;
        int ok = plan_get(c, q, 256, 256, 256, 256, D_F32_SCALED, &p, &err) == VSR_OK && p->ok;
        ok = ok && plan_get(c, q, 256, 256, 256, 256, D_BF16_SCALED, &p, &err) == VSR_OK && p->ok;
        q->fp8_ov = ok ? 2 : 1;
    }
    return q->fp8_ov == 2;
}

extern "C" int cuda_quant_fp8_ovscale(void *ctx) {
    quant_state *q;
    vsr_err err;
    if (quant_state_get((cuda_ctx *)ctx, &q, &err)) return 0;
    return fp8_ovscale((cuda_ctx *)ctx, q);
}

/* the path names say where the tensor cores' sums were not promoted (fast accumulation) */
static inline const char *acc_tag(const fp8_plan *p) { return p->fast ? ",fast" : ""; }

/* ---- hooks ---- */

/* what an FP8 upload keeps (vsr_bweight.q): the shared metadata first, so b->q is both */
typedef struct fp8_meta {
    quant_wmeta base;
    fp8_gemm_wcache gemm; /* the sm_90a kernel's TMA descriptors of this weight */
} fp8_meta;

extern "C" vsr_status cuda_fp8_upload(cuda_ctx *c, const vsr_weight_view *v, vsr_bweight *b, vsr_err *err) {
    const char *nm = b->name;
    if (c->cc_major * 10 + c->cc_minor < 89)
        return vsr_err_set(err, VSR_E_DEVICE, "%s: %s; cuda:%d is %s (compute capability %d.%d)", nm, VSR_REFUSAL_FP8,
                           c->device, c->dev_name, c->cc_major, c->cc_minor);
    if (!v->scale) return vsr_err_set(err, VSR_E_FORMAT, "cuda:%d: %s: FP8 weight has no weight_scale", c->device, nm);
    /* rows padded to Np (zero rows, zero scales): cuBLASLt has no FP8 algorithm for odd m */
    int64_t N = v->N, K = v->K, Kp = rup(K, 16), Np = rup(N, 16);
    float *sw = (float *)calloc((size_t)Np, sizeof(float));
    if (!sw) return vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory", nm);
    for (int64_t n = 0; n < N; n++) {
        uint32_t u = (uint32_t)((const uint16_t *)v->scale)[n] << 16;
        memcpy(&sw[n], &u, 4);
    }
    vsr_status st = cuda_upload_bytes(c, sw, sizeof(float) * (size_t)Np, nm, &b->scale, err);
    free(sw);
    if (!st) st = cuda_check(c, cudaMalloc(&b->w, (size_t)(Np * Kp)), "FP8 weight: cudaMalloc", err);
    if (!st && (Kp != K || Np != N))
        st = cuda_check(c, cudaMemsetAsync(b->w, 0, (size_t)(Np * Kp), c->stream), "FP8 weight: memset", err);
    if (!st)
        st = cuda_check(c, cudaMemcpy2DAsync(b->w, (size_t)Kp, v->w, (size_t)K, (size_t)K, (size_t)N, cudaMemcpyHostToDevice,
                                             c->stream),
                        "FP8 weight: copy to device", err);
    if (!st) st = cuda_check(c, cudaStreamSynchronize(c->stream), "FP8 upload: synchronize", err);
    fp8_meta *fm = NULL;
    if (!st && !(fm = (fp8_meta *)calloc(1, sizeof *fm))) st = vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory", nm);
    if (st) {
        if (st != VSR_E_NOMEM) vsr_err_prefix(err, "%s", nm);
        cudaFree(b->w), cudaFree(b->scale);
        b->w = b->scale = NULL;
        return st;
    }
    quant_wmeta *m = &fm->base;
    m->Np = Np, m->Kp = Kp, m->G = 1, m->fused_ok = 0;
    b->q = m; /* fm itself: cuda_quant_release frees it with one free() */
    b->bytes = (uint64_t)(Np * Kp) + sizeof(float) * (uint64_t)Np;
    return VSR_OK;
}

/* The own sm_90a kernel (fp8_gemm.cu): VSR_FP8_GEMM=1 puts every FP8 linear on it (FP32 products, its own
 * width rule) on capability 9.0; 0 keeps every one on cuBLASLt; unset (-1), the route below decides per
 * shape (timed with --autotune-cache, else cuBLASLt). As a whole linear it is level with cuBLASLt at
 * 4096-8192 rows and slower at 128-1024 (bench/notes/2026-11-29-cuda-first.md "FP8 wgmma kernel", "The FP8 route"). */
static int fp8_wgmma_mode(void) {
    const char *s = getenv("VSR_FP8_GEMM");
    return s && *s ? atoi(s) : -1;
}

/* x FP32 [M, K] -> xq e4m3 [M, Kp] (zero columns K..Kp), sx FP32 [M] (see the top of this file) */
static vsr_status fp8_quantize(cuda_ctx *c, const float *x, int64_t M, int64_t K, int64_t Kp, uint8_t *xq, float *sx,
                               vsr_err *err) {
    if (K % 4 == 0 && K <= (int64_t)QROW_THREADS * 4 * QROW_VEC && ((uintptr_t)x & 15) == 0)
        k_fp8_quant_vec<<<(unsigned)M, QROW_THREADS, 0, c->stream>>>(x, K, Kp, xq, sx);
    else
        k_fp8_quant_gen<<<(unsigned)M, QROW_THREADS, 0, c->stream>>>(x, K, Kp, xq, sx);
    return cuda_check_launch(c, "FP8 activation quantization", err);
}

/* x FP32 [M, K] quantized into the activation workspace: *xq e4m3 [M, Kp], then *sx FP32 [M] (16-byte
 * aligned: M*Kp is a multiple of 16) */
static vsr_status quantize_to_act(cuda_ctx *c, quant_state *q, const float *x, int64_t M, const vsr_bweight *w,
                                  const uint8_t **xq, const float **sx, vsr_err *err) {
    const int64_t K = w->v.K, Kp = ((const quant_wmeta *)w->q)->Kp;
    vsr_status st = quant_grow(c, &q->act, &q->act_bytes, (size_t)(M * Kp) + sizeof(float) * (size_t)M,
                               "FP8 activations", err);
    if (st) return st;
    uint8_t *xa = (uint8_t *)q->act;
    float *sa = (float *)(xa + M * Kp);
    *xq = xa, *sx = sa;
    return fp8_quantize(c, x, M, K, Kp, xa, sa, err);
}

/* The FP8 product in BF16 into out [M, Np] (row stride Np): (b) scaled by cuBLASLt (*scaled = 1), or,
 * where it has no such algorithm and bf16p, (b') unscaled (*scaled = 0: the reader applies sx[m] *
 * sw[n]). *pp: the plan that ran (for the path name); *ran = 0: neither ran. */
static vsr_status bf16_product(cuda_ctx *c, quant_state *q, const uint8_t *xq, const float *sx, int64_t M,
                               const vsr_bweight *w, int bf16p, void *out, int *scaled, fp8_plan **pp, int *ran,
                               vsr_err *err) {
    const quant_wmeta *m = (const quant_wmeta *)w->q;
    const int64_t Kp = m->Kp, Np = m->Np;
    vsr_status st;
    if ((st = plan_get(c, q, M, Np, Kp, Np, D_BF16_SCALED, pp, err)) ||
        (st = run_plan(c, *pp, w->w, xq, (const float *)w->scale, sx, out, 0, ran, err)))
        return st;
    *scaled = 1;
    if (*ran || !bf16p) return VSR_OK;
    *scaled = 0;
    if ((st = plan_get(c, q, M, Np, Kp, Np, D_BF16, pp, err))) return st;
    return run_plan(c, *pp, w->w, xq, NULL, NULL, out, 0, ran, err);
}

extern "C" vsr_status cuda_fp8_linear(cuda_ctx *c, const float *x, int64_t M, const vsr_bweight *w, float *y,
                                      int accumulate, vsr_err *err) {
    if (M <= 0) return VSR_OK;
    if (!w->q) return vsr_err_set(err, VSR_E_INTERNAL, "cuda:%d: %s: FP8 weight was not uploaded", c->device, w->name);
    quant_state *q;
    const uint8_t *xq;
    const float *sx;
    vsr_status st;
    /* step 1, quantize x; step 2, the scaled FP8 product */
    if ((st = quant_state_get(c, &q, err)) || (st = quantize_to_act(c, q, x, M, w, &xq, &sx, err))) return st;
    return cuda_fp8_linear_prequant(c, xq, sx, M, w, y, accumulate, err);
}

/* The cuBLASLt paths of cuda_fp8_linear_prequant: (a), (b), (b') and (c) at the top of this file. */
static vsr_status lt_linear(cuda_ctx *c, quant_state *q, const uint8_t *xq, const float *sx, int64_t M,
                            const vsr_bweight *w, float *y, int accumulate, vsr_err *err) {
    quant_wmeta *m = (quant_wmeta *)w->q;
    vsr_status st;
    int64_t N = w->v.N, Kp = m->Kp;
    const float *sw = (const float *)w->scale;
    int forced = quant_forced_fp8_path();
    int64_t Np = m->Np;
    fp8_plan *p;
    int ran = 0;
    int unscaled = forced == 2 ||
                   (forced == 0 && quant_dtype_auto(c) && c->cc_major == 8 && c->cc_minor == 9 && M >= 256);
    const int ov = fp8_ovscale(c, q);
    const int bf16p = forced == 0 && fp8_bf16_products() && !ov;
    /* (c) at few rows under --dtype auto (FP8_UNSCALED_MAX_ROWS); an explicit --dtype keeps the scaled product */
    const int small = forced == 0 && ov && quant_dtype_auto(c) && M <= FP8_UNSCALED_MAX_ROWS;
    if (!unscaled && !small) {
        /* (a) outer-vector scales, FP32 out: straight into y where its row stride suits cuBLASLt (16 bytes) */
        if (bf16p) {
            /* BF16 products: (b), else (b') */
        } else if (N == Np) {
            if ((st = plan_get(c, q, M, N, Kp, N, D_F32_SCALED, &p, err)) ||
                (st = run_plan(c, p, w->w, xq, sw, sx, y, accumulate, &ran, err)))
                return st;
            if (ran) {
                quant_set_last_path("fp8:scaled(outer-vec,a%d,%s%s)", p->chosen, p->src, acc_tag(p));
                return VSR_OK;
            }
        } else {
            if ((st = quant_grow(c, &q->wtmp, &q->wtmp_bytes, sizeof(float) * (size_t)(M * Np), "FP8 product", err)) ||
                (st = plan_get(c, q, M, Np, Kp, Np, D_F32_SCALED, &p, err)) ||
                (st = run_plan(c, p, w->w, xq, sw, sx, q->wtmp, 0, &ran, err)))
                return st;
            if (ran) {
                fp8_epilogue(c, (const float *)q->wtmp, Np, NULL, NULL, M, N, y, accumulate);
                quant_set_last_path("fp8:scaled(outer-vec,padded,a%d,%s%s)", p->chosen, p->src, acc_tag(p));
                return cuda_check_launch(c, "FP8 copy-out", err);
            }
        }
        /* (b) outer-vector scales, BF16 out, then widened (and accumulated) into y; (b') where cuBLASLt
         * has no outer-vector algorithm (CUDA 13.0 on the H200 has none): the unscaled product rounded
         * to BF16 (half the bytes of the FP32 one, written and read back), then the scales */
        if (bf16p || forced == 1 || M >= FP8_BF16_MIN_ROWS) {
            int scaled = 0;
            if ((st = quant_grow(c, &q->wtmp, &q->wtmp_bytes, sizeof(__nv_bfloat16) * (size_t)(M * Np), "FP8 product",
                                 err)) ||
                (st = bf16_product(c, q, xq, sx, M, w, bf16p, q->wtmp, &scaled, &p, &ran, err)))
                return st;
            const __nv_bfloat16 *d = (const __nv_bfloat16 *)q->wtmp;
            if (ran && scaled) {
                int64_t items = (N % 8 == 0) ? M * (N / 8) : M * N;
                k_fp8_bf16_out<<<(unsigned)((items + 255) / 256), 256, 0, c->stream>>>(d, Np, M, N, y, accumulate);
                quant_set_last_path("fp8:scaled(outer-vec,bf16-out,a%d,%s%s)", p->chosen, p->src, acc_tag(p));
                return cuda_check_launch(c, "FP8 BF16 output", err);
            }
            if (ran) {
                quant_set_last_path("fp8:unscaled(bf16-out,a%d,%s%s)+epilogue", p->chosen, p->src, acc_tag(p));
                return fp8_epilogue_bf16(c, d, Np, sx, sw, M, N, y, 0, accumulate, err);
            }
        }
    }
    /* (c) unscaled FP8 product into FP32, then the scales */
    if ((st = quant_grow(c, &q->wtmp, &q->wtmp_bytes, sizeof(float) * (size_t)(M * Np), "FP8 product", err)) ||
        (st = plan_get(c, q, M, Np, Kp, Np, D_F32, &p, err)) ||
        (st = run_plan(c, p, w->w, xq, NULL, NULL, q->wtmp, 0, &ran, err)))
        return st;
    if (!ran)
        return vsr_err_set(err, VSR_E_DEVICE, "cuda:%d (%s): cuBLASLt offers no FP8 matmul for [%lld x %lld] . [%lld x %lld]^T",
                           c->device, c->dev_name, (long long)M, (long long)Kp, (long long)N, (long long)Kp);
    fp8_epilogue(c, (const float *)q->wtmp, Np, sx, sw, M, N, y, accumulate);
    if (small && !unscaled)
        quant_set_last_path("fp8:unscaled+epilogue(<= %d rows,a%d,%s)%s", FP8_UNSCALED_MAX_ROWS, p->chosen, p->src,
                            p->fast ? "(fast)" : "");
    else
        quant_set_last_path(unscaled ? "fp8:unscaled+epilogue%s" : "fp8:unscaled+epilogue(no outer-vec algorithm)%s",
                            p->fast ? "(fast)" : "");
    return cuda_check_launch(c, "FP8 epilogue", err);
}

/* ---- route: cuBLASLt or the own sm_90a kernel (capability 9.0, VSR_FP8_GEMM unset) ----
 * ROUTE_LT is lt_linear (the product by cuBLASLt, then a scaling pass that also does y +=); ROUTE_WG*
 * is fp8_gemm.cu's kernel with the scales and y += in its epilogue, at tile width 128 or 256. With
 * --autotune-cache the three are timed once per (M, N, K, accumulate, fast, BF16 products) as kernel
 * "fp8_route" and the fastest is recorded (bench/notes/2026-11-29-cuda-sessions.md "FP8 route"): the own kernel saves the pass
 * over y where cuBLASLt's GEMM is no faster (the += projections). Without a cache: ROUTE_LT. Under
 * BF16 products the own kernel rounds each product to BF16 before its scales, as (b') does, so a
 * route changes only the order of the sums, as cuBLASLt's own algorithm choice per shape does.
 * Products kept for a reader (kept_product: linear_swiglu, keep_product_bf16) stay on cuBLASLt. */
enum { ROUTE_LT = 0, ROUTE_WG128 = 1, ROUTE_WG256 = 2, N_ROUTES = 3 };
static const char *const ROUTE_NAMES[N_ROUTES] = {"lt", "wg128", "wg256"};
static int g_force_route = -1;
extern "C" int cuda_quant_force_fp8_route(int route) {
    if (route < -1 || route >= N_ROUTES) return -2;
    int old = g_force_route;
    g_force_route = route;
    return old;
}

static vsr_status route_run(cuda_ctx *c, quant_state *q, int route, const uint8_t *xq, const float *sx, int64_t M,
                            const vsr_bweight *w, float *y, int accumulate, int round_bf16, int *ran, vsr_err *err) {
    *ran = 1;
    if (route == ROUTE_LT) return lt_linear(c, q, xq, sx, M, w, y, accumulate, err);
    quant_wmeta *m = (quant_wmeta *)w->q;
    return fp8_gemm_run(c, xq, sx, M, (const uint8_t *)w->w, (const float *)w->scale, w->v.N, m->Np, m->Kp, y,
                        w->v.N, FG_OUT_F32, accumulate, quant_fp8_fast_accum(), route == ROUTE_WG256 ? 256 : 128, round_bf16,
                        &((fp8_meta *)m)->gemm, ran, err);
}

/* A kept product at few rows under --dtype auto takes what the linear takes there ((c), FP8_UNSCALED_MAX_ROWS):
 * cuBLASLt's outer-vector kernel (b) is a 128-row tile (down at one row 64.9 us against 35.5 for (c)). */
static int kept_small(cuda_ctx *c, quant_state *q, int64_t M) {
    return quant_forced_fp8_path() == 0 && quant_dtype_auto(c) && M <= FP8_UNSCALED_MAX_ROWS && fp8_ovscale(c, q);
}
/* ... as the unscaled FP32 product (small tiles) into q->aux, then one pass applying both scales and rounding
 * once into o [M, ldo] BF16: what (b) writes (the sum in FP32, the scales after it, one rounding) */
static vsr_status kept_lt_small(cuda_ctx *c, quant_state *q, const uint8_t *xq, const float *sx, int64_t M,
                                const vsr_bweight *w, __nv_bfloat16 *o, int64_t ldo, fp8_plan **pp, int *ran, vsr_err *err) {
    const quant_wmeta *m = (const quant_wmeta *)w->q;
    const int64_t N = w->v.N, Np = m->Np;
    vsr_status st;
    if ((st = quant_grow(c, &q->aux, &q->aux_bytes, sizeof(float) * (size_t)(M * Np), "FP8 product (FP32)", err)) ||
        (st = plan_get(c, q, M, Np, m->Kp, Np, D_F32, pp, err)) ||
        (st = run_plan(c, *pp, w->w, xq, NULL, NULL, q->aux, 0, ran, err)) || !*ran)
        return st;
    const int64_t items = (N % 8 == 0 && Np % 8 == 0 && ldo % 8 == 0) ? M * (N / 8) : M * N;
    k_fp8_f32_scaled_bf16<<<(unsigned)((items + 255) / 256), 256, 0, c->stream>>>((const float *)q->aux, Np, sx,
                                                                                 (const float *)w->scale, M, N, o, ldo);
    quant_set_last_path("fp8:unscaled(<= %d rows,bf16-kept,a%d,%s%s)+scaled into BF16", FP8_UNSCALED_MAX_ROWS,
                        (*pp)->chosen, (*pp)->src, acc_tag(*pp));
    return cuda_check_launch(c, "FP8 kept product: scales into BF16", err);
}

/* A product kept for a reader (kept_product below) on route `route`: KEPT_RAW the unscaled BF16 product
 * into out [M, Np] (linear_swiglu applies the scales), KEPT_SCALED the scaled one into out [M, N]
 * (keep_product_bf16). ROUTE_LT: cuBLASLt's BF16 product (+ the scaling pass for KEPT_SCALED where it
 * is unscaled); *scaled says whether out holds scaled values. */
enum { KEPT_NONE = 0, KEPT_RAW = 1, KEPT_SCALED = 2 };
static vsr_status kept_run(cuda_ctx *c, quant_state *q, int route, const uint8_t *xq, const float *sx, int64_t M,
                           const vsr_bweight *w, int kept, void *out, int *scaled, int *ran, vsr_err *err) {
    quant_wmeta *m = (quant_wmeta *)w->q;
    const int64_t N = w->v.N, Np = m->Np;
    const float *sw = (const float *)w->scale;
    vsr_status st;
    if (route == ROUTE_LT) {
        fp8_plan *p;
        if (kept_small(c, q, M)) {
            *scaled = 1;
            return kept_lt_small(c, q, xq, sx, M, w, (__nv_bfloat16 *)out, kept == KEPT_SCALED ? N : Np, &p, ran, err);
        }
        if ((st = bf16_product(c, q, xq, sx, M, w, 1, out, scaled, &p, ran, err)) || !*ran) return st;
        if (kept == KEPT_SCALED && !*scaled) {
            if ((st = fp8_epilogue_bf16(c, (const __nv_bfloat16 *)out, Np, sx, sw, M, N, out, 1, 0, err))) return st;
            *scaled = 1;
            quant_set_last_path("fp8:unscaled(bf16-kept,a%d,%s%s)+scaled into BF16", p->chosen, p->src, acc_tag(p));
        } else
            quant_set_last_path(*scaled ? "fp8:scaled(outer-vec,bf16-kept,a%d,%s%s)" : "fp8:unscaled(bf16-kept,a%d,%s%s)",
                                p->chosen, p->src, acc_tag(p));
        return VSR_OK;
    }
    /* as cuBLASLt would write it: with outer-vector scales (b) the scaled product rounded once, else (b')
     * the product rounded, then (KEPT_SCALED) scaled and rounded again */
    const int ov = fp8_ovscale(c, q);
    *scaled = ov || kept == KEPT_SCALED;
    return fp8_gemm_run(c, xq, sx, M, (const uint8_t *)w->w, sw, N, Np, m->Kp, out, kept == KEPT_SCALED ? N : Np,
                        *scaled ? FG_OUT_BF16_SCALED : FG_OUT_BF16_RAW, 0, quant_fp8_fast_accum(),
                        route == ROUTE_WG256 ? 256 : 128, !ov, &((fp8_meta *)m)->gemm, ran, err);
}

typedef struct route_tune {
    quant_state *q;
    const uint8_t *xq;
    const float *sx;
    int64_t M;
    const vsr_bweight *w;
    int accumulate, round_bf16, kept;
} route_tune;

/* autotune launch of route `cand`; writes q->route_out, not the autotuner's buffer: ROUTE_LT's first
 * launch may time cuBLASLt's algorithms ("fp8_lt") and grow that one */
static int route_launch(cuda_ctx *c, int cand, void *arg, void *out, vsr_err *err) {
    (void)out;
    route_tune *t = (route_tune *)arg;
    int ran = 0, scaled = 0;
    const int64_t cols = t->kept ? ((const quant_wmeta *)t->w->q)->Np : t->w->v.N;
    if (quant_grow(c, &t->q->route_out, &t->q->route_out_bytes, sizeof(float) * (size_t)(t->M * cols),
                   "FP8 route timing", err) ||
        (t->kept ? kept_run(c, t->q, cand, t->xq, t->sx, t->M, t->w, t->kept, t->q->route_out, &scaled, &ran, err)
                 : route_run(c, t->q, cand, t->xq, t->sx, t->M, t->w, (float *)t->q->route_out, t->accumulate,
                             t->round_bf16, &ran, err)))
        return -1;
    return ran ? 0 : TUNE_SKIP;
}

static vsr_status choose_route(cuda_ctx *c, quant_state *q, const uint8_t *xq, const float *sx, int64_t M,
                               const vsr_bweight *w, int accumulate, int round_bf16, int kept, int *route,
                               const char **src, vsr_err *err) {
    if (g_force_route >= 0) {
        *route = g_force_route, *src = "forced";
        return VSR_OK;
    }
    quant_wmeta *m = (quant_wmeta *)w->q;
    char key[128];
    if (kept)
        snprintf(key, sizeof key, "m%lld-n%lld-k%lld-kept%d-f%d-b%d", (long long)M, (long long)w->v.N,
                 (long long)m->Kp, kept, quant_fp8_fast_accum(), round_bf16);
    else
        snprintf(key, sizeof key, "m%lld-n%lld-k%lld-a%d-f%d-b%d", (long long)M, (long long)w->v.N, (long long)m->Kp,
                 accumulate, quant_fp8_fast_accum(), round_bf16);
    route_tune t = {q, xq, sx, M, w, accumulate, round_bf16, kept};
    return autotune_choose(c, "fp8_route", key, N_ROUTES, ROUTE_NAMES, ROUTE_LT, route_launch, &t, sizeof(float), route,
                           src, err);
}

/* the path of the product just run, with the route that ran it and where the choice came from appended */
static void tag_route(int route, const char *src) {
    char path[160];
    snprintf(path, sizeof path, "%s", cuda_quant_last_path());
    quant_set_last_path("%s[route %s,%s]", path, ROUTE_NAMES[route], src);
}

extern "C" vsr_status cuda_fp8_linear_prequant(cuda_ctx *c, const uint8_t *xq, const float *sx, int64_t M,
                                               const vsr_bweight *w, float *y, int accumulate, vsr_err *err) {
    if (M <= 0) return VSR_OK;
    quant_wmeta *m = (quant_wmeta *)w->q;
    if (!m) return vsr_err_set(err, VSR_E_INTERNAL, "cuda:%d: %s: FP8 weight was not uploaded", c->device, w->name);
    quant_state *q;
    vsr_status st = quant_state_get(c, &q, err);
    if (st) return st;
    const int forced = quant_forced_fp8_path(), wm = fp8_wgmma_mode();
    if (forced == 0 && wm != 0 && fp8_gemm_usable(c)) {
        int ran = 0;
        if (wm == 1) { /* VSR_FP8_GEMM=1: the own kernel, its own width rule, FP32 products */
            if ((st = fp8_gemm_run(c, xq, sx, M, (const uint8_t *)w->w, (const float *)w->scale, w->v.N, m->Np, m->Kp, y,
                                   w->v.N, FG_OUT_F32, accumulate, quant_fp8_fast_accum(), 0, 0, &((fp8_meta *)m)->gemm, &ran, err)))
                return st;
            if (ran) return VSR_OK;
        } else {
            const int round_bf16 = fp8_bf16_products() && !fp8_ovscale(c, q); /* as lt_linear rounds */
            int route = ROUTE_LT;
            const char *src = "default";
            if ((st = choose_route(c, q, xq, sx, M, w, accumulate, round_bf16, KEPT_NONE, &route, &src, err)) ||
                (st = route_run(c, q, route, xq, sx, M, w, y, accumulate, round_bf16, &ran, err)))
                return st;
            if (ran) {
                tag_route(route, src);
                return VSR_OK;
            }
        }
    }
    return lt_linear(c, q, xq, sx, M, w, y, accumulate, err);
}

/* (b'): the reader applies the scales; it runs after the producer of its own output twin, which may
 * overwrite (or move) the activation twin these row scales live in: hand it a copy */
static vsr_status kept_row_scales(cuda_ctx *c, quant_state *q, const float *sx, int64_t M, const float *sw,
                                  const float **osx, const float **osw, vsr_err *err) {
    vsr_status st;
    if ((st = quant_grow(c, &q->aux, &q->aux_bytes, sizeof(float) * (size_t)M, "FP8 row scales", err)) ||
        (st = cuda_check(c, cudaMemcpyAsync(q->aux, sx, sizeof(float) * (size_t)M, cudaMemcpyDeviceToDevice,
                                            c->stream), "FP8 row scales copy", err)))
        return st;
    *osx = (const float *)q->aux, *osw = sw;
    return VSR_OK;
}

/* The BF16 product that cuda_fp8_linear_prequant would itself make (the same plans, the same
 * rounding), kept for a reader: into dst [M, N] (scaled, keep_product_bf16) when dst is given, else
 * into the workspace [M, Np] with, for (b'), the scales its reader applies (linear_swiglu). *ran = 0
 * where that linear would not go through a BF16 product (its own wgmma kernel, the unscaled FP32
 * path, FP32 products below FP8_BF16_MIN_ROWS rows, no algorithm): the caller runs the FP32 linear. */
static vsr_status kept_product(cuda_ctx *c, const float *x, const uint8_t *xq, const float *sx, int64_t M,
                               const vsr_bweight *w, __nv_bfloat16 *dst, const __nv_bfloat16 **d, int64_t *ldd,
                               const float **osx, const float **osw, int *ran, vsr_err *err) {
    *ran = 0;
    if (osx) *osx = NULL, *osw = NULL;
    if (M <= 0) return VSR_OK;
    quant_wmeta *m = (quant_wmeta *)w->q;
    if (!m) return vsr_err_set(err, VSR_E_INTERNAL, "cuda:%d: %s: FP8 weight was not uploaded", c->device, w->name);
    if (!dst && !osx)
        return vsr_err_set(err, VSR_E_INTERNAL, "cuda:%d: %s: a BF16 product without a place for its scales",
                           c->device, w->name);
    int forced = quant_forced_fp8_path();
    if (forced == 2 || (forced == 0 && fp8_wgmma_mode() == 1 && fp8_gemm_usable(c))) return VSR_OK;
    if (forced == 0 && quant_dtype_auto(c) && c->cc_major == 8 && c->cc_minor == 9 && M >= 256) return VSR_OK;
    const int bf16p = forced == 0 && fp8_bf16_products();
    if (!(bf16p || forced == 1 || M >= FP8_BF16_MIN_ROWS)) return VSR_OK;
    quant_state *q;
    vsr_status st = quant_state_get(c, &q, err);
    if (st) return st;
    if (!xq && (st = quantize_to_act(c, q, x, M, w, &xq, &sx, err))) return st;
    int64_t N = w->v.N, Np = m->Np;
    void *out = dst && Np == N ? (void *)dst : NULL;
    if (!out) {
        if ((st = quant_grow(c, &q->wtmp, &q->wtmp_bytes, sizeof(__nv_bfloat16) * (size_t)(M * Np), "FP8 product", err)))
            return st;
        out = q->wtmp;
    }
    fp8_plan *p;
    int done = 0, scaled = 0;
    const float *sw = (const float *)w->scale;
    /* the route (as cuda_fp8_linear_prequant's): the own kernel writes the BF16 product with the roundings
     * cuBLASLt's path makes ((b), or (b') where cuBLASLt has no outer-vector scales: kept_run) */
    int route = ROUTE_LT;
    const char *src = "default";
    if (bf16p && fp8_wgmma_mode() != 0 && fp8_gemm_usable(c)) {
        const int kept = dst ? KEPT_SCALED : KEPT_RAW;
        if ((st = choose_route(c, q, xq, sx, M, w, 0, !fp8_ovscale(c, q), kept, &route, &src, err))) return st;
        if (route != ROUTE_LT) {
            if (dst) out = dst, Np = N;
            if ((st = kept_run(c, q, route, xq, sx, M, w, kept, out, &scaled, &done, err))) return st;
            if (done) {
                tag_route(route, src);
                if (!dst && !scaled && (st = kept_row_scales(c, q, sx, M, sw, osx, osw, err))) return st;
                if (d) *d = (const __nv_bfloat16 *)out;
                if (ldd) *ldd = Np;
                *ran = 1;
                return VSR_OK;
            }
            out = dst && m->Np == N ? (void *)dst : q->wtmp, Np = m->Np; /* not run (alignment): cuBLASLt */
        }
    }
    if (kept_small(c, q, M)) {
        const int64_t ldo = dst ? N : Np;
        __nv_bfloat16 *o = dst ? dst : (__nv_bfloat16 *)out;
        if ((st = kept_lt_small(c, q, xq, sx, M, w, o, ldo, &p, &done, err)) || !done) return st; /* not run: FP32 linear */
        if (d) *d = o;
        if (ldd) *ldd = ldo;
        *ran = 1;
        return VSR_OK;
    }
    if ((st = bf16_product(c, q, xq, sx, M, w, bf16p, out, &scaled, &p, &done, err))) return st;
    if (!done) return VSR_OK; /* no algorithm: the caller runs the FP32 linear, which falls back as usual */
    if (scaled) {
        quant_set_last_path("fp8:scaled(outer-vec,bf16-kept,a%d,%s%s)", p->chosen, p->src, acc_tag(p));
    } else if (dst) { /* (b'): the scales applied here, rounded to BF16 again */
        if ((st = fp8_epilogue_bf16(c, (const __nv_bfloat16 *)out, Np, sx, sw, M, N, dst, 1, 0, err))) return st;
        quant_set_last_path("fp8:unscaled(bf16-kept,a%d,%s%s)+scaled into BF16", p->chosen, p->src, acc_tag(p));
        out = dst, Np = N;
    } else {
        if ((st = kept_row_scales(c, q, sx, M, sw, osx, osw, err))) return st;
        quant_set_last_path("fp8:unscaled(bf16-kept,a%d,%s%s)", p->chosen, p->src, acc_tag(p));
    }
    if (dst && out != dst) {
        if ((st = cuda_check(c, cudaMemcpy2DAsync(dst, sizeof(__nv_bfloat16) * (size_t)N, out,
                                                  sizeof(__nv_bfloat16) * (size_t)Np, sizeof(__nv_bfloat16) * (size_t)N,
                                                  (size_t)M, cudaMemcpyDeviceToDevice, c->stream),
                             "FP8 product copy", err)))
            return st;
        out = dst, Np = N;
    }
    if (d) *d = (const __nv_bfloat16 *)out;
    if (ldd) *ldd = Np;
    *ran = 1;
    return VSR_OK;
}

extern "C" vsr_status cuda_fp8_linear_bf16out(cuda_ctx *c, const float *x, const uint8_t *xq, const float *sx,
                                              int64_t M, const vsr_bweight *w, const __nv_bfloat16 **d, int64_t *ldd,
                                              const float **dsx, const float **dsw, int *ran, vsr_err *err) {
    return kept_product(c, x, xq, sx, M, w, NULL, d, ldd, dsx, dsw, ran, err);
}

extern "C" vsr_status cuda_fp8_linear_bf16_to(cuda_ctx *c, const float *x, const uint8_t *xq, const float *sx,
                                              int64_t M, const vsr_bweight *w, __nv_bfloat16 *dst, int *ran,
                                              vsr_err *err) {
    return kept_product(c, x, xq, sx, M, w, dst, NULL, NULL, NULL, NULL, ran, err);
}
