//! Benchmark of `retryscope proxy`: latency added per chunk, and throughput with many
//! concurrent streams. Prints figures; asserts nothing about speed.
//!
//! ```sh
//! cargo run --release --example bench_proxy -- [--streams 100] [--events 1000] [--paced 20x200]
//! ```
//! A mock upstream on 127.0.0.1 streams Anthropic-shaped SSE events, each stamped with the
//! time it was written. The client reads them directly from the mock, then through the proxy
//! (the real `Proxy`, its tracker writing native lines into a bounded channel read by a
//! thread that runs the ingest path and correlator, as `retryscope proxy` does), and records
//! when each event arrived. Added latency = through-proxy minus direct, at p50 and p99,
//! events paced 1 ms apart (a model streams tokens at 20-100 per second per stream);
//! throughput = unpaced events with `--streams` streams at once.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use retryscope::proxy::{LineSink, Offer, Proxy, ProxySettings, Tracker, UpstreamSettings};
use retryscope_core::correlate::{Correlator, CorrelatorConfig};
use retryscope_core::cost::PriceTable;
use retryscope_core::decode::Format;
use retryscope_core::ingest::{Ingest, Source};

static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

fn now_ns() -> u64 {
    BASE.get_or_init(Instant::now).elapsed().as_nanos() as u64
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

/// The mock: `POST /v1/messages?n=N&pace_us=P` streams N text deltas, P µs apart.
async fn mock() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let _ = tcp.set_nodelay(true);
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(|req: http::Request<Incoming>| async move {
                    let q = req.uri().query().unwrap_or("").to_owned();
                    let arg = |k: &str| {
                        q.split('&')
                            .find_map(|kv| kv.strip_prefix(&format!("{k}=")))
                            .and_then(|v| v.parse::<u64>().ok())
                            .unwrap_or(0)
                    };
                    let (n, pace) = (arg("n"), arg("pace_us"));
                    let _ = req.into_body().collect().await;
                    let (tx, rx) = mpsc::channel(64);
                    tokio::spawn(async move {
                        let start = r#"{"type":"message_start","message":{"id":"msg_b","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"usage":{"input_tokens":1000,"output_tokens":1}}}"#;
                        let _ = tx
                            .send(Bytes::from(format!(
                                "event: message_start\ndata: {start}\n\n"
                            )))
                            .await;
                        let mut next = tokio::time::Instant::now();
                        for i in 0..n {
                            if pace > 0 {
                                next += Duration::from_micros(pace);
                                tokio::time::sleep_until(next).await;
                            }
                            let ev = format!(
                                "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"token {i} of the answer \"}},\"t\":{}}}\n\n",
                                now_ns()
                            );
                            if tx.send(Bytes::from(ev)).await.is_err() {
                                return;
                            }
                        }
                        let end = "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":500}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
                        let _ = tx.send(Bytes::from_static(end.as_bytes())).await;
                    });
                    let mut resp = http::Response::new(Parts(rx));
                    resp.headers_mut()
                        .insert("content-type", "text/event-stream".parse().expect("ct"));
                    Ok::<_, Infallible>(resp)
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    addr
}

/// The tracker's lines into a bounded channel, as `retryscope proxy` feeds its engine
/// (`EngineSink`): `offer` never waits, `line` (the proxy's feed thread) does.
struct Feed(SyncSender<Vec<u8>>);

impl LineSink for Feed {
    fn line(&mut self, line: Vec<u8>) {
        let _ = self.0.send(line);
    }

    fn offer(&mut self, line: Vec<u8>) -> Offer {
        match self.0.try_send(line) {
            Ok(()) => Offer::Taken,
            Err(TrySendError::Full(l)) => Offer::Full(l),
            Err(TrySendError::Disconnected(_)) => Offer::Closed,
        }
    }
}

async fn proxy(upstream: SocketAddr) -> (SocketAddr, Arc<Proxy>, std::thread::JoinHandle<u64>) {
    let (tx, rx) = sync_channel::<Vec<u8>>(16_384);
    let engine = std::thread::spawn(move || {
        let mut ingest = Ingest::new(
            Correlator::new(CorrelatorConfig::default(), Arc::new(PriceTable::builtin())),
            Format::Native,
        );
        let id = ingest.stream(Source::Proxy, "<proxy>");
        let mut out = Vec::new();
        let mut n = 0;
        for line in rx {
            ingest.line(id, None, &line, None, &mut out, &mut |_| {});
            out.clear();
            n += 1;
        }
        n
    });
    let settings = ProxySettings {
        upstream: vec![UpstreamSettings {
            prefix: "/".into(),
            url: format!("http://{upstream}"),
            strip_prefix: None,
            inject: None,
        }],
        ..ProxySettings::default()
    };
    let tracker = Tracker::new(Box::new(Feed(tx)), "bench".into());
    let p = Arc::new(Proxy::new(&settings, tracker, Box::new(|_| {})).expect("proxy"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(retryscope::proxy::serve(
        listener,
        p.clone(),
        std::future::pending(),
    ));
    (addr, p, engine)
}

/// One stream: the arrival delay of each stamped event, in ns; and the bytes read.
async fn stream(addr: SocketAddr, k: u64, n: u64, pace_us: u64) -> (Vec<u64>, usize) {
    stream_at(addr, "/v1/messages", k, n, pace_us).await
}

/// `path` `/v1/messages` is a tracked model call; another path is only forwarded.
async fn stream_at(
    addr: SocketAddr,
    path: &str,
    k: u64,
    n: u64,
    pace_us: u64,
) -> (Vec<u64>, usize) {
    let body = format!(
        r#"{{"model":"claude-sonnet-4-5","stream":true,"messages":[{{"role":"user","content":"question {k}"}}]}}"#
    );
    let mut tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let _ = tcp.set_nodelay(true);
    let req = format!(
        "POST {path}?n={n}&pace_us={pace_us} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    tcp.write_all(req.as_bytes()).await.expect("write");
    let mut delays = Vec::with_capacity(n as usize);
    let mut buf = vec![0u8; 65536];
    let mut pending = Vec::new();
    let mut total = 0;
    loop {
        let r = tcp.read(&mut buf).await.expect("read");
        if r == 0 {
            break;
        }
        let now = now_ns();
        total += r;
        pending.extend_from_slice(&buf[..r]);
        // Stamps of complete events in what arrived.
        let mut from = 0;
        while let Some(i) = memchr::memmem::find(&pending[from..], b",\"t\":") {
            let s = from + i + 5;
            let Some(e) = pending[s..].iter().position(|b| *b == b'}') else {
                break;
            };
            if let Ok(t) = std::str::from_utf8(&pending[s..s + e])
                .unwrap_or("")
                .parse::<u64>()
            {
                delays.push(now.saturating_sub(t));
            }
            from = s + e;
        }
        pending.drain(..from);
        if memchr::memmem::find(&pending, b"message_stop").is_some()
            && pending.ends_with(b"0\r\n\r\n")
        {
            break;
        }
    }
    (delays, total)
}

fn pct(v: &mut [u64], p: f64) -> f64 {
    v.sort_unstable();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v.get(i).copied().unwrap_or(0) as f64 / 1000.0
}

fn arg(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| default.to_owned())
}

fn main() {
    let streams: u64 = arg("--streams", "100").parse().expect("--streams");
    let events: u64 = arg("--events", "1000").parse().expect("--events");
    let paced = arg("--paced", "20x200");
    let (pstreams, pevents) = paced
        .split_once('x')
        .map(|(a, b)| (a.parse().expect("NxM"), b.parse().expect("NxM")))
        .expect("--paced NxM");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let up = mock().await;
        let (px, p, _engine) = proxy(up).await;
        // Latency: sequential paced streams, direct then through the proxy, alternating.
        let (mut direct, mut through) = (Vec::new(), Vec::new());
        for k in 0..pstreams {
            direct.extend(stream(up, k, pevents, 1000).await.0);
            through.extend(stream(px, k, pevents, 1000).await.0);
        }
        let (d50, d99) = (pct(&mut direct, 0.5), pct(&mut direct, 0.99));
        let (t50, t99) = (pct(&mut through, 0.5), pct(&mut through, 0.99));
        println!("latency per chunk, {} paced events (1 ms apart), {pstreams} streams of {pevents}:", through.len());
        println!("  direct        p50 {d50:8.1} µs   p99 {d99:8.1} µs");
        println!("  through proxy p50 {t50:8.1} µs   p99 {t99:8.1} µs");
        println!("  added         p50 {:8.1} µs   p99 {:8.1} µs", t50 - d50, t99 - d99);
        // Throughput: concurrent unpaced streams.
        for (label, addr, path) in [
            ("direct", up, "/v1/messages"),
            ("proxy, forward only", px, "/v1/other"),
            ("proxy, tracked", px, "/v1/messages"),
        ] {
            let start = Instant::now();
            let tasks: Vec<_> = (0..streams).map(|k| tokio::spawn(stream_at(addr, path, 10_000 + k, events, 0))).collect();
            let (mut n, mut bytes) = (0usize, 0usize);
            for t in tasks {
                let (d, b) = t.await.expect("task");
                n += d.len();
                bytes += b;
            }
            let secs = start.elapsed().as_secs_f64();
            println!(
                "throughput {label:19}: {streams} concurrent streams x {events} events = {n} events in {secs:.2} s: {:.0} events/s, {:.1} MB/s",
                n as f64 / secs,
                bytes as f64 / secs / 1e6
            );
        }
        let s = p.stats();
        println!("proxy tracker: {} requests, {} retries", s.requests, s.retries);
    });
}
