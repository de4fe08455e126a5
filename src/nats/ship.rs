//! `retryscope ship`: tail files like `run` does (the same [`FileTailer`], rotation and
//! checkpoint) and publish every complete line to its partition's subject, in batches.
//!
//! A round takes what the tailer read and publishes it as messages of up to [`BATCH_LINES`]
//! lines (and the server's largest message) of one file and one partition, in order: the lines
//! joined by `\n`, with [`LINES_HEADER`] giving their count (one message per line cost the
//! cluster ~20× the time of `run`). Each message carries `Nats-Msg-Id` =
//! `<source id>/<dev>.<inode>/<end offset of its last line>`, so a message re-sent after a
//! restart is dropped by JetStream's duplicate window, which needs a re-sent round to be cut
//! into the same messages: before a round is published, the checkpoint records it as in
//! flight (each file's last line in it); a restarted shipper reads exactly that far before it
//! publishes again, and the same lines make the same messages. Offsets are checkpointed only
//! after JetStream acknowledged every message before them: a crash loses nothing and
//! duplicates nothing (within the window). Limit: a file truncated in place and rewritten to
//! the same offsets within the duplicate window reuses ids (its new lines would be dropped);
//! rotation by rename gives a new inode.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream;
use bytes::Bytes;

use super::deploy::Deploy;
use super::partition::{ensure_events_stream, subject};
use super::{LINES_HEADER, NatsError, STREAM_HEADER};
use crate::internal_events::TailerReport;
use crate::sink::metrics::Metrics;
use crate::source::checkpoint_io;
use crate::source::file::{FileCheckpoint, FileTailer, FileTailerConfig, ReadFrom};

mod feed;
mod route;

pub(crate) use feed::ship_feed;
pub use feed::{FeedShip, publish_feed};
use route::{Routed, Routes};

/// Name of the shipper's checkpoint (file offsets acknowledged by JetStream).
pub const SHIP_CHECKPOINT_FILE: &str = "ship-checkpoint.json";

/// How `ship` runs.
#[derive(Debug, Clone)]
pub struct ShipConfig {
    /// The NATS deployment (URL, credentials, TLS; replicas and retention of the events
    /// stream when this shipper creates it).
    pub nats: Deploy,
    /// Globs to tail.
    pub include: Vec<String>,
    /// Ship standard input instead (until it ends); no checkpoint.
    pub stdin: bool,
    /// Where files without a checkpoint start.
    pub read_from: ReadFrom,
    /// Where the offsets checkpoint lives (none: start over each time).
    pub data_dir: Option<PathBuf>,
    /// This host's identity, part of every message id and stream name.
    pub source_id: String,
    /// Partitions, if this shipper creates the stream.
    pub partitions: u32,
    /// The stream's duplicate window, if this shipper creates it.
    pub duplicate_window: Duration,
    /// Pause between polls with nothing new.
    pub poll_interval: Duration,
    /// Longest line shipped.
    pub max_line_bytes: usize,
    /// An unusable checkpoint is moved aside and shipping starts over (without this, `ship`
    /// refuses to start: starting over would send every line again).
    pub reset_checkpoint: bool,
}

/// What a shipper did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShipSummary {
    /// Lines published and acknowledged.
    pub lines: u64,
    /// Partition count in use.
    pub partitions: u32,
    /// Lines too large for the server's largest message: skipped, counted and logged with
    /// their file and offset (dead letters), so the shipper moves on.
    pub dead_letters: u64,
}

/// Headers, subject and protocol line: what a message carries besides the line.
const ENVELOPE: usize = 512;

/// Lines per message, at most.
pub const BATCH_LINES: usize = 1_000;
/// Bytes of lines per message, at most (and the server's largest message, less the envelope).
const BATCH_BYTES: usize = 512 * 1024;

/// The device number that marks a feed's lines in a round (stdin's, the proxy's: their path is
/// the feed's name, their `ino` the shipper's start time and their `end` the line number): no
/// file has it.
const STDIN_DEV: u64 = u64::MAX;

