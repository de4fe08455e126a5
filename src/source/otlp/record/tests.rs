//! The two request mappings against the committed real captures
//! (`tests/fixtures/agents/<client>/otlp-*/otlp/*.json`: the OTLP/JSON bodies gemini-cli
//! 0.61.0, Claude Code 2.1.328 and Codex 0.169.0 POSTed, saved as they came). Each body is read
//! both ways: by the OTLP/JSON mapping, and as a protobuf message (opentelemetry-proto's serde
//! reading of the same JSON, encoded and decoded again): the lines must be identical.

use std::path::{Path, PathBuf};

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use serde_json::Value;

use super::*;
use crate::source::otlp::json;

fn captures() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/agents");
    let mut out = Vec::new();
    for client in ["gemini-cli", "claude-code", "codex"] {
        for scenario in ["otlp-clean", "otlp-after-tool-reset"] {
            let dir = root.join(client).join(scenario).join("otlp");
            for e in std::fs::read_dir(&dir).expect("capture folder").flatten() {
                if e.path().extension().is_some_and(|x| x == "json") {
                    out.push(e.path());
                }
            }
        }
    }
    out.sort();
    out
}

/// A protobuf round trip of a message read from OTLP/JSON.
fn roundtrip<M: Message + Default>(m: &M) -> M {
    M::decode(m.encode_to_vec().as_slice()).expect("protobuf decodes")
}

#[test]
fn json_and_protobuf_of_every_real_capture_give_the_same_typed_lines() {
    let mut compared = 0;
    for path in captures() {
        let body = std::fs::read(&path).expect("capture");
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let (mut from_json, mut from_proto) = (Vec::new(), Vec::new());
        if name.contains("-v1-logs") {
            json::logs(&body, &mut from_json).expect("logs JSON");
            let req: ExportLogsServiceRequest = serde_json::from_slice(&body).expect("serde");
            logs_from_proto(&roundtrip(&req), &mut from_proto);
        } else if name.contains("-v1-traces") {
            json::spans(&body, &mut from_json).expect("traces JSON");
            let req: ExportTraceServiceRequest = serde_json::from_slice(&body).expect("serde");
            spans_from_proto(&roundtrip(&req), &mut from_proto);
        } else {
            let n = json::metric_points(&body).expect("metrics JSON");
            let req: ExportMetricsServiceRequest = serde_json::from_slice(&body).expect("serde");
            assert_eq!(
                n,
                metric_points_proto(&roundtrip(&req)),
                "{}",
                path.display()
            );
            assert!(n > 0, "{}: no data points", path.display());
            continue;
        }
        assert!(!from_json.is_empty(), "{}: no records", path.display());
        assert_eq!(from_json.len(), from_proto.len(), "{}", path.display());
        for (a, b) in from_json.iter().zip(&from_proto) {
            assert_eq!(
                a.stream,
                b.stream,
                "{}: {}",
                path.display(),
                String::from_utf8_lossy(&b.line)
            );
            let (va, vb): (Value, Value) = (
                serde_json::from_slice(&a.line).expect("line"),
                serde_json::from_slice(&b.line).expect("line"),
            );
            assert_eq!(va, vb, "{}", path.display());
            // Both writers keep the typed contract the decoder reads: the line reads as a
            // `Line` and writes back as itself.
            let typed: retryscope_core::decode::otlp::line::Read =
                serde_json::from_slice(&a.line).expect("a typed line");
            assert_eq!(serde_json::to_value(&typed).expect("value"), va);
        }
        compared += from_json.len();
    }
    assert!(compared > 500, "only {compared} records compared");
}

