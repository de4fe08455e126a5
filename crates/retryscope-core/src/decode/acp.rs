//! Agent Client Protocol transcripts: newline-delimited JSON-RPC 2.0 between client and agent.
//!
//! Owns: the `session/prompt` request (opens a turn `<sessionId>:<request id>`), its response
//! (`stopReason` → `Finish` + `TurnEnd`; an error → `Error` + `TurnEnd`; the unstable `usage`
//! → `Usage`), and `session/update` notifications: `agent_message_chunk` text, a `messageId`
//! change (→ `RenderReset`), the v2 `agent_message` replacement of a message that already had
//! content (→ `RenderReset`, then its text), `tool_call` (→ `ToolCall`), `tool_call_update`
//! with status `completed` (→ `ToolExec`; ACP tool kinds read/search/fetch/think are reads),
//! and v2 `state_update{state:"idle"}` (→ `Finish` + `TurnEnd`). ACP carries no model-call
//! boundary: the agent only runs a tool after the model call that requested it ended, so the
//! first execution after streamed output marks that call finished (`Finish{tool_use}`).
//! `usage_update` reports context-window occupancy, not billed tokens, and is not turned into
//! usage. Updates outside any prompt (e.g. a `session/load` replay) belong to no turn and are
//! skipped. ACP has no attempt numbers: events carry none.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::provider::{StreamDecoder, owned, parse, utf8};
use super::{DecodeError, SkipCounts};
use crate::event::{EffectClass, Event, EventKind, Usage};

#[derive(Default, serde::Serialize, serde::Deserialize)]
struct Session {
    turn: Option<String>,
    message_id: Option<String>,
    message_has_text: bool,
    /// v2 upserted messages that have content.
    filled: HashSet<String>,
    calls: HashMap<String, (String, Option<String>, Option<String>)>,
    executed: HashSet<String>,
    /// Output streamed since the last execution (the model call is still running).
    streaming: bool,
}

/// Decoder for one ACP transcript.
#[derive(Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Decoder {
    sessions: HashMap<String, Session>,
    /// Pending `session/prompt` request ids → session id.
    prompts: HashMap<String, String>,
    skips: SkipCounts,
}

