//! Codex's `codex exec --json` output: one JSON event per line, no timestamps.
//!
//! Owns: `thread.started` (the session), `turn.started` / `turn.completed` (usage) /
//! `turn.failed`, `item.started` / `item.completed` of `agent_message` (text),
//! `command_execution`, `file_change`, `mcp_tool_call` and `web_search` (a tool call when it
//! starts, its execution when it completes; `web_search` is a read), and top-level `error`
//! events such as `Reconnecting... 1/5 (stream disconnected before completion: ...)` (the
//! model call being streamed failed).
//!
//! Turns: one per model call: `<thread_id>`, then `<thread_id>#2`, ... Codex does not mark
//! where one model call ends and the next begins. Two things show it: a stream error (after
//! it, a call that had already produced items, which Codex keeps and runs, is over and what
//! follows is the next call; a call that had produced nothing is retried, the next attempt of
//! the same turn); and a call that ran a tool is always followed by another call, whose
//! answer is the last message before `turn.completed`. `turn.completed` finishes the current
//! call; its usage (the completed responses' total) is billed to it. Items carry no call ids:
//! the item id stands in.

use std::borrow::Cow;

use serde_json::{Value, json};

use super::provider::{StreamDecoder, json_object_line, owned};
use super::{DecodeError, SkipCounts};
use crate::event::{EffectClass, Event, EventKind, Usage};

/// Decoder for one `codex exec --json` output.
#[derive(Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Decoder {
    thread: String,
    calls: u32,
    turn: Option<String>,
    attempt: u32,
    /// Items the current model call produced.
    items: u32,
    /// The current call ran a tool (so another model call follows it).
    ran_tool: bool,
    /// The latest agent message, held: when the Codex turn completes right after it and the
    /// call before it ran a tool, it is the next model call's answer.
    pending: Option<String>,
    errored: bool,
    skips: SkipCounts,
}

fn s<'v>(v: &'v Value, k: &str) -> Option<&'v str> {
    v.get(k).and_then(Value::as_str)
}

/// Tool name, arguments and read-only-ness of a tool item.
fn tool_of(item: &Value) -> Option<(String, Value, bool)> {
    Some(match s(item, "type")? {
        "command_execution" => (
            "command_execution".to_owned(),
            json!({ "command": item.get("command").cloned().unwrap_or(Value::Null) }),
            false,
        ),
        "file_change" => (
            "file_change".to_owned(),
            json!({ "changes": item.get("changes").cloned().unwrap_or(Value::Null) }),
            false,
        ),
        "mcp_tool_call" => (
            format!(
                "mcp:{}/{}",
                s(item, "server").unwrap_or(""),
                s(item, "tool").unwrap_or("")
            ),
            item.get("arguments").cloned().unwrap_or_else(|| json!({})),
            false,
        ),
        "web_search" => (
            "web_search".to_owned(),
            json!({ "query": item.get("query").cloned().unwrap_or(Value::Null) }),
            true,
        ),
        _ => return None,
    })
}

impl Decoder {
    fn emit(&self, out: &mut Vec<Event<'static>>, kind: EventKind<'static>) {
        if let Some(turn) = &self.turn {
            out.push(Event {
                turn: Cow::Owned(turn.clone()),
                attempt: Some(self.attempt),
                ts_ms: None,
                kind,
            });
        }
    }

    fn end_turn(&mut self, out: &mut Vec<Event<'static>>) {
        self.emit(out, EventKind::TurnEnd { status: None });
        self.turn = None;
    }

