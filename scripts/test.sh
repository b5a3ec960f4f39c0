#!/usr/bin/env bash
# Builds harvest with AddressSanitizer + UndefinedBehaviorSanitizer and warnings as errors,
# then runs the whole suite through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/deps.sh
hv_install_deps
build=${HARVEST_TEST_BUILD:-build-test}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Debug -DHARVEST_SANITIZE=ON -DHARVEST_WERROR=ON \
	-DHARVEST_TESTS=ON >/dev/null
cmake --build "$build" -j "$(nproc)"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
cd "$build"
ctest --output-on-failure -j "$(nproc)" "$@"
