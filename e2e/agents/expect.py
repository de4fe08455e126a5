#!/usr/bin/env python3
"""Runs `retryscope check --json` over what one real client wrote in a recorded scenario and
compares the report with expectations derived from that scenario's truth.json (the mock's log
and the marker files). Nothing here knows what retryscope currently prints: every expected
value is computed from the truth.

  expect.py --bin target/debug/retryscope DIR...     (DIR = tests/fixtures/agents/<client>/<scenario>)

Per scenario, five checks (each prints PASS or FAIL with the reason):
  readable    check exits 0 or 1, reads every line (no bad lines), reports at least one turn
  attempts    one attempt per main model request the mock served (side requests such as
              gemini-cli's routing classifier are not attempts of the agent's turns), and as
              many attempts that did not complete as the mock cut; a failed attempt that
              delivered no content and that the client's output never mentions is left out
              (see expected_attempts); of a telemetry outfile read alone whose client
              exited before flushing it, the requests logged without an end are not
              compared (telemetry_tail_lost, seen_part)
  executions  attempt by attempt (in request order), as many executions as marker files
              that attempt's calls created: which tools ran from which attempt
  call_ids    the executions carry the call ids the mock issued (only for clients whose
              output has call ids: gemini-cli, claude-code; Codex's exec --json has none)
  findings    at least one turn was read, and exactly the findings the truth implies (rules
              in implied_findings); incomplete_turn (info) is neither required nor refused

The final line is `N passed, N failed`.
"""

import argparse
import json
import os
import re
import subprocess
import sys

# Inputs retryscope reads: only what the client itself wrote.
CLIENT_FILES = {
    "gemini-cli": ["telemetry.log", "stream.jsonl"],
    "claude-code": ["stream.jsonl"],
    "claude-code-partial": ["stream.jsonl"],
    "codex": ["exec.jsonl"],
    "qwen-code": ["telemetry.log", "stream.jsonl"],
}
# Clients whose outputs are also checked one at a time, each against what it can show
# (input_view), besides together (one session: its attempts once, every finding): Qwen
# Code's telemetry and stream-json each show a different splice.
SEPARATE = {"qwen-code"}


def implied_findings(truth):
    """The finding kinds the ground truth implies.

    - abandoned_tool_executed: a call of an attempt that did not finish and was followed by a
      new attempt at the same step (a retry) was executed.
    - unfinished_tool_executed: a call of an attempt that never finished was executed, whether
      or not a retry followed (issue 10).
    - early_execution: a call ran while its attempt was still streaming: its marker file is
      older than the attempt's end (the moment the finish event was sent, or the cut). A call
      of a cut attempt that ran after the cut is unfinished_tool_executed only.
    - spliced_text: the visible output carries text of an abandoned attempt (its `[A<n>]` tag).
    - retry_cap_exceeded: more than 4 attempts at one step (retryscope's default cap).
    """
    kinds = set()
    step1 = [r for r in truth["main_requests"] if r["step"] == 1]
    visible = truth.get("visible_text") or ""
    for r in truth["main_requests"]:
        abandoned = r["step"] == 1 and not r["finished"] and r.get("retried")
        for c in r["calls"]:
            if not c["executed"]:
                continue
            if abandoned:
                kinds.add("abandoned_tool_executed")
            if not r["finished"]:
                kinds.add("unfinished_tool_executed")
            end = r.get("finish_sent_ms") if r["finished"] else r.get("ended_ms")
            if end and c["marker_mtime_ms"] < end:
                kinds.add("early_execution")
        if abandoned and f"[A{r['attempt']}]" in visible:
            kinds.add("spliced_text")
    if len(step1) > 4:
        kinds.add("retry_cap_exceeded")
    return kinds


def spliced_in_history(truth, r):
    """Whether a later request's assistant history carries the text of attempt `r` (its tag):
    the client sent the kept splice back to the model (a continuation that restarted)."""
    tag = f"[A{r['attempt']}]"
    later = [q for q in truth["main_requests"] if q["request_seq"] > r["request_seq"]]
    return any(tag in h for q in later for h in q.get("history_tags") or [])


def input_view(truth, name):
    """The findings one of a SEPARATE client's outputs can show, from the truth.

    Qwen Code: its telemetry log never sees the display, only each request's history: it shows
    spliced_text when the kept splice went back to the model (a continuation, after a reset),
    not when only the screen showed both attempts (after a clean end of body the client resends
    the request without the cut text). Its stream-json prints a continuation's kept text as one
    message after the `system` retry record, the cut attempt's part never on its own, so it
    shows spliced_text only when the cut attempt's text was printed before the retry (the
    resend case)."""
    kinds = implied_findings(truth)
    if "spliced_text" not in kinds:
        return kinds
    abandoned = [r for r in truth["main_requests"]
                 if r["step"] == 1 and not r["finished"] and r.get("retried")
                 and f"[A{r['attempt']}]" in (truth.get("visible_text") or "")]
    if name == "telemetry.log":
        shown = any(spliced_in_history(truth, r) for r in abandoned)
    else:
        shown = any(not spliced_in_history(truth, r) for r in abandoned)
    if not shown:
        kinds.discard("spliced_text")
    return kinds


