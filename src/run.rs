//! `retryscope run`: the live collector's engine loop.
//!
//! One blocking thread owns the pipeline (decoders and correlator), the file tailer and the
//! findings sink, so a checkpoint taken between two polls is consistent: file offsets,
//! open-turn state, metric values and the findings file offset all describe the same instant.
//! stdin and the demo fleet feed lines through a bounded channel, the OTLP receiver through
//! its bounded queue (`run/otlp_feed.rs`); the HTTP server and the trace exporter live on the
//! tokio runtime and never block this loop.

pub(crate) mod checkpoint;
mod feeds;
mod otlp_feed;
mod sharded;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::config::RunConfig;
use crate::internal_events::{
    CheckpointFailed, CheckpointWritten, FindingWriteFailed, Ingested, InternalEvent, LineRead,
    TailerReport,
};
use crate::sink::findings::FindingsSink;
use crate::sink::metrics::Metrics;
use crate::source::file::{FileTailer, FileTailerConfig};
use retryscope_core::correlate::{CorrelatorConfig, Output};
use retryscope_core::cost::PriceTable;
use retryscope_core::ingest::{Note, Source, StreamId};

pub use checkpoint::{CHECKPOINT_FILE, Checkpoint};
pub use feeds::{Feed, FeedItem, start as start_feeds};
pub use sharded::{IngestState, MAX_WORKERS, Restored, ShardedIngest, WorkerDied, default_workers};

/// Where lines come from.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// Tail files matching the configuration's globs.
    pub files: bool,
    /// Read standard input.
    pub stdin: bool,
    /// Run the built-in demo fleet.
    pub demo: bool,
    /// Read what the OTLP receiver accepts into this queue.
    pub otlp: Option<Arc<crate::source::otlp::Queue>>,
    /// Lines from another feed (`retryscope proxy`): set with [`Engine::with_feed`].
    pub external: bool,
}

impl Sources {
    /// Whether there is anything to read ([`RunError::NoSource`] otherwise).
    pub fn any(&self) -> bool {
        self.files || self.stdin || self.demo || self.otlp.is_some() || self.external
    }
}

/// Why the collector could not start or went down.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The price table.
    #[error(transparent)]
    Prices(#[from] retryscope_core::cost::PriceError),
    /// The findings output.
    #[error("cannot open findings output `{target}`: {source}")]
    Findings {
        /// Where.
        target: String,
        /// Why.
        source: std::io::Error,
    },
    /// The checkpoint exists but cannot be used.
    #[error(transparent)]
    Checkpoint(#[from] checkpoint::CheckpointError),
    /// The checkpoint's metric values do not fit this build.
    #[error("cannot restore metrics from the checkpoint: {0}")]
    MetricsRestore(String),
    /// The data directory cannot hold checkpoints.
    #[error("the data directory {dir} is not writable: {source}")]
    DataDir {
        /// Where.
        dir: String,
        /// Why.
        source: std::io::Error,
    },
    /// The OTLP receiver's spool cannot be opened or read.
    #[error("cannot open the OTLP spool in {dir}: {source}")]
    Spool {
        /// Where.
        dir: String,
        /// Why.
        source: std::io::Error,
    },
    /// Nothing to read.
    #[error("no source: give files or globs, `-` for stdin, --otlp-listen, or --demo")]
    NoSource,
    /// An ingest worker thread died (a bug): the open turns it owned are gone from memory, so
    /// the engine stops before a checkpoint without them could be written.
    #[error(
        "{0}; the run stopped, since the open turns that worker owned are lost from memory. No \
         checkpoint was written after it: with --data-dir, a restart resumes from the last \
         good checkpoint and reads again what came after it"
    )]
    WorkerDied(#[from] WorkerDied),
    /// The ingest worker threads could not be started.
    #[error(transparent)]
    WorkerSpawn(#[from] sharded::WorkerSpawn),
}

/// What happened during a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunSummary {
    /// Lines read.
    pub lines: u64,
    /// Checkpoints written.
    pub checkpoints: u64,
    /// Open turns left in the checkpoint at shutdown.
    pub open_turns_checkpointed: usize,
    /// The checkpoint taken at shutdown could not be written (the next start resumes from an
    /// older one, and re-reads what came after it).
    pub final_checkpoint_failed: bool,
}

