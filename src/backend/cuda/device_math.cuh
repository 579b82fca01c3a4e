/* Device helpers shared by the CUDA kernels (norms.cu, activations.cu, deltanet.cu, conv1d.cu, quant_fp8.cu): the activations exactly as
 * the CPU oracle computes them, and the segment lookup over packed sequences. */
#ifndef VSR_CUDA_DEVICE_MATH_CUH
#define VSR_CUDA_DEVICE_MATH_CUH

/* silu and sigmoid from the hardware's exp2 and reciprocal approximations (__expf: MUFU.EX2 of x log2(e);
 * __fdividef: MUFU.RCP and a multiply), not the correctly rounded expf and IEEE division (~25 instructions with
 * their range checks and slow-path branches): SwiGLU with its FP8 twin was issue-bound on them (the same ~172 us
 * at 27B 8 x 512 from BF16 inputs as from FP32, twice its memory floor). Relative error a few ulp (the CPU
 * oracle's exp is its own polynomial, so neither matched it bit for bit); for x below ~-87, 1 + exp(-x) passes
 * 2^126 and the quotient is a signed zero, where the true value is below 1e-36. */
__device__ __forceinline__ float silu_d(float x) { return __fdividef(x, 1.0f + __expf(-x)); }
__device__ __forceinline__ float sigmoid_d(float x) { return __fdividef(1.0f, 1.0f + __expf(-x)); }
__device__ __forceinline__ float softplus_d(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* Per-token FP8 activation scale of a row whose largest magnitude is amax: amax / 448 (e4m3's largest
 * finite value), 1 for an all-zero row. The FP8 linear's quantizer and every producer's FP8 twin take it from
 * here, so a twin is always what the linear would have made. */
#define FP8_E4M3_MAX 448.0f
__device__ __forceinline__ float fp8_row_scale(float amax) { return amax > 0.0f ? amax / FP8_E4M3_MAX : 1.0f; }
__device__ __forceinline__ float absmax4(float4 v) {
    return fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
}

/* Per-token FP8 activation scaling: x / s correctly rounded (as compressed-tensors and the CPU divide), for
 * every x of a row, from the row's r = __frcp_rn(s): q = x r, then one correction q + (x - s q) r (the
 * correction step of CUDA's own division, here from a correctly rounded reciprocal). It replaces a division
 * (~10 instructions with its range check and slow-path branch) by three. Exact, bit for bit, for the
 * quotients an e4m3 code can tell apart (|x / s| >= 2^-12) while s lies in [2^-90, 2^100]; every x / s
 * below 2^-12 gives the same e4m3 code (a signed zero) either way. Outside that range of s (a row whose
 * amax is below ~3.6e-25, or not finite) the division itself. Tested against x / s on the GPU over 2^26
 * draws (tests/test_cuda_quant.c fp8_scale_division). */
struct fp8_div {
    float s, r;
    int divide; /* 1: s outside [2^-90, 2^100]: divide */
};
__device__ __forceinline__ fp8_div fp8_div_of(float s) {
    fp8_div d;
    d.s = s;
    d.divide = !(s >= 0x1p-90f && s <= 0x1p100f);
    d.r = d.divide ? 0.0f : __frcp_rn(s);
    return d;
}
__device__ __forceinline__ float fp8_scaled(float x, const fp8_div &d) {
    if (d.divide) return x / d.s; /* uniform over the row */
    const float q = __fmul_rn(x, d.r);
    return __fmaf_rn(__fmaf_rn(-q, d.s, x), d.r, q);
}

/* Index of the last of n ascending `first` values that is <= x (first[0] <= x): which packed
 * sequence a row (or chunk) belongs to. */
template <typename T, typename U>
__device__ __forceinline__ int last_le_d(const T *first, int n, U x) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (first[mid] <= x) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

#endif
