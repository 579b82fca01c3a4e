/* src/backend/cuda/attention.cu: scaled dot-product attention on BF16 tensor cores
 * (flash-attention-2 style), behind the attention entry of the backend table (cu_attention, at the end of this
 * file; the table is backend.cu's).
 *
 * Contract (backend.h): q FP32 [rows, H*d] at row stride qs, k, v FP32 [rows, Hkv*d], out FP32
 * [rows, H*d]; sequences packed back to back (vsr_segs); query head h reads kv head h / G,
 * G = H / Hkv; causal: key j <= query i, else every key of the sequence; softmax in FP32.
 *
 * How:
 *  1. k and v are rounded to BF16 once per call into the op scratch (one pass, 12 bytes per
 *     element moved), so tiles stream with cp.async and every block reads half the bytes.
 *  2. One block (4 warps) per (sequence, kv head, 64 "rows"), where the rows of a (sequence,
 *     kv head) are its L queries x G query heads in query-major order: row r is query r / G of
 *     query head hk*G + r % G. So the G heads sharing a KV head share every K/V tile (GQA), and
 *     a block's rows cover about 64/G consecutive queries (the causal limit is per row).
 *     Each warp owns 16 rows; Q (rounded to BF16 while loading) sits in shared memory.
 *  3. K/V tiles of BN keys, double-buffered through shared memory with cp.async (keys past the
 *     limit are zero-filled, never read). S = Q K^T and O += P V on mma.sync m16n8k16
 *     (BF16 x BF16 -> FP32); fragments by ldmatrix (V transposed); rows padded by 16 bytes
 *     so the 8 row addresses of an ldmatrix hit distinct banks.
 *  4. Online softmax in FP32 on the S accumulators (scale folded into exp2), P rounded to BF16
 *     as the A operand of P V; row sums from the FP32 p. Output O / l written as FP32.
 *  Causal blocks are issued heaviest first (highest queries first) to shorten the tail.
 *
 * Numerics: q, k, v and p are rounded to BF16 (relative 2^-9 each); products accumulate in
 * FP32. Normalised error against the FP32 CPU op: see tests/test_cuda_ops.c (limit 1e-2,
 * the same budget as the BF16 linears).
 *
 * Takes head dims 32, 64, 128 and 256 (the fixtures' 32/64/256 and the common 128) with
 * q 16-byte aligned at a row stride that is a multiple of 4 floats and out 8-byte aligned;
 * anything else stays on the FP32 kernel k_attention at the end of this file (cuda_attention_tc says it did not
 * take it).
 * Floor: max(q, k, v read + out written / 4.19 TB/s, 4 L^2 d H (causal: half) / 774 TFLOP/s BF16) (bench_cuda's
 * floor_us); today's figures in the 27B forward: bench/RESULTS.md. Test: tests/test_cuda_ops.c (against the CPU
 * oracle, every head dim, GQA, causal and not; k_attention's shapes too). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/ptx.cuh"
#include "backend/cuda/ops_internal.cuh" /* the backend's shared helpers; this file's op entry (cu_*) */

#define TC_WARPS 4
#define TC_BM (TC_WARPS * 16) /* rows per block */
#define TC_MAX_SEGS 128       /* as CUDA_MAX_SEGS (ops_internal.cuh), which cu_attention checks before calling */

typedef struct tc_segs {
    int n;
    int64_t start[TC_MAX_SEGS], len[TC_MAX_SEGS];
} tc_segs;

/* ---- PTX wrappers ---- */

__device__ __forceinline__ void ldsm_x4_t(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

/* D (16x8 f32) += A (16x16 bf16, row) . B (16x8 bf16, col) */
__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi); /* .x (low half) = lo: the lower column */
    return *(uint32_t *)&v;
}

/* ---- k, v -> BF16 (one pass over both) ---- */

__global__ void k_kv_to_bf16(const float *__restrict__ k, const float *__restrict__ v, int64_t n,
                             __nv_bfloat16 *__restrict__ kb, __nv_bfloat16 *__restrict__ vb) {
    int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 4;
    const float *src = blockIdx.y ? v : k;
    __nv_bfloat16 *dst = blockIdx.y ? vb : kb;
    if (i + 3 < n && ((uintptr_t)(src + i) & 15) == 0) {
        float4 x = *(const float4 *)(src + i);
        uint2 o = make_uint2(pack_bf16(x.x, x.y), pack_bf16(x.z, x.w));
        *(uint2 *)(dst + i) = o; /* n and i are multiples of 4 and dst is 256-byte aligned */
    } else {
        for (int64_t j = i; j < i + 4 && j < n; j++) dst[j] = __float2bfloat16_rn(src[j]);
    }
}

/* 2^x without exp2f's denormal-range fix-up (ex2.approx.ftz: ~2 ulp, results under 2^-126
 * flushed to 0, -inf -> 0): the softmax's p and alpha */
__device__ __forceinline__ float ex2_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* The online softmax of one S tile in place. Element e of 8-key block j: row g + 8 (e >> 1) of the
 * warp's 16, key k0 + 8 j + 2 t4 + (e & 1); keys at or past the row's limit masked, the rest scaled
 * into log2 units. sc becomes p (FP32); m and l move on; alpha is the factor for O. FAST: 2^x by
 * ex2_ftz (the wgmma kernels), else exp2f (v1). */
template <int NJ, bool FAST>
__device__ __forceinline__ void tile_softmax(float (&sc)[4 * NJ], int k0, int t4, const int (&lim)[2],
                                             float scale_log2, float (&m)[2], float (&l)[2], float (&alpha)[2]) {
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int j = 0; j < NJ; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int key = k0 + 8 * j + 2 * t4 + (e & 1);
            float x = key < lim[e >> 1] ? sc[4 * j + e] * scale_log2 : -INFINITY;
            sc[4 * j + e] = x;
            mx[e >> 1] = fmaxf(mx[e >> 1], x);
        }
    float mu[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
        mu[h] = mx[h] == -INFINITY ? 0.f : mx[h]; /* a row with no key yet: p = 0 */
        alpha[h] = FAST ? ex2_ftz(m[h] - mu[h]) : exp2f(m[h] - mu[h]); /* m = -inf: 0 */
        m[h] = mx[h];
        l[h] *= alpha[h];
    }
#pragma unroll
    for (int j = 0; j < NJ; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float p = FAST ? ex2_ftz(sc[4 * j + e] - mu[e >> 1]) : exp2f(sc[4 * j + e] - mu[e >> 1]);
            sc[4 * j + e] = p;
            l[e >> 1] += p; /* this thread's partial row sum; the quad adds them at the end */
        }
}

/* ---- the kernel ---- */

template <int D, int BN> struct tc_cfg {
    static constexpr int LD = D + 8; /* padded row, in bf16: 16 bytes more than the row */
    static constexpr size_t smem = sizeof(__nv_bfloat16) * (size_t)LD * (TC_BM + 4 * BN); /* Q, 2x K, 2x V */
};

