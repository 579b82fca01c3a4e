/* src/backend/cuda/fp8_gemm.cu: FP8 W8A8 GEMM for Hopper (sm_90a) with the per-token and per-channel
 * scales (and y += ...) applied in the epilogue, FP32 or BF16 out (fp8_gemm.h). Written when cuBLASLt
 * seemed to offer no outer-vector-scaled FP8 algorithm on the H200 (it does, once asked with the scale
 * pointers set: quant_fp8.cu); one of the routes quant_fp8.cu times per shape.
 *
 *   y[m, n] = (accumulate ? y[m, n] : 0) + (acc[m, n] * sx[m]) * sw[n],  acc = xq[m, :] . wq[n, :]
 *   xq e4m3 [M, Kp], wq e4m3 [Np, Kp] (rows K-major, Kp % 16 == 0), sx FP32 [M], sw FP32 [Np], y FP32 [M, ldy]
 *
 * One persistent CTA per SM (grid = min(tiles, SMs)), 384 threads = 3 warpgroups:
 *  - warpgroup 0, the producer (registers lowered by setmaxnreg): one thread walks the CTA's tiles
 *    and K blocks (128 bytes of K each) and issues two TMA loads per block (A: 128 x 128 bytes of xq,
 *    B: BN x 128 bytes of wq, 128-byte swizzle, out-of-bounds rows/columns zero-filled by the copy
 *    engine) into a STAGES-deep ring; full[s] completes on the bytes, empty[s] when the 256 consumer
 *    threads have arrived.
 *  - warpgroups 1 and 2, the consumers: rows 64*(wg-1) .. +63 of the 128-row tile each, all BN
 *    columns: wgmma.mma_async m64nNk32 e4m3.e4m3 -> f32, A and B from shared memory (K-major
 *    descriptors, 128-byte swizzle, 32 bytes of K per instruction = +2 on the descriptor's address).
 *    promote (default): each K block is cut into 64-column pieces, each summed by the tensor cores
 *    from zero (scale-d = 0 on its first instruction) into one of two m64n64 temporaries in turn and
 *    then added into the FP32 accumulators while the next piece runs: the tensor cores' own sum keeps
 *    fewer bits than FP32 (DeepSeek-V3's finding; cuBLASLt does the same unless FAST_ACCUM), so long K
 *    is summed in FP32 every 128 products (the modes below, FG_PROMOTE).
 *    fast: straight into the accumulators, one wgmma group kept in flight.
 *  - epilogue in registers: the m64nN fragment (lane l: rows l/4 and l/4 + 8 of its warp's 16,
 *    columns 8j + 2(l%4) + {0,1}) scaled (row scales read into registers and the tile's column scales
 *    into shared memory at the tile's start) and stored as float2 or bf16x2, guarded for m >= M,
 *    n >= N. While the consumers store, the producer already fills the ring with the next tile's
 *    blocks.
 * Tile order: bands of 8 column tiles, row tiles fastest inside a band (the ~132 tiles in flight
 * share ~16 row tiles of xq and 8 of wq in L2). Deterministic: no split-K, fixed summation order.
 * Built only for sm_90a (the Makefile's other target, sm_80, gets an empty kernel body that is
 * never launched: fp8_gemm_usable() requires capability 9.0). Written from the PTX ISA's wgmma,
 * cp.async.bulk.tensor and mbarrier sections, after the structure of CUTLASS's sm90 warp-specialized
 * kernels and DeepGEMM (no code taken from either).
 * Measured (H200, bench/notes/2026-11-29-cuda-first.md "FP8 wgmma kernel" and "fifth session"): correct on every test;
 * at 4,096 rows 950-1,150 TFLOP/s promoted (the pipelined pieces: 7-10 % over the serial schedule at
 * width 128, none at 256), behind cuBLASLt's outer-vector-scaled kernels (1,200-1,270 as whole
 * linears). ncu (gate_up, 4,096 rows, width 128): SM throughput 76 %, L2 64 %, issue slots 48 %. Not
 * done: an epilogue overlapped with the next tile's products, TMA multicast in 2-CTA clusters. Reached
 * through quant_fp8.cu's route (timed per shape) or VSR_FP8_GEMM=1.
 * Floor: 2 M N K / 1,345 TFLOP/s (the H200's dense FP8 peak) or the bytes / 4.19 TB/s at few rows; target and today's
 * figures: bench/RESULTS.md, "FP8 GEMM". Test: tests/test_cuda_quant.c (the own kernel against the same-quantized
 * reference in double, both accumulation modes, every tile width, adding into y). */
