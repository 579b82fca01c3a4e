/* src/backend/cuda/deltanet.cu: the gated delta rule in chunked (WY/UT) form for prefill.
 *
 * The math of transformers' torch_chunk_gated_delta_rule (and flash-linear-attention's
 * chunk_gated_delta_rule), per sequence and value head, chunks of C = 64 tokens that never
 * cross a sequence boundary (the last chunk of a sequence is partial: its missing rows are
 * zero with beta = 0 and g = 0, so they change nothing). For one chunk, with q, k
 * l2-normalised (q also scaled by 1/sqrt(dk)), gc = cumsum(g) inside the chunk:
 *   L   = strictly_lower(beta_i k_i.k_j exp(gc_i - gc_j))          [C, C]
 *   T   = (I + L)^-1  (unit lower triangular: forward substitution)
 *   W   = T diag(beta exp(gc)) K     [C, dk]      U = T diag(beta) V   [C, dv]
 *   P   = lower_incl_diag(q_i.k_j exp(gc_i - gc_j))                   [C, C]
 * then sequentially over the chunks of a sequence, S [dk, dv] from zero:
 *   Vn  = U - W S;   O = (q exp(gc)) S + P Vn;   S = exp(gc_last) S + (k exp(gc_last - gc))^T Vn.
 *
 * Generations, selected at each call: v6 (the default: q, k normalised once per (chunk, key
 * head) by the intra kernel, which on large grids also does all value heads of a key head per
 * block; see "==== v6") and v5 (VSR_CUDA_DN_V5=1, the previous default: ldmatrix operands, k and T
 * double-buffered, the next chunk's copies issued early; see "==== v5"); and opt-in, v7
 * (VSR_CUDA_DN_V7=1, compute capability 9.0 only: v6's intra kernel and a state kernel on wgmma; see
 * "==== v7"). All run two kernels: an intra-chunk kernel that computes T = (I + L)^-1 (blocked by
 * 16; only T crosses device memory, the design since v3), and a state kernel per (sequence, value
 * head, 64 value columns) that carries S across the sequence's chunks. The earlier generations
 * (W, U and P of every chunk through device memory; v3's state kernel; v4, which v5 matched bit for
 * bit) were removed once their successors ran on the H200 (bench/notes/2026-11-29-cuda-first.md "Chunked DeltaNet" to
 * "DeltaNet v6" keep their measurements).
 * Matrix products: tensor cores, mma.sync m16n8k8 TF32 (v7's state kernel: wgmma m64n64k8 TF32;
 * inputs rounded to TF32, FP32 accumulate). Normalised error vs the FP32 CPU op ~1e-3 (see
 * tests/test_cuda_ops.c and the numpy prototype's numbers in bench/notes/2026-11-29-cuda-first.md "### Chunked DeltaNet").
 * Shapes taken: dk <= 128, dv <= 128, both multiples of 4 (16-byte copies), Hv a multiple of Hk, at most DNC_MAX_SEGS sequences,
 * longest sequence >= DNC_MIN_LEN; anything else is left to the recurrent kernel (k_dn_scan, at the end of this file).
 * Floor: the bytes of qkv, b, a read and out written / 4.19 TB/s (bench_cuda's floor_us; the state kernels stay
 * ~8x above it: bench/RESULTS.md). Test: tests/test_cuda_ops.c (against the CPU oracle, chunked and recurrent,
 * several sequences, partial chunks). */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/ptx.cuh"
#include "backend/cuda/ops_internal.cuh" /* the backend's shared helpers; this file's op entry (cu_*) */

#define DNC_C 64       /* chunk length */
#define DNC_DK 128     /* key dim padded in shared memory */
#define DNC_DVS 64     /* value columns per state block */
#define DNC_MAX_SEGS 128
#define DNC_MIN_LEN 16 /* shorter batches (decode) stay on the recurrent scan */

/* Shared-memory row strides (floats). Chosen so the mma fragment loads hit distinct banks
 * (rows of 128 read row-major: 132 = 4 mod 32; the 64-wide matrices read as B operands:
 * 72 = 8 mod 32). */
#define LDK 132
#define LD64 72

static_assert(DNC_DVS == DNC_C, "the state kernels tile the value columns like the chunk rows");

typedef struct dnc_tab {
    int n;
    int64_t start[DNC_MAX_SEGS], len[DNC_MAX_SEGS];
    int cfirst[DNC_MAX_SEGS + 1]; /* first chunk of each sequence; cfirst[n] = chunks */
} dnc_tab;


__device__ __forceinline__ uint32_t to_tf32(float f) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(f));
    return r;
}

/* d += a b: one m16n8k8 TF32 tile. Fragments (g = lane/4, t = lane%4):
 * a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4); b0 (t, g), b1 (t+4, g);
 * d0 (g, 2t), d1 (g, 2t+1), d2 (g+8, 2t), d3 (g+8, 2t+1). */
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* A fragment of the 16x8 tile at A: element (m, k) at A[m*sm + k*sk], times sc[k] if sc. */
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const float *A, int sm, int sk, const float *sc, int g,
                                       int t) {
    float s0 = sc ? sc[t] : 1.0f, s1 = sc ? sc[t + 4] : 1.0f;
    a[0] = to_tf32(A[g * sm + t * sk] * s0);
    a[1] = to_tf32(A[(g + 8) * sm + t * sk] * s0);
    a[2] = to_tf32(A[g * sm + (t + 4) * sk] * s1);
    a[3] = to_tf32(A[(g + 8) * sm + (t + 4) * sk] * s1);
}
/* B fragment of the 8x8 tile at B: element (k, n) at B[k*sk + n*sn]. */
__device__ __forceinline__ void load_b(uint32_t &b0, uint32_t &b1, const float *B, int sk, int sn, int g, int t) {
    b0 = to_tf32(B[t * sk + g * sn]);
    b1 = to_tf32(B[(t + 4) * sk + g * sn]);
}

/* Asynchronous global -> shared copies (sm_80+): many in flight per thread, no registers.
 * An invalid source is zero-filled (src-size 0; the pointer is then only a valid dummy). */
__device__ __forceinline__ void cp16(float *dst, const float *src, bool valid) {
    uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp4(float *dst, const float *src, bool valid) {
    uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(d), "l"(src), "r"(valid ? 4 : 0));
}

/* The gates of one chunk for the state kernels: gc (threads 0..63) and beta (64..127) of rows row0 ..
 * row0 + 63 into gcb + off and btb + off, zero past nrow rows (one cp.async each; the caller commits). */
__device__ __forceinline__ void stage_gc_beta(float *gcb, float *btb, int off, const float *gcg, const float *btg,
                                              int64_t row0, int nrow, int Hv, int h, int tid) {
    if (tid < 2 * DNC_C) {
        const int i = tid & (DNC_C - 1);
        const bool ok = i < nrow;
        const float *src = (tid < DNC_C ? gcg : btg) + (row0 + i) * Hv + h;
        cp4((tid < DNC_C ? gcb : btb) + off + i, ok ? src : gcg, ok);
    }
}
__device__ __forceinline__ void cp_wait_all() {
    cp_async_commit();
    cp_async_wait<0>();
}


/* ==== the design since v3 ====
 * No W, U or P through device memory. With U = T diag(beta) V and W = T diag(beta exp(gc)) K,
 *   Vn = U - W S = T (beta (V - exp(gc) K S)),
 * so the intra-chunk kernel only has to hand the state kernel T (16 KB per chunk and value
 * head, with gc and beta per row); the state kernel stages raw K, Q, the V slice and T, and
 * computes K S and Q S in one pass over S, P = mask(q k^T exp(gc_i - gc_j)) itself, Vn = T Y,
 * O = exp(gc) q S + P Vn and the update. Device-memory traffic at 8x512 drops from ~500 MB
 * (W, U, P written and read back) to ~50 MB of T each way; q, k rows are read from qkv (L2).
 * The intra kernel per (chunk, value head) (v6: per (chunk, key head) on large grids), 256 threads,
 * ~70 KB (3 blocks per SM): k staged, l2-normalised, K K^T, L, the blocked 16x16 solve (the 4
 * diagonal blocks by substitution in registers, then block rows in three rounds); writes T
 * [ch][64][64]. v3's and v4's kernels were removed once v5 and v6 ran (bench/NOTES.md keeps their
 * measurements). */

/* Rows [0, 64) x columns [0, npad) of a tile into shared memory (row stride ld, npad a
 * multiple of 4): source row i at src + i*stride; zero where i >= nrow or c >= ncol. vec: the
 * source rows are 16-byte aligned (stride, base) and ncol % 4 == 0. */
__device__ __forceinline__ void stage_tile(float *dst, int ld, const float *src, int64_t stride, int nrow, int ncol,
                                           int npad, int vec, const float *dummy, int tid, int nthr) {
    if (vec) {
        const int q4 = npad / 4;
        for (int e = tid; e < DNC_C * q4; e += nthr) {
            int i = e / q4, c = (e % q4) * 4;
            bool ok = i < nrow && c < ncol;
            cp16(dst + i * ld + c, ok ? src + i * stride + c : dummy, ok);
        }
    } else {
        for (int e = tid; e < DNC_C * npad; e += nthr) {
            int i = e / npad, c = e % npad;
            bool ok = i < nrow && c < ncol;
            cp4(dst + i * ld + c, ok ? src + i * stride + c : dummy, ok);
        }
    }
}

/* Shared memory of the intra kernels (floats): K [64][LDK]; Am, T [64][LD64]; gc, beta [64]. */
#define INTRA3_SMEM (sizeof(float) * (DNC_C * LDK + 2 * DNC_C * LD64 + 2 * DNC_C))

/* The intra kernels' outputs per chunk ci and value head h (ch = ci*Hv + h): Tg [ch][64][64] (rows
 * past the chunk's length are unit rows), gcg, btg [row][Hv] (cumulative log decay, beta). */

#define DN3_T 512 /* threads of the state kernels */

/* Operand loads of the state kernels (and v5's/v6's K K^T): one ldmatrix.x4 gives a whole 16x8 TF32
 * A fragment, or the B fragments of two 8-column tiles, from k-contiguous rows already rounded to
 * TF32. Lane addresses: an A fragment (16 rows x 8 k) at row (lane&7) + 8*((lane>>3)&1), k
 * 4*(lane>>4); two B tiles (8 columns n x 8 k each, stored [n][k]) at n (lane&7) + 8*(lane>>4), k
 * 4*((lane>>3)&1); regs 0,1 = b0,b1 of the first tile, 2,3 of the second. */
__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], const float *p) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a)
                 : "memory");
}
__device__ __forceinline__ float tf32f(float x) { return __uint_as_float(to_tf32(x)); }

#define LDV 68 /* T, P, V slice, Yt, Vt: 68 = 4 mod 32, so 8 rows of 16 bytes hit 32 banks */
/* ==== v5 (VSR_CUDA_DN_V5=1; the default before v6) ====
 * Not yet run on a GPU when written (bench/NOTES.md "DeltaNet v5 (not yet run)"). v4's math,
 * block shape and operand layouts; what changed is when the next chunk's data is copied:
 *  - k, T, gc and beta of chunk c+1 are issued right after chunk c's top barrier (k and T into
 *    the second of two buffers, gc/beta by 4-byte cp.async into the second of two row-vector
 *    buffers), so they have the whole chunk to land; v4 issued everything after Vn and loaded
 *    gc, beta and gL with dependent global loads before the top barrier.
 *  - q and the V slice of chunk c+1 are issued right after Y is built (their last reader),
 *    so they hide behind Vn = T Y, P Vn and the update instead of P Vn and the update alone.
 *  - room for the second T: Yt is gone; Y is written transposed into Vt, and Vn overwrites it
 *    after one extra barrier (every warp's T Y reads done). Shared memory stays ~218 KB.
 *  - gc of rows past the chunk's length is 0 (zero-filled copy), not gL: every use of those
 *    rows is masked (eg, ek, P's exp), so nothing else changes.
 * The K S / Q S / Q K^T step is also software-pipelined by hand: the fragments of step ks+1
 * are loaded (ldmatrix, still volatile, so program order holds) before step ks's mma. */
/* ---- pieces of the intra-chunk kernels (256 threads; all four called by every thread of the block) ---- */

/* beta = sigmoid(b) and the log decay g = -exp(A_log) softplus(a + dt_bias) of row tid < 64 of the chunk
 * (rows r0 .., value head h) into bt, gc; 0 past Lc */
__device__ __forceinline__ void dn_gate_rows(int tid, int Lc, int64_t r0, int Hv, int h, const float *__restrict__ b,
                                             const float *__restrict__ a, const float *__restrict__ A_log,
                                             const float *__restrict__ dt_bias, float *gc, float *bt) {
    if (tid < DNC_C) {
        float be = 0.0f, gg = 0.0f;
        if (tid < Lc) {
            const int64_t bi = (r0 + tid) * Hv + h;
            be = sigmoid_d(b[bi]);
            gg = -expf(A_log[h]) * softplus_d(a[bi] + dt_bias[h]);
        }
        bt[tid] = be, gc[tid] = gg;
    }
}

