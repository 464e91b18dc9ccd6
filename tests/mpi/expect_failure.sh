#!/bin/sh
# Runs a command that must fail: passes when it ends (within LIMIT seconds) with a status
# other than 0, and its output holds PATTERN (an extended regular expression).
#   expect_failure.sh LIMIT PATTERN command...
limit=$1 pattern=$2
shift 2
start=$(date +%s)
out=$(timeout "$limit" "$@" 2>&1)
status=$?
took=$(( $(date +%s) - start ))
printf '%s\n' "$out"
echo "exit status $status after $took s"
if [ "$status" -eq 124 ]; then echo "FAIL: still running after $limit s (a hang)"; exit 1; fi
if [ "$status" -eq 0 ]; then echo "FAIL: exit status 0, expected a failure"; exit 1; fi
if ! printf '%s\n' "$out" | grep -Eq "$pattern"; then echo "FAIL: no line matches '$pattern'"; exit 1; fi
echo "PASS"
