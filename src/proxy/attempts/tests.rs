//! The tracker on crafted request sequences, checked through the real pipeline (the core's
//! `Ingest`, decoders and correlator), not by reading the lines it writes.
//!
//! The conversations are modelled on the article's help-desk turn (the bookstore refund:
//! attempt 0 streams "Checking order ORD-7781. " and a refund call `c1`, then half a sentence,
//! and is cut; attempt 1 streams a slightly different opening and the same refund as `c7`),
//! streamed in each provider's real chunk shapes (`../shared/fixtures`), and on the three
//! client policies of the article: naive (appends, runs calls as they complete), reset (clean
//! text, still runs early calls) and reset + late execution.

use std::sync::{Arc, Mutex};

use super::*;
use crate::proxy::history;
use retryscope_core::correlate::{Correlator, CorrelatorConfig, Output};
use retryscope_core::cost::PriceTable;
use retryscope_core::decode::Format;
use retryscope_core::ingest::{Ingest, Source};

/// A sink the test can read after the tracker took it.
#[derive(Clone, Default)]
pub(super) struct Shared(pub(super) Arc<Mutex<Vec<Vec<u8>>>>);

impl LineSink for Shared {
    fn line(&mut self, line: Vec<u8>) {
        self.0.lock().expect("lock").push(line);
    }
}

pub(super) fn tracker() -> (Tracker, Shared) {
    let s = Shared::default();
    (Tracker::new(Box::new(s.clone()), "px".to_owned()), s)
}

/// Findings (kind, turn, call id) from the lines, through the ingest path.
pub(super) fn findings(lines: &Shared) -> Vec<(String, String, Option<String>)> {
    let correlator = Correlator::new(CorrelatorConfig::default(), Arc::new(PriceTable::builtin()));
    let mut ingest = Ingest::new(correlator, Format::Native);
    let id = ingest.stream(Source::Proxy, "<proxy>");
    let mut out = Vec::new();
    let mut bad = 0;
    for line in lines.0.lock().expect("lock").iter() {
        ingest.line(id, None, line, None, &mut out, &mut |n| {
            if let retryscope_core::ingest::Note::Line {
                outcome: Err(_), ..
            } = n
            {
                bad += 1;
            }
        });
    }
    ingest.close_all(&mut out, &mut |_| {});
    assert_eq!(bad, 0, "every line the tracker writes decodes");
    let mut f: Vec<_> = out
        .iter()
        .filter_map(|o| match o {
            Output::Finding(f, _) => Some((
                f.kind.as_str().to_owned(),
                f.turn.clone(),
                f.call_id.clone(),
            )),
            _ => None,
        })
        .collect();
    f.sort();
    f
}

fn kinds(f: &[(String, String, Option<String>)]) -> Vec<&str> {
    let mut k: Vec<&str> = f.iter().map(|x| x.0.as_str()).collect();
    k.dedup();
    k
}

pub(super) fn anthropic(body: serde_json::Value) -> Option<history::Request> {
    history::parse(Api::Anthropic, "/v1/messages", body.to_string().as_bytes())
}

