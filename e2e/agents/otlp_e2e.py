#!/usr/bin/env python3
"""The real coding agents exporting their OpenTelemetry telemetry straight to
`retryscope run --otlp-listen` (OTLP/HTTP) or `--otlp-grpc-listen` (OTLP/gRPC), against the
cutting mock; what retryscope's /metrics and findings then say is compared with

  - the same scenario run once more with the telemetry written to a file instead (gemini-cli's
    `outfile`) and tailed by `retryscope run FILE`: retries, findings by kind, attempts by
    outcome, executions by attempt outcome and turns by status must be equal, and the
    findings (kind, attempt, tool) too;
  - the run's own ground truth (truth.json), with the rules of expect.py.

  otlp_e2e.py --bin target/debug/retryscope --bin-dir CACHE/node_modules/.bin --out DIR \\
              [--clients gemini-cli,claude-code,codex] [--scenarios clean,after-tool-reset] \\
              [--protocols http,grpc,protobuf]

Checks per client, scenario and protocol (each prints PASS, FAIL or KNOWN-FAIL with the
reason; the last line is `N passed, N failed`; known failures are listed, not counted):
  accepted     every export request came over the configured protocol and was accepted
               (retryscope_otlp_receiver_requests_total), every log record and span accepted
               was read (= events read, > 0), no bad lines, retryscope still running, the
               client exited 0
  same_across_protocols  the same number of log records arrived over each protocol
  same_as_file (gemini-cli, Qwen Code) the OTLP run's figures equal the telemetry-file run's
  truth        (gemini-cli) findings are exactly what the truth implies minus spliced_text
               (that needs the client's display output, which telemetry does not carry:
               docs/clients/gemini-cli.md); retries, executions and unfinished attempts as
               the mock served them
  otlp-http+stream-json (gemini-cli) one more run: OTLP/HTTP telemetry plus the client's
               `-o stream-json` file tailed by the same retryscope, compared with both files
               tailed, and with the whole truth (spliced_text included)
               Qwen Code: the findings its telemetry can show (expect.input_view: spliced_text
               after a continuation, whose kept text goes back in the next request's history)
  truth        (Codex, Claude Code) as for gemini-cli: retryscope decodes their events; for
               Claude Code against the truth as its telemetry can show it (client_view: a cut
               message reads as finished, a content-less failed request is not exported)
  no_false_findings (a client whose export is not decoded) every finding retryscope
               reports is one the truth implies
"""

import argparse
import copy
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import expect  # noqa: E402
import listening  # noqa: E402
import record  # noqa: E402

# Cases that fail for a reason already reported (client, scenario, protocol, check) -> why.
# A case listed with its scenario that passes is reported as XPASS: remove it. Scenario "*"
# matches every scenario (a pass there is a plain PASS: the failure shows only in some).
KNOWN_FAILURES = {}

# Clients whose OTLP export retryscope decodes into turns: their runs must match the truth
# as their telemetry can show it (client_view); any other only must not produce a finding
# the truth does not imply.
DECODED = {"gemini-cli", "codex", "claude-code", "qwen-code"}

# Clients that also write their telemetry to a file (`outfile`): each scenario runs once with
# the file tailed by `retryscope run FILE`, and the OTLP runs must report the same. Only
# gemini-cli's display output (stream-json) is joined with its telemetry.
FILE_CLIENTS = {"gemini-cli", "qwen-code"}
JOINED = {"gemini-cli"}

# Idle timeout of the live turns (seconds) in every retryscope run here.
IDLE_SECS = 3

# Findings a telemetry export cannot carry, per client (the display output is not exported).
NOT_IN_TELEMETRY = {"spliced_text", "spliced_stream"}


def parse_metrics(text):
    """Prometheus text -> {family: [(labels dict, value)]} (only retryscope_ samples)."""
    out = {}
    for line in text.splitlines():
        if not line.startswith("retryscope_"):
            continue
        name, _, rest = line.partition("{")
        labels = {}
        if rest:
            body, _, value = rest.rpartition("}")
            for part in body.split('",'):
                k, _, v = part.partition('="')
                if k:
                    labels[k.strip(",")] = v.rstrip('"')
        else:
            name, _, value = line.partition(" ")
        try:
            v = float(value.split()[0])
        except (ValueError, IndexError):
            continue
        out.setdefault(name.strip(), []).append((labels, v))
    return out


