//! One stream of the ingest path: its state (name, line count, format, how it is decoded and
//! which shard reads it) and the decoding of one of its lines, with the blank-line policy.
//! [`super::Ingest`] owns the streams and decides their formats; this module owns what a
//! stream is and what one line of it does.

use std::sync::Arc;

use super::{Note, Source};
use crate::correlate::Output;
use crate::decode::detect::Lookalike;
use crate::decode::{self, BadLineReason, DecodeError, Format, StreamDecoder};
use crate::pipeline::Pipeline;
use crate::turn_route::{Route, Routing, Shard};

/// Lines held while a stream's format is not known yet.
#[derive(Default)]
pub(super) struct Held {
    /// Each line with its number and where it can be read again
    /// ([`super::Ingest::place_next_line`]).
    pub(super) lines: Vec<(u64, Option<crate::reorder::Place>, Vec<u8>)>,
    pub(super) head: Vec<u8>,
    /// No line arrived since the last [`super::Ingest::settle_idle`].
    pub(super) idle: bool,
}

pub(super) enum Decoding {
    Sniffing(Held),
    Native,
    Provider(Box<dyn StreamDecoder>),
    Refused(Lookalike),
    /// Read whole by another shard ([`Routing::Whole`]): its lines are neither decoded nor
    /// counted here.
    Elsewhere,
}

pub(super) struct Stream {
    pub(super) name: String,
    /// The name, shared with the turns it opens ([`Pipeline::set_origin`]).
    pub(super) origin: Arc<str>,
    /// Its decoder has said its input records every tool execution, and the correlator
    /// has been told ([`crate::decode::StreamDecoder::records_executions`]): at which of the
    /// correlator's epochs (`Correlator::exec_inputs_epoch`: told again once it moved).
    pub(super) records_executions: Option<u64>,
    /// Its line numbers count from the top of the input
    /// ([`super::Ingest::without_origin_lines`]).
    pub(super) lines_known: bool,
    pub(super) source: Source,
    pub(super) lines: u64,
    pub(super) format: Option<Format>,
    /// How shards share it, once its format is known.
    pub(super) routing: Option<Routing>,
    /// Its format was told in a [`Note::Format`].
    pub(super) announced: bool,
    pub(super) decoding: Decoding,
    /// When its last line arrived (ms; the logical clock where the caller gives none): the
    /// most recently active streams' states are the ones a checkpoint keeps.
    pub(super) last_ms: i64,
}

impl Stream {
    /// Tell the correlator, once, when its decoder says its input records every tool
    /// execution: at once for an agent's output format (a stream created, or resumed, with
    /// its format known), at the first record that shows it for OTLP.
    pub(super) fn note_records_executions(&mut self, pipeline: &mut Pipeline) {
        let epoch = pipeline.correlator().exec_inputs_epoch();
        if self.records_executions != Some(epoch)
            && matches!(&self.decoding, Decoding::Provider(d) if d.records_executions())
        {
            pipeline.input_records_executions(&self.origin);
            self.records_executions = Some(pipeline.correlator().exec_inputs_epoch());
        }
    }

    /// The route its turns keep (0: native lines, routed by turn).
    pub(super) fn route(&self) -> Route {
        match self.routing {
            Some(Routing::Whole(route)) => route,
            _ => 0,
        }
    }
}

/// Whether this ingest path (of `shard`, when sharded) reads a stream of `routing`: a whole
/// stream is read by its route's shard only; native lines (and a stream still sniffing) by
/// every shard, each decoding its own turns' lines.
pub(super) fn reads(shard: Option<Shard>, routing: Option<Routing>) -> bool {
    match (shard, routing) {
        (Some(s), Some(Routing::Whole(route))) => s.owns_route(route),
        _ => true,
    }
}

/// Whether this ingest path gives a stream's own notes (its format, its refusal, lines no turn
/// owns): the shard that reads it whole, else shard 0.
pub(super) fn gives_notes(shard: Option<Shard>, routing: Option<Routing>) -> bool {
    match (shard, routing) {
        (None, _) => true,
        (Some(s), Some(Routing::Whole(route))) => s.owns_route(route),
        (Some(s), _) => s.primary(),
    }
}

/// The decoding of a stream of `format` without a session joiner.
pub(super) fn plain_decoding(format: Format, name: &str) -> Decoding {
    match decode::stream_decoder(format, &stream_name(name)) {
        Some(decoder) => Decoding::Provider(decoder),
        None => Decoding::Native,
    }
}

/// The name a provider stream's turn ids are seeded from: the file name without its folder.
fn stream_name(name: &str) -> String {
    std::path::Path::new(name)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| name.to_owned())
}

/// The source of turns joined from a gemini-cli session's telemetry and stream-json (the
/// session id tells which).
pub(super) fn joined_origin() -> Arc<str> {
    Arc::from("gemini-cli session (telemetry and stream-json joined)")
}

/// Decode and correlate one line of `stream` (its number, and where it can be read again),
/// and tell its fate. Sharded, a native line is decoded by its turn's shard only; a stream
/// read whole is only ever handed to its shard.
#[allow(clippy::too_many_arguments)]
pub(super) fn decode_line(
    pipeline: &mut Pipeline,
    shard: Option<Shard>,
    stream: &mut Stream,
    (number, place): (u64, Option<crate::reorder::Place>),
    bytes: &[u8],
    arrival_ms: Option<i64>,
    out: &mut Vec<Output>,
    note: &mut dyn FnMut(Note<'_>),
) {
    let route = stream.route();
    pipeline.set_origin(&stream.origin, stream.lines_known.then_some(number), route);
    let outcome = match &mut stream.decoding {
        Decoding::Native if bytes.iter().all(u8::is_ascii_whitespace) => return,
        Decoding::Native
            if shard
                .is_some_and(|s| crate::turn_route::shard_of_line(bytes, s.count) != s.index) =>
        {
            return;
        }
        Decoding::Native => {
            let at = crate::reorder::LineAt {
                source: stream.source,
                number,
            };
            if pipeline.defer_line(bytes, arrival_ms, place, at, out) {
                return; // its fate is told once it is decoded, at its turn's release
            }
            pipeline.native_line_at(bytes, arrival_ms, place, out)
        }
        Decoding::Provider(decoder) => {
            let outcome = pipeline.stream_line(decoder.as_mut(), bytes, arrival_ms, out);
            stream.note_records_executions(pipeline);
            outcome
        }
        Decoding::Refused(_) if bytes.iter().all(u8::is_ascii_whitespace) => return,
        Decoding::Refused(lookalike) => {
            pipeline.refused_line();
            Err(DecodeError::new(
                BadLineReason::UnknownFormat,
                format!(
                    "not decoded: the stream borrows {} names without its shape",
                    lookalike.like_name()
                ),
            ))
        }
        Decoding::Sniffing(_) | Decoding::Elsewhere => return,
    };
    note(Note::Line {
        source: stream.source,
        name: &stream.name,
        number,
        outcome,
    });
}
