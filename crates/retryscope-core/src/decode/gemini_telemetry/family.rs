//! What makes a record gemini-cli's telemetry, by structure rather than by name: gemini-cli
//! and its forks (Qwen Code writes the same records as `qwen-code.api_request`, ...) name
//! their log events `<agent>.<event>`. Also what a logged request's history (`request_text`,
//! a JSON array of Gemini `Content`s) says about the previous attempts: the model turns the
//! client kept.
//!
//! Owns: [`event`] (an event name's agent and kind), [`agent_name`], [`model_texts`].

use serde_json::Value;

/// The events of the gemini-cli family this decoder maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    ApiRequest,
    ApiResponse,
    ApiError,
    ToolCall,
    NetworkRetry,
    ContentRetry,
    ContentRetryFailure,
}

/// Prefixes that name other agents' (or GenAI convention) events, never this family's.
const OTHERS: [&str; 3] = ["gen_ai", "codex", "claude_code"];

/// An event name's agent prefix and kind: `gemini_cli.api_request` and
/// `qwen-code.api_request` alike. `None` for names this family does not define.
pub(crate) fn event(name: &str) -> Option<(&str, Kind)> {
    let (agent, rest) = name.split_once('.')?;
    if agent.is_empty() || OTHERS.contains(&agent) {
        return None;
    }
    let kind = match rest {
        "api_request" => Kind::ApiRequest,
        "api_response" => Kind::ApiResponse,
        "api_error" => Kind::ApiError,
        "tool_call" => Kind::ToolCall,
        "network_retry_attempt" => Kind::NetworkRetry,
        "chat.content_retry" => Kind::ContentRetry,
        "chat.content_retry_failure" => Kind::ContentRetryFailure,
        _ => return None,
    };
    Some((agent, kind))
}

/// The agent's name from its event prefix (`gemini_cli` → `gemini-cli`).
pub(crate) fn agent_name(prefix: &str) -> String {
    prefix.replace('_', "-")
}

/// The text of each `model` content of a logged request history, in order (thoughts left
/// out); `None` when the text is not such a history.
pub(crate) fn model_texts(request_text: &str) -> Option<Vec<String>> {
    let v: Value = serde_json::from_str(request_text).ok()?;
    let contents = v.as_array()?;
    Some(
        contents
            .iter()
            .filter(|c| c.get("role").and_then(Value::as_str) == Some("model"))
            .map(|c| {
                c.get("parts")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter(|p| p.get("thought").and_then(Value::as_bool) != Some(true))
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect::<String>()
            })
            .collect(),
    )
}

/// Whether a parsed `response_text` is gemini-cli's list of streamed chunks (objects), as
/// opposed to the plain text a fork logs.
pub(crate) fn is_chunks(v: &Value) -> bool {
    match v {
        Value::Array(a) => a.iter().all(Value::is_object),
        Value::Object(o) => o.contains_key("candidates"),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_by_structure_not_by_agent_name() {
        assert_eq!(
            event("gemini_cli.api_request"),
            Some(("gemini_cli", Kind::ApiRequest))
        );
        assert_eq!(
            event("qwen-code.chat.content_retry"),
            Some(("qwen-code", Kind::ContentRetry))
        );
        assert_eq!(event("qwen-code.config"), None);
        assert_eq!(event("codex.api_request"), None);
        assert_eq!(event("gen_ai.api_request"), None);
        assert_eq!(event("api_request"), None);
        assert_eq!(agent_name("gemini_cli"), "gemini-cli");
    }

    #[test]
    fn model_turns_of_a_history() {
        let h = r#"[{"role":"user","parts":[{"text":"go"}]},{"role":"model","parts":[{"text":"a","thought":true},{"text":"[A1] cr"},{"functionCall":{"name":"x"}}]},{"role":"user","parts":[{"text":"continue"}]}]"#;
        assert_eq!(model_texts(h), Some(vec!["[A1] cr".to_owned()]));
        assert_eq!(model_texts("[A2] plain text"), None);
        assert!(is_chunks(&serde_json::json!([{"candidates": []}])));
        assert!(!is_chunks(&serde_json::json!([1, 2])));
    }
}
