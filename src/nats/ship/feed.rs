//! Lines without a position to checkpoint, shipped in messages like a file's: standard input
//! (`retryscope ship -`), routed as a file is by the format its head says (`route.rs`), and
//! the proxy's own lines (`retryscope proxy --nats-publish`), native, by turn; both read from
//! the engine's feed channel (see [`ship_feed`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_nats::jetstream;
use bytes::Bytes;

use crate::nats::partition::partition_of;

use super::route::PipeRoute;
use super::{
    BATCH_LINES, ENVELOPE, NatsError, Read, STDIN_DEV, STDIN_PARTIAL_WAIT, ShipSummary, batches,
    publish_all,
};
use crate::run::FeedItem;

/// What a feed is shipped as.
#[derive(Debug, Clone)]
pub struct FeedShip {
    /// This host's identity, part of every message id and stream name.
    pub source_id: String,
    /// The feed's name in them: `stdin`, `proxy`.
    pub name: &'static str,
    /// Longest line shipped (of bytes split into lines here).
    pub max_line_bytes: usize,
    /// Pause between polls with nothing new.
    pub poll_interval: Duration,
    /// Route the feed as a file is routed, by the format its head says (stdin: anything may
    /// be piped in), as one stream named `<source id>:<name>`; otherwise each line by its
    /// turn id, partition 0 without one (the proxy's lines are its own native events).
    pub by_head: bool,
}

/// Ship the feed `rx` until it ends (or `shutdown`), in messages like a file's ([`batches`]:
/// per partition, up to [`BATCH_LINES`] lines). With [`FeedShip::by_head`] the partitions
/// are a file's (native lines by turn id; what may feed the session joiner to partition 0;
/// any other format whole to the partition of `<source id>:<name>`), and lines wait, at most
/// `route::HOLD`, while the head read so far does not say the format; otherwise each line
/// goes by its turn id, partition 0 without one. Lines have no position to checkpoint: their
/// ids (`<source id>/<name>.<start ms>/<line number>`) only make a batch re-published after a
/// failed publish harmless; a restarted shipper reads a new feed. Bytes (stdin) are split
/// into lines here: a last line without its newline is shipped once the pipe has been quiet
/// for [`STDIN_PARTIAL_WAIT`] (as a file's), and ends its record; lines (the proxy's) are
/// shipped as they are.
pub(crate) async fn ship_feed(
    cfg: &FeedShip,
    js: &jetstream::Context,
    client: &async_nats::Client,
    partitions: u32,
    rx: std::sync::mpsc::Receiver<FeedItem>,
    shutdown: Arc<AtomicBool>,
) -> Result<ShipSummary, NatsError> {
    use crate::run::{PipeLine, PipeLines};
    use std::sync::mpsc::TryRecvError;
    /// Lines read per round, at most.
    const MAX_ROUND: usize = 16 * BATCH_LINES;
    let mut pipe = PipeLines::new(cfg.max_line_bytes, STDIN_PARTIAL_WAIT);
    let nonce = crate::nats::wall_ms().max(0) as u64;
    let mut number = 0u64;
    let mut summary = ShipSummary {
        lines: 0,
        partitions,
        dead_letters: 0,
    };
    let mut route = cfg
        .by_head
        .then(|| PipeRoute::new(&format!("{}:{}", cfg.source_id, cfg.name), partitions));
    // Lines read while the route waits for the head to decide.
    let mut held: Vec<Read> = Vec::new();
    let mut ended = false;
    loop {
        let stop = ended || shutdown.load(Ordering::SeqCst);
        let max_payload = crate::nats::max_payload(client);
        let mut lines = FeedLines {
            name: cfg.name,
            round: Vec::new(),
            number: &mut number,
            dead_letters: &mut summary.dead_letters,
            max_payload,
            nonce,
        };
        while lines.round.len() < MAX_ROUND {
            let mut on = |line: PipeLine<'_>| lines.take(line);
            if stop {
                break;
            }
            match rx.try_recv() {
                Ok(FeedItem::Bytes { bytes, .. }) => {
                    let now = std::time::Instant::now();
                    if let Some(route) = &mut route {
                        route.read(&bytes, now);
                    }
                    pipe.push(&bytes, now, &mut on)
                }
                Ok(FeedItem::Line { bytes, .. }) => on(PipeLine::Line(&bytes)),
                Ok(FeedItem::TooLong { len, .. }) => on(PipeLine::TooLong(len)),
                Ok(FeedItem::End { .. }) | Err(TryRecvError::Disconnected) => {
                    pipe.end(&mut on);
                    ended = true;
                    break;
                }
                Err(TryRecvError::Empty) => {
                    pipe.quiet(std::time::Instant::now(), &mut on);
                    break;
                }
            }
        }
        held.extend(lines.round);
        // At the end (or a stop) the head read so far decides: nothing read is left behind.
        let decided = route
            .as_mut()
            .is_none_or(|r| r.decide(std::time::Instant::now(), stop || ended).is_some());
        if held.is_empty() || !decided {
            if stop {
                return Ok(summary);
            }
            if !ended {
                tokio::time::sleep(cfg.poll_interval.min(Duration::from_millis(20))).await;
            }
            continue;
        }
        let round = std::mem::take(&mut held);
        let partition = |r: &Read| match &route {
            Some(route) => route.partition(&r.bytes, partitions),
            None => partition_of(&r.bytes, partitions),
        };
        let batch = batches(&round, &cfg.source_id, partition, max_payload);
        publish_all(js, &batch, &shutdown).await?;
        summary.lines += round.len() as u64;
    }
}

