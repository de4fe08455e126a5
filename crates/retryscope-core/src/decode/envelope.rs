//! The native `provider_chunk` envelope: raw provider chunks a client logged with its own turn
//! id and (optionally) attempt number.
//!
//! Owns: routing each chunk to a provider chunk decoder kept per (turn, client attempt, provider), so
//! interleaved turns and client-tagged attempts never share state; and keeping attempt numbers
//! monotonic when a decoder finds a splice inside a client attempt (the splice takes the next
//! number, and later client attempts of that turn shift up by as much). The envelope's `ts` is
//! the default time; a chunk's own time wins.

use std::collections::{BTreeMap, HashMap};

use super::native::ProviderChunk;
use super::provider::{ChunkDecoder, Ctx};
use super::{DecodeError, SkipCounts, anthropic, gemini, openai_chat, openai_responses};
use crate::event::Event;

struct State {
    ctx: Ctx,
    decoder: Box<dyn ChunkDecoder>,
}

/// Decodes `provider_chunk` envelope lines.
#[derive(Default)]
pub struct EnvelopeDecoder {
    states: BTreeMap<(String, Option<u32>, String), State>,
    /// Attempts added by splices, per turn.
    offsets: HashMap<String, u32>,
    skips: SkipCounts,
}

fn decoder_for(provider: &str) -> Option<(&'static str, Box<dyn ChunkDecoder>)> {
    Some(match provider {
        "openai.chat" | "openai" => ("openai", Box::new(openai_chat::Decoder::default())),
        "openai.responses" => ("openai", Box::new(openai_responses::Decoder::default())),
        "anthropic" => ("anthropic", Box::new(anthropic::Decoder::default())),
        "gemini" => ("gemini", Box::new(gemini::Decoder::default())),
        _ => return None,
    })
}

impl EnvelopeDecoder {
    /// A decoder with no state.
    pub fn new() -> Self {
        Self::default()
    }

    /// Decode one envelope chunk.
    pub fn push(
        &mut self,
        chunk: &ProviderChunk<'_>,
        out: &mut Vec<Event<'static>>,
    ) -> Result<(), DecodeError> {
        let key = (
            chunk.turn.to_string(),
            chunk.attempt,
            chunk.provider.to_string(),
        );
        if !self.states.contains_key(&key) {
            let Some((provider, decoder)) = decoder_for(&chunk.provider) else {
                self.skips.unknown_types += 1;
                return Ok(());
            };
            let offset = self.offsets.get(key.0.as_str()).copied().unwrap_or(0);
            let base = chunk.attempt.unwrap_or(0).saturating_add(offset);
            self.states.insert(
                key.clone(),
                State {
                    ctx: Ctx::fixed(&key.0, base, provider),
                    decoder,
                },
            );
        }
        let Some(state) = self.states.get_mut(&key) else {
            return Ok(());
        };
        state.ctx.set_default_ts(chunk.ts_ms);
        let before = state.ctx.attempt();
        let result = state
            .decoder
            .chunk(&mut state.ctx, None, chunk.data.get(), out);
        let added = state.ctx.attempt().saturating_sub(before);
        if added > 0 {
            *self.offsets.entry(key.0).or_insert(0) += added;
        }
        result
    }

    /// End of input: unfinished attempts stay unfinished.
    pub(crate) fn finish(&mut self, out: &mut Vec<Event<'static>>) {
        for state in self.states.values_mut() {
            state.decoder.end(&mut state.ctx, out);
        }
    }

