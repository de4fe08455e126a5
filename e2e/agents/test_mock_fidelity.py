#!/usr/bin/env python3
"""Every mock's stream carries only what the real provider sends: each event a mock can write
(the scripted turn with its tool call, the final answer, the side stream, the error event) is
compared field by field with the real recorded streams in `../shared/fixtures` (see its
MANIFEST.md). A field path (with its JSON type) that a mock emits for an event type and no
recording of that provider carries for that event type fails the test: a mock that sends what
the provider never sends lets a suite pass that the real provider would fail (the Gemini mock
once put an `id` in `functionCall`; the real API does not, and gemini-cli then makes up ids).

Run: python3 -m unittest e2e/agents/test_mock_fidelity.py (skipped when the shared fixtures
are absent: `$RETRYSCOPE_SHARED_FIXTURES`, default `../shared/fixtures` from the repository).
"""

import json
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import mock_anthropic  # noqa: E402
import mock_gemini  # noqa: E402
import mock_openai  # noqa: E402
import mock_openai_chat  # noqa: E402
import mock_server  # noqa: E402

FIXTURES = os.environ.get("RETRYSCOPE_SHARED_FIXTURES") or os.path.join(
    HERE, "..", "..", "..", "shared", "fixtures")

# The real recordings of each provider's stream (MANIFEST.md provenance "real"). Left out:
# the files the manifest calls SYNTHETIC or synthetic-looking (anthropic
# duplicate-message-start, anthropic-fallback, anthropic-sdk-python__basic_response;
# gemini-cli__api-resilience, gemini-cli__parallel-tools).
RECORDINGS = {
    "gemini": ["gemini/google-text.chunks.txt", "gemini/google-tool-call-gemini3.chunks.txt",
               "gemini/google-stream-tool-call-arguments.chunks.txt",
               "gemini/gemini-cli__json-output.error.responses"],
    "anthropic": ["anthropic/anthropic-sdk-python__tool_use_response.sse",
                  "anthropic/anthropic-sdk-python__incomplete_partial_json_response.sse",
                  "anthropic/anthropic-text.chunks.txt",
                  "anthropic/anthropic-tool-no-args.chunks.txt",
                  "anthropic/anthropic-code-execution-20260120-prompt-cache.1.chunks.txt",
                  "anthropic/anthropic-message-delta-input-tokens.chunks.txt"],
    "openai": ["openai-responses/openai-error.1.chunks.txt",
               "openai-responses/azure-tool-call.1.chunks.txt",
               "openai-responses/openai-shell-tool.1.chunks.txt"],
    "openai-chat": ["openai-chat/openai-python__parallel-tool-calls.sse",
                    "openai-chat/openai-python__strict-tool-call.sse",
                    "openai-chat/openai-python__max-tokens-length.sse",
                    "openai-chat/openai-python__text.sse",
                    "openai-chat/openai-python__refusal.sse",
                    "openai-chat/openai-text.chunks.txt",
                    "openai-chat/azure-model-router.1.chunks.txt",
                    "openai-chat/deepseek-tool-call.chunks.txt",
                    "openai-chat/groq-tool-call.chunks.txt"],
}

# Event types a mock writes that no recording shows, with where their shape comes from. Only
# their presence is allowed; nothing is compared.
UNRECORDED = {
    ("gemini", "error"): "a mid-stream error object; shape from @google/genai's error handling "
                         "(FORMATS.md), no recording in the fixtures",
    ("anthropic", "error"): "the documented `event: error` of the Messages API; not recorded",
    ("openai-chat", "error"): "an error object after the stream started (openai-python raises "
                              "APIError on it); not recorded",
}

# Objects whose keys are the tool's own arguments, not the provider's fields: compared as a
# whole (their JSON type), never key by key.
OPAQUE = {".candidates[].content.parts[].functionCall.args", ".content_block.input",
          ".message.content[].input"}

MOCKS = {"gemini": mock_gemini, "anthropic": mock_anthropic, "openai": mock_openai,
         "openai-chat": mock_openai_chat}


def event_type(provider, obj):
    """The event type a payload is compared under."""
    if provider in ("anthropic", "openai"):
        return obj.get("type")
    return "error" if "error" in obj else "chunk"


def payloads_of_sse(text):
    out = []
    for line in text.splitlines():
        if line.startswith("data:"):
            d = line[5:].strip()
            if d and d != "[DONE]":
                out.append(json.loads(d))
    return out


def recorded_payloads(rel):
    with open(os.path.join(FIXTURES, rel), encoding="utf-8") as f:
        text = f.read()
    if rel.endswith(".sse"):
        return payloads_of_sse(text)
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        obj = json.loads(line)
        if rel.endswith(".responses"):
            if obj.get("method") == "generateContentStream":
                out += obj["response"]
        else:
            out.append(obj)
    return out


