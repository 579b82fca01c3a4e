/* src/backend/cuda/ptx.cuh: the PTX synchronisation and copy primitives the CUDA kernels share
 * (attention.cu, fp8_gemm.cu, int4_stream.cu, int4_tile.cu), written once from the PTX ISA's cp.async, mbarrier
 * and wgmma sections. Device code only; include from .cu files.
 *   smem_u32          a generic pointer to shared memory as the 32-bit shared address PTX takes
 *   cp_async_*        commit / wait for cp.async groups (sm_80+)
 *   tma_load_2d       a TMA box of a 2-D tensor map into shared memory, onto an mbarrier (sm_90+)
 *   mbar_*            mbarrier init / arrive / arrive with an expected byte count / wait on a phase
 *                     parity (sm_90+: the sm_80 builds of kernels that reference them compile the
 *                     bodies out and never launch those kernels)
 *   wg_fence/commit/wait  wgmma ordering (sm_90a; only reached from code built for it)
 *   wg_desc, wg_desc_k128  wgmma shared-memory matrix descriptors (128-byte swizzle)
 *   fence_proxy_async  shared-memory writes of the generic proxy made visible to wgmma and TMA (sm_90+)
 *   reg_fence         pins registers to a point of the program (wgmma writes its accumulators behind the
 *                     compiler's back until wait_group)
 *   WG_REGS*, WG_OUT*  the accumulator operand lists of the wgmma wrappers
 *   cluster_max, cluster_exit  a value reduced over a thread-block cluster's CTAs through distributed shared
 *                     memory, and the wait that keeps a CTA's shared memory alive until the others have read it
 *                     (sm_90+, likewise) */
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

/* 16 bytes global -> shared; src_bytes 0 zero-fills (the source is not read) */
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

/* TMA: the box of a 2-D tensor map (a __grid_constant__ kernel parameter's address) at coordinates (c0 inner, c1
 * outer) into shared memory at dst, completing its bytes on the mbarrier bar (sm_90+) */
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const void *map, uint32_t bar, int c0, int c1) {
#if VSR_PTX_SM90
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::"r"(dst),
                 "l"((uint64_t)map), "r"(bar), "r"(c0), "r"(c1)
                 : "memory");
#endif
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

/* The FP32 accumulator operands of a wgmma m64nN wrapper: the register list (WG_REGS32/64/128, operands %0..) for
 * its PTX and the matching "+f" constraints (WG_OUT32/64/128(d)), spelled once for every wrapper */
#define WG_R0 "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15"
#define WG_R16 "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
#define WG_R32 "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47"
#define WG_R48 "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
#define WG_R48_8 "%48,%49,%50,%51,%52,%53,%54,%55" /* m64n112: 56 accumulators */
#define WG_R64 "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79"
#define WG_R80 "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95"
#define WG_R96 "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111"
#define WG_R112 "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127"
#define WG_REGS32 "{" WG_R0 "," WG_R16 "}"
#define WG_REGS64 "{" WG_R0 "," WG_R16 "," WG_R32 "," WG_R48 "}"
#define WG_REGS128 "{" WG_R0 "," WG_R16 "," WG_R32 "," WG_R48 "," WG_R64 "," WG_R80 "," WG_R96 "," WG_R112 "}"
#define WG_OUT4(d, i) "+f"(d[(i)]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3])
#define WG_OUT16(d, i) WG_OUT4(d, i), WG_OUT4(d, (i) + 4), WG_OUT4(d, (i) + 8), WG_OUT4(d, (i) + 12)
#define WG_OUT32(d) WG_OUT16(d, 0), WG_OUT16(d, 16)
#define WG_OUT64(d) WG_OUT32(d), WG_OUT16(d, 32), WG_OUT16(d, 48)
#define WG_OUT128(d) WG_OUT64(d), WG_OUT16(d, 64), WG_OUT16(d, 80), WG_OUT16(d, 96), WG_OUT16(d, 112)

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wg_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void reg_fence(float &x) { asm volatile("" : "+f"(x)::"memory"); }
__device__ __forceinline__ void reg_fence(uint32_t &x) { asm volatile("" : "+r"(x)::"memory"); }
template <int R> __device__ __forceinline__ void reg_fence(float *d) {
#pragma unroll
    for (int i = 0; i < R; i++) reg_fence(d[i]);
}
/* shared-memory matrix descriptor: start address, leading / stride byte offsets, 128-byte swizzle */
__device__ __forceinline__ uint64_t wg_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32) |
           (1ull << 62);
}
/* a K-major operand in 128-byte swizzled rows: LBO unused (16), SBO = 8 rows x 128 bytes */
__device__ __forceinline__ uint64_t wg_desc_k128(uint32_t addr) { return wg_desc(addr, 16, 1024); }

/* The max of v over the CL CTAs of this thread-block cluster (v: the same value in every thread of a CTA, which
 * every thread passes; slot: a shared float of the CTA's). Each CTA's value is read from its shared memory by the
 * others; the call ends with this CTA's arrival at the cluster barrier that cluster_exit waits on, so a CTA must
 * call cluster_exit before it exits (its slot may still be read until then). max is exact in any order: every
 * CTA gets the same value bit for bit. */
template <int CL>
__device__ __forceinline__ float cluster_max(float v, float *slot) {
#if VSR_PTX_SM90
    if (threadIdx.x == 0) *slot = v;
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
    const uint32_t mine = smem_u32(slot);
    float m = v;
#pragma unroll
    for (unsigned q = 0; q < CL; q++) {
        uint32_t a;
        float o;
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(a) : "r"(mine), "r"(q));
        asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(o) : "r"(a) : "memory");
        m = fmaxf(m, o);
    }
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
    return m;
#else
    return v;
#endif
}
__device__ __forceinline__ void cluster_exit() {
#if VSR_PTX_SM90
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
#endif
}

#endif
