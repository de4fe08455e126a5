"""Anthropic Messages API mock: `POST /v1/messages` with `stream: true` (the scripted turn),
plus `/v1/messages/count_tokens` and plain side calls. Mid-stream errors are
`event: error` with `{"type":"error","error":{"type":"overloaded_error",...}}`."""

import json

from sse_util import split_args, sse

MODEL = "claude-sonnet-4-5-20250929"
SHELL_NAMES = ("Bash",)


def shell_tool(body):
    for t in (body or {}).get("tools") or []:
        if t.get("name") in SHELL_NAMES:
            return t.get("name")
    return None


def route(method, path, body):
    p = path.split("?")[0]
    if method == "POST" and p.endswith("/messages/count_tokens"):
        return {"kind": "static", "status": 200, "body": {"input_tokens": 120}}
    if method == "POST" and p.endswith("/messages"):
        if shell_tool(body):
            return {"kind": "main"}
        return {"kind": "side", "stream": bool((body or {}).get("stream"))}
    return {"kind": "static", "status": 404,
            "body": {"type": "error", "error": {"type": "not_found_error", "message": "not mocked"}}}


def _last_user_blocks(body):
    msgs = (body or {}).get("messages") or []
    if not msgs or msgs[-1].get("role") != "user":
        return []
    c = msgs[-1].get("content")
    return c if isinstance(c, list) else []


def has_tool_result(body):
    return any(b.get("type") == "tool_result" for b in _last_user_blocks(body))


def tool_result_ids(body):
    out = []
    for m in (body or {}).get("messages") or []:
        c = m.get("content")
        if isinstance(c, list):
            out += [b.get("tool_use_id") for b in c if b.get("type") == "tool_result"]
    return out


def call_id(attempt):
    return f"toolu_mockA{attempt}"


def attempt_ids(seq):
    return {"message_id": f"msg_mock{seq:04d}"}


def _start(ids):
    return sse({"type": "message_start", "message": {
        "id": ids["message_id"], "type": "message", "role": "assistant", "model": MODEL,
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 900, "cache_creation_input_tokens": 0,
                  "cache_read_input_tokens": 0, "output_tokens": 1}}}, "message_start")


def _text_block(index, parts, first_label):
    ev = [("meta", sse({"type": "content_block_start", "index": index,
                        "content_block": {"type": "text", "text": ""}}, "content_block_start"))]
    for i, t in enumerate(parts):
        ev.append((first_label if i == 0 else "text",
                   sse({"type": "content_block_delta", "index": index,
                        "delta": {"type": "text_delta", "text": t}}, "content_block_delta")))
    ev.append(("text", sse({"type": "content_block_stop", "index": index}, "content_block_stop")))
    return ev


def events(script, tool, ids, body):
    ev = [("start", _start(ids))]
    idx = 0
    ev += _text_block(idx, script["before"], "text")
    stop = "end_turn"
    if script["call"]:
        idx += 1
        stop = "tool_use"
        c = script["call"]
        ev.append(("meta", sse({"type": "content_block_start", "index": idx, "content_block": {
            "type": "tool_use", "id": c["id"], "name": tool, "input": {}}}, "content_block_start")))
        args = json.dumps({"command": c["command"], "description": "Create the marker file"})
        for frag in [""] + split_args(args):
            ev.append(("meta", sse({"type": "content_block_delta", "index": idx, "delta": {
                "type": "input_json_delta", "partial_json": frag}}, "content_block_delta")))
        ev.append(("tool_done", sse({"type": "content_block_stop", "index": idx},
                                    "content_block_stop")))
    if script["after"]:
        idx += 1
        ev += _text_block(idx, script["after"], "mid_word")
    ev.append(("finish", sse({"type": "message_delta", "delta": {
        "stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": 42}}, "message_delta")))
    ev.append(("finish", sse({"type": "message_stop"}, "message_stop")))
    return ev


def full_message(script, tool, ids):
    """The scripted message as a non-streamed Messages response (`stream: false`)."""
    content = [{"type": "text", "text": "".join(script["before"])}]
    stop = "end_turn"
    if script["call"]:
        stop = "tool_use"
        c = script["call"]
        content.append({"type": "tool_use", "id": c["id"], "name": tool,
                        "input": {"command": c["command"], "description": "Create the marker file"}})
    if script["after"]:
        content.append({"type": "text", "text": "".join(script["after"])})
    return {"id": ids["message_id"], "type": "message", "role": "assistant", "model": MODEL,
            "content": content, "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": 900, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0, "output_tokens": 42}}


def error_events(ids):
    return [sse({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
                "error")]


def write_side(h, route_, body):
    if route_["stream"]:
        h.start_sse()
        ids = {"message_id": "msg_mockside"}
        for _, data in [("meta", _start(ids))] + _text_block(0, ["Marker file task"], "text"):
            h.chunk(data)
        h.chunk(sse({"type": "message_delta", "delta": {"stop_reason": "end_turn",
                     "stop_sequence": None}, "usage": {"output_tokens": 4}}, "message_delta"))
        h.chunk(sse({"type": "message_stop"}, "message_stop"))
        h.end_chunks()
    else:
        h.send_json(200, {"id": "msg_mockside", "type": "message", "role": "assistant",
                          "model": MODEL, "content": [{"type": "text", "text": "Marker file task"}],
                          "stop_reason": "end_turn", "stop_sequence": None,
                          "usage": {"input_tokens": 50, "output_tokens": 4}})


def status_error():
    return 529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
