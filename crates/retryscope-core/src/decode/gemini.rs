//! Gemini `streamGenerateContent` chunks (`GenerateContentResponse`), Gemini API and Vertex.
//!
//! Owns: text parts (thought parts are reasoning, not text), `functionCall` parts, whole or
//! streamed as `partialArgs` (Vertex `streamFunctionCallArguments`) with or without the
//! terminating empty `functionCall{}`; cumulative `usageMetadata` (last wins; cached is a
//! subset of prompt; thoughts are added to output and reported as reasoning); `finishReason`;
//! `responseId`; Vertex `createTime`. Metadata-only chunks (usage, no candidates) only update
//! usage. Attempt boundaries: `responseId` changes before any `finishReason`; output after an
//! `error` chunk. A `responseId` change after a finish is a new model call. Call ids: the
//! part's `id` when present, else `fc-<n>` (n counts calls within the attempt).

use std::borrow::Cow;

use serde_json::{Map, Value};

use super::provider::{ChunkDecoder, Ctx, owned, parse};
use super::{DecodeError, SkipCounts};
use crate::event::{Event, EventKind, Usage};

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Partial {
    id: String,
    name: String,
    args: Value,
}

/// Decoder state for one model call stream (or one envelope turn/attempt).
#[derive(Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Decoder {
    started: bool,
    finished: bool,
    errored: bool,
    response_id: Option<String>,
    calls: u32,
    partial: Option<Partial>,
    usage: Option<Usage>,
    skips: SkipCounts,
}

fn u(v: &Value, k: &str) -> Option<u64> {
    v.get(k).and_then(Value::as_u64)
}

/// `usageMetadata` in retryscope's convention; `None` when it carries no counts (Vertex sends
/// `{trafficType}` alone on early chunks).
pub(crate) fn usage_of(meta: &Value) -> Option<Usage> {
    let prompt = u(meta, "promptTokenCount");
    let cand = u(meta, "candidatesTokenCount");
    if prompt.is_none() && cand.is_none() && u(meta, "totalTokenCount").is_none() {
        return None;
    }
    let thoughts = u(meta, "thoughtsTokenCount").unwrap_or(0);
    Some(Usage {
        input_tokens: prompt.unwrap_or(0) + u(meta, "toolUsePromptTokenCount").unwrap_or(0),
        output_tokens: cand.unwrap_or(0) + thoughts,
        cached_input_tokens: u(meta, "cachedContentTokenCount").unwrap_or(0),
        cache_write_tokens: 0,
        reasoning_tokens: thoughts,
    })
}

/// Set `value` at a `$.a.b[0]` path; string values append to a string already there.
fn set_path(root: &mut Value, path: &str, value: Value) {
    let mut segs: Vec<Result<String, usize>> = Vec::new();
    let body = path.strip_prefix('$').unwrap_or(path);
    for part in body.split('.').filter(|p| !p.is_empty()) {
        let mut rest = part;
        if let Some(i) = rest.find('[') {
            if i > 0 {
                segs.push(Ok(rest[..i].to_owned()));
            }
            rest = &rest[i..];
            while let Some(end) = rest.find(']') {
                if let Ok(n) = rest[1..end].parse::<usize>() {
                    segs.push(Err(n));
                }
                rest = &rest[end + 1..];
                if !rest.starts_with('[') {
                    break;
                }
            }
        } else {
            segs.push(Ok(rest.to_owned()));
        }
    }
    let mut cur = root;
    for seg in segs {
        cur = match seg {
            Ok(key) => {
                if !cur.is_object() {
                    *cur = Value::Object(Map::new());
                }
                match cur {
                    Value::Object(m) => m.entry(key).or_insert(Value::Null),
                    _ => return,
                }
            }
            Err(n) => {
                if !cur.is_array() {
                    *cur = Value::Array(Vec::new());
                }
                match cur {
                    Value::Array(a) => {
                        if a.len() <= n {
                            a.resize(n + 1, Value::Null);
                        }
                        &mut a[n]
                    }
                    _ => return,
                }
            }
        };
    }
    match (cur, value) {
        (Value::String(existing), Value::String(more)) => existing.push_str(&more),
        (slot, v) => *slot = v,
    }
}