/// Descriptors kept for everything but tailed files: checkpoint, findings, HTTP clients,
/// OTLP connections, the runtime.
const RESERVED_FDS: u64 = 128;

/// How many tailed files may be open at once: the soft descriptor limit less a reserve.
fn max_open_files() -> usize {
    match rlimit::Resource::NOFILE.get() {
        Ok((soft, _)) => {
            usize::try_from(soft.saturating_sub(RESERVED_FDS).max(16)).unwrap_or(usize::MAX)
        }
        Err(_) => usize::MAX,
    }
}

/// Ticks (seconds) a gemini-cli session must be quiet before its held telemetry and
/// stream-json events are joined and correlated: its telemetry outfile is written in batches,
/// so a shorter wait could correlate a stream-json before the attempts it belongs to.
const JOIN_QUIET_TICKS: u32 = 10;

/// Wall-clock milliseconds: arrival time of lines (the correlator itself never reads a clock).
fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Everything a checkpoint covers, owned by the engine thread between two polls: the ingest
/// path (decoders, correlator, counters), the tailer's offsets and the findings output.
struct Live {
    ingest: ShardedIngest,
    tailer: Option<FileTailer>,
    feed: Option<Receiver<FeedItem>>,
    otlp: Option<otlp_feed::OtlpFeed>,
    findings: FindingsSink,
    checkpoint_path: Option<PathBuf>,
    out: Vec<Output>,
    summary: RunSummary,
    /// Whether "no file matches" was said (once per run).
    said_no_files: bool,
}

/// Everything the engine loop needs.
pub struct Engine {
    cfg: RunConfig,
    sources: Sources,
    metrics: Arc<Metrics>,
    traces: Option<crate::sink::traces::TraceSink>,
    /// A feed started by the caller (`retryscope proxy`), taken at start.
    external_feed: Option<Receiver<FeedItem>>,
    /// The live page the HTTP server shows (`/ui`): closed turns go there too.
    live_page: Option<crate::sink::live_page::SharedPage>,
}

impl Engine {
    /// Read `rx` too: lines another part of the process sends (the proxy), with the same
    /// back-pressure as stdin's. Its end is not the end of input.
    pub fn with_feed(mut self, rx: Receiver<FeedItem>) -> Self {
        self.external_feed = Some(rx);
        self.sources.external = true;
        self
    }

    /// Show closed turns on `page` too (the metrics port's `/ui`); turns then keep their
    /// timelines.
    pub fn with_live_page(mut self, page: crate::sink::live_page::SharedPage) -> Self {
        self.live_page = Some(page);
        self
    }

    /// An engine for `cfg` reporting into `metrics` and, when configured, exporting traces.
    pub fn new(
        cfg: RunConfig,
        sources: Sources,
        metrics: Arc<Metrics>,
        traces: Option<crate::sink::traces::TraceSink>,
    ) -> Self {
        Engine {
            cfg,
            sources,
            metrics,
            traces,
            external_feed: None,
            live_page: None,
        }
    }