template <int D, int BN>
__global__ void __launch_bounds__(TC_WARPS * 32, 2)
    k_attn_tc(const float *__restrict__ q, int64_t qs, const __nv_bfloat16 *__restrict__ kb,
              const __nv_bfloat16 *__restrict__ vb, const tc_segs s, const int64_t *__restrict__ keys, int H, int Hkv,
              float scale_log2, int causal, int qvec, float *__restrict__ out) {
    constexpr int LD = tc_cfg<D, BN>::LD;
    constexpr int NB = BN / 8; /* n-blocks of S per warp */
    constexpr int DB = D / 8;  /* n-blocks of O per warp */
    extern __shared__ __align__(16) unsigned char smraw[];
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)smraw;
    __nv_bfloat16 *Ks = Qs + TC_BM * LD; /* [2][BN][LD] */
    __nv_bfloat16 *Vs = Ks + 2 * BN * LD;

    const int sg = blockIdx.z, hk = blockIdx.y, G = H / Hkv;
    const int64_t L = s.len[sg], s0 = s.start[sg], nrows = L * G;
    const int64_t Lk = keys ? keys[sg] : L; /* keys read (a bucketed forward's real tokens) */
    const int64_t rb = causal ? (int64_t)gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const int64_t r0 = rb * TC_BM;
    if (r0 >= nrows) return;
    const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31;
    const int64_t kvs = (int64_t)Hkv * D; /* k/v row stride */
    const int64_t os = (int64_t)H * D;    /* out row stride */

    /* keys this block needs: every key of the sequence, or up to its last query */
    const int64_t rlast = r0 + TC_BM - 1 < nrows - 1 ? r0 + TC_BM - 1 : nrows - 1;
    const int64_t nk = causal ? rlast / G + 1 : Lk;
    const int ntiles = (int)((nk + BN - 1) / BN);

    const __nv_bfloat16 *kbase = kb + s0 * kvs + (int64_t)hk * D;
    const __nv_bfloat16 *vbase = vb + s0 * kvs + (int64_t)hk * D;
    auto load_tile = [&](int t, int buf) {
        constexpr int CH = D / 8; /* 16-byte chunks per row */
        const int64_t k0 = (int64_t)t * BN;
        for (int i = tid; i < BN * CH; i += TC_WARPS * 32) {
            int j = i / CH, c = i % CH;
            bool in = k0 + j < nk;
            int64_t off = in ? (k0 + j) * kvs + c * 8 : 0;
            uint32_t so = (uint32_t)(((buf * BN + j) * LD + c * 8) * sizeof(__nv_bfloat16));
            cp_async16(smem_u32(Ks) + so, kbase + off, in ? 16 : 0);
            cp_async16(smem_u32(Vs) + so, vbase + off, in ? 16 : 0);
        }
    };
    load_tile(0, 0);
    cp_async_commit();

    /* Q rows -> bf16 in shared memory (rows past the sequence: zeros) */
    {
        constexpr int C4 = D / 4;
        for (int i = tid; i < TC_BM * C4; i += TC_WARPS * 32) {
            int row = i / C4, c = (i % C4) * 4;
            int64_t r = r0 + row;
            float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
            if (r < nrows) {
                const float *src = q + (s0 + r / G) * qs + (int64_t)(hk * G + (int)(r % G)) * D + c;
                if (qvec) x = *(const float4 *)src;
                else x = make_float4(src[0], src[1], src[2], src[3]);
            }
            *(uint2 *)(Qs + row * LD + c) = make_uint2(pack_bf16(x.x, x.y), pack_bf16(x.z, x.w));
        }
    }

    /* this thread's two rows (g and g + 8 of the warp's 16): their query index and key limit */
    const int g = lane >> 2, t4 = lane & 3;
    int lim[2]; /* int: cuda_attention_tc takes sequences below 2^30 tokens */
#pragma unroll
    for (int e = 0; e < 2; e++) {
        int64_t r = r0 + w * 16 + g + 8 * e;
        int64_t qi = r < nrows ? r / G : L - 1; /* rows past the end: any finite softmax, not stored */
        lim[e] = (int)(causal ? qi + 1 : Lk);
    }
    /* the warp's largest limit: tiles at or past it are fully masked for the warp */
    int64_t wr = r0 + w * 16 + 15 < nrows - 1 ? r0 + w * 16 + 15 : nrows - 1;
    const int64_t wlim = causal ? wr / G + 1 : Lk;

    float o[DB][4];
#pragma unroll
    for (int i = 0; i < DB; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}; /* m in log2 units (scaled) */

    const uint32_t q_addr = smem_u32(Qs) + (uint32_t)(((w * 16 + (lane & 15)) * LD + (lane >> 4) * 8) * 2);
    /* K (non-trans): key (lane & 7) + 8 * (lane >> 4), dim 8 * ((lane >> 3) & 1) */
    const uint32_t k_off = (uint32_t)((((lane & 7) + ((lane >> 4) << 3)) * LD + ((lane >> 3) & 1) * 8) * 2);
    /* V (trans): key (lane & 7) + 8 * ((lane >> 3) & 1), dim 8 * (lane >> 4) */
    const uint32_t v_off = (uint32_t)((((lane & 7) + (((lane >> 3) & 1) << 3)) * LD + (lane >> 4) * 8) * 2);

    for (int t = 0; t < ntiles; t++) {
        const int buf = t & 1;
        if (t + 1 < ntiles) load_tile(t + 1, buf ^ 1);
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        const int k0 = t * BN;
        if (k0 < wlim) {
            /* S = Q K^T for the warp's 16 rows x BN keys */
            float sc[NB][4];
#pragma unroll
            for (int i = 0; i < NB; i++) sc[i][0] = sc[i][1] = sc[i][2] = sc[i][3] = 0.f;
            const uint32_t kt = smem_u32(Ks) + (uint32_t)(buf * BN * LD * 2) + k_off;
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                uint32_t a0, a1, a2, a3;
                ldsm_x4(q_addr + kk * 32, a0, a1, a2, a3);
#pragma unroll
                for (int nb = 0; nb < NB / 2; nb++) {
                    uint32_t b0, b1, b2, b3;
                    ldsm_x4(kt + (uint32_t)((nb * 16 * LD + kk * 16) * 2), b0, b1, b2, b3);
                    mma_bf16(sc[2 * nb], a0, a1, a2, a3, b0, b1);
                    mma_bf16(sc[2 * nb + 1], a0, a1, a2, a3, b2, b3);
                }
            }
            /* mask, scale, online softmax (sc, [NB][4], is the [4 NB] tile_softmax reads) */
            float alpha[2];
            tile_softmax<NB, false>(reinterpret_cast<float (&)[4 * NB]>(sc), k0, t4, lim, scale_log2, m, l, alpha);
#pragma unroll
            for (int i = 0; i < DB; i++) {
                o[i][0] *= alpha[0], o[i][1] *= alpha[0];
                o[i][2] *= alpha[1], o[i][3] *= alpha[1];
            }
            /* O += P V: P (16 x BN) from the S accumulators as A fragments, V tile transposed */
            const uint32_t vt = smem_u32(Vs) + (uint32_t)(buf * BN * LD * 2) + v_off;
#pragma unroll
            for (int ks = 0; ks < BN / 16; ks++) {
                uint32_t a0 = pack_bf16(sc[2 * ks][0], sc[2 * ks][1]);
                uint32_t a1 = pack_bf16(sc[2 * ks][2], sc[2 * ks][3]);
                uint32_t a2 = pack_bf16(sc[2 * ks + 1][0], sc[2 * ks + 1][1]);
                uint32_t a3 = pack_bf16(sc[2 * ks + 1][2], sc[2 * ks + 1][3]);
#pragma unroll
                for (int db = 0; db < DB / 2; db++) {
                    uint32_t b0, b1, b2, b3;
                    ldsm_x4_t(vt + (uint32_t)((ks * 16 * LD + db * 16) * 2), b0, b1, b2, b3);
                    mma_bf16(o[2 * db], a0, a1, a2, a3, b0, b1);
                    mma_bf16(o[2 * db + 1], a0, a1, a2, a3, b2, b3);
                }
            }
        }
        __syncthreads(); /* the next iteration refills this buffer */
    }

