//! Setters of the collector's health series: input read and decoded per source, bad lines,
//! the correlator's stats, blind spots, the tailed files, checkpoints and the trace exporter.

use retryscope_core::correlate::CorrelatorStats;
use retryscope_core::decode::BadLineReason;

use super::family::FamilyId as F;
use super::state::{delta, lock};
use super::{Metrics, Source};

impl Metrics {
    /// Add to `retryscope_events_read_total{source}`.
    pub fn add_events_read(&self, source: Source, n: u64) {
        lock(&self.inner).add(F::EventsRead, &[source.as_str()], n as f64);
    }

    /// Add to `retryscope_events_decoded_total{source}`.
    pub fn add_events_decoded(&self, source: Source, n: u64) {
        lock(&self.inner).add(F::EventsDecoded, &[source.as_str()], n as f64);
    }

    /// Add to `retryscope_bad_lines_total{source,reason}`.
    pub fn add_bad_lines(&self, source: Source, reason: BadLineReason, n: u64) {
        lock(&self.inner).add(F::BadLines, &[source.as_str(), reason.as_str()], n as f64);
    }

    /// Add to `retryscope_unknown_events_total{source}`.
    pub fn add_unknown_events(&self, source: Source, n: u64) {
        lock(&self.inner).add(F::UnknownEvents, &[source.as_str()], n as f64);
    }

    /// Count `turns` released early from a full hold
    /// (`retryscope_nats_held_turns_released_early_total`).
    pub fn add_held_released_early(&self, turns: u64) {
        lock(&self.inner).add(F::NatsReleasedEarly, &[], turns as f64);
    }

    /// Count `sessions` forgotten while parked (`retryscope_sessions_forgotten_total`).
    pub fn add_sessions_forgotten(&self, sessions: u64) {
        lock(&self.inner).add(F::SessionsForgotten, &[], sessions as f64);
    }

    /// Set `retryscope_open_turns` and move `retryscope_evicted_turns_total`,
    /// `retryscope_late_events_total` and `retryscope_after_close_events_total` by the growth of the correlator's cumulative stats since
    /// the last call. Call it on every tick (and after each batch of events).
    pub fn set_correlator_stats(&self, stats: &CorrelatorStats, open_turns: usize) {
        let mut inner = lock(&self.inner);
        let inner = &mut *inner;
        let late = delta(&mut inner.base.late_events, stats.late_events);
        let evicted = delta(&mut inner.base.evicted_turns, stats.evicted_turns);
        let after_close = delta(&mut inner.base.after_close_events, stats.after_close_events);
        inner.add(F::AfterCloseEvents, &[], after_close as f64);
        inner.add(F::LateEvents, &[], late as f64);
        inner.add(F::EvictedTurns, &[], evicted as f64);
        inner
            .table
            .set(F::OpenTurns as usize, &[], open_turns as f64);
    }

    /// A stream of `kind` was read: `retryscope_input_blind_spots` counts, per kind and sight
    /// it cannot show, the streams of that kind read since start, unless another kind read
    /// shows that sight (then 0).
    pub fn saw_input_kind(&self, kind: retryscope_core::coverage::InputKind) {
        let mut inner = lock(&self.inner);
        let inner = &mut *inner;
        inner.coverage.add(kind);
        let all = inner.coverage.sights();
        for k in retryscope_core::coverage::InputKind::ALL {
            let n = inner.coverage.streams(k);
            for sight in k.sights().missing() {
                let v = if all.has(sight) { 0 } else { n };
                inner.table.set(
                    F::InputBlindSpots as usize,
                    &[k.as_str(), sight.as_str()],
                    v as f64,
                );
            }
        }
    }

    /// Set `retryscope_files_watched`.
    pub fn set_files_watched(&self, n: u64) {
        lock(&self.inner)
            .table
            .set(F::FilesWatched as usize, &[], n as f64);
    }

    /// Count one file rotation.
    pub fn inc_file_rotations(&self) {
        lock(&self.inner).add(F::FileRotations, &[], 1.0);
    }

    /// Count one file truncation.
    pub fn inc_file_truncations(&self) {
        lock(&self.inner).add(F::FileTruncations, &[], 1.0);
    }

    /// Count one problem with a tailed file (`kind`: a `source::file::FileErrorKind`).
    pub fn inc_file_errors(&self, kind: &'static str) {
        lock(&self.inner).add(F::FileErrors, &[kind], 1.0);
    }

    /// Set `retryscope_source_lag_bytes{source}`.
    pub fn set_source_lag_bytes(&self, source: Source, bytes: u64) {
        lock(&self.inner)
            .table
            .set(F::SourceLag as usize, &[source.as_str()], bytes as f64);
    }

    /// Count one successful checkpoint write.
    pub fn inc_checkpoint_writes(&self) {
        lock(&self.inner).add(F::CheckpointWrites, &[], 1.0);
    }

    /// Count one failed checkpoint write.
    pub fn inc_checkpoint_failures(&self) {
        lock(&self.inner).add(F::CheckpointFailures, &[], 1.0);
    }

    /// Streams whose state the last checkpoint left out.
    pub fn set_stream_states_left_out(&self, streams: usize) {
        lock(&self.inner)
            .table
            .set(F::StreamStatesLeftOut as usize, &[], streams as f64);
    }

    /// Move the OTLP counters by the growth of the exporter's absolute counters since the
    /// last call. These baselines are process-local (not in the snapshot): after a restart
    /// the exporter's atomics begin at zero again, and so does the baseline.
    pub fn set_otlp(&self, exported: u64, dropped: u64, failures: u64) {
        let mut inner = lock(&self.inner);
        let inner = &mut *inner;
        let d = [
            delta(&mut inner.base.otlp[0], exported),
            delta(&mut inner.base.otlp[1], dropped),
            delta(&mut inner.base.otlp[2], failures),
        ];
        inner.add(F::OtlpExported, &[], d[0] as f64);
        inner.add(F::OtlpDropped, &[], d[1] as f64);
        inner.add(F::OtlpFailures, &[], d[2] as f64);
    }
}
