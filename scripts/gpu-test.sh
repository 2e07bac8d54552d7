#!/usr/bin/env bash
# The GPU tests (ctest label gpu) on the GPU machine, from a build made on the dev machine.
#
#   scripts/gpu-test.sh pack       # dev machine: build, then put in build-gpu/ what the GPU
#                                  # tests need (ctest's files and the stripped binaries they
#                                  # run) and the benchmarks' binaries, and the same compressed
#                                  # in build-pack/gpu.tar.xz (a fifth of the size)
#   scripts/gpu-test.sh pack-lib NAME
#                                  # dev machine: build/lib/libmkc.so as it is now, stripped and
#                                  # compressed, as variant NAME (build-pack/libmkc-NAME.so.xz)
#   scripts/gpu-test.sh unpack     # GPU machine: build-gpu/ and build-ab/libmkc-NAME.so from a
#                                  # carried build-pack/, then MKC_LIBRARY=build-ab/... picks one
#   scripts/gpu-test.sh [run [CTEST ARGS]]
#                                  # GPU machine, with build-gpu/ or build-pack/ carried: run them
#                                  # (e.g. run -LE shared-gpu: not the variants whose ranks take
#                                  # turns on fewer GPUs, which take minutes)
#
# The device tool carries 64 MiB: build-gpu/ alone is about 62 MiB, build-pack/ with it and a
# dozen library variants about 50, so that one run can test and compare them.
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
  # The benchmarks that are not also a GPU test's binary, and what a GPU test runs by way of its
  # environment (the random programs' JIT compiles).
  for binary in bench/net/mkc-proxy-gpu-bench test/runtime/jit/mk-jit-compile; do
    mkdir -p "build-gpu/$(dirname "$binary")" && strip -o "build-gpu/$binary" "build/$binary"
  done
  du -sh build-gpu
  mkdir -p build-pack
  tar -C build-gpu -cf - . | xz -T0 -6 > build-pack/gpu.tar.xz
  du -sh build-pack/gpu.tar.xz
}

pack_lib() {
  [[ "${1:-}" =~ ^[A-Za-z0-9_.-]+$ ]] || { echo "usage: scripts/gpu-test.sh pack-lib NAME (letters, digits, ._-)" >&2; exit 2; }
  mkdir -p build-pack
  strip -o build-pack/libmkc-"$1".so build/lib/libmkc.so
  xz -T0 -6 -f build-pack/libmkc-"$1".so
  du -sh build-pack/libmkc-"$1".so.xz
}

# Python's tarfile and lzma, since the GPU machine's image may lack xz.
unpack() {
  [[ -f build-pack/gpu.tar.xz || -n "$(compgen -G 'build-pack/libmkc-*.so.xz')" ]] ||
    { echo "gpu-test.sh: nothing in build-pack/: run 'scripts/gpu-test.sh pack' on the dev machine and carry build-pack" >&2; exit 2; }
  python3 - <<'PY'
import glob, lzma, os, shutil, tarfile
if os.path.isfile("build-pack/gpu.tar.xz"):
    shutil.rmtree("build-gpu", ignore_errors=True)
    with tarfile.open("build-pack/gpu.tar.xz") as pack:
        pack.extractall("build-gpu")
    print("build-gpu/ unpacked")
for packed in sorted(glob.glob("build-pack/libmkc-*.so.xz")):
    os.makedirs("build-ab", exist_ok=True)
    library = os.path.join("build-ab", os.path.basename(packed)[: -len(".xz")])
    with lzma.open(packed) as source, open(library, "wb") as target:
        shutil.copyfileobj(source, target)
    os.chmod(library, 0o755)
    print(library)
PY
}

run() {
  if [[ ! -e build/CTestTestfile.cmake ]]; then
    [[ -d build-gpu || ! -f build-pack/gpu.tar.xz ]] || unpack
    [[ -d build-gpu ]] || { echo "gpu-test.sh: no build/, build-gpu/ or build-pack/: run 'scripts/gpu-test.sh pack' on the dev machine and carry build-pack" >&2; exit 2; }
    ln -sfn build-gpu build
  fi
  nvidia-smi -L
  ctest --test-dir build -L gpu --output-on-failure "$@"
}

case "${1:-run}" in
  pack) pack ;;
  pack-lib) pack_lib "${2:-}" ;;
  unpack) unpack ;;
  run) shift || true; run "$@" ;;
  *) echo "usage: scripts/gpu-test.sh [pack|pack-lib NAME|unpack|run]" >&2; exit 2 ;;
esac
