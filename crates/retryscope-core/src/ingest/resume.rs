//! What a checkpoint keeps of the ingest path's streams, so that a stream read on after a
//! restore (`run` after a kill -9, a cluster partition taken over by another collector)
//! decodes as if it had never stopped: each stream whose decoder keeps state (a provider SSE
//! stream's call in progress and how many calls it has had, which names its next turn; an
//! agent output's thread or session), and each stream whose format is still being sniffed
//! (the lines held until a record decides it, not yet decoded).
//!
//! Owns: [`StreamState`], [`Ingest::stream_states`] and [`Ingest::resume_streams`]. A stream
//! refused as a lookalike is not kept (after a restore it is sniffed again).

use super::{Decoding, Held, Ingest, Source};
use crate::decode::Format;
use crate::reorder::Place;

/// One stream's state, as a checkpoint keeps it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StreamState {
    /// Where the stream comes from ([`Source::as_str`]).
    pub source: String,
    /// Its name.
    pub name: String,
    /// The format it is read as (`None`: still being sniffed).
    #[serde(default)]
    pub format: Option<Format>,
    /// Lines read from it.
    pub lines: u64,
    /// Its decoder's state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decoder: Option<serde_json::Value>,
    /// Lines held while its format is sniffed (not decoded yet), in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sniffing: Vec<SniffedLine>,
}

/// A line held while its stream's format is sniffed.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SniffedLine {
    /// Its line number.
    pub number: u64,
    /// Where it can be read again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub place: Option<Place>,
    /// Its bytes.
    pub line: LineBytes,
}

/// A line's bytes: as text when they are UTF-8 (most are), else as numbers.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
pub enum LineBytes {
    /// UTF-8.
    Text(String),
    /// Anything else.
    Bytes(Vec<u8>),
}

impl LineBytes {
    fn of(bytes: &[u8]) -> Self {
        match std::str::from_utf8(bytes) {
            Ok(text) => LineBytes::Text(text.to_owned()),
            Err(_) => LineBytes::Bytes(bytes.to_vec()),
        }
    }

    fn into_bytes(self) -> Vec<u8> {
        match self {
            LineBytes::Text(t) => t.into_bytes(),
            LineBytes::Bytes(b) => b,
        }
    }
}

impl Ingest {
    /// The state of every open stream that has one, for a checkpoint.
    pub fn stream_states(&self) -> Vec<StreamState> {
        self.streams
            .iter()
            .flatten()
            .filter_map(|s| {
                let (decoder, sniffing) = match &s.decoding {
                    Decoding::Provider(d) => (Some(d.state()?), Vec::new()),
                    Decoding::Sniffing(held) if !held.lines.is_empty() => {
                        let lines = held.lines.iter().map(|(number, place, bytes)| SniffedLine {
                            number: *number,
                            place: *place,
                            line: LineBytes::of(bytes),
                        });
                        (None, lines.collect())
                    }
                    _ => return None,
                };
                Some(StreamState {
                    source: s.source.as_str().to_owned(),
                    name: s.name.clone(),
                    format: s.format,
                    lines: s.lines,
                    decoder,
                    sniffing,
                })
            })
            .collect()
    }

    /// Open the streams `states` name, each from where it was: read as its format from its
    /// decoder's state, or still sniffing with its held lines (sharded, a stream another
    /// shard reads is only opened, as that shard's); the number that could not be resumed (an
    /// unknown source, a state that does not fit its format's decoder: those streams start
    /// afresh).
    pub fn resume_streams(&mut self, states: Vec<StreamState>) -> usize {
        let mut failed = 0;
        for st in states {
            let Some(source) = Source::ALL.into_iter().find(|s| s.as_str() == st.source) else {
                failed += 1;
                continue;
            };
            let id = self.stream_as(source, &st.name, st.format.unwrap_or(Format::Auto));
            let Some(stream) = self.streams.get_mut(id.0 as usize).and_then(Option::as_mut) else {
                failed += 1;
                continue;
            };
            stream.lines = st.lines;
            let resumed = match (&mut stream.decoding, st.decoder) {
                (Decoding::Provider(d), Some(state)) => d.resume(state),
                (Decoding::Sniffing(held), None) => {
                    refill(held, st.sniffing);
                    true
                }
                // Another shard's to read (each worker is handed every stream's state).
                (Decoding::Elsewhere, _) => true,
                _ => false,
            };
            if resumed {
                // The previous reader told the format already.
                stream.announced = stream.format.is_some();
            } else {
                failed += 1;
            }
        }
        failed
    }
}

/// Hold `lines` again, as sniffing held them.
fn refill(held: &mut Held, lines: Vec<SniffedLine>) {
    for l in lines {
        let bytes = l.line.into_bytes();
        held.head.extend_from_slice(&bytes);
        held.head.push(b'\n');
        held.lines.push((l.number, l.place, bytes));
    }
}
