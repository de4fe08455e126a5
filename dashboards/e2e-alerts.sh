#!/usr/bin/env bash
# End-to-end proof that the shipped alert rules fire (and stay silent) against a REAL
# Prometheus scraping a REAL `retryscope run`.
#
#   bash dashboards/e2e-alerts.sh          # from the repo root, after `cargo build`
#
# Needs: the retryscope binary ($RETRYSCOPE_BIN, default ./target/debug/retryscope),
# `prometheus` and `promtool` on PATH (Debian: apt-get install prometheus), python3, and curl
# (python3's urllib is used when curl is missing). No network: everything listens on
# 127.0.0.1 on free ports. Takes about a minute; every wait is bounded (whole script < 4 min).
#
# Scenario A, "storm + duplicate effects": a log is appended to every second with turns of
# 2-4 attempts (retries far above the RetryscopeRetryStorm thresholds) and copies of
# examples/bookstore/naive.jsonl (an abandoned attempt's refund executed, then executed again
# by the retry). Asserts RetryscopeRetryStorm, RetryscopeAbandonedToolExecuted and
# RetryscopeDuplicateEffect reach `firing`. The same live collector is then checked by
# dashboards/scrape-names.sh (promtool check metrics, check-promql.py on the real names).
#
# Scenario B, "clean": a fresh collector and Prometheus; the log gets single-attempt turns
# and, every other second, a copy of examples/bookstore/reset-late-exec.jsonl (one retry
# with render_reset, refund executed only after the final attempt finished: no finding).
# About 0.1 retries per turn, below every threshold. After 20s of scraping with data
# flowing, asserts that no alert is firing or pending, and that none fired after warm-up.
#
# The rules Prometheus loads are a COPY of dashboards/alerts.yml in which only the `for:`
# durations that are not 0 are shortened to 2s (so the test does not wait 10-15 minutes);
# every expression is used exactly as shipped, and the script checks that the copy differs
# from the original in `for:` lines only. The range windows (5m, 10m, 30m) are not changed:
# rate() over a 10m window that holds only a minute of samples is still a true per-second
# rate of that window, so the volume floors are met only by real, sustained traffic.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${RETRYSCOPE_BIN:-./target/debug/retryscope}
PROMETHEUS=${PROMETHEUS:-prometheus}
FIRE_TIMEOUT=${E2E_FIRE_TIMEOUT:-120} # seconds scenario A may take to fire everything
CLEAN_SECS=${E2E_CLEAN_SECS:-20}      # seconds scenario B scrapes flowing data
FOR=2s                                # the shortened `for:`
EXPECTED_FIRING=(RetryscopeRetryStorm RetryscopeAbandonedToolExecuted RetryscopeDuplicateEffect)
# Alerts allowed to be firing or pending in the clean scenario: none.
CLEAN_ALLOWED=()

START=$SECONDS
tmp=$(mktemp -d "${TMPDIR:-/tmp}/retryscope-e2e.XXXXXX")
pids=()
results=()
failed=0

stop_all() {
  local pid
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  pids=()
}
cleanup() {
  local rc=$?
  stop_all
  if [ "${E2E_KEEP_TMP:-0}" = 1 ]; then echo "e2e: kept $tmp" >&2; else rm -rf "$tmp"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { printf 'e2e [%3ds] %s\n' "$((SECONDS - START))" "$*"; }
pass() { results+=("PASS  $*"); log "PASS $*"; }
fail_soft() { results+=("FAIL  $*"); log "FAIL $*"; failed=1; }
summary() {
  echo
  echo "=== e2e-alerts summary ($((SECONDS - START))s) ==="
  printf '%s\n' "${results[@]}"
}
die() { # fatal: report, summarise, exit 1 (the trap stops everything)
  fail_soft "$*"
  summary
  exit 1
}

http_get() { # URL -> stdout
  if command -v curl >/dev/null 2>&1; then
    curl -fsS --max-time 5 "$1"
  else
    python3 -c 'import sys,urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' "$1"
  fi
}
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
# A PromQL instant query -> the JSON answer.
prom_query() {
  python3 -c 'import sys,urllib.parse; print(urllib.parse.quote(sys.argv[1]))' "$2" |
    { read -r q; http_get "http://127.0.0.1:$1/api/v1/query?query=$q"; }
}
# /api/v1/alerts of Prometheus on port $1 -> "name state" lines, sorted.
alert_states() {
  http_get "http://127.0.0.1:$1/api/v1/alerts" | python3 -c '
import json, sys
for a in json.load(sys.stdin)["data"]["alerts"]:
    print(a["labels"]["alertname"], a["state"])' | sort -u
}

for tool in "$PROMETHEUS" promtool python3; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool not found (Debian: apt-get install prometheus python3)"
done
[ -x "$BIN" ] || die "$BIN is not an executable (cargo build, or set RETRYSCOPE_BIN)"

# ------------------------------------------------------------------------- the rules copy

# Shorten every non-zero `for:`; leave `for: 0m` and everything else as shipped.
sed -E "s/^([[:space:]]*for:[[:space:]]*)([1-9][0-9]*[smh])[[:space:]]*$/\1$FOR/" \
  dashboards/alerts.yml >"$tmp/alerts.yml"
if ! diff <(grep -vE '^[[:space:]]*for:' dashboards/alerts.yml) \
  <(grep -vE '^[[:space:]]*for:' "$tmp/alerts.yml") >/dev/null; then
  die "the rules copy differs from dashboards/alerts.yml outside its for: lines"
fi
shortened=$(diff dashboards/alerts.yml "$tmp/alerts.yml" | grep -c '^>' || true)
[ "$shortened" -gt 0 ] || die "no for: duration was shortened (has alerts.yml changed shape?)"
promtool check rules "$tmp/alerts.yml" >/dev/null || die "promtool rejects the rules copy"
log "rules copy: $shortened for: durations set to $FOR, expressions unchanged"

# ------------------------------------------------------------------------- the log writer

# writer.py MODE LOG: appends one batch of turns every second until killed (at most 200s).
# Timestamps are the wall clock, shifted from the bookstore examples' own timeline.
cat >"$tmp/writer.py" <<'EOF'
import datetime, json, random, sys, time

mode, path = sys.argv[1], sys.argv[2]
rng = random.Random(7)


def example(name):
    with open(f"examples/bookstore/{name}.jsonl", encoding="utf-8") as f:
        return [json.loads(l) for l in f if l.strip()]


def parse_ts(s):
    return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc)


