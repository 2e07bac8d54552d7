#!/usr/bin/env bash
# Checks that every tracked C, C++ and CUDA file is formatted as .clang-format says; names the
# files that are not and exits 1. With --fix, formats them in place instead.
#
#   scripts/check-format.sh [--fix]
set -euo pipefail
cd "$(dirname "$0")/.."
format=$(command -v clang-format-14 || command -v clang-format || true)
[[ -n "$format" ]] || { echo "check-format: clang-format not found (scripts/setup.sh installs it)" >&2; exit 2; }
mapfile -t files < <(git ls-files '*.c' '*.h' '*.cpp' '*.cu' '*.cuh')
if [[ "${1:-}" == "--fix" ]]; then
  "$format" -i "${files[@]}"
  exit 0
fi
unformatted=()
for file in "${files[@]}"; do
  "$format" --dry-run --Werror "$file" >/dev/null 2>&1 || unformatted+=("$file")
done
if ((${#unformatted[@]})); then
  echo "check-format: ${#unformatted[@]} files differ from .clang-format (scripts/check-format.sh --fix):" >&2
  printf '  %s\n' "${unformatted[@]}" >&2
  exit 1
fi
echo "check-format: ${#files[@]} files formatted"
