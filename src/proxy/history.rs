//! What a model request says: its provider, model, whether it streams, and its conversation
//! history, normalized across OpenAI Chat Completions, OpenAI Responses, Anthropic Messages
//! and Gemini `generateContent`/`streamGenerateContent`.
//!
//! Owns: the provider a request path names, the parse of a request body into messages (role,
//! text, tool calls, tool results), and each message's fingerprint (role, text and call ids
//! only, so a client that moves cache markers or reorders JSON keys between two requests
//! still sends "the same" history). What the history means (retry, next step, executions) is
//! `attempts.rs`'s business. `parse` reads each API's request body into a [`Request`].

mod parse;

use serde_json::Value;

use retryscope_core::fasthash::fnv1a;

pub use parse::parse;

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

#[cfg(test)]
mod tests;
