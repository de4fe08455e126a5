#!/usr/bin/env bash
# End-to-end proof that the shipped alert rules fire (and stay silent) against a REAL
# Prometheus scraping a REAL `retryscope run`, and that the shipped Alertmanager routing
# (dashboards/alertmanager.yml) delivers them grouped and inhibited to a REAL Alertmanager's
# webhook receiver.
#
#   bash dashboards/e2e-alerts.sh          # from the repo root, after `cargo build`
#
# Needs: the retryscope binary ($RETRYSCOPE_BIN, default ./target/debug/retryscope),
# `prometheus` and `promtool` (Debian: prometheus), `prometheus-alertmanager` and `amtool`
# (Debian: prometheus-alertmanager), `nats-server` (Debian: nats-server), python3, and curl
# (python3's urllib is used when curl is missing). No network: everything listens on
# 127.0.0.1 on free ports. Takes about 70s (the Alertmanager, proxy, NATS and panel checks
# add about 25s to the 50s of the alert checks); every wait is bounded (whole script < 5 min).
#
# In scenario A the Prometheus also scrapes, as more targets of the same job: `retryscope
# proxy` in front of a small mock Anthropic upstream (three model requests with Claude Code's
# User-Agent: one cut on purpose, one clean, one broken upstream), and a `retryscope run
# --nats` collector fed by `retryscope ship` through a real nats-server; the storm collector
# itself also receives OTLP/HTTP requests (accepted, and two malformed) and writes a
# checkpoint and spool (--data-dir). Then dashboards/check-panels.py renders every dashboard
# panel's queries against this Prometheus: each must return data, and move above 0 unless it
# is listed with its reason.
#
# Alertmanager: a copy of dashboards/alertmanager.yml whose webhook URLs point at a local
# receiver (a small Python HTTP server) and whose group_wait/group_interval are 10s/5s
# (shipped: 30s/5m); routes, grouping and inhibition as shipped (checked: the copy differs in
# those lines only). The storm must arrive as ONE notification, the RetryscopeRetryStorm of
# agent help-desk, while its inhibited per-kind alerts (abandoned, duplicate, ...) fire in
# Prometheus but are never delivered; clean traffic must deliver nothing.
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
# from the original in `for:` lines only. Three alerts that are briefly true while the stack
# starts (RetryscopeCollectorAbsent and RetryscopeNotIngesting before the first scrapes,
# RetryscopePartitionUnowned before the NATS collector takes its partitions) get 30s instead:
# as shipped (5m-15m) their `for:` covers start-up; at 2s they would fire, reach the
# Alertmanager, and make "clean traffic delivers nothing" untestable. The range windows (5m, 10m, 30m) are not changed:
# rate() over a 10m window that holds only a minute of samples is still a true per-second
# rate of that window, so the volume floors are met only by real, sustained traffic.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${RETRYSCOPE_BIN:-./target/debug/retryscope}
PROMETHEUS=${PROMETHEUS:-prometheus}
FIRE_TIMEOUT=${E2E_FIRE_TIMEOUT:-120} # seconds scenario A may take to fire everything
CLEAN_SECS=${E2E_CLEAN_SECS:-20}      # seconds scenario B scrapes flowing data
FOR=2s                                # the shortened `for:`
FOR_STARTUP=30s                       # ... of the alerts that are true during start-up
STARTUP_ALERTS=(RetryscopeCollectorAbsent RetryscopeNotIngesting RetryscopePartitionUnowned)
ALERTMANAGER=${ALERTMANAGER:-prometheus-alertmanager}
EXPECTED_FIRING=(RetryscopeRetryStorm RetryscopeAbandonedToolExecuted RetryscopeDuplicateEffect)
# What Alertmanager must deliver for the storm: one group, this alert of this agent. The
# others are firing in Prometheus and inhibited by it (dashboards/alertmanager.yml).
STORM_AGENT=help-desk
STORM_NOTIFIED=RetryscopeRetryStorm
STORM_INHIBITED=(RetryscopeAbandonedToolExecuted RetryscopeDuplicateEffect RetryscopeModelRetryStorm
  RetryscopeWastedSpendHigh RetryscopeUnfinishedToolExecuted RetryscopeSplicedText)
