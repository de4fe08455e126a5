//! Line feeds that are not files: stdin and the built-in demo fleet, each on its own thread,
//! sending through one bounded channel (back-pressure, bounded memory), and
//! [`FeedSource`], the engine's [`LiveSource`] over such a channel (the proxy's feed too).
//!
//! Stdin is sent as the bytes each read returns and split into lines by the reader of the
//! channel ([`PipeLines`]): a writer that stops without a newline while keeping the pipe
//! open (a provider body without its last `\n`, an agent waiting) would otherwise hold its
//! last line (and the record it ends) until the pipe closed. Like a file's last line, it is
//! delivered once the pipe has been quiet for the partial-line wait, and ends its record.

use std::io::{self, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, sync_channel};
use std::time::{Duration, Instant};

use crate::config::DemoSettings;
use crate::engine::{Core, LiveSource, Polled};
use crate::internal_events::{InternalEvent, LineRead};
use crate::sink::metrics::Metrics;
use retryscope_core::ingest::{Source, StreamId};
use retryscope_core::input::{Line, LineSplitter};

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
    /// Bytes as read (stdin): split into lines by [`PipeLines`].
    Bytes {
        /// From where.
        feed: Feed,
        /// What one read returned.
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

/// Start the requested feeds; what they read arrives on the returned channel. It holds at
/// most 1,024 items of stdin alone (16 MiB of reads), 16,384 with the demo fleet's lines.
pub fn start(
    stdin: bool,
    demo: Option<DemoSettings>,
    shutdown: Arc<AtomicBool>,
) -> Receiver<FeedItem> {
    let (tx, rx) = sync_channel(if demo.is_some() { 16_384 } else { 1_024 });
    if stdin {
        let tx = tx.clone();
        std::thread::spawn(move || read_stdin(tx));
    }
    if let Some(settings) = demo {
        std::thread::spawn(move || run_demo(tx, settings, shutdown));
    }
    rx
}

/// One line of a pipe, from [`PipeLines`].
#[derive(Debug, PartialEq, Eq)]
pub enum PipeLine<'a> {
    /// A line (without its newline).
    Line(&'a [u8]),
    /// The last line, without a newline, after the pipe stayed quiet (or ended): the record
    /// it belongs to (an SSE event) ends with it. Whatever completes it later is the next
    /// line.
    Unterminated(&'a [u8]),
    /// A line over the length limit, skipped: its length.
    TooLong(u64),
}

/// A pipe's bytes split into bounded lines as they arrive, with a partial last line given up
/// after `wait` of quiet (never, with `wait` zero, until the pipe ends).
#[derive(Debug)]
pub struct PipeLines {
    splitter: LineSplitter,
    wait: Duration,
    last_bytes: Instant,
}

impl PipeLines {
    /// Lines of at most `max_line_bytes`; a partial line waits `wait` of quiet.
    pub fn new(max_line_bytes: usize, wait: Duration) -> Self {
        PipeLines {
            splitter: LineSplitter::new(max_line_bytes),
            wait,
            last_bytes: Instant::now(),
        }
    }

    /// The pipe's next bytes, read at `now`.
    pub fn push(&mut self, bytes: &[u8], now: Instant, on: &mut impl FnMut(PipeLine<'_>)) {
        self.last_bytes = now;
        self.splitter.push(bytes, &mut |line| on(whole(line)));
    }

    /// At `now`: the partial last line, if the pipe has been quiet for the wait.
    pub fn quiet(&mut self, now: Instant, on: &mut impl FnMut(PipeLine<'_>)) {
        if !self.wait.is_zero()
            && self.splitter.holds_partial()
            && now.saturating_duration_since(self.last_bytes) >= self.wait
        {
            self.end(on);
        }
    }

    /// Whether a partial last line is held.
    pub fn holds_partial(&self) -> bool {
        self.splitter.holds_partial()
    }

    /// The pipe ended: its partial last line, if any.
    pub fn end(&mut self, on: &mut impl FnMut(PipeLine<'_>)) {
        self.splitter.take_partial(&mut |line| {
            on(match line {
                Line::Complete { bytes, .. } => PipeLine::Unterminated(bytes),
                Line::TooLong { len, .. } => PipeLine::TooLong(len),
            })
        });
    }
}

fn whole(line: Line<'_>) -> PipeLine<'_> {
    match line {
        Line::Complete { bytes, .. } => PipeLine::Line(bytes),
        Line::TooLong { len, .. } => PipeLine::TooLong(len),
    }
}

/// Items taken per poll, at most.
const MAX_ITEMS_PER_POLL: usize = 10_000;

/// A channel of [`FeedItem`]s as a source: stdin and the demo fleet ([`start`]), or another
/// part of the process (the proxy). No position: a pipe cannot be read again.
pub struct FeedSource {
    rx: Receiver<FeedItem>,
    name: &'static str,
    kind: Source,
    /// Whether stdin writes to it (its end, or the channel's, is stdin's end).
    stdin: bool,
    /// Whether it ends by itself: stdin alone.
    finite: bool,
    /// Stdin's bytes, split into lines.
    pipe: PipeLines,
    metrics: Arc<Metrics>,
}

impl FeedSource {
    /// The feeds [`start`] started: stdin (split by `pipe`), the demo fleet, or both.
    pub fn started(
        rx: Receiver<FeedItem>,
        stdin: bool,
        demo: bool,
        pipe: PipeLines,
        metrics: Arc<Metrics>,
    ) -> Self {
        FeedSource {
            rx,
            name: if demo { "demo" } else { "stdin" },
            kind: if stdin { Source::Stdin } else { Source::Demo },
            stdin,
            finite: stdin && !demo,
            pipe,
            metrics,
        }
    }

    /// Lines another part of the process sends (the proxy): it never ends by itself.
    pub fn external(rx: Receiver<FeedItem>, feed: Feed, metrics: Arc<Metrics>) -> Self {
        FeedSource {
            rx,
            name: feed.name().trim_matches(['<', '>']),
            kind: feed.source(),
            stdin: false,
            finite: false,
            pipe: PipeLines::new(1, Duration::ZERO),
            metrics,
        }
    }
}

impl LiveSource for FeedSource {
    fn name(&self) -> &'static str {
        self.name
    }

    fn kind(&self) -> Source {
        self.kind
    }

    fn poll(&mut self, core: &mut Core, now: i64) -> Polled {
        let mut polled = Polled::default();
        let mut taken = 0;
        while taken < MAX_ITEMS_PER_POLL {
            let item = match self.rx.try_recv() {
                Ok(item) => item,
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    polled.ended |= self.stdin;
                    break;
                }
            };
            taken += 1;
            match item {
                FeedItem::Line { feed, bytes } => {
                    polled.lines += 1;
                    LineRead {
                        source: feed.source(),
                    }
                    .emit(&self.metrics);
                    let stream = core.stream(feed.source(), feed.name());
                    core.line(stream, &bytes, now);
                }
                FeedItem::Bytes { feed, bytes } => {
                    let stream = core.stream(feed.source(), feed.name());
                    let mut on = pipe_into(core, stream, feed, now, &self.metrics, &mut polled);
                    self.pipe.push(&bytes, Instant::now(), &mut on);
                }
                FeedItem::TooLong { feed, len } => {
                    polled.lines += 1;
                    let stream = core.stream(feed.source(), feed.name());
                    core.too_long(stream, len);
                }
                FeedItem::End { feed } => {
                    let stream = core.stream(feed.source(), feed.name());
                    if feed == Feed::Stdin {
                        let mut on = pipe_into(core, stream, feed, now, &self.metrics, &mut polled);
                        self.pipe.end(&mut on);
                    }
                    core.end(stream, now);
                    polled.ended |= feed == Feed::Stdin;
                }
            }
        }
        if self.stdin && !polled.ended && self.pipe.holds_partial() {
            let stream = core.stream(Feed::Stdin.source(), Feed::Stdin.name());
            let mut on = pipe_into(core, stream, Feed::Stdin, now, &self.metrics, &mut polled);
            self.pipe.quiet(Instant::now(), &mut on);
        }
        polled.busy = taken == MAX_ITEMS_PER_POLL;
        polled
    }

    fn finite(&self) -> bool {
        self.finite
    }
}

/// Where a pipe's lines go: into `core` on `stream`, counted.
fn pipe_into<'c>(
    core: &'c mut Core,
    stream: StreamId,
    feed: Feed,
    now: i64,
    metrics: &'c Metrics,
    polled: &'c mut Polled,
) -> impl FnMut(PipeLine<'_>) + 'c {
    move |line| {
        polled.lines += 1;
        match line {
            PipeLine::Line(bytes) | PipeLine::Unterminated(bytes) => {
                LineRead {
                    source: feed.source(),
                }
                .emit(metrics);
                core.line(stream, bytes, now);
                if matches!(line, PipeLine::Unterminated(_)) {
                    // As a file's last line: the record it belongs to ends with it (every
                    // format skips an empty line).
                    core.line(stream, b"", now);
                }
            }
            PipeLine::TooLong(len) => core.too_long(stream, len),
        }
    }
}

/// Bytes read from stdin at once, at most.
const STDIN_READ: usize = 16 * 1024;

fn read_stdin(tx: SyncSender<FeedItem>) {
    use std::io::Read;
    let mut stdin = io::stdin().lock();
    let mut buf = vec![0u8; STDIN_READ];
    loop {
        let n = match stdin.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read stdin");
                break;
            }
        };
        let item = FeedItem::Bytes {
            feed: Feed::Stdin,
            bytes: buf[..n].to_vec(),
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
