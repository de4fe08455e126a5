//! What the ingest path tells its callers ([`Note`]: a line's fate, a stream's format or
//! refusal) and the names it tells them by: where a stream comes from ([`Source`], a metric
//! label) and its handle ([`StreamId`]).

use crate::decode::detect::Lookalike;
use crate::decode::{DecodeError, Format};
use crate::pipeline::LineOutcome;

/// Where a stream comes from: a bounded set, used as a metric label by the sinks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// Tailed or named files.
    File,
    /// Standard input.
    Stdin,
    /// The built-in demo fleet.
    Demo,
    /// Lines shipped over NATS JetStream by `retryscope ship`.
    Nats,
    /// OpenTelemetry records received over OTLP (`run --otlp-listen`).
    Otlp,
    /// Attempts seen on the wire by `retryscope proxy`.
    Proxy,
}

impl Source {
    /// Every source, for pre-registering series.
    pub const ALL: [Source; 6] = [
        Source::File,
        Source::Stdin,
        Source::Demo,
        Source::Nats,
        Source::Otlp,
        Source::Proxy,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::File => "file",
            Source::Stdin => "stdin",
            Source::Demo => "demo",
            Source::Nats => "nats",
            Source::Otlp => "otlp",
            Source::Proxy => "proxy",
        }
    }
}

/// A stream's handle, valid until [`Ingest::end`](super::Ingest::end).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StreamId(pub(super) u32);

impl StreamId {
    /// The handle as a number, for a wrapper that hands out handles of its own (the live
    /// engine's shards) and maps them to each inner ingest path's.
    pub fn index(self) -> u32 {
        self.0
    }

    /// A handle from [`StreamId::index`]; only meaningful to whoever handed it out.
    pub fn from_index(index: u32) -> Self {
        StreamId(index)
    }
}

/// What the ingest path tells its caller, as it happens.
#[derive(Debug)]
pub enum Note<'a> {
    /// A line's fate: an event, a skipped record, or a bad line with its reason.
    Line {
        /// The stream.
        source: Source,
        /// The stream's name (a path, `<stdin>`).
        name: &'a str,
        /// The line's number in the stream (1-based; counted from where reading started).
        number: u64,
        /// What became of it.
        outcome: Result<LineOutcome, DecodeError>,
    },
    /// A stream's format was decided (sniffed or forced), before its first line is decoded.
    /// A forced format is told with the stream's first line.
    Format {
        /// The stream.
        source: Source,
        /// The stream's name.
        name: &'a str,
        /// The format.
        format: Format,
        /// Forced by the caller (`--format`, the OTLP receiver), not sniffed.
        forced: bool,
    },
    /// Lines held undecoded until their turn's release (`crate::reorder`) that decoded
    /// well, told together by source and outcome; those that did not are told one by one
    /// as [`Note::Line`]s.
    Decoded {
        /// Their streams' source.
        source: Source,
        /// What became of them.
        outcome: LineOutcome,
        /// How many.
        lines: u64,
    },
    /// Turns held to settle (`crate::reorder`) released before they were quiet, because the
    /// hold was full: a late part of one (another host's half) is correlated after the rest,
    /// out of time order or after the turn closed.
    ReleasedEarly {
        /// How many turns.
        turns: u64,
        /// Their events and lines.
        events: u64,
    },
    /// Sessions' streams parked for quiet ([`super::Ingest::park`]) were forgotten to keep
    /// within [`super::MAX_PARKED`], the longest parked first: one that sends again starts
    /// afresh (its next turn named as its first).
    Forgotten {
        /// How many sessions.
        sessions: u64,
    },
    /// A stream was refused: it borrows a provider format's names without its shape. Its
    /// lines are counted as bad lines (`unknown_format`), never decoded.
    Refused {
        /// The stream.
        source: Source,
        /// The stream's name.
        name: &'a str,
        /// What it looks like, and why it is not that.
        lookalike: &'a Lookalike,
    },
}
