/* src/backend/backend_cuda.h: backend constructors that depend on the device.
 * No CUDA header here: callers outside src/backend/cuda see only the backend table. */
#ifndef VSR_BACKEND_CUDA_H
#define VSR_BACKEND_CUDA_H

#include "backend/backend.h"
#include "vsr/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The CUDA backend on device `device_index` (compute capability 8.0+). Exists only in a
 * build with nvcc (VSR_HAVE_CUDA); VSR_E_DEVICE when the runtime finds no such device. */
vsr_status vsr_backend_cuda_new(int device_index, vsr_backend *out, vsr_err *err);

/* The backend for `d` (NULL = the CPU): CPU with `threads` workers, or CUDA on d->index.
 * A build without nvcc refuses a CUDA device ("this vllm-srun was built without CUDA ...");
 * there is no ROCm backend. Never falls back to the CPU silently.
 * `dtype` ("auto" or NULL, or "bfloat16") and `autotune_dir` (NULL = none) configure the
 * GPU kernels' rules (docs/cuda.md); the CPU takes only "auto". */
vsr_status vsr_backend_for_device(const vsr_device *d, int threads, const char *dtype,
                                  const char *autotune_dir, vsr_backend *out, vsr_err *err);

#ifdef __cplusplus
}
#endif

#endif