def fmt(t):
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def copy_of(events, turn, now):
    """The example's events under a new turn id, moved so it ends at `now`."""
    last = parse_ts(events[-1]["ts"])
    out = []
    for e in events:
        e = dict(e, turn=turn, ts=fmt(now - (last - parse_ts(e["ts"]))))
        out.append(e)
    return out


MODELS = [("anthropic", "claude-sonnet-4-5"), ("openai", "gpt-4o")]
REASONS = [("connection_reset", "connection reset by peer", "ECONNRESET"), ("overloaded", "overloaded", "529")]


def synthetic(turn, attempts, now):
    """A text-only turn with `attempts` attempts: all but the last break and are retried."""
    provider, model = MODELS[rng.randrange(len(MODELS))]
    t = now - datetime.timedelta(milliseconds=100 * (4 * attempts + 4))
    step = datetime.timedelta(milliseconds=100)
    ev = []

    def add(**kw):
        nonlocal t
        t += step
        ev.append(dict(v=1, turn=turn, ts=fmt(t), **kw))

    add(type="turn_start", model=model, provider=provider, agent="e2e", session="s-" + turn)
    for a in range(attempts):
        if a:
            add(type="retry", attempt=a, reason=reason)
            add(type="render_reset", attempt=a)
        add(type="attempt_start", attempt=a, request_id=f"{turn}-{a}")
        add(type="text", attempt=a, text="Looking into it. ")
        if a < attempts - 1:
            reason, msg, code = REASONS[rng.randrange(len(REASONS))]
            add(type="error", attempt=a, message=msg, code=code)
    add(type="text", attempt=attempts - 1, text="Here is the answer.")
    add(type="usage", attempt=attempts - 1, input_tokens=900, output_tokens=40)
    add(type="finish", attempt=attempts - 1, reason="stop")
    add(type="output", text="Looking into it. Here is the answer.")
    add(type="turn_end", status="ok")
    return ev


naive, late = example("naive"), example("reset-late-exec")
n = batches = 0
deadline = time.monotonic() + 200
with open(path, "a", encoding="utf-8") as f:
    while time.monotonic() < deadline:
        now = datetime.datetime.now(datetime.timezone.utc)
        batch = []
        batches += 1
        if mode == "storm":
            # 6 turns of 2-4 attempts (about 2 retries per turn) and one naive refund turn.
            for _ in range(6):
                n += 1
                batch += synthetic(f"storm-{n}", rng.randint(2, 4), now)
            n += 1
            batch += copy_of(naive, f"naive-{n}", now)
        else:
            # 5 single-attempt turns; every other batch one reset-late-exec turn (1 retry).
            for _ in range(5):
                n += 1
                batch += synthetic(f"clean-{n}", 1, now)
            if batches % 2:
                n += 1
                batch += copy_of(late, f"late-{n}", now)
        f.write("".join(json.dumps(e, separators=(",", ":")) + "\n" for e in batch))
        f.flush()
        time.sleep(1)
EOF

# ------------------------------------------------------------------------- one stack