#include <cuda_bf16.h>
#include <cuda.h> /* CUtensorMap and the encode function's types only: no libcuda link */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VSR_QUANT_INTERNAL_CUDA 1
#include "backend/cuda/fp8_gemm.h"
#include "backend/cuda/ptx.cuh"
#include "backend/cuda/quant_internal.h"

#define FG_BM 128
#define FG_BK 128 /* bytes = e4m3 elements of K per block: one 128-byte swizzle row */
#define FG_THREADS 384
#define FG_BAND 8 /* column tiles per band of the tile order */
#define FG_EPI 8  /* epilogue column groups (8 columns each) loaded before their stores */

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FG_DEVICE 1
#endif

#ifdef FG_DEVICE
__device__ __forceinline__ void wgmma_n64(float *d, uint64_t da, uint64_t db, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 " WG_REGS32 ", %32, %33, p, 1, 1;\n}\n"
                 : WG_OUT32(d)
                 : "l"(da), "l"(db), "r"(scale_d));
}
__device__ __forceinline__ void wgmma_n128(float *d, uint64_t da, uint64_t db, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " WG_REGS64 ", %64, %65, p, 1, 1;\n}\n"
                 : WG_OUT64(d)
                 : "l"(da), "l"(db), "r"(scale_d));
}
__device__ __forceinline__ void wgmma_n256(float *d, uint64_t da, uint64_t db, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 " WG_REGS128 ", %128, %129, p, 1, 1;\n}\n"
                 : WG_OUT128(d)
                 : "l"(da), "l"(db), "r"(scale_d));
}

/* tile t of the CTA's walk -> (row tile, column tile) */
__device__ __forceinline__ void tile_of(int t, int tiles_m, int tiles_n, int *tm, int *tn) {
    int band = t / (tiles_m * FG_BAND), within = t - band * tiles_m * FG_BAND;
    int gn = min(FG_BAND, tiles_n - band * FG_BAND);
    *tm = within / gn;
    *tn = band * FG_BAND + within % gn;
}
#endif /* FG_DEVICE */

template <int BN> struct fg_cfg {
    static constexpr int STAGES = BN == 256 ? 4 : 6;
    static constexpr int A_BYTES = FG_BM * FG_BK, B_BYTES = BN * FG_BK;
    /* the ring, its 2 x STAGES barriers, the column scales of two tiles (4 x BN floats: one tile's
     * epilogue reads its copy while the next tile's is written), alignment slack */
    static constexpr int SMEM = STAGES * (A_BYTES + B_BYTES) + 2 * STAGES * 8 + 2 * BN * 4 + 1024;
};

/* accumulation modes: the tensor cores' own sums straight into the accumulators (fast), or promoted into
 * FP32 every K block: serial, the first version (one n128 group at a time, waited out before the next
 * is issued; kept for the tests' bit-for-bit comparison: VSR_FP8_GEMM_PROMOTE=serial), or pipelined: the
 * block is cut into pieces of 64 columns whose groups go into two temporaries in turn, and each piece is
 * added into the accumulators while the next one runs on the tensor cores (only the block's last piece
 * is waited out: ptxas follows the groups' order inside the block, not across the loop's back edge).
 * Both promoted modes sum the same 4 instructions per column from zero and add them into the
 * accumulators in K order: the same sums. */
enum { FG_FAST = 0, FG_PROMOTE_SERIAL = 1, FG_PROMOTE = 2 };