def by_label(metrics, family, label):
    """Sum of a family by one label, zero entries dropped."""
    out = {}
    for labels, v in metrics.get(family, []):
        if v:
            k = labels.get(label, "")
            out[k] = out.get(k, 0) + v
    return {k: int(v) for k, v in sorted(out.items())}


def total(metrics, family):
    return int(sum(v for _, v in metrics.get(family, [])))


def snapshot(metrics):
    """The figures compared between runs (and with the truth)."""
    return {
        "retries": total(metrics, "retryscope_retries_total"),
        "findings": by_label(metrics, "retryscope_findings_total", "kind"),
        "attempts": by_label(metrics, "retryscope_attempts_total", "outcome"),
        "executions": by_label(metrics, "retryscope_tool_executions_total", "attempt_outcome"),
        "turns": by_label(metrics, "retryscope_turns_total", "status"),
        "open_turns": total(metrics, "retryscope_open_turns"),
        "events_read": total(metrics, "retryscope_events_read_total"),
        "otlp_read": int(sum(v for lv, v in metrics.get("retryscope_events_read_total", [])
                             if lv.get("source") == "otlp")),
        "bad_lines": total(metrics, "retryscope_bad_lines_total"),
        # the receiver's own counts: requests by protocol and outcome, records by signal
        "requests": by_labels(metrics, "retryscope_otlp_receiver_requests_total",
                              ("protocol", "outcome")),
        "records": by_label(metrics, "retryscope_otlp_receiver_records_total", "signal"),
    }


def by_labels(metrics, family, labels):
    """Sum of a family by several labels ("a/b" keys), zero entries dropped."""
    out = {}
    for lv, v in metrics.get(family, []):
        if v:
            k = "/".join(lv.get(x, "") for x in labels)
            out[k] = out.get(k, 0) + v
    return {k: int(v) for k, v in sorted(out.items())}


# The receiver's `protocol` label for each way a client is told to export.
WIRE = {"http": "http_json", "protobuf": "http_protobuf", "grpc": "grpc"}


def read_findings(path):
    out = []
    if os.path.exists(path):
        for line in open(path, encoding="utf-8", errors="replace"):
            try:
                f = json.loads(line)
            except ValueError:
                continue
            out.append((f.get("kind"), f.get("attempt"), f.get("tool")))
    return sorted(out, key=str)


class Retryscope:
    """One `retryscope run` with its metrics port, findings file and stderr in `folder`."""

    def __init__(self, binary, folder, args, more_addrs=None):
        """`more_addrs`: {name: log pattern} of the listeners besides /metrics (port 0)
        whose bound address `self.addrs` must hold."""
        os.makedirs(folder, exist_ok=True)
        self.folder = folder
        self.findings = os.path.join(folder, "findings.jsonl")
        self.stderr = open(os.path.join(folder, "retryscope-stderr.txt"), "wb")
        # A live turn closes when it has been idle this long; the default (300 s) is for
        # production. Both the file and the OTLP runs use the same value.
        argv = [binary, "run", *args, "--metrics-addr", "127.0.0.1:0",
                "--findings-out", self.findings, "--idle-timeout-secs", str(IDLE_SECS)]
        with open(os.path.join(folder, "retryscope-argv.txt"), "w") as f:
            f.write(" ".join(argv) + "\n")
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=self.stderr)
        self.wait_ready({"metrics": listening.METRICS, **(more_addrs or {})})

    def scrape(self):
        url = f"http://{self.addrs['metrics']}/metrics"
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.read().decode("utf-8", "replace")

    def wait_ready(self, patterns, seconds=30):
        self.addrs = listening.wait_addresses(self.proc, self.stderr.name, patterns, seconds)
        if self.addrs is None:
            raise RuntimeError(f"retryscope did not start in {seconds} s (exit "
                               f"{self.proc.poll()}): " + self.stderr_text()[-500:])
        deadline = time.time() + seconds
        while time.time() < deadline:
            try:
                self.scrape()
                return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"retryscope /metrics did not answer in {seconds} s")

    def settle(self, need_turns, seconds=45):
        """Waits until the figures stop changing (3 polls 1 s apart) with no open turn (and
        at least one closed turn when `need_turns`); returns the last /metrics text."""
        deadline = time.time() + seconds
        last, same, text = None, 0, ""
        while time.time() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                text = self.scrape()
            except OSError:
                time.sleep(1)
                continue
            snap = snapshot(parse_metrics(text))
            done = snap["open_turns"] == 0 and (not need_turns or sum(snap["turns"].values()))
            same = same + 1 if snap == last and done else 0
            if same >= 2:
                break
            last = snap
            time.sleep(1)
        with open(os.path.join(self.folder, "metrics.txt"), "w") as f:
            f.write(text)
        return text

    def stderr_text(self):
        if not self.stderr.closed:
            self.stderr.flush()
        with open(self.stderr.name, encoding="utf-8", errors="replace") as f:
            return f.read()

    def stop(self):
        alive = self.proc.poll() is None
        if alive:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.stderr.close()
        return alive


