//! `retryscope run --otlp-endpoint`: the collector's own operational spans arrive at the same
//! receiver as the turn traces, but under their own service (`retryscope-self`), in their own
//! traces, and never mixed into a turn's trace.

use crate::otlp_receiver;

use std::collections::BTreeSet;
use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use otlp_receiver::{Seen, serve_grpc, serve_http};

/// `retryscope run - --exit-on-eof` over the naive bookstore log, exporting to `addr`.
async fn run_stdin(addr: SocketAddr, protocol: &'static str) -> Output {
    tokio::task::spawn_blocking(move || {
        let data = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_retryscope"));
        cmd.args(["run", "-", "--exit-on-eof", "--findings-out", ""])
            .args(["--metrics-addr", "127.0.0.1:0"])
            .arg("--data-dir")
            .arg(data.path())
            .args(["--otlp-endpoint", &format!("http://{addr}")])
            .args(["--otlp-protocol", protocol])
            // Logs at warn: operational spans do not depend on the log level.
            .env("RUST_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (var, _) in std::env::vars() {
            if var.starts_with("OTEL_") {
                cmd.env_remove(var);
            }
        }
        let mut child = cmd.spawn().expect("start retryscope run");
        let input = std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/bookstore/naive.jsonl"),
        )
        .unwrap();
        child.stdin.take().unwrap().write_all(&input).unwrap();
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap()
}

async fn self_spans_are_their_own_service(addr: SocketAddr, seen: &Seen, protocol: &'static str) {
    let out = run_stdin(addr, protocol).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let spans = seen.spans();
    let turn: Vec<_> = spans
        .iter()
        .filter(|(svc, _, _)| svc == "retryscope")
        .collect();
    let ops: Vec<_> = spans
        .iter()
        .filter(|(svc, _, _)| svc == "retryscope-self")
        .collect();
    assert_eq!(
        turn.len() + ops.len(),
        spans.len(),
        "no third service: {:?}",
        spans.iter().map(|(s, _, _)| s).collect::<BTreeSet<_>>()
    );

    // The turn trace: the naive turn's 6 spans, scope `retryscope`.
    assert_eq!(turn.len(), 6);
    assert!(turn.iter().all(|(_, scope, _)| scope == "retryscope"));
    assert!(
        turn.iter()
            .any(|(_, _, s)| s.name == "invoke_agent help-desk")
    );

    // Operational spans: their own scope, our span names, nothing from the exporters' stack.
    let names: BTreeSet<&str> = ops.iter().map(|(_, _, s)| s.name.as_str()).collect();
    for want in ["engine.start", "checkpoint.write", "engine.shutdown"] {
        assert!(names.contains(want), "{want} missing from {names:?}");
    }
    assert!(ops.iter().all(|(_, scope, _)| scope == "retryscope-self"));
    assert!(
        ops.iter().all(|(_, _, s)| !s.name.contains("h2")
            && !s.name.contains("hyper")
            && !s.name.contains("tonic")
            && !s.name.starts_with("invoke_agent")
            && !s.name.starts_with("chat ")
            && !s.name.starts_with("attempt ")),
        "{names:?}"
    );

    // Kept apart: no operational span shares a trace with a turn span.
    let turn_traces: BTreeSet<&[u8]> = turn.iter().map(|(_, _, s)| &s.trace_id[..]).collect();
    assert!(
        ops.iter()
            .all(|(_, _, s)| !turn_traces.contains(&s.trace_id[..]))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_exports_operational_spans_apart_over_grpc() {
    let seen = Seen::default();
    let addr = serve_grpc(seen.clone()).await;
    self_spans_are_their_own_service(addr, &seen, "grpc").await;
}

/// HTTP goes through the runtime wrapper: the SDK's batch thread has no tokio reactor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_exports_operational_spans_apart_over_http() {
    let seen = Seen::default();
    let addr = serve_http(seen.clone()).await;
    self_spans_are_their_own_service(addr, &seen, "http/protobuf").await;
}
