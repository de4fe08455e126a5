#!/usr/bin/env python3
"""The results table of e2e/proxy/README.md from a run's folder:

  summarize.py OUT     (OUT/<client>/<scenario>/truth.json, metrics.txt, findings.jsonl)

One row per client x scenario: the step-1 attempts the upstream served, which attempts'
calls ran (marker files; `cut` = the attempt the proxy cut), what the proxy counted
(attempts, not completed, executions) and the finding kinds it reported.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import msum, msum_where, parse_metrics  # noqa: E402


def row(d):
    t = json.load(open(os.path.join(d, "truth.json")))
    main = t["main_requests"]
    step1 = [r for r in main if r["step"] == 1]
    ran = []
    for r in step1:
        for c in r["calls"]:
            if c["executed"]:
                ran.append(f"A{r['attempt']}" + (" (cut)" if r["cut_by_proxy"] else ""))
    samples = []
    if os.path.exists(os.path.join(d, "metrics.txt")):
        samples = parse_metrics(open(os.path.join(d, "metrics.txt")).read())
    att = msum(samples, "retryscope_attempts_total")
    notc = msum_where(samples, "retryscope_attempts_total", lambda lb: lb.get("outcome") != "completed")
    ex = msum(samples, "retryscope_tool_executions_total")
    kinds = set()
    fp = os.path.join(d, "findings.jsonl")
    if os.path.exists(fp):
        for line in open(fp, encoding="utf-8", errors="replace"):
            try:
                kinds.add(json.loads(line).get("kind"))
            except ValueError:
                pass
    run = t["run"]
    return (f"| {t['client']} | {t['scenario']} | {len(step1)} | {', '.join(ran) or 'none'} "
            f"| {att:g} ({notc:g} not completed) | {ex:g} | {', '.join(sorted(kinds)) or '-'} "
            f"| {run.get('exit_code')} | {run.get('seconds')} |")


def main():
    out = sys.argv[1]
    print("| client | scenario | step-1 attempts (upstream) | calls that ran (markers) "
          "| proxy: attempts | proxy: executions | proxy: findings | exit | seconds |")
    print("|---|---|---|---|---|---|---|---|---|")
    for c in sorted(os.listdir(out)):
        cd = os.path.join(out, c)
        if not os.path.isdir(cd):
            continue
        for s in sorted(os.listdir(cd)):
            if os.path.exists(os.path.join(cd, s, "truth.json")):
                print(row(os.path.join(cd, s)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
