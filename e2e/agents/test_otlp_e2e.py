"""Unit tests of otlp_e2e.py's comparisons (no client, no retryscope): the /metrics parsing,
the figures compared between the file and the OTLP runs, and the expectations derived from
truth.json (the committed gemini-cli recordings).

  python3 -m unittest e2e/agents/test_otlp_e2e.py
"""

import json
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import otlp_e2e  # noqa: E402

FIXTURES = os.path.join(HERE, "..", "..", "tests", "fixtures", "agents")

SCRAPE = """# HELP retryscope_retries_total Retries.
# TYPE retryscope_retries_total counter
retryscope_retries_total{model="gemini-3.8-flash",provider="gemini",reason="ECONNRESET"} 1
retryscope_retries_total{model="unknown",provider="unknown",reason="unspecified"} 0
retryscope_findings_total{kind="abandoned_tool_executed",severity="critical",tool=""} 0
retryscope_findings_total{kind="abandoned_tool_executed",severity="critical",tool="run_shell_command"} 1
retryscope_findings_total{kind="unfinished_tool_executed",severity="high",tool="run_shell_command"} 1
retryscope_attempts_total{model="gemini-2.5-flash",provider="gemini",outcome="completed"} 3
retryscope_attempts_total{model="gemini-3.8-flash",provider="gemini",outcome="abandoned"} 1
retryscope_tool_executions_total{tool="run_shell_command",attempt_outcome="abandoned"} 1
retryscope_tool_executions_total{tool="run_shell_command",attempt_outcome="completed"} 1
retryscope_turns_total{model="gemini-3.8-flash",provider="gemini",status="completed"} 2
retryscope_turns_total{model="gemini-3.5-flash-lite",provider="gemini",status="completed"} 1
retryscope_open_turns 0
retryscope_events_read_total{source="file"} 5260
retryscope_bad_lines_total{source="file",reason="invalid_json"} 0
retryscope_build_info{version="0.1.0"} 1
"""


def truth(scenario, client="gemini-cli"):
    with open(os.path.join(FIXTURES, client, scenario, "truth.json")) as f:
        return json.load(f)


class Metrics(unittest.TestCase):
    def test_snapshot_sums_by_label_and_drops_zeros(self):
        snap = otlp_e2e.snapshot(otlp_e2e.parse_metrics(SCRAPE))
        self.assertEqual(snap["retries"], 1)
        self.assertEqual(snap["findings"], {"abandoned_tool_executed": 1,
                                            "unfinished_tool_executed": 1})
        self.assertEqual(snap["attempts"], {"abandoned": 1, "completed": 3})
        self.assertEqual(snap["executions"], {"abandoned": 1, "completed": 1})
        self.assertEqual(snap["turns"], {"completed": 3})
        self.assertEqual((snap["open_turns"], snap["events_read"], snap["bad_lines"]),
                         (0, 5260, 0))

    def test_label_values_with_commas_and_spaces(self):
        m = otlp_e2e.parse_metrics('retryscope_x_total{a="1, 2",b="c d"} 7\n')
        self.assertEqual(m["retryscope_x_total"], [({"a": "1, 2", "b": "c d"}, 7.0)])

    def test_a_differing_figure_is_seen(self):
        a = otlp_e2e.snapshot(otlp_e2e.parse_metrics(SCRAPE))
        b = otlp_e2e.snapshot(otlp_e2e.parse_metrics(
            SCRAPE.replace('reason="ECONNRESET"} 1', 'reason="ECONNRESET"} 2')))
        self.assertNotEqual(otlp_e2e.compared(a), otlp_e2e.compared(b))
        # events read differ between the file and the OTLP run: not compared
        c = otlp_e2e.snapshot(otlp_e2e.parse_metrics(SCRAPE.replace("5260", "25")))
        self.assertEqual(otlp_e2e.compared(a), otlp_e2e.compared(c))


