/* src/backend/cuda/embed.cu: the model's input and output rows (backend.h): embed (rows of the BF16
 * table widened to FP32, ids checked on the host and staged through pinned memory so a recorded forward
 * replays the copy), gather_rows (rows by index, up to 256 indices by value, more through scratch) and readout
 * (logits = h . R^T: F32 weights by cuBLASLt FP32, BF16 weights as torch's bf16 matmul: h rounded to BF16,
 * FP32 accumulation, the result rounded to BF16).
 *
 * Floor: embed and gather_rows, bytes read and written / 4.19 TB/s; readout, a linear's (linear.cu). Test:
 * tests/test_cuda_ops.c (embed exact, readout against the CPU oracle). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/ops_internal.cuh" /* first: wraps the C headers in extern "C" */

/* round to bf16 and back (the bf16 readout's result rounding) */
__global__ void k_round_bf16(float *x, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = __bfloat162float(__float2bfloat16_rn(x[i]));
}

__global__ void k_embed(const __nv_bfloat16 *__restrict__ table, const int32_t *__restrict__ ids, int64_t D,
                        float *__restrict__ y) {
    int64_t t = blockIdx.y;
    const __nv_bfloat16 *row = table + (int64_t)ids[t] * D;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < D; i += (int64_t)gridDim.x * blockDim.x)
        y[t * D + i] = __bfloat162float(row[i]);
}

#define GATHER_MAX 256
typedef struct drows {
    int64_t r[GATHER_MAX];
} drows;

__global__ void k_gather(const float *__restrict__ src, const drows rows, const int64_t *__restrict__ rows_dev, int64_t D,
                         float *__restrict__ dst) {
    int64_t r = blockIdx.y;
    int64_t from = rows_dev ? rows_dev[r] : rows.r[r];
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < D; i += (int64_t)gridDim.x * blockDim.x)
        dst[r * D + i] = src[from * D + i];
}

vsr_status cu_embed(void *ctx, const vsr_bweight *table, const int32_t *ids, int64_t n, float *y, vsr_err *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    ENTER(c);
    if (table->v.kind != VSR_WK_BF16)
        return vsr_err_set(err, VSR_E_UNSUPPORTED, "%s: the embedding table must be BF16 (found %s)", table->name,
                           wkind_names_cuda[table->v.kind]);
    for (int64_t t = 0; t < n; t++)
        if (ids[t] < 0 || ids[t] >= table->v.N)
            return vsr_err_set(err, VSR_E_INVALID, "token id %d at position %lld is outside the vocabulary [0, %lld)",
                               ids[t], (long long)t, (long long)table->v.N);
    if (n <= 0) return VSR_OK;
    PROF(c, "embed");
    twin_clobber(c, y, sizeof(float) * (size_t)(n * table->v.K));
    /* through a pinned buffer: a recorded forward replays this copy with the next request's ids */
    vsr_status st = ids_stage(c, ids, n, err);
    if (st) return st;
    cuda_ctx_priv *p = priv(c);
    if ((st = cuda_check(c, cudaMemcpyAsync(p->ids_dev, p->ids_host, sizeof(int32_t) * (size_t)n,
                                            cudaMemcpyHostToDevice, c->stream),
                         "embed: token ids to device", err)))
        return st;
    /* the row table of a bucketed forward goes with them (a replay copies both) */
    if (p->tab_armed && p->tab_n > 0 &&
        (st = cuda_check(c, cudaMemcpyAsync(p->tab_dev, p->tab_host, sizeof(int64_t) * (size_t)p->tab_n,
                                            cudaMemcpyHostToDevice, c->stream),
                         "embed: row table to device", err)))
        return st;
    p->tab_armed = 0;
    if (!p->capturing) cudaEventRecord(p->ids_ev, c->stream);
    p->embed_vocab = table->v.N;
    dim3 grid(blocks_for(table->v.K, 256) > 8 ? 8 : blocks_for(table->v.K, 256), (unsigned)n);
    k_embed<<<grid, 256, 0, c->stream>>>((const __nv_bfloat16 *)table->w, p->ids_dev, table->v.K, y);
    return cuda_check_launch(c, "embed", err);
}