fn apply_partial_args(args: &mut Value, partial: &[Value]) {
    for pa in partial {
        let Some(path) = pa.get("jsonPath").and_then(Value::as_str) else {
            continue;
        };
        let value = if let Some(s) = pa.get("stringValue") {
            s.clone()
        } else if let Some(n) = pa.get("numberValue") {
            n.clone()
        } else if let Some(b) = pa.get("boolValue") {
            b.clone()
        } else if pa.get("nullValue").is_some() {
            Value::Null
        } else {
            continue;
        };
        set_path(args, path, value);
    }
}

impl Decoder {
    fn next_id(&mut self, id: Option<&str>) -> String {
        self.calls += 1;
        match id.filter(|i| !i.is_empty()) {
            Some(i) => i.to_owned(),
            None => format!("fc-{}", self.calls - 1),
        }
    }

    fn flush_partial(&mut self, ctx: &Ctx, out: &mut Vec<Event<'static>>) {
        if let Some(p) = self.partial.take() {
            ctx.emit(
                out,
                EventKind::ToolCall {
                    id: Cow::Owned(p.id),
                    name: Cow::Owned(p.name),
                    args: Some(Cow::Owned(p.args.to_string())),
                },
            );
        }
    }

    fn reset_attempt(&mut self) {
        if self.partial.take().is_some() {
            self.skips.incomplete_tool_calls += 1;
        }
        self.calls = 0;
        self.usage = None;
        self.finished = false;
        self.errored = false;
    }

    /// The usage reported so far, for an attempt that ends without a finish.
    fn emit_partial_usage(&mut self, ctx: &Ctx, out: &mut Vec<Event<'static>>) {
        if !self.finished
            && let Some(usage) = self.usage.take()
        {
            ctx.emit(out, EventKind::Usage { usage, model: None });
        }
    }

