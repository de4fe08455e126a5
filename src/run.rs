//! `retryscope run`: the live collector's engine loop.
//!
//! One blocking thread owns the pipeline (decoders and correlator), the file tailer and the
//! findings sink, so a checkpoint taken between two polls is consistent: file offsets,
//! open-turn state, metric values and the findings file offset all describe the same instant.
//! stdin and the demo fleet feed lines through a bounded channel; the HTTP server and the trace
//! exporter live on the tokio runtime and never block this loop.

mod checkpoint;
mod feeds;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::config::{ReadFromSetting, RunConfig};
use crate::correlate::{Correlator, CorrelatorConfig, Output};
use crate::cost::PriceTable;
use crate::pipeline::{LineOutcome, Pipeline};
use crate::sink::findings::FindingsSink;
use crate::sink::metrics::{Metrics, Source as SourceKind};
use crate::source::file::{FileTailer, FileTailerConfig, ReadFrom, TailerEvents};

pub use checkpoint::{CHECKPOINT_FILE, Checkpoint};
pub use feeds::{Feed, FeedItem};

/// Where lines come from.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// Tail files matching the configuration's globs.
    pub files: bool,
    /// Read standard input.
    pub stdin: bool,
    /// Run the built-in demo fleet.
    pub demo: bool,
}

/// Why the collector could not start or went down.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The price table.
    #[error(transparent)]
    Prices(#[from] crate::cost::PriceError),
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
    /// An unknown `format`.
    #[error("{0}")]
    Format(String),
    /// Nothing to read.
    #[error("no source: give files or globs, `-` for stdin, or --demo")]
    NoSource,
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
}

/// Wall-clock milliseconds: arrival time of lines (the correlator itself never reads a clock).
fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Per-file stream decoders for provider formats (native lines need none). Each file's format
/// is the configured one, or detected from its first line. Provider decoder state is not in
/// the checkpoint: after a restart, a provider stream resumes with a fresh decoder.
struct FileDecoders {
    format: crate::decode::Format,
    by_path: crate::fasthash::FastMap<PathBuf, Option<Box<dyn crate::decode::StreamDecoder>>>,
    /// Line numbers of files this run read from their first byte (unknown after a resume).
    line_numbers: crate::fasthash::FastMap<PathBuf, Option<u64>>,
}

impl FileDecoders {
    fn new(format: crate::decode::Format) -> Self {
        FileDecoders {
            format,
            by_path: Default::default(),
            line_numbers: Default::default(),
        }
    }

    /// The 1-based number of the line ending at `end_offset`, when this run has read the file
    /// from its start (a line starting at offset 0, also after a truncation, restarts the
    /// count); `None` for files resumed mid-way.
    fn line_number(&mut self, path: &std::path::Path, len: usize, end_offset: u64) -> Option<u64> {
        // The newline, and a `\r` before it, are not in the line's bytes.
        let starts_file = end_offset <= len as u64 + 2;
        let slot = match self.line_numbers.get_mut(path) {
            Some(slot) => slot,
            None => self.line_numbers.entry(path.to_path_buf()).or_insert(None),
        };
        if starts_file {
            *slot = Some(0);
        }
        if let Some(n) = slot {
            *n += 1;
        }
        *slot
    }

    fn for_line(
        &mut self,
        path: &std::path::Path,
        first_line: &[u8],
    ) -> Option<&mut (dyn crate::decode::StreamDecoder + 'static)> {
        if !self.by_path.contains_key(path) {
            let format = match self.format {
                crate::decode::Format::Auto => crate::decode::detect(first_line),
                explicit => explicit,
            };
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let decoder = crate::decode::stream_decoder(format, &name);
            if decoder.is_some() {
                tracing::info!(path = %path.display(), format = %format.as_str(), "decoding a provider stream");
            }
            self.by_path.insert(path.to_path_buf(), decoder);
        }
        self.by_path.get_mut(path)?.as_deref_mut()
    }
}

