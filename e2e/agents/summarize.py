#!/usr/bin/env python3
"""Prints the markdown table of what each recorded run did (from truth.json files), as used
in tests/fixtures/agents/README.md.

  summarize.py tests/fixtures/agents
"""

import json
import os
import sys

ORDER = ["clean", "start-status", "start-error", "after-tool-reset", "after-tool-eof",
         "after-tool-error", "mid-word-reset", "mid-word-eof", "mid-word-error",
         "before-finish-reset", "before-finish-eof", "before-finish-error"]


def row(d):
    main = d["main_requests"]
    step1 = [r for r in main if r["step"] == 1]
    ran = []
    for r in main:
        for c in r["calls"]:
            if not c["executed"]:
                continue
            t = f"A{r['attempt']}"
            if not r["finished"]:
                t += " unfinished" + (", abandoned" if r.get("retried") else "")
            end = r.get("finish_sent_ms") if r["finished"] else r.get("ended_ms")
            if end and c["marker_mtime_ms"] < end:
                t += ", early"
            ran.append(t)
    vis = d.get("visible_text") or ""
    tags = " ".join(x for x in ("[A1]", "[A2]", "[A3]", "[F]") if x in vis)
    done = sum(1 for r in step1 if r["finished"])
    return (f"| {d['client']} | {d['scenario']} | {len(step1)} ({done} finished) | "
            f"{'; '.join(ran) or '-'} | {tags} | {d['run']['exit_code']} | {d['run']['seconds']} |")


def main():
    root = sys.argv[1]
    print("| client | scenario | step-1 attempts | calls that ran (attempt) | visible tags | exit | seconds |")
    print("|---|---|---|---|---|---|---|")
    for client in ("gemini-cli", "claude-code", "claude-code-partial", "codex", "qwen-code"):
        for sc in ORDER:
            p = os.path.join(root, client, sc, "truth.json")
            if os.path.exists(p):
                print(row(json.load(open(p))))


if __name__ == "__main__":
    main()