#[test]
fn gemini_cli_records_keep_their_session_and_plain_values() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/agents/gemini-cli/otlp-after-tool-reset/otlp/0002-v1-logs.json");
    let body = std::fs::read(root).expect("capture");
    let mut recs = Vec::new();
    json::logs(&body, &mut recs).expect("logs");
    assert_eq!(recs.len(), 25);
    // One session: one stream.
    assert!(
        recs.iter()
            .all(|r| r.stream == "otlp:gemini-cli/655a2dc1-e6da-4aa2-912b-bccf9d2a6d42")
    );
    let lines: Vec<Value> = recs
        .iter()
        .map(|r| serde_json::from_slice(&r.line).expect("line"))
        .collect();
    let retry = lines
        .iter()
        .find(|l| l["attributes"]["event.name"] == "gemini_cli.network_retry_attempt")
        .expect("retry record");
    assert_eq!(retry["otlp"], "log");
    assert_eq!(retry["service"], "gemini-cli");
    assert_eq!(retry["attributes"]["attempt"], 1);
    assert_eq!(retry["attributes"]["error_type"], "ECONNRESET");
    assert!(
        retry["time_unix_nano"]
            .as_u64()
            .is_some_and(|t| t > 1_700_000_000_000_000_000)
    );
    let with_trace = lines
        .iter()
        .find(|l| l.get("trace_id").is_some())
        .expect("ids");
    let id = with_trace["trace_id"].as_str().unwrap_or("");
    assert_eq!(id.len(), 32);
    assert!(
        id.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    );
    // An empty OTLP value is null.
    let details = lines
        .iter()
        .find(|l| l["attributes"]["event.name"] == "gen_ai.client.inference.operation.details")
        .expect("details");
    assert_eq!(details["attributes"]["gen_ai.request.seed"], Value::Null);
}

#[test]
fn malformed_json_bodies_are_refused_with_the_field_named() {
    let mut out = Vec::new();
    for (body, want) in [
        (&b"not json"[..], "not valid JSON"),
        (b"[1,2]", "must be a JSON object"),
        (b"{\"resourceLogs\": 3}", "`resourceLogs` must be an array"),
        (
            b"{\"resourceLogs\": [7]}",
            "`resourceLogs[]` must be a JSON object",
        ),
        (
            b"{\"resourceLogs\": [{\"scopeLogs\": [{\"logRecords\": {}}]}]}",
            "`logRecords` must be an array",
        ),
    ] {
        let e = json::logs(body, &mut out).expect_err("refused");
        assert!(
            e.0.contains(want),
            "{}: {}",
            String::from_utf8_lossy(body),
            e.0
        );
    }
    assert!(out.is_empty());
    // An empty request is a valid request with nothing in it.
    json::logs(b"{}", &mut out).expect("empty");
    json::spans(b"{\"resourceSpans\": []}", &mut out).expect("empty");
    assert!(out.is_empty());
}

#[test]
fn intvalue_as_string_or_number_and_enum_names_are_read() {
    let body = br#"{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"svc"}}]},
      "scopeSpans":[{"scope":{"name":"s"},"spans":[{"traceId":"5B8EFFF798038103D269B633813FC60C","spanId":"EEE19B7EC3C1B174",
      "name":"chat m","kind":"SPAN_KIND_CLIENT","startTimeUnixNano":"1544712660000000000","endTimeUnixNano":1544712661000000000,
      "status":{"code":"STATUS_CODE_ERROR","message":"boom"},
      "attributes":[{"key":"a","value":{"intValue":"42"}},{"key":"b","value":{"intValue":43}},{"key":"d","value":{"doubleValue":"NaN"}},
      {"key":"gen_ai.conversation.id","value":{"stringValue":"c1"}},
      {"key":"l","value":{"arrayValue":{"values":[{"stringValue":"x"},{"boolValue":true}]}}},
      {"key":"m","value":{"kvlistValue":{"values":[{"key":"k","value":{"doubleValue":1.5}}]}}}]}]}]}]}"#;
    let mut out = Vec::new();
    json::spans(body, &mut out).expect("spans");
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].stream, "otlp:svc/c1");
    let v: Value = serde_json::from_slice(&out[0].line).expect("line");
    assert_eq!(v["kind"], 3);
    assert_eq!(v["status"]["code"], 2);
    assert_eq!(v["trace_id"], "5b8efff798038103d269b633813fc60c");
    assert_eq!(v["start_time_unix_nano"], 1_544_712_660_000_000_000u64);
    assert_eq!(v["end_time_unix_nano"], 1_544_712_661_000_000_000u64);
    assert_eq!(v["attributes"]["a"], 42);
    assert_eq!(v["attributes"]["b"], 43);
    assert_eq!(v["attributes"]["d"], Value::Null);
    assert_eq!(v["attributes"]["l"], serde_json::json!(["x", true]));
    assert_eq!(v["attributes"]["m"]["k"], 1.5);
}

#[test]
fn control_characters_in_names_never_reach_a_stream_name() {
    assert_eq!(stream_name("a\tb", "s\ne"), "otlp:a_b/s_e");
    assert_eq!(
        stream_name(&"x".repeat(500), "").len(),
        "otlp:/".len() + MAX_NAME
    );
}
