"""What each real client's OTLP telemetry export can and cannot show, asserted on the committed
captures (tests/fixtures/agents/<client>/otlp-<scenario>/otlp/, recorded by
`e2e/agents/run.sh --record-otlp`) against the same runs' truth.json. docs/clients/*.md say
the same in words; when a client version changes what it exports, these fail and the docs
must change with them.

  python3 -m unittest e2e/agents/test_otlp_facts.py
"""

import glob
import json
import os
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "agents")
SCENARIOS = ("otlp-clean", "otlp-after-tool-reset")
CODEX_SCENARIOS = SCENARIOS + ("otlp-start-error",)


def value(v):
    """An OTLP/JSON AnyValue as plain JSON."""
    if not v:
        return None
    kind, x = next(iter(v.items()))
    if kind == "arrayValue":
        return [value(e) for e in x.get("values", [])]
    if kind == "kvlistValue":
        return {e["key"]: value(e.get("value")) for e in x.get("values", [])}
    if kind == "intValue":
        return int(x)
    return x


def attrs(record):
    return {a["key"]: value(a.get("value")) for a in record.get("attributes", [])}


def load(client, scenario):
    """(log records as (event name, attributes), spans as (name, attributes, status),
    resource attributes seen, truth)."""
    folder = os.path.join(FIXTURES, client, scenario)
    logs, spans, resources = [], [], []
    for path in sorted(glob.glob(os.path.join(folder, "otlp", "*.json"))):
        with open(path, encoding="utf-8") as f:
            body = json.load(f)
        for rl in body.get("resourceLogs", []):
            resources.append(attrs(rl.get("resource", {})))
            for sl in rl.get("scopeLogs", []):
                for rec in sl.get("logRecords", []):
                    a = attrs(rec)
                    logs.append((a.get("event.name") or value(rec.get("body")), a))
        for rs in body.get("resourceSpans", []):
            resources.append(attrs(rs.get("resource", {})))
            for ss in rs.get("scopeSpans", []):
                for sp in ss.get("spans", []):
                    spans.append((sp.get("name"), attrs(sp), sp.get("status") or {}))
    with open(os.path.join(folder, "truth.json"), encoding="utf-8") as f:
        truth = json.load(f)
    return logs, spans, resources, truth


def executed_ids(truth):
    return sorted(c["id"] for r in truth["main_requests"] for c in r["calls"] if c["executed"])


def unfinished(truth):
    return sum(1 for r in truth["main_requests"] if not r["finished"])


class GeminiCli(unittest.TestCase):
    """gemini-cli 0.61.0: the same records as its telemetry outfile."""

    def test_every_model_request_and_its_failure(self):
        for s in SCENARIOS:
            logs, _, _, truth = load("gemini-cli", s)
            main = [a for n, a in logs if n == "gemini_cli.api_request" and a.get("role") == "main"]
            self.assertEqual(len(main), len(truth["main_requests"]), s)
            errors = [a for n, a in logs if n == "gemini_cli.api_error"]
            self.assertEqual(len(errors), unfinished(truth), s)
            retries = [a for n, a in logs if n == "gemini_cli.network_retry_attempt"]
            self.assertEqual(len(retries), sum(1 for r in truth["main_requests"]
                                               if r.get("retried")), s)

    def test_every_execution_with_its_call_id(self):
        for s in SCENARIOS:
            logs, spans, _, truth = load("gemini-cli", s)
            self.assertEqual(sum(1 for n, _ in logs if n == "gemini_cli.tool_call"),
                             len(truth["markers"]), s)
            # the tool_call span carries `<tool>__<call id>`; the log record has no id
            ids = sorted(a["gen_ai.tool.call_id"].split("__", 1)[1] for n, a, _ in spans
                         if n == "tool_call")
            self.assertEqual(ids, executed_ids(truth), s)

    def test_session_id_on_every_resource(self):
        for s in SCENARIOS:
            _, _, resources, _ = load("gemini-cli", s)
            self.assertTrue(resources and all(r.get("session.id") for r in resources), s)

    def test_cannot_show_what_the_user_saw(self):
        # The display (stream-json deltas) is not exported: no record carries the `[A1]` text
        # as shown, so spliced_text needs the stream-json file.
        for s in SCENARIOS:
            logs, _, _, _ = load("gemini-cli", s)
            names = {n for n, _ in logs}
            self.assertFalse({"message", "tool_use", "result"} & names, s)


