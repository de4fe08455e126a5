#!/usr/bin/env bash
# `retryscope check --html` in a real browser: each bookstore report is opened in headless
# Chromium (Debian's `chromium`), which must run the page's script without an error (the
# script marks <body data-report-ready> as its last step) and show the bookstore turn as two
# attempt lanes with the abandoned attempt's executed refund; a screenshot is taken; and a
# 100,000-turn report must open in a few seconds (its size and load time are printed).
#
#   bash tests/browser/html-report.sh            # after `cargo build` and the gen_log example
#   SHOT=docs/html-report.png bash tests/browser/html-report.sh   # keep the screenshot
#   TURNS=0 bash tests/browser/html-report.sh    # skip the 100,000-turn check
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${RETRYSCOPE_BIN:-target/debug/retryscope}
GEN=${GEN_LOG_BIN:-target/debug/examples/gen_log}
CHROMIUM=${CHROMIUM:-chromium}
TURNS=${TURNS:-100000}
MAX_LOAD_MS=${MAX_LOAD_MS:-10000}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# A fresh profile per run; no network, no background services.
chrome() {
  local profile
  profile=$(mktemp -d "$out/profile.XXXXXX")
  timeout 180 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$profile" "$@"
}

# Load a page, keep its DOM after the scripts ran and the browser's console log.
open_page() { # html dom log
  chrome --enable-logging=stderr --v=0 --dump-dom "file://$(realpath "$1")" >"$2" 2>"$3" || {
    echo "chromium failed on $1:"; tail -20 "$3"; exit 1; }
}

# No script error in the console log; the ready marker set at the script's end is there.
check_page() { # dom log
  python3 - "$1" "$2" <<'PY'
import re, sys
dom, log = open(sys.argv[1], encoding="utf-8").read(), open(sys.argv[2], errors="replace").read()
errors = [l for l in log.splitlines() if "CONSOLE" in l and ("Uncaught" in l or "Error" in l)]
if errors:
    sys.exit("script errors in the browser console:\n" + "\n".join(errors))
if not re.search(r'<body[^>]* data-report-ready="\d+"', dom):
    sys.exit("the page's script did not finish (no data-report-ready on <body>)")
if re.search(r'(src|href)="(https?:)?//', dom):
    sys.exit("the page refers to an external resource")
PY
}

# The bookstore turn: two lanes (attempt 0 abandoned, attempt 1 completed); the refund of
# attempt 0's call c1 drawn as an execution from the abandoned attempt (or not, when clean).
check_bookstore() { # dom expect_abandoned_exec(yes|no)
  python3 - "$1" "$2" <<'PY'
import re, sys
dom, expect = open(sys.argv[1], encoding="utf-8").read(), sys.argv[2]
sections = re.findall(r'<section class="turn"[^>]*data-turn="bookstore-1".*?</section>', dom, re.S)
if len(sections) != 1:
    sys.exit(f"expected one timeline for bookstore-1, found {len(sections)}")
s = sections[0]
lanes = re.findall(r'<g class="lane lane-(\w+)" data-attempt="(\d+)"', s)
if lanes != [("abandoned", "0"), ("completed", "1")]:
    sys.exit(f"expected lanes attempt 0 abandoned and attempt 1 completed, got {lanes}")
abandoned_exec = re.search(r'<g class="exec exec-abandoned" data-attempt="0" data-call="c1"', s)
if (expect == "yes") != bool(abandoned_exec):
    sys.exit(f"executed abandoned call c1 drawn: {bool(abandoned_exec)}, expected {expect}")
if not re.search(r'<g class="cut">', s):
    sys.exit("no cut drawn on the abandoned attempt")
rows = re.findall(r'<tbody><tr><td><a href="#t0">bookstore-1</a>', dom)
if len(rows) != 1:
    sys.exit("the turn table (drawn by the script) has no linked row for bookstore-1")
print(f"  ok: 2 lanes, executed abandoned call drawn: {expect}, table row linked")
PY
}

for name in naive reset reset-late-exec; do
  echo "bookstore/$name.jsonl"
  "$BIN" check --summary --html "$out/$name.html" "examples/bookstore/$name.jsonl" >/dev/null
  open_page "$out/$name.html" "$out/$name.dom" "$out/$name.log"
  check_page "$out/$name.dom" "$out/$name.log"
  case $name in reset-late-exec) want=no ;; *) want=yes ;; esac
  check_bookstore "$out/$name.dom" "$want"
done

# The table filters by finding kind (chosen here by the page's #filter= link): kind 0 is
# abandoned_tool_executed (bookstore-1 has it), kind 6 retry_cap_exceeded (it has not).
for want in "k0:1–1 of 1 turns" "k6:no turns match"; do
  kind=${want%%:*}
  chrome --dump-dom "file://$out/naive.html#filter=$kind" >"$out/filter.dom" 2>/dev/null
  grep -q "<span id=\"table-count\" class=\"note\">${want#*:}</span>" "$out/filter.dom" || {
    echo "filter $kind: expected '${want#*:}'"; grep -o '<span id="table-count"[^<]*' "$out/filter.dom"; exit 1; }
done
echo "  ok: the turn table filters by finding kind"

shot=${SHOT:-$out/html-report.png}
chrome --hide-scrollbars --window-size=1200,1180 --screenshot="$shot" "file://$out/naive.html" \
  >/dev/null 2>&1
size=$(stat -c %s "$shot")
[ "$size" -gt 20000 ] || { echo "screenshot $shot is only $size bytes"; exit 1; }
echo "screenshot: $shot ($size bytes)"

if [ "$TURNS" -gt 0 ]; then
  # The demo preset averages about 21.9 events a turn.
  events=$((TURNS * 219 / 10))
  "$GEN" --preset demo --events "$events" --out "$out/big.jsonl" >/dev/null
  "$BIN" check --summary --html "$out/big.html" "$out/big.jsonl" | grep 'turns:'
  start=$(date +%s%N)
  open_page "$out/big.html" "$out/big.dom" "$out/big.log"
  wall_ms=$(( ($(date +%s%N) - start) / 1000000 ))
  check_page "$out/big.dom" "$out/big.log"
  load_ms=$(grep -o 'data-report-ms="[0-9]*"' "$out/big.dom" | grep -o '[0-9]*')
  rows=$(grep -o 'data-report-ready="[0-9]*"' "$out/big.dom" | grep -o '[0-9]*')
  bytes=$(stat -c %s "$out/big.html")
  echo "large report: $rows turns, $((bytes / 1024)) KiB; page ready ${load_ms} ms after navigation" \
    "(browser start to DOM dump: ${wall_ms} ms)"
  [ "$load_ms" -le "$MAX_LOAD_MS" ] || { echo "the large report took over $MAX_LOAD_MS ms"; exit 1; }
fi
echo "html report in the browser: ok"
