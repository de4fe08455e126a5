#!/usr/bin/env bash
# Issue 24.5: `retryscope proxy --record DIR` must never write a secret. Each credential header
# real gateways and providers use, each credential query parameter, and credential-shaped
# values under innocent names (and a key in the request body) are sent through a real proxy
# to a local upstream; then the whole recording is searched for every secret value: none may
# be found, and the recording must still hold the request (its ordinary headers and body).
# Redacting and recording must not cost memory either: the proxy's peak RSS (VmHWM) over its
# idle RSS stays within GROWTH_MIB.
#
# Contract of .ci/net-suite.sh: env BIN, WORK; loopback only; its own processes; ~3 s.
set -euo pipefail
: "${BIN:?BIN=path to retryscope}" "${WORK:?WORK=a temp dir}"
GROWTH_MIB=${GROWTH_MIB:-16}  # proxy peak RSS over idle (measured +1 to +2 MiB over ~30 MiB idle, debug build)
D="$WORK/proxy-secrets"; mkdir -p "$D"
PIDS=()
cleanup() { for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill -9 "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
UP=$(port); PX=$(port); MX=$(port)

# The upstream: a complete non-streaming chat completion for every request.
python3 - "$UP" <<'PY' &
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        body = b'{"id":"c1","object":"chat.completion","model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
PY
PIDS+=($!)
"$BIN" proxy --listen "127.0.0.1:$PX" --upstream "http://127.0.0.1:$UP" --record "$D/rec" \
  --metrics-addr "127.0.0.1:$MX" --findings-out "" 2>"$D/proxy.err" &
PROXY=$!; PIDS+=($PROXY)
for _ in $(seq 100); do
  python3 -c 'import sys,urllib.request; urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=2)' "$MX" 2>/dev/null && break
  sleep 0.1
done

python3 - "$PX" "$D" "$PROXY" "$GROWTH_MIB" <<'PY'
import json, os, sys, time, urllib.request, secrets
px, d, pid, growth_mib = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
def status(field):  # a /proc/PID/status figure of the proxy, in MiB
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0
idle_mib = status("VmRSS")
# Credential headers of real gateways and providers (their documentation):
headers = [
    "Authorization", "Proxy-Authorization", "x-amz-security-token", "ocp-apim-subscription-key",
    "api-key", "x-portkey-api-key", "x-portkey-virtual-key", "helicone-auth", "openai-api-key",
    "anthropic-api-key", "X-Auth-Token", "x-goog-api-key", "cf-aig-authorization", "x-api-key",
    "x-litellm-api-key", "apikey", "Cookie", "x-session-token", "x-client-secret",
]
params = ["access_token", "api-key", "apikey", "api_key", "token", "sig", "key",
          "X-Amz-Signature", "X-Amz-Security-Token", "client_secret"]
secret_values = []
def secret(tag):  # plain letters and digits: only the name rule can catch these
    v = f"plain{tag}{secrets.token_hex(6)}"
    secret_values.append(v); return v
h = {"content-type": "application/json", "x-request-note": "ordinary-header-value"}
for i, name in enumerate(headers):
    h[name] = secret(i)
# Credential-shaped values under innocent names (the value rule).
shaped = {
    "x-note-a": "sk-ant-api03-" + secrets.token_urlsafe(30),
    "x-note-b": "Bearer " + secrets.token_hex(8),
    "x-note-c": "AIza" + secrets.token_urlsafe(28),
    "x-note-d": secrets.token_hex(24),
}
h.update(shaped)
secret_values += [v.split(" ")[-1] for v in shaped.values()]
query = "&".join(f"{p}={secret('q' + str(i))}" for i, p in enumerate(params))
body_key = "sk-proj-" + secrets.token_urlsafe(30)
secret_values.append(body_key)
body = json.dumps({"model": "gpt-4o", "stream": False, "messages": [
    {"role": "user", "content": f"my key is {body_key}, please keep it ordinary-body-text"}]}).encode()
req = urllib.request.Request(f"http://127.0.0.1:{px}/v1/chat/completions?alt=json&{query}",
                             data=body, headers=h, method="POST")
with urllib.request.urlopen(req, timeout=10) as r:
    assert r.status == 200, r.status
    r.read()
time.sleep(0.5)
peak_mib = status("VmHWM")
files = [os.path.join(root, f) for root, _, fs in os.walk(os.path.join(d, "rec")) for f in fs]
text = b"".join(open(f, "rb").read() for f in files)
found = [v for v in secret_values if v.encode() in text]
http_files = [f for f in files if f.endswith(".http")]
print(f"proxy-secrets: {len(headers)} credential headers, {len(params)} parameters, "
      f"{len(shaped)} credential-shaped values, 1 key in the body: {len(secret_values)} secrets; "
      f"{len(files)} files recorded ({len(http_files)} requests), {len(text)} bytes; secrets found: {len(found)}; "
      f"proxy RSS idle {idle_mib:.0f} MiB, peak {peak_mib:.0f} MiB (+{peak_mib - idle_mib:.0f} MiB, bound +{growth_mib} MiB)")
fails = []
if found: fails.append(f"secrets written to the recording: {found}")
if not http_files: fails.append("no request was recorded")
if peak_mib - idle_mib > growth_mib:
    fails.append(f"proxy peak RSS {peak_mib:.0f} MiB is {peak_mib - idle_mib:.0f} MiB over idle {idle_mib:.0f} MiB (bound +{growth_mib} MiB)")
for must in [b"ordinary-header-value", b"ordinary-body-text", b"alt=json", b"content-type: application/json"]:
    if must not in text: fails.append(f"the recording lost ordinary content {must!r}")
if fails:
    print("FAIL: " + "; ".join(fails)); sys.exit(1)
PY
