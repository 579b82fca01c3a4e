# tools/gpu/cuda_env.sh: sourced (from the repository root) by the scripts that run on the GPU
# machine: makes $OUT, and finds cuBLASLt 13 where the image keeps it (torch's nvidia wheels) when
# it is neither in the loader cache nor in /usr/local/cuda/lib64 (the binaries' rpath).
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
if ! ldconfig -p 2>/dev/null | grep -q libcublasLt.so.13 && [ ! -e /usr/local/cuda/lib64/libcublasLt.so.13 ]; then
  _cublas=$(find / -name 'libcublasLt.so.13' 2>/dev/null | head -1)
  [ -n "$_cublas" ] && export LD_LIBRARY_PATH="$(dirname "$_cublas"):${LD_LIBRARY_PATH:-}"
fi
