//! Each API's request body read into a [`Request`]: its messages (Chat messages, Responses
//! items, Anthropic content blocks, Gemini contents and parts) with their calls and results,
//! and the model (Gemini's from the path).

use serde_json::Value;

use super::{Api, Call, Message, Request, Role, ToolResult};

/// Parse a request body for `api` (`path` gives Gemini's model). `None`: not JSON.
pub fn parse(api: Api, path: &str, body: &[u8]) -> Option<Request> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let mut messages = Vec::new();
    let mut previous_response_id = None;
    let model = match api {
        Api::Gemini => gemini_model(path),
        _ => v.get("model").and_then(Value::as_str).map(str::to_owned),
    };
    match api {
        Api::OpenAiChat => {
            for m in arr(&v, "messages") {
                messages.push(chat_message(m));
            }
        }
        Api::OpenAiResponses => {
            if let Some(i) = v.get("instructions").and_then(Value::as_str) {
                messages.push(Message {
                    role: Some(Role::System),
                    text: i.to_owned(),
                    ..Message::default()
                });
            }
            match v.get("input") {
                Some(Value::String(s)) => messages.push(Message {
                    role: Some(Role::User),
                    text: s.clone(),
                    ..Message::default()
                }),
                Some(Value::Array(items)) => {
                    for item in items {
                        if let Some(m) = responses_item(item) {
                            messages.push(m);
                        }
                    }
                }
                _ => {}
            }
            previous_response_id = v
                .get("previous_response_id")
                .and_then(Value::as_str)
                .map(str::to_owned);
        }
        Api::Anthropic => {
            if let Some(system) = v.get("system") {
                let text = text_of(system);
                if !text.is_empty() {
                    messages.push(Message {
                        role: Some(Role::System),
                        text,
                        ..Message::default()
                    });
                }
            }
            for m in arr(&v, "messages") {
                messages.push(anthropic_message(m));
            }
        }
        Api::Gemini => {
            if let Some(si) = v
                .get("systemInstruction")
                .or_else(|| v.get("system_instruction"))
            {
                let text = parts_text(si.get("parts"));
                if !text.is_empty() {
                    messages.push(Message {
                        role: Some(Role::System),
                        text,
                        ..Message::default()
                    });
                }
            }
            for c in arr(&v, "contents") {
                messages.push(gemini_content(c));
            }
        }
    }
    Some(Request {
        api,
        model,
        messages,
        previous_response_id,
        background: api == Api::OpenAiResponses
            && v.get("background").and_then(Value::as_bool) == Some(true),
        offers_tools: ["tools", "functions"]
            .iter()
            .any(|k| !arr(&v, k).is_empty()),
    })
}

/// A tool result's text as kept (bounded), `None` when empty.
fn excerpt(text: &str) -> Option<String> {
    Some(retryscope_core::event::result_excerpt(text)).filter(|t| !t.is_empty())
}

fn arr<'v>(v: &'v Value, key: &str) -> &'v [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn s(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// Text of a content value: a string, or an array of parts with `text`.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => {
            let mut out = String::new();
            for p in parts {
                let kind = p.get("type").and_then(Value::as_str).unwrap_or("text");
                if matches!(kind, "text" | "input_text" | "output_text")
                    && let Some(t) = p.get("text").and_then(Value::as_str)
                {
                    out.push_str(t);
                }
            }
            out
        }
        _ => String::new(),
    }
}

/// A JSON string holding JSON (OpenAI's `arguments`) becomes that JSON.
fn args_value(v: Option<&Value>) -> Value {
    match v {
        Some(Value::String(s)) => {
            serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone()))
        }
        Some(other) => other.clone(),
        None => Value::Null,
    }
}

fn role_of(r: Option<&str>) -> Option<Role> {
    match r? {
        "system" | "developer" => Some(Role::System),
        "user" => Some(Role::User),
        "assistant" | "model" => Some(Role::Assistant),
        "tool" | "function" => Some(Role::Tool),
        _ => None,
    }
}

fn chat_message(m: &Value) -> Message {
    let role = role_of(m.get("role").and_then(Value::as_str));
    let mut msg = Message {
        role,
        text: m.get("content").map(text_of).unwrap_or_default(),
        ..Message::default()
    };
    for c in arr(m, "tool_calls") {
        let f = c.get("function").unwrap_or(&Value::Null);
        msg.calls.push(Call {
            id: s(c, "id"),
            name: s(f, "name").unwrap_or_default(),
            args: args_value(f.get("arguments")),
        });
    }
    if role == Some(Role::Tool) {
        msg.results.push(ToolResult {
            id: s(m, "tool_call_id"),
            name: s(m, "name"),
            error: false,
            text: excerpt(&msg.text),
        });
        // A tool result's content is not conversation text.
        msg.text.clear();
    }
    msg
}

