//! Unit tests of the Claude Code stream-json decoder (and other agents' lines of its shape).

use super::super::Format;
use super::super::provider::stream_decoder;
use super::*;

fn decode(lines: &[&str]) -> (Vec<Event<'static>>, usize, SkipCounts) {
    let mut d = stream_decoder(Format::ClaudeCode, "x").expect("decoder");
    let mut out = Vec::new();
    let bad = lines
        .iter()
        .filter(|l| d.push_line(l.as_bytes(), &mut out).is_err())
        .count();
    d.finish(&mut out);
    (out, bad, d.skips())
}

#[test]
fn an_execution_between_blocks_ran_early_one_after_the_last_block_after_the_finish() {
    let a = |text: &str| {
        format!(
            r#"{{"type":"assistant","message":{{"id":"msg_1","model":"m","content":[{text}],"stop_reason":null,"usage":{{"input_tokens":9,"output_tokens":1}}}},"session_id":"s"}}"#
        )
    };
    let tool = a(r#"{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"x"}}"#);
    let more = a(r#"{"type":"text","text":"more"}"#);
    let result = r#"{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_1","type":"tool_result","content":"","is_error":false}]},"session_id":"s"}"#;
    let next = r#"{"type":"assistant","message":{"id":"msg_2","model":"m","content":[{"type":"text","text":"done"}]},"session_id":"s"}"#;
    let kinds = |evs: &[Event<'static>]| -> Vec<&'static str> {
        evs.iter().map(|e| e.kind.type_name()).collect()
    };
    // Result after the last block: the message finished first.
    let (evs, bad, _) = decode(&[&tool, result, next]);
    assert_eq!(bad, 0);
    let k = kinds(&evs);
    let finish = k.iter().position(|k| *k == "finish").expect("finish");
    let exec = k.iter().position(|k| *k == "tool_exec").expect("exec");
    assert!(finish < exec, "{k:?}");
    // Result, then another block of the same message: it ran before the finish.
    let (evs, _, _) = decode(&[&tool, result, &more, next]);
    let k = kinds(&evs);
    let finish = k.iter().position(|k| *k == "finish").expect("finish");
    let exec = k.iter().position(|k| *k == "tool_exec").expect("exec");
    assert!(exec < finish, "{k:?}");
}

#[test]
fn another_agents_lines_by_structure_retry_record_line_ids_error_result() {
    // Qwen Code 0.24.4's stream-json: the agent in `<agent>_version`, `system/retry`, one
    // line per block whose `message.id` is the line's `uuid`, `result.is_error`.
    let line = |uuid: &str, block: &str, stop: &str| {
        format!(
            r#"{{"type":"assistant","uuid":"{uuid}","session_id":"s","message":{{"id":"{uuid}","type":"message","role":"assistant","model":"m","content":[{block}],"stop_reason":{stop}}}}}"#
        )
    };
    let init = r#"{"type":"system","subtype":"init","uuid":"s","session_id":"s","model":"m","qwen_code_version":"0.24.4"}"#;
    let retry = r#"{"type":"system","subtype":"retry","uuid":"r","session_id":"s","data":{"reason":"retry","preserveText":false}}"#;
    let cut = line("u1", r#"{"type":"text","text":"[A1] cr"}"#, "null");
    let text = line("u2", r#"{"type":"text","text":"[A2] create"}"#, "null");
    let call = line(
        "u3",
        r#"{"type":"tool_use","id":"call_2","name":"run_shell_command","input":{"command":"x"}}"#,
        r#""tool_use""#,
    );
    let result = r#"{"type":"user","uuid":"u4","session_id":"s","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_2","is_error":false,"content":"ok"}]}}"#;
    let last = line("u5", r#"{"type":"text","text":"[F] done"}"#, "null");
    let end =
        r#"{"type":"result","subtype":"success","uuid":"u6","session_id":"s","is_error":false}"#;
    let (evs, bad, _) = decode(&[init, &cut, retry, retry, &text, &call, result, &last, end]);
    assert_eq!(bad, 0);
    let got: Vec<(&str, &str, Option<u32>)> = evs
        .iter()
        .map(|e| (&*e.turn, e.kind.type_name(), e.attempt))
        .collect();
    assert_eq!(
        got,
        [
            ("s", "turn_start", Some(0)),
            ("s", "text", Some(0)),
            ("s", "error", Some(0)),
            ("s", "retry", Some(1)),
            ("s", "text", Some(1)),
            ("s", "tool_call", Some(1)),
            ("s", "usage", Some(1)),
            ("s", "finish", Some(1)),
            ("s", "tool_exec", None),
            ("s", "turn_end", None),
            ("s#2", "turn_start", Some(0)),
            ("s#2", "text", Some(0)),
            ("s#2", "usage", Some(0)),
            ("s#2", "finish", Some(0)),
            ("s#2", "turn_end", None),
        ]
    );
    assert!(evs.iter().any(|e| matches!(&e.kind,
        EventKind::TurnStart { agent: Some(a), provider: None, .. } if a == "qwen-code")));
    // The session ended on an error with the call open: failed, not finished.
    let failed = r#"{"type":"result","subtype":"error_during_execution","uuid":"u9","session_id":"s","is_error":true,"error":{"message":"[API Error: boom]"}}"#;
    let (evs, _, _) = decode(&[init, &cut, failed]);
    let kinds: Vec<&str> = evs.iter().map(|e| e.kind.type_name()).collect();
    assert_eq!(kinds, ["turn_start", "text", "usage", "error", "turn_end"]);
}

#[test]
fn bad_lines_are_errors_and_unknown_types_are_counted() {
    let (_, bad, skips) = decode(&["not json", "{\"type\":", r#"{"type":"telepathy"}"#, ""]);
    assert_eq!(bad, 2);
    assert_eq!(skips.unknown_types, 1);
}

#[test]
fn a_tool_result_says_how_the_call_ended() {
    // Claude Code answers a cancelled call with an error result in its own words.
    let tool = r#"{"type":"assistant","message":{"id":"msg_1","model":"m","content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"x"}}],"stop_reason":null,"usage":{"input_tokens":9,"output_tokens":1}},"session_id":"s"}"#;
    let result = r#"{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_1","type":"tool_result","content":[{"type":"text","text":"User aborted the command"}],"is_error":true}]},"session_id":"s"}"#;
    let (evs, _, _) = decode(&[tool, result]);
    let exec = evs
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::ToolExec { status, result, .. } => Some((status.clone(), result.clone())),
            _ => None,
        })
        .expect("tool_exec");
    assert_eq!(exec.0.as_deref(), Some("error"));
    assert_eq!(exec.1.as_deref(), Some("User aborted the command"));
}