    /// Run until `shutdown` is set (or stdin ends when it is the only source and `exit_on_eof`).
    /// Returns the trace sink so the caller can flush it on the runtime.
    pub fn run(
        mut self,
        shutdown: Arc<AtomicBool>,
        ready: Arc<AtomicBool>,
        exit_on_eof: bool,
    ) -> Result<(RunSummary, Option<crate::sink::traces::TraceSink>), RunError> {
        if !self.sources.any() {
            return Err(RunError::NoSource);
        }
        // Operational span (see crate::telemetry): restore, open outputs, start sources.
        let start_span = tracing::info_span!("engine.start").entered();
        let external = self.external_feed.take();
        let mut live = self.start(&shutdown, external)?;
        drop(start_span);
        ready.store(true, Ordering::SeqCst);
        let poll_every = Duration::from_millis(self.cfg.poll_interval_ms);
        let checkpoint_every = Duration::from_secs(self.cfg.checkpoint_interval_secs);
        let mut last_tick = Instant::now();
        let mut last_checkpoint = Instant::now();
        while !shutdown.load(Ordering::SeqCst) {
            let now = wall_ms();
            let files_busy = self.poll_files(&mut live, now);
            let (feeds_busy, stdin_ended) = self.poll_feeds(&mut live, now);
            let otlp_busy = self.poll_otlp(&mut live, now);
            if stdin_ended
                && !self.sources.files
                && !self.sources.demo
                && self.sources.otlp.is_none()
            {
                // stdin was the only source: its end is the end of input.
                live.ingest
                    .close_all(&mut live.out, &mut |n| Ingested(n).emit(&self.metrics));
                self.deliver(&mut live);
                if exit_on_eof {
                    break;
                }
                self.sources.stdin = false;
            }
            if last_tick.elapsed() >= Duration::from_secs(1) {
                last_tick = Instant::now();
                self.tick(&mut live, now);
            }
            self.deliver(&mut live);
            // A dead worker stops the engine here, before the checkpoint below could be taken
            // without its turns (`deliver` waits for every worker, so it finds one).
            live.ingest.alive()?;
            self.publish_stats(&live);
            let open = live.ingest.open_turns();
            if let Some(view) = live.findings.view()
                && let Err(error) = view.maybe_summary(open)
            {
                FindingWriteFailed { error: &error }.emit(&self.metrics);
            }
            if live.checkpoint_path.is_some() && last_checkpoint.elapsed() >= checkpoint_every {
                last_checkpoint = Instant::now();
                self.write_checkpoint(&mut live)?;
            }
            if !files_busy && !feeds_busy && !otlp_busy {
                std::thread::sleep(poll_every);
            }
        }
        Ok((self.shut_down(live)?, self.traces.take()))
    }

