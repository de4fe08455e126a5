#!/usr/bin/env bash
# Slow bodies (issue 24: 500 connections sending 1 byte per 5 s stayed open). 500 OTLP/HTTP
# requests with the token, from 5 peer addresses, each announcing 1,000 bytes and sending one
# byte every 2 s; the body deadline is 5 s here. Bound: every one answered 408 or closed
# within 8 s, each counted (body_timeout), peak RSS <= 256 MiB over idle.
set -euo pipefail
NETLIB=$(dirname "$(realpath "$0")") exec python3 - <<'PY'
import os, selectors, sys, time
sys.path.insert(0, os.environ["NETLIB"])
from netlib import *

rs = Retryscope("--body-timeout-ms", "5000")
head = (b"POST /v1/logs HTTP/1.1\r\nhost: x\r\nauthorization: Bearer s3cret\r\n"
        b"content-type: application/x-protobuf\r\ncontent-length: 1000\r\n\r\n")
sel = selectors.DefaultSelector()
socks = []
for i in range(500):
    s = connect(rs.http_port, source=f"127.0.0.{10 + i % 5}")
    s.sendall(head)
    s.setblocking(False)
    sel.register(s, selectors.EVENT_READ)
    socks.append(s)
t0 = time.time()
answered, statuses = set(), {}
next_byte = t0
while time.time() - t0 < 9 and len(answered) < len(socks):
    if time.time() >= next_byte:
        for s in socks:
            if s not in answered:
                try:
                    s.send(b"x")
                except OSError:
                    pass
        next_byte += 2
    for key, _ in sel.select(timeout=0.2):
        s = key.fileobj
        try:
            data = s.recv(4096)
        except OSError:
            data = b""
        statuses[s] = data[9:12].decode(errors="replace") if data else "closed"
        answered.add(s)
        sel.unregister(s)
took = time.time() - t0
counted = rs.count("retryscope_listener_connections_refused_total", listener="otlp_http", reason="body_timeout")
peak = rs.peak_over_baseline()
kinds = {}
for v in statuses.values():
    kinds[v] = kinds.get(v, 0) + 1
print(f"  500 slow bodies: {len(answered)} answered in {took:.1f}s {kinds}; counted {counted:.0f}; "
      f"peak RSS +{peak/MIB:.0f} MiB")
check(len(answered) == 500 and took < 8.5, "every slow body answered or closed by the deadline")
check(kinds.get("408", 0) == 500, "each answered 408")
check(counted == 500, "each counted as body_timeout")
check(peak <= 256 * MIB, "peak RSS over idle <= 256 MiB")
for s in socks: s.close()
rs.stop()
done()
PY
