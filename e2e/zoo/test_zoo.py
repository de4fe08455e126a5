"""Unit tests of the zoo's ground-truth rules (`python3 -m unittest e2e/zoo/test_zoo.py`):
what the mock's request log and the marker files say, independent of retryscope."""

import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zoo  # noqa: E402


def truth(records, markers, api="anthropic", strategy="resend"):
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    try:
        return zoo.build_truth(api, strategy, "mid-word", f.name, markers, {})
    finally:
        os.unlink(f.name)


def step1(seq, attempt, tags=(), **request):
    return {"seq": seq, "route": "main", "step": 1, "attempt": attempt, "history_tags": list(tags),
            "ids": {"response_id": f"resp_{seq}"}, "request": request}


def step2(seq, tags):
    return {"seq": seq, "route": "main", "step": 2, "history_tags": list(tags)}


class Truth(unittest.TestCase):
    def test_identical_resend(self):
        t = truth([step1(1, 1), step1(2, 2), step2(3, ["[A2]"])], ["a2-toolu_mockA2"])
        self.assertEqual((t["retries"], t["model_requests"], t["spliced"]), (1, 3, False))
        self.assertEqual(t["executed"], {"toolu_mockA2": 2})

    def test_prefill_kept_both_attempts_texts(self):
        t = truth([step1(1, 1), step1(2, 2, ["[A1]"]), step2(3, ["[A1][A2]"])], ["a2-x"])
        self.assertTrue(t["spliced"])
        self.assertEqual(t["spliced_evidence"], ["[A1][A2]"])

    def test_final_text_is_not_a_splice(self):
        t = truth([step1(1, 1), step2(2, ["[A1]", "[F]"])], ["a1-x"])
        self.assertFalse(t["spliced"])

    def test_continuation_by_reference(self):
        t = truth([step1(1, 1), step1(2, 2, previous_response_id="resp_1"), step2(3, [])],
                  ["a2-x"], api="openai-responses", strategy="previous-response-id")
        self.assertTrue(t["spliced"])
        self.assertEqual(t["spliced_evidence"], [2])

    def test_background_resume_is_the_same_attempt(self):
        resume = {"seq": 2, "route": "resume", "resumed": "resp_1", "step": 1, "attempt": 1}
        t = truth([step1(1, 1, background=True), resume, step2(3, ["[A1]"])], ["a1-x"],
                  api="openai-responses", strategy="background-resume")
        self.assertEqual((t["retries"], t["model_requests"], t["resumed_streams"]), (0, 2, 1))


if __name__ == "__main__":
    unittest.main()