    /// Restore the checkpoint (if any), open the findings output and start the sources.
    fn start(
        &self,
        shutdown: &Arc<AtomicBool>,
        external: Option<Receiver<FeedItem>>,
    ) -> Result<Live, RunError> {
        let prices = Arc::new(PriceTable::builtin_with(self.cfg.prices.as_deref())?);
        let ccfg = CorrelatorConfig {
            retry_cap: self.cfg.max_attempts,
            read_only_tools: self.cfg.read_only_tools.iter().cloned().collect(),
            idle_timeout_ms: Some(
                i64::try_from(self.cfg.idle_timeout_secs.saturating_mul(1000)).unwrap_or(i64::MAX),
            ),
            max_open_turns: self.cfg.max_open_turns,
            capture_content: self.cfg.otlp.capture_content,
            timeline: self.live_page.is_some(),
            ..CorrelatorConfig::default()
        };
        let checkpoint_path: Option<PathBuf> =
            self.cfg.data_dir.as_ref().map(|d| d.join(CHECKPOINT_FILE));
        if let Some(dir) = &self.cfg.data_dir {
            checkpoint::probe_data_dir(dir).map_err(|source| RunError::DataDir {
                dir: dir.display().to_string(),
                source,
            })?;
        }
        let restored = match &checkpoint_path {
            Some(path) => self.load_checkpoint(path)?,
            None => None,
        };
        let fresh = restored.is_none();
        let format = self.cfg.format;
        let workers = self.cfg.workers.unwrap_or_else(default_workers);
        let otlp_from = restored.as_ref().and_then(|cp| cp.otlp_spool);
        let (restored, file_checkpoints, findings_offset) = match restored {
            Some(cp) => {
                tracing::info!(
                    open_turns = cp.open_turns(),
                    files = cp.files.len(),
                    "resuming from checkpoint"
                );
                if cp.version < checkpoint::ROUTES_SINCE && workers > 1 && cp.open_turns() > 0 {
                    tracing::warn!(
                        version = cp.version,
                        open_turns = cp.open_turns(),
                        workers,
                        "the checkpoint predates per-stream routing: its open turns are placed \
                         by turn id, so an open turn of a provider, agent or OTLP stream may be \
                         reported in two parts; resume once with --workers 1 to avoid it"
                    );
                }
                self.metrics
                    .restore(&cp.metrics)
                    .map_err(|e| RunError::MetricsRestore(e.to_string()))?;
                let restored = Restored {
                    correlator: cp.correlator,
                    counters: cp.counters,
                    clock_ms: cp.clock_ms,
                    joined: cp.joined.unwrap_or_default(),
                };
                (Some(restored), cp.files, cp.findings_offset)
            }
            None => (None, Vec::new(), None),
        };
        // gemini-cli's OTLP records wait for the stream-json join only when a stream-json can
        // come: from the files or stdin this run reads.
        let join_otlp = self.sources.files || self.sources.stdin;
        let ingest = ShardedIngest::start(
            workers,
            ccfg,
            prices,
            format,
            join_otlp,
            restored,
            self.metrics.clone(),
        )?;
        let findings = match self.cfg.live_view {
            Some(settings) if self.cfg.findings_out == "-" => Ok(FindingsSink::Human(Box::new(
                crate::sink::live_view::LiveView::stdout(settings),
            ))),
            _ => FindingsSink::open(&self.cfg.findings_out, findings_offset),
        }
        .map_err(|source| RunError::Findings {
            target: self.cfg.findings_out.clone(),
            source,
        })?;
        let tailer = self.sources.files.then(|| {
            FileTailer::new(
                FileTailerConfig {
                    include: self.cfg.include.clone(),
                    exclude: self.cfg.exclude.clone(),
                    read_from: self.cfg.read_from,
                    max_line_bytes: self.cfg.max_line_bytes,
                    rotate_wait: Duration::from_secs(self.cfg.rotate_wait_secs),
                    partial_line_wait: Duration::from_millis(self.cfg.partial_line_wait_ms),
                    // Listing directories and stat'ing every match at each 100 ms poll cost a
                    // third of a core with 5,000 idle files; new files can wait a second.
                    rescan_every: Duration::from_secs(1),
                    max_open_files: max_open_files(),
                    ..FileTailerConfig::default()
                },
                file_checkpoints,
            )
        });
        let feed = external.or_else(|| {
            (self.sources.stdin || self.sources.demo).then(|| {
                feeds::start(
                    self.sources.stdin,
                    self.sources.demo.then(|| self.cfg.demo.clone()),
                    self.cfg.max_line_bytes,
                    shutdown.clone(),
                )
            })
        });
        let otlp = match &self.sources.otlp {
            Some(queue) => Some(
                otlp_feed::OtlpFeed::start(queue.clone(), self.cfg.data_dir.as_deref(), otlp_from)
                    .map_err(|(dir, source)| RunError::Spool { dir, source })?,
            ),
            None => None,
        };
        let mut live = Live {
            ingest,
            tailer,
            feed,
            otlp,
            findings,
            checkpoint_path,
            out: Vec::new(),
            summary: RunSummary::default(),
            said_no_files: false,
        };
        if fresh && live.checkpoint_path.is_some() {
            // A first checkpoint before anything is read: a crash before the first periodic
            // one then resumes here, cutting the findings file back to its length at start,
            // instead of appending every finding again.
            if !self.write_checkpoint(&mut live)? {
                return Err(RunError::DataDir {
                    dir: self
                        .cfg
                        .data_dir
                        .as_ref()
                        .map(|d| d.display().to_string())
                        .unwrap_or_default(),
                    source: std::io::Error::other("the first checkpoint could not be written"),
                });
            }
        }
        Ok(live)
    }