/// One round of a feed's lines, as [`Read`]s (see [`STDIN_DEV`]).
struct FeedLines<'a> {
    name: &'static str,
    round: Vec<Read>,
    /// Lines so far (the last one's number).
    number: &'a mut u64,
    dead_letters: &'a mut u64,
    max_payload: usize,
    nonce: u64,
}

impl FeedLines<'_> {
    fn take(&mut self, line: crate::run::PipeLine<'_>) {
        use crate::run::PipeLine;
        *self.number += 1;
        let (bytes, unterminated) = match line {
            PipeLine::Line(b) => (b, false),
            PipeLine::Unterminated(b) => (b, true),
            PipeLine::TooLong(len) => {
                tracing::warn!(
                    feed = self.name,
                    line = *self.number,
                    bytes = len,
                    "line too long; skipped"
                );
                return;
            }
        };
        if bytes.len() + ENVELOPE > self.max_payload {
            *self.dead_letters += 1;
            tracing::warn!(
                feed = self.name,
                line = *self.number,
                bytes = bytes.len(),
                max_payload = self.max_payload,
                "line larger than the server's largest message: not shipped (a dead letter)"
            );
            return;
        }
        self.push(bytes);
        if unterminated {
            // As a file's: the record the line belongs to ends with it.
            *self.number += 1;
            self.push(b"");
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        self.round.push(Read {
            path: PathBuf::from(self.name),
            dev: STDIN_DEV,
            ino: self.nonce,
            end: *self.number,
            bytes: Bytes::copy_from_slice(bytes),
        });
    }
}

/// Connect to the deployment, create the events stream if there is none (with `partitions`
/// and `duplicate_window`), set `ready`, and ship the feed `rx` until it ends (or
/// `shutdown`): `retryscope proxy --nats-publish` runs this for the proxy's lines.
pub async fn publish_feed(
    deploy: &crate::nats::deploy::Deploy,
    feed: FeedShip,
    partitions: u32,
    duplicate_window: Duration,
    rx: std::sync::mpsc::Receiver<FeedItem>,
    ready: Arc<AtomicBool>,
    shutdown: Arc<AtomicBool>,
) -> Result<ShipSummary, NatsError> {
    let Some(client) = deploy
        .connect(
            &format!("retryscope-{} {}", feed.name, feed.source_id),
            &shutdown,
        )
        .await?
    else {
        return Ok(ShipSummary::default());
    };
    let js = jetstream::new(client.clone());
    let partitions =
        crate::nats::partition::ensure_events_stream(&js, partitions, duplicate_window, deploy)
            .await?;
    tracing::info!(partitions, feed = feed.name, "publishing to JetStream");
    ready.store(true, Ordering::SeqCst);
    ship_feed(&feed, &js, &client, partitions, rx, shutdown).await
}
