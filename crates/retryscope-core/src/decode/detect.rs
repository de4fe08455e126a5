//! Format sniffing from the first bytes of a stream.
//!
//! Owns: [`detect`] and [`sniff`]. They look at the first few payloads only (the JSON of
//! `data:` payloads or of JSON lines; SSE `event:` names decide nothing alone) and never fail:
//! when unsure they answer [`Format::Native`], the format whose decoder reports bad lines most
//! clearly. A provider format is accepted only on its defining shape (`shape.rs`); a record
//! that borrows a provider's event names without its shape (another agent's own event log) is
//! a [`Lookalike`], refused rather than decoded into false retries and splices.

use serde_json::Value;

use super::provider::Format;

mod shape;

pub use shape::Lookalike;

/// What sniffing decided: a format to decode with, or a lookalike to refuse.
pub(crate) type Sniffed = Result<Format, Lookalike>;

/// How many payloads to look at before giving up.
const MAX_PAYLOADS: usize = 16;
/// How many non-blank lines to look at before giving up (a text file has no payloads at all).
const MAX_LINES: usize = 64;
/// How many bytes to look at before giving up.
pub const SNIFF_BYTES: usize = 64 * 1024;

/// Sniff the format from the first bytes (up to [`SNIFF_BYTES`]) of a whole stream. Never
/// returns `Auto`; returns `Native` when unsure, a [`Lookalike`] for a stream that borrows a
/// provider's event names without its shape.
pub fn detect(head: &[u8]) -> Sniffed {
    sniff(head, true).unwrap_or(Ok(Format::Native))
}

/// Sniff the format from the first bytes of a stream that may still grow: `Some` once a
/// record says which format it is, or once `at_end` (the stream ended, or the caller holds as
/// much as it will) or the look-ahead budget is spent, when the answer is the best guess;
/// `None` while more input could still decide. [`detect`] and the ingest path's incremental
/// sniffing both answer through here, so a file and a live stream get the same format.
pub fn sniff(head: &[u8], at_end: bool) -> Option<Sniffed> {
    let head = &head[..head.len().min(SNIFF_BYTES)];
    let budget_spent = head.len() == SNIFF_BYTES;
    // A cut may split a UTF-8 sequence: use the valid prefix.
    let text = match std::str::from_utf8(head) {
        Ok(t) => t,
        Err(e) => std::str::from_utf8(&head[..e.valid_up_to()]).unwrap_or(""),
    };
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut payloads = 0;
    let mut lines = 0;
    let mut pretty_object = false;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with(':') {
            continue;
        }
        lines += 1;
        if lines > MAX_LINES {
            break;
        }
        if line.starts_with("event:") {
            // A name is not a shape: the `data:` payload that follows decides.
            continue;
        }
        let payload = line.strip_prefix("data:").map_or(line, str::trim);
        if payload == "[DONE]" {
            return Some(Ok(Format::OpenAiChat));
        }
        if !payload.starts_with('{') {
            continue;
        }
        if payload == "{" {
            pretty_object = true;
            break;
        }
        let Ok(v) = serde_json::from_str::<Value>(payload) else {
            continue; // cut at the look-ahead boundary, or not JSON
        };
        if let Some(f) = by_payload(&v) {
            return Some(f);
        }
        payloads += 1;
        if payloads >= MAX_PAYLOADS {
            break;
        }
    }
    // Multi-line objects: the gemini-cli telemetry outfile, the only such format read. Its
    // first record is usually a span (often larger than the look-ahead), so OpenTelemetry JS
    // field names decide as well as a log record's `event.name`; a pretty-printed object
    // with none of them is still the outfile once the look-ahead is spent or the input ends.
    const MARKS: [&str; 6] = [
        "\"event.name\"",
        "\"gemini_cli.",
        "\"_spanContext\"",
        "\"hrTime\"",
        "\"scopeMetrics\"",
        "\"instrumentationScope\"",
    ];
    if (pretty_object || text.contains("\"gemini_cli.")) && MARKS.iter().any(|m| text.contains(m)) {
        return Some(Ok(Format::GeminiCliTelemetry));
    }
    if pretty_object && (at_end || budget_spent) {
        return Some(Ok(Format::GeminiCliTelemetry));
    }
    let spent = budget_spent || lines > MAX_LINES || payloads >= MAX_PAYLOADS;
    (at_end || spent).then_some(Ok(Format::Native))
}

