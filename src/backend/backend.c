/* src/backend/backend.c: picks the backend for a placed device. */
#include "backend/backend_cuda.h"

#include <stdio.h>

vsr_status vsr_backend_for_device(const vsr_device *d, int threads, vsr_backend *out, vsr_err *err) {
    out->ops = NULL, out->ctx = NULL;
    if (!d || d->kind == VSR_DEV_CPU) return vsr_backend_cpu_new(threads, out, err);
    char id[32];
    vsr_device_id(d, id, sizeof id);
    switch (d->kind) {
    case VSR_DEV_CUDA:
#ifdef VSR_HAVE_CUDA
        return vsr_backend_cuda_new(d->index, out, err);
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
