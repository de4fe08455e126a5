//! OpenAI Chat Completions stream chunks (`chat.completion.chunk`), from OpenAI and the many
//! OpenAI-compatible endpoints (Azure, Groq, DeepSeek, xAI, Anthropic's compat layer).
//!
//! Owns: text and refusal deltas; tool-call deltas assembled by `index` (indexes may start at
//! 1, a whole call may come in one delta), emitted complete at `finish_reason`; usage from the
//! usage chunk or the finish chunk (a `choices: []` chunk without usage, like Azure's metadata
//! first chunk, is not it); a top-level `error` line. Attempt boundaries: a chunk `id` change
//! before any `finish_reason`, or more output after an `error` line.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::Deserialize;

use super::provider::{ChunkDecoder, Ctx, args_or_empty_object, owned, parse, secs_to_ms};
use super::{DecodeError, SkipCounts};
use crate::event::{Event, EventKind, Usage};

#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    model: Option<Cow<'a, str>>,
    #[serde(default)]
    created: Option<i64>,
    #[serde(default)]
    choices: Option<Vec<Choice<'a>>>,
    #[serde(default)]
    usage: Option<ChatUsage>,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default)]
    index: Option<u32>,
    #[serde(borrow, default)]
    delta: Option<Delta<'a>>,
    #[serde(borrow, default)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(borrow, default)]
    content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    refusal: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    tool_calls: Option<Vec<ToolDelta<'a>>>,
}

#[derive(Deserialize)]
struct ToolDelta<'a> {
    #[serde(default)]
    index: Option<u32>,
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    function: Option<FnDelta<'a>>,
}

#[derive(Deserialize)]
struct FnDelta<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    arguments: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct ChatUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    total_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
    #[serde(default)]
    completion_tokens_details: Option<CompletionDetails>,
}

#[derive(Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct CompletionDetails {
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

impl ChatUsage {
    fn to_usage(&self) -> Option<Usage> {
        let input = self.prompt_tokens?;
        let completion = self.completion_tokens.unwrap_or(0);
        let reasoning = self
            .completion_tokens_details
            .as_ref()
            .and_then(|d| d.reasoning_tokens)
            .unwrap_or(0);
        // OpenAI counts reasoning inside completion_tokens; xAI reports it apart (its
        // total_tokens = prompt + completion + reasoning). Normalize to "output includes it".
        let output = match self.total_tokens {
            Some(t) if reasoning > 0 && t == input + completion + reasoning => {
                completion + reasoning
            }
            _ => completion,
        };
        Some(Usage {
            input_tokens: input,
            output_tokens: output,
            cached_input_tokens: self
                .prompt_tokens_details
                .as_ref()
                .and_then(|d| d.cached_tokens)
                .unwrap_or(0),
            cache_write_tokens: 0,
            reasoning_tokens: reasoning,
        })
    }
}

#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct PendingCall {
    id: String,
    name: String,
    args: String,
}

/// Decoder state for one stream.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Decoder {
    started: bool,
    id: Option<String>,
    finished: bool,
    errored: bool,
    calls: BTreeMap<u32, PendingCall>,
    skips: SkipCounts,
}

impl Decoder {
    fn reset_attempt(&mut self) {
        self.skips.incomplete_tool_calls += self.calls.len() as u64;
        self.calls.clear();
        self.finished = false;
        self.errored = false;
    }

    fn flush_calls(&mut self, ctx: &Ctx, out: &mut Vec<Event<'static>>) {
        for (_, call) in std::mem::take(&mut self.calls) {
            ctx.emit(
                out,
                EventKind::ToolCall {
                    id: Cow::Owned(call.id),
                    name: Cow::Owned(call.name),
                    args: Some(args_or_empty_object(&call.args)),
                },
            );
        }
    }
}

fn has_output(chunk: &Chunk<'_>) -> bool {
    chunk.choices.iter().flatten().any(|c| {
        c.finish_reason.is_some()
            || c.delta.as_ref().is_some_and(|d| {
                d.content.as_deref().is_some_and(|t| !t.is_empty())
                    || d.refusal.as_deref().is_some_and(|t| !t.is_empty())
                    || d.tool_calls.as_ref().is_some_and(|t| !t.is_empty())
            })
    })
}

