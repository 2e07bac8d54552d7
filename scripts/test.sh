#!/usr/bin/env bash
# Sets up, builds, and runs every test through ctest (lit suites, unit tests, tool checks).
# Tests that need a GPU are reported as skipped on a machine without one.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
ctest --preset default -j "$(nproc)"
