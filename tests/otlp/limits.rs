//! The OTLP receiver under the attacks of issue 24, in process with small limits: the token is
//! checked before any byte of a gRPC body is read; gzip inflation is bounded across all the
//! messages of a request; a request whose decoded size cannot fit is refused before it is
//! decoded, even into an empty queue; a body that trickles is cut at the body-read deadline.
//! Each refusal is counted. (Clients here are hand-made: real exporters do not send these.)

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::Frame;
use hyper_util::rt::{TokioExecutor, TokioIo};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use prost::Message;
use retryscope::internal_events::OtlpReport;
use retryscope::listener::{Gate, Limits, Name};
use retryscope::sink::metrics::{Metrics, MetricsConfig};
use retryscope::source::otlp::auth::Token;
use retryscope::source::otlp::{Queue, Receiver, ReceiverConfig, grpc, http};
use tokio::sync::watch;

struct Served {
    http: SocketAddr,
    grpc: SocketAddr,
    metrics: Arc<Metrics>,
    queue: Arc<Queue>,
    _stop: watch::Sender<bool>,
}

async fn serve(max_request_bytes: usize, queue_bytes: u64) -> Served {
    let metrics = Arc::new(Metrics::new(MetricsConfig::default()).expect("metrics"));
    let queue = Arc::new(Queue::new(queue_bytes));
    let limits = Limits {
        body_timeout_ms: 400,
        ..Limits::default()
    };
    let rx = Arc::new(Receiver::new(
        queue.clone(),
        Arc::new(OtlpReport {
            metrics: metrics.clone(),
        }),
        ReceiverConfig {
            max_request_bytes,
            token: Some(Token::new("s3cret")),
            body_timeout: limits.body_timeout(),
        },
    ));
    let (stop_tx, stop) = watch::channel(false);
    let h = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let g = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let (http_addr, grpc_addr) = (h.local_addr().expect("addr"), g.local_addr().expect("a"));
    let gate = |n| Gate::new(n, limits.clone(), Some(metrics.clone()));
    tokio::spawn(http::serve_gated(
        h,
        None,
        rx.clone(),
        gate(Name::OtlpHttp),
        stop.clone(),
    ));
    tokio::spawn(grpc::serve_gated(g, None, rx, gate(Name::OtlpGrpc), stop));
    Served {
        http: http_addr,
        grpc: grpc_addr,
        metrics,
        queue,
        _stop: stop_tx,
    }
}

fn series(metrics: &Metrics, key: &str) -> f64 {
    let (_, text) = metrics.render();
    let text = String::from_utf8_lossy(&text);
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

fn requests(metrics: &Metrics, protocol: &str, outcome: &str) -> f64 {
    series(
        metrics,
        &format!(
            "retryscope_otlp_receiver_requests_total{{signal=\"logs\",protocol=\"{protocol}\",outcome=\"{outcome}\"}}"
        ),
    )
}

/// A body that sends `first` and then never ends (nor sends more).
struct Endless(Option<Bytes>);

impl http_body::Body for Endless {
    type Data = Bytes;
    type Error = std::convert::Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.0.take() {
            Some(b) => Poll::Ready(Some(Ok(Frame::data(b)))),
            None => Poll::Pending,
        }
    }
}

/// One gRPC call over a fresh HTTP/2 connection; the `grpc-status` and message.
async fn grpc_call<B>(
    addr: SocketAddr,
    body: B,
    token: Option<&str>,
    gzip: bool,
) -> (String, String)
where
    B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .expect("h2");
    tokio::spawn(conn);
    let mut req = ::http::Request::post(format!(
        "http://{addr}/opentelemetry.proto.collector.logs.v1.LogsService/Export"
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    if gzip {
        req = req.header("grpc-encoding", "gzip");
    }
    let resp = send
        .send_request(req.body(body).expect("request"))
        .await
        .expect("response");
    let h = resp.headers();
    let get = |k: &str| {
        h.get(k)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    (get("grpc-status"), get("grpc-message"))
}

fn frame(compressed: bool, msg: &[u8]) -> Vec<u8> {
    let mut f = vec![u8::from(compressed)];
    f.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    f.extend_from_slice(msg);
    f
}

fn gz(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(data).expect("gzip");
    e.finish().expect("gzip")
}

fn empty_records(n: usize) -> Vec<u8> {
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            scope_logs: vec![ScopeLogs {
                log_records: vec![LogRecord::default(); n],
                ..ScopeLogs::default()
            }],
            ..ResourceLogs::default()
        }],
    }
    .encode_to_vec()
}

#[tokio::test]
async fn grpc_checks_the_token_before_reading_the_body() {
    let s = serve(1 << 20, 64 << 20).await;
    // A message header promising 1 MB, then nothing: the old receiver read the body first
    // (and waited for it) before tonic decoded it and the token was looked at.
    let head = Bytes::from(vec![0, 0, 0x0f, 0, 0]);
    let t = Instant::now();
    let (status, _) = tokio::time::timeout(
        Duration::from_secs(3),
        grpc_call(s.grpc, Endless(Some(head.clone())), None, false),
    )
    .await
    .expect("answered without waiting for the body");
    assert_eq!(status, "16", "UNAUTHENTICATED");
    assert!(t.elapsed() < Duration::from_secs(1));
    let (status, _) = grpc_call(s.grpc, Endless(Some(head)), Some("wrong"), true).await;
    assert_eq!(status, "16");
    assert_eq!(requests(&s.metrics, "grpc", "unauthorized"), 2.0);
}

