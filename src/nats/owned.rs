//! An owned partition of `run --nats` ([`super::collect`]): taking it (restore the
//! checkpoint, fence the previous owner off, read which of its findings are already
//! published, a consumer of this lease epoch), reading it (fetch, correlate, deliver), and
//! checkpointing it.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use async_nats::jetstream;
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull};
use async_nats::jetstream::context::PublishAckFuture;
use bytes::Bytes;
use futures_util::StreamExt;

use super::collect::{MAX_ACKS_IN_FLIGHT, Shared};
use super::partition::subject;
use super::state::PartitionState;
use super::{NatsError, STREAM_HEADER, state};
use crate::internal_events::{FindingWriteFailed, Ingested, InternalEvent};
use crate::sink::metrics::Metrics;
use retryscope_core::correlate::{Correlator, Output};
use retryscope_core::ingest::{Ingest, Source};

/// Expiry of a fetch that knows how many messages wait (reading published findings): the
/// server answers at once with them, and a request lost in a restart ends by itself.
const FETCH_EXPIRES: Duration = Duration::from_secs(1);
/// How long a partition's fetch may wait for its next delivery before the batch is left. The
/// fetch is no-wait (a live server answers at once, with messages or with none; an expiry
/// would make 2.9 hold an empty fetch until it ends), so only a request lost in a server
/// restart waits this long, and the partition is kept: a delivery that went astray shows as
/// a gap in the consumer sequence of the next one.
fn fetch_wait(lease: Duration) -> Duration {
    (lease / 8).min(Duration::from_millis(500))
}

pub(super) struct Owned {
    pub(super) lease_rev: u64,
    /// Past this instant the lease may have ended for the others (it was renewed at most a
    /// lease earlier, by this instance's monotonic clock): no fetch, no checkpoint.
    pub(super) lease_until: Instant,
    pub(super) stored_state: state::Stored,
    pub(super) ingest: Ingest,
    pub(super) metrics: Metrics,
    pub(super) consumer: PullConsumer,
    /// Consumer sequence of the last delivery seen: each delivery must be the next.
    pub(super) consumer_seq: u64,
    /// Last stream sequence correlated.
    pub(super) seq: u64,
    /// Last stream sequence covered by the stored checkpoint.
    pub(super) stored: u64,
    /// The partition's clock: publish time of its last message.
    pub(super) now_ms: i64,
    /// Clock of the last idle-timeout tick.
    pub(super) tick_ms: i64,
    pub(super) last_msg: Option<jetstream::Message>,
    pub(super) findings_in_flight: Vec<PublishAckFuture>,
    /// Findings stream sequence of the last acknowledged finding of this partition.
    pub(super) findings_seq: u64,
    /// Where the take started reading the stored findings (the checkpoint's findings sequence).
    pub(super) replay_from: u64,
    /// Ids of this partition's findings already stored past the checkpoint: a replay does not
    /// publish them again. An id leaves the set when the replay produces it; the set outlives
    /// checkpoints taken mid-replay.
    pub(super) published: HashSet<String>,
}

impl Owned {
    pub(super) fn lease_held(&self) -> Result<(), NatsError> {
        if Instant::now() < self.lease_until {
            Ok(())
        } else {
            Err(NatsError::new(
                "holding the partition",
                "its lease was not renewed in time",
            ))
        }
    }
}

