#!/usr/bin/env python3
"""Local mock of three streaming model APIs (Gemini, Anthropic Messages, OpenAI Responses)
that cuts the first attempt of a scripted tool-calling turn and logs the ground truth.

Listens on 127.0.0.1 only. Python 3 standard library only.

A scenario is `clean` (never cut: the upstream of e2e/proxy/, where the proxy cuts) or
`<point>-<mode>`:
  point: start          cut once the stream has started, before any content (the provider's
                        start events only: message_start, response.created/in_progress)
         after-tool     cut right after the complete tool call event
         mid-word       cut after a text fragment that ends in the middle of a word
         before-finish  cut just before the finish event (all content delivered)
  mode:  reset  TCP reset (SO_LINGER 0, then close)
         eof    clean end of the HTTP body (terminating chunk) with no finish event
         error  an in-stream error event in the provider's own format, then end of body
         status (start only) no stream at all: an HTTP error status with the provider's
                error body (Anthropic 529 overloaded_error, OpenAI 500, Gemini 503)

The scripted turn: a request with no tool result is "step 1"; each one is a new attempt
(1, 2, ...). An attempt streams text, one shell tool call whose command creates a marker file
named for the attempt and call id, more text, then the finish event. Only attempt 1 is cut.
A request carrying a tool result is "step 2": a final text and the finish event. Side
requests (no shell tool offered: titles, classifiers, token counts) get a short plain answer.

Every request served is appended as one JSON line to --log (see write_log below); the runner
turns that log plus the marker files into truth.json.
"""

import argparse
import json
import os
import re
import socket
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import mock_anthropic
import mock_gemini
import mock_openai
import mock_openai_chat

PROVIDERS = {"gemini": mock_gemini, "anthropic": mock_anthropic, "openai": mock_openai,
             "openai-chat": mock_openai_chat}
TAG = re.compile(r"\[(?:A\d+|F)\]")
POINTS = ("start", "after-tool", "mid-word", "before-finish")
MODES = ("reset", "eof", "error", "status")


class Cut(Exception):
    """Raised inside a stream writer to stop writing; carries how the stream ended."""


class State:
    def __init__(self, provider, scenario, marker_dir, log_path, event_delay, tool_pause):
        self.provider = provider
        self.scenario = scenario
        self.marker_dir = marker_dir
        self.log_path = log_path
        self.event_delay = event_delay
        self.tool_pause = tool_pause
        self.lock = threading.Lock()
        self.attempts = 0
        self.seq = 0
        # background responses (OpenAI Responses `background: true`): response id ->
        # (step, attempt, every event the "server" generated, cut or not)
        self.background = {}
        if scenario == "clean":
            self.point, self.mode = None, None
        else:
            point, _, mode = scenario.rpartition("-")
            if point not in POINTS or mode not in MODES or (mode == "status" and point != "start"):
                raise SystemExit(f"unknown scenario {scenario!r}")
            self.point, self.mode = point, mode

    def next_attempt(self):
        with self.lock:
            self.attempts += 1
            return self.attempts

    def next_seq(self):
        with self.lock:
            self.seq += 1
            return self.seq

    def write_log(self, record):
        with self.lock:
            with open(self.log_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(record, sort_keys=True) + "\n")


def history_tags(body):
    """The scripted tags (`[A1]`, `[A2]`, `[F]`) found in the assistant (or Gemini `model`)
    messages of a request's history, in order, each message's tags as one string: what text
    of earlier attempts the client sent back to the model. Provider-agnostic: any object with
    `role` assistant/model, all strings under it."""
    out = []

    def strings(v):
        if isinstance(v, str):
            yield v
        elif isinstance(v, dict):
            for x in v.values():
                yield from strings(x)
        elif isinstance(v, list):
            for x in v:
                yield from strings(x)

    def walk(v):
        if isinstance(v, dict):
            if v.get("role") in ("assistant", "model"):
                tags = "".join(t for s in strings(v) for t in TAG.findall(s))
                if tags:
                    out.append(tags)
                return
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(body)
    return out


def attempt_script(attempt, call_id, command):
    """Text, tool call and text of one step-1 attempt. Attempt 1 and the retries differ a
    little in wording, as a real retry would."""
    tag = f"[A{attempt}]"
    if attempt == 1:
        before = [f"{tag} I will now crea", "te the marker file."]
        after = ["Now checking the mar", "ker file is there."]
    else:
        before = [f"{tag} I will now create", " the marker file for you."]
        after = ["Then I check the mar", "ker file exists."]
    return {"before": before, "call": {"id": call_id, "command": command}, "after": after}


