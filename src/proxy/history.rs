//! What a model request says: its provider, model, whether it streams, and its conversation
//! history, normalized across OpenAI Chat Completions, OpenAI Responses, Anthropic Messages
//! and Gemini `generateContent`/`streamGenerateContent`.
//!
//! Owns: the provider a request path names, the parse of a request body into messages (role,
//! text, tool calls, tool results), and each message's fingerprint (role, text and call ids
//! only, so a client that moves cache markers or reorders JSON keys between two requests
//! still sends "the same" history). What the history means (retry, next step, executions) is
//! `attempts.rs`'s business.

use serde_json::Value;

use retryscope_core::fasthash::fnv1a;

/// The provider API a request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Api {
    /// `POST …/chat/completions`.
    OpenAiChat,
    /// `POST …/responses`.
    OpenAiResponses,
    /// `POST …/messages`.
    Anthropic,
    /// `POST …:streamGenerateContent` or `…:generateContent`.
    Gemini,
}

impl Api {
    /// The API a request path names, if any.
    pub fn from_path(path: &str) -> Option<Api> {
        let path = path.split('?').next().unwrap_or(path).trim_end_matches('/');
        if path.ends_with("/chat/completions") {
            Some(Api::OpenAiChat)
        } else if path.ends_with("/responses") {
            Some(Api::OpenAiResponses)
        } else if path.ends_with("/messages") {
            Some(Api::Anthropic)
        } else if path.ends_with(":streamGenerateContent") || path.ends_with(":generateContent") {
            Some(Api::Gemini)
        } else {
            None
        }
    }

    /// The `provider` of the native `provider_chunk` envelope.
    pub fn envelope(self) -> &'static str {
        match self {
            Api::OpenAiChat => "openai.chat",
            Api::OpenAiResponses => "openai.responses",
            Api::Anthropic => "anthropic",
            Api::Gemini => "gemini",
        }
    }

    /// The `provider` of `turn_start`.
    pub fn provider(self) -> &'static str {
        match self {
            Api::OpenAiChat | Api::OpenAiResponses => "openai",
            Api::Anthropic => "anthropic",
            Api::Gemini => "gemini",
        }
    }
}

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// System or developer instructions.
    System,
    /// The user.
    User,
    /// The model (as the client kept it).
    Assistant,
    /// Tool results.
    Tool,
}

/// A tool call the client kept in its history.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// Provider call id (Gemini may have none).
    pub id: Option<String>,
    /// Tool name.
    pub name: String,
    /// Arguments.
    pub args: Value,
}

/// A tool result the client sent back: the client executed that call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    /// The call id it answers (Gemini may have none).
    pub id: Option<String>,
    /// The tool name, when the format carries it (Gemini).
    pub name: Option<String>,
    /// The format marks it an error (Anthropic `is_error`; a Gemini `response.error`).
    pub error: bool,
    /// The start of its text (`retryscope_core::event::result_excerpt`): how the tool ended, in its
    /// own words ("User aborted the command"). Not part of the fingerprint.
    pub text: Option<String>,
}

/// One message of the history.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Message {
    /// Role (`None`: an item this module does not interpret, fingerprinted by its type).
    pub role: Option<Role>,
    /// Its text, joined.
    pub text: String,
    /// Tool calls it carries.
    pub calls: Vec<Call>,
    /// Tool results it carries.
    pub results: Vec<ToolResult>,
    /// Kind of an uninterpreted item.
    pub other: Option<String>,
}

impl Message {
    /// The fingerprint: role, text, call ids and names, result ids.
    pub fn fingerprint(&self) -> u64 {
        let mut material = Vec::with_capacity(self.text.len() + 32);
        material.push(match self.role {
            None => b'?',
            Some(Role::System) => b's',
            Some(Role::User) => b'u',
            Some(Role::Assistant) => b'a',
            Some(Role::Tool) => b't',
        });
        material.extend_from_slice(self.text.as_bytes());
        for c in &self.calls {
            material.push(0);
            material.extend_from_slice(c.id.as_deref().unwrap_or("").as_bytes());
            material.push(1);
            material.extend_from_slice(c.name.as_bytes());
        }
        for r in &self.results {
            material.push(2);
            material.extend_from_slice(r.id.as_deref().unwrap_or("").as_bytes());
            material.push(3);
            material.extend_from_slice(r.name.as_deref().unwrap_or("").as_bytes());
        }
        if let Some(o) = &self.other {
            material.push(4);
            material.extend_from_slice(o.as_bytes());
        }
        fnv1a(&material)
    }
}

/// A parsed model request.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The API.
    pub api: Api,
    /// The model asked for (Gemini: from the path).
    pub model: Option<String>,
    /// The messages, system instructions first.
    pub messages: Vec<Message>,
    /// OpenAI Responses `previous_response_id` (the history lives on the server).
    pub previous_response_id: Option<String>,
    /// Whether it offers the model tools (`tools` non-empty; Chat's legacy `functions`).
    pub offers_tools: bool,
    /// OpenAI Responses `background: true`: the response runs on the server, and its stream
    /// can be resumed.
    pub background: bool,
}

/// `GET …/responses/{id}?stream=true[&starting_after=N]`: the id of the background response
/// whose stream the client resumes.
pub fn resumed_response<'a>(path: &'a str, query: Option<&str>) -> Option<&'a str> {
    let streams = query.is_some_and(|q| {
        q.split('&')
            .any(|kv| kv.eq_ignore_ascii_case("stream=true"))
    });
    let (head, id) = path.trim_end_matches('/').rsplit_once('/')?;
    (streams && head.ends_with("/responses") && !id.is_empty()).then_some(id)
}

impl Request {
    /// Rolling fingerprints: `prefix[i]` covers messages `0..=i`.
    pub fn prefix_fingerprints(&self) -> Vec<u64> {
        let mut out = Vec::with_capacity(self.messages.len());
        // A history kept on the server is part of this one's identity.
        let mut h: u64 = match &self.previous_response_id {
            Some(id) => fnv1a(id.as_bytes()),
            None => 0xcbf2_9ce4_8422_2325,
        };
        for m in &self.messages {
            let f = m.fingerprint();
            h = fnv1a(&[h.to_le_bytes(), f.to_le_bytes()].concat());
            out.push(h);
        }
        out
    }
}

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
fn gemini_model(path: &str) -> Option<String> {
    let path = path.split('?').next().unwrap_or(path);
    let i = path.find("/models/")?;
    let rest = &path[i + "/models/".len()..];
    let model = rest.split(':').next()?;
    (!model.is_empty()).then(|| model.to_owned())
}

#[cfg(test)]
mod tests {
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
}
