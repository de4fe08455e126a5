#!/usr/bin/env bash
# The amplification request of issue 24: 2-byte empty log records, gzip'd (a 7.8 KB request
# reached 2.56 GiB; three at once 5.05 GiB with the queue gauge at 568 MB against 128 MiB).
# Here: 8,000,000 empty records (16 MB decoded, ~16 KB gzip'd) over OTLP/HTTP and gRPC, three
# at once each. Bound: refused (413 / too_large; 429 / busy while the others hold the
# queue's room) before decoding; peak RSS <= 256 MiB
# over idle; the queue gauge never over its limit; an ordinary request still accepted.
set -euo pipefail
NETLIB=$(dirname "$(realpath "$0")") exec python3 - <<'PY'
import gzip, os, sys, threading, time
sys.path.insert(0, os.environ["NETLIB"])
from netlib import *

body = gzip.compress(empty_log_records(8_000_000 - 10), 9)
print(f"  request: {len(body)} B gzip'd, 8,000,000 empty records")
rs = Retryscope()
auth = [("authorization", "Bearer s3cret"), ("content-type", "application/x-protobuf"),
        ("content-encoding", "gzip")]
statuses = []
def http_one():
    statuses.append(post(rs.http_port, "/v1/logs", body, auth, timeout=60))
def grpc_one():
    s = h2_open(rs.grpc_port)
    h2_request(s, 1, grpc_headers(rs.grpc_port, token="s3cret", gzip=True), grpc_frame(body, True))
    h2_wait_end(s, 1, 60)
    s.close()
queue_max = 0.0
stop = False
def watch_queue():
    global queue_max
    while not stop:
        try:
            queue_max = max(queue_max, rs.count("retryscope_otlp_receiver_queue_bytes"))
        except OSError as e:
            print(f"  /metrics did not answer: {e}")
            check(False, "/metrics answers during the attack")
        time.sleep(0.2)
w = threading.Thread(target=watch_queue); w.start()
jobs = [threading.Thread(target=f) for f in (http_one,) * 3 + (grpc_one,) * 3]
t0 = time.time()
for j in jobs: j.start()
for j in jobs: j.join()
took = time.time() - t0
ok = post(rs.http_port, "/v1/logs", log_request("hello"), auth[:2])
stop = True; w.join()
peak = rs.peak_over_baseline()
tl_http = rs.count("retryscope_otlp_receiver_requests_total", protocol="http_protobuf", outcome="too_large")
tl_grpc = rs.count("retryscope_otlp_receiver_requests_total", protocol="grpc", outcome="too_large")
# One that finds the queue's room held by the others being inflated is refused as busy.
busy = rs.count("retryscope_otlp_receiver_requests_total", outcome="busy")
print(f"  6 requests in {took:.1f}s: HTTP statuses {sorted(statuses)}; too_large http={tl_http:.0f} "
      f"grpc={tl_grpc:.0f} busy={busy:.0f}; peak RSS +{peak/MIB:.0f} MiB; queue gauge max {queue_max/MIB:.1f} MiB")
check(len(statuses) == 3 and all(st in (413, 429) for st in statuses),
      "OTLP/HTTP: 413 (or 429 while the others hold the room)")
check(tl_http + tl_grpc >= 1 and tl_http + tl_grpc + busy == 6,
      "all six refused before decoding and counted (too_large, or busy)")
check(peak <= 256 * MIB, "peak RSS over idle <= 256 MiB")
check(queue_max <= 128 * MIB, "queue gauge within its 128 MiB limit")
check(ok == 200, "an ordinary request is still accepted")
rs.stop()
done()
PY
