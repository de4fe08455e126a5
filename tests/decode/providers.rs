//! Every hand-written provider fixture under `tests/fixtures/providers/`: auto-detect, decode,
//! run through the real correlator, and check the reports (tool calls, finish reasons, usage,
//! attempts, outcomes, findings). `spliced_stream` must appear on spliced streams only.

use crate::common;

use std::path::Path;

use common::{Decoded, correlate, decode, findings, summary, tool_calls};
use retryscope_core::decode::Format;
use retryscope_core::event::EventKind;
use retryscope_core::finding::FindingKind::{self, IncompleteTurn, SplicedStream, SplicedText};
use retryscope_core::report::{Outcome, TurnReport, TurnStatus, UsageSource};
use serde_json::Value;

fn load(rel: &str, want: Format) -> (Decoded, Vec<TurnReport>) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/providers")
        .join(rel);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{rel}: {e}"));
    let name = rel.rsplit('/').next().unwrap_or(rel);
    let d = decode(name, &bytes, Format::Auto);
    assert_eq!(d.format, want, "{rel}: detected format");
    assert_eq!(d.errors, 0, "{rel}: bad lines");
    // Content capture on: these tests check the error texts decoders extract.
    let reports = common::correlate_with(&d.events, true);
    (d, reports)
}

fn tokens(r: &TurnReport, attempt: usize) -> (u64, u64, u64, u64, u64) {
    let u = r.attempts[attempt].usage.tokens;
    (
        u.input_tokens,
        u.output_tokens,
        u.cached_input_tokens,
        u.cache_write_tokens,
        u.reasoning_tokens,
    )
}

fn outcomes(r: &TurnReport) -> Vec<Outcome> {
    r.attempts.iter().map(|a| a.outcome).collect()
}

fn calls_of(r: &TurnReport, attempt: usize) -> Vec<(&str, &str)> {
    r.attempts[attempt]
        .tool_calls
        .iter()
        .map(|c| (c.name.as_str(), c.id.as_str()))
        .collect()
}

fn json(s: &str) -> Value {
    serde_json::from_str(s).expect("args are JSON")
}

/// One clean, completed, single-attempt turn.
fn assert_clean(r: &TurnReport, finish: &str) {
    let ctx = summary(r);
    assert_eq!(r.status, TurnStatus::Completed, "{ctx}");
    assert_eq!(outcomes(r), [Outcome::Completed], "{ctx}");
    assert_eq!(
        r.attempts[0].finish_reason.as_deref(),
        Some(finish),
        "{ctx}"
    );
    assert!(r.findings.is_empty(), "{ctx}");
}

const SPLICED: [FindingKind; 2] = [SplicedText, SplicedStream];

