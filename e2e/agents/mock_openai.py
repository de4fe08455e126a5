"""OpenAI Responses API mock: `POST /v1/responses` with `stream: true` (the scripted turn),
`GET /v1/models`. Mid-stream errors are an `error` event followed by `response.failed`, as in
the real capture `openai-error.1.chunks.txt`."""

import json
import time

from sse_util import split_args, sse

MODEL = "gpt-5-codex"


def _tools(body):
    return [t for t in (body or {}).get("tools") or [] if isinstance(t, dict)]


def shell_tool(body):
    names = [t.get("name") for t in _tools(body)]
    for n in ("shell_command", "shell", "exec_command"):
        if n in names:
            return n
    return None


def shell_args(tool, command):
    if tool == "shell":
        return {"command": ["bash", "-lc", command]}
    if tool == "exec_command":
        return {"cmd": command}
    return {"command": command}


def route(method, path, body):
    p = path.split("?")[0]
    resume = resume_route(method, path)
    if resume:
        return resume
    if method == "GET" and p.endswith("/models"):
        return {"kind": "static", "status": 200,
                "body": {"object": "list", "data": [{"id": MODEL, "object": "model"}], "models": []}}
    if method == "POST" and p.endswith("/responses"):
        if shell_tool(body):
            return {"kind": "main"}
        return {"kind": "side", "stream": bool((body or {}).get("stream"))}
    return {"kind": "static", "status": 404,
            "body": {"error": {"message": "not mocked", "type": "invalid_request_error"}}}


def has_tool_result(body):
    inp = (body or {}).get("input")
    if not isinstance(inp, list) or not inp:
        return False
    # the tool output is the last item(s) of the input after a function call
    last_user = max((i for i, it in enumerate(inp) if it.get("role") == "user"), default=-1)
    return any(it.get("type") in ("function_call_output", "custom_tool_call_output")
               for it in inp[last_user + 1:])


def tool_result_ids(body):
    inp = (body or {}).get("input")
    if not isinstance(inp, list):
        return []
    return [it.get("call_id") for it in inp
            if it.get("type") in ("function_call_output", "custom_tool_call_output")]


def call_id(attempt):
    return f"call_mockA{attempt}"


def attempt_ids(seq):
    return {"response_id": f"resp_mock{seq:04d}", "msg1": f"msg_mock{seq:04d}a",
            "msg2": f"msg_mock{seq:04d}b", "fc": f"fc_mock{seq:04d}"}


class _Seq:
    def __init__(self):
        self.n = -1

    def ev(self, typ, **kw):
        self.n += 1
        return sse(dict({"type": typ, "sequence_number": self.n}, **kw), typ)


def _resp(ids, status, output=None, usage=None, error=None):
    r = {"id": ids["response_id"], "object": "response", "created_at": int(time.time()),
         "status": status, "model": MODEL, "output": output or [], "error": error,
         "incomplete_details": None, "usage": usage}
    return r


def _message(s, ids, key, idx, parts, first_label):
    mid = ids[key]
    ev = [("meta", s.ev("response.output_item.added", output_index=idx, item={
        "id": mid, "type": "message", "status": "in_progress", "role": "assistant", "content": []})),
        ("meta", s.ev("response.content_part.added", item_id=mid, output_index=idx, content_index=0,
                      part={"type": "output_text", "text": "", "annotations": []}))]
    for i, t in enumerate(parts):
        ev.append((first_label if i == 0 else "text", s.ev(
            "response.output_text.delta", item_id=mid, output_index=idx, content_index=0,
            delta=t, logprobs=[])))
    text = "".join(parts)
    part = {"type": "output_text", "text": text, "annotations": []}
    item = {"id": mid, "type": "message", "status": "completed", "role": "assistant", "content": [part]}
    ev += [("text", s.ev("response.output_text.done", item_id=mid, output_index=idx,
                         content_index=0, text=text, logprobs=[])),
           ("text", s.ev("response.content_part.done", item_id=mid, output_index=idx,
                         content_index=0, part=part)),
           ("text", s.ev("response.output_item.done", output_index=idx, item=item))]
    return ev, item