/// Anthropic payloads of one attempt: text, then a refund call, then (when `finish`) the end.
pub(super) fn anthropic_attempt(text: &str, call: &str, tail: &str, finish: bool) -> Vec<String> {
    let mut v = vec![
        r#"{"type":"message_start","message":{"id":"msg_X","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"usage":{"input_tokens":1250,"output_tokens":1}}}"#.to_owned(),
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#.to_owned(),
        serde_json::json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":text}}).to_string(),
        r#"{"type":"content_block_stop","index":0}"#.to_owned(),
        serde_json::json!({"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":call,"name":"issue_refund","input":{}}}).to_string(),
        r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"order_id\": \"ORD-7781\"}"}}"#.to_owned(),
        r#"{"type":"content_block_stop","index":1}"#.to_owned(),
        r#"{"type":"content_block_start","index":2,"content_block":{"type":"text","text":""}}"#.to_owned(),
        serde_json::json!({"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":tail}}).to_string(),
    ];
    if finish {
        v.push(r#"{"type":"content_block_stop","index":2}"#.to_owned());
        v.push(r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":48}}"#.to_owned());
        v.push(r#"{"type":"message_stop"}"#.to_owned());
    }
    v
}

/// A short finished answer to `a` (the next call's, so its turn is not left incomplete).
pub(super) fn answer(t: &mut Tracker, a: &AttemptRef, ts: i64) {
    let payloads: Vec<String> = match a.api {
        Api::Anthropic => vec![
            r#"{"type":"message_start","message":{"id":"msg_Z","model":"claude-sonnet-4-5","usage":{"input_tokens":1300,"output_tokens":1}}}"#.to_owned(),
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#.to_owned(),
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Done."}}"#.to_owned(),
            r#"{"type":"content_block_stop","index":0}"#.to_owned(),
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}}"#.to_owned(),
            r#"{"type":"message_stop"}"#.to_owned(),
        ],
        Api::OpenAiChat => vec![
            r#"{"id":"chatcmpl-2","object":"chat.completion.chunk","created":2,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":"Done."}}]}"#.to_owned(),
            r#"{"id":"chatcmpl-2","object":"chat.completion.chunk","created":2,"model":"gpt-4o","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#.to_owned(),
        ],
        Api::Gemini => vec![
            r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"Done."}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":30,"candidatesTokenCount":2,"totalTokenCount":32}}"#.to_owned(),
        ],
        Api::OpenAiResponses => Vec::new(),
    };
    let mut ts = ts;
    stream(t, a, &payloads, End::Complete, &mut ts);
}

pub(super) fn stream(t: &mut Tracker, a: &AttemptRef, payloads: &[String], end: End, ts: &mut i64) {
    for p in payloads {
        *ts += 10;
        t.chunk(a, p, *ts);
    }
    *ts += 10;
    t.end(a, &end, *ts);
}

const USER: &str = "My book arrived damaged, order ORD-7781.";
const A0: &str = "Checking order ORD-7781. ";
const A0_TAIL: &str = "Refunding the dam";
const A1: &str = "Checking your order ORD-7781. ";
const A1_TAIL: &str = "The book arrived damaged, so I have started a full refund.";

/// The bookstore turn over Anthropic: a cut first attempt, its retry, then the client's next
/// request carrying `history` (assistant content blocks and tool results it kept).
fn bookstore_anthropic(assistant: serde_json::Value, results: &[&str]) -> Shared {
    let (mut t, lines) = tracker();
    let mut ts = 1_000;
    let first = serde_json::json!({"model":"claude-sonnet-4-5","stream":true,"messages":[{"role":"user","content":USER}]});
    let r0 = anthropic(first.clone());
    let a0 = t.begin(Api::Anthropic, r0.as_ref(), None, ts);
    stream(
        &mut t,
        &a0,
        &anthropic_attempt(A0, "c1", A0_TAIL, false),
        End::Injected {
            point: "mid-word",
            how: "reset",
        },
        &mut ts,
    );
    let a1 = t.begin(Api::Anthropic, r0.as_ref(), None, ts);
    assert_eq!(
        (a1.turn.as_str(), a1.attempt),
        (a0.turn.as_str(), 1),
        "the same request again is a retry"
    );
    stream(
        &mut t,
        &a1,
        &anthropic_attempt(A1, "c7", A1_TAIL, true),
        End::Complete,
        &mut ts,
    );
    let mut messages = first["messages"].as_array().cloned().unwrap_or_default();
    messages.push(serde_json::json!({"role":"assistant","content":assistant}));
    let blocks: Vec<serde_json::Value> = results
        .iter()
        .map(|id| serde_json::json!({"type":"tool_result","tool_use_id":id,"content":"refund issued"}))
        .collect();
    messages.push(serde_json::json!({"role":"user","content":blocks}));
    let next = anthropic(serde_json::json!({"model":"claude-sonnet-4-5","messages":messages}));
    let a2 = t.begin(Api::Anthropic, next.as_ref(), None, ts + 100);
    assert_eq!(
        a2.turn,
        format!("{}#2", a0.turn),
        "a longer history is the next call"
    );
    assert_eq!(a2.attempt, 0);
    answer(&mut t, &a2, ts + 200);
    lines
}

