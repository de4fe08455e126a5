//! Internal events: everything the collector notices about its own work, one type per event.
//!
//! Each event's [`InternalEvent::emit`] does both halves at once: it counts the event in the
//! metrics and logs it; repeated warnings are rate-limited, per call site, by the log layer
//! every line passes (`telemetry::logs`), ours and the libraries' alike. Sources and sinks never pair a log line with a counter by
//! hand; they build an event and emit it (the shape of Vector's internal events). Names and
//! other log-derived text are escaped before they reach a log line.

use std::io;
use std::path::Path;

use crate::sink::metrics::{FamilyId, Metrics};
use crate::source::file::{FileErrorKind, TailerEvents};
use crate::source::otlp::{Outcome, Protocol, ReceiverEvents, Rejection, Signal};
use retryscope_core::decode::detect::Lookalike;
use retryscope_core::decode::{BadLineReason, DecodeError, Format};
use retryscope_core::ingest::{Note, Source};
use retryscope_core::pipeline::LineOutcome;
use retryscope_core::sanitize::display;

/// Something the collector noticed about its own work.
pub trait InternalEvent {
    /// Count it and log it.
    fn emit(self, metrics: &Metrics);
}

/// A line read from a source, before decoding.
pub struct LineRead {
    /// From where.
    pub source: Source,
}

impl InternalEvent for LineRead {
    fn emit(self, metrics: &Metrics) {
        metrics.add_events_read(self.source, 1);
    }
}

/// The ingest path's word on a line or a stream (see [`Note`]).
pub struct Ingested<'a>(pub Note<'a>);

impl InternalEvent for Ingested<'_> {
    fn emit(self, metrics: &Metrics) {
        match self.0 {
            Note::Line {
                source, outcome, ..
            } if outcome.is_ok() => match outcome {
                Ok(LineOutcome::Event) => metrics.add_events_decoded(source, 1),
                _ => metrics.add_unknown_events(source, 1),
            },
            Note::Line {
                source,
                name,
                number,
                outcome: Err(error),
            } => LineRejected {
                source,
                input: name,
                line: number,
                error: &error,
            }
            .emit(metrics),
            Note::Line { .. } => {}
            Note::Decoded {
                source,
                outcome: LineOutcome::Event,
                lines,
            } => metrics.add_events_decoded(source, lines),
            Note::Decoded { source, lines, .. } => metrics.add_unknown_events(source, lines),
            Note::Format {
                name,
                format,
                forced,
                ..
            } => FormatChosen {
                input: name,
                format,
                forced,
            }
            .emit(metrics),
            Note::ReleasedEarly { turns, events } => HoldFull { turns, events }.emit(metrics),
            Note::Forgotten { sessions } => SessionsForgotten { sessions }.emit(metrics),
            Note::Refused {
                name, lookalike, ..
            } => StreamRefused {
                input: name,
                lookalike,
            }
            .emit(metrics),
        }
    }
}

/// A partition's hold of turns waiting to settle was full: its quietest turns were released
/// before they were quiet. Counted, and logged (rate-limited): at this rate cross-host order
/// is no longer waited for.
pub struct HoldFull {
    /// Turns released early.
    pub turns: u64,
    /// Their events.
    pub events: u64,
}

impl InternalEvent for HoldFull {
    fn emit(self, metrics: &Metrics) {
        metrics.add_held_released_early(self.turns);
        tracing::warn!(
            turns = self.turns,
            events = self.events,
            bound = retryscope_core::reorder::TurnHold::MAX_EVENTS,
            "a partition's hold was full: turns released before they were quiet (a late part \
             of one is correlated after the rest); spread the load over more partitions or \
             collectors, or lower --settle-secs"
        );
    }
}

/// Quiet sessions' parked decoder states were dropped past their bound: counted and logged
/// (at most once per tenth of the bound's parkings).
pub struct SessionsForgotten {
    /// How many.
    pub sessions: u64,
}

impl InternalEvent for SessionsForgotten {
    fn emit(self, metrics: &Metrics) {
        metrics.add_sessions_forgotten(self.sessions);
        tracing::warn!(
            sessions = self.sessions,
            bound = retryscope_core::ingest::MAX_PARKED,
            bound_bytes = retryscope_core::ingest::MAX_PARKED_BYTES,
            "forgot the state of the sessions quiet the longest: one that sends again starts \
             afresh (its next model call is named as its first)"
        );
    }
}