/// Restore partition `p` from its checkpoint, fence the previous owner off, read which of its
/// findings are already published past the checkpoint, and start a consumer of this lease
/// epoch right after the checkpoint.
pub(super) async fn take(
    sh: &mut Shared<'_>,
    p: u32,
    lease_rev: u64,
    lease_until: Instant,
) -> Result<Owned, NatsError> {
    let loaded = state::load(&sh.states, p).await?;
    let metrics = Metrics::new(Default::default())
        .map_err(|e| NatsError::new("registering partition metrics", e))?;
    let fresh = || {
        Ingest::new(
            Correlator::new(sh.cfg.correlator.clone(), sh.prices.clone()),
            sh.cfg.format,
        )
    };
    let (mut ingest, seq, now_ms, tick_ms, findings_seq) = match &loaded.state {
        Some(s) => {
            metrics
                .restore(&s.metrics)
                .map_err(|e| NatsError::new("restoring partition metrics", e))?;
            let mut ingest = Ingest::new(
                Correlator::restore(
                    sh.cfg.correlator.clone(),
                    sh.prices.clone(),
                    s.correlator.clone(),
                ),
                sh.cfg.format,
            );
            ingest
                .pipeline_mut()
                .restore_counters(s.counters.clone(), s.clock_ms);
            ingest.join_sessions_from(s.joined.clone().unwrap_or_default());
            (ingest, s.seq, s.now_ms, s.tick_ms, s.findings_seq)
        }
        None => {
            let mut ingest = fresh();
            ingest.join_sessions();
            (ingest, 0, 0, 0, 0)
        }
    };
    // Shipped lines are numbered from where the shipper started: turns name the input only.
    ingest.without_origin_lines();
    // The previous owner's next checkpoint now fails its compare-and-set.
    let empty = partition_state(&ingest, &metrics, 0, 0, 0, 0);
    let stored_state = state::fence(&sh.states, p, &loaded, &empty).await?;
    let (published, last_published) = published_since(&sh.findings_stream, p, findings_seq).await?;
    let consumer_name = format!("retryscope-p{p}-e{lease_rev}");
    remove_partition_consumers(&sh.events, p).await;
    let consumer: PullConsumer = sh
        .events
        .create_consumer(pull::Config {
            durable_name: Some(consumer_name),
            filter_subject: subject(p),
            deliver_policy: if seq == 0 {
                DeliverPolicy::All
            } else {
                DeliverPolicy::ByStartSequence {
                    start_sequence: seq + 1,
                }
            },
            ack_policy: AckPolicy::All,
            ack_wait: Duration::from_secs(60),
            max_ack_pending: -1,
            ..Default::default()
        })
        .await
        .map_err(|e| NatsError::new("creating the partition's consumer", e))?;
    if !published.is_empty() {
        tracing::info!(
            partition = p,
            findings = published.len(),
            "findings already published past the checkpoint will not be published again"
        );
    }
    Ok(Owned {
        lease_rev,
        lease_until,
        stored_state,
        ingest,
        metrics,
        consumer,
        consumer_seq: 0,
        seq,
        stored: seq,
        now_ms,
        tick_ms,
        last_msg: None,
        findings_in_flight: Vec::new(),
        findings_seq: findings_seq.max(last_published),
        replay_from: findings_seq,
        published,
    })
}

/// Delete every consumer of partition `p` (the durable of every earlier owner epoch, and the
/// single durable of versions before epochs): a deposed owner's handle then pulls nothing.
async fn remove_partition_consumers(events: &jetstream::stream::Stream, p: u32) {
    let prefix = format!("retryscope-p{p}-e");
    let legacy = format!("retryscope-p{p}");
    let mut names = events.consumer_names();
    let mut doomed = Vec::new();
    while let Some(Ok(name)) = names.next().await {
        if name == legacy || name.starts_with(&prefix) {
            doomed.push(name);
        }
    }
    for name in doomed {
        if let Err(e) = events.delete_consumer(&name).await {
            tracing::debug!(partition = p, consumer = %name, error = %e, "deleting an old consumer");
        }
    }
}

/// The message ids of partition `p`'s findings stored after findings sequence `after`, and the
/// last sequence read.
async fn published_since(
    findings: &jetstream::stream::Stream,
    p: u32,
    after: u64,
) -> Result<(HashSet<String>, u64), NatsError> {
    let reader: PullConsumer = findings
        .create_consumer(pull::Config {
            filter_subject: format!("retryscope.findings.{p}"),
            deliver_policy: DeliverPolicy::ByStartSequence {
                start_sequence: after + 1,
            },
            ack_policy: AckPolicy::None,
            inactive_threshold: Duration::from_secs(60),
            ..Default::default()
        })
        .await
        .map_err(|e| NatsError::new("reading published findings", e))?;
    let mut ids = HashSet::new();
    let mut last = after;
    // What the stream held for the subject when the reader was made: read that much, no more
    // (a fetch of an empty consumer waits for its expiry).
    let mut pending = reader.cached_info().num_pending;
    while pending > 0 {
        let mut batch = reader
            .fetch()
            .max_messages(usize::try_from(pending).unwrap_or(1_000).min(1_000))
            .expires(FETCH_EXPIRES)
            .messages()
            .await
            .map_err(|e| NatsError::new("reading published findings", e))?;
        let mut n = 0u64;
        while let Some(m) = batch.next().await {
            let m = m.map_err(|e| NatsError::new("reading published findings", e))?;
            n += 1;
            if let Ok(info) = m.info() {
                last = last.max(info.stream_sequence);
            }
            if let Some(id) = m.headers.as_ref().and_then(|h| h.get("Nats-Msg-Id")) {
                ids.insert(id.as_str().to_string());
            }
        }
        if n == 0 {
            return Err(NatsError::new(
                "reading published findings",
                format!("{pending} of them could not be read"),
            ));
        }
        pending = pending.saturating_sub(n);
    }
    let name = reader.cached_info().name.clone();
    let _ = findings.delete_consumer(&name).await;
    Ok((ids, last))
}

