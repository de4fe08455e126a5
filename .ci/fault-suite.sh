#!/usr/bin/env bash
# Fault suite (issue 11): the promises of docs/reliability.md under faults, against the real
# binary. Each part prints its figures; any broken promise fails the script.
#
#   1. kill -9 loop with rotations: findings exactly once, compared with `check` of the log
#   2. full disk (a size-limited tmpfs; needs root, skipped with a message otherwise)
#   3. unusable checkpoints of every kind: refused, never "start fresh"
#   4. 5,000 files under a low descriptor limit; CPU of 5,000 idle files
#   5. symlink loops under `check DIR`
#   6. hostile bytes in every string field: no panic, valid --json, no raw controls anywhere
#
# Usage: bash .ci/fault-suite.sh [BIN]   (BIN defaults to target/debug/retryscope)
# BASELINE_BIN=/path/to/older/retryscope adds its idle CPU figure for comparison.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${1:-target/debug/retryscope}")
WORK=$(mktemp -d "${TMPDIR:-/tmp}/retryscope-faults.XXXXXX")
PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill -9 "$p" 2>/dev/null || true; done
  if mountpoint -q "$WORK/full" 2>/dev/null; then umount "$WORK/full" || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
fail() { echo "FAULT SUITE FAIL: $*" >&2; exit 1; }
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
scrape() { # scrape PORT NAME_PREFIX -> sum of matching series
  python3 - "$1" "$2" <<'PY'
import sys, urllib.request
try:
    body = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=5).read().decode()
except Exception:
    print(-1); sys.exit()
total = 0.0
for line in body.splitlines():
    if line.startswith(sys.argv[2]):
        total += float(line.rsplit(" ", 1)[1])
print(int(total))
PY
}
# A turn with findings (the bookstore example) under a unique id.
turn() { sed "s/bookstore-1/$1/g" examples/bookstore/naive.jsonl; }
# Sorted finding identities of `check --json` over files, and of a findings file.
check_findings() {
  "$BIN" check --json "$@" | python3 -c '
import sys, json
for line in sys.stdin:
    o = json.loads(line)
    for f in o.get("findings", []):
        print(f["kind"], f["turn"], f.get("attempt"), f.get("call_id"))' | sort
}
file_findings() {
  python3 -c '
import sys, json
for line in open(sys.argv[1]):
    f = json.loads(line)
    print(f["kind"], f["turn"], f.get("attempt"), f.get("call_id"))' "$1" | sort
}
start_run() { # start_run PORT ARGS... ; sets RUN_PID
  local p=$1; shift
  "$BIN" run --metrics-addr "127.0.0.1:$p" "$@" >>"$WORK/run.out" 2>>"$WORK/run.err" &
  RUN_PID=$!
  PIDS+=("$RUN_PID")
}
wait_lines() { # wait_lines FILE N SECONDS
  local end=$((SECONDS + $3))
  while [ "$( (wc -l <"$1") 2>/dev/null || echo 0)" -lt "$2" ] && [ $SECONDS -lt $end ]; do sleep 0.2; done
}

echo "== 1. kill -9 loop with rotations =="
D=$WORK/kill9; mkdir -p "$D/logs"
FIND=$D/findings.jsonl
TURNS=600
(
  k=0
  for i in $(seq 1 "$TURNS"); do
    turn "k9-$i" >>"$D/logs/app.log"
    if [ $((i % 50)) -eq 0 ]; then k=$((k + 1)); mv "$D/logs/app.log" "$D/logs/app.log.$(printf %03d $k)"; fi
    [ $((i % 5)) -eq 0 ] && sleep 0.1
  done
) &
WRITER=$!
PIDS+=("$WRITER")
kills=0
P=$(port)
while kill -0 "$WRITER" 2>/dev/null; do
  start_run "$P" "$D/logs/app.log*" --data-dir "$D/data" --findings-out "$FIND"
  sleep "0.$((RANDOM % 9 + 4))"
  kill -9 "$RUN_PID" 2>/dev/null || true
  wait "$RUN_PID" 2>/dev/null || true
  kills=$((kills + 1))