/* warp 0: gc[0..63] = its inclusive cumsum (rows past Lc add 0: their gc is gc[Lc-1]) */
__device__ __forceinline__ void dn_cumsum64(int w, int lane, float *gc) {
    if (w == 0) {
        float x0 = gc[2 * lane], x1 = gc[2 * lane + 1], s = x0 + x1;
        for (int o = 1; o < 32; o <<= 1) {
            float y = __shfl_up_sync(0xffffffffu, s, o);
            if (lane >= o) s += y;
        }
        float ex = s - (x0 + x1);
        gc[2 * lane] = ex + x0;
        gc[2 * lane + 1] = ex + x0 + x1;
    }
}

/* Ts = (I - Am)^-1 (Am strictly lower triangular, Ts zeroed above the diagonal blocks), blocked by 16:
 * the 4 diagonal blocks by substitution in registers (threads 0..63), then block rows in three rounds
 * fully unrolled (every thread; barriers inside) */
__device__ __forceinline__ void dn_solve_T(int tid, const float *Am, float *Ts) {
    if (tid < DNC_C) {
        const int B = tid >> 4, jj = tid & 15;
        const float *Ab = Am + 16 * B * LD64 + 16 * B;
        float x[16];
#pragma unroll
        for (int i = 0; i < 16; i++) {
            float s = 0.0f;
#pragma unroll
            for (int m = 0; m < i; m++) s = fmaf(Ab[i * LD64 + m], x[m], s);
            x[i] = i < jj ? 0.0f : (i == jj ? 1.0f : s);
        }
        float *Tb = Ts + 16 * B * LD64 + 16 * B + jj;
#pragma unroll
        for (int i = 0; i < 16; i++) Tb[i * LD64] = x[i];
    }
    __syncthreads();
    {
        const int r = tid >> 4, cc = tid & 15;
#pragma unroll
        for (int I = 1; I < 4; I++) {
            float xv[3] = {0.0f, 0.0f, 0.0f};
            const float *arow = Am + (16 * I + r) * LD64;
#pragma unroll
            for (int J = 0; J < 3; J++) {
                if (J >= I) break;
                float s = 0.0f;
#pragma unroll
                for (int m = 16 * J; m < 16 * I; m++) s = fmaf(arow[m], Ts[m * LD64 + 16 * J + cc], s);
                xv[J] = s;
            }
#pragma unroll
            for (int J = 0; J < 3; J++)
                if (J < I) Ts[(16 * I + r) * LD64 + 16 * J + cc] = xv[J];
            __syncthreads();
            float yv[3] = {0.0f, 0.0f, 0.0f};
            const float *trow = Ts + (16 * I + r) * LD64 + 16 * I;
#pragma unroll
            for (int J = 0; J < 3; J++) {
                if (J >= I) break;
                float s = 0.0f;
#pragma unroll
                for (int k = 0; k < 16; k++) s = fmaf(trow[k], Ts[(16 * I + k) * LD64 + 16 * J + cc], s);
                yv[J] = s;
            }
            __syncthreads();
#pragma unroll
            for (int J = 0; J < 3; J++)
                if (J < I) Ts[(16 * I + r) * LD64 + 16 * J + cc] = yv[J];
            __syncthreads();
        }
    }
}

/* T (rounded to TF32: the state kernels read it by ldmatrix) to device memory as 16-byte rows */
__device__ __forceinline__ void dn_write_T(int tid, const float *Ts, float *T) {
    for (int e = tid; e < DNC_C * DNC_C / 4; e += 256) {
        int i = e / (DNC_C / 4), c = (e % (DNC_C / 4)) * 4;
        float4 v = *(const float4 *)(Ts + i * LD64 + c);
        v.x = tf32f(v.x), v.y = tf32f(v.y), v.z = tf32f(v.z), v.w = tf32f(v.w);
        *(float4 *)(T + i * DNC_C + c) = v;
    }
}

/* v5's intra-chunk kernel: v3's (T rounded, as v4 ran it) with the serial parts made parallel,
 * the same arithmetic in the same order (on the H200 v5 and v4 agreed bit for bit): the eight rows of each warp's norm pass at once, k
 * rounded to TF32 there so K K^T reads it by ldmatrix, and the blocked solve's rounds fully
 * unrolled. */
