#!/usr/bin/env bash
# Sets up, builds, and runs every test through ctest (lit suites, unit tests, tool checks, the
# simulator's runs); then builds again with ASan and UBSan (build-sanitize/) and runs the host
# code's tests there. Tests that need a GPU are reported as skipped on a machine without one.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
ctest --preset default -j "$(nproc)"
cmake --preset sanitize
cmake --build --preset sanitize
ctest --preset sanitize -j "$(nproc)"
