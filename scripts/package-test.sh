#!/usr/bin/env bash
# Packaging is a test: install the built tree into a temporary prefix, then configure, build
# and run tests/package (a tiny project that does find_package(gridspan)) against it.
set -euo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
# Only the API is installed, and nothing <gridspan/gridspan.hpp> reaches lies outside it.
inc="$tmp/prefix/include"
internal=$(cd "$inc/gridspan" && find . -type f | sed 's#^\./##' |
  grep -Ev '^(gridspan\.hpp|api/[a-z_]+\.hpp|array/[a-z_]+\.hpp|core/(config|dtype|error|float16|geometry|half|info|param)\.hpp|distribution/distribution\.hpp|device/[a-z_]+\.(h|hpp))$' || true)
if [ -n "$internal" ]; then
  echo "package test: headers outside the API are installed: $internal" >&2
  exit 1
fi
reached=$(${CXX:-c++} -std=c++20 -I"$inc" -MM "$root/tests/package/main.cpp")
if echo "$reached" | grep -Eq 'gridspan/(runtime|plan|net|backend|annotation)/|/src/'; then
  echo "package test: <gridspan/gridspan.hpp> reaches an internal header: $reached" >&2
  exit 1
fi
launcher=""
command -v ccache >/dev/null && launcher="-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"
cmake -G Ninja $launcher -S "$root/tests/package" -B "$tmp/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/build" >/dev/null
GRIDSPAN_CACHE_DIR="$tmp/cache" "$tmp/build/package_test"
echo "package test: 1 passed, 0 failed"
