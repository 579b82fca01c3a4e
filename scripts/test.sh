#!/usr/bin/env bash
# The whole test suite: install what is missing, build, run every test, then the
# sanitizer build of the library, tools and tests (AddressSanitizer + UBSan), then the
# ThreadSanitizer build of the worker under concurrent load, then each libFuzzer target for
# FUZZ_SECONDS (20) seconds from its committed seeds.
# CUDA tests skip (exit 77), saying so, where no GPU is present; any other suite that skips
# fails the run (tests/run.sh), and the last line of each run is `N passed, N failed, N skipped`.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
make -j"$(nproc)" all
make test
make asan
make tsan
make fuzz-run