#[test]
fn naive_client_history_shows_abandoned_execution_duplicate_and_splice() {
    // Modelled on the article's naive policy: appends every attempt's text, keeps both calls
    // and ran both.
    let spliced = format!("{A0}{A0_TAIL}{A1}{A1_TAIL}");
    let lines = bookstore_anthropic(
        serde_json::json!([
            {"type":"text","text":spliced},
            {"type":"tool_use","id":"c1","name":"issue_refund","input":{"order_id":"ORD-7781"}},
            {"type":"tool_use","id":"c7","name":"issue_refund","input":{"order_id":"ORD-7781"}}
        ]),
        &["c1", "c7"],
    );
    let f = findings(&lines);
    assert_eq!(
        kinds(&f),
        [
            "abandoned_tool_executed",
            "duplicate_effect",
            "spliced_text",
            "unfinished_tool_executed"
        ],
        "{f:?}"
    );
    assert!(
        f.iter()
            .any(|x| x.0 == "abandoned_tool_executed" && x.2.as_deref() == Some("c1"))
    );
    assert!(
        f.iter().all(|x| x.1 == "px-1"),
        "all on the cut call's turn: {f:?}"
    );
}

#[test]
fn reset_client_history_shows_the_abandoned_execution_only() {
    // The article's reset policy: the text is clean, the early call c1 still ran.
    let lines = bookstore_anthropic(
        serde_json::json!([
            {"type":"text","text":format!("{A1}{A1_TAIL}")},
            {"type":"tool_use","id":"c1","name":"issue_refund","input":{"order_id":"ORD-7781"}},
            {"type":"tool_use","id":"c7","name":"issue_refund","input":{"order_id":"ORD-7781"}}
        ]),
        &["c1", "c7"],
    );
    let f = findings(&lines);
    assert_eq!(
        kinds(&f),
        [
            "abandoned_tool_executed",
            "duplicate_effect",
            "unfinished_tool_executed"
        ],
        "{f:?}"
    );
}

#[test]
fn reset_and_late_execution_is_clean() {
    // The article's correct policy: only attempt 1's text and call, run once.
    let lines = bookstore_anthropic(
        serde_json::json!([
            {"type":"text","text":format!("{A1}{A1_TAIL}")},
            {"type":"tool_use","id":"c7","name":"issue_refund","input":{"order_id":"ORD-7781"}}
        ]),
        &["c7"],
    );
    assert_eq!(findings(&lines), []);
}

#[test]
fn retried_turn_without_a_next_request_has_no_spliced_text() {
    // Proxy defect 2 (e2e `mid-word-error-first3`): three streams cut mid-word in a row, then
    // the client gives up and sends nothing more. No history carries an abandoned attempt's
    // text, and no wire shows a render reset: no spliced_text, only the incomplete turn.
    let (mut t, lines) = tracker();
    let mut ts = 1_000;
    let r0 = anthropic(
        serde_json::json!({"model":"claude-sonnet-4-5","stream":true,"messages":[{"role":"user","content":USER}]}),
    );
    let mut turn = None;
    for n in 0..3 {
        let a = t.begin(Api::Anthropic, r0.as_ref(), None, ts);
        assert_eq!(a.attempt, n, "the same request after a cut is a retry");
        turn.get_or_insert_with(|| a.turn.clone());
        let text = if n == 0 { A0 } else { A1 };
        stream(
            &mut t,
            &a,
            &anthropic_attempt(text, "c1", A0_TAIL, false)[..3],
            End::Injected {
                point: "mid-word",
                how: "error",
            },
            &mut ts,
        );
    }
    let f = findings(&lines);
    assert_eq!(kinds(&f), ["incomplete_turn"], "{f:?}");
    let starts: Vec<serde_json::Value> = lines
        .0
        .lock()
        .expect("lock")
        .iter()
        .filter_map(|l| serde_json::from_slice::<serde_json::Value>(l).ok())
        .filter(|v| v["type"] == "turn_start")
        .collect();
    assert_eq!(starts.len(), 1);
    assert_eq!(starts[0]["wire_only"], true, "{:?}", starts[0]);
}

