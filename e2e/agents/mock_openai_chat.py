"""OpenAI Chat Completions mock: `POST /v1/chat/completions` with `stream: true` (the scripted
turn), `GET /v1/models`. Chunks are modelled on the recorded
`../shared/fixtures/openai-chat/openai-python__parallel-tool-calls.sse` (role chunk, content
deltas, a `tool_calls` delta with id and name then argument fragments, a chunk with
`finish_reason`, a usage chunk with empty `choices`, `data: [DONE]`). The scripted turn keeps
text after the tool call (unusual for Chat Completions, legal in its format) so that all three
cut points exist. Mid-stream errors are a `data:` line with a top-level `error` object, which
is how the API reports an error after the stream started (openai-python raises `APIError` on
it)."""

import json
import time

from sse_util import split_args

MODEL = "gpt-4o-2024-08-06"
SHELL_NAMES = ("shell_command", "run_shell_command")  # sdk_loop.py, Qwen Code


def _data(obj):
    return ("data: " + json.dumps(obj, separators=(",", ":")) + "\n\n").encode()


def shell_tool(body):
    for t in (body or {}).get("tools") or []:
        name = ((t or {}).get("function") or {}).get("name")
        if name in SHELL_NAMES:
            return name
    return None


def route(method, path, body):
    p = path.split("?")[0]
    if method == "GET" and p.endswith("/models"):
        return {"kind": "static", "status": 200,
                "body": {"object": "list", "data": [{"id": MODEL, "object": "model"}]}}
    if method == "POST" and p.endswith("/chat/completions"):
        if shell_tool(body):
            return {"kind": "main"}
        return {"kind": "side", "stream": bool((body or {}).get("stream"))}
    return {"kind": "static", "status": 404,
            "body": {"error": {"message": "not mocked", "type": "invalid_request_error"}}}


def has_tool_result(body):
    msgs = (body or {}).get("messages") or []
    return bool(msgs) and msgs[-1].get("role") == "tool"


def tool_result_ids(body):
    return [m.get("tool_call_id") for m in (body or {}).get("messages") or []
            if m.get("role") == "tool"]


def call_id(attempt):
    return f"call_chatA{attempt}"


def attempt_ids(seq):
    return {"completion_id": f"chatcmpl-mock{seq:04d}"}


def _chunk(ids, delta, finish=None):
    return _data({"id": ids["completion_id"], "object": "chat.completion.chunk",
                  "created": int(time.time()), "model": MODEL,
                  "system_fingerprint": "fp_mock",
                  "choices": [{"index": 0, "delta": delta, "logprobs": None,
                               "finish_reason": finish}]})


def events(script, tool, ids, body):
    ev = [("start", _chunk(ids, {"role": "assistant", "content": ""}))]
    for t in script["before"]:
        ev.append(("text", _chunk(ids, {"content": t})))
    finish = "stop"
    if script["call"]:
        finish = "tool_calls"
        c = script["call"]
        ev.append(("meta", _chunk(ids, {"tool_calls": [{"index": 0, "id": c["id"], "type": "function",
                                                        "function": {"name": tool, "arguments": ""}}]})))
        frags = split_args(json.dumps({"command": c["command"]}))
        for i, frag in enumerate(frags):
            label = "tool_done" if i == len(frags) - 1 else "meta"
            ev.append((label, _chunk(ids, {"tool_calls": [{"index": 0,
                                                          "function": {"arguments": frag}}]})))
    for i, t in enumerate(script["after"]):
        ev.append(("mid_word" if i == 0 else "text", _chunk(ids, {"content": t})))
    ev.append(("finish", _chunk(ids, {}, finish)))
    if ((body or {}).get("stream_options") or {}).get("include_usage"):
        ev.append(("finish", _data({"id": ids["completion_id"], "object": "chat.completion.chunk",
                                    "created": int(time.time()), "model": MODEL, "choices": [],
                                    "usage": {"prompt_tokens": 900, "completion_tokens": 42,
                                              "total_tokens": 942}})))
    ev.append(("finish", b"data: [DONE]\n\n"))
    return ev


def error_events(ids):
    return [_data({"error": {"message": "The server had an error while processing your request.",
                             "type": "server_error", "param": None, "code": "server_error"}})]


def write_side(h, route_, body):
    ids = attempt_ids(0)
    script = {"before": ["Marker file task"], "call": None, "after": []}
    if route_["stream"]:
        h.start_sse()
        for _, data in events(script, None, ids, body):
            h.chunk(data)
        h.end_chunks()
    else:
        h.send_json(200, {"id": ids["completion_id"], "object": "chat.completion",
                          "created": int(time.time()), "model": MODEL,
                          "choices": [{"index": 0, "finish_reason": "stop", "message": {
                              "role": "assistant", "content": "Marker file task"}}]})


def status_error():
    return 500, {"error": {"message": "The server had an error while processing your request.",
                           "type": "server_error", "param": None, "code": "server_error"}}


def full_message(script, tool, ids):
    """The scripted turn as a non-streamed `chat.completion` (`stream: false`, e.g. a client's
    non-streamed fallback after a stream broke), shaped as the `choices[].message` the
    streamed chunks above assemble into."""
    msg = {"role": "assistant", "content": "".join(script["before"]) + "".join(script["after"]),
           "refusal": None, "annotations": []}
    finish = "stop"
    if script["call"]:
        finish = "tool_calls"
        c = script["call"]
        msg["tool_calls"] = [{"id": c["id"], "type": "function", "function": {
            "name": tool, "arguments": json.dumps({"command": c["command"]})}}]
    return {"id": ids["completion_id"], "object": "chat.completion", "created": int(time.time()),
            "model": MODEL, "system_fingerprint": "fp_mock",
            "choices": [{"index": 0, "message": msg, "logprobs": None, "finish_reason": finish}],
            "usage": {"prompt_tokens": 900, "completion_tokens": 42, "total_tokens": 942}}