def listen_args(protocol):
    """The flag that has retryscope receive OTLP over `protocol` on a port of its choosing,
    and the log line that names the address it bound."""
    if protocol == "grpc":
        return ["--otlp-grpc-listen", "127.0.0.1:0"], listening.OTLP_GRPC
    return ["--otlp-listen", "127.0.0.1:0"], listening.OTLP_HTTP


def run_otlp(binary, client, scenario, protocol, bin_dir, out, timeout, display=False):
    """The client exporting to a fresh retryscope; returns (snapshot, findings, truth, rs
    alive, stderr tail). With `display`, retryscope also tails the client's display output
    (gemini-cli's stream-json file) as it is written."""
    extra = [os.path.join(out, "stream.jsonl")] if display else []
    flags, bound = listen_args(protocol)
    rs = Retryscope(binary, out, flags + extra, {"otlp": bound})
    try:
        truth = record.record(client, scenario, bin_dir, out, timeout,
                              otlp_endpoint=f"http://{rs.addrs['otlp']}", otlp_protocol=protocol)
        text = rs.settle(need_turns=client in DECODED)
    finally:
        alive = rs.stop()
    return (snapshot(parse_metrics(text)), read_findings(rs.findings), truth, alive,
            rs.stderr_text()[-400:])


def run_file(binary, client, scenario, bin_dir, out, timeout):
    """gemini-cli (or Qwen Code) writing its telemetry file, then `retryscope run FILE` over
    it, and for gemini-cli `retryscope run FILE stream.jsonl` (the telemetry joined with what
    the user saw). Returns ((snapshot, findings) telemetry only, (snapshot, findings) joined
    or None, truth)."""
    truth = record.record(client, scenario, bin_dir, out, timeout)
    tele = os.path.join(out, "telemetry.log")
    shown = os.path.join(out, "stream.jsonl")
    views = []
    runs = [("run", [tele])]
    if client in JOINED:
        runs.append(("run-with-stream-json", [tele, shown]))
    for name, paths in runs:
        rs = Retryscope(binary, os.path.join(out, name), paths)
        try:
            text = rs.settle(need_turns=True)
        finally:
            rs.stop()
        views.append((snapshot(parse_metrics(text)), read_findings(rs.findings)))
    return views[0], (views[1] if len(views) > 1 else None), truth


def compared(snap):
    return {k: snap[k] for k in ("retries", "findings", "attempts", "executions", "turns")}


def truth_expectations(truth, hidden=NOT_IN_TELEMETRY):
    """What a telemetry export of this run must make retryscope report, from truth.json:
    finding kinds (incomplete_turn neither required nor refused), retries, executions and
    attempts that did not complete. Qwen Code's telemetry shows the spliced text it sends back
    to the model (expect.input_view)."""
    kinds = expect.implied_findings(truth) - set(hidden)
    if truth.get("client") == "qwen-code":
        kinds = expect.input_view(truth, "telemetry.log")
    main = truth["main_requests"]
    retries = 0
    for step in sorted({r["step"] for r in main}):
        n = sum(1 for r in main if r["step"] == step)
        retries += max(0, n - 1)
    return {
        "findings": kinds,
        "retries": retries,
        "executions": len(truth["markers"]),
        "unfinished": sum(1 for r in main if not r["finished"]),
    }


