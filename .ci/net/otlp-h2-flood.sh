#!/usr/bin/env bash
# HTTP/2 stream floods (issue 24: one h2 connection without a token, 100 streams of
# unfinished bodies: 1.08 GiB). 10 connections x 100 streams, each stream's body a message
# header promising 16 MiB and 500 bytes of it, never finished: 5 connections without the
# token, 5 with it. Bound: without the token every stream refused at once (unauthorized); with
# it at most --max-streams-per-connection (32) streams per connection, each cut at the body
# deadline (3 s here) and counted; peak RSS <= 256 MiB over idle; /metrics answers throughout.
set -euo pipefail
NETLIB=$(dirname "$(realpath "$0")") exec python3 - <<'PY'
import os, struct, sys, threading, time
sys.path.insert(0, os.environ["NETLIB"])
from netlib import *

rs = Retryscope("--body-timeout-ms", "3000")
partial = grpc_frame(b"", False)[:1] + struct.pack(">I", 16 * MIB) + b"\x0a" * 500
conns = []
t0 = time.time()
for c in range(10):
    token = "s3cret" if c % 2 else None
    s = h2_open(rs.grpc_port)
    for i in range(100):
        h2_request(s, 2 * i + 1, grpc_headers(rs.grpc_port, token=token), partial, end=False)
    conns.append(s)
readers = [threading.Thread(target=h2_drain, args=(s, 5)) for s in conns]
for r in readers: r.start()
time.sleep(1)
try:
    t = time.time(); st = rs.get("/metrics", timeout=1); metrics_s = time.time() - t
except OSError:
    st, metrics_s = 0, 99
for r in readers: r.join()
unauth = rs.count("retryscope_otlp_receiver_requests_total", protocol="grpc", outcome="unauthorized")
slow = rs.count("retryscope_listener_connections_refused_total", listener="otlp_grpc", reason="body_timeout")
too_slow = rs.count("retryscope_otlp_receiver_requests_total", protocol="grpc", outcome="too_slow")
peak = rs.peak_over_baseline()
print(f"  1000 streams on 10 connections in {time.time()-t0:.1f}s: unauthorized {unauth:.0f}, "
      f"body timeouts {slow:.0f} (too_slow {too_slow:.0f}); /metrics {st} in {metrics_s*1000:.0f} ms; "
      f"peak RSS +{peak/MIB:.0f} MiB")
check(unauth >= 5 * 32, "streams without the token refused at once and counted")
check(0 < slow <= 5 * 32 and too_slow == slow, "streams with the token capped per connection and cut at the body deadline, counted")
check(st == 200 and metrics_s < 1, "/metrics answers during the flood")
check(peak <= 256 * MIB, "peak RSS over idle <= 256 MiB")
for s in conns: s.close()
rs.stop()
done()
PY