/// Count a line by what became of it (an event, a skipped unknown type, a bad line); returns
/// the error of a bad line for the caller to log.
fn count_line(
    metrics: &Metrics,
    source: SourceKind,
    result: Result<LineOutcome, crate::decode::DecodeError>,
) -> Option<crate::decode::DecodeError> {
    match result {
        Ok(LineOutcome::Event) => metrics.add_events_decoded(source, 1),
        Ok(LineOutcome::Skipped) => metrics.add_unknown_events(source, 1),
        Err(e) => {
            metrics.add_bad_lines(source, e.reason, 1);
            return Some(e);
        }
    }
    None
}

/// Tailer events to metrics and logs.
struct TailerReport<'a> {
    metrics: &'a Metrics,
    log: &'a mut crate::ratelimit::RateLimitedLog,
}

impl TailerEvents for TailerReport<'_> {
    fn file_added(&mut self, path: &std::path::Path, from_offset: u64) {
        tracing::info!(path = %path.display(), from_offset, "watching file");
    }
    fn file_resumed(&mut self, path: &std::path::Path, offset: u64) {
        tracing::info!(path = %path.display(), offset, "resumed file from checkpoint");
    }
    fn file_rotated(&mut self, old_path: &std::path::Path, new_path: Option<&std::path::Path>) {
        self.metrics.inc_file_rotations();
        match new_path {
            Some(new) => {
                tracing::info!(old = %old_path.display(), new = %new.display(), "file rotated; draining the old handle")
            }
            None => {
                tracing::info!(old = %old_path.display(), "file rotated away; draining the old handle")
            }
        }
    }
    fn file_truncated(&mut self, path: &std::path::Path, old_offset: u64, new_size: u64) {
        self.metrics.inc_file_truncations();
        tracing::warn!(path = %path.display(), old_offset, new_size, "file truncated; reading again from the start");
    }
    fn file_drained_and_released(&mut self, path: &std::path::Path) {
        tracing::info!(path = %path.display(), "rotated file drained and released");
    }
    fn line_too_long(&mut self, path: &std::path::Path, skipped_bytes: u64) {
        self.metrics
            .add_bad_lines(SourceKind::File, crate::decode::BadLineReason::TooLong, 1);
        if let Some(suppressed) = self.log.allow("line_too_long") {
            tracing::warn!(path = %path.display(), skipped_bytes, suppressed, "over-long line skipped");
        }
    }
    fn read_error(&mut self, path: &std::path::Path, error: &std::io::Error) {
        if let Some(suppressed) = self.log.allow("read_error") {
            tracing::warn!(path = %path.display(), %error, suppressed, "cannot read file");
        }
    }
    fn checkpoint_mismatch(&mut self, path: &std::path::Path) {
        tracing::warn!(path = %path.display(), "checkpointed inode now holds another file; reading it from the start");
    }
}

/// Everything the engine loop needs.
pub struct Engine {
    cfg: RunConfig,
    sources: Sources,
    metrics: Arc<Metrics>,
    traces: Option<crate::sink::traces::TraceSink>,
}

