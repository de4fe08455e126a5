//! The OTLP receiver of `run --nats`: what it accepts is shipped into the events stream, so
//! any collector (this one or a peer) correlates it on its session's partition.
//!
//! The receiver (`source/otlp`) accepts into its bounded queue as it does for `run`; this
//! task takes the queue's batches and publishes each record as a line of the stream
//! `otlp:<service>/<session>` (the [`super::STREAM_HEADER`]), on the partition
//! [`OtlpRoutes`] gives it: gemini-cli's family's records on the partition where shipped
//! stream-json is read, to be joined with it; any other session on the partition of its name
//! (one session's records stay together, in order). A batch is
//! published whole, acknowledged by JetStream, before the next is taken; while JetStream
//! cannot take it the batch is retried and the queue fills, so the receiver refuses new
//! requests with a retryable status (back-pressure to the agents, nothing dropped). Each
//! record carries the message id `<instance>/otlp.<start ms>/<n>`, so a batch published again
//! after a lost acknowledgement is dropped by the stream's duplicate window.
//!
//! The queue is in memory: a collector killed between accepting a request and publishing it
//! loses that request (the agent saw a success). The spool `run --data-dir` writes ahead is
//! not kept here.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream;
use bytes::Bytes;

use super::partition::{OtlpRoutes, parse_description, subject};
use super::ship::{Pending, publish_all};
use super::{EVENTS_STREAM, NatsError, STREAM_HEADER};
use crate::internal_events::{InternalEvent, LineRead};
use crate::sink::metrics::Metrics;
use crate::source::otlp::{Batch, Queue};
use retryscope_core::ingest::Source;

/// Records published per round, at most.
const MAX_RECORDS: usize = 5_000;

/// Publish what the receiver accepts into `queue` until `drain` is set (once the receiver has
/// stopped accepting), then what the queue still holds. Returns the records published.
pub async fn ship_received(
    js: jetstream::Context,
    queue: Arc<Queue>,
    instance: String,
    metrics: Arc<Metrics>,
    drain: Arc<AtomicBool>,
) -> Result<u64, NatsError> {
    let partitions = loop {
        if let Ok(mut s) = js.get_stream(EVENTS_STREAM).await
            && let Ok(info) = s.info().await
            && let Some(n) = info
                .config
                .description
                .as_deref()
                .and_then(parse_description)
        {
            break n;
        }
        if drain.load(Ordering::SeqCst) {
            return Ok(0);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let started = super::wall_ms();
    let mut routes = OtlpRoutes::new(partitions);
    let mut n = 0u64;
    let mut batches: Vec<Batch> = Vec::new();
    loop {
        let stopping = drain.load(Ordering::SeqCst);
        queue.take(MAX_RECORDS, &mut batches);
        let mut pending = Vec::new();
        for batch in batches.drain(..) {
            for rec in batch.records {
                LineRead {
                    source: Source::Otlp,
                }
                .emit(&metrics);
                n += 1;
                let mut headers = HeaderMap::new();
                headers.insert(
                    "Nats-Msg-Id",
                    format!("{instance}/otlp.{started}/{n}").as_str(),
                );
                headers.insert(STREAM_HEADER, rec.stream.as_str());
                pending.push(Pending {
                    subject: subject(routes.partition(&rec.stream, &rec.line)),
                    headers,
                    payload: Bytes::from(rec.line),
                });
            }
        }
        if !pending.is_empty() {
            // Retried until JetStream takes it (or the collector is stopping and it cannot).
            publish_all(&js, &pending, &drain).await?;
        }
        let (records, bytes) = queue.depth();
        metrics.set_otlp_queue(records, bytes);
        if pending.is_empty() {
            if stopping {
                return Ok(n);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