/// A line that could not be used: counted by reason, logged with where it was.
pub struct LineRejected<'a> {
    /// From where.
    pub source: Source,
    /// The input's name.
    pub input: &'a str,
    /// Its line number in the input.
    pub line: u64,
    /// Why.
    pub error: &'a DecodeError,
}

impl InternalEvent for LineRejected<'_> {
    fn emit(self, metrics: &Metrics) {
        metrics.add_bad_lines(self.source, self.error.reason, 1);
        if self.error.reason == BadLineReason::UnknownFormat {
            return; // a refused stream's line: counted; the refusal was logged once
        }
        tracing::warn!(
            input = %display(self.input),
            line = self.line,
            error = %self.error,
            "skipped a bad line"
        );
    }
}

/// A stream was refused: it borrows a provider format's names without its shape. Its lines
/// are counted as bad lines (`unknown_format`) as they come; this logs why, once per stream
/// (and rate-limited by the log layer across streams).
pub struct StreamRefused<'a> {
    /// The input's name.
    pub input: &'a str,
    /// What it looks like, and why it is not that.
    pub lookalike: &'a Lookalike,
}

impl InternalEvent for StreamRefused<'_> {
    fn emit(self, _metrics: &Metrics) {
        tracing::error!(
            input = %display(self.input),
            looks_like = self.lookalike.like.as_str(),
            "{}",
            self.lookalike.sentence()
        );
    }
}

/// An input's format was decided.
pub struct FormatChosen<'a> {
    /// The input's name.
    pub input: &'a str,
    /// Its format.
    pub format: Format,
    /// Forced (`--format`, the OTLP receiver's streams), not sniffed.
    pub forced: bool,
}

impl InternalEvent for FormatChosen<'_> {
    fn emit(self, metrics: &Metrics) {
        if let Some(kind) = retryscope_core::coverage::InputKind::of(self.format, self.input) {
            metrics.saw_input_kind(kind);
        }
        if self.format != Format::Native && !self.forced {
            tracing::info!(
                input = %display(self.input),
                format = self.format.as_str(),
                "decoding a provider stream"
            );
        }
    }
}

/// `retryscope proxy` cut a stream on purpose (`--inject`).
pub struct ProxyCut<'a> {
    /// Where: `after-tool-call`, `mid-word`, `before-finish`.
    pub point: &'static str,
    /// How: `reset`, `eof`, `error`.
    pub how: &'static str,
    /// The request whose stream was cut.
    pub target: Option<&'a crate::proxy::InjectTarget>,
}

impl ProxyCut<'_> {
    /// Zero series of every cut point and way, with and without tools (a counter Prometheus
    /// first sees at 1 shows no increase).
    pub fn preregister(metrics: &Metrics) {
        let points = crate::proxy::Point::ALL.map(crate::proxy::Point::as_str);
        let hows = crate::proxy::How::ALL.map(crate::proxy::How::as_str);
        metrics.preregister(FamilyId::ProxyCuts, &[&points, &hows, &["true", "false"]]);
    }
}

impl InternalEvent for ProxyCut<'_> {
    fn emit(self, metrics: &Metrics) {
        let tools = self.target.is_some_and(|t| t.tools);
        metrics.inc_proxy_cut(self.point, self.how, tools);
        let t = self.target;
        tracing::info!(
            point = self.point,
            how = self.how,
            method = t.map_or("", |t| t.method.as_str()),
            path = %display(t.map_or("", |t| t.path.as_str())),
            model = %display(t.and_then(|t| t.model.as_deref()).unwrap_or("")),
            tools_offered = tools,
            "proxy: injected a cut"
        );
    }
}

/// `retryscope proxy` could not reach its upstream, or the upstream broke mid-body (the
/// details are logged where it happened, without secrets).
pub struct ProxyUpstreamError;

impl InternalEvent for ProxyUpstreamError {
    fn emit(self, metrics: &Metrics) {
        metrics.inc_proxy_upstream_errors();
    }
}

/// `retryscope proxy` passed a non-streaming answer larger than its frame cap to the client
/// without observing it (never buffered whole).
pub struct ProxyAnswerUnobserved;