done
wait "$WRITER" || true
start_run "$P" "$D/logs/app.log*" --data-dir "$D/data" --findings-out "$FIND"
LOGS=$(ls "$D"/logs/app.log.* | sort; [ -e "$D/logs/app.log" ] && echo "$D/logs/app.log" || true)
# shellcheck disable=SC2086
expected=$(check_findings $LOGS | wc -l)
wait_lines "$FIND" "$expected" 60
sleep 2
kill -TERM "$RUN_PID"; wait "$RUN_PID" || fail "run exited non-zero after the kill loop"
got=$(wc -l <"$FIND")
dups=$(file_findings "$FIND" | uniq -d | wc -l)
# shellcheck disable=SC2086
missing=$(comm -23 <(check_findings $LOGS) <(file_findings "$FIND" | sort -u) | wc -l)
echo "kill9: restarts=$kills rotations=$((TURNS / 50)) findings expected=$expected written=$got duplicated=$dups missing=$missing"
[ "$got" -eq "$expected" ] && [ "$dups" -eq 0 ] && [ "$missing" -eq 0 ] || fail "findings not exactly once across kill -9"

echo "== 2. full disk =="
D=$WORK/full; mkdir -p "$D"
if [ "$(id -u)" -ne 0 ] || ! mount -t tmpfs -o size=256k tmpfs "$D" 2>/dev/null; then
  echo "full disk: SKIPPED (needs root to mount a size-limited tmpfs)"
else
  mkdir -p "$WORK/fulllogs" "$WORK/fulldata"
  for i in $(seq 1 200); do turn "fd-$i"; done >"$WORK/fulllogs/app.log"
  expected=$(check_findings "$WORK/fulllogs/app.log" | wc -l)
  # Leave ~40 KiB free: the findings (~200 KiB) do not fit until the filler goes.
  dd if=/dev/zero of="$D/filler" bs=4k count=54 status=none 2>/dev/null || true
  P=$(port)
  start_run "$P" "$WORK/fulllogs/app.log" --data-dir "$WORK/fulldata" --findings-out "$D/findings.jsonl"
  sleep 4
  during=$(wc -l <"$D/findings.jsonl")
  failures=$(scrape "$P" retryscope_checkpoint_failures_total)
  rm -f "$D/filler"
  wait_lines "$D/findings.jsonl" "$expected" 30
  sleep 2
  kill -9 "$RUN_PID"; wait "$RUN_PID" 2>/dev/null || true
  start_run "$P" "$WORK/fulllogs/app.log" --data-dir "$WORK/fulldata" --findings-out "$D/findings.jsonl"
  sleep 3
  kill -TERM "$RUN_PID"; wait "$RUN_PID" || true
  got=$(wc -l <"$D/findings.jsonl")
  dups=$(file_findings "$D/findings.jsonl" | uniq -d | wc -l)
  echo "full disk: findings expected=$expected in file while full=$during checkpoints skipped while full=$failures after space freed and kill -9=$got duplicated=$dups"
  [ "$got" -eq "$expected" ] && [ "$dups" -eq 0 ] || fail "findings lost or doubled on a full disk"
  umount "$D"
fi

echo "== 3. unusable checkpoints =="
D=$WORK/cp; mkdir -p "$D/data"
turn cp-1 >"$D/app.log"
P=$(port)
start_run "$P" "$D/app.log" --data-dir "$D/data" --findings-out "$D/f.jsonl"
n_findings=$(check_findings "$D/app.log" | wc -l)
wait_lines "$D/f.jsonl" "$n_findings" 20; sleep 1.5
kill -TERM "$RUN_PID"; wait "$RUN_PID"
good=$(cat "$D/data/checkpoint.json")
# The findings file's length, where the checkpoint keeps it (version 5: `sinks.findings`;
# version 4 and older: `findings_offset`), replaced by the JSON value $2.
set_findings_position() {
  python3 - "$1" "$2" <<'PY'
import json, sys
cp = json.loads(sys.argv[1])
value = json.loads(sys.argv[2])
if "findings" in cp.get("sinks", {}):
    cp["sinks"]["findings"] = value
elif "findings_offset" in cp:
    cp["findings_offset"] = value
else:
    sys.exit("the checkpoint holds no findings position: " + ", ".join(sorted(cp)))
print(json.dumps(cp, separators=(",", ":")), end="")
PY
}
refused=0
for kind in empty truncated nul corrupt negative wrongtype; do
  case $kind in
    empty) : >"$D/data/checkpoint.json" ;;
    truncated) printf '%s' "${good:0:$((${#good} / 2))}" >"$D/data/checkpoint.json" ;;
    nul) head -c "${#good}" /dev/zero >"$D/data/checkpoint.json" ;;
    corrupt) printf '\xff\xfe garbage' >"$D/data/checkpoint.json" ;;
    negative) set_findings_position "$good" -5 >"$D/data/checkpoint.json" ;;
    wrongtype) set_findings_position "$good" '"12"' >"$D/data/checkpoint.json" ;;
  esac
  # A mutation that matched nothing would leave a good checkpoint, which run resumes from and
  # serves until the timeout: say so instead.
  ! printf '%s' "$good" | cmp -s - "$D/data/checkpoint.json" || fail "checkpoint '$kind': the mutation left the checkpoint unchanged"
  set +e
  timeout 20 "$BIN" run "$D/app.log" --data-dir "$D/data" --findings-out "$D/f.jsonl" --metrics-addr "127.0.0.1:$(port)" 2>"$D/err"
  rc=$?
  set -e
  [ $rc -eq 2 ] && grep -q -- --reset-checkpoint "$D/err" || fail "checkpoint '$kind': exit $rc, $(cat "$D/err")"
  refused=$((refused + 1))