#pragma unroll
    for (int h = 0; h < 2; h++) {
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    }
#pragma unroll
    for (int e = 0; e < 2; e++) {
        int64_t r = r0 + w * 16 + g + 8 * e;
        if (r >= nrows) continue;
        float inv = 1.0f / l[e]; /* l > 0: key 0 is allowed for every live row */
        float *dst = out + (s0 + r / G) * os + (int64_t)(hk * G + (int)(r % G)) * D + 2 * t4;
#pragma unroll
        for (int i = 0; i < DB; i++)
            *(float2 *)(dst + 8 * i) = make_float2(o[i][2 * e] * inv, o[i][2 * e + 1] * inv);
    }
}

/* ---- v2: wgmma (sm_90a), two warpgroups per block ----
 *
 * Why: v1 runs 4 independent warps per 64 rows, each reading every K and V fragment from shared
 * memory by ldmatrix for its own 16 rows (80 ldmatrix.x4 per 128 mma.sync per tile: ~380 TFLOP/s
 * of shared-memory bound, 137 measured). wgmma reads B (and A, for S = Q K^T) from shared memory
 * once per 64 rows of a warpgroup, straight into the tensor cores, so the bound moves to the
 * tensor cores; and two warpgroups (128 rows) share each K/V tile, halving the L2 -> SM bytes of
 * v1's 64-row blocks (8x512: 400 MB instead of 800 MB a call).
 *
 * Block: 256 threads = 2 warpgroups; rows r0 .. r0 + 127 of a (sequence, kv head) as in v1
 * (query-major over the G heads); warpgroup wg owns rows wg * 64 .. + 63, its warp w (0..3) 16 of
 * them. K/V tiles of 64 keys, double-buffered by cp.async from the BF16 copies.
 * Shared memory, all in the 128-byte swizzle of wgmma (16-byte chunk c of a 128-byte row r sits
 * at chunk c ^ (r & 7); atoms of 8 rows = 1024 bytes, so every region is 1024-aligned):
 *   Q  [D/64][128 rows][128 B]     A of S = Q K^T, K-major (descriptor SBO 1024)
 *   K  [2][D/64][64 keys][128 B]   B of S, K-major ([n][k]): SBO 1024
 *   V  [2][D/64][64 keys][128 B]   B of O += P V, MN-major ([k][n], trans-b): LBO = 64 * 128 bytes
 *                                  to the next 64 head dims, SBO 1024 to the next 8 keys
 * D 256: 64 + 2 * (32 + 32) = 192 KB (+1 KB to align): one block per SM.
 * S (64 x 64 per warpgroup, 32 FP32 a thread) and O (64 x D, D/2 a thread) are wgmma
 * accumulators: element e of 8-column block j of a thread is row 16 w + g + 8 (e >> 1), column
 * 8 j + 2 t4 + (e & 1) (g = lane / 4, t4 = lane % 4), the mma.sync C layout v1 uses, so the
 * softmax is v1's and P feeds O += P V as register A fragments exactly as v1 feeds mma.sync.
 * cp.async and the Q stores write through the generic proxy and wgmma reads through the async
 * proxy: each thread fences (fence.proxy.async) before the barrier that publishes a tile. */
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define ATTN_WG_ON 1
#endif

#define WG_ROWS 128 /* rows per block: 2 warpgroups x 64 */
#define WG_BN 64    /* keys per K/V tile */

template <int D> struct wg_cfg {
    static constexpr uint32_t qbytes = WG_ROWS * D * 2, tbytes = WG_BN * D * 2; /* Q; one K (or V) tile */
    static constexpr size_t smem = 1024 + qbytes + 4 * (size_t)tbytes;       /* Q, 2x K, 2x V, alignment */
};

#ifdef ATTN_WG_ON

/* S (64 x 64, FP32) (+)= Q (64 x 16, K-major in shared memory) . K^T (K tile 64 x 16, K-major);
 * acc 0 on a tile's first k-step (D = A.B) */
__device__ __forceinline__ void wg_ss_n64(float (&d)[32], uint64_t da, uint64_t db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WG_REGS32 ", %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : WG_OUT32(d)
                 : "l"(da), "l"(db), "r"(acc)
                 : "memory");
}
/* O (64 x 64, FP32) += P (64 x 16 keys, BF16 A fragments in registers) . V (16 keys x 64, MN-major:
 * trans-b 1) */
__device__ __forceinline__ void wg_rs_n64(float (&d)[32], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                          uint64_t db) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WG_REGS32
                 ", {%32, %33, %34, %35}, %36, 1, 1, 1, 1;\n"
                 : WG_OUT32(d)
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db)
                 : "memory");
}
/* O (64 x 128, FP32) += P (64 x 16 keys, BF16 A fragments in registers) . V (16 keys x 128, MN-major:
 * trans-b 1) */
__device__ __forceinline__ void wg_rs_n128(float (&d)[64], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                          uint64_t db) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " WG_REGS64
                 ", {%64, %65, %66, %67}, %68, 1, 1, 1, 1;\n"
                 : WG_OUT64(d)
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db)
                 : "memory");
}
/* O (64 x 256, FP32) += P (64 x 16 keys, BF16 A fragments in registers) . V (16 keys x 256, MN-major:
 * trans-b 1) */