#[tokio::test]
async fn grpc_inflation_is_bounded_across_all_messages_and_refused_as_resource_exhausted() {
    let limit = 256 << 10;
    let s = serve(limit, 64 << 20).await;
    // Three messages, each under the limit decompressed, together over it.
    let part = gz(&vec![0u8; limit / 2]);
    let body: Vec<u8> = [frame(true, &part), frame(true, &part), frame(true, &part)].concat();
    let full = http_body_util::Full::new(Bytes::from(body));
    let (status, msg) = grpc_call(s.grpc, full, Some("s3cret"), true).await;
    assert_eq!(status, "8", "RESOURCE_EXHAUSTED: {msg}");
    assert!(msg.contains("limit%20of%20262144%20bytes"), "{msg}");
    // A single-message bomb, and the same without a token (refused as unauthenticated first).
    let bomb = frame(true, &gz(&vec![0u8; 4 << 20]));
    let full = http_body_util::Full::new(Bytes::from(bomb.clone()));
    let (status, _) = grpc_call(s.grpc, full, Some("s3cret"), true).await;
    assert_eq!(status, "8");
    let full = http_body_util::Full::new(Bytes::from(bomb));
    let (status, _) = grpc_call(s.grpc, full, None, true).await;
    assert_eq!(status, "16");
    assert_eq!(requests(&s.metrics, "grpc", "too_large"), 2.0);
    assert_eq!(s.queue.reserved(), 0, "reservations given back");
}

/// POST over HTTP/1.1; the status.
fn post(addr: SocketAddr, headers: &str, body: &[u8]) -> u16 {
    let mut c = std::net::TcpStream::connect(addr).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let head = format!(
        "POST /v1/logs HTTP/1.1\r\nhost: x\r\nauthorization: Bearer s3cret\r\ncontent-type: application/x-protobuf\r\n{headers}content-length: {}\r\n\r\n",
        body.len()
    );
    c.write_all(head.as_bytes()).expect("write");
    c.write_all(body).expect("write");
    let mut buf = [0u8; 4096];
    let n = c.read(&mut buf).unwrap_or(0);
    std::str::from_utf8(&buf[..n])
        .ok()
        .and_then(|t| t.get(9..12))
        .and_then(|t| t.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_records_cannot_fit_is_refused_before_decoding_even_when_idle() {
    // Issue 24: a 7.8 KB gzip request of empty records was accepted into an empty queue and
    // decoded to 2.56 GiB. Here 1,000,000 empty records (2 MB, ~2 KB gzip'd) against 64 MiB.
    let s = serve(16 << 20, 64 << 20).await;
    let body = gz(&empty_records(1_000_000));
    assert!(body.len() < 20_000, "{}", body.len());
    let addr = s.http;
    let status =
        tokio::task::spawn_blocking(move || post(addr, "content-encoding: gzip\r\n", &body))
            .await
            .expect("join");
    assert_eq!(status, 413);
    assert_eq!(requests(&s.metrics, "http_protobuf", "too_large"), 1.0);
    assert_eq!(s.queue.depth(), (0, 0));
    assert_eq!(s.queue.reserved(), 0);
    // The same over gRPC: RESOURCE_EXHAUSTED.
    let full = http_body_util::Full::new(Bytes::from(frame(true, &gz(&empty_records(1_000_000)))));
    let (status, _) = grpc_call(s.grpc, full, Some("s3cret"), true).await;
    assert_eq!(status, "8");
    // One record with 4,000,000 empty attributes (8 MB): its lines (32 MB) would fit the
    // queue, but decoding it builds ~220 MB of messages first: refused before decoding.
    let attrs = ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            scope_logs: vec![ScopeLogs {
                log_records: vec![LogRecord {
                    attributes: vec![KeyValue::default(); 4_000_000],
                    ..LogRecord::default()
                }],
                ..ScopeLogs::default()
            }],
            ..ResourceLogs::default()
        }],
    }
    .encode_to_vec();
    let addr = s.http;
    let status = tokio::task::spawn_blocking(move || post(addr, "", &attrs))
        .await
        .expect("join");
    assert_eq!(status, 413);
    assert_eq!(requests(&s.metrics, "http_protobuf", "too_large"), 2.0);
    // A request that fits is accepted.
    let addr = s.http;
    let small = empty_records(10);
    let status = tokio::task::spawn_blocking(move || post(addr, "", &small))
        .await
        .expect("join");
    assert_eq!(status, 200);
    assert_eq!(s.queue.depth().0, 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_trickles_is_cut_at_the_deadline_and_counted() {
    let s = serve(1 << 20, 64 << 20).await;
    let addr = s.http;
    let t = Instant::now();
    let answer = tokio::task::spawn_blocking(move || {
        let mut c = std::net::TcpStream::connect(addr).expect("connect");
        c.write_all(
            b"POST /v1/logs HTTP/1.1\r\nhost: x\r\nauthorization: Bearer s3cret\r\ncontent-type: application/x-protobuf\r\ncontent-length: 100\r\n\r\n",
        )
        .expect("write");
        // One byte every 150 ms: never idle, never done.
        c.set_read_timeout(Some(Duration::from_millis(150)))
            .expect("timeout");
        let mut buf = [0u8; 4096];
        for _ in 0..40 {
            if c.write_all(b"x").is_err() {
                break;
            }
            match c.read(&mut buf) {
                Ok(n) if n > 0 => return String::from_utf8_lossy(&buf[..n]).into_owned(),
                Ok(_) => return String::new(),
                Err(_) => {}
            }
        }
        String::new()
    })
    .await
    .expect("join");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert_eq!(requests(&s.metrics, "http_protobuf", "too_slow"), 1.0);
    assert_eq!(
        series(
            &s.metrics,
            "retryscope_listener_connections_refused_total{listener=\"otlp_http\",reason=\"body_timeout\"}"
        ),
        1.0
    );
}