/// How long stdin stays quiet before a last line without its newline is shipped (a file's
/// tailer waits as long by default).
const STDIN_PARTIAL_WAIT: Duration = Duration::from_millis(500);

/// Polls a restarted shipper waits, without progress, for the lines it had in flight before it
/// gives up re-sending them as the same messages (a file cut meanwhile; some may repeat).
const REPLAY_PATIENCE: u32 = 50;

/// The shipper's checkpoint: the offsets JetStream acknowledged, and the round in flight.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
struct ShipState {
    version: u32,
    files: Vec<FileCheckpoint>,
    /// The round being published: each file's last line in it (none after its acks).
    #[serde(default)]
    in_flight: Vec<InFlight>,
    /// Each file's route to the partitions (since version 3; `route.rs`).
    #[serde(default)]
    routes: Vec<Routed>,
}

/// A file's part of the round in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct InFlight {
    dev: u64,
    ino: u64,
    /// End offset of its last line in the round.
    end: u64,
}

/// A line read and not yet published.
struct Read {
    path: PathBuf,
    dev: u64,
    ino: u64,
    end: u64,
    bytes: Bytes,
}

pub(super) struct Pending {
    pub(super) subject: String,
    pub(super) headers: HeaderMap,
    pub(super) payload: Bytes,
}

