//! What a checkpoint keeps of the ingest path's streams, so that a stream read on after a
//! restore (a cluster partition taken over by another collector) decodes as if it had never
//! stopped: each stream whose format is known and whose decoder keeps state (a provider SSE
//! stream: the call in progress, how many calls it has had, which names its next turn).
//!
//! Owns: [`StreamState`], [`Ingest::stream_states`] and [`Ingest::resume_streams`]. Decoders
//! that keep no state here (the coding agents' own formats) start afresh, and lines held
//! while a stream's format is still being sniffed are not kept.

use super::{Decoding, Ingest, Source};
use crate::decode::Format;

/// One stream's decoder state, as a checkpoint keeps it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StreamState {
    /// Where the stream comes from ([`Source::as_str`]).
    pub source: String,
    /// Its name.
    pub name: String,
    /// The format it is read as.
    pub format: Format,
    /// Lines read from it.
    pub lines: u64,
    /// Its decoder's state.
    pub decoder: serde_json::Value,
}

impl Ingest {
    /// The state of every open stream whose decoder keeps one, for a checkpoint.
    pub fn stream_states(&self) -> Vec<StreamState> {
        self.streams
            .iter()
            .flatten()
            .filter_map(|s| match (&s.decoding, s.format) {
                (Decoding::Provider(d), Some(format)) => Some(StreamState {
                    source: s.source.as_str().to_owned(),
                    name: s.name.clone(),
                    format,
                    lines: s.lines,
                    decoder: d.state()?,
                }),
                _ => None,
            })
            .collect()
    }

    /// Open the streams `states` name, each read as its format from where its decoder was
    /// (sharded, a stream another shard reads is only opened, as that shard's); the number
    /// that could not be resumed (an unknown source, a state that does not fit its format's
    /// decoder: those streams start afresh).
    pub fn resume_streams(&mut self, states: Vec<StreamState>) -> usize {
        let mut failed = 0;
        for st in states {
            let Some(source) = Source::ALL.into_iter().find(|s| s.as_str() == st.source) else {
                failed += 1;
                continue;
            };
            let id = self.stream_as(source, &st.name, st.format);
            let Some(stream) = self.streams.get_mut(id.0 as usize).and_then(Option::as_mut) else {
                failed += 1;
                continue;
            };
            stream.lines = st.lines;
            // The previous reader told the format already.
            stream.announced = true;
            let resumed = match &mut stream.decoding {
                Decoding::Provider(d) => d.resume(st.decoder),
                // Another shard's to read (each worker is handed every stream's state).
                Decoding::Elsewhere => true,
                _ => false,
            };
            if !resumed {
                failed += 1;
            }
        }
        failed
    }
}
