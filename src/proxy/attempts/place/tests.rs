//! Executions whose ids were never streamed, through the tracker and the real pipeline.
//!
//! Modelled on gemini-cli 0.61.0 against the Gemini API (whose `functionCall` has no `id`,
//! `../shared/fixtures/gemini/google-tool-call-gemini3.chunks.txt`): cut after the tool call,
//! it retries; its next request's history holds only the retry's call, under an id gemini-cli
//! made up, and answers both attempts' calls (its `request_text` telemetry in
//! `tests/fixtures/agents/gemini-cli/after-tool-reset` shows that history).

use super::super::tests::{answer, findings, stream, tracker};
use super::super::*;
use crate::proxy::history;

const PATH: &str = "/v1beta/models/gemini-2.5-flash:streamGenerateContent";
const PROMPT: &str = "Create the marker file.";

fn parse(v: &serde_json::Value) -> Option<history::Request> {
    history::parse(Api::Gemini, PATH, v.to_string().as_bytes())
}

fn call(marker: &str) -> serde_json::Value {
    serde_json::json!({"name":"run_shell_command","args":{"command":format!("touch /m/{marker}"),"description":"Create the marker file"}})
}

/// One attempt's chunks: text, the call (no id), text, and (when `finish`) the finish.
fn attempt(tag: &str, marker: &str, finish: bool) -> Vec<String> {
    let mut v = vec![
        serde_json::json!({"candidates":[{"content":{"role":"model","parts":[{"text":format!("[{tag}] I will now create the marker file.")}]},"index":0}],"modelVersion":"gemini-2.5-flash","responseId":format!("r{tag}")}).to_string(),
        serde_json::json!({"candidates":[{"content":{"role":"model","parts":[{"functionCall":call(marker)}]},"index":0}],"modelVersion":"gemini-2.5-flash","responseId":format!("r{tag}")}).to_string(),
    ];
    if finish {
        v.push(serde_json::json!({"candidates":[{"content":{"role":"model","parts":[{"text":""}]},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":900,"candidatesTokenCount":30,"totalTokenCount":930},"modelVersion":"gemini-2.5-flash","responseId":format!("r{tag}")}).to_string());
    }
    v
}

/// The cut first attempt, its retry, and the next request answering `results` (made-up ids,
/// or none) with the history keeping the retry's call under `kept_id`.
fn cut_and_retry(
    a0_marker: &str,
    a1_marker: &str,
    kept_id: Option<&str>,
    results: &[Option<&str>],
) -> Vec<(String, String, Option<String>)> {
    let (mut t, lines) = tracker();
    let mut ts = 1_000;
    let first = serde_json::json!({"contents":[{"role":"user","parts":[{"text":PROMPT}]}]});
    let a0 = t.begin(Api::Gemini, parse(&first).as_ref(), None, ts);
    let cut = End::Injected {
        point: "after-tool-call",
        how: "reset",
    };
    stream(&mut t, &a0, &attempt("A1", a0_marker, false), cut, &mut ts);
    let a1 = t.begin(Api::Gemini, parse(&first).as_ref(), None, ts);
    assert_eq!((a1.turn.as_str(), a1.attempt), (a0.turn.as_str(), 1));
    stream(
        &mut t,
        &a1,
        &attempt("A2", a1_marker, true),
        End::Complete,
        &mut ts,
    );
    let mut kept = call(a1_marker);
    if let Some(id) = kept_id {
        kept["id"] = id.into();
    }
    let responses: Vec<serde_json::Value> = results
        .iter()
        .map(|id| {
            let mut r = serde_json::json!({"name":"run_shell_command","response":{"output":"Output: (empty)"}});
            if let Some(id) = id {
                r["id"] = (*id).into();
            }
            serde_json::json!({"functionResponse": r})
        })
        .collect();
    let next = serde_json::json!({"contents":[
        {"role":"user","parts":[{"text":PROMPT}]},
        {"role":"model","parts":[{"text":"[A2] I will now create the marker file."},{"functionCall":kept}]},
        {"role":"user","parts":responses}
    ]});
    let a2 = t.begin(Api::Gemini, parse(&next).as_ref(), None, ts + 10);
    assert_eq!(a2.turn, format!("{}#2", a0.turn));
    answer(&mut t, &a2, ts + 20);
    assert_eq!(t.stats().executions, results.len() as u64);
    findings(&lines)
}

fn on_attempt_0(f: &[(String, String, Option<String>)]) -> Vec<&str> {
    f.iter().map(|x| x.0.as_str()).collect()
}

#[test]
fn made_up_ids_the_abandoned_call_is_placed_on_its_attempt() {
    let f = cut_and_retry(
        "a1",
        "a2",
        Some("run_shell_command__run_shell_command_1733_1"),
        &[
            Some("run_shell_command__run_shell_command_1733_0"),
            Some("run_shell_command__run_shell_command_1733_1"),
        ],
    );
    assert_eq!(
        on_attempt_0(&f),
        ["abandoned_tool_executed", "unfinished_tool_executed"],
        "{f:?}"
    );
    // Placed on the call the abandoned attempt streamed (the decoder's id for an id-less call).
    assert!(f.iter().all(|x| x.2.as_deref() == Some("fc-0")), "{f:?}");
}

#[test]
fn made_up_ids_in_the_other_order_and_the_same_command() {
    // The retry asks for the very same command: the history cannot tell the calls apart, one
    // execution per attempt all the same (and the same effect twice).
    let f = cut_and_retry("same", "same", Some("x_1"), &[Some("x_1"), Some("x_0")]);
    let kinds = on_attempt_0(&f);
    assert!(kinds.contains(&"abandoned_tool_executed"), "{f:?}");
    assert!(kinds.contains(&"duplicate_effect"), "{f:?}");
}

#[test]
fn only_the_retrys_call_ran_is_clean() {
    let f = cut_and_retry("a1", "a2", Some("x_1"), &[Some("x_1")]);
    assert_eq!(f, []);
}

#[test]
fn results_without_any_ids_are_placed_by_name_and_arguments() {
    // A client that keeps no ids at all: both results name the tool; the one matched to the
    // kept call by name takes its arguments, the other is the abandoned attempt's.
    let f = cut_and_retry("a1", "a2", None, &[None, None]);
    assert_eq!(
        on_attempt_0(&f),
        ["abandoned_tool_executed", "unfinished_tool_executed"],
        "{f:?}"
    );
}