/// Correlate what partition `p` has waiting; the number of messages taken.
pub(super) async fn poll(sh: &mut Shared<'_>, p: u32, o: &mut Owned) -> Result<usize, NatsError> {
    // Small enough that one round over the owned partitions stays well inside a lease: the
    // leases are renewed between rounds.
    const BATCH: usize = 200;
    o.lease_held()?;
    let mut batch = o
        .consumer
        .fetch()
        .max_messages(BATCH)
        .messages()
        .await
        .map_err(|e| NatsError::new("fetching", e))?;
    let mut n = 0;
    let mut out = Vec::new();
    // Only the wait for a delivery is bounded: a message taken is correlated and delivered
    // whole, so the partition's state never holds half a message.
    let wait = fetch_wait(sh.cfg.lease);
    while let Ok(next) = tokio::time::timeout(wait, batch.next()).await {
        let Some(m) = next else { break };
        let m = m.map_err(|e| NatsError::new("fetching", e))?;
        let Ok(info) = m.info() else { continue };
        if info.consumer_sequence != o.consumer_seq + 1 {
            return Err(NatsError::new(
                "fetching",
                format!(
                    "delivery {} came after {}: a delivery went elsewhere; taking the partition \
                     again from its checkpoint",
                    info.consumer_sequence, o.consumer_seq
                ),
            ));
        }
        o.consumer_seq = info.consumer_sequence;
        let seq = info.stream_sequence;
        let published_ms =
            i64::try_from(info.published.unix_timestamp_nanos() / 1_000_000).unwrap_or(o.now_ms);
        if seq <= o.seq {
            continue; // a redelivery of what the state already covers
        }
        n += 1;
        sh.summary.messages += 1;
        o.now_ms = o.now_ms.max(published_ms);
        let name = m
            .headers
            .as_ref()
            .and_then(|h| h.get(STREAM_HEADER))
            .map(|v| v.as_str().to_string())
            .unwrap_or_else(|| "unknown".to_string());
        let stream = o.ingest.stream(Source::Nats, &name);
        let metrics = &o.metrics;
        o.ingest.line(
            stream,
            None,
            &m.payload,
            Some(o.now_ms),
            &mut out,
            &mut |note| Ingested(note).emit(metrics),
        );
        deliver(sh, p, o, &mut out, &format!("p{p}-{seq}")).await?;
        if o.now_ms - o.tick_ms >= 1000 {
            o.tick_ms = o.now_ms;
            o.ingest.settle_idle(Some(o.now_ms), &mut out, &mut |note| {
                Ingested(note).emit(&o.metrics)
            });
            o.ingest.tick(o.now_ms, &mut out);
            deliver(sh, p, o, &mut out, &format!("p{p}-{seq}-t")).await?;
        }
        o.seq = seq;
        o.last_msg = Some(m);
    }
    Ok(n)
}

