"""Unit tests of the proxy suite's own ground-truth machinery (no proxy, no client needed):
the tap dump reader (wire.py), the expectation rules (compare.py), the history tags the mock
logs (mock_server.history_tags).

  python3 -m unittest e2e/proxy/test_harness.py
"""

import json
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "agents"))

import compare  # noqa: E402
import mock_server  # noqa: E402
import wire  # noqa: E402

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def chunk(data):
    return b"%x\r\n%s\r\n" % (len(data), data)


def dump(conns):
    d = tempfile.mkdtemp(prefix="rs-proxy-test-")
    for i, (data, end) in enumerate(conns, 1):
        with open(os.path.join(d, f"{i:03d}.s2c"), "wb") as f:
            f.write(data)
        if end:
            with open(os.path.join(d, f"{i:03d}.json"), "w") as f:
                json.dump({"end": end}, f)
    return d


START = b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_mock0001"}}\n\n'
CALL = b'data: {"type":"content_block_start","content_block":{"id":"toolu_mockA1"}}\n\n'
STOP = b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
REQ = [{"seq": 1, "ids": {"message_id": "msg_mock0001"}, "call": {"id": "toolu_mockA1"}}]


class Wire(unittest.TestCase):
    def test_finished_stream(self):
        d = dump([(HEAD + chunk(START) + chunk(CALL) + chunk(STOP) + b"0\r\n\r\n", "eof")])
        got = wire.delivered(d, "anthropic", REQ)[1]
        self.assertTrue(got["finish"])
        self.assertIsNone(got["cut"])
        self.assertTrue(got["call_delivered"])

    def test_reset_mid_stream(self):
        d = dump([(HEAD + chunk(START) + chunk(CALL), "reset")])
        got = wire.delivered(d, "anthropic", REQ)[1]
        self.assertEqual((got["finish"], got["cut"]), (False, "reset"))

    def test_clean_end_without_finish_is_eof(self):
        d = dump([(HEAD + chunk(START) + chunk(CALL) + b"0\r\n\r\n", "eof")])
        self.assertEqual(wire.delivered(d, "anthropic", REQ)[1]["cut"], "eof")

    def test_error_event(self):
        err = b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error"}}\n\n'
        d = dump([(HEAD + chunk(START) + chunk(err) + b"0\r\n\r\n", "eof")])
        self.assertEqual(wire.delivered(d, "anthropic", REQ)[1]["cut"], "error")

    def test_second_response_on_a_kept_alive_connection(self):
        other = HEAD + chunk(b'data: {"id":"msg_mock0009"}\n\n') + b"0\r\n\r\n"
        d = dump([(other + HEAD + chunk(START), "reset")])
        got = wire.delivered(d, "anthropic", REQ)
        self.assertEqual(got[1]["cut"], "reset")

    def test_non_streamed_json_answer_is_finished_when_whole(self):
        body = b'{"id":"msg_mock0001","type":"message","stop_reason":"tool_use"}'
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
        d = dump([(head % len(body) + body, "eof")])
        self.assertTrue(wire.delivered(d, "anthropic", REQ)[1]["finish"])
        d = dump([(head % len(body) + body[:20], "reset")])
        self.assertFalse(wire.delivered(d, "anthropic", REQ)[1]["finish"])

    def test_openai_null_error_field_is_not_an_error(self):
        created = b'event: response.created\ndata: {"response":{"id":"resp_mock0001","error":null}}\n\n'
        d = dump([(HEAD + chunk(created) + b"0\r\n\r\n", "eof")])
        req = [{"seq": 1, "ids": {"response_id": "resp_mock0001"}}]
        self.assertEqual(wire.delivered(d, "openai", req)[1]["cut"], "eof")


def truth(cut_executed, retried, history):
    a1 = {"request_seq": 1, "step": 1, "attempt": 1, "cut_by_proxy": True, "retried": retried,
          "history_tags": [], "calls": [{"id": "c1", "executed": cut_executed}]}
    reqs = [a1]
    if retried:
        reqs.append({"request_seq": 2, "step": 1, "attempt": 2, "cut_by_proxy": False,
                     "retried": False, "history_tags": [], "calls": [{"id": "c2", "executed": True}]})
    reqs.append({"request_seq": 3, "step": 2, "cut_by_proxy": False, "history_tags": history,
                 "calls": []})
    return {"main_requests": reqs}


class Rules(unittest.TestCase):
    def test_abandoned_call_that_ran(self):
        req, _ = compare.implied_findings(truth(True, True, ["[A2]"]))
        self.assertEqual(req, {"abandoned_tool_executed", "unfinished_tool_executed"})

    def test_unfinished_not_retried(self):
        req, _ = compare.implied_findings(truth(True, False, ["[A1]"]))
        self.assertEqual(req, {"unfinished_tool_executed"})

    def test_nothing_ran_from_the_cut_attempt(self):
        req, allowed = compare.implied_findings(truth(False, True, ["[A2]"]))
        self.assertEqual(req, set())
        self.assertNotIn("abandoned_tool_executed", allowed)

    def test_spliced_history(self):
        req, _ = compare.implied_findings(truth(False, True, ["[A1][A2]"]))
        self.assertEqual(req, {"spliced_text"})

    def test_metrics_parse(self):
        s = compare.parse_metrics('# HELP x\nretryscope_attempts_total{model="m",outcome="completed"} 2\n'
                                 'retryscope_attempts_total{model="m",outcome="abandoned"} 1\n')
        self.assertEqual(compare.msum(s, "retryscope_attempts_total"), 3)
        self.assertEqual(compare.msum(s, "retryscope_attempts_total", outcome="abandoned"), 1)


class HistoryTags(unittest.TestCase):
    def test_each_provider_shape(self):
        self.assertEqual(mock_server.history_tags({"messages": [
            {"role": "user", "content": "[A1]"},
            {"role": "assistant", "content": [{"type": "text", "text": "[A1] x [A2] y"}]}]}),
            ["[A1][A2]"])
        self.assertEqual(mock_server.history_tags({"contents": [
            {"role": "model", "parts": [{"text": "[A2] y"}]}]}), ["[A2]"])
        self.assertEqual(mock_server.history_tags({"input": [
            {"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": "[F] done"}]}]}), ["[F]"])


if __name__ == "__main__":
    unittest.main()