def client_view(truth, client):
    """The truth as the client's telemetry can show it. Claude Code 2.1.328 exports a message
    cut mid-stream like a finished one (api_request, llm_request success, a stop reason) and
    exports nothing at all for a request that failed before any content (its silent retry):
    so a cut request that delivered content counts as finished at its cut, and a failed one
    without content is left out (docs/clients/claude-code.md). Others: the truth itself."""
    if client != "claude-code":
        return truth
    view = copy.deepcopy(truth)
    main = []
    for r in view["main_requests"]:
        if not r["finished"]:
            if not r.get("content_delivered"):
                continue
            r["finished"], r["finish_sent_ms"] = True, r.get("ended_ms")
        main.append(r)
    for r in main:
        r["retried"] = r["step"] == 1 and any(
            o["step"] == 1 and o["request_seq"] > r["request_seq"] for o in main)
    view["main_requests"] = main
    return view


def check_truth(snap, truth, hidden=NOT_IN_TELEMETRY):
    """(ok, why) for a run against its truth; `hidden`: findings its inputs cannot show."""
    want = truth_expectations(truth, hidden)
    got_kinds = {k for k in snap["findings"] if k != "incomplete_turn"}
    got = {
        "findings": got_kinds,
        "retries": snap["retries"],
        "executions": sum(snap["executions"].values()),
        "unfinished": sum(v for k, v in snap["attempts"].items() if k != "completed"),
    }
    bad = [k for k in want if want[k] != got[k]]
    why = ", ".join(f"{k}: want {sorted(want[k]) if isinstance(want[k], set) else want[k]}, "
                    f"got {sorted(got[k]) if isinstance(got[k], set) else got[k]}" for k in want)
    return not bad, why


def check_no_false_findings(snap, truth):
    implied = expect.implied_findings(truth)
    got = {k for k in snap["findings"] if k != "incomplete_turn"}
    extra = got - implied
    return not extra, (f"findings {sorted(got)} within implied {sorted(implied)}"
                       + (f"; not implied: {sorted(extra)}" if extra else "")
                       + f"; turns {snap['turns']}, attempts {snap['attempts']}, "
                       f"retries {snap['retries']}, events read {snap['events_read']}")


