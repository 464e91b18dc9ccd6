#!/usr/bin/env bash
# The GPU machines have no perf: this copies the build machine's (Debian's linux-perf) with
# the libraries it needs, less the C and C++ runtimes, to build-perftool/, a folder to carry
# there (the device tool's `carry`); scripts/launch-perf.sh puts it on PATH when present.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v perf >/dev/null || apt-get install -y linux-perf >/dev/null
out=build-perftool
rm -rf "$out" && mkdir -p "$out/lib"
cp "$(command -v perf)" "$out/perf.bin"
ldd "$out/perf.bin" | awk '/=>/ {print $3}' | while read -r lib; do
  case $(basename "$lib") in
  libc.so* | libm.so* | ld-linux* | libstdc++* | libgcc_s* | libpthread* | libdl.so* | librt*) ;;
  *) cp -L "$lib" "$out/lib/" ;;
  esac
done
cat >"$out/perf" <<'WRAP'
#!/bin/sh
d=$(dirname "$(readlink -f "$0")")
LD_LIBRARY_PATH=$d/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec "$d/perf.bin" "$@"
WRAP
chmod +x "$out/perf"
du -sh "$out"
