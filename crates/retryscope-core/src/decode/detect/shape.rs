//! The defining shape of each provider stream format, for sniffing.
//!
//! Owns: [`provider`] (which provider format a payload proves, if any) and [`Lookalike`]. A
//! payload that carries a provider's event names or keys but not the shape every real stream
//! of that provider has is a lookalike: another agent's own event log that borrowed the names.
//! Read as the provider's stream it gives false retries and splices (a user's prompt quoted as
//! spliced text), so it is refused; a refusal costs less trust than a false alarm.
//!
//! The shapes, each what every recorded stream in `../shared/fixtures` has:
//! - Anthropic Messages: the first event other than `ping` / `error` is `message_start`, whose
//!   `message` has an `id`, `"type": "message"` and `"role": "assistant"`.
//! - OpenAI Responses: a `response.*` event carrying a `response` object with an `id` (and
//!   `"object": "response"` when it says), or a `sequence_number` (a resumed background
//!   stream starts mid-way).
//! - OpenAI Chat Completions: `choices` is an array, and the chunk is a
//!   `chat.completion.chunk` (or `chat.completion`), or has no object name but a string `id`
//!   (Azure's metadata-only first chunk: `"object": ""`, `"id": ""`).
//! - Gemini: `candidates` is an array of objects, or `usageMetadata` is an object.

use std::fmt;

use serde_json::{Map, Value};

use crate::decode::provider::Format;

/// A stream that borrows a provider format's event names or keys without its defining shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookalike {
    /// The format it looks like.
    pub like: Format,
    /// What its first such record lacks, in a few words (no input text).
    pub why: &'static str,
}

impl Lookalike {
    /// The provider's name as people know it.
    pub(crate) fn like_name(&self) -> &'static str {
        match self.like {
            Format::Anthropic => "Anthropic Messages",
            Format::OpenAiResponses => "OpenAI Responses",
            Format::OpenAiChat => "OpenAI Chat Completions",
            Format::Gemini => "Gemini",
            other => other.as_str(),
        }
    }

    /// The sentence a person reads: what the stream is not, and the routes that do work.
    pub fn sentence(&self) -> String {
        format!(
            "not a format retryscope reads: it uses {like} names but not its shape ({why}), \
             so it is probably an agent's own event log; it is refused rather than guessed at. \
             To watch this agent, put `retryscope proxy` between it and its provider \
             (docs/proxy.md), or send its OpenTelemetry to `retryscope run --otlp-listen`",
            like = self.like_name(),
            why = self.why
        )
    }
}

impl fmt::Display for Lookalike {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.sentence())
    }
}

fn lookalike(like: Format, why: &'static str) -> Option<Result<Format, Lookalike>> {
    Some(Err(Lookalike { like, why }))
}

/// The provider format `obj` proves, a [`Lookalike`] when it borrows one's names without its
/// shape, `None` when it says nothing (look at the next payload).
pub(super) fn provider(
    obj: &Map<String, Value>,
    ty: Option<&str>,
) -> Option<Result<Format, Lookalike>> {
    if let Some(choices) = obj.get("choices") {
        return chat(obj, choices);
    }
    if obj.contains_key("candidates") || obj.contains_key("usageMetadata") {
        return gemini(obj);
    }
    match ty? {
        t if t.starts_with("response.") => responses(obj),
        // Neutral in both APIs: a keep-alive, and an error that may come before anything.
        "ping" | "error" => None,
        "message_start" => anthropic_message_start(obj),
        "message_delta"
        | "message_stop"
        | "content_block_start"
        | "content_block_delta"
        | "content_block_stop" => lookalike(
            Format::Anthropic,
            "an event before any `message_start`: a Messages stream starts with one",
        ),
        _ => None,
    }
}

fn anthropic_message_start(obj: &Map<String, Value>) -> Option<Result<Format, Lookalike>> {
    let Some(message) = obj.get("message").and_then(Value::as_object) else {
        return lookalike(
            Format::Anthropic,
            "a `message_start` without a `message` object",
        );
    };
    let str_of = |k: &str| message.get(k).and_then(Value::as_str);
    if str_of("id").is_none_or(str::is_empty) {
        return lookalike(
            Format::Anthropic,
            "a `message_start` whose message has no `id`",
        );
    }
    if str_of("type") != Some("message") {
        return lookalike(
            Format::Anthropic,
            "a `message_start` whose message is not `\"type\": \"message\"`",
        );
    }
    if str_of("role") != Some("assistant") {
        return lookalike(
            Format::Anthropic,
            "a `message_start` whose message is not the assistant's",
        );
    }
    Some(Ok(Format::Anthropic))
}