# Alerts allowed to be firing or pending in the clean scenario: none.
CLEAN_ALLOWED=()

START=$SECONDS
tmp=$(mktemp -d "${TMPDIR:-/tmp}/retryscope-e2e.XXXXXX")
pids=()
results=()
failed=0

stop_all() {
  local pid= i
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  # An orderly stop is quick; whatever still runs after 3s (a collector finishing its last
  # checkpoint against a server that is going away) is killed.
  for i in $(seq 1 30); do
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && break; pid=; done
    [ -z "$pid" ] && break
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
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
# A loopback port for a server started next (Prometheus, Alertmanager and nats-server cannot
# be asked for port 0 and report it): below the kernel's ephemeral range (32768 and up unless
# widened), so an outgoing connection is never given it as its source port before the server
# binds it, picked at random there and never the same twice in this run
# (tests/common/harness.rs does the same).
free_port() {
  python3 - "$tmp/ports" <<'PY'
import random, socket, sys
given = set()
try:
    given = set(open(sys.argv[1]).read().split())
except OSError:
    pass
low = 32768
try:
    low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
except (OSError, ValueError, IndexError):
    pass
top = max(low, 11024) - 1
for _ in range(1000):
    port = random.randint(min(20000, top - 1000), top)
    if str(port) in given:
        continue
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        continue
    finally:
        s.close()
    open(sys.argv[1], "a").write(f"{port}\n")
    print(port)
    break
else:
    sys.exit("no free port in 20000-32767")
PY
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

for tool in "$PROMETHEUS" promtool "$ALERTMANAGER" amtool nats-server python3; do
  command -v "$tool" >/dev/null 2>&1 ||
    die "$tool not found (Debian: apt-get install prometheus prometheus-alertmanager nats-server python3)"
done
[ -x "$BIN" ] || die "$BIN is not an executable (cargo build, or set RETRYSCOPE_BIN)"

# ------------------------------------------------------------------------- the rules copy

# Shorten every non-zero `for:` (the start-up ones to $FOR_STARTUP); leave `for: 0m` and
# everything else as shipped.
cat >"$tmp/for.py" <<'EOF'
import re, sys
short, startup, slow = sys.argv[1], sys.argv[2], set(sys.argv[3:])
alert = None
for line in sys.stdin:
    m = re.match(r"\s*- alert:\s*(\S+)", line)
    if m:
        alert = m.group(1)
    m = re.match(r"^(\s*for:\s*)([1-9][0-9]*[smh])\s*$", line)
    if m:
        line = m.group(1) + (startup if alert in slow else short) + "\n"
    sys.stdout.write(line)
EOF
python3 "$tmp/for.py" "$FOR" "$FOR_STARTUP" "${STARTUP_ALERTS[@]}" <dashboards/alerts.yml >"$tmp/alerts.yml"
if ! diff <(grep -vE '^[[:space:]]*for:' dashboards/alerts.yml) \
  <(grep -vE '^[[:space:]]*for:' "$tmp/alerts.yml") >/dev/null; then
  die "the rules copy differs from dashboards/alerts.yml outside its for: lines"
fi
shortened=$(diff dashboards/alerts.yml "$tmp/alerts.yml" | grep -c '^>' || true)
[ "$shortened" -gt 0 ] || die "no for: duration was shortened (has alerts.yml changed shape?)"
promtool check rules "$tmp/alerts.yml" >/dev/null || die "promtool rejects the rules copy"
log "rules copy: $shortened for: durations set to $FOR ($FOR_STARTUP for ${STARTUP_ALERTS[*]}), expressions unchanged"

# ------------------------------------------------------------------------- the Alertmanager copy

amtool check-config dashboards/alertmanager.yml >/dev/null || die "amtool rejects dashboards/alertmanager.yml"
# The webhook URLs point at the local receiver (its port set per scenario); group_wait and
# group_interval are shortened. Nothing else may differ.
am_copy() { # PORT OUT
  sed -E -e "s#url: http://127\.0\.0\.1:5001/#url: http://127.0.0.1:$1/#" \
    -e 's/^([[:space:]]*group_wait:[[:space:]]*).*/\110s/' \
    -e 's/^([[:space:]]*group_interval:[[:space:]]*).*/\15s/' dashboards/alertmanager.yml >"$2"
  if ! diff <(grep -vE '^[[:space:]]*(group_wait|group_interval):|url: ' dashboards/alertmanager.yml) \
    <(grep -vE '^[[:space:]]*(group_wait|group_interval):|url: ' "$2") >/dev/null; then
    die "the Alertmanager copy differs from dashboards/alertmanager.yml outside its timings and URLs"
  fi
  amtool check-config "$2" >/dev/null || die "amtool rejects the Alertmanager copy"
}

# webhook.py PORT OUT: appends every notification (one POST) to OUT as one JSON line.
cat >"$tmp/webhook.py" <<'EOF'
import http.server, sys

port, out = int(sys.argv[1]), sys.argv[2]


class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        with open(out, "ab") as f:
            f.write(body.replace(b"\n", b" ") + b"\n")
        self.send_response(200)
        self.end_headers()

    def log_message(self, *a):
        pass


http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
EOF

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

    add(type="turn_start", model=model, provider=provider, agent="help-desk", session="s-" + turn)
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

# mock_upstream.py PORT: an Anthropic Messages stream for POST /v1/messages (text only);
# model "broken-upstream" gets a body that breaks mid-way (Content-Length not reached), which
# `retryscope proxy` counts as an upstream error. Modelled on the events of
# tests/fixtures/agents/claude-code (message_start ... message_stop).
cat >"$tmp/mock_upstream.py" <<'EOF'
import http.server, json, sys


def sse(event, data):
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


STREAM = b"".join([
    sse("message_start", {"type": "message_start", "message": {"id": "msg_e2e", "type": "message", "role": "assistant",
        "model": "claude-sonnet-4-5", "content": [], "stop_reason": None,
        "usage": {"input_tokens": 900, "output_tokens": 1}}}),
    sse("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Checking your order now, "}}),
    sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "one moment please."}}),
    sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
    sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 12}}),
    sse("message_stop", {"type": "message_stop"}),
])


