//! Anthropic Messages stream events.
//!
//! Owns: `message_start` usage (input, cache read, cache creation), text blocks, `tool_use`
//! blocks assembled from `input_json_delta` (no fragment means `{}`) and emitted at
//! `content_block_stop`, `message_delta` stop reason and cumulative usage (its `input_tokens`
//! and cache figures win when present), `message_stop` (the terminator: the only place a
//! `Finish` comes from), `ping`, `error`. A `tool_use` block with no `content_block_stop` is
//! not executable: it is counted, never emitted. Attempt boundaries: a `message_start` with a
//! different id while a message is open, or more output after an `error`. Not boundaries: a
//! duplicate `message_start` with the same id; `message_start` after `message_stop` (a new
//! model call, hence a new turn in a raw stream).
//!
//! Content can arrive whole inside `message_start.message.content` (programmatic tool calling:
//! a `tool_use` with a `caller`, `stop_reason` already set, no `message_delta`): those blocks
//! are text and complete calls, and that `stop_reason` is the finish reason.
//!
//! A message replaced by a splice, or cut at end of input, before any `message_delta` usage is
//! billed what it used: its `message_start` input figures, and as output the larger of the
//! reported count and an estimate of what it streamed (text, thinking and tool input, about
//! four characters a token).

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::Deserialize;

use super::provider::{ChunkDecoder, Ctx, args_or_empty_object, owned, parse};
use super::{DecodeError, SkipCounts};
use crate::cost::estimate_tokens;
use crate::event::{Event, EventKind, Usage};

#[derive(Deserialize)]
struct Payload<'a> {
    #[serde(borrow, rename = "type")]
    ty: Cow<'a, str>,
    #[serde(default)]
    message: Option<Message<'a>>,
    #[serde(default)]
    index: Option<u32>,
    #[serde(default)]
    content_block: Option<serde_json::Value>,
    #[serde(borrow, default)]
    delta: Option<Delta<'a>>,
    #[serde(default)]
    usage: Option<AnthUsage>,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    model: Option<Cow<'a, str>>,
    #[serde(default)]
    usage: Option<AnthUsage>,
    #[serde(default)]
    content: Vec<serde_json::Value>,
    #[serde(borrow, default)]
    stop_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(borrow, default, rename = "type")]
    ty: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    partial_json: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    thinking: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    stop_reason: Option<Cow<'a, str>>,
}

#[derive(serde::Serialize, Deserialize, Default, Clone, Copy)]
struct AnthUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
}

impl AnthUsage {
    /// Later figures win field by field (message_delta over message_start).
    fn merge(&mut self, later: &AnthUsage) {
        self.input_tokens = later.input_tokens.or(self.input_tokens);
        self.output_tokens = later.output_tokens.or(self.output_tokens);
        self.cache_creation_input_tokens = later
            .cache_creation_input_tokens
            .or(self.cache_creation_input_tokens);
        self.cache_read_input_tokens = later
            .cache_read_input_tokens
            .or(self.cache_read_input_tokens);
    }

    fn to_usage(self) -> Usage {
        let read = self.cache_read_input_tokens.unwrap_or(0);
        let write = self.cache_creation_input_tokens.unwrap_or(0);
        Usage {
            input_tokens: self.input_tokens.unwrap_or(0) + read + write,
            output_tokens: self.output_tokens.unwrap_or(0),
            cached_input_tokens: read,
            cache_write_tokens: write,
            reasoning_tokens: 0,
        }
    }
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
enum Block {
    Text,
    ToolUse {
        id: String,
        name: String,
        json: String,
        stopped: bool,
    },
    Other,
}

/// Decoder state for one stream (or one envelope turn/attempt).
#[derive(Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Decoder {
    started: bool,
    open: bool,
    msg_id: Option<String>,
    errored: bool,
    blocks: BTreeMap<u32, Block>,
    usage: AnthUsage,
    /// A `Usage` was emitted for the open message (its `message_delta` carried usage).
    usage_emitted: bool,
    /// Characters of output the open message streamed (text, thinking, tool input).
    streamed_chars: u64,
    stop_reason: Option<String>,
    skips: SkipCounts,
}

impl Decoder {
    fn drop_unfinished(&mut self) {
        let n = self
            .blocks
            .values()
            .filter(|b| matches!(b, Block::ToolUse { stopped: false, .. }))
            .count();
        self.skips.incomplete_tool_calls += n as u64;
        self.blocks.clear();
    }

