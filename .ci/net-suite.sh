#!/usr/bin/env bash
# Network fault suite (issue 24): hostile clients against the real binary, loopback only.
# Runs every case in .ci/net/*.sh with BIN (the retryscope binary) and WORK (a fresh temp dir)
# in its environment; a case prints what it measured, starts and kills its own processes, and
# exits non-zero on a broken bound. Each case is cut after CASE_TIMEOUT seconds (a failure).
# Builds nothing: BIN defaults to target/debug/retryscope, built earlier in .ci/run.
#
# Usage: bash .ci/net-suite.sh [BIN]    (NET_CASES='otlp-*' runs a subset)
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${1:-target/debug/retryscope}")
[ -x "$BIN" ] || { echo "no binary at $BIN (cargo build first)" >&2; exit 2; }
CASE_TIMEOUT=${CASE_TIMEOUT:-120}
passed=0 failed=0 failures=()
start=$(date +%s)
for case in .ci/net/${NET_CASES:-*}.sh; do
  [ -e "$case" ] || continue
  name=$(basename "$case" .sh)
  work=$(mktemp -d "${TMPDIR:-/tmp}/retryscope-net.XXXXXX")
  t0=$(date +%s)
  echo "--- $name"
  BIN="$BIN" WORK="$work" timeout --kill-after=5 "$CASE_TIMEOUT" bash "$case"
  rc=$?
  if [ "$rc" -eq 0 ]; then
    passed=$((passed + 1)); verdict=passed
  else
    failed=$((failed + 1)); verdict="FAILED (exit $rc)"; failures+=("$name")
  fi
  echo "--- $name: $verdict in $(( $(date +%s) - t0 ))s"
  rm -rf "$work"
done
echo "net suite: $passed passed, $failed failed in $(( $(date +%s) - start ))s${failures:+ (${failures[*]})}"
[ "$failed" -eq 0 ]
