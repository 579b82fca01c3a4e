/* src/backend/cuda/rope.cu: rotary position embedding (backend.h rope), in place on the first rot columns
 * of each head: x1' = x1 cos - x2 sin, x2' = x2 cos + x1 sin, positions from the segment table (pos0 of each
 * sequence, or the staged row table of a bucketed forward), cos/sin from the model's tables; one thread per (row, head, pair).
 *
 * Floor: bytes read and written / 4.19 TB/s (memory-bound). Test: tests/test_cuda_ops.c (against the CPU
 * oracle, 9e-8 normalised error). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/ops_internal.cuh" /* first: wraps the C headers in extern "C" */

__global__ void k_rope(float *x, int64_t xs, const dsegs s, const int64_t *__restrict__ pos_tab, int H, int64_t hs,
                       int half, const float *__restrict__ cos_t, const float *__restrict__ sin_t) {
    int64_t r = blockIdx.y;
    int sg = seg_of_row_d(s, r);
    int64_t pos = (pos_tab ? pos_tab[sg] : s.pos0[sg]) + (r - s.start[sg]);
    for (int u = blockIdx.x * blockDim.x + threadIdx.x; u < H * half; u += gridDim.x * blockDim.x) {
        int h = u / half, i = u % half;
        float *xh = x + r * xs + h * hs;
        float cs = cos_t[pos * half + i], sn = sin_t[pos * half + i];
        float x1 = xh[i], x2 = xh[i + half];
        xh[i] = x1 * cs - x2 * sn;
        xh[i + half] = x2 * cs + x1 * sn;
    }
}

vsr_status cu_rope(void *ctx, float *x, int64_t xs, const vsr_segs *seg, int H, int64_t hs, int rot,
                          const float *cos_t, const float *sin_t, int64_t max_pos, vsr_err *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    ENTER(c);
    if (seg->n <= 0) return VSR_OK;
    for (int i = 0; i < seg->n; i++)
        if (seg->pos0[i] < 0 || seg->pos0[i] + seg->len[i] > max_pos)
            return vsr_err_set(err, VSR_E_INVALID, "rope: positions %lld..%lld exceed the table of %lld positions",
                               (long long)seg->pos0[i], (long long)(seg->pos0[i] + seg->len[i] - 1), (long long)max_pos);
    dsegs s;
    int64_t rows;
    vsr_status st = segs_to_dev(c, seg, "rope", &s, &rows, NULL, err);
    if (st || rows <= 0) return st;
    int half = rot / 2;
    if (half <= 0) return VSR_OK;
    PROF(c, "rope");
    if ((st = kp_guard(c, x, sizeof(float) * (size_t)((rows - 1) * xs + (H - 1) * hs + rot), "rope", err))) return st;
    twin_clobber(c, x, sizeof(float) * (size_t)((rows - 1) * xs + (H - 1) * hs + rot));
    dim3 grid(blocks_for((int64_t)H * half, 128) > 16 ? 16 : blocks_for((int64_t)H * half, 128), (unsigned)rows);
    /* a bucketed forward's positions come from the staged row table (its first n entries) */
    const cuda_ctx_priv *p = priv(c);
    if (seg->staged && p->tab_n < seg->n)
        return vsr_err_set(err, VSR_E_INTERNAL, "rope: the staged row table holds %lld positions for %d sequences",
                           (long long)p->tab_n, seg->n);
    k_rope<<<grid, 128, 0, c->stream>>>(x, xs, s, seg->staged ? p->tab_dev : NULL, H, hs, half, cos_t, sin_t);
    return cuda_check_launch(c, "rope", err);
}
