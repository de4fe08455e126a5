//! OpenAI Responses API stream events.
//!
//! Owns: `response.created` … `response.completed | failed | incomplete`, `error` (nested
//! `{error:{…}}` as real captures send it, or flat `{code, message}` as the SDK types it),
//! text and refusal deltas, client-executed tool items (`function_call`, `custom_tool_call`,
//! `shell_call`, `local_shell_call`) matched by `output_index` (proxies such as GitHub Copilot
//! rotate `item_id` on every event) and emitted at `function_call_arguments.done` /
//! `output_item.done`, usage on the terminal event. Several responses back to back are several
//! model calls (new turns). Attempt boundaries: a new `response.created` with a new id before
//! the previous response reached a terminal event, or more output after an `error` / failure.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::provider::{ChunkDecoder, Ctx, args_or_empty_object, owned, parse, secs_to_ms};
use super::{DecodeError, SkipCounts};
use crate::event::{Event, EventKind, Usage};

#[derive(Deserialize)]
struct Payload<'a> {
    #[serde(borrow, rename = "type")]
    ty: Cow<'a, str>,
    #[serde(default)]
    response: Option<Value>,
    #[serde(default)]
    output_index: Option<u32>,
    #[serde(default)]
    item: Option<Value>,
    #[serde(borrow, default)]
    delta: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    arguments: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    input: Option<Cow<'a, str>>,
    #[serde(default)]
    error: Option<Value>,
    #[serde(default)]
    code: Option<Value>,
    #[serde(borrow, default)]
    message: Option<Cow<'a, str>>,
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Item {
    call_id: String,
    name: String,
    args: String,
    emitted: bool,
}

/// Decoder state for one stream (or one envelope turn/attempt).
#[derive(Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Decoder {
    started: bool,
    resp_id: Option<String>,
    /// The current response reached `completed`/`incomplete` (true) or `failed` (false).
    terminal: Option<bool>,
    errored: bool,
    items: BTreeMap<u32, Item>,
    skips: SkipCounts,
}