done
[ "$(wc -l <"$D/f.jsonl")" -eq "$n_findings" ] || fail "a finding was written twice after a bad checkpoint"
echo "unusable checkpoints: $refused of 6 kinds refused with exit 2; findings file untouched ($n_findings lines)"

echo "== 4. 5,000 files under a low descriptor limit =="
D=$WORK/many; mkdir -p "$D/logs"
for i in $(seq 1 5000); do printf '{"turn":"m-%s","type":"turn_start","ts":1}\n{"turn":"m-%s","type":"turn_end","ts":2}\n' "$i" "$i" >"$D/logs/f$i.log"; done
P=$(port)
( ulimit -Sn 1024; ulimit -Hn 1024; exec "$BIN" run --metrics-addr "127.0.0.1:$P" "$D/logs/*.log" --data-dir "$D/data" --findings-out "" ) 2>"$D/err" &
RUN_PID=$!; PIDS+=("$RUN_PID")
sleep 6
watched=$(scrape "$P" retryscope_files_watched)
t_start=$SECONDS
# Idle handles are closed in turn (parked), so every file is read even under the limit.
end=$((SECONDS + 90))
while [ "$(scrape "$P" retryscope_turns_total)" -lt 5000 ] && [ $SECONDS -lt $end ]; do sleep 1; done
all_read_after=$((SECONDS - t_start + 6))
emfile=$(scrape "$P" 'retryscope_file_errors_total{kind="emfile"}')
rotations=$(scrape "$P" retryscope_file_rotations_total)
turns_low=$(scrape "$P" retryscope_turns_total)
kill -TERM "$RUN_PID"; wait "$RUN_PID" || fail "run under a low fd limit exited non-zero: $(tail -3 "$D/err")"
echo "fd limit 1024: files open at once=$watched turns=$turns_low of 5000 within ${all_read_after}s emfile_errors=$emfile rotations=$rotations"
[ "$turns_low" -eq 5000 ] || fail "not every file was read under the descriptor limit ($turns_low)"
[ "$rotations" -eq 0 ] || fail "out of descriptors was taken for rotations"
[ "$emfile" -gt 0 ] || fail "EMFILE not counted"
grep -q "not a rotation" "$D/err" || fail "no log line naming the failed opens"
# The same checkpoint with the default limit (soft raised to hard): every file, each once.
P=$(port)
start_run "$P" "$D/logs/*.log" --data-dir "$D/data" --findings-out ""
end=$((SECONDS + 60))
while [ "$(scrape "$P" retryscope_turns_total)" -lt 5000 ] && [ $SECONDS -lt $end ]; do sleep 0.5; done
turns=$(scrape "$P" retryscope_turns_total)
sleep 2
# CPU of 5,000 idle files over 10 s (utime + stime ticks of the process).
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
t0=$(ticks "$RUN_PID"); sleep 10; t1=$(ticks "$RUN_PID")
hz=$(getconf CLK_TCK)
cpu=$(python3 -c "print(f'{($t1-$t0)/$hz/10*100:.1f}')")
kill -TERM "$RUN_PID"; wait "$RUN_PID" || true
echo "restart from that checkpoint without the limit: turns=$turns (expected 5000, each once); idle CPU with 5,000 files: ${cpu}% of a core"
[ "$turns" -eq 5000 ] || fail "files under the low limit were lost or read twice ($turns turns)"
if [ -n "${BASELINE_BIN:-}" ]; then
  P=$(port)
  "$BASELINE_BIN" run --metrics-addr "127.0.0.1:$P" "$D/logs/*.log" --findings-out "" 2>/dev/null &
  B=$!; PIDS+=("$B"); sleep 8
  t0=$(ticks "$B"); sleep 10; t1=$(ticks "$B")
  kill -TERM "$B"; wait "$B" || true
  echo "baseline $BASELINE_BIN idle CPU with 5,000 files: $(python3 -c "print(f'{($t1-$t0)/$hz/10*100:.1f}')")% of a core"
