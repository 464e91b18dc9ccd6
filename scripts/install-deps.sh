#!/usr/bin/env bash
# Installs what gridspan builds with, only what is missing: tools are looked up on PATH,
# libraries among Debian's installed packages. ccache is optional (used when present).
# Usage: scripts/install-deps.sh [extra-package ...]
set -euo pipefail
missing=()
need_tool() { command -v "$1" >/dev/null 2>&1 || missing+=("$2"); }
need_pkg() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed" || missing+=("$1")
}
need_tool cmake cmake
need_tool ninja ninja-build
need_tool g++ g++
need_tool make make
for p in libgtest-dev libgmock-dev libbenchmark-dev libfmt-dev nlohmann-json3-dev libcli11-dev \
         zlib1g-dev openmpi-bin libopenmpi-dev python3-numpy libopenblas0 "$@"; do
  need_pkg "$p"
done
[ ${#missing[@]} -eq 0 ] && exit 0
# ccache comes along when something must be installed anyway (never worth an apt-get alone:
# machines without a reachable archive would wait for it).
optional=()
command -v ccache >/dev/null 2>&1 || optional+=(ccache)
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
if ! command -v apt-get >/dev/null 2>&1; then
  echo "gridspan: missing ${missing[*]} and no apt-get to install them" >&2
  exit 1
fi
echo "gridspan: installing ${missing[*]} ${optional[*]}" >&2
if $sudo apt-get update -qq &&
   DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
     "${missing[@]}" "${optional[@]}" >/dev/null; then
  exit 0
fi
echo "gridspan: could not install ${missing[*]}" >&2
exit 1
