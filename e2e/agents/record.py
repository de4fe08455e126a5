#!/usr/bin/env python3
"""Runs one real client headless against the local mock for one scenario and saves what the
client wrote plus the ground truth (truth.json) into an output folder.

  record.py --client gemini-cli|claude-code|claude-code-partial|codex --scenario clean|<point>-<mode> \
            --bin-dir CACHE/node_modules/.bin --out DIR [--timeout 90]

Each run gets a fresh temporary HOME, work folder and marker folder, so nothing leaks between
runs. The client only ever talks to the mock on 127.0.0.1.

Files written to --out (what the client itself wrote is never edited):
  gemini-cli:  stream.jsonl (stdout of `-o stream-json`), telemetry.log (telemetry outfile)
  claude-code: stream.jsonl (stdout of `-p --output-format stream-json --verbose`)
  claude-code-partial: the same with `--include-partial-messages` (raw stream events too)
  codex:       exec.jsonl (stdout of `codex exec --json`)
  all:         stderr.txt (the client's stderr), mock-log.jsonl (every request the mock
               served), truth.json (see build_truth)
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PROMPT = "Create the marker file."
PROVIDER = {"gemini-cli": "gemini", "claude-code": "anthropic", "claude-code-partial": "anthropic",
            "codex": "openai", "qwen-code": "openai-chat"}
VERSIONS = {"gemini-cli": "0.61.0", "claude-code": "2.1.328", "claude-code-partial": "2.1.328",
            "codex": "0.169.0", "qwen-code": "0.24.4"}


def start_mock(provider, scenario, tmp, extra_env=None):
    port_file = os.path.join(tmp, "port")
    log = os.path.join(tmp, "mock-log.jsonl")
    markers = os.path.join(tmp, "markers")
    proc = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "mock_server.py"), "--provider", provider,
         "--scenario", scenario, "--marker-dir", markers, "--log", log, "--port-file", port_file],
        stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "mock-stderr.txt"), "w"))
    for _ in range(200):
        if os.path.exists(port_file):
            return proc, int(open(port_file).read()), log, markers
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"mock did not start: {open(os.path.join(tmp, 'mock-stderr.txt')).read()}")


# How each client is told to export OTLP (`--otlp-protocol` of otlp_e2e.py): "http" is
# OTLP/JSON over HTTP (what every client sends with the settings FORMATS.md lists), "protobuf"
# OTLP/protobuf over HTTP (Claude Code, Codex), "grpc" OTLP/gRPC (all three).
OTLP_PROTOCOLS = {"gemini-cli": ("http", "grpc"),
                  "claude-code": ("http", "protobuf", "grpc"),
                  "claude-code-partial": ("http", "protobuf", "grpc"),
                  "codex": ("http", "protobuf", "grpc"),
                  "qwen-code": ("http", "grpc")}


def setup_client(client, home, port, tmp, otlp=None, otlp_protocol="http"):
    """Writes the client's config under the temporary HOME; returns (argv, env, outputs).
    With `otlp` (a base URL such as http://127.0.0.1:4318) the client exports its telemetry
    there over `otlp_protocol` instead of writing a telemetry file."""
    if otlp and otlp_protocol not in OTLP_PROTOCOLS[client]:
        raise SystemExit(f"{client} cannot export OTLP over {otlp_protocol}")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANTHROPIC_", "OPENAI_", "GEMINI_", "GOOGLE_", "CLAUDE_", "CODEX_",
                                "OTEL_", "QWEN_", "DASHSCOPE_"))}
    env["HOME"] = home
    env["NO_COLOR"] = "1"
    base = f"http://127.0.0.1:{port}"
    if client == "gemini-cli":
        os.makedirs(os.path.join(home, ".gemini"), exist_ok=True)
        tele = {"enabled": True, "target": "local", "outfile": os.path.join(tmp, "telemetry.log"),
                "logPrompts": True}
        if otlp:
            tele = {"enabled": True, "target": "local", "otlpEndpoint": otlp,
                    "otlpProtocol": otlp_protocol, "logPrompts": True}
        settings = {"security": {"auth": {"selectedType": "gemini-api-key"},
                                 "folderTrust": {"enabled": False}},
                    "telemetry": tele}
        with open(os.path.join(home, ".gemini", "settings.json"), "w") as f:
            json.dump(settings, f, indent=2)
        env.update(GOOGLE_GEMINI_BASE_URL=base, GEMINI_API_KEY="mock-key")
        return ["gemini", "-o", "stream-json", "--yolo", "-p", PROMPT], env, "stream.jsonl"
    if client in ("claude-code", "claude-code-partial"):
        env.update(ANTHROPIC_BASE_URL=base, ANTHROPIC_API_KEY="sk-ant-mock",
                   CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1")
        if otlp:
            proto = {"http": "http/json", "protobuf": "http/protobuf", "grpc": "grpc"}[otlp_protocol]
            env.update(CLAUDE_CODE_ENABLE_TELEMETRY="1", OTEL_LOGS_EXPORTER="otlp",
                       OTEL_METRICS_EXPORTER="otlp", OTEL_TRACES_EXPORTER="otlp",
                       OTEL_EXPORTER_OTLP_PROTOCOL=proto, OTEL_EXPORTER_OTLP_ENDPOINT=otlp,
                       OTEL_LOG_USER_PROMPTS="1", OTEL_LOG_TOOL_DETAILS="1",
                       OTEL_METRIC_EXPORT_INTERVAL="1000", OTEL_LOGS_EXPORT_INTERVAL="500",
                       CLAUDE_CODE_ENHANCED_TELEMETRY_BETA="1")
        argv = ["claude", "-p", PROMPT, "--output-format", "stream-json", "--verbose",
                "--allowedTools", "Bash"]
        if client == "claude-code-partial":
            # also print every raw stream event (message_start, ..., message_stop)
            argv.append("--include-partial-messages")
        return argv, env, "stream.jsonl"
    if client == "codex":
        os.makedirs(os.path.join(home, ".codex"), exist_ok=True)
        cfg = [
            'model = "gpt-5-codex"',
            'model_provider = "mock"',
            "",
            "[model_providers.mock]",
            'name = "mock"',
            f'base_url = "{base}/v1"',
            'env_key = "MOCK_API_KEY"',
            'wire_api = "responses"',
            "supports_websockets = false",
        ]
        if otlp and otlp_protocol == "grpc":
            cfg += ["", "[otel]", "log_user_prompt = true",
                    f'exporter = {{ otlp-grpc = {{ endpoint = "{otlp}" }} }}',
                    f'trace_exporter = {{ otlp-grpc = {{ endpoint = "{otlp}" }} }}']
        elif otlp:
            body = "json" if otlp_protocol == "http" else "binary"
            cfg += ["", "[otel]", "log_user_prompt = true",
                    f'exporter = {{ otlp-http = {{ endpoint = "{otlp}/v1/logs", protocol = "{body}" }} }}',
                    f'trace_exporter = {{ otlp-http = {{ endpoint = "{otlp}/v1/traces", protocol = "{body}" }} }}']
        with open(os.path.join(home, ".codex", "config.toml"), "w") as f:
            f.write("\n".join(cfg) + "\n")
        env["MOCK_API_KEY"] = "mock-key"
        return ["codex", "exec", "--json", "--skip-git-repo-check",
                "--dangerously-bypass-approvals-and-sandbox", PROMPT], env, "exec.jsonl"
    if client == "qwen-code":
        # Qwen Code (a gemini-cli fork) on OpenAI Chat Completions: the same `telemetry`
        # settings as gemini-cli (its records are named `qwen-code.*`), auth type `openai`
        # with the base URL, key and model from the environment.
        os.makedirs(os.path.join(home, ".qwen"), exist_ok=True)
        tele = {"enabled": True, "target": "local", "outfile": os.path.join(tmp, "telemetry.log"),
                "logPrompts": True}
        if otlp:
            tele = {"enabled": True, "target": "local", "otlpEndpoint": otlp,
                    "otlpProtocol": otlp_protocol, "logPrompts": True}
        settings = {"security": {"auth": {"selectedType": "openai"},
                                 "folderTrust": {"enabled": False}},
                    "model": {"name": "gpt-4o-2024-08-06"},
                    "usageStatisticsEnabled": False,
                    "telemetry": tele}
        with open(os.path.join(home, ".qwen", "settings.json"), "w") as f:
            json.dump(settings, f, indent=2)
        env.update(OPENAI_BASE_URL=base + "/v1", OPENAI_API_KEY="sk-mock",
                   OPENAI_MODEL="gpt-4o-2024-08-06")
        return ["qwen", "--yolo", "-o", "stream-json", "-p", PROMPT], env, "stream.jsonl"
    raise SystemExit(f"unknown client {client}")


def run_client(argv, env, bin_dir, cwd, timeout, stdout_path, stderr_path):
    argv = [os.path.join(bin_dir, argv[0])] + argv[1:]
    started = time.time()
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        p = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out,
                             stderr=err, start_new_session=True)
        try:
            rc = p.wait(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
            rc, timed_out = None, True
    return {"exit_code": rc, "timed_out": timed_out, "seconds": round(time.time() - started, 2)}


def build_truth(client, scenario, log_path, marker_dir, run_info):
    """The ground truth of one run, from the mock's log and the marker files only."""
    reqs = []
    if os.path.exists(log_path):
        reqs = [json.loads(line) for line in open(log_path) if line.strip()]
    reqs.sort(key=lambda r: r["seq"])
    markers = {}
    if os.path.isdir(marker_dir):
        for name in sorted(os.listdir(marker_dir)):
            markers[name] = int(os.stat(os.path.join(marker_dir, name)).st_mtime * 1000)
    main = [r for r in reqs if r.get("route") == "main"]
    step1 = [r for r in main if r.get("step") == 1]
    requests = []
    for i, r in enumerate(main):
        outcome = r.get("outcome") or {}
        item = {"request_seq": r["seq"], "step": r["step"], "ids": r.get("ids"),
                "started_ms": r.get("ts_ms"), "finished": bool(outcome.get("finished")),
                "ended_ms": outcome.get("ended_ms"), "finish_sent_ms": r.get("finish_sent_ms"),
                "cut": r.get("cut"), "text": r.get("text"),
                "events_written": outcome.get("events_written"),
                "content_delivered": any(e in ("text", "mid_word", "tool_done")
                                         for e in outcome.get("events_written") or []),
                "http_status": outcome.get("http_status"),
                "history_tags": r.get("history_tags"), "calls": []}
        if r["step"] == 1:
            item["attempt"] = r["attempt"]
            later_step1 = [s for s in step1 if s["seq"] > r["seq"]]
            item["retried"] = bool(later_step1)
            c = r["call"]
            name = os.path.basename(c["marker"])
            delivered = "tool_done" in (outcome.get("events_written") or [])
            item["calls"].append({"id": c["id"], "name": c["name"], "command": c["command"],
                                  "delivered": delivered, "executed": name in markers,
                                  "marker": name, "marker_mtime_ms": markers.get(name)})
        else:
            item["tool_results_in_request"] = r.get("tool_results_in_request")
        requests.append(item)
    return {
        "client": client,
        "client_version": VERSIONS[client],
        "scenario": scenario,
        "cut": None if scenario == "clean" else dict(zip(("point", "mode"),
                                                          scenario.rsplit("-", 1))),
        "run": run_info,
        "requests_total": len(reqs),
        "side_requests": [{"seq": r["seq"], "method": r["method"], "path": r["path"],
                           "route": r["route"]} for r in reqs if r.get("route") != "main"],
        "main_requests": requests,
        "markers": sorted(markers),
    }


def visible_text(client, out):
    """What the user was shown, read from the client's own display output: gemini-cli's
    stream-json assistant `message` contents (deltas, concatenated), Claude Code's stream-json
    `assistant` text blocks (Qwen Code's stream-json has the same shape), Codex's
    `agent_message` items. Used only to derive whether an
    abandoned attempt's text reached the screen (spliced text)."""
    name = "exec.jsonl" if client == "codex" else "stream.jsonl"
    path = os.path.join(out, name)
    parts = []
    if not os.path.exists(path):
        return None
    for line in open(path, encoding="utf-8", errors="replace"):
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if not isinstance(r, dict):
            continue
        if client == "gemini-cli" and r.get("type") == "message" and r.get("role") == "assistant":
            parts.append(str(r.get("content") or ""))
        elif client.startswith(("claude-code", "qwen-code")) and r.get("type") == "assistant":
            for b in (r.get("message") or {}).get("content") or []:
                if isinstance(b, dict) and b.get("type") == "text":
                    parts.append(b.get("text") or "")
        elif client == "codex" and r.get("type") == "item.completed":
            item = r.get("item") or {}
            if item.get("type") == "agent_message":
                parts.append(item.get("text") or "")
    return "".join(parts)


def compact_large_json(folder, limit=1_000_000):
    """OTLP/JSON bodies over 1 MB (Codex's pretty-printed trace batches) are re-serialized
    without whitespace: the same JSON value, smaller. Noted in a `.compacted` file beside."""
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if not name.endswith(".json") or os.path.getsize(path) <= limit:
            continue
        before = os.path.getsize(path)
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(value, f, separators=(",", ":"))
        with open(path + ".compacted", "w") as f:
            f.write(f"{name}: whitespace removed by record.py ({before} -> "
                    f"{os.path.getsize(path)} bytes); the JSON value is unchanged\n")


def record(client, scenario, bin_dir, out, timeout, otlp_receiver=None, otlp_endpoint=None,
           otlp_protocol="http"):
    """One run. `otlp_receiver(tmp)` starts a capturing receiver (--record-otlp);
    `otlp_endpoint` points the client's export at a receiver already running (otlp_e2e.py)."""
    tmp = tempfile.mkdtemp(prefix=f"rs-e2e-{client}-{scenario}-")
    home, work = os.path.join(tmp, "home"), os.path.join(tmp, "work")
    os.makedirs(home)
    os.makedirs(work)
    mock, port, log, markers = start_mock(PROVIDER[client], scenario, tmp)
    recv = None
    try:
        otlp = otlp_endpoint
        if otlp_receiver:
            recv, otlp = otlp_receiver(tmp)
        argv, env, stdout_name = setup_client(client, home, port, tmp, otlp, otlp_protocol)
        os.makedirs(out, exist_ok=True)
        info = run_client(argv, env, bin_dir, work, timeout, os.path.join(out, stdout_name),
                          os.path.join(out, "stderr.txt"))
        info["argv"] = ["<bin>/" + argv[0]] + argv[1:]
        time.sleep(0.5)
    finally:
        mock.terminate()
        mock.wait()
        if recv:
            time.sleep(1.5)
            recv.terminate()
            recv.wait()
    if client in ("gemini-cli", "qwen-code") and os.path.exists(os.path.join(tmp, "telemetry.log")):
        shutil.copy(os.path.join(tmp, "telemetry.log"), os.path.join(out, "telemetry.log"))
    if os.path.exists(log):
        shutil.copy(log, os.path.join(out, "mock-log.jsonl"))
    truth = build_truth(client, scenario, log, markers, info)
    truth["visible_text"] = visible_text(client, out)
    with open(os.path.join(out, "truth.json"), "w") as f:
        json.dump(truth, f, indent=2, sort_keys=True)
        f.write("\n")
    if otlp_receiver and os.path.isdir(os.path.join(tmp, "otlp")):
        dst = os.path.join(out, "otlp")
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(os.path.join(tmp, "otlp"), dst)
        compact_large_json(dst)
    shutil.rmtree(tmp, ignore_errors=True)
    return truth


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--client", required=True, choices=sorted(PROVIDER))
    ap.add_argument("--scenario", required=True)
    ap.add_argument("--bin-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--timeout", type=float, default=90)
    ap.add_argument("--otlp", action="store_true", help="also capture OTLP/JSON telemetry")
    a = ap.parse_args()
    recv = None
    if a.otlp:
        import otlp_receiver

        recv = otlp_receiver.spawn
    t = record(a.client, a.scenario, a.bin_dir, a.out, a.timeout, recv)
    run = t["run"]
    print(f"{a.client} {a.scenario}: exit={run['exit_code']} timed_out={run['timed_out']} "
          f"{run['seconds']}s requests={t['requests_total']} markers={t['markers']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
