//! The intake bounds: the decoded-size estimate against real captures (gemini-cli 0.61.0's
//! OTLP bodies in `tests/fixtures/agents/`) and against the amplification request of issue 24
//! (empty log records), the gzip bound across all messages of a gRPC request, and the queue's
//! reservation refusing before decoding.

use std::io::Write;
use std::sync::Arc;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use prost::Message;

use super::*;
use crate::source::otlp::queue::Queue;
use crate::source::otlp::record;

fn capture(name: &str) -> Vec<u8> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/agents/gemini-cli/otlp-clean/otlp")
        .join(name);
    std::fs::read(p).expect("capture")
}

fn decoded_bytes(records: &[record::Record]) -> u64 {
    records
        .iter()
        .map(|r| (r.line.capacity() + r.stream.capacity() + std::mem::size_of_val(r)) as u64)
        .sum()
}

#[test]
fn the_estimate_covers_what_real_requests_decode_to() {
    let logs: ExportLogsServiceRequest =
        serde_json::from_slice(&capture("0002-v1-logs.json")).expect("logs");
    let spans: ExportTraceServiceRequest =
        serde_json::from_slice(&capture("0001-v1-traces.json")).expect("traces");
    let mut out = Vec::new();
    record::logs_from_proto(&logs, &mut out);
    let wire = logs.encode_to_vec();
    let est = protobuf_estimate(&wire, u64::MAX);
    let n = out.len() as u64;
    assert!(n > 0);
    assert!(
        est >= decoded_bytes(&out),
        "{est} < {}",
        decoded_bytes(&out)
    );
    // Not absurd: within 64 times the wire size.
    assert!(
        est <= 64 * wire.len() as u64,
        "{est} vs {} wire",
        wire.len()
    );
    out.clear();
    record::spans_from_proto(&spans, &mut out);
    let wire = spans.encode_to_vec();
    let est = protobuf_estimate(&wire, u64::MAX);
    assert!(est >= decoded_bytes(&out));
    assert!(est <= 64 * wire.len() as u64);
}

fn empty_records(n: usize) -> Vec<u8> {
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            scope_logs: vec![ScopeLogs {
                log_records: vec![LogRecord::default(); n],
                ..ScopeLogs::default()
            }],
            ..ResourceLogs::default()
        }],
    }
    .encode_to_vec()
}

#[test]
fn empty_records_are_charged_what_they_decode_to() {
    // Issue 24: 2 wire bytes per empty record became a ~100 B line in a 256 B buffer, plus the
    // decoded message: a 7.8 KB gzip request reached 2.56 GiB.
    let n = 100_000;
    let wire = empty_records(n);
    assert!(wire.len() < 3 * n);
    let est = protobuf_estimate(&wire, u64::MAX);
    let req = ExportLogsServiceRequest::decode(&wire[..]).expect("decode");
    let mut out = Vec::new();
    record::logs_from_proto(&req, &mut out);
    let held = decoded_bytes(&out) + (n * std::mem::size_of::<LogRecord>()) as u64;
    assert!(est >= held, "estimate {est} < {held} decoded");
    // No fixed buffer per record any more: a line is its own size.
    assert!(out.iter().all(|r| r.line.capacity() == r.line.len()));
}

#[test]
fn the_walk_is_not_fooled_by_nesting_or_garbage() {
    assert_eq!(protobuf_estimate(b"", u64::MAX), 0);
    // Garbage: never panics, charged at least twice its size.
    let junk: Vec<u8> = (0..10_000u32).map(|i| (i * 7919 % 251) as u8).collect();
    assert!(protobuf_estimate(&junk, u64::MAX) >= 2 * junk.len() as u64);
    // Deeply nested empty messages (field 1, length-delimited) are all charged.
    let mut msg = Vec::new();
    for _ in 0..1000 {
        let mut outer = vec![0x0a];
        let mut len = msg.len();
        loop {
            let b = (len & 0x7f) as u8;
            len >>= 7;
            if len == 0 {
                outer.push(b);
                break;
            }
            outer.push(b | 0x80);
        }
        outer.extend_from_slice(&msg);
        msg = outer;
    }
    assert!(protobuf_estimate(&msg, u64::MAX) >= 500 * MESSAGE_COST);
}

fn gz(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(data).expect("gzip");
    e.finish().expect("gzip")
}

fn frame(compressed: bool, msg: &[u8]) -> Vec<u8> {
    let mut f = vec![u8::from(compressed)];
    f.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    f.extend_from_slice(msg);
    f
}

#[test]
fn inflation_is_bounded_across_all_messages_of_a_request() {
    let queue = Arc::new(Queue::new(1 << 30));
    let limit = 1 << 20;
    // Each message alone is under the limit; together they are over it (the old bound was per
    // message: N messages could inflate to N times the limit).
    let part = gz(&vec![0u8; limit / 2 + 1]);
    let body: Vec<u8> = [frame(true, &part), frame(true, &part)].concat();
    let mut res = queue.reserve();
    let r = grpc_frames(&body, true, limit, &mut res).expect_err("over the limit");
    assert_eq!(r.outcome, Outcome::TooLarge);
    // What was inflated before the refusal was charged (the buffer's capacity: at most twice
    // the limit, never the whole inflation).
    assert!(
        res.bytes() <= 2 * limit as u64 + (64 << 10),
        "{}",
        res.bytes()
    );
    drop(res);
    assert_eq!(queue.reserved(), 0);
    // A bomb in one message: refused at the limit, not inflated whole.
    let bomb = gz(&vec![0u8; 64 << 20]);
    let mut res = queue.reserve();
    let r = grpc_frames(&frame(true, &bomb), true, limit, &mut res).expect_err("bomb");
    assert_eq!(r.outcome, Outcome::TooLarge);
    assert!(
        res.bytes() <= 2 * limit as u64 + (64 << 10),
        "{}",
        res.bytes()
    );
    // Under the limit, all messages come out uncompressed.
    let ok: Vec<u8> = [frame(true, &gz(b"abc")), frame(false, b"de")].concat();
    let mut res = queue.reserve();
    let out = grpc_frames(&ok, true, limit, &mut res).expect("ok");
    assert_eq!(
        &out[..],
        &[frame(false, b"abc"), frame(false, b"de")].concat()[..]
    );
}

#[test]
fn a_request_that_cannot_fit_is_refused_before_it_is_decoded() {
    let queue = Arc::new(Queue::new(1 << 20));
    let wire = empty_records(100_000);
    let mut res = queue.reserve();
    res.grow(wire.len() as u64).expect("the body fits");
    // The estimate does not: refused as too large (not retryable), before any decoding,
    // although the queue is empty (it used to admit any request when empty).
    let e = res
        .grow(protobuf_estimate(&wire, u64::MAX))
        .expect_err("too large");
    assert!(matches!(e, Refused::TooLarge { .. }), "{e}");
    assert_eq!(refused(e).outcome, Outcome::TooLarge);
    // Reservations of requests in flight count against each other: retryable.
    let mut a = queue.reserve();
    a.grow(700 << 10).expect("a");
    let mut b = queue.reserve();
    assert!(matches!(b.grow(400 << 10), Err(Refused::Full { .. })));
    drop(a);
    b.grow(400 << 10).expect("room again");
    drop(b);
    drop(res);
    assert_eq!(queue.reserved(), 0);
    // A batch larger than the queue is refused even when the queue is empty.
    let big = vec![
        record::Record {
            stream: "s".into(),
            line: vec![b'x'; 2 << 20],
        };
        1
    ];
    assert!(matches!(queue.offer(big), Err(Refused::TooLarge { .. })));
}