/// Count the outputs, write findings locally and publish them with deterministic ids.
async fn deliver(
    sh: &mut Shared<'_>,
    p: u32,
    o: &mut Owned,
    out: &mut Vec<Output>,
    id: &str,
) -> Result<(), NatsError> {
    // Headers, subject and protocol line: what a message carries besides the body.
    const ENVELOPE: usize = 512;
    for (i, output) in std::mem::take(out).into_iter().enumerate() {
        o.metrics.observe(&output);
        if let (Output::TurnClosed(report), Some(t)) = (&output, sh.traces) {
            // A replay after a takeover closes the same turns again: the same trace and span
            // ids (`sink/traces/ids.rs`), so a backend sees a repeat, not a new trace.
            t.submit(report);
        }
        let Output::Finding(f, _) = &output else {
            continue;
        };
        if let Err(error) = sh.findings.write(f) {
            FindingWriteFailed { error: &error }.emit(&o.metrics);
        }
        let msg_id = format!("{id}-{i}");
        if o.published.remove(&msg_id) {
            sh.summary.replayed_unpublished += 1;
            continue;
        }
        let body = retryscope_core::sanitize::to_json_vec(f)
            .map_err(|e| NatsError::new("encoding a finding", e))?;
        let max_payload = super::max_payload(&sh.client);
        if body.len() + ENVELOPE > max_payload {
            sh.summary.dead_letters += 1;
            tracing::warn!(
                partition = p,
                id = %msg_id,
                kind = f.kind.as_str(),
                bytes = body.len(),
                max_payload,
                "finding larger than the server's largest message: written to the findings \
                 output only (a dead letter)"
            );
            continue;
        }
        let mut headers = HeaderMap::new();
        headers.insert("Nats-Msg-Id", msg_id.as_str());
        let ack = sh
            .js
            .publish_with_headers(
                format!("retryscope.findings.{p}"),
                headers,
                Bytes::from(body),
            )
            .await
            .map_err(|e| {
                sh.summary.publish_failures += 1;
                NatsError::new("publishing a finding", e)
            })?;
        o.findings_in_flight.push(ack);
        if o.findings_in_flight.len() >= MAX_ACKS_IN_FLIGHT {
            await_acks(sh, o).await?;
        }
    }
    Ok(())
}

/// Wait for every finding acknowledgement in flight; the last findings sequence is kept for
/// the checkpoint.
pub(super) async fn await_acks(sh: &mut Shared<'_>, o: &mut Owned) -> Result<(), NatsError> {
    for ack in o.findings_in_flight.drain(..) {
        let ack = ack.await.map_err(|e| {
            sh.summary.publish_failures += 1;
            NatsError::new("waiting for a finding's acknowledgement", e)
        })?;
        o.findings_seq = o.findings_seq.max(ack.sequence);
    }
    Ok(())
}

/// What a checkpoint of this partition holds.
fn partition_state(
    ingest: &Ingest,
    metrics: &Metrics,
    seq: u64,
    now_ms: i64,
    tick_ms: i64,
    findings_seq: u64,
) -> PartitionState {
    let pipeline = ingest.pipeline();
    PartitionState {
        seq,
        correlator: pipeline.correlator().snapshot(),
        counters: pipeline.counters().clone(),
        clock_ms: pipeline.clock_ms(),
        now_ms,
        tick_ms,
        metrics: metrics.snapshot(),
        findings_seq,
        joined: ingest.joined_snapshot(),
    }
}

/// Store the partition's state with the sequence it covers, then acknowledge.
pub(super) async fn checkpoint(
    sh: &mut Shared<'_>,
    p: u32,
    o: &mut Owned,
) -> Result<(), NatsError> {
    if o.seq == o.stored {
        return Ok(());
    }
    o.lease_held()?;
    await_acks(sh, o).await?;
    set_correlator_stats(o);
    // While findings read at the take have not all come round again in the replay, the next
    // owner must read them too: the checkpoint keeps the take's starting point until then.
    let findings_seq = if o.published.is_empty() {
        o.findings_seq
    } else {
        o.replay_from
    };
    let s = partition_state(
        &o.ingest,
        &o.metrics,
        o.seq,
        o.now_ms,
        o.tick_ms,
        findings_seq,
    );
    o.stored_state = state::save(&sh.states, p, &s, &o.stored_state).await?;
    o.stored = o.seq;
    sh.summary.checkpoints += 1;
    if let Some(m) = o.last_msg.take()
        && let Err(e) = m.ack().await
    {
        // Harmless: a redelivery is skipped by sequence.
        tracing::debug!(partition = p, error = %e, "ack failed");
    }
    Ok(())
}

/// The correlator's own counters (late events, events after close, evictions, open turns)
/// into the partition's metrics, as `run` sets them.
pub(super) fn set_correlator_stats(o: &Owned) {
    let correlator = o.ingest.pipeline().correlator();
    o.metrics
        .set_correlator_stats(&correlator.stats(), correlator.open_turns());
}