    /// Load the checkpoint. An unusable one stops the start, unless `--reset-checkpoint`
    /// moves it and the findings file aside (then: start over).
    fn load_checkpoint(&self, path: &std::path::Path) -> Result<Option<Checkpoint>, RunError> {
        let loaded = Checkpoint::load(path).and_then(|cp| self.check_spool_position(path, cp));
        match loaded {
            Err(checkpoint::CheckpointError::Unusable { why, .. }) if self.cfg.reset_checkpoint => {
                let findings = (!matches!(self.cfg.findings_out.as_str(), "" | "-"))
                    .then(|| std::path::Path::new(&self.cfg.findings_out));
                let moved =
                    checkpoint::set_aside(path, findings).map_err(|source| RunError::DataDir {
                        dir: path.display().to_string(),
                        source,
                    })?;
                let moved: Vec<String> = moved
                    .iter()
                    .map(|p| retryscope_core::sanitize::display(&p.to_string_lossy()).into_owned())
                    .collect();
                tracing::error!(
                    path = %path.display(), why, moved_to = %moved.join(", "),
                    "--reset-checkpoint: the unusable checkpoint and the findings file were moved aside; starting over from the beginning of every file"
                );
                Ok(None)
            }
            other => Ok(other?),
        }
    }

    /// A checkpoint whose OTLP spool position lies past the end of the spool is unusable: it
    /// was not written against this spool.
    fn check_spool_position(
        &self,
        path: &std::path::Path,
        cp: Option<Checkpoint>,
    ) -> Result<Option<Checkpoint>, checkpoint::CheckpointError> {
        let (Some(dir), Some(pos)) = (
            self.cfg.data_dir.as_ref(),
            cp.as_ref().and_then(|c| c.otlp_spool),
        ) else {
            return Ok(cp);
        };
        match crate::source::otlp::spool_check_position(
            &dir.join(crate::source::otlp::SPOOL_DIR),
            pos,
        ) {
            Ok(()) => Ok(cp),
            Err(why) => Err(checkpoint::CheckpointError::Unusable {
                path: path.display().to_string(),
                why,
            }),
        }
    }

    /// Read what the tailed files have new; `true` when there is more to read right away.
    fn poll_files(&self, live: &mut Live, now: i64) -> bool {
        let Live {
            ingest,
            tailer: Some(tailer),
            out,
            summary,
            said_no_files,
            ..
        } = live
        else {
            return false;
        };
        let metrics = &*self.metrics;
        let mut too_long = Vec::new();
        // One stream per path; the last path's handle is kept, since lines of one file come
        // in runs.
        let mut last: Option<(PathBuf, StreamId)> = None;
        // Lines read are counted once per poll (a lock of the metrics per line cost ~5% of
        // the engine thread).
        let mut read = 0u64;
        let stats = tailer.poll(
            &mut |line| {
                read += 1;
                let stream = match &last {
                    Some((path, id)) if path == line.path => *id,
                    _ => {
                        let id = ingest.stream(Source::File, &line.path.display().to_string());
                        last = Some((line.path.to_path_buf(), id));
                        id
                    }
                };
                ingest.line(stream, None, line.bytes, Some(now), out, &mut |n| {
                    Ingested(n).emit(metrics)
                });
                if line.unterminated {
                    // The writer stopped without a newline: whatever record the line belongs
                    // to ends with it, as at the end of a file `check` reads (an SSE event
                    // without its blank line is dispatched). Every format skips an empty line.
                    ingest.line(stream, None, b"", Some(now), out, &mut |n| {
                        Ingested(n).emit(metrics)
                    });
                }
            },
            &mut TailerReport {
                metrics,
                too_long: &mut too_long,
            },
        );
        if read > 0 {
            metrics.add_events_read(Source::File, read);
        }
        for (path, len) in too_long {
            let stream = ingest.stream(Source::File, &path.display().to_string());
            ingest.too_long(stream, None, len, &mut |n| Ingested(n).emit(metrics));
        }
        summary.lines += stats.lines;
        if tailer.files_watched() == 0 && !*said_no_files {
            *said_no_files = true;
            tracing::warn!(
                patterns = %retryscope_core::sanitize::display(&self.cfg.include.join(", ")),
                "no file matches the include patterns yet; waiting for one to appear"
            );
        }
        metrics.set_files_watched(tailer.files_watched() as u64);
        metrics.set_source_lag_bytes(Source::File, tailer.lag_bytes());
        stats.throttled
    }