def failure_signals(client, files):
    """How many failed attempts the client's own output reports, whatever retryscope makes of
    them: Claude Code `system/api_retry` records and synthetic `is_api_error_message`
    messages; Codex `error` events (`Reconnecting... n/5 (...)`); gemini-cli telemetry
    `gemini_cli.api_error` log records; Qwen Code's `qwen-code.api_error` records and its
    stream-json `system` / `retry` records. Only used to leave out attempts that delivered no
    content and that the output never mentions: nothing can report those."""
    n = 0
    for path in files:
        text = open(path, encoding="utf-8", errors="replace").read()
        if client.startswith("claude-code"):
            n += text.count('"subtype":"api_retry"') + text.count('"is_api_error_message":true')
        elif client == "codex":
            n += sum(1 for line in text.splitlines() if line.startswith('{"type":"error"'))
        elif client == "gemini-cli" and path.endswith("telemetry.log"):
            n += text.count('"event.name": "gemini_cli.api_error"')
        elif client == "qwen-code" and path.endswith("telemetry.log"):
            n += text.count('"event.name": "qwen-code.api_error"')
        elif client == "qwen-code":
            # its stream-json: retry records, and the failed session's error result
            n += text.count('"subtype":"retry"') + text.count('"is_error":true')
    return n


def telemetry_records(text):
    """The records of a telemetry outfile (pretty-printed JSON objects one after another, or
    one per line); a record cut off at the end is not one."""
    dec, i, out = json.JSONDecoder(), 0, []
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            return out
        try:
            obj, i = dec.raw_decode(text, i)
        except ValueError:
            return out
        out.append(obj)


def telemetry_tail_lost(path):
    """How many main requests (the agent's own calls, not a router's) a telemetry outfile
    logged without an end (a response or an error). Every real recording logs one for each
    (gemini-cli's and Qwen Code's, whatever the cut), so more requests than ends means the
    client exited before its telemetry was flushed: on a loaded machine gemini-cli lost its
    last `api_response` so (CI, stop 41)."""
    requests = ends = 0
    for r in telemetry_records(open(path, encoding="utf-8", errors="replace").read()):
        a = r.get("attributes") if isinstance(r, dict) else None
        if not isinstance(a, dict) or a.get("role", "main") != "main":
            continue
        name = str(a.get("event.name", ""))
        requests += name.endswith(".api_request")
        ends += name.endswith(".api_response") or name.endswith(".api_error")
    return max(0, requests - ends)


def seen_part(main, attempts, lost):
    """What can be compared when a telemetry outfile lost the ends of its last `lost`
    requests: the main requests before those, and as many of the reported attempts. A lost
    request's attempt shows as not completed, or not at all when nothing of it was logged;
    the attempts reported must lie between the two counts."""
    if not lost:
        return main, attempts, len(attempts) == len(main)
    seen = sorted(main, key=lambda r: r.get("request_seq", 0))[:max(0, len(main) - lost)]
    return seen, attempts[:len(seen)], len(seen) <= len(attempts) <= len(main)


def expected_attempts(truth, signals, output_text=""):
    """The main requests an output can show: all, except content-less failed attempts whose
    ids (message or response id) the output never names, beyond what the client's failure
    signals account for."""
    main = truth["main_requests"]
    unfinished = [r for r in main if not r["finished"]]
    invisible = max(0, len(unfinished) - signals)
    out = []
    for r in main:
        named = any(isinstance(v, str) and v in output_text for v in (r.get("ids") or {}).values())
        if invisible and not r["finished"] and not r.get("content_delivered", True) and not named:
            invisible -= 1
            continue
        out.append(r)
    return out


