"""Gemini API mock: `models/{m}:streamGenerateContent?alt=sse` (the scripted turn),
`:generateContent` and `:countTokens` side calls. Mid-stream errors are a `data:` line with
a top-level `error` object, as Google's endpoints send them."""

import json

from sse_util import sse

MODEL_VERSION = "gemini-2.5-flash"
SHELL_NAMES = ("run_shell_command",)


def _decls(body):
    out = []
    for t in (body or {}).get("tools") or []:
        for d in t.get("functionDeclarations") or t.get("function_declarations") or []:
            out.append(d.get("name"))
    return out


def shell_tool(body):
    for name in _decls(body):
        if name in SHELL_NAMES:
            return name
    return None


def route(method, path, body):
    if method == "POST" and ":streamGenerateContent" in path:
        if shell_tool(body):
            return {"kind": "main"}
        return {"kind": "side", "stream": True}
    if method == "POST" and ":generateContent" in path:
        return {"kind": "side", "stream": False}
    if method == "POST" and ":countTokens" in path:
        return {"kind": "static", "status": 200, "body": {"totalTokens": 120}}
    return {"kind": "static", "status": 404,
            "body": {"error": {"code": 404, "message": "not mocked", "status": "NOT_FOUND"}}}


def has_tool_result(body):
    contents = (body or {}).get("contents") or []
    if not contents:
        return False
    return any("functionResponse" in p for p in contents[-1].get("parts") or [])


def tool_result_ids(body):
    out = []
    for c in (body or {}).get("contents") or []:
        for p in c.get("parts") or []:
            fr = p.get("functionResponse")
            if fr:
                out.append(fr.get("id"))
    return out


def call_id(attempt):
    """The mock's name for an attempt's call (marker file names, the request log). Never sent:
    the Gemini API streams `functionCall` without an `id` (every recording in
    ../shared/fixtures), so clients make up their own (gemini-cli:
    `run_shell_command__run_shell_command_<ms>_<n>`)."""
    return f"gcall-a{attempt}"


# The call id above is not on the wire (mock_server logs the call's id as null).
STREAMS_CALL_IDS = False


def attempt_ids(seq):
    return {"response_id": f"mockresp{seq:04d}"}


def _usage(out_tokens):
    return {"promptTokenCount": 900, "candidatesTokenCount": out_tokens,
            "totalTokenCount": 900 + out_tokens}


def _chunk(parts, ids, out_tokens, finish=None):
    cand = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        cand["finishReason"] = finish
    return sse({"candidates": [cand], "usageMetadata": _usage(out_tokens),
                "modelVersion": MODEL_VERSION, "responseId": ids["response_id"]})


def events(script, tool, ids, body):
    ev, n = [], 0
    for t in script["before"]:
        n += 4
        ev.append(("text", _chunk([{"text": t}], ids, n)))
    if script["call"]:
        n += 20
        fc = {"name": tool,
              "args": {"command": script["call"]["command"], "description": "Create the marker file"}}
        ev.append(("tool_done", _chunk([{"functionCall": fc}], ids, n)))
    for i, t in enumerate(script["after"]):
        n += 4
        ev.append(("mid_word" if i == 0 else "text", _chunk([{"text": t}], ids, n)))
    ev.append(("finish", _chunk([{"text": ""}], ids, n + 1, finish="STOP")))
    return ev


def error_events(ids):
    # Not SSE-framed: @google/genai (the SDK gemini-cli uses) recognises a mid-stream error
    # only when a network read is a bare JSON object with `error` (it JSON.parses each read
    # before SSE splitting). A `data: {"error":...}` line is silently skipped by it.
    return [json.dumps({"error": {"code": 503, "status": "UNAVAILABLE",
                                  "message": "The model is overloaded. Please try again later."}}
                       ).encode()]


SIDE_TEXT = json.dumps({"reasoning": "The request is simple.", "next_speaker": "user",
                        "model_choice": "flash",
                        "complexity_reasoning": "A single explicit step.", "complexity_score": 5})


def write_side(h, route_, body):
    resp = {"candidates": [{"content": {"role": "model", "parts": [{"text": SIDE_TEXT}]},
                            "finishReason": "STOP", "index": 0}],
            "usageMetadata": _usage(10), "modelVersion": MODEL_VERSION, "responseId": "mockside"}
    if route_["stream"]:
        h.start_sse()
        h.chunk(sse(resp))
        h.end_chunks()
    else:
        h.send_json(200, resp)


def status_error():
    return 503, {"error": {"code": 503, "message": "The model is overloaded. Please try again later.",
                           "status": "UNAVAILABLE"}}