class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
        broken = body.get("model") == "broken-upstream"
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(STREAM) + (1000 if broken else 0)))
        self.end_headers()
        self.wfile.write(STREAM[: len(STREAM) // 2] if broken else STREAM)
        self.wfile.flush()
        self.close_connection = True

    def log_message(self, *a):
        pass


http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
EOF

# traffic.py OTLP_PORT PROXY_PORT: what the storm run's receiver and proxy get. OTLP/HTTP:
# 40 accepted log requests, then two malformed ones 1.5s apart (a refusal the rate can see,
# and 2 of 42 requests: under RetryscopeOtlpReceiverRefusing's 5%). The proxy: Claude Code's
# User-Agent; the first request is cut mid-word (--inject; it offers no tools, so --inject-match all), sent again (a retry), and one
# request breaks upstream.
cat >"$tmp/traffic.py" <<'EOF'
import json, sys, time, urllib.error, urllib.request

otlp, proxy = sys.argv[1], sys.argv[2]


def post(url, body, headers):
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            r.read()
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except Exception as e:  # a cut or broken stream
        return type(e).__name__


logs = {"resourceLogs": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "e2e-otel"}}]},
        "scopeLogs": [{"scope": {}, "logRecords": [{"timeUnixNano": str(time.time_ns()), "body": {"stringValue": "hello"}}]}]}]}
ok = [post(f"http://127.0.0.1:{otlp}/v1/logs", json.dumps(logs).encode(), {"content-type": "application/json"}) for _ in range(40)]
bad = [post(f"http://127.0.0.1:{otlp}/v1/logs", b"{not json", {"content-type": "application/json"})]
time.sleep(1.5)
bad.append(post(f"http://127.0.0.1:{otlp}/v1/logs", b"{not json", {"content-type": "application/json"}))
ua = {"content-type": "application/json", "anthropic-version": "2023-06-01", "x-api-key": "sk-e2e",
      "user-agent": "claude-cli/2.1.328 (external, cli)"}