def events(script, tool, ids, body):
    s = _Seq()
    ev = [("start", s.ev("response.created", response=_resp(ids, "in_progress"))),
          ("start", s.ev("response.in_progress", response=_resp(ids, "in_progress")))]
    output = []
    m, item = _message(s, ids, "msg1", 0, script["before"], "text")
    ev += m
    output.append(item)
    if script["call"]:
        c = script["call"]
        args = json.dumps(shell_args(tool, c["command"]))
        base = {"id": ids["fc"], "type": "function_call", "call_id": c["id"], "name": tool}
        ev.append(("meta", s.ev("response.output_item.added", output_index=1,
                                item=dict(base, arguments="", status="in_progress"))))
        for frag in split_args(args):
            ev.append(("meta", s.ev("response.function_call_arguments.delta", item_id=ids["fc"],
                                    output_index=1, delta=frag)))
        ev.append(("meta", s.ev("response.function_call_arguments.done", item_id=ids["fc"],
                                output_index=1, arguments=args)))
        done = dict(base, arguments=args, status="completed")
        ev.append(("tool_done", s.ev("response.output_item.done", output_index=1, item=done)))
        output.append(done)
    if script["after"]:
        m, item = _message(s, ids, "msg2", len(output), script["after"], "mid_word")
        ev += m
        output.append(item)
    usage = {"input_tokens": 900, "input_tokens_details": {"cached_tokens": 0},
             "output_tokens": 42, "output_tokens_details": {"reasoning_tokens": 0},
             "total_tokens": 942}
    ev.append(("finish", s.ev("response.completed",
                              response=_resp(ids, "completed", output, usage))))
    return ev


def error_events(ids):
    err = {"type": "server_error", "code": "server_error",
           "message": "The server had an error while processing your request.", "param": None}
    return [sse({"type": "error", "sequence_number": 90, "error": err}, "error"),
            sse({"type": "response.failed", "sequence_number": 91, "response": _resp(
                ids, "failed", error={"code": "server_error", "message": err["message"]})},
                "response.failed")]


def write_side(h, route_, body):
    ids = attempt_ids(0)
    script = {"before": ["Marker file task"], "call": None, "after": []}
    if route_["stream"]:
        h.start_sse()
        for _, data in events(script, None, ids, body):
            h.chunk(data)
        h.end_chunks()
    else:
        h.send_json(200, _resp(ids, "completed", [], None))


def status_error():
    return 500, {"error": {"message": "The server had an error while processing your request.",
                           "type": "server_error", "param": None, "code": "server_error"}}


def full_message(script, tool, ids):
    """The scripted turn as a non-streamed response object (`stream: false`): the
    `response.completed` event's `response`."""
    done = [data for label, data in events(script, tool, ids, {}) if label == "finish"][-1]
    return _payload(done)["response"]


# ---- background responses (`background: true`) and resuming their streams ------------------
# A background response keeps generating when the client's connection drops; the client
# resumes its stream with `GET /v1/responses/{id}?stream=true&starting_after=N` (the SDK's
# `responses.retrieve(id, stream=True, starting_after=N)`) and gets the same response's events
# after sequence number N. Its first events say so: `response.created` with `"status":
# "queued"`, then `response.queued`, `response.in_progress`; every response object carries
# `"background": true`.

def _payload(data):
    line = [x for x in data.decode().split("\n") if x.startswith("data: ")][0]
    return json.loads(line[len("data: "):])


def background_events(script, tool, ids, body):
    """`events()` as a background response streams them, renumbered."""
    out = []
    for label, data in events(script, tool, ids, body):
        obj = _payload(data)
        if isinstance(obj.get("response"), dict):
            obj["response"]["background"] = True
        if obj["type"] == "response.created":
            obj["response"]["status"] = "queued"
            out.append((label, obj))
            out.append((label, {"type": "response.queued", "response": dict(obj["response"])}))
            continue
        out.append((label, obj))
    for n, (_, obj) in enumerate(out):
        obj["sequence_number"] = n
    return [(label, sse(obj, obj["type"])) for label, obj in out]


def resume_route(method, path):
    """`GET …/responses/{id}?stream=true&starting_after=N`: {"kind": "resume", ...} or None."""
    from urllib.parse import parse_qs, urlsplit

    u = urlsplit(path)
    parts = u.path.rstrip("/").split("/")
    if method != "GET" or len(parts) < 2 or parts[-2] != "responses":
        return None
    q = parse_qs(u.query)
    after = q.get("starting_after", ["-1"])[0]
    return {"kind": "resume", "id": parts[-1], "stream": q.get("stream", [""])[0] == "true",
            "starting_after": int(after) if after.lstrip("-").isdigit() else -1}


def events_after(stored, starting_after):
    """The stored events of a background response after sequence number `starting_after`."""
    return [(label, data) for label, data in stored
            if _payload(data).get("sequence_number", -1) > starting_after]
