//! End-to-end trace export: the bookstore examples, run through the real correlator, are
//! exported by `TraceSink` to the OTLP receiver in `common/otlp_receiver.rs` (gRPC and HTTP on
//! 127.0.0.1). A dead and a hanging endpoint check that ingestion
//! never stalls and that losses are counted.

use crate::otlp_receiver;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use opentelemetry_proto::tonic::trace::v1::Span;

use otlp_receiver::{
    Seen, attrs, dead_port, serve_grpc, serve_hanging, serve_http, serve_http_slow,
};
use retryscope::sink::traces::{
    Protocol, SpanOptions, TraceExportConfig, TraceSink, TraceStats, turn_spans,
};
use retryscope_core::correlate::{Correlator, CorrelatorConfig, Output};
use retryscope_core::cost::PriceTable;
use retryscope_core::decode::SkipCounts;
use retryscope_core::decode::native::{NativeLine, decode_line};
use retryscope_core::report::TurnReport;

const NAIVE: &str = include_str!("../../examples/bookstore/naive.jsonl");
const RESET: &str = include_str!("../../examples/bookstore/reset.jsonl");
const LATE: &str = include_str!("../../examples/bookstore/reset-late-exec.jsonl");
/// 2026-11-12T10:00:00.000Z in nanoseconds.
const T0_NS: u64 = 1_794_477_600_000 * 1_000_000;
const MS: u64 = 1_000_000;
const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

// ---------------------------------------------------------------------------------------
// Input: the bookstore turns, through the real correlator.

fn report(lines: &str, turn_id: &str) -> TurnReport {
    let lines = lines.replace(
        "\"turn\":\"bookstore-1\"",
        &format!("\"turn\":\"{turn_id}\""),
    );
    let cfg = CorrelatorConfig {
        idle_timeout_ms: None,
        capture_content: true,
        ..CorrelatorConfig::default()
    };
    let mut c = Correlator::new(cfg, Arc::new(PriceTable::builtin()));
    let mut out = Vec::new();
    let mut skips = SkipCounts::default();
    for (i, line) in lines.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        match decode_line(line.as_bytes(), &mut skips) {
            Ok(NativeLine::Event(ev)) => c.observe(&ev, 1_000 + i as i64, &mut out),
            other => panic!("line {i} did not decode: {other:?}"),
        }
    }
    c.close_all(&mut out);
    let mut reports: Vec<TurnReport> = out
        .into_iter()
        .filter_map(|o| match o {
            Output::TurnClosed(r) => Some(*r),
            _ => None,
        })
        .collect();
    assert_eq!(reports.len(), 1);
    reports.remove(0)
}

/// The three examples under distinct turn ids (they share `bookstore-1`, which would make
/// them one trace), plus the naive one joining an agent's trace through a traceparent.
fn bookstore() -> Vec<TurnReport> {
    let mut joined = report(NAIVE, "joined");
    joined.traceparent = Some(TRACEPARENT.to_owned());
    vec![
        report(NAIVE, "naive"),
        report(RESET, "reset"),
        report(LATE, "late"),
        joined,
    ]
}

// ---------------------------------------------------------------------------------------
// Comparing what was sent with what was received.

fn otel_to_string(v: &opentelemetry::Value) -> String {
    use opentelemetry::{Array, Value};
    match v {
        Value::String(s) => s.as_str().to_owned(),
        Value::I64(i) => i.to_string(),
        Value::F64(d) => d.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Array(Array::String(a)) => format!(
            "[{}]",
            a.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(",")
        ),
        other => format!("{other:?}"),
    }
}

fn otel_attrs(kvs: &[opentelemetry::KeyValue]) -> BTreeMap<String, String> {
    kvs.iter()
        .map(|kv| (kv.key.as_str().to_owned(), otel_to_string(&kv.value)))
        .collect()
}

fn ns(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64
}

