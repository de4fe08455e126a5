#!/usr/bin/env bash
# The OTLP/HTTP gzip bomb (issue 24; the gRPC one is otlp-grpc-bomb.sh): POST /v1/logs with
# `content-encoding: gzip`, ~2.1 MB inflating to 2 GiB (a valid request once inflated: empty
# log records), as protobuf and as JSON, with and without the token, on a plain and a
# TLS+token listener. First one of each alone, then 8 of each at once. Bound: with the token
# 413 (too_large; 429 / busy while the others hold the queue's room), without it 401 before
# the body is read (answered with only its first 64 KiB sent), each answer counted under its
# outcome; peak RSS <= 160 MiB over idle (BOUND_MIB; debug build: +82 to +108 MiB since the
# body and its inflation get one buffer each and inflating runs one request per core; +155 to
# +212 MiB before, which this bound fails);
# an ordinary request (protobuf, JSON) still 200.
set -euo pipefail
NETLIB=$(dirname "$(realpath "$0")") exec python3 - <<'PY'
import json, os, sys, threading, time
sys.path.insert(0, os.environ["NETLIB"])
from netlib import *

BOUND = int(os.environ.get("BOUND_MIB", 160)) * MIB  # peak RSS over idle
AT_ONCE = 8
bombs = {"http_protobuf": log_records_bomb(2 << 30), "http_json": json_logs_bomb(2 << 30)}
ctype = {"http_protobuf": "application/x-protobuf", "http_json": "application/json"}
legit = {"http_protobuf": log_request("after the bombs"),
         "http_json": json.dumps({"resourceLogs": [{"scopeLogs": [{"logRecords": [
             {"body": {"stringValue": "after the bombs"}}]}]}]}).encode()}
for p, (b, n) in bombs.items():
    print(f"  bomb {p}: {len(b)} B gzip'd -> {n / MIB:.0f} MiB")

config = os.path.join(WORK, "bomb.toml")
with open(config, "w") as f:
    f.write("[otlp_receiver]\nqueue_bytes = 67108864\n")  # as the gRPC case: 64 MiB
for tls in (False, True):
    name = "TLS+token" if tls else "plain+token"
    rs = Retryscope("--config", config, tls=tls)
    def headers(p, token, gzip=True):
        h = [("content-type", ctype[p])]
        if token:
            h.append(("authorization", f"Bearer {token}"))
        if gzip:
            h.append(("content-encoding", "gzip"))
        return h
    def send(p, token, out, send=None):
        t = time.time()
        st = post(rs.http_port, "/v1/logs", bombs[p][0], headers(p, token), tls=tls,
                  timeout=15, send=send)
        out.append((st, time.time() - t))
    t0 = time.time()
    # One of each alone: the refusal itself, no queue contention.
    alone = {}
    for p in bombs:
        alone[p, "token"] = []
        send(p, "s3cret", alone[p, "token"])
        alone[p, "none"] = []
        send(p, None, alone[p, "none"], send=64 * 1024)  # the rest never comes
    # 8 of each at once, the whole body sent.
    burst = {k: [] for k in alone}
    jobs = [threading.Thread(target=send, args=(p, "s3cret" if tok == "token" else None, burst[p, tok]))
            for p in bombs for tok in ("token", "none") for _ in range(AT_ONCE)]
    for j in jobs: j.start()
    for j in jobs: j.join()
    took = time.time() - t0
    peak = rs.peak_over_baseline()
    hwm = rs.status("VmHWM")
    after = {p: post(rs.http_port, "/v1/logs", legit[p], headers(p, "s3cret", gzip=False), tls=tls)
             for p in bombs}
    print(f"  {name}: {2 * (1 + AT_ONCE) * len(bombs)} bombs in {took:.1f}s; RSS idle "
          f"{rs.baseline / MIB:.0f} MiB, peak {hwm / MIB:.0f} MiB (+{peak / MIB:.0f} MiB)")
    for p in bombs:
        c = {o: rs.count("retryscope_otlp_receiver_requests_total", protocol=p, outcome=o)
             for o in ("too_large", "busy", "unauthorized", "accepted")}
        a_tok, a_none = alone[p, "token"][0], alone[p, "none"][0]
        b_tok = sorted(st for st, _ in burst[p, "token"])
        b_none = sorted(st for st, _ in burst[p, "none"])
        print(f"    {p}: alone: token {a_tok[0]} in {a_tok[1]*1000:.0f} ms, no token {a_none[0]} "
              f"in {a_none[1]*1000:.0f} ms (64 KiB of the body sent); at once: token {b_tok}, "
              f"no token {b_none}; after: {after[p]}; counted "
              + " ".join(f"{o}={v:.0f}" for o, v in c.items()))
        sts = [a_tok[0]] + b_tok
        check(a_tok[0] == 413, f"{name} {p}: a bomb with the token alone: 413")
        check(all(st in (413, 429) for st in b_tok),
              f"{name} {p}: {AT_ONCE} at once with the token: 413 (or 429 while the others hold the room)")
        check(a_none[0] == 401 and a_none[1] < 1,
              f"{name} {p}: without the token 401 before the body is read (within 1 s, 64 KiB sent)")
        check(b_none == [401] * AT_ONCE, f"{name} {p}: {AT_ONCE} at once without the token: 401")
        check(c["too_large"] == sts.count(413) and c["busy"] == sts.count(429)
              and c["too_large"] + c["busy"] == 1 + AT_ONCE,
              f"{name} {p}: each refusal with the token counted (too_large {sts.count(413)}, busy {sts.count(429)})")
        check(c["unauthorized"] == 1 + AT_ONCE, f"{name} {p}: each refusal without the token counted as unauthorized")
        check(after[p] == 200 and c["accepted"] == 1, f"{name} {p}: an ordinary request afterwards: 200, counted accepted")
    burst_413 = sum(st == 413 for p in bombs for st, _ in burst[p, "token"])
    check(burst_413 >= 1, f"{name}: at once, at least one bomb with the token inflated to the limit and refused 413 ({burst_413})")
    check(peak <= BOUND, f"{name}: peak RSS over idle <= {BOUND // MIB} MiB")
    check(rs.alive(), f"{name}: still serving")
    rs.stop()
done()
PY