__global__ void __launch_bounds__(256) k_dn5_intra(const float *__restrict__ qkv, int64_t qkv_stride, int vec,
                                                   const float *__restrict__ b, const float *__restrict__ a,
                                                   const float *__restrict__ A_log, const float *__restrict__ dt_bias,
                                                   const dnc_tab tb, int Hk, int Hv, int dk,
                                                   float *__restrict__ Tg, float *__restrict__ gcg,
                                                   float *__restrict__ btg) {
    extern __shared__ __align__(16) float smem[];
    float *Ks = smem, *Am = Ks + DNC_C * LDK, *Ts = Am + DNC_C * LD64, *gc = Ts + DNC_C * LD64, *bt = gc + DNC_C;
    const int ci = blockIdx.x, h = blockIdx.y, hk = h / (Hv / Hk);
    const int sg = last_le_d(tb.cfirst, tb.n, ci);
    const int64_t r0 = tb.start[sg] + (int64_t)(ci - tb.cfirst[sg]) * DNC_C;
    const int Lc = (int)min((int64_t)DNC_C, tb.start[sg] + tb.len[sg] - r0);
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, t = lane & 3;
    const int64_t ch = (int64_t)ci * Hv + h;
    const float *ksrc = qkv + (int64_t)Hk * dk + (int64_t)hk * dk;

    stage_tile(Ks, LDK, ksrc + r0 * qkv_stride, qkv_stride, Lc, dk, DNC_DK, vec, qkv, tid, 256);
    dn_gate_rows(tid, Lc, r0, Hv, h, b, a, A_log, dt_bias, gc, bt);
    cp_wait_all();
    __syncthreads();
    dn_cumsum64(w, lane, gc);
    /* l2-normalise the 64 k rows in place and round them to TF32 (K K^T reads them by
     * ldmatrix): warp w takes rows 8w..8w+7, all eight at once (v3 did them one after another:
     * eight dependent load / 5-shuffle / sqrt chains). Same sums in the same order as v3: the
     * padding columns dk..127 are zero, and adding +0 to a sum of squares changes nothing. */
    {
        float x[8][DNC_DK / 32], ss[8];
#pragma unroll
        for (int rr = 0; rr < 8; rr++) {
            const float *row = Ks + (8 * w + rr) * LDK;
            ss[rr] = 0.0f;
#pragma unroll
            for (int m = 0; m < DNC_DK / 32; m++) {
                x[rr][m] = row[lane + 32 * m];
                ss[rr] += x[rr][m] * x[rr][m];
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
#pragma unroll
            for (int rr = 0; rr < 8; rr++) ss[rr] += __shfl_xor_sync(0xffffffffu, ss[rr], o);
#pragma unroll
        for (int rr = 0; rr < 8; rr++) {
            float *row = Ks + (8 * w + rr) * LDK;
            const float inv = 1.0f / sqrtf(ss[rr] + 1e-6f);
#pragma unroll
            for (int m = 0; m < DNC_DK / 32; m++) row[lane + 32 * m] = tf32f(x[rr][m] * inv);
        }
    }
    for (int e = tid; e < DNC_C * LD64; e += 256) Ts[e] = 0.0f;
    __syncthreads();
    if (tid < Lc) {
        const int64_t gi = (r0 + tid) * Hv + h;
        gcg[gi] = gc[tid], btg[gi] = bt[tid];
    }
    /* K K^T: warp w takes row tile w%4 and column tiles 4*(w/4)..+3 (tiles above the diagonal
     * skipped); Am = -beta_i k_i.k_j exp(gc_i - gc_j) below the diagonal, 0 elsewhere */
    {
        const int mt = w & 3, nb = (w >> 2) * 4;
        float s1[4][4];
#pragma unroll
        for (int n = 0; n < 4; n++)
#pragma unroll
            for (int r = 0; r < 4; r++) s1[n][r] = 0.0f;
        /* operands by ldmatrix (k already TF32), lane addresses as above ldsm4; a pair of
         * column tiles is loaded when its first tile touches the lower triangle */
        const int ks_n = (dk + 7) / 8;
        const int arow = (lane & 7) + 8 * ((lane >> 3) & 1), acol = 4 * (lane >> 4);
        const int brow = (lane & 7) + 8 * (lane >> 4), bcol = 4 * ((lane >> 3) & 1);
        const bool p0 = 8 * nb <= 16 * mt + 15, p1 = 8 * (nb + 2) <= 16 * mt + 15;
        for (int ks = 0; ks < ks_n; ks++) {
            uint32_t ak[4], b[2][4];
            ldsm4(ak, Ks + (mt * 16 + arow) * LDK + ks * 8 + acol);
            if (p0) ldsm4(b[0], Ks + (nb * 8 + brow) * LDK + ks * 8 + bcol);
            if (p1) ldsm4(b[1], Ks + ((nb + 2) * 8 + brow) * LDK + ks * 8 + bcol);
#pragma unroll
            for (int n = 0; n < 4; n++) {
                if (8 * (nb + n) > 16 * mt + 15) continue;
                mma_tf32(s1[n], ak, b[n >> 1][2 * (n & 1)], b[n >> 1][2 * (n & 1) + 1]);
            }
        }
#pragma unroll
        for (int n = 0; n < 4; n++)
#pragma unroll
            for (int r = 0; r < 4; r++) {
                int i = mt * 16 + g + ((r >> 1) << 3), j = (nb + n) * 8 + 2 * t + (r & 1);
                Am[i * LD64 + j] = j < i ? -bt[i] * s1[n][r] * expf(gc[i] - gc[j]) : 0.0f;
            }
    }
    __syncthreads();
    dn_solve_T(tid, Am, Ts); /* T = (I - Am)^-1 */
    dn_write_T(tid, Ts, Tg + ch * DNC_C * DNC_C);
}

#define STATE5_SMEM (sizeof(float) * (4 * DNC_C * LDK + 5 * DNC_C * LDV + 6 * DNC_C))

__global__ void __launch_bounds__(DN3_T, 1) k_dn5_state(const float *__restrict__ qkv, int64_t qkv_stride, int vec,
                                                       const float *__restrict__ Tg, const float *__restrict__ gcg,
                                                       const float *__restrict__ btg, const dnc_tab tb, int Hk,
                                                       int Hv, int dk, int dv, int nsl, float *__restrict__ out) {
    extern __shared__ __align__(16) float smem[];
    /* K [2][64][LDK], Q, St [64][LDK]; T [2][64][LDV], P, V, Vt [64][LDV]; gc, beta [2][64];
     * exp(gc), exp(gL - gc) [64] */
    float *Kb = smem, *Qs = Kb + 2 * DNC_C * LDK, *St = Qs + DNC_C * LDK, *Tb = St + DNC_C * LDK;
    float *Ps = Tb + 2 * DNC_C * LDV, *Vs = Ps + DNC_C * LDV, *Vt = Vs + DNC_C * LDV;
    float *gcb = Vt + DNC_C * LDV, *btb = gcb + 2 * DNC_C, *eg = btb + 2 * DNC_C, *ek = eg + DNC_C;
    const int sl = blockIdx.x % nsl, h = (blockIdx.x / nsl) % Hv, sg = blockIdx.x / nsl / Hv;
    const int hk = h / (Hv / Hk), c0 = sl * DNC_DVS, ncv = min(DNC_DVS, dv - c0);
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, t = lane & 3;
    const int mt = w & 3, nb = (w >> 2) * 2, ks_dk = (dk + 7) / 8;
    const int sr = 16 * (w & 7), cb = (w >> 3) * 4;
    const int arow = (lane & 7) + 8 * ((lane >> 3) & 1), acol = 4 * (lane >> 4);
    const int brow = (lane & 7) + 8 * (lane >> 4), bcol = 4 * ((lane >> 3) & 1);
    const float *Qr = qkv + (int64_t)hk * dk, *Kr = qkv + (int64_t)Hk * dk + (int64_t)hk * dk;
    const float *Vr = qkv + 2LL * Hk * dk + (int64_t)h * dv + c0;
    const float qsc = 1.0f / sqrtf((float)dk);
    const int cf = tb.cfirst[sg], cl = tb.cfirst[sg + 1];
    const int64_t s0 = tb.start[sg], send = s0 + tb.len[sg];
    for (int e = tid; e < DNC_C * LDK; e += DN3_T) St[e] = 0.0f;
    float S[4][4];
#pragma unroll
    for (int n = 0; n < 4; n++)
#pragma unroll
        for (int r = 0; r < 4; r++) S[n][r] = 0.0f;
    { /* everything of the first chunk into buffers 0 */
        const int Lc = (int)min((int64_t)DNC_C, send - s0);
        stage_tile(Kb, LDK, Kr + s0 * qkv_stride, qkv_stride, Lc, dk, DNC_DK, vec, qkv, tid, DN3_T);
        stage_tile(Qs, LDK, Qr + s0 * qkv_stride, qkv_stride, Lc, dk, DNC_DK, vec, qkv, tid, DN3_T);
        stage_tile(Vs, LDV, Vr + s0 * qkv_stride, qkv_stride, Lc, ncv, DNC_DVS, vec, qkv, tid, DN3_T);
        stage_tile(Tb, LDV, Tg + ((int64_t)cf * Hv + h) * DNC_C * DNC_C, DNC_C, DNC_C, DNC_C, DNC_C, 1, Tg, tid,
                   DN3_T);
        stage_gc_beta(gcb, btb, 0, gcg, btg, s0, Lc, Hv, h, tid);
        cp_async_commit();
    }
    for (int ci = cf; ci < cl; ci++) {
        const int par = (ci - cf) & 1;
        const int64_t r0 = s0 + (int64_t)(ci - cf) * DNC_C, rn = r0 + DNC_C;
        const int Lc = (int)min((int64_t)DNC_C, send - r0);
        const int Ln = (int)min((int64_t)DNC_C, send - rn); /* <= 0 on the last chunk */
        float *Ks = Kb + par * DNC_C * LDK, *Ts = Tb + par * DNC_C * LDV;
        const float *gcs = gcb + par * DNC_C, *bts = btb + par * DNC_C;
        /* this chunk's copies have landed, and the previous chunk is done with everything
         * (P, Vt, St, eg, ek, and the k, T, gc, beta buffers the next copies overwrite) */
        cp_wait_all();
        __syncthreads();
        const float gL = gcs[Lc - 1], eL = expf(gL);
        if (ci + 1 < cl) { /* chunk c+1's k, T, gc, beta: the whole of this chunk to land */
            stage_tile(Kb + (par ^ 1) * DNC_C * LDK, LDK, Kr + rn * qkv_stride, qkv_stride, Ln, dk, DNC_DK, vec, qkv,
                       tid, DN3_T);
            stage_tile(Tb + (par ^ 1) * DNC_C * LDV, LDV, Tg + ((int64_t)(ci + 1) * Hv + h) * DNC_C * DNC_C, DNC_C,
                       DNC_C, DNC_C, DNC_C, 1, Tg, tid, DN3_T);
            stage_gc_beta(gcb, btb, (par ^ 1) * DNC_C, gcg, btg, rn, Ln, Hv, h, tid);
            cp_async_commit();
        }
        { /* k rows (tasks 0..63) and q rows (64..127), 4 lanes per row: l2-normalised in place
           * (q times 1/sqrt(dk)), rounded to TF32 */
            const int task = tid >> 2, p = tid & 3, i = task & (DNC_C - 1);
            float *row = (task < DNC_C ? Ks : Qs) + i * LDK;
            float x[DNC_DK / 4], ss = 0.0f;
#pragma unroll
            for (int m = 0; m < DNC_DK / 4; m++) {
                x[m] = row[p + 4 * m];
                ss = fmaf(x[m], x[m], ss);
            }
            ss += __shfl_xor_sync(0xffffffffu, ss, 1);
            ss += __shfl_xor_sync(0xffffffffu, ss, 2);
            const float sc = (1.0f / sqrtf(ss + 1e-6f)) * (task < DNC_C ? 1.0f : qsc);
#pragma unroll
            for (int m = 0; m < DNC_DK / 4; m++) row[p + 4 * m] = tf32f(x[m] * sc);
            if (p == 0 && task < DNC_C) {
                const bool ok = i < Lc;
                eg[i] = ok ? expf(gcs[i]) : 0.0f;
                ek[i] = ok ? expf(gL - gcs[i]) : 0.0f;
            }
        }
        __syncthreads();
        /* K S, Q S and Q K^T over this warp's 16 rows x 16 columns; step ks+1's fragments are
         * loaded before step ks's products (ks_dk >= 1) */
        float xk[2][4], xq[2][4], pp[2][4];
#pragma unroll
        for (int n = 0; n < 2; n++)
#pragma unroll
            for (int r = 0; r < 4; r++) xk[n][r] = xq[n][r] = pp[n][r] = 0.0f;
        const bool qk = nb / 2 <= mt; /* column tiles nb, nb+1 touch the lower triangle */
        {
            const float *pk = Ks + (mt * 16 + arow) * LDK + acol, *pq = Qs + (mt * 16 + arow) * LDK + acol;
            const float *ps = St + (nb * 8 + brow) * LDK + bcol, *pb = Ks + (nb * 8 + brow) * LDK + bcol;
            uint32_t ak[4], aq[4], bs[4], bk[4];
            ldsm4(ak, pk);
            ldsm4(aq, pq);
            ldsm4(bs, ps);
            if (qk) ldsm4(bk, pb);
            for (int ks = 0; ks < ks_dk; ks++) {
                uint32_t nk[4], nq[4], ns[4], nbk[4];
                const int o = ks + 1 < ks_dk ? (ks + 1) * 8 : ks * 8; /* the last step reloads itself */
                ldsm4(nk, pk + o);
                ldsm4(nq, pq + o);
                ldsm4(ns, ps + o);
                if (qk) ldsm4(nbk, pb + o);
                mma_tf32(xk[0], ak, bs[0], bs[1]);
                mma_tf32(xk[1], ak, bs[2], bs[3]);
                mma_tf32(xq[0], aq, bs[0], bs[1]);
                mma_tf32(xq[1], aq, bs[2], bs[3]);
                if (qk) {
                    mma_tf32(pp[0], aq, bk[0], bk[1]);
                    mma_tf32(pp[1], aq, bk[2], bk[3]);
                }
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    ak[r] = nk[r], aq[r] = nq[r], bs[r] = ns[r];
                    if (qk) bk[r] = nbk[r];
                }
            }
        }
        /* Y = beta (V - exp(gc) K S) into Vt (transposed); O = exp(gc) Q S (kept); P = q_i.k_j
         * exp(gc_i - gc_j) for j <= i < Lc */
#pragma unroll
        for (int n = 0; n < 2; n++)
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const int i = mt * 16 + g + ((r >> 1) << 3), c = (nb + n) * 8 + 2 * t + (r & 1);
                Vt[c * LDV + i] = tf32f(bts[i] * (Vs[i * LDV + c] - eg[i] * xk[n][r]));
                xq[n][r] *= eg[i];
                Ps[i * LDV + c] = (c <= i && i < Lc) ? tf32f(pp[n][r] * expf(gcs[i] - gcs[c])) : 0.0f;
            }
        __syncthreads(); /* Y complete; q and the V slice are dead for this chunk */
        if (ci + 1 < cl) { /* chunk c+1's q and V slice, in flight during Vn, P Vn and the update */
            stage_tile(Qs, LDK, Qr + rn * qkv_stride, qkv_stride, Ln, dk, DNC_DK, vec, qkv, tid, DN3_T);
            stage_tile(Vs, LDV, Vr + rn * qkv_stride, qkv_stride, Ln, ncv, DNC_DVS, vec, qkv, tid, DN3_T);
            cp_async_commit();
        }
        /* Vn = T Y (T unit lower triangular: row tile mt needs k rows < 16*(mt+1)), over Y in Vt */
        {
            float vn[2][4];
#pragma unroll
            for (int n = 0; n < 2; n++)
#pragma unroll
                for (int r = 0; r < 4; r++) vn[n][r] = 0.0f;
            for (int ks = 0; ks < 2 * (mt + 1); ks++) {
                uint32_t at[4], by[4];
                ldsm4(at, Ts + (mt * 16 + arow) * LDV + ks * 8 + acol);
                ldsm4(by, Vt + (nb * 8 + brow) * LDV + ks * 8 + bcol);
                mma_tf32(vn[0], at, by[0], by[1]);
                mma_tf32(vn[1], at, by[2], by[3]);
            }
            __syncthreads(); /* every warp's reads of Y done: Vn may overwrite it */
#pragma unroll
            for (int n = 0; n < 2; n++)
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    const int i = mt * 16 + g + ((r >> 1) << 3), c = (nb + n) * 8 + 2 * t + (r & 1);
                    Vt[c * LDV + i] = tf32f(vn[n][r]);
                }
        }
        __syncthreads(); /* Vt holds Vn */
        /* O += P Vn (P lower triangular) */
        for (int ks = 0; ks < 2 * (mt + 1); ks++) {
            uint32_t ap[4], bv[4];
            ldsm4(ap, Ps + (mt * 16 + arow) * LDV + ks * 8 + acol);
            ldsm4(bv, Vt + (nb * 8 + brow) * LDV + ks * 8 + bcol);
            mma_tf32(xq[0], ap, bv[0], bv[1]);
            mma_tf32(xq[1], ap, bv[2], bv[3]);
        }
        {
            const int64_t ostride = (int64_t)Hv * dv;
#pragma unroll
            for (int n = 0; n < 2; n++)
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    const int i = mt * 16 + g + ((r >> 1) << 3), c = (nb + n) * 8 + 2 * t + (r & 1);
                    if (i < Lc && c < ncv) out[(r0 + i) * ostride + (int64_t)h * dv + c0 + c] = xq[n][r];
                }
        }
        /* S = exp(gL) S + (k exp(gL - gc))^T Vn over state rows sr..sr+15, columns 8cb..8cb+31 */
        if (sr < dk) {
#pragma unroll
            for (int n = 0; n < 4; n++)
#pragma unroll
                for (int r = 0; r < 4; r++) S[n][r] *= eL;
            const int ks_c = (Lc + 7) / 8;
            for (int ks = 0; ks < ks_c; ks++) {
                uint32_t ak[4], b01[4], b23[4];
                load_a(ak, Ks + ks * 8 * LDK + sr, 1, LDK, ek + ks * 8, g, t);
                ldsm4(b01, Vt + (cb * 8 + brow) * LDV + ks * 8 + bcol);
                ldsm4(b23, Vt + ((cb + 2) * 8 + brow) * LDV + ks * 8 + bcol);
                mma_tf32(S[0], ak, b01[0], b01[1]);
                mma_tf32(S[1], ak, b01[2], b01[3]);
                mma_tf32(S[2], ak, b23[0], b23[1]);
                mma_tf32(S[3], ak, b23[2], b23[3]);
            }
#pragma unroll
            for (int n = 0; n < 4; n++)
#pragma unroll
                for (int r = 0; r < 4; r++)
                    St[((cb + n) * 8 + 2 * t + (r & 1)) * LDK + sr + g + ((r >> 1) << 3)] = tf32f(S[n][r]);
        }
    }
}

/* ==== v6 (the default; VSR_CUDA_DN_V5=1 runs v5) ====
 * Two changes to v5, both aimed at the per-chunk latency of the state kernel and the repeated
 * work of the intra kernel (bench/notes/2026-11-29-cuda-sessions.md "DeltaNet v6"):
 *  - q and k are l2-normalised (q times 1/sqrt(dk)) and rounded to TF32 once per (chunk, key
 *    head) by the intra kernel, which writes them to scratch Qn, Kn [rows][Hk][dk]. The state
 *    kernel stages those rows as they are: its norm pass (32 loads, 32 stores per thread) and the
 *    barrier after it are gone; exp(gc) of its two epilogue rows is computed in registers,
 *    exp(gL - gc) by 64 threads after the chunk's top barrier (first read after the Y barrier).
 *  - the intra kernel takes (chunk, key head, group of value heads): with one group (large
 *    grids, e.g. 8x512: 1024 blocks instead of 3072) the k staging, its norms and K K^T are done
 *    once for the Hv/Hk value heads that share the key head, then L, the solve and T per value
 *    head from the same K K^T registers. Small grids (3x128) keep one value head per block, so
 *    the one wave stays as wide as v5's. VSR_CUDA_DN6_GROUP=1 / =0 forces either (tests).
 * Arithmetic: v5's, except q and k's norms are summed in another order (4 floats per lane,
 * then a 32-lane tree) than v5's state kernel did (so v6 and v5 differ at the last bits). */
