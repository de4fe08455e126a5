//! `retryscope run` (and `proxy`): the engine's blocking driver.
//!
//! One blocking thread owns the [`Core`] (the ingest path and the sinks) and the
//! [`LiveSource`]s, so a checkpoint taken between two polls is consistent: every source's
//! position, open-turn state, metric values and every sink's position describe the same
//! instant. The sources: files (`run/file_source.rs`), stdin and the demo fleet or another
//! part of the process (`run/feeds.rs`, through a bounded channel), the OTLP receiver
//! (`run/otlp_feed.rs`, through its bounded queue); the HTTP server and the trace exporter
//! live on the tokio runtime and never block this loop.

pub(crate) mod checkpoint;
mod feeds;
mod file_source;
mod otlp_feed;
mod resume;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::config::RunConfig;
use crate::engine::outputs::{FindingsOut, LivePageOut, MetricsOut, TracesOut};
use crate::engine::sharded::default_workers;
use crate::engine::{Core, LiveSource, Restored, ShardedIngest, Sinks, WorkerDied};
use crate::internal_events::{
    CheckpointFailed, CheckpointWritten, InternalEvent, StreamStatesLeftOut,
};
use crate::sink::findings::FindingsSink;
use crate::sink::metrics::Metrics;
use crate::source::file::{FileTailer, FileTailerConfig};
use retryscope_core::cost::PriceTable;

