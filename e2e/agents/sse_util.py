"""Small helpers shared by the provider mocks: SSE framing and argument fragments."""

import json


def sse(obj, event=None):
    """One SSE event: optional `event:` line, one `data:` line, blank line."""
    head = f"event: {event}\n" if event else ""
    return (head + "data: " + json.dumps(obj, separators=(",", ":")) + "\n\n").encode()


def split_args(s):
    """A JSON argument string in two fragments, as providers stream them."""
    mid = max(1, len(s) // 2)
    return [s[:mid], s[mid:]]