__device__ __forceinline__ void wg_rs_n256(float (&d)[128], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                          uint64_t db) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " WG_REGS128
                 ", {%128, %129, %130, %131}, %132, 1, 1, 1, 1;\n"
                 : WG_OUT128(d)
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db)
                 : "memory");
}

template <int D>
__device__ __forceinline__ void wg_pv(float (&o)[D / 2], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                      uint64_t db) {
    if constexpr (D == 64) wg_rs_n64(o, a0, a1, a2, a3, db);
    else if constexpr (D == 128) wg_rs_n128(o, a0, a1, a2, a3, db);
    else wg_rs_n256(o, a0, a1, a2, a3, db);
}

/* issue S = Q K^T for one tile: D/16 k-steps; k-step kk is 32 bytes into 64-column sub-tile kk / 4
 * (descriptor address fields advance in 16-byte units; addresses stay under 256 KB, no carry) */
template <int D> __device__ __forceinline__ void wg_issue_s(float (&sc)[32], uint64_t qd, uint64_t kd) {
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++)
        wg_ss_n64(sc, qd + (uint64_t)(((kk >> 2) * (WG_ROWS * 128) + (kk & 3) * 32) >> 4),
                  kd + (uint64_t)(((kk >> 2) * (WG_BN * 128) + (kk & 3) * 32) >> 4), kk > 0);
}
/* issue O += P V for one tile: 16 keys a step, 2 swizzle atoms (2048 bytes) into every sub-tile */
template <int D> __device__ __forceinline__ void wg_issue_pv(float (&o)[D / 2], const uint32_t (&pa)[WG_BN / 16][4],
                                                             uint64_t vd) {
#pragma unroll
    for (int ks = 0; ks < WG_BN / 16; ks++)
        wg_pv<D>(o, pa[ks][0], pa[ks][1], pa[ks][2], pa[ks][3], vd + (uint64_t)((ks * 16 * 128) >> 4));
}
/* mask, scale and the online softmax of one S tile (v1's, on the same layout), in place: sc
 * becomes p (FP32); new m, l, and the factor alpha for O */
__device__ __forceinline__ void wg_softmax(float (&sc)[32], int k0, int t4, const int (&lim)[2], float scale_log2,
                                           float (&m)[2], float (&l)[2], float (&alpha)[2]) {
    tile_softmax<WG_BN / 8, true>(sc, k0, t4, lim, scale_log2, m, l, alpha);
}
/* p (FP32, S layout) -> BF16 A fragments of O += P V: 8-key block j is half j & 1 of 16-key step
 * j / 2 (a0 / a1: rows g / g + 8 at keys +0..7; a2 / a3: at +8..15) */
__device__ __forceinline__ void wg_pack(const float (&sc)[32], uint32_t (&pa)[WG_BN / 16][4]) {
#pragma unroll
    for (int j = 0; j < WG_BN / 8; j++) {
        pa[j >> 1][(j & 1) * 2 + 0] = pack_bf16(sc[4 * j + 0], sc[4 * j + 1]);
        pa[j >> 1][(j & 1) * 2 + 1] = pack_bf16(sc[4 * j + 2], sc[4 * j + 3]);
    }
}
#endif

/* PIPE false ("v2"): per tile, S = Q K^T, wait, softmax, O += P V, wait; K and V of a tile load
 * together one tile ahead.
 * PIPE true ("v3", flash-attention-3's intra-warpgroup overlap): iteration t issues S_t and then
 * O += P_{t-1} V_{t-1}, waits for S_t only, runs softmax t while the tensor cores do P V, then
 * waits for P V and rescales O. V_{t-1} must stay while S_t's tile arrives, so K and V load
 * separately: K_{t+1} at the top of iteration t (its stage held K_{t-1}, read by S_{t-1} which
 * finished in iteration t-1), V_{t+1} after the barrier in the middle of iteration t (its stage held
 * V_{t-1}, whose P V finished just before). cp.async groups in commit order: K0 V0 K1 V1 K2 ...;
 * at the top of iteration t, after committing K_{t+1}, wait_group 2 leaves V_t and K_{t+1} in
 * flight, so K_t and V_{t-1} have landed. */
