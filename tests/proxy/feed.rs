//! `retryscope proxy` and a slow engine (issue 22): the lines of one request wait for the
//! engine without holding back any other request's response, and reach it in the order the
//! tracker built them, so the findings are those of an engine that kept up.
//!
//! The engine here is the real feed sink (`EngineSink`) over a channel of one line that the
//! test does not drain until it says so.

use crate::proxy_support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use proxy_support::{Ending, Got, Lines, Mock, Stream, post, post_counting, request_for};
use retryscope::proxy::{
    EngineSink, LineSink, Proxy, ProxyNote, ProxySettings, Tracker, UpstreamSettings,
};
use retryscope::run::FeedItem;
use retryscope_core::correlate::{Correlator, CorrelatorConfig, Output};
use retryscope_core::cost::PriceTable;
use retryscope_core::decode::Format;
use retryscope_core::ingest::{Ingest, Source};
use serde_json::{Value, json};

const CHAT: &str = "/v1/chat/completions";

/// An OpenAI Chat stream of `parts` text deltas of about `width` characters, then its finish.
fn chat_stream(id: &str, parts: usize, width: usize) -> Stream {
    let pad = "x".repeat(width);
    let chunk = |delta: Value, finish: Value| {
        let c = json!({"id":id,"object":"chat.completion.chunk","model":"gpt-4o",
            "choices":[{"index":0,"delta":delta,"finish_reason":finish}]});
        Bytes::from(format!("data: {c}\n\n"))
    };
    let mut out: Vec<Bytes> = (0..parts)
        .map(|i| chunk(json!({"content": format!("{i} {pad}")}), Value::Null))
        .collect();
    out.push(chunk(json!({}), json!("stop")));
    out.push(Bytes::from_static(b"data: [DONE]\n\n"));
    Stream {
        name: id.to_owned(),
        path: CHAT.to_owned(),
        content_type: "text/event-stream",
        parts: out,
    }
}

/// The proxy in front of `upstream`, its tracker writing to `sink`.
async fn proxy_with(
    upstream: std::net::SocketAddr,
    sink: Box<dyn LineSink>,
) -> std::net::SocketAddr {
    proxy_noting(upstream, sink, Box::new(|_| {})).await
}

