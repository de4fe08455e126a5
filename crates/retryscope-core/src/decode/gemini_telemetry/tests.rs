//! Unit tests of the gemini-cli telemetry decoder, on records shaped like the real outfile.

use super::super::Format;
use super::super::provider::decode_lines;
use crate::event::EventKind;

/// A log record as gemini-cli 0.61 writes it (pretty-printed, values as the JS SDK emits).
fn log(name: &str, ts: &str, extra: &str) -> String {
    format!(
        "{{\n  \"hrTime\": [1796226834, 0],\n  \"attributes\": {{\n    \"session.id\": \"s\",\n    \"event.name\": \"{name}\",\n    \"event.timestamp\": \"{ts}\"{extra}\n  }},\n  \"_body\": \"x\"\n}}"
    )
}

const SPAN: &str = "{\n  \"_spanContext\": {\"traceId\": \"t\", \"spanId\": \"s\"},\n  \"name\": \"llm_call\",\n  \"attributes\": {\"gen_ai.operation.name\": \"llm_call\"}\n}";
const METRIC: &str = "{\"resource\": {}, \"scopeMetrics\": []}";

fn response(parts: &str, finish: bool) -> String {
    let fin = if finish {
        ",\\\"finishReason\\\":\\\"STOP\\\""
    } else {
        ""
    };
    format!(
        ",\n    \"role\": \"main\",\n    \"prompt_id\": \"p\",\n    \"input_token_count\": 900,\n    \"output_token_count\": 37,\n    \"response_text\": \"[{{\\\"candidates\\\":[{{\\\"content\\\":{{\\\"parts\\\":[{parts}]}}{fin}}}]}}]\""
    )
}

fn decode(records: &[String]) -> Vec<(String, &'static str, Option<u32>)> {
    let text = records.join("\n");
    let (evs, skips) = decode_lines(Format::GeminiCliTelemetry, text.lines());
    assert_eq!(skips.unknown_types, 0);
    evs.iter()
        .map(|e| (e.turn.to_string(), e.kind.type_name(), e.attempt))
        .collect()
}