# start_stack NAME MODE: writer + collector + Prometheus; sets COLLECTOR_PORT and PROM_PORT.
start_stack() {
  local name=$1 mode=$2 dir="$tmp/$1"
  mkdir -p "$dir/tsdb"
  : >"$dir/agent.jsonl"
  COLLECTOR_PORT=$(free_port)
  PROM_PORT=$(free_port)
  while [ "$PROM_PORT" = "$COLLECTOR_PORT" ]; do PROM_PORT=$(free_port); done

  "$BIN" run "$dir/agent.jsonl" --metrics-addr "127.0.0.1:$COLLECTOR_PORT" --findings-out '' \
    --idle-timeout-secs 5 >"$dir/collector.log" 2>&1 &
  pids+=($!)

  cat >"$dir/prometheus.yml" <<EOF
# Generated by dashboards/e2e-alerts.sh (scenario $name).
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $tmp/alerts.yml
scrape_configs:
  - job_name: retryscope
    static_configs:
      - targets: ['127.0.0.1:$COLLECTOR_PORT']
EOF
  promtool check config "$dir/prometheus.yml" >/dev/null || die "$name: promtool rejects the generated config"
  "$PROMETHEUS" --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/tsdb" \
    --web.listen-address="127.0.0.1:$PROM_PORT" --log.level=warn >"$dir/prometheus.log" 2>&1 &
  pids+=($!)

  local i
  for i in $(seq 1 150); do
    http_get "http://127.0.0.1:$COLLECTOR_PORT/metrics" >/dev/null 2>&1 &&
      http_get "http://127.0.0.1:$PROM_PORT/-/ready" >/dev/null 2>&1 && break
    sleep 0.2
  done
  http_get "http://127.0.0.1:$COLLECTOR_PORT/metrics" >/dev/null 2>&1 ||
    { tail -n 20 "$dir/collector.log" >&2; die "$name: collector not serving /metrics on 127.0.0.1:$COLLECTOR_PORT"; }
  http_get "http://127.0.0.1:$PROM_PORT/-/ready" >/dev/null 2>&1 ||
    { tail -n 20 "$dir/prometheus.log" >&2; die "$name: Prometheus not ready on 127.0.0.1:$PROM_PORT"; }

  python3 "$dir/../writer.py" "$mode" "$dir/agent.jsonl" &
  pids+=($!)
  log "$name: collector :$COLLECTOR_PORT, Prometheus :$PROM_PORT, writer appending ($mode)"
}

dump() { # NAME: what Prometheus and the collector saw, for a failure
  local dir="$tmp/$1"
  echo "--- /api/v1/alerts" >&2
  http_get "http://127.0.0.1:$PROM_PORT/api/v1/alerts" >&2 || true
  echo >&2
  echo "--- up" >&2
  prom_query "$PROM_PORT" 'up' >&2 || true
  echo >&2
  echo "--- last scrape of the collector (non-zero samples, no histogram buckets)" >&2
  http_get "http://127.0.0.1:$COLLECTOR_PORT/metrics" | grep -v '^#' | grep -v ' 0$' | grep -v '_bucket{' | head -n 60 >&2 || true
  echo "--- collector log (tail)" >&2
  tail -n 20 "$dir/collector.log" >&2 || true
  echo "--- prometheus log (tail)" >&2
  tail -n 20 "$dir/prometheus.log" >&2 || true
}

# ------------------------------------------------------------------------- scenario A

start_stack storm storm
t0=$SECONDS
declare -A fired_at=()
while :; do
  states=$(alert_states "$PROM_PORT" 2>/dev/null || true)
  for a in "${EXPECTED_FIRING[@]}"; do
    if [ -z "${fired_at[$a]:-}" ] && grep -qx "$a firing" <<<"$states"; then
      fired_at[$a]=$((SECONDS - t0))
    fi
  done
  [ "${#fired_at[@]}" -eq "${#EXPECTED_FIRING[@]}" ] && break
  if [ $((SECONDS - t0)) -ge "$FIRE_TIMEOUT" ]; then
    for a in "${EXPECTED_FIRING[@]}"; do
      if [ -n "${fired_at[$a]:-}" ]; then
        pass "storm: $a firing after ${fired_at[$a]}s"
      else
        fail_soft "storm: $a not firing after ${FIRE_TIMEOUT}s (state: $(grep "^$a " <<<"$states" | cut -d' ' -f2 | tr '\n' ' ')) "
      fi
    done
    dump storm
    summary
    exit 1
  fi
  sleep 1
done
for a in "${EXPECTED_FIRING[@]}"; do
  pass "storm: $a firing after ${fired_at[$a]}s"
done
others=$(grep -vE "^($(IFS='|'; echo "${EXPECTED_FIRING[*]}")) " <<<"$states" | tr '\n' ',' | sed 's/,$//; s/,/, /g' || true)
log "storm: also active (not asserted): ${others:-none}"