def run_check(binary, files):
    p = subprocess.run([binary, "check", "--json"] + files, capture_output=True, text=True,
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


def ordered_attempts(turns):
    def key(t):
        return (t.get("started_ms") is None, t.get("started_ms") or 0)

    out = []
    # gemini-cli's routing-classifier call (`role: utility_router`) is its own turn, named
    # `<prompt_id>~utility_router`: a side request in the truth, not an attempt of the answer.
    for t in sorted((t for t in turns if "~" not in str(t.get("turn", ""))), key=key):
        out += sorted(t.get("attempts") or [], key=lambda a: a.get("attempt", 0))
    return out


def check_dir(binary, d):
    truth = json.load(open(os.path.join(d, "truth.json")))
    client = truth["client"]
    if client in SEPARATE:
        results = check_files(binary, d, truth, CLIENT_FILES[client], " [together]")
        for f in CLIENT_FILES[client]:
            results += check_files(binary, d, truth, [f], f" [{f}]")
        return results
    return check_files(binary, d, truth, CLIENT_FILES[client], "")


def check_files(binary, d, truth, names, label):
    client = truth["client"]
    name = f"{client}/{truth['scenario']}{label}"
    files = [os.path.join(d, f) for f in names if os.path.exists(os.path.join(d, f))]
    results = []

    def res(check, ok, why=""):
        results.append((f"{name} {check}", ok, why))

    if not files:
        res("readable", False, "no client output recorded")
        return results
    rc, turns, summary, stderr = run_check(binary, files)
    bad = (summary or {}).get("bad_lines")
    ok = rc in (0, 1) and summary is not None and bad == 0 and (summary.get("turns") or 0) >= 1
    res("readable", ok, f"exit {rc}, turns {(summary or {}).get('turns')}, bad lines {bad}"
        + (f", stderr: {stderr.strip()[:200]}" if stderr.strip() and not ok else ""))

    output_text = "".join(open(f, encoding="utf-8", errors="replace").read() for f in files)
    main = expected_attempts(truth, failure_signals(client, files), output_text)
    hidden = len(truth["main_requests"]) - len(main)
    attempts = ordered_attempts(turns)
    # The telemetry alone of a client that lost its file's tail cannot show the last ends:
    # those attempts are not compared. Read with the stream-json (together), the screen shows
    # them and nothing is excused.
    lost = telemetry_tail_lost(files[0]) if names == ["telemetry.log"] else 0
    main, attempts, count_ok = seen_part(main, attempts, lost)
    want_unfinished = sum(1 for r in main if not r["finished"])
    got_unfinished = sum(1 for a in attempts if a.get("outcome") != "completed")
    res("attempts", count_ok and got_unfinished == want_unfinished,
        f"want {len(main)} attempts ({want_unfinished} not completed; "
        f"{len(truth['side_requests'])} side requests and {hidden} content-less attempts the "
        f"output never mentions not counted"
        + (f"; the client lost its telemetry's tail: the last {lost} requests, logged without "
           f"an end, not compared" if lost else "")
        + f"), got {len(attempts)} ({got_unfinished} not completed: "
        f"{[a.get('outcome') for a in attempts]})")

    want_exec = [sum(1 for c in r["calls"] if c["executed"]) for r in main]
    got_exec = [len(a.get("executed") or []) for a in attempts]
    res("executions", want_exec == got_exec,
        f"executions per attempt: want {want_exec}, got {got_exec}")

    if client != "codex":  # Codex's exec --json has no call ids: nothing to compare
        # a call the provider streamed without an id (Gemini) has none to compare: the
        # client made one up; only that it ran in that attempt counts
        want_ids = [sorted((c["id"] for c in r["calls"] if c["executed"]), key=lambda i: i or "")
                    for r in main]
        got_ids = [sorted(str(e.get("id")) for e in a.get("executed") or []) for a in attempts]
        ok = len(want_ids) == len(got_ids) and all(
            len(w) == len(g) and all(wi is None or wi in gi for wi, gi in zip(w, g))
            for w, g in zip(want_ids, got_ids))
        res("call_ids", ok, f"executed call ids per attempt: want {want_ids}, got {got_ids}")

    alone = client in SEPARATE and len(names) == 1
    want = input_view(truth, names[0]) if alone else implied_findings(truth)
    got = set()
    for t in turns:
        got |= {f.get("kind") for f in t.get("findings") or []}
    extra = {k for k in got - want if k != "incomplete_turn"}
    missing = want - got
    read_any = bool(summary) and (summary.get("turns") or 0) >= 1
    res("findings", read_any and not extra and not missing,
        ("nothing read; " if not read_any else "") +
        f"want {sorted(want)}, got {sorted(got)}"
        + (f"; missing {sorted(missing)}" if missing else "")
        + (f"; unexpected {sorted(extra)}" if extra else ""))
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--bin", required=True)
    ap.add_argument("dirs", nargs="*")
    a = ap.parse_args()
    passed = failed = 0
    for d in a.dirs:
        try:
            results = check_dir(a.bin, d)
        except (OSError, ValueError, KeyError, subprocess.TimeoutExpired) as e:
            results = [(d, False, f"could not check: {e!r}")]
        for name, ok, why in results:
            print(f"{'PASS' if ok else 'FAIL'} {name}: {why}")
            passed += ok
            failed += not ok
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