fn error_fields(v: &serde_json::Value) -> (String, Option<String>) {
    let message = v
        .get("message")
        .and_then(|m| m.as_str())
        .map(str::to_owned)
        .or_else(|| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let code = ["code", "type"]
        .iter()
        .filter_map(|k| v.get(*k))
        .find_map(|c| match c {
            serde_json::Value::String(s) => Some(s.clone()),
            serde_json::Value::Number(n) => Some(n.to_string()),
            _ => None,
        });
    (message, code)
}

impl ChunkDecoder for Decoder {
    fn chunk(
        &mut self,
        ctx: &mut Ctx,
        _event: Option<&str>,
        data: &str,
        out: &mut Vec<Event<'static>>,
    ) -> Result<(), DecodeError> {
        let chunk: Chunk<'_> = parse(data)?;
        ctx.set_chunk_ts(secs_to_ms(chunk.created));
        if let Some(err) = &chunk.error {
            if !self.started {
                self.started = true;
                ctx.begin_call(chunk.model.as_deref(), out);
            }
            let (message, code) = error_fields(err);
            ctx.emit(
                out,
                EventKind::Error {
                    message: Cow::Owned(message),
                    code: code.map(Cow::Owned),
                },
            );
            self.errored = true;
            return Ok(());
        }
        let id = chunk.id.as_deref().filter(|i| !i.is_empty());
        let output = has_output(&chunk);
        match (id, self.id.as_deref()) {
            (Some(new), Some(old)) if new != old => {
                if self.finished {
                    // The previous response finished: this is a new model call.
                    self.reset_attempt();
                    ctx.begin_call(chunk.model.as_deref(), out);
                } else {
                    self.reset_attempt();
                    ctx.splice("chunk id changed before finish_reason", out);
                }
                self.id = Some(new.to_owned());
            }
            _ if self.errored && output => {
                self.reset_attempt();
                ctx.splice("output after an error", out);
            }
            _ => {}
        }
        if !self.started && (id.is_some() || output) {
            self.started = true;
            ctx.begin_call(chunk.model.as_deref(), out);
        }
        if self.id.is_none() {
            self.id = id.map(str::to_owned);
        }
        let mut usage_done = false;
        for choice in chunk.choices.iter().flatten() {
            // Only the first choice (n = 1); others would be parallel samples, not retries.
            if choice.index.unwrap_or(0) != 0 {
                continue;
            }
            if let Some(delta) = &choice.delta {
                for text in [&delta.content, &delta.refusal].into_iter().flatten() {
                    if !text.is_empty() {
                        ctx.emit(out, EventKind::Text { text: owned(text) });
                    }
                }
                for tc in delta.tool_calls.iter().flatten() {
                    let index = tc.index.unwrap_or(0);
                    let fresh_id = tc.id.as_deref().filter(|i| !i.is_empty());
                    let entry = self.calls.entry(index).or_default();
                    if let Some(fid) = fresh_id
                        && !entry.id.is_empty()
                        && entry.id != fid
                    {
                        // A new call reusing an index: the old one is done.
                        let done = std::mem::take(entry);
                        ctx.emit(
                            out,
                            EventKind::ToolCall {
                                id: Cow::Owned(done.id),
                                name: Cow::Owned(done.name),
                                args: Some(args_or_empty_object(&done.args)),
                            },
                        );
                    }
                    if let Some(fid) = fresh_id {
                        entry.id = fid.to_owned();
                    }
                    if let Some(f) = &tc.function {
                        if let Some(name) = f.name.as_deref().filter(|n| !n.is_empty()) {
                            entry.name = name.to_owned();
                        }
                        if let Some(a) = &f.arguments {
                            entry.args.push_str(a);
                        }
                    }
                }
            }
            if let Some(reason) = &choice.finish_reason {
                self.flush_calls(ctx, out);
                if let Some(u) = chunk.usage.as_ref().and_then(ChatUsage::to_usage) {
                    ctx.emit(
                        out,
                        EventKind::Usage {
                            usage: u,
                            model: None,
                        },
                    );
                    usage_done = true;
                }
                ctx.emit(
                    out,
                    EventKind::Finish {
                        reason: owned(reason),
                    },
                );
                self.finished = true;
            }
        }
        if !usage_done
            && self.started
            && let Some(u) = chunk.usage.as_ref().and_then(ChatUsage::to_usage)
        {
            ctx.emit(
                out,
                EventKind::Usage {
                    usage: u,
                    model: None,
                },
            );
        }
        Ok(())
    }

    fn end(&mut self, _ctx: &mut Ctx, _out: &mut Vec<Event<'static>>) {
        // Calls never closed by a finish_reason are not executable.
        self.skips.incomplete_tool_calls += self.calls.len() as u64;
        self.calls.clear();
    }

    fn skips(&self) -> SkipCounts {
        self.skips
    }
}

#[cfg(test)]
mod tests {
    use super::super::Format;
    use super::*;

    fn run(input: &str) -> (Vec<Event<'static>>, SkipCounts) {
        super::super::provider::decode_lines(Format::OpenAiChat, input.lines())
    }

    fn calls(evs: &[Event<'static>]) -> Vec<(String, String, String)> {
        evs.iter()
            .filter_map(|e| match &e.kind {
                EventKind::ToolCall { id, name, args } => Some((
                    id.to_string(),
                    name.to_string(),
                    args.as_deref().unwrap_or("").to_owned(),
                )),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn index_from_one_and_empty_fragments() {
        let (evs, _) = run(concat!(
            r#"{"id":"c1","model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"t1","type":"function","function":{"name":"f","arguments":""}}]}}]}"#,
            "\n",
            r#"{"id":"c1","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":""}}]}}]}"#,
            "\n",
            r#"{"id":"c1","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{\"a\":1}"}}]}}]}"#,
            "\n",
            r#"{"id":"c1","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            "\n",
        ));
        assert_eq!(
            calls(&evs),
            vec![("t1".into(), "f".into(), r#"{"a":1}"#.into())]
        );
        assert!(
            matches!(evs.last().map(|e| &e.kind), Some(EventKind::Finish { reason }) if reason == "tool_calls")
        );
    }

    #[test]
    fn id_change_before_finish_is_a_splice_and_after_is_a_new_call() {
        let (evs, skips) = run(concat!(
            r#"{"id":"a","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"t","function":{"name":"f","arguments":"{"}}]}}]}"#,
            "\n",
            r#"{"id":"b","choices":[{"index":0,"delta":{"content":"hi"}}]}"#,
            "\n",
            r#"{"id":"b","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
            "\n",
            r#"{"id":"c","choices":[{"index":0,"delta":{"content":"x"}}]}"#,
            "\n",
        ));
        assert_eq!(skips.incomplete_tool_calls, 1);
        let splice = evs
            .iter()
            .find(|e| matches!(e.kind, EventKind::StreamSplice { .. }))
            .expect("splice");
        assert_eq!(splice.attempt, Some(1));
        assert_eq!(
            evs.last().map(|e| (e.turn.as_ref(), e.attempt)),
            Some(("test#2", Some(0)))
        );
    }

    #[test]
    fn azure_metadata_chunk_is_not_usage_and_usage_chunk_is() {
        let (evs, _) = run(concat!(
            r#"{"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[]}"#,
            "\n",
            r#"{"choices":[{"delta":{"content":"Hi"},"finish_reason":null,"index":0}],"created":1762317021,"id":"x","model":"m"}"#,
            "\n",
            r#"{"choices":[{"delta":{},"finish_reason":"stop","index":0}],"created":1762317021,"id":"x","model":"m","usage":null}"#,
            "\n",
            r#"{"choices":[],"created":1762317021,"id":"x","model":"m","usage":{"completion_tokens":78,"completion_tokens_details":{"reasoning_tokens":64},"prompt_tokens":15,"prompt_tokens_details":{"cached_tokens":3},"total_tokens":93}}"#,
            "\n",
        ));
        let usages: Vec<Usage> = evs
            .iter()
            .filter_map(|e| match e.kind {
                EventKind::Usage { usage, .. } => Some(usage),
                _ => None,
            })
            .collect();
        assert_eq!(
            usages,
            vec![Usage {
                input_tokens: 15,
                output_tokens: 78,
                cached_input_tokens: 3,
                cache_write_tokens: 0,
                reasoning_tokens: 64
            }]
        );
        assert_eq!(evs[0].ts_ms, Some(1_762_317_021_000));
    }

    #[test]
    fn xai_reasoning_outside_completion_is_added() {
        let u = ChatUsage {
            prompt_tokens: Some(307),
            completion_tokens: Some(26),
            total_tokens: Some(560),
            prompt_tokens_details: None,
            completion_tokens_details: Some(CompletionDetails {
                reasoning_tokens: Some(227),
            }),
        };
        assert_eq!(u.to_usage().map(|u| u.output_tokens), Some(253));
    }

    #[test]
    fn error_line_then_output_splices() {
        let (evs, _) = run(concat!(
            r#"{"id":"a","choices":[{"index":0,"delta":{"content":"par"}}]}"#,
            "\n",
            r#"{"error":{"message":"overloaded","type":"server_error"}}"#,
            "\n",
            r#"{"id":"a","choices":[{"index":0,"delta":{"content":"full"}}]}"#,
            "\n",
        ));
        let kinds: Vec<&str> = evs.iter().map(|e| e.kind.type_name()).collect();
        assert_eq!(
            kinds,
            ["turn_start", "text", "error", "stream_splice", "text"]
        );
    }
}