template <int D, bool PIPE, bool QBATCH>
__global__ void __launch_bounds__(256, 1)
    k_attn_wg(const float *__restrict__ q, int64_t qs, const __nv_bfloat16 *__restrict__ kb,
              const __nv_bfloat16 *__restrict__ vb, const tc_segs s, const int64_t *__restrict__ keys, int H, int Hkv,
              float scale_log2, int causal, int qvec, float *__restrict__ out) {
#ifdef ATTN_WG_ON
    constexpr int CH = D / 8; /* 16-byte chunks per row */
    constexpr int DJ = D / 8; /* 8-column blocks of O */
    constexpr uint32_t QB = wg_cfg<D>::qbytes, TB = wg_cfg<D>::tbytes;
    extern __shared__ __align__(16) unsigned char smraw[];
    const uint32_t sbase = (smem_u32(smraw) + 1023u) & ~1023u;
    const uint32_t Qs = sbase, Ks = Qs + QB, Vs = Ks + 2 * TB; /* K, V: stage st at + st * TB */

    const int sg = blockIdx.z, hk = blockIdx.y, G = H / Hkv;
    const int64_t L = s.len[sg], s0 = s.start[sg], nrows = L * G;
    const int64_t Lk = keys ? keys[sg] : L; /* keys read (a bucketed forward's real tokens) */
    const int64_t rb = causal ? (int64_t)gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const int64_t r0 = rb * WG_ROWS;
    if (r0 >= nrows) return;
    const int tid = threadIdx.x, wg = tid >> 7, w = (tid >> 5) & 3, lane = tid & 31;
    const int64_t kvs = (int64_t)Hkv * D, os = (int64_t)H * D;

    /* keys the block needs, and the tiles a warpgroup computes (wgmma is warpgroup-wide, so the
     * causal skip is per warpgroup; a warpgroup wholly past the sequence computes nothing) */
    const int64_t rlast = r0 + WG_ROWS - 1 < nrows - 1 ? r0 + WG_ROWS - 1 : nrows - 1;
    const int64_t nk = causal ? rlast / G + 1 : Lk;
    const int ntiles = (int)((nk + WG_BN - 1) / WG_BN);
    const int64_t wfirst = r0 + wg * 64, wlast = wfirst + 63 < nrows - 1 ? wfirst + 63 : nrows - 1;
    const int64_t wlim = wfirst >= nrows ? 0 : causal ? wlast / G + 1 : Lk;

    const __nv_bfloat16 *kbase = kb + s0 * kvs + (int64_t)hk * D;
    const __nv_bfloat16 *vbase = vb + s0 * kvs + (int64_t)hk * D;
    /* one tile of K (which 0) or V (1) or both (2) into stage st (keys past nk: zero-filled) */
    auto load = [&](int t, int st, int which) {
        const int64_t k0 = (int64_t)t * WG_BN;
#pragma unroll 4
        for (int i = tid; i < WG_BN * CH; i += 256) {
            int j = i / CH, cc = i % CH;
            bool in = k0 + j < nk;
            int64_t off = in ? (k0 + j) * kvs + cc * 8 : 0;
            uint32_t so = st * TB + (uint32_t)((cc >> 3) * (WG_BN * 128) + j * 128 + (((cc & 7) ^ (j & 7)) << 4));
            if (which != 1) cp_async16(Ks + so, kbase + off, in ? 16 : 0);
            if (which != 0) cp_async16(Vs + so, vbase + off, in ? 16 : 0);
        }
    };
    if (PIPE) {
        load(0, 0, 0);
        cp_async_commit();
        load(0, 0, 1);
        cp_async_commit();
    } else {
        load(0, 0, 2);
        cp_async_commit();
    }

    /* Q rows -> BF16, swizzled (rows past the sequence: zeros) */
    if (!QBATCH) {
        /* as measured 2026-11-29: each global load waits for the previous store (the store's memory
         * clobber orders them): 32 round trips to memory a thread at D 256 */
        constexpr int C4 = D / 4;
#pragma unroll 8
        for (int i = tid; i < WG_ROWS * C4; i += 256) {
            int row = i / C4, c = (i % C4) * 4, cc = c >> 3;
            int64_t r = r0 + row;
            float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
            if (r < nrows) {
                const float *src = q + (s0 + r / G) * qs + (int64_t)(hk * G + (int)(r % G)) * D + c;
                if (qvec) x = *(const float4 *)src;
                else x = make_float4(src[0], src[1], src[2], src[3]);
            }
            uint32_t so = (uint32_t)((cc >> 3) * (WG_ROWS * 128) + row * 128 + (((cc & 7) ^ (row & 7)) << 4) +
                                     (c & 4) * 2);
            asm volatile("st.shared.v2.b32 [%0], {%1, %2};\n" ::"r"(Qs + so), "r"(pack_bf16(x.x, x.y)),
                         "r"(pack_bf16(x.z, x.w))
                         : "memory");
        }
    } else {
        /* QBATCH (VSR_CUDA_ATTN_QBATCH=1): NB independent loads in flight a thread, then their
         * stores. Element i of the block's Q (float4 units) is row i / (D/4), columns 4 (i % (D/4)). */
        constexpr int C4 = D / 4, PER = WG_ROWS * C4 / 256, NB = PER < 16 ? PER : 16;
        static_assert(PER % NB == 0 && WG_ROWS * C4 % 256 == 0, "Q float4 per thread");
#pragma unroll 1
        for (int b0 = 0; b0 < PER; b0 += NB) {
            float4 x[NB];
#pragma unroll
            for (int u = 0; u < NB; u++) {
                int i = tid + (b0 + u) * 256, row = i / C4, c = (i % C4) * 4;
                int64_t r = r0 + row;
                x[u] = make_float4(0.f, 0.f, 0.f, 0.f);
                if (r < nrows) {
                    const float *src = q + (s0 + r / G) * qs + (int64_t)(hk * G + (int)(r % G)) * D + c;
                    if (qvec) x[u] = *(const float4 *)src;
                    else x[u] = make_float4(src[0], src[1], src[2], src[3]);
                }
            }
#pragma unroll
            for (int u = 0; u < NB; u++) {
                int i = tid + (b0 + u) * 256, row = i / C4, c = (i % C4) * 4, cc = c >> 3;
                uint32_t so = (uint32_t)((cc >> 3) * (WG_ROWS * 128) + row * 128 + (((cc & 7) ^ (row & 7)) << 4) +
                                         (c & 4) * 2);
                asm volatile("st.shared.v2.b32 [%0], {%1, %2};\n" ::"r"(Qs + so), "r"(pack_bf16(x[u].x, x[u].y)),
                             "r"(pack_bf16(x[u].z, x[u].w))
                             : "memory");
            }
        }
    }

    const int g = lane >> 2, t4 = lane & 3;
    int lim[2];
#pragma unroll
    for (int e = 0; e < 2; e++) {
        int64_t r = r0 + wg * 64 + w * 16 + g + 8 * e;
        int64_t qi = r < nrows ? r / G : L - 1; /* rows past the end: any finite softmax, not stored */
        lim[e] = (int)(causal ? qi + 1 : Lk);
    }

    float o[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; i++) o[i] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}; /* m in log2 units (scaled) */
    /* descriptors: this warpgroup's 64 rows of Q; stage 0 of K and V (K-major / MN-major, see above) */
    const uint64_t qd = wg_desc(Qs + (uint32_t)(wg * 64 * 128), 16, 1024);
    const uint64_t kd = wg_desc(Ks, 16, 1024), vd = wg_desc(Vs, WG_BN * 128, 1024);
    constexpr uint64_t TD = TB >> 4; /* one stage, in descriptor address units */
    float sc[32];
    float alpha[2];
    uint32_t pa[WG_BN / 16][4];

    if (!PIPE) {
        for (int t = 0; t < ntiles; t++) {
            const int st = t & 1;
            if (t + 1 < ntiles) load(t + 1, st ^ 1, 2);
            cp_async_commit();
            cp_async_wait<1>();
            fence_proxy_async();
            __syncthreads();
            const int k0 = t * WG_BN;
            if (k0 < wlim) {
                wg_fence();
                wg_issue_s<D>(sc, qd, kd + st * TD);
                wg_commit();
                wg_wait<0>();
#pragma unroll
                for (int i = 0; i < 32; i++) reg_fence(sc[i]);
                wg_softmax(sc, k0, t4, lim, scale_log2, m, l, alpha);
                wg_pack(sc, pa);
#pragma unroll
                for (int j = 0; j < DJ; j++) {
                    o[4 * j + 0] *= alpha[0], o[4 * j + 1] *= alpha[0];
                    o[4 * j + 2] *= alpha[1], o[4 * j + 3] *= alpha[1];
                }
#pragma unroll
                for (int i = 0; i < D / 2; i++) reg_fence(o[i]);
                wg_fence();
                wg_issue_pv<D>(o, pa, vd + st * TD);
                wg_commit();
                wg_wait<0>();
#pragma unroll
                for (int i = 0; i < D / 2; i++) reg_fence(o[i]);
#pragma unroll
                for (int i = 0; i < WG_BN / 16; i++)
#pragma unroll
                    for (int e = 0; e < 4; e++) reg_fence(pa[i][e]);
            }
            __syncthreads(); /* the next iteration refills this stage */
        }
    } else {
        /* Every warpgroup computes every tile of the block (the causal tiles past a warpgroup's
         * last query are masked to p = 0, at most one tile): wgmma under a branch makes ptxas
         * serialise them all (C7518). Iteration 0 is peeled (no P V due yet). */
        /* P of the previous tile, read by its in-flight P V. It is packed from p only after that
         * P V has finished (wait_group 0): registers a wgmma reads, written while it is in flight,
         * make ptxas serialise every wgmma of the kernel (C7513); the softmax works in place on
         * the S accumulators, whose wgmma has finished. */
        uint32_t (&pp)[WG_BN / 16][4] = pa;
        auto rescale = [&]() {
#pragma unroll
            for (int j = 0; j < DJ; j++) {
                o[4 * j + 0] *= alpha[0], o[4 * j + 1] *= alpha[0];
                o[4 * j + 2] *= alpha[1], o[4 * j + 3] *= alpha[1];
            }
        };
        /* tile 0 */
        if (1 < ntiles) load(1, 1, 0);
        cp_async_commit();
        cp_async_wait<2>(); /* K_0 */
        fence_proxy_async();
        __syncthreads();
        wg_fence();
        wg_issue_s<D>(sc, qd, kd);
        wg_commit();
        wg_wait<0>();
#pragma unroll
        for (int i = 0; i < 32; i++) reg_fence(sc[i]);
        wg_softmax(sc, 0, t4, lim, scale_log2, m, l, alpha);
        rescale();
        wg_pack(sc, pp);
        __syncthreads(); /* (kept for one pattern: V stage 1 holds nothing yet) */
        if (1 < ntiles) load(1, 1, 1);
        cp_async_commit();
        for (int t = 1; t < ntiles; t++) {
            const int st = t & 1;
            if (t + 1 < ntiles) load(t + 1, st ^ 1, 0);
            cp_async_commit();
            cp_async_wait<2>(); /* K_t and V_{t-1} */
            fence_proxy_async();
            __syncthreads();
            wg_fence();
            wg_issue_s<D>(sc, qd, kd + st * TD);
            wg_commit();
            wg_issue_pv<D>(o, pp, vd + (st ^ 1) * TD);
            wg_commit();
            wg_wait<1>(); /* S_t */
#pragma unroll
            for (int i = 0; i < 32; i++) reg_fence(sc[i]);
            wg_softmax(sc, t * WG_BN, t4, lim, scale_log2, m, l, alpha);
            /* pin the softmax before the wait (else the compiler sinks it past, losing the overlap) */
#pragma unroll
            for (int i = 0; i < 32; i++) reg_fence(sc[i]);
            reg_fence(l[0]), reg_fence(l[1]), reg_fence(alpha[0]), reg_fence(alpha[1]);
            wg_wait<0>(); /* P_{t-1} V_{t-1} */
#pragma unroll
            for (int i = 0; i < D / 2; i++) reg_fence(o[i]);
            rescale();
            wg_pack(sc, pp);
            __syncthreads(); /* every warpgroup is done with V_{t-1}: its stage takes V_{t+1} */
            if (t + 1 < ntiles) load(t + 1, st ^ 1, 1);
            cp_async_commit();
        }
        cp_async_wait<0>();
        fence_proxy_async();
        __syncthreads();
#pragma unroll
        for (int i = 0; i < D / 2; i++) reg_fence(o[i]);
        wg_fence();
        wg_issue_pv<D>(o, pp, vd + ((ntiles - 1) & 1) * TD);
        wg_commit();
        wg_wait<0>();
#pragma unroll
        for (int i = 0; i < D / 2; i++) reg_fence(o[i]);
    }