/// [`proxy_with`], telling `notes` what it counts.
async fn proxy_noting(
    upstream: std::net::SocketAddr,
    sink: Box<dyn LineSink>,
    notes: Box<dyn Fn(ProxyNote) + Send + Sync>,
) -> std::net::SocketAddr {
    let settings = ProxySettings {
        upstream: vec![UpstreamSettings {
            prefix: "/".to_owned(),
            url: format!("http://{upstream}"),
            strip_prefix: None,
            inject: None,
        }],
        ..ProxySettings::default()
    };
    let tracker = Tracker::new(sink, "t".to_owned());
    let proxy = Arc::new(Proxy::new(&settings, tracker, notes).expect("proxy"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(retryscope::proxy::serve(
        listener,
        proxy,
        std::future::pending(),
    ));
    addr
}

/// The engine catching up: every line sent from now on, collected.
fn drain(rx: Receiver<FeedItem>) -> Arc<Mutex<Vec<Vec<u8>>>> {
    let got = Arc::new(Mutex::new(Vec::new()));
    let into = got.clone();
    std::thread::spawn(move || {
        for item in rx {
            if let FeedItem::Line { bytes, .. } = item {
                into.lock().expect("lock").push(bytes);
            }
        }
    });
    got
}

/// The collected lines once there are `n` of them (10 s at most).
async fn lines_when(got: &Mutex<Vec<Vec<u8>>>, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let have = got.lock().expect("lock").len();
        if have >= n || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    got.lock()
        .expect("lock")
        .iter()
        .map(|l| serde_json::from_slice(l).expect("json line"))
        .collect()
}

/// The mock upstream and the proxy, on a runtime of their own: a proxy that stalls its runtime
/// (before issue 22, a worker blocked on the tracker's lock while the lock's holder waited for
/// the engine) then fails the test's deadlines, which run on the test's runtime, instead of
/// freezing them.
struct Server(Option<tokio::runtime::Runtime>);

impl Server {
    fn new() -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("server runtime");
        Server(Some(rt))
    }

    fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.0.as_ref().expect("runtime").block_on(f)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// The test's side (clients, deadlines).
fn client() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("client runtime")
}

/// The payloads of a stream's `data:` events, as JSON (`[DONE]` is not one).
fn payloads(s: &Stream) -> Vec<Value> {
    s.parts
        .iter()
        .filter_map(|p| {
            let text = String::from_utf8_lossy(p);
            serde_json::from_str(text.trim().strip_prefix("data: ")?).ok()
        })
        .collect()
}

#[test]
fn a_stalled_engine_holds_back_only_the_request_whose_lines_wait() {
    // A streams about 1 MiB of lines, far more than one request may leave waiting; B is small.
    let a = chat_stream("a", 1_000, 1_000);
    let b = chat_stream("b", 5, 20);
    let server = Server::new();
    let mock = server.block_on(Mock::start(vec![a.clone(), b.clone()], None));
    let (tx, rx) = sync_channel(1);
    let addr = server.block_on(proxy_with(mock.addr, Box::new(EngineSink::new(tx))));
    client().block_on(async move {
        let progress = Arc::new(AtomicUsize::new(0));
        let a_client = {
            let progress = progress.clone();
            let body = request_for(CHAT, "request A");
            tokio::spawn(async move { post_counting(addr, CHAT, &body, &[], &progress).await })
        };
        // A streams until its lines wait for the engine, then stops (no more bytes arrive).
        let deadline = Instant::now() + Duration::from_secs(20);
        let (mut seen, mut since) = (usize::MAX, Instant::now());
        while Instant::now() < deadline && since.elapsed() < Duration::from_millis(500) {
            let now = progress.load(Ordering::SeqCst);
            if now != seen {
                (seen, since) = (now, Instant::now());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            !a_client.is_finished(),
            "A cannot finish while the engine takes none of its lines"
        );

        let started = Instant::now();
        let got_b = tokio::time::timeout(
            Duration::from_secs(5),
            post(addr, CHAT, &request_for(CHAT, "request B"), &[]),
        )
        .await;
        let b_took = started.elapsed();
        let a_finished_while_stalled = a_client.is_finished();
        // The engine catches up.
        let engine = drain(rx);
        let got_b: Got =
            got_b.expect("B's response is delivered while A's lines wait for the engine");
        assert_eq!(got_b.status, 200);
        assert_eq!(got_b.ending, Ending::Clean);
        assert_eq!(got_b.body, b.body(), "B byte for byte");
        assert!(b_took < Duration::from_secs(5), "B took {b_took:?}");
        assert!(
            !a_finished_while_stalled,
            "A waits for the engine: its lines are over what one request may leave waiting"
        );
        let got_a = tokio::time::timeout(Duration::from_secs(30), a_client)
            .await
            .expect("A finishes once the engine drains")
            .expect("A's client");
        assert_eq!(got_a.ending, Ending::Clean);
        assert_eq!(got_a.body, a.body(), "A byte for byte");

        // Every line reached the engine, each request's in the order it was built, A's start
        // first (A began first).
        let want = 2 * 2 + payloads(&a).len() + payloads(&b).len();
        let lines = lines_when(&engine, want).await;
        assert_eq!(lines.len(), want);
        assert_eq!(lines[0]["type"], "turn_start");
        let first = lines[0]["turn"].as_str().expect("turn").to_owned();
        for (stream, turn) in [(&a, first.clone()), (&b, other_turn(&lines, &first))] {
            let mine: Vec<&Value> = lines
                .iter()
                .filter(|l| l["turn"] == turn.as_str())
                .collect();
            assert_eq!(mine[0]["type"], "turn_start");
            assert_eq!(mine[1]["type"], "attempt_start");
            assert!(mine[2..].iter().all(|l| l["type"] == "provider_chunk"));
            let chunks: Vec<Value> = mine[2..].iter().map(|l| l["data"].clone()).collect();
            assert!(
                chunks == payloads(stream),
                "{}'s chunks in the order streamed",
                stream.name
            );
        }
    });
}

/// The turn of `lines` that is not `first`.
fn other_turn(lines: &[Value], first: &str) -> String {
    lines
        .iter()
        .filter_map(|l| l["turn"].as_str())
        .find(|t| *t != first)
        .expect("a second turn")
        .to_owned()
}

/// One Anthropic attempt of the article's help-desk turn, with refund call `id`; `cut`: it
/// ends after the call, without its finish (the upstream's body just ends).
fn attempt(id: &str, opening: &str, cut: bool) -> Stream {
    let mut events = vec![
        json!({"type":"message_start","message":{"id":format!("msg_{id}"),"type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"usage":{"input_tokens":1250,"output_tokens":1}}}),
        json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":opening}}),
        json!({"type":"content_block_stop","index":0}),
        json!({"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":id,"name":"issue_refund","input":{}}}),
        json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"order_id\": \"ORD-7781\"}"}}),
        json!({"type":"content_block_stop","index":1}),
    ];
    if !cut {
        events.push(json!({"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":48}}));
        events.push(json!({"type":"message_stop"}));
    }
    Stream {
        name: id.to_owned(),
        path: "/v1/messages".to_owned(),
        content_type: "text/event-stream",
        parts: events
            .iter()
            .map(|e| {
                let t = e["type"].as_str().unwrap_or("");
                Bytes::from(format!("event: {t}\ndata: {e}\n\n"))
            })
            .collect(),
    }
}

