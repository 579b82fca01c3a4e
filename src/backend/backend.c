/* src/backend/backend.c: picks the backend for a placed device. */
#include "backend/backend_cuda.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#ifdef VSR_HAVE_CUDA
/* src/backend/cuda/quant_common.cu (C linkage, no CUDA types). */
vsr_status cuda_quant_set_options(void *ctx, const char *dtype, const char *autotune_dir, vsr_err *err);
#endif

static bool dtype_auto(const char *dtype) { return !dtype || !dtype[0] || !strcmp(dtype, "auto"); }

vsr_status vsr_backend_for_device(const vsr_device *d, int threads, const char *dtype,
                                  const char *autotune_dir, vsr_backend *out, vsr_err *err) {
    out->ops = NULL, out->ctx = NULL;
    if (!dtype_auto(dtype) && strcmp(dtype, "bfloat16"))
        return vsr_err_set(err, VSR_E_INVALID, "--dtype %s: expected auto or bfloat16", dtype);
    if (!d || d->kind == VSR_DEV_CPU) {
        if (!dtype_auto(dtype))
            return vsr_err_set(err, VSR_E_INVALID,
                               "cpu: --dtype %s is not available on the CPU (expected auto: FP32 "
                               "activations over the stored weights)", dtype);
        return vsr_backend_cpu_new(threads, out, err);
    }
    char id[32];
    vsr_device_id(d, id, sizeof id);
    switch (d->kind) {
    case VSR_DEV_CUDA:
#ifdef VSR_HAVE_CUDA
    {
        vsr_status st = vsr_backend_cuda_new(d->index, out, err);
        if (st == VSR_OK && (st = cuda_quant_set_options(out->ctx, dtype_auto(dtype) ? "auto" : dtype,
                                                         autotune_dir, err)) != VSR_OK)
            vsr_backend_destroy(out);
        return st;
    }
#else
        return vsr_err_set(err, VSR_E_UNSUPPORTED,
                           "%s: this vllm-srun was built without CUDA (nvcc was not found at build "
                           "time); rebuild where nvcc is on PATH, or run with --device cpu",
                           id);
#endif
    case VSR_DEV_ROCM:
        return vsr_err_set(err, VSR_E_UNSUPPORTED,
                           "%s: this vllm-srun has no ROCm backend; run with --device cpu", id);
    default:
        return vsr_err_set(err, VSR_E_INVALID, "%s: unknown device kind %d", id, (int)d->kind);
    }
}
