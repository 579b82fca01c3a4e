/* Device helpers shared by the CUDA kernels (ops.cu, deltanet.cu): the activations exactly as
 * the CPU oracle computes them, and the segment lookup over packed sequences. */
#ifndef VSR_CUDA_DEVICE_MATH_CUH
#define VSR_CUDA_DEVICE_MATH_CUH

__device__ __forceinline__ float silu_d(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float sigmoid_d(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float softplus_d(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

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
