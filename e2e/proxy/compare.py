#!/usr/bin/env python3
"""Compares what `retryscope proxy` reported for one session (its /metrics scrape, its
findings JSON lines, and `retryscope check --json` over its `--record` folder) with the
session's ground truth (truth.json: the upstream's request log and the marker files the
client's tools wrote). Nothing here knows what the proxy prints: every expected value is
computed from the truth.

  compare.py --bin target/debug/retryscope [--known-failing FILE] DIR...

Per session (each prints PASS, FAIL or KNOWN with the reason):
  injected    what the client received (the tap between client and proxy): with an
              injection, exactly the first main stream (the first N with `-first<N>`) lacks
              its finish event and ended the way asked (reset / eof / error event); without,
              no stream was cut; retryscope_proxy_injected_cuts_total says the same
  ran         the proxy started, the client finished in time, /metrics was scraped
  attempts    retryscope_attempts_total = the model requests the upstream served (the main
              conversation's, plus side requests such as gemini-cli's router call), and the
              attempts not `completed` = the streams the proxy cut
  executions  retryscope_tool_executions_total: from completed attempts = marker files of
              calls of uncut attempts; from the other outcomes = marker files of the cut
              attempt's calls
  findings    the finding kinds (from the findings JSON lines, and the same counts in
              retryscope_findings_total) = the kinds the truth implies (implied_findings)
  record      `check --json` over the proxy's --record folder: attempt by attempt in request
              order, the executed call ids = the call ids whose marker file exists
A check listed in --known-failing (lines `<client>/<scenario> <check>: reason`) prints
KNOWN instead of FAIL, is counted apart and does not fail the run; one that passes although
listed prints FIXED and fails the run, so the list is kept honest.

The last line is `N passed, N failed`.
"""

import argparse
import json
import os
import re
import subprocess
import sys

METRIC = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text):
    out = []
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = METRIC.match(line)
        if not m:
            continue
        try:
            v = float(m.group(3))
        except ValueError:
            continue
        out.append((m.group(1), dict(LABEL.findall(m.group(2) or "")), v))
    return out


def msum(samples, name, **match):
    return sum(v for n, labels, v in samples
               if n == name and all(labels.get(k) == want for k, want in match.items()))


def msum_where(samples, name, pred):
    return sum(v for n, labels, v in samples if n == name and pred(labels))


def implied_findings(truth):
    """The finding kinds the ground truth implies, as seen from the wire.

    - abandoned_tool_executed: the cut attempt's call ran (its marker exists) and a new attempt
      at the same step followed.
    - unfinished_tool_executed: the cut attempt's call ran, retried or not.
    - spliced_text: the cut attempt was retried and a later request's assistant history
      carries that attempt's text (its `[A<n>]` tag): the model reads the splice.
    - retry_cap_exceeded: more than 4 attempts at step 1 (retryscope's default cap).
    - duplicate_effect: never here (each attempt's call touches its own marker: different
      arguments, different effect keys).
    Returns (required, allowed): early_execution is allowed but not required: when a call
    ran relative to its stream is not visible on the wire.
    """
    kinds = set()
    main = truth["main_requests"]
    step1 = [r for r in main if r["step"] == 1]
    for r in main:
        if not r["cut_by_proxy"]:
            continue
        ran = any(c["executed"] for c in r["calls"])
        if ran:
            kinds.add("unfinished_tool_executed")
            if r.get("retried"):
                kinds.add("abandoned_tool_executed")
        if r.get("retried") and r["step"] == 1:
            tag = f"[A{r['attempt']}]"
            later = [q for q in main if q["request_seq"] > r["request_seq"]]
            if any(tag in h for q in later for h in q.get("history_tags") or []):
                kinds.add("spliced_text")
    if len(step1) > 4:
        kinds.add("retry_cap_exceeded")
    return kinds, kinds | {"early_execution", "incomplete_turn"}


def model_side_requests(truth):
    """Side requests that are model calls (a streamed or plain generation, not a token
    count or a model list): each is an attempt of its own turn for the proxy."""
    return [s for s in truth["side_requests"] if s["route"] == "side"]


