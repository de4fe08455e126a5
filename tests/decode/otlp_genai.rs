//! Records of the OpenTelemetry GenAI semantic conventions, as lines of the OTLP receiver
//! (`Format::Otlp`). No real instrumentation's capture is committed, so these records are
//! written here, modelled on the semantic-conventions registry (inference span
//! `chat {model}` with `gen_ai.operation.name`, `gen_ai.request.model`, `gen_ai.usage.*`,
//! `gen_ai.response.finish_reasons`, `error.type`, opt-in `gen_ai.output.messages`; the
//! `gen_ai.client.inference.operation.details` event; `execute_tool` spans with
//! `gen_ai.tool.call.id`, `gen_ai.tool.name`, `gen_ai.tool.call.arguments`).

use crate::common;

use common::{correlate, decode, findings, summary};
use retryscope_core::decode::Format;
use retryscope_core::finding::FindingKind;
use retryscope_core::report::Outcome;

const T: u64 = 1_796_227_707_000_000_000;

fn chat(span: &str, at_ms: u64, error: bool, calls: &str, extra: &str) -> String {
    let status = if error {
        r#","status":{"code":2,"message":"stream ended early"}"#
    } else {
        ""
    };
    let (start, end) = (T + at_ms * 1_000_000, T + (at_ms + 900) * 1_000_000);
    format!(
        r#"{{"otlp":"span","service":"my-agent","scope":"opentelemetry.instrumentation.openai_v2","name":"chat gpt-4o","kind":3,"trace_id":"5b8efff798038103d269b633813fc60c","span_id":"{span}","start_time_unix_nano":{start},"end_time_unix_nano":{end}{status},"attributes":{{"gen_ai.operation.name":"chat","gen_ai.provider.name":"openai","gen_ai.request.model":"gpt-4o","gen_ai.response.model":"gpt-4o-2024-08-06","gen_ai.conversation.id":"conv-1","gen_ai.usage.input_tokens":900,"gen_ai.usage.output_tokens":40,"gen_ai.output.messages":"[{{\"role\":\"assistant\",\"parts\":[{calls}]}}]"{extra}}}}}"#
    )
}

fn tool(span: &str, at_ms: u64, id: &str) -> String {
    let (start, end) = (T + at_ms * 1_000_000, T + (at_ms + 50) * 1_000_000);
    format!(
        r#"{{"otlp":"span","service":"my-agent","scope":"s","name":"execute_tool run_shell","kind":1,"span_id":"{id}00","start_time_unix_nano":{start},"end_time_unix_nano":{end},"attributes":{{"gen_ai.operation.name":"execute_tool","gen_ai.tool.name":"run_shell","gen_ai.tool.call.id":"{id}","gen_ai.tool.call.arguments":"{{\"cmd\":\"touch {span}\"}}","gen_ai.conversation.id":"conv-1"}}}}"#
    )
}

fn call(id: &str) -> String {
    format!(
        r#"{{\"type\":\"tool_call\",\"id\":\"{id}\",\"name\":\"run_shell\",\"arguments\":{{\"cmd\":\"touch {id}\"}}}}"#
    )
}

