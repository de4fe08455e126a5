//! The engine's side of the OTLP receiver: take accepted batches from the queue and hand each
//! record to the ingest path on its stream (`Source::Otlp`, `Format::Otlp`), remember how far
//! the spool is covered (the checkpoint records it; segments behind a written checkpoint are
//! deleted), replay the spool at start-up, and end streams that went quiet.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use crate::internal_events::{Ingested, InternalEvent, LineRead};
use crate::run::ShardedIngest;
use crate::sink::metrics::Metrics;
use crate::source::otlp::{Batch, Queue, SPOOL_DIR, Spool, SpoolPos};
use retryscope_core::correlate::Output;
use retryscope_core::decode::Format;
use retryscope_core::ingest::{Note, Source};

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
}

impl OtlpFeed {
    /// Start reading `queue`. With a data directory, open the spool there: what it holds after
    /// `from` (acknowledged, not covered by the checkpoint) is queued again first, and new
    /// requests are written ahead to it.
    pub fn start(
        queue: Arc<Queue>,
        data_dir: Option<&Path>,
        from: Option<SpoolPos>,
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
        })
    }

    /// Hand waiting records to `ingest`; returns (records, more waiting).
    pub fn poll(
        &mut self,
        ingest: &mut ShardedIngest,
        now: i64,
        out: &mut Vec<Output>,
        metrics: &Metrics,
    ) -> (u64, bool) {
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
                        let id = ingest.stream_as(Source::Otlp, &rec.stream, Format::Otlp);
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
                ingest.line(
                    id,
                    None,
                    &rec.line,
                    Some(now),
                    out,
                    &mut |note: Note<'_>| Ingested(note).emit(metrics),
                );
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

    /// End the streams that got nothing for `idle_secs`, and the least recently active beyond
    /// [`MAX_STREAMS`] (their decoders are dropped; their turns close by the correlator's own
    /// idle timeout or open-turn bound).
    pub fn end_quiet_streams(
        &mut self,
        ingest: &mut ShardedIngest,
        now: i64,
        idle_secs: u64,
        out: &mut Vec<Output>,
        metrics: &Metrics,
    ) {
        let idle_ms = i64::try_from(idle_secs.saturating_mul(1000)).unwrap_or(i64::MAX);
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
            let id = ingest.stream_as(Source::Otlp, &name, Format::Otlp);
            ingest.end(id, Some(now), out, &mut |note: Note<'_>| {
                Ingested(note).emit(metrics)
            });
        }
    }

    /// Refuse new requests (shutdown).
    pub fn close(&self) {
        self.queue.close();
    }

    /// The spool position covered by what was handed to the ingest path (its end when
    /// nothing waits, so segments of earlier runs with nothing new can go too).
    pub fn position(&mut self) -> Option<SpoolPos> {
        if let Some(end) = self.queue.idle_spool_position() {
            self.pos = Some(self.pos.map_or(end, |p| p.max(end)));
        }
        self.pos
    }

    /// A checkpoint with [`OtlpFeed::position`] was written: delete the spool segments it
    /// has passed.
    pub fn checkpointed(&self) {
        if let Some(pos) = self.pos {
            self.queue.release_spool(pos);
        }
    }
}