    /// A model call's output is about to arrive: open a turn, or after a stream error, the
    /// next call (or a retry of the failed one).
    fn ensure_call(&mut self, out: &mut Vec<Event<'static>>) {
        if self.turn.is_some() && self.errored {
            self.errored = false;
            if self.items == 0 {
                self.attempt += 1;
                self.emit(
                    out,
                    EventKind::Retry {
                        reason: Some(Cow::Borrowed("stream_disconnected")),
                        prefill: None,
                    },
                );
                return;
            }
            self.end_turn(out);
        }
        if self.turn.is_some() {
            return;
        }
        self.calls += 1;
        let thread = if self.thread.is_empty() {
            "codex"
        } else {
            &self.thread
        };
        self.turn = Some(if self.calls == 1 {
            thread.to_owned()
        } else {
            format!("{thread}#{}", self.calls)
        });
        self.attempt = 0;
        self.items = 0;
        self.ran_tool = false;
        self.errored = false;
        self.emit(
            out,
            EventKind::TurnStart {
                model: None,
                provider: Some(Cow::Borrowed("openai")),
                session: Some(owned(&self.thread)),
                agent: Some(Cow::Borrowed("codex")),
                traceparent: None,
                wire_only: false,
                requested_model: None,
            },
        );
    }

    /// The held message belongs to the current call after all.
    fn flush_pending(&mut self, out: &mut Vec<Event<'static>>) {
        if let Some(text) = self.pending.take()
            && !text.is_empty()
        {
            self.emit(
                out,
                EventKind::Text {
                    text: Cow::Owned(text),
                },
            );
        }
    }

    fn item(&mut self, v: &Value, completed: bool, out: &mut Vec<Event<'static>>) {
        let Some(item) = v.get("item") else {
            self.skips.unknown_fields += 1;
            return;
        };
        let id = s(item, "id").unwrap_or("").to_owned();
        match s(item, "type") {
            Some("agent_message") if completed => {
                self.ensure_call(out);
                self.flush_pending(out);
                self.items += 1;
                self.pending = Some(s(item, "text").unwrap_or("").to_owned());
            }
            // Client-side notices (e.g. missing model metadata) and reasoning summaries.
            Some("error" | "reasoning" | "todo_list" | "agent_message") => {}
            _ => {
                let Some((name, args, read)) = tool_of(item) else {
                    self.skips.unknown_types += 1;
                    return;
                };
                self.ensure_call(out);
                self.flush_pending(out);
                self.items += 1;
                self.ran_tool = true;
                // A tool item may be reported completed without a start (e.g. a file change).
                self.emit(
                    out,
                    EventKind::ToolCall {
                        id: owned(&id),
                        name: owned(&name),
                        args: Some(Cow::Owned(args.to_string())),
                    },
                );
                if completed {
                    let status = s(item, "status").unwrap_or("completed").to_owned();
                    self.emit(
                        out,
                        EventKind::ToolExec {
                            id: Cow::Owned(id),
                            name: Cow::Owned(name),
                            args: None,
                            effect_key: None,
                            step: None,
                            effect: read.then_some(EffectClass::Read),
                            status: Some(Cow::Owned(status)),
                            result: s(item, "aggregated_output")
                                .filter(|t| !t.trim().is_empty())
                                .map(|t| Cow::Owned(crate::event::result_excerpt(t))),
                        },
                    );
                }
            }
        }
    }

