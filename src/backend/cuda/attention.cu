/* src/backend/cuda/attention.cu: scaled dot-product attention on BF16 tensor cores
 * (flash-attention-2 style), behind the attention entry of the backend table (ops.cu).
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
 * anything else stays on the FP32 kernel of ops.cu (cuda_attention_tc says it did not take it). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/cuda/cuda_internal.h"

#define TC_WARPS 4
#define TC_BM (TC_WARPS * 16) /* rows per block */
#define TC_MAX_SEGS 128       /* as CUDA_MAX_SEGS in ops.cu, which checks it before calling */

typedef struct tc_segs {
    int n;
    int64_t start[TC_MAX_SEGS], len[TC_MAX_SEGS];
} tc_segs;

/* ---- PTX wrappers ---- */

__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* 16 bytes global -> shared; src_bytes 0 zero-fills (the source is not read) */
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}
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

/* ---- the kernel ---- */

template <int D, int BN> struct tc_cfg {
    static constexpr int LD = D + 8; /* padded row, in bf16: 16 bytes more than the row */
    static constexpr size_t smem = sizeof(__nv_bfloat16) * (size_t)LD * (TC_BM + 4 * BN); /* Q, 2x K, 2x V */
};

template <int D, int BN>
__global__ void __launch_bounds__(TC_WARPS * 32, 2)
    k_attn_tc(const float *__restrict__ q, int64_t qs, const __nv_bfloat16 *__restrict__ kb,
              const __nv_bfloat16 *__restrict__ vb, const tc_segs s, int H, int Hkv, float scale_log2, int causal,
              int qvec, float *__restrict__ out) {
    constexpr int LD = tc_cfg<D, BN>::LD;
    constexpr int NB = BN / 8; /* n-blocks of S per warp */
    constexpr int DB = D / 8;  /* n-blocks of O per warp */
    extern __shared__ __align__(16) unsigned char smraw[];
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)smraw;
    __nv_bfloat16 *Ks = Qs + TC_BM * LD; /* [2][BN][LD] */
    __nv_bfloat16 *Vs = Ks + 2 * BN * LD;

    const int sg = blockIdx.z, hk = blockIdx.y, G = H / Hkv;
    const int64_t L = s.len[sg], s0 = s.start[sg], nrows = L * G;
    const int64_t rb = causal ? (int64_t)gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const int64_t r0 = rb * TC_BM;
    if (r0 >= nrows) return;
    const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31;
    const int64_t kvs = (int64_t)Hkv * D; /* k/v row stride */
    const int64_t os = (int64_t)H * D;    /* out row stride */

    /* keys this block needs: every key of the sequence, or up to its last query */
    const int64_t rlast = r0 + TC_BM - 1 < nrows - 1 ? r0 + TC_BM - 1 : nrows - 1;
    const int64_t nk = causal ? rlast / G + 1 : L;
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
        lim[e] = (int)(causal ? qi + 1 : L);
    }
    /* the warp's largest limit: tiles at or past it are fully masked for the warp */
    int64_t wr = r0 + w * 16 + 15 < nrows - 1 ? r0 + w * 16 + 15 : nrows - 1;
    const int64_t wlim = causal ? wr / G + 1 : L;

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
            /* mask, scale, online softmax; element e of n-block i: row g + 8 * (e >> 1),
             * key k0 + 8 i + 2 t4 + (e & 1) */
            float mx[2] = {m[0], m[1]};
#pragma unroll
            for (int i = 0; i < NB; i++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int key = k0 + 8 * i + 2 * t4 + (e & 1);
                    float x = key < lim[e >> 1] ? sc[i][e] * scale_log2 : -INFINITY;
                    sc[i][e] = x;
                    mx[e >> 1] = fmaxf(mx[e >> 1], x);
                }
            float alpha[2], mu[2];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
                mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
                mu[h] = mx[h] == -INFINITY ? 0.f : mx[h]; /* a row with no key yet: p = 0 */
                alpha[h] = exp2f(m[h] - mu[h]);           /* m = -inf: 0 */
                m[h] = mx[h];
                l[h] *= alpha[h];
            }
#pragma unroll
            for (int i = 0; i < NB; i++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float p = exp2f(sc[i][e] - mu[e >> 1]);
                    sc[i][e] = p;
                    l[e >> 1] += p; /* this thread's partial row sum; the quad adds them at the end */
                }
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

/* ---- host side ---- */

template <int D, int BN>
static vsr_status tc_launch(cuda_ctx *c, const float *q, int64_t qs, const __nv_bfloat16 *kb,
                            const __nv_bfloat16 *vb, const tc_segs &s, int64_t max_len, int H, int Hkv, float scale,
                            int causal, int qvec, float *out, vsr_err *err) {
    size_t smem = tc_cfg<D, BN>::smem;
    vsr_status st = cuda_check(c, cudaFuncSetAttribute(k_attn_tc<D, BN>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                       (int)smem),
                               "attention (tensor cores): shared memory limit", err);
    if (st) return st;
    int64_t bx = (max_len * (H / Hkv) + TC_BM - 1) / TC_BM;
    if (bx > 0x7fffffff) return vsr_err_set(err, VSR_E_UNSUPPORTED, "cuda:%d: attention: %lld tokens in one sequence",
                                            c->device, (long long)max_len);
    dim3 grid((unsigned)bx, (unsigned)Hkv, (unsigned)s.n);
    k_attn_tc<D, BN><<<grid, TC_WARPS * 32, smem, c->stream>>>(q, qs, kb, vb, s, H, Hkv, scale * 1.4426950408889634f,
                                                              causal, qvec, out);
    return cuda_check_launch(c, "attention (tensor cores)", err);
}

extern "C" vsr_status cuda_attention_tc(cuda_ctx *c, const float *q, int64_t qs, const float *k, const float *v,
                                        const vsr_segs *seg, int H, int Hkv, int d, float scale, int causal,
                                        float *out, int *taken, vsr_err *err) {
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
    /* BN: keys per tile, so two blocks fit on a multiprocessor (d 256: 101 KB each) */
    switch (d) {
    case 32: return tc_launch<32, 64>(c, q, qs, kb, vb, s, max_len, H, Hkv, scale, causal, qvec, out, err);
    case 64: return tc_launch<64, 64>(c, q, qs, kb, vb, s, max_len, H, Hkv, scale, causal, qvec, out, err);
    case 128: return tc_launch<128, 64>(c, q, qs, kb, vb, s, max_len, H, Hkv, scale, causal, qvec, out, err);
    default: return tc_launch<256, 32>(c, q, qs, kb, vb, s, max_len, H, Hkv, scale, causal, qvec, out, err);
    }
}