#ifdef FG_DEVICE
/* 4 wgmma (K 128 bytes) of width NS into d, from zero */
template <int NS> __device__ __forceinline__ void fg_piece(float *d, uint64_t da, uint64_t db) {
#pragma unroll
    for (int k = 0; k < FG_BK / 32; k++) {
        if constexpr (NS == 64) wgmma_n64(d, da + 2 * k, db + 2 * k, k > 0);
        else wgmma_n128(d, da + 2 * k, db + 2 * k, k > 0);
    }
}
template <int R> __device__ __forceinline__ void fg_add(float *acc, const float *t) {
#pragma unroll
    for (int i = 0; i < R; i++) acc[i] += t[i];
}
#endif

/* out_kind: FG_OUT_F32 y FP32 (+)= (round_bf16 ? bf16(acc) : acc) * sx * sw; FG_OUT_BF16_RAW y BF16 =
 * bf16(acc), unscaled (the reader applies the scales: linear_swiglu); FG_OUT_BF16_SCALED y BF16 =
 * bf16(float(bf16(acc)) * sx * sw) (keep_product_bf16). ldy: y's row stride in elements. */
template <int BN, int MODE>
__global__ void __launch_bounds__(FG_THREADS, 1)
    k_fp8_gemm(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB,
               const float *__restrict__ sx, const float *__restrict__ sw, void *__restrict__ yv, int64_t ldy, int M,
               int N, int Kp, int accumulate, int vec, int round_bf16, int out_kind) {
#ifdef FG_DEVICE
    typedef fg_cfg<BN> C;
    constexpr int STAGES = C::STAGES;
    extern __shared__ uint8_t smem_raw[];
    const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u; /* 128-byte swizzle wants 1024-aligned tiles */
    const uint32_t sA = base, sB = base + STAGES * C::A_BYTES, bars = sB + STAGES * C::B_BYTES;
    /* full[s] at bars + 8s, empty[s] at bars + 8 (STAGES + s); then the column scales, 2 x BN floats */
    float *sws = (float *)(smem_raw + (bars + 16 * STAGES - smem_u32(smem_raw)));
    const int tiles_m = (M + FG_BM - 1) / FG_BM, tiles_n = (N + BN - 1) / BN, tiles = tiles_m * tiles_n;
    const int kblocks = (Kp + FG_BK - 1) / FG_BK;
    const int wg = threadIdx.x / 128;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++) mbar_init(bars + 8 * s, 1), mbar_init(bars + 8 * (STAGES + s), 256);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) { /* producer */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        if (threadIdx.x == 0) {
            int it = 0;
            for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
                int tm, tn;
                tile_of(t, tiles_m, tiles_n, &tm, &tn);
                for (int kb = 0; kb < kblocks; kb++, it++) {
                    const int s = it % STAGES, r = it / STAGES;
                    if (it >= STAGES) mbar_wait(bars + 8 * (STAGES + s), (r - 1) & 1);
                    const uint32_t full = bars + 8 * s;
                    mbar_expect_tx(full, C::A_BYTES + C::B_BYTES);
                    tma_load_2d(sA + s * C::A_BYTES, &tmA, full, kb * FG_BK, tm * FG_BM);
                    tma_load_2d(sB + s * C::B_BYTES, &tmB, full, kb * FG_BK, tn * BN);
                }
            }
        }
    } else { /* consumers */
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
        constexpr int NACC = BN / 2;                /* m64nBN fragment: BN/2 floats per thread */
        constexpr int NS = 64;                      /* promoted pieces' width */
        constexpr int Q = BN / NS, NT = NS / 2;     /* pieces per K block, floats per piece */
        float acc[NACC];
        float tA[MODE == FG_FAST ? 1 : (MODE == FG_PROMOTE ? NT : 64)], tB[MODE == FG_PROMOTE ? NT : 1];
        const int cw = wg - 1, warp = (threadIdx.x / 32) & 3, lane = threadIdx.x & 31, ct = threadIdx.x - 128;
        const uint32_t a_off = cw * 64 * FG_BK;
        int it = 0, ti = 0;
        for (int t = blockIdx.x; t < tiles; t += gridDim.x, ti++) {
            int tm, tn;
            tile_of(t, tiles_m, tiles_n, &tm, &tn);
            /* the epilogue's scales, loaded now so that their latency hides behind the products: the row
             * scales of this thread's two rows, the tile's column scales into shared memory */
            const int r0 = tm * FG_BM + cw * 64 + warp * 16 + (lane >> 2), r1 = r0 + 8;
            float s0 = 0.0f, s1 = 0.0f;
            float *swt = sws + (ti & 1) * BN;
            if (out_kind != FG_OUT_BF16_RAW) {
                s0 = r0 < M ? sx[r0] : 0.0f, s1 = r1 < M ? sx[r1] : 0.0f;
                for (int j = ct; j < BN; j += 256) swt[j] = tn * BN + j < N ? sw[tn * BN + j] : 0.0f;
            }
#pragma unroll
            for (int i = 0; i < NACC; i++) acc[i] = 0.0f;
            if constexpr (MODE == FG_PROMOTE) {
                for (int kb = 0; kb < kblocks; kb++, it++) {
                    const int s = it % STAGES;
                    mbar_wait(bars + 8 * s, (it / STAGES) & 1);
                    const uint64_t da = wg_desc_k128(sA + s * C::A_BYTES + a_off), db = wg_desc_k128(sB + s * C::B_BYTES);
#pragma unroll
                    for (int q = 0; q < Q; q++) {
                        float *cur = (q & 1) ? tB : tA, *prv = (q & 1) ? tA : tB;
                        wg_fence();
                        fg_piece<NS>(cur, da, db + (uint64_t)(q * NS * FG_BK / 16));
                        wg_commit();
                        if (q > 0) { /* the piece before is done once one group is left: add it */
                            wg_wait<1>();
                            reg_fence<NT>(prv);
                            fg_add<NT>(acc + (q - 1) * NT, prv);
                        }
                    }
                    /* the block's last piece (ptxas follows the groups' order only inside the block: a
                     * piece left in flight across the loop's back edge serializes every wgmma) */
                    wg_wait<0>();
                    reg_fence<NT>((Q - 1) & 1 ? tB : tA);
                    fg_add<NT>(acc + (Q - 1) * NT, (Q - 1) & 1 ? tB : tA);
                    mbar_arrive(bars + 8 * (STAGES + s));
                }
            } else {
                int prev = -1;
                for (int kb = 0; kb < kblocks; kb++, it++) {
                    const int s = it % STAGES;
                    mbar_wait(bars + 8 * s, (it / STAGES) & 1);
                    const uint64_t da = wg_desc_k128(sA + s * C::A_BYTES + a_off), db = wg_desc_k128(sB + s * C::B_BYTES);
                    if constexpr (MODE == FG_PROMOTE_SERIAL) {
#pragma unroll
                        for (int h = 0; h < BN / 128; h++) {
                            reg_fence<64>(tA);
                            wg_fence();
                            fg_piece<128>(tA, da, db + (uint64_t)(h * 128 * FG_BK / 16));
                            wg_commit();
                            wg_wait<0>();
                            reg_fence<64>(tA);
                            fg_add<64>(acc + h * 64, tA);
                        }
                        mbar_arrive(bars + 8 * (STAGES + s));
                    } else {
                        reg_fence<NACC>(acc);
                        wg_fence();
#pragma unroll
                        for (int k = 0; k < FG_BK / 32; k++) {
                            if constexpr (BN == 256) wgmma_n256(acc, da + 2 * k, db + 2 * k, 1);
                            else wgmma_n128(acc, da + 2 * k, db + 2 * k, 1);
                        }
                        wg_commit();
                        reg_fence<NACC>(acc);
                        wg_wait<1>(); /* the previous block's group is done: its stage can be refilled */
                        reg_fence<NACC>(acc);
                        if (prev >= 0) mbar_arrive(bars + 8 * (STAGES + prev));
                        prev = s;
                    }
                }
                if constexpr (MODE == FG_FAST) {
                    wg_wait<0>();
                    reg_fence<NACC>(acc);
                    if (prev >= 0) mbar_arrive(bars + 8 * (STAGES + prev));
                }
            }
            /* epilogue. The column scales: every consumer thread has written its share (named barrier 1,
             * the 256 consumer threads; the other copy is rewritten only after the next tile's barrier) */
            asm volatile("bar.sync 1, 256;" ::: "memory");
            if (out_kind == FG_OUT_BF16_RAW || round_bf16) {
#pragma unroll
                for (int i = 0; i < NACC; i++) acc[i] = __bfloat162float(__float2bfloat16_rn(acc[i]));
            }
            if (out_kind != FG_OUT_F32) {
                __nv_bfloat16 *y0 = (__nv_bfloat16 *)yv + (int64_t)r0 * ldy, *y1 = (__nv_bfloat16 *)yv + (int64_t)r1 * ldy;
                const int scaled = out_kind == FG_OUT_BF16_SCALED;
#pragma unroll
                for (int j = 0; j < BN / 8; j++) {
                    const int c = j * 8 + 2 * (lane & 3), n = tn * BN + c;
                    if (n >= N) continue;
                    float v00 = acc[4 * j], v01 = acc[4 * j + 1], v10 = acc[4 * j + 2], v11 = acc[4 * j + 3];
                    if (scaled) {
                        const float w0 = swt[c], w1 = swt[c + 1];
                        v00 = v00 * s0 * w0, v01 = v01 * s0 * w1, v10 = v10 * s1 * w0, v11 = v11 * s1 * w1;
                    }
                    if (vec && n + 1 < N) {
                        if (r0 < M) *(__nv_bfloat162 *)(y0 + n) = __floats2bfloat162_rn(v00, v01);
                        if (r1 < M) *(__nv_bfloat162 *)(y1 + n) = __floats2bfloat162_rn(v10, v11);
                    } else {
                        if (r0 < M) {
                            y0[n] = __float2bfloat16_rn(v00);
                            if (n + 1 < N) y0[n + 1] = __float2bfloat16_rn(v01);
                        }
                        if (r1 < M) {
                            y1[n] = __float2bfloat16_rn(v10);
                            if (n + 1 < N) y1[n + 1] = __float2bfloat16_rn(v11);
                        }
                    }
                }
                continue;
            }
            float *y0 = (float *)yv + (int64_t)r0 * ldy, *y1 = (float *)yv + (int64_t)r1 * ldy;
            /* FG_EPI column groups at a time: (accumulating) the y they add to is loaded before any store,
             * so the loads are in flight together instead of each waiting out the store before it (the
             * compiler keeps loads and stores to y in program order) */
#pragma unroll
            for (int j0 = 0; j0 < BN / 8; j0 += FG_EPI) {
                float2 p0[FG_EPI], p1[FG_EPI];
#pragma unroll
                for (int jj = 0; jj < FG_EPI; jj++) {
                    const int n = tn * BN + (j0 + jj) * 8 + 2 * (lane & 3);
                    p0[jj] = p1[jj] = make_float2(0.0f, 0.0f);
                    if (accumulate && vec && n + 1 < N) {
                        if (r0 < M) p0[jj] = *(const float2 *)(y0 + n);
                        if (r1 < M) p1[jj] = *(const float2 *)(y1 + n);
                    }
                }
#pragma unroll
                for (int jj = 0; jj < FG_EPI; jj++) {
                    const int j = j0 + jj, c = j * 8 + 2 * (lane & 3), n = tn * BN + c;
                    if (n >= N) continue;
                    const float w0 = swt[c], w1 = swt[c + 1];
                    float v00 = acc[4 * j] * s0 * w0, v01 = acc[4 * j + 1] * s0 * w1;
                    float v10 = acc[4 * j + 2] * s1 * w0, v11 = acc[4 * j + 3] * s1 * w1;
                    if (vec && n + 1 < N) {
                        if (accumulate) v00 = p0[jj].x + v00, v01 = p0[jj].y + v01, v10 = p1[jj].x + v10, v11 = p1[jj].y + v11;
                        if (r0 < M) *(float2 *)(y0 + n) = make_float2(v00, v01);
                        if (r1 < M) *(float2 *)(y1 + n) = make_float2(v10, v11);
                    } else {
                        if (r0 < M) {
                            y0[n] = accumulate ? y0[n] + v00 : v00;
                            if (n + 1 < N) y0[n + 1] = accumulate ? y0[n + 1] + v01 : v01;
                        }
                        if (r1 < M) {
                            y1[n] = accumulate ? y1[n] + v10 : v10;
                            if (n + 1 < N) y1[n + 1] = accumulate ? y1[n + 1] + v11 : v11;
                        }
                    }
                }
            }
        }
    }