/// Everything a backend sees of a span, in one comparable value.
#[derive(Debug, PartialEq)]
struct Seenspan {
    trace_id: Vec<u8>,
    span_id: Vec<u8>,
    parent: Vec<u8>,
    parent_remote: bool,
    name: String,
    kind: i32,
    start_ns: u64,
    end_ns: u64,
    attributes: BTreeMap<String, String>,
    events: Vec<(String, u64, BTreeMap<String, String>)>,
    /// Span ids of the linked spans (all in the same trace here).
    links: Vec<Vec<u8>>,
    status: (i32, String),
}

fn from_proto(s: &Span) -> Seenspan {
    const HAS_IS_REMOTE: u32 = 0x100;
    const IS_REMOTE: u32 = 0x200;
    assert_ne!(s.flags & HAS_IS_REMOTE, 0, "exporter states remoteness");
    Seenspan {
        trace_id: s.trace_id.clone(),
        span_id: s.span_id.clone(),
        parent: s.parent_span_id.clone(),
        parent_remote: s.flags & IS_REMOTE != 0,
        name: s.name.clone(),
        kind: s.kind,
        start_ns: s.start_time_unix_nano,
        end_ns: s.end_time_unix_nano,
        attributes: attrs(&s.attributes),
        events: s
            .events
            .iter()
            .map(|e| (e.name.clone(), e.time_unix_nano, attrs(&e.attributes)))
            .collect(),
        links: s
            .links
            .iter()
            .map(|l| {
                assert_eq!(l.trace_id, s.trace_id);
                l.span_id.clone()
            })
            .collect(),
        status: s
            .status
            .as_ref()
            .map(|st| (st.code, st.message.clone()))
            .unwrap_or((0, String::new())),
    }
}

fn from_sdk(s: &opentelemetry_sdk::trace::SpanData) -> Seenspan {
    use opentelemetry::trace::{SpanId, SpanKind, Status};
    Seenspan {
        trace_id: s.span_context.trace_id().to_bytes().to_vec(),
        span_id: s.span_context.span_id().to_bytes().to_vec(),
        parent: if s.parent_span_id == SpanId::INVALID {
            Vec::new()
        } else {
            s.parent_span_id.to_bytes().to_vec()
        },
        parent_remote: s.parent_span_is_remote,
        name: s.name.to_string(),
        kind: match s.span_kind {
            SpanKind::Internal => 1,
            SpanKind::Server => 2,
            SpanKind::Client => 3,
            SpanKind::Producer => 4,
            SpanKind::Consumer => 5,
        },
        start_ns: ns(s.start_time),
        end_ns: ns(s.end_time),
        attributes: otel_attrs(&s.attributes),
        events: s
            .events
            .iter()
            .map(|e| {
                (
                    e.name.to_string(),
                    ns(e.timestamp),
                    otel_attrs(&e.attributes),
                )
            })
            .collect(),
        links: s
            .links
            .iter()
            .map(|l| l.span_context.span_id().to_bytes().to_vec())
            .collect(),
        status: match &s.status {
            Status::Unset => (0, String::new()),
            Status::Ok => (1, String::new()),
            Status::Error { description } => (2, description.to_string()),
        },
    }
}

fn config(protocol: Protocol, addr: SocketAddr) -> TraceExportConfig {
    let mut cfg = TraceExportConfig::default();
    cfg.endpoint = Some(format!("http://{addr}"));
    cfg.protocol = protocol;
    cfg.timeout = Duration::from_secs(5);
    cfg.headers = vec![("x-retryscope-test".to_owned(), "sesame".to_owned())];
    cfg
}

fn load(stats: &TraceStats) -> (u64, u64, u64, u64) {
    (
        stats.spans_submitted.load(Ordering::Relaxed),
        stats.spans_exported.load(Ordering::Relaxed),
        stats.spans_dropped.load(Ordering::Relaxed),
        stats.export_failures.load(Ordering::Relaxed),
    )
}

