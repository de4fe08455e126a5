//! `retryscope ship`: tail files like `run` does (the same [`FileTailer`], rotation and
//! checkpoint) and publish every complete line to its partition's subject.
//!
//! Each message carries `Nats-Msg-Id` = `<source id>/<dev>.<inode>/<end offset>`, the line's
//! identity, so a line re-sent after a restart (published, not yet checkpointed) is dropped by
//! JetStream's duplicate window. Offsets are checkpointed only after JetStream acknowledged
//! every line before them: a crash loses nothing and duplicates nothing (within the window).
//! Limit: a file truncated in place and rewritten to the same offsets within the duplicate
//! window reuses ids (its new lines would be dropped); rotation by rename gives a new inode.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream;
use bytes::Bytes;

use super::deploy::Deploy;
use super::partition::{ensure_events_stream, partition_of, subject};
use super::{NatsError, STREAM_HEADER};
use crate::internal_events::TailerReport;
use crate::sink::metrics::Metrics;
use crate::source::checkpoint_io;
use crate::source::file::{FileCheckpoint, FileTailer, FileTailerConfig, ReadFrom};

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

struct Pending {
    subject: String,
    headers: HeaderMap,
    payload: Bytes,
}

/// Ship until `shutdown` is set; the last acknowledged offsets are checkpointed before return.
pub async fn ship(cfg: ShipConfig, shutdown: Arc<AtomicBool>) -> Result<ShipSummary, NatsError> {
    // Before connecting: an unusable checkpoint stops the shipper at once.
    let checkpoint_path = cfg.data_dir.as_ref().map(|d| d.join(SHIP_CHECKPOINT_FILE));
    let restored: Vec<FileCheckpoint> = match (&checkpoint_path, cfg.stdin) {
        (Some(p), false) => load_offsets(p, cfg.reset_checkpoint)?,
        _ => Vec::new(),
    };
    let client = cfg
        .nats
        .connect(&format!("retryscope-ship {}", cfg.source_id))
        .await?;
    let js = jetstream::new(client.clone());
    let partitions =
        ensure_events_stream(&js, cfg.partitions, cfg.duplicate_window, &cfg.nats).await?;
    tracing::info!(partitions, "shipping to JetStream");
    if cfg.stdin {
        return ship_stdin(&cfg, &js, &client, partitions, shutdown).await;
    }
    let mut tailer = FileTailer::new(
        FileTailerConfig {
            include: cfg.include.clone(),
            read_from: cfg.read_from,
            max_line_bytes: cfg.max_line_bytes,
            ..FileTailerConfig::default()
        },
        restored,
    );
    let metrics =
        Metrics::new(Default::default()).map_err(|e| NatsError::new("registering counters", e))?;
    let mut summary = ShipSummary {
        lines: 0,
        partitions,
        dead_letters: 0,
    };
    loop {
        let stop = shutdown.load(Ordering::SeqCst);
        let mut lines: Vec<(PathBuf, u64, Bytes)> = Vec::new();
        let mut too_long = Vec::new();
        let stats = tailer.poll(
            &mut |line| {
                lines.push((
                    line.path.to_path_buf(),
                    line.end_offset,
                    Bytes::copy_from_slice(line.bytes),
                ))
            },
            &mut TailerReport {
                metrics: &metrics,
                too_long: &mut too_long,
            },
        );
        // The identity of each file read in this poll (lines name only its current path).
        let ids: HashMap<PathBuf, (u64, u64)> = tailer
            .checkpoints()
            .into_iter()
            .map(|c| (c.path, (c.dev, c.ino)))
            .collect();
        let max_payload = super::max_payload(&client);
        let batch: Vec<Pending> = lines
            .into_iter()
            .filter(|(path, end, payload)| {
                let fits = payload.len() + ENVELOPE <= max_payload;
                if !fits {
                    summary.dead_letters += 1;
                    tracing::warn!(
                        path = %retryscope_core::sanitize::display(&path.to_string_lossy()),
                        end_offset = end,
                        bytes = payload.len(),
                        max_payload,
                        "line larger than the server's largest message: not shipped (a dead \
                         letter); raise the server's max_payload or lower --max-line-bytes"
                    );
                }
                fits
            })
            .map(|(path, end, payload): (PathBuf, u64, Bytes)| {
                let (dev, ino) = ids.get(&path).copied().unwrap_or((0, 0));
                let mut headers = HeaderMap::new();
                headers.insert(
                    "Nats-Msg-Id",
                    format!("{}/{dev}.{ino}/{end}", cfg.source_id).as_str(),
                );
                headers.insert(
                    STREAM_HEADER,
                    format!("{}:{}", cfg.source_id, path.display()).as_str(),
                );
                Pending {
                    subject: subject(partition_of(&payload, partitions)),
                    headers,
                    payload,
                }
            })
            .collect();
        let n = batch.len() as u64;
        if n > 0 {
            publish_all(&js, &batch, &shutdown).await?;
            summary.lines += n;
        }
        if let Some(path) = &checkpoint_path
            && (n > 0 || stop)
        {
            save_offsets(path, &tailer.checkpoints());
        }
        if stop {
            return Ok(summary);
        }
        if !stats.throttled && n == 0 {
            tokio::time::sleep(cfg.poll_interval).await;
        }
    }
}

