//! Shared by the proxy's integration tests: a mock upstream that streams recorded provider
//! bodies part by part (the real streams in `../shared/fixtures`, framed as each provider
//! sends them), the proxy in-process, and a raw HTTP/1.1 client that tells a clean end of
//! body from a TCP reset.

#![allow(dead_code)]

use std::convert::Infallible;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{Notify, mpsc};

use retryscope::proxy::{
    self, InjectRule, LineSink, Proxy, ProxySettings, Tracker, UpstreamSettings,
};

/// The shared fixtures folder (`../shared/fixtures`, or `$RETRYSCOPE_SHARED_FIXTURES`),
/// when present: it lives outside the repository, and tests that need it say so and pass
/// without it (as `tests/decode/shared_fixtures.rs` does).
pub fn shared() -> Option<PathBuf> {
    let dir = match std::env::var_os("RETRYSCOPE_SHARED_FIXTURES") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures"),
    };
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!(
            "note: {} not present: the real recorded streams are skipped",
            dir.display()
        );
        None
    }
}

/// The repository's own provider fixtures (hand-written quirks, tests/fixtures/providers).
pub fn in_repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/providers")
}

/// A recorded stream as the upstream sends it.
#[derive(Debug, Clone)]
pub struct Stream {
    /// The fixture's name.
    pub name: String,
    /// The request path (and query) that asks for it.
    pub path: String,
    /// `content-type` of the response.
    pub content_type: &'static str,
    /// The body, in the parts the mock writes one by one.
    pub parts: Vec<Bytes>,
}

impl Stream {
    /// The whole body.
    pub fn body(&self) -> Vec<u8> {
        self.parts.iter().flat_map(|p| p.to_vec()).collect()
    }
}

fn path_for(dir: &str, sse: bool) -> String {
    match dir {
        "openai-chat" => "/v1/chat/completions".to_owned(),
        "openai-responses" => "/v1/responses".to_owned(),
        "anthropic" => "/v1/messages".to_owned(),
        _ if sse => "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse".to_owned(),
        _ => "/v1beta/models/gemini-2.5-flash:streamGenerateContent".to_owned(),
    }
}

/// A fixture file as a stream: `.sse` files are raw bodies (one part per event);
/// `.chunks.txt` hold one payload per line (sent as `data: <line>` events, CRLF for Gemini as
/// Google sends them); gemini-cli `.responses` recordings become the JSON array
/// `streamGenerateContent` returns without `alt=sse` (the first streamed call of the file).
pub fn load_from(root: &Path, dir: &str, file: &str) -> Stream {
    let raw = std::fs::read(root.join(dir).join(file)).expect("fixture");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (sse, parts): (bool, Vec<Bytes>) = if file.ends_with(".sse") {
        let mut parts = Vec::new();
        let mut rest = raw.as_slice();
        while let Some(i) = rest.windows(2).position(|w| w == b"\n\n") {
            parts.push(Bytes::copy_from_slice(&rest[..i + 2]));
            rest = &rest[i + 2..];
        }
        if !rest.is_empty() {
            parts.push(Bytes::copy_from_slice(rest));
        }
        (true, parts)
    } else if file.ends_with(".responses") {
        let line = text
            .lines()
            .find(|l| l.contains("\"generateContentStream\""))
            .expect("a streamed call");
        let v: serde_json::Value = serde_json::from_str(line).expect("json");
        let elems = v["response"].as_array().expect("array");
        let mut parts = Vec::new();
        for (i, e) in elems.iter().enumerate() {
            let sep = if i == 0 { "[" } else { ",\r\n" };
            parts.push(Bytes::from(format!("{sep}{e}")));
        }
        parts.push(Bytes::from_static(b"]"));
        (false, parts)
    } else {
        let eol = if dir == "gemini" { "\r\n\r\n" } else { "\n\n" };
        let parts = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| Bytes::from(format!("data: {l}{eol}")))
            .collect();
        (true, parts)
    };
    Stream {
        name: format!("{dir}/{file}"),
        path: path_for(dir, sse),
        content_type: if sse {
            "text/event-stream"
        } else {
            "application/json"
        },
        parts,
    }
}

