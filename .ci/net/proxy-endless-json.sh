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
BOUND_MIB=${BOUND_MIB:-160}   # peak RSS of the proxy (idle: ~25 MiB debug build; was 2.3 GiB)
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
python3 - "$PROXY" "$PX" "$MX" "$UP" "$SECONDS_MAX" "$BOUND_MIB" <<'PY'
import http.client, sys, threading, time, urllib.request
pid, px, mx, up, secs_max, bound = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6])
def get(port, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except Exception as e:
        return 0, str(e)
def status(field):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field):
            return int(line.split()[1])
for _ in range(100):
    if get(mx, "/metrics")[0] == 200: break
    time.sleep(0.1)
base_kb = status("VmRSS:")
# The endless answer, read until it ends or SECONDS_MAX passes.
t0 = time.time(); got = 0
c = http.client.HTTPConnection("127.0.0.1", px, timeout=10)
c.request("POST", "/v1/chat/completions",
          body=b'{"model":"gpt-4o","stream":false,"messages":[{"role":"user","content":"hi"}]}',
          headers={"content-type": "application/json", "authorization": "Bearer sk-test"})
r = c.getresponse()
while time.time() - t0 < secs_max:
    b = r.read1(1 << 20)
    if not b: break
    got += len(b)
c.close()
secs = time.time() - t0
peak_kb = status("VmHWM:")
time.sleep(0.5)
count = None
for line in get(mx, "/metrics")[1].splitlines():
    if line.startswith("retryscope_proxy_unobserved_answers_total"):
        count = float(line.split()[-1])
alive = get(mx, "/healthz")[0]
# Idle upstream connections expire: 20 parallel requests open 20 upstream connections; at
# most 16 stay idle in the pool, and none after upstream_idle_secs (1 s here; 30 by default).
def upstream_conns():  # established sockets on the upstream's side (local port = upstream)
    n = 0
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            for line in open(f).readlines()[1:]:
                cols = line.split()
                if int(cols[1].split(":")[1], 16) == up and cols[3] == "01": n += 1
        except OSError:
            pass
    return n
ts = [threading.Thread(target=get, args=(px, "/small")) for _ in range(20)]
for t in ts: t.start()
for t in ts: t.join()
time.sleep(0.2)
held = upstream_conns()
time.sleep(3)
left = upstream_conns()
base_mib, peak_mib = base_kb / 1024, peak_kb / 1024
print(f"proxy-endless-json: {got/1e6:.0f} MB through the proxy in {secs:.1f} s "
      f"({got/1e6/max(secs,1e-9):.0f} MB/s); proxy RSS idle {base_mib:.0f} MiB, peak {peak_mib:.0f} MiB "
      f"(bound {bound} MiB); retryscope_proxy_unobserved_answers_total {count}; /healthz {alive}; "
      f"idle upstream connections after 20 parallel requests: {held}, 3 s later: {left}")
fails = []
if got < 100_000_000: fails.append(f"only {got} bytes reached the client (want at least 100 MB)")
if peak_mib > bound: fails.append(f"peak RSS {peak_mib:.0f} MiB over the bound {bound} MiB")
if count is None or count < 1: fails.append(f"the answer was not counted ({count})")
if alive != 200: fails.append(f"/healthz answered {alive}")
if held > 16: fails.append(f"{held} idle upstream connections kept (at most 16 per host)")
if left != 0: fails.append(f"{left} idle upstream connections still open after 3 s (idle timeout 1 s)")
if fails:
    print("FAIL: " + "; ".join(fails)); sys.exit(1)
PY