msg = {"model": "claude-sonnet-4-5", "stream": True, "max_tokens": 64,
       "messages": [{"role": "user", "content": "Where is my order ORD-7781?"}]}
calls = [post(f"http://127.0.0.1:{proxy}/v1/messages", json.dumps(msg).encode(), ua) for _ in range(2)]
time.sleep(1.5)
calls.append(post(f"http://127.0.0.1:{proxy}/v1/messages", json.dumps(dict(msg, model="broken-upstream")).encode(), ua))
print(f"traffic: OTLP accepted {ok.count(200)}/40, malformed answered {bad}; proxy {calls}")
EOF

wait_http() { # URL SECONDS: until it answers
  local i
  for i in $(seq 1 $(($2 * 5))); do
    http_get "$1" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  return 1
}

# start_extras DIR: the storm run's proxy (before a mock upstream), nats-server, shipper and
# `run --nats` collector; sets PROXY_PORT, PROXY_METRICS_PORT, CLUSTER_PORT.
start_extras() {
  local dir=$1 up nats
  up=$(free_port)
  PROXY_PORT=$(free_port)
  PROXY_METRICS_PORT=$(free_port)
  nats=$(free_port)
  CLUSTER_PORT=$(free_port)
  python3 "$tmp/mock_upstream.py" "$up" >"$dir/upstream.log" 2>&1 &
  pids+=($!)
  "$BIN" proxy --listen "127.0.0.1:$PROXY_PORT" --upstream "http://127.0.0.1:$up" \
    --inject mid-word --inject-first 1 --inject-match all --metrics-addr "127.0.0.1:$PROXY_METRICS_PORT" \
    --findings-out '' --idle-timeout-secs 5 >"$dir/proxy.log" 2>&1 &
  pids+=($!)
  mkdir -p "$dir/nats" "$dir/ship"
  nats-server -js -a 127.0.0.1 -p "$nats" -sd "$dir/nats" >"$dir/nats.log" 2>&1 &
  pids+=($!)
  : >"$dir/cluster.jsonl"
  NATS_URL="nats://127.0.0.1:$nats"
  local i
  for i in $(seq 1 50); do
    python3 -c 'import socket,sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1)' "$nats" 2>/dev/null && break
    sleep 0.2
  done
  # The collector waits for the events stream, which the shipper creates: ship_cluster runs
  # after Prometheus's first scrapes, so the takeovers move a counter Prometheus saw at 0.
  "$BIN" run --nats "nats://127.0.0.1:$nats" --instance c1 --lease-secs 2 --checkpoint-ms 500 \
    --metrics-addr "127.0.0.1:$CLUSTER_PORT" --findings-out '' --idle-timeout-secs 5 \
    >"$dir/cluster.log" 2>&1 &
  pids+=($!)
}

ship_cluster() { # DIR
  local dir=$1
  "$BIN" ship "$dir/cluster.jsonl" --nats "$NATS_URL" --data-dir "$dir/ship" \
    --source-id e2e --partitions 2 >"$dir/ship.log" 2>&1 &
  pids+=($!)
  python3 "$tmp/writer.py" clean "$dir/cluster.jsonl" &
  pids+=($!)
}

wait_scraped() { # N: until Prometheus has scraped N targets successfully
  local i
  for i in $(seq 1 60); do
    [ "$(prom_query "$PROM_PORT" 'count(up == 1)' 2>/dev/null |
      python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else 0)' 2>/dev/null)" = "$1" ] &&
      return 0
    sleep 0.5
  done
  return 1
}

