//! Non-streaming answers (`"stream": false`) as the stream chunks their provider would have
//! sent, so the same decoders see their text, tool calls, usage and finish.
//!
//! Owns only the reshaping: an OpenAI `chat.completion` becomes one `chat.completion.chunk`
//! whose delta is the message; an Anthropic `message` becomes `message_start`, one block per
//! content block (text as one `text_delta`, `tool_use` input as one `input_json_delta`),
//! `message_delta` and `message_stop`; an OpenAI Responses `response` becomes its text deltas,
//! `output_item.done` per tool call, and `response.completed`. Gemini's `generateContent`
//! answer already is a chunk.

use serde_json::{Value, json};

use super::history::Api;

/// The chunks of a whole JSON answer; empty when it is not one this module knows.
pub fn as_chunks(api: Api, body: &str) -> Vec<String> {
    let Ok(v) = serde_json::from_str::<Value>(body) else {
        return Vec::new();
    };
    let chunks = match api {
        Api::Gemini => vec![v],
        Api::OpenAiChat => chat(v),
        Api::Anthropic => anthropic(v),
        Api::OpenAiResponses => responses(v),
    };
    chunks.iter().map(Value::to_string).collect()
}

fn chat(v: Value) -> Vec<Value> {
    let Some(choices) = v.get("choices").and_then(Value::as_array) else {
        return Vec::new();
    };
    let choices: Vec<Value> = choices
        .iter()
        .map(|c| {
            let mut delta = c.get("message").cloned().unwrap_or_else(|| json!({}));
            if let Some(calls) = delta.get_mut("tool_calls").and_then(Value::as_array_mut) {
                for (i, call) in calls.iter_mut().enumerate() {
                    if let Some(o) = call.as_object_mut() {
                        o.entry("index").or_insert(json!(i));
                    }
                }
            }
            json!({"index": c.get("index").cloned().unwrap_or(json!(0)), "delta": delta, "finish_reason": c.get("finish_reason").cloned().unwrap_or(Value::Null)})
        })
        .collect();
    vec![json!({
        "id": v.get("id"), "object": "chat.completion.chunk", "created": v.get("created"),
        "model": v.get("model"), "choices": choices, "usage": v.get("usage"),
    })]
}

fn anthropic(v: Value) -> Vec<Value> {
    if v.get("type").and_then(Value::as_str) != Some("message") {
        return Vec::new();
    }
    let mut start = v.clone();
    if let Some(o) = start.as_object_mut() {
        o.insert("content".into(), json!([]));
        o.insert("stop_reason".into(), Value::Null);
    }
    let mut out = vec![json!({"type": "message_start", "message": start})];
    let blocks = v
        .get("content")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (i, b) in blocks.iter().enumerate() {
        match b.get("type").and_then(Value::as_str) {
            Some("text") => {
                out.push(json!({"type":"content_block_start","index":i,"content_block":{"type":"text","text":""}}));
                out.push(json!({"type":"content_block_delta","index":i,"delta":{"type":"text_delta","text":b.get("text")}}));
            }
            Some("tool_use") => {
                let mut head = b.clone();
                if let Some(o) = head.as_object_mut() {
                    o.insert("input".into(), json!({}));
                }
                let input = b
                    .get("input")
                    .map(Value::to_string)
                    .unwrap_or_else(|| "{}".into());
                out.push(json!({"type":"content_block_start","index":i,"content_block":head}));
                out.push(json!({"type":"content_block_delta","index":i,"delta":{"type":"input_json_delta","partial_json":input}}));
            }
            _ => continue,
        }
        out.push(json!({"type":"content_block_stop","index":i}));
    }
    out.push(json!({"type":"message_delta","delta":{"stop_reason":v.get("stop_reason"),"stop_sequence":v.get("stop_sequence")},"usage":v.get("usage")}));
    out.push(json!({"type":"message_stop"}));
    out
}

