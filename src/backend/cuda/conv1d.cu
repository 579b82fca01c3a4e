/* src/backend/cuda/conv1d.cu: causal depthwise conv1d + silu over packed sequences
 * (backend.h conv1d_silu): y[t, c] = silu(sum_j w[c, j] * x[t - (Kc-1) + j, c]), x before the
 * sequence's first row = 0.
 *
 * Fast path (Kc = 4, C a multiple of 4, x, y, w 16-byte aligned: the DeltaNet layers' conv):
 * each thread owns 4 consecutive channels (one float4 per row) over a run of R consecutive
 * tokens of one sequence; it loads the R + 3 rows it needs (16-byte loads, all in flight
 * before the first use) into a register window and writes R rows. A warp reads 512
 * contiguous bytes of a row per load, so x is read about (R + 3) / R times from L2 and once
 * from memory (the 3 halo rows of a run are the previous run's last rows, read by the block
 * beside it at the same time). Runs never cross a sequence: the per-sequence run counts are
 * in the by-value table, the run -> sequence lookup is a binary search per block.
 * Grid order: channel blocks fastest (see k_conv1d_silu_v4; VSR_CUDA_CONV_RUNS=1 keeps the
 * previous run-fastest order for timing).
 * Anything else (other Kc, C not a multiple of 4, unaligned buffers), and VSR_CUDA_CONV_OLD=1
 * (kept so one binary can time both), runs the generic kernel: one thread per (row, channel).
 * x may be the first C columns of a wider row (row stride xst, e.g. a stacked projection's output);
 * y is contiguous. x may also be BF16 (a stacked projection's product kept in BF16 by the linear,
 * backend.h keep_product_bf16): the same kernels, each element widened to FP32 as it is loaded.
 * Numerics: FP32 FMAs in tap order, silu as the CPU op (device_math.cuh).
 * Floor: bytes read and written / 4.19 TB/s (7.5 us at 3 x 128, 80.1 us at 8 x 512 on the 27B shape; bench/notes/2026-11-29-cuda-first.md
 * "DeltaNet v2 and conv1d_silu in conv1d.cu"). Test: tests/test_cuda_ops.c (against the CPU oracle, both kernels, BF16 input). */
#include <stdlib.h>

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/ops_internal.cuh" /* the backend's shared helpers; this file's op entry (cu_*) */

#define CV_MAX_SEGS 128 /* = CUDA_MAX_SEGS of ops_internal.cuh: one call's sequences */

/* x element loads, FP32 or BF16 (4 channels: 16 or 8 bytes, aligned) */
__device__ __forceinline__ float cv_ld(const float *p) { return *p; }
__device__ __forceinline__ float cv_ld(const __nv_bfloat16 *p) { return __bfloat162float(*p); }
__device__ __forceinline__ float4 cv_ld4(const float *p) { return __ldg(reinterpret_cast<const float4 *>(p)); }
__device__ __forceinline__ float4 cv_ld4(const __nv_bfloat16 *p) {
    uint2 v = __ldg(reinterpret_cast<const uint2 *>(p));
    float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&v.x)),
           b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&v.y));
    return make_float4(a.x, a.y, b.x, b.y);
}

typedef struct cv_tab {
    int n;
    int64_t start[CV_MAX_SEGS], len[CV_MAX_SEGS];
    int rfirst[CV_MAX_SEGS + 1]; /* first run of each sequence (fast path); rfirst[n] = runs */
} cv_tab;

/* Generic: block (row, channel range); any C, any Kc. */
template <typename TX>
__global__ void k_conv1d_silu_gen(const TX *__restrict__ x, int64_t xst, const cv_tab tb, int64_t C,
                                  const float *__restrict__ w, int Kc, float *__restrict__ y) {
    const int64_t r = blockIdx.x;
    const int sg = last_le_d(tb.start, tb.n, r);
    const int64_t t = r - tb.start[sg];
    for (int64_t ch = (int64_t)blockIdx.y * blockDim.x + threadIdx.x; ch < C; ch += (int64_t)gridDim.y * blockDim.x) {
        const float *wc = w + ch * Kc;
        float acc = 0;
        for (int k = 0; k < Kc; k++) {
            int64_t tt = t - (Kc - 1) + k;
            if (tt >= 0) acc += wc[k] * cv_ld(x + (r - t + tt) * xst + ch);
        }
        y[r * C + ch] = silu_d(acc);
    }
}

