"""Reads the tap's per-connection dumps (tap.py) back into HTTP responses and says, for each
model request the upstream served, what the client really received: the whole stream with its
finish event, or a cut (and how: reset, clean end of body, in-stream error).

Responses are matched to the upstream's requests by the ids the mock puts in each stream
(`msg_mock0001`, `resp_mock0001`, `chatcmpl-mock0001`, `mockresp0001`: the request's seq).
"""

import json
import os

# The finish event of each provider's stream, as the mocks write it.
FINISH = {
    "anthropic": b"event: message_stop",
    "openai": b"event: response.completed",
    "openai-chat": b'"finish_reason":"',
    "gemini": b'"finishReason":"',
}
# An in-stream error event in each provider's format (any of these; JSON with or without
# spaces after the colon, as the proxy may write its own).
ERROR = {
    "anthropic": (b'"type":"error"', b'"type": "error"'),
    "openai": (b'"type":"error"', b'"type": "error"', b"response.failed"),
    "openai-chat": (b'{"error":', b'{"error": '),
    "gemini": (b'{"error":', b'{"error": '),
}


def _dechunk(buf, i):
    """Decodes a chunked body from buf[i:]. Returns (body, end index, complete)."""
    body = b""
    while True:
        j = buf.find(b"\r\n", i)
        if j < 0:
            return body, len(buf), False
        try:
            size = int(buf[i:j].split(b";")[0], 16)
        except ValueError:
            return body, len(buf), False
        if size == 0:
            k = buf.find(b"\r\n\r\n", j)
            return body, (k + 4 if k >= 0 else len(buf)), True
        start = j + 2
        if start + size > len(buf):
            return body + buf[start:], len(buf), False
        body += buf[start:start + size]
        i = start + size + 2


def responses(buf):
    """The HTTP/1.1 responses in one connection's proxy->client bytes, in order: dicts with
    status, headers, body, complete (the body framing ended properly)."""
    out, i = [], 0
    while i < len(buf):
        h = buf.find(b"\r\n\r\n", i)
        if h < 0:
            break
        head = buf[i:h].decode("latin-1").split("\r\n")
        try:
            status = int(head[0].split()[1])
        except (IndexError, ValueError):
            break
        headers = {}
        for line in head[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        start = h + 4
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body, i, complete = _dechunk(buf, start)
        elif "content-length" in headers:
            n = int(headers["content-length"])
            body, complete = buf[start:start + n], start + n <= len(buf)
            i = start + n
        else:  # delimited by the end of the connection
            body, complete, i = buf[start:], None, len(buf)
        out.append({"status": status, "headers": headers, "body": body, "complete": complete})
    return out


def delivered(dump_dir, provider, requests):
    """For each main request (mock-log records with `ids`), what the client received.
    Returns {seq: {...}}; a request whose response the tap never saw is absent."""
    conns = []
    if os.path.isdir(dump_dir):
        for name in sorted(os.listdir(dump_dir)):
            if name.endswith(".s2c"):
                n = name[:-4]
                meta_path = os.path.join(dump_dir, n + ".json")
                meta = json.load(open(meta_path)) if os.path.exists(meta_path) else {"end": "open"}
                conns.append((open(os.path.join(dump_dir, name), "rb").read(), meta))
    out = {}
    for buf, meta in conns:
        resps = responses(buf)
        for k, r in enumerate(resps):
            last = k == len(resps) - 1
            for req in requests:
                ids = [v for v in (req.get("ids") or {}).values() if isinstance(v, str)]
                if not ids or not any(x.encode() in r["body"] for x in ids):
                    continue
                sse = "event-stream" in r["headers"].get("content-type", "")
                # a non-streamed JSON answer is whole when its body is
                finish = FINISH[provider] in r["body"] if sse else bool(r["complete"])
                error = not finish and any(m in r["body"] for m in ERROR[provider])
                # the call as streamed: its id, or (a provider that streams no call ids:
                # Gemini) its marker file's name, which only that attempt's command carries
                c = req.get("call") or {}
                call = c.get("id") or os.path.basename(c.get("marker") or "")
                if finish:
                    how = None
                elif error:
                    how = "error"
                elif r["complete"]:
                    how = "eof"
                elif last and meta.get("end") == "reset":
                    how = "reset"
                else:
                    how = "other:" + str(meta.get("end"))
                out[req["seq"]] = {"status": r["status"], "finish": finish, "cut": how,
                                   "body_bytes": len(r["body"]),
                                   "call_delivered": bool(call) and call.encode() in r["body"]}
    return out
