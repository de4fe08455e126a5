#!/usr/bin/env bash
# Issue 24.4: an endless chunked `application/json` answer on a model path through
# `retryscope proxy`. Before: the proxy buffered the whole non-streaming answer (2.3 GiB RSS
# for 1.2 GB in 15 s). Now the answer is passed through unobserved once it outgrows the 8 MiB
# frame cap: the proxy's peak RSS stays under a bound and the answer is counted in
# retryscope_proxy_unobserved_answers_total.
#
# Contract of .ci/net-suite.sh: env BIN (the retryscope binary), WORK (a temp dir); loopback
# only; starts and kills its own processes; bounded: 1.2 GB or 15 s, whichever comes first.
set -euo pipefail
: "${BIN:?BIN=path to retryscope}" "${WORK:?WORK=a temp dir}"
BOUND_MIB=${BOUND_MIB:-160}   # peak RSS of the proxy (the idle proxy is ~15 MiB)
VOLUME=${VOLUME:-1200000000}  # bytes the upstream streams at most
SECONDS_MAX=${SECONDS_MAX:-15}
D="$WORK/proxy-endless-json"; mkdir -p "$D"
PIDS=()
cleanup() { for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill -9 "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
UP=$(port); PX=$(port); MX=$(port)

# The upstream: 200, application/json, chunked, `{"data":[` then the same 64 KiB element
# forever (until VOLUME bytes or the client leaves).
python3 - "$UP" "$VOLUME" <<'PY' &
import socket, sys, threading, time
port, volume = int(sys.argv[1]), int(sys.argv[2])
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", port)); srv.listen(8)
elem = (b'{"x":"' + b"a" * 65500 + b'"},')
chunk = b"%x\r\n" % len(elem) + elem + b"\r\n"
def serve(c):
    try:
        buf = b""
        while True:  # keep-alive: one request after another
            while b"\r\n\r\n" not in buf:
                got = c.recv(65536)
                if not got: return
                buf += got
            head, _, rest = buf.partition(b"\r\n\r\n")
            n = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"): n = int(line.split(b":")[1])
            while len(rest) < n:
                got = c.recv(65536)
                if not got: return
                rest += got
            buf = rest[n:]
            if b" /small" in head.split(b"\r\n")[0]:
                time.sleep(0.5)  # so that parallel requests need connections of their own
                c.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{\"ok\":true}")
                continue
            c.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n")
            c.sendall(b"a\r\n{\"data\":[ \r\n")
            sent = 0
            while sent < volume:
                c.sendall(chunk); sent += len(elem)
            c.sendall(b"0\r\n\r\n")
            return
    except OSError:
        pass
    finally:
        c.close()
while True:
    c, _ = srv.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
PY
PIDS+=($!)
for _ in $(seq 100); do
  python3 -c 'import socket,sys; socket.create_connection(("127.0.0.1",int(sys.argv[1])),1)' "$UP" 2>/dev/null && break
  sleep 0.1
done

printf 'findings_out = ""\n[proxy]\nupstream_idle_secs = 1\n' >"$D/proxy.toml"
"$BIN" proxy --config "$D/proxy.toml" --listen "127.0.0.1:$PX" --upstream "http://127.0.0.1:$UP" \
  --metrics-addr "127.0.0.1:$MX" --findings-out "" 2>"$D/proxy.err" &
PROXY=$!; PIDS+=($PROXY)
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$MX/metrics" >/dev/null && break; sleep 0.1; done
BASE_KB=$(awk '/^VmRSS/ {print $2}' "/proc/$PROXY/status")

START=$(date +%s.%N)
BYTES=$(curl -s --max-time "$SECONDS_MAX" -o /dev/null -w '%{size_download}' \
  -H 'content-type: application/json' -H 'authorization: Bearer sk-test' \
  --data '{"model":"gpt-4o","stream":false,"messages":[{"role":"user","content":"hi"}]}' \
  "http://127.0.0.1:$PX/v1/chat/completions" || true)
END=$(date +%s.%N)
PEAK_KB=$(awk '/^VmHWM/ {print $2}' "/proc/$PROXY/status")
sleep 0.5
COUNT=$(curl -s "http://127.0.0.1:$MX/metrics" | awk '/^retryscope_proxy_unobserved_answers_total/ {print $2}')
ALIVE=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$MX/healthz" || true)
# Idle upstream connections expire: 20 parallel requests open 20 upstream connections; at
# most 16 stay idle in the pool, and none after upstream_idle_secs (1 s here; 30 by default).
upstream_conns() { ss -Htn state established "( sport = :$UP )" | wc -l; }
for _ in $(seq 20); do curl -s -o /dev/null "http://127.0.0.1:$PX/small" & done
wait $(jobs -p | grep -v -w -e "${PIDS[0]}" -e "$PROXY") 2>/dev/null || true
sleep 0.2
HELD=$(upstream_conns)
sleep 3
LEFT=$(upstream_conns)
python3 - "$BYTES" "$START" "$END" "$BASE_KB" "$PEAK_KB" "${COUNT:-missing}" "$BOUND_MIB" "$ALIVE" "$HELD" "$LEFT" <<'PY'
import sys
b, t0, t1, base, peak, count, bound, alive, held, left = sys.argv[1:]
b, secs = int(b or 0), float(t1) - float(t0)
base_mib, peak_mib = int(base) / 1024, int(peak) / 1024
print(f"proxy-endless-json: {b/1e6:.0f} MB through the proxy in {secs:.1f} s "
      f"({b/1e6/max(secs,1e-9):.0f} MB/s); proxy RSS idle {base_mib:.0f} MiB, peak {peak_mib:.0f} MiB "
      f"(bound {bound} MiB); retryscope_proxy_unobserved_answers_total {count}; /healthz {alive}; "
      f"idle upstream connections after 20 parallel requests: {held}, 3 s later: {left}")
fails = []
if b < 100_000_000: fails.append(f"only {b} bytes reached the client (want at least 100 MB)")
if peak_mib > int(bound): fails.append(f"peak RSS {peak_mib:.0f} MiB over the bound {bound} MiB")
if count == "missing" or float(count) < 1: fails.append(f"the answer was not counted ({count})")
if alive != "200": fails.append(f"/healthz answered {alive}")
if int(held) > 16: fails.append(f"{held} idle upstream connections kept (at most 16 per host)")
if int(left) != 0: fails.append(f"{left} idle upstream connections still open after 3 s (idle timeout 1 s)")
if fails:
    print("FAIL: " + "; ".join(fails)); sys.exit(1)
PY
