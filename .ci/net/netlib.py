"""Shared helpers of the network fault suite's cases (.ci/net/*.sh): start retryscope, read
its peak memory (VmHWM) and its /metrics, make a self-signed certificate, build gzip bombs,
speak raw HTTP/2 frames (no HPACK decoding needed: the suite reads outcomes from /metrics).
Loopback only. Python 3 stdlib only."""

import os
import resource
import select
import socket
import ssl
import struct
import subprocess
import sys
import time
import urllib.request
import zlib

BIN = os.environ["BIN"]
WORK = os.environ["WORK"]
MIB = 1 << 20


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def cert():
    c, k = os.path.join(WORK, "cert.pem"), os.path.join(WORK, "key.pem")
    if not os.path.exists(c):
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
             "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
             "-keyout", k, "-out", c],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return c, k


def token_file(tok="s3cret"):
    p = os.path.join(WORK, "token")
    with open(p, "w") as f:
        f.write(tok + "\n")
    return p


class Retryscope:
    """`retryscope run` receiving OTLP; stopped (kill -9) by stop() or at exit."""

    def __init__(self, *args, tls=False, token=True):
        self.metrics_port = free_port()
        self.http_port = free_port()
        self.grpc_port = free_port()
        argv = [BIN, "run", "--metrics-addr", f"127.0.0.1:{self.metrics_port}",
                "--otlp-listen", f"127.0.0.1:{self.http_port}",
                "--otlp-grpc-listen", f"127.0.0.1:{self.grpc_port}",
                "--findings-out", ""]
        if token:
            argv += ["--otlp-listen-token-file", token_file()]
        if tls:
            c, k = cert()
            argv += ["--otlp-tls-cert", c, "--otlp-tls-key", k]
        argv += list(args)
        self.log = open(os.path.join(WORK, f"retryscope-{self.metrics_port}.log"), "w")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT,
                                     preexec_fn=raise_nofile)
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                if self.get("/-/ready") == 200:
                    break
            except OSError:
                pass
            if self.proc.poll() is not None:
                sys.exit(f"retryscope exited: see {self.log.name}")
            time.sleep(0.1)
        else:
            sys.exit("retryscope never became ready")
        time.sleep(0.3)
        self.baseline = self.status("VmRSS")

    def get(self, path, timeout=5):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}{path}",
                                    timeout=timeout) as r:
            return r.status

    def status(self, key):
        """A /proc/PID/status figure in bytes (VmRSS, VmHWM)."""
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
        return 0

    def peak_over_baseline(self):
        return self.status("VmHWM") - self.baseline

    def scrape(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics",
                                    timeout=5) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out

    def count(self, prefix, **labels):
        """Sum of the series of `prefix` whose labels include `labels`."""
        total = 0.0
        for k, v in self.scrape().items():
            if k.split("{")[0] != prefix:
                continue
            if all(f'{n}="{val}"' in k for n, val in labels.items()):
                total += v
        return total

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def check(ok, what):
    print(("  ok   " if ok else "  FAIL ") + what, flush=True)
    if not ok:
        check.failed = True


check.failed = False


def done():
    sys.exit(1 if check.failed else 0)


# ---- protobuf (hand-encoded OTLP) ----------------------------------------------------------

def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def ld(field, payload):
    return varint(field << 3 | 2) + varint(len(payload)) + payload


def ld_head(field, n):
    """The tag and length of a length-delimited field of `n` bytes (its payload follows)."""
    return varint(field << 3 | 2) + varint(n)


def empty_log_records(n, attrs=b""):
    """An ExportLogsServiceRequest of `n` empty log records (2 wire bytes each)."""
    record = ld(2, attrs)
    scope_logs = record * n
    return ld(1, ld(2, scope_logs))


def log_request(body_text):
    record = ld(5, ld(1, body_text.encode()))  # LogRecord.body = AnyValue{string_value}
    return ld(1, ld(2, ld(2, record)))


def grpc_frame(msg, compressed):
    return bytes([1 if compressed else 0]) + struct.pack(">I", len(msg)) + msg


# ---- gzip bombs -----------------------------------------------------------------------------