    fn reset_message(&mut self, id: Option<String>, usage: Option<AnthUsage>) {
        self.drop_unfinished();
        self.msg_id = id;
        self.usage = usage.unwrap_or_default();
        self.usage_emitted = false;
        self.streamed_chars = 0;
        self.stop_reason = None;
        self.errored = false;
        self.open = true;
    }

    /// The open message ends without its `message_delta` usage (a splice replaces it, or the
    /// input ends): bill what it used.
    fn emit_cut_usage(&mut self, ctx: &Ctx, out: &mut Vec<Event<'static>>) {
        if !self.open || self.usage_emitted {
            return;
        }
        if self.usage.input_tokens.is_none() {
            // Nothing reported: the correlator estimates from the turn's other attempts.
            return;
        }
        let estimate = estimate_tokens(self.streamed_chars);
        let mut usage = self.usage.to_usage();
        usage.output_tokens = usage.output_tokens.max(estimate);
        self.usage_emitted = true;
        ctx.emit(out, EventKind::Usage { usage, model: None });
    }

    fn output_after_error(&mut self, ctx: &mut Ctx, out: &mut Vec<Event<'static>>) {
        if self.errored {
            self.emit_cut_usage(ctx, out);
            let id = self.msg_id.clone();
            self.reset_message(id, None);
            ctx.splice("output after an error event", out);
        }
    }