def json_type(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    return {str: "string", list: "array", dict: "object"}[type(v)]


def field_paths(v, path="", acc=None):
    """Every field path in `v` (array elements as `[]`) with the JSON types seen there."""
    if acc is None:
        acc = {}
    acc.setdefault(path or ".", set()).add(json_type(v))
    if path in OPAQUE:
        return acc
    if isinstance(v, dict):
        for k, x in v.items():
            field_paths(x, f"{path}.{k}", acc)
    elif isinstance(v, list):
        for x in v:
            field_paths(x, f"{path}[]", acc)
    return acc


def by_type(provider, payloads):
    out = {}
    for p in payloads:
        acc = out.setdefault(event_type(provider, p), {})
        for k, ts in field_paths(p).items():
            acc.setdefault(k, set()).update(ts)
    return out


class _Capture:
    """Stands in for the mock's request handler: keeps the streamed bytes."""

    def __init__(self):
        self.data = b""

    def start_sse(self):
        pass

    def chunk(self, data):
        self.data += data

    def end_chunks(self):
        pass

    def send_json(self, status, obj):
        pass


def request_body(provider):
    """A main request offering each mock's shell tool (the Chat one asking for usage)."""
    if provider == "gemini":
        return {"tools": [{"functionDeclarations": [{"name": "run_shell_command"}]}]}
    if provider == "anthropic":
        return {"tools": [{"name": "Bash"}], "stream": True}
    if provider == "openai":
        return {"tools": [{"type": "function", "name": "shell_command"}], "stream": True}
    return {"tools": [{"type": "function", "function": {"name": "shell_command"}}],
            "stream": True, "stream_options": {"include_usage": True}}


def mock_payloads(provider):
    """Every payload the mock can stream: both attempts' scripted turns, the final answer, a
    side stream, the error events."""
    mod = MOCKS[provider]
    body = request_body(provider)
    tool = mod.shell_tool(body)
    raw = []
    for attempt in (1, 2):
        script = mock_server.attempt_script(attempt, mod.call_id(attempt), "touch /tmp/m")
        raw += [d for _, d in mod.events(script, tool, mod.attempt_ids(attempt), body)]
    raw += [d for _, d in mod.events(mock_server.final_script(), tool, mod.attempt_ids(3), body)]
    raw += mod.error_events(mod.attempt_ids(4))
    side = _Capture()
    mod.write_side(side, {"kind": "side", "stream": True}, {"stream": True})
    raw.append(side.data)
    out = []
    for data in raw:
        text = data.decode("utf-8")
        if text.lstrip().startswith(("data:", "event:")):
            out += payloads_of_sse(text)
        else:
            out.append(json.loads(text))  # Gemini's bare error object
    return out


class MockFidelity(unittest.TestCase):
    def setUp(self):
        if not os.path.isdir(FIXTURES):
            self.skipTest(f"shared fixtures not found at {FIXTURES}")

    def check(self, provider):
        recorded = {}
        for rel in RECORDINGS[provider]:
            for t, paths in by_type(provider, recorded_payloads(rel)).items():
                acc = recorded.setdefault(t, {})
                for k, ts in paths.items():
                    acc.setdefault(k, set()).update(ts)
        extra = []
        for t, paths in sorted(by_type(provider, mock_payloads(provider)).items(), key=str):
            if t not in recorded:
                if (provider, t) not in UNRECORDED:
                    extra.append(f"event type {t!r}: no recording carries it")
                continue
            for k, ts in sorted(paths.items()):
                missing = ts - recorded[t].get(k, set())
                if missing:
                    seen = sorted(recorded[t].get(k, set())) or "never"
                    extra.append(f"{t}: {k} as {sorted(missing)} (recordings: {seen})")
        self.assertEqual(extra, [], f"{provider} mock emits what the recordings never carry")

    def test_gemini(self):
        self.check("gemini")

    def test_anthropic(self):
        self.check("anthropic")

    def test_openai_responses(self):
        self.check("openai")

    def test_openai_chat(self):
        self.check("openai-chat")

    def test_a_made_up_field_fails(self):
        # the check can fail: an `id` in a Gemini functionCall is a field no recording has
        rec = by_type("gemini", recorded_payloads(RECORDINGS["gemini"][1]))
        fake = {"candidates": [{"content": {"role": "model", "parts": [
            {"functionCall": {"id": "x", "name": "n", "args": {}}}]}}]}
        paths = by_type("gemini", [fake])["chunk"]
        self.assertNotIn(".candidates[].content.parts[].functionCall.id", rec["chunk"])
        self.assertIn(".candidates[].content.parts[].functionCall.id", paths)


if __name__ == "__main__":
    unittest.main()
