#!/usr/bin/env python3
"""A tiny OTLP/HTTP receiver on 127.0.0.1 that saves every POST body as it came
(`NNNN-v1-logs.json`, `.pb` when the body is protobuf) and answers 200 `{}`.

  otlp_receiver.py --dir OUT --port-file F

Used by record.py --otlp to capture each client's telemetry export. Standard library only.
"""

import argparse
import gzip
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def do_POST(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    break
                body += self.rfile.read(size)
                self.rfile.readline()
        else:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.headers.get("Content-Encoding", "").lower() == "gzip":
            body = gzip.decompress(body)
        ctype = self.headers.get("Content-Type", "")
        ext = "json" if "json" in ctype else "pb"
        with self.server.lock:
            self.server.count += 1
            k = self.server.count
        name = f"{k:04d}-{self.path.strip('/').replace('/', '-') or 'root'}.{ext}"
        with open(os.path.join(self.server.dir, name), "wb") as f:
            f.write(body)
        data = b"{}" if ext == "json" else b""
        self.send_response(200)
        self.send_header("Content-Type", "application/json" if ext == "json" else
                         "application/x-protobuf")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def spawn(tmp):
    """Starts a receiver saving into tmp/otlp; returns (process, endpoint URL)."""
    out = os.path.join(tmp, "otlp")
    port_file = os.path.join(tmp, "otlp-port")
    p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--dir", out,
                          "--port-file", port_file], stdout=subprocess.DEVNULL)
    for _ in range(200):
        if os.path.exists(port_file):
            return p, f"http://127.0.0.1:{int(open(port_file).read())}"
        time.sleep(0.05)
    p.kill()
    raise SystemExit("otlp receiver did not start")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--port-file", required=True)
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    srv.dir, srv.count, srv.lock = a.dir, 0, threading.Lock()
    with open(a.port_file + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    os.replace(a.port_file + ".tmp", a.port_file)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
