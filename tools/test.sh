#!/usr/bin/env bash
# Builds Lumen and runs the test suite: `bash tools/test.sh [extra cmake args]`.
# LUMEN_BUILD_DIR picks the build folder (default: build).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/tools/deps.sh"
build="$root/${LUMEN_BUILD_DIR:-build}"
cmake -S "$root" -B "$build" "$@" >/dev/null
cmake --build "$build" -j"$(nproc)"
ctest --test-dir "$build" --output-on-failure -j"$(nproc)"
