//! Issue 26, "any format": a provider stream (a raw OpenAI Chat SSE capture, shipped whole to
//! one partition) whose partition changes owner in the middle of it. Its decoder's state (the
//! call in progress, and how many calls the stream has had: the second call's turn is
//! `calls.sse#2`) lives in the owner's memory; the new owner resumes from the checkpoint and
//! must correlate the rest as one machine reading the whole file does (`check`).
//!
//! The stream: a plain call, then a call whose chunk id changes before its finish (a retry
//! inside one stream: a `spliced_stream` finding on `calls.sse#2`, modelled on
//! `tests/fixtures/providers/openai-chat/id-change-splice.sse`). The owner is SIGKILLed after
//! it checkpointed the first call and the second call's first chunk.

use std::time::Duration;

use crate::harness::{append, wait_for};
use crate::nats_support::{
    assert_findings, check, collector_with, have_nats_server, partition_state, server_in, shipper,
};

/// An OpenAI Chat SSE chunk of call `id`.
fn chunk(id: &str, choices: &str) -> String {
    format!(
        r#"data: {{"id":"{id}","object":"chat.completion.chunk","created":1770000000,"model":"gpt-4o-mini","choices":[{choices}]}}"#
    )
}

/// The first part (a whole call, and the second call's first chunk) and the rest.
fn stream() -> (Vec<String>, Vec<String>) {
    let text = |id: &str, t: &str| {
        chunk(
            id,
            &format!(
                r#"{{"index":0,"delta":{{"role":"assistant","content":"{t}"}},"finish_reason":null}}"#
            ),
        )
    };
    let finish = |id: &str, why: &str| {
        chunk(
            id,
            &format!(r#"{{"index":0,"delta":{{}},"finish_reason":"{why}"}}"#),
        )
    };
    let call = |id: &str, call: &str, args: &str| {
        chunk(
            id,
            &format!(
                r#"{{"index":0,"delta":{{"tool_calls":[{{"index":0,"id":"{call}","type":"function","function":{{"name":"issue_refund","arguments":"{args}"}}}}]}},"finish_reason":null}}"#
            ),
        )
    };
    let mut first = Vec::new();
    for l in [
        text("chatcmpl-a", "Looking up the order."),
        finish("chatcmpl-a", "stop"),
        "data: [DONE]".to_string(),
        text("chatcmpl-old", "Refunding the dam"),
    ] {
        first.extend([l, String::new()]);
    }
    let mut rest = Vec::new();
    for l in [
        call("chatcmpl-old", "call_old", r#"{\"ord"#),
        text("chatcmpl-new", "The book arrived damaged; refund started."),
        call("chatcmpl-new", "call_new", r#"{\"order\":\"ORD-7781\"}"#),
        finish("chatcmpl-new", "tool_calls"),
        "data: [DONE]".to_string(),
    ] {
        rest.extend([l, String::new()]);
    }
    (first, rest)
}

/// Whether some partition's stored checkpoint has the first part's events: held to settle
/// (kept whole: a provider chunk's event cannot be read again alone) or in open turns.
fn checkpointed(url: &str) -> bool {
    let non_empty = |v: &serde_json::Value| v.as_array().is_some_and(|a| !a.is_empty());
    (0..4).any(|p| {
        partition_state(url, p).is_some_and(|s| {
            s["seq"].as_u64().unwrap_or(0) > 0
                && (non_empty(&s["held"]["by_value"]) || non_empty(&s["correlator"]["turns"]))
        })
    })
}

#[test]
fn a_provider_stream_whose_partition_changes_owner_mid_call_correlates_as_check_does() {
    if !have_nats_server() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let (first, rest) = stream();
    let expected = {
        let oracle = d.join("oracle");
        std::fs::create_dir_all(&oracle).expect("oracle dir");
        let (a, b) = (oracle.join("calls.sse"), oracle.join("empty.jsonl"));
        append(&a, &first);
        append(&a, &rest);
        std::fs::write(&b, "").expect("empty log");
        check(&a, &b).0
    };
    assert!(
        expected.iter().any(|f| f.contains("calls.sse#2")),
        "the oracle finds the second call's splice: {expected:?}"
    );
    let host = d.join("host");
    std::fs::create_dir_all(&host).expect("host dir");
    let log = host.join("calls.sse");
    let (server, url) = server_in(d);
    let idle = ["--idle-timeout-secs", "1"];
    let (c1, _) = collector_with(d, &url, "c1", "2", "300", &idle);
    append(&log, &first);
    let ship = shipper(&host, &url, &log, "4");
    wait_for(
        "c1 to checkpoint the first part",
        Duration::from_secs(30),
        || checkpointed(&url),
    );
    drop(c1); // SIGKILL
    append(&log, &rest);
    let (c2, _) = collector_with(d, &url, "c2", "2", "300", &idle);
    assert_findings(&url, &expected, Duration::from_secs(60));
    for p in [ship, c2, server] {
        p.terminate();
    }
}