/// Ship until `shutdown` is set; the last acknowledged offsets are checkpointed before return.
pub async fn ship(cfg: ShipConfig, shutdown: Arc<AtomicBool>) -> Result<ShipSummary, NatsError> {
    // Before connecting: an unusable checkpoint stops the shipper at once.
    let checkpoint_path = cfg.data_dir.as_ref().map(|d| d.join(SHIP_CHECKPOINT_FILE));
    let mut restored: ShipState = match (&checkpoint_path, cfg.stdin) {
        (Some(p), false) => load_state(p, cfg.reset_checkpoint)?,
        _ => ShipState::default(),
    };
    let Some(client) = cfg
        .nats
        .connect(&format!("retryscope-ship {}", cfg.source_id), &shutdown)
        .await?
    else {
        return Ok(ShipSummary::default());
    };
    let js = jetstream::new(client.clone());
    let partitions =
        ensure_events_stream(&js, cfg.partitions, cfg.duplicate_window, &cfg.nats).await?;
    tracing::info!(partitions, "shipping to JetStream");
    if cfg.stdin {
        let feed = FeedShip {
            source_id: cfg.source_id.clone(),
            name: "stdin",
            max_line_bytes: cfg.max_line_bytes,
            poll_interval: cfg.poll_interval,
            by_head: true,
        };
        let rx = crate::run::start_feeds(true, None, shutdown.clone());
        return ship_feed(&feed, &js, &client, partitions, rx, shutdown).await;
    }
    let mut tailer = FileTailer::new(
        FileTailerConfig {
            include: cfg.include.clone(),
            read_from: cfg.read_from,
            max_line_bytes: cfg.max_line_bytes,
            ..FileTailerConfig::default()
        },
        restored.files.clone(),
    );
    let metrics =
        Metrics::new(Default::default()).map_err(|e| NatsError::new("registering counters", e))?;
    let mut summary = ShipSummary {
        lines: 0,
        partitions,
        dead_letters: 0,
    };
    let mut routes = Routes::restore(&restored.routes, &restored.files);
    let mut acked = restored.files;
    // The round in flight at the last stop: read that far before publishing, to re-send it as
    // the same messages.
    let mut replay: HashMap<(u64, u64), u64> = restored
        .in_flight
        .iter()
        .map(|f| ((f.dev, f.ino), f.end))
        .collect();
    let mut patience = REPLAY_PATIENCE;
    let mut carry: Vec<Read> = Vec::new();
    loop {
        let stop = shutdown.load(Ordering::SeqCst);
        let before = carry.len();
        let stats = poll_into(&mut tailer, &metrics, &mut carry);
        if !replay.is_empty() {
            // Files that reached their in-flight end (or are gone) are done replaying.
            let offsets: HashMap<(u64, u64), u64> = tailer
                .checkpoints()
                .iter()
                .map(|c| ((c.dev, c.ino), c.offset))
                .collect();
            replay.retain(|id, end| offsets.get(id).is_some_and(|o| o < end));
            patience = if carry.len() > before {
                REPLAY_PATIENCE
            } else {
                patience - 1
            };
            if patience == 0 {
                tracing::warn!(
                    files = replay.len(),
                    "the lines in flight at the last stop cannot all be read again (a file cut?); \
                     shipping on: some of them may be stored twice"
                );
                replay.clear();
            }
            if !replay.is_empty() {
                if stop {
                    // Nothing of the round is published again: the next start re-sends it.
                    return Ok(summary);
                }
                tokio::time::sleep(cfg.poll_interval).await;
                continue;
            }
        }
        // A round: every line read (a replayed file's up to its in-flight end, as before) of
        // the files whose route is decided; a young file's wait for its head to say its format.
        let ends: HashMap<(u64, u64), u64> = restored_ends(&restored.in_flight);
        let now = std::time::Instant::now();
        let mut waiting: Vec<(u64, u64)> = Vec::new();
        for r in &carry {
            let id = (r.dev, r.ino);
            if !waiting.contains(&id) && routes.decide(&r.path, r.dev, r.ino, now).is_none() {
                waiting.push(id);
            }
        }
        let (round, rest): (Vec<Read>, Vec<Read>) =
            std::mem::take(&mut carry).into_iter().partition(|r| {
                !waiting.contains(&(r.dev, r.ino))
                    && ends.get(&(r.dev, r.ino)).is_none_or(|e| r.end <= *e)
            });
        carry = rest;
        restored.in_flight.clear();
        let max_payload = super::max_payload(&client);
        let round: Vec<Read> = round
            .into_iter()
            .filter(|r| {
                let fits = r.bytes.len() + ENVELOPE <= max_payload;
                if !fits {
                    summary.dead_letters += 1;
                    tracing::warn!(
                        path = %retryscope_core::sanitize::display(&r.path.to_string_lossy()),
                        end_offset = r.end,
                        bytes = r.bytes.len(),
                        max_payload,
                        "line larger than the server's largest message: not shipped (a dead \
                         letter); raise the server's max_payload or lower --max-line-bytes"
                    );
                }
                fits
            })
            .collect();
        let n = round.len() as u64;
        let in_flight = in_flight_of(&round);
        if n > 0 {
            if let Some(path) = &checkpoint_path {
                save_state(
                    path,
                    &acked,
                    &in_flight,
                    &routes.saved(&tailer.checkpoints()),
                );
            }
            let part =
                |r: &Read| routes.partition(r.dev, r.ino, &r.bytes, &cfg.source_id, partitions);
            let batch = batches(&round, &cfg.source_id, part, max_payload);
            publish_all(&js, &batch, &shutdown).await?;
            summary.lines += n;
        }
        if n > 0 || stop {
            acked = acknowledged(tailer.checkpoints(), &carry, &acked, &in_flight);
            if let Some(path) = &checkpoint_path {
                save_state(path, &acked, &[], &routes.saved(&acked));
            }
        }
        if stop {
            return Ok(summary);
        }
        if !stats.throttled && n == 0 {
            tokio::time::sleep(cfg.poll_interval).await;
        }
    }
}

