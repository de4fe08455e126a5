//! `retryscope ship -`: standard input shipped in messages like a file's, without a position
//! to checkpoint (see [`ship_stdin`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_nats::jetstream;
use bytes::Bytes;

use crate::nats::partition::partition_of;

use super::{
    BATCH_LINES, ENVELOPE, NatsError, Read, STDIN_DEV, STDIN_PARTIAL_WAIT, ShipConfig, ShipSummary,
    batches, publish_all,
};

/// Ship standard input until it ends, in messages like a file's ([`batches`]: per
/// partition, up to [`BATCH_LINES`] lines). Lines have no position to checkpoint: their ids
/// (`<source id>/stdin.<start ms>/<line number>`) only make a batch re-published after a
/// failed publish harmless; a restarted shipper reads a new stdin. A last line without its
/// newline is shipped once the pipe has been quiet for [`STDIN_PARTIAL_WAIT`] (as a file's),
/// and ends its record.
pub(super) async fn ship_stdin(
    cfg: &ShipConfig,
    js: &jetstream::Context,
    client: &async_nats::Client,
    partitions: u32,
    shutdown: Arc<AtomicBool>,
) -> Result<ShipSummary, NatsError> {
    use crate::run::{FeedItem, PipeLine, PipeLines, start_feeds};
    use std::sync::mpsc::TryRecvError;
    /// Lines read per round, at most.
    const MAX_ROUND: usize = 16 * BATCH_LINES;
    let rx = start_feeds(true, None, shutdown.clone());
    let mut pipe = PipeLines::new(cfg.max_line_bytes, STDIN_PARTIAL_WAIT);
    let nonce = crate::nats::wall_ms().max(0) as u64;
    let mut number = 0u64;
    let mut summary = ShipSummary {
        lines: 0,
        partitions,
        dead_letters: 0,
    };
    let mut ended = false;
    while !ended && !shutdown.load(Ordering::SeqCst) {
        let max_payload = crate::nats::max_payload(client);
        let mut lines = StdinLines {
            round: Vec::new(),
            number: &mut number,
            dead_letters: &mut summary.dead_letters,
            max_payload,
            nonce,
        };
        while lines.round.len() < MAX_ROUND {
            let mut on = |line: PipeLine<'_>| lines.take(line);
            match rx.try_recv() {
                Ok(FeedItem::Bytes { bytes, .. }) => {
                    pipe.push(&bytes, std::time::Instant::now(), &mut on)
                }
                Ok(FeedItem::End { .. }) | Err(TryRecvError::Disconnected) => {
                    pipe.end(&mut on);
                    ended = true;
                    break;
                }
                Ok(_) => {}
                Err(TryRecvError::Empty) => {
                    pipe.quiet(std::time::Instant::now(), &mut on);
                    break;
                }
            }
        }
        let round = lines.round;
        if round.is_empty() {
            if !ended {
                tokio::time::sleep(cfg.poll_interval.min(Duration::from_millis(20))).await;
            }
            continue;
        }
        let batch = batches(
            &round,
            &cfg.source_id,
            |r: &Read| partition_of(&r.bytes, partitions),
            max_payload,
        );
        publish_all(js, &batch, &shutdown).await?;
        summary.lines += round.len() as u64;
    }
    Ok(summary)
}

/// One round of stdin's lines, as [`Read`]s (see [`STDIN_DEV`]).
struct StdinLines<'a> {
    round: Vec<Read>,
    /// Lines so far (the last one's number).
    number: &'a mut u64,
    dead_letters: &'a mut u64,
    max_payload: usize,
    nonce: u64,
}

impl StdinLines<'_> {
    fn take(&mut self, line: crate::run::PipeLine<'_>) {
        use crate::run::PipeLine;
        *self.number += 1;
        let (bytes, unterminated) = match line {
            PipeLine::Line(b) => (b, false),
            PipeLine::Unterminated(b) => (b, true),
            PipeLine::TooLong(len) => {
                tracing::warn!(
                    line = *self.number,
                    bytes = len,
                    "stdin line too long; skipped"
                );
                return;
            }
        };
        if bytes.len() + ENVELOPE > self.max_payload {
            *self.dead_letters += 1;
            tracing::warn!(
                line = *self.number,
                bytes = bytes.len(),
                max_payload = self.max_payload,
                "stdin line larger than the server's largest message: not shipped (a dead letter)"
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
            path: PathBuf::from("stdin"),
            dev: STDIN_DEV,
            ino: self.nonce,
            end: *self.number,
            bytes: Bytes::copy_from_slice(bytes),
        });
    }
}
