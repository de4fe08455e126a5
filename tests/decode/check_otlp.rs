//! `retryscope check --otlp-endpoint`: the real binary exports the bookstore turn to the OTLP
//! receiver in `common/otlp_receiver.rs` (gRPC and HTTP on 127.0.0.1), the received span tree
//! is the turn's, and running it twice gives the same trace.

use crate::otlp_receiver;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use opentelemetry_proto::tonic::trace::v1::Span;

use otlp_receiver::{Seen, attrs, dead_port, serve_grpc, serve_http};

const OTEL_VARS: [&str; 8] = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
];

fn naive() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/bookstore/naive.jsonl")
}

/// Run `retryscope check <args> naive.jsonl` with exactly the `OTEL_*` variables in `env`.
/// The receiver lives on the test's runtime, so the blocking wait happens off it.
async fn check(args: Vec<String>, env: Vec<(&'static str, String)>) -> Output {
    tokio::task::spawn_blocking(move || {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_retryscope"));
        cmd.arg("check").args(args).arg(naive());
        for var in OTEL_VARS {
            cmd.env_remove(var);
        }
        cmd.envs(env).output().expect("run retryscope")
    })
    .await
    .expect("the check process")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn url(addr: SocketAddr) -> String {
    format!("http://{addr}")
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The deterministic trace id of the example's turn (`bookstore-1`).
fn bookstore_trace_id() -> Vec<u8> {
    retryscope::sink::traces::ids::trace_id_for_turn("bookstore-1")
        .to_bytes()
        .to_vec()
}

/// Check the received spans are the naive bookstore turn; returns its (trace, span) ids.
fn assert_naive_tree(received: &[(String, String, Span)]) -> Vec<(String, String)> {
    assert_eq!(
        received.len(),
        6,
        "root + 1 model call + 2 attempts + 2 tool executions"
    );
    for (service, scope, _) in received {
        assert_eq!(service, "retryscope");
        assert_eq!(scope, "retryscope");
    }
    let spans: Vec<&Span> = received.iter().map(|(_, _, s)| s).collect();
    for s in &spans {
        assert_eq!(s.trace_id, bookstore_trace_id(), "{}", s.name);
    }
    let roots: Vec<&&Span> = spans
        .iter()
        .filter(|s| s.parent_span_id.is_empty())
        .collect();
    assert_eq!(roots.len(), 1);
    let root = roots[0];
    assert_eq!(root.name, "invoke_agent help-desk");
    assert_eq!(attrs(&root.attributes)["retryscope.turn.id"], "bookstore-1");
    assert_eq!(attrs(&root.attributes)["retryscope.findings.count"], "6");
    // Where the turn came from: the file and the line that opened it.
    assert_eq!(
        attrs(&root.attributes)["retryscope.turn.source"],
        naive().display().to_string()
    );
    assert_eq!(attrs(&root.attributes)["retryscope.turn.source_line"], "1");
    let children = |parent: &Span| -> Vec<&Span> {
        let mut c: Vec<&Span> = spans
            .iter()
            .copied()
            .filter(|s| s.parent_span_id == parent.span_id)
            .collect();
        c.sort_by_key(|s| s.start_time_unix_nano);
        c
    };
    // Under the root: one model call (covering the retry) and the two tool executions.
    let under_root = children(root);
    let names: Vec<&str> = under_root.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "chat claude-sonnet-4-5",
            "execute_tool issue_refund",
            "execute_tool issue_refund"
        ]
    );
    let attempts = children(under_root[0]);
    assert_eq!(attempts.len(), 2);
    for (n, a) in attempts.iter().enumerate() {
        assert_eq!(a.name, format!("attempt {n}"));
        assert_eq!(
            attrs(&a.attributes)["retryscope.attempt.number"],
            n.to_string()
        );
        assert!(children(a).is_empty());
    }
    // Each execution links to the attempt whose call it ran.
    for (tool, attempt) in under_root[1..].iter().zip(&attempts) {
        assert_eq!(tool.links.len(), 1);
        assert_eq!(tool.links[0].span_id, attempt.span_id);
    }
    let mut kinds: Vec<String> = spans
        .iter()
        .flat_map(|s| &s.events)
        .filter(|e| e.name == "retryscope.finding")
        .map(|e| attrs(&e.attributes)["retryscope.finding.kind"].clone())
        .collect();
    kinds.sort();
    assert_eq!(
        kinds,
        [
            "abandoned_tool_executed",
            "duplicate_effect",
            "early_execution",
            "early_execution",
            "spliced_text",
            "unfinished_tool_executed"
        ]
    );
    let mut ids: Vec<(String, String)> = spans
        .iter()
        .map(|s| (hex(&s.trace_id), hex(&s.span_id)))
        .collect();
    ids.sort();
    ids
}

/// Two `check` runs against one receiver: the same tree, the same ids.
async fn twice(addr: SocketAddr, seen: &Seen, protocol: &str) {
    let args = vec![
        "--otlp-endpoint".to_owned(),
        url(addr),
        "--otlp-protocol".to_owned(),
        protocol.to_owned(),
    ];
    let first = check(args.clone(), Vec::new()).await;
    assert!(first.status.success(), "{}", stderr(&first));
    assert!(
        String::from_utf8_lossy(&first.stdout).contains("abandoned_tool_executed"),
        "the report is still printed"
    );
    assert!(
        stderr(&first).contains("traces: 6 spans exported to http://"),
        "{}",
        stderr(&first)
    );
    assert!(stderr(&first).contains(", 0 dropped"), "{}", stderr(&first));
    assert!(!stderr(&first).contains("failed"), "{}", stderr(&first));
    let first_ids = assert_naive_tree(&seen.spans());
    seen.requests.lock().unwrap().clear();

    let second = check(args, Vec::new()).await;
    assert!(second.status.success(), "{}", stderr(&second));
    let second_ids = assert_naive_tree(&seen.spans());
    assert_eq!(
        first_ids, second_ids,
        "re-checking a log gives the same trace"
    );
    // No text leaves the machine unless asked.
    assert!(
        seen.spans().iter().all(|(_, _, s)| {
            !attrs(&s.attributes).contains_key("retryscope.attempt.text_prefix")
        })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_exports_each_turn_over_grpc_with_stable_ids() {
    let seen = Seen::default();
    let addr = serve_grpc(seen.clone()).await;
    twice(addr, &seen, "grpc").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_exports_each_turn_over_http_with_stable_ids() {
    let seen = Seen::default();
    let addr = serve_http(seen.clone()).await;
    twice(addr, &seen, "http/protobuf").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_honours_otel_variables_and_flags_win() {
    let seen = Seen::default();
    let addr = serve_http(seen.clone()).await;
    // The environment alone is enough (HTTP base URL: /v1/traces is appended).
    let out = check(
        vec!["--capture-content".to_owned()],
        vec![
            ("OTEL_EXPORTER_OTLP_ENDPOINT", url(addr)),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf".to_owned()),
        ],
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_naive_tree(&seen.spans());
    // --capture-content turns on the correlator's text capture too: prefixes arrive.
    let prefixes = seen
        .spans()
        .iter()
        .filter(|(_, _, s)| attrs(&s.attributes).contains_key("retryscope.attempt.text_prefix"))
        .count();
    assert_eq!(prefixes, 2, "both attempts carry their text prefix");
    seen.requests.lock().unwrap().clear();

    // Flags override the environment (which points at a dead gRPC port here).
    let dead = dead_port().await;
    let out = check(
        vec![
            "--otlp-endpoint".to_owned(),
            url(addr),
            "--otlp-protocol".to_owned(),
            "http/protobuf".to_owned(),
        ],
        vec![
            ("OTEL_EXPORTER_OTLP_ENDPOINT", url(dead)),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc".to_owned()),
        ],
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_naive_tree(&seen.spans());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_says_when_export_failed_and_keeps_its_exit_status() {
    let dead = dead_port().await;
    for protocol in ["grpc", "http/protobuf"] {
        let out = check(
            vec![
                "--otlp-endpoint".to_owned(),
                url(dead),
                "--otlp-protocol".to_owned(),
                protocol.to_owned(),
                "--fail-on".to_owned(),
                "critical".to_owned(),
            ],
            vec![("OTEL_EXPORTER_OTLP_TIMEOUT", "500".to_owned())],
        )
        .await;
        let err = stderr(&out);
        assert_eq!(
            out.status.code(),
            Some(1),
            "--fail-on decides, not export: {err}"
        );
        assert!(err.contains("traces: 0 spans exported"), "{err}");
        assert!(err.contains("6 dropped"), "{err}");
        assert!(
            err.contains("failed (1 request); 6 spans were not delivered"),
            "{err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_without_an_endpoint_exports_nothing_and_rejects_bad_protocols() {
    let out = check(Vec::new(), Vec::new()).await;
    assert!(out.status.success());
    assert!(!stderr(&out).contains("traces:"), "{}", stderr(&out));
    let out = check(
        vec!["--otlp-protocol".to_owned(), "http/json".to_owned()],
        Vec::new(),
    )
    .await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("not grpc or http/protobuf"),
        "{}",
        stderr(&out)
    );
}
