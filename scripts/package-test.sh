#!/usr/bin/env bash
# Packaging is a test: install the built tree into a temporary prefix, then configure, build
# and run tests/package (a tiny project that does find_package(gridspan)) against it.
set -euo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
launcher=""
command -v ccache >/dev/null && launcher="-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"
cmake -G Ninja $launcher -S "$root/tests/package" -B "$tmp/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/build" >/dev/null
GRIDSPAN_CACHE_DIR="$tmp/cache" "$tmp/build/package_test"
echo "package test: 1 passed, 0 failed"