#pragma unroll
    for (int h = 0; h < 2; h++) {
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    }
#pragma unroll
    for (int e = 0; e < 2; e++) {
        int64_t r = r0 + wg * 64 + w * 16 + g + 8 * e;
        if (r >= nrows) continue;
        float inv = 1.0f / l[e]; /* l > 0: key 0 is allowed for every live row */
        float *dst = out + (s0 + r / G) * os + (int64_t)(hk * G + (int)(r % G)) * D + 2 * t4;
#pragma unroll
        for (int j = 0; j < DJ; j++)
            *(float2 *)(dst + 8 * j) = make_float2(o[4 * j + 2 * e] * inv, o[4 * j + 2 * e + 1] * inv);
    }
#endif
}

/* ---- host side ---- */

template <int D, int BN>
static vsr_status tc_launch(cuda_ctx *c, const float *q, int64_t qs, const __nv_bfloat16 *kb,
                            const __nv_bfloat16 *vb, const tc_segs &s, const int64_t *keys, int64_t max_len, int H,
                            int Hkv, float scale, int causal, int qvec, float *out, vsr_err *err) {
    size_t smem = tc_cfg<D, BN>::smem;
    vsr_status st = cuda_check(c, cudaFuncSetAttribute(k_attn_tc<D, BN>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                       (int)smem),
                               "attention (tensor cores): shared memory limit", err);
    if (st) return st;
    int64_t bx = (max_len * (H / Hkv) + TC_BM - 1) / TC_BM;
    if (bx > 0x7fffffff) return vsr_err_set(err, VSR_E_UNSUPPORTED, "cuda:%d: attention: %lld tokens in one sequence",
                                            c->device, (long long)max_len);
    dim3 grid((unsigned)bx, (unsigned)Hkv, (unsigned)s.n);
    k_attn_tc<D, BN><<<grid, TC_WARPS * 32, smem, c->stream>>>(q, qs, kb, vb, s, keys, H, Hkv, scale * 1.4426950408889634f,
                                                              causal, qvec, out);
    return cuda_check_launch(c, "attention (tensor cores)", err);
}

template <int D, bool PIPE, bool QBATCH>
static vsr_status wg_launch(cuda_ctx *c, const float *q, int64_t qs, const __nv_bfloat16 *kb, const __nv_bfloat16 *vb,
                            const tc_segs &s, const int64_t *keys, int64_t max_len, int H, int Hkv, float scale,
                            int causal, int qvec, float *out, vsr_err *err) {
    size_t smem = wg_cfg<D>::smem;
    vsr_status st = cuda_check(c, cudaFuncSetAttribute(k_attn_wg<D, PIPE, QBATCH>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                       (int)smem),
                               "attention (wgmma): shared memory limit", err);
    if (st) return st;
    int64_t bx = (max_len * (H / Hkv) + WG_ROWS - 1) / WG_ROWS;
    if (bx > 0x7fffffff) return vsr_err_set(err, VSR_E_UNSUPPORTED, "cuda:%d: attention: %lld tokens in one sequence",
                                            c->device, (long long)max_len);
    dim3 grid((unsigned)bx, (unsigned)Hkv, (unsigned)s.n);
    k_attn_wg<D, PIPE, QBATCH><<<grid, 256, smem, c->stream>>>(q, qs, kb, vb, s, keys, H, Hkv, scale * 1.4426950408889634f, causal, qvec,
                                                 out);
    return cuda_check_launch(c, "attention (wgmma)", err);
}