fn responses(v: Value) -> Vec<Value> {
    if v.get("object").and_then(Value::as_str) != Some("response") {
        return Vec::new();
    }
    let mut created = v.clone();
    if let Some(o) = created.as_object_mut() {
        o.insert("output".into(), json!([]));
        o.insert("status".into(), json!("in_progress"));
    }
    let mut out = vec![json!({"type":"response.created","response":created})];
    let items = v
        .get("output")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (i, item) in items.iter().enumerate() {
        if item.get("type").and_then(Value::as_str) == Some("message") {
            for (j, part) in item
                .get("content")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                if let Some(t) = part.get("text").and_then(Value::as_str) {
                    out.push(json!({"type":"response.output_text.delta","item_id":item.get("id"),"output_index":i,"content_index":j,"delta":t}));
                }
            }
        }
        out.push(json!({"type":"response.output_item.done","output_index":i,"item":item}));
    }
    out.push(json!({"type":"response.completed","response":v}));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use retryscope_core::decode::EnvelopeDecoder;
    use retryscope_core::decode::native::ProviderChunk;
    use retryscope_core::event::EventKind;

    fn decoded(api: Api, body: &str) -> Vec<String> {
        let mut d = EnvelopeDecoder::new();
        let mut out = Vec::new();
        for c in as_chunks(api, body) {
            let raw = serde_json::value::RawValue::from_string(c).expect("json");
            let chunk = ProviderChunk {
                turn: "t".into(),
                attempt: Some(0),
                ts_ms: None,
                provider: api.envelope().into(),
                data: &raw,
            };
            d.push(&chunk, &mut out).expect("decodes");
        }
        out.iter()
            .map(|e| match &e.kind {
                EventKind::Text { text } => format!("text:{text}"),
                EventKind::ToolCall { id, name, .. } => format!("call:{id}:{name}"),
                EventKind::Finish { reason } => format!("finish:{reason}"),
                EventKind::Usage { usage, .. } => {
                    format!("usage:{}/{}", usage.input_tokens, usage.output_tokens)
                }
                other => other.type_name().to_owned(),
            })
            .collect()
    }

    #[test]
    fn chat_completion_as_a_chunk() {
        // The shape of openai-python's ChatCompletion with a tool call.
        let body = r#"{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"Refunding.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"issue_refund","arguments":"{\"order_id\":\"ORD-7781\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":100,"completion_tokens":20,"total_tokens":120}}"#;
        let ev = decoded(Api::OpenAiChat, body);
        for want in [
            "text:Refunding.",
            "call:call_1:issue_refund",
            "finish:tool_calls",
            "usage:100/20",
        ] {
            assert!(ev.iter().any(|e| e == want), "{want} in {ev:?}");
        }
    }

    #[test]
    fn anthropic_message_as_events() {
        let body = r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Refunding."},{"type":"tool_use","id":"toolu_1","name":"issue_refund","input":{"order_id":"ORD-7781"}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":100,"output_tokens":20}}"#;
        let ev = decoded(Api::Anthropic, body);
        for want in [
            "text:Refunding.",
            "call:toolu_1:issue_refund",
            "finish:tool_use",
            "usage:100/20",
        ] {
            assert!(ev.iter().any(|e| e == want), "{want} in {ev:?}");
        }
    }

    #[test]
    fn responses_response_as_events() {
        let body = r#"{"id":"resp_1","object":"response","status":"completed","model":"gpt-5","output":[{"type":"message","id":"m1","role":"assistant","content":[{"type":"output_text","text":"Refunding."}]},{"type":"function_call","id":"fc_1","call_id":"call_1","name":"issue_refund","arguments":"{\"order_id\":\"ORD-7781\"}","status":"completed"}],"usage":{"input_tokens":100,"output_tokens":20,"total_tokens":120}}"#;
        let ev = decoded(Api::OpenAiResponses, body);
        for want in [
            "text:Refunding.",
            "call:call_1:issue_refund",
            "usage:100/20",
        ] {
            assert!(ev.iter().any(|e| e == want), "{want} in {ev:?}");
        }
        assert!(ev.iter().any(|e| e.starts_with("finish:")), "{ev:?}");
    }

    #[test]
    fn unknown_bodies_give_nothing() {
        assert!(as_chunks(Api::Anthropic, r#"{"type":"error","error":{}}"#).is_empty());
        assert!(as_chunks(Api::OpenAiChat, "not json").is_empty());
    }
}
