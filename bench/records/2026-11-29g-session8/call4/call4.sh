#!/bin/bash
# session 8, call 4 (0f7cf9e, the binaries of call 3): the 27B-shaped BF16 package end to end, then the
# transformers peer on the same package and ids (PyTorch fallbacks, then flash-linear-attention 0.6.0 from .whl)
set -u
tar xzf .gpu-pk/bins.tgz
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader
GPU_OUT=.gpu-me VSR_TORCH=1 bash tools/gpu/e2e27.sh bf16
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader
