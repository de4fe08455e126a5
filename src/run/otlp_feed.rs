//! The engine's side of the OTLP receiver: take accepted batches from the queue and hand each
//! record to the ingest path on its stream (`Source::Otlp`, `Format::Otlp`), remember how far
//! the spool is covered (the checkpoint records it; segments behind a written checkpoint are
//! deleted), replay the spool at start-up, and end streams that went quiet: the receiver as
//! the engine's [`LiveSource`] (`otlp`).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use crate::engine::{Core, LiveSource, Polled};
use crate::internal_events::{InternalEvent, LineRead};
use crate::sink::metrics::Metrics;
use crate::source::otlp::{Batch, Queue, SPOOL_DIR, Spool, SpoolPos};
use retryscope_core::decode::Format;
use retryscope_core::ingest::Source;

/// Records handed to the ingest path per poll, at most (whole batches).
const MAX_RECORDS_PER_POLL: usize = 20_000;

/// Open OTLP streams (sessions) kept at most; beyond it the least recently active are ended
/// at the next tick, so memory stays bounded however many sessions send.
const MAX_STREAMS: usize = 100_000;

/// The engine's handle on the receiver's queue.
pub struct OtlpFeed {
    queue: Arc<Queue>,
    /// The spool position after the last batch handed to the ingest path.
    pos: Option<SpoolPos>,
    /// Last record time (wall ms) per stream, to end quiet streams.
    seen: HashMap<String, i64>,
    batches: Vec<Batch>,
    metrics: Arc<Metrics>,
    /// A stream quiet this long is ended.
    idle_secs: u64,
}

impl OtlpFeed {
    /// Start reading `queue`. With a data directory, open the spool there: what it holds after
    /// `from` (acknowledged, not covered by the checkpoint) is queued again first, and new
    /// requests are written ahead to it.
    pub fn start(
        queue: Arc<Queue>,
        data_dir: Option<&Path>,
        from: Option<SpoolPos>,
        metrics: Arc<Metrics>,
        idle_secs: u64,
    ) -> Result<Self, (String, std::io::Error)> {
        let mut pos = from;
        if let Some(dir) = data_dir {
            let dir = dir.join(SPOOL_DIR);
            let (spool, replay) =
                Spool::open(&dir, from).map_err(|e| (dir.display().to_string(), e))?;
            let records: usize = replay.iter().map(|(r, _)| r.len()).sum();
            if records > 0 {
                tracing::info!(
                    records,
                    "OTLP: replaying records acknowledged before the last stop"
                );
            }
            if pos.is_none() {
                pos = Some(spool.position());
            }
            for (records, end) in replay {
                queue.restore(Batch {
                    records,
                    spool_end: Some(end),
                });
            }
            queue.attach_spool(spool);
        }
        Ok(OtlpFeed {
            queue,
            pos,
            seen: HashMap::new(),
            batches: Vec::new(),
            metrics,
            idle_secs,
        })
    }

    /// The spool position a checkpoint restores (see [`LiveSource::position`]).
    pub fn restore(position: Option<serde_json::Value>) -> Result<Option<SpoolPos>, String> {
        position
            .map(|v| serde_json::from_value(v).map_err(|e| format!("sources.otlp: {e}")))
            .transpose()
    }

    /// Hand waiting records to `core`; returns (records, more waiting).
    fn take(&mut self, core: &mut Core, now: i64) -> (u64, bool) {
        let metrics = &*self.metrics;
        self.batches.clear();
        self.queue.take(MAX_RECORDS_PER_POLL, &mut self.batches);
        let mut n = 0u64;
        for batch in self.batches.drain(..) {
            let mut last: Option<(String, retryscope_core::ingest::StreamId)> = None;
            for rec in &batch.records {
                LineRead {
                    source: Source::Otlp,
                }
                .emit(metrics);
                let id = match &last {
                    Some((name, id)) if *name == rec.stream => *id,
                    _ => {
                        let id = core.stream_as(Source::Otlp, &rec.stream, Format::Otlp);
                        match self.seen.get_mut(&rec.stream) {
                            Some(t) => *t = now,
                            None => {
                                self.seen.insert(rec.stream.clone(), now);
                            }
                        }
                        last = Some((rec.stream.clone(), id));
                        id
                    }
                };
                core.line(id, &rec.line, now);
                n += 1;
            }
            if let Some(end) = batch.spool_end {
                self.pos = Some(end);
            }
        }
        let (records, bytes) = self.queue.depth();
        metrics.set_otlp_queue(records, bytes);
        metrics.set_otlp_spool_bytes(self.queue.spool_bytes());
        (n, records > 0)
    }

    /// Sessions' streams resumed from the checkpoint, with when each last had a record: ended
    /// once quiet like the ones this run opens.
    pub fn resumed(&mut self, streams: Vec<(String, i64)>) {
        for (name, last_ms) in streams {
            self.seen.entry(name).or_insert(last_ms);
        }
    }

