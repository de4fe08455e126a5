//! Regression: OTLP/gRPC exports whose messages are gzip-compressed (`grpc-encoding: gzip`).
//! gemini-cli 0.61.0 hard-codes `compression: GZIP` in its gRPC exporters; before the
//! receiver accepted it, tonic answered every export `UNIMPLEMENTED` ("Content is compressed
//! with `gzip` which isn't supported") before the receiver saw it, and nothing was counted
//! (found by `e2e/agents/run.sh --otlp` with the real gemini-cli). Sent here: the committed
//! gemini-cli OTLP capture's log records, gzip-compressed, with opentelemetry-proto's tonic
//! client, to a real `retryscope run --otlp-grpc-listen`.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_client::LogsServiceClient;
use tonic::codec::CompressionEncoding;

const CAPTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/agents/gemini-cli/otlp-after-tool-reset/otlp/0002-v1-logs.json"
);

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

struct Run(Child);

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The value of the first sample line starting with `prefix` on /metrics, if served.
fn sample(port: u16, prefix: &str) -> Option<f64> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    body.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[test]
fn grpc_gzip_compressed_export_is_accepted_gemini_cli_always_compresses() {
    let (metrics, grpc) = (free_port(), free_port());
    let _run = Run(Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .arg("run")
        .args(["--metrics-addr", &format!("127.0.0.1:{metrics}")])
        .args(["--otlp-grpc-listen", &format!("127.0.0.1:{grpc}")])
        .args(["--findings-out", ""])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start retryscope run"));
    let wait = |prefix: &str, want: f64| {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let got = sample(metrics, prefix);
            if got == Some(want) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{prefix}: want {want}, got {got:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    wait("retryscope_build_info", 1.0);

    let json = std::fs::read(CAPTURE).expect("the committed capture");
    let msg: ExportLogsServiceRequest = serde_json::from_slice(&json).expect("OTLP/JSON logs");
    let records: usize = msg
        .resource_logs
        .iter()
        .flat_map(|r| &r.scope_logs)
        .map(|s| s.log_records.len())
        .sum();
    assert_eq!(records, 25, "the capture's log records");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let sent = rt.block_on(async {
        let mut client = LogsServiceClient::connect(format!("http://127.0.0.1:{grpc}"))
            .await
            .expect("connect")
            .send_compressed(CompressionEncoding::Gzip);
        client.export(msg).await.map(|_| ())
    });
    assert!(sent.is_ok(), "gzip'd gRPC export refused: {sent:?}");
    wait(
        r#"retryscope_otlp_receiver_requests_total{signal="logs",protocol="grpc",outcome="accepted"}"#,
        1.0,
    );
    wait(r#"retryscope_events_read_total{source="otlp"}"#, 25.0);
}