__global__ void __launch_bounds__(256) k_dn6_intra(const float *__restrict__ qkv, int64_t qkv_stride, int vec,
                                                   const float *__restrict__ b, const float *__restrict__ a,
                                                   const float *__restrict__ A_log, const float *__restrict__ dt_bias,
                                                   const dnc_tab tb, int Hk, int Hv, int dk, int hpb,
                                                   float *__restrict__ Tg, float *__restrict__ gcg,
                                                   float *__restrict__ btg, float *__restrict__ Qn,
                                                   float *__restrict__ Kn) {
    extern __shared__ __align__(16) float smem[];
    float *Ks = smem, *Am = Ks + DNC_C * LDK, *Ts = Am + DNC_C * LD64, *gc = Ts + DNC_C * LD64, *bt = gc + DNC_C;
    const int ci = blockIdx.x, hk = blockIdx.y, G = Hv / Hk, h0 = hk * G + blockIdx.z * hpb;
    const int sg = last_le_d(tb.cfirst, tb.n, ci);
    const int64_t r0 = tb.start[sg] + (int64_t)(ci - tb.cfirst[sg]) * DNC_C;
    const int Lc = (int)min((int64_t)DNC_C, tb.start[sg] + tb.len[sg] - r0);
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, t = lane & 3;
    const int64_t nstride = (int64_t)Hk * dk; /* Qn, Kn row stride */
    const float *ksrc = qkv + (int64_t)Hk * dk + (int64_t)hk * dk, *qsrc = qkv + (int64_t)hk * dk;
    const bool writer = blockIdx.z == 0; /* one block per (chunk, key head) writes q^, k^ */

    stage_tile(Ks, LDK, ksrc + r0 * qkv_stride, qkv_stride, Lc, dk, DNC_DK, vec, qkv, tid, 256);
    cp_wait_all();
    __syncthreads();
    /* l2-normalise the 64 k rows in place, rounded to TF32 (v5's intra code: warp w rows 8w..+7) */
    {
        float x[8][DNC_DK / 32], ss[8];
#pragma unroll
        for (int rr = 0; rr < 8; rr++) {
            const float *row = Ks + (8 * w + rr) * LDK;
            ss[rr] = 0.0f;
#pragma unroll
            for (int m = 0; m < DNC_DK / 32; m++) {
                x[rr][m] = row[lane + 32 * m];
                ss[rr] += x[rr][m] * x[rr][m];
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
#pragma unroll
            for (int rr = 0; rr < 8; rr++) ss[rr] += __shfl_xor_sync(0xffffffffu, ss[rr], o);
#pragma unroll
        for (int rr = 0; rr < 8; rr++) {
            float *row = Ks + (8 * w + rr) * LDK;
            const float inv = 1.0f / sqrtf(ss[rr] + 1e-6f);
#pragma unroll
            for (int m = 0; m < DNC_DK / 32; m++) row[lane + 32 * m] = tf32f(x[rr][m] * inv);
        }
    }
    /* q rows straight from global (the intra kernel has no other use for q): warp w rows 8w..+7,
     * lane l columns 4l..4l+3, all eight rows' loads in flight before the first use */
    if (writer) {
        const float qsc = 1.0f / sqrtf((float)dk);
        float x[8][4], ss[8];
#pragma unroll
        for (int rr = 0; rr < 8; rr++) {
            const int i = 8 * w + rr, c = 4 * lane;
            const float *src = qsrc + (r0 + i) * qkv_stride + c;
            if (i < Lc && c < dk) {
                if (vec) {
                    const float4 v = *(const float4 *)src;
                    x[rr][0] = v.x, x[rr][1] = v.y, x[rr][2] = v.z, x[rr][3] = v.w;
                } else {
                    x[rr][0] = src[0], x[rr][1] = src[1], x[rr][2] = src[2], x[rr][3] = src[3];
                }
            } else {
                x[rr][0] = x[rr][1] = x[rr][2] = x[rr][3] = 0.0f;
            }
            ss[rr] = x[rr][0] * x[rr][0] + x[rr][1] * x[rr][1] + x[rr][2] * x[rr][2] + x[rr][3] * x[rr][3];
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
#pragma unroll
            for (int rr = 0; rr < 8; rr++) ss[rr] += __shfl_xor_sync(0xffffffffu, ss[rr], o);
#pragma unroll
        for (int rr = 0; rr < 8; rr++) {
            const int i = 8 * w + rr, c = 4 * lane;
            if (i < Lc && c < dk) {
                const float sc = (1.0f / sqrtf(ss[rr] + 1e-6f)) * qsc;
                float4 v;
                v.x = tf32f(x[rr][0] * sc), v.y = tf32f(x[rr][1] * sc);
                v.z = tf32f(x[rr][2] * sc), v.w = tf32f(x[rr][3] * sc);
                *(float4 *)(Qn + (r0 + i) * nstride + (int64_t)hk * dk + c) = v;
            }
        }
    }
    __syncthreads();
    if (writer) /* k^ rows out (the state kernels stage them from here) */
        for (int e = tid; e < Lc * (dk / 4); e += 256) {
            const int i = e / (dk / 4), c = (e % (dk / 4)) * 4;
            *(float4 *)(Kn + (r0 + i) * nstride + (int64_t)hk * dk + c) = *(const float4 *)(Ks + i * LDK + c);
        }
    /* K K^T once for every value head of the block: warp w row tile w%4, column tiles 4*(w/4)..+3
     * (tiles above the diagonal skipped), operands by ldmatrix as in k_dn5_intra */
    const int mt = w & 3, nb = (w >> 2) * 4;
    float s1[4][4];
    {
#pragma unroll
        for (int n = 0; n < 4; n++)
#pragma unroll
            for (int r = 0; r < 4; r++) s1[n][r] = 0.0f;
        const int ks_n = (dk + 7) / 8;
        const int arow = (lane & 7) + 8 * ((lane >> 3) & 1), acol = 4 * (lane >> 4);
        const int brow = (lane & 7) + 8 * (lane >> 4), bcol = 4 * ((lane >> 3) & 1);
        const bool p0 = 8 * nb <= 16 * mt + 15, p1 = 8 * (nb + 2) <= 16 * mt + 15;
        for (int ks = 0; ks < ks_n; ks++) {
            uint32_t ak[4], bb[2][4];
            ldsm4(ak, Ks + (mt * 16 + arow) * LDK + ks * 8 + acol);
            if (p0) ldsm4(bb[0], Ks + (nb * 8 + brow) * LDK + ks * 8 + bcol);
            if (p1) ldsm4(bb[1], Ks + ((nb + 2) * 8 + brow) * LDK + ks * 8 + bcol);
#pragma unroll
            for (int n = 0; n < 4; n++) {
                if (8 * (nb + n) > 16 * mt + 15) continue;
                mma_tf32(s1[n], ak, bb[n >> 1][2 * (n & 1)], bb[n >> 1][2 * (n & 1) + 1]);
            }
        }
    }
    for (int hh = 0; hh < hpb; hh++) {
        const int h = h0 + hh;
        const int64_t ch = (int64_t)ci * Hv + h;
        /* the previous head is done with gc, bt, Am and Ts (its T written out) */
        __syncthreads();
        dn_gate_rows(tid, Lc, r0, Hv, h, b, a, A_log, dt_bias, gc, bt);
        for (int e = tid; e < DNC_C * LD64; e += 256) Ts[e] = 0.0f;
        __syncthreads();
        dn_cumsum64(w, lane, gc);
        __syncthreads();
        if (tid < Lc) {
            const int64_t gi = (r0 + tid) * Hv + h;
            gcg[gi] = gc[tid], btg[gi] = bt[tid];
        }
        /* Am = -beta_i k_i.k_j exp(gc_i - gc_j) below the diagonal, 0 elsewhere */
#pragma unroll
        for (int n = 0; n < 4; n++)
#pragma unroll
            for (int r = 0; r < 4; r++) {
                int i = mt * 16 + g + ((r >> 1) << 3), j = (nb + n) * 8 + 2 * t + (r & 1);
                Am[i * LD64 + j] = j < i ? -bt[i] * s1[n][r] * expf(gc[i] - gc[j]) : 0.0f;
            }
        __syncthreads();
        dn_solve_T(tid, Am, Ts); /* T = (I - Am)^-1 */
        dn_write_T(tid, Ts, Tg + ch * DNC_C * DNC_C);
    }
}

/* The state kernel's products with their loop counts known at compile time (session 6; ncu at 8x512 had
 * ~12 instructions per HMMA in the runtime-bounded loops, which re-zeroed their fragments, tested `first`
 * and `qk` at every step, rebuilt addresses and ran ldmatrix under divergence guards): each is unrolled,
 * its predicates are template arguments, and step ks+1's fragments are loaded before step ks's products
 * (ldsm4 and mma_tf32 are volatile asm, so the compiler keeps this order). Every accumulator takes its
 * products in the same order as before, so the results are bit-identical to v6's first form (the hashes
 * printed by test_cuda_ops). */

/* K S, Q S (unless FIRST: S = 0) and Q K^T (QK: column tiles nb, nb+1 touch the lower triangle) over a
 * warp's 16 rows x 16 columns, all DNC_DK / 8 steps (columns past dk are zero in K, Q and St). pk, pq: the
 * A-fragment addresses of K and Q at step 0; ps, pb: the B-fragment addresses of St and K. */
template <bool FIRST, bool QK>
__device__ __forceinline__ void dn_ksqs(const float *pk, const float *pq, const float *ps, const float *pb,
                                        float (&xk)[2][4], float (&xq)[2][4], float (&pp)[2][4]) {
    constexpr int NKS = DNC_DK / 8;
    uint32_t ak[2][4], aq[2][4], bs[2][4], bk[2][4];
    if (!FIRST || QK) ldsm4(aq[0], pq);
    if (QK) ldsm4(bk[0], pb);
    if (!FIRST) ldsm4(ak[0], pk), ldsm4(bs[0], ps);
#pragma unroll
    for (int ks = 0; ks < NKS; ks++) {
        const int c = ks & 1, n = c ^ 1, o = (ks + 1) * 8;
        if (ks + 1 < NKS) {
            if (!FIRST || QK) ldsm4(aq[n], pq + o);
            if (QK) ldsm4(bk[n], pb + o);
            if (!FIRST) ldsm4(ak[n], pk + o), ldsm4(bs[n], ps + o);
        }
        if (!FIRST) {
            mma_tf32(xk[0], ak[c], bs[c][0], bs[c][1]);
            mma_tf32(xk[1], ak[c], bs[c][2], bs[c][3]);
            mma_tf32(xq[0], aq[c], bs[c][0], bs[c][1]);
            mma_tf32(xq[1], aq[c], bs[c][2], bs[c][3]);
        }
        if (QK) {
            mma_tf32(pp[0], aq[c], bk[c][0], bk[c][1]);
            mma_tf32(pp[1], aq[c], bk[c][2], bk[c][3]);
        }
    }
}

/* acc += A B over NKS k-steps of 8 (A: a lower-triangular 64 x 64 operand, T or P, whose row tile mt needs
 * k < 16 (mt + 1), so NKS = 2 (mt + 1)); pa, pb: the fragment addresses at step 0 */
template <int NKS>
__device__ __forceinline__ void dn_tri(float (&acc)[2][4], const float *pa, const float *pb) {
    uint32_t a[2][4], b[2][4];
    ldsm4(a[0], pa), ldsm4(b[0], pb);
#pragma unroll
    for (int ks = 0; ks < NKS; ks++) {
        const int c = ks & 1, n = c ^ 1;
        if (ks + 1 < NKS) ldsm4(a[n], pa + (ks + 1) * 8), ldsm4(b[n], pb + (ks + 1) * 8);
        mma_tf32(acc[0], a[c], b[c][0], b[c][1]);
        mma_tf32(acc[1], a[c], b[c][2], b[c][3]);
    }
}
__device__ __forceinline__ void dn_tri_mt(int mt, float (&acc)[2][4], const float *pa, const float *pb) {
    switch (mt) { /* warp-uniform */
    case 0: dn_tri<2>(acc, pa, pb); break;
    case 1: dn_tri<4>(acc, pa, pb); break;
    case 2: dn_tri<6>(acc, pa, pb); break;
    default: dn_tri<8>(acc, pa, pb); break;
    }
}

/* S += (k exp(gL - gc))^T Vn over state rows sr..sr+15 and four 8-column tiles from cb: nks k-steps of 8
 * chunk rows (NKS > 0: that many, unrolled, the next step's fragments loaded first; 0: nks at run time, for
 * a partial last chunk) */
template <int NKS>
__device__ __forceinline__ void dn_update(float (&S)[4][4], const float *Ks, const float *Vt, const float *ek, int sr,
                                          int cb, int brow, int bcol, int g, int t, int nks) {
    const float *pv0 = Vt + (cb * 8 + brow) * LDV + bcol, *pv1 = Vt + ((cb + 2) * 8 + brow) * LDV + bcol;
    if constexpr (NKS == 0) { /* one step at a time (double-buffered fragments indexed at run time would live
                               * in local memory) */
        for (int ks = 0; ks < nks; ks++) {
            uint32_t ak[4], b01[4], b23[4];
            load_a(ak, Ks + ks * 8 * LDK + sr, 1, LDK, ek + ks * 8, g, t);
            ldsm4(b01, pv0 + ks * 8), ldsm4(b23, pv1 + ks * 8);
            mma_tf32(S[0], ak, b01[0], b01[1]);
            mma_tf32(S[1], ak, b01[2], b01[3]);
            mma_tf32(S[2], ak, b23[0], b23[1]);
            mma_tf32(S[3], ak, b23[2], b23[3]);
        }
        return;
    }
    constexpr int n_ = NKS;
    uint32_t ak[2][4], b01[2][4], b23[2][4];
    load_a(ak[0], Ks + sr, 1, LDK, ek, g, t);
    ldsm4(b01[0], pv0), ldsm4(b23[0], pv1);
#pragma unroll
    for (int ks = 0; ks < n_; ks++) {
        const int c = ks & 1, n = c ^ 1;
        if (ks + 1 < n_) {
            load_a(ak[n], Ks + (ks + 1) * 8 * LDK + sr, 1, LDK, ek + (ks + 1) * 8, g, t);
            ldsm4(b01[n], pv0 + (ks + 1) * 8), ldsm4(b23[n], pv1 + (ks + 1) * 8);
        }
        mma_tf32(S[0], ak[c], b01[c][0], b01[c][1]);
        mma_tf32(S[1], ak[c], b01[c][2], b01[c][3]);
        mma_tf32(S[2], ak[c], b23[c][0], b23[c][1]);
        mma_tf32(S[3], ak[c], b23[c][2], b23[c][3]);
    }
}

/* v6's state kernel: k_dn5_state with q^, k^ staged ready (from Qn, Kn: always 16-byte rows)
 * and no norm pass. Shared memory as v5's (223,744 B). */
__global__ void __launch_bounds__(DN3_T, 1) k_dn6_state(const float *__restrict__ Qn, const float *__restrict__ Kn,
                                                       const float *__restrict__ qkv, int64_t qkv_stride, int vec,
                                                       const float *__restrict__ Tg, const float *__restrict__ gcg,
                                                       const float *__restrict__ btg, const dnc_tab tb, int Hk,
                                                       int Hv, int dk, int dv, int nsl, float *__restrict__ out) {
    extern __shared__ __align__(16) float smem[];
    /* K [2][64][LDK], Q, St [64][LDK]; T [2][64][LDV], P, V, Vt [64][LDV]; gc, beta [2][64];
     * (unused), exp(gL - gc) [64] */
    float *Kb = smem, *Qs = Kb + 2 * DNC_C * LDK, *St = Qs + DNC_C * LDK, *Tb = St + DNC_C * LDK;
    float *Ps = Tb + 2 * DNC_C * LDV, *Vs = Ps + DNC_C * LDV, *Vt = Vs + DNC_C * LDV;
    float *gcb = Vt + DNC_C * LDV, *btb = gcb + 2 * DNC_C, *ek = btb + 3 * DNC_C;
    const int sl = blockIdx.x % nsl, h = (blockIdx.x / nsl) % Hv, sg = blockIdx.x / nsl / Hv;
    const int hk = h / (Hv / Hk), c0 = sl * DNC_DVS, ncv = min(DNC_DVS, dv - c0);
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, t = lane & 3;
    const int mt = w & 3, nb = (w >> 2) * 2;
    const int sr = 16 * (w & 7), cb = (w >> 3) * 4;
    const int arow = (lane & 7) + 8 * ((lane >> 3) & 1), acol = 4 * (lane >> 4);
    const int brow = (lane & 7) + 8 * (lane >> 4), bcol = 4 * ((lane >> 3) & 1);
    const int64_t nstride = (int64_t)Hk * dk;
    const float *Qr = Qn + (int64_t)hk * dk, *Kr = Kn + (int64_t)hk * dk;
    const float *Vr = qkv + 2LL * Hk * dk + (int64_t)h * dv + c0;
    const int cf = tb.cfirst[sg], cl = tb.cfirst[sg + 1];
    const int64_t s0 = tb.start[sg], send = s0 + tb.len[sg];
    const int i0 = mt * 16 + g; /* this thread's epilogue rows: i0, i0 + 8 */
    for (int e = tid; e < DNC_C * LDK; e += DN3_T) St[e] = 0.0f;
    float S[4][4];
#pragma unroll
    for (int n = 0; n < 4; n++)
#pragma unroll
        for (int r = 0; r < 4; r++) S[n][r] = 0.0f;
    { /* everything of the first chunk into buffers 0 */
        const int Lc = (int)min((int64_t)DNC_C, send - s0);
        stage_tile(Kb, LDK, Kr + s0 * nstride, nstride, Lc, dk, DNC_DK, 1, Kn, tid, DN3_T);
        stage_tile(Qs, LDK, Qr + s0 * nstride, nstride, Lc, dk, DNC_DK, 1, Qn, tid, DN3_T);
        stage_tile(Vs, LDV, Vr + s0 * qkv_stride, qkv_stride, Lc, ncv, DNC_DVS, vec, qkv, tid, DN3_T);
        stage_tile(Tb, LDV, Tg + ((int64_t)cf * Hv + h) * DNC_C * DNC_C, DNC_C, DNC_C, DNC_C, DNC_C, 1, Tg, tid,
                   DN3_T);
        stage_gc_beta(gcb, btb, 0, gcg, btg, s0, Lc, Hv, h, tid);
        cp_async_commit();
    }
    for (int ci = cf; ci < cl; ci++) {
        const int par = (ci - cf) & 1;
        const int64_t r0 = s0 + (int64_t)(ci - cf) * DNC_C, rn = r0 + DNC_C;
        const int Lc = (int)min((int64_t)DNC_C, send - r0);
        const int Ln = (int)min((int64_t)DNC_C, send - rn); /* <= 0 on the last chunk */
        float *Ks = Kb + par * DNC_C * LDK, *Ts = Tb + par * DNC_C * LDV;
        const float *gcs = gcb + par * DNC_C, *bts = btb + par * DNC_C;
        /* this chunk's copies have landed, and the previous chunk is done with everything
         * (P, Vt, St, ek, and the k, T, gc, beta buffers the next copies overwrite) */
        cp_wait_all();
        __syncthreads();
        const float gL = gcs[Lc - 1], eL = expf(gL);
        if (ci + 1 < cl) { /* chunk c+1's k, T, gc, beta: the whole of this chunk to land */
            stage_tile(Kb + (par ^ 1) * DNC_C * LDK, LDK, Kr + rn * nstride, nstride, Ln, dk, DNC_DK, 1, Kn, tid,
                       DN3_T);
            stage_tile(Tb + (par ^ 1) * DNC_C * LDV, LDV, Tg + ((int64_t)(ci + 1) * Hv + h) * DNC_C * DNC_C, DNC_C,
                       DNC_C, DNC_C, DNC_C, 1, Tg, tid, DN3_T);
            stage_gc_beta(gcb, btb, (par ^ 1) * DNC_C, gcg, btg, rn, Ln, Hv, h, tid);
            cp_async_commit();
        }
        /* exp(gL - gc) for the update (read after the Y barrier); exp(gc) of this thread's two
         * epilogue rows in registers (0 past Lc, as v5's eg) */
        if (tid < DNC_C) ek[tid] = tid < Lc ? expf(gL - gcs[tid]) : 0.0f;
        const float eg0 = i0 < Lc ? expf(gcs[i0]) : 0.0f, eg1 = i0 + 8 < Lc ? expf(gcs[i0 + 8]) : 0.0f;
        /* K S, Q S and Q K^T over this warp's 16 rows x 16 columns (dn_ksqs) */
        float xk[2][4], xq[2][4], pp[2][4];
#pragma unroll
        for (int n = 0; n < 2; n++)
#pragma unroll
            for (int r = 0; r < 4; r++) xk[n][r] = xq[n][r] = pp[n][r] = 0.0f;
        const bool qk = nb / 2 <= mt; /* column tiles nb, nb+1 touch the lower triangle */
        /* the first chunk of a sequence starts from S = 0: K S and Q S are zero, only Q K^T is made;
         * the last one's state update is never read (the state is not kept past the sequence) */
        const bool first = ci == cf, last = ci + 1 == cl;
        {
            const float *pk = Ks + (mt * 16 + arow) * LDK + acol, *pq = Qs + (mt * 16 + arow) * LDK + acol;
            const float *ps = St + (nb * 8 + brow) * LDK + bcol, *pb = Ks + (nb * 8 + brow) * LDK + bcol;
            if (first) {
                if (qk) dn_ksqs<true, true>(pk, pq, ps, pb, xk, xq, pp);
            } else if (qk) {
                dn_ksqs<false, true>(pk, pq, ps, pb, xk, xq, pp);
            } else {
                dn_ksqs<false, false>(pk, pq, ps, pb, xk, xq, pp);
            }
        }
        /* Y = beta (V - exp(gc) K S) into Vt (transposed); O = exp(gc) Q S (kept); P = q_i.k_j
         * exp(gc_i - gc_j) for j <= i < Lc */
#pragma unroll
        for (int n = 0; n < 2; n++)
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const int i = i0 + ((r >> 1) << 3), c = (nb + n) * 8 + 2 * t + (r & 1);
                const float egi = (r >> 1) ? eg1 : eg0;
                Vt[c * LDV + i] = tf32f(bts[i] * (Vs[i * LDV + c] - egi * xk[n][r]));
                xq[n][r] *= egi;
                Ps[i * LDV + c] = (c <= i && i < Lc) ? tf32f(pp[n][r] * expf(gcs[i] - gcs[c])) : 0.0f;
            }
        __syncthreads(); /* Y complete; q and the V slice are dead for this chunk */
        if (ci + 1 < cl) { /* chunk c+1's q and V slice, in flight during Vn, P Vn and the update */
            stage_tile(Qs, LDK, Qr + rn * nstride, nstride, Ln, dk, DNC_DK, 1, Qn, tid, DN3_T);
            stage_tile(Vs, LDV, Vr + rn * qkv_stride, qkv_stride, Ln, ncv, DNC_DVS, vec, qkv, tid, DN3_T);
            cp_async_commit();
        }
        /* Vn = T Y (T unit lower triangular: row tile mt needs k rows < 16*(mt+1)), over Y in Vt */
        {
            float vn[2][4];
#pragma unroll
            for (int n = 0; n < 2; n++)
#pragma unroll
                for (int r = 0; r < 4; r++) vn[n][r] = 0.0f;
            dn_tri_mt(mt, vn, Ts + (mt * 16 + arow) * LDV + acol, Vt + (nb * 8 + brow) * LDV + bcol);
            __syncthreads(); /* every warp's reads of Y done: Vn may overwrite it */
#pragma unroll
            for (int n = 0; n < 2; n++)
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    const int i = i0 + ((r >> 1) << 3), c = (nb + n) * 8 + 2 * t + (r & 1);
                    Vt[c * LDV + i] = tf32f(vn[n][r]);
                }
        }
        __syncthreads(); /* Vt holds Vn */
        /* O += P Vn (P lower triangular) */
        dn_tri_mt(mt, xq, Ps + (mt * 16 + arow) * LDV + acol, Vt + (nb * 8 + brow) * LDV + bcol);
        {
            const int64_t ostride = (int64_t)Hv * dv;
#pragma unroll
            for (int n = 0; n < 2; n++)
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    const int i = i0 + ((r >> 1) << 3), c = (nb + n) * 8 + 2 * t + (r & 1);
                    if (i < Lc && c < ncv) out[(r0 + i) * ostride + (int64_t)h * dv + c0 + c] = xq[n][r];
                }
        }
        /* S = exp(gL) S + (k exp(gL - gc))^T Vn over state rows sr..sr+15, columns 8cb..8cb+31 */
        if (sr < dk && !last) {
#pragma unroll
            for (int n = 0; n < 4; n++)
#pragma unroll
                for (int r = 0; r < 4; r++) S[n][r] *= eL;
            if (Lc == DNC_C)
                dn_update<DNC_C / 8>(S, Ks, Vt, ek, sr, cb, brow, bcol, g, t, DNC_C / 8);
            else
                dn_update<0>(S, Ks, Vt, ek, sr, cb, brow, bcol, g, t, (Lc + 7) / 8);
#pragma unroll
            for (int n = 0; n < 4; n++)
#pragma unroll
                for (int r = 0; r < 4; r++)
                    St[((cb + n) * 8 + 2 * t + (r & 1)) * LDK + sr + g + ((r >> 1) << 3)] = tf32f(S[n][r]);
        }
    }
}