    /// Blocks that arrived whole in `message_start.message.content`.
    fn start_content(
        &mut self,
        ctx: &Ctx,
        content: &[serde_json::Value],
        out: &mut Vec<Event<'static>>,
    ) {
        for block in content {
            let str_of = |k: &str| block.get(k).and_then(|v| v.as_str()).unwrap_or("");
            match str_of("type") {
                "text" if !str_of("text").is_empty() => {
                    self.streamed_chars += str_of("text").chars().count() as u64;
                    ctx.emit(
                        out,
                        EventKind::Text {
                            text: owned(str_of("text")),
                        },
                    );
                }
                "tool_use" => {
                    let args = block
                        .get("input")
                        .map_or_else(|| "{}".to_owned(), |v| v.to_string());
                    ctx.emit(
                        out,
                        EventKind::ToolCall {
                            id: owned(str_of("id")),
                            name: owned(str_of("name")),
                            args: Some(Cow::Owned(args)),
                        },
                    );
                }
                _ => {}
            }
        }
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
        ctx.set_chunk_ts(None);
        match p.ty.as_ref() {
            "message_start" => {
                let msg = p.message;
                let id = msg
                    .as_ref()
                    .and_then(|m| m.id.as_deref())
                    .map(str::to_owned);
                let model = msg.as_ref().and_then(|m| m.model.as_deref());
                let usage = msg.as_ref().and_then(|m| m.usage);
                let content = msg.as_ref().map_or(&[][..], |m| m.content.as_slice());
                let stop = msg
                    .as_ref()
                    .and_then(|m| m.stop_reason.as_deref())
                    .map(str::to_owned);
                if !self.started {
                    self.started = true;
                    ctx.begin_call(model, out);
                    self.reset_message(id, usage);
                } else if self.open && !self.errored && id.is_some() && id == self.msg_id {
                    // A duplicate message_start (same id): benign, ignored.
                    return Ok(());
                } else if self.open {
                    let signal = if self.errored {
                        "message_start after an error event"
                    } else {
                        "message_start with a different id while a message is open"
                    };
                    self.emit_cut_usage(ctx, out);
                    self.reset_message(id, usage);
                    ctx.splice(signal, out);
                } else {
                    // message_stop came first: a new model call.
                    self.reset_message(id, usage);
                    ctx.begin_call(model, out);
                }
                self.start_content(ctx, content, out);
                if stop.is_some() {
                    self.stop_reason = stop;
                }
            }
            "content_block_start" => {
                self.output_after_error(ctx, out);
                let index = p.index.unwrap_or(0);
                let block = p.content_block.unwrap_or_default();
                let kind = block.get("type").and_then(|t| t.as_str()).unwrap_or("");
                let b = match kind {
                    "text" => {
                        if let Some(t) = block.get("text").and_then(|t| t.as_str())
                            && !t.is_empty()
                        {
                            ctx.emit(out, EventKind::Text { text: owned(t) });
                        }
                        Block::Text
                    }
                    "tool_use" => {
                        let str_of = |k: &str| {
                            block
                                .get(k)
                                .and_then(|v| v.as_str())
                                .unwrap_or("")
                                .to_owned()
                        };
                        // `input` is a `{}` placeholder when deltas follow; keep it only if it
                        // carries something (a proxy that sends the whole input up front).
                        let json = match block.get("input") {
                            Some(v) if v.as_object().is_some_and(|o| !o.is_empty()) => {
                                v.to_string()
                            }
                            _ => String::new(),
                        };
                        Block::ToolUse {
                            id: str_of("id"),
                            name: str_of("name"),
                            json,
                            stopped: false,
                        }
                    }
                    _ => Block::Other,
                };
                self.blocks.insert(index, b);
            }
            "content_block_delta" => {
                self.output_after_error(ctx, out);
                let Some(delta) = p.delta else {
                    return Ok(());
                };
                match (
                    delta.ty.as_deref(),
                    self.blocks.get_mut(&p.index.unwrap_or(0)),
                ) {
                    (Some("text_delta"), _) => {
                        if let Some(t) = delta.text.as_deref().filter(|t| !t.is_empty()) {
                            self.streamed_chars += t.chars().count() as u64;
                            ctx.emit(out, EventKind::Text { text: owned(t) });
                        }
                    }
                    (Some("input_json_delta"), Some(Block::ToolUse { json, .. })) => {
                        if let Some(j) = &delta.partial_json {
                            self.streamed_chars += j.chars().count() as u64;
                            json.push_str(j);
                        }
                    }
                    (Some("thinking_delta"), _) => {
                        if let Some(t) = &delta.thinking {
                            self.streamed_chars += t.chars().count() as u64;
                        }
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                if let Some(Block::ToolUse {
                    id,
                    name,
                    json,
                    stopped,
                }) = self.blocks.get_mut(&p.index.unwrap_or(0))
                    && !*stopped
                {
                    *stopped = true;
                    ctx.emit(
                        out,
                        EventKind::ToolCall {
                            id: owned(id),
                            name: owned(name),
                            args: Some(args_or_empty_object(json)),
                        },
                    );
                }
            }
            "message_delta" => {
                if let Some(r) = p.delta.as_ref().and_then(|d| d.stop_reason.as_deref()) {
                    self.stop_reason = Some(r.to_owned());
                }
                if let Some(u) = &p.usage {
                    self.usage.merge(u);
                    self.usage_emitted = true;
                    ctx.emit(
                        out,
                        EventKind::Usage {
                            usage: self.usage.to_usage(),
                            model: None,
                        },
                    );
                }
            }
            "message_stop" => {
                self.drop_unfinished();
                if !self.usage_emitted && self.usage.input_tokens.is_some() {
                    // No message_delta (content arrived in message_start): its usage is final.
                    self.usage_emitted = true;
                    let usage = self.usage.to_usage();
                    ctx.emit(out, EventKind::Usage { usage, model: None });
                }
                self.open = false;
                let reason = self.stop_reason.take().unwrap_or_else(|| "unknown".into());
                ctx.emit(
                    out,
                    EventKind::Finish {
                        reason: Cow::Owned(reason),
                    },
                );
            }
            "ping" => {}
            "error" => {
                if !self.started {
                    self.started = true;
                    self.open = true;
                    ctx.begin_call(None, out);
                }
                let err = p.error.unwrap_or_default();
                let field = |k: &str| err.get(k).and_then(|v| v.as_str()).map(str::to_owned);
                ctx.emit(
                    out,
                    EventKind::Error {
                        message: Cow::Owned(field("message").unwrap_or_default()),
                        code: field("type").map(Cow::Owned),
                    },
                );
                self.errored = true;
            }
            _ => self.skips.unknown_types += 1,
        }
        Ok(())
    }

    fn end(&mut self, ctx: &mut Ctx, out: &mut Vec<Event<'static>>) {
        // No message_stop: the attempt stays unfinished (billed what it used); its open
        // tool_use blocks are counted.
        self.emit_cut_usage(ctx, out);
        self.drop_unfinished();
    }

    fn skips(&self) -> SkipCounts {
        self.skips
    }
}

#[cfg(test)]
mod tests;