/// Read what the tailer has into `carry`.
fn poll_into(
    tailer: &mut FileTailer,
    metrics: &Metrics,
    carry: &mut Vec<Read>,
) -> crate::source::file::PollStats {
    let mut lines: Vec<(PathBuf, u64, Bytes)> = Vec::new();
    let mut too_long = Vec::new();
    let stats = tailer.poll(
        &mut |line| {
            lines.push((
                line.path.to_path_buf(),
                line.end_offset,
                Bytes::copy_from_slice(line.bytes),
            ));
            if line.unterminated {
                // The writer stopped without a newline: the record the line belongs to ends
                // with it, as `run` has it (an SSE event without its blank line is
                // dispatched). Every format skips an empty line.
                lines.push((line.path.to_path_buf(), line.end_offset, Bytes::new()));
            }
        },
        &mut TailerReport {
            metrics,
            too_long: &mut too_long,
        },
    );
    // The identity of each file read in this poll (lines name only its current path).
    let ids: HashMap<PathBuf, (u64, u64)> = tailer
        .checkpoints()
        .into_iter()
        .map(|c| (c.path, (c.dev, c.ino)))
        .collect();
    carry.extend(lines.into_iter().map(|(path, end, bytes)| {
        let (dev, ino) = ids.get(&path).copied().unwrap_or((0, 0));
        Read {
            path,
            dev,
            ino,
            end,
            bytes,
        }
    }));
    stats
}

fn restored_ends(in_flight: &[InFlight]) -> HashMap<(u64, u64), u64> {
    in_flight.iter().map(|f| ((f.dev, f.ino), f.end)).collect()
}

/// Each file's last line in `round`.
fn in_flight_of(round: &[Read]) -> Vec<InFlight> {
    let mut ends: HashMap<(u64, u64), u64> = HashMap::new();
    for r in round {
        let e = ends.entry((r.dev, r.ino)).or_insert(0);
        *e = (*e).max(r.end);
    }
    let mut v: Vec<InFlight> = ends
        .into_iter()
        .map(|((dev, ino), end)| InFlight { dev, ino, end })
        .collect();
    v.sort_by_key(|f| (f.dev, f.ino));
    v
}

/// The offsets now acknowledged: the tailer's, except that a file with lines still carried
/// (read, not published) stays after its last line `published` (or where it was `before`).
fn acknowledged(
    mut now: Vec<FileCheckpoint>,
    carry: &[Read],
    before: &[FileCheckpoint],
    published: &[InFlight],
) -> Vec<FileCheckpoint> {
    for c in &mut now {
        let id = (c.dev, c.ino);
        if carry.iter().any(|r| (r.dev, r.ino) == id) {
            c.offset = published
                .iter()
                .find(|f| (f.dev, f.ino) == id)
                .map(|f| f.end)
                .or_else(|| {
                    before
                        .iter()
                        .find(|b| (b.dev, b.ino) == id)
                        .map(|b| b.offset)
                })
                .unwrap_or(0);
        }
    }
    now
}

/// The messages of a round: per file and partition, in order, up to [`BATCH_LINES`] lines and
/// [`BATCH_BYTES`] (or the server's largest message) each. The same lines always make the
/// same messages (a re-sent round is dropped by its ids).
fn batches(
    round: &[Read],
    source_id: &str,
    mut partition: impl FnMut(&Read) -> u32,
    max_payload: usize,
) -> Vec<Pending> {
    let limit = BATCH_BYTES.min(max_payload.saturating_sub(ENVELOPE)).max(1);
    // Open batches by (file, partition), in the order they were opened.
    struct Open<'a> {
        partition: u32,
        lines: Vec<&'a Read>,
        bytes: usize,
    }
    let mut order: Vec<Open<'_>> = Vec::new();
    let mut open: HashMap<(u64, u64, u32), usize> = HashMap::new();
    let mut out = Vec::new();
    for r in round {
        let key = (r.dev, r.ino, partition(r));
        let i = *open.entry(key).or_insert_with(|| {
            order.push(Open {
                partition: key.2,
                lines: Vec::new(),
                bytes: 0,
            });
            order.len() - 1
        });
        let b = &mut order[i];
        if !b.lines.is_empty()
            && (b.lines.len() >= BATCH_LINES || b.bytes + r.bytes.len() + 1 > limit)
        {
            out.push(message(
                std::mem::take(&mut b.lines),
                source_id,
                b.partition,
            ));
            b.bytes = 0;
        }
        b.bytes += r.bytes.len() + 1;
        b.lines.push(r);
    }
    for b in order {
        if !b.lines.is_empty() {
            out.push(message(b.lines, source_id, b.partition));
        }
    }
    out
}