fn responses(obj: &Map<String, Value>) -> Option<Result<Format, Lookalike>> {
    if let Some(response) = obj.get("response") {
        let proven = response.as_object().is_some_and(|r| {
            r.get("id")
                .and_then(Value::as_str)
                .is_some_and(|id| !id.is_empty())
                && r.get("object")
                    .is_none_or(|o| o.as_str() == Some("response"))
        });
        return if proven {
            Some(Ok(Format::OpenAiResponses))
        } else {
            lookalike(
                Format::OpenAiResponses,
                "a `response.*` event whose `response` is not a response object with an `id`",
            )
        };
    }
    if obj.get("sequence_number").is_some_and(Value::is_u64) {
        return Some(Ok(Format::OpenAiResponses));
    }
    lookalike(
        Format::OpenAiResponses,
        "a `response.*` event with neither a `response` object nor a `sequence_number`",
    )
}

fn chat(obj: &Map<String, Value>, choices: &Value) -> Option<Result<Format, Lookalike>> {
    if !choices.is_array() {
        return lookalike(Format::OpenAiChat, "`choices` that is not an array");
    }
    let has_id = obj.get("id").is_some_and(Value::is_string);
    let proven = match obj.get("object").map(Value::as_str) {
        Some(Some("chat.completion.chunk" | "chat.completion")) => true,
        None | Some(Some("")) => has_id,
        _ => false,
    };
    if proven {
        Some(Ok(Format::OpenAiChat))
    } else {
        lookalike(
            Format::OpenAiChat,
            "`choices` in an object that is not a `chat.completion.chunk` with an `id`",
        )
    }
}

fn gemini(obj: &Map<String, Value>) -> Option<Result<Format, Lookalike>> {
    let candidates_ok = obj
        .get("candidates")
        .is_none_or(|c| c.as_array().is_some_and(|a| a.iter().all(Value::is_object)));
    let usage_ok = obj.get("usageMetadata").is_none_or(Value::is_object);
    if candidates_ok && usage_ok {
        Some(Ok(Format::Gemini))
    } else {
        lookalike(
            Format::Gemini,
            "`candidates` or `usageMetadata` not shaped as a GenerateContentResponse's",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(json: &str) -> Option<Result<Format, Lookalike>> {
        let v: Value = serde_json::from_str(json).expect("test JSON");
        let obj = v.as_object().expect("an object");
        provider(obj, obj.get("type").and_then(Value::as_str))
    }

    fn like(json: &str) -> Format {
        match of(json) {
            Some(Err(l)) => l.like,
            other => panic!("{json}: {other:?}, want a lookalike"),
        }
    }

    #[test]
    fn anthropic_needs_an_assistant_message_with_id_and_type() {
        let real = r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[]}}"#;
        assert_eq!(of(real), Some(Ok(Format::Anthropic)));
        for fake in [
            r#"{"type":"message_start","message":{"role":"user","content":"hi"}}"#,
            r#"{"type":"message_start","message":{"id":"","type":"message","role":"assistant"}}"#,
            r#"{"type":"message_start","message":{"id":"m","role":"assistant"}}"#,
            r#"{"type":"message_start","message":{"id":"m","type":"message","role":"user"}}"#,
            r#"{"type":"message_start"}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"}}"#,
        ] {
            assert_eq!(like(fake), Format::Anthropic, "{fake}");
        }
        assert_eq!(of(r#"{"type":"ping"}"#), None);
        assert_eq!(of(r#"{"type":"error","error":{}}"#), None);
    }

    #[test]
    fn responses_needs_a_response_object_or_a_sequence_number() {
        let created = r#"{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response"}}"#;
        assert_eq!(of(created), Some(Ok(Format::OpenAiResponses)));
        let resumed = r#"{"type":"response.output_text.delta","sequence_number":7,"delta":"a"}"#;
        assert_eq!(of(resumed), Some(Ok(Format::OpenAiResponses)));
        assert_eq!(
            like(r#"{"type":"response.done","text":"a"}"#),
            Format::OpenAiResponses
        );
        assert_eq!(
            like(r#"{"type":"response.created","response":{"id":"r","object":"thread"}}"#),
            Format::OpenAiResponses
        );
    }

    #[test]
    fn chat_needs_a_chunk_with_an_id() {
        let chunk = r#"{"id":"c","object":"chat.completion.chunk","choices":[]}"#;
        assert_eq!(of(chunk), Some(Ok(Format::OpenAiChat)));
        let azure = r#"{"choices":[],"created":0,"id":"","model":"","object":""}"#;
        assert_eq!(of(azure), Some(Ok(Format::OpenAiChat)));
        assert_eq!(like(r#"{"choices":"a"}"#), Format::OpenAiChat);
        assert_eq!(
            like(r#"{"choices":[],"object":"poll"}"#),
            Format::OpenAiChat
        );
        assert_eq!(like(r#"{"choices":[]}"#), Format::OpenAiChat);
    }

    #[test]
    fn gemini_needs_candidate_objects() {
        assert_eq!(
            of(r#"{"candidates":[{"content":{}}]}"#),
            Some(Ok(Format::Gemini))
        );
        assert_eq!(of(r#"{"usageMetadata":{}}"#), Some(Ok(Format::Gemini)));
        assert_eq!(like(r#"{"candidates":["a","b"]}"#), Format::Gemini);
    }
}