/* ==== v7 (VSR_CUDA_DN_V7=1; opt-in, sm_90a only) ====
 * v6's state kernel on wgmma (bench/notes/2026-11-29-cuda-sessions.md "A sketch for the next step: DeltaNet's state kernel on
 * wgmma"): v6 is bound by shared-memory reads because every warp loads its own A and B fragments of
 * its 16 x 16 output tile by ldmatrix (~470 KB per chunk for the K S / Q S / Q K^T step alone);
 * wgmma.m64n64k8.tf32 reads each operand once per warpgroup of 64 rows, straight into the tensor
 * cores. The intra kernel is v6's (k_dn6_intra: T, gc, beta, q^, k^), the block and the outputs are
 * v6's: one block per (sequence, value head, 64 value columns), S [dk, 64] carried across chunks.
 * Math as v6 (TF32 operands rounded by cvt.rna as v6 rounds them, FP32 accumulation); only the order
 * of the products inside the tensor cores differs, so v7 and v6 differ at the last bits.
 *
 * Operands. tf32 wgmma takes shared-memory operands K-major only (no transpose for 32-bit types),
 * so every product is arranged to read rows that are contiguous in the reduced index:
 *   K S, Q S    A = K, Q [chunk row][dk]           B = S^T [value column][dk]  (St)
 *   Q K^T       A = Q                              B = K [chunk row][dk]
 *   Vn = T Y    A = T [i][j]                       B = Y^T [value column][j]   (Vt)
 *   O += P Vn   A = P [i][j]                       B = Vn^T [value column][j]  (Vt)
 *   S += (k exp(gL - gc))^T Vn: A would be K^T, M-major in K's layout, which tf32 does not take from
 *   shared memory; it takes it from registers: A in the m16n8k8 fragment order per warp (a0 (g, t),
 *   a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4): CUTLASS's ALayout_64x8 for 32-bit types), loaded and
 *   scaled by v6's load_a arithmetic. S is the accumulator, rows dk, columns the 64 value columns.
 * Accumulators (m64n64: 32 floats a thread) are the mma.sync C layout: element 4j + e of a thread is
 * row 16 w + g + 8 (e >> 1), column 8 j + 2 t + (e & 1) (w: warp in the warpgroup).
 *
 * Shared memory: every wgmma operand in the 128-byte swizzle (16-byte chunk c of a 128-byte row r at
 * chunk c ^ (r & 7); descriptor SBO 1024 between 8-row groups, LBO unused; a k-step of 8 floats is
 * +32 bytes, 4 of them per 128-byte row), cut into slabs of 64 rows x 32 floats (8 KB, 1024-aligned):
 *   K [2 buffers][4 slabs] 64 KB    Q [4 slabs] 32 KB    St [4 slabs] 32 KB    T [2][2 slabs] 32 KB
 *   P [2 slabs] 16 KB               Vt [2 slabs] 16 KB (Y^T, then Vn^T in place)
 *   V slice [64][LDV] 17 KB (read by threads only, v6's layout); gc, beta [2][64], exp(gL - gc) [64]
 * = 210.25 KB + 1 KB to align: one block per SM, as v6. dk < 128 is zero-filled to 128 (16-byte
 * pieces, dk % 4 == 0) and every product runs all 16 k-steps: no wgmma depends on the shape.
 *
 * Roles, 384 threads = 3 warpgroups (all of them issue the cp.async copies, as v6's 16 warps did):
 *   phase 1  WG0 X = K S (16 wgmma); WG1 O = Q S; WG2 Q K^T          (the first chunk: S = 0, no K S, Q S)
 *   then     WG0 Y = beta (V - exp(gc) X) -> Vt; WG1 O *= exp(gc); WG2 P = mask(Q K^T exp(gc_i - gc_j)) -> P
 *   barrier  (next chunk's q and V slice issued)
 *   phase 2  WG0 Vn = T Y (8 wgmma), Vn -> Vt over Y (only WG0 reads Y: its wait_group is enough);
 *            WG0 and WG2 load their update A fragments meanwhile (K^T exp(gL - gc), 32 registers)
 *   barrier
 *   phase 3  WG1 O += P Vn (8 wgmma), O out; WG0 / WG2 S = exp(gL) S + K^T Vn over state rows 0..63 /
 *            64..127 (8 wgmma each, A in registers), S -> St (TF32)   (not on a sequence's last chunk)
 *   barrier  (the top of the next chunk: its K, T, gc, beta were issued at the top of this one)
 * Three barriers a chunk (v6: four). Every wgmma batch is issued, committed and waited out (wait_group
 * 0) inside one branch, and accumulators are only touched after the wait (reg_fence), so ptxas keeps the
 * wgmma pipeline: T Y issued in one `if (wg == 0)` and waited in another made it serialise every
 * wgmma of the kernel (C7518), hence load_af is called between T Y's commit and wait.
 * Generic-proxy writes that a wgmma reads (cp.async landings, St, Vt, P) are fenced by
 * fence.proxy.async before the barrier that publishes them.
 *
 * Predicted (8 x 512 at the 27B layer: 768 blocks = 5.8 waves of 132, 8 chunks each, so ~48 chunks
 * a SM one after another). Per chunk: 80 k-steps of m64n64k8 (K S, Q S, Q K^T 16 each, T Y and P Vn
 * 8 each, the update 2 x 8) at 32 cycles each (1024 TF32 FMA / cycle / SM) = 2.6 k cycles of tensor
 * work; shared-memory operand reads 64 x 4 KB + 16 x 2 KB = 288 KB = 2.25 k cycles at 128 B / cycle
 * (v6: ~470 KB for the first step alone, by ldmatrix), overlapping it. The chain, in cycles: top
 * barrier and copies issued ~0.3 k; phase 1 ~1.7 k (the three products share the tensor cores);
 * Y / P epilogues ~0.4 k; barrier and the q / V copies issued ~0.25 k; T Y ~0.35 k and Vn stores
 * ~0.1 k; phase 3 ~0.9 k (update and P Vn share the tensor cores) and St / O stores ~0.1 k: ~4.1 k,
 * say ~5.5 k with issue stalls and bank conflicts (2-way in the update's A loads and the V reads),
 * against v6's ~17 k. Then the copies (96 KB a chunk from L2, issued a chunk ahead as v6 does) need
 * ~31 GB/s a SM, ~4 TB/s over 132 SMs: near the L2's bandwidth, so they may bound it instead.
 * Prediction: state kernel ~420 -> ~170 us (48 x 5.5 k cycles / 1.75 GHz = 150 us, + ~20 us for
 * each block's first chunk, which nothing hides), deltanet ~525 -> ~275 us; the sketch's ~280 us is
 * what shrinking only the K S step and the update would give. Not yet run on a GPU when written. */
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define DN7_ON 1
#endif

