//! OTLP export over TLS, to real receivers on 127.0.0.1 (`common/tls_receiver.rs`: the
//! receivers of `otlp_receiver.rs` behind tokio-rustls) whose self-signed CA is made in the
//! test and passed by file: the spans arrive over gRPC and HTTP; without the CA (or without
//! the client certificate a server requires) the export fails and is counted, never silent.
//! The same through the binary: `retryscope run --otlp-ca-file` sends both the turn traces
//! and its own operational spans over TLS. And the endpoint rules: scheme-less is `http://`,
//! a bad endpoint is a startup error naming the setting.

use crate::otlp_receiver;
use crate::tls_receiver;

use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use otlp_receiver::{Seen, serve_grpc};
use retryscope::otlp_client::TlsFiles;
use retryscope::sink::traces::{Protocol, TraceExportConfig, TraceSink, span_count};
use retryscope_core::correlate::{Correlator, CorrelatorConfig, Output as CorrelatorOutput};
use retryscope_core::cost::PriceTable;
use retryscope_core::decode::SkipCounts;
use retryscope_core::decode::native::{NativeLine, decode_line};
use retryscope_core::report::TurnReport;
use tls_receiver::{Pki, serve_grpc_tls, serve_http_tls, write_other_ca};

const NAIVE: &str = include_str!("../../examples/bookstore/naive.jsonl");

fn naive() -> TurnReport {
    let mut c = Correlator::new(
        CorrelatorConfig {
            idle_timeout_ms: None,
            ..CorrelatorConfig::default()
        },
        Arc::new(PriceTable::builtin()),
    );
    let mut out = Vec::new();
    let mut skips = SkipCounts::default();
    for (i, line) in NAIVE.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        match decode_line(line.as_bytes(), &mut skips) {
            Ok(NativeLine::Event(ev)) => c.observe(&ev, 1_000 + i as i64, &mut out),
            other => panic!("line {i} did not decode: {other:?}"),
        }
    }
    c.close_all(&mut out);
    out.into_iter()
        .find_map(|o| match o {
            CorrelatorOutput::TurnClosed(r) => Some(*r),
            _ => None,
        })
        .unwrap()
}

async fn serve(
    protocol: Protocol,
    pki: &Pki,
    mtls: bool,
    seen: &Seen,
) -> (SocketAddr, Arc<AtomicU64>) {
    match protocol {
        Protocol::Grpc => serve_grpc_tls(seen.clone(), pki.server_config(b"h2", mtls)).await,
        Protocol::HttpProtobuf => {
            serve_http_tls(seen.clone(), pki.server_config(b"http/1.1", mtls)).await
        }
    }
}

fn config(protocol: Protocol, addr: SocketAddr, tls: TlsFiles) -> TraceExportConfig {
    let mut cfg = TraceExportConfig::default();
    cfg.endpoint = Some(format!("https://{addr}"));
    cfg.protocol = protocol;
    cfg.timeout = Duration::from_secs(2);
    cfg.tls = tls;
    // Only the test's CA: the outcome must not depend on this machine's trust store.
    cfg.system_roots = false;
    cfg
}

/// Export the naive turn once; (exported, dropped, failures).
async fn export_once(cfg: TraceExportConfig) -> (u64, u64, u64) {
    let sink = TraceSink::start(cfg).expect("start the sink");
    let stats = sink.stats();
    sink.submit(&naive());
    sink.shutdown(Duration::from_secs(5)).await;
    (
        stats.spans_exported.load(Ordering::Relaxed),
        stats.spans_dropped.load(Ordering::Relaxed),
        stats.export_failures.load(Ordering::Relaxed),
    )
}

