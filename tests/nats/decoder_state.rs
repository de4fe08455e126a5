//! Issue 26, "any format": a provider stream (a raw OpenAI Chat SSE capture, shipped whole to
//! one partition) whose partition changes owner in the middle of it. Its decoder's state (the
//! call in progress, and how many calls the stream has had: the second call's turn is
//! `calls.sse#2`) lives in the owner's memory; the new owner resumes from the checkpoint and
//! must correlate the rest as one machine reading the whole file does (`check`).
//!
//! The stream: a plain call, then a call whose chunk id changes before its finish (a retry
//! inside one stream: a `spliced_stream` finding on `calls.sse#2`, modelled on
//! `tests/fixtures/providers/openai-chat/id-change-splice.sse`). The owner is SIGKILLed after
//! it checkpointed the first call and the second call's first chunk. The same for real
//! agents' own outputs (Codex, Claude Code), cut half-way.

use std::time::Duration;

use crate::harness::{append, untimed, wait_for};
use crate::nats_support::{
    check, collector_with, have_nats_server, partition_state, server_in, settled_findings_using,
    shipper,
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

/// Whether some partition's stored checkpoint covers `lines` lines (the first part: its
/// events may be held to settle, held for a session join, or in open turns).
fn checkpointed(url: &str, lines: usize) -> bool {
    (0..4).any(|p| {
        partition_state(url, p)
            .is_some_and(|s| s["counters"]["lines"].as_u64().unwrap_or(0) >= lines as u64)
    })
}

/// `first` and then `rest` of a file named `name`, shipped; its partition's owner SIGKILLed
/// once it checkpointed `first`, a new one taking over for `rest`: the findings stream must
/// equal `check` over the whole file. `oracle` checks what `check` found.
fn taken_over_mid_file(name: &str, first: &[String], rest: &[String], oracle: impl Fn(&[String])) {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let expected = {
        let o = d.join("oracle");
        std::fs::create_dir_all(&o).expect("oracle dir");
        let (a, b) = (o.join(name), o.join("empty.jsonl"));
        append(&a, first);
        append(&a, rest);
        std::fs::write(&b, "").expect("empty log");
        check(&a, &b).0
    };
    oracle(&expected);
    let host = d.join("host");
    std::fs::create_dir_all(&host).expect("host dir");
    let log = host.join(name);
    let (server, url) = server_in(d);
    // Longer than the gap between the two parts' publish times (c1's checkpoint, its kill,
    // the shipper's next round): with 1 s, and once with 5 s, a loaded machine (six tests on
    // two cores) let the owners' clock messages close the turn before its second part came.
    let idle = ["--idle-timeout-secs", "15"];
    let (c1, _) = collector_with(d, &url, "c1", "2", "300", &idle);
    append(&log, first);
    let ship = shipper(&host, &url, &log, "4");
    wait_for(
        "c1 to checkpoint the first part",
        Duration::from_secs(30),
        || checkpointed(&url, first.len()),
    );
    drop(c1); // SIGKILL
    append(&log, rest);
    let (c2, _) = collector_with(d, &url, "c2", "2", "300", &idle);
    let got = settled_findings_using(
        &url,
        async_nats::ConnectOptions::new,
        expected.len(),
        Duration::from_secs(90),
    );
    assert_eq!(
        untimed(&got),
        untimed(&expected),
        "the same findings as check, each once"
    );
    for p in [ship, c2, server] {
        p.terminate();
    }
}

#[test]
fn a_provider_stream_whose_partition_changes_owner_mid_call_correlates_as_check_does() {
    if !have_nats_server() {
        return;
    }
    let (first, rest) = stream();
    taken_over_mid_file("calls.sse", &first, &rest, |expected| {
        assert!(
            expected.iter().any(|f| f.contains("calls.sse#2")),
            "the oracle finds the second call's splice: {expected:?}"
        );
    });
}

/// A real agent's own output (Codex's `exec --json`, Claude Code's stream-json: recorded
/// against the mock provider with a cut after a tool ran), its owner killed half-way.
#[test]
fn an_agents_output_whose_partition_changes_owner_half_way_correlates_as_check_does() {
    if !have_nats_server() {
        return;
    }
    let agents = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/agents");
    for (run, file) in [
        ("codex/after-tool-reset", "exec.jsonl"),
        ("claude-code/after-tool-reset", "stream.jsonl"),
    ] {
        let text = std::fs::read_to_string(agents.join(run).join(file)).expect("fixture");
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        let half = lines.len() / 2;
        taken_over_mid_file(file, &lines[..half], &lines[half..], |expected| {
            assert!(!expected.is_empty(), "{run}: check finds something");
        });
    }
}
