"""The addresses a retryscope started on port 0 bound, read from its log.

A harness that picks a "free" port itself (bind port 0, close it, pass the number on) races
every other process on the machine for that port until retryscope binds it: another
session's mock, tap or proxy, or any outgoing connection given it as its source port. Seen
in CI: a proxy session whose proxy never started while six sessions ran at once. So the
harnesses pass `127.0.0.1:0` and read the bound address from the lines retryscope logs at
start (`serving /metrics addr=…`, `proxying listen=…`, `receiving OTLP/HTTP addr=…`).
"""

import re
import time

METRICS = r"serving /metrics addr=(\S+)"
PROXY = r"proxying listen=(\S+)"
OTLP_HTTP = r"receiving OTLP/HTTP addr=(\S+)"
OTLP_GRPC = r"receiving OTLP/gRPC addr=(\S+)"


def wait_addresses(proc, log_path, patterns, secs=30):
    """{name: "host:port"} once the log at `log_path` (the process's stderr) matched every
    pattern of `patterns` ({name: regex with one group}); None when `proc` exited first or
    `secs` passed (the log then says why)."""
    deadline = time.time() + secs
    while True:
        try:
            with open(log_path, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            text = ""
        found = {}
        for name, pattern in patterns.items():
            m = re.search(pattern, text)
            if m:
                found[name] = m.group(1)
        if len(found) == len(patterns):
            return found
        if proc.poll() is not None or time.time() > deadline:
            return None
        time.sleep(0.05)


def log_tail(log_path, chars=400):
    """The end of a log, on one line, for a check's message."""
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text[-chars:].splitlines() if line.strip())