/* Fast path: block (run of R tokens, 128 channel quads); thread = 4 channels x R tokens.
 * CF (the default): grid (channel blocks, runs), channel blocks fastest, so the blocks resident
 * at one time read whole consecutive rows (a run's R + 3 rows, 40 KB each at the 27B shape) and
 * write whole rows; !CF (VSR_CUDA_CONV_RUNS=1, the previous order): grid (runs, channel blocks),
 * so resident blocks read 2 KB pieces of rows ~R rows apart. */
template <typename TX, int R, bool CF>
__global__ void __launch_bounds__(128) k_conv1d_silu_v4(const TX *__restrict__ x, int64_t xst, const cv_tab tb,
                                                        int64_t C, const float *__restrict__ w, float *__restrict__ y) {
    const int64_t q = (int64_t)(CF ? blockIdx.x : blockIdx.y) * 128 + threadIdx.x; /* channel quad */
    if (4 * q >= C) return;
    const int run = CF ? blockIdx.y : blockIdx.x;
    const int sg = last_le_d(tb.rfirst, tb.n, run);
    const int64_t t0 = (int64_t)(run - tb.rfirst[sg]) * R;
    const int n = (int)min((int64_t)R, tb.len[sg] - t0); /* tokens of this run, 1..R */
    const TX *xs = x + (tb.start[sg] + t0) * xst + 4 * q; /* row t0 of the sequence (x rows at stride xst) */
    float *ys = y + (tb.start[sg] + t0) * C + 4 * q;
    const float4 *w4 = reinterpret_cast<const float4 *>(w) + 4 * q; /* w[4q + cc][0..3] = w4[cc] */
    float4 wv[4];
#pragma unroll
    for (int cc = 0; cc < 4; cc++) wv[cc] = __ldg(w4 + cc);
    /* win[k] = x row t0 - 3 + k (zero before the sequence and past the run) */
    float4 win[R + 3];
#pragma unroll
    for (int k = 0; k < R + 3; k++) {
        const int64_t tt = t0 - 3 + k;
        win[k] = (tt >= 0 && k - 3 < n) ? cv_ld4(xs + (int64_t)(k - 3) * xst) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int k = 0; k < R; k++) {
        if (k < n) {
            float4 o;
            o.x = silu_d(fmaf(wv[0].w, win[k + 3].x, fmaf(wv[0].z, win[k + 2].x, fmaf(wv[0].y, win[k + 1].x, wv[0].x * win[k].x))));
            o.y = silu_d(fmaf(wv[1].w, win[k + 3].y, fmaf(wv[1].z, win[k + 2].y, fmaf(wv[1].y, win[k + 1].y, wv[1].x * win[k].y))));
            o.z = silu_d(fmaf(wv[2].w, win[k + 3].z, fmaf(wv[2].z, win[k + 2].z, fmaf(wv[2].y, win[k + 1].z, wv[2].x * win[k].z))));
            o.w = silu_d(fmaf(wv[3].w, win[k + 3].w, fmaf(wv[3].z, win[k + 2].w, fmaf(wv[3].y, win[k + 1].w, wv[3].x * win[k].w))));
            *reinterpret_cast<float4 *>(ys + (int64_t)k * C) = o;
        }
    }
}

