//! Tool call ids as they first appear in a stream payload, before the decoder sees the call
//! complete: the tracker keeps them so that a result the client sends back for a call cut
//! short can be placed on the attempt it came from.

use super::Api;

/// A substring every payload that starts a tool call contains (a cheap filter before
/// parsing).
pub(super) fn call_marker(api: Api) -> Option<&'static str> {
    Some(match api {
        Api::OpenAiChat => "tool_calls",
        Api::OpenAiResponses => "call_id",
        Api::Anthropic => "tool_use",
        Api::Gemini => "functionCall",
    })
}

/// The call ids (and names, when given) a payload starts.
pub(super) fn stream_call_ids(api: Api, v: &serde_json::Value) -> Vec<(String, String)> {
    use serde_json::Value;
    let id_name = |o: &Value, id: &str, name: &str| {
        o.get(id)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(|i| {
                (
                    i.to_owned(),
                    o.get(name).and_then(Value::as_str).unwrap_or("").to_owned(),
                )
            })
    };
    match api {
        Api::OpenAiChat => v
            .get("choices")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|c| c.pointer("/delta/tool_calls").and_then(Value::as_array))
            .flatten()
            .filter_map(|tc| {
                let (id, _) = id_name(tc, "id", "type")?;
                let name = tc
                    .pointer("/function/name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                Some((id, name))
            })
            .collect(),
        Api::OpenAiResponses => v
            .get("item")
            .and_then(|i| id_name(i, "call_id", "name"))
            .into_iter()
            .collect(),
        Api::Anthropic => v
            .get("content_block")
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"))
            .and_then(|b| id_name(b, "id", "name"))
            .into_iter()
            .collect(),
        Api::Gemini => v
            .get("candidates")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|c| c.pointer("/content/parts").and_then(Value::as_array))
            .flatten()
            .filter_map(|p| p.get("functionCall").and_then(|f| id_name(f, "id", "name")))
            .collect(),
    }
}
