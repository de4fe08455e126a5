//! Backpressure of the OTLP receiver, without the engine: a pipeline that takes nothing fills
//! the bounded queue, after which every request is refused with a retryable answer (HTTP 429
//! with `Retry-After`, gRPC UNAVAILABLE), never accepted and dropped. Clients that retry as
//! OTLP exporters do get everything through once the pipeline drains, each record exactly once.
//! The records are small synthetic log records (numbered, so loss and duplicates show).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_client::LogsServiceClient;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use prost::Message;
use retryscope::internal_events::OtlpReport;
use retryscope::sink::metrics::{Metrics, MetricsConfig};
use retryscope::source::otlp::{Queue, Receiver, ReceiverConfig, grpc, http, intake};
use tokio::sync::watch;

const PER_REQUEST: u64 = 20;

fn request(first: u64) -> ExportLogsServiceRequest {
    let records = (first..first + PER_REQUEST)
        .map(|n| LogRecord {
            time_unix_nano: 1_796_227_707_000_000_000 + n,
            body: Some(AnyValue {
                value: Some(any_value::Value::StringValue(format!("{n:08}"))),
            }),
            attributes: vec![KeyValue {
                key: "session.id".into(),
                value: Some(AnyValue {
                    value: Some(any_value::Value::StringValue("s1".into())),
                }),
                ..KeyValue::default()
            }],
            ..LogRecord::default()
        })
        .collect();
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            scope_logs: vec![ScopeLogs {
                log_records: records,
                ..ScopeLogs::default()
            }],
            ..ResourceLogs::default()
        }],
    }
}

/// POST protobuf; returns the status and whether a `Retry-After` came with it.
fn post(port: u16, body: &[u8]) -> (u16, bool) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let head = format!(
        "POST /v1/logs HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).expect("write");
    s.write_all(body).expect("write");
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).to_ascii_lowercase();
    let status = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, text.contains("\r\nretry-after: 1\r\n"))
}

#[test]
fn a_stalled_pipeline_answers_retryable_and_after_draining_everything_arrives_once() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let metrics = Arc::new(Metrics::new(MetricsConfig::default()).expect("metrics"));
    // Room for a few requests only. A request in flight holds its body (twice over gRPC:
    // as sent and unframed) and the estimate of what decoding it builds.
    let wire = request(0).encode_to_vec().len() as u64;
    let one = intake::protobuf_estimate(&request(0).encode_to_vec(), u64::MAX) + 2 * wire;
    let limit = 3 * one;
    let queue = Arc::new(Queue::new(limit));
    let rx = Arc::new(Receiver::new(
        queue.clone(),
        Arc::new(OtlpReport {
            metrics: metrics.clone(),
        }),
        ReceiverConfig::new(1 << 20, None),
    ));
    let (stop_tx, stop) = watch::channel(false);
    let (http_l, grpc_l) = rt.block_on(async {
        (
            tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind"),
            tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind"),
        )
    });
    let http_port = http_l.local_addr().expect("addr").port();
    let grpc_port = grpc_l.local_addr().expect("addr").port();
    rt.spawn(http::serve(http_l, None, rx.clone(), stop.clone()));
    rt.spawn(grpc::serve(grpc_l, None, rx.clone(), stop.clone()));

    let http_refusals = Arc::new(AtomicU64::new(0));
    let grpc_refusals = Arc::new(AtomicU64::new(0));
    let requests = 60u64; // per protocol
    let mut clients = Vec::new();
    {
        let refusals = http_refusals.clone();
        clients.push(std::thread::spawn(move || {
            for i in 0..requests {
                let body = request(i * PER_REQUEST).encode_to_vec();
                loop {
                    match post(http_port, &body) {
                        (200, _) => break,
                        (429, true) => {
                            refusals.fetch_add(1, Ordering::SeqCst);
                            std::thread::sleep(Duration::from_millis(20));
                        }
                        other => panic!("unexpected answer {other:?}"),
                    }
                }
            }
        }));
    }
    {
        let refusals = grpc_refusals.clone();
        clients.push(std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                let mut c = LogsServiceClient::connect(format!("http://127.0.0.1:{grpc_port}"))
                    .await
                    .expect("connect");
                for i in 0..requests {
                    let msg = request((requests + i) * PER_REQUEST);
                    loop {
                        match c.export(msg.clone()).await {
                            Ok(_) => break,
                            Err(s) if s.code() == tonic::Code::Unavailable => {
                                refusals.fetch_add(1, Ordering::SeqCst);
                                tokio::time::sleep(Duration::from_millis(20)).await;
                            }
                            Err(s) => panic!("unexpected status {s:?}"),
                        }
                    }
                }
            });
        }));
    }
    // The pipeline stalls until both protocols have been refused a few times.
    let deadline = Instant::now() + Duration::from_secs(30);
    while http_refusals.load(Ordering::SeqCst) < 3 || grpc_refusals.load(Ordering::SeqCst) < 3 {
        assert!(Instant::now() < deadline, "never refused");
        std::thread::sleep(Duration::from_millis(10));
    }
    let (_, queued) = queue.depth();
    assert!(queued <= limit, "the queue stayed bounded: {queued} bytes");
    // Then it drains, slowly.
    let mut seen: BTreeMap<String, u32> = BTreeMap::new();
    let mut batches = Vec::new();
    while seen.len() < (2 * requests * PER_REQUEST) as usize {
        assert!(
            Instant::now() < deadline + Duration::from_secs(30),
            "not drained"
        );
        batches.clear();
        queue.take(50, &mut batches);
        for b in &batches {
            for r in &b.records {
                let v: serde_json::Value = serde_json::from_slice(&r.line).expect("line");
                assert_eq!(r.stream, "otlp:/s1");
                *seen
                    .entry(v["body"].as_str().expect("body").to_owned())
                    .or_default() += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    for c in clients {
        c.join().expect("client");
    }
    batches.clear();
    queue.take(usize::MAX, &mut batches);
    assert!(batches.is_empty(), "nothing more than was sent");
    assert_eq!(seen.len() as u64, 2 * requests * PER_REQUEST);
    assert!(seen.values().all(|n| *n == 1), "every record exactly once");
    let busy = |p: &str| {
        metrics
            .value(
                "retryscope_otlp_receiver_requests_total",
                &["logs", p, "busy"],
            )
            .unwrap_or(0.0)
    };
    assert_eq!(
        busy("http_protobuf") as u64,
        http_refusals.load(Ordering::SeqCst)
    );
    assert_eq!(busy("grpc") as u64, grpc_refusals.load(Ordering::SeqCst));
    assert_eq!(
        metrics.value("retryscope_otlp_receiver_records_total", &["logs"]),
        Some((2 * requests * PER_REQUEST) as f64)
    );
    // Closed (shutdown): refused as retryable too, nothing taken in.
    queue.close();
    assert_eq!(post(http_port, &request(0).encode_to_vec()), (503, true));
    let _ = stop_tx.send(true);
}