template <typename TX>
static vsr_status conv1d_run(cuda_ctx *c, const TX *x, int64_t xst, const vsr_segs *seg, int64_t C, const float *w,
                             int Kc, float *y, vsr_err *err) {
    if (seg->n < 0 || seg->n > CV_MAX_SEGS)
        return vsr_err_set(err, VSR_E_UNSUPPORTED, "cuda:%d: conv1d_silu: %d sequences in one call (at most %d)",
                           c->device, seg->n, CV_MAX_SEGS);
    if (seg->n == 0 || C <= 0) return VSR_OK;
    const int64_t rows = seg->start[seg->n - 1] + seg->len[seg->n - 1];
    if (rows <= 0) return VSR_OK;
    if (rows > 0x7fffffff) return vsr_err_set(err, VSR_E_UNSUPPORTED, "conv1d_silu: %lld rows", (long long)rows);
    cv_tab tb;
    tb.n = seg->n;
    for (int i = 0; i < seg->n; i++) tb.start[i] = seg->start[i], tb.len[i] = seg->len[i];
    const char *old = getenv("VSR_CUDA_CONV_OLD");
    const bool fast = Kc == 4 && C % 4 == 0 && xst % 4 == 0 && !(old && old[0] == '1') &&
                      (((uintptr_t)y | (uintptr_t)w) & 15) == 0 && ((uintptr_t)x & (4 * sizeof(TX) - 1)) == 0;
    const char *runs_env = getenv("VSR_CUDA_CONV_RUNS");
    const bool runs_first = runs_env && runs_env[0] == '1';
    if (fast) {
        /* channel-fastest grid: 8-token runs (80 registers, 6 blocks per SM, not 4); the previous
         * run-fastest order took 16-token runs where there are enough of them to fill the chip */
        const int R = runs_first && rows >= 2048 ? 16 : 8;
        int64_t runs = 0;
        for (int i = 0; i < seg->n; i++) {
            tb.rfirst[i] = (int)runs;
            runs += seg->len[i] > 0 ? (seg->len[i] + R - 1) / R : 0;
        }
        tb.rfirst[seg->n] = (int)runs;
        const int64_t quads = C / 4, qblocks = (quads + 127) / 128;
        if (qblocks > 65535)
            return vsr_err_set(err, VSR_E_UNSUPPORTED, "conv1d_silu: %lld channels", (long long)C);
        if (!runs_first && runs <= 65535) { /* gridDim.y limit; longer batches take the run order */
            dim3 grid((unsigned)qblocks, (unsigned)runs);
            k_conv1d_silu_v4<TX, 8, true><<<grid, 128, 0, c->stream>>>(x, xst, tb, C, w, y);
        } else {
            dim3 grid((unsigned)runs, (unsigned)qblocks);
            if (R == 16) k_conv1d_silu_v4<TX, 16, false><<<grid, 128, 0, c->stream>>>(x, xst, tb, C, w, y);
            else k_conv1d_silu_v4<TX, 8, false><<<grid, 128, 0, c->stream>>>(x, xst, tb, C, w, y);
        }
        return cuda_check_launch(c, "conv1d_silu", err);
    }
    const int64_t cb = (C + 255) / 256;
    dim3 grid((unsigned)rows, (unsigned)(cb > 64 ? 64 : cb));
    k_conv1d_silu_gen<TX><<<grid, 256, 0, c->stream>>>(x, xst, tb, C, w, Kc, y);
    return cuda_check_launch(c, "conv1d_silu", err);
}

extern "C" vsr_status cuda_conv1d_silu(cuda_ctx *c, const float *x, const __nv_bfloat16 *xb, int64_t xst,
                                       const vsr_segs *seg, int64_t C, const float *w, int Kc, float *y, vsr_err *err) {
    return xb ? conv1d_run(c, xb, xst, seg, C, w, Kc, y, err) : conv1d_run(c, x, xst, seg, C, w, Kc, y, err);
}

vsr_status cu_conv1d_silu(void *ctx, const float *x, int64_t xs, const vsr_segs *seg, int64_t C, const float *w,
                                 int Kc, float *y, vsr_err *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    ENTER(c);
    PROF(c, "conv1d_silu");
    int64_t rows = seg->n > 0 ? seg->start[seg->n - 1] + seg->len[seg->n - 1] : 0;
    twin_clobber(c, y, sizeof(float) * (size_t)(rows > 0 ? rows * C : 0));
    if (xs < C)
        return vsr_err_set(err, VSR_E_INVALID, "conv1d_silu: row stride %lld is less than the %lld channels",
                           (long long)xs, (long long)C);
    if (rows <= 0) return VSR_OK;
    /* x may be a stacked projection's product kept in BF16 (keep_product_bf16) */
    const __nv_bfloat16 *xb = kp_find(c, x, rows, xs, C);
    vsr_status st;
    if (!xb && (st = kp_guard(c, x, sizeof(float) * (size_t)((rows - 1) * xs + C), "conv1d_silu", err))) return st;
    return cuda_conv1d_silu(c, xb ? NULL : x, xb, xs, seg, C, w, Kc, y, err); /* conv1d.cu */
}