impl Engine {
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
        if !self.sources.files && !self.sources.stdin && !self.sources.demo {
            return Err(RunError::NoSource);
        }
        // Operational span (see crate::telemetry): restore, open outputs, start sources.
        let start_span = tracing::info_span!("engine.start").entered();
        let prices = Arc::new(PriceTable::builtin_with(self.cfg.prices.as_deref())?);
        let ccfg = CorrelatorConfig {
            retry_cap: self.cfg.max_attempts,
            read_only_tools: self.cfg.read_only_tools.iter().cloned().collect(),
            idle_timeout_ms: Some(
                i64::try_from(self.cfg.idle_timeout_secs.saturating_mul(1000)).unwrap_or(i64::MAX),
            ),
            max_open_turns: self.cfg.max_open_turns,
            capture_content: self.cfg.otlp.capture_content,
            ..CorrelatorConfig::default()
        };
        let checkpoint_path: Option<PathBuf> =
            self.cfg.data_dir.as_ref().map(|d| d.join(CHECKPOINT_FILE));
        let restored = match &checkpoint_path {
            Some(path) => Checkpoint::load(path)?,
            None => None,
        };
        let (mut pipeline, file_checkpoints, findings_offset) = match restored {
            Some(cp) => {
                tracing::info!(
                    open_turns = cp.open_turns(),
                    files = cp.files.len(),
                    "resuming from checkpoint"
                );
                self.metrics
                    .restore(&cp.metrics)
                    .map_err(|e| RunError::MetricsRestore(e.to_string()))?;
                let mut p = Pipeline::new(Correlator::restore(ccfg, prices, cp.correlator));
                p.restore_counters(cp.counters, cp.clock_ms);
                (p, cp.files, cp.findings_offset)
            }
            None => (
                Pipeline::new(Correlator::new(ccfg, prices)),
                Vec::new(),
                None,
            ),
        };
        let mut findings =
            FindingsSink::open(&self.cfg.findings_out, findings_offset).map_err(|source| {
                RunError::Findings {
                    target: self.cfg.findings_out.clone(),
                    source,
                }
            })?;
        let mut tailer = self.sources.files.then(|| {
            FileTailer::new(
                FileTailerConfig {
                    include: self.cfg.include.clone(),
                    exclude: self.cfg.exclude.clone(),
                    read_from: match self.cfg.read_from {
                        ReadFromSetting::Beginning => ReadFrom::Beginning,
                        ReadFromSetting::End => ReadFrom::End,
                    },
                    max_line_bytes: self.cfg.max_line_bytes,
                    rotate_wait: Duration::from_secs(self.cfg.rotate_wait_secs),
                    ..FileTailerConfig::default()
                },
                file_checkpoints,
            )
        });
        let feed: Option<Receiver<FeedItem>> = if self.sources.stdin || self.sources.demo {
            Some(feeds::start(
                self.sources.stdin,
                self.sources.demo.then(|| self.cfg.demo.clone()),
                self.cfg.max_line_bytes,
                shutdown.clone(),
            ))
        } else {
            None
        };
        let mut log = crate::ratelimit::RateLimitedLog::new(Duration::from_secs(10));
        let mut out: Vec<Output> = Vec::new();
        let mut summary = RunSummary::default();
        let poll_every = Duration::from_millis(self.cfg.poll_interval_ms);
        let checkpoint_every = Duration::from_secs(self.cfg.checkpoint_interval_secs);
        let mut last_tick = Instant::now();
        let mut last_checkpoint = Instant::now();
        let mut stdin_done = false;
        let mut said_no_files = false;
        let mut file_decoders = FileDecoders::new(self.cfg.format()?);
        drop(start_span);
        ready.store(true, Ordering::SeqCst);
        while !shutdown.load(Ordering::SeqCst) {
            let now = wall_ms();
            let mut busy = false;
            if let Some(t) = tailer.as_mut() {
                let metrics = &self.metrics;
                let pipeline_ref = &mut pipeline;
                let out_ref = &mut out;
                let log_ref = &mut log;
                let decoders = &mut file_decoders;
                // Only the first bad line of a poll is kept for the (rate-limited) log.
                let mut bad: Option<(String, Option<u64>, u64, String)> = None;
                let stats = t.poll(
                    &mut |line| {
                        metrics.add_events_read(SourceKind::File, 1);
                        let number =
                            decoders.line_number(line.path, line.bytes.len(), line.end_offset);
                        let decoder = decoders.for_line(line.path, line.bytes);
                        let result = match decoder {
                            Some(d) => pipeline_ref.stream_line(d, line.bytes, Some(now), out_ref),
                            None => pipeline_ref.native_line(line.bytes, Some(now), out_ref),
                        };
                        if let Some(e) = count_line(metrics, SourceKind::File, result)
                            && bad.is_none()
                        {
                            bad = Some((
                                line.path.display().to_string(),
                                number,
                                line.end_offset,
                                e.to_string(),
                            ));
                        }
                    },
                    &mut TailerReport {
                        metrics,
                        log: log_ref,
                    },
                );
                if let Some((path, number, end_offset, err)) = bad
                    && let Some(suppressed) = log.allow("bad_line")
                {
                    match number {
                        Some(line) => {
                            tracing::warn!(path = %crate::sanitize::display(&path), line, error = %err, suppressed, "skipped a bad line")
                        }
                        None => {
                            tracing::warn!(path = %crate::sanitize::display(&path), end_offset, error = %err, suppressed, "skipped a bad line")
                        }
                    }
                }
                summary.lines += stats.lines;
                busy |= stats.throttled;
                if t.files_watched() == 0 && !said_no_files {
                    said_no_files = true;
                    tracing::warn!(
                        patterns = %crate::sanitize::display(&self.cfg.include.join(", ")),
                        "no file matches the include patterns yet; waiting for one to appear"
                    );
                }
                self.metrics.set_files_watched(t.files_watched() as u64);
                self.metrics
                    .set_source_lag_bytes(SourceKind::File, t.lag_bytes());
            }
            if let Some(rx) = &feed {
                let mut taken = 0;
                while taken < 10_000 {
                    match rx.try_recv() {
                        Ok(item) => {
                            taken += 1;
                            if !matches!(item, FeedItem::End { .. }) {
                                summary.lines += 1;
                            }
                            self.feed_item(
                                item,
                                now,
                                &mut pipeline,
                                &mut out,
                                &mut log,
                                &mut stdin_done,
                            );
                        }
                        Err(TryRecvError::Empty) => break,
                        Err(TryRecvError::Disconnected) => {
                            stdin_done = self.sources.stdin;
                            break;
                        }
                    }
                }
                busy |= taken == 10_000;
            }
            if stdin_done && !self.sources.files && !self.sources.demo {
                // stdin was the only source: its end is the end of input.
                pipeline.close_all(&mut out);
                self.deliver(&mut out, &mut findings, &mut log);
                if exit_on_eof {
                    break;
                }
                stdin_done = false;
                self.sources.stdin = false;
            }
            if last_tick.elapsed() >= Duration::from_secs(1) {
                last_tick = Instant::now();
                pipeline.tick(now, &mut out);
            }
            self.deliver(&mut out, &mut findings, &mut log);
            self.metrics.set_correlator_stats(
                &pipeline.correlator().stats(),
                pipeline.correlator().open_turns(),
            );
            if let Some(ts) = &self.traces {
                let s = ts.stats();
                self.metrics.set_otlp(
                    s.spans_exported.load(Ordering::Relaxed),
                    s.spans_dropped.load(Ordering::Relaxed),
                    s.export_failures.load(Ordering::Relaxed),
                );
            }
            if let Some(path) = &checkpoint_path
                && last_checkpoint.elapsed() >= checkpoint_every
            {
                last_checkpoint = Instant::now();
                self.write_checkpoint(
                    path,
                    &pipeline,
                    tailer.as_ref(),
                    &mut findings,
                    &mut summary,
                );
            }
            if !busy {
                std::thread::sleep(poll_every);
            }
        }
        // Shutdown: with a data dir, open turns stay open in the checkpoint for the next run;
        // without one, they are closed now so nothing is lost from the outputs.
        let _shutdown_span = tracing::info_span!(
            "engine.shutdown",
            lines = summary.lines,
            open_turns = pipeline.correlator().open_turns()
        )
        .entered();
        if let Some(path) = &checkpoint_path {
            self.deliver(&mut out, &mut findings, &mut log);
            summary.open_turns_checkpointed = pipeline.correlator().open_turns();
            self.write_checkpoint(
                path,
                &pipeline,
                tailer.as_ref(),
                &mut findings,
                &mut summary,
            );
        } else {
            pipeline.close_all(&mut out);
            self.deliver(&mut out, &mut findings, &mut log);
        }
        self.metrics.set_correlator_stats(
            &pipeline.correlator().stats(),
            pipeline.correlator().open_turns(),
        );
        if let Err(e) = findings.flush() {
            tracing::warn!(error = %e, "cannot flush findings");
        }
        Ok((summary, self.traces.take()))
    }

    fn feed_item(
        &self,
        item: FeedItem,
        now: i64,
        pipeline: &mut Pipeline,
        out: &mut Vec<Output>,
        log: &mut crate::ratelimit::RateLimitedLog,
        stdin_done: &mut bool,
    ) {
        match item {
            FeedItem::Line {
                feed,
                number,
                bytes,
            } => {
                let kind = feed.kind();
                self.metrics.add_events_read(kind, 1);
                let result = pipeline.native_line(&bytes, Some(now), out);
                if let Some(e) = count_line(&self.metrics, kind, result)
                    && let Some(suppressed) = log.allow("bad_line")
                {
                    tracing::warn!(source = %kind.as_str(), line = number, error = %e, suppressed, "skipped a bad line");
                }
            }
            FeedItem::TooLong { feed, len } => {
                pipeline.too_long();
                self.metrics
                    .add_bad_lines(feed.kind(), crate::decode::BadLineReason::TooLong, 1);
                if let Some(suppressed) = log.allow("line_too_long") {
                    tracing::warn!(
                        source = %feed.kind().as_str(),
                        len,
                        suppressed,
                        "over-long line skipped"
                    );
                }
            }
            FeedItem::End { feed } => {
                if feed == Feed::Stdin {
                    *stdin_done = true;
                }
            }
        }
    }

    fn deliver(
        &self,
        out: &mut Vec<Output>,
        findings: &mut FindingsSink,
        log: &mut crate::ratelimit::RateLimitedLog,
    ) {
        for o in out.drain(..) {
            self.metrics.observe(&o);
            match &o {
                Output::Finding(f) => {
                    if let Err(e) = findings.write(f)
                        && let Some(suppressed) = log.allow("findings_write")
                    {
                        tracing::warn!(error = %e, suppressed, "cannot write a finding");
                    }
                }
                Output::TurnClosed(report) => {
                    if let Some(t) = &self.traces {
                        t.submit(report);
                    }
                }
                Output::Retry { .. } => {}
            }
        }
    }

    fn write_checkpoint(
        &self,
        path: &std::path::Path,
        pipeline: &Pipeline,
        tailer: Option<&FileTailer>,
        findings: &mut FindingsSink,
        summary: &mut RunSummary,
    ) {
        let _span = tracing::info_span!(
            "checkpoint.write",
            open_turns = pipeline.correlator().open_turns()
        )
        .entered();
        let findings_offset = match findings.checkpoint_offset() {
            Ok(o) => o,
            Err(e) => {
                self.metrics.inc_checkpoint_failures();
                tracing::warn!(error = %e, "cannot sync findings; checkpoint skipped");
                return;
            }
        };
        let cp = Checkpoint {
            version: checkpoint::VERSION,
            files: tailer.map(|t| t.checkpoints()).unwrap_or_default(),
            correlator: pipeline.correlator().snapshot(),
            counters: pipeline.counters().clone(),
            clock_ms: pipeline.clock_ms(),
            metrics: self.metrics.snapshot(),
            findings_offset,
        };
        match cp.write(path) {
            Ok(()) => {
                summary.checkpoints += 1;
                self.metrics.inc_checkpoint_writes();
            }
            Err(e) => {
                self.metrics.inc_checkpoint_failures();
                tracing::warn!(path = %path.display(), error = %e, "checkpoint write failed");
            }
        }
    }
}
