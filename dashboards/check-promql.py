#!/usr/bin/env python3
"""Check every PromQL expression in the retryscope dashboard and alerting rules.

Usage:
    python3 dashboards/check-promql.py --metrics-names dashboards/metric-names.txt

What it checks (exit status 1 and one line per problem if anything fails):
  1. `promtool check rules` accepts alerts.yml.
  2. Every expression parses: dashboard panel targets and variable queries (with Grafana
     variables substituted: $__rate_interval -> 1m, $job/$instance/$model -> .*) and
     alert expressions are written to a temporary rules file, one recording rule each, and
     checked with `promtool check rules`.
  3. Every retryscope_* metric name they reference is in the metric-name list. The list is
     one name per line (# comments allowed); a raw /metrics scrape also works.
  4. Dashboard conventions: every panel has a description and a unit; every range is
     $__rate_interval; every selector filters job=~"$job" and instance=~"$instance", and
     metrics with a model label also model=~"$model", with an agent label agent=~"$agent";
     every $variable used is defined.
  5. Every alert has a runbook_url with the same base, whose anchor is a heading of
     docs/runbook.md (GitHub heading slugs), and a severity of critical, high or warning.
  6. Every alert name dashboards/alertmanager.yml routes or inhibits on exists in the rules.
  7. Every exported metric (a histogram by its base name) is drawn by a dashboard panel and
     has a row in docs/monitoring.md's tables: a counter of lost data that no panel shows
     and no page explains is one nobody looks at.

Standard library only; needs promtool on PATH (or --promtool).
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

# Grafana built-in variables and what to substitute for them when parsing.
BUILTIN_VARS = {
    "__rate_interval": "1m",
    "__interval": "1m",
    "__range": "1h",
    "__interval_ms": "60000",
    "__range_s": "3600",
    "__range_ms": "3600000",
}
# Values substituted for the dashboard's own variables (they are regex matchers).
USER_VAR_VALUE = ".*"

# Metrics that carry a `model` label: their selectors must filter on $model.
MODEL_METRICS = {
    "retryscope_turns_total",
    "retryscope_attempts_total",
    "retryscope_retries_total",
    "retryscope_attempts_per_turn",
    "retryscope_billed_tokens_total",
    "retryscope_billed_cost_usd_total",
    "retryscope_turn_duration_seconds",
    "retryscope_attempt_duration_seconds",
}
# Metrics that carry an `agent` label: their selectors must filter on $agent.
AGENT_METRICS = {
    "retryscope_turns_total",
    "retryscope_retries_total",
    "retryscope_findings_total",
    "retryscope_billed_cost_usd_total",
}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")

VAR_RE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)(?::\w+)?\]\]")
STRING_RE = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
METRIC_RE = re.compile(r"(?<![\w:])(retryscope_[A-Za-z0-9_]+)")
# A selector: metric name followed by optional {matchers}. Used for the dashboard lint.
SELECTOR_RE = re.compile(r"(?<![\w:])(retryscope_[A-Za-z0-9_]+|up)\b(\s*\{([^}]*)\})?")


class Problems:
    def __init__(self):
        self.items = []

    def add(self, where, msg):
        self.items.append(f"{where}: {msg}")


# --------------------------------------------------------------------------- inputs


def load_metric_names(path):
    """Names, one per line; also accepts Prometheus exposition text (a /metrics scrape)."""
    names = set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name = re.split(r"[{\s]", line, maxsplit=1)[0]
            if not re.fullmatch(r"[A-Za-z_:][A-Za-z0-9_:]*", name):
                raise ValueError(f"{path}: not a metric name: {line!r}")
            names.add(name)
    return names


def walk_panels(panels):
    for p in panels or []:
        yield p
        # Collapsed rows keep their panels inside the row.
        yield from walk_panels(p.get("panels"))


def variable_query_exprs(query):
    """PromQL inside a Grafana Prometheus variable query, or None if it has none."""
    q = query.strip()
    m = re.fullmatch(r"label_values\((.*),\s*(\w+)\s*\)", q, re.S)
    if m:
        return m.group(1)
    if re.fullmatch(r"label_values\(\s*\w+\s*\)", q) or re.fullmatch(r"label_names\(.*\)", q, re.S):
        return None
    m = re.fullmatch(r"query_result\((.*)\)", q, re.S)
    if m:
        return m.group(1)
    m = re.fullmatch(r"metrics\((.*)\)", q, re.S)
    if m:
        return None
    return q


def dashboard_items(path, problems):
    """(where, expr, is_panel_target) for every expression in the dashboard, plus lint."""
    with open(path, encoding="utf-8") as f:
        dash = json.load(f)
    if "__inputs" in dash:
        problems.add(path, "has __inputs (export for sharing); provisioning needs a plain dashboard")
    items = []
    templating = dash.get("templating", {}).get("list", [])
    var_names = {v.get("name") for v in templating}
    for v in templating:
        if v.get("type") != "query":
            continue
        q = v.get("query")
        if isinstance(q, dict):
            q = q.get("query", "")
        expr = variable_query_exprs(q or "")
        if expr:
            items.append((f"{path}: variable ${v.get('name')}", expr, False))
    for p in walk_panels(dash.get("panels")):
        if p.get("type") == "row":
            continue
        where = f"{path}: panel {p.get('id')} {p.get('title')!r}"
        if not p.get("description"):
            problems.add(where, "no description")
        if not p.get("fieldConfig", {}).get("defaults", {}).get("unit"):
            problems.add(where, "no fieldConfig.defaults.unit")
        targets = p.get("targets") or []
        if not targets:
            problems.add(where, "no targets")
        for t in targets:
            expr = t.get("expr")
            if not expr:
                problems.add(where, f"target {t.get('refId')} has no expr")
                continue
            items.append((f"{where} target {t.get('refId')}", expr, True))
    return items, var_names


def lint_dashboard_expr(where, expr, problems):
    for rng in re.findall(r"\[([^\]]*)\]", STRING_RE.sub('""', expr)):
        if rng not in ("$__rate_interval", "${__rate_interval}"):
            problems.add(where, f"range [{rng}] should be [$__rate_interval]")
    for m in SELECTOR_RE.finditer(expr):
        name, matchers = m.group(1), m.group(3) or ""
        # Skip names that only occur inside a string (e.g. a regex on __name__).
        if STRING_RE.sub(lambda s: " " * len(s.group(0)), expr)[m.start(1)] == " ":
            continue
        required = ['job=~"$job"', 'instance=~"$instance"']
        base = name
        for suffix in HISTOGRAM_SUFFIXES:
            if base.endswith(suffix) and base[: -len(suffix)] in MODEL_METRICS:
                base = base[: -len(suffix)]
        if base in MODEL_METRICS:
            required.append('model=~"$model"')
        if base in AGENT_METRICS:
            required.append('agent=~"$agent"')
        compact = re.sub(r"\s+", "", matchers)
        for r in required:
            if r not in compact:
                problems.add(where, f"selector {name}{{{matchers}}} lacks {r}")


def substitute_vars(where, expr, var_names, problems):
    def repl(m):
        name = m.group(1) or m.group(2) or m.group(3)
        if name in BUILTIN_VARS:
            return BUILTIN_VARS[name]
        if name in var_names:
            return USER_VAR_VALUE
        problems.add(where, f"unknown variable ${name}")
        return USER_VAR_VALUE

    return VAR_RE.sub(repl, expr)


def yaml_scalar_value(raw):
    """The value of a one-line YAML scalar (plain, 'single' or "double" quoted)."""
    raw = raw.strip()
    if raw.startswith("'"):
        end = raw.rfind("'")
        return raw[1:end].replace("''", "'")
    if raw.startswith('"'):
        return json.loads(raw[: raw.rfind('"') + 1])
    return re.sub(r"\s+#.*$", "", raw)


def rules_items(path):
    """(alert name, expr) and (alert name, runbook_url) from a Prometheus rules file.

    Handles the shapes used in alerts.yml: `expr: <one line>` and block scalars
    (`expr: |`, `|-`, `>`, `>-`) whose lines are indented deeper than the key.
    """
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    exprs, runbooks, alerts = [], {}, []
    current = None
    i = 0
    while i < len(lines):
        line = lines[i]
        m = re.match(r"^\s*-?\s*(alert|record):\s*(.+)$", line)
        if m:
            current = yaml_scalar_value(m.group(2))
            if m.group(1) == "alert":
                alerts.append(current)
        m = re.match(r"^(\s*)runbook_url:\s*(.+)$", line)
        if m:
            runbooks[current] = yaml_scalar_value(m.group(2))
        m = re.match(r"^(\s*)(?:-\s*)?expr:\s*(.*)$", line)
        if m:
            indent, value = len(m.group(1)), m.group(2).strip()
            if re.fullmatch(r"[|>][+-]?", value):
                body = []
                i += 1
                while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
                    body.append(lines[i].strip())
                    i += 1
                exprs.append((current, "\n".join(body).strip()))
                continue
            exprs.append((current, yaml_scalar_value(value)))
        i += 1
    return alerts, exprs, runbooks


def github_slugs(markdown_path):
    slugs, seen = set(), {}
    in_fence = False
    with open(markdown_path, encoding="utf-8") as f:
        for line in f:
            if line.lstrip().startswith("```"):
                in_fence = not in_fence
                continue
            m = None if in_fence else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
            if not m:
                continue
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            slugs.add(slug if n == 0 else f"{slug}-{n}")
    return slugs


# --------------------------------------------------------------------------- promtool


def promtool_check(promtool, rules_path):
    r = subprocess.run([promtool, "check", "rules", rules_path], capture_output=True, text=True)
    return r.returncode, (r.stdout + r.stderr).strip()


def write_rules(path, exprs):
    with open(path, "w", encoding="utf-8") as f:
        f.write("groups:\n  - name: check-promql\n    rules:\n")
        for n, expr in enumerate(exprs):
            # A JSON string is a valid YAML double-quoted scalar.
            f.write(f"      - record: check_promql:expr_{n}\n        expr: {json.dumps(expr)}\n")


def check_parse(promtool, exprs, problems):
    """exprs: list of (where, promql). Batch first; on failure, pinpoint one by one."""
    with tempfile.TemporaryDirectory(prefix="check-promql.") as tmp:
        path = os.path.join(tmp, "exprs.rules.yml")
        write_rules(path, [e for _, e in exprs])
        rc, out = promtool_check(promtool, path)
        if rc == 0:
            return
        bad = 0
        for where, expr in exprs:
            write_rules(path, [expr])
            rc1, out1 = promtool_check(promtool, path)
            if rc1 != 0:
                bad += 1
                detail = " ".join(l.strip() for l in out1.splitlines() if "expr_0" in l or "parse" in l)
                problems.add(where, f"promtool rejects {expr!r}: {detail or out1}")
        if bad == 0:
            problems.add("promtool", f"rejected the batch but no single expression:\n{out}")


# --------------------------------------------------------------------------- main


def family_of(name, names):
    """A sample name's metric: a histogram's `_bucket`, `_sum` and `_count` are one."""
    base = re.sub(r"_(bucket|sum|count)$", "", name)
    return base if base != name and f"{base}_bucket" in names else name


def documented_metrics(path):
    """Metric names in the first cell of a table row of `path`. A row may name several, the
    later ones by their suffix after the first's stem: `retryscope_x_queue_records`,
    `_queue_bytes` is also retryscope_x_queue_bytes."""
    names = set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.startswith("| `retryscope_"):
                continue
            cell = line.split("|")[1]
            first = None
            for tok in re.findall(r"`([a-z_]+)`", cell):
                if tok.startswith("retryscope_"):
                    first = tok
                    names.add(tok)
                elif tok.startswith("_") and first:
                    parts = first.split("_")
                    stem = "_".join(parts[: len(parts) - (tok.count("_"))])
                    names.add(stem + tok)
    return names


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--metrics-names", required=True, help="file of metric sample names (or a /metrics scrape)")
    ap.add_argument("--dashboard", default=os.path.join(HERE, "retryscope.json"))
    ap.add_argument("--rules", default=os.path.join(HERE, "alerts.yml"))
    ap.add_argument("--runbook", default=os.path.join(REPO, "docs", "runbook.md"))
    ap.add_argument("--alertmanager", default=os.path.join(HERE, "alertmanager.yml"))
    ap.add_argument("--monitoring", default=os.path.join(REPO, "docs", "monitoring.md"))
    ap.add_argument("--promtool", default="promtool")
    args = ap.parse_args()

    promtool = shutil.which(args.promtool)
    if not promtool:
        print(f"check-promql: promtool not found ({args.promtool}); install it "
              "(Debian: apt-get install prometheus) or pass --promtool", file=sys.stderr)
        return 2
    try:
        names = load_metric_names(args.metrics_names)
    except (OSError, ValueError) as e:
        print(f"check-promql: {e}", file=sys.stderr)
        return 2

    problems = Problems()

    # 1. The rules file itself.
    rc, out = promtool_check(promtool, args.rules)
    if rc != 0:
        problems.add(args.rules, f"promtool check rules failed:\n{out}")

    # Collect expressions.
    dash_items, var_names = dashboard_items(args.dashboard, problems)
    alerts, rule_exprs, runbooks = rules_items(args.rules)
    if not rule_exprs:
        problems.add(args.rules, "no expr found")

    to_parse = []
    for where, expr, is_target in dash_items:
        if is_target:
            lint_dashboard_expr(where, expr, problems)
        to_parse.append((where, substitute_vars(where, expr, var_names, problems)))
    for alert, expr in rule_exprs:
        to_parse.append((f"{args.rules}: {alert}", expr))

    # 2. Every expression parses.
    check_parse(promtool, to_parse, problems)

    # 3. Every retryscope_* metric exists.
    used = set()
    for where, expr in to_parse:
        for name in METRIC_RE.findall(STRING_RE.sub('""', expr)):
            used.add(name)
            if name not in names:
                problems.add(where, f"metric {name} is not in {args.metrics_names}")

    # 5. Runbook links.
    if os.path.exists(args.runbook):
        slugs = github_slugs(args.runbook)
    else:
        slugs = None
        problems.add(args.runbook, "missing (runbook_url anchors cannot be checked)")
    bases = set()
    for alert in alerts:
        url = runbooks.get(alert)
        if not url:
            problems.add(f"{args.rules}: {alert}", "no runbook_url annotation")
            continue
        base, _, anchor = url.partition("#")
        bases.add(base)
        if not anchor:
            problems.add(f"{args.rules}: {alert}", f"runbook_url {url} has no #anchor")
        elif slugs is not None and anchor not in slugs:
            problems.add(f"{args.rules}: {alert}", f"runbook_url anchor #{anchor} is not a heading of {args.runbook}")
    if len(bases) > 1:
        problems.add(args.rules, f"runbook_url bases differ: {sorted(bases)}")
    with open(args.rules, encoding="utf-8") as f:
        severities = re.findall(r"^\s*severity:\s*(\S+)\s*$", f.read(), re.M)
    for sev in severities:
        if sev not in ("critical", "high", "warning"):
            problems.add(args.rules, f"severity {sev} is not critical, high or warning")

    # 6. Alertmanager names only alerts that exist.
    if os.path.exists(args.alertmanager):
        with open(args.alertmanager, encoding="utf-8") as f:
            am = f.read()
        for name in sorted(set(re.findall(r"\bRetryscope\w+", am))):
            if name not in alerts:
                problems.add(args.alertmanager, f"names alert {name}, which {args.rules} does not define")

    # 7. Every exported metric on the dashboard and in the reference.
    dash_used = set()
    for where, expr, _ in dash_items:
        dash_used.update(METRIC_RE.findall(STRING_RE.sub('""', expr)))
    documented = documented_metrics(args.monitoring)
    for family in sorted({family_of(n, names) for n in names}):
        samples = {n for n in names if family_of(n, names) == family}
        if not samples & dash_used:
            problems.add(args.dashboard, f"no panel draws {family}")
        if family not in documented:
            problems.add(args.monitoring, f"no row documents {family}")

    unused = sorted(names - used)
    print(f"check-promql: {len(dash_items)} dashboard expressions, {len(rule_exprs)} alert expressions, "
          f"{len(used)} retryscope metrics referenced, {len(unused)} exported but unused"
          + (f" ({', '.join(unused)})" if unused else ""))
    if problems.items:
        for p in problems.items:
            print(f"ERROR {p}", file=sys.stderr)
        print(f"check-promql: {len(problems.items)} problem(s)", file=sys.stderr)
        return 1
    print("check-promql: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