impl InternalEvent for ProxyAnswerUnobserved {
    fn emit(self, metrics: &Metrics) {
        metrics.inc_proxy_unobserved();
        tracing::warn!(
            cap_bytes = crate::proxy::MAX_FRAME,
            "proxy: a non-streaming answer outgrew the cap; it is passed to the client unobserved"
        );
    }
}

/// `retryscope proxy` dropped lines its engine no longer takes (the engine stopped); the
/// responses they describe were proxied all the same.
pub struct ProxyFeedLost {
    /// How many lines.
    pub lines: u64,
}

impl InternalEvent for ProxyFeedLost {
    fn emit(self, metrics: &Metrics) {
        metrics.inc_proxy_feed_lost(self.lines);
        tracing::warn!(
            lines = self.lines,
            "proxy: the engine takes no more lines; these are lost (requests are still proxied)"
        );
    }
}

/// A checkpoint was written.
pub struct CheckpointWritten;

impl InternalEvent for CheckpointWritten {
    fn emit(self, metrics: &Metrics) {
        metrics.inc_checkpoint_writes();
    }
}

/// A checkpoint kept the states of the most recently active streams only
/// ([`retryscope_core::ingest::MAX_STREAM_STATES`]): after a restore the others start their
/// decoders afresh. A gauge (`retryscope_checkpoint_stream_states_left_out`, set at every
/// checkpoint) and a log line (rate-limited); the checkpoint is written.
pub struct StreamStatesLeftOut {
    /// Streams whose state was left out.
    pub left_out: usize,
}

impl InternalEvent for StreamStatesLeftOut {
    fn emit(self, metrics: &Metrics) {
        metrics.set_stream_states_left_out(self.left_out);
        if self.left_out > 0 {
            tracing::warn!(
                left_out = self.left_out,
                kept = retryscope_core::ingest::MAX_STREAM_STATES,
                "the checkpoint keeps the decoder states of the most recently active streams \
                 only: after a restart the others start afresh"
            );
        }
    }
}

/// A checkpoint could not be written (or the findings it covers could not be synced).
pub struct CheckpointFailed<'a> {
    /// What failed.
    pub what: &'static str,
    /// Why.
    pub error: &'a dyn std::fmt::Display,
}

impl InternalEvent for CheckpointFailed<'_> {
    fn emit(self, metrics: &Metrics) {
        metrics.inc_checkpoint_failures();
        tracing::warn!(error = %self.error, "{}; checkpoint skipped", self.what);
    }
}

/// An OTLP export request was refused (busy, too large, malformed, unauthorized, ...):
/// counted by signal, protocol and outcome, logged (rate-limited) with the reason.
pub struct OtlpRequestRejected<'a> {
    /// `logs`, `traces`, `metrics`.
    pub signal: &'static str,
    /// `http_json`, `http_protobuf`, `grpc`.
    pub protocol: &'static str,
    /// Why, as a label value.
    pub outcome: &'static str,
    /// Why, in words (sent to the client too).
    pub message: &'a str,
}

impl InternalEvent for OtlpRequestRejected<'_> {
    fn emit(self, metrics: &Metrics) {
        metrics.otlp_request(self.signal, self.protocol, self.outcome, 0);
        tracing::warn!(
            signal = self.signal,
            protocol = self.protocol,
            outcome = self.outcome,
            reason = %display(self.message),
            "refused an OTLP request"
        );
    }
}

/// The OTLP receiver's events ([`ReceiverEvents`]): an accepted request and its records
/// counted, a refused one counted and logged ([`OtlpRequestRejected`]).
#[derive(Debug, Clone)]
pub struct OtlpReport {
    /// Where counts go.
    pub metrics: std::sync::Arc<Metrics>,
}

impl OtlpReport {
    /// Zero series of the requests accepted per signal and protocol (refusals appear when
    /// they happen) and of the records per signal.
    pub fn preregister(metrics: &Metrics) {
        let signals = Signal::ALL.map(Signal::as_str);
        let protocols = Protocol::ALL.map(Protocol::as_str);
        let accepted = [Outcome::Accepted.as_str()];
        metrics.preregister(FamilyId::OtlpReceived, &[&signals, &protocols, &accepted]);
        metrics.preregister(FamilyId::OtlpRecords, &[&signals]);
    }
}

