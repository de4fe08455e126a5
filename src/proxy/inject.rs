//! Fault injection: where in a stream to cut, how, and which streams.
//!
//! Owns: the three cut points of the article ("close the socket after a tool-call event,
//! after a text fragment that splits a word, and immediately before the finish event"), found
//! per provider format in the framed stream; the in-stream error event of each provider, in
//! its own format; and the choice of streams (the first N, or a seeded fraction, of the
//! requests the rule aims at: `select`). The cut itself (reset, end of body) is the
//! forwarder's. The rule's words ([`Point`], [`How`], [`InjectRule`]) are the config file's
//! (`config::proxy`).

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;

use super::frames::{Frame, Framing};
use super::history::Api;

mod select;

pub use crate::config::proxy::{How, InjectRule, Point};
pub use select::{Match, Target};

/// An upstream's injection state.
#[derive(Debug)]
pub struct Injector {
    rule: InjectRule,
    streams: AtomicU64,
    cuts: AtomicU64,
}

impl Injector {
    /// State for `rule`.
    pub fn new(rule: InjectRule) -> Self {
        Injector {
            rule,
            streams: AtomicU64::new(0),
            cuts: AtomicU64::new(0),
        }
    }

    /// A new stream of the request `target`: a cutter when it is chosen. Requests the rule
    /// does not aim at are not counted.
    pub fn choose(&self, api: Api, target: Target) -> Option<Cutter> {
        if !self.rule.matches.matches(&target) {
            return None;
        }
        let k = self.streams.fetch_add(1, Ordering::Relaxed);
        if let Some(p) = self.rule.fraction {
            let h = retryscope_core::fasthash::fnv1a(
                &[self.rule.seed.to_le_bytes(), k.to_le_bytes()].concat(),
            );
            let x = (h >> 11) as f64 / (1u64 << 53) as f64;
            if x >= p {
                return None;
            }
        } else if self.cuts.load(Ordering::Relaxed) >= self.rule.first.unwrap_or(1) {
            return None;
        }
        let mut c = Cutter::new(self.rule.point, self.rule.how, api);
        c.target = Some(target);
        Some(c)
    }

    /// A chosen stream reached its point: whether to cut it (the first N are cut exactly once
    /// each, however many streams run at once).
    pub fn claim(&self) -> bool {
        match (self.rule.fraction, self.rule.first.unwrap_or(1)) {
            (Some(_), _) => {
                self.cuts.fetch_add(1, Ordering::Relaxed);
                true
            }
            (None, n) => self
                .cuts
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
                    (c < n).then_some(c + 1)
                })
                .is_ok(),
        }
    }

    /// Streams cut so far.
    pub fn cuts(&self) -> u64 {
        self.cuts.load(Ordering::Relaxed)
    }
}

/// What to do with a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Forward it and go on.
    Forward,
    /// Cut before it (it is not forwarded).
    CutBefore,
    /// Forward these bytes instead of the frame's (with this payload), then cut.
    CutAfter {
        /// The bytes to forward.
        bytes: Vec<u8>,
        /// Their payload.
        data: String,
    },
}

/// A chosen stream's search for its cut point.
#[derive(Debug)]
pub struct Cutter {
    point: Point,
    how: How,
    api: Api,
    /// Anthropic: index of the first tool_use block; Chat: index of the first call.
    call_index: Option<i64>,
    /// The request whose stream this is (what a cut reports).
    target: Option<Target>,
}

impl Cutter {
    fn new(point: Point, how: How, api: Api) -> Self {
        Cutter {
            point,
            how,
            api,
            call_index: None,
            target: None,
        }
    }

    /// The request whose stream this is.
    pub fn target(&self) -> Option<&Target> {
        self.target.as_ref()
    }

    /// Where.
    pub fn point(&self) -> Point {
        self.point
    }

    /// How.
    pub fn how(&self) -> How {
        self.how
    }

    /// Look at the next frame.
    pub fn decide(&mut self, frame: &Frame) -> Decision {
        let Ok(v) = serde_json::from_str::<Value>(&frame.data) else {
            return Decision::Forward;
        };
        match self.point {
            Point::BeforeFinish => {
                if carries_finish(self.api, &v) {
                    Decision::CutBefore
                } else {
                    Decision::Forward
                }
            }
            Point::AfterToolCall => self.after_tool_call(frame, &v),
            Point::MidWord => mid_word(self.api, frame, &v),
        }
    }

