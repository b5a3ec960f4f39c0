#!/usr/bin/env bash
# Installs what harvest needs (Debian 12 packages), configures and builds build/harvest.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/deps.sh
hv_install_deps
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DHARVEST_TESTS=OFF >/dev/null
cmake --build build -j "$(nproc)"
echo "harvest: built build/harvest" >&2
