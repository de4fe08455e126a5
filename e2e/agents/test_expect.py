#!/usr/bin/env python3
"""Unit tests of the truth-derived expectations in expect.py (rules only; the real runs are
checked by run.sh). Run: python3 -m unittest e2e/agents/test_expect.py"""

import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import expect  # noqa: E402


def req(step, attempt=None, finished=True, retried=False, executed=None, marker_ms=None,
        finish_ms=1000, ended_ms=1000, content=True):
    calls = []
    if executed is not None:
        calls.append({"id": f"c{attempt}", "name": "sh", "executed": executed,
                      "marker_mtime_ms": marker_ms})
    return {"step": step, "attempt": attempt, "finished": finished, "retried": retried,
            "calls": calls, "finish_sent_ms": finish_ms if finished else None,
            "ended_ms": ended_ms, "content_delivered": content}


class InputView(unittest.TestCase):
    """What each of Qwen Code's outputs can show of a spliced text (expect.input_view)."""

    def truth(self, retry_history):
        reqs = [req(1, 1, finished=False, retried=True), req(1, 2), req(2)]
        for i, r in enumerate(reqs):
            r["request_seq"] = i + 1
        reqs[1]["history_tags"] = retry_history
        reqs[2]["history_tags"] = ["".join(retry_history) + "[A2]"]
        return {"main_requests": reqs, "visible_text": "[A1] I will now cr[A2] I will"}

    def test_continuation_shows_in_the_telemetry_not_in_the_stream_json(self):
        t = self.truth(["[A1]"])  # the retry's history carries the partial text
        self.assertEqual(expect.input_view(t, "telemetry.log"), {"spliced_text"})
        self.assertEqual(expect.input_view(t, "stream.jsonl"), set())

    def test_resend_shows_in_the_stream_json_not_in_the_telemetry(self):
        t = self.truth([])  # identical resend: only the screen showed both texts
        self.assertEqual(expect.input_view(t, "telemetry.log"), set())
        self.assertEqual(expect.input_view(t, "stream.jsonl"), {"spliced_text"})


class ImpliedFindings(unittest.TestCase):
    def test_clean_run_that_executes_after_finish_implies_nothing(self):
        t = {"main_requests": [req(1, 1, executed=True, marker_ms=1200), req(2)],
             "visible_text": "[A1] x[F] y"}
        self.assertEqual(expect.implied_findings(t), set())

    def test_execution_before_the_finish_event_is_early(self):
        t = {"main_requests": [req(1, 1, executed=True, marker_ms=900), req(2)]}
        self.assertEqual(expect.implied_findings(t), {"early_execution"})

    def test_abandoned_call_that_ran_after_the_retry(self):
        t = {"main_requests": [req(1, 1, finished=False, retried=True, executed=True,
                                   marker_ms=5000, ended_ms=1000),
                               req(1, 2, executed=True, marker_ms=5000, finish_ms=4000), req(2)],
             "visible_text": "[A1] I will now crea[A2] I will"}
        self.assertEqual(expect.implied_findings(t), {"abandoned_tool_executed",
                                                      "unfinished_tool_executed", "spliced_text"})

    def test_unfinished_call_run_before_the_cut_without_retry(self):
        t = {"main_requests": [req(1, 1, finished=False, executed=True, marker_ms=900,
                                   ended_ms=1000), req(2)],
             "visible_text": "[A1] text"}
        # no retry: the visible [A1] text is not spliced, the call is not abandoned
        self.assertEqual(expect.implied_findings(t), {"unfinished_tool_executed",
                                                      "early_execution"})

    def test_retry_cap(self):
        t = {"main_requests": [req(1, i, finished=False, retried=True) for i in range(1, 6)]}
        self.assertEqual(expect.implied_findings(t), {"retry_cap_exceeded"})


class ExpectedAttempts(unittest.TestCase):
    def test_silent_contentless_retry_is_not_expected(self):
        t = {"main_requests": [req(1, 1, finished=False, retried=True, content=False),
                               req(1, 2), req(2)]}
        self.assertEqual(len(expect.expected_attempts(t, signals=0)), 2)
        self.assertEqual(len(expect.expected_attempts(t, signals=1)), 3)

    def test_contentless_attempt_named_in_the_output_is_expected(self):
        first = req(1, 1, finished=False, retried=True, content=False)
        first["ids"] = {"message_id": "msg_1"}
        t = {"main_requests": [first, req(1, 2), req(2)]}
        out = '{"type":"stream_event","event":{"type":"message_start","message":{"id":"msg_1"}}}'
        self.assertEqual(len(expect.expected_attempts(t, 0, out)), 3)
        self.assertEqual(len(expect.expected_attempts(t, 0, "")), 2)

    def test_cut_attempt_with_content_is_always_expected(self):
        t = {"main_requests": [req(1, 1, finished=False, content=True), req(2)]}
        self.assertEqual(len(expect.expected_attempts(t, signals=0)), 2)



class TelemetryTail(unittest.TestCase):
    """A telemetry outfile whose client exited before flushing it (expect.telemetry_tail_lost)."""

    def outfile(self, names):
        import tempfile
        f = tempfile.NamedTemporaryFile("w", suffix=".log", delete=False)
        self.addCleanup(os.unlink, f.name)
        for n in names:  # pretty-printed records, as gemini-cli and Qwen Code write them
            n, role = n.split(" ") if " " in n else (n, None)
            attrs = {"event.name": n, **({"role": role} if role else {})}
            f.write(json.dumps({"attributes": attrs}, indent=2) + "\n")
        f.close()
        return f.name

    def test_every_request_logged_with_an_end_lost_nothing(self):
        path = self.outfile(["gemini_cli.api_request", "gemini_cli.api_error",
                             "gemini_cli.api_request", "gemini_cli.api_response",
                             "gen_ai.client.inference.operation.details"])
        self.assertEqual(expect.telemetry_tail_lost(path), 0)

    def test_the_last_response_never_written(self):
        path = self.outfile(["qwen-code.api_request", "qwen-code.api_response",
                             "qwen-code.api_request"])
        self.assertEqual(expect.telemetry_tail_lost(path), 1)

    def test_a_side_request_without_its_end_is_not_a_main_one(self):
        path = self.outfile(["gemini_cli.api_request main", "gemini_cli.api_response main",
                             "gemini_cli.api_request utility_router"])
        self.assertEqual(expect.telemetry_tail_lost(path), 0)
        # a record cut off mid-way at the end is not one
        with open(path, "a") as f:
            f.write('{\n  "attributes": {\n    "event.name": "gemini_cli.api_res')
        self.assertEqual(expect.telemetry_tail_lost(path), 0)

    def test_only_the_requests_whose_end_was_lost_go_uncompared(self):
        main = [req(1, 1, finished=False, retried=True), req(1, 2), req(2)]
        for i, r in enumerate(main):
            r["request_seq"] = i + 1
        a = [{"outcome": "abandoned"}, {"outcome": "completed"}, {"outcome": "open"}]
        self.assertEqual(expect.seen_part(main, a, 0), (main, a, True))
        self.assertEqual(expect.seen_part(main, a[:2], 0)[2], False)
        # the lost attempt shown as not completed, or not at all
        self.assertEqual(expect.seen_part(main, a, 1), (main[:2], a[:2], True))
        self.assertEqual(expect.seen_part(main, a[:2], 1), (main[:2], a[:2], True))
        # but fewer than the requests before the lost ones is still a failure
        self.assertEqual(expect.seen_part(main, a[:1], 1)[2], False)


if __name__ == "__main__":
    unittest.main()
