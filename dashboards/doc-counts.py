#!/usr/bin/env python3
"""Keep the counts the docs quote (alerts, rule groups, panels, rows, variables) true.

Usage:
    python3 dashboards/doc-counts.py            # rewrite them from the files
    python3 dashboards/doc-counts.py --check    # exit 1 if a doc differs (CI)

The numbers live between markers in docs/monitoring.md and dashboards/README.md:

    <!-- counts:alerts -->18 alerts in 6 groups (...)<!-- /counts -->

and are computed from dashboards/alerts.yml (every `- alert:` and group `- name:`),
dashboards/alerts.test.yml (its test cases) and dashboards/retryscope.json (panels, rows,
variables). A marker whose key is unknown is an error. Standard library only.
"""

import argparse
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DOCS = [os.path.join(REPO, "docs", "monitoring.md"), os.path.join(HERE, "README.md")]
MARK = re.compile(r"<!-- counts:(\w+) -->(.*?)<!-- /counts -->", re.S)


def rules():
    groups, alerts, group = [], {}, None
    with open(os.path.join(HERE, "alerts.yml"), encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^  - name:\s*(\S+)", line)
            if m:
                group = m.group(1)
                groups.append(group)
                alerts[group] = []
            m = re.match(r"^\s*- alert:\s*(\S+)", line)
            if m:
                alerts[group].append(m.group(1))
    return groups, alerts


def tests():
    with open(os.path.join(HERE, "alerts.test.yml"), encoding="utf-8") as f:
        return sum(1 for line in f if re.match(r"^  - name:", line))


def dashboard():
    with open(os.path.join(HERE, "retryscope.json"), encoding="utf-8") as f:
        d = json.load(f)

    def walk(ps):
        for p in ps or []:
            yield p
            yield from walk(p.get("panels"))

    all_panels = list(walk(d.get("panels")))
    rows = [p["title"] for p in all_panels if p.get("type") == "row"]
    panels = [p for p in all_panels if p.get("type") != "row"]
    variables = [v["name"] for v in d.get("templating", {}).get("list", [])]
    return rows, panels, variables


def values():
    groups, alerts = rules()
    n_alerts = sum(len(a) for a in alerts.values())
    rows, panels, variables = dashboard()
    return {
        "alerts": f"{n_alerts} alerts in {len(groups)} groups: "
        + ", ".join(f"`{g}` ({len(alerts[g])})" for g in groups),
        "alert_tests": f"{tests()} test cases",
        "panels": f"{len(panels)} panels in {len(rows)} rows: " + ", ".join(rows),
        "variables": ", ".join(f"`{v}`" for v in variables),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="only check; exit 1 on a difference")
    args = ap.parse_args()
    want = values()
    bad = 0
    for path in DOCS:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        found = MARK.findall(text)
        for key, _ in found:
            if key not in want:
                print(f"doc-counts: {path}: unknown counts key {key!r}", file=sys.stderr)
                bad += 1
        new = MARK.sub(lambda m: f"<!-- counts:{m.group(1)} -->{want.get(m.group(1), m.group(2))}<!-- /counts -->", text)
        if new == text:
            print(f"doc-counts: {os.path.relpath(path, REPO)}: {len(found)} count(s) up to date")
            continue
        if args.check:
            for (key, old), (_, cur) in zip(found, MARK.findall(new)):
                if old != cur:
                    print(f"doc-counts: {os.path.relpath(path, REPO)}: {key} says {old!r}, the files say {cur!r}", file=sys.stderr)
            bad += 1
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write(new)
            print(f"doc-counts: {os.path.relpath(path, REPO)}: rewritten")
    if bad:
        print("doc-counts: run python3 dashboards/doc-counts.py to rewrite them", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
