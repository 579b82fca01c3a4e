/* src/backend/cuda/weak_quant.cu: refusing defaults for the quantized-linear hooks of
 * cuda_internal.h, used until src/backend/cuda/quant_*.cu define them.
 *
 * Why weak and in their own file: libvsr.a is a static archive, and the linker pulls the
 * first member (in archive order) that defines a still-undefined symbol. The Makefile adds
 * objects in sorted path order, so quant_*.cu come before this file: a strong definition
 * there is pulled first and this file's weak one is ignored; with no quant_*.cu this file
 * answers with a refusal instead of a link error. A weak definition in ops.cu would shadow
 * the real ones (the member defining it is already loaded), hence the separate file. */
#include <stdio.h>

#include "backend/cuda/cuda_internal.h"

extern "C" {

__attribute__((weak)) vsr_status cuda_int4_upload(cuda_ctx *c, const vsr_weight_view *v,
                                                  vsr_bweight *b, vsr_err *err) {
    (void)b;
    return vsr_err_set(err, VSR_E_UNSUPPORTED,
                       "cuda:%d: %s: int4 (W4A16) weights are not implemented in this build of the "
                       "CUDA backend",
                       c->device, v->name ? v->name : "(weight)");
}

__attribute__((weak)) vsr_status cuda_fp8_upload(cuda_ctx *c, const vsr_weight_view *v,
                                                 vsr_bweight *b, vsr_err *err) {
    (void)b;
    return vsr_err_set(err, VSR_E_UNSUPPORTED,
                       "cuda:%d: %s: FP8 (W8A8) weights are not implemented in this build of the "
                       "CUDA backend",
                       c->device, v->name ? v->name : "(weight)");
}

__attribute__((weak)) vsr_status cuda_int4_linear(cuda_ctx *c, const float *x, int64_t M,
                                                  const vsr_bweight *w, float *y, int accumulate,
                                                  vsr_err *err) {
    (void)x, (void)M, (void)y, (void)accumulate;
    return vsr_err_set(err, VSR_E_UNSUPPORTED, "cuda:%d: %s: no int4 linear in this build",
                       c->device, w->name);
}

__attribute__((weak)) vsr_status cuda_fp8_linear(cuda_ctx *c, const float *x, int64_t M,
                                                 const vsr_bweight *w, float *y, int accumulate,
                                                 vsr_err *err) {
    (void)x, (void)M, (void)y, (void)accumulate;
    return vsr_err_set(err, VSR_E_UNSUPPORTED, "cuda:%d: %s: no FP8 linear in this build",
                       c->device, w->name);
}

__attribute__((weak)) void cuda_quant_release(cuda_ctx *c, vsr_bweight *b) { (void)c, (void)b; }

__attribute__((weak)) void cuda_quant_ctx_free(cuda_ctx *c) { (void)c; }
}