    /// Park the streams that got nothing for `idle_secs`, and the least recently active beyond
    /// [`MAX_STREAMS`] (their decoders are flushed and their states kept for the session's
    /// next record; their turns close by the correlator's own idle timeout or open-turn
    /// bound).
    fn end_quiet_streams(&mut self, core: &mut Core, now: i64) {
        let idle_ms = i64::try_from(self.idle_secs.saturating_mul(1000)).unwrap_or(i64::MAX);
        let mut quiet: Vec<String> = self
            .seen
            .iter()
            .filter(|(_, t)| now.saturating_sub(**t) > idle_ms)
            .map(|(s, _)| s.clone())
            .collect();
        let excess = self.seen.len().saturating_sub(quiet.len() + MAX_STREAMS);
        if excess > 0 {
            let mut by_age: Vec<(i64, &String)> = self
                .seen
                .iter()
                .filter(|(_, t)| now.saturating_sub(**t) <= idle_ms)
                .map(|(s, t)| (*t, s))
                .collect();
            by_age.sort_unstable();
            quiet.extend(by_age.into_iter().take(excess).map(|(_, s)| s.clone()));
        }
        for name in quiet {
            self.seen.remove(&name);
            let id = core.stream_as(Source::Otlp, &name, Format::Otlp);
            core.park(id, now);
        }
    }
}

impl LiveSource for OtlpFeed {
    fn name(&self) -> &'static str {
        "otlp"
    }

    fn kind(&self) -> Source {
        Source::Otlp
    }

    fn poll(&mut self, core: &mut Core, now: i64) -> Polled {
        let (lines, busy) = self.take(core, now);
        Polled {
            lines,
            busy,
            ended: false,
        }
    }

    fn tick(&mut self, core: &mut Core, now: i64) {
        self.end_quiet_streams(core, now);
    }

    /// Refuse new requests (clients retry them against the next run), then take what was
    /// acknowledged.
    fn close(&mut self, core: &mut Core, now: i64) {
        self.queue.close();
        while self.take(core, now).1 {}
    }

    /// The spool position covered by what was handed to the core (its end when nothing
    /// waits, so segments of earlier runs with nothing new can go too).
    fn position(&mut self) -> Option<serde_json::Value> {
        if let Some(end) = self.queue.idle_spool_position() {
            self.pos = Some(self.pos.map_or(end, |p| p.max(end)));
        }
        self.pos.and_then(|p| serde_json::to_value(p).ok())
    }

    /// Delete the spool segments the checkpoint has passed.
    fn checkpointed(&mut self) {
        if let Some(pos) = self.pos {
            self.queue.release_spool(pos);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Restored, ShardedIngest, Sinks};
    use retryscope_core::correlate::{Correlator, CorrelatorConfig};
    use retryscope_core::cost::PriceTable;

    fn core(metrics: &Arc<Metrics>, restored: Option<Restored>) -> Core {
        let prices = Arc::new(PriceTable::builtin());
        let ingest = ShardedIngest::start(
            1,
            CorrelatorConfig::default(),
            prices,
            Format::Auto,
            false,
            restored,
            metrics.clone(),
        )
        .expect("ingest");
        Core::new(ingest, Sinks::new(), metrics.clone())
    }

    /// A session's stream resumed from a checkpoint is closed (parked) once quiet, like the
    /// sessions this run opens: before, the feed did not know it, so it stayed open (its
    /// decoder never finished, its state in every later checkpoint as an open stream's).
    #[test]
    fn resumed_sessions_streams_are_parked_once_quiet_like_this_runs_own() {
        let metrics = Arc::new(Metrics::new(Default::default()).expect("metrics"));
        let name = "otlp:gemini-cli/s1";
        let states = {
            let mut c = core(&metrics, None);
            let id = c.ingest.stream_as(Source::Otlp, name, Format::Otlp);
            let mut out = Vec::new();
            c.ingest
                .line(id, None, b"", Some(1_000), &mut out, &mut |_| {});
            c.ingest.checkpoint(&mut out).expect("alive").streams.states
        };
        assert_eq!(states.len(), 1);
        let resumed = |feed: &mut OtlpFeed| {
            let correlator =
                Correlator::new(CorrelatorConfig::default(), Arc::new(PriceTable::builtin()));
            let mut c = core(
                &metrics,
                Some(Restored {
                    correlator: correlator.snapshot(),
                    counters: Default::default(),
                    clock_ms: 1_000,
                    joined: Default::default(),
                    streams: states.clone(),
                }),
            );
            // Quiet for longer than the idle time (1 s).
            feed.end_quiet_streams(&mut c, 10_000);
            let mut out = Vec::new();
            let states = c.ingest.checkpoint(&mut out).expect("alive").streams.states;
            // (open, parked)
            let parked = states.iter().filter(|s| s.parked).count();
            (states.len() - parked, parked)
        };
        let queue = Arc::new(Queue::new(1 << 20));
        let mut feed = OtlpFeed::start(queue.clone(), None, None, metrics.clone(), 1)
            .unwrap_or_else(|_| panic!("a feed"));
        assert_eq!(
            resumed(&mut feed),
            (1, 0),
            "unknown to the feed: never closed"
        );
        let mut feed = OtlpFeed::start(queue, None, None, metrics.clone(), 1)
            .unwrap_or_else(|_| panic!("a feed"));
        feed.resumed(states.iter().map(|s| (s.name.clone(), s.last_ms)).collect());
        assert_eq!(resumed(&mut feed), (0, 1), "parked once quiet");
    }
}
