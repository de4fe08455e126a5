//! `retryscope run --otlp-listen` / `--otlp-grpc-listen` as a real process, fed with the
//! committed real captures of gemini-cli 0.61.0's OTLP/JSON export
//! (`tests/fixtures/agents/gemini-cli/otlp-*/otlp/`, the bodies it POSTed, as they came):
//! sent as they came (JSON, chunked), as protobuf (opentelemetry-proto's reading of the same
//! JSON, gzip'd), and over gRPC with opentelemetry-proto's tonic client. Also: what is refused
//! and how (token, size, malformed, content type), and a kill -9 between acknowledgement and
//! checkpoint.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_client::LogsServiceClient;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use prost::Message;

use crate::harness::{Proc, free_port, parse_metrics, spawn_run, sum};
use crate::otlp_post::{capture, post, request};

/// `google.rpc.Status`, the body of OTLP/HTTP error responses.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
}

struct Collector {
    proc: Proc,
    port: u16,
    http: u16,
    grpc: u16,
}

impl Collector {
    fn start(args: &[&str]) -> Collector {
        let (http, grpc) = (free_port(), free_port());
        let (listen, grpc_listen) = (format!("{http}"), format!(":{grpc}"));
        let mut args = args.to_vec();
        args.extend(["--otlp-listen", &listen, "--otlp-grpc-listen", &grpc_listen]);
        let (proc, port) = spawn_run(&args, Stdio::null(), Stdio::null());
        let c = Collector {
            proc,
            port,
            http,
            grpc,
        };
        c.wait_until(
            |m| m.keys().any(|k| k.starts_with("retryscope_build_info")),
            "first scrape",
        );
        c
    }

    fn scrape(&self) -> Option<BTreeMap<String, f64>> {
        let (status, _, body) = request(
            self.port,
            "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            b"",
        )?;
        (status == 200).then(|| parse_metrics(&String::from_utf8_lossy(&body)))
    }

    fn wait_until(
        &self,
        pred: impl Fn(&BTreeMap<String, f64>) -> bool,
        what: &str,
    ) -> BTreeMap<String, f64> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(m) = self.scrape()
                && pred(&m)
            {
                return m;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn terminate(self) -> std::process::ExitStatus {
        self.proc.terminate()
    }

    fn kill9(self) {
        drop(self.proc);
    }
}

fn gzip(b: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(b).expect("gzip");
    e.finish().expect("gzip")
}

/// The capture's bodies as protobuf (read from the JSON by opentelemetry-proto's serde).
fn as_protobuf(signal: &str, json: &[u8]) -> Vec<u8> {
    match signal {
        "logs" => serde_json::from_slice::<ExportLogsServiceRequest>(json)
            .expect("logs")
            .encode_to_vec(),
        "traces" => serde_json::from_slice::<ExportTraceServiceRequest>(json)
            .expect("traces")
            .encode_to_vec(),
        _ => serde_json::from_slice::<ExportMetricsServiceRequest>(json)
            .expect("metrics")
            .encode_to_vec(),
    }
}

fn grpc_send(
    port: u16,
    signal: &str,
    json: &[u8],
    token: Option<&str>,
) -> Result<(), tonic::Status> {
    grpc_send_with(port, signal, json, token, false)
}

/// gRPC export; `gzip` compresses the request (`grpc-encoding: gzip`), as gemini-cli does.
fn grpc_send_with(
    port: u16,
    signal: &str,
    json: &[u8],
    token: Option<&str>,
    gzip: bool,
) -> Result<(), tonic::Status> {
    use tonic::codec::CompressionEncoding::Gzip;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let url = format!("http://127.0.0.1:{port}");
        let auth = token.map(|t| format!("Bearer {t}"));
        macro_rules! req {
            ($msg:expr) => {{
                let mut r = tonic::Request::new($msg);
                if let Some(a) = &auth {
                    r.metadata_mut()
                        .insert("authorization", a.parse().expect("ascii"));
                }
                r
            }};
        }
        let conn = |e: tonic::transport::Error| tonic::Status::unavailable(e.to_string());
        match signal {
            "logs" => {
                let mut c = LogsServiceClient::connect(url).await.map_err(conn)?;
                if gzip {
                    c = c.send_compressed(Gzip);
                }
                let msg: ExportLogsServiceRequest = serde_json::from_slice(json).expect("logs");
                c.export(req!(msg)).await.map(|_| ())
            }
            "traces" => {
                let mut c = TraceServiceClient::connect(url).await.map_err(conn)?;
                if gzip {
                    c = c.send_compressed(Gzip);
                }
                let msg: ExportTraceServiceRequest = serde_json::from_slice(json).expect("traces");
                c.export(req!(msg)).await.map(|_| ())
            }
            _ => {
                let mut c = MetricsServiceClient::connect(url).await.map_err(conn)?;
                if gzip {
                    c = c.send_compressed(Gzip);
                }
                let msg: ExportMetricsServiceRequest =
                    serde_json::from_slice(json).expect("metrics");
                c.export(req!(msg)).await.map(|_| ())
            }
        }
    })
}

