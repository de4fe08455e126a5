//! One model name per call: the answered one names the turn (metrics, reports), and the
//! requested one, when the log tells it apart (`turn_start` `requested_model`, which
//! `retryscope proxy` writes), is kept beside it (`requested_model` in the JSON line,
//! `gen_ai.request.model` in traces). The proxy's live metrics are asserted in
//! `proxy_cli.rs`.

use std::process::Command;

#[test]
fn the_requested_alias_is_kept_beside_the_answered_model() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("proxy.jsonl");
    std::fs::write(
        &log,
        concat!(
            r#"{"turn":"px-1","type":"turn_start","ts":1,"provider":"anthropic","requested_model":"claude-sonnet-4-5","wire_only":true}"#,
            "\n",
            r#"{"turn":"px-1","type":"attempt_start","ts":2,"attempt":0,"model":"claude-sonnet-4-5-20250929"}"#,
            "\n",
            r#"{"turn":"px-1","type":"finish","ts":3,"attempt":0,"reason":"stop"}"#,
            "\n",
            r#"{"turn":"px-1","type":"turn_end","ts":4}"#,
            "\n",
        ),
    )
    .expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .args(["check", "--json"])
        .arg(&log)
        .output()
        .expect("check");
    let text = String::from_utf8_lossy(&out.stdout);
    let turn: serde_json::Value = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v.get("turn").is_some())
        .expect("a turn");
    assert_eq!(turn["model"], "claude-sonnet-4-5-20250929", "{text}");
    assert_eq!(turn["requested_model"], "claude-sonnet-4-5", "{text}");
    let summary = text.lines().last().unwrap_or_default();
    assert!(summary.contains(r#""unknown_fields":0"#), "{summary}");
}