/// A naive client's session: the first attempt breaks off after its refund call, the client
/// retries (the same request), then sends both calls' results. Returns each response's end.
async fn naive_session(addr: std::net::SocketAddr) -> Vec<Ending> {
    let (first, next) = proxy_support::naive_refund_session();
    let mut ends = Vec::new();
    for body in [&first, &first, &next] {
        let got = tokio::time::timeout(
            Duration::from_secs(5),
            post(addr, "/v1/messages", body, &[]),
        )
        .await;
        match got {
            Ok(g) => ends.push(g.ending),
            Err(_) => break,
        }
    }
    ends
}

fn session_mock_script() -> Vec<Stream> {
    vec![
        attempt("toolu_c1", "Checking order ORD-7781. ", true),
        attempt("toolu_c7", "Checking your order ORD-7781. ", false),
        attempt("toolu_done", "Done.", false),
    ]
}

/// A line without its time (each run has its own clock).
fn without_ts(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("ts");
    }
    v
}

/// Findings (kind, turn, call) of the lines, through the ingest path and correlator.
fn findings(lines: &[Vec<u8>]) -> Vec<(String, String, Option<String>)> {
    let mut ingest = Ingest::new(
        Correlator::new(CorrelatorConfig::default(), Arc::new(PriceTable::builtin())),
        Format::Native,
    );
    let id = ingest.stream(Source::Proxy, "<proxy>");
    let mut out = Vec::new();
    for l in lines {
        ingest.line(id, None, l, None, &mut out, &mut |_| {});
    }
    ingest.close_all(&mut out, &mut |_| {});
    let mut f: Vec<_> = out
        .iter()
        .filter_map(|o| match o {
            Output::Finding(f, _) => Some((
                f.kind.as_str().to_owned(),
                f.turn.clone(),
                f.call_id.clone(),
            )),
            _ => None,
        })
        .collect();
    f.sort();
    f
}

#[test]
fn a_retry_while_the_engine_is_stalled_reaches_it_in_order_with_the_same_findings() {
    // The reference: an engine that takes every line at once.
    let server = Server::new();
    let mock = server.block_on(Mock::start(session_mock_script(), None));
    let lines = Lines::default();
    let addr = server.block_on(proxy_with(mock.addr, Box::new(lines.clone())));
    let ends = client().block_on(naive_session(addr));
    assert_eq!(ends, [Ending::Clean; 3]);
    let reference = lines.0.lock().expect("lock").clone();
    let want = findings(&reference);
    assert!(
        want.iter().any(|(k, _, _)| k == "abandoned_tool_executed"),
        "{want:?}"
    );

    // The same session while the engine takes nothing: every response still comes back,
    // then the engine catches up.
    let mock = server.block_on(Mock::start(session_mock_script(), None));
    let (tx, rx) = sync_channel(1);
    let addr = server.block_on(proxy_with(mock.addr, Box::new(EngineSink::new(tx))));
    let ends = client().block_on(naive_session(addr));
    let engine = drain(rx);
    assert_eq!(
        ends,
        [Ending::Clean; 3],
        "every response of the session while the engine took no line"
    );
    let got = client().block_on(lines_when(&engine, reference.len()));
    assert_eq!(
        got.iter().map(without_ts).collect::<Vec<_>>(),
        reference
            .iter()
            .map(|l| without_ts(&serde_json::from_slice(l).expect("json")))
            .collect::<Vec<_>>(),
        "the engine sees the lines in the order the tracker built them"
    );
    let got: Vec<Vec<u8>> = engine.lock().expect("lock").clone();
    assert_eq!(findings(&got), want);
}

#[test]
fn a_closed_engine_loses_the_lines_and_the_requests_are_still_proxied() {
    let server = Server::new();
    let mock = server.block_on(Mock::start(session_mock_script(), None));
    let lines = Lines::default();
    let addr = server.block_on(proxy_with(mock.addr, Box::new(lines.clone())));
    assert_eq!(client().block_on(naive_session(addr)), [Ending::Clean; 3]);
    let built = lines.0.lock().expect("lock").len() as u64;

    // The engine has stopped (its end of the channel is gone).
    let mock = server.block_on(Mock::start(session_mock_script(), None));
    let (tx, rx) = sync_channel(1);
    drop(rx);
    let lost = Arc::new(AtomicUsize::new(0));
    let counted = lost.clone();
    let notes = Box::new(move |n: ProxyNote| {
        if let ProxyNote::FeedLost { lines } = n {
            counted.fetch_add(lines as usize, Ordering::SeqCst);
        }
    });
    let addr = server.block_on(proxy_noting(
        mock.addr,
        Box::new(EngineSink::new(tx)),
        notes,
    ));
    assert_eq!(
        client().block_on(naive_session(addr)),
        [Ending::Clean; 3],
        "every response, without an engine"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while lost.load(Ordering::SeqCst) < built as usize && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        lost.load(Ordering::SeqCst) as u64,
        built,
        "every line counted as lost"
    );
}