#[test]
fn an_open_stream_silent_past_the_idle_timeout_keeps_its_turn() {
    // `--idle-timeout-secs 1`: the upstream streams a tool call, then is silent for 1.5 s
    // before finishing (the e2e mock's pause). The turn stayed open only by chance of timing;
    // it was idle-closed and the call's execution, read from the next request, was lost.
    let (mut t, lines) = tracker();
    let first = serde_json::json!({"model":"claude-sonnet-4-5","stream":true,"messages":[{"role":"user","content":USER}]});
    let r0 = anthropic(first.clone());
    let a0 = t.begin(Api::Anthropic, r0.as_ref(), None, 1_000);
    let payloads = anthropic_attempt(A1, "c7", A1_TAIL, true);
    let mut ts = 1_000;
    for p in &payloads[..7] {
        ts += 10;
        t.chunk(&a0, p, ts);
    }
    ts += 1_500;
    stream(&mut t, &a0, &payloads[7..], End::Complete, &mut ts);
    let mut messages = first["messages"].as_array().cloned().unwrap_or_default();
    messages.push(serde_json::json!({"role":"assistant","content":[
        {"type":"text","text":format!("{A1}{A1_TAIL}")},
        {"type":"tool_use","id":"c7","name":"issue_refund","input":{"order_id":"ORD-7781"}}]}));
    messages.push(serde_json::json!({"role":"user","content":[{"type":"tool_result","tool_use_id":"c7","content":"refund issued"}]}));
    let next = anthropic(
        serde_json::json!({"model":"claude-sonnet-4-5","stream":true,"messages":messages}),
    );
    let a1 = t.begin(Api::Anthropic, next.as_ref(), None, ts + 100);
    answer(&mut t, &a1, ts + 200);

    // The engine: each line arrives at its `ts`, and the correlator ticks up to it.
    let cfg = CorrelatorConfig {
        idle_timeout_ms: Some(1_000),
        ..CorrelatorConfig::default()
    };
    let correlator = Correlator::new(cfg, Arc::new(PriceTable::builtin()));
    let mut ingest = Ingest::new(correlator, Format::Native);
    let id = ingest.stream(Source::Proxy, "<proxy>");
    let mut out = Vec::new();
    for line in lines.0.lock().expect("lock").iter() {
        let at = serde_json::from_slice::<serde_json::Value>(line)
            .ok()
            .and_then(|v| v["ts"].as_i64())
            .expect("ts");
        ingest.tick(at, &mut out, &mut |_| {});
        ingest.line(id, None, line, Some(at), &mut out, &mut |_| {});
    }
    ingest.close_all(&mut out, &mut |_| {});
    let first_turn = out
        .iter()
        .find_map(|o| match o {
            Output::TurnClosed(r) if r.turn == a0.turn => Some(r),
            _ => None,
        })
        .expect("the first call's report");
    assert_ne!(
        first_turn.closed_by,
        retryscope_core::report::CloseReason::IdleTimeout,
        "{first_turn:?}"
    );
    assert_eq!(first_turn.attempts.len(), 1);
    assert_eq!(
        first_turn.attempts[0].outcome,
        retryscope_core::report::Outcome::Completed
    );
    assert_eq!(first_turn.attempts[0].executed.len(), 1, "{first_turn:?}");
    assert!(first_turn.findings.is_empty(), "{:?}", first_turn.findings);
}

