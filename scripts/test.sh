#!/usr/bin/env bash
# The whole test suite: install what is missing, build, run every test, then the
# sanitizer build of the library, tools and tests (AddressSanitizer + UBSan), then the
# ThreadSanitizer build of the worker under concurrent load.
# CUDA tests skip, saying so, where no GPU is present.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
make -j"$(nproc)" all
make test
make asan
make tsan
