#!/bin/sh
# Runs a command (an mpirun of RANKS ranks) with GRIDSPAN_TRACE=FILE, then checks that FILE
# holds task spans of every rank, each rank a process of its own:
#   trace_ranks.sh FILE RANKS command...
file=$1 ranks=$2
shift 2
rm -f "$file"
GRIDSPAN_TRACE="$file" "$@" || exit 1
/usr/bin/python3 - "$file" "$ranks" <<'PY'
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
spans = {e["pid"] for e in events if e["ph"] == "X"}
names = {e["pid"] for e in events if e.get("name") == "process_name"}
want = set(range(int(sys.argv[2])))
print("ranks with task spans:", sorted(spans), "named:", sorted(names))
sys.exit(0 if spans == want and names == want else 1)
PY
