#!/usr/bin/env bash
# Check the dashboard and the alert rules against what a REAL collector exports.
#
#   bash dashboards/scrape-names.sh                 # starts its own collector (see below)
#   bash dashboards/scrape-names.sh http://127.0.0.1:9464/metrics   # uses a running one
#
# 1. Scrapes /metrics once. Without a URL it starts `retryscope run` over
#    examples/bookstore/*.jsonl on a free 127.0.0.1 port, so every family has samples
#    (histograms by model, findings by tool), and stops it afterwards.
# 2. `promtool check metrics` on the scrape: any lint output is a failure.
# 3. Derives the set of sample names (histograms as _bucket/_sum/_count) and runs
#    check-promql.py with it: every dashboard and rule expression parses and names only
#    metrics the collector really exports.
# 4. Compares that set with dashboards/metric-names.txt, which must not drift from the
#    collector. Set SCRAPE_NAMES_UPDATE=1 to rewrite the list from the scrape.
#
# The binary is $RETRYSCOPE_BIN (default ./target/debug/retryscope). Run from anywhere.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${RETRYSCOPE_BIN:-./target/debug/retryscope}
URL=${1:-}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/retryscope-scrape.XXXXXX")
collector_pid=
cleanup() {
  if [ -n "$collector_pid" ]; then
    kill "$collector_pid" 2>/dev/null || true
    wait "$collector_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() { echo "scrape-names: FAIL: $*" >&2; exit 1; }

http_get() { # URL -> stdout; curl if present, else python3
  if command -v curl >/dev/null 2>&1; then
    curl -fsS --max-time 5 "$1"
  else
    python3 -c 'import sys,urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' "$1"
  fi
}

if [ -z "$URL" ]; then
  [ -x "$BIN" ] || fail "$BIN is not an executable (build first or set RETRYSCOPE_BIN)"
  # One copy of each example, renamed so the three turns do not share an id.
  for f in examples/bookstore/*.jsonl; do
    b=$(basename "$f" .jsonl)
    sed "s/\"bookstore-1\"/\"bookstore-$b\"/" "$f" >"$tmp/$b.jsonl"
  done
  # Port 0, and the port read from the collector's log (e2e/agents/listening.py; the line is
  # logged at info).
  RUST_LOG=info "$BIN" run "$tmp"/*.jsonl --metrics-addr 127.0.0.1:0 --findings-out '' \
    --idle-timeout-secs 5 >"$tmp/collector.log" 2>&1 &
  collector_pid=$!
  addr=$(python3 e2e/agents/listening.py "$tmp/collector.log" "$collector_pid") ||
    fail "the collector logged no /metrics address"
  URL="http://$addr/metrics"
  # Ready when every example line has been read.
  want="retryscope_events_read_total{source=\"file\"} $(cat "$tmp"/*.jsonl | wc -l)"
  for _ in $(seq 1 100); do
    if http_get "$URL" >"$tmp/scrape.txt" 2>/dev/null &&
      grep -qxF "$want" "$tmp/scrape.txt"; then
      break
    fi
    kill -0 "$collector_pid" 2>/dev/null || { cat "$tmp/collector.log" >&2; fail "collector exited"; }
    sleep 0.1
  done
  grep -qxF "$want" "$tmp/scrape.txt" ||
    fail "collector at $URL did not read every example line in 10s (want: $want)"
fi

http_get "$URL" >"$tmp/scrape.txt" || fail "cannot scrape $URL"
echo "scrape-names: scraped $URL ($(grep -vc '^#' "$tmp/scrape.txt") samples)"

# promtool check metrics prints one line per lint problem; treat any output as a failure.
lint_rc=0
promtool check metrics <"$tmp/scrape.txt" >"$tmp/lint.txt" 2>&1 || lint_rc=$?
if [ "$lint_rc" -ne 0 ] || [ -s "$tmp/lint.txt" ]; then
  cat "$tmp/lint.txt" >&2
  fail "promtool check metrics (exit $lint_rc)"
fi
echo "scrape-names: PASS promtool check metrics"

grep -v '^#' "$tmp/scrape.txt" | sed 's/[{ ].*//' | grep . | LC_ALL=C sort -u >"$tmp/names.txt"
python3 dashboards/check-promql.py --metrics-names "$tmp/names.txt" ||
  fail "check-promql.py against the names of the real scrape"
echo "scrape-names: PASS check-promql.py against the real scrape"

if ! diff -u <(grep -v '^#' dashboards/metric-names.txt | grep . | LC_ALL=C sort -u) "$tmp/names.txt" >"$tmp/names.diff"; then
  if [ "${SCRAPE_NAMES_UPDATE:-0}" = 1 ]; then
    { grep '^#' dashboards/metric-names.txt; cat "$tmp/names.txt"; } >"$tmp/new-names.txt"
    cp "$tmp/new-names.txt" dashboards/metric-names.txt
    echo "scrape-names: dashboards/metric-names.txt rewritten from the scrape"
  else
    cat "$tmp/names.diff" >&2
    fail "dashboards/metric-names.txt differs from the real scrape (-list +scrape); rerun with SCRAPE_NAMES_UPDATE=1"
  fi
else
  echo "scrape-names: PASS dashboards/metric-names.txt matches the real scrape ($(wc -l <"$tmp/names.txt") names)"
fi
