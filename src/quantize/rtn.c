/* Round-to-nearest helpers for the package writer: the NVFP4 quantizer with a given (fused)
 * global scale, and row-parallel drivers over the scalar quantizers of src/format/quantize.c.
 *
 * llm-compressor's RTN NVFP4 (QuantizationModifier) computes each Linear's weight global scale
 * from its own amax, then replaces those of q/k/v and of gate/up by their minimum
 * (update_fused_layer_weight_global_scales: vLLM runs each group as one fused GEMM with one
 * global scale) and only then computes the per-16 block scales. So the block scales of a fused
 * Linear use the shared scale; the arithmetic is otherwise the one of vsr_quantize_nvfp4_rtn. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "quantize/quantize_internal.h"
#include "vsr/dtype.h"
#include "vsr/quant.h"

#define FP8_EPS 0.125f /* compressed-tensors' eps for an FP8 scale */

static inline float bf16_round(float f) { return vsr_bf16_to_f32(vsr_f32_to_bf16(f)); }
static inline float clampf(float x, float lo, float hi) { return x < lo ? lo : x > hi ? hi : x; }

float qz_bf16_absmax(const uint16_t *w, int64_t n) {
    float amax = 0.0f;
    for (int64_t i = 0; i < n; i++) amax = fmaxf(amax, fabsf(vsr_bf16_to_f32(w[i])));
    return amax;
}

float qz_nvfp4_global_scale(float amax) {
    amax = fmaxf(amax, 0x1p-126f); /* torch.finfo(bf16).tiny */
    /* Python's 2688.0 / tensor is tensor.reciprocal() * 2688 in torch: two BF16 roundings. */
    float gs = bf16_round(bf16_round(1.0f / amax) * (448.0f * 6.0f));
    return isfinite(gs) ? gs : 1.0f; /* the library's nan_to_num(nan=1, posinf=1) */
}

void qz_nvfp4_rows(const uint16_t *w, int64_t rows, int64_t K, float gs, uint8_t *packed,
                   uint8_t *scale) {
    int64_t G = K / 16;
    memset(packed, 0, (size_t)(rows * K / 2));
    for (int64_t n = 0; n < rows; n++) {
        for (int64_t b = 0; b < G; b++) {
            const uint16_t *blk = w + n * K + b * 16;
            float bmax = 0.0f;
            for (int i = 0; i < 16; i++) bmax = fmaxf(bmax, fabsf(vsr_bf16_to_f32(blk[i])));
            float local = gs * bf16_round(bmax / 6.0f);
            uint8_t code = vsr_f32_to_e4m3fn(clampf(local, -448.0f, 448.0f));
            if (vsr_e4m3fn_to_f32(code) == 0.0f) code = vsr_f32_to_e4m3fn(FP8_EPS);
            scale[n * G + b] = code;
            float q = vsr_e4m3fn_to_f32(code) / gs;
            for (int i = 0; i < 16; i++) {
                float x = clampf(vsr_bf16_to_f32(blk[i]) / q, -6.0f, 6.0f);
                int64_t k = b * 16 + i;
                packed[n * (K / 2) + k / 2] |= (uint8_t)(vsr_f32_to_e2m1(x) << (4 * (k % 2)));
            }
        }
    }
}

/* ---- a small fork-join pool ---- */

typedef struct par_job {
    void (*fn)(void *, int64_t);
    void *ctx;
    int64_t n, next;
    pthread_mutex_t mu;
} par_job;

static void *par_worker(void *arg) {
    par_job *j = arg;
    for (;;) {
        pthread_mutex_lock(&j->mu);
        int64_t t = j->next++;
        pthread_mutex_unlock(&j->mu);
        if (t >= j->n) return NULL;
        j->fn(j->ctx, t);
    }
}

void qz_parallel(int64_t ntasks, int threads, void (*fn)(void *ctx, int64_t t), void *ctx) {
    if (threads <= 0) threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (threads < 1) threads = 1;
    if (threads > 64) threads = 64;
    if (threads > ntasks) threads = (int)ntasks;
    par_job j = {.fn = fn, .ctx = ctx, .n = ntasks, .next = 0};
    pthread_mutex_init(&j.mu, NULL);
    pthread_t tid[64];
    int started = 0;
    for (int i = 1; i < threads; i++)
        if (pthread_create(&tid[started], NULL, par_worker, &j) == 0) started++;
    par_worker(&j); /* the caller works too, so a failed pthread_create only slows it down */
    for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
    pthread_mutex_destroy(&j.mu);
}

typedef struct fp8_job {
    const uint16_t *w;
    int64_t N, K;
    uint8_t *w8;
    uint16_t *scale;
} fp8_job;

#define FP8_ROWS 64
static void fp8_task(void *ctx, int64_t t) {
    fp8_job *j = ctx;
    int64_t r0 = t * FP8_ROWS, r1 = r0 + FP8_ROWS > j->N ? j->N : r0 + FP8_ROWS;
    vsr_quantize_fp8_rtn(j->w + r0 * j->K, r1 - r0, j->K, j->w8 + r0 * j->K, j->scale + r0);
}

void qz_fp8_parallel(const uint16_t *w, int64_t N, int64_t K, int threads, uint8_t *w8,
                     uint16_t *scale) {
    fp8_job j = {w, N, K, w8, scale};
    qz_parallel((N + FP8_ROWS - 1) / FP8_ROWS, threads, fp8_task, &j);
}