/// Export the bookstore turns and check the received trees against the span builder and
/// against the event times written in the examples.
async fn export_bookstore(protocol: Protocol, addr: SocketAddr, seen: &Seen) {
    let reports = bookstore();
    let sink = TraceSink::start(config(protocol, addr)).unwrap();
    assert!(sink.is_enabled());
    let stats = sink.stats();
    for r in &reports {
        sink.submit(r);
    }
    let t = Instant::now();
    sink.shutdown(Duration::from_secs(5)).await;
    assert!(t.elapsed() < Duration::from_secs(5));
    assert_eq!(load(&stats), (23, 23, 0, 0), "6 + 6 + 5 + 6 spans");

    let received = seen.spans();
    assert_eq!(received.len(), 23);
    for (service, scope, _) in &received {
        assert_eq!(service, "retryscope");
        assert_eq!(scope, "retryscope");
    }
    assert!(
        seen.test_headers
            .lock()
            .unwrap()
            .iter()
            .all(|h| h == "sesame")
    );
    assert!(!seen.test_headers.lock().unwrap().is_empty());
    let by_id: BTreeMap<Vec<u8>, Seenspan> = received
        .iter()
        .map(|(_, _, s)| (s.span_id.clone(), from_proto(s)))
        .collect();
    assert_eq!(by_id.len(), 23, "span ids are unique");

    // 1. Everything the builder made arrived unchanged (ids, parents, names, kinds, times in
    //    ns, attributes, events, statuses). Content capture is off in the sink.
    for r in &reports {
        for span in turn_spans(r, &SpanOptions::default()) {
            let want = from_sdk(&span);
            let got = by_id
                .get(&want.span_id)
                .unwrap_or_else(|| panic!("missing {}", want.name));
            assert_eq!(got, &want);
            assert!(
                !got.attributes
                    .contains_key("retryscope.attempt.text_prefix")
            );
        }
    }

    // 2. The naive turn as a backend sees it, from the example's own timestamps.
    let naive: Vec<&Seenspan> = by_id
        .values()
        .filter(|s| s.trace_id == sha256_16("naive"))
        .collect();
    assert_eq!(naive.len(), 6);
    let root = naive.iter().find(|s| s.parent.is_empty()).unwrap();
    assert_eq!(root.name, "invoke_agent help-desk");
    assert_eq!(root.kind, 1);
    assert_eq!((root.start_ns, root.end_ns), (T0_NS, T0_NS + 4_600 * MS));
    assert_eq!(root.status, (0, String::new()));
    assert_eq!(root.attributes["retryscope.findings.count"], "6");
    assert_eq!(root.attributes["gen_ai.operation.name"], "invoke_agent");
    let children = |parent: &Seenspan| -> Vec<&Seenspan> {
        let mut c: Vec<&Seenspan> = naive
            .iter()
            .copied()
            .filter(|s| s.parent == parent.span_id)
            .collect();
        c.sort_by_key(|s| s.start_ns);
        c
    };
    // Under the root: the model call, covering both attempts, and the two executions.
    let under_root = children(root);
    assert_eq!(under_root.len(), 3);
    let call = under_root[0];
    assert_eq!(call.name, "chat claude-sonnet-4-5");
    assert_eq!(call.kind, 3);
    assert_eq!(
        (call.start_ns, call.end_ns),
        (T0_NS + 50 * MS, T0_NS + 4_100 * MS)
    );
    assert_eq!(call.attributes["gen_ai.operation.name"], "chat");
    assert_eq!(call.attributes["gen_ai.provider.name"], "anthropic");
    // Usage summed over both billed attempts (attempt 0's by estimate).
    assert_eq!(call.attributes["gen_ai.usage.input_tokens"], "2500");
    assert_eq!(call.attributes["gen_ai.usage.output_tokens"], "74");
    assert_eq!(call.attributes["retryscope.model_call.attempts"], "2");
    assert_eq!(
        call.attributes["gen_ai.response.finish_reasons"],
        "[tool_use]"
    );
    assert_eq!(call.status, (0, String::new()));
    let attempts = children(call);
    assert_eq!(attempts.len(), 2);
    for (n, a) in attempts.iter().enumerate() {
        assert_eq!(a.name, format!("attempt {n}"));
        assert_eq!(a.kind, 3);
        assert_eq!(a.attributes["retryscope.attempt.number"], n.to_string());
        assert!(!a.attributes.contains_key("gen_ai.operation.name"));
        assert!(!a.attributes.contains_key("gen_ai.usage.input_tokens"));
    }
    let (a0, a1) = (attempts[0], attempts[1]);
    assert_eq!(
        (a0.start_ns, a0.end_ns),
        (T0_NS + 50 * MS, T0_NS + 2_500 * MS)
    );
    assert_eq!(
        a0.status,
        (
            2,
            "abandoned: ECONNRESET: connection reset by peer; spliced_text".to_owned()
        )
    );
    assert_eq!(a0.attributes["retryscope.attempt.outcome"], "abandoned");
    assert!(!a0.attributes.contains_key("http.request.resend_count"));
    assert_eq!(a0.events.len(), 1);
    assert_eq!(a0.events[0].0, "retryscope.finding");
    assert_eq!(a0.events[0].1, T0_NS + 4_600 * MS);
    assert_eq!(a0.events[0].2["retryscope.finding.kind"], "spliced_text");
    assert_eq!(
        (a1.start_ns, a1.end_ns),
        (T0_NS + 2_500 * MS, T0_NS + 4_100 * MS)
    );
    assert_eq!(a1.status, (0, String::new()));
    assert_eq!(a1.attributes["http.request.resend_count"], "1");
    assert_eq!(
        a1.attributes["retryscope.attempt.finish_reason"],
        "tool_use"
    );
    assert_eq!(
        a1.attributes["retryscope.attempt.usage.input_tokens"],
        "1250"
    );
    assert_eq!(
        a1.attributes["retryscope.attempt.usage.output_tokens"],
        "48"
    );
    assert_eq!(
        a1.attributes["retryscope.attempt.usage.cache_read.input_tokens"],
        "1024"
    );
    assert_eq!(a1.attributes["retryscope.usage.source"], "reported");

    // The executions are the agent's (children of the root), linked to their attempt.
    assert!(children(a0).is_empty() && children(a1).is_empty());
    let c1 = under_root[1];
    assert_eq!(c1.links, vec![a0.span_id.clone()]);
    assert_eq!(c1.name, "execute_tool issue_refund");
    assert_eq!(c1.kind, 1);
    assert_eq!(
        (c1.start_ns, c1.end_ns),
        (T0_NS + 1_000 * MS, T0_NS + 1_000 * MS)
    );
    assert_eq!(c1.attributes["gen_ai.tool.call.id"], "c1");
    assert_eq!(
        c1.attributes["retryscope.effect_key"],
        reports[0].attempts[0].executed[0].effect_key
    );
    assert_eq!(
        c1.status,
        (
            2,
            "abandoned_tool_executed; unfinished_tool_executed".to_owned()
        )
    );
    let c1_events: Vec<(&str, u64)> = c1
        .events
        .iter()
        .map(|(_, t, a)| (a["retryscope.finding.kind"].as_str(), *t))
        .collect();
    assert_eq!(
        c1_events,
        [
            ("early_execution", T0_NS + 1_000 * MS),
            ("abandoned_tool_executed", T0_NS + 2_500 * MS),
            ("unfinished_tool_executed", T0_NS + 1_000 * MS)
        ]
    );
    let c7 = under_root[2];
    assert_eq!(c7.links, vec![a1.span_id.clone()]);
    assert_eq!(c7.start_ns, T0_NS + 3_500 * MS);
    assert_eq!(c7.status, (2, "duplicate_effect".to_owned()));
    assert_eq!(
        c7.events[1].2["retryscope.finding.evidence"],
        "same effect as call c1 of attempt 0"
    );

    // 3. The joined turn is in the agent's trace, under the agent's span.
    let joined_root = by_id
        .values()
        .find(|s| s.attributes.get("retryscope.turn.id").map(String::as_str) == Some("joined"))
        .unwrap();
    assert_eq!(
        hex(&joined_root.trace_id),
        "4bf92f3577b34da6a3ce929d0e0e4736"
    );
    assert_eq!(hex(&joined_root.parent), "00f067aa0ba902b7");
    assert!(joined_root.parent_remote);
    let in_joined = by_id
        .values()
        .filter(|s| s.trace_id == joined_root.trace_id)
        .count();
    assert_eq!(in_joined, 6);
}