#[test]
fn retried_call_after_a_cut_and_the_abandoned_attempts_execution() {
    let main = ",\n    \"role\": \"main\",\n    \"prompt_id\": \"p\",\n    \"model\": \"gemini-3.8-flash\"";
    let call_a2 = r#"{\"functionCall\":{\"id\":\"run_shell_command__a2\",\"name\":\"run_shell_command\",\"args\":{\"command\":\"touch a2\"}}}"#;
    let records = [
        SPAN.to_owned(),
        log(
            "gemini_cli.api_request",
            "2026-12-02T15:53:54.065Z",
            ",\n    \"role\": \"utility_router\",\n    \"prompt_id\": \"p\"",
        ),
        log(
            "gemini_cli.api_response",
            "2026-12-02T15:53:54.222Z",
            ",\n    \"role\": \"utility_router\",\n    \"prompt_id\": \"p\",\n    \"finish_reasons\": \"['stop']\"",
        ),
        log("gemini_cli.api_request", "2026-12-02T15:53:54.355Z", main),
        log(
            "gemini_cli.api_error",
            "2026-12-02T15:53:55.173Z",
            ",\n    \"role\": \"main\",\n    \"prompt_id\": \"p\",\n    \"error\": \"terminated\"",
        ),
        log(
            "gemini_cli.network_retry_attempt",
            "2026-12-02T15:53:55.206Z",
            ",\n    \"attempt\": 1,\n    \"error_type\": \"ECONNRESET\"",
        ),
        log("gemini_cli.api_request", "2026-12-02T15:53:56.222Z", main),
        log(
            "gemini_cli.api_response",
            "2026-12-02T15:53:56.461Z",
            &response(&format!("{{\\\"text\\\":\\\"[A2] ok\\\"}},{call_a2}"), true),
        ),
        log(
            "gemini_cli.tool_call",
            "2026-12-02T15:53:56.906Z",
            ",\n    \"prompt_id\": \"p\",\n    \"function_name\": \"run_shell_command\",\n    \"success\": true,\n    \"function_args\": \"{\\n  \\\"command\\\": \\\"touch a1\\\"\\n}\"",
        ),
        log(
            "gemini_cli.tool_call",
            "2026-12-02T15:53:56.908Z",
            ",\n    \"prompt_id\": \"p\",\n    \"function_name\": \"run_shell_command\",\n    \"success\": true,\n    \"function_args\": \"{\\\"command\\\": \\\"touch a2\\\"}\"",
        ),
        log("gemini_cli.api_request", "2026-12-02T15:53:57.044Z", main),
        log(
            "gemini_cli.api_response",
            "2026-12-02T15:53:57.233Z",
            &response(r#"{\"text\":\"[F] done\"}"#, true),
        ),
        METRIC.to_owned(),
    ];
    let got = decode(&records);
    let want: Vec<(String, &str, Option<u32>)> = [
        ("p~utility_router", "turn_start", Some(0)),
        ("p~utility_router", "attempt_start", Some(0)),
        ("p~utility_router", "usage", Some(0)),
        ("p~utility_router", "finish", Some(0)),
        ("p", "turn_start", Some(0)),
        ("p", "attempt_start", Some(0)),
        ("p", "error", Some(0)),
        ("p", "retry", Some(1)),
        ("p", "text", Some(1)),
        ("p", "tool_call", Some(1)),
        ("p", "usage", Some(1)),
        ("p", "finish", Some(1)),
        // touch a1 matches no logged call: it came from the failed attempt 0.
        ("p", "tool_call", Some(0)),
        ("p", "tool_exec", Some(0)),
        // touch a2: left to the correlator, which matches it by content.
        ("p", "tool_exec", None),
        ("p#2", "turn_start", Some(0)),
        ("p#2", "attempt_start", Some(0)),
        ("p#2", "text", Some(0)),
        ("p#2", "usage", Some(0)),
        ("p#2", "finish", Some(0)),
    ]
    .into_iter()
    .map(|(t, k, a)| (t.to_owned(), k, a))
    .collect();
    assert_eq!(got, want);
}

#[test]
fn a_response_without_finish_reason_is_not_finished() {
    let records = [
        log(
            "gemini_cli.api_request",
            "2026-12-02T15:54:16.872Z",
            ",\n    \"role\": \"main\",\n    \"prompt_id\": \"p\"",
        ),
        log(
            "gemini_cli.api_response",
            "2026-12-02T15:54:17.446Z",
            &response(r#"{\"text\":\"[A1] cut\"}"#, false),
        ),
    ];
    let kinds: Vec<&str> = decode(&records).into_iter().map(|e| e.1).collect();
    assert_eq!(
        kinds,
        ["turn_start", "attempt_start", "text", "usage", "error"]
    );
}

#[test]
fn usage_is_per_model_call() {
    let records = [
        log(
            "gemini_cli.api_request",
            "2026-12-02T15:54:16.872Z",
            ",\n    \"prompt_id\": \"p\"",
        ),
        log(
            "gemini_cli.api_response",
            "2026-12-02T15:54:17.446Z",
            &response(r#"{\"text\":\"a\"}"#, true),
        ),
    ];
    let text = records.join("\n");
    let (evs, _) = decode_lines(Format::GeminiCliTelemetry, text.lines());
    let usage = evs.iter().find_map(|e| match &e.kind {
        EventKind::Usage { usage, .. } => Some(*usage),
        _ => None,
    });
    assert_eq!(
        usage.map(|u| (u.input_tokens, u.output_tokens)),
        Some((900, 37))
    );
}

/// A log record of Qwen Code 0.24.4 (a gemini-cli fork), one per line.
fn qwen(name: &str, ts: &str, attrs: serde_json::Value) -> String {
    let mut a = attrs;
    a["session.id"] = "s".into();
    a["event.name"] = format!("qwen-code.{name}").into();
    a["event.timestamp"] = ts.into();
    a["prompt_id"] = "s########0".into();
    serde_json::json!({ "attributes": a }).to_string()
}

fn history(models: &[&str], trailing_user: bool) -> String {
    let mut h = vec![serde_json::json!({"role": "user", "parts": [{"text": "go"}]})];
    for m in models {
        h.push(serde_json::json!({"role": "model", "parts": [{"text": m}]}));
    }
    if trailing_user {
        h.push(
            serde_json::json!({"role": "user", "parts": [{"text": "continue after the suffix"}]}),
        );
    }
    serde_json::Value::from(h).to_string()
}

#[test]
fn a_fork_continuation_that_restarts_is_a_retry_and_its_kept_text_a_splice() {
    // Qwen Code after a reset: the retry's history ends with the cut attempt's partial text
    // (never logged as a response) and a request to continue; the model restarted, and the
    // next call's history keeps both attempts' text.
    let records = [
        qwen(
            "api_request",
            "2026-12-03T08:43:38.506Z",
            serde_json::json!({"request_text": history(&[], false)}),
        ),
        qwen(
            "api_error",
            "2026-12-03T08:43:40.318Z",
            serde_json::json!({"response_id": "r1", "error.message": "terminated"}),
        ),
        qwen(
            "api_request",
            "2026-12-03T08:43:41.332Z",
            serde_json::json!({"request_text": history(&["[A1] I will now cr"], true)}),
        ),
        qwen(
            "api_response",
            "2026-12-03T08:43:42.570Z",
            serde_json::json!({"response_id": "r2", "response_text": "[A2] I will now create it.", "input_token_count": 9, "output_token_count": 4}),
        ),
        qwen(
            "tool_call",
            "2026-12-03T08:43:42.743Z",
            serde_json::json!({"response_id": "r2", "call_id": "call_2", "function_name": "run_shell_command", "function_args": "{\"command\":\"touch a2\"}", "success": true}),
        ),
        qwen(
            "api_request",
            "2026-12-03T08:43:42.780Z",
            serde_json::json!({"request_text": history(&["[A1] I will now cr[A2] I will now create it."], true)}),
        ),
        qwen(
            "api_response",
            "2026-12-03T08:43:42.963Z",
            serde_json::json!({"response_id": "r3", "response_text": "[F] done"}),
        ),
        serde_json::json!({"attributes": {"session.id": "s", "event.name": "session.end"}})
            .to_string(),
    ];
    let text = records.join("\n");
    let (evs, skips) = decode_lines(Format::GeminiCliTelemetry, text.lines());
    assert_eq!(skips.unknown_types, 0);
    let got: Vec<(&str, &str, Option<u32>)> = evs
        .iter()
        .map(|e| (&*e.turn, e.kind.type_name(), e.attempt))
        .collect();
    let want: [(&str, &str, Option<u32>); 16] = [
        ("s########0", "turn_start", Some(0)),
        ("s########0", "attempt_start", Some(0)),
        ("s########0", "error", Some(0)),
        // the continuation's trailing model turn: the cut attempt's text
        ("s########0", "text", Some(0)),
        ("s########0", "retry", Some(1)),
        ("s########0", "text", Some(1)),
        ("s########0", "usage", Some(1)),
        // the execution names its response: attempt 1's call, which then finished
        ("s########0", "tool_call", Some(1)),
        ("s########0", "finish", Some(1)),
        ("s########0", "tool_exec", Some(1)),
        // what the client kept, from the next call's history
        ("s########0", "output", None),
        ("s########0#2", "turn_start", Some(0)),
        ("s########0#2", "attempt_start", Some(0)),
        ("s########0#2", "text", Some(0)),
        ("s########0#2", "usage", Some(0)),
        // settled by the session's next record
        ("s########0#2", "finish", Some(0)),
    ];
    assert_eq!(got, want, "{got:#?}");
    let retry = evs.iter().find_map(|e| match &e.kind {
        EventKind::Retry { reason, prefill } => Some((reason.clone(), prefill.clone())),
        _ => None,
    });
    let (reason, prefill) = retry.expect("a retry");
    assert_eq!(reason.as_deref(), Some("continuation"));
    assert_eq!(prefill.as_deref(), Some("[A1] I will now cr"));
    let agent = evs.iter().find_map(|e| match &e.kind {
        EventKind::TurnStart { agent, .. } => agent.clone(),
        _ => None,
    });
    assert_eq!(agent.as_deref(), Some("qwen-code"));
}

#[test]
fn a_fork_response_followed_by_a_content_retry_was_cut() {
    // Qwen Code after a clean end of body: a response is logged (plain text, no finish
    // reason), then `chat.content_retry` and the same request again.
    let req = || serde_json::json!({"request_text": history(&[], false)});
    let records = [
        qwen("api_request", "2026-12-03T08:43:37.628Z", req()),
        qwen(
            "api_response",
            "2026-12-03T08:43:40.784Z",
            serde_json::json!({"response_id": "r1", "response_text": "[A1] cut"}),
        ),
        qwen(
            "chat.content_retry",
            "2026-12-03T08:43:40.792Z",
            serde_json::json!({"error_type": "NO_FINISH_REASON"}),
        ),
        qwen("api_request", "2026-12-03T08:43:42.805Z", req()),
        qwen(
            "api_response",
            "2026-12-03T08:43:44.049Z",
            serde_json::json!({"response_id": "r2", "response_text": "[A2] whole"}),
        ),
    ];
    let text = records.join("\n");
    let (evs, _) = decode_lines(Format::GeminiCliTelemetry, text.lines());
    let got: Vec<(&str, Option<u32>)> = evs
        .iter()
        .map(|e| (e.kind.type_name(), e.attempt))
        .collect();
    assert_eq!(
        got,
        [
            ("turn_start", Some(0)),
            ("attempt_start", Some(0)),
            ("text", Some(0)),
            ("usage", Some(0)),
            ("error", Some(0)),
            ("retry", Some(1)),
            ("text", Some(1)),
            ("usage", Some(1)),
            // settled at the end of the input: nothing announced a retry
            ("finish", Some(1)),
        ]
    );
}
