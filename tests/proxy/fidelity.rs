//! `retryscope proxy` is transparent: every recorded provider stream in `../shared/fixtures`
//! reaches the client byte for byte, chunk by chunk as it arrives, with its headers (less the
//! hop-by-hop ones), and the attempt it carries reaches the ingest path whole.

use crate::proxy_support;

use std::sync::Arc;
use std::time::Duration;

use proxy_support::{Ending, Mock, in_repo, post, request_for, shared, start_proxy, streams_in};
use retryscope_core::correlate::{Correlator, CorrelatorConfig, Output};
use retryscope_core::cost::PriceTable;
use retryscope_core::decode::Format;
use retryscope_core::ingest::{Ingest, Note, Source};

/// Events and bad lines of the tracker's lines, through the ingest path.
fn ingest(lines: &proxy_support::Lines) -> (u64, u64, Vec<Output>) {
    let mut ing = Ingest::new(
        Correlator::new(CorrelatorConfig::default(), Arc::new(PriceTable::builtin())),
        Format::Native,
    );
    let id = ing.stream(Source::Proxy, "<proxy>");
    let mut out = Vec::new();
    let (mut events, mut bad) = (0u64, 0u64);
    for l in lines.0.lock().expect("lock").iter() {
        ing.line(id, None, l, None, &mut out, &mut |n| {
            if let Note::Line { outcome, .. } = n {
                match outcome {
                    Ok(retryscope_core::pipeline::LineOutcome::Event) => events += 1,
                    Ok(_) => {}
                    Err(_) => bad += 1,
                }
            }
        });
    }
    ing.close_all(&mut out, &mut |_| {});
    (events, bad, out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_recorded_stream_passes_byte_identical() {
    // The real recordings (when the shared folder is here: 31 streams) and the repository's
    // hand-written quirks (always).
    let mut streams = streams_in(&in_repo());
    assert!(
        streams.len() >= 15,
        "in-repo fixtures found: {}",
        streams.len()
    );
    if let Some(root) = shared() {
        let real = streams_in(&root);
        assert!(real.len() >= 25, "shared fixtures found: {}", real.len());
        streams.extend(real);
    }
    for s in streams {
        let mock = Mock::start(vec![s.clone()], None).await;
        let (addr, lines, _proxy) = start_proxy(mock.addr, None, None).await;
        let got = post(addr, &s.path, &request_for(&s.path, "hello"), &[]).await;
        assert_eq!(got.status, 200, "{}", s.name);
        assert_eq!(got.ending, Ending::Clean, "{}", s.name);
        assert!(
            got.body == s.body(),
            "{}: the client got {} bytes, the upstream sent {}",
            s.name,
            got.body.len(),
            s.body().len()
        );
        // The attempt reached the tracker: one envelope per JSON payload, all decodable.
        let chunks = lines.of_type("provider_chunk").len();
        assert!(chunks > 0, "{}: no chunk reached the pipeline", s.name);
        let (events, bad, _) = ingest(&lines);
        assert_eq!(bad, 0, "{}", s.name);
        assert!(events > 0, "{}: no event from {chunks} chunks", s.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunks_are_forwarded_as_they_arrive_not_buffered() {
    // The mock sends the first event, then waits until the client has it: a proxy that
    // buffered the body (or a whole event group) would never deliver it.
    let s = proxy_support::load_from(&in_repo(), "anthropic", "duplicate-message-start.sse");
    let gate = Arc::new(tokio::sync::Notify::new());
    let mock = Mock::start(vec![s.clone()], Some(gate.clone())).await;
    let (addr, _lines, _proxy) = start_proxy(mock.addr, None, None).await;
    let mut tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let body = request_for(&s.path, "hi");
    let req = format!(
        "POST {} HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n{body}",
        s.path,
        body.len()
    );
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    tcp.write_all(req.as_bytes()).await.expect("write");
    let first = String::from_utf8_lossy(&s.parts[0]).into_owned();
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    let got_first = tokio::time::timeout(Duration::from_secs(5), async {
        while !String::from_utf8_lossy(&raw).contains(first.trim_end()) {
            let n = tcp.read(&mut buf).await.expect("read");
            assert!(n > 0, "closed early");
            raw.extend_from_slice(&buf[..n]);
        }
    })
    .await;
    assert!(
        got_first.is_ok(),
        "the first event did not arrive before the rest was sent"
    );
    gate.notify_one();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_pass_but_hop_by_hop_ones_and_secrets_stay_out_of_the_lines() {
    let s = proxy_support::load_from(
        &in_repo(),
        "openai-chat",
        "whole-call-usage-on-finish.chunks.txt",
    );
    let mock = Mock::start(vec![s.clone()], None).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let (addr, lines, _proxy) = start_proxy(mock.addr, None, Some(dir.path().to_path_buf())).await;
    let got = post(
        addr,
        "/v1/chat/completions?key=QUERYSECRET",
        &request_for(&s.path, "hi"),
        &[
            ("authorization", "Bearer sk-SECRET"),
            ("x-api-key", "sk-ant-SECRET"),
            ("x-goog-api-key", "AIzaSECRET"),
            ("x-stainless-retry-count", "0"),
            ("connection", "keep-alive, x-client-hop"),
            ("x-client-hop", "1"),
            ("te", "trailers"),
        ],
    )
    .await;
    assert_eq!(got.body, s.body());
    // Upstream response headers: end-to-end ones pass, the hop-by-hop ones do not.
    assert_eq!(got.header("x-request-id"), Some("req_mock"));
    assert_eq!(got.header("x-hop"), None);
    // Request headers: credentials reach the upstream (it needs them), hop-by-hop ones do not.
    let seen = mock.seen.lock().expect("lock")[0].clone();
    assert_eq!(
        seen.headers
            .get("authorization")
            .map(|v| v.to_str().unwrap_or("")),
        Some("Bearer sk-SECRET")
    );
    assert_eq!(
        seen.headers
            .get("x-stainless-retry-count")
            .map(|v| v.to_str().unwrap_or("")),
        Some("0")
    );
    assert!(seen.headers.get("x-client-hop").is_none());
    assert!(seen.headers.get("te").is_none());
    assert_eq!(seen.path, "/v1/chat/completions?key=QUERYSECRET");
    // Nothing secret in what the pipeline gets, or in the recording.
    let all: Vec<u8> = lines.0.lock().expect("lock").concat();
    assert!(!String::from_utf8_lossy(&all).contains("SECRET"));
    for entry in walk(dir.path()) {
        let text = std::fs::read_to_string(&entry).expect("read");
        assert!(!text.contains("SECRET"), "{}: {text}", entry.display());
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("dir").flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorded_session_is_what_check_reads() {
    // --record: the session file re-checks to the same turns and findings as the live run.
    let s = proxy_support::load_from(
        &in_repo(),
        "openai-chat",
        "whole-call-usage-on-finish.chunks.txt",
    );
    let mock = Mock::start(vec![s.clone()], None).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let rule = retryscope::proxy::InjectRule {
        point: retryscope::proxy::Point::AfterToolCall,
        how: retryscope::proxy::How::Eof,
        first: Some(1),
        fraction: None,
        seed: 0,
        matches: retryscope::proxy::InjectMatch::All,
    };
    // The recording is written by the tee the CLI puts in front of the engine's feed.
    let (addr, lines, _proxy) =
        start_proxy(mock.addr, Some(rule), Some(dir.path().to_path_buf())).await;
    let req = request_for(&s.path, "weather?");
    assert_eq!(post(addr, &s.path, &req, &[]).await.ending, Ending::Clean);
    post(addr, &s.path, &req, &[]).await;
    let path = dir.path().join("session.jsonl");
    let text: Vec<u8> = lines
        .0
        .lock()
        .expect("lock")
        .iter()
        .flat_map(|l| [l.as_slice(), b"\n"].concat())
        .collect();
    std::fs::write(&path, text).expect("write");
    let requests: Vec<_> = std::fs::read_dir(dir.path().join("requests"))
        .expect("requests")
        .collect();
    assert_eq!(requests.len(), 2, "one request file per attempt");
    let (_, _, live) = ingest(&lines);
    let closed: Vec<_> = live
        .iter()
        .filter_map(|o| match o {
            Output::TurnClosed(r) => Some(r.attempts.len()),
            _ => None,
        })
        .collect();
    assert_eq!(closed, [2], "one turn, the cut attempt and its retry");
    let bin = env!("CARGO_BIN_EXE_retryscope");
    let out = std::process::Command::new(bin)
        .args(["check", "--json"])
        .arg(dir.path())
        .output()
        .expect("check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let turn: serde_json::Value =
        serde_json::from_str(stdout.lines().next().expect("a turn line")).expect("json");
    assert_eq!(
        turn["attempts"].as_array().map(Vec::len),
        Some(2),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_streamed_answer_with_a_length_is_finished_and_its_call_known() {
    // A `"stream": false` Anthropic answer (the Message shape of anthropic-sdk-python), then
    // the client's next request with the call's result: the execution is placed on the call.
    let message = serde_json::json!({"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5",
        "content":[{"type":"text","text":"Refunding."},{"type":"tool_use","id":"toolu_9","name":"issue_refund","input":{"order_id":"ORD-7781"}}],
        "stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":100,"output_tokens":20}})
    .to_string();
    let s = proxy_support::Stream {
        name: "non-streaming".into(),
        path: "/v1/messages".into(),
        content_type: "application/json",
        parts: vec![bytes::Bytes::from(message.clone())],
    };
    let mock = Mock::start(vec![s.clone()], None).await;
    let (addr, lines, _proxy) = start_proxy(mock.addr, None, None).await;
    let user = serde_json::json!({"role":"user","content":"refund ORD-7781"});
    let first = serde_json::json!({"model":"claude-sonnet-4-5","messages":[user]}).to_string();
    let got = post(addr, "/v1/messages", &first, &[]).await;
    assert_eq!(got.body, message.as_bytes());
    let next = serde_json::json!({"model":"claude-sonnet-4-5","messages":[user,
        {"role":"assistant","content":[{"type":"text","text":"Refunding."},{"type":"tool_use","id":"toolu_9","name":"issue_refund","input":{"order_id":"ORD-7781"}}]},
        {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_9","content":"ok"}]}]})
    .to_string();
    post(addr, "/v1/messages", &next, &[]).await;
    let execs = lines.of_type("tool_exec");
    assert_eq!(execs.len(), 1);
    assert_eq!(
        execs[0]["attempt"], 0,
        "placed on the decoded call: {execs:?}"
    );
    assert!(
        lines.of_type("error").is_empty(),
        "a whole answer is a finished attempt"
    );
    let (_, bad, out) = ingest(&lines);
    assert_eq!(bad, 0);
    let findings: Vec<_> = out
        .iter()
        .filter(|o| matches!(o, Output::Finding(..)))
        .collect();
    // Only the last call (no answer streamed for it by the mock script's repeat) may be
    // incomplete; the first call is clean.
    assert!(
        findings
            .iter()
            .all(|f| matches!(f, Output::Finding(f, _) if f.turn.ends_with("#2"))),
        "{findings:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_generate_content_with_a_length_is_a_finished_attempt() {
    // Regression (found by e2e/proxy with gemini-cli): its routing call, a non-streamed
    // `generateContent` answered with a Content-Length, was recorded as cut by the client
    // (`client_closed`) because the server stops polling a body at its last byte.
    let answer = r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"{\"model_choice\":\"flash\"}"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":40,"candidatesTokenCount":6,"totalTokenCount":46}}"#;
    let s = proxy_support::Stream {
        name: "routing".into(),
        path: "/v1beta/models/gemini-2.5-flash-lite:generateContent".into(),
        content_type: "application/json",
        parts: vec![bytes::Bytes::from_static(answer.as_bytes())],
    };
    let mock = Mock::start(vec![s.clone()], None).await;
    let (addr, lines, _proxy) = start_proxy(mock.addr, None, None).await;
    let got = post(addr, &s.path, &request_for(&s.path, "route this"), &[]).await;
    assert_eq!(got.body, answer.as_bytes());
    assert_eq!(
        got.header("content-length"),
        Some(answer.len().to_string().as_str())
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        lines.of_type("error").is_empty(),
        "{:?}",
        lines.of_type("error")
    );
    let (_, bad, out) = ingest(&lines);
    assert_eq!(bad, 0);
    let outcomes: Vec<String> = out
        .iter()
        .filter_map(|o| match o {
            Output::TurnClosed(r) => Some(
                r.attempts
                    .iter()
                    .map(|a| a.outcome.as_str().to_owned())
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            _ => None,
        })
        .collect();
    assert_eq!(outcomes, ["completed"]);
}
