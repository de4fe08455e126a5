#!/usr/bin/env python3
"""The strategy zoo: every retry strategy of `zoo_client.py` x every cut point, through
`retryscope proxy --inject <point> --inject-how reset` in front of the non-cutting mock
(as e2e/proxy does), checked against the ground truth twice: what the proxy reported
(/metrics) and what `retryscope check` makes of the client's own native log.

  zoo.py --bin target/debug/retryscope --python PY --out DIR [--only API/STRATEGY/POINT ...]
         [--known-failing e2e/zoo/known-failing.txt] [--jobs 2]

Ground truth (never retryscope): the mock's request log (which requests of the first model
call were new attempts, which were a background stream resumed, what each retry request
carried: history tags, `previous_response_id`, model, headers) and the marker files (which
attempt's call ran). Prints one line per check, the table, and `N passed, N failed`.
"""

import argparse
import concurrent.futures
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "agents"))
sys.path.insert(0, os.path.join(HERE, "..", "proxy"))
import record  # noqa: E402  (start_mock)
from compare import load_known, msum, parse_metrics  # noqa: E402
import listening  # noqa: E402  (the addresses the proxy bound)
from session import STALLED_IDLE_SECS, once_more_if_stalled, scrape, start_proxy  # noqa: E402

import zoo_client  # noqa: E402

PROVIDER = {"anthropic": "anthropic", "openai-chat": "openai-chat", "openai-responses": "openai"}
POINTS = ("after-tool-call", "mid-word", "before-finish")
# The proxy closes a turn after this long without events; the zoo scrapes /metrics once no
# turn is open. It must exceed the time a client takes to notice a cut and send its retry.
# An injected reset reaches the client when the proxy next writes to or closes its
# connection: at once for the Anthropic and Chat Completions streams here, but 1.5-4 s after
# the cut for the Responses streams (5-10 s on a loaded machine), and with 3 s (e2e/proxy's
# value) the cut attempt's turn closed before its retry came.
IDLE_SECS = {"anthropic": 4, "openai-chat": 4, "openai-responses": 10}


def sessions():
    for api, strategies in zoo_client.STRATEGIES.items():
        for strategy in strategies:
            for point in POINTS:
                yield api, strategy, point


def run_session_once_more_if_stalled(a, api, strategy, point):
    """`run_session`, and once more with a longer idle timeout when the first run's turn was
    closed while the client still worked on it (e2e/proxy/session.py says why)."""
    return once_more_if_stalled(
        f"{api}/{strategy}/{point}", os.path.join(a.out, api, strategy, point), IDLE_SECS[api],
        max(STALLED_IDLE_SECS, 2 * IDLE_SECS[api]),
        lambda idle: run_session(a, api, strategy, point, idle))


def run_session(a, api, strategy, point, idle):
    out = os.path.join(a.out, api, strategy, point)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    tmp = tempfile.mkdtemp(prefix=f"rs-zoo-{api}-{strategy}-{point}-")
    mock, mport, log, markers = record.start_mock(PROVIDER[api], "clean", tmp)
    argv = [a.bin, "proxy", "--listen", "127.0.0.1:0",
            "--upstream", f"http://127.0.0.1:{mport}", "--metrics-addr", "127.0.0.1:0",
            "--idle-timeout-secs", str(idle),
            "--findings-out", os.path.join(out, "findings.jsonl"),
            "--record", os.path.join(out, "record"),
            "--inject", point, "--inject-how", "reset", "--inject-first", "1"]
    proxy_log = os.path.join(out, "proxy-stderr.txt")
    proxy, addrs = start_proxy(argv, proxy_log)
    info = {"proxy_started": addrs is not None}
    if addrs is None:
        info["proxy_log"] = listening.log_tail(proxy_log)
    try:
        if addrs:
            maddr = addrs["metrics"]
            base = f"http://{addrs['listen']}" + ("" if api == "anthropic" else "/v1")
            env = {k: v for k, v in os.environ.items()
                   if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
            cargv = [a.python, os.path.join(HERE, "zoo_client.py"), "--api", api,
                     "--strategy", strategy, "--base-url", base,
                     "--log", os.path.join(out, "client-log.jsonl"),
                     "--transcript", os.path.join(out, "transcript.jsonl")]
            started = time.time()
            with open(os.path.join(out, "client-err.txt"), "wb") as err:
                try:
                    rc = subprocess.run(cargv, env=env, cwd=tmp, stdin=subprocess.DEVNULL,
                                        stdout=err, stderr=err, timeout=a.timeout).returncode
                except subprocess.TimeoutExpired:
                    rc = None
            info.update(exit_code=rc, seconds=round(time.time() - started, 2))
            end = time.time() + idle + 8
            while True:
                text = scrape(maddr)
                if "\nretryscope_open_turns 0\n" in "\n" + text or time.time() > end:
                    break
                time.sleep(0.25)
            with open(os.path.join(out, "metrics.txt"), "w") as f:
                f.write(text)
    finally:
        if proxy.poll() is None:
            os.killpg(proxy.pid, signal.SIGTERM)
            try:
                proxy.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proxy.pid, signal.SIGKILL)
                proxy.wait()
        mock.terminate()
        mock.wait()
    if os.path.exists(log):
        shutil.copy(log, os.path.join(out, "mock-log.jsonl"))
    names = sorted(os.listdir(markers)) if os.path.isdir(markers) else []
    truth = build_truth(api, strategy, point, log, names, info)
    with open(os.path.join(out, "truth.json"), "w") as f:
        json.dump(truth, f, indent=2, sort_keys=True)
    shutil.rmtree(tmp, ignore_errors=True)
    return out