#define DN7_T 384                 /* threads: 3 warpgroups */
#define DN7_SLAB (DNC_C * 128)    /* bytes: 64 rows x 32 floats, one swizzled slab */
/* byte offsets from the 1024-aligned base (see above) */
#define DN7_K 0
#define DN7_Q (DN7_K + 8 * DN7_SLAB)
#define DN7_ST (DN7_Q + 4 * DN7_SLAB)
#define DN7_TT (DN7_ST + 4 * DN7_SLAB)
#define DN7_P (DN7_TT + 4 * DN7_SLAB)
#define DN7_VT (DN7_P + 2 * DN7_SLAB)
#define DN7_V (DN7_VT + 2 * DN7_SLAB)
#define DN7_G (DN7_V + (int)sizeof(float) * DNC_C * LDV)
#define STATE7_SMEM (1024 + DN7_G + sizeof(float) * 5 * DNC_C)

#ifdef DN7_ON
/* byte offset of element (row r, column k) of a 64-row tile stored as 128-byte-swizzled slabs */
__device__ __forceinline__ uint32_t sw128(int r, int k) {
    return (uint32_t)((k >> 5) * DN7_SLAB + r * 128 + ((((k >> 2) & 7) ^ (r & 7)) << 4) + (k & 3) * 4);
}
/* rows [0, 64) x columns [0, NPAD) into a swizzled tile (16-byte source rows); zero where i >= nrow or
 * c >= ncol */
template <int NPAD>
__device__ __forceinline__ void stage_sw(unsigned char *dst, const float *src, int64_t stride, int nrow, int ncol,
                                         const float *dummy, int tid) {
    constexpr int Q4 = NPAD / 4;
    for (int e = tid; e < DNC_C * Q4; e += DN7_T) {
        const int i = e / Q4, c = (e % Q4) * 4;
        const bool ok = i < nrow && c < ncol;
        cp16((float *)(dst + sw128(i, c)), ok ? src + i * stride + c : dummy, ok);
    }
}
/* d (+)= A B, m64n64k8 TF32, A and B from shared memory (scale-d acc: 0 = overwrite) */
__device__ __forceinline__ void dn7_ss(float (&d)[32], uint64_t da, uint64_t db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 " WG_REGS32 ", %32, %33, p, 1, 1;\n}\n"
                 : WG_OUT32(d)
                 : "l"(da), "l"(db), "r"(acc)
                 : "memory");
}
/* d += A B, m64n64k8 TF32, A from registers (fragment order above), B from shared memory */
__device__ __forceinline__ void dn7_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t db) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 " WG_REGS32 ", {%32,%33,%34,%35}, %36, 1, 1, 1;\n"
                 : WG_OUT32(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db)
                 : "memory");
}
/* the descriptor offset (16-byte units) of k-step kk of a swizzled tile: 4 k-steps of 32 bytes a slab */
__device__ __forceinline__ uint64_t dn7_kstep(int kk) {
    return (uint64_t)(((kk >> 2) * DN7_SLAB + (kk & 3) * 32) >> 4);
}
/* issues d (+)= A B over NK k-steps (ACC: accumulate from the first; else the first overwrites), A and B
 * swizzled tiles at shared addresses a, b; the caller fences, commits and waits */
template <int NK, bool ACC> __device__ __forceinline__ void dn7_mm(float (&d)[32], uint32_t a, uint32_t b) {
    const uint64_t da = wg_desc_k128(a), db = wg_desc_k128(b);
#pragma unroll
    for (int kk = 0; kk < NK; kk++) dn7_ss(d, da + dn7_kstep(kk), db + dn7_kstep(kk), ACC || kk > 0);
}
/* d (+)= A B run to completion: fence, issue, commit, wait, pin */
template <int NK, bool ACC> __device__ __forceinline__ void dn7_mm_sync(float (&d)[32], uint32_t a, uint32_t b) {
    reg_fence<32>(d);
    wg_fence();
    dn7_mm<NK, ACC>(d, a, b);
    wg_commit();
    wg_wait<0>();
    reg_fence<32>(d);
}
#endif