class ClaudeCode(unittest.TestCase):
    """Claude Code 2.1.328 with CLAUDE_CODE_ENABLE_TELEMETRY=1 and the OTEL_* variables."""

    def test_every_model_request(self):
        for s in SCENARIOS:
            logs, spans, _, truth = load("claude-code", s)
            self.assertEqual(sum(1 for n, _ in logs if n == "api_request"),
                             len(truth["main_requests"]), s)
            self.assertEqual(sum(1 for n, _, _ in spans if n == "claude_code.llm_request"),
                             len(truth["main_requests"]), s)

    def test_every_execution_with_its_call_id(self):
        for s in SCENARIOS:
            logs, spans, _, truth = load("claude-code", s)
            self.assertEqual(sorted(a["tool_use_id"] for n, a in logs if n == "tool_result"),
                             executed_ids(truth), s)
            self.assertEqual(sorted(a["gen_ai.tool.call.id"] for n, a, _ in spans
                                    if n == "claude_code.tool.execution"), executed_ids(truth), s)

    def test_session_id_on_every_record(self):
        for s in SCENARIOS:
            logs, _, _, _ = load("claude-code", s)
            self.assertTrue(logs and all(a.get("session.id") for _, a in logs), s)

    def test_cannot_show_a_cut_message(self):
        # after-tool-reset: the first message was cut by a connection reset (truth), yet the
        # export reports it like a finished one: success, a stop reason, no api_error.
        logs, spans, _, truth = load("claude-code", "otlp-after-tool-reset")
        self.assertEqual(unfinished(truth), 1)
        self.assertFalse([n for n, _ in logs if n == "api_error"])
        llm = [(a, st) for n, a, st in spans if n == "claude_code.llm_request"]
        self.assertTrue(llm)
        for a, st in llm:
            self.assertIn(a.get("success"), (True, "true", "True"))
            self.assertTrue(a.get("stop_reason"))
            self.assertNotEqual(st.get("code"), 2)


    def test_cannot_show_a_silent_retry(self):
        # start-error: the first request failed before any content and was retried (truth),
        # and nothing in the export says so.
        logs, spans, _, truth = load("claude-code", "otlp-start-error")
        self.assertEqual(sum(1 for r in truth["main_requests"] if r["step"] == 1), 2)
        self.assertEqual(sum(1 for n, _ in logs if n == "api_request"),
                         len(truth["main_requests"]) - 1)
        self.assertFalse([n for n, _ in logs if n == "api_error"])
        self.assertEqual([a.get("attempt") for n, a, _ in spans
                          if n == "claude_code.llm_request"], [1, 1])
        self.assertEqual(executed_ids(truth), ["toolu_mockA2"])


class Codex(unittest.TestCase):
    """Codex 0.169.0 with `[otel]` exporters in config.toml."""

    def test_every_model_request(self):
        for s in CODEX_SCENARIOS:
            logs, _, _, truth = load("codex", s)
            self.assertEqual(sum(1 for n, _ in logs if n == "codex.api_request"),
                             len(truth["main_requests"]), s)

    def test_a_cut_stream_is_visible(self):
        for s in CODEX_SCENARIOS:
            logs, _, _, truth = load("codex", s)
            cut = [a for n, a in logs if n == "codex.sse_event"
                   and str(a.get("error.message", "")).startswith("stream disconnected")]
            self.assertEqual(len(cut), unfinished(truth), s)

    def test_every_execution_with_its_call_id(self):
        # exec --json has no call ids; the telemetry has them (tool_decision, tool_result)
        for s in CODEX_SCENARIOS:
            logs, _, _, truth = load("codex", s)
            self.assertEqual(sorted(a["call_id"] for n, a in logs if n == "codex.tool_result"),
                             executed_ids(truth), s)

    def test_a_reconnect_restarts_the_attempt_counter(self):
        # start-error: the first response failed before any content and Codex re-requested
        # the same step (truth: two step-1 requests), yet every codex.api_request says
        # `attempt: 0`: a retry shows as a broken stream followed by a new request with no
        # tool result in between, not in the counter.
        logs, _, _, truth = load("codex", "otlp-start-error")
        self.assertEqual(sum(1 for r in truth["main_requests"] if r["step"] == 1), 2)
        attempts = [a.get("attempt") for n, a in logs if n == "codex.api_request"]
        self.assertEqual(attempts, [0, 0, 0])

    def test_conversation_id_on_every_record(self):
        for s in CODEX_SCENARIOS:
            logs, _, _, _ = load("codex", s)
            # every `codex.*` event (an internal "flushing OTEL metrics" record has no
            # attributes at all)
            named = [a for n, a in logs if str(n).startswith("codex.")]
            self.assertTrue(named and all(a.get("conversation.id") for a in named), s)


