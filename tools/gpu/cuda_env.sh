# tools/gpu/cuda_env.sh: sourced (from the repository root) by the scripts that run on the GPU
# machine: makes $OUT, and finds cuBLASLt 13 where the image keeps it (torch's nvidia wheels) when
# it is neither in the loader cache nor in /usr/local/cuda/lib64 (the binaries' rpath).
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
# The binaries look for the repository's data/ (the tokenizer the fixture writer copies into every
# built-in, openapi.yaml) where they were built (VSR_DATA_DIR, compiled in); the build scripts record
# that directory in <binaries>/build_root. Where it does not exist here, point it at this copy of the
# repository (without it `vllm-srun fixture --install-builtin` installs nothing).
for _br in .gpu*/build_root; do
  [ -f "$_br" ] || continue
  _root=$(cat "$_br")
  if [ -n "$_root" ] && [ ! -e "$_root/data" ] && [ "$_root" != "$PWD" ]; then
    mkdir -p "$(dirname "$_root")" && ln -sfn "$PWD" "$_root"
  fi
done
if ! ldconfig -p 2>/dev/null | grep -q libcublasLt.so.13 && [ ! -e /usr/local/cuda/lib64/libcublasLt.so.13 ]; then
  _cublas=$(find / -name 'libcublasLt.so.13' 2>/dev/null | head -1)
  [ -n "$_cublas" ] && export LD_LIBRARY_PATH="$(dirname "$_cublas"):${LD_LIBRARY_PATH:-}"
fi