    /// A turn ended: flush and drop its chunk decoders (a long-lived stream of envelopes, such
    /// as `retryscope proxy`'s, then holds state only for open turns). Their skip counts are
    /// kept.
    pub(crate) fn end_turn(&mut self, turn: &str, out: &mut Vec<Event<'static>>) {
        let keys: Vec<_> = self
            .states
            .range((turn.to_owned(), None, String::new())..)
            .take_while(|(k, _)| k.0 == turn)
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            if let Some(mut state) = self.states.remove(&key) {
                state.decoder.end(&mut state.ctx, out);
                self.skips.add(state.decoder.skips());
            }
        }
        self.offsets.remove(turn);
    }

    /// Whether it keeps anything for turn `turn` (a chunk decoder, or attempts a splice
    /// added), which [`EnvelopeDecoder::end_turn`] flushes: a `turn_end` line decoded later
    /// gives the same events only when it keeps nothing.
    pub(crate) fn holds_turn(&self, turn: &str) -> bool {
        if self.states.is_empty() && self.offsets.is_empty() {
            return false;
        }
        self.offsets.contains_key(turn)
            || self
                .states
                .range((turn.to_owned(), None, String::new())..)
                .next()
                .is_some_and(|(k, _)| k.0 == turn)
    }

    /// Skips so far (unknown providers, and every chunk decoder's).
    pub(crate) fn skips(&self) -> SkipCounts {
        let mut s = self.skips;
        for state in self.states.values() {
            s.add(state.decoder.skips());
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::native::{NativeLine, decode_line};
    use crate::event::EventKind;

    fn run(lines: &[&str]) -> (Vec<Event<'static>>, SkipCounts) {
        let mut d = EnvelopeDecoder::new();
        let mut out = Vec::new();
        let mut skips = SkipCounts::default();
        for line in lines {
            match decode_line(line.as_bytes(), &mut skips) {
                Ok(NativeLine::ProviderChunk(c)) => d.push(&c, &mut out).expect("chunk"),
                other => panic!("{other:?}"),
            }
        }
        d.finish(&mut out);
        (out, d.skips())
    }

    #[test]
    fn per_turn_state_and_client_attempts() {
        let (evs, _) = run(&[
            r#"{"turn":"t1","attempt":0,"ts":1000,"type":"provider_chunk","provider":"anthropic","data":{"type":"message_start","message":{"id":"m1","model":"claude"}}}"#,
            r#"{"turn":"t2","attempt":0,"ts":1001,"type":"provider_chunk","provider":"openai.chat","data":{"id":"c","created":5,"choices":[{"index":0,"delta":{"content":"x"}}]}}"#,
            r#"{"turn":"t1","attempt":0,"ts":1002,"type":"provider_chunk","provider":"anthropic","data":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}}"#,
            r#"{"turn":"t1","attempt":1,"ts":1003,"type":"provider_chunk","provider":"anthropic","data":{"type":"message_start","message":{"id":"m2","model":"claude"}}}"#,
            r#"{"turn":"t1","attempt":1,"ts":1004,"type":"provider_chunk","provider":"anthropic","data":{"type":"message_stop"}}"#,
        ]);
        let got: Vec<(&str, Option<u32>, Option<i64>, &str)> = evs
            .iter()
            .map(|e| (e.turn.as_ref(), e.attempt, e.ts_ms, e.kind.type_name()))
            .collect();
        assert_eq!(
            got,
            [
                ("t1", Some(0), Some(1000), "turn_start"),
                ("t2", Some(0), Some(5000), "turn_start"),
                ("t2", Some(0), Some(5000), "text"),
                ("t1", Some(0), Some(1002), "text"),
                ("t1", Some(1), Some(1003), "turn_start"),
                ("t1", Some(1), Some(1004), "finish"),
            ]
        );
        assert!(
            matches!(&evs[0].kind, EventKind::TurnStart { provider: Some(p), model: Some(m), .. } if p == "anthropic" && m == "claude")
        );
    }

    #[test]
    fn end_turn_drops_only_that_turns_decoders() {
        let mut d = EnvelopeDecoder::new();
        let mut out = Vec::new();
        let mut skips = SkipCounts::default();
        for line in [
            r#"{"turn":"a","attempt":0,"type":"provider_chunk","provider":"anthropic","data":{"type":"message_start","message":{"id":"m1"}}}"#,
            r#"{"turn":"a","attempt":1,"type":"provider_chunk","provider":"anthropic","data":{"type":"message_start","message":{"id":"m2"}}}"#,
            r#"{"turn":"ab","attempt":0,"type":"provider_chunk","provider":"anthropic","data":{"type":"message_start","message":{"id":"m3"}}}"#,
        ] {
            match decode_line(line.as_bytes(), &mut skips) {
                Ok(NativeLine::ProviderChunk(c)) => d.push(&c, &mut out).expect("chunk"),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(d.states.len(), 3);
        d.end_turn("a", &mut out);
        let left: Vec<&str> = d.states.keys().map(|k| k.0.as_str()).collect();
        assert_eq!(left, ["ab"]);
    }

    #[test]
    fn splice_inside_a_client_attempt_shifts_later_attempts() {
        let (evs, skips) = run(&[
            r#"{"turn":"t","attempt":0,"type":"provider_chunk","provider":"anthropic","data":{"type":"message_start","message":{"id":"m1"}}}"#,
            r#"{"turn":"t","attempt":0,"type":"provider_chunk","provider":"anthropic","data":{"type":"message_start","message":{"id":"m2"}}}"#,
            r#"{"turn":"t","attempt":1,"type":"provider_chunk","provider":"anthropic","data":{"type":"message_start","message":{"id":"m3"}}}"#,
            r#"{"turn":"t","attempt":1,"type":"provider_chunk","provider":"bard","data":{}}"#,
        ]);
        let attempts: Vec<Option<u32>> = evs.iter().map(|e| e.attempt).collect();
        assert_eq!(attempts, [Some(0), Some(1), Some(2)]);
        assert_eq!(skips.unknown_types, 1);
    }
}
