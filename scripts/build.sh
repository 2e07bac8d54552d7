#!/usr/bin/env bash
# Installs what the build needs (idempotent), then configures and builds mkc with the default preset.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake --preset default
cmake --build --preset default
