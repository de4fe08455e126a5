#!/usr/bin/env bash
# `retryscope run`'s live page (`/ui` on the metrics port) in a real browser: run tails the
# bookstore example; headless Chromium (Debian's `chromium`) loads http://127.0.0.1:PORT/ui,
# which must run the report's script without an error, draw the bookstore turn's timeline
# (two attempt lanes, the abandoned attempt's executed refund), reload itself (a refresh meta)
# and refer to nothing outside itself; then `/` serves the same page, and a screenshot is taken.
#
#   bash tests/browser/live-page.sh                          # after `cargo build`
#   SHOT=docs/live-page.png bash tests/browser/live-page.sh  # keep the screenshot
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${RETRYSCOPE_BIN:-target/debug/retryscope}
CHROMIUM=${CHROMIUM:-chromium}
out=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$out"; }
trap cleanup EXIT

# Port 0, and the port read from run's log (logged at info): a number picked here and passed
# on could be taken by another process before run binds it (e2e/agents/listening.py).
RUST_LOG=info "$BIN" run --findings-out '' --metrics-addr 127.0.0.1:0 examples/bookstore/naive.jsonl \
  >"$out/run.out" 2>"$out/run.err" &
pid=$!
addr=$(python3 e2e/agents/listening.py "$out/run.err" "$pid") || exit 1
url="http://$addr/ui"
# (Read whole pages into files: `curl | grep -q` can fail under pipefail when grep exits first.)
found=no
for _ in $(seq 100); do
  curl -sf -o "$out/page.html" "$url" 2>/dev/null || true
  if grep -q 'data-turn="bookstore-1"' "$out/page.html" 2>/dev/null; then found=yes; break; fi
  sleep 0.1
done
[ "$found" = yes ] || { echo "no bookstore-1 on $url"; cat "$out/run.err"; exit 1; }

chrome() {
  local profile
  profile=$(mktemp -d "$out/profile.XXXXXX")
  timeout 180 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$profile" "$@"
}
chrome --enable-logging=stderr --v=0 --dump-dom "$url" >"$out/live.dom" 2>"$out/live.log" || {
  echo "chromium failed on $url"; tail -20 "$out/live.log"; exit 1; }

python3 - "$out/live.dom" "$out/live.log" <<'PY'
import re, sys
dom, log = open(sys.argv[1], encoding="utf-8").read(), open(sys.argv[2], errors="replace").read()
errors = [l for l in log.splitlines() if "CONSOLE" in l and ("Uncaught" in l or "Error" in l)]
if errors:
    sys.exit("script errors in the browser console:\n" + "\n".join(errors))
if not re.search(r'<body[^>]* data-report-ready="\d+"', dom):
    sys.exit("the page's script did not finish (no data-report-ready on <body>)")
if re.search(r'(src|href)="(https?:)?//', dom):
    sys.exit("the page refers to an external resource")
if not re.search(r'<meta http-equiv="refresh" content="\d+">', dom):
    sys.exit("the page does not reload itself")
s = re.findall(r'<section class="turn"[^>]*data-turn="bookstore-1".*?</section>', dom, re.S)
if len(s) != 1:
    sys.exit(f"expected one timeline for bookstore-1, found {len(s)}")
lanes = re.findall(r'<g class="lane lane-(\w+)" data-attempt="(\d+)"', s[0])
if lanes != [("abandoned", "0"), ("completed", "1")]:
    sys.exit(f"expected lanes attempt 0 abandoned and attempt 1 completed, got {lanes}")
if not re.search(r'<g class="exec exec-abandoned" data-attempt="0" data-call="c1"', s[0]):
    sys.exit("the executed abandoned call c1 is not drawn")
print("  ok: the live page runs its script, reloads itself, draws bookstore-1's two lanes")
PY
curl -sf -o "$out/root.html" "http://$addr/"
grep -q '<h1>retryscope live</h1>' "$out/root.html" || { echo "/ is not the live page"; exit 1; }

shot=${SHOT:-$out/live-page.png}
chrome --hide-scrollbars --window-size=1200,1000 --screenshot="$shot" "$url" >/dev/null 2>&1
size=$(stat -c %s "$shot")
[ "$size" -gt 20000 ] || { echo "screenshot $shot is only $size bytes"; exit 1; }
echo "screenshot: $shot ($size bytes)"
echo "live page in the browser: ok"
