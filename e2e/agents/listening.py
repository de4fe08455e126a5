"""The addresses a retryscope started on port 0 bound, read from its log.

A harness that picks a "free" port itself (bind port 0, close it, pass the number on) races
every other process on the machine for that port until retryscope binds it: another
session's mock, tap or proxy, or any outgoing connection given it as its source port. Seen
in CI: a proxy session whose proxy never started while six sessions ran at once. So the
harnesses pass `127.0.0.1:0` and read the bound address from the lines retryscope logs at
start (`serving /metrics addr=…`, `proxying listen=…`, `receiving OTLP/HTTP addr=…`).
"""

import os
import re
import sys
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


class _Pid:
    """A process known by its pid (a shell's background job), as `wait_addresses` polls it:
    `poll()` is None while it runs. A zombie (exited, not yet waited for by its shell) has
    exited."""

    def __init__(self, pid):
        self.pid = pid

    def poll(self):
        try:
            with open(f"/proc/{self.pid}/stat", encoding="utf-8") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except IndexError:
            return 1
        except OSError:
            # No /proc (not Linux), or the process is gone and reaped.
            try:
                os.kill(self.pid, 0)
            except OSError:
                return 1
            return None
        return 1 if state in ("Z", "X") else None


def main(argv):
    """`python3 listening.py LOG PID [metrics|proxy|otlp_http|otlp_grpc]`: print the address
    the retryscope with pid PID (its stderr in LOG) bound, once it has logged it; exit 1 with
    the log's tail when it exited first or 30 s passed. For shell harnesses."""
    if len(argv) not in (3, 4):
        print(main.__doc__, file=sys.stderr)
        return 2
    log, pid = argv[1], int(argv[2])
    name = argv[3] if len(argv) == 4 else "metrics"
    pattern = {"metrics": METRICS, "proxy": PROXY, "otlp_http": OTLP_HTTP, "otlp_grpc": OTLP_GRPC}[name]
    found = wait_addresses(_Pid(pid), log, {name: pattern})
    if found is None:
        print(f"no {name} address in {log}: {log_tail(log)}", file=sys.stderr)
        return 1
    print(found[name])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