/// Findings of a run, sorted, as the findings file has them.
fn findings(path: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect();
    v.sort();
    v
}

/// Turn-level series: what the data says, whichever way it came.
fn turn_level(m: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    m.iter()
        .filter(|(k, v)| {
            **v != 0.0
                && [
                    "retryscope_turns_total",
                    "retryscope_retries_total",
                    "retryscope_findings_total",
                    "retryscope_attempts_total",
                ]
                .iter()
                .any(|p| k.starts_with(p))
        })
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

fn run_args(dir: &Path) -> Vec<String> {
    vec![
        "--findings-out".into(),
        dir.join("findings.jsonl").display().to_string(),
        "--idle-timeout-secs".into(),
        "2".into(),
    ]
}

#[test]
fn gemini_cli_otlp_json_over_http_gives_what_its_telemetry_outfile_gives() {
    // Reference: the same scenario recorded with the telemetry outfile, tailed.
    let ref_dir = tempfile::tempdir().expect("tmp");
    let outfile = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/agents/gemini-cli/after-tool-reset/telemetry.log");
    let mut args = run_args(ref_dir.path());
    args.insert(0, outfile.display().to_string());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let c = Collector::start(&args);
    let reference = c.wait_until(
        |m| sum(m, "retryscope_turns_total{") >= 3.0,
        "the outfile's turns",
    );
    assert!(c.terminate().success());

    let dir = tempfile::tempdir().expect("tmp");
    let args = run_args(dir.path());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let c = Collector::start(&args);
    for (signal, body) in capture("otlp-after-tool-reset") {
        let (status, head, resp) = post(
            c.http,
            &format!("/v1/{signal}"),
            &[("Content-Type", "application/json")],
            &body,
            true,
        );
        assert_eq!(status, 200, "{signal}: {head}");
        assert_eq!(resp, b"{}");
    }
    let got = c.wait_until(|m| sum(m, "retryscope_turns_total{") >= 3.0, "OTLP turns");
    std::thread::sleep(Duration::from_millis(1500));
    let got_final = c.scrape().expect("scrape");
    assert!(c.terminate().success());
    assert_eq!(turn_level(&got), turn_level(&reference));
    assert_eq!(
        turn_level(&got_final),
        turn_level(&reference),
        "nothing later"
    );
    let key = |s: &str, p: &str, o: &str| {
        format!(
            "retryscope_otlp_receiver_requests_total{{signal=\"{s}\",protocol=\"{p}\",outcome=\"{o}\"}}"
        )
    };
    for s in ["logs", "traces", "metrics"] {
        assert_eq!(
            got_final.get(&key(s, "http_json", "accepted")),
            Some(&1.0),
            "{s}"
        );
    }
    assert_eq!(
        got_final.get("retryscope_otlp_receiver_records_total{signal=\"logs\"}"),
        Some(&25.0)
    );
    assert_eq!(
        got_final.get("retryscope_events_read_total{source=\"otlp\"}"),
        Some(&32.0),
        "25 log records and 7 spans"
    );
    assert_eq!(
        got_final
            .get("retryscope_bad_lines_total{source=\"otlp\",reason=\"invalid_json\"}")
            .copied()
            .unwrap_or(0.0),
        0.0
    );
    let f = findings(&dir.path().join("findings.jsonl"));
    assert_eq!(f.len(), 2, "{f:?}");
    assert!(f.iter().any(|l| l.contains("\"abandoned_tool_executed\"")));
    assert!(f.iter().any(|l| l.contains("\"unfinished_tool_executed\"")));
}

#[test]
fn protobuf_gzip_over_http_and_grpc_plain_or_gzip_give_the_same_findings_as_json() {
    let mut results = Vec::new();
    for how in ["json", "protobuf-gzip", "grpc", "grpc-gzip"] {
        let dir = tempfile::tempdir().expect("tmp");
        let args = run_args(dir.path());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let c = Collector::start(&args);
        for (signal, body) in capture("otlp-after-tool-reset") {
            match how {
                "json" => {
                    let (status, head, _) = post(
                        c.http,
                        &format!("/v1/{signal}"),
                        &[("Content-Type", "application/json")],
                        &body,
                        false,
                    );
                    assert_eq!(status, 200, "{head}");
                }
                "protobuf-gzip" => {
                    let (status, head, resp) = post(
                        c.http,
                        &format!("/v1/{signal}"),
                        &[
                            ("Content-Type", "application/x-protobuf"),
                            ("Content-Encoding", "gzip"),
                        ],
                        &gzip(&as_protobuf(&signal, &body)),
                        true,
                    );
                    assert_eq!(status, 200, "{head}");
                    assert!(resp.is_empty(), "an empty export response");
                }
                "grpc" => grpc_send(c.grpc, &signal, &body, None).expect("gRPC export"),
                _ => grpc_send_with(c.grpc, &signal, &body, None, true).expect("gRPC gzip"),
            }
        }
        let m = c.wait_until(|m| sum(m, "retryscope_turns_total{") >= 3.0, how);
        assert!(c.terminate().success());
        results.push((
            how,
            turn_level(&m),
            findings(&dir.path().join("findings.jsonl")),
        ));
    }
    assert_eq!(results[0].2.len(), 2);
    for (how, m, f) in &results[1..] {
        assert_eq!(m, &results[0].1, "{how}");
        assert_eq!(f, &results[0].2, "{how}");
    }
}

#[test]
fn refused_requests_say_why_and_the_receiver_goes_on() {
    let dir = tempfile::tempdir().expect("tmp");
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret\n").expect("token");
    let config = dir.path().join("run.toml");
    std::fs::write(&config, "[otlp_receiver]\nmax_request_bytes = 4000\n").expect("config");
    let c = Collector::start(&[
        "--config",
        config.to_str().expect("utf-8"),
        "--otlp-listen-token-file",
        token.to_str().expect("utf-8"),
        "--findings-out",
        "",
    ]);
    let json = [("Content-Type", "application/json")];
    let auth = ("Authorization", "Bearer s3cret");
    let small = br#"{"resourceLogs":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"t"}}]},"scopeLogs":[{"logRecords":[{"body":{"stringValue":"x"}}]}]}]}"#;
    // No token, a wrong one.
    let (s, h, b) = post(c.http, "/v1/logs", &json, small, false);
    assert_eq!(s, 401, "{h}");
    assert!(String::from_utf8_lossy(&b).contains("bearer token"));
    let (s, _, _) = post(
        c.http,
        "/v1/logs",
        &[json[0], ("Authorization", "Bearer wrong")],
        small,
        false,
    );
    assert_eq!(s, 401);
    let e = grpc_send(c.grpc, "logs", small, None).expect_err("no token");
    assert_eq!(e.code(), tonic::Code::Unauthenticated);
    // Too large: by content-length, chunked, and decompressed (a small gzip of 1 MB).
    let big = vec![b' '; 10_000];
    for (headers, body, chunked) in [
        (vec![json[0], auth], big.clone(), false),
        (vec![json[0], auth], big.clone(), true),
        (
            vec![json[0], auth, ("Content-Encoding", "gzip")],
            gzip(&vec![b' '; 1 << 20]),
            false,
        ),
    ] {
        let (s, h, b) = post(c.http, "/v1/logs", &headers, &body, chunked);
        assert_eq!(s, 413, "{h}");
        let msg = String::from_utf8_lossy(&b).into_owned();
        assert!(msg.contains("limit of 4000 bytes"), "{msg}");
    }
    let big_json =
        String::from_utf8_lossy(small).replace("\"x\"", &format!("\"{}\"", "x".repeat(5000)));
    let big_json = big_json.as_bytes();
    let e = grpc_send(c.grpc, "logs", big_json, Some("s3cret")).expect_err("too large");
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
    assert!(e.message().contains("limit of 4000 bytes"), "{e:?}");
    // A small gzip'd message that decompresses past the limit.
    let bomb =
        String::from_utf8_lossy(small).replace("\"x\"", &format!("\"{}\"", "x".repeat(100_000)));
    let e =
        grpc_send_with(c.grpc, "logs", bomb.as_bytes(), Some("s3cret"), true).expect_err("bomb");
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
    assert!(e.message().contains("(decompressed)"), "{e:?}");
    // Malformed bodies.
    let (s, _, b) = post(
        c.http,
        "/v1/logs",
        &[json[0], auth],
        b"{\"resourceLogs\":",
        false,
    );
    assert_eq!(s, 400);
    assert!(String::from_utf8_lossy(&b).contains("not valid JSON"));
    let (s, _, b) = post(
        c.http,
        "/v1/traces",
        &[("Content-Type", "application/x-protobuf"), auth],
        b"\xff\xff\xff\xff not protobuf",
        false,
    );
    assert_eq!(s, 400);
    let status = RpcStatus::decode(&b[..]).expect("a google.rpc.Status body");
    assert_eq!(status.code, 3, "INVALID_ARGUMENT");
    assert!(
        status.message.contains("not a valid protobuf"),
        "{status:?}"
    );
    let (s, _, _) = post(
        c.http,
        "/v1/logs",
        &[json[0], auth, ("Content-Encoding", "gzip")],
        b"not gzip",
        false,
    );
    assert_eq!(s, 400);
    // Wrong content type, method, path.
    let (s, _, _) = post(
        c.http,
        "/v1/logs",
        &[("Content-Type", "text/plain"), auth],
        small,
        false,
    );
    assert_eq!(s, 415);
    let (s, _, _) = post(c.http, "/v1/profiles", &[json[0], auth], small, false);
    assert_eq!(s, 404);
    let (s, _, _) = request(
        c.http,
        "GET /v1/logs HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        b"",
    )
    .expect("answer");
    assert_eq!(s, 405);
    // And a good request still goes through, on both protocols.
    let (s, h, _) = post(c.http, "/v1/logs", &[json[0], auth], small, false);
    assert_eq!(s, 200, "{h}");
    grpc_send(c.grpc, "logs", small, Some("s3cret")).expect("accepted");
    let m = c.wait_until(
        |m| m.get("retryscope_events_read_total{source=\"otlp\"}") == Some(&2.0),
        "two records",
    );
    let k = |p: &str, o: &str| {
        m.get(&format!(
            "retryscope_otlp_receiver_requests_total{{signal=\"logs\",protocol=\"{p}\",outcome=\"{o}\"}}"
        ))
        .copied()
        .unwrap_or(0.0)
    };
    assert_eq!(k("http_json", "unauthorized"), 2.0);
    assert_eq!(k("grpc", "unauthorized"), 1.0);
    assert_eq!(k("http_json", "too_large"), 3.0);
    assert_eq!(k("grpc", "too_large"), 2.0);
    assert_eq!(k("http_json", "malformed"), 2.0);
    assert_eq!(k("http_json", "unsupported"), 1.0);
    assert_eq!(k("http_json", "accepted"), 1.0);
    assert_eq!(k("grpc", "accepted"), 1.0);
    assert!(c.terminate().success());
}

#[test]
fn kill_9_between_acknowledgement_and_checkpoint_loses_nothing() {
    let dir = tempfile::tempdir().expect("tmp");
    let data = dir.path().join("data");
    let config = dir.path().join("run.toml");
    // No periodic checkpoint during the test: only the first one, before anything was read.
    std::fs::write(&config, "checkpoint_interval_secs = 3600\n").expect("config");
    let findings_path = dir.path().join("findings.jsonl");
    let args = [
        "--config",
        config.to_str().expect("utf-8"),
        "--data-dir",
        data.to_str().expect("utf-8"),
        "--findings-out",
        findings_path.to_str().expect("utf-8"),
        "--idle-timeout-secs",
        "2",
    ];
    let c = Collector::start(&args);
    for (signal, body) in capture("otlp-after-tool-reset") {
        let (status, head, _) = post(
            c.http,
            &format!("/v1/{signal}"),
            &[("Content-Type", "application/json")],
            &body,
            true,
        );
        assert_eq!(status, 200, "{head}");
    }
    // Acknowledged and read by the engine (findings may be written), never checkpointed.
    c.wait_until(
        |m| m.get("retryscope_events_read_total{source=\"otlp\"}") == Some(&32.0),
        "records read",
    );
    assert_eq!(
        c.scrape()
            .expect("scrape")
            .get("retryscope_checkpoint_writes_total"),
        Some(&1.0)
    );
    c.kill9();
    let spooled: u64 = std::fs::read_dir(data.join("otlp-spool"))
        .expect("spool")
        .flatten()
        .map(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
        .sum();
    assert!(
        spooled > 10_000,
        "the records are in the spool ({spooled} bytes)"
    );
    // The restart replays the spool from the checkpoint: everything once.
    let c = Collector::start(&args);
    let m = c.wait_until(
        |m| sum(m, "retryscope_turns_total{") >= 3.0,
        "replayed turns",
    );
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        m.get("retryscope_events_read_total{source=\"otlp\"}"),
        Some(&32.0),
        "each record read once in the checkpointed counts"
    );
    assert!(c.terminate().success());
    let f = findings(&findings_path);
    assert_eq!(f.len(), 2, "each finding exactly once: {f:?}");
    // The checkpoint at shutdown covered the replayed segment: it is gone.
    let c = Collector::start(&args);
    assert!(c.terminate().success());
    let segments = std::fs::read_dir(data.join("otlp-spool"))
        .expect("spool")
        .flatten()
        .count();
    assert!(segments <= 2, "{segments} spool segments left");
    assert_eq!(findings(&findings_path).len(), 2, "nothing replayed twice");
}

/// Regression: gemini-cli records held for the session join were not in the checkpoint, whose
/// spool position was already past them, so a kill -9 before the session went quiet lost
/// acknowledged records.
#[test]
fn kill_9_while_acknowledged_gemini_cli_records_are_held_for_the_join_loses_none() {
    let dir = tempfile::tempdir().expect("tmp");
    let data = dir.path().join("data");
    let findings_path = dir.path().join("findings.jsonl");
    // A tailed file (where the session's stream-json could come from) makes the run hold
    // gemini-cli's OTLP records for the join; it stays empty here.
    let stream_json = dir.path().join("stream.jsonl");
    std::fs::write(&stream_json, b"").expect("write");
    let mut args = run_args(dir.path());
    args.extend(["--data-dir".into(), data.display().to_string()]);
    args.push(stream_json.display().to_string());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let c = Collector::start(&args);
    for (signal, body) in capture("otlp-after-tool-reset") {
        let (status, head, _) = post(
            c.http,
            &format!("/v1/{signal}"),
            &[("Content-Type", "application/json")],
            &body,
            true,
        );
        assert_eq!(status, 200, "{head}");
    }
    let m = c.wait_until(
        |m| m.get("retryscope_events_read_total{source=\"otlp\"}") == Some(&32.0),
        "records read",
    );
    let written = m
        .get("retryscope_checkpoint_writes_total")
        .copied()
        .unwrap_or(0.0);
    let m = c.wait_until(
        |m| {
            m.get("retryscope_checkpoint_writes_total")
                .copied()
                .unwrap_or(0.0)
                > written
        },
        "a checkpoint after the records were read",
    );
    assert_eq!(
        sum(&m, "retryscope_findings_total{"),
        0.0,
        "the records are still held when the checkpoint is taken"
    );
    c.kill9();
    let c = Collector::start(&args);
    c.wait_until(
        |m| sum(m, "retryscope_findings_total{") >= 2.0,
        "held records correlated after the restart",
    );
    std::thread::sleep(Duration::from_millis(1500));
    let m = c.scrape().expect("scrape");
    assert_eq!(sum(&m, "retryscope_findings_total{"), 2.0, "nothing twice");
    assert_eq!(
        m.get("retryscope_events_read_total{source=\"otlp\"}"),
        Some(&32.0)
    );
    assert!(c.terminate().success());
    let f = findings(&findings_path);
    assert_eq!(f.len(), 2, "each finding exactly once: {f:?}");
    assert!(f.iter().any(|l| l.contains("\"abandoned_tool_executed\"")));
    assert!(f.iter().any(|l| l.contains("\"unfinished_tool_executed\"")));
}

#[test]
fn listening_beyond_loopback_without_a_token_warns_at_start() {
    let (metrics, http) = (free_port(), free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .args(["run", "--findings-out", ""])
        .args(["--metrics-addr", &format!("127.0.0.1:{metrics}")])
        .args(["--otlp-listen", &format!("0.0.0.0:{http}")])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start");
    std::thread::sleep(Duration::from_secs(2));
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    let _ = child.wait();
    assert!(
        err.contains("listens beyond loopback without a token"),
        "{err}"
    );
}

/// Regression (found by examples/bench_otlp): a run that reads only OTLP held gemini-cli's
/// records for a stream-json join that could never come, delaying every finding by the quiet
/// period and holding that period's records in memory (1.2 GiB under overload). Without files
/// or stdin, nothing is held: the checkpoint taken after the records were read holds none.
#[test]
fn otlp_only_run_holds_nothing_for_a_join_that_cannot_come() {
    let dir = tempfile::tempdir().expect("tmp");
    let data = dir.path().join("data");
    let mut args = run_args(dir.path());
    args.extend(["--data-dir".into(), data.display().to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let c = Collector::start(&args);
    for (signal, body) in capture("otlp-after-tool-reset") {
        let (status, head, _) = post(
            c.http,
            &format!("/v1/{signal}"),
            &[("Content-Type", "application/json")],
            &body,
            true,
        );
        assert_eq!(status, 200, "{head}");
    }
    let m = c.wait_until(
        |m| m.get("retryscope_events_read_total{source=\"otlp\"}") == Some(&32.0),
        "records read",
    );
    let written = m
        .get("retryscope_checkpoint_writes_total")
        .copied()
        .unwrap_or(0.0);
    c.wait_until(
        |m| {
            m.get("retryscope_checkpoint_writes_total")
                .copied()
                .unwrap_or(0.0)
                > written
        },
        "a checkpoint after the records were read",
    );
    let checkpoint: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(data.join("checkpoint.json")).expect("checkpoint"),
    )
    .expect("checkpoint JSON");
    assert!(
        checkpoint
            .get("joined")
            .is_none_or(serde_json::Value::is_null),
        "nothing held: {:?}",
        checkpoint.get("joined")
    );
    assert!(c.terminate().success());
}