    fn function_call(&mut self, ctx: &Ctx, fc: &Value, out: &mut Vec<Event<'static>>) {
        let name = fc
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty());
        let partial = fc.get("partialArgs").and_then(Value::as_array);
        let will_continue = fc.get("willContinue").and_then(Value::as_bool) == Some(true);
        let id = fc.get("id").and_then(Value::as_str);
        if let Some(name) = name {
            // A named part starts a call; a streamed call still open is complete now.
            self.flush_partial(ctx, out);
            let id = self.next_id(id);
            if will_continue || partial.is_some() {
                let mut args = fc
                    .get("args")
                    .cloned()
                    .unwrap_or_else(|| Value::Object(Map::new()));
                apply_partial_args(&mut args, partial.map_or(&[][..], |p| p.as_slice()));
                self.partial = Some(Partial {
                    id,
                    name: name.to_owned(),
                    args,
                });
                if !will_continue {
                    self.flush_partial(ctx, out);
                }
            } else {
                let args = fc
                    .get("args")
                    .map_or_else(|| "{}".to_owned(), Value::to_string);
                ctx.emit(
                    out,
                    EventKind::ToolCall {
                        id: Cow::Owned(id),
                        name: owned(name),
                        args: Some(Cow::Owned(args)),
                    },
                );
            }
        } else if let Some(p) = &mut self.partial {
            apply_partial_args(&mut p.args, partial.map_or(&[][..], |p| p.as_slice()));
            if !will_continue {
                // The terminating `functionCall{}` (or a last fragment without willContinue).
                self.flush_partial(ctx, out);
            }
        }
    }

    /// One already-parsed chunk.
    pub(crate) fn chunk_value(
        &mut self,
        ctx: &mut Ctx,
        v: &Value,
        out: &mut Vec<Event<'static>>,
    ) -> Result<(), DecodeError> {
        ctx.set_chunk_ts(
            v.get("createTime")
                .and_then(Value::as_str)
                .and_then(crate::rfc3339::parse_ms),
        );
        let model = v.get("modelVersion").and_then(Value::as_str);
        if let Some(err) = v.get("error") {
            if !self.started {
                self.started = true;
                ctx.begin_call(model, out);
            }
            let code = err
                .get("status")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .or_else(|| err.get("code").map(|c| c.to_string()));
            ctx.emit(
                out,
                EventKind::Error {
                    message: owned(err.get("message").and_then(Value::as_str).unwrap_or("")),
                    code: code.map(Cow::Owned),
                },
            );
            self.errored = true;
            return Ok(());
        }
        let candidate = v
            .get("candidates")
            .and_then(Value::as_array)
            .and_then(|c| c.first());
        let parts = candidate
            .and_then(|c| c.get("content"))
            .and_then(|c| c.get("parts"))
            .and_then(Value::as_array);
        let has_output = parts.is_some_and(|p| !p.is_empty());
        let rid = v
            .get("responseId")
            .and_then(Value::as_str)
            .filter(|r| !r.is_empty());
        if let (Some(new), Some(old)) = (rid, self.response_id.as_deref())
            && new != old
        {
            if self.finished {
                self.reset_attempt();
                ctx.begin_call(model, out);
            } else {
                self.emit_partial_usage(ctx, out);
                self.reset_attempt();
                ctx.splice("responseId changed before finishReason", out);
            }
        } else if self.errored && has_output {
            self.emit_partial_usage(ctx, out);
            self.reset_attempt();
            ctx.splice("output after an error", out);
        }
        if rid.is_some() {
            self.response_id = rid.map(str::to_owned);
        }
        if !self.started {
            self.started = true;
            ctx.begin_call(model, out);
        }
        for part in parts.into_iter().flatten() {
            if let Some(fc) = part.get("functionCall") {
                self.function_call(ctx, fc, out);
            } else if part.get("thought").and_then(Value::as_bool) == Some(true) {
                // Reasoning: counted in usage, never shown as text.
            } else if let Some(t) = part.get("text").and_then(Value::as_str)
                && !t.is_empty()
            {
                ctx.emit(out, EventKind::Text { text: owned(t) });
            }
        }
        if let Some(usage) = v.get("usageMetadata").and_then(usage_of) {
            self.usage = Some(usage);
        }
        if let Some(reason) = candidate
            .and_then(|c| c.get("finishReason"))
            .and_then(Value::as_str)
        {
            self.flush_partial(ctx, out);
            if let Some(usage) = self.usage {
                ctx.emit(out, EventKind::Usage { usage, model: None });
            }
            ctx.emit(
                out,
                EventKind::Finish {
                    reason: owned(reason),
                },
            );
            self.finished = true;
        } else if self.finished
            && let Some(usage) = v.get("usageMetadata").and_then(usage_of)
        {
            // Usage arriving after the finish still belongs to it.
            ctx.emit(out, EventKind::Usage { usage, model: None });
        }
        Ok(())
    }

    /// The model call ended (end of stream, or end of a recorded call).
    pub(crate) fn end_call(&mut self, ctx: &Ctx, out: &mut Vec<Event<'static>>) {
        if self.partial.take().is_some() {
            self.skips.incomplete_tool_calls += 1;
        }
        if self.started {
            self.emit_partial_usage(ctx, out);
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
        let v: Value = parse(data)?;
        if !v.is_object() {
            return Err(DecodeError::new(
                super::BadLineReason::InvalidValue,
                "a Gemini chunk must be a JSON object",
            ));
        }
        self.chunk_value(ctx, &v, out)
    }

    fn end(&mut self, ctx: &mut Ctx, out: &mut Vec<Event<'static>>) {
        self.end_call(ctx, out);
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
        super::super::provider::decode_lines(Format::Gemini, lines.iter().copied())
    }

    fn calls(evs: &[Event<'static>]) -> Vec<(String, String)> {
        evs.iter()
            .filter_map(|e| match &e.kind {
                EventKind::ToolCall { name, args, .. } => {
                    Some((name.to_string(), args.as_deref().unwrap_or("").to_owned()))
                }
                _ => None,
            })
            .collect()
    }

    const START: &str = r#"{"candidates":[{"content":{"parts":[{"functionCall":{"name":"w","willContinue":true}}]}}],"responseId":"r1"}"#;
    const ARG: &str = r#"{"candidates":[{"content":{"parts":[{"functionCall":{"partialArgs":[{"jsonPath":"$.loc","stringValue":"Bos","willContinue":true}],"willContinue":true}}]}}],"responseId":"r1"}"#;
    const ARG2: &str = r#"{"candidates":[{"content":{"parts":[{"functionCall":{"partialArgs":[{"jsonPath":"$.loc","stringValue":"ton"},{"jsonPath":"$.n[1]","numberValue":3}],"willContinue":true}}]}}],"responseId":"r1"}"#;
    const TERM: &str =
        r#"{"candidates":[{"content":{"parts":[{"functionCall":{}}]}}],"responseId":"r1"}"#;
    const FIN: &str = r#"{"candidates":[{"content":{"parts":[{"text":""}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":9,"candidatesTokenCount":5,"thoughtsTokenCount":4,"cachedContentTokenCount":2},"responseId":"r1"}"#;

    #[test]
    fn partial_args_with_terminal() {
        let (evs, _) = run(&[START, ARG, ARG2, TERM, FIN]);
        assert_eq!(
            calls(&evs),
            [("w".into(), r#"{"loc":"Boston","n":[null,3]}"#.into())]
        );
        assert!(evs.iter().any(|e| matches!(
            e.kind,
            EventKind::Usage {
                usage: Usage {
                    input_tokens: 9,
                    output_tokens: 9,
                    reasoning_tokens: 4,
                    cached_input_tokens: 2,
                    ..
                },
                ..
            }
        )));
    }

    #[test]
    fn partial_args_without_terminal_complete_at_next_call_and_finish() {
        let (evs, skips) = run(&[START, ARG, START, ARG2, FIN]);
        assert_eq!(
            calls(&evs),
            [
                ("w".into(), r#"{"loc":"Bos"}"#.into()),
                ("w".into(), r#"{"loc":"ton","n":[null,3]}"#.into())
            ]
        );
        assert_eq!(skips.incomplete_tool_calls, 0);
        // Cut before any finish: not executable.
        let (evs, skips) = run(&[START, ARG]);
        assert!(calls(&evs).is_empty());
        assert_eq!(skips.incomplete_tool_calls, 1);
    }

    #[test]
    fn response_id_change_before_finish_splices() {
        let (evs, _) = run(&[
            r#"{"candidates":[{"content":{"parts":[{"text":"a"}]}}],"usageMetadata":{"promptTokenCount":3},"responseId":"r1"}"#,
            r#"{"candidates":[{"content":{"parts":[{"text":"b"}]},"finishReason":"STOP"}],"responseId":"r2"}"#,
        ]);
        let k: Vec<_> = evs
            .iter()
            .map(|e| (e.kind.type_name(), e.attempt))
            .collect();
        assert_eq!(
            k,
            [
                ("turn_start", Some(0)),
                ("text", Some(0)),
                ("usage", Some(0)),
                ("stream_splice", Some(1)),
                ("text", Some(1)),
                ("finish", Some(1))
            ]
        );
    }

    #[test]
    fn metadata_only_chunk_updates_usage_only() {
        let (evs, _) = run(&[
            r#"{"candidates":[{"content":{"parts":[{"text":"a"}]}}]}"#,
            r#"{"usageMetadata":{"promptTokenCount":100,"candidatesTokenCount":10}}"#,
            r#"{"candidates":[{"content":{"parts":[{"text":"b"}]},"finishReason":"STOP"}]}"#,
        ]);
        let k: Vec<_> = evs.iter().map(|e| e.kind.type_name()).collect();
        assert_eq!(k, ["turn_start", "text", "text", "usage", "finish"]);
    }
}