class Truth(unittest.TestCase):
    def test_after_tool_reset(self):
        want = otlp_e2e.truth_expectations(truth("after-tool-reset"))
        # spliced_text (the screen shows [A1] then [A2]) is not in a telemetry export
        self.assertEqual(want, {"findings": {"abandoned_tool_executed",
                                             "unfinished_tool_executed"},
                                "retries": 1, "executions": 2, "unfinished": 1})

    def test_clean(self):
        self.assertEqual(otlp_e2e.truth_expectations(truth("clean")),
                         {"findings": set(), "retries": 0, "executions": 1, "unfinished": 0})

    def test_check_truth_passes_the_right_figures_and_fails_a_missing_finding(self):
        t = truth("after-tool-reset")
        snap = otlp_e2e.snapshot(otlp_e2e.parse_metrics(SCRAPE))
        self.assertTrue(otlp_e2e.check_truth(snap, t)[0])
        snap["findings"].pop("unfinished_tool_executed")
        ok, why = otlp_e2e.check_truth(snap, t)
        self.assertFalse(ok)
        self.assertIn("unfinished_tool_executed", why)

    def test_check_truth_fails_a_lost_execution(self):
        snap = otlp_e2e.snapshot(otlp_e2e.parse_metrics(SCRAPE))
        snap["executions"] = {"completed": 1}
        self.assertFalse(otlp_e2e.check_truth(snap, truth("after-tool-reset"))[0])

    def test_incomplete_turn_is_neither_required_nor_refused(self):
        snap = otlp_e2e.snapshot(otlp_e2e.parse_metrics(SCRAPE))
        snap["findings"]["incomplete_turn"] = 1
        self.assertTrue(otlp_e2e.check_truth(snap, truth("after-tool-reset"))[0])

    def test_no_false_findings(self):
        snap = otlp_e2e.snapshot(otlp_e2e.parse_metrics(SCRAPE))
        self.assertTrue(otlp_e2e.check_no_false_findings(snap, truth("after-tool-reset"))[0])
        ok, why = otlp_e2e.check_no_false_findings(snap, truth("clean"))
        self.assertFalse(ok)
        self.assertIn("abandoned_tool_executed", why)


class ClientView(unittest.TestCase):
    def test_claude_code_cut_message_reads_as_finished(self):
        t = truth("after-tool-reset", "claude-code")
        self.assertIn("unfinished_tool_executed", otlp_e2e.expect.implied_findings(t))
        view = otlp_e2e.client_view(t, "claude-code")
        self.assertEqual(otlp_e2e.truth_expectations(view),
                         {"findings": {"early_execution"}, "retries": 0, "executions": 1,
                          "unfinished": 0})
        self.assertFalse(t["main_requests"][0]["finished"], "the truth itself is unchanged")

    def test_claude_code_silent_retry_is_not_exported(self):
        t = truth("start-error", "claude-code")
        self.assertEqual(otlp_e2e.truth_expectations(t)["retries"], 1)
        view = otlp_e2e.client_view(t, "claude-code")
        self.assertEqual(otlp_e2e.truth_expectations(view),
                         {"findings": {"early_execution"}, "retries": 0, "executions": 1,
                          "unfinished": 0})

    def test_other_clients_see_the_truth(self):
        t = truth("after-tool-reset")
        self.assertIs(otlp_e2e.client_view(t, "gemini-cli"), t)
        self.assertIs(otlp_e2e.client_view(t, "codex"), t)


class Accepted(unittest.TestCase):
    RECEIVER = """retryscope_otlp_receiver_requests_total{signal="logs",protocol="grpc",outcome="accepted"} 1
retryscope_otlp_receiver_requests_total{signal="traces",protocol="grpc",outcome="accepted"} 1
retryscope_otlp_receiver_requests_total{signal="metrics",protocol="grpc",outcome="accepted"} 1
retryscope_otlp_receiver_records_total{signal="logs"} 25
retryscope_otlp_receiver_records_total{signal="traces"} 7
retryscope_otlp_receiver_records_total{signal="metrics"} 27
retryscope_events_read_total{source="otlp"} 32
retryscope_events_read_total{source="file"} 15
"""

    def check(self, text, protocol="grpc"):
        snap = otlp_e2e.snapshot(otlp_e2e.parse_metrics(text))
        return otlp_e2e.check_accepted(snap, truth("clean"), True, "", protocol)

    def test_all_accepted_over_the_configured_protocol(self):
        self.assertTrue(self.check(self.RECEIVER)[0])

    def test_another_protocol_fails(self):
        ok, why = self.check(self.RECEIVER, "http")
        self.assertFalse(ok)
        self.assertIn("http_json/accepted", why)

    def test_a_refused_request_fails(self):
        self.assertFalse(self.check(self.RECEIVER + 'retryscope_otlp_receiver_requests_total'
                                    '{signal="logs",protocol="grpc",outcome="malformed"} 1\n')[0])

    def test_no_request_at_all_fails(self):
        # gemini-cli's gzip-compressed gRPC was refused before the receiver counted anything
        self.assertFalse(self.check('retryscope_events_read_total{source="otlp"} 0\n')[0])

    def test_records_accepted_but_not_read_fail(self):
        self.assertFalse(self.check(self.RECEIVER.replace("} 32", "} 31"))[0])


if __name__ == "__main__":
    unittest.main()
