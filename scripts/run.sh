#!/usr/bin/env bash
# The main job: set up, build, then verify and print a library tile program with mk-opt.
# Usage: scripts/run.sh [lib/PROGRAM.mlir]   (default: lib/gemm_allreduce.mlir)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh >/dev/null
program="${1:-lib/gemm_allreduce.mlir}"
echo "== mk-opt $program" >&2
build/bin/mk-opt "$program"
