//! Line feeds that are not files: stdin and the built-in demo fleet, each on its own thread,
//! sending lines through one bounded channel (back-pressure, bounded memory).

use std::io::{self, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::time::{Duration, Instant};

use crate::config::DemoSettings;
use retryscope_core::ingest::Source;
use retryscope_core::input::{Line, LineReader};

/// Which feed a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feed {
    /// Standard input.
    Stdin,
    /// The demo fleet.
    Demo,
    /// `retryscope proxy`: native lines of the attempts it sees on the wire.
    Proxy,
}

impl Feed {
    /// Where its lines come from.
    pub fn source(self) -> Source {
        match self {
            Feed::Stdin => Source::Stdin,
            Feed::Demo => Source::Demo,
            Feed::Proxy => Source::Proxy,
        }
    }

    /// Its stream's name.
    pub fn name(self) -> &'static str {
        match self {
            Feed::Stdin => "<stdin>",
            Feed::Demo => "<demo>",
            Feed::Proxy => "<proxy>",
        }
    }
}

/// One item from a feed.
#[derive(Debug)]
pub enum FeedItem {
    /// A line.
    Line {
        /// From where.
        feed: Feed,
        /// The bytes, without the newline.
        bytes: Vec<u8>,
    },
    /// A line skipped for its length.
    TooLong {
        /// From where.
        feed: Feed,
        /// Its length.
        len: u64,
    },
    /// The feed ended.
    End {
        /// Which.
        feed: Feed,
    },
}

/// Start the requested feeds; lines arrive on the returned channel.
pub fn start(
    stdin: bool,
    demo: Option<DemoSettings>,
    max_line_bytes: usize,
    shutdown: Arc<AtomicBool>,
) -> Receiver<FeedItem> {
    let (tx, rx) = sync_channel(16_384);
    if stdin {
        let tx = tx.clone();
        std::thread::spawn(move || read_stdin(tx, max_line_bytes));
    }
    if let Some(settings) = demo {
        std::thread::spawn(move || run_demo(tx, settings, shutdown));
    }
    rx
}

fn read_stdin(tx: SyncSender<FeedItem>, max_line_bytes: usize) {
    let stdin = io::stdin();
    let mut reader = LineReader::new(stdin.lock(), max_line_bytes);
    loop {
        let item = match reader.next_line() {
            // Blank lines too: the ingest path decides what they mean (an SSE event's end).
            Ok(Some(Line::Complete { bytes, .. })) => FeedItem::Line {
                feed: Feed::Stdin,
                bytes: bytes.to_vec(),
            },
            Ok(Some(Line::TooLong { len, .. })) => FeedItem::TooLong {
                feed: Feed::Stdin,
                len,
            },
            Ok(None) => break,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read stdin");
                break;
            }
        };
        if tx.send(item).is_err() {
            return;
        }
    }
    let _ = tx.send(FeedItem::End { feed: Feed::Stdin });
}

fn run_demo(tx: SyncSender<FeedItem>, settings: DemoSettings, shutdown: Arc<AtomicBool>) {
    let mut cfg = crate::demo::FleetConfig::demo(settings.seed);
    cfg.agents = settings.agents.max(1);
    cfg.retry_rate = settings.retry_rate;
    cfg.start_ms = super::wall_ms();
    // Enough turns in flight to reach the asked rate in real time (a demo turn lasts seconds).
    cfg.interleave = cfg
        .interleave
        .max((settings.turns_per_sec * 8.0).ceil().min(10_000.0) as usize);
    let mut fleet = crate::demo::Fleet::new(cfg);
    let started = Instant::now();
    let mut buf: Vec<u8> = Vec::new();
    while !shutdown.load(Ordering::SeqCst) {
        let due = (started.elapsed().as_secs_f64() * settings.turns_per_sec).floor() as u64;
        let new_turns = due.saturating_sub(fleet.stats().turns_started);
        buf.clear();
        // Lines are released when their event time comes: nothing is stamped in the future.
        if fleet
            .write_due(super::wall_ms(), new_turns, &mut buf)
            .is_err()
        {
            break;
        }
        for line in buf.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            let item = FeedItem::Line {
                feed: Feed::Demo,
                bytes: line.to_vec(),
            };
            if tx.send(item).is_err() {
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = buf.flush();
    let _ = tx.send(FeedItem::End { feed: Feed::Demo });
}
