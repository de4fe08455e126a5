#!/usr/bin/env python3
"""Render every dashboard panel's queries against a REAL Prometheus and fail on empty panels.

Usage (dashboards/e2e-alerts.sh runs it against the Prometheus of its storm run):
    python3 dashboards/check-panels.py --prometheus http://127.0.0.1:9090 --window 60s

A screenshot of the dashboard needs Grafana, which this project cannot run; this is the
next best proof that no panel is silently empty. For every panel (collapsed rows included)
and every target:
  1. The Grafana variables are substituted as "All" ($job, $instance, $agent, $model -> .*;
     $__rate_interval -> --rate-interval) and the expression is evaluated over the run as
     `max_over_time((EXPR)[WINDOW:STEP])`: the panel's highest point over the run.
  2. Every target must return at least one series with a number (not NaN): a target that
     returns nothing is a panel line that never draws.
  3. Every panel must show a value above 0 on at least one target, unless it is listed in
     ZERO_OK with the reason the run cannot (and should not) make it move.

Exit status 1 with one line per problem. Standard library only.
"""

import argparse
import json
import math
import os
import re
import sys
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))

# Panels whose every target stays at 0 in the e2e run, by title, and why. Each one counts a
# failure or a degradation that a healthy run does not have: driving it would mean breaking
# the collector on purpose (a full disk, an unreachable trace backend, a label cap of 1).
ZERO_OK = {
    "Bad lines/s by reason": "the run's logs are well formed (bad lines: tests/live/run_collector.rs); only the proxy's deliberately broken upstream body may yield one",
    "Evictions, late and dropped events, file problems": "no turn is evicted or late, no log rotates and every file opens in the run (tests/live/tail_rotation.rs, tests/live/trust_tail.rs)",
    "OTLP export": "the run exports no traces (tests/otlp/export.rs)",
    "Label overflow by label": "no label reaches its cap (the caps are 20 to 100 values)",
    "Findings publish failures/s": "JetStream accepts every finding; a failure needs a broken findings stream",
    "Cluster data at risk/s": "the run's hold never fills (200,000 events a partition), no held message is purged and no finding is larger than the server's largest message (tests/nats/dead_letters.rs, tests/nats/lagging.rs, src/engine/sharded/tests/held.rs)",
    "Blind spots and stream states left out": "the run's native logs show attempts, cuts, executions and text, so no input kind is blind while they are read (a blind spot: tests/cli/coverage.rs), and it has far fewer than 10,000 streams",
    "Refused connections/s by listener and reason": "no client passes a listener's caps or timeouts in the run (src/listener/tests.rs)",
    "Source lag": "the collector keeps up with the writer: no byte waits unread at a scrape (a lagging tail: tests/live/trust_tail.rs)",
    "OTLP queue depth (records)": "the engine takes each accepted batch within milliseconds: the queue is empty at every scrape (a full queue: tests/otlp/backpressure.rs)",
}


def substitute(expr, rate_interval):
    expr = re.sub(r"\$\{?__rate_interval\}?", rate_interval, expr)
    expr = re.sub(r"\$\{?__(?:interval|range)\}?", rate_interval, expr)
    return re.sub(r"\$\{?(\w+)(?::\w+)?\}?", ".*", expr)


def query(base, expr, timeout=10):
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=timeout) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError(body.get("error", body))
    return body["data"]["result"]


def walk(panels):
    for p in panels or []:
        yield p
        yield from walk(p.get("panels"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prometheus", required=True, help="base URL, e.g. http://127.0.0.1:9090")
    ap.add_argument("--dashboard", default=os.path.join(HERE, "retryscope.json"))
    ap.add_argument("--window", default="60s", help="how far back the run goes")
    ap.add_argument("--step", default="1s")
    ap.add_argument("--rate-interval", default="1m")
    args = ap.parse_args()

    with open(args.dashboard, encoding="utf-8") as f:
        dash = json.load(f)
    problems, zero, checked, n_panels = [], [], 0, 0
    titles = set()
    for p in walk(dash.get("panels")):
        if p.get("type") == "row":
            continue
        title = p.get("title", "")
        titles.add(title)
        n_panels += 1
        where = f"panel {p.get('id')} {title!r}"
        best = None
        for t in p.get("targets") or []:
            expr = substitute(t["expr"], args.rate_interval)
            wrapped = f"max_over_time(({expr})[{args.window}:{args.step}])"
            checked += 1
            try:
                result = query(args.prometheus, wrapped)
            except Exception as e:  # noqa: BLE001 - report any failure as a problem
                problems.append(f"{where} target {t.get('refId')}: query failed: {e}")
                continue
            values = []
            for r in result:
                try:
                    v = float(r["value"][1])
                except (KeyError, ValueError, IndexError):
                    continue
                if not math.isnan(v):
                    values.append(v)
            if not values:
                problems.append(f"{where} target {t.get('refId')}: no data ({expr})")
                continue
            best = max(values) if best is None else max(best, max(values))
        if best is not None and best <= 0:
            if title in ZERO_OK:
                zero.append(f"{where}: 0 ({ZERO_OK[title]})")
            else:
                problems.append(f"{where}: every target is 0 over the run (drive it, or list it in ZERO_OK with the reason)")
    for title in sorted(set(ZERO_OK) - titles):
        problems.append(f"ZERO_OK lists {title!r}, which is not a panel")
    print(f"check-panels: {checked} targets of {n_panels} panels evaluated over {args.window}")
    for z in zero:
        print(f"check-panels: allowed zero: {z}")
    if problems:
        for p in problems:
            print(f"ERROR {p}", file=sys.stderr)
        print(f"check-panels: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print("check-panels: OK, every panel has data")
    return 0


if __name__ == "__main__":
    sys.exit(main())