fn by_payload(v: &Value) -> Option<Sniffed> {
    let obj = v.as_object()?;
    let ty = obj.get("type").and_then(Value::as_str);
    if obj.contains_key("turn") && ty.is_some() {
        return Some(Ok(Format::Native));
    }
    if matches!(
        obj.get("otlp").and_then(Value::as_str),
        Some(crate::decode::otlp::LOG | crate::decode::otlp::SPAN)
    ) {
        return Some(Ok(Format::Otlp));
    }
    if let Some(f) = agent_cli(obj, ty) {
        return Some(Ok(f));
    }
    if obj.contains_key("jsonrpc") {
        return Some(Ok(Format::Acp));
    }
    if obj.contains_key("method") && obj.contains_key("response") {
        return Some(Ok(Format::GeminiCliResponses));
    }
    if obj
        .get("attributes")
        .is_some_and(|a| a.get("event.name").is_some())
        || obj.contains_key("event.name")
        || obj.contains_key("_spanContext")
        || obj.contains_key("scopeMetrics")
    {
        return Some(Ok(Format::GeminiCliTelemetry));
    }
    shape::provider(obj, ty)
}

/// The coding agents' own outputs, by their event types.
fn agent_cli(obj: &serde_json::Map<String, Value>, ty: Option<&str>) -> Option<Format> {
    match ty? {
        "thread.started" | "turn.started" | "turn.completed" | "turn.failed" | "item.started"
        | "item.completed" | "item.updated" => Some(Format::CodexExec),
        "system" | "assistant" | "user" | "result" if obj.contains_key("session_id") => {
            // Claude Code's lines carry `session_id` and (except `result`) a `message` or
            // `subtype`; gemini-cli's stream-json `result` has `stats` instead.
            (!obj.contains_key("stats")).then_some(Format::ClaudeCode)
        }
        // gemini-cli's stream-json: `init` without a subtype, timestamped events.
        "init" if obj.contains_key("session_id") && !obj.contains_key("subtype") => {
            Some(Format::GeminiCliStreamJson)
        }
        "tool_use" if obj.contains_key("tool_id") => Some(Format::GeminiCliStreamJson),
        "message" if obj.contains_key("role") && obj.contains_key("timestamp") => {
            Some(Format::GeminiCliStreamJson)
        }
        "tool_result" if obj.contains_key("tool_id") => Some(Format::GeminiCliStreamJson),
        "result" if obj.contains_key("stats") => Some(Format::GeminiCliStreamJson),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sniffs_each_format() {
        let cases: [(&str, Format); 12] = [
            (
                "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\"}}\n",
                Format::Anthropic,
            ),
            (
                "{\"type\":\"ping\"}\n{\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\"}}\n",
                Format::Anthropic,
            ),
            (
                "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[]}\r\n\r\n",
                Format::OpenAiChat,
            ),
            (
                "{\"choices\":[],\"id\":\"\",\"prompt_filter_results\":[]}\n",
                Format::OpenAiChat,
            ),
            (
                "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"object\":\"response\"}}\n",
                Format::OpenAiResponses,
            ),
            (
                "{\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\"}}\n",
                Format::OpenAiResponses,
            ),
            ("{\"candidates\":[]}\n", Format::Gemini),
            (
                "{\"method\":\"generateContentStream\",\"response\":[]}\n",
                Format::GeminiCliResponses,
            ),
            (
                "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\"}\n",
                Format::Acp,
            ),
            (
                "{\n  \"hrTime\": [1, 2],\n  \"attributes\": {\n    \"event.name\": \"gemini_cli.api_request\"",
                Format::GeminiCliTelemetry,
            ),
            (
                "{\"turn\":\"t\",\"type\":\"text\",\"text\":\"a\"}\n",
                Format::Native,
            ),
            ("hello\n", Format::Native),
        ];
        for (head, want) in cases {
            assert_eq!(detect(head.as_bytes()), Ok(want), "{head}");
        }
    }

    #[test]
    fn gemini_cli_outfile_starting_with_a_span_or_metric_record() {
        // Regression: the real outfile starts with a span (often larger than the sniffed head
        // holds), not a log record.
        let span = "{\n  \"_spanContext\": {\n    \"traceId\": \"1c\",\n";
        assert_eq!(detect(span.as_bytes()), Ok(Format::GeminiCliTelemetry));
        assert_eq!(
            detect(b"{\n"),
            Ok(Format::GeminiCliTelemetry),
            "a pretty-printed object, input ended"
        );
        let metric = "{\"resource\":{},\"scopeMetrics\":[]}\n";
        assert_eq!(detect(metric.as_bytes()), Ok(Format::GeminiCliTelemetry));
    }

    #[test]
    fn coding_agent_outputs() {
        let claude = "{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"s\"}\n";
        assert_eq!(detect(claude.as_bytes()), Ok(Format::ClaudeCode));
        let codex = "{\"type\":\"thread.started\",\"thread_id\":\"t\"}\n";
        assert_eq!(detect(codex.as_bytes()), Ok(Format::CodexExec));
        let gemini = "{\"type\":\"init\",\"timestamp\":\"2026-12-02T15:53:54.007Z\",\"session_id\":\"s\",\"model\":\"auto\"}\n";
        assert_eq!(detect(gemini.as_bytes()), Ok(Format::GeminiCliStreamJson));
        // Files that start mid-session: a delta, a Claude Code assistant line, a Codex item,
        // a Claude Code result line whose keys do not start with `type`.
        let starts = [
            (
                "{\"type\":\"message\",\"timestamp\":\"t\",\"role\":\"assistant\",\"content\":\"a\",\"delta\":true}\n",
                Format::GeminiCliStreamJson,
            ),
            (
                "{\"type\":\"assistant\",\"message\":{},\"session_id\":\"s\"}\n",
                Format::ClaudeCode,
            ),
            (
                "{\"duration_api_ms\":1,\"type\":\"result\",\"session_id\":\"s\"}\n",
                Format::ClaudeCode,
            ),
            (
                "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_0\",\"type\":\"error\"}}\n",
                Format::CodexExec,
            ),
        ];
        for (head, want) in starts {
            assert_eq!(detect(head.as_bytes()), Ok(want), "{head}");
        }
    }

    #[test]
    fn sniffing_waits_for_a_deciding_record_then_answers_like_detect() {
        let pretty = "{\n  \"x\": [1, 2],\n";
        assert_eq!(sniff(pretty.as_bytes(), false), None);
        assert_eq!(sniff(b"{\"unknown\":1}\n", false), None);
        assert_eq!(sniff(b"{\"unknown\":1}\n", true), Some(Ok(Format::Native)));
        let text = "not a log line\n".repeat(MAX_LINES + 1);
        assert_eq!(sniff(text.as_bytes(), false), Some(Ok(Format::Native)));
        let full =
            format!("{pretty}  \"attributes\": {{\"event.name\": \"gemini_cli.api_request\"");
        assert_eq!(sniff(full.as_bytes(), false), Some(detect(full.as_bytes())));
    }

    #[test]
    fn a_lone_error_event_looks_further() {
        let head = "{\"type\":\"error\",\"error\":{}}\n{\"type\":\"response.failed\",\"sequence_number\":1}\n";
        assert_eq!(detect(head.as_bytes()), Ok(Format::OpenAiResponses));
    }

    #[test]
    fn event_names_without_the_shape_are_a_lookalike() {
        // Another agent's own event log that borrows Anthropic's event names (issue 21, item
        // 7): user, assistant and tool messages alike, no message id, no `"type":"message"`.
        let head = "{\"type\":\"agent_start\"}\n\
                    {\"type\":\"message_start\",\"message\":{\"role\":\"user\",\"content\":\"hi\"}}\n";
        let got = detect(head.as_bytes());
        assert!(
            matches!(&got, Err(l) if l.like == Format::Anthropic),
            "{got:?}"
        );
        // An SSE event name alone decides nothing: its payload must have the shape too.
        let sse = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{}}\n";
        assert!(detect(sse.as_bytes()).is_err());
        // The sentence names the routes that do work.
        let sentence = detect(head.as_bytes()).expect_err("refused").sentence();
        assert!(sentence.contains("retryscope proxy") && sentence.contains("--otlp-listen"));
    }
}