/* Which kernel (bench/notes/2026-11-29-cuda-sessions.md "Attention on wgmma"): VSR_CUDA_ATTN_V1=1 or VSR_CUDA_ATTN_VER=1:
 * v1 (mma.sync); VSR_CUDA_ATTN_VER=2 (the default: fastest on the H200, 2026-11-29): wgmma
 * without overlap; VSR_CUDA_ATTN_VER=3: wgmma with the softmax overlapping P V.
 * VSR_CUDA_ATTN_QBATCH=0: v2 / v3 with the Q load serial (the Q load batched is the default since its
 * H200 run: 8x512 non-causal 213 us against 285, causal 169 against 247; bench/NOTES.md third session).
 * For A/B timing and for the tests, which run every version. */
#define ATTN_DEFAULT_VER 2
static int attn_version(void) {
    const char *v1 = getenv("VSR_CUDA_ATTN_V1");
    if (v1 && v1[0] == '1') return 1;
    const char *v = getenv("VSR_CUDA_ATTN_VER");
    if (v && v[0] >= '1' && v[0] <= '3' && v[1] == 0) return v[0] - '0';
    return ATTN_DEFAULT_VER;
}

extern "C" vsr_status cuda_attention_tc(cuda_ctx *c, const float *q, int64_t qs, const float *k, const float *v,
                                        const vsr_segs *seg, const int64_t *keys, int H, int Hkv, int d, float scale,
                                        int causal, float *out, int *taken, vsr_err *err) {
    *taken = 0;
    /* VSR_CUDA_ATTN_FP32=1 keeps every shape on the FP32 kernel (A/B timing, bench/NOTES.md) */
    const char *fp32 = getenv("VSR_CUDA_ATTN_FP32");
    if (fp32 && fp32[0] == '1') return VSR_OK;
    if (c->cc_major < 8 || (d != 32 && d != 64 && d != 128 && d != 256)) return VSR_OK;
    if (((uintptr_t)out & 7) || seg->n <= 0 || seg->n > TC_MAX_SEGS || Hkv <= 0 || H % Hkv) return VSR_OK;
    tc_segs s;
    s.n = seg->n;
    int64_t max_len = 0;
    for (int i = 0; i < seg->n; i++) {
        s.start[i] = seg->start[i], s.len[i] = seg->len[i];
        if (seg->len[i] > max_len) max_len = seg->len[i];
    }
    int64_t rows = seg->start[seg->n - 1] + seg->len[seg->n - 1];
    if (max_len >= (1 << 30)) return VSR_OK; /* key indices are int in the kernel */
    *taken = 1;
    if (rows <= 0 || max_len <= 0) return VSR_OK;
    int qvec = ((uintptr_t)q & 15) == 0 && qs % 4 == 0;
    int64_t n = rows * Hkv * d;
    void *scr = NULL;
    vsr_status st = cuda_scratch(c, sizeof(__nv_bfloat16) * (size_t)n * 2, &scr, err);
    if (st) return vsr_err_prefix(err, "attention: bf16 copies of k and v");
    __nv_bfloat16 *kb = (__nv_bfloat16 *)scr, *vb = kb + n;
    int64_t nb = (n / 4 + 255) / 256;
    if (nb > 0x7fffffff) return vsr_err_set(err, VSR_E_UNSUPPORTED, "cuda:%d: attention: %lld rows", c->device, (long long)rows);
    k_kv_to_bf16<<<dim3((unsigned)nb, 2), 256, 0, c->stream>>>(k, v, n, kb, vb);
    if ((st = cuda_check_launch(c, "attention: k, v to bf16", err))) return st;
    /* v2 / v3 (wgmma) where the build has sm_90a code, i.e. compute capability 9.0, for head dims
     * 64 / 128 / 256 (one 128-byte swizzle row is 64 BF16); the others stay on v1 */
    int ver = attn_version();
    if (ver > 1 && c->cc_major == 9 && c->cc_minor == 0 && (d == 64 || d == 128 || d == 256)) {
#define WGL(D, P, B) wg_launch<D, P, B>(c, q, qs, kb, vb, s, keys, max_len, H, Hkv, scale, causal, qvec, out, err)
#define WGD(P, B) (d == 64 ? WGL(64, P, B) : d == 128 ? WGL(128, P, B) : WGL(256, P, B))
        const char *qb = getenv("VSR_CUDA_ATTN_QBATCH");
        int batch = !(qb && qb[0] == '0');
        if (ver == 3) return batch ? WGD(true, true) : WGD(true, false);
        return batch ? WGD(false, true) : WGD(false, false);
#undef WGD
#undef WGL
    }
    /* v1, BN: keys per tile, so two blocks fit on a multiprocessor (d 256: 101 KB each) */
    switch (d) {
    case 32: return tc_launch<32, 64>(c, q, qs, kb, vb, s, keys, max_len, H, Hkv, scale, causal, qvec, out, err);
    case 64: return tc_launch<64, 64>(c, q, qs, kb, vb, s, keys, max_len, H, Hkv, scale, causal, qvec, out, err);
    case 128: return tc_launch<128, 64>(c, q, qs, kb, vb, s, keys, max_len, H, Hkv, scale, causal, qvec, out, err);
    default: return tc_launch<256, 32>(c, q, qs, kb, vb, s, keys, max_len, H, Hkv, scale, causal, qvec, out, err);
    }
}

/* ---- attention: one block per (sequence, head, 8 queries); one warp per query ----
 * Keys and values stream through shared memory in tiles of 32 rows. Scores: lane j takes
 * key j of the tile (dot over d with the warp's query from shared memory; K rows padded by
 * one float so lanes hit distinct banks). Online softmax in FP32 (running max and sum per
 * query), then lane l accumulates output dims l, l+32, ... from the V tile. d <= 256. */
#define ATT_Q 8
#define ATT_KT 32
#define ATT_DMAX 256
static size_t att_smem(int d) { return sizeof(float) * ((size_t)ATT_KT * (d + 1) + (size_t)ATT_KT * d + (size_t)ATT_Q * d); }

