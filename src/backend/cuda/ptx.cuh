/* src/backend/cuda/ptx.cuh: the PTX synchronisation and copy primitives the CUDA kernels share
 * (attention.cu, fp8_gemm.cu, quant_int4.cu), written once from the PTX ISA's cp.async, mbarrier
 * and wgmma sections. Device code only; include from .cu files.
 *   smem_u32          a generic pointer to shared memory as the 32-bit shared address PTX takes
 *   cp_async_*        commit / wait for cp.async groups (sm_80+)
 *   mbar_*            mbarrier init / arrive / arrive with an expected byte count / wait on a phase
 *                     parity (sm_90+: the sm_80 builds of kernels that reference them compile the
 *                     bodies out and never launch those kernels)
 *   wg_fence/commit/wait  wgmma ordering (sm_90a; only reached from code built for it) */
#ifndef VSR_CUDA_PTX_CUH
#define VSR_CUDA_PTX_CUH

#include <stdint.h>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define VSR_PTX_SM90 1
#else
#define VSR_PTX_SM90 0
#endif

__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void mbar_init(uint32_t bar, unsigned count) {
#if VSR_PTX_SM90
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
#endif
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, unsigned bytes) {
#if VSR_PTX_SM90
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
#endif
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
#if VSR_PTX_SM90
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
#endif
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, unsigned parity) {
#if VSR_PTX_SM90
    uint32_t done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!done);
#endif
}

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wg_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

#endif