__global__ void __launch_bounds__(DN7_T, 1) k_dn7_state(const float *__restrict__ Qn, const float *__restrict__ Kn,
                                                       const float *__restrict__ qkv, int64_t qkv_stride, int vec,
                                                       const float *__restrict__ Tg, const float *__restrict__ gcg,
                                                       const float *__restrict__ btg, const dnc_tab tb, int Hk,
                                                       int Hv, int dk, int dv, int nsl, float *__restrict__ out) {
#ifdef DN7_ON
    extern __shared__ __align__(16) unsigned char dn7_raw[];
    const uint32_t sb = (smem_u32(dn7_raw) + 1023u) & ~1023u; /* the swizzle is on address bits: 1024-aligned */
    unsigned char *sp = dn7_raw + (sb - smem_u32(dn7_raw));
    float *Vs = (float *)(sp + DN7_V), *gcb = (float *)(sp + DN7_G), *btb = gcb + 2 * DNC_C, *ek = btb + 2 * DNC_C;
    const int sl = blockIdx.x % nsl, h = (blockIdx.x / nsl) % Hv, sg = blockIdx.x / nsl / Hv;
    const int hk = h / (Hv / Hk), c0 = sl * DNC_DVS, ncv = min(DNC_DVS, dv - c0);
    const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int i0 = 16 * ((tid >> 5) & 3) + g; /* this thread's accumulator rows: i0, i0 + 8 */
    const int64_t nstride = (int64_t)Hk * dk, ostride = (int64_t)Hv * dv;
    const float *Qr = Qn + (int64_t)hk * dk, *Kr = Kn + (int64_t)hk * dk;
    const float *Vr = qkv + 2LL * Hk * dk + (int64_t)h * dv + c0;
    const int cf = tb.cfirst[sg], cl = tb.cfirst[sg + 1];
    const int64_t s0 = tb.start[sg], send = s0 + tb.len[sg];
    for (int e = tid; e < 4 * DN7_SLAB / 16; e += DN7_T) ((float4 *)(sp + DN7_ST))[e] = make_float4(0.f, 0.f, 0.f, 0.f);
    /* acc: X = K S then Vn (WG0), O (WG1), Q K^T (WG2); S: state rows 64 (wg >> 1) .. + 63 (WG0, WG2) */
    float acc[32], S[32];
#pragma unroll
    for (int i = 0; i < 32; i++) acc[i] = S[i] = 0.0f;
    { /* everything of the first chunk into buffers 0 */
        const int Lc = (int)min((int64_t)DNC_C, send - s0);
        stage_sw<DNC_DK>(sp + DN7_K, Kr + s0 * nstride, nstride, Lc, dk, Kn, tid);
        stage_sw<DNC_DK>(sp + DN7_Q, Qr + s0 * nstride, nstride, Lc, dk, Qn, tid);
        stage_tile(Vs, LDV, Vr + s0 * qkv_stride, qkv_stride, Lc, ncv, DNC_DVS, vec, qkv, tid, DN7_T);
        stage_sw<DNC_C>(sp + DN7_TT, Tg + ((int64_t)cf * Hv + h) * DNC_C * DNC_C, DNC_C, DNC_C, DNC_C, Tg, tid);
        stage_gc_beta(gcb, btb, 0, gcg, btg, s0, Lc, Hv, h, tid);
        cp_async_commit();
    }
    for (int ci = cf; ci < cl; ci++) {
        const int par = (ci - cf) & 1;
        const int64_t r0 = s0 + (int64_t)(ci - cf) * DNC_C, rn = r0 + DNC_C;
        const int Lc = (int)min((int64_t)DNC_C, send - r0);
        const int Ln = (int)min((int64_t)DNC_C, send - rn); /* <= 0 on the last chunk */
        const uint32_t kofs = DN7_K + par * 4 * DN7_SLAB, tofs = DN7_TT + par * 2 * DN7_SLAB;
        const float *gcs = gcb + par * DNC_C, *bts = btb + par * DNC_C;
        /* this chunk's copies have landed (and are visible to wgmma's async proxy), and the previous
         * chunk is done with everything (P, Vt, St, ek, and the buffers the next copies overwrite) */
        cp_wait_all();
        fence_proxy_async();
        __syncthreads();
        const float gL = gcs[Lc - 1], eL = expf(gL);
        if (ci + 1 < cl) { /* chunk c+1's k, T, gc, beta: the whole of this chunk to land */
            stage_sw<DNC_DK>(sp + DN7_K + (par ^ 1) * 4 * DN7_SLAB, Kr + rn * nstride, nstride, Ln, dk, Kn, tid);
            stage_sw<DNC_C>(sp + DN7_TT + (par ^ 1) * 2 * DN7_SLAB, Tg + ((int64_t)(ci + 1) * Hv + h) * DNC_C * DNC_C,
                            DNC_C, DNC_C, DNC_C, Tg, tid);
            stage_gc_beta(gcb, btb, (par ^ 1) * DNC_C, gcg, btg, rn, Ln, Hv, h, tid);
            cp_async_commit();
        }
        if (tid < DNC_C) ek[tid] = tid < Lc ? expf(gL - gcs[tid]) : 0.0f; /* read after the next barrier */
        const float eg0 = i0 < Lc ? expf(gcs[i0]) : 0.0f, eg1 = i0 + 8 < Lc ? expf(gcs[i0 + 8]) : 0.0f;
        /* the first chunk of a sequence starts from S = 0 (no K S, Q S); the last one's update is never read */
        const bool first = ci == cf, last = ci + 1 == cl;
        if (wg == 0) { /* X = K S; Y = beta (V - exp(gc) X) into Vt (transposed) */
            if (!first) dn7_mm_sync<DNC_DK / 8, false>(acc, sb + kofs, sb + DN7_ST);
#pragma unroll
            for (int j = 0; j < 8; j++)
#pragma unroll
                for (int hr = 0; hr < 2; hr++) {
                    const int i = i0 + 8 * hr, c = 8 * j + 2 * t;
                    const float egi = hr ? eg1 : eg0, bi = bts[i];
                    const float2 v = *(const float2 *)(Vs + i * LDV + c);
                    const float x0 = first ? 0.0f : acc[4 * j + 2 * hr], x1 = first ? 0.0f : acc[4 * j + 2 * hr + 1];
                    *(float *)(sp + DN7_VT + sw128(c, i)) = tf32f(bi * (v.x - egi * x0));
                    *(float *)(sp + DN7_VT + sw128(c + 1, i)) = tf32f(bi * (v.y - egi * x1));
                }
        } else if (wg == 1) { /* O = exp(gc) Q S */
            if (!first) {
                dn7_mm_sync<DNC_DK / 8, false>(acc, sb + DN7_Q, sb + DN7_ST);
#pragma unroll
                for (int j = 0; j < 8; j++)
                    acc[4 * j] *= eg0, acc[4 * j + 1] *= eg0, acc[4 * j + 2] *= eg1, acc[4 * j + 3] *= eg1;
            } else {
#pragma unroll
                for (int i = 0; i < 32; i++) acc[i] = 0.0f;
            }
        } else { /* Q K^T; P = q_i.k_j exp(gc_i - gc_j) for j <= i < Lc, into P */
            dn7_mm_sync<DNC_DK / 8, false>(acc, sb + DN7_Q, sb + kofs);
#pragma unroll
            for (int j = 0; j < 8; j++)
#pragma unroll
                for (int hr = 0; hr < 2; hr++) {
                    const int i = i0 + 8 * hr, c = 8 * j + 2 * t;
                    const bool in = i < Lc;
                    float2 p;
                    p.x = in && c <= i ? tf32f(acc[4 * j + 2 * hr] * expf(gcs[i] - gcs[c])) : 0.0f;
                    p.y = in && c + 1 <= i ? tf32f(acc[4 * j + 2 * hr + 1] * expf(gcs[i] - gcs[c + 1])) : 0.0f;
                    *(float2 *)(sp + DN7_P + sw128(i, c)) = p;
                }
        }
        fence_proxy_async();
        __syncthreads(); /* Y and P complete; q, the V slice and St are dead for this chunk */
        if (ci + 1 < cl) { /* chunk c+1's q and V slice, in flight during the rest of this chunk */
            stage_sw<DNC_DK>(sp + DN7_Q, Qr + rn * nstride, nstride, Ln, dk, Qn, tid);
            stage_tile(Vs, LDV, Vr + rn * qkv_stride, qkv_stride, Ln, ncv, DNC_DVS, vec, qkv, tid, DN7_T);
            cp_async_commit();
        }
        /* the update's A fragments: (k exp(gL - gc))^T, state rows 64 (wg >> 1) + i0 (+8), chunk rows
         * 8 ks + t (+4), rounded as v6's load_a; WG0 loads them while its T Y runs */
        uint32_t af[DNC_C / 8][4];
        const bool upd = wg != 1 && !last;
        auto load_af = [&]() {
            const unsigned char *kt = sp + kofs;
            const int m = 64 * (wg >> 1) + i0;
#pragma unroll
            for (int ks = 0; ks < DNC_C / 8; ks++) {
                const int j = 8 * ks + t;
                const float e0 = ek[j], e1 = ek[j + 4];
                af[ks][0] = to_tf32(*(const float *)(kt + sw128(j, m)) * e0);
                af[ks][1] = to_tf32(*(const float *)(kt + sw128(j, m + 8)) * e0);
                af[ks][2] = to_tf32(*(const float *)(kt + sw128(j + 4, m)) * e1);
                af[ks][3] = to_tf32(*(const float *)(kt + sw128(j + 4, m + 8)) * e1);
            }
        };
        if (wg == 0) { /* Vn = T Y, then over Y in Vt (only this warpgroup read Y) */
            reg_fence<32>(acc);
            wg_fence();
            dn7_mm<DNC_C / 8, false>(acc, sb + tofs, sb + DN7_VT);
            wg_commit();
            if (upd) load_af();
            wg_wait<0>();
            reg_fence<32>(acc);
#pragma unroll
            for (int j = 0; j < 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    *(float *)(sp + DN7_VT + sw128(8 * j + 2 * t + (e & 1), i0 + 8 * (e >> 1))) = tf32f(acc[4 * j + e]);
        } else if (upd) {
            load_af();
        }
        fence_proxy_async();
        __syncthreads(); /* Vt holds Vn */
        if (wg == 1) { /* O += P Vn, out */
            dn7_mm_sync<DNC_C / 8, true>(acc, sb + DN7_P, sb + DN7_VT);
#pragma unroll
            for (int j = 0; j < 8; j++)
#pragma unroll
                for (int hr = 0; hr < 2; hr++) {
                    const int i = i0 + 8 * hr, c = 8 * j + 2 * t;
                    if (i < Lc && c < ncv) {
                        float *o = out + (r0 + i) * ostride + (int64_t)h * dv + c0 + c;
                        o[0] = acc[4 * j + 2 * hr], o[1] = acc[4 * j + 2 * hr + 1];
                    }
                }
        } else if (upd) { /* S = exp(gL) S + (k exp(gL - gc))^T Vn, then St */
#pragma unroll
            for (int i = 0; i < 32; i++) S[i] *= eL;
            reg_fence<32>(S);
            wg_fence();
            const uint64_t dv0 = wg_desc_k128(sb + DN7_VT);
#pragma unroll
            for (int ks = 0; ks < DNC_C / 8; ks++) dn7_rs(S, af[ks], dv0 + dn7_kstep(ks));
            wg_commit();
            wg_wait<0>();
            reg_fence<32>(S);
#pragma unroll
            for (int ks = 0; ks < DNC_C / 8; ks++)
#pragma unroll
                for (int e = 0; e < 4; e++) asm volatile("" : "+r"(af[ks][e])::"memory");
            const int m = 64 * (wg >> 1) + i0;
#pragma unroll
            for (int j = 0; j < 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    *(float *)(sp + DN7_ST + sw128(8 * j + 2 * t + (e & 1), m + 8 * (e >> 1))) = tf32f(S[4 * j + e]);
        }
    }
#endif
}

/* Called by the deltanet entry (cu_deltanet, at the end of this file) first. *taken = 0 (and VSR_OK) for shapes this
 * path does not take; the caller then runs the recurrent scan. */
extern "C" vsr_status cuda_deltanet_chunked(cuda_ctx *c, const float *qkv, int64_t qkv_stride, const float *b,
                                            const float *a, const float *A_log, const float *dt_bias,
                                            const vsr_segs *seg, int Hk, int Hv, int dk, int dv, float *out,
                                            int *taken, vsr_err *err) {
    *taken = 0;
    if (dk <= 0 || dk > DNC_DK || dk % 4 || dv <= 0 || dv > 2 * DNC_DVS || dv % 4 || Hk <= 0 || Hv % Hk || seg->n <= 0 ||
        seg->n > DNC_MAX_SEGS)
        return VSR_OK;
    dnc_tab tb;
    tb.n = seg->n;
    int64_t maxlen = 0, chunks = 0;
    for (int i = 0; i < seg->n; i++) {
        tb.start[i] = seg->start[i], tb.len[i] = seg->len[i];
        tb.cfirst[i] = (int)chunks;
        chunks += (seg->len[i] + DNC_C - 1) / DNC_C;
        if (seg->len[i] > maxlen) maxlen = seg->len[i];
    }
    tb.cfirst[seg->n] = (int)chunks;
    if (maxlen < DNC_MIN_LEN || chunks > 0x7fffffff / 2) return VSR_OK;
    for (int i = 0; i < seg->n; i++)
        if (seg->len[i] <= 0) return VSR_OK; /* empty sequences: leave them to the scan */
    const char *env_v5 = getenv("VSR_CUDA_DN_V5"), *env_v7 = getenv("VSR_CUDA_DN_V7"),
               *env_stage = getenv("VSR_CUDA_DN_STAGE"), *env_grp = getenv("VSR_CUDA_DN6_GROUP");
    /* 5: v5 (VSR_CUDA_DN_V5=1, the previous default kept for A/B; it wins over VSR_CUDA_DN_V7); 6: v6
     * (default); 7: v7 (VSR_CUDA_DN_V7=1: v6's intra kernel, the wgmma state kernel) where the build has
     * its sm_90a code, i.e. compute capability 9.0 (elsewhere v6 runs). v7 takes every shape this path
     * takes: dk is zero-padded to 128 in shared memory by 16-byte pieces (dk % 4 == 0 above) and every
     * product runs all its k-steps, so no shape is left to v6. */
    const bool v7 = env_v7 && env_v7[0] == '1' && c->cc_major == 9 && c->cc_minor == 0;
    const int ver = env_v5 && env_v5[0] == '1' ? 5 : v7 ? 7 : 6;
    /* measurement only (bench): "intra" stops after the intra-chunk kernel; out is not written */
    const bool intra_only = env_stage && !strcmp(env_stage, "intra");
    /* shared memory: the state kernels' ~211-218 KB need Hopper (A100: 163 KB) */
    const size_t need = ver == 7 ? STATE7_SMEM : STATE5_SMEM;
    int optin = 0;
    if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, c->device) != cudaSuccess ||
        (size_t)optin < need) {
        (void)cudaGetLastError();
        return VSR_OK;
    }
    const int64_t rows = seg->start[seg->n - 1] + seg->len[seg->n - 1];
    /* every region a multiple of 64 floats, so each starts 16-byte aligned for cp.async */
    const size_t ng = ((size_t)rows * Hv + 63) / 64 * 64, nP = (size_t)chunks * Hv * DNC_C * DNC_C;
    const int nsl = (dv + DNC_DVS - 1) / DNC_DVS;
    vsr_status st;
    void *scr;
    const int vec = qkv_stride % 4 == 0 && ((uintptr_t)qkv & 15) == 0;
    /* v6, v7 also: q^, k^ [rows][Hk][dk] (normalised, TF32) */
    const size_t nn = ver != 5 ? ((size_t)rows * Hk * dk + 63) / 64 * 64 : 0;
    /* T [ch][64][64] first (16-byte aligned rows), then gc, beta [rows][Hv], then Qn, Kn */
    if ((st = cuda_scratch(c, sizeof(float) * (nP + 2 * ng + 2 * nn), &scr, err))) return st;
    float *Tg = (float *)scr, *gcg = Tg + nP, *btg = gcg + ng, *Qn = btg + ng, *Kn = Qn + nn;
    dim3 gi((unsigned)chunks, (unsigned)Hv);
    if (ver != 5) {
        /* value heads per intra block: all Hv/Hk of a key head once the per-head grid would
         * take more than two waves of 3 blocks per SM (8x512: 3072 -> 1024 blocks), else one */
        const int G = Hv / Hk;
        const bool grp = env_grp && env_grp[0] ? env_grp[0] == '1' : chunks * Hv > 2LL * 3 * c->sm_count;
        const int hpb = grp ? G : 1;
        dim3 g6((unsigned)chunks, (unsigned)Hk, (unsigned)(G / hpb));
        if ((st = cuda_check(c, cudaFuncSetAttribute(k_dn6_intra, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                     (int)INTRA3_SMEM),
                             "deltanet (chunked): shared memory of the intra-chunk kernel", err)))
            return st;
        k_dn6_intra<<<g6, 256, INTRA3_SMEM, c->stream>>>(qkv, qkv_stride, vec, b, a, A_log, dt_bias, tb, Hk, Hv,
                                                         dk, hpb, Tg, gcg, btg, Qn, Kn);
    } else {
        if ((st = cuda_check(c, cudaFuncSetAttribute(k_dn5_intra, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                     (int)INTRA3_SMEM),
                             "deltanet (chunked): shared memory of the intra-chunk kernel", err)))
            return st;
        k_dn5_intra<<<gi, 256, INTRA3_SMEM, c->stream>>>(qkv, qkv_stride, vec, b, a, A_log, dt_bias, tb, Hk, Hv,
                                                         dk, Tg, gcg, btg);
    }
    if ((st = cuda_check_launch(c, "deltanet (chunked) intra", err))) return st;
    if (!intra_only && ver == 6) {
        if ((st = cuda_check(c, cudaFuncSetAttribute(k_dn6_state, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                     (int)STATE5_SMEM),
                             "deltanet (chunked): shared memory of the state kernel", err)))
            return st;
        k_dn6_state<<<(unsigned)(seg->n * Hv * nsl), DN3_T, STATE5_SMEM, c->stream>>>(
            Qn, Kn, qkv, qkv_stride, vec, Tg, gcg, btg, tb, Hk, Hv, dk, dv, nsl, out);
        if ((st = cuda_check_launch(c, "deltanet (chunked) state", err))) return st;
    } else if (!intra_only && ver == 7) {
        if ((st = cuda_check(c, cudaFuncSetAttribute(k_dn7_state, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                     (int)STATE7_SMEM),
                             "deltanet (chunked): shared memory of the state kernel", err)))
            return st;
        k_dn7_state<<<(unsigned)(seg->n * Hv * nsl), DN7_T, STATE7_SMEM, c->stream>>>(
            Qn, Kn, qkv, qkv_stride, vec, Tg, gcg, btg, tb, Hk, Hv, dk, dv, nsl, out);
        if ((st = cuda_check_launch(c, "deltanet (chunked) state", err))) return st;
    } else if (!intra_only && ver == 5) {
        if ((st = cuda_check(c, cudaFuncSetAttribute(k_dn5_state, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                     (int)STATE5_SMEM),
                             "deltanet (chunked): shared memory of the state kernel", err)))
            return st;
        k_dn5_state<<<(unsigned)(seg->n * Hv * nsl), DN3_T, STATE5_SMEM, c->stream>>>(
            qkv, qkv_stride, vec, Tg, gcg, btg, tb, Hk, Hv, dk, dv, nsl, out);
        if ((st = cuda_check_launch(c, "deltanet (chunked) state", err))) return st;
    }
    *taken = 1;
    return VSR_OK;
}