pub use checkpoint::{CHECKPOINT_FILE, Checkpoint};
pub use feeds::{Feed, FeedItem, FeedSource, PipeLine, PipeLines, start as start_feeds};
pub use file_source::FileSource;
pub use otlp_feed::OtlpFeed;

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
    WorkerSpawn(#[from] crate::engine::WorkerSpawn),
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

/// Wall-clock milliseconds: arrival time of lines (the correlator itself never reads a clock).
fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Everything a checkpoint covers, owned by the engine thread between two polls: the core
/// (the ingest path and the sinks) and the sources.
struct Live {
    core: Core,
    sources: Vec<Box<dyn LiveSource>>,
    checkpoint_path: Option<PathBuf>,
    summary: RunSummary,
}

/// Everything the engine loop needs.
pub struct Engine {
    cfg: RunConfig,
    sources: Sources,
    metrics: Arc<Metrics>,
    traces: Option<Arc<crate::sink::traces::TraceSink>>,
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
            traces: traces.map(Arc::new),
            external_feed: None,
            live_page: None,
        }
    }

    /// Run until `shutdown` is set (or the input ends, when every source is finite, and
    /// `exit_on_eof`). Returns the trace sink so the caller can flush it on the runtime.
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
        let mut ended = vec![false; live.sources.len()];
        let mut input_over = false;
        while !shutdown.load(Ordering::SeqCst) {
            let now = wall_ms();
            let mut busy = false;
            for (source, ended) in live.sources.iter_mut().zip(ended.iter_mut()) {
                let polled = source.poll(&mut live.core, now);
                live.summary.lines += polled.lines;
                busy |= polled.busy;
                *ended |= polled.ended;
            }
            let all_ended = live
                .sources
                .iter()
                .zip(&ended)
                .all(|(s, ended)| s.finite() && *ended);
            if all_ended && !input_over {
                // Every source was finite (stdin) and has ended: so has the input.
                input_over = true;
                live.core.close_all();
                live.core.deliver(None);
                if exit_on_eof {
                    break;
                }
            }
            if last_tick.elapsed() >= Duration::from_secs(1) {
                last_tick = Instant::now();
                live.core.tick(now);
                for source in &mut live.sources {
                    source.tick(&mut live.core, now);
                }
            }
            live.core.deliver(None);
            // A dead worker stops the engine here, before the checkpoint below could be taken
            // without its turns (`deliver` waits for every worker, so it finds one).
            live.core.ingest.alive()?;
            live.core.publish_stats();
            let open = live.core.ingest.open_turns();
            live.core.sinks.round(open);
            if live.checkpoint_path.is_some() && last_checkpoint.elapsed() >= checkpoint_every {
                last_checkpoint = Instant::now();
                self.write_checkpoint(&mut live)?;
            }
            if !busy {
                std::thread::sleep(poll_every);
            }
        }
        let summary = self.shut_down(live)?;
        // The sinks are gone: the exporter is the caller's again, to flush.
        let traces = self.traces.take().and_then(|t| Arc::try_unwrap(t).ok());
        Ok((summary, traces))
    }

    /// Restore the checkpoint (if any), open the sinks and start the sources.
    fn start(
        &self,
        shutdown: &Arc<AtomicBool>,
        external: Option<Receiver<FeedItem>>,
    ) -> Result<Live, RunError> {
        let prices = Arc::new(PriceTable::builtin_with(self.cfg.prices.as_deref())?);
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
        let workers = self.cfg.workers.unwrap_or_else(default_workers);
        let mut resumed_otlp = Vec::new();
        let (restored, mut positions, mut sink_positions) = match restored {
            Some(cp) => {
                tracing::info!(
                    open_turns = cp.open_turns(),
                    sources = %cp.sources.keys().cloned().collect::<Vec<_>>().join(", "),
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
                // The receiver ends its sessions' streams once quiet: it must know the resumed
                // ones too.
                resumed_otlp = cp
                    .streams
                    .iter()
                    .filter(|s| {
                        s.source == retryscope_core::ingest::Source::Otlp.as_str() && !s.parked
                    })
                    .map(|s| (s.name.clone(), s.last_ms))
                    .collect();
                let restored = Restored {
                    correlator: cp.correlator,
                    counters: cp.counters,
                    clock_ms: cp.clock_ms,
                    joined: cp.joined.unwrap_or_default(),
                    streams: cp.streams,
                };
                (Some(restored), cp.sources, cp.sinks)
            }
            None => Default::default(),
        };
        // gemini-cli's OTLP records wait for the stream-json join only when a stream-json can
        // come: from the files or stdin this run reads.
        let join_otlp = self.sources.files || self.sources.stdin;
        let ingest = ShardedIngest::start(
            workers,
            crate::engine::correlator_config(&self.cfg, self.live_page.is_some()),
            prices,
            self.cfg.format,
            join_otlp,
            restored,
            self.metrics.clone(),
        )?;
        let findings_offset = sink_positions.remove("findings").and_then(|v| v.as_u64());
        let sinks = self.sinks(findings_offset)?;
        let mut sources: Vec<Box<dyn LiveSource>> = Vec::new();
        // Positions were checked at load (`resume.rs`); one that still does not read as its
        // source's makes the checkpoint unusable.
        let unusable = |why: String| checkpoint::CheckpointError::Unusable {
            path: checkpoint_path
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            why,
        };
        if self.sources.files {
            let files = FileSource::restore(positions.remove("files")).map_err(unusable)?;
            sources.push(Box::new(FileSource::new(
                self.tailer(files),
                self.metrics.clone(),
                &self.cfg.include,
            )));
        }
        match external {
            Some(rx) => sources.push(Box::new(FeedSource::external(
                rx,
                Feed::Proxy,
                self.metrics.clone(),
            ))),
            None if self.sources.stdin || self.sources.demo => {
                let rx = feeds::start(
                    self.sources.stdin,
                    self.sources.demo.then(|| self.cfg.demo.clone()),
                    shutdown.clone(),
                );
                let pipe = PipeLines::new(
                    self.cfg.max_line_bytes,
                    Duration::from_millis(self.cfg.partial_line_wait_ms),
                );
                sources.push(Box::new(FeedSource::started(
                    rx,
                    self.sources.stdin,
                    self.sources.demo,
                    pipe,
                    self.metrics.clone(),
                )));
            }
            None => {}
        }
        if let Some(queue) = &self.sources.otlp {
            let from = OtlpFeed::restore(positions.remove("otlp")).map_err(unusable)?;
            let mut feed = OtlpFeed::start(
                queue.clone(),
                self.cfg.data_dir.as_deref(),
                from,
                self.metrics.clone(),
                self.cfg.idle_timeout_secs,
            )
            .map_err(|(dir, source)| RunError::Spool { dir, source })?;
            feed.resumed(std::mem::take(&mut resumed_otlp));
            sources.push(Box::new(feed));
        }
        for name in positions.keys() {
            tracing::warn!(
                source = %retryscope_core::sanitize::display(name),
                "the checkpoint holds a position of a source this run does not read; it is dropped"
            );
        }
        let mut live = Live {
            core: Core::new(ingest, sinks, self.metrics.clone()),
            sources,
            checkpoint_path,
            summary: RunSummary::default(),
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

    /// The sinks, in delivery order: metrics, findings (resumed at `findings_offset`), traces,
    /// the live page.
    fn sinks(&self, findings_offset: Option<u64>) -> Result<Sinks, RunError> {
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
        let mut sinks = Sinks::new();
        sinks.push(Box::new(MetricsOut(self.metrics.clone())));
        sinks.push(Box::new(FindingsOut {
            findings,
            metrics: self.metrics.clone(),
        }));
        if let Some(traces) = &self.traces {
            sinks.push(Box::new(TracesOut {
                traces: traces.clone(),
                stats: Some(self.metrics.clone()),
            }));
        }
        if let Some(page) = &self.live_page {
            sinks.push(Box::new(LivePageOut(page.clone())));
        }
        Ok(sinks)
    }

    /// The file tailer, resuming at `files`.
    fn tailer(&self, files: Vec<crate::source::file::FileCheckpoint>) -> FileTailer {
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
            files,
        )
    }

    /// Shutdown: with a data dir, open turns stay open in the checkpoint for the next run;
    /// without one, they are closed now so nothing is lost from the outputs. A worker found
    /// dead on the way is an error, and no checkpoint is written.
    fn shut_down(&self, mut live: Live) -> Result<RunSummary, RunError> {
        live.core.sinks.stopping();
        let _shutdown_span = tracing::info_span!(
            "engine.shutdown",
            lines = live.summary.lines,
            open_turns = live.core.ingest.open_turns()
        )
        .entered();
        let now = wall_ms();
        for source in &mut live.sources {
            source.close(&mut live.core, now);
        }
        if live.checkpoint_path.is_some() {
            // Held gemini-cli session events would survive in the checkpoint, but a clean stop
            // leaves none for later: correlate them now.
            live.core.release_all_joined();
            live.core.deliver(None);
            live.summary.open_turns_checkpointed = live.core.ingest.open_turns();
            live.summary.final_checkpoint_failed = !self.write_checkpoint(&mut live)?;
        } else {
            live.core.close_all();
            live.core.deliver(None);
            live.core.ingest.alive()?;
        }
        live.core.publish_stats();
        let open = live.core.ingest.open_turns();
        live.core.sinks.round(open);
        live.core.sinks.finish(open);
        Ok(live.summary)
    }

    /// Write the checkpoint; `false` when it could not be written (the next one may be), an
    /// error when an ingest worker has died (none may be written any more: it would lack the
    /// dead worker's open turns).
    fn write_checkpoint(&self, live: &mut Live) -> Result<bool, RunError> {
        let Some(path) = live.checkpoint_path.clone() else {
            return Ok(true);
        };
        let _span = tracing::info_span!(
            "checkpoint.write",
            open_turns = live.core.ingest.open_turns()
        )
        .entered();
        // Every line read so far is correlated (a barrier when sharded) and what came of it is
        // delivered before the sinks' positions and the metric values are taken.
        let state = live.core.checkpoint(None)?;
        let sinks = match live.core.sinks.checkpoint() {
            Ok(positions) => positions,
            Err(error) => {
                CheckpointFailed {
                    what: error.what,
                    error: &error.source,
                }
                .emit(&self.metrics);
                return Ok(false);
            }
        };
        let sources = live
            .sources
            .iter_mut()
            .filter_map(|s| Some((s.name().to_owned(), s.position()?)))
            .collect();
        let cp = Checkpoint::new(
            sources,
            sinks,
            state.correlator,
            state.counters,
            state.clock_ms,
            self.metrics.snapshot(),
            state.joined,
            state.streams.states,
        );
        StreamStatesLeftOut {
            left_out: state.streams.left_out,
        }
        .emit(&self.metrics);
        match cp.write(&path) {
            Ok(()) => {
                for source in &mut live.sources {
                    source.checkpointed();
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