__global__ void __launch_bounds__(ATT_Q * 32) k_attention(const float *__restrict__ q, int64_t qs, const float *__restrict__ k,
                                                         const float *__restrict__ v, const dsegs s, int H, int Hkv, int d,
                                                         float scale, int causal, const int64_t *__restrict__ keys,
                                                         float *__restrict__ out) {
    extern __shared__ float sm[];
    float *Ks = sm, *Vs = Ks + ATT_KT * (d + 1), *Qs = Vs + ATT_KT * d;
    const int sg = blockIdx.z, h = blockIdx.y, hk = h / (H / Hkv);
    const int64_t L = s.len[sg], s0 = s.start[sg];
    const int64_t qb = (int64_t)blockIdx.x * ATT_Q;
    if (qb >= L) return;
    const int w = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int64_t qi = qb + w; /* this warp's query, relative to the sequence */
    const bool qlive = qi < L;
    const int64_t kvs = (int64_t)Hkv * d;
    for (int i = threadIdx.x; i < ATT_Q * d; i += blockDim.x) {
        int qq = i / d, dd = i % d;
        Qs[i] = qb + qq < L ? q[(s0 + qb + qq) * qs + (int64_t)h * d + dd] : 0.0f;
    }
    float acc[ATT_DMAX / 32];
#pragma unroll
    for (int c = 0; c < ATT_DMAX / 32; c++) acc[c] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    const int64_t qmax = qb + ATT_Q - 1 < L - 1 ? qb + ATT_Q - 1 : L - 1;
    const int64_t nk = causal ? qmax + 1 : keys ? keys[sg] : L;
    const float *qw = Qs + w * d;
    for (int64_t t0 = 0; t0 < nk; t0 += ATT_KT) {
        __syncthreads();
        for (int i = threadIdx.x; i < ATT_KT * d; i += blockDim.x) {
            int j = i / d, dd = i % d;
            bool in = t0 + j < nk;
            int64_t row = (s0 + t0 + j) * kvs + (int64_t)hk * d + dd;
            Ks[j * (d + 1) + dd] = in ? k[row] : 0.0f;
            Vs[j * d + dd] = in ? v[row] : 0.0f;
        }
        __syncthreads();
        if (!qlive) continue;
        const int64_t kj = t0 + lane;
        float sc = 0.0f;
        const float *kr = Ks + lane * (d + 1);
        for (int dd = 0; dd < d; dd++) sc += qw[dd] * kr[dd];
        sc *= scale;
        bool ok = kj < nk && (!causal || kj <= qi);
        sc = ok ? sc : -INFINITY;
        float mt = warp_max(sc);
        float mn = fmaxf(m, mt);
        /* mn is finite: key 0 is always allowed, and it is in the first tile */
        float p = ok ? expf(sc - mn) : 0.0f;
        float alpha = expf(m - mn); /* m = -inf on the first tile: 0 */
        l = l * alpha + warp_sum(p);
        m = mn;
#pragma unroll
        for (int c = 0; c < ATT_DMAX / 32; c++) acc[c] *= alpha;
        int jmax = (int)(nk - t0 < ATT_KT ? nk - t0 : ATT_KT);
        for (int j = 0; j < jmax; j++) {
            float pj = __shfl_sync(0xffffffffu, p, j);
            const float *vr = Vs + j * d;
#pragma unroll
            for (int c = 0; c < ATT_DMAX / 32; c++) {
                int dd = lane + 32 * c;
                if (dd < d) acc[c] += pj * vr[dd];
            }
        }
    }
    if (!qlive) return;
    float inv = 1.0f / l;
    float *o = out + (s0 + qi) * ((int64_t)H * d) + (int64_t)h * d;
#pragma unroll
    for (int c = 0; c < ATT_DMAX / 32; c++) {
        int dd = lane + 32 * c;
        if (dd < d) o[dd] = acc[c] * inv;
    }
}

/* ---- activation twins (see twin) ---- */

/* BF16 tensor-core flash attention (attention.cu); *taken = 0 for shapes it leaves to k_attention */
extern "C" vsr_status cuda_attention_tc(cuda_ctx *c, const float *q, int64_t qs, const float *k, const float *v,
                                        const vsr_segs *seg, const int64_t *keys, int H, int Hkv, int d, float scale,
                                        int causal, float *out, int *taken, vsr_err *err);

vsr_status cu_attention(void *ctx, const float *q, int64_t qs, const float *k, const float *v,
                               const vsr_segs *seg, int H, int Hkv, int d, float scale, int causal, float *out,
                               vsr_err *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    ENTER(c);
    if (seg->n <= 0) return VSR_OK;
    if (Hkv <= 0 || H % Hkv)
        return vsr_err_set(err, VSR_E_UNSUPPORTED, "attention: %d query heads over %d kv heads", H, Hkv);
    if (d <= 0 || d > ATT_DMAX)
        return vsr_err_set(err, VSR_E_UNSUPPORTED, "cuda:%d: attention: head dim %d (at most %d)", c->device, d, ATT_DMAX);
    dsegs s;
    int64_t rows, max_len;
    vsr_status st = segs_to_dev(c, seg, "attention", &s, &rows, &max_len, err);
    if (st || rows <= 0) return st;
    PROF(c, causal ? "attention (causal)" : "attention");
    if ((st = kp_guard(c, q, sizeof(float) * (size_t)((rows - 1) * qs + (int64_t)H * d), "attention", err)) ||
        (st = kp_guard(c, k, sizeof(float) * (size_t)(rows * Hkv * d), "attention", err)) ||
        (st = kp_guard(c, v, sizeof(float) * (size_t)(rows * Hkv * d), "attention", err)))
        return st;
    twin_clobber(c, out, sizeof(float) * (size_t)(rows * H * d));
    /* a bucketed forward's keys per sequence: read on the device from the staged row table, so a
     * replay takes the next request's (vsr_segs) */
    const int64_t *keys = NULL;
    if (seg->keys) {
        const cuda_ctx_priv *p = priv(c);
        if (!seg->staged || p->tab_n < 3 * (int64_t)seg->n)
            return vsr_err_set(err, VSR_E_INTERNAL, "cuda:%d: attention: key counts given without the staged row table",
                               c->device);
        for (int i = 0; i < seg->n; i++)
            if (seg->keys[i] < 1 || seg->keys[i] > seg->len[i] || p->tab_host[2 * seg->n + i] != seg->keys[i])
                return vsr_err_set(err, VSR_E_INTERNAL, "cuda:%d: attention: sequence %d reads %lld of its %lld keys "
                                   "(staged %lld)", c->device, i, (long long)seg->keys[i], (long long)seg->len[i],
                                   (long long)p->tab_host[2 * seg->n + i]);
        keys = p->tab_dev + 2 * seg->n;
    }
    int taken = 0;
    st = cuda_attention_tc(c, q, qs, k, v, seg, keys, H, Hkv, d, scale, causal, out, &taken, err);
    if (st || taken) return st;
    dim3 grid(blocks_for(max_len, ATT_Q), (unsigned)H, (unsigned)s.n);
    k_attention<<<grid, ATT_Q * 32, att_smem(d), c->stream>>>(q, qs, k, v, s, H, Hkv, d, scale, causal, keys, out);
    return cuda_check_launch(c, "attention", err);
}

/* k_attention's dynamic shared memory limit (the largest head dim's tiles), once at backend creation */
vsr_status cuda_attention_setup(cuda_ctx *c, vsr_err *err) {
    return cuda_check(c, cudaFuncSetAttribute(k_attention, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              (int)att_smem(ATT_DMAX)),
                      "attention: shared memory limit", err);
}