fn with_ca(pki: &Pki) -> TlsFiles {
    TlsFiles {
        ca_file: Some(pki.ca_file()),
        ..TlsFiles::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_over_tls_with_the_ca_file_delivers_the_spans() {
    let pki = Pki::new();
    let n = span_count(&naive()) as u64;
    for protocol in [Protocol::Grpc, Protocol::HttpProtobuf] {
        let seen = Seen::default();
        let (addr, failed_handshakes) = serve(protocol, &pki, false, &seen).await;
        let got = export_once(config(protocol, addr, with_ca(&pki))).await;
        assert_eq!(got, (n, 0, 0), "{protocol:?}");
        assert_eq!(
            seen.spans().len() as u64,
            n,
            "{protocol:?}: the spans arrived"
        );
        assert!(
            seen.spans().iter().all(|(svc, _, _)| svc == "retryscope"),
            "{protocol:?}"
        );
        assert_eq!(failed_handshakes.load(Ordering::Relaxed), 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_without_the_ca_fails_and_is_counted() {
    let pki = Pki::new();
    let other = pki.dir.path().join("other-ca.pem");
    write_other_ca(&other);
    let n = span_count(&naive()) as u64;
    for protocol in [Protocol::Grpc, Protocol::HttpProtobuf] {
        let seen = Seen::default();
        let (addr, failed_handshakes) = serve(protocol, &pki, false, &seen).await;
        // A CA file that did not sign the server: the handshake must fail.
        let tls = TlsFiles {
            ca_file: Some(other.clone()),
            ..TlsFiles::default()
        };
        let (exported, dropped, failures) = export_once(config(protocol, addr, tls)).await;
        assert_eq!((exported, dropped), (0, n), "{protocol:?}");
        assert!(failures >= 1, "{protocol:?}: the failure is counted");
        assert!(seen.spans().is_empty());
        assert!(
            failed_handshakes.load(Ordering::Relaxed) >= 1,
            "{protocol:?}: the client reached the server and refused its certificate"
        );
    }
}

/// The default trust store (this machine's roots) does not know the test CA either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_with_only_system_roots_fails_and_is_counted() {
    let pki = Pki::new();
    let seen = Seen::default();
    let (addr, _) = serve(Protocol::HttpProtobuf, &pki, false, &seen).await;
    let mut cfg = config(Protocol::HttpProtobuf, addr, TlsFiles::default());
    cfg.system_roots = true;
    match cfg.prepare() {
        // A machine without a trust store: refused at startup, naming the setting.
        Err(e) => assert!(e.to_string().contains("--otlp-ca-file"), "{e}"),
        Ok(_) => {
            let (exported, _, failures) = export_once(cfg).await;
            assert_eq!(exported, 0);
            assert!(failures >= 1);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_needs_the_client_certificate() {
    let pki = Pki::new();
    let n = span_count(&naive()) as u64;
    for protocol in [Protocol::Grpc, Protocol::HttpProtobuf] {
        let seen = Seen::default();
        let (addr, _) = serve(protocol, &pki, true, &seen).await;
        let (exported, _, failures) = export_once(config(protocol, addr, with_ca(&pki))).await;
        assert_eq!(
            exported, 0,
            "{protocol:?}: no client certificate, no export"
        );
        assert!(failures >= 1);
        let tls = TlsFiles {
            ca_file: Some(pki.ca_file()),
            client_cert: Some(pki.client_cert()),
            client_key: Some(pki.client_key()),
        };
        let got = export_once(config(protocol, addr, tls)).await;
        assert_eq!(got, (n, 0, 0), "{protocol:?}");
        assert_eq!(seen.spans().len() as u64, n);
    }
}

// ---------------------------------------------------------------------------------------
// Through the binary.

/// `retryscope run - --exit-on-eof` over the naive log with `extra` arguments.
async fn run_stdin(extra: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || {
        let data = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_retryscope"));
        cmd.args(["run", "-", "--exit-on-eof", "--findings-out", ""])
            .args(["--metrics-addr", "127.0.0.1:0"])
            .arg("--data-dir")
            .arg(data.path())
            .args(&extra)
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
        // A run refused at startup may close stdin before reading it.
        let _ = child.stdin.take().unwrap().write_all(&input);
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap()
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_sends_turn_and_own_spans_over_tls_with_otlp_ca_file() {
    let pki = Pki::new();
    for (protocol, name) in [
        (Protocol::Grpc, "grpc"),
        (Protocol::HttpProtobuf, "http/protobuf"),
    ] {
        let seen = Seen::default();
        let (addr, _) = serve(protocol, &pki, false, &seen).await;
        let ca = pki.ca_file();
        let out = run_stdin(args(&[
            "--otlp-endpoint",
            &format!("https://{addr}"),
            "--otlp-protocol",
            name,
            "--otlp-ca-file",
            ca.to_str().unwrap(),
        ]))
        .await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name}: {stderr}");
        let spans = seen.spans();
        let turn = spans.iter().filter(|(s, _, _)| s == "retryscope").count();
        let own = spans
            .iter()
            .filter(|(s, _, _)| s == "retryscope-self")
            .count();
        assert_eq!(
            turn,
            span_count(&naive()),
            "{name}: the turn's spans, over TLS"
        );
        assert!(own > 0, "{name}: retryscope's own spans, over TLS too");
    }
}

/// Regression: `--otlp-endpoint 127.0.0.1:4317` became `https://` and every gRPC export
/// failed; a scheme-less endpoint now means plain `http://`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheme_less_endpoint_is_plain_http() {
    let seen = Seen::default();
    let addr = serve_grpc(seen.clone()).await;
    let out = run_stdin(args(&[
        "--otlp-endpoint",
        &addr.to_string(),
        "--otlp-protocol",
        "grpc",
    ]))
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let turn = seen
        .spans()
        .iter()
        .filter(|(s, _, _)| s == "retryscope")
        .count();
    assert_eq!(turn, span_count(&naive()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_endpoints_stop_run_at_startup_naming_the_setting() {
    let pki = Pki::new();
    let ca = pki.ca_file();
    let missing = pki.dir.path().join("missing.pem");
    for (extra, want) in [
        (
            args(&["--otlp-endpoint", "ftp://127.0.0.1:4317"]),
            "--otlp-endpoint",
        ),
        (
            args(&["--otlp-endpoint", "http://exa mple:4317"]),
            "--otlp-endpoint",
        ),
        (
            args(&[
                "--otlp-endpoint",
                "https://127.0.0.1:4317",
                "--otlp-ca-file",
                missing.to_str().unwrap(),
            ]),
            "--otlp-ca-file",
        ),
        (
            args(&[
                "--otlp-endpoint",
                "http://127.0.0.1:4317",
                "--otlp-ca-file",
                ca.to_str().unwrap(),
            ]),
            "not https://",
        ),
    ] {
        let out = run_stdin(extra.clone()).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{extra:?} started");
        assert!(stderr.contains(want), "{extra:?}: {stderr}");
    }
}

#[test]
fn validate_checks_the_otlp_endpoint_and_tls_files() {
    let pki = Pki::new();
    let validate = |toml: String| -> Output {
        let path = pki.dir.path().join("retryscope.toml");
        std::fs::write(&path, toml).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_retryscope"));
        cmd.arg("validate").arg(&path);
        for (var, _) in std::env::vars() {
            if var.starts_with("OTEL_") {
                cmd.env_remove(var);
            }
        }
        cmd.output().unwrap()
    };
    let ca = pki.ca_file().display().to_string();
    let ok = validate(format!(
        "[otlp]\nendpoint = \"https://127.0.0.1:4317\"\nca_file = \"{ca}\"\n"
    ));
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let bad = validate("[otlp]\nendpoint = \"tcp://127.0.0.1:4317\"\n".to_owned());
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success());
    assert!(
        stderr.contains("[otlp] endpoint") && stderr.contains("tcp"),
        "{stderr}"
    );
    let missing = validate(format!(
        "[otlp]\nendpoint = \"https://127.0.0.1:4317\"\nca_file = \"{ca}.missing\"\n"
    ));
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(!missing.status.success());
    assert!(stderr.contains("ca_file"), "{stderr}");
}

#[test]
fn check_refuses_a_bad_endpoint_with_exit_2() {
    let log = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/bookstore/naive.jsonl");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_retryscope"));
    cmd.arg("check")
        .arg(&log)
        .args(["--otlp-endpoint", "quic://127.0.0.1:4317"]);
    for (var, _) in std::env::vars() {
        if var.starts_with("OTEL_") {
            cmd.env_remove(var);
        }
    }
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--otlp-endpoint") && stderr.contains("quic"),
        "{stderr}"
    );
}

/// Without the CA file, `run` still runs, and says the export failed and why (never silently).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_without_the_ca_file_logs_the_failed_export() {
    let pki = Pki::new();
    let other = pki.dir.path().join("other-ca.pem");
    write_other_ca(&other);
    for (protocol, name) in [
        (Protocol::Grpc, "grpc"),
        (Protocol::HttpProtobuf, "http/protobuf"),
    ] {
        let seen = Seen::default();
        let (addr, failed_handshakes) = serve(protocol, &pki, false, &seen).await;
        let out = run_stdin(args(&[
            "--otlp-endpoint",
            &format!("https://{addr}"),
            "--otlp-protocol",
            name,
            "--otlp-ca-file",
            other.to_str().unwrap(),
        ]))
        .await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name}: {stderr}");
        assert!(seen.spans().is_empty());
        assert!(failed_handshakes.load(Ordering::Relaxed) >= 1);
        assert!(stderr.contains("trace export failed"), "{name}: {stderr}");
        // The cause is named, not just "network error" or "transport error".
        assert!(stderr.contains("UnknownIssuer"), "{name}: {stderr}");
    }
}
