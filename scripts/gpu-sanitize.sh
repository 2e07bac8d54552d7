#!/usr/bin/env bash
# The library's kernels under compute-sanitizer on the GPU machine: memcheck, racecheck and
# synccheck over test/python/gpu_library_ops.py (every library op that lowers, small shapes,
# checked against PyTorch), with one rank and with two ranks taking turns on the GPU. Prints each
# tool's error summary and exits non-zero if any reported an error or a check failed.
#
#   scripts/gpu-sanitize.sh            # from a carried build-pack/ or build-gpu/, as gpu-test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

if [[ ! -e build/lib/libmkc.so ]]; then
  [[ -d build-gpu || ! -f build-pack/gpu.tar.xz ]] || scripts/gpu-test.sh unpack
  ln -sfn build-gpu build
fi
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
export MKC_LIBRARY="$PWD/build/lib/libmkc.so" PYTHONDONTWRITEBYTECODE=1
# Waits stretch under the sanitizer: give up only after 10 minutes, not the test default.
export MKC_WAIT_TIMEOUT=600 MKC_CACHE_DIR="${MKC_CACHE_DIR:-$PWD/build/sanitize-cache}"

status=0
for ranks in 1 2; do
  for tool in memcheck racecheck synccheck; do
    log=$(mktemp)
    echo "== compute-sanitizer --tool $tool, $ranks rank(s)"
    if ! MKC_TEST_RANKS=$ranks MKC_TEST_SHARED_GPU=1 "$sanitizer" --tool "$tool" \
         --target-processes all --error-exitcode 9 \
         python3 test/python/gpu_library_ops.py > "$log" 2>&1; then
      status=1
    fi
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^FAIL|SKIP" "$log" || true
    grep -c "^PASS" "$log" | sed 's/^/checks passed: /'
    if grep -qE "^FAIL|ERROR SUMMARY: [1-9]|RACECHECK SUMMARY: [1-9]" "$log"; then
      status=1
      grep -E -B2 -A12 "Invalid|Race|Barrier|^FAIL" "$log" | head -60
    fi
    rm -f "$log"
  done
done
exit $status