def gzip_bomb(prefix, unit, count, suffix=b""):
    """A valid gzip stream of `prefix` + `unit` * `count` + `suffix` (GiBs inflated from ~1/1000
    of that), built in well under a second: each MiB of units ends in a full flush, so its
    deflate blocks are the same bytes every time and are repeated, not recompressed; the
    trailer's CRC-32 and size cover the whole. (gzip bytes, inflated size)."""
    per = max(1, MIB // len(unit))
    n, rest = divmod(count, per)
    chunk = unit * per
    co = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: gzip header and trailer
    first = co.compress(prefix + chunk) + co.flush(zlib.Z_FULL_FLUSH)
    again = co.compress(chunk) + co.flush(zlib.Z_FULL_FLUSH)
    assert n >= 3 and again == co.compress(chunk) + co.flush(zlib.Z_FULL_FLUSH)
    tail = unit * rest + suffix
    last = co.compress(tail) + co.flush()
    crc = zlib.crc32(prefix)
    for _ in range(n):
        crc = zlib.crc32(chunk, crc)
    crc = zlib.crc32(tail, crc)
    size = len(prefix) + n * len(chunk) + len(tail)
    body = first + again * (n - 1) + last[:-8] + struct.pack("<II", crc, size & 0xFFFFFFFF)
    return body, size


def log_records_bomb(size):
    """gzip of an ExportLogsServiceRequest of about `size` bytes: empty log records (2 bytes
    each) in one ResourceLogs and ScopeLogs, valid protobuf once inflated."""
    count = (size - 16) // 2
    records = 2 * count
    scope = ld_head(2, records)  # ResourceLogs.scope_logs, then its records
    prefix = ld_head(1, len(scope) + records) + scope
    return gzip_bomb(prefix, ld(2, b""), count)


def json_logs_bomb(size):
    """gzip of an OTLP/JSON logs request of about `size` bytes: empty log records (`{}`),
    valid JSON once inflated."""
    prefix, suffix = b'{"resourceLogs":[{"scopeLogs":[{"logRecords":[{}', b"]}]}]}"
    return gzip_bomb(prefix, b",{}", (size - len(prefix) - len(suffix)) // 3, suffix)


# ---- HTTP/1.1 -------------------------------------------------------------------------------

def tls_context(alpn):
    ctx = ssl.create_default_context(cafile=cert()[0])
    ctx.set_alpn_protocols([alpn])
    return ctx


def connect(port, source="127.0.0.1", tls=None, timeout=10):
    s = socket.socket()
    s.settimeout(timeout)
    s.setsockopt(socket.SOL_IP, 24, 1)  # IP_BIND_ADDRESS_NO_PORT
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    if tls:
        s = tls_context(tls).wrap_socket(s, server_hostname="127.0.0.1")
    return s


def post(port, path, body, headers=(), tls=False, timeout=10, send=None):
    """POST over HTTP/1.1; the status code (0 when the connection ended without one). The
    body goes in 64 KiB pieces and the answer is read as soon as one comes, before the rest is
    sent (a server may answer without reading the body: 401, 413 by content-length). With
    `send`, only the body's first `send` bytes are sent (content-length still says all of
    it): an answer then came before the body did."""
    s = connect(port, tls="http/1.1" if tls else None, timeout=timeout)
    head = f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: {len(body)}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n"
    out = memoryview(head.encode() + (body if send is None else body[:send]))
    data = b""
    try:
        try:
            sent = 0
            while sent < len(out):
                if select.select([s], [], [], 0)[0] or (tls and s.pending()):
                    # Readable: an answer, or (TLS) only a session ticket; read briefly.
                    s.settimeout(0.05)
                    try:
                        chunk = s.recv(4096)
                    except (socket.timeout, ssl.SSLWantReadError):
                        chunk = None
                    s.settimeout(timeout)
                    if chunk is not None:
                        data += chunk
                        break
                sent += s.send(out[sent:sent + 65536])
        except OSError:
            pass  # refused mid-body: the answer may be waiting all the same
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    finally:
        s.close()
    try:
        return int(data.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return 0


# ---- HTTP/2 frames --------------------------------------------------------------------------

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def h2_frame(ftype, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", stream) + payload


def hpack_literal(name, value):
    """A literal header field without indexing, new name (names and values < 127 bytes)."""
    n, v = name.encode(), value.encode()
    assert len(n) < 127 and len(v) < 127
    return b"\x00" + bytes([len(n)]) + n + bytes([len(v)]) + v


def grpc_headers(port, token=None, gzip=False,
                 path="/opentelemetry.proto.collector.logs.v1.LogsService/Export"):
    h = [(":method", "POST"), (":scheme", "http"), (":path", path),
         (":authority", f"127.0.0.1:{port}"), ("content-type", "application/grpc"),
         ("te", "trailers")]
    if token:
        h.append(("authorization", f"Bearer {token}"))
    if gzip:
        h.append(("grpc-encoding", "gzip"))
    return b"".join(hpack_literal(k, v) for k, v in h)


def h2_open(port, tls=False, source="127.0.0.1"):
    s = connect(port, source=source, tls="h2" if tls else None)
    s.sendall(PREFACE + h2_frame(4, 0, 0))
    return s


def h2_request(s, stream, headers, body=b"", end=True):
    """HEADERS then DATA in 16 KiB frames (END_STREAM on the last when `end`)."""
    out = h2_frame(1, 0x4 | (0x1 if end and not body else 0), stream, headers)
    for i in range(0, len(body), 16384):
        last = i + 16384 >= len(body)
        out += h2_frame(0, 0x1 if (end and last) else 0, stream, body[i:i + 16384])
    s.sendall(out)


def h2_drain(s, seconds):
    """Read (and drop) what the server sends for `seconds`; whether it closed."""
    s.settimeout(0.2)
    end = time.time() + seconds
    while time.time() < end:
        try:
            if not s.recv(65536):
                return True
        except socket.timeout:
            continue
        except OSError:
            return True
    return False


def h2_wait_end(s, stream, seconds):
    """Read frames until `stream` ends (HEADERS or DATA with END_STREAM, or RST_STREAM), the
    connection closes (GOAWAY or EOF), or `seconds` pass; what happened: 'ended', 'closed',
    'timeout'."""
    s.settimeout(0.2)
    end = time.time() + seconds
    buf = b""
    while time.time() < end:
        while len(buf) >= 9:
            n = int.from_bytes(buf[:3], "big")
            if len(buf) < 9 + n:
                break
            ftype, flags = buf[3], buf[4]
            sid = int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
            buf = buf[9 + n:]
            if sid == stream and (ftype == 3 or (ftype in (0, 1) and flags & 1)):
                return "ended"
            if ftype == 7:
                return "closed"
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            continue
        except OSError:
            return "closed"
        if not chunk:
            return "closed"
        buf += chunk
    return "timeout"