vsr_status cu_gather_rows(void *ctx, const float *src, const int64_t *rows, int64_t n, int64_t D, float *dst,
                                 vsr_err *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    ENTER(c);
    if (n <= 0) return VSR_OK;
    if (n > 65535) return vsr_err_set(err, VSR_E_UNSUPPORTED, "cuda:%d: gather_rows: %lld rows (at most 65535)", c->device, (long long)n);
    PROF(c, "gather_rows");
    for (int64_t i = 0; i < n; i++) {
        vsr_status sg = kp_guard(c, src + rows[i] * D, sizeof(float) * (size_t)D, "gather_rows", err);
        if (sg) return sg;
    }
    twin_clobber(c, dst, sizeof(float) * (size_t)(n * D));
    drows r;
    const int64_t *rd = NULL;
    if (n <= GATHER_MAX) {
        memcpy(r.r, rows, sizeof(int64_t) * (size_t)n);
    } else {
        void *d;
        vsr_status st = cuda_scratch(c, sizeof(int64_t) * (size_t)n, &d, err);
        if (st || (st = cuda_check(c, cudaMemcpyAsync(d, rows, sizeof(int64_t) * (size_t)n, cudaMemcpyHostToDevice, c->stream),
                                   "gather_rows: indices to device", err)))
            return st;
        rd = (const int64_t *)d;
    }
    dim3 grid(blocks_for(D, 256) > 16 ? 16 : blocks_for(D, 256), (unsigned)n);
    k_gather<<<grid, 256, 0, c->stream>>>(src, r, rd, D, dst);
    return cuda_check_launch(c, "gather_rows", err);
}

/* gather_rows, the indices read on the device from the staged row table (a replay reads the next
 * request's); rows holds the same values, for the checks. */
vsr_status cu_gather_rows_staged(void *ctx, const float *src, const int64_t *rows, int64_t tab_off, int64_t n,
                                 int64_t D, float *dst, vsr_err *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    ENTER(c);
    cuda_ctx_priv *p = priv(c);
    if (n <= 0) return VSR_OK;
    if (n > 65535) return vsr_err_set(err, VSR_E_UNSUPPORTED, "cuda:%d: gather_rows: %lld rows (at most 65535)", c->device, (long long)n);
    if (tab_off < 0 || tab_off + n > p->tab_n)
        return vsr_err_set(err, VSR_E_INTERNAL, "cuda:%d: gather_rows: indices %lld..%lld are outside the staged row table (%lld)",
                           c->device, (long long)tab_off, (long long)(tab_off + n), (long long)p->tab_n);
    PROF(c, "gather_rows");
    for (int64_t i = 0; i < n; i++) {
        if (rows[i] != p->tab_host[tab_off + i])
            return vsr_err_set(err, VSR_E_INTERNAL, "cuda:%d: gather_rows: index %lld differs from the staged row table",
                               c->device, (long long)i);
        vsr_status sg = kp_guard(c, src + rows[i] * D, sizeof(float) * (size_t)D, "gather_rows", err);
        if (sg) return sg;
    }
    twin_clobber(c, dst, sizeof(float) * (size_t)(n * D));
    const drows unused = {{0}}; /* the indices come from the table */
    dim3 grid(blocks_for(D, 256) > 16 ? 16 : blocks_for(D, 256), (unsigned)n);
    k_gather<<<grid, 256, 0, c->stream>>>(src, unused, p->tab_dev + tab_off, D, dst);
    return cuda_check_launch(c, "gather_rows", err);
}

vsr_status cu_readout(void *ctx, const float *h, int64_t M, const vsr_bweight *R, float *logits, vsr_err *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    ENTER(c);
    const int64_t N = R->v.N, D = R->v.K;
    PROF(c, "readout");
    vsr_status sg = M > 0 ? kp_guard(c, h, sizeof(float) * (size_t)(M * D), "readout", err) : VSR_OK;
    if (sg) return sg;
    twin_clobber(c, logits, sizeof(float) * (size_t)(M * N));
    if (R->v.kind == VSR_WK_F32) return lt_gemm(c, CUDA_R_32F, h, M, R->w, N, D, CUDA_R_32F, logits, 0, err);
    if (R->v.kind != VSR_WK_BF16)
        return vsr_err_set(err, VSR_E_UNSUPPORTED, "readout: weight must be F32 or BF16 (found %s)",
                           wkind_names_cuda[R->v.kind]);
    /* torch: bf16 @ bf16 accumulates in FP32 and rounds the result to bf16 */
    void *hb;
    vsr_status st;
    if ((st = cuda_scratch(c, sizeof(__nv_bfloat16) * (size_t)(M * D), &hb, err)) ||
        (st = cuda_f32_to_bf16(c, h, M * D, (__nv_bfloat16 *)hb, err)) ||
        (st = cuda_gemm_bf16(c, (const __nv_bfloat16 *)hb, M, (const __nv_bfloat16 *)R->w, N, D, logits, 0, err)))
        return st;
    k_round_bf16<<<blocks_for(M * N, 256), 256, 0, c->stream>>>(logits, M * N);
    return cuda_check_launch(c, "readout rounding", err);
}