/// A shared fixture (call only when [`shared`] is `Some`).
pub fn load(dir: &str, file: &str) -> Stream {
    let root = shared().expect("the shared fixtures");
    load_from(&root, dir, file)
}

/// Every provider stream of a fixtures root (ACP schemas are not streams).
pub fn streams_in(root: &Path) -> Vec<Stream> {
    let mut out = Vec::new();
    for dir in ["openai-chat", "openai-responses", "anthropic", "gemini"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
            continue;
        };
        let mut files: Vec<String> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        files.sort();
        for f in files {
            let mut s = load_from(root, dir, &f);
            s.name = format!("{}/{}", root.display(), s.name);
            out.push(s);
        }
    }
    out
}

/// A request the mock received.
#[derive(Debug, Clone)]
pub struct Seen {
    /// Path and query.
    pub path: String,
    /// Headers.
    pub headers: http::HeaderMap,
}

/// A mock upstream: answers every request with the next stream of its script (the last one
/// again when the script runs out), one part per write.
pub struct Mock {
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    /// When set, the mock waits for a notification after the first part.
    pub gate: Option<Arc<Notify>>,
}

struct Parts(mpsc::Receiver<Bytes>);

impl Body for Parts {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b))))
    }
}

impl Mock {
    /// Start serving `script` on 127.0.0.1.
    pub async fn start(script: Vec<Stream>, gate: Option<Arc<Notify>>) -> Mock {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(Mutex::new(std::collections::VecDeque::from(script)));
        let (seen2, gate2) = (seen.clone(), gate.clone());
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let (seen, script, gate) = (seen2.clone(), script.clone(), gate2.clone());
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req: http::Request<Incoming>| {
                        let (seen, script, gate) = (seen.clone(), script.clone(), gate.clone());
                        async move {
                            seen.lock().expect("lock").push(Seen {
                                path: req
                                    .uri()
                                    .path_and_query()
                                    .map(|p| p.to_string())
                                    .unwrap_or_default(),
                                headers: req.headers().clone(),
                            });
                            let _ = req.into_body().collect().await;
                            let stream = {
                                let mut s = script.lock().expect("lock");
                                if s.len() > 1 {
                                    s.pop_front()
                                } else {
                                    s.front().cloned()
                                }
                            }
                            .expect("a scripted stream");
                            // A one-part JSON answer (not streamed) goes with its length, as
                            // providers send them: the server may stop polling at its last byte.
                            let length = (stream.content_type == "application/json"
                                && stream.parts.len() == 1)
                                .then(|| stream.parts[0].len());
                            let content_type = stream.content_type;
                            let (tx, rx) = mpsc::channel(4);
                            tokio::spawn(async move {
                                for (i, p) in stream.parts.into_iter().enumerate() {
                                    if tx.send(p).await.is_err() {
                                        return;
                                    }
                                    if i == 0
                                        && let Some(g) = &gate
                                    {
                                        g.notified().await;
                                    }
                                }
                            });
                            let mut resp = http::Response::new(Parts(rx));
                            resp.headers_mut()
                                .insert("content-type", content_type.parse().expect("ct"));
                            if let Some(n) = length {
                                resp.headers_mut()
                                    .insert("content-length", n.to_string().parse().expect("len"));
                            }
                            resp.headers_mut()
                                .insert("x-request-id", "req_mock".parse().expect("v"));
                            resp.headers_mut()
                                .insert("connection", "x-hop".parse().expect("v"));
                            resp.headers_mut().insert("x-hop", "1".parse().expect("v"));
                            Ok::<_, Infallible>(resp)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), svc)
                        .await;
                });
            }
        });
        Mock { addr, seen, gate }
    }
}

/// The tracker's lines, readable by the test.
#[derive(Clone, Default)]
pub struct Lines(pub Arc<Mutex<Vec<Vec<u8>>>>);

impl LineSink for Lines {
    fn line(&mut self, line: Vec<u8>) {
        self.0.lock().expect("lock").push(line);
    }
}

impl Lines {
    /// The lines as JSON values.
    pub fn values(&self) -> Vec<serde_json::Value> {
        self.0
            .lock()
            .expect("lock")
            .iter()
            .map(|l| serde_json::from_slice(l).expect("json line"))
            .collect()
    }