    /// Take what stdin and the demo fleet sent; returns (more waiting, stdin ended).
    fn poll_feeds(&self, live: &mut Live, now: i64) -> (bool, bool) {
        const MAX_ITEMS_PER_POLL: usize = 10_000;
        let Some(rx) = &live.feed else {
            return (false, false);
        };
        let metrics = &*self.metrics;
        let mut stdin_ended = false;
        let mut taken = 0;
        while taken < MAX_ITEMS_PER_POLL {
            let item = match rx.try_recv() {
                Ok(item) => item,
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    stdin_ended = self.sources.stdin;
                    break;
                }
            };
            taken += 1;
            let note = &mut |n: Note<'_>| Ingested(n).emit(metrics);
            match item {
                FeedItem::Line { feed, bytes } => {
                    live.summary.lines += 1;
                    LineRead {
                        source: feed.source(),
                    }
                    .emit(metrics);
                    let stream = live.ingest.stream(feed.source(), feed.name());
                    live.ingest
                        .line(stream, None, &bytes, Some(now), &mut live.out, note);
                }
                FeedItem::TooLong { feed, len } => {
                    live.summary.lines += 1;
                    let stream = live.ingest.stream(feed.source(), feed.name());
                    live.ingest.too_long(stream, None, len, note);
                }
                FeedItem::End { feed } => {
                    let stream = live.ingest.stream(feed.source(), feed.name());
                    live.ingest.end(stream, Some(now), &mut live.out, note);
                    stdin_ended |= feed == Feed::Stdin;
                }
            }
        }
        (taken == MAX_ITEMS_PER_POLL, stdin_ended)
    }

    /// Take what the OTLP receiver accepted; `true` when more is waiting.
    fn poll_otlp(&self, live: &mut Live, now: i64) -> bool {
        let Live {
            ingest,
            otlp: Some(feed),
            out,
            summary,
            ..
        } = live
        else {
            return false;
        };
        let metrics = &*self.metrics;
        let (lines, busy) = feed.poll(ingest, now, out, metrics);
        summary.lines += lines;
        busy
    }

    /// Once a second: decide the format of streams that went quiet while sniffing, correlate
    /// the joined outputs of gemini-cli sessions that went quiet, and let idle turns time out.
    fn tick(&self, live: &mut Live, now: i64) {
        let metrics = &*self.metrics;
        live.ingest
            .settle_idle(Some(now), &mut live.out, &mut |n| Ingested(n).emit(metrics));
        live.ingest.release_joined(JOIN_QUIET_TICKS, &mut live.out);
        live.ingest.tick(now, &mut live.out);
        if let Some(feed) = &mut live.otlp {
            feed.end_quiet_streams(
                &mut live.ingest,
                now,
                self.cfg.idle_timeout_secs,
                &mut live.out,
                &self.metrics,
            );
        }
    }

    /// Hand what the correlator produced to the sinks.
    fn deliver(&self, live: &mut Live) {
        live.ingest.flush(&mut live.out);
        for o in live.out.drain(..) {
            self.metrics.observe(&o);
            live.findings.observe(&o);
            match &o {
                Output::Finding(f, _) => {
                    if let Err(error) = live.findings.write(f) {
                        FindingWriteFailed { error: &error }.emit(&self.metrics);
                    }
                }
                Output::TurnClosed(report) => {
                    if let Some(t) = &self.traces {
                        t.submit(report);
                    }
                    if let Some(page) = &self.live_page
                        && let Ok(mut page) = page.lock()
                    {
                        page.add(report);
                    }
                }
                Output::Retry { .. } => {}
            }
        }
    }

    /// Gauges and counters that mirror the correlator's and the exporter's own state.
    fn publish_stats(&self, live: &Live) {
        self.metrics
            .set_correlator_stats(&live.ingest.stats(), live.ingest.open_turns());
        if let Some(ts) = &self.traces {
            let s = ts.stats();
            self.metrics.set_otlp(
                s.spans_exported.load(Ordering::Relaxed),
                s.spans_dropped.load(Ordering::Relaxed),
                s.export_failures.load(Ordering::Relaxed),
            );
        }
    }

    /// Shutdown: with a data dir, open turns stay open in the checkpoint for the next run;
    /// without one, they are closed now so nothing is lost from the outputs. A worker found
    /// dead on the way is an error, and no checkpoint is written.
    fn shut_down(&self, mut live: Live) -> Result<RunSummary, RunError> {
        if let Some(view) = live.findings.view() {
            view.stopping();
        }
        let _shutdown_span = tracing::info_span!(
            "engine.shutdown",
            lines = live.summary.lines,
            open_turns = live.ingest.open_turns()
        )
        .entered();
        if let Some(feed) = &mut live.otlp {
            // Refuse new requests (clients retry them against the next run), then take what
            // was acknowledged.
            feed.close();
            while self.poll_otlp(&mut live, wall_ms()) {}
        }
        if live.checkpoint_path.is_some() {
            // Held gemini-cli session events would survive in the checkpoint, but a clean stop
            // leaves none for later: correlate them now.
            live.ingest.release_joined(0, &mut live.out);
            self.deliver(&mut live);
            live.summary.open_turns_checkpointed = live.ingest.open_turns();
            live.summary.final_checkpoint_failed = !self.write_checkpoint(&mut live)?;
        } else {
            let metrics = &*self.metrics;
            live.ingest
                .close_all(&mut live.out, &mut |n| Ingested(n).emit(metrics));
            self.deliver(&mut live);
            live.ingest.alive()?;
        }
        self.publish_stats(&live);
        if let Err(error) = live.findings.flush() {
            FindingWriteFailed { error: &error }.emit(&self.metrics);
        }
        let open = live.ingest.open_turns();
        if let Some(view) = live.findings.view()
            && let Err(error) = view.summary(open)
        {
            FindingWriteFailed { error: &error }.emit(&self.metrics);
        }
        Ok(live.summary)
    }

    /// Write the checkpoint; `false` when it could not be written (the next one may be), an
    /// error when an ingest worker has died (none may be written any more: it would lack the
    /// dead worker's open turns).
    fn write_checkpoint(&self, live: &mut Live) -> Result<bool, RunError> {
        let Some(path) = live.checkpoint_path.clone() else {
            return Ok(true);
        };
        let _span = tracing::info_span!("checkpoint.write", open_turns = live.ingest.open_turns())
            .entered();
        // Every line read so far is correlated (a barrier when sharded) and what came of it is
        // delivered before the findings offset and the metric values are taken.
        let state = live.ingest.checkpoint(&mut live.out)?;
        self.deliver(live);
        let findings_offset = match live.findings.checkpoint_offset() {
            Ok(o) => o,
            Err(error) => {
                CheckpointFailed {
                    what: "findings not durably written yet (kept in memory and retried)",
                    error: &error,
                }
                .emit(&self.metrics);
                return Ok(false);
            }
        };
        let cp = Checkpoint {
            version: checkpoint::VERSION,
            files: live
                .tailer
                .as_ref()
                .map(|t| t.checkpoints())
                .unwrap_or_default(),
            correlator: state.correlator,
            counters: state.counters,
            clock_ms: state.clock_ms,
            metrics: self.metrics.snapshot(),
            findings_offset,
            otlp_spool: live.otlp.as_mut().and_then(|o| o.position()),
            joined: state.joined,
        };
        match cp.write(&path) {
            Ok(()) => {
                if let Some(o) = &live.otlp {
                    o.checkpointed();
                }
                live.summary.checkpoints += 1;
                CheckpointWritten.emit(&self.metrics);
                Ok(true)
            }
            Err(error) => {
                CheckpointFailed {
                    what: "checkpoint write failed",
                    error: &error,
                }
                .emit(&self.metrics);
                Ok(false)
            }
        }
    }
}