impl ReceiverEvents for OtlpReport {
    fn accepted(&self, signal: Signal, protocol: Protocol, items: u64) {
        let accepted = Outcome::Accepted.as_str();
        self.metrics
            .otlp_request(signal.as_str(), protocol.as_str(), accepted, items);
    }

    fn refused(&self, signal: Signal, protocol: Protocol, rejection: &Rejection) {
        OtlpRequestRejected {
            signal: signal.as_str(),
            protocol: protocol.as_str(),
            outcome: rejection.outcome.as_str(),
            message: &rejection.message,
        }
        .emit(&self.metrics);
    }
}

/// A finding could not be written to the findings output.
pub struct FindingWriteFailed<'a> {
    /// Why.
    pub error: &'a io::Error,
}

impl InternalEvent for FindingWriteFailed<'_> {
    fn emit(self, _metrics: &Metrics) {
        tracing::warn!(error = %self.error, "cannot write a finding");
    }
}

/// The file tailer's events, counted and logged; over-long lines are handed back to the
/// caller, which counts them through the ingest path (with the stream they belong to).
pub struct TailerReport<'a> {
    /// Where counts go.
    pub metrics: &'a Metrics,
    /// Over-long lines seen during a poll: (path, length).
    pub too_long: &'a mut Vec<(std::path::PathBuf, u64)>,
}

impl TailerReport<'_> {
    /// Zero series of every kind of problem with a tailed file.
    pub fn preregister(metrics: &Metrics) {
        let kinds = FileErrorKind::ALL.map(FileErrorKind::as_str);
        metrics.preregister(FamilyId::FileErrors, &[&kinds]);
    }

    fn file_error(&self, kind: FileErrorKind) {
        self.metrics.inc_file_errors(kind.as_str());
    }
}

impl TailerEvents for TailerReport<'_> {
    fn file_added(&mut self, path: &Path, from_offset: u64) {
        tracing::info!(path = %display(&path.to_string_lossy()), from_offset, "watching file");
    }
    fn file_resumed(&mut self, path: &Path, offset: u64) {
        tracing::info!(path = %display(&path.to_string_lossy()), offset, "resumed file from checkpoint");
    }
    fn file_rotated(&mut self, old_path: &Path, new_path: Option<&Path>) {
        self.metrics.inc_file_rotations();
        let new = new_path.map(|p| display(&p.to_string_lossy()).into_owned());
        tracing::info!(
            old = %display(&old_path.to_string_lossy()),
            new = new.as_deref().unwrap_or("(gone)"),
            "file rotated; draining the old handle"
        );
    }
    fn file_truncated(&mut self, path: &Path, old_offset: u64, new_size: u64) {
        self.metrics.inc_file_truncations();
        tracing::warn!(path = %display(&path.to_string_lossy()), old_offset, new_size, "file truncated; reading again from the start");
    }
    fn file_drained_and_released(&mut self, path: &Path) {
        tracing::info!(path = %display(&path.to_string_lossy()), "rotated file drained and released");
    }
    fn line_too_long(&mut self, path: &Path, skipped_bytes: u64) {
        self.too_long.push((path.to_path_buf(), skipped_bytes));
    }
    fn read_error(&mut self, path: &Path, error: &io::Error) {
        self.file_error(FileErrorKind::Read);
        tracing::warn!(path = %display(&path.to_string_lossy()), %error, "cannot read file; retrying soon");
    }
    fn open_failed(&mut self, path: &Path, error: &io::Error) {
        let kind = FileErrorKind::of_open_error(error);
        self.file_error(kind);
        let kind = kind.as_str();
        tracing::warn!(
            path = %display(&path.to_string_lossy()), %error, kind,
            "cannot open; not a rotation: kept pending and retried every poll"
        );
    }
    fn checkpoint_mismatch(&mut self, path: &Path) {
        self.file_error(FileErrorKind::CheckpointMismatch);
        tracing::warn!(path = %display(&path.to_string_lossy()), "checkpointed inode now holds another file; reading it from the start");
    }
    fn checkpoint_orphaned(&mut self, path: &Path, offset: u64) {
        self.file_error(FileErrorKind::CheckpointOrphaned);
        tracing::warn!(
            path = %display(&path.to_string_lossy()),
            offset,
            "a checkpointed file is gone (deleted while retryscope was down): lines written to it after that offset were not read"
        );
    }
}