# The alert values are the collector's own numbers: check one against the scrape.
ratio=$(prom_query "$PROM_PORT" 'sum(rate(retryscope_retries_total[10m])) / sum(rate(retryscope_turns_total[10m]))' |
  python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "none")')
log "storm: retries per turn as Prometheus sees it: $ratio"

# The real-scrape name check, against this collector full of storm data.
if bash dashboards/scrape-names.sh "http://127.0.0.1:$COLLECTOR_PORT/metrics" >"$tmp/scrape-names.out" 2>&1; then
  pass "storm: scrape-names.sh (promtool check metrics, check-promql.py on the real names, metric-names.txt)"
else
  cat "$tmp/scrape-names.out" >&2
  fail_soft "storm: scrape-names.sh on the live collector"
fi
stop_all

# ------------------------------------------------------------------------- scenario B

start_stack clean clean
# Warm-up: wait until Prometheus has two scrapes with file lines in them, so increase() and
# rate() are defined. Before that the shortened `for:` lets start-up states through:
# Prometheus first scrapes ~5s after it starts (service discovery sends its first target
# update after 5s), so RetryscopeCollectorAbsent (absent(up)) and RetryscopeNotIngesting
# (nothing read yet) are briefly true. As shipped they hold for 10m/15m, which covers
# start-up; at 2s they do not. They are reported below, not asserted.
t0=$SECONDS
until [ "$(prom_query "$PROM_PORT" 'increase(retryscope_events_read_total{source="file"}[1m]) > 0' 2>/dev/null |
  python3 -c 'import json,sys; print(len(json.load(sys.stdin)["data"]["result"]))' 2>/dev/null)" = 1 ]; do
  if [ $((SECONDS - t0)) -ge 30 ]; then
    dump clean
    die "clean: Prometheus saw no file lines being read within 30s"
  fi
  sleep 1
done
# Let the rule evaluations that ran just before that moment (they can still see the empty
# start-up windows) fall out of the observed window.
log "clean: data flowing into Prometheus after $((SECONDS - t0))s; settling 3s, then observing ${CLEAN_SECS}s"
sleep 3
observed_from=$SECONDS
sleep "$CLEAN_SECS"

allowed_re="^($(IFS='|'; echo "${CLEAN_ALLOWED[*]:-}")) "
states=$(alert_states "$PROM_PORT") || die "clean: cannot read /api/v1/alerts"
active=$(grep -vE "$allowed_re" <<<"$states" || true)
if [ -z "$active" ]; then
  pass "clean: no alert firing or pending after ${CLEAN_SECS}s of flowing data"
else
  fail_soft "clean: active alerts: $(tr '\n' ' ' <<<"$active")"
fi
# And none was active at any evaluation since then (ALERTS keeps the history). $SECONDS
# counts whole seconds, so take one off to stay inside the observed window.
window=$((SECONDS - observed_from - 1))
history=$(prom_query "$PROM_PORT" "count by (alertname, alertstate) (max_over_time(ALERTS[${window}s]))" |
  python3 -c '
import json, sys
for r in json.load(sys.stdin)["data"]["result"]:
    print(r["metric"]["alertname"], r["metric"]["alertstate"])' | grep -vE "$allowed_re" || true)
if [ -z "$history" ]; then
  pass "clean: no alert pending or firing at any evaluation in the last ${window}s"
else
  fail_soft "clean: alerts active during the run: $(tr '\n' ' ' <<<"$history")"
fi
# Start-up states before the warm-up ended are an artefact of the shortened `for:`; report them.
early=$(prom_query "$PROM_PORT" "count by (alertname, alertstate) (max_over_time(ALERTS[$((SECONDS - t0 + 5))s]))" |
  python3 -c '
import json, sys
print(", ".join(sorted(r["metric"]["alertname"] + " " + r["metric"]["alertstate"] for r in json.load(sys.stdin)["data"]["result"])))' || true)
log "clean: active at any time incl. start-up with for: $FOR (not asserted): ${early:-none}"
turns=$(prom_query "$PROM_PORT" 'sum(retryscope_turns_total)' |
  python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else 0)')
retries=$(prom_query "$PROM_PORT" 'sum(retryscope_retries_total)' |
  python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else 0)')
log "clean: $turns turns closed, $retries retries"
if [ "${turns%.*}" -gt 0 ]; then
  pass "clean: the collector closed $turns turns ($retries retries) while observed"
else
  fail_soft "clean: no turn closed: the silence proves nothing"
fi
[ "$failed" = 0 ] || dump clean
stop_all

summary
[ "$failed" = 0 ] && echo "e2e-alerts: PASS" || { echo "e2e-alerts: FAIL"; exit 1; }