    fn record(&mut self, v: &Value, out: &mut Vec<Event<'static>>) {
        match s(v, "type") {
            Some("thread.started") => {
                self.thread = s(v, "thread_id").unwrap_or("").to_owned();
            }
            Some("turn.started") => {
                if self.turn.is_some() {
                    self.end_turn(out);
                }
                self.errored = false;
            }
            Some("item.started") => self.item(v, false, out),
            Some("item.completed") | Some("item.updated") => {
                self.item(v, s(v, "type") == Some("item.completed"), out)
            }
            Some("error") => {
                self.ensure_call(out);
                // A message shown before the break belongs to the broken call.
                self.flush_pending(out);
                let message = s(v, "message").unwrap_or("").to_owned();
                self.emit(
                    out,
                    EventKind::Error {
                        message: Cow::Owned(message),
                        code: Some(Cow::Borrowed("stream_error")),
                    },
                );
                self.errored = true;
            }
            Some("turn.completed") => {
                self.ensure_call(out);
                if self.ran_tool && !self.errored && self.pending.is_some() {
                    // The call that ran a tool finished; its follow-up call gave the answer.
                    self.emit(
                        out,
                        EventKind::Finish {
                            reason: Cow::Borrowed("completed"),
                        },
                    );
                    self.end_turn(out);
                    self.ensure_call(out);
                }
                self.flush_pending(out);
                if let Some(u) = v.get("usage") {
                    let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
                    let usage = Usage {
                        input_tokens: n("input_tokens"),
                        output_tokens: n("output_tokens"),
                        cached_input_tokens: n("cached_input_tokens"),
                        cache_write_tokens: n("cache_write_input_tokens"),
                        reasoning_tokens: n("reasoning_output_tokens"),
                    };
                    self.emit(out, EventKind::Usage { usage, model: None });
                }
                self.emit(
                    out,
                    EventKind::Finish {
                        reason: Cow::Borrowed("completed"),
                    },
                );
                self.end_turn(out);
            }
            Some("turn.failed") => {
                self.ensure_call(out);
                self.flush_pending(out);
                let err = v.get("error");
                let message = err
                    .and_then(|e| s(e, "message"))
                    .unwrap_or("turn failed")
                    .to_owned();
                self.emit(
                    out,
                    EventKind::Error {
                        message: Cow::Owned(message),
                        code: Some(Cow::Borrowed("turn_failed")),
                    },
                );
                self.end_turn(out);
            }
            _ => self.skips.unknown_types += 1,
        }
    }
}

impl StreamDecoder for Decoder {
    fn push_line(&mut self, line: &[u8], out: &mut Vec<Event<'static>>) -> Result<(), DecodeError> {
        if let Some(v) = json_object_line(line)? {
            self.record(&v, out);
        }
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<Event<'static>>) {
        // Cut before `turn.completed`: a held message was shown by the call being streamed.
        self.flush_pending(out);
    }

    fn skips(&self) -> SkipCounts {
        self.skips
    }

    /// Always: Codex writes an item for every command and tool call it completed.
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
    use super::super::provider::stream_decoder;

    /// (turn, event type, attempt) of each event.
    type Seen = Vec<(String, &'static str, Option<u32>)>;

    fn decode(lines: &[&str]) -> (Seen, usize) {
        let mut d = stream_decoder(Format::CodexExec, "x").expect("decoder");
        let mut out = Vec::new();
        let bad = lines
            .iter()
            .filter(|l| d.push_line(l.as_bytes(), &mut out).is_err())
            .count();
        d.finish(&mut out);
        let evs = out
            .iter()
            .map(|e| (e.turn.to_string(), e.kind.type_name(), e.attempt))
            .collect();
        (evs, bad)
    }

    const START: &str = r#"{"type":"thread.started","thread_id":"t"}"#;
    const TURN: &str = r#"{"type":"turn.started"}"#;
    const RECONNECT: &str = r#"{"type":"error","message":"Reconnecting... 1/5 (stream disconnected before completion: x)"}"#;
    const MSG: &str =
        r#"{"type":"item.completed","item":{"id":"item_1","type":"agent_message","text":"hi"}}"#;
    const DONE: &str = r#"{"type":"turn.completed","usage":{"input_tokens":9,"output_tokens":2}}"#;

    #[test]
    fn a_stream_error_before_any_item_is_a_retry_after_items_the_next_call() {
        let (evs, bad) = decode(&[START, TURN, RECONNECT, MSG, DONE]);
        assert_eq!(bad, 0);
        assert!(evs.contains(&("t".to_owned(), "retry", Some(1))), "{evs:?}");
        let (evs, _) = decode(&[START, TURN, MSG, RECONNECT, MSG, DONE]);
        assert!(evs.iter().any(|e| e.0 == "t#2"), "{evs:?}");
        assert!(!evs.iter().any(|e| e.1 == "retry"), "{evs:?}");
    }

    #[test]
    fn bad_lines_are_errors() {
        let (_, bad) = decode(&[START, "{oops", "[]", r#"{"type":"item.completed"}"#]);
        assert_eq!(bad, 2);
    }
}