fi

echo "== 5. symlink loops =="
D=$WORK/loops; mkdir -p "$D/sub"
turn loop-1 >"$D/a.jsonl"
ln -s .. "$D/sub/up"; ln -s . "$D/self"; ln -s a.jsonl "$D/alias.jsonl"
out=$(timeout 20 "$BIN" check --json "$D" | tail -1) || fail "check of a symlink loop did not finish"
echo "$out" | python3 -c 'import sys, json; s = json.load(sys.stdin)["summary"]; assert s["inputs"] == 1 and s["lines"] == 17, s; print("symlink loops: 1 input, 17 lines, finished")'

echo "== 6. hostile bytes in every string field =="
D=$WORK/hostile; mkdir -p "$D"
python3 - "$D/hostile.jsonl" <<'PY'
import json, random, sys
random.seed(11)
fields = ["turn", "model", "provider", "session", "agent", "traceparent", "request_id", "reason",
          "text", "id", "name", "effect_key", "status", "message", "code", "signal"]
nasty = ["\x1b]0;pwned\x07", "\r\x08\x00", "\x1b[2J", "\u009b31m", "\u202e", "\\x1b", "\x7f", "\ufeff"]
types = ["turn_start", "attempt_start", "retry", "text", "tool_call", "tool_exec", "usage",
         "finish", "error", "output", "turn_end", "stream_splice"]
with open(sys.argv[1], "wb") as out:
    for i in range(3000):
        o = {"turn": "t%d%s" % (i % 40, random.choice(nasty)), "type": random.choice(types),
             "ts": 1000 + i, "attempt": random.randint(0, 3)}
        for f in random.sample(fields, 6):
            o[f] = "".join(random.choice(nasty + ["x", "é"]) for _ in range(random.randint(0, 5)))
        if o["type"] == "usage":
            o["input_tokens"] = random.choice([1, 2**64 - 1, 10])
            o["output_tokens"] = 3
        line = json.dumps(o).encode()
        if i % 50 == 0:
            line = line[: len(line) // 2] + b"\xff\xfe" + line[len(line) // 2 :]
        out.write(line + b"\n")
PY
set +e
"$BIN" check -v "$D/hostile.jsonl" >"$D/text.out" 2>"$D/text.err"; rc_text=$?
"$BIN" check --json "$D/hostile.jsonl" >"$D/json.out" 2>"$D/json.err"; rc_json=$?
set -e
[ $rc_text -le 2 ] && [ $rc_json -le 2 ] || fail "check crashed on hostile bytes ($rc_text, $rc_json)"
python3 - "$D" <<'PY'
import json, sys
d = sys.argv[1]
def controls(b):
    t = b.decode("utf-8", "replace")
    return [c for c in t if (ord(c) < 32 and c != "\n") or 0x7f <= ord(c) <= 0x9f or c == "\u202e"]
for name in ["text.out", "text.err", "json.err"]:
    bad = controls(open(f"{d}/{name}", "rb").read())
    assert not bad, (name, bad[:5])
n = 0
for line in open(f"{d}/json.out", "rb"):
    json.loads(line); n += 1
print(f"hostile bytes: text report and stderr free of raw controls; {n} valid --json lines")
PY
P=$(port)
start_run "$P" "$D/hostile.jsonl" --findings-out ""
sleep 4
python3 - "$P" <<'PY'
import sys, urllib.request
body = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=5).read().decode()
bad = [c for c in body if (ord(c) < 32 and c != "\n") or 0x7f <= ord(c) <= 0x9f]
assert not bad, bad[:5]
print("hostile bytes: /metrics label values free of raw controls")
PY
kill -TERM "$RUN_PID"; wait "$RUN_PID" || true
echo "FAULT SUITE: all parts passed"