    fn after_tool_call(&mut self, frame: &Frame, v: &Value) -> Decision {
        let kind = v.get("type").and_then(Value::as_str).unwrap_or("");
        let after = || Decision::CutAfter {
            bytes: frame.bytes.clone(),
            data: frame.data.clone(),
        };
        match self.api {
            Api::Anthropic => match kind {
                "content_block_start"
                    if self.call_index.is_none()
                        && v.pointer("/content_block/type").and_then(Value::as_str)
                            == Some("tool_use") =>
                {
                    self.call_index = v.get("index").and_then(Value::as_i64);
                    Decision::Forward
                }
                "content_block_stop"
                    if self.call_index.is_some()
                        && v.get("index").and_then(Value::as_i64) == self.call_index =>
                {
                    after()
                }
                _ => Decision::Forward,
            },
            Api::OpenAiResponses => {
                let item = v
                    .pointer("/item/type")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                if kind == "response.output_item.done" && item.ends_with("call") {
                    after()
                } else {
                    Decision::Forward
                }
            }
            Api::Gemini => {
                let has_call =
                    candidates_parts(v).any(|p| p.pointer("/functionCall/args").is_some());
                if !has_call {
                    return Decision::Forward;
                }
                if carries_finish(self.api, v) {
                    // The call and the finish in one chunk: forward the call without its
                    // finish reason, then cut.
                    let mut stripped = v.clone();
                    if let Some(cands) =
                        stripped.get_mut("candidates").and_then(Value::as_array_mut)
                    {
                        for c in cands {
                            if let Some(o) = c.as_object_mut() {
                                o.remove("finishReason");
                            }
                        }
                    }
                    let data = stripped.to_string();
                    return Decision::CutAfter {
                        bytes: replace_payload(frame, &data),
                        data,
                    };
                }
                after()
            }
            Api::OpenAiChat => {
                let choice = v.pointer("/choices/0");
                let calls = choice
                    .and_then(|c| c.pointer("/delta/tool_calls"))
                    .and_then(Value::as_array);
                let finish = carries_finish(self.api, v);
                let content = choice
                    .and_then(|c| c.pointer("/delta/content"))
                    .and_then(Value::as_str)
                    .is_some_and(|s| !s.is_empty());
                match (self.call_index, calls) {
                    (None, Some(calls)) if !calls.is_empty() && !finish => {
                        self.call_index = calls[0].get("index").and_then(Value::as_i64).or(Some(0));
                        // A call complete in one delta with another after it in the same
                        // chunk: this chunk completes the first call.
                        Decision::Forward
                    }
                    (Some(i), Some(calls))
                        if !finish
                            && calls.iter().all(|c| {
                                c.get("index").and_then(Value::as_i64).unwrap_or(i) == i
                            }) =>
                    {
                        Decision::Forward
                    }
                    // Anything else after the call began (the next call, text, the finish)
                    // shows the first call complete: cut before it.
                    (Some(_), _) if finish || calls.is_some() || content => Decision::CutBefore,
                    _ => Decision::Forward,
                }
            }
        }
    }

    /// The provider's in-stream error event, framed as the stream is.
    pub fn error_bytes(&self, framing: Framing) -> (Vec<u8>, String) {
        error_event(self.api, framing)
    }
}

fn candidates_parts(v: &Value) -> impl Iterator<Item = &Value> {
    v.get("candidates")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.pointer("/content/parts").and_then(Value::as_array))
        .flatten()
}

/// Whether a payload carries the attempt's finish reason.
pub fn carries_finish(api: Api, v: &Value) -> bool {
    match api {
        Api::OpenAiChat => v
            .get("choices")
            .and_then(Value::as_array)
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.get("finish_reason").is_some_and(|f| !f.is_null()))
            }),
        Api::OpenAiResponses => matches!(
            v.get("type").and_then(Value::as_str),
            Some("response.completed" | "response.incomplete" | "response.failed")
        ),
        Api::Anthropic => match v.get("type").and_then(Value::as_str) {
            Some("message_delta") => v
                .pointer("/delta/stop_reason")
                .is_some_and(|s| !s.is_null()),
            Some("message_stop") => true,
            _ => false,
        },
        Api::Gemini => v
            .get("candidates")
            .and_then(Value::as_array)
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.get("finishReason").is_some_and(|f| !f.is_null()))
            }),
    }
}

/// The text a payload streams, and where it sits (a JSON pointer).
fn text_of(api: Api, v: &Value) -> Option<(String, String)> {
    let at = |p: &str| {
        v.pointer(p)
            .and_then(Value::as_str)
            .map(|s| (p.to_owned(), s.to_owned()))
    };
    match api {
        Api::OpenAiChat => at("/choices/0/delta/content"),
        Api::OpenAiResponses => (v.get("type").and_then(Value::as_str)
            == Some("response.output_text.delta"))
        .then(|| at("/delta"))
        .flatten(),
        Api::Anthropic => (v.pointer("/delta/type").and_then(Value::as_str) == Some("text_delta"))
            .then(|| at("/delta/text"))
            .flatten(),
        Api::Gemini => {
            let parts = v
                .pointer("/candidates/0/content/parts")
                .and_then(Value::as_array)?;
            parts.iter().enumerate().rev().find_map(|(i, p)| {
                if p.get("thought").and_then(Value::as_bool) == Some(true) {
                    return None;
                }
                let t = p.get("text").and_then(Value::as_str)?;
                Some((
                    format!("/candidates/0/content/parts/{i}/text"),
                    t.to_owned(),
                ))
            })
        }
    }
}

