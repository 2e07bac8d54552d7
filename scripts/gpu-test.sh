#!/usr/bin/env bash
# The GPU tests (ctest label gpu) on the GPU machine, from a build made on the dev machine.
#
#   scripts/gpu-test.sh pack   # dev machine: build, then put in build-gpu/ what the GPU tests
#                              # need (ctest's files and the stripped binaries they run) and
#                              # the benchmarks' binaries
#   scripts/gpu-test.sh        # GPU machine, with build-gpu/ carried there: run them
#
# The GPU machine has cmake (ctest), CUDA, PyTorch and the driver, but no LLVM: binaries are
# static but for libc, libnvrtc and the driver, which they open at run time. ctest's files name
# the build's absolute paths, so the repository must sit where it was built (the device tool
# copies it to the same place) and build-gpu/ stands in for build/ there.
set -euo pipefail
cd "$(dirname "$0")/.."

# NVLink multicast stays off on the shared GPU machines.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

pack() {
  scripts/build.sh
  rm -rf build-gpu
  # ctest's own files, everywhere in the tree.
  (cd build && find . -name 'CTestTestfile.cmake' -o -name '*_include-*.cmake' \
     -o -name '*_tests-*.cmake' -o -name 'CTestCustom.cmake') |
    while read -r file; do
      mkdir -p "build-gpu/$(dirname "$file")" && cp "build/$file" "build-gpu/$file"
    done
  # What the GPU tests run: each test's files inside the build tree, and the C ABI's library.
  ctest --test-dir build -L gpu --show-only=json-v1 |
    python3 -c '
import json, os, sys
build = os.path.realpath("build")
for test in json.load(sys.stdin)["tests"]:
    for word in test["command"]:
        if word.startswith(build + "/") and os.path.isfile(word):
            print(os.path.relpath(word, build))' |
    sort -u | while read -r binary; do
      mkdir -p "build-gpu/$(dirname "$binary")" && strip -o "build-gpu/$binary" "build/$binary"
    done
  mkdir -p build-gpu/lib && strip -o build-gpu/lib/libmkc.so build/lib/libmkc.so
  # The benchmarks that are not also a GPU test's binary.
  for binary in bench/net/mkc-proxy-gpu-bench; do
    mkdir -p "build-gpu/$(dirname "$binary")" && strip -o "build-gpu/$binary" "build/$binary"
  done
  du -sh build-gpu
}

run() {
  if [[ ! -e build/CTestTestfile.cmake ]]; then
    [[ -d build-gpu ]] || { echo "gpu-test.sh: no build/ or build-gpu/: run 'scripts/gpu-test.sh pack' on the dev machine and carry build-gpu" >&2; exit 2; }
    ln -sfn build-gpu build
  fi
  nvidia-smi -L
  ctest --test-dir build -L gpu --output-on-failure
}

case "${1:-run}" in
  pack) pack ;;
  run) run ;;
  *) echo "usage: scripts/gpu-test.sh [pack|run]" >&2; exit 2 ;;
esac
