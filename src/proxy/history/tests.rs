//! Unit tests of the request parse and the fingerprints.

use super::parse::gemini_model;
use super::*;
use serde_json::json;

#[test]
fn apis_from_paths() {
    assert_eq!(
        Api::from_path("/v1/chat/completions"),
        Some(Api::OpenAiChat)
    );
    assert_eq!(
        Api::from_path("/openai/v1/responses"),
        Some(Api::OpenAiResponses)
    );
    assert_eq!(
        Api::from_path("/v1/messages?beta=true"),
        Some(Api::Anthropic)
    );
    assert_eq!(
        Api::from_path("/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse"),
        Some(Api::Gemini)
    );
    assert_eq!(Api::from_path("/v1/models"), None);
    assert_eq!(
        gemini_model("/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse").as_deref(),
        Some("gemini-2.5-pro")
    );
}

#[test]
fn chat_history_with_tool_round_trip() {
    let body = json!({"model":"gpt-4o","stream":true,"messages":[
        {"role":"system","content":"be brief"},
        {"role":"user","content":[{"type":"text","text":"refund ORD-1"}]},
        {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"issue_refund","arguments":"{\"order\":\"ORD-1\"}"}}]},
        {"role":"tool","tool_call_id":"c1","content":"ok"}
    ]});
    let r = parse(
        Api::OpenAiChat,
        "/v1/chat/completions",
        body.to_string().as_bytes(),
    )
    .expect("parse");
    assert_eq!(r.model.as_deref(), Some("gpt-4o"));
    assert_eq!(r.messages.len(), 4);
    assert_eq!(r.messages[2].calls[0].args, json!({"order":"ORD-1"}));
    assert_eq!(r.messages[3].role, Some(Role::Tool));
    assert_eq!(r.messages[3].results[0].id.as_deref(), Some("c1"));
    assert!(r.messages[3].text.is_empty());
}

#[test]
fn anthropic_cache_markers_do_not_change_fingerprints() {
    let a = json!({"model":"claude","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]});
    let b = json!({"model":"claude","messages":[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]}]});
    let fa = parse(Api::Anthropic, "/v1/messages", a.to_string().as_bytes()).expect("a");
    let fb = parse(Api::Anthropic, "/v1/messages", b.to_string().as_bytes()).expect("b");
    assert_eq!(fa.prefix_fingerprints(), fb.prefix_fingerprints());
    let c = json!({"model":"claude","messages":[{"role":"user","content":"hello"}]});
    let fc = parse(Api::Anthropic, "/v1/messages", c.to_string().as_bytes()).expect("c");
    assert_ne!(fa.prefix_fingerprints(), fc.prefix_fingerprints());
}

#[test]
fn anthropic_tool_use_and_results() {
    let body = json!({"model":"claude","system":[{"type":"text","text":"sys"}],"messages":[
        {"role":"user","content":"refund"},
        {"role":"assistant","content":[{"type":"text","text":"Checking."},{"type":"tool_use","id":"toolu_1","name":"issue_refund","input":{"order":"A"}}]},
        {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"done"}]}
    ]});
    let r = parse(Api::Anthropic, "/v1/messages", body.to_string().as_bytes()).expect("parse");
    assert_eq!(r.messages.len(), 4);
    assert_eq!(r.messages[0].role, Some(Role::System));
    assert_eq!(r.messages[2].text, "Checking.");
    assert_eq!(r.messages[2].calls[0].id.as_deref(), Some("toolu_1"));
    assert_eq!(r.messages[3].role, Some(Role::Tool));
}

#[test]
fn responses_items_and_gemini_contents() {
    let body = json!({"model":"gpt-5","instructions":"x","input":[
        {"role":"user","content":[{"type":"input_text","text":"go"}]},
        {"type":"reasoning","encrypted_content":"zzz"},
        {"type":"function_call","call_id":"call_1","name":"shell","arguments":"{\"cmd\":\"ls\"}"},
        {"type":"function_call_output","call_id":"call_1","output":"a b"}
    ]});
    let r = parse(
        Api::OpenAiResponses,
        "/v1/responses",
        body.to_string().as_bytes(),
    )
    .expect("parse");
    assert_eq!(r.messages.len(), 4);
    assert_eq!(r.messages[2].calls[0].args, json!({"cmd":"ls"}));
    assert_eq!(r.messages[3].results[0].id.as_deref(), Some("call_1"));
    let body = json!({"contents":[
        {"role":"user","parts":[{"text":"go"}]},
        {"role":"model","parts":[{"text":"ok","thought":true},{"text":"Doing it."},{"functionCall":{"name":"write_file","args":{"p":"a"}}}]},
        {"role":"user","parts":[{"functionResponse":{"name":"write_file","response":{"ok":true}}}]}
    ]});
    let r = parse(
        Api::Gemini,
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
        body.to_string().as_bytes(),
    )
    .expect("parse");
    assert_eq!(r.model.as_deref(), Some("gemini-2.5-flash"));
    assert_eq!(r.messages[1].text, "Doing it.");
    assert_eq!(r.messages[1].calls[0].id, None);
    assert_eq!(r.messages[2].role, Some(Role::Tool));
    assert_eq!(r.messages[2].results[0].name.as_deref(), Some("write_file"));
}

#[test]
fn resumed_background_streams() {
    assert_eq!(
        resumed_response(
            "/v1/responses/resp_123",
            Some("stream=true&starting_after=7")
        ),
        Some("resp_123")
    );
    assert_eq!(resumed_response("/v1/responses/resp_123", None), None);
    assert_eq!(resumed_response("/v1/responses", Some("stream=true")), None);
    assert_eq!(
        resumed_response("/v1/responses/resp_1/input_items", Some("stream=true")),
        None
    );
}

#[test]
fn not_json_is_none() {
    assert!(parse(Api::Anthropic, "/v1/messages", b"{oops").is_none());
}