    /// Lines of one type.
    pub fn of_type(&self, t: &str) -> Vec<serde_json::Value> {
        self.values()
            .into_iter()
            .filter(|v| v["type"] == t)
            .collect()
    }
}

/// The proxy in front of `upstream`, listening on 127.0.0.1.
pub async fn start_proxy(
    upstream: SocketAddr,
    inject: Option<InjectRule>,
    record: Option<PathBuf>,
) -> (SocketAddr, Lines, Arc<Proxy>) {
    let settings = ProxySettings {
        upstream: vec![UpstreamSettings {
            prefix: "/".to_owned(),
            url: format!("http://{upstream}"),
            strip_prefix: None,
            inject,
        }],
        record,
        ..ProxySettings::default()
    };
    let lines = Lines::default();
    let tracker = Tracker::new(Box::new(lines.clone()), "t".to_owned());
    let proxy = Arc::new(Proxy::new(&settings, tracker, Box::new(|_| {})).expect("proxy"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(proxy::serve(
        listener,
        proxy.clone(),
        std::future::pending(),
    ));
    (addr, lines, proxy)
}

/// How a response ended, as the client's socket saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The chunked body's terminator arrived.
    Clean,
    /// The connection closed (FIN) without it.
    Closed,
    /// The connection was reset (RST).
    Reset,
}

/// A response as read off the socket.
#[derive(Debug)]
pub struct Got {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub ending: Ending,
}

impl Got {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// POST `body` to `path` over a fresh HTTP/1.1 connection and read the response until the
/// body ends or the connection does.
pub async fn post(addr: SocketAddr, path: &str, body: &str, headers: &[(&str, &str)]) -> Got {
    post_counting(addr, path, body, headers, &AtomicUsize::new(0)).await
}

/// [`post`], adding the number of response bytes read so far to `progress` as they arrive.
pub async fn post_counting(
    addr: SocketAddr,
    path: &str,
    body: &str,
    headers: &[(&str, &str)],
    progress: &AtomicUsize,
) -> Got {
    let mut tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut req = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    tcp.write_all(req.as_bytes()).await.expect("write");
    let mut raw = Vec::new();
    let mut buf = [0u8; 16384];
    let mut ending = Ending::Closed;
    loop {
        match tcp.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => {
                raw.extend_from_slice(&buf[..n]);
                progress.fetch_add(n, Ordering::SeqCst);
                if raw.ends_with(b"\r\n0\r\n\r\n") && dechunk(&raw).1 {
                    ending = Ending::Clean;
                    break;
                }
                if let Some(len) = content_length(&raw) {
                    ending = Ending::Clean;
                    if raw.len() >= len {
                        break;
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                ending = Ending::Reset;
                break;
            }
            Err(e) => panic!("read: {e}"),
        }
    }
    let head_end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("response head")
        + 4;
    let head = String::from_utf8_lossy(&raw[..head_end]).into_owned();
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("status");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked {
        dechunk(&raw[head_end..]).0
    } else {
        raw[head_end..].to_vec()
    };
    Got {
        status,
        headers,
        body,
        ending,
    }
}

/// With a `content-length`: the whole response's length, head included.
fn content_length(raw: &[u8]) -> Option<usize> {
    let head_end = raw.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = String::from_utf8_lossy(&raw[..head_end]).to_ascii_lowercase();
    let v = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))?;
    Some(head_end + v.trim().parse::<usize>().ok()?)
}

/// GET `path` (a fresh connection, `connection: close`).
pub async fn get(addr: SocketAddr, path: &str) -> Got {
    let mut tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let req = format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n");
    tcp.write_all(req.as_bytes()).await.expect("write");
    let mut raw = Vec::new();
    tcp.read_to_end(&mut raw).await.expect("read");
    let head_end = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("head") + 4;
    let head = String::from_utf8_lossy(&raw[..head_end]).into_owned();
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        dechunk(&raw[head_end..]).0
    } else {
        raw[head_end..].to_vec()
    };
    Got {
        status: 200,
        headers: Vec::new(),
        body,
        ending: Ending::Clean,
    }
}