class QwenCode(unittest.TestCase):
    """Qwen Code 0.24.4 (a gemini-cli fork): gemini-cli's records named `qwen-code.*`."""

    def test_every_model_request_and_its_failure(self):
        for s in SCENARIOS:
            logs, _, _, truth = load("qwen-code", s)
            self.assertEqual(sum(1 for n, _ in logs if n == "qwen-code.api_request"),
                             len(truth["main_requests"]), s)
            self.assertEqual(sum(1 for n, _ in logs if n == "qwen-code.api_error"),
                             unfinished(truth), s)

    def test_every_execution_with_its_call_id_and_response(self):
        for s in SCENARIOS:
            logs, _, _, truth = load("qwen-code", s)
            calls = [a for n, a in logs if n == "qwen-code.tool_call"]
            self.assertEqual(sorted(a["call_id"] for a in calls), executed_ids(truth), s)
            responses = {a.get("response_id") for n, a in logs if n == "qwen-code.api_response"}
            self.assertTrue(all(a["response_id"] in responses for a in calls), s)

    def test_a_response_carries_no_finish_and_no_calls(self):
        # `response_text` is the plain text; whether the stream finished is not logged (a
        # resend after a clean end of body is announced by chat.content_retry instead).
        for s in SCENARIOS:
            logs, _, _, _ = load("qwen-code", s)
            for n, a in logs:
                if n == "qwen-code.api_response":
                    self.assertNotIn("finish_reasons", a, s)
                    self.assertFalse(str(a.get("response_text", "")).startswith("[{"), s)

    def test_the_continuation_and_the_kept_splice_are_in_the_request_history(self):
        # after-tool-reset: the retry's history ends with the cut attempt's partial text and a
        # request to continue after it; the next call's history keeps both attempts' text
        # (truth: the mock's history tags). This is what makes spliced_text visible here.
        logs, _, _, truth = load("qwen-code", "otlp-after-tool-reset")
        reqs = [json.loads(a["request_text"]) for n, a in logs if n == "qwen-code.api_request"]
        self.assertEqual(len(reqs), 3)
        retry = reqs[1]
        self.assertEqual([c["role"] for c in retry[-2:]], ["model", "user"])
        self.assertIn("[A1]", json.dumps(retry[-2]))
        self.assertIn("previous_response_suffix", json.dumps(retry[-1]))
        kept = [c for c in reqs[2] if c["role"] == "model"][-1]
        self.assertIn("[A1]", json.dumps(kept))
        self.assertIn("[A2]", json.dumps(kept))
        self.assertEqual(truth["main_requests"][2]["history_tags"], ["[A1][A2]"])

    def test_spans_repeat_the_records(self):
        for s in SCENARIOS:
            _, spans, _, truth = load("qwen-code", s)
            llm = [a for n, a, _ in spans if n == "qwen-code.llm_request"]
            self.assertEqual(len(llm), len(truth["main_requests"]), s)
            self.assertTrue(all(a.get("qwen-code.prompt_id") for a in llm), s)


if __name__ == "__main__":
    unittest.main()
