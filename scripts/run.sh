#!/usr/bin/env bash
# The main job: set up and build, then take a library tile program (default
# lib/gemm_allreduce.mlir) through mk-opt (parse, verify, print) and mkc (all passes, CUDA C++,
# and an sm_90a cubin through NVRTC, without a GPU), for 2 nodes x 4 GPUs.
# Usage: scripts/run.sh [lib/PROGRAM.mlir [mkc flags...]]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh >/dev/null
program="${1:-lib/gemm_allreduce.mlir}"
shift || true
flags=("$@")
((${#flags[@]})) || flags=(--topology 2x4 --shape M=8192,N=8192,K=8192)
name="$(basename "$program" .mlir)"

echo "== mk-opt $program" >&2
build/bin/mk-opt "$program"
echo "== mkc $program ${flags[*]} --emit=cuda -o build/$name.cu" >&2
build/bin/mkc "$program" "${flags[@]}" --emit=cuda -o "build/$name.cu"
echo "== mkc $program ${flags[*]} -o build/$name.cubin --ptxas-report" >&2
build/bin/mkc "$program" "${flags[@]}" -o "build/$name.cubin" --ptxas-report
ls -l "build/$name.cu" "build/$name.cubin" >&2