/// Ship standard input until it ends. Lines have no position to checkpoint: their ids
/// (`<source id>/stdin.<start ms>/<line number>`) only make a batch re-published after a
/// failed publish harmless; a restarted shipper reads a new stdin.
async fn ship_stdin(
    cfg: &ShipConfig,
    js: &jetstream::Context,
    client: &async_nats::Client,
    partitions: u32,
    shutdown: Arc<AtomicBool>,
) -> Result<ShipSummary, NatsError> {
    use crate::run::{FeedItem, start_feeds};
    use std::sync::mpsc::TryRecvError;
    const MAX_BATCH: usize = 4096;
    let rx = start_feeds(true, None, cfg.max_line_bytes, shutdown.clone());
    let nonce = super::wall_ms();
    let stream = format!("{}:stdin", cfg.source_id);
    let mut number = 0u64;
    let mut summary = ShipSummary {
        lines: 0,
        partitions,
        dead_letters: 0,
    };
    let mut ended = false;
    while !ended && !shutdown.load(Ordering::SeqCst) {
        let max_payload = super::max_payload(client);
        let mut batch = Vec::new();
        while batch.len() < MAX_BATCH {
            let item = match rx.try_recv() {
                Ok(item) => item,
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    ended = true;
                    break;
                }
            };
            match item {
                FeedItem::Line { bytes, .. } if bytes.len() + ENVELOPE > max_payload => {
                    number += 1;
                    summary.dead_letters += 1;
                    tracing::warn!(
                        line = number,
                        bytes = bytes.len(),
                        max_payload,
                        "stdin line larger than the server's largest message: not shipped (a \
                         dead letter)"
                    );
                }
                FeedItem::Line { bytes, .. } => {
                    number += 1;
                    let payload = Bytes::from(bytes);
                    let mut headers = HeaderMap::new();
                    headers.insert(
                        "Nats-Msg-Id",
                        format!("{}/stdin.{nonce}/{number}", cfg.source_id).as_str(),
                    );
                    headers.insert(STREAM_HEADER, stream.as_str());
                    batch.push(Pending {
                        subject: subject(partition_of(&payload, partitions)),
                        headers,
                        payload,
                    });
                }
                FeedItem::TooLong { len, .. } => {
                    number += 1;
                    tracing::warn!(line = number, bytes = len, "stdin line too long; skipped");
                }
                FeedItem::End { .. } => ended = true,
            }
        }
        if batch.is_empty() {
            if !ended {
                tokio::time::sleep(cfg.poll_interval.min(Duration::from_millis(20))).await;
            }
            continue;
        }
        publish_all(js, &batch, &shutdown).await?;
        summary.lines += batch.len() as u64;
    }
    Ok(summary)
}

/// Publish a batch and wait for every acknowledgement; on failure (server away) publish the
/// whole batch again (the message ids make that safe) until it is acknowledged.
async fn publish_all(
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

/// The offsets of an earlier run. A checkpoint that is there but unusable stops the shipper
/// (starting over would ship every line again, and the duplicate window is minutes, not the
/// life of a file) unless `reset`: then it is moved aside and shipping starts over.
fn load_offsets(path: &std::path::Path, reset: bool) -> Result<Vec<FileCheckpoint>, NatsError> {
    let why = match checkpoint_io::read_checkpoint(path) {
        Ok(None) => return Ok(Vec::new()),
        Ok(Some(bytes)) => match serde_json::from_slice(&bytes) {
            Ok(files) => return Ok(files),
            Err(e) => e.to_string(),
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
    Ok(Vec::new())
}

fn save_offsets(path: &std::path::Path, files: &[FileCheckpoint]) {
    let written = serde_json::to_vec(files)
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