def final_script():
    return {"before": ["[F] The marker file ", "has been written."], "call": None, "after": []}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "retryscope-e2e-mock"

    def log_message(self, fmt, *args):  # quiet: the truth log records everything
        pass

    # ---- plumbing -------------------------------------------------------------------

    def read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            raw = self._read_chunked()
        enc = self.headers.get("Content-Encoding", "identity").lower()
        if enc == "gzip":
            import gzip

            raw = gzip.decompress(raw)
        elif enc == "deflate":
            import zlib

            raw = zlib.decompress(raw)
        try:
            return json.loads(raw.decode("utf-8")) if raw else {}
        except (ValueError, UnicodeDecodeError):
            return {"_unparsed_bytes": len(raw), "_content_encoding": enc}

    def _read_chunked(self):
        out = b""
        while True:
            line = self.rfile.readline().strip()
            size = int(line.split(b";")[0], 16)
            if size == 0:
                self.rfile.readline()
                return out
            out += self.rfile.read(size)
            self.rfile.readline()

    def send_json(self, status, obj):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def start_sse(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def end_chunks(self):
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def reset(self):
        """TCP reset: linger 0 and close, so the kernel sends RST instead of FIN."""
        try:
            self.wfile.flush()
        except OSError:
            pass
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()
        self.close_connection = True

    # ---- dispatch -------------------------------------------------------------------

    def do_GET(self):
        self.handle_any("GET", None)

    def do_HEAD(self):
        self.handle_any("HEAD", None)

    def do_POST(self):
        self.handle_any("POST", self.read_body())

    def handle_any(self, method, body):
        st = self.server.state
        mod = PROVIDERS[st.provider]
        seq = st.next_seq()
        rec = {
            "seq": seq,
            "ts_ms": int(time.time() * 1000),
            "method": method,
            "path": self.path,
            "user_agent": self.headers.get("User-Agent"),
        }
        route = mod.route(method, self.path, body)
        rec["route"] = route["kind"]
        if isinstance(body, dict) and "stream" in body:
            rec["stream_requested"] = body.get("stream")
        if isinstance(body, dict):
            # what a retry may change besides the history (the strategy zoo's ground truth)
            rec["request"] = {k: body[k] for k in ("model", "temperature", "speed", "background",
                                                   "previous_response_id") if k in body}
            rec["request"]["headers"] = {k: v for k, v in self.headers.items() if k.lower() in (
                "idempotency-key", "x-stainless-retry-count", "x-zoo-retry")}
        if route["kind"] == "resume":
            self.resume(st, rec, route)
            return
        if route["kind"] == "static":
            rec["status"] = route["status"]
            st.write_log(rec)
            self.send_json(route["status"], route["body"])
            return
        if route["kind"] == "side":
            rec["stream"] = route["stream"]
            st.write_log(rec)
            mod.write_side(self, route, body)
            return
        # a main request: step 1 (new attempt) or step 2 (after the tool result)
        tool = mod.shell_tool(body)
        rec["tool_offered"] = tool
        rec["history_tags"] = history_tags(body)
        if mod.has_tool_result(body):
            rec["step"] = 2
            rec["tool_results_in_request"] = mod.tool_result_ids(body)
            script, attempt, cut = final_script(), None, None
        else:
            attempt = st.next_attempt()
            rec["step"] = 1
            rec["attempt"] = attempt
            call_id = mod.call_id(attempt)
            marker = os.path.join(st.marker_dir, f"a{attempt}-{call_id}")
            command = f"touch {marker}"
            script = attempt_script(attempt, call_id, command)
            # the call's id as streamed (null for a provider that streams none: Gemini)
            wire_id = call_id if getattr(mod, "STREAMS_CALL_IDS", True) else None
            rec["call"] = {"id": wire_id, "name": tool, "command": command, "marker": marker}
            cut = (st.point, st.mode) if attempt == 1 and st.point else None
        rec["cut"] = {"point": cut[0], "mode": cut[1]} if cut else None
        rec["ids"] = mod.attempt_ids(seq)
        rec["text"] = "".join(script["before"]) + "".join(script["after"])
        if isinstance(body, dict) and body.get("stream") is False and hasattr(mod, "full_message"):
            # a non-streamed request (Claude Code falls back to one after a stream failed
            # early): the whole message as one JSON body, never cut
            rec["finish_sent_ms"] = int(time.time() * 1000)
            self.send_json(200, mod.full_message(script, tool, rec["ids"]))
            outcome = {"finished": True, "events_written": ["json"],
                       "ended_ms": int(time.time() * 1000)}
        else:
            if isinstance(body, dict) and body.get("background") and hasattr(mod, "background_events"):
                events = mod.background_events(script, tool, rec["ids"], body)
                rec["background_response"] = rec["ids"]["response_id"]
                with st.lock:
                    st.background[rec["ids"]["response_id"]] = (rec["step"], attempt, events)
            else:
                events = mod.events(script, tool, rec["ids"], body)
            outcome = self.play(events, cut, mod, rec)
        rec["outcome"] = outcome
        st.write_log(rec)

    def resume(self, st, rec, route):
        """`GET /v1/responses/{id}?stream=true&starting_after=N`: the rest of a background
        response's stream, the SAME attempt continued (never cut by the mock)."""
        with st.lock:
            stored = st.background.get(route["id"])
        if not stored or not route["stream"]:
            rec["status"] = 404
            st.write_log(rec)
            self.send_json(404, {"error": {"message": f"Response with id '{route['id']}' not found.",
                                           "type": "invalid_request_error", "param": None,
                                           "code": None}})
            return
        step, attempt, events = stored
        mod = PROVIDERS[st.provider]
        rec.update({"step": step, "attempt": attempt, "resumed": route["id"],
                    "starting_after": route["starting_after"], "cut": None})
        rec["outcome"] = self.play(mod.events_after(events, route["starting_after"]), None, mod, rec)
        st.write_log(rec)

    def play(self, events, cut, mod, rec):
        """Writes the labelled SSE events, stopping at the cut point. Returns what happened:
        finished, or cut/<mode> with the label of the last event written."""
        st = self.server.state
        if cut == ("start", "status"):
            status, body = mod.status_error()
            self.send_json(status, body)
            return {"finished": False, "http_status": status, "events_written": [],
                    "mode": "status", "ended_ms": int(time.time() * 1000)}
        self.start_sse()
        written = []
        try:
            for label, data in events:
                if cut and cut[0] == "start" and label != "start":
                    return self.do_cut(cut[1], mod, rec, written)
                if cut and cut[0] == "before-finish" and label == "finish":
                    return self.do_cut(cut[1], mod, rec, written)
                if label == "finish" and "finish_sent_ms" not in rec:
                    rec["finish_sent_ms"] = int(time.time() * 1000)
                self.chunk(data)
                written.append(label)
                time.sleep(st.event_delay)
                if cut and cut[0] == "after-tool" and label == "tool_done":
                    return self.do_cut(cut[1], mod, rec, written)
                if label == "tool_done":
                    # the model "thinks" before its next output: a client that runs a call
                    # as soon as it is complete has run it by the time the finish event comes
                    time.sleep(st.tool_pause)
                if cut and cut[0] == "mid-word" and label == "mid_word":
                    return self.do_cut(cut[1], mod, rec, written)
            self.end_chunks()
            return {"finished": True, "events_written": written, "ended_ms": int(time.time() * 1000)}
        except (BrokenPipeError, ConnectionResetError) as e:
            return {"finished": False, "client_gone": str(e), "events_written": written,
                    "ended_ms": int(time.time() * 1000)}

    def do_cut(self, mode, mod, rec, written):
        # give the client time to act on what it has (a client that runs a completed call
        # at once has run it before the cut)
        time.sleep(self.server.state.tool_pause)
        if mode == "reset":
            self.reset()
        elif mode == "eof":
            self.end_chunks()
        else:
            for data in mod.error_events(rec["ids"]):
                self.chunk(data)
            self.end_chunks()
        return {"finished": False, "cut_after": written[-1] if written else None,
                "events_written": written, "mode": mode, "ended_ms": int(time.time() * 1000)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--provider", required=True, choices=sorted(PROVIDERS))
    ap.add_argument("--scenario", required=True)
    ap.add_argument("--marker-dir", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--port-file", help="the chosen port is written here")
    ap.add_argument("--port", type=int, default=0,
                    help="listen on this port (default: any free one, see --port-file)")
    ap.add_argument("--event-delay", type=float, default=0.02)
    ap.add_argument("--tool-pause", type=float, default=1.0,
                    help="pause after a complete tool call, and before a cut (seconds)")
    a = ap.parse_args()
    os.makedirs(a.marker_dir, exist_ok=True)
    srv = ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    srv.daemon_threads = True
    srv.state = State(a.provider, a.scenario, a.marker_dir, a.log, a.event_delay,
                      a.tool_pause)
    if a.port_file:
        tmp = a.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(srv.server_address[1]))
        os.replace(tmp, a.port_file)
    print(f"mock {a.provider} ({a.scenario}) on http://127.0.0.1:{srv.server_address[1]}",
          flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
