#!/usr/bin/env python3
"""One real client x one cut through `retryscope proxy`, in front of a local mock upstream
that never cuts (the mock's `clean` scenario): the proxy does the cutting. Saves what the
proxy reported and the ground truth into an output folder.

  session.py --client CLIENT --scenario clean|<point>-<how> --bin target/debug/retryscope \
             --bin-dir CACHE/node_modules/.bin --python CACHE/pyenv/bin/python --out DIR

CLIENT: gemini-cli, claude-code, codex, qwen-code (the npm clients, configured as in
e2e/agents), or
sdk-anthropic, sdk-openai-chat, sdk-openai-responses (sdk_loop.py on the official SDKs).
point: after-tool-call, mid-word, before-finish (the proxy's `--inject`); how: reset, eof,
error (`--inject-how`); the proxy cuts the first stream, or the first N with `-first<N>`.

Files written to --out:
  metrics.txt       /metrics scraped after the client exited and the proxy closed its turns
  findings.jsonl    the proxy's findings (JSON lines, `--findings-out`)
  record/           the proxy's `--record` folder
  proxy-stderr.txt  the proxy's log
  client-out.txt, client-err.txt   the client's stdout and stderr (sdk: transcript.jsonl too)
  tap/              what the client sent and received, per connection (tap.py)
  mock-log.jsonl    every request the upstream served (with the tags of earlier attempts'
                    text found in the request's assistant history)
  truth.json        ground truth: the upstream's log, what the client received (the tap),
                    the marker files
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
AGENTS = os.path.join(HERE, "..", "agents")
sys.path.insert(0, AGENTS)
import listening  # noqa: E402  (e2e/agents/listening.py: the addresses the proxy bound)
import record  # noqa: E402  (e2e/agents/record.py: client configs, mock start, runner)
import wire  # noqa: E402

PROVIDER = {"gemini-cli": "gemini", "claude-code": "anthropic", "codex": "openai",
            "qwen-code": "openai-chat",
            "sdk-anthropic": "anthropic", "sdk-openai-chat": "openai-chat",
            "sdk-openai-responses": "openai"}
SDK_API = {"sdk-anthropic": "anthropic", "sdk-openai-chat": "openai-chat",
           "sdk-openai-responses": "openai-responses"}
POINTS = ("after-tool-call", "mid-word", "before-finish")
HOWS = ("reset", "eof", "error")
# The proxy closes a turn after this long without events, so that /metrics (attempts and
# executions are counted when a turn closes) is complete soon after the client exits. It
# must exceed the longest silence inside a stream: the mock pauses 1 s after a tool call
# (with 1 s, turns were closed mid-stream and their last chunks dropped as late).
IDLE_SECS = 3
# On a loaded machine a client can stall longer than IDLE_SECS between two requests of one
# turn (a retry's backoff, a tool run): the proxy then closes the turn, rightly, and counts the
# rest of it as events after close (`retryscope_after_close_events_total`), which no proxy
# verdict on the client can be read from. Such a session is run once more with this idle
# timeout, and says so (`RERUN` on stdout, `rerun.txt` in its folder). Seen in CI: the
# openai SDK's retry came 3+ s after the cut while six clients ran at once on two cores.
STALLED_IDLE_SECS = 12
# The `slow-tool` scenario (SDK loops only, no cut): every tool run takes this long, longer
# than IDLE_SECS, as a build or a test suite outlasts the default 5 min. The proxy must keep
# the turn open for the execution its next request shows; such a session is never rerun.
SLOW_TOOL_SECS = IDLE_SECS + 3


def parse_scenario(s):
    """`clean`, `<point>-<how>` (the first stream cut) or `<point>-<how>-first<N>` (the first
    N streams cut: an SDK loop that gives up after 3 tries); `slow-tool` is `clean` with a tool
    that runs longer than the idle timeout."""
    if s in ("clean", "slow-tool"):
        return None
    first = 1
    m = re.fullmatch(r"(.*)-first(\d+)", s)
    if m:
        s, first = m.group(1), int(m.group(2))
    point, _, how = s.rpartition("-")
    if point not in POINTS or how not in HOWS or first < 1:
        raise SystemExit(f"unknown scenario {s!r}")
    return {"point": point, "how": how, "first": first}


def proxy_argv(binary, listen, upstream, metrics_addr, cut, out, idle=IDLE_SECS):
    """The proxy's command line (issue 14's flags)."""
    argv = [binary, "proxy", "--listen", listen, "--upstream", upstream,
            "--metrics-addr", metrics_addr, "--idle-timeout-secs", str(idle),
            "--findings-out", os.path.join(out, "findings.jsonl"),
            "--record", os.path.join(out, "record")]
    if cut:
        argv += ["--inject", cut["point"], "--inject-how", cut["how"],
                 "--inject-first", str(cut["first"])]
    return argv


def start_proxy(argv, stderr_path):
    """The proxy of `argv` (listening on port 0 for both) and {"listen", "metrics"}: the
    addresses it bound, or None when it did not start (its stderr says why)."""
    perr = open(stderr_path, "wb")
    proxy = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=perr, start_new_session=True)
    perr.close()
    addrs = listening.wait_addresses(proxy, stderr_path,
                                     {"listen": listening.PROXY, "metrics": listening.METRICS})
    return proxy, addrs


def scrape(addr):
    try:
        with urllib.request.urlopen(f"http://{addr}/metrics", timeout=5) as r:
            return r.read().decode()
    except OSError as e:
        return f"# scrape failed: {e!r}\n"


def client_argv(client, home, port, tmp, python, tool_secs=0):
    if client in SDK_API:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
        env["HOME"] = home
        api = SDK_API[client]
        base = f"http://127.0.0.1:{port}" + ("" if api == "anthropic" else "/v1")
        argv = [python, os.path.join(HERE, "sdk_loop.py"), "--api", api, "--base-url", base,
                "--transcript", os.path.join(tmp, "transcript.jsonl"),
                "--tool-seconds", str(tool_secs)]
        return argv, env
    argv, env, _ = record.setup_client(client, home, port, tmp)
    return argv, env


def start_tap(proxy_port, tmp, dump):
    """tap.py between the client and the proxy: what the client really received."""
    port_file = os.path.join(tmp, "tap-port")
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "tap.py"), "--upstream-port",
                             str(proxy_port), "--port-file", port_file, "--dump", dump],
                            stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "tap-err"), "w"))
    for _ in range(200):
        if os.path.exists(port_file):
            return proc, int(open(port_file).read())
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("tap did not start")


def build_truth(client, scenario, cut, log_path, marker_dir, run_info, dump):
    reqs = []
    if os.path.exists(log_path):
        reqs = [json.loads(line) for line in open(log_path) if line.strip()]
    reqs.sort(key=lambda r: r["seq"])
    markers = {}
    if os.path.isdir(marker_dir):
        for name in sorted(os.listdir(marker_dir)):
            markers[name] = int(os.stat(os.path.join(marker_dir, name)).st_mtime * 1000)
    main = [r for r in reqs if r.get("route") == "main"]
    got = wire.delivered(dump, PROVIDER[client], main)
    step1 = [r for r in main if r.get("step") == 1]
    out = []
    for r in main:
        item = {"request_seq": r["seq"], "step": r["step"], "ids": r.get("ids"),
                "started_ms": r.get("ts_ms"), "upstream_ended_ms": (r.get("outcome") or {}).get(
                    "ended_ms"), "finish_sent_ms": r.get("finish_sent_ms"),
                "history_tags": r.get("history_tags"),
                "tool_results_in_request": r.get("tool_results_in_request"), "calls": []}
        # what the client received (the tap), not what the proxy says it did
        seen = got.get(r["seq"])
        item["client_received"] = seen
        item["cut_by_proxy"] = bool(seen) and not seen["finish"]
        item["finished"] = bool(seen) and seen["finish"]
        if r["step"] == 1:
            item["attempt"] = r["attempt"]
            item["retried"] = any(s["seq"] > r["seq"] for s in step1)
            c = r["call"]
            name = os.path.basename(c["marker"])
            item["calls"].append({"id": c["id"], "name": c["name"], "command": c["command"],
                                  "delivered": bool(seen) and seen["call_delivered"],
                                  "executed": name in markers, "marker": name,
                                  "marker_mtime_ms": markers.get(name)})
        out.append(item)
    return {"client": client, "scenario": scenario, "inject": cut, "run": run_info,
            "requests_total": len(reqs),
            "side_requests": [{"seq": r["seq"], "method": r["method"], "path": r["path"],
                               "route": r["route"], "stream": r.get("stream")}
                              for r in reqs if r.get("route") != "main"],
            "main_requests": out, "markers": sorted(markers)}


def session(a, idle=IDLE_SECS):
    cut = parse_scenario(a.scenario)
    tmp = tempfile.mkdtemp(prefix=f"rs-proxy-{a.client}-{a.scenario}-")
    home, work = os.path.join(tmp, "home"), os.path.join(tmp, "work")
    os.makedirs(home)
    os.makedirs(work)
    shutil.rmtree(a.out, ignore_errors=True)  # a rerun's folder holds only the rerun
    os.makedirs(a.out)
    mock, mport, log, markers = record.start_mock(PROVIDER[a.client], a.mock_scenario, tmp)
    argv = proxy_argv(a.bin, "127.0.0.1:0", f"http://127.0.0.1:{mport}", "127.0.0.1:0", cut,
                      a.out, idle)
    with open(os.path.join(a.out, "proxy-argv.txt"), "w") as f:
        f.write(" ".join(argv).replace(a.out, "<out>") + "\n")
    proxy_log = os.path.join(a.out, "proxy-stderr.txt")
    proxy, addrs = start_proxy(argv, proxy_log)
    info = {"proxy_started": addrs is not None}
    if addrs is None:
        info["proxy_log"] = listening.log_tail(proxy_log)
    tap, dump = None, os.path.join(a.out, "tap")
    try:
        if addrs:
            maddr = addrs["metrics"]
            tap, tport = start_tap(int(addrs["listen"].rpartition(":")[2]), tmp, dump)
            tool_secs = SLOW_TOOL_SECS if a.scenario == "slow-tool" else 0
            cargv, env = client_argv(a.client, home, tport, tmp, a.python, tool_secs)
            info.update(record.run_client(cargv, env, a.bin_dir, work, a.timeout,
                                          os.path.join(a.out, "client-out.txt"),
                                          os.path.join(a.out, "client-err.txt")))
            # the proxy closes the last turn after `idle` s without events: scrape once
            # no turn is open any more (attempts and executions are counted at close)
            end = time.time() + idle + 8
            while True:
                text = scrape(maddr)
                if re.search(r"^retryscope_open_turns 0$", text, re.M) or time.time() > end:
                    break
                time.sleep(0.25)
            with open(os.path.join(a.out, "metrics.txt"), "w") as f:
                f.write(text)
    finally:
        if proxy.poll() is None:
            os.killpg(proxy.pid, signal.SIGTERM)
            try:
                proxy.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proxy.pid, signal.SIGKILL)
                proxy.wait()
        info["proxy_exit"] = proxy.returncode
        if tap:
            tap.send_signal(signal.SIGINT)
            try:
                tap.wait(timeout=5)
            except subprocess.TimeoutExpired:
                tap.kill()
                tap.wait()
        mock.terminate()
        mock.wait()
    if os.path.exists(log):
        shutil.copy(log, os.path.join(a.out, "mock-log.jsonl"))
    if os.path.exists(os.path.join(tmp, "transcript.jsonl")):
        shutil.copy(os.path.join(tmp, "transcript.jsonl"), os.path.join(a.out, "transcript.jsonl"))
    truth = build_truth(a.client, a.scenario, cut, log, markers, info, dump)
    with open(os.path.join(a.out, "truth.json"), "w") as f:
        json.dump(truth, f, indent=2, sort_keys=True)
        f.write("\n")
    shutil.rmtree(tmp, ignore_errors=True)
    return truth


def after_close_events(metrics_path):
    """`retryscope_after_close_events_total` in a scraped exposition (0 when absent)."""
    try:
        text = open(metrics_path, encoding="utf-8", errors="replace").read()
    except OSError:
        return 0
    m = re.search(r"^retryscope_after_close_events_total (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0


def once_more_if_stalled(label, out, idle, stalled_idle, run):
    """`run(idle)`, and once more as `run(stalled_idle)` when its turn was closed while the
    client still worked on it (events after close in `out`/metrics.txt; see
    STALLED_IDLE_SECS): says so (`RERUN label: why`, and `out`/rerun.txt). Returns what the
    last run returned. `run` starts from an empty `out`."""
    result = run(idle)
    closed_early = after_close_events(os.path.join(out, "metrics.txt"))
    if not closed_early:
        return result
    why = (f"the {idle} s idle timeout closed a turn while the client was still at it "
           f"({closed_early:g} events after close: the machine stalled the client); run "
           f"again with a {stalled_idle} s idle timeout")
    print(f"RERUN {label}: {why}", flush=True)
    result = run(stalled_idle)
    with open(os.path.join(out, "rerun.txt"), "w") as f:
        f.write(why + "\n")
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--client", required=True, choices=sorted(PROVIDER))
    ap.add_argument("--scenario", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--bin-dir", default="")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--out", required=True)
    ap.add_argument("--timeout", type=float, default=90)
    ap.add_argument("--mock-scenario", default="clean",
                    help="harness self-test only: let the mock cut (e2e/agents scenarios) and "
                         "pass --bin a plain relay, to check that the tap sees the cut")
    a = ap.parse_args()
    if a.scenario == "slow-tool":  # its turn must outlive the idle timeout: never rerun
        t = session(a)
    else:
        t = once_more_if_stalled(f"{a.client} {a.scenario}", a.out, IDLE_SECS,
                                 STALLED_IDLE_SECS, lambda idle: session(a, idle))
    run = t["run"]
    print(f"{a.client} {a.scenario}: proxy_started={run.get('proxy_started')} "
          f"exit={run.get('exit_code')} timed_out={run.get('timed_out')} {run.get('seconds')}s "
          f"requests={t['requests_total']} markers={t['markers']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