#[test]
fn a_failed_chat_span_retried_and_its_executed_call_are_an_abandoned_execution() {
    let lines = [
        // Attempt 1 streamed a tool call, then broke; the agent ran the call anyway.
        chat("a1", 0, true, &call("call_1"), r#","error.type":"ConnectionResetError""#),
        tool("call_1", 950, "call_1"),
        // The retry, and the details event of the same span (read once).
        chat("a2", 1200, false, &call("call_2"), r#","gen_ai.response.finish_reasons":["tool_calls"]"#),
        format!(
            r#"{{"otlp":"log","service":"my-agent","scope":"s","time_unix_nano":{},"span_id":"a2","body":null,"attributes":{{"event.name":"gen_ai.client.inference.operation.details","gen_ai.operation.name":"chat","gen_ai.request.model":"gpt-4o","gen_ai.conversation.id":"conv-1"}}}}"#,
            T + 2_100_000_000
        ),
        tool("call_2", 2200, "call_2"),
    ]
    .join("\n");
    let d = decode("otlp", lines.as_bytes(), Format::Auto);
    assert_eq!((d.format, d.errors), (Format::Otlp, 0));
    assert_eq!(d.skips.unknown_types, 0);
    let rs = correlate(&d.events);
    assert_eq!(rs.len(), 1, "the details event is not another call");
    let r = &rs[0];
    let ctx = summary(r);
    assert_eq!(r.turn, "conv-1");
    assert_eq!(r.attempts.len(), 2, "{ctx}");
    assert_eq!(r.attempts[0].outcome, Outcome::Abandoned, "{ctx}");
    assert_eq!(r.attempts[1].outcome, Outcome::Completed, "{ctx}");
    assert_eq!(r.attempts[0].executed.len(), 1, "{ctx}");
    assert_eq!(r.attempts[1].executed.len(), 1, "{ctx}");
    let f = findings(r);
    assert!(
        f.contains(&FindingKind::AbandonedToolExecuted),
        "{ctx}: {f:?}"
    );
    assert!(
        f.contains(&FindingKind::UnfinishedToolExecuted),
        "{ctx}: {f:?}"
    );
}

#[test]
fn clean_chat_spans_of_one_conversation_are_one_turn_each_without_findings() {
    let lines = [
        chat(
            "b1",
            0,
            false,
            &call("call_9"),
            r#","gen_ai.response.finish_reasons":["tool_calls"]"#,
        ),
        tool("b1", 1000, "call_9"),
        chat(
            "b2",
            1200,
            false,
            "",
            r#","gen_ai.response.finish_reasons":["stop"]"#,
        ),
    ]
    .join("\n");
    let d = decode("otlp", lines.as_bytes(), Format::Auto);
    let rs = correlate(&d.events);
    assert_eq!(rs.len(), 2);
    assert!(
        rs.iter().all(|r| r.findings.is_empty()),
        "{}",
        summary(&rs[0])
    );
    assert_eq!(rs[0].attempts[0].executed.len(), 1);
}

/// `gen_ai.input.messages` as the attribute's JSON text, ready to append to a span's
/// attributes. Messages of the registry's shape: `{"role", "parts": [{"type": "text",
/// "content"}]}`.
fn input(messages: &[(&str, &str)]) -> String {
    let v: Vec<serde_json::Value> = messages
        .iter()
        .map(|(role, text)| {
            serde_json::json!({"role": role, "parts": [{"type": "text", "content": text}]})
        })
        .collect();
    let text = serde_json::to_string(&v).unwrap();
    format!(
        r#","gen_ai.input.messages":{}"#,
        serde_json::to_string(&text).unwrap()
    )
}

/// An output text part, escaped for `chat`'s `gen_ai.output.messages`.
fn text_part(text: &str) -> String {
    format!(r#"{{\"type\":\"text\",\"content\":\"{text}\"}}"#)
}

fn retries(events: &[retryscope_core::event::Event<'_>]) -> Vec<(Option<String>, Option<String>)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            retryscope_core::event::EventKind::Retry { reason, prefill } => Some((
                reason.as_deref().map(str::to_owned),
                prefill.as_deref().map(str::to_owned),
            )),
            _ => None,
        })
        .collect()
}

#[test]
fn a_retry_whose_input_ends_with_the_cut_partial_text_is_a_continuation() {
    // Invented (no GenAI-convention client is installable here), modelled on the registry's
    // `gen_ai.input.messages` / `gen_ai.output.messages` and on what Qwen Code sends after a
    // reset (the proxy's `retry_match.rs` recognises the same): the cut attempt's input,
    // then its partial text as an assistant message, then a user message asking to go on.
    let history = [
        ("system", "You are a coding agent."),
        ("user", "Create the marker file."),
    ];
    let mut continued = history.to_vec();
    continued.push(("assistant", "[A1] I will now cr"));
    continued.push((
        "user",
        "Output only text that comes after this suffix: now cr",
    ));
    let lines = [
        chat(
            "a1",
            0,
            true,
            &text_part("[A1] I will now cr"),
            &format!(r#","error.type":"ConnectionResetError"{}"#, input(&history)),
        ),
        chat(
            "a2",
            1200,
            false,
            &text_part("[A2] I will now create the marker file."),
            &format!(
                r#","gen_ai.response.finish_reasons":["stop"]{}"#,
                input(&continued)
            ),
        ),
    ]
    .join("\n");
    let d = decode("otlp", lines.as_bytes(), Format::Auto);
    assert_eq!((d.format, d.errors), (Format::Otlp, 0));
    assert_eq!(
        retries(&d.events),
        [(
            Some("continuation".to_owned()),
            Some("[A1] I will now cr".to_owned())
        )]
    );
    let rs = correlate(&d.events);
    assert_eq!(rs.len(), 1, "one model call");
    assert_eq!(rs[0].attempts.len(), 2, "{}", summary(&rs[0]));

    // Not a continuation: a history that is not the cut attempt's input before the partial
    // text, or a partial text the cut attempt never streamed. Still a retry (the attempt
    // failed), without a prefill.
    let mut other = vec![("user", "Something else.")];
    other.push(("assistant", "[A1] I will now cr"));
    let mut unstreamed = history.to_vec();
    unstreamed.push(("assistant", "Text the cut attempt never sent."));
    for input_of_retry in [other, unstreamed] {
        let lines = [
            chat(
                "a1",
                0,
                true,
                &text_part("[A1] I will now cr"),
                &format!(r#","error.type":"ConnectionResetError"{}"#, input(&history)),
            ),
            chat("a2", 1200, false, "", &input(&input_of_retry)),
        ]
        .join("\n");
        let d = decode("otlp", lines.as_bytes(), Format::Auto);
        assert_eq!(retries(&d.events), [(None, None)], "{input_of_retry:?}");
    }
}