/* ---- gated delta rule ----
 * Pass 1 (k_dn_prep): per (row, key head) the l2-normalised q (times 1/sqrt(dk)) and k into
 * scratch [rows, Hk, dk] each; per (row, value head) beta and the decay exp(g).
 * Pass 2 (k_dn_scan): one warp per (sequence, value head, 8 value columns), the state
 * S[dk, dv] in registers, no shared memory and no barrier. Sequential over tokens, parallel
 * over sequences x heads x column slices (8 x 48 x 16 = 6144 warps at the 27B shape, 8x512).
 * Not the chunked (WY/UT) form of flash-linear-attention: see docs/cuda.md. */
__global__ void k_dn_prep(const float *__restrict__ qkv, int64_t qkv_stride, const float *__restrict__ b,
                          const float *__restrict__ a, const float *__restrict__ A_log,
                          const float *__restrict__ dt_bias, int64_t rows, int Hk, int Hv, int dk,
                          float *__restrict__ qn, float *__restrict__ kn, float *__restrict__ beta,
                          float *__restrict__ decay) {
    /* one warp per (row, key head, q-or-k) */
    int64_t u = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x & 31;
    if (u < rows * Hk * 2) {
        int which = (int)(u % 2);
        int64_t rh = u / 2, r = rh / Hk;
        int hk = (int)(rh % Hk);
        const float *src = qkv + r * qkv_stride + (int64_t)which * Hk * dk + (int64_t)hk * dk;
        float ss = 0;
        for (int i = lane; i < dk; i += 32) ss += src[i] * src[i];
        ss = warp_sum(ss);
        float inv = 1.0f / sqrtf(ss + 1e-6f);
        float sc = which == 0 ? 1.0f / sqrtf((float)dk) : 1.0f;
        float *dst = (which == 0 ? qn : kn) + rh * dk;
        for (int i = lane; i < dk; i += 32) dst[i] = (src[i] * inv) * sc;
    }
    /* beta and decay: the first rows*Hv threads of the grid */
    int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (g < rows * Hv) {
        int h = (int)(g % Hv);
        beta[g] = sigmoid_d(b[g]);
        decay[g] = expf(-expf(A_log[h]) * softplus_d(a[g] + dt_bias[h]));
    }
}

/* Lane l of a warp: column c = l / 4 of the warp's 8 columns, row group g = l % 4; it keeps
 * rows g, g+4, ... (RPT of them) of that column of S in registers. S^T k and S^T q are a
 * sum over the lane's rows, then two shuffles within the group of 4: the per-token chain
 * is RPT FMAs deep instead of dk (the first version, one column per lane, ran ~6 us per
 * token at the 27B shape, latency-bound on its 128-deep chains). */
template <int RPT>
__global__ void __launch_bounds__(128) k_dn_scan(const float *__restrict__ qn, const float *__restrict__ kn,
                                                 const float *__restrict__ beta, const float *__restrict__ decay,
                                                 const float *__restrict__ qkv, int64_t qkv_stride, const dsegs s,
                                                 int Hk, int Hv, int dk, int dv, float *__restrict__ out) {
    const int lane = threadIdx.x & 31, g = lane & 3;
    const int slices = (dv + 7) / 8;
    int64_t wid = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (wid >= (int64_t)s.n * Hv * slices) return;
    const int sl = (int)(wid % slices), h = (int)((wid / slices) % Hv), sg = (int)(wid / slices / Hv);
    const int hk = h / (Hv / Hk), col = sl * 8 + (lane >> 2);
    const bool live = col < dv;
    float S[RPT];
#pragma unroll
    for (int j = 0; j < RPT; j++) S[j] = 0.0f;
    const int64_t Kd2 = 2LL * Hk * dk;
    for (int64_t r = s.start[sg]; r < s.start[sg] + s.len[sg]; r++) {
        const float *kr = kn + (r * Hk + hk) * dk, *qr = qn + (r * Hk + hk) * dk;
        const float bt = beta[r * Hv + h], dc = decay[r * Hv + h];
        const float v = live ? qkv[r * qkv_stride + Kd2 + (int64_t)h * dv + col] : 0.0f;
        float kk[RPT], qq[RPT];
#pragma unroll
        for (int j = 0; j < RPT; j++) {
            int i = g + 4 * j;
            kk[j] = i < dk ? kr[i] : 0.0f;
            qq[j] = i < dk ? qr[i] : 0.0f;
        }
        float kv0 = 0.0f, kv1 = 0.0f;
#pragma unroll
        for (int j = 0; j < RPT; j += 2) {
            S[j] *= dc;
            kv0 += S[j] * kk[j];
            if (j + 1 < RPT) {
                S[j + 1] *= dc;
                kv1 += S[j + 1] * kk[j + 1];
            }
        }
        float kv = kv0 + kv1;
        kv += __shfl_xor_sync(0xffffffffu, kv, 1);
        kv += __shfl_xor_sync(0xffffffffu, kv, 2);
        const float delta = (v - kv) * bt;
        float o0 = 0.0f, o1 = 0.0f;
#pragma unroll
        for (int j = 0; j < RPT; j += 2) {
            S[j] += kk[j] * delta;
            o0 += S[j] * qq[j];
            if (j + 1 < RPT) {
                S[j + 1] += kk[j + 1] * delta;
                o1 += S[j + 1] * qq[j + 1];
            }
        }
        float o = o0 + o1;
        o += __shfl_xor_sync(0xffffffffu, o, 1);
        o += __shfl_xor_sync(0xffffffffu, o, 2);
        if (live && g == 0) out[r * ((int64_t)Hv * dv) + (int64_t)h * dv + col] = o;
    }
}

/* Chunked (WY/UT) gated delta rule on tensor cores (deltanet.cu); *taken = 0 for shapes it leaves to k_dn_scan */
extern "C" vsr_status cuda_deltanet_chunked(cuda_ctx *c, const float *qkv, int64_t qkv_stride, const float *b,
                                            const float *a, const float *A_log, const float *dt_bias,
                                            const vsr_segs *seg, int Hk, int Hv, int dk, int dv, float *out,
                                            int *taken, vsr_err *err);

/* b and a at row stride ba_stride -> contiguous [rows, Hv] each (the deltanet kernels read them so) */
template <typename TI>
__global__ void k_ba_compact(const TI *__restrict__ b, const TI *__restrict__ a, int64_t s, int64_t rows, int Hv,
                             float *__restrict__ bo, float *__restrict__ ao) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < rows * Hv; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / Hv, h = i % Hv;
        bo[i] = ldf(b + r * s + h), ao[i] = ldf(a + r * s + h);
    }
}

vsr_status cu_deltanet(void *ctx, const float *qkv, int64_t qkv_stride, const float *b, const float *a,
                              int64_t ba_stride, const float *A_log, const float *dt_bias, const vsr_segs *seg, int Hk,
                              int Hv, int dk, int dv, float *state, float *out, vsr_err *err) {
    (void)state; /* the state lives in registers */
    cuda_ctx *c = (cuda_ctx *)ctx;
    ENTER(c);
    if (dk > 128 || dk <= 0 || dv <= 0 || Hk <= 0 || Hv % Hk)
        return vsr_err_set(err, VSR_E_UNSUPPORTED,
                           "cuda:%d: deltanet: key head dim up to 128 and value heads a multiple of key heads "
                           "(dk %d, dv %d, Hk %d, Hv %d)",
                           c->device, dk, dv, Hk, Hv);
    dsegs s;
    int64_t rows;
    vsr_status st = segs_to_dev(c, seg, "deltanet", &s, &rows, NULL, err);
    if (st || rows <= 0) return st;
    PROF(c, "deltanet");
    twin_clobber(c, out, sizeof(float) * (size_t)(rows * Hv * dv));
    if (ba_stride < Hv)
        return vsr_err_set(err, VSR_E_INVALID, "deltanet: b/a row stride %lld is less than the %d value heads",
                           (long long)ba_stride, Hv);
    /* b, a may be columns of a stacked projection's product kept in BF16 (keep_product_bf16) */
    const __nv_bfloat16 *bb = kp_find(c, b, rows, ba_stride, Hv), *ab = kp_find(c, a, rows, ba_stride, Hv);
    if ((st = kp_guard(c, qkv, sizeof(float) * (size_t)((rows - 1) * qkv_stride + (int64_t)(2 * Hk * dk + Hv * dv)),
                       "deltanet", err)) ||
        (!bb && (st = kp_guard(c, b, sizeof(float) * (size_t)((rows - 1) * ba_stride + Hv), "deltanet", err))) ||
        (!ab && (st = kp_guard(c, a, sizeof(float) * (size_t)((rows - 1) * ba_stride + Hv), "deltanet", err))))
        return st;
    if (ba_stride != Hv || bb || ab) { /* strided or BF16: compact them (rows x 2Hv floats) into scratch2 */
        void *ba;
        if ((st = cuda_scratch2(c, sizeof(float) * 2 * (size_t)(rows * Hv), &ba, err))) return st;
        float *bc = (float *)ba, *ac = bc + rows * Hv;
        const unsigned nb = blocks_for(rows * Hv, 256) > 1024 ? 1024 : blocks_for(rows * Hv, 256);
        if (bb && ab) k_ba_compact<<<nb, 256, 0, c->stream>>>(bb, ab, ba_stride, rows, Hv, bc, ac);
        else if (!bb && !ab) k_ba_compact<<<nb, 256, 0, c->stream>>>(b, a, ba_stride, rows, Hv, bc, ac);
        else
            return vsr_err_set(err, VSR_E_INTERNAL, "cuda:%d: deltanet: b and a must both or neither be a product "
                               "kept in BF16", c->device);
        if ((st = cuda_check_launch(c, "deltanet: b/a compaction", err))) return st;
        b = bc, a = ac;
    }
    int taken = 0;
    st = cuda_deltanet_chunked(c, qkv, qkv_stride, b, a, A_log, dt_bias, seg, Hk, Hv, dk, dv, out, &taken, err);
    if (st || taken) return st;
    size_t nqk = (size_t)rows * Hk * dk, nbh = (size_t)rows * Hv;
    void *scr;
    if ((st = cuda_scratch(c, sizeof(float) * (2 * nqk + 2 * nbh), &scr, err))) return st;
    float *qn = (float *)scr, *kn = qn + nqk, *beta = kn + nqk, *decay = beta + nbh;
    int64_t warps = rows * Hk * 2, threads = (int64_t)nbh;
    int64_t blocks = (warps + 7) / 8 > (threads + 255) / 256 ? (warps + 7) / 8 : (threads + 255) / 256;
    k_dn_prep<<<blocks_for(blocks * 256, 256), 256, 0, c->stream>>>(qkv, qkv_stride, b, a, A_log, dt_bias, rows, Hk, Hv,
                                                                   dk, qn, kn, beta, decay);
    if ((st = cuda_check_launch(c, "deltanet prep", err))) return st;
    int64_t nw = (int64_t)s.n * Hv * ((dv + 7) / 8);
    unsigned g = blocks_for(nw * 32, 128);
#define SCAN(R) k_dn_scan<R><<<g, 128, 0, c->stream>>>(qn, kn, beta, decay, qkv, qkv_stride, s, Hk, Hv, dk, dv, out)
    if (dk <= 16) SCAN(4);
    else if (dk <= 32) SCAN(8);
    else if (dk <= 64) SCAN(16);
    else SCAN(32);
#undef SCAN
    return cuda_check_launch(c, "deltanet scan", err);
}