/// Decode a chunked body; `true` when its terminator was there.
fn dechunk(mut raw: &[u8]) -> (Vec<u8>, bool) {
    if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n")
        && raw.starts_with(b"HTTP/")
    {
        raw = &raw[i + 4..];
    }
    let mut out = Vec::new();
    loop {
        let Some(nl) = raw.windows(2).position(|w| w == b"\r\n") else {
            return (out, false);
        };
        let Ok(size) = usize::from_str_radix(String::from_utf8_lossy(&raw[..nl]).trim(), 16) else {
            return (out, false);
        };
        if size == 0 {
            return (out, true);
        }
        let start = nl + 2;
        if raw.len() < start + size + 2 {
            out.extend_from_slice(&raw[start..]);
            return (out, false);
        }
        out.extend_from_slice(&raw[start..start + size]);
        raw = &raw[start + size + 2..];
    }
}

/// A minimal request body for a stream's API.
pub fn request_for(path: &str, user: &str) -> String {
    if path.contains("enerateContent") {
        serde_json::json!({"contents":[{"role":"user","parts":[{"text":user}]}]}).to_string()
    } else if path.ends_with("/responses") {
        serde_json::json!({"model":"gpt-5","stream":true,"input":user}).to_string()
    } else {
        serde_json::json!({"model":"m","stream":true,"messages":[{"role":"user","content":user}]})
            .to_string()
    }
}

/// The `retryscope proxy` binary with `extra` flags in front of `mock`, logging at info:
/// its log lines (stderr) and its proxy and metrics addresses.
pub fn spawn_proxy(
    mock: std::net::SocketAddr,
    extra: &[&str],
) -> (
    std::process::Child,
    std::sync::mpsc::Receiver<String>,
    std::net::SocketAddr,
    std::net::SocketAddr,
) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .args([
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--metrics-addr",
            "127.0.0.1:0",
        ])
        .arg("--upstream")
        .arg(format!("http://{mock}"))
        .args(extra)
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn");
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().expect("stderr");
    std::thread::spawn(move || {
        for l in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let metrics_addr = addr_in(&wait_for(&rx, "serving /metrics"), "addr=");
    let proxy_addr = addr_in(&wait_for(&rx, "proxying"), "listen=");
    (child, rx, proxy_addr, metrics_addr)
}

/// The first log line containing `what` (30 s at most).
pub fn wait_for(lines: &std::sync::mpsc::Receiver<String>, what: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(l) = lines.recv_timeout(Duration::from_millis(200))
            && l.contains(what)
        {
            return l;
        }
    }
    panic!("no `{what}` in the proxy's log");
}

/// The socket address after `key` in a log line.
pub fn addr_in(line: &str, key: &str) -> std::net::SocketAddr {
    let at = line.find(key).expect("key") + key.len();
    line[at..]
        .split_whitespace()
        .next()
        .expect("addr")
        .parse()
        .expect("socket address")
}

/// The bookstore refund session as an Anthropic client sends it: the first request (which
/// offers the refund tool; a naive client sends it again as its retry) and the next one,
/// whose history keeps the spliced text and both refund calls with their results.
pub fn naive_refund_session() -> (String, String) {
    use serde_json::json;
    let user = json!({"role":"user","content":"My book arrived damaged, order ORD-7781."});
    // The agent offers its tool (a cut aims at requests that offer tools, by default).
    let tools = json!([{"name":"issue_refund","input_schema":{"type":"object"}}]);
    let first = json!({"model":"claude-sonnet-4-5","stream":true,"tools":tools,"messages":[user]})
        .to_string();
    let spliced = "Checking order ORD-7781. Checking your order ORD-7781. ";
    let next = json!({"model":"claude-sonnet-4-5","stream":true,"tools":tools,"messages":[
        user,
        {"role":"assistant","content":[
            {"type":"text","text":spliced},
            {"type":"tool_use","id":"toolu_c1","name":"issue_refund","input":{"order_id":"ORD-7781"}},
            {"type":"tool_use","id":"toolu_c7","name":"issue_refund","input":{"order_id":"ORD-7781"}}
        ]},
        {"role":"user","content":[
            {"type":"tool_result","tool_use_id":"toolu_c1","content":"refund issued"},
            {"type":"tool_result","tool_use_id":"toolu_c7","content":"refund issued"}
        ]}
    ]})
    .to_string();
    (first, next)
}