fn responses_item(item: &Value) -> Option<Message> {
    let kind = item.get("type").and_then(Value::as_str);
    match kind {
        None | Some("message") => Some(Message {
            role: role_of(item.get("role").and_then(Value::as_str)),
            text: item.get("content").map(text_of).unwrap_or_default(),
            ..Message::default()
        }),
        Some("function_call" | "custom_tool_call" | "local_shell_call" | "shell_call") => {
            Some(Message {
                role: Some(Role::Assistant),
                calls: vec![Call {
                    id: s(item, "call_id"),
                    name: s(item, "name").unwrap_or_else(|| kind.unwrap_or("").to_owned()),
                    args: args_value(item.get("arguments").or_else(|| item.get("input"))),
                }],
                ..Message::default()
            })
        }
        Some(
            "function_call_output"
            | "custom_tool_call_output"
            | "local_shell_call_output"
            | "shell_call_output",
        ) => Some(Message {
            role: Some(Role::Tool),
            results: vec![ToolResult {
                id: s(item, "call_id"),
                name: None,
                error: false,
                text: item.get("output").map(text_of).and_then(|t| excerpt(&t)),
            }],
            ..Message::default()
        }),
        // Reasoning items (often encrypted, and dropped by some clients between requests)
        // are not part of the conversation's identity.
        Some("reasoning") => None,
        Some(other) => Some(Message {
            other: Some(other.to_owned()),
            ..Message::default()
        }),
    }
}

fn anthropic_message(m: &Value) -> Message {
    let role = role_of(m.get("role").and_then(Value::as_str));
    let mut msg = Message {
        role,
        ..Message::default()
    };
    match m.get("content") {
        Some(Value::String(t)) => msg.text = t.clone(),
        Some(Value::Array(blocks)) => {
            for b in blocks {
                match b.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        if let Some(t) = b.get("text").and_then(Value::as_str) {
                            msg.text.push_str(t);
                        }
                    }
                    Some("tool_use") => msg.calls.push(Call {
                        id: s(b, "id"),
                        name: s(b, "name").unwrap_or_default(),
                        args: b.get("input").cloned().unwrap_or(Value::Null),
                    }),
                    Some("tool_result") => msg.results.push(ToolResult {
                        id: s(b, "tool_use_id"),
                        name: None,
                        error: b.get("is_error").and_then(Value::as_bool) == Some(true),
                        text: b.get("content").map(text_of).and_then(|t| excerpt(&t)),
                    }),
                    _ => {}
                }
            }
        }
        _ => {}
    }
    if !msg.results.is_empty() && msg.calls.is_empty() && msg.text.is_empty() {
        msg.role = Some(Role::Tool);
    }
    msg
}

fn parts_text(parts: Option<&Value>) -> String {
    let mut out = String::new();
    for p in parts
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
    {
        if p.get("thought").and_then(Value::as_bool) == Some(true) {
            continue;
        }
        if let Some(t) = p.get("text").and_then(Value::as_str) {
            out.push_str(t);
        }
    }
    out
}

fn gemini_content(c: &Value) -> Message {
    let mut msg = Message {
        role: role_of(c.get("role").and_then(Value::as_str)),
        text: parts_text(c.get("parts")),
        ..Message::default()
    };
    for p in arr(c, "parts") {
        if let Some(fc) = p.get("functionCall") {
            msg.calls.push(Call {
                id: s(fc, "id"),
                name: s(fc, "name").unwrap_or_default(),
                args: fc.get("args").cloned().unwrap_or(Value::Null),
            });
        }
        if let Some(fr) = p.get("functionResponse") {
            // `response` is the tool's own object: `{"output": …}`, or `{"error": …}`.
            let response = fr.get("response").unwrap_or(&Value::Null);
            let error = response.get("error").filter(|e| !e.is_null());
            let said = error.or_else(|| response.get("output")).unwrap_or(response);
            let text = match said {
                Value::String(t) => excerpt(t),
                Value::Null => None,
                other => excerpt(&other.to_string()),
            };
            msg.results.push(ToolResult {
                id: s(fr, "id"),
                name: s(fr, "name"),
                error: error.is_some(),
                text,
            });
        }
    }
    if !msg.results.is_empty() && msg.calls.is_empty() && msg.text.is_empty() {
        msg.role = Some(Role::Tool);
    }
    msg
}

/// `models/gemini-2.5-pro:streamGenerateContent` → `gemini-2.5-pro`.
pub(super) fn gemini_model(path: &str) -> Option<String> {
    let path = path.split('?').next().unwrap_or(path);
    let i = path.find("/models/")?;
    let rest = &path[i + "/models/".len()..];
    let model = rest.split(':').next()?;
    (!model.is_empty()).then(|| model.to_owned())
}