def check_accepted(snap, truth, alive, stderr_tail, protocol):
    """Every export request the client made came over `protocol` and was accepted, every
    log record and span accepted was read by the engine, none was a bad line."""
    rc = truth["run"]["exit_code"]
    wire = WIRE[protocol]
    requests = snap["requests"]
    read_signals = sum(v for k, v in snap["records"].items() if k in ("logs", "traces"))
    ok = (bool(requests) and all(k == f"{wire}/accepted" for k in requests)
          and read_signals == snap["otlp_read"] > 0 and snap["bad_lines"] == 0
          and alive and rc == 0)
    return ok, (f"requests {requests or 'none'} (want only {wire}/accepted), records "
                f"{snap['records']}, OTLP records read {snap['otlp_read']}, bad lines "
                f"{snap['bad_lines']}, retryscope {'running' if alive else 'DEAD'}, client "
                f"exit {rc}" + ("" if ok else f"; retryscope stderr: {stderr_tail.strip()[-300:]}"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--bin-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--clients", default="gemini-cli,claude-code,codex")
    ap.add_argument("--scenarios", default="clean,after-tool-reset")
    ap.add_argument("--protocols", default="http,grpc")
    ap.add_argument("--timeout", type=float, default=90)
    a = ap.parse_args()
    results = []

    def res(name, key, ok, why):
        known = KNOWN_FAILURES.get(key)
        wild = KNOWN_FAILURES.get((key[0], "*") + tuple(key[2:]))
        if (known or wild) and not ok:
            results.append(("KNOWN-FAIL", name, f"{why} [known: {known or wild}]"))
        elif known:
            results.append(("XPASS", name, f"{why} [listed as known failure: {known}]"))
        else:
            results.append(("PASS" if ok else "FAIL", name, why))
        print(f"{results[-1][0]} {name}: {results[-1][2]}", flush=True)

    for client in a.clients.split(","):
        for scenario in a.scenarios.split(","):
            base = os.path.join(a.out, client, scenario)
            shutil.rmtree(base, ignore_errors=True)
            ref = None
            log_records = {}
            if client in FILE_CLIENTS:  # clients with a telemetry file
                try:
                    ref, joined, ref_truth = run_file(a.bin, client, scenario, a.bin_dir,
                                                      os.path.join(base, "file"), a.timeout)
                except (RuntimeError, OSError) as e:
                    res(f"{client}/{scenario} file", (client, scenario, "file", "run"), False,
                        f"could not run: {e}")
                    continue
                ok, why = check_truth(ref[0], ref_truth)
                res(f"{client}/{scenario} file truth", (client, scenario, "file", "truth"), ok,
                    why)
                if joined is not None:
                    ok, why = check_truth(joined[0], ref_truth, hidden=())
                    res(f"{client}/{scenario} file+stream-json truth",
                        (client, scenario, "file+stream-json", "truth"), ok, why)
            runs = [(p, False) for p in a.protocols.split(",")]
            if client in JOINED and "http" in a.protocols.split(","):
                # OTLP telemetry and the display output tailed from its file, as a fleet that
                # keeps `-o stream-json` logs would run it: compared with both files tailed
                runs.append(("http", True))
            for proto, display in runs:
                if proto not in record.OTLP_PROTOCOLS[client]:
                    continue
                label = proto + ("+stream-json" if display else "")
                name = f"{client}/{scenario} otlp-{label}"
                try:
                    snap, findings, truth, alive, tail = run_otlp(
                        a.bin, client, scenario, proto, a.bin_dir,
                        os.path.join(base, f"otlp-{label}"), a.timeout, display)
                except (RuntimeError, OSError) as e:
                    res(name + " accepted", (client, scenario, proto, "accepted"), False,
                        f"could not run: {e}")
                    continue
                ok, why = check_accepted(snap, truth, alive, tail, proto)
                if not display:
                    log_records.setdefault(proto, snap["records"].get("logs", 0))
                res(name + " accepted", (client, scenario, label, "accepted"), ok, why)
                if ref is not None:
                    base_snap, base_findings = joined if display else ref
                    want, got = compared(base_snap), compared(snap)
                    ok = want == got and base_findings == findings
                    res(name + " same_as_file", (client, scenario, label, "same_as_file"), ok,
                        f"file {want}, otlp {got}" + (
                            "" if base_findings == findings else
                            f"; findings file {base_findings}, otlp {findings}"))
                    ok, why = check_truth(snap, truth, hidden=() if display else NOT_IN_TELEMETRY)
                    res(name + " truth", (client, scenario, label, "truth"), ok, why)
                elif client in DECODED:
                    view = client_view(truth, client)
                    ok, why = check_truth(snap, view)
                    if view is not truth:
                        why += (f" (the truth as {client}'s telemetry shows it; the whole truth "
                                f"implies {sorted(expect.implied_findings(truth))})")
                    res(name + " truth", (client, scenario, label, "truth"), ok, why)
                else:
                    ok, why = check_no_false_findings(snap, truth)
                    res(name + " no_false_findings", (client, scenario, proto, "no_false"), ok,
                        why)
            if len(log_records) > 1:
                # the same run over another protocol delivers the same log records
                ok = len(set(log_records.values())) == 1
                res(f"{client}/{scenario} same_across_protocols",
                    (client, scenario, "all", "same_across_protocols"), ok,
                    f"log records received per protocol: {log_records}")
    passed = sum(1 for s, _, _ in results if s in ("PASS", "XPASS"))
    failed = sum(1 for s, _, _ in results if s == "FAIL")
    known = [n for s, n, _ in results if s == "KNOWN-FAIL"]
    if known:
        print(f"known failures, not counted ({len(known)}): {', '.join(known)}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
