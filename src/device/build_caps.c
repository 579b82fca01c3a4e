/* What this build brings to NVFP4, decided at compile time so the answer can never
 * disagree with the code that was actually compiled in.
 *
 * fp4_toolkit: the CUDA toolkit headers we built against carry FP4 types (cuda_fp4.h
 * first shipped with CUDA 12.8). fp4_act_kernel: our FP4 activation-quantization kernel
 * (dynamic per-16 E2M1 quantization of activations with E4M3 block scales) exists; it
 * does not yet, so VSR_HAVE_FP4_ACT_KERNEL is never defined and NVFP4 is refused with
 * that reason even on Blackwell. */
#include "vsr/device.h"

#if defined(VSR_HAVE_CUDA) && defined(__has_include)
#if __has_include(<cuda.h>)
#include <cuda.h> /* CUDA_VERSION only: a macro, no code, no link dependency */
#endif
#endif

#if defined(VSR_HAVE_CUDA) && defined(CUDA_VERSION)
#define BUILD_CUDA_VERSION CUDA_VERSION
#else
#define BUILD_CUDA_VERSION 0
#endif

#if BUILD_CUDA_VERSION >= 12080 && defined(__has_include)
#if __has_include(<cuda_fp4.h>)
#define BUILD_FP4_TOOLKIT 1
#endif
#endif
#ifndef BUILD_FP4_TOOLKIT
#define BUILD_FP4_TOOLKIT 0
#endif

#ifdef VSR_HAVE_FP4_ACT_KERNEL
#define BUILD_FP4_ACT_KERNEL 1
#else
#define BUILD_FP4_ACT_KERNEL 0
#endif

static const vsr_device_build build_caps = {
#ifdef VSR_HAVE_CUDA
    .cuda = true,
#else
    .cuda = false,
#endif
    .cuda_version = BUILD_CUDA_VERSION,
    .fp4_toolkit = BUILD_FP4_TOOLKIT,
    .fp4_act_kernel = BUILD_FP4_ACT_KERNEL,
};

const vsr_device_build *vsr_device_build_caps(void) { return &build_caps; }
