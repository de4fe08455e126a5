//! The metrics endpoint over real HTTP: every family on the first scrape, the bookstore numbers
//! after observing, health and readiness, errors, and `promtool check metrics` when available.

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use retryscope::server::serve;
use retryscope::sink::metrics::{FAMILIES, Kind, Metrics, MetricsConfig, Source};
use retryscope_core::correlate::{Correlator, CorrelatorConfig, Output};
use retryscope_core::cost::PriceTable;
use retryscope_core::pipeline::Pipeline;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

const NAIVE: &str = include_str!("../../examples/bookstore/naive.jsonl");

struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One raw HTTP/1.1 request on a fresh connection; reads until the server closes it.
async fn raw(addr: std::net::SocketAddr, request: &str) -> Reply {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut buf))
        .await
        .expect("response in time")
        .unwrap();
    let text = String::from_utf8(buf).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("a complete response");
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    Reply {
        status,
        headers,
        body: body.to_owned(),
    }
}

async fn request(addr: std::net::SocketAddr, method: &str, path: &str) -> Reply {
    raw(
        addr,
        &format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"),
    )
    .await
}

/// `promtool check metrics` on a scrape; `None` when promtool is not installed.
fn promtool(scrape: &str) -> Option<(bool, String)> {
    let mut child = match Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(_) => {
            println!("note: promtool not on PATH; skipping `promtool check metrics`");
            return None;
        }
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(scrape.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some((out.status.success(), text))
}

fn assert_promtool_clean(scrape: &str) {
    if let Some((ok, text)) = promtool(scrape) {
        println!("promtool check metrics: ok={ok} output={text:?}");
        assert!(ok, "promtool check metrics failed:\n{text}");
    }
}

/// The bookstore log through the real pipeline, wired as `run` would.
fn feed_naive(metrics: &Metrics) {
    let correlator = Correlator::new(
        CorrelatorConfig {
            idle_timeout_ms: None,
            ..CorrelatorConfig::default()
        },
        Arc::new(PriceTable::builtin()),
    );
    let mut pipeline = Pipeline::new(correlator);
    let mut out: Vec<Output> = Vec::new();
    for line in NAIVE.lines() {
        pipeline
            .native_line(line.as_bytes(), None, &mut out)
            .unwrap();
        for o in out.drain(..) {
            metrics.observe(&o);
        }
    }
    pipeline.close_all(&mut out);
    for o in out.drain(..) {
        metrics.observe(&o);
    }
    let counters = pipeline.counters();
    metrics.add_events_read(Source::File, counters.lines);
    metrics.add_events_decoded(Source::File, counters.events);
    let c = pipeline.correlator();
    metrics.set_correlator_stats(&c.stats(), c.open_turns());
}

#[tokio::test]
async fn metrics_endpoint_over_real_http() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let metrics = Arc::new(Metrics::new(MetricsConfig::default()).unwrap());
    let ready = Arc::new(AtomicBool::new(false));
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, metrics.clone(), ready.clone(), async {
        let _ = stopped.await;
    }));

    // First scrape: every family, only zero series (build_info is 1).
    let first = request(addr, "GET", "/metrics").await;
    assert_eq!(first.status, 200);
    assert_eq!(
        first.header("content-type"),
        Some("text/plain; version=0.0.4")
    );
    for fam in FAMILIES {
        let kind = match fam.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram(_) => "histogram",
        };
        assert!(
            first
                .body
                .contains(&format!("# TYPE {} {kind}\n", fam.name)),
            "{} missing from the first scrape",
            fam.name
        );
        assert!(
            first
                .body
                .lines()
                .any(|l| l.starts_with(fam.name) && !l.starts_with('#')),
            "{} has no series on the first scrape",
            fam.name
        );
    }
    for line in first.body.lines().filter(|l| !l.starts_with('#')) {
        // The scrape's own connection is open on the metrics listener.
        if line == "retryscope_listener_connections{listener=\"metrics\"} 1" {
            continue;
        }
        if !line.starts_with("retryscope_build_info{") {
            assert!(line.ends_with(" 0"), "non-zero on first scrape: {line}");
        }
    }
    assert_promtool_clean(&first.body);

    // Health and readiness.
    let health = request(addr, "GET", "/healthz").await;
    assert_eq!((health.status, health.body.as_str()), (200, "ok\n"));
    assert_eq!(request(addr, "GET", "/-/ready").await.status, 503);
    ready.store(true, Ordering::Release);
    assert_eq!(request(addr, "GET", "/-/ready").await.status, 200);

    // Errors: unknown path, wrong method, garbage; the server keeps serving.
    assert_eq!(request(addr, "GET", "/nope").await.status, 404);
    assert_eq!(request(addr, "GET", "/").await.status, 404);
    let post = request(addr, "POST", "/metrics").await;
    assert_eq!(post.status, 405);
    assert_eq!(post.header("allow"), Some("GET, HEAD"));
    assert_eq!(request(addr, "DELETE", "/healthz").await.status, 405);
    let garbage = raw(addr, "\u{1}\u{2} nonsense\r\n\r\n").await;
    assert_eq!(garbage.status, 400);
    assert_eq!(request(addr, "GET", "/healthz").await.status, 200);

    // After observing the bookstore turn, its numbers show up.
    feed_naive(&metrics);
    let after = request(addr, "GET", "/metrics").await;
    assert_eq!(after.status, 200);
    let m = r#"model="claude-sonnet-4-5",provider="anthropic""#;
    let am = r#"agent="help-desk",model="claude-sonnet-4-5",provider="anthropic""#;
    let tok = |tt: &str, o: &str, us: &str, n: u64| {
        format!(
            "retryscope_billed_tokens_total{{{m},token_type=\"{tt}\",attempt_outcome=\"{o}\",usage_source=\"{us}\"}} {n}"
        )
    };
    let finding = |k: &str, s: &str, t: &str, n: u64| {
        format!(
            "retryscope_findings_total{{agent=\"help-desk\",kind=\"{k}\",severity=\"{s}\",tool=\"{t}\"}} {n}"
        )
    };
    for line in [
        format!("retryscope_retries_total{{{am},reason=\"connection_reset\"}} 1"),
        format!("retryscope_turns_total{{{am},status=\"completed\"}} 1"),
        format!("retryscope_attempts_total{{{m},outcome=\"abandoned\"}} 1"),
        format!("retryscope_attempts_total{{{m},outcome=\"completed\"}} 1"),
        format!("retryscope_attempts_total{{{m},outcome=\"failed\"}} 0"),
        finding("abandoned_tool_executed", "critical", "issue_refund", 1),
        finding("duplicate_effect", "critical", "issue_refund", 1),
        finding("spliced_text", "high", "", 1),
        finding("early_execution", "warning", "issue_refund", 2),
        finding("incomplete_turn", "info", "", 0),
        "retryscope_tool_executions_total{tool=\"issue_refund\",attempt_outcome=\"abandoned\"} 1"
            .into(),
        "retryscope_tool_executions_total{tool=\"issue_refund\",attempt_outcome=\"completed\"} 1"
            .into(),
        tok("input", "abandoned", "estimated", 226),
        tok("cached_input", "abandoned", "estimated", 1024),
        tok("output", "abandoned", "estimated", 26),
        tok("input", "completed", "reported", 226),
        tok("cached_input", "completed", "reported", 1024),
        tok("output", "completed", "reported", 48),
        tok("reasoning", "completed", "reported", 0),
        format!(
            "retryscope_billed_cost_usd_total{{{am},attempt_outcome=\"abandoned\"}} 0.0013751999999999998"
        ),
        format!("retryscope_billed_cost_usd_total{{{am},attempt_outcome=\"completed\"}} 0.0017052"),
        format!("retryscope_attempts_per_turn_count{{{m}}} 1"),
        format!("retryscope_attempts_per_turn_sum{{{m}}} 2"),
        format!("retryscope_turn_duration_seconds_sum{{{m}}} 4.6"),
        "retryscope_events_read_total{source=\"file\"} 17".into(),
        "retryscope_events_decoded_total{source=\"file\"} 17".into(),
        "retryscope_open_turns 0".into(),
    ] {
        assert!(
            after.body.lines().any(|l| l == line),
            "missing `{line}` in\n{}",
            after.body
        );
    }
    assert!(
        !after.body.contains("bookstore-1"),
        "a turn id leaked into a label"
    );
    assert!(
        !after.body.contains("\"c1\""),
        "a call id leaked into a label"
    );
    assert_promtool_clean(&after.body);

    // HEAD works like GET without a body.
    let head = request(addr, "HEAD", "/metrics").await;
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());

    // Shutdown ends serve promptly, even with an idle keep-alive connection open.
    let idle = TcpStream::connect(addr).await.unwrap();
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(3), server)
        .await
        .expect("serve returns after shutdown")
        .unwrap();
    drop(idle);
    // Closed: a connection is refused (or, as loopback allows when the port is free and in
    // the ephemeral range, connects to itself), or the address can be bound again. A bare
    // "connect fails" failed in CI once, four tests running at a time.
    let refused = match TcpStream::connect(addr).await {
        Err(_) => true,
        Ok(s) => s.local_addr().ok() == s.peer_addr().ok(),
    };
    assert!(
        refused || TcpListener::bind(addr).await.is_ok(),
        "listener closed"
    );
}