# start_stack NAME MODE: webhook receiver, Alertmanager, writer, collector, Prometheus (and in
# storm mode the extras above); sets COLLECTOR_PORT, PROM_PORT, AM_PORT, NOTIFICATIONS.
start_stack() {
  local name=$1 mode=$2 dir="$tmp/$1"
  mkdir -p "$dir/tsdb" "$dir/am" "$dir/data"
  : >"$dir/agent.jsonl"
  NOTIFICATIONS="$dir/notifications.jsonl"
  : >"$NOTIFICATIONS"
  COLLECTOR_PORT=$(free_port)
  PROM_PORT=$(free_port)
  AM_PORT=$(free_port)
  local hook otlp
  hook=$(free_port)
  otlp=$(free_port)

  python3 "$tmp/webhook.py" "$hook" "$NOTIFICATIONS" &
  pids+=($!)
  am_copy "$hook" "$dir/alertmanager.yml"
  "$ALERTMANAGER" --config.file="$dir/alertmanager.yml" --storage.path="$dir/am" \
    --web.listen-address="127.0.0.1:$AM_PORT" --cluster.listen-address= --log.level=warn \
    >"$dir/alertmanager.log" 2>&1 &
  pids+=($!)

  local extra=() targets="'127.0.0.1:$COLLECTOR_PORT'"
  if [ "$mode" = storm ]; then
    extra=(--otlp-listen "127.0.0.1:$otlp" --data-dir "$dir/data")
    start_extras "$dir"
    targets="$targets, '127.0.0.1:$PROXY_METRICS_PORT', '127.0.0.1:$CLUSTER_PORT'"
  fi
  "$BIN" run "$dir/agent.jsonl" --metrics-addr "127.0.0.1:$COLLECTOR_PORT" --findings-out '' \
    --idle-timeout-secs 5 "${extra[@]}" >"$dir/collector.log" 2>&1 &
  pids+=($!)

  cat >"$dir/prometheus.yml" <<EOF
# Generated by dashboards/e2e-alerts.sh (scenario $name).
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $tmp/alerts.yml
alerting:
  alertmanagers:
    - static_configs:
        - targets: ['127.0.0.1:$AM_PORT']
scrape_configs:
  - job_name: retryscope
    static_configs:
      - targets: [$targets]
EOF
  promtool check config "$dir/prometheus.yml" >/dev/null || die "$name: promtool rejects the generated config"
  "$PROMETHEUS" --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/tsdb" \
    --web.listen-address="127.0.0.1:$PROM_PORT" --log.level=warn >"$dir/prometheus.log" 2>&1 &
  pids+=($!)

  wait_http "http://127.0.0.1:$COLLECTOR_PORT/metrics" 30 ||
    { tail -n 20 "$dir/collector.log" >&2; die "$name: collector not serving /metrics on 127.0.0.1:$COLLECTOR_PORT"; }
  wait_http "http://127.0.0.1:$PROM_PORT/-/ready" 30 ||
    { tail -n 20 "$dir/prometheus.log" >&2; die "$name: Prometheus not ready on 127.0.0.1:$PROM_PORT"; }
  wait_http "http://127.0.0.1:$AM_PORT/-/ready" 30 ||
    { tail -n 20 "$dir/alertmanager.log" >&2; die "$name: Alertmanager not ready on 127.0.0.1:$AM_PORT"; }

  # Traffic starts once every target has been scraped: a counter must be seen at 0 before it
  # moves, or rate() never shows the move.
  local n=1
  [ "$mode" = storm ] && n=3
  wait_scraped "$n" || { dump "$name"; die "$name: Prometheus did not scrape all $n targets within 30s"; }
  python3 "$tmp/writer.py" "$mode" "$dir/agent.jsonl" &
  pids+=($!)
  if [ "$mode" = storm ]; then
    ship_cluster "$dir"
    python3 "$tmp/traffic.py" "$otlp" "$PROXY_PORT" >"$dir/traffic.log" 2>&1 &
    pids+=($!)
  fi
  log "$name: collector :$COLLECTOR_PORT, Prometheus :$PROM_PORT, Alertmanager :$AM_PORT, writer appending ($mode)"
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

stack_started=$SECONDS
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

# Alertmanager: ONE notification, the storm of agent help-desk; the inhibited alerts, firing
# in Prometheus, never delivered. Wait for the first notification, then a little more.
t1=$SECONDS
until [ -s "$NOTIFICATIONS" ] || [ $((SECONDS - t1)) -ge 40 ]; do sleep 1; done
# Every alert of the run was firing before the storm's group flushed (its group_wait started
# when the storm fired): one group_interval more catches anything else.
sleep 6
firing_now=$(alert_states "$PROM_PORT" | awk '$2 == "firing" {print $1}' | tr '\n' ' ')
log "storm: firing in Prometheus: $firing_now"
inhibited_in_am=$(http_get "http://127.0.0.1:$AM_PORT/api/v2/alerts" | python3 -c '
import json, sys
print(" ".join(sorted({a["labels"]["alertname"] for a in json.load(sys.stdin) if a["status"]["inhibitedBy"]})))')
log "storm: inhibited in Alertmanager: ${inhibited_in_am:-none}"
if verdict=$(python3 - "$NOTIFICATIONS" "$STORM_AGENT" "$STORM_NOTIFIED" "${STORM_INHIBITED[@]}" <<'EOF'
import json, sys
path, agent, notified, inhibited = sys.argv[1], sys.argv[2], sys.argv[3], set(sys.argv[4:])
notes = [json.loads(l) for l in open(path, encoding="utf-8") if l.strip()]
problems = []
if len(notes) != 1:
    problems.append(f"{len(notes)} notifications, want 1: " + "; ".join(
        f"{n.get('groupLabels')} {[a['labels']['alertname'] for a in n.get('alerts', [])]}" for n in notes))
for n in notes:
    names = {a["labels"]["alertname"] for a in n.get("alerts", [])}
    if names & inhibited:
        problems.append(f"inhibited alerts delivered: {sorted(names & inhibited)}")
if notes:
    n = notes[0]
    if n.get("groupLabels") != {"agent": agent, "alertname": notified}:
        problems.append(f"group {n.get('groupLabels')}, want agent={agent} alertname={notified}")
    if n.get("status") != "firing" or any(a["labels"].get("agent") != agent for a in n.get("alerts", [])):
        problems.append(f"not the firing storm of {agent}: {n.get('status')} {[a['labels'] for a in n.get('alerts', [])]}")
    if n.get("receiver") != "pager":
        problems.append(f"receiver {n.get('receiver')}, want pager (severity critical)")
if problems:
    print("; ".join(problems))
    sys.exit(1)
n = notes[0]
print(f"1 notification to {n['receiver']}: {n['groupLabels']}, {len(n['alerts'])} alert(s): {n['alerts'][0]['annotations']['summary']}")
EOF
); then
  pass "storm: Alertmanager delivered $verdict"
else
  fail_soft "storm: Alertmanager: $verdict"
fi
for a in RetryscopeAbandonedToolExecuted RetryscopeDuplicateEffect; do
  if grep -qw "$a" <<<"$firing_now" && grep -qw "$a" <<<"$inhibited_in_am"; then
    pass "storm: $a firing in Prometheus, inhibited in Alertmanager, not delivered"
  else
    fail_soft "storm: $a should be firing in Prometheus (${firing_now}) and inhibited in Alertmanager (${inhibited_in_am:-none})"
  fi
done

# Every dashboard panel against this Prometheus: the storm collector (files, OTLP receiver,
# checkpoints), the proxy and the NATS collector have been scraped since the stack started.
log "storm: $(cat "$tmp/storm/traffic.log" 2>/dev/null || echo 'traffic: not finished')"
if python3 dashboards/check-panels.py --prometheus "http://127.0.0.1:$PROM_PORT" \
  --window "$((SECONDS - stack_started + 5))s" >"$tmp/check-panels.out" 2>&1; then
  cat "$tmp/check-panels.out"
  pass "storm: every dashboard panel has data ($(head -n 1 "$tmp/check-panels.out" | sed 's/^check-panels: //'))"
else
  cat "$tmp/check-panels.out" >&2
  fail_soft "storm: dashboard panels without data (check-panels.py)"
fi

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
# Nothing reached the webhook receiver (group_wait is 10s: anything firing before the last
# 10s of the observation would have been delivered).
if [ -s "$NOTIFICATIONS" ]; then
  fail_soft "clean: Alertmanager delivered: $(cut -c1-300 "$NOTIFICATIONS")"
else
  pass "clean: Alertmanager delivered nothing"
fi
[ "$failed" = 0 ] || dump clean
stop_all

summary
[ "$failed" = 0 ] && echo "e2e-alerts: PASS" || { echo "e2e-alerts: FAIL"; exit 1; }
