//! gemini-cli recorded `.responses` files (`RecordingContentGenerator` / `FakeContentGenerator`).
//!
//! Owns: one JSON line per recorded model call, `{"method", "response"}`. A
//! `generateContentStream` line holds the call's chunks (an array) and a `generateContent`
//! line a single response; each line is one model call, hence its own turn (`<name>`,
//! `<name>#2`, ...). Chunks go through the [`super::gemini`] decoder. `countTokens` and
//! `embedContent` lines are not model turns and are skipped. The recorder strips `responseId`
//! and `modelVersion`, so splices inside a call cannot be seen here.

use serde::Deserialize;
use serde_json::Value;

use super::gemini;
use super::provider::{Ctx, StreamDecoder, parse, utf8};
use super::{BadLineReason, DecodeError, SkipCounts};
use crate::event::Event;

#[derive(Deserialize)]
struct Line<'a> {
    #[serde(borrow)]
    method: std::borrow::Cow<'a, str>,
    #[serde(default)]
    response: Value,
}

/// Decoder for one `.responses` file.
pub(crate) struct Decoder {
    ctx: Ctx,
    skips: SkipCounts,
}

impl Decoder {
    /// A decoder whose turns are named after the stream.
    pub(crate) fn new(ctx: Ctx) -> Self {
        Decoder {
            ctx,
            skips: SkipCounts::default(),
        }
    }
}

impl StreamDecoder for Decoder {
    fn push_line(&mut self, line: &[u8], out: &mut Vec<Event<'static>>) -> Result<(), DecodeError> {
        let text = utf8(line)?.trim();
        if text.is_empty() {
            return Ok(());
        }
        let line: Line<'_> = parse(text)?;
        let chunks: Vec<&Value> = match (line.method.as_ref(), &line.response) {
            ("generateContentStream", Value::Array(a)) => a.iter().collect(),
            ("generateContent", v @ Value::Object(_)) => vec![v],
            ("generateContentStream" | "generateContent", _) => {
                return Err(DecodeError::new(
                    BadLineReason::InvalidValue,
                    "`response` has the wrong shape for its method",
                ));
            }
            ("countTokens" | "embedContent", _) => return Ok(()),
            _ => {
                self.skips.unknown_types += 1;
                return Ok(());
            }
        };
        let mut call = gemini::Decoder::default();
        let mut result = Ok(());
        for chunk in chunks {
            if let Err(e) = call.chunk_value(&mut self.ctx, chunk, out) {
                result = Err(e);
            }
        }
        call.end_call(&self.ctx, out);
        self.skips.add(super::provider::ChunkDecoder::skips(&call));
        result
    }

    fn finish(&mut self, _out: &mut Vec<Event<'static>>) {}

    fn skips(&self) -> SkipCounts {
        self.skips
    }

    fn state(&self) -> Option<serde_json::Value> {
        super::state::state_of(&(&self.ctx, self.skips))
    }

    fn resume(&mut self, state: serde_json::Value) -> bool {
        let mut s = (self.ctx.clone(), self.skips);
        if !super::state::resume_into(&mut s, state) {
            return false;
        }
        self.ctx.resume(s.0);
        self.skips = s.1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::super::Format;
    use super::super::provider::stream_decoder;
    use crate::event::EventKind;

    #[test]
    fn each_line_is_a_model_call() {
        let mut d = stream_decoder(Format::GeminiCliResponses, "f").expect("decoder");
        let mut out = Vec::new();
        for line in [
            r#"{"method":"generateContent","response":{"candidates":[{"content":{"parts":[{"text":"x"}]},"finishReason":"STOP"}]}}"#,
            r#"{"method":"countTokens","response":{"totalTokens":3}}"#,
            r#"{"method":"generateContentStream","response":[{"candidates":[{"content":{"parts":[{"functionCall":{"name":"read_file","args":{"p":1}}}]},"finishReason":"STOP"}]}]}"#,
            r#"{"method":"generateContentStream","response":[{"candidates":[{"content":{"parts":[{"text":"cut"}]}}]}]}"#,
        ] {
            d.push_line(line.as_bytes(), &mut out).expect("line");
        }
        d.finish(&mut out);
        let turns: Vec<(&str, &str)> = out
            .iter()
            .map(|e| (e.turn.as_ref(), e.kind.type_name()))
            .collect();
        assert_eq!(
            turns,
            [
                ("f", "turn_start"),
                ("f", "text"),
                ("f", "finish"),
                ("f#2", "turn_start"),
                ("f#2", "tool_call"),
                ("f#2", "finish"),
                ("f#3", "turn_start"),
                ("f#3", "text"),
            ]
        );
        assert!(matches!(&out[4].kind, EventKind::ToolCall { id, .. } if id == "fc-0"));
        // gemini-cli's own recording: every turn names it as the agent.
        for e in &out {
            if let EventKind::TurnStart { agent, .. } = &e.kind {
                assert_eq!(agent.as_deref(), Some("gemini-cli"));
            }
        }
    }
}