fn str_field(v: &Value, key: &str) -> Option<String> {
    match v.get(key)? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn usage_of(resp: &Value) -> Option<Usage> {
    let u = resp.get("usage")?;
    let n = |v: Option<&Value>| v.and_then(Value::as_u64).unwrap_or(0);
    let input = u.get("input_tokens")?.as_u64()?;
    let details = u.get("input_tokens_details");
    Some(Usage {
        input_tokens: input,
        output_tokens: n(u.get("output_tokens")),
        cached_input_tokens: n(details.and_then(|d| d.get("cached_tokens"))),
        cache_write_tokens: n(details.and_then(|d| d.get("cache_write_tokens"))),
        reasoning_tokens: n(u
            .get("output_tokens_details")
            .and_then(|d| d.get("reasoning_tokens"))),
    })
}

/// A client-executed tool item: (call id, tool name, arguments so far).
fn tool_item(item: &Value) -> Option<Item> {
    let ty = item.get("type")?.as_str()?;
    let call_id = str_field(item, "call_id")
        .or_else(|| str_field(item, "id"))
        .unwrap_or_default();
    let (name, args) = match ty {
        "function_call" => (
            str_field(item, "name").unwrap_or_default(),
            str_field(item, "arguments").unwrap_or_default(),
        ),
        "custom_tool_call" => (
            str_field(item, "name").unwrap_or_default(),
            item.get("input")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(|s| Value::String(s.to_owned()).to_string())
                .unwrap_or_default(),
        ),
        "shell_call" | "local_shell_call" => (
            ty.trim_end_matches("_call").to_owned(),
            item.get("action").map(Value::to_string).unwrap_or_default(),
        ),
        _ => return None,
    };
    Some(Item {
        call_id,
        name,
        args,
        emitted: false,
    })
}

/// Events that are part of the format but carry nothing retryscope uses.
fn known_ignored(ty: &str) -> bool {
    ty.starts_with("response.")
        && (ty.contains("_call")
            || ty.starts_with("response.content_part.")
            || ty.starts_with("response.reasoning")
            || ty.starts_with("response.output_text.")
            || ty.starts_with("response.refusal.")
            || ty.starts_with("response.audio")
            || ty.starts_with("response.output_item.")
            || ty == "response.in_progress"
            || ty == "response.queued")
}

impl Decoder {
    fn emit_item(ctx: &Ctx, item: &mut Item, out: &mut Vec<Event<'static>>) {
        if item.emitted {
            return;
        }
        item.emitted = true;
        ctx.emit(
            out,
            EventKind::ToolCall {
                id: owned(&item.call_id),
                name: owned(&item.name),
                args: Some(args_or_empty_object(&item.args)),
            },
        );
    }

    fn reset_attempt(&mut self) {
        let open = self.items.values().filter(|i| !i.emitted).count();
        self.skips.incomplete_tool_calls += open as u64;
        self.items.clear();
        self.errored = false;
        self.terminal = None;
    }

    fn ensure_started(
        &mut self,
        ctx: &mut Ctx,
        model: Option<&str>,
        out: &mut Vec<Event<'static>>,
    ) {
        if !self.started {
            self.started = true;
            ctx.begin_call(model, out);
        }
    }

    /// Output arrived: after an error (and no new response.created) it is a spliced retry.
    fn output(&mut self, ctx: &mut Ctx, out: &mut Vec<Event<'static>>) {
        self.ensure_started(ctx, None, out);
        if self.errored {
            self.reset_attempt();
            ctx.splice("output after an error event", out);
        }
    }

    fn created(&mut self, ctx: &mut Ctx, resp: &Value, out: &mut Vec<Event<'static>>) {
        let id = str_field(resp, "id");
        let model = str_field(resp, "model");
        if !self.started {
            self.ensure_started(ctx, model.as_deref(), out);
        } else if id.is_some() && id == self.resp_id && self.terminal.is_none() && !self.errored {
            return; // the same response announced twice
        } else if self.terminal == Some(true) {
            // The previous response finished: back-to-back responses are separate model calls.
            self.reset_attempt();
            ctx.begin_call(model.as_deref(), out);
        } else {
            let signal = if self.errored || self.terminal == Some(false) {
                "response.created after the previous response failed"
            } else {
                "response.created before the previous response finished"
            };
            self.reset_attempt();
            ctx.splice(signal, out);
        }
        self.resp_id = id;
    }

    fn error(&mut self, ctx: &mut Ctx, err: &Value, out: &mut Vec<Event<'static>>) {
        self.ensure_started(ctx, None, out);
        ctx.emit(
            out,
            EventKind::Error {
                message: Cow::Owned(str_field(err, "message").unwrap_or_default()),
                code: str_field(err, "code")
                    .or_else(|| str_field(err, "type"))
                    .map(Cow::Owned),
            },
        );
        self.errored = true;
    }
}

impl ChunkDecoder for Decoder {
    fn chunk(
        &mut self,
        ctx: &mut Ctx,
        _event: Option<&str>,
        data: &str,
        out: &mut Vec<Event<'static>>,
    ) -> Result<(), DecodeError> {
        let p: Payload<'_> = parse(data)?;
        let resp_ts = p
            .response
            .as_ref()
            .and_then(|r| r.get("created_at"))
            .and_then(Value::as_i64);
        ctx.set_chunk_ts(secs_to_ms(resp_ts));
        let index = p.output_index.unwrap_or(0);
        match p.ty.as_ref() {
            "response.created" => {
                let resp = p.response.unwrap_or_default();
                self.created(ctx, &resp, out);
            }
            "response.output_item.added" => {
                self.output(ctx, out);
                if let Some(item) = p.item.as_ref().and_then(tool_item) {
                    self.items.insert(index, item);
                }
            }
            "response.output_text.delta" | "response.refusal.delta" => {
                self.output(ctx, out);
                if let Some(d) = p.delta.as_deref().filter(|d| !d.is_empty()) {
                    ctx.emit(out, EventKind::Text { text: owned(d) });
                }
            }
            "response.function_call_arguments.delta" | "response.custom_tool_call_input.delta" => {
                self.output(ctx, out);
                if let (Some(item), Some(d)) = (self.items.get_mut(&index), p.delta.as_deref()) {
                    item.args.push_str(d);
                }
            }
            "response.function_call_arguments.done" => {
                if let Some(item) = self.items.get_mut(&index) {
                    if let Some(a) = p.arguments.as_deref() {
                        item.args = a.to_owned();
                    }
                    Self::emit_item(ctx, item, out);
                }
            }
            "response.custom_tool_call_input.done" => {
                if let Some(item) = self.items.get_mut(&index) {
                    if let Some(a) = p.input.as_deref() {
                        item.args = Value::String(a.to_owned()).to_string();
                    }
                    Self::emit_item(ctx, item, out);
                }
            }
            "response.output_item.done" => {
                if let Some(fresh) = p.item.as_ref().and_then(tool_item) {
                    // The done item is authoritative (full arguments, stable call id).
                    let item = self.items.entry(index).or_insert(Item {
                        call_id: String::new(),
                        name: String::new(),
                        args: String::new(),
                        emitted: false,
                    });
                    if !fresh.args.is_empty() {
                        item.args = fresh.args;
                    }
                    if !fresh.call_id.is_empty() {
                        item.call_id = fresh.call_id;
                    }
                    if !fresh.name.is_empty() {
                        item.name = fresh.name;
                    }
                    Self::emit_item(ctx, item, out);
                }
            }
            "response.completed" | "response.incomplete" => {
                let resp = p.response.unwrap_or_default();
                self.ensure_started(ctx, str_field(&resp, "model").as_deref(), out);
                if let Some(u) = usage_of(&resp) {
                    ctx.emit(
                        out,
                        EventKind::Usage {
                            usage: u,
                            model: None,
                        },
                    );
                }
                let reason = if p.ty == "response.completed" {
                    "completed".to_owned()
                } else {
                    resp.get("incomplete_details")
                        .and_then(|d| str_field(d, "reason"))
                        .unwrap_or_else(|| "incomplete".to_owned())
                };
                ctx.emit(
                    out,
                    EventKind::Finish {
                        reason: Cow::Owned(reason),
                    },
                );
                self.terminal = Some(true);
            }
            "response.failed" => {
                let resp = p.response.unwrap_or_default();
                if let Some(u) = usage_of(&resp) {
                    ctx.emit(
                        out,
                        EventKind::Usage {
                            usage: u,
                            model: None,
                        },
                    );
                }
                if !self.errored {
                    let err = resp.get("error").cloned().unwrap_or_default();
                    self.error(ctx, &err, out);
                }
                self.terminal = Some(false);
            }
            "error" => {
                // Real captures nest the error; the SDK type has it flat.
                let err = match p.error {
                    Some(e) if e.is_object() => e,
                    _ => {
                        let mut m = serde_json::Map::new();
                        if let Some(c) = p.code {
                            m.insert("code".into(), c);
                        }
                        if let Some(msg) = p.message {
                            m.insert("message".into(), Value::String(msg.into_owned()));
                        }
                        Value::Object(m)
                    }
                };
                self.error(ctx, &err, out);
            }
            ty if known_ignored(ty) => {}
            _ => self.skips.unknown_types += 1,
        }
        Ok(())
    }

    fn end(&mut self, _ctx: &mut Ctx, _out: &mut Vec<Event<'static>>) {
        let open = self.items.values().filter(|i| !i.emitted).count();
        self.skips.incomplete_tool_calls += open as u64;
        self.items.clear();
    }

    fn skips(&self) -> SkipCounts {
        self.skips
    }
}

#[cfg(test)]
mod tests {
    use super::super::Format;
    use super::*;

    fn run(lines: &[&str]) -> (Vec<Event<'static>>, SkipCounts) {
        super::super::provider::decode_lines(Format::OpenAiResponses, lines.iter().copied())
    }

    fn kinds(evs: &[Event<'static>]) -> Vec<&'static str> {
        evs.iter().map(|e| e.kind.type_name()).collect()
    }

    #[test]
    fn item_id_rotation_is_matched_by_output_index() {
        let (evs, _) = run(&[
            r#"{"type":"response.created","response":{"id":"resp_1","model":"gpt","created_at":1700000000}}"#,
            r#"{"type":"response.output_item.added","output_index":0,"item":{"id":"fc_a","type":"function_call","call_id":"call_1","name":"weather","arguments":""}}"#,
            r#"{"type":"response.function_call_arguments.delta","item_id":"fc_b","output_index":0,"delta":"{\"x\""}"#,
            r#"{"type":"response.function_call_arguments.delta","item_id":"fc_c","output_index":0,"delta":":1}"}"#,
            r#"{"type":"response.output_item.done","output_index":0,"item":{"id":"fc_d","type":"function_call","call_id":"call_1","name":"weather","arguments":"{\"x\":1}"}}"#,
            r#"{"type":"response.completed","response":{"id":"resp_1","usage":{"input_tokens":9,"input_tokens_details":{"cached_tokens":4},"output_tokens":3,"output_tokens_details":{"reasoning_tokens":1}}}}"#,
        ]);
        assert_eq!(kinds(&evs), ["turn_start", "tool_call", "usage", "finish"]);
        assert!(
            matches!(&evs[1].kind, EventKind::ToolCall { id, args: Some(a), .. } if id == "call_1" && a == r#"{"x":1}"#)
        );
        assert_eq!(evs[0].ts_ms, Some(1_700_000_000_000));
    }

    #[test]
    fn flat_and_nested_errors() {
        for e in [
            r#"{"type":"error","code":"server_error","message":"boom"}"#,
            r#"{"type":"error","error":{"type":"server_error","code":"server_error","message":"boom"}}"#,
        ] {
            let (evs, _) = run(&[r#"{"type":"response.created","response":{"id":"r"}}"#, e]);
            assert!(
                matches!(&evs[1].kind, EventKind::Error { message, code: Some(c) } if message == "boom" && c == "server_error")
            );
        }
    }

    #[test]
    fn created_before_terminal_splices_after_completed_is_new_turn() {
        let (evs, _) = run(&[
            r#"{"type":"response.created","response":{"id":"r1"}}"#,
            r#"{"type":"response.output_text.delta","output_index":0,"delta":"a"}"#,
            r#"{"type":"response.created","response":{"id":"r2"}}"#,
            r#"{"type":"response.completed","response":{"id":"r2"}}"#,
            r#"{"type":"response.created","response":{"id":"r3"}}"#,
        ]);
        assert_eq!(
            kinds(&evs),
            [
                "turn_start",
                "text",
                "stream_splice",
                "finish",
                "turn_start"
            ]
        );
        assert_eq!(evs[3].attempt, Some(1));
        assert_eq!(evs[4].turn, "test#2");
    }
}