def build_truth(api, strategy, point, log_path, markers, info):
    """What really happened, from the mock's log and the marker files only."""
    reqs = []
    if os.path.exists(log_path):
        reqs = sorted((json.loads(x) for x in open(log_path) if x.strip()),
                      key=lambda r: r["seq"])
    main = [r for r in reqs if r.get("route") == "main"]
    step1 = [r for r in main if r.get("step") == 1]
    resumed = [r for r in reqs if r.get("route") == "resume" and r.get("resumed")]
    step1_ids = {(r.get("ids") or {}).get("response_id") for r in step1} - {None}
    # a continuation by reference: a later first-call request whose previous_response_id
    # names an earlier attempt of that call (the mock then restarts: a new [A<n>] text)
    by_reference = [r for r in step1[1:]
                    if (r.get("request") or {}).get("previous_response_id") in step1_ids]
    # text of two attempts in one assistant message of a later request's history
    spliced_history = [t for r in main if r.get("step", 0) > 1 for t in r.get("history_tags") or []
                       if len(set(t.replace("]", "] ").split())) > 1 and "[F]" not in t]
    executed = {}
    for name in markers:  # a<attempt>-<call id>
        n, _, call = name[1:].partition("-")
        executed[call] = int(n)
    return {
        "api": api, "strategy": strategy, "point": point, "run": info,
        "model_requests": len(main),
        "step1_attempts": len(step1),
        "retries": max(0, len(step1) - 1),
        "resumed_streams": len(resumed),
        "executed": executed,
        "spliced": bool(spliced_history or by_reference),
        "spliced_evidence": spliced_history or [r["seq"] for r in by_reference],
        "retry_requests": [{"seq": r["seq"], "attempt": r.get("attempt"),
                            "request": r.get("request"), "history_tags": r.get("history_tags"),
                            "stream": r.get("stream_requested")} for r in step1[1:]],
    }


def check_log(binary, path):
    p = subprocess.run([binary, "check", "--json", "--capture-content", path],
                       capture_output=True, text=True, timeout=60)
    lines = [json.loads(x) for x in p.stdout.splitlines() if x.strip()]
    summary = lines.pop()["summary"] if lines else {}
    return summary, lines, p