/// One message of `lines` (one file's, one partition's, in order).
fn message(lines: Vec<&Read>, source_id: &str, partition: u32) -> Pending {
    let (first, last) = (lines[0], lines[lines.len() - 1]);
    let mut payload = Vec::with_capacity(lines.iter().map(|r| r.bytes.len() + 1).sum());
    for (i, r) in lines.iter().enumerate() {
        if i > 0 {
            payload.push(b'\n');
        }
        payload.extend_from_slice(&r.bytes);
    }
    let mut headers = HeaderMap::new();
    let id = if last.dev == STDIN_DEV {
        format!(
            "{source_id}/{}.{}/{}",
            last.path.display(),
            last.ino,
            last.end
        )
    } else {
        format!("{source_id}/{}.{}/{}", last.dev, last.ino, last.end)
    };
    headers.insert("Nats-Msg-Id", id.as_str());
    headers.insert(
        STREAM_HEADER,
        format!("{source_id}:{}", first.path.display()).as_str(),
    );
    headers.insert(LINES_HEADER, lines.len().to_string().as_str());
    Pending {
        subject: subject(partition),
        headers,
        payload: Bytes::from(payload),
    }
}

/// Publish a batch and wait for every acknowledgement; on failure (server away) publish the
/// whole batch again (the message ids make that safe) until it is acknowledged.
pub(super) async fn publish_all(
    js: &jetstream::Context,
    batch: &[Pending],
    shutdown: &AtomicBool,
) -> Result<(), NatsError> {
    let mut backoff = Duration::from_millis(100);
    loop {
        match try_publish(js, batch).await {
            Ok(()) => return Ok(()),
            Err(e) => {
                if shutdown.load(Ordering::SeqCst) {
                    return Err(e);
                }
                tracing::warn!(error = %e, "publish failed; retrying the batch");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }
}

async fn try_publish(js: &jetstream::Context, batch: &[Pending]) -> Result<(), NatsError> {
    const IN_FLIGHT: usize = 256;
    for chunk in batch.chunks(IN_FLIGHT) {
        let mut acks = Vec::with_capacity(chunk.len());
        for m in chunk {
            let ack = js
                .publish_with_headers(m.subject.clone(), m.headers.clone(), m.payload.clone())
                .await
                .map_err(|e| NatsError::new("publishing a line", e))?;
            acks.push(ack);
        }
        for ack in acks {
            ack.await
                .map_err(|e| NatsError::new("waiting for JetStream's acknowledgement", e))?;
        }
    }
    Ok(())
}

/// The state of an earlier run (version 1 was the offsets alone). A checkpoint that is there
/// but unusable stops the shipper (starting over would ship every line again, and the
/// duplicate window is minutes, not the life of a file) unless `reset`: then it is moved aside
/// and shipping starts over.
fn load_state(path: &std::path::Path, reset: bool) -> Result<ShipState, NatsError> {
    let why = match checkpoint_io::read_checkpoint(path) {
        Ok(None) => return Ok(ShipState::default()),
        Ok(Some(bytes)) => match serde_json::from_slice::<ShipState>(&bytes) {
            Ok(state) => return Ok(state),
            Err(e) => match serde_json::from_slice::<Vec<FileCheckpoint>>(&bytes) {
                Ok(files) => {
                    return Ok(ShipState {
                        version: 1,
                        files,
                        ..ShipState::default()
                    });
                }
                Err(_) => e.to_string(),
            },
        },
        Err(e) => e.to_string(),
    };
    let shown = retryscope_core::sanitize::display(&path.to_string_lossy()).into_owned();
    if !reset {
        return Err(NatsError::new(
            "reading the ship checkpoint",
            format!(
                "{shown} is unusable ({why}); refusing to start, because starting over would \
                 ship every line again. Restart with --reset-checkpoint to move it aside and \
                 start over"
            ),
        ));
    }
    let moved = crate::run::checkpoint::set_aside(path, None)
        .map_err(|e| NatsError::new("moving the unusable ship checkpoint aside", e))?;
    tracing::error!(
        checkpoint = %shown,
        why = %why,
        moved_to = ?moved,
        "ship checkpoint unusable: moved aside, shipping starts over (--reset-checkpoint)"
    );
    Ok(ShipState::default())
}

fn save_state(
    path: &std::path::Path,
    files: &[FileCheckpoint],
    in_flight: &[InFlight],
    routes: &[Routed],
) {
    let state = ShipState {
        version: 3,
        files: files.to_vec(),
        in_flight: in_flight.to_vec(),
        routes: routes.to_vec(),
    };
    let written = serde_json::to_vec(&state)
        .map_err(std::io::Error::other)
        .and_then(|bytes| {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            checkpoint_io::write_atomic(path, &bytes)
        });
    if let Err(e) = written {
        tracing::warn!(path = %path.display(), error = %e, "ship checkpoint not written");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nats::partition::partition_of;

    fn read(ino: u64, end: u64, turn: &str, pad: usize) -> Read {
        let line = format!(
            r#"{{"turn":"{turn}","type":"text","text":"{}"}}"#,
            "x".repeat(pad)
        );
        Read {
            path: PathBuf::from(format!("/logs/{ino}.jsonl")),
            dev: 1,
            ino,
            end,
            bytes: Bytes::from(line),
        }
    }

    fn ids(b: &[Pending]) -> Vec<String> {
        b.iter()
            .map(|m| {
                m.headers
                    .get("Nats-Msg-Id")
                    .map(|v| v.as_str().to_owned())
                    .unwrap_or_default()
            })
            .collect()
    }

    #[test]
    fn a_round_is_cut_into_the_same_messages_every_time_and_none_is_too_large() {
        let mut round = Vec::new();
        for i in 0..2_500u64 {
            round.push(read(1 + i % 2, 100 * (i + 1), &format!("t{}", i % 7), 40));
        }
        let a = batches(
            &round,
            "host",
            |r: &Read| partition_of(&r.bytes, 4),
            64 * 1024,
        );
        let b = batches(
            &round,
            "host",
            |r: &Read| partition_of(&r.bytes, 4),
            64 * 1024,
        );
        assert_eq!(ids(&a), ids(&b), "a re-sent round has the same ids");
        let lines: usize = a
            .iter()
            .map(|m| {
                let n: usize = m
                    .headers
                    .get(LINES_HEADER)
                    .map_or(0, |v| v.as_str().parse().unwrap_or(0));
                assert_eq!(m.payload.split(|c| *c == b'\n').count(), n);
                assert!(n <= BATCH_LINES && m.payload.len() + ENVELOPE <= 64 * 1024);
                n
            })
            .sum();
        assert_eq!(lines, round.len(), "every line, once");
        assert!(a.len() < round.len() / 50, "batched: {} messages", a.len());
        // Each file's lines stay in order within their partition.
        let unique: std::collections::HashSet<_> = ids(&a).into_iter().collect();
        assert_eq!(unique.len(), a.len(), "ids are unique");
    }

    #[test]
    fn offsets_stay_behind_lines_read_and_not_yet_published() {
        let cp = |ino, offset| FileCheckpoint {
            path: PathBuf::from(format!("/logs/{ino}.jsonl")),
            dev: 1,
            ino,
            fingerprint: 0,
            fingerprint_len: 0,
            offset,
        };
        let now = vec![cp(1, 900), cp(2, 500)];
        let carry = vec![read(1, 900, "t", 1)];
        let published = [InFlight {
            dev: 1,
            ino: 1,
            end: 600,
        }];
        let acked = acknowledged(now, &carry, &[cp(1, 300), cp(2, 200)], &published);
        assert_eq!(
            acked.iter().map(|c| c.offset).collect::<Vec<_>>(),
            vec![600, 500]
        );
    }
}