#[test]
fn openai_chat_index_from_one_with_empty_fragments() {
    let (d, r) = load("openai-chat/index-from-one.chunks.txt", Format::OpenAiChat);
    assert_eq!(r.len(), 1);
    assert_clean(&r[0], "tool_calls");
    let calls = tool_calls(&d.events);
    assert_eq!(calls.len(), 1);
    assert_eq!(
        (calls[0].0.as_str(), calls[0].1.as_str()),
        ("toolu_A", "lookup_order")
    );
    assert_eq!(json(&calls[0].2), json(r#"{"order":"ORD-1"}"#));
    assert_eq!(tokens(&r[0], 0), (120, 30, 100, 0, 0));
    assert_eq!(r[0].model.as_deref(), Some("gpt-4o-mini"));
    assert_eq!(r[0].provider.as_deref(), Some("openai"));
    assert_eq!(r[0].started_ms, Some(1_770_000_000_000));
}

#[test]
fn openai_chat_whole_call_in_one_delta_and_usage_on_finish() {
    let (d, r) = load(
        "openai-chat/whole-call-usage-on-finish.chunks.txt",
        Format::OpenAiChat,
    );
    assert_clean(&r[0], "tool_calls");
    assert_eq!(
        tool_calls(&d.events),
        [(
            "call_w".into(),
            "weather".into(),
            r#"{"city":"Oslo"}"#.into()
        )]
    );
    assert_eq!(tokens(&r[0], 0), (210, 15, 0, 0, 0));
}

#[test]
fn openai_chat_azure_metadata_first_chunk_is_not_usage() {
    let (_, r) = load(
        "openai-chat/azure-empty-first-chunk.chunks.txt",
        Format::OpenAiChat,
    );
    assert_eq!(r.len(), 1);
    assert_clean(&r[0], "stop");
    assert_eq!(tokens(&r[0], 0), (15, 78, 0, 0, 64));
    assert_eq!(r[0].attempts[0].text_chars, 6);
    assert_eq!(r[0].model.as_deref(), Some("gpt-5-nano"));
}

#[test]
fn openai_chat_crlf_sse_with_id_change_is_a_spliced_stream() {
    let (d, r) = load("openai-chat/id-change-splice.sse", Format::OpenAiChat);
    assert_eq!(
        d.skips.incomplete_tool_calls, 1,
        "the cut call of attempt 0"
    );
    let r = &r[0];
    let ctx = summary(r);
    assert_eq!(
        outcomes(r),
        [Outcome::Abandoned, Outcome::Completed],
        "{ctx}"
    );
    assert_eq!(r.retries, 1);
    assert!(calls_of(r, 0).is_empty(), "{ctx}");
    assert_eq!(calls_of(r, 1), [("issue_refund", "call_new")], "{ctx}");
    assert_eq!(tokens(r, 1), (200, 40, 0, 0, 0));
    assert_eq!(r.attempts[0].usage.source, UsageSource::Estimated);
    assert_eq!(findings(r), SPLICED, "{ctx}");
}

#[test]
fn openai_responses_item_id_rotation() {
    let (d, r) = load(
        "openai-responses/item-id-rotation.chunks.txt",
        Format::OpenAiResponses,
    );
    assert_clean(&r[0], "completed");
    assert_eq!(
        tool_calls(&d.events),
        [(
            "call_rot".into(),
            "weather".into(),
            r#"{"location":"Oslo"}"#.into()
        )]
    );
    assert_eq!(tokens(&r[0], 0), (45, 24, 10, 0, 8));
    assert_eq!(r[0].model.as_deref(), Some("gpt-5.1"));
}

#[test]
fn openai_responses_nested_error_then_new_response_is_a_splice() {
    let (_, r) = load(
        "openai-responses/error-nested-then-retry.chunks.txt",
        Format::OpenAiResponses,
    );
    assert_eq!(r.len(), 1, "a retry after an error is the same turn");
    let r = &r[0];
    let ctx = summary(r);
    assert_eq!(
        outcomes(r),
        [Outcome::Abandoned, Outcome::Completed],
        "{ctx}"
    );
    assert_eq!(
        r.attempts[0].error.as_deref(),
        Some("server_error: upstream reset")
    );
    assert_eq!(r.attempts[1].finish_reason.as_deref(), Some("completed"));
    assert_eq!(findings(r), SPLICED, "{ctx}");
    assert_eq!(r.status, TurnStatus::Completed);
}

#[test]
fn openai_responses_flat_error_fails_the_turn() {
    let (_, r) = load(
        "openai-responses/error-flat.chunks.txt",
        Format::OpenAiResponses,
    );
    let r = &r[0];
    assert_eq!(r.status, TurnStatus::Failed, "{}", summary(r));
    assert_eq!(outcomes(r), [Outcome::Failed]);
    assert_eq!(
        r.attempts[0].error.as_deref(),
        Some("rate_limit_exceeded: slow down")
    );
    assert_eq!(findings(r), [IncompleteTurn]);
}

#[test]
fn openai_responses_back_to_back_are_separate_turns() {
    let (d, r) = load(
        "openai-responses/back-to-back.chunks.txt",
        Format::OpenAiResponses,
    );
    assert_eq!(d.skips.unknown_types, 1, "response.some_future_event");
    assert_eq!(r.len(), 2);
    assert_eq!(r[0].turn, "back-to-back.chunks.txt");
    assert_eq!(r[1].turn, "back-to-back.chunks.txt#2");
    assert_clean(&r[0], "completed");
    assert_clean(&r[1], "completed");
    assert_eq!(tokens(&r[0], 0), (10, 2, 0, 0, 0));
    assert_eq!(tokens(&r[1], 0), (20, 3, 0, 0, 0));
}

#[test]
fn anthropic_message_start_with_new_id_while_open_is_a_splice() {
    let (d, r) = load(
        "anthropic/spliced-message-start.chunks.txt",
        Format::Anthropic,
    );
    assert_eq!(d.skips.incomplete_tool_calls, 1, "toolu_old never stopped");
    let r = &r[0];
    let ctx = summary(r);
    assert_eq!(
        outcomes(r),
        [Outcome::Abandoned, Outcome::Completed],
        "{ctx}"
    );
    assert!(calls_of(r, 0).is_empty(), "{ctx}");
    assert_eq!(calls_of(r, 1), [("issue_refund", "toolu_new")], "{ctx}");
    assert_eq!(r.attempts[1].finish_reason.as_deref(), Some("tool_use"));
    assert_eq!(tokens(r, 1), (100, 40, 0, 0, 0));
    assert_eq!(findings(r), SPLICED, "{ctx}");
}

#[test]
fn anthropic_splice_of_a_message_with_only_thinking_is_two_attempts_billed_apart() {
    // Regression: the replaced message streamed only thinking and a cut tool input, so it
    // left no event and the turn had one attempt (the retry) plus a spliced_stream finding.
    let (d, r) = load(
        "anthropic/spliced-thinking-only.chunks.txt",
        Format::Anthropic,
    );
    assert_eq!(d.skips.incomplete_tool_calls, 1, "toolu_cut never stopped");
    let r = &r[0];
    let ctx = summary(r);
    assert_eq!(
        outcomes(r),
        [Outcome::Abandoned, Outcome::Completed],
        "{ctx}"
    );
    assert_eq!(r.retries, 1);
    assert!(calls_of(r, 0).is_empty(), "{ctx}");
    assert_eq!(calls_of(r, 1), [("lookup_order", "toolu_retry")], "{ctx}");
    // Billed what it used: its message_start input, and 88 streamed characters of thinking
    // and tool input as output.
    assert_eq!(tokens(r, 0), (240, 22, 0, 0, 0));
    assert_eq!(tokens(r, 1), (240, 38, 0, 0, 0));
    assert!(r.wasted_cost_usd > 0.0, "{ctx}");
    assert_eq!(findings(r), [SplicedStream], "{ctx}");
}

#[test]
fn anthropic_content_inside_message_start_yields_calls_and_stop_reasons() {
    let (d, r) = load(
        "anthropic/message-start-content.chunks.txt",
        Format::Anthropic,
    );
    assert_eq!(r.len(), 4);
    for (turn, finish) in r
        .iter()
        .zip(["tool_use", "tool_use", "tool_use", "end_turn"])
    {
        assert_clean(turn, finish);
    }
    assert_eq!(calls_of(&r[1], 0), [("lookup_order", "toolu_p2")]);
    assert_eq!(calls_of(&r[2], 0), [("lookup_order", "toolu_p3")]);
    let calls = tool_calls(&d.events);
    assert_eq!(json(&calls[0].2), json(r#"{"order":"ORD-1"}"#));
    assert_eq!(r[1].attempts[0].usage.source, UsageSource::Reported);
    assert_eq!(tokens(&r[3], 0), (1200, 6, 0, 0, 0));
}

#[test]
fn anthropic_duplicate_message_start_crlf_sse_is_clean() {
    let (_, r) = load("anthropic/duplicate-message-start.sse", Format::Anthropic);
    assert_eq!(r.len(), 1);
    assert_clean(&r[0], "end_turn");
    assert_eq!(tokens(&r[0], 0), (100, 12, 0, 0, 0));
    assert_eq!(r[0].attempts[0].text_chars, 13);
}

#[test]
fn anthropic_stop_then_new_message_is_a_new_turn_not_a_retry() {
    let (d, r) = load(
        "anthropic/stop-then-new-message.chunks.txt",
        Format::Anthropic,
    );
    assert_eq!(r.len(), 2);
    assert_clean(&r[0], "tool_use");
    assert_clean(&r[1], "end_turn");
    assert_eq!(calls_of(&r[0], 0), [("run_code", "toolu_1")]);
    assert_eq!(tool_calls(&d.events)[0].2, r#"{"code":"1+1"}"#);
    assert_eq!(tokens(&r[0], 0), (50, 20, 0, 0, 0));
    assert_eq!(tokens(&r[1], 0), (70, 8, 0, 0, 0));
}

#[test]
fn anthropic_tool_use_without_stop_is_not_a_call_and_the_turn_is_incomplete() {
    let (d, r) = load("anthropic/tool-use-no-stop.chunks.txt", Format::Anthropic);
    assert_eq!(d.skips.incomplete_tool_calls, 1);
    assert!(tool_calls(&d.events).is_empty());
    assert!(
        !d.events
            .iter()
            .any(|e| matches!(e.kind, EventKind::Finish { .. }))
    );
    let r = &r[0];
    assert_eq!(r.status, TurnStatus::Incomplete);
    assert_eq!(outcomes(r), [Outcome::Open]);
    assert_eq!(findings(r), [IncompleteTurn]);
}

#[test]
fn gemini_partial_args_without_terminal() {
    let (d, r) = load("gemini/partial-args-no-terminal.chunks.txt", Format::Gemini);
    assert_clean(&r[0], "STOP");
    let calls = tool_calls(&d.events);
    assert_eq!(calls.len(), 2);
    assert_eq!(
        (calls[0].1.as_str(), calls[0].0.as_str()),
        ("getWeather", "fc-0")
    );
    assert_eq!(json(&calls[0].2), json(r#"{"location":"Boston"}"#));
    assert_eq!(
        (calls[1].1.as_str(), calls[1].0.as_str()),
        ("getTime", "fc-1")
    );
    assert_eq!(json(&calls[1].2), json(r#"{"tz":"EST","h24":true}"#));
    assert_eq!(tokens(&r[0], 0), (26, 155, 10, 0, 132));
    assert_eq!(r[0].started_ms, Some(1_775_149_430_399));
}

#[test]
fn gemini_response_id_change_before_finish_is_a_splice() {
    let (_, r) = load("gemini/response-id-change.chunks.txt", Format::Gemini);
    let r = &r[0];
    let ctx = summary(r);
    assert_eq!(
        outcomes(r),
        [Outcome::Abandoned, Outcome::Completed],
        "{ctx}"
    );
    // The abandoned attempt did produce a complete call (never executed here).
    assert_eq!(calls_of(r, 0), [("delete_branch", "fc-0")], "{ctx}");
    assert_eq!(calls_of(r, 1), [("delete_branch", "fc-0")], "{ctx}");
    assert_eq!(
        tokens(r, 0),
        (9, 6, 0, 0, 0),
        "usage reported before the cut"
    );
    assert_eq!(tokens(r, 1), (9, 12, 0, 0, 4));
    assert_eq!(findings(r), SPLICED, "{ctx}");
}

#[test]
fn gemini_cli_metadata_only_chunk_and_cut_call() {
    let (_, r) = load(
        "gemini-cli-responses/metadata-only.responses",
        Format::GeminiCliResponses,
    );
    assert_eq!(r.len(), 2, "countTokens is not a model call");
    assert_clean(&r[0], "STOP");
    assert_eq!(tokens(&r[0], 0), (100, 10, 0, 0, 0));
    assert_eq!(r[0].attempts[0].text_chars, 15);
    assert_eq!(r[1].turn, "metadata-only.responses#2");
    assert_eq!(r[1].status, TurnStatus::Incomplete);
    assert_eq!(tokens(&r[1], 0), (120, 9, 0, 0, 7));
    assert_eq!(r[1].attempts[0].text_chars, 7, "thought parts are not text");
    assert_eq!(findings(&r[1]), [IncompleteTurn]);
}

#[test]
fn acp_message_id_change_resets_and_completed_tool_is_executed() {
    let (d, r) = load("acp/message-id-change.jsonl", Format::Acp);
    assert_eq!(d.skips.unknown_types, 0);
    let resets = d
        .events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::RenderReset))
        .count();
    assert_eq!(resets, 2, "m-1 → m-2 and m-2 → m-3");
    assert_eq!(
        r.len(),
        1,
        "the replay after the response belongs to no turn"
    );
    let r = &r[0];
    let ctx = summary(r);
    assert_eq!(r.turn, "sess-1:2");
    assert_eq!(r.session.as_deref(), Some("sess-1"));
    assert_clean(r, "end_turn");
    assert_eq!(
        calls_of(r, 0),
        [("issue_refund", "call-1"), ("read_order", "call-2")],
        "{ctx}"
    );
    let exec: Vec<(&str, bool)> = r.attempts[0]
        .executed
        .iter()
        .map(|e| (e.id.as_str(), e.read))
        .collect();
    assert_eq!(exec, [("call-1", false), ("call-2", true)], "{ctx}");
}

#[test]
fn acp_v2_agent_message_replacement_resets() {
    let (d, r) = load("acp/v2-replacement.jsonl", Format::Acp);
    let kinds: Vec<&str> = d.events.iter().map(|e| e.kind.type_name()).collect();
    assert_eq!(
        kinds,
        [
            "turn_start",
            "text",
            "render_reset",
            "text",
            "finish",
            "turn_end"
        ]
    );
    assert_eq!(r[0].turn, "s2:p1");
    assert_clean(&r[0], "end_turn");
}

#[test]
fn spliced_stream_only_on_spliced_fixtures() {
    let spliced = [
        "openai-chat/id-change-splice.sse",
        "openai-responses/error-nested-then-retry.chunks.txt",
        "anthropic/spliced-message-start.chunks.txt",
        "anthropic/spliced-thinking-only.chunks.txt",
        "gemini/response-id-change.chunks.txt",
    ];
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/providers");
    let mut seen = 0;
    for dir in std::fs::read_dir(&root).expect("fixtures dir").flatten() {
        if !dir.path().is_dir() {
            continue;
        }
        for file in std::fs::read_dir(dir.path()).expect("format dir").flatten() {
            let rel = format!(
                "{}/{}",
                dir.file_name().to_string_lossy(),
                file.file_name().to_string_lossy()
            );
            let bytes = std::fs::read(file.path()).expect("read");
            let d = decode(&rel, &bytes, Format::Auto);
            let any = correlate(&d.events)
                .iter()
                .any(|r| r.findings.iter().any(|f| f.kind == SplicedStream));
            assert_eq!(any, spliced.contains(&rel.as_str()), "{rel}");
            seen += 1;
        }
    }
    assert!(seen >= 18, "only {seen} fixtures found");
}
