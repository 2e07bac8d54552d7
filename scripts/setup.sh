#!/usr/bin/env bash
# Installs what mkc needs to build and test on Debian 12 (bookworm). Idempotent: packages already
# installed are left alone, nothing is removed (never `apt-get autoremove`: it would take libc++-14 away).
set -euo pipefail

CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"

packages=(
  cmake ninja-build g++ pkg-config python3
  # LLVM/MLIR 22 (bookworm-security). Only one libmlir-N can be installed at a time.
  libmlir-22-dev mlir-22-tools llvm-22-dev llvm-22-tools libzstd-dev
  # Network: libfabric (tcp/shm providers over loopback) and rdma-core verbs.
  libfabric-dev libfabric-bin libibverbs-dev librdmacm-dev ibverbs-utils
  libfmt-dev catch2
  # The sources' format (scripts/check-format.sh).
  clang-format
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all ${#packages[@]} packages already installed"
fi

# CUDA is not a Debian package here: NVRTC (headers and library) must come with the toolkit.
for f in include/nvrtc.h include/cuda.h; do
  if [ ! -f "$CUDA_HOME/$f" ]; then
    echo "setup: error: $CUDA_HOME/$f not found. Install the CUDA 13 toolkit (NVRTC) at /usr/local/cuda" \
         "or set CUDA_HOME." >&2
    exit 1
  fi
done
if ! ls "$CUDA_HOME"/lib64/libnvrtc.so* >/dev/null 2>&1 && ! ls "$CUDA_HOME"/lib/libnvrtc.so* >/dev/null 2>&1; then
  echo "setup: error: libnvrtc.so not found under $CUDA_HOME/lib64 or $CUDA_HOME/lib." >&2
  exit 1
fi
echo "setup: CUDA toolkit at $CUDA_HOME ($(grep -m1 -o 'CUDA_VERSION [0-9]*' "$CUDA_HOME/include/cuda.h"))"