#[test]
fn chat_call_cut_before_its_finish_then_executed_is_abandoned() {
    // The same turn over Chat Completions: tool call deltas as in
    // openai-python__parallel-tool-calls.sse; the client ran the cut attempt's call only.
    let (mut t, lines) = tracker();
    let mut ts = 5_000;
    let first = serde_json::json!({"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":USER}]});
    let parse = |v: &serde_json::Value| {
        history::parse(
            Api::OpenAiChat,
            "/v1/chat/completions",
            v.to_string().as_bytes(),
        )
    };
    let r0 = parse(&first);
    let chunks = |id: &str, text: &str, finish: bool| {
        let mut v = vec![
            serde_json::json!({"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"role":"assistant","content":text}}]}).to_string(),
            serde_json::json!({"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":id,"type":"function","function":{"name":"issue_refund","arguments":""}}]}}]}).to_string(),
            serde_json::json!({"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"order_id\":\"ORD-7781\"}"}}]}}]}).to_string(),
        ];
        if finish {
            v.push(serde_json::json!({"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}).to_string());
        }
        v
    };
    let a0 = t.begin(Api::OpenAiChat, r0.as_ref(), Some(0), ts);
    stream(
        &mut t,
        &a0,
        &chunks("call_a", A0, false),
        End::Upstream("connection reset".into()),
        &mut ts,
    );
    // The SDK's own retry, announced by x-stainless-retry-count.
    let a1 = t.begin(Api::OpenAiChat, r0.as_ref(), Some(1), ts);
    assert_eq!(a1.attempt, 1);
    stream(
        &mut t,
        &a1,
        &chunks("call_b", A1, true),
        End::Complete,
        &mut ts,
    );
    let mut m = first["messages"].as_array().cloned().unwrap_or_default();
    m.push(serde_json::json!({"role":"assistant","content":A1,"tool_calls":[{"id":"call_a","type":"function","function":{"name":"issue_refund","arguments":"{\"order_id\":\"ORD-7781\"}"}}]}));
    m.push(serde_json::json!({"role":"tool","tool_call_id":"call_a","content":"ok"}));
    let next = parse(&serde_json::json!({"model":"gpt-4o","messages":m}));
    let a2 = t.begin(Api::OpenAiChat, next.as_ref(), Some(0), ts + 50);
    answer(&mut t, &a2, ts + 60);
    let f = findings(&lines);
    assert_eq!(
        kinds(&f),
        ["abandoned_tool_executed", "unfinished_tool_executed"],
        "{f:?}"
    );
    assert!(f.iter().all(|x| x.2.as_deref() == Some("call_a")));
}

#[test]
fn gemini_history_without_ids_is_placed_by_name_and_arguments() {
    // Gemini API function calls carry no ids (google-tool-call-gemini3.chunks.txt); the
    // result names the tool. A clean turn: one call, finished, executed once.
    let (mut t, lines) = tracker();
    let mut ts = 9_000;
    let path = "/v1beta/models/gemini-2.5-flash:streamGenerateContent";
    let first = serde_json::json!({"contents":[{"role":"user","parts":[{"text":USER}]}]});
    let parse = |v: &serde_json::Value| history::parse(Api::Gemini, path, v.to_string().as_bytes());
    let a0 = t.begin(Api::Gemini, parse(&first).as_ref(), None, ts);
    let chunks = vec![
        serde_json::json!({"candidates":[{"content":{"role":"model","parts":[{"text":A1},{"functionCall":{"name":"issue_refund","args":{"order_id":"ORD-7781"}}}]}}],"modelVersion":"gemini-2.5-flash","responseId":"r1"}).to_string(),
        serde_json::json!({"candidates":[{"content":{"role":"model","parts":[{"text":""}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":9,"candidatesTokenCount":20,"totalTokenCount":29},"modelVersion":"gemini-2.5-flash","responseId":"r1"}).to_string(),
    ];
    stream(&mut t, &a0, &chunks, End::Complete, &mut ts);
    let next = serde_json::json!({"contents":[
        {"role":"user","parts":[{"text":USER}]},
        {"role":"model","parts":[{"text":A1},{"functionCall":{"name":"issue_refund","args":{"order_id":"ORD-7781"}}}]},
        {"role":"user","parts":[{"functionResponse":{"name":"issue_refund","response":{"ok":true}}}]}
    ]});
    let a1 = t.begin(Api::Gemini, parse(&next).as_ref(), None, ts + 10);
    answer(&mut t, &a1, ts + 20);
    assert_eq!(t.stats().executions, 1);
    assert_eq!(findings(&lines), []);
}

#[test]
fn a_completed_call_sent_again_is_a_new_turn_not_a_retry() {
    let (mut t, _) = tracker();
    let r = anthropic(serde_json::json!({"model":"m","messages":[{"role":"user","content":"hi"}]}));
    let a = t.begin(Api::Anthropic, r.as_ref(), None, 1);
    let done = [
        r#"{"type":"message_start","message":{"id":"m","model":"m","usage":{"input_tokens":1,"output_tokens":1}}}"#.to_owned(),
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}"#.to_owned(),
        r#"{"type":"message_stop"}"#.to_owned(),
    ];
    let mut ts = 1;
    stream(&mut t, &a, &done, End::Complete, &mut ts);
    assert!(t.finished(&a));
    let b = t.begin(Api::Anthropic, r.as_ref(), None, 100);
    assert_ne!(b.turn, a.turn);
    assert_eq!(b.attempt, 0);
    // ... unless the SDK says it is retrying.
    let c = t.begin(Api::Anthropic, r.as_ref(), Some(2), 200);
    assert_eq!((c.turn, c.attempt), (b.turn, 1));
}

#[test]
fn tool_results_seen_again_in_later_histories_count_once() {
    let lines = bookstore_anthropic(
        serde_json::json!([
            {"type":"text","text":format!("{A1}{A1_TAIL}")},
            {"type":"tool_use","id":"c7","name":"issue_refund","input":{"order_id":"ORD-7781"}}
        ]),
        &["c7"],
    );
    let execs = lines
        .0
        .lock()
        .expect("lock")
        .iter()
        .filter(|l| String::from_utf8_lossy(l).contains("\"tool_exec\""))
        .count();
    assert_eq!(execs, 1);
}

#[test]
fn memory_is_bounded_by_forgetting_the_oldest_turns() {
    let (mut t, _) = tracker();
    t.max_turns = 10;
    for i in 0..50 {
        let r = anthropic(
            serde_json::json!({"model":"m","messages":[{"role":"user","content":format!("q{i}")}]}),
        );
        let a = t.begin(Api::Anthropic, r.as_ref(), None, i);
        t.end(&a, &End::Complete, i);
    }
    assert_eq!(t.turns.len(), 10);
    assert!(t.by_request.len() <= 10);
    assert_eq!(t.stats().evicted, 40);
}

#[test]
fn gemini_same_request_after_a_cut_is_a_retry() {
    let (mut t, _) = tracker();
    let body = br#"{"contents":[{"role":"user","parts":[{"text":"My book arrived damaged, order ORD-7781."}]}]}"#;
    let path = "/v1beta/models/gemini-2.5-flash:streamGenerateContent";
    let r = history::parse(Api::Gemini, path, body);
    eprintln!("{:?} {:?}", r, r.as_ref().map(|r| r.prefix_fingerprints()));
    let a = t.begin(Api::Gemini, r.as_ref(), None, 1);
    t.end(
        &a,
        &End::Injected {
            point: "mid-word",
            how: "reset",
        },
        2,
    );
    let r2 = history::parse(Api::Gemini, path, body);
    let b = t.begin(Api::Gemini, r2.as_ref(), None, 3);
    assert_eq!((b.turn.as_str(), b.attempt), (a.turn.as_str(), 1));
}

#[test]
fn responses_previous_response_id_continues_the_conversation() {
    // OpenAI Responses with the history on the server: the next request names the response
    // it continues and sends only the tool output (the shape of the openai-python tool loop
    // with `previous_response_id`).
    let (mut t, lines) = tracker();
    let parse = |v: serde_json::Value| {
        history::parse(
            Api::OpenAiResponses,
            "/v1/responses",
            v.to_string().as_bytes(),
        )
    };
    let r0 = parse(serde_json::json!({"model":"gpt-5","stream":true,"input":USER}));
    let a0 = t.begin(Api::OpenAiResponses, r0.as_ref(), None, 1);
    let payloads: Vec<String> = [
        serde_json::json!({"type":"response.created","sequence_number":0,"response":{"id":"resp_A","status":"in_progress","model":"gpt-5"}}),
        serde_json::json!({"type":"response.output_item.done","sequence_number":1,"output_index":0,"item":{"type":"function_call","id":"fc_1","call_id":"call_r","name":"issue_refund","arguments":"{\"order_id\":\"ORD-7781\"}","status":"completed"}}),
        serde_json::json!({"type":"response.completed","sequence_number":2,"response":{"id":"resp_A","status":"completed","model":"gpt-5","usage":{"input_tokens":100,"output_tokens":20,"total_tokens":120}}}),
    ]
    .iter()
    .map(serde_json::Value::to_string)
    .collect();
    let mut ts = 1;
    stream(&mut t, &a0, &payloads, End::Complete, &mut ts);
    let next = parse(
        serde_json::json!({"model":"gpt-5","stream":true,"previous_response_id":"resp_A",
        "input":[{"type":"function_call_output","call_id":"call_r","output":"ok"}]}),
    );
    let a1 = t.begin(Api::OpenAiResponses, next.as_ref(), None, 100);
    assert_eq!(a1.turn, format!("{}#2", a0.turn));
    let execs: Vec<serde_json::Value> = lines
        .0
        .lock()
        .expect("lock")
        .iter()
        .filter_map(|l| serde_json::from_slice::<serde_json::Value>(l).ok())
        .filter(|v| v["type"] == "tool_exec")
        .collect();
    assert_eq!(execs.len(), 1);
    assert_eq!(execs[0]["id"], "call_r");
    assert_eq!(execs[0]["turn"], a0.turn.as_str());
    assert_eq!(execs[0]["attempt"], 0);
}

mod strategies;