def run_check(binary, folder):
    if not os.path.isdir(folder):
        return None, [], None, "no record folder"
    p = subprocess.run([binary, "check", "--json", folder], capture_output=True, text=True,
                       timeout=120)
    turns, summary = [], None
    for line in p.stdout.splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if "summary" in obj:
            summary = obj["summary"]
        else:
            turns.append(obj)
    return p.returncode, turns, summary, p.stderr


def check_dir(binary, d):
    truth = json.load(open(os.path.join(d, "truth.json")))
    name = f"{truth['client']}/{truth['scenario']}"
    results = []

    def res(check, ok, why=""):
        results.append((name, check, ok, why))

    run = truth["run"]
    metrics_path = os.path.join(d, "metrics.txt")
    text = open(metrics_path).read() if os.path.exists(metrics_path) else ""
    samples = parse_metrics(text)
    # sdk_loop.py gives up (exit 1) after 3 broken streams in a row; a client that does not
    # retry a cut (Qwen Code after an in-stream error event) may end the session with an
    # error status; any other run ends well
    gives_up = truth["client"].startswith("sdk-") and (truth.get("inject") or {}).get("first", 1) >= 3
    mains = truth["main_requests"]
    left_cut = bool(mains) and mains[-1]["cut_by_proxy"] and not mains[-1].get("retried")
    exits = (1,) if gives_up else (0, 1) if left_cut else (0,)
    # a turn closed by the idle timeout while the client still worked on it leaves the rest
    # of it uncounted (session.py reruns such a session once with a longer timeout)
    after_close = msum(samples, "retryscope_after_close_events_total")
    rerun_path = os.path.join(d, "rerun.txt")
    rerun = open(rerun_path).read().strip() if os.path.exists(rerun_path) else ""
    ok = (run.get("proxy_started") and not run.get("timed_out")
          and run.get("exit_code") in exits and after_close == 0
          and any(n.startswith("retryscope_") for n, _, _ in samples))
    res("ran", bool(ok), f"proxy started {run.get('proxy_started')}, client exit "
        f"{run.get('exit_code')}, timed out {run.get('timed_out')}, {len(samples)} samples, "
        f"{after_close:g} events after close"
        + ("" if samples else f" ({text.strip()[:120]})")
        + (f" (proxy log: {run['proxy_log']})" if run.get("proxy_log") else "")
        + (f" (rerun: {rerun})" if rerun else ""))

    main = truth["main_requests"]
    inject = truth.get("inject")
    cuts = [r for r in main if r["cut_by_proxy"]]
    hows = [(r.get("client_received") or {}).get("cut") for r in cuts]
    n = (inject or {}).get("first", 1)
    if inject:
        firsts = [r for r in main if r.get("client_received")][:n]
        ok = (cuts == firsts and len(cuts) == n and hows == [inject["how"]] * n)
        why = (f"asked {inject['point']}/{inject['how']} on the first {n} stream(s); the client "
               f"received: cut streams {[r['request_seq'] for r in cuts]} ({hows}), first "
               f"main requests {[r['request_seq'] for r in firsts]}")
    else:
        ok, why = not cuts, f"no injection; cut streams {[r['request_seq'] for r in cuts]}"
    # the proxy's own count of injected cuts must say the same
    got_cuts = msum(samples, "retryscope_proxy_injected_cuts_total")
    want_cuts = n if inject else 0
    asked = (msum(samples, "retryscope_proxy_injected_cuts_total", point=inject["point"],
                  how=inject["how"]) if inject else 0)
    ok = ok and got_cuts == want_cuts and asked == want_cuts
    why += f"; retryscope_proxy_injected_cuts_total {got_cuts:g} ({asked:g} at the point asked)"
    res("injected", ok, why)
    side = model_side_requests(truth)
    want_attempts = len(main) + len(side)
    want_cut = sum(1 for r in main if r["cut_by_proxy"])
    got_attempts = msum(samples, "retryscope_attempts_total")
    got_not_completed = msum_where(samples, "retryscope_attempts_total",
                                   lambda lb: lb.get("outcome") != "completed")
    res("attempts", got_attempts == want_attempts and got_not_completed == want_cut,
        f"want {want_attempts} ({len(main)} main + {len(side)} side), {want_cut} not completed; "
        f"got {got_attempts:g}, {got_not_completed:g} not completed")

    want_done = sum(1 for r in main if not r["cut_by_proxy"] for c in r["calls"] if c["executed"])
    want_cut_exec = sum(1 for r in main if r["cut_by_proxy"] for c in r["calls"] if c["executed"])
    got_done = msum(samples, "retryscope_tool_executions_total", attempt_outcome="completed")
    got_other = msum_where(samples, "retryscope_tool_executions_total",
                           lambda lb: lb.get("attempt_outcome") != "completed")
    res("executions", got_done == want_done and got_other == want_cut_exec,
        f"markers: {want_done} from completed attempts, {want_cut_exec} from the cut attempt; "
        f"proxy: {got_done:g} completed, {got_other:g} other ({truth['markers']})")

    required, allowed = implied_findings(truth)
    found = []
    fpath = os.path.join(d, "findings.jsonl")
    if os.path.exists(fpath):
        for line in open(fpath, encoding="utf-8", errors="replace"):
            try:
                found.append(json.loads(line))
            except ValueError:
                pass
    got = {f.get("kind") for f in found}
    by_kind = {}
    for f in found:
        by_kind[f.get("kind")] = by_kind.get(f.get("kind"), 0) + 1
    metric_kinds = {lb.get("kind"): 0 for n, lb, v in samples if n == "retryscope_findings_total"}
    for k in metric_kinds:
        metric_kinds[k] = msum(samples, "retryscope_findings_total", kind=k)
    consistent = all(metric_kinds.get(k, 0) == n for k, n in by_kind.items()) and all(
        by_kind.get(k, 0) == v for k, v in metric_kinds.items())
    missing, extra = required - got, got - allowed
    res("findings", not missing and not extra and consistent,
        f"want {sorted(required)}, got {sorted(got)}"
        + (f"; missing {sorted(missing)}" if missing else "")
        + (f"; unexpected {sorted(extra)}" if extra else "")
        + ("" if consistent else f"; findings lines {by_kind} vs metrics "
           f"{ {k: v for k, v in metric_kinds.items() if v} }"))

    rc, turns, summary, err = run_check(binary, os.path.join(d, "record"))
    if summary is None:
        res("record", False, f"check over record/ read nothing (exit {rc}; {err.strip()[:200]})")
    else:
        attempts = []
        for t in sorted(turns, key=lambda t: (t.get("started_ms") or 0)):
            attempts += sorted(t.get("attempts") or [], key=lambda a: a.get("attempt", 0))
        got_ids = [sorted(str(e.get("id")) for e in a.get("executed") or []) for a in attempts]
        got_ids = [g for g in got_ids if g]
        # a call streamed without an id (Gemini): any id the execution was placed under
        want_ids = [sorted((c["id"] for c in r["calls"] if c["executed"]), key=lambda i: i or "")
                    for r in main]
        want_ids = [w for w in want_ids if w]
        ok = len(want_ids) == len(got_ids) and all(
            len(w) == len(g) and all(wi is None or wi in gi for wi, gi in zip(w, g))
            for w, g in zip(want_ids, got_ids))
        res("record", ok and (summary.get("bad_lines") or 0) == 0,
            f"executed call ids by attempt: want {want_ids}, got {got_ids}; "
            f"{summary.get('turns')} turns, bad lines {summary.get('bad_lines')}")
    return results


def load_known(path):
    known = {}
    if path and os.path.exists(path):
        for line in open(path, encoding="utf-8"):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, _, reason = line.partition(":")
            known[key.strip()] = reason.strip()
    return known


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--known-failing")
    ap.add_argument("dirs", nargs="*")
    a = ap.parse_args()
    known = load_known(a.known_failing)
    passed = failed = known_n = 0
    for d in a.dirs:
        try:
            results = check_dir(a.bin, d)
        except (OSError, ValueError, KeyError, subprocess.TimeoutExpired) as e:
            results = [(d, "all", False, f"could not check: {e!r}")]
        for name, check, ok, why in results:
            key = f"{name} {check}"
            if key in known:
                why += f" [known-failing: {known[key]}]"
                if ok:  # a listed failure that passes fails the run: update the list
                    print(f"FIXED {key}: {why}")
                    failed += 1
                else:
                    print(f"KNOWN {key}: {why}")
                    known_n += 1
                continue
            print(f"{'PASS' if ok else 'FAIL'} {key}: {why}")
            passed += ok
            failed += not ok
    if known_n:
        print(f"{known_n} checks fail on known proxy defects (known-failing.txt), not counted")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