#endif /* FG_DEVICE */
}

/* ---- host ---- */

typedef CUresult (*encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                              const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                              CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
static encode_fn g_encode;
static pthread_once_t g_encode_once = PTHREAD_ONCE_INIT;
static void encode_init(void) {
    void *fn = NULL;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
        g_encode = (encode_fn)fn;
    else
        cudaGetLastError();
}

/* 2-D tensor [rows, cols] of 1- or 2-byte elements (row stride row_bytes), box [box_rows, 128 bytes], 128-byte
 * swizzle, out-of-bounds elements read as zero; 0 where the driver has no encoder or refuses the layout */
extern "C" int tma_encode_2d_sw128(void *map, int elem_bytes, const void *p, int64_t rows, int64_t cols,
                                   int64_t row_bytes, int box_rows) {
    pthread_once(&g_encode_once, encode_init);
    if (!g_encode || (elem_bytes != 1 && elem_bytes != 2)) return 0;
    cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows}, strides[1] = {(cuuint64_t)row_bytes};
    cuuint32_t box[2] = {(cuuint32_t)(128 / elem_bytes), (cuuint32_t)box_rows}, es[2] = {1, 1};
    return g_encode((CUtensorMap *)map, elem_bytes == 1 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                    2, (void *)p, dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}
/* e4m3 [rows, cols] (row stride cols bytes), box [box_rows, 128 bytes] */
static int encode_map(CUtensorMap *m, const void *p, int64_t rows, int64_t cols, int box_rows) {
    return tma_encode_2d_sw128(m, 1, p, rows, cols, cols, box_rows);
}

extern "C" int fp8_gemm_usable(cuda_ctx *c) {
    if (c->cc_major != 9 || c->cc_minor != 0) return 0;
    pthread_once(&g_encode_once, encode_init);
    return g_encode != NULL;
}

template <int BN, int MODE>
static vsr_status launch(cuda_ctx *c, const CUtensorMap &ma, const CUtensorMap &mb, const float *sx, const float *sw,
                         void *y, int64_t ldy, int M, int N, int Kp, int accumulate, int vec, int round_bf16,
                         int out_kind, int ctas, vsr_err *err) {
    static int attr_done; /* per instantiation; setting it twice is harmless */
    const int smem = fg_cfg<BN>::SMEM;
    if (!attr_done) {
        vsr_status st = cuda_check(c, cudaFuncSetAttribute(k_fp8_gemm<BN, MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
                                   "FP8 wgmma GEMM: shared memory attribute", err);
        if (st) return st;
        attr_done = 1;
    }
    k_fp8_gemm<BN, MODE><<<ctas, FG_THREADS, smem, c->stream>>>(ma, mb, sx, sw, y, ldy, M, N, Kp, accumulate, vec,
                                                                round_bf16, out_kind);
    return cuda_check_launch(c, "FP8 wgmma GEMM", err);
}

static int env_int(const char *name, int dflt) {
    const char *s = getenv(name);
    return s && *s ? atoi(s) : dflt;
}

/* VSR_FP8_GEMM_PROMOTE=serial: the first promoted schedule (one group at a time), for the tests */
static int promote_serial(void) {
    const char *s = getenv("VSR_FP8_GEMM_PROMOTE");
    return s && !strcmp(s, "serial");
}

extern "C" vsr_status fp8_gemm_run(cuda_ctx *c, const uint8_t *xq, const float *sx, int64_t M, const uint8_t *wq,
                                   const float *sw, int64_t N, int64_t Np, int64_t Kp, void *y, int64_t ldy,
                                   int out_kind, int accumulate, int fast, int bn_req, int round_bf16,
                                   fp8_gemm_wcache *wc, int *ran, vsr_err *err) {
    *ran = 0;
    if (!fp8_gemm_usable(c) || M <= 0 || M > (1 << 30) || Np > (1 << 30) || Kp > (1 << 30) || Kp % 16 ||
        ((uintptr_t)xq & 15) || ((uintptr_t)wq & 15) || ldy < N || out_kind < FG_OUT_F32 || out_kind > FG_OUT_BF16_SCALED)
        return VSR_OK;
    if (out_kind != FG_OUT_F32) accumulate = 0;            /* BF16 outputs: no += */
    if (out_kind == FG_OUT_BF16_RAW) round_bf16 = 1;       /* the unscaled product is the BF16 value */
    /* tile width: fewest full-chip waves x width (a tile's time ~ its width); on a tie the narrower
     * one when the wider leaves SMs idle */
    const int64_t tm = (M + FG_BM - 1) / FG_BM, sms = c->sm_count > 0 ? c->sm_count : 132;
    const int64_t t128 = tm * ((N + 127) / 128), t256 = tm * ((N + 255) / 256);
    const int64_t c128 = (t128 + sms - 1) / sms * 128, c256 = (t256 + sms - 1) / sms * 256;
    int bn = (c256 < c128 || (c256 == c128 && t256 >= sms)) ? 256 : 128;
    int fb = env_int("VSR_FP8_GEMM_BN", 0);
    if (fb == 128 || fb == 256) bn = fb;
    if (bn_req == 128 || bn_req == 256) bn = bn_req;
    const int wi = bn == 256 ? 1 : 0;
    const int64_t tiles = bn == 256 ? t256 : t128;
    int ctas = (int)(tiles < sms ? tiles : sms);
    int cap = env_int("VSR_FP8_GEMM_CTAS", 0);
    if (cap > 0 && cap < ctas) ctas = cap;
    alignas(64) CUtensorMap ma, mb;
    if (!encode_map(&ma, xq, M, Kp, FG_BM)) return VSR_OK;
    if (wc->w[wi] != wq) {
        if (!encode_map(&mb, wq, Np, Kp, bn)) return VSR_OK;
        memcpy(wc->map[wi], &mb, sizeof mb);
        wc->w[wi] = wq;
    } else
        memcpy(&mb, wc->map[wi], sizeof mb);
    const size_t esz = out_kind == FG_OUT_F32 ? sizeof(float) : sizeof(__nv_bfloat16);
    const int vec = N % 2 == 0 && ldy % 2 == 0 && ((uintptr_t)y & (2 * esz - 1)) == 0;
    const int mode = fast ? FG_FAST : promote_serial() ? FG_PROMOTE_SERIAL : FG_PROMOTE;
    vsr_status st;
#define FG_LAUNCH(BN_, MODE_)                                                                                          \
    launch<BN_, MODE_>(c, ma, mb, sx, sw, y, ldy, (int)M, (int)N, (int)Kp, accumulate, vec, round_bf16, out_kind, ctas, err)
    if (bn == 256)
        st = mode == FG_FAST ? FG_LAUNCH(256, FG_FAST) : mode == FG_PROMOTE ? FG_LAUNCH(256, FG_PROMOTE) : FG_LAUNCH(256, FG_PROMOTE_SERIAL);
    else
        st = mode == FG_FAST ? FG_LAUNCH(128, FG_FAST) : mode == FG_PROMOTE ? FG_LAUNCH(128, FG_PROMOTE) : FG_LAUNCH(128, FG_PROMOTE_SERIAL);
#undef FG_LAUNCH
    if (st) return st;
    static const char *const mode_names[3] = {"fast", "promote-serial", "promote"};
    static const char *const out_names[3] = {"", ",bf16-out", ",bf16-raw"};
    quant_set_last_path("fp8:wgmma(bn=%d,%s%s,ctas=%d)", bn, mode_names[mode],
                        out_kind == FG_OUT_F32           ? (round_bf16 ? out_names[1] : "")
                        : out_kind == FG_OUT_BF16_RAW    ? out_names[2]
                        : round_bf16                     ? ",bf16-scaled(product rounded)"
                                                         : ",bf16-scaled",
                        ctas);
    *ran = 1;
    return VSR_OK;
}
static_assert(sizeof(CUtensorMap) == sizeof(((fp8_gemm_wcache *)0)->map[0]), "CUtensorMap is 128 bytes");