/// Where to shorten `text` so it ends inside a word: the byte length to keep (half of its
/// last word of two or more letters, rounded up), or `None` when it has no such word.
pub fn mid_word_len(text: &str) -> Option<usize> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut end = chars.len();
    while end > 0 {
        // The last run of alphanumerics ending at or before `end`.
        let mut e = end;
        while e > 0 && !chars[e - 1].1.is_alphanumeric() {
            e -= 1;
        }
        let mut s = e;
        while s > 0 && chars[s - 1].1.is_alphanumeric() {
            s -= 1;
        }
        if e - s >= 2 {
            let keep = s + (e - s).div_ceil(2).min(e - s - 1).max(1);
            return Some(chars.get(keep).map_or(text.len(), |c| c.0));
        }
        end = s;
    }
    None
}

fn mid_word(api: Api, frame: &Frame, v: &Value) -> Decision {
    if carries_finish(api, v) {
        return Decision::Forward;
    }
    let Some((pointer, text)) = text_of(api, v) else {
        return Decision::Forward;
    };
    let Some(keep) = mid_word_len(&text) else {
        return Decision::Forward;
    };
    let short = &text[..keep];
    // Rewrite the payload in place when the text appears as serde writes it (key order and
    // everything else kept); otherwise rebuild it.
    let data = match (serde_json::to_string(&text), serde_json::to_string(short)) {
        (Ok(old), Ok(new)) if frame.data.matches(&old).count() == 1 => {
            frame.data.replacen(&old, &new, 1)
        }
        _ => {
            let mut w = v.clone();
            if let Some(slot) = w.pointer_mut(&pointer) {
                *slot = Value::String(short.to_owned());
            }
            w.to_string()
        }
    };
    Decision::CutAfter {
        bytes: replace_payload(frame, &data),
        data,
    }
}

/// The frame's bytes with its payload replaced by `data`.
fn replace_payload(frame: &Frame, data: &str) -> Vec<u8> {
    let raw = String::from_utf8_lossy(&frame.bytes);
    if raw.matches(frame.data.as_str()).count() == 1 {
        return raw.replacen(frame.data.as_str(), data, 1).into_bytes();
    }
    // A payload split over several `data:` lines: write the event anew.
    let mut out = String::new();
    if let Some(e) = &frame.event {
        out.push_str("event: ");
        out.push_str(e);
        out.push('\n');
    }
    out.push_str("data: ");
    out.push_str(data);
    out.push_str("\n\n");
    out.into_bytes()
}

/// The provider's mid-stream error event, as its SDKs expect it (see
/// `../shared/notes/stream-formats.md`), framed for the stream.
pub fn error_event(api: Api, framing: Framing) -> (Vec<u8>, String) {
    const WHO: &str = "injected by retryscope proxy";
    let (event, data) = match api {
        Api::OpenAiChat => (
            None,
            serde_json::json!({"error": {"message": format!("The server had an error while processing your request ({WHO})"), "type": "server_error", "param": null, "code": null}}),
        ),
        Api::OpenAiResponses => (
            Some("error"),
            serde_json::json!({"type": "error", "code": "server_error", "message": format!("The server had an error processing your request ({WHO})"), "param": null}),
        ),
        Api::Anthropic => (
            Some("error"),
            serde_json::json!({"type": "error", "error": {"type": "overloaded_error", "message": format!("Overloaded ({WHO})")}}),
        ),
        Api::Gemini => (
            None,
            serde_json::json!({"error": {"code": 503, "message": format!("The model is overloaded. Please try again later. ({WHO})"), "status": "UNAVAILABLE"}}),
        ),
    };
    let data = data.to_string();
    let bytes = match framing {
        // `@google/genai` (gemini-cli) takes an error in an SSE stream only as the bare JSON
        // object, not framed as `data:` (found with the real client: e2e/proxy).
        Framing::Sse if api == Api::Gemini => data.clone().into_bytes(),
        Framing::Sse => {
            let mut s = String::new();
            if let Some(e) = event {
                s.push_str("event: ");
                s.push_str(e);
                s.push('\n');
            }
            s.push_str("data: ");
            s.push_str(&data);
            s.push_str("\n\n");
            s.into_bytes()
        }
        Framing::JsonArray => format!(",\r\n{data}\r\n]").into_bytes(),
        Framing::Whole => data.clone().into_bytes(),
    };
    (bytes, data)
}

#[cfg(test)]
mod tests;