fn id_str(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn text_of(content: &Value) -> Option<&str> {
    (content.get("type").and_then(Value::as_str) == Some("text"))
        .then(|| content.get("text").and_then(Value::as_str))
        .flatten()
}

fn emit(out: &mut Vec<Event<'static>>, turn: &str, kind: EventKind<'static>) {
    out.push(Event {
        turn: Cow::Owned(turn.to_owned()),
        attempt: None,
        ts_ms: None,
        kind,
    });
}

fn effect_of(kind: Option<&str>) -> Option<EffectClass> {
    match kind? {
        "read" | "search" | "fetch" | "think" => Some(EffectClass::Read),
        _ => None,
    }
}

fn usage_of(u: &Value) -> Option<Usage> {
    let n = |k: &str| u.get(k).and_then(Value::as_u64);
    let input = n("inputTokens")?;
    let output = n("outputTokens").unwrap_or(0);
    let read = n("cachedReadTokens").unwrap_or(0);
    let write = n("cachedWriteTokens").unwrap_or(0);
    let thought = n("thoughtTokens").unwrap_or(0);
    // When the total shows cache tokens were counted apart from inputTokens, add them back.
    let input = match n("totalTokens") {
        Some(t)
            if read + write > 0
                && (t == input + output + read + write
                    || t == input + output + read + write + thought) =>
        {
            input + read + write
        }
        _ => input,
    };
    let output = match n("totalTokens") {
        Some(t) if thought > 0 && t == input + output + thought => output + thought,
        _ => output,
    };
    Some(Usage {
        input_tokens: input,
        output_tokens: output,
        cached_input_tokens: read,
        cache_write_tokens: write,
        reasoning_tokens: thought,
    })
}

impl Decoder {
    fn finish_turn(
        &mut self,
        sid: &str,
        reason: &str,
        usage: Option<Usage>,
        out: &mut Vec<Event<'static>>,
    ) {
        let Some(s) = self.sessions.get_mut(sid) else {
            return;
        };
        let Some(turn) = s.turn.take() else {
            return;
        };
        if let Some(usage) = usage {
            emit(out, &turn, EventKind::Usage { usage, model: None });
        }
        emit(
            out,
            &turn,
            EventKind::Finish {
                reason: owned(reason),
            },
        );
        emit(
            out,
            &turn,
            EventKind::TurnEnd {
                status: Some(owned(reason)),
            },
        );
    }

    fn update(&mut self, params: &Value, out: &mut Vec<Event<'static>>) {
        let Some(sid) = params.get("sessionId").and_then(id_str) else {
            return;
        };
        let Some(u) = params.get("update") else {
            return;
        };
        let tag = u.get("sessionUpdate").and_then(Value::as_str).unwrap_or("");
        if tag == "state_update" {
            if u.get("state").and_then(Value::as_str) == Some("idle") {
                let reason = u
                    .get("stopReason")
                    .and_then(Value::as_str)
                    .unwrap_or("idle")
                    .to_owned();
                self.finish_turn(&sid, &reason, None, out);
            }
            return;
        }
        let Some(s) = self.sessions.get_mut(&sid) else {
            return;
        };
        let Some(turn) = s.turn.clone() else {
            return; // outside a prompt (e.g. session/load replay)
        };
        match tag {
            "agent_message_chunk" => {
                let mid = u.get("messageId").and_then(id_str);
                if let Some(mid) = mid {
                    if s.message_id.as_ref().is_some_and(|m| *m != mid) && s.message_has_text {
                        emit(out, &turn, EventKind::RenderReset);
                        s.message_has_text = false;
                    }
                    s.message_id = Some(mid);
                }
                if let Some(t) = u.get("content").and_then(text_of).filter(|t| !t.is_empty()) {
                    emit(out, &turn, EventKind::Text { text: owned(t) });
                    s.message_has_text = true;
                    s.streaming = true;
                    if let Some(m) = &s.message_id {
                        s.filled.insert(m.clone());
                    }
                }
            }
            "agent_message" => {
                let Some(mid) = u.get("messageId").and_then(id_str) else {
                    return;
                };
                let Some(content) = u.get("content") else {
                    return; // omitted: content unchanged
                };
                if s.filled.contains(&mid) {
                    emit(out, &turn, EventKind::RenderReset);
                    s.filled.remove(&mid);
                }
                s.message_id = Some(mid.clone());
                s.message_has_text = false;
                for block in content.as_array().into_iter().flatten() {
                    if let Some(t) = text_of(block).filter(|t| !t.is_empty()) {
                        emit(out, &turn, EventKind::Text { text: owned(t) });
                        s.filled.insert(mid.clone());
                        s.message_has_text = true;
                        s.streaming = true;
                    }
                }
            }
            "tool_call" | "tool_call_update" => {
                let Some(id) = u.get("toolCallId").and_then(id_str) else {
                    return;
                };
                let title = u.get("title").and_then(Value::as_str).map(str::to_owned);
                let kind = u.get("kind").and_then(Value::as_str).map(str::to_owned);
                let raw = u
                    .get("rawInput")
                    .filter(|v| !v.is_null())
                    .map(Value::to_string);
                let known = s.calls.contains_key(&id);
                let entry = s
                    .calls
                    .entry(id.clone())
                    .or_insert_with(|| (String::new(), None, None));
                if let Some(t) = title.filter(|_| entry.0.is_empty()) {
                    entry.0 = t;
                }
                if kind.is_some() {
                    entry.1 = kind;
                }
                if raw.is_some() {
                    entry.2 = raw;
                }
                let (name, kind, args) = entry.clone();
                let name = if name.is_empty() {
                    kind.clone().unwrap_or_else(|| "tool".to_owned())
                } else {
                    name
                };
                if !known {
                    emit(
                        out,
                        &turn,
                        EventKind::ToolCall {
                            id: owned(&id),
                            name: owned(&name),
                            args: Some(Cow::Owned(args.clone().unwrap_or_else(|| "{}".to_owned()))),
                        },
                    );
                }
                let status = u.get("status").and_then(Value::as_str);
                if status == Some("completed") && s.executed.insert(id.clone()) {
                    if s.streaming {
                        emit(
                            out,
                            &turn,
                            EventKind::Finish {
                                reason: Cow::Borrowed("tool_use"),
                            },
                        );
                        s.streaming = false;
                    }
                    emit(
                        out,
                        &turn,
                        EventKind::ToolExec {
                            id: owned(&id),
                            name: owned(&name),
                            args: args.map(Cow::Owned),
                            effect_key: None,
                            step: None,
                            effect: effect_of(kind.as_deref()),
                            status: Some(Cow::Borrowed("completed")),
                            result: None,
                        },
                    );
                }
            }
            "agent_thought_chunk"
            | "agent_thought"
            | "user_message_chunk"
            | "user_message"
            | "plan"
            | "plan_update"
            | "plan_removed"
            | "available_commands_update"
            | "current_mode_update"
            | "config_option_update"
            | "session_info_update"
            | "usage_update"
            | "tool_call_content_chunk"
            | "notice"
            | "compaction_update"
            | "compaction_summary_chunk" => {}
            _ => self.skips.unknown_types += 1,
        }
    }
}

impl StreamDecoder for Decoder {
    fn push_line(&mut self, line: &[u8], out: &mut Vec<Event<'static>>) -> Result<(), DecodeError> {
        let text = utf8(line)?.trim();
        if text.is_empty() {
            return Ok(());
        }
        let msg: Value = parse(text)?;
        let method = msg.get("method").and_then(Value::as_str);
        let id = msg.get("id").and_then(id_str);
        match (method, id) {
            (Some("session/prompt"), Some(id)) => {
                let Some(sid) = msg
                    .get("params")
                    .and_then(|p| p.get("sessionId"))
                    .and_then(id_str)
                else {
                    return Ok(());
                };
                let turn = format!("{sid}:{id}");
                emit(
                    out,
                    &turn,
                    EventKind::TurnStart {
                        model: None,
                        provider: None,
                        session: Some(owned(&sid)),
                        agent: None,
                        traceparent: None,
                        wire_only: false,
                        requested_model: None,
                    },
                );
                let s = self.sessions.entry(sid.clone()).or_default();
                *s = Session {
                    turn: Some(turn),
                    ..Session::default()
                };
                self.prompts.insert(id, sid);
            }
            (Some("session/update"), _) => {
                if let Some(params) = msg.get("params") {
                    self.update(params, out);
                }
            }
            (Some(_), _) => {} // other requests and notifications
            (None, Some(id)) => {
                let Some(sid) = self.prompts.remove(&id) else {
                    return Ok(()); // a response to something other than a prompt
                };
                if let Some(result) = msg.get("result") {
                    if let Some(reason) = result.get("stopReason").and_then(Value::as_str) {
                        let usage = result.get("usage").and_then(usage_of);
                        self.finish_turn(&sid, reason, usage, out);
                    }
                    // v2: the response only acknowledges; state_update ends the turn.
                } else if let Some(err) = msg.get("error")
                    && let Some(turn) = self.sessions.get_mut(&sid).and_then(|s| s.turn.take())
                {
                    emit(
                        out,
                        &turn,
                        EventKind::Error {
                            message: owned(
                                err.get("message").and_then(Value::as_str).unwrap_or(""),
                            ),
                            code: err.get("code").and_then(id_str).map(Cow::Owned),
                        },
                    );
                    emit(
                        out,
                        &turn,
                        EventKind::TurnEnd {
                            status: Some(Cow::Borrowed("error")),
                        },
                    );
                }
            }
            (None, None) => self.skips.unknown_types += 1,
        }
        Ok(())
    }

    fn finish(&mut self, _out: &mut Vec<Event<'static>>) {}

    fn skips(&self) -> SkipCounts {
        self.skips
    }

    /// Always: an ACP agent reports every tool call's progress and end (`tool_call_update`).
    fn records_executions(&self) -> bool {
        true
    }

    fn state(&self) -> Option<serde_json::Value> {
        super::state::state_of(self)
    }

    fn resume(&mut self, state: serde_json::Value) -> bool {
        super::state::resume_into(self, state)
    }
}

#[cfg(test)]
mod tests {
    use super::super::Format;
    use super::*;

    fn run(lines: &[&str]) -> Vec<Event<'static>> {
        super::super::provider::decode_lines(Format::Acp, lines.iter().copied()).0
    }

    const PROMPT: &str = r#"{"jsonrpc":"2.0","id":7,"method":"session/prompt","params":{"sessionId":"s1","prompt":[]}}"#;

    fn chunk(mid: &str, text: &str) -> String {
        format!(
            r#"{{"jsonrpc":"2.0","method":"session/update","params":{{"sessionId":"s1","update":{{"sessionUpdate":"agent_message_chunk","messageId":"{mid}","content":{{"type":"text","text":"{text}"}}}}}}}}"#
        )
    }

    #[test]
    fn message_id_change_resets_and_stop_reason_finishes() {
        let (a, b) = (chunk("m1", "Hel"), chunk("m2", "Hello"));
        let evs = run(&[
            PROMPT,
            &a,
            &b,
            r#"{"jsonrpc":"2.0","id":7,"result":{"stopReason":"end_turn"}}"#,
        ]);
        let k: Vec<&str> = evs.iter().map(|e| e.kind.type_name()).collect();
        assert_eq!(
            k,
            [
                "turn_start",
                "text",
                "render_reset",
                "text",
                "finish",
                "turn_end"
            ]
        );
        assert!(evs.iter().all(|e| e.turn == "s1:7"));
    }

    #[test]
    fn tool_call_completed_is_an_execution() {
        let evs = run(&[
            PROMPT,
            &chunk("m1", "Reading"),
            r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"tool_call","toolCallId":"c1","title":"Read a.txt","kind":"read","status":"pending","rawInput":{"path":"a.txt"}}}}"#,
            r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"completed"}}}"#,
        ]);
        let k: Vec<&str> = evs.iter().map(|e| e.kind.type_name()).collect();
        assert_eq!(
            k,
            ["turn_start", "text", "tool_call", "finish", "tool_exec"]
        );
        assert!(
            matches!(&evs[4].kind, EventKind::ToolExec { effect: Some(EffectClass::Read), args: Some(a), .. } if a == r#"{"path":"a.txt"}"#)
        );
    }
}