fn sha256_16(s: &str) -> Vec<u8> {
    retryscope::sink::traces::ids::trace_id_for_turn(s)
        .to_bytes()
        .to_vec()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

// ---------------------------------------------------------------------------------------
// Tests.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_export_delivers_the_bookstore_trees() {
    let seen = Seen::default();
    let addr = serve_grpc(seen.clone()).await;
    export_bookstore(Protocol::Grpc, addr, &seen).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_export_delivers_the_bookstore_trees() {
    let seen = Seen::default();
    let addr = serve_http(seen.clone()).await;
    export_bookstore(Protocol::HttpProtobuf, addr, &seen).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_input_twice_gives_the_same_trace() {
    for protocol in [Protocol::Grpc, Protocol::HttpProtobuf] {
        let seen = Seen::default();
        let addr = match protocol {
            Protocol::Grpc => serve_grpc(seen.clone()).await,
            Protocol::HttpProtobuf => serve_http(seen.clone()).await,
        };
        // Two separate runs over the same log, as a re-processing would do.
        for _ in 0..2 {
            let sink = TraceSink::start(config(protocol, addr)).unwrap();
            sink.submit(&report(NAIVE, "bookstore-1"));
            sink.shutdown(Duration::from_secs(5)).await;
        }
        let spans = seen.spans();
        assert_eq!(spans.len(), 12);
        let ids = |run: &[(String, String, Span)]| -> Vec<(Vec<u8>, Vec<u8>, Vec<u8>)> {
            let mut v: Vec<_> = run
                .iter()
                .map(|(_, _, s)| {
                    (
                        s.trace_id.clone(),
                        s.span_id.clone(),
                        s.parent_span_id.clone(),
                    )
                })
                .collect();
            v.sort();
            v
        };
        let (first, second) = spans.split_at(6);
        assert_eq!(ids(first), ids(second));
        assert!(
            first
                .iter()
                .all(|(_, _, s)| s.trace_id == sha256_16("bookstore-1"))
        );
    }
}

/// Submits 10 000 turns to a sink whose backend is useless, checks that submitting never
/// stalls, that shutdown keeps its deadline and that every span is accounted for.
async fn unusable_backend(protocol: Protocol, addr: SocketAddr) -> (u64, u64, u64, u64) {
    let mut cfg = config(protocol, addr);
    cfg.timeout = Duration::from_millis(300);
    cfg.queue_capacity = 64;
    cfg.max_batch = 32;
    let sink = TraceSink::start(cfg).unwrap();
    let stats = sink.stats();
    let r = report(NAIVE, "naive");
    let t = Instant::now();
    for _ in 0..10_000 {
        sink.submit(&r);
    }
    let took = t.elapsed();
    // A liveness check, not a benchmark: a blocking submit would take 10 000 × 300 ms.
    assert!(
        took < Duration::from_secs(3),
        "10 000 submits took {took:?}"
    );
    // Let the worker run into the backend at least once.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let t = Instant::now();
    sink.shutdown(Duration::from_millis(500)).await;
    let took = t.elapsed();
    assert!(
        took < Duration::from_millis(1_500),
        "shutdown took {took:?}"
    );
    let (submitted, exported, dropped, failures) = load(&stats);
    eprintln!(
        "{protocol:?} {addr}: shutdown {took:?}, submitted {submitted} exported {exported} dropped {dropped} failures {failures}"
    );
    assert_eq!(submitted, 60_000);
    assert_eq!(exported, 0);
    assert_eq!(submitted, exported + dropped, "every span is accounted for");
    (submitted, exported, dropped, failures)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_endpoint_never_blocks_and_is_counted() {
    for protocol in [Protocol::Grpc, Protocol::HttpProtobuf] {
        let addr = dead_port().await;
        let (_, _, dropped, failures) = unusable_backend(protocol, addr).await;
        assert!(dropped > 0);
        assert!(
            failures > 0,
            "{protocol:?}: refused connections are export failures"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hanging_endpoint_never_blocks_and_is_counted() {
    for protocol in [Protocol::Grpc, Protocol::HttpProtobuf] {
        let addr = serve_hanging().await;
        let (_, _, dropped, failures) = unusable_backend(protocol, addr).await;
        assert!(dropped > 0);
        // 700 ms of waiting with a 300 ms export timeout: at least one export timed out.
        assert!(failures > 0, "{protocol:?}: timed-out exports are failures");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_is_exported_when_opted_in() {
    let seen = Seen::default();
    let addr = serve_http(seen.clone()).await;
    let mut cfg = config(Protocol::HttpProtobuf, addr);
    cfg.capture_content = true;
    let sink = TraceSink::start(cfg).unwrap();
    sink.submit(&report(NAIVE, "naive"));
    sink.shutdown(Duration::from_secs(5)).await;
    let texts: Vec<String> = seen
        .spans()
        .iter()
        .filter_map(|(_, _, s)| {
            attrs(&s.attributes)
                .get("retryscope.attempt.text_prefix")
                .cloned()
        })
        .collect();
    assert_eq!(
        texts.len(),
        2,
        "both attempts carry their text prefix: {texts:?}"
    );
    assert!(texts.contains(&"Checking order ORD-7781. Refunding the dam".to_owned()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_respect_max_batch_and_shutdown_flushes_them_all() {
    let seen = Seen::default();
    let addr = serve_grpc(seen.clone()).await;
    let mut cfg = config(Protocol::Grpc, addr);
    cfg.max_batch = 3;
    let sink = TraceSink::start(cfg).unwrap();
    let stats = sink.stats();
    for r in &bookstore() {
        sink.submit(r);
    }
    sink.shutdown(Duration::from_secs(5)).await;
    assert_eq!(load(&stats), (23, 23, 0, 0));
    let sizes: Vec<usize> = seen
        .requests
        .lock()
        .unwrap()
        .iter()
        .map(|req| {
            req.resource_spans
                .iter()
                .flat_map(|rs| &rs.scope_spans)
                .map(|ss| ss.spans.len())
                .sum()
        })
        .collect();
    assert!(sizes.iter().all(|&n| (1..=3).contains(&n)), "{sizes:?}");
    assert_eq!(sizes.iter().sum::<usize>(), 23);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_backend_gets_what_fits_and_the_rest_is_dropped_not_queued() {
    let seen = Seen::default();
    let addr = serve_http_slow(seen.clone(), Duration::from_millis(100)).await;
    let mut cfg = config(Protocol::HttpProtobuf, addr);
    cfg.queue_capacity = 8;
    cfg.max_batch = 10;
    let sink = TraceSink::start(cfg).unwrap();
    let stats = sink.stats();
    let r = report(NAIVE, "naive");
    let t = Instant::now();
    for _ in 0..1_000 {
        sink.submit(&r);
    }
    assert!(t.elapsed() < Duration::from_secs(3));
    sink.shutdown(Duration::from_secs(5)).await;
    let (submitted, exported, dropped, failures) = load(&stats);
    assert_eq!(submitted, 6_000);
    assert_eq!(failures, 0);
    // The queue held at most 8 turns (plus the batch in flight); the rest was dropped.
    assert!(
        exported > 0 && exported <= 10 * 6 + 10,
        "exported {exported}"
    );
    assert_eq!(exported + dropped, submitted);
    assert_eq!(seen.spans().len() as u64, exported);
}