def check_session(binary, d):
    t = json.load(open(os.path.join(d, "truth.json")))
    name = f"{t['api']}/{t['strategy']}/{t['point']}"
    res = []

    def r(check, ok, why):
        res.append((name, check, bool(ok), why))

    run = t["run"]
    n_exec = len(t["executed"])
    # through the proxy (/metrics)
    text = open(os.path.join(d, "metrics.txt")).read() if os.path.exists(
        os.path.join(d, "metrics.txt")) else ""
    s = parse_metrics(text)
    after_close = msum(s, "retryscope_after_close_events_total")
    rerun_path = os.path.join(d, "rerun.txt")
    rerun = open(rerun_path).read().strip() if os.path.exists(rerun_path) else ""
    r("ran", run.get("proxy_started") and run.get("exit_code") == 0 and n_exec >= 1
      and t["step1_attempts"] >= 1 and after_close == 0,
      f"proxy started {run.get('proxy_started')}, client exit {run.get('exit_code')}, "
      f"markers {sorted(t['executed'].items())}, {after_close:g} events after close"
      + (f" (rerun: {rerun})" if rerun else "")
      + (f" (proxy log: {run['proxy_log']})" if run.get("proxy_log") else ""))
    p_retries = msum(s, "retryscope_retries_total")
    p_attempts = msum(s, "retryscope_attempts_total")
    p_exec = msum(s, "retryscope_tool_executions_total")
    p_spliced = msum(s, "retryscope_findings_total", kind="spliced_text")
    p_false = {k: msum(s, "retryscope_findings_total", kind=k) for k in (
        "spliced_stream", "abandoned_tool_executed", "unfinished_tool_executed",
        "duplicate_effect")}
    r("proxy-retries", p_retries == t["retries"] and p_attempts == t["model_requests"],
      f"retries {p_retries:g} (truth {t['retries']}), attempts {p_attempts:g} "
      f"(truth {t['model_requests']} model requests, {t['resumed_streams']} resumed streams)")
    r("proxy-executions", p_exec == n_exec and not any(p_false.values()),
      f"executions {p_exec:g} (markers {n_exec}); "
      f"{ {k: v for k, v in p_false.items() if v} or 'no tool or stream findings'}")
    r("proxy-splice", (p_spliced > 0) == t["spliced"],
      f"spliced_text {p_spliced:g} (truth {t['spliced']}: {t['spliced_evidence']})")
    # the client's own log (`retryscope check`)
    log = os.path.join(d, "client-log.jsonl")
    summary, turns, p = check_log(binary, log) if os.path.exists(log) else ({}, [], None)
    step1 = next((x for x in turns if str(x.get("turn", "")).endswith("#1")), {})
    ran = sorted((c.get("id"), a.get("attempt"))
                 for a in step1.get("attempts", []) for c in a.get("executed") or [])
    want = sorted((call, n - 1) for call, n in t["executed"].items())
    r("log-retries", summary.get("retries") == t["retries"]
      and summary.get("attempts") == t["model_requests"],
      f"retries {summary.get('retries')} (truth {t['retries']}), "
      f"attempts {summary.get('attempts')} (truth {t['model_requests']})")
    execs = sum(len(a.get("executed") or []) for x in turns for a in x.get("attempts", []))
    r("log-executions", execs == n_exec and (not ran or ran == want),
      f"executions {execs} {ran} (markers: call, attempt {want})")
    kinds = summary.get("findings") or {}
    r("log-splice", (kinds.get("spliced_text", 0) > 0) == t["spliced"]
      and not kinds.get("spliced_stream"),
      f"spliced_text {kinds.get('spliced_text', 0)} (truth {t['spliced']})")
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", nargs="*", default=[],
                    help="API/STRATEGY/POINT prefixes (e.g. anthropic/prefill)")
    ap.add_argument("--known-failing")
    ap.add_argument("--jobs", type=int, default=6)
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--check-only", action="store_true", help="compare a kept --out again")
    a = ap.parse_args()
    todo = [s for s in sessions() if not a.only or any("/".join(s).startswith(o) for o in a.only)]
    if not a.check_only:
        started = time.time()
        with concurrent.futures.ThreadPoolExecutor(a.jobs) as ex:
            list(ex.map(lambda s: run_session_once_more_if_stalled(a, *s), todo))
        print(f"{len(todo)} sessions took {time.time() - started:.0f} s")
    known = load_known(a.known_failing)
    passed = failed = known_n = 0
    rows = []
    for api, strategy, point in todo:
        d = os.path.join(a.out, api, strategy, point)
        try:
            results = check_session(a.bin, d)
        except (OSError, ValueError, KeyError, subprocess.TimeoutExpired) as e:
            results = [(f"{api}/{strategy}/{point}", "all", False, f"could not check: {e!r}")]
        row = {}
        for name, check, ok, why in results:
            key = f"{name} {check}"
            if key in known:
                mark = "FIXED" if ok else "KNOWN"
                failed += ok
                known_n += not ok
            else:
                mark = "PASS" if ok else "FAIL"
                passed += ok
                failed += not ok
            row[check] = mark
            print(f"{mark} {key}: {why}")
        rows.append(((api, strategy, point), row))
    checks = ["ran", "proxy-retries", "proxy-executions", "proxy-splice", "log-retries",
              "log-executions", "log-splice"]
    print()
    print("| api | strategy | cut | " + " | ".join(checks) + " |")
    print("|---" * (len(checks) + 3) + "|")
    for (api, strategy, point), row in rows:
        print(f"| {api} | {strategy} | {point} | "
              + " | ".join(row.get(c, "-") for c in checks) + " |")
    if known_n:
        print(f"{known_n} checks fail on known defects (known-failing.txt), not counted")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
