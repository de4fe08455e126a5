#!/usr/bin/env bash
# 20,000 idle connections (issue 24: 19,980 idle connections to the TLS+token listeners took
# every descriptor; a client with the token and /metrics got no answer). Two holder processes
# (the test's own descriptor limit: 10,000 each) open 10,000 TCP connections each from
# 127.0.0.2 to the TLS+token OTLP/HTTP and OTLP/gRPC listeners and say nothing. Meanwhile a
# client with the token (from 127.0.0.1) must be served within 1 s and /metrics must answer.
# Bound: peak RSS <= 256 MiB over idle; the refusals (peer_cap) and the handshake timeouts
# counted; the held connections on each listener never over the per-peer cap.
set -euo pipefail
NETLIB=$(dirname "$(realpath "$0")") exec python3 - <<'PY'
import os, subprocess, sys, time
sys.path.insert(0, os.environ["NETLIB"])
from netlib import *

hard = raise_nofile()
per_holder = 10_000
if hard < per_holder + 100:
    print(f"  descriptor limit {hard}: holding {hard - 100} per process instead")
    per_holder = hard - 100
# Short handshake timeout so the held ones are seen timing out within the case.
rs = Retryscope("--handshake-timeout-ms", "3000", tls=True)
holder = r'''
import resource, socket, sys, threading, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
port, n = int(sys.argv[1]), int(sys.argv[2])
held = []
def opener(k):
    for i in range(k):
        s = socket.socket()
        s.setsockopt(socket.SOL_IP, 24, 1)  # IP_BIND_ADDRESS_NO_PORT: the port is picked at connect
        s.bind(("127.0.0.2", 0))
        try:
            s.connect(("127.0.0.1", port))
        except OSError:
            s.close(); continue
        held.append(s)
# Many openers: a SYN dropped while the listener's backlog is full costs its opener 1 s.
threads = [threading.Thread(target=opener, args=(n // 50,)) for _ in range(50)]
for t in threads: t.start()
for t in threads: t.join()
print(len(held), flush=True)
time.sleep(120)
'''
t0 = time.time()
holders = [subprocess.Popen([sys.executable, "-c", holder, str(p), str(per_holder)],
                            stdout=subprocess.PIPE, text=True, preexec_fn=raise_nofile)
           for p in (rs.http_port, rs.grpc_port)]
opened = [int(h.stdout.readline() or 0) for h in holders]
print(f"  {sum(opened)} connections opened from 127.0.0.2 in {time.time()-t0:.1f}s")
open_http = rs.count("retryscope_listener_connections", listener="otlp_http")
open_grpc = rs.count("retryscope_listener_connections", listener="otlp_grpc")
try:
    t = time.time(); st = rs.get("/metrics", timeout=1); metrics_s = time.time() - t
except OSError:
    st, metrics_s = 0, 99
t = time.time()
ok = post(rs.http_port, "/v1/logs", log_request("served"),
          [("authorization", "Bearer s3cret"), ("content-type", "application/x-protobuf")],
          tls=True, timeout=1)
served_s = time.time() - t
print(f"  while held: /metrics {st} in {metrics_s*1000:.0f} ms; token client {ok} in "
      f"{served_s*1000:.0f} ms; open http={open_http:.0f} grpc={open_grpc:.0f}")
check(st == 200 and metrics_s < 1, "/metrics answers within 1 s")
check(ok == 200 and served_s < 1, "a client with the token is served within 1 s")
check(open_http <= 256 and open_grpc <= 256, "held connections within the per-peer cap (256)")
time.sleep(3.5)
refused = rs.count("retryscope_listener_connections_refused_total", reason="peer_cap")
timed_out = rs.count("retryscope_listener_connections_refused_total", reason="handshake_timeout")
peak = rs.peak_over_baseline()
print(f"  refused at accept (peer_cap) {refused:.0f}; handshake timeouts {timed_out:.0f}; "
      f"peak RSS +{peak/MIB:.0f} MiB")
check(refused + timed_out >= sum(opened) - 512, "every connection over the cap refused or timed out, and counted")
check(timed_out >= 1, "silent TLS clients cut at the handshake timeout and counted")
check(peak <= 256 * MIB, "peak RSS over idle <= 256 MiB")
for h in holders:
    h.kill(); h.wait()
rs.stop()
done()
PY
