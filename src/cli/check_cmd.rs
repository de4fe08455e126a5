//! `retryscope check`: flags, progress, printing and the exit status.

use std::io::{self, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use retryscope::check::{self, BadLine, CheckObserver, CheckOptions, InputSpec, human, render};
use retryscope::engine::sinks::At;
use retryscope::engine::{Sink, SinkList};
use retryscope::sink::traces::{Protocol, TraceExportConfig, TraceSink};
use retryscope_core::correlate::{CorrelatorConfig, Output};
use retryscope_core::cost::PriceTable;
use retryscope_core::coverage::Sight;
use retryscope_core::finding::Severity;
use retryscope_core::report::TurnReport;
use retryscope_core::sanitize::display;

/// Flags of `check`.
#[derive(Debug, Args)]
#[command(
    after_help = "Exit status: 0 fine; 1 a finding at or above --fail-on, or a sight --require-coverage asks for that no input has; 2 unusable \
arguments or an unreadable input.\n\nAttempts are numbered as in the log's `attempt` field, \
from 0: attempt 0 is the first try, attempt 1 the first retry."
)]
pub struct CheckArgs {
    /// Files (gzip-compressed too), directories (their files that start like logs, recursively)
    /// or `-` for stdin. A named file that does not start like a log is refused (exit 2) unless
    /// --format is given.
    #[arg(value_name = "FILE|DIR|-", required = true)]
    inputs: Vec<String>,
    /// Print JSON lines: one object per turn, then a `{"summary": ...}` line.
    #[arg(long, conflicts_with = "summary")]
    json: bool,
    /// Print only the closing summary (no turn blocks).
    #[arg(long)]
    summary: bool,
    /// Also write a self-contained HTML report (summary, turn table, timelines) to FILE.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Colour severities in the text report: auto (on a terminal, unless NO_COLOR is set),
    /// always or never.
    #[arg(long, value_name = "WHEN", default_value = "auto", value_parser = ["auto", "always", "never"])]
    color: String,
    /// Exit 1 when a finding at or above this severity exists (info, warning, high, critical).
    #[arg(long, value_name = "SEVERITY")]
    fail_on: Option<Severity>,
    /// Exit 1 when no input can show these (attempts, cuts, executions, displayed_text;
    /// comma-separated) [default with no value: cuts]. A gate with --fail-on then cannot
    /// pass on inputs that could never have shown the finding (gemini-cli's stream-json alone
    /// cannot show a cut stream).
    #[arg(long, value_name = "WHAT", num_args = 0..=1, require_equals = true, value_delimiter = ',',
          default_missing_value = "cuts",
          value_parser = ["attempts", "cuts", "executions", "displayed_text"])]
    require_coverage: Option<Vec<String>>,
    /// Price table in LiteLLM's model_prices_and_context_window.json format, layered over the
    /// built-in one (a model in both takes this file's price).
    #[arg(long, value_name = "FILE")]
    prices: Option<PathBuf>,
    /// More attempts than this in one turn (first try included) is a `retry_cap_exceeded`
    /// finding. `--retry-cap` is an older name for the same setting.
    #[arg(long, alias = "retry-cap", default_value_t = 4, value_name = "N")]
    max_attempts: u32,
    /// Tools whose executions are reads, never effects (comma-separated, repeatable).
    #[arg(long, value_name = "TOOL,...", value_delimiter = ',')]
    read_only_tools: Vec<String>,
    /// Close turns idle this long in event time (off by default: turns close at end of input).
    #[arg(long, value_name = "N")]
    idle_timeout_secs: Option<u64>,
    /// Lines longer than this are skipped and counted.
    #[arg(long, default_value_t = 1 << 20, value_name = "N")]
    max_line_bytes: usize,
    /// Open turns kept in memory (in all, split between the workers); beyond it the least
    /// recently active is closed early as incomplete, and counted (`evicted_turns`).
    #[arg(long, default_value_t = 100_000, value_name = "N")]
    max_open_turns: usize,
    /// Show every turn in the text report [default: only turns with findings or retries].
    #[arg(long, short)]
    verbose: bool,
    /// Input format: auto, native, openai-chat, openai-responses, anthropic, gemini,
    /// gemini-cli-responses, acp, gemini-cli-telemetry, gemini-cli-stream-json, claude-code,
    /// codex-exec. gemini-cli's telemetry and stream-json of one session are joined.
    #[arg(long, default_value = "auto", value_name = "FORMAT")]
    format: retryscope_core::decode::Format,
    /// Correlate on one thread (large native inputs are otherwise sharded over two).
    #[arg(long)]
    single_thread: bool,
    /// Print at most this many bad lines on stderr (all are counted).
    #[arg(long, default_value_t = 20, value_name = "N")]
    max_bad_lines_shown: u64,
    /// Also export every turn as an OTLP trace to this endpoint (overrides
    /// OTEL_EXPORTER_OTLP_ENDPOINT; with neither, nothing is exported).
    #[arg(long, value_name = "URL")]
    otlp_endpoint: Option<String>,
    /// OTLP protocol: grpc or http/protobuf [default: OTEL_EXPORTER_OTLP_PROTOCOL, else
    /// http/protobuf].
    #[arg(long, value_name = "PROTOCOL", value_parser = parse_protocol)]
    otlp_protocol: Option<Protocol>,
    #[command(flatten)]
    otlp_tls: OtlpTlsArgs,
    /// Put the first characters of each attempt's text (the attempt text prefix) and transport
    /// error texts in the exported traces and the JSON lines (off by default: counts, lengths
    /// and ids only; the text and HTML reports, which stay on this machine, show them).
    #[arg(long)]
    capture_content: bool,
}

/// TLS files for an `https://` OTLP endpoint (shared by `check` and `run`).
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct OtlpTlsArgs {
    /// PEM file of CA certificates to trust for an https:// OTLP endpoint, besides the
    /// system's (overrides OTEL_EXPORTER_OTLP_CERTIFICATE).
    #[arg(long, value_name = "FILE")]
    otlp_ca_file: Option<std::path::PathBuf>,
    /// PEM client certificate for mTLS to the OTLP endpoint (with --otlp-client-key).
    #[arg(long, value_name = "FILE")]
    otlp_client_cert: Option<std::path::PathBuf>,
    /// PEM client private key for mTLS to the OTLP endpoint (with --otlp-client-cert).
    #[arg(long, value_name = "FILE")]
    otlp_client_key: Option<std::path::PathBuf>,
}

impl OtlpTlsArgs {
    /// Flags over the config file's `[otlp]` keys.
    pub(crate) fn apply_to(&self, otlp: &mut retryscope::config::OtlpSettings) {
        for (flag, key) in [
            (&self.otlp_ca_file, &mut otlp.ca_file),
            (&self.otlp_client_cert, &mut otlp.client_cert),
            (&self.otlp_client_key, &mut otlp.client_key),
        ] {
            if flag.is_some() {
                key.clone_from(flag);
            }
        }
    }

    /// The config file's (or flags') files over the `OTEL_EXPORTER_OTLP_*` ones.
    pub(crate) fn apply_settings(
        otlp: &retryscope::config::OtlpSettings,
        t: &mut TraceExportConfig,
    ) {
        for (set, field) in [
            (&otlp.ca_file, &mut t.tls.ca_file),
            (&otlp.client_cert, &mut t.tls.client_cert),
            (&otlp.client_key, &mut t.tls.client_key),
        ] {
            if set.is_some() {
                field.clone_from(set);
            }
        }
    }
}

pub(crate) fn parse_protocol(s: &str) -> Result<Protocol, String> {
    Protocol::parse(s).ok_or_else(|| format!("`{s}` is not grpc or http/protobuf"))
}

/// The trace export of one `check` run: a small runtime that exists only while exporting.
struct Export {
    runtime: tokio::runtime::Runtime,
    endpoint: String,
    capture_content: bool,
}

impl Export {
    /// Start exporting when an endpoint is configured (flags over `OTEL_EXPORTER_OTLP_*`).
    fn start(args: &CheckArgs) -> anyhow::Result<Option<(Export, TraceSink)>> {
        let mut cfg = TraceExportConfig::from_env().context("reading OTEL_EXPORTER_OTLP_*")?;
        if let Some(e) = &args.otlp_endpoint {
            cfg.endpoint = Some(e.clone());
        }
        if let Some(p) = args.otlp_protocol {
            cfg.protocol = p;
        }
        let mut files = retryscope::config::OtlpSettings::default();
        args.otlp_tls.apply_to(&mut files);
        OtlpTlsArgs::apply_settings(&files, &mut cfg);
        cfg.capture_content |= args.capture_content;
        let capture_content = cfg.capture_content;
        let Some(endpoint) = cfg.traces_endpoint() else {
            return Ok(None);
        };
        let runtime = super::common::runtime(1, "retryscope-otlp")?;
        let sink = runtime
            .block_on(async { TraceSink::start(cfg) })
            .context("starting the OTLP exporter")?;
        Ok(Some((
            Export {
                runtime,
                endpoint,
                capture_content,
            },
            sink,
        )))
    }

    /// Send what is queued (10 s at most) and say on stderr how it went.
    fn finish(self, sink: TraceSink) {
        let Export {
            runtime, endpoint, ..
        } = self;
        let stats = sink.stats();
        runtime.block_on(sink.shutdown(Duration::from_secs(10)));
        runtime.shutdown_timeout(Duration::from_secs(1));
        let exported = stats.spans_exported.load(Ordering::Relaxed);
        let dropped = stats.spans_dropped.load(Ordering::Relaxed);
        let failures = stats.export_failures.load(Ordering::Relaxed);
        eprintln!(
            "retryscope: traces: {} exported to {endpoint}, {} dropped",
            human::count(exported, "span", "spans"),
            human::thousands(dropped)
        );
        if failures > 0 {
            eprintln!(
                "retryscope: traces: export to {endpoint} failed ({}); {} not delivered (is the \
                 collector reachable?)",
                human::count(failures, "request", "requests"),
                human::count(dropped, "span was", "spans were")
            );
        }
    }
}

/// The report on stdout (JSON lines, or text blocks), a sink of closed turns; the closing
/// summary is written through it too.
struct Printer {
    json: bool,
    verbose: bool,
    summary_only: bool,
    style: render::Style,
    /// JSON lines carry attempt text only with --capture-content.
    strip_content: bool,
    out: io::BufWriter<io::Stdout>,
    progress: Option<ProgressBar>,
    write_error: Option<io::Error>,
}

impl Printer {
    fn write(&mut self, text: &str) {
        if self.write_error.is_some() {
            return;
        }
        let result = match &self.progress {
            Some(bar) => bar.suspend(|| self.out.write_all(text.as_bytes())),
            None => self.out.write_all(text.as_bytes()),
        };
        if let Err(e) = result {
            self.write_error = Some(e);
        }
    }

    fn turn(&mut self, report: &TurnReport) {
        if self.json {
            let has_content = report.output_prefix.is_some()
                || report.attempts.iter().any(|a| a.text_prefix.is_some())
                || report.findings.iter().any(|f| f.quote.is_some());
            let has_timeline = report.attempts.iter().any(|a| !a.timeline.is_empty());
            // Copy only when something must go (plain --json needs no copy).
            let mut line = if (self.strip_content && has_content) || has_timeline {
                let mut r = report.clone();
                if self.strip_content {
                    r.output_prefix = None;
                    r.attempts.iter_mut().for_each(|a| a.text_prefix = None);
                    r.findings.iter_mut().for_each(|f| f.quote = None);
                }
                r.attempts.iter_mut().for_each(|a| {
                    a.timeline.clear();
                    a.timeline_dropped = 0;
                });
                render::turn_json(&r)
            } else {
                render::turn_json(report)
            };
            line.push('\n');
            self.write(&line);
        } else if !self.summary_only && render::worth_showing(report, self.verbose) {
            let mut block = render::turn_text_styled(report, self.style);
            block.push('\n');
            self.write(&block);
        }
    }
}

impl Sink for Printer {
    fn name(&self) -> &'static str {
        "report"
    }

    fn deliver(&mut self, output: &Output, _at: Option<At<'_>>) {
        if let Output::TurnClosed(report) = output {
            self.turn(report);
        }
    }
}

/// Closed turns as traces, offline: waiting for room in the export queue rather than
/// dropping (until an export fails), unlike `run`'s `TracesOut`.
struct OfflineTraces<'a>(&'a TraceSink);

impl Sink for OfflineTraces<'_> {
    fn name(&self) -> &'static str {
        "traces"
    }

    fn deliver(&mut self, output: &Output, _at: Option<At<'_>>) {
        if let Output::TurnClosed(report) = output {
            self.0.submit_blocking(report);
        }
    }
}

/// What the run tells about its inputs, on stderr: bad lines (the first few), refused and
/// unreadable inputs, progress.
struct Notes {
    bad_shown: u64,
    bad_total: u64,
    max_bad_shown: u64,
    progress: Option<ProgressBar>,
}

impl Notes {
    fn warn(&self, text: &str) {
        match &self.progress {
            Some(bar) => bar.suspend(|| eprintln!("{text}")),
            None => eprintln!("{text}"),
        }
    }
}

impl CheckObserver for Notes {
    fn bad_line(&mut self, bad: &BadLine) {
        self.bad_total += 1;
        if self.bad_shown < self.max_bad_shown {
            self.bad_shown += 1;
            self.warn(&format!(
                "retryscope: {}:{}: skipped: {}",
                display(&bad.input),
                bad.line,
                display(&bad.reason)
            ));
        }
    }

    fn refused(&mut self, input: &str, lookalike: &retryscope_core::decode::detect::Lookalike) {
        self.warn(&format!(
            "retryscope: error: {}: {}.",
            display(input),
            lookalike.sentence()
        ));
    }

    fn unreadable(&mut self, input: &str, error: &io::Error) {
        self.warn(&format!(
            "retryscope: cannot read {}: {}",
            display(input),
            display(&error.to_string())
        ));
    }

    fn progress(&mut self, bytes: u64) {
        if let Some(bar) = &self.progress {
            bar.set_position(bytes);
        }
    }
}

/// Progress bars only for large inputs on a terminal.
const PROGRESS_MIN_BYTES: u64 = 32 << 20;

pub fn run(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let prices = PriceTable::builtin_with(args.prices.as_deref()).context("loading --prices")?;
    // The text and HTML reports are local: they quote attempt text the input holds. JSON lines
    // and traces leave the machine more easily: text only with --capture-content.
    let local_content = !args.json || args.html.is_some();
    // Created first, so a path in a missing folder fails before a long run, not after it.
    let html_file = match &args.html {
        Some(path) => Some(
            std::fs::File::create(path)
                .with_context(|| format!("cannot create the HTML report {}", path.display()))?,
        ),
        None => None,
    };
    let (export, traces) = match Export::start(&args)? {
        Some((export, sink)) => (Some(export), Some(sink)),
        None => (None, None),
    };
    let cfg = CorrelatorConfig {
        retry_cap: args.max_attempts,
        read_only_tools: args.read_only_tools.iter().cloned().collect(),
        idle_timeout_ms: args
            .idle_timeout_secs
            .map(|s| i64::try_from(s.saturating_mul(1000)).unwrap_or(i64::MAX)),
        max_open_turns: args.max_open_turns,
        // Attempt text prefixes only exist in reports when captured.
        capture_content: local_content
            || args.capture_content
            || export.as_ref().is_some_and(|e| e.capture_content),
        timeline: args.html.is_some(),
        ..CorrelatorConfig::default()
    };
    let specs: Vec<InputSpec> = args.inputs.iter().map(|a| InputSpec::parse(a)).collect();
    // A file named here is read whatever its name, but one that does not start like a log
    // (a README, source code) is refused with the reason: reading it would build turns from
    // whatever JSON it quotes. --format says "read it anyway".
    if args.format == retryscope_core::decode::Format::Auto {
        for spec in &specs {
            if let InputSpec::Path(p) = spec
                && p.is_file()
                && let Some(why) = check::files::not_a_log(p)
            {
                eprintln!(
                    "retryscope: error: {} does not look like a log: {}; give --format to read it \
                     anyway",
                    display(&p.display().to_string()),
                    display(&why)
                );
                return Ok(ExitCode::from(2));
            }
        }
    }
    let (inputs, skipped) = check::expand_inputs_listing_skipped(&specs);
    if !skipped.is_empty() {
        let shown: Vec<String> = skipped
            .iter()
            .take(5)
            .map(|p| retryscope_core::sanitize::display(&p.display().to_string()).into_owned())
            .collect();
        eprintln!(
            "retryscope: skipped {} in the given folders that do not look like logs (the first \
             line is neither a JSON object nor a server-sent event): {}{}",
            human::count(skipped.len() as u64, "file", "files"),
            shown.join(", "),
            if skipped.len() > 5 { ", …" } else { "" }
        );
    }
    let total = check::total_bytes(&inputs);
    let progress = (io::stderr().is_terminal() && total >= PROGRESS_MIN_BYTES).then(|| {
        let bar = ProgressBar::new(total);
        if let Ok(style) = ProgressStyle::with_template(
            "{spinner} {bytes}/{total_bytes} {wide_bar} {bytes_per_sec} eta {eta}",
        ) {
            bar.set_style(style);
        }
        bar
    });
    let mut printer = Printer {
        json: args.json,
        verbose: args.verbose,
        summary_only: args.summary,
        style: render::Style {
            color: use_color(&args.color),
        },
        strip_content: !(args.capture_content
            || export.as_ref().is_some_and(|e| e.capture_content)),
        out: io::BufWriter::with_capacity(1 << 16, io::stdout()),
        progress: progress.clone(),
        write_error: None,
    };
    let mut notes = Notes {
        bad_shown: 0,
        bad_total: 0,
        max_bad_shown: args.max_bad_lines_shown,
        progress,
    };
    let mut html = args
        .html
        .as_ref()
        .map(|_| retryscope::check::html::HtmlReport::new(Default::default()));
    let opts = CheckOptions {
        max_line_bytes: args.max_line_bytes,
        format: args.format,
        parallel: !args.single_thread,
    };
    // Closed turns go to the traces first (as they did), then the HTML page, then stdout.
    let summary = {
        let mut sinks = SinkList::new();
        if let Some(t) = &traces {
            sinks.push(Box::new(OfflineTraces(t)));
        }
        if let Some(h) = &mut html {
            sinks.push(Box::new(h));
        }
        sinks.push(Box::new(&mut printer));
        check::check(
            &inputs,
            cfg,
            Arc::new(prices),
            &opts,
            &mut notes,
            &mut sinks,
        )
    };
    if let Some(bar) = notes.progress.take() {
        bar.finish_and_clear();
    }
    printer.progress = None;
    if let (Some(file), Some(html)) = (html_file, html) {
        write_html(
            file,
            args.html.as_deref().unwrap_or(std::path::Path::new("")),
            &html,
            &summary,
        )?;
    }
    let result = report_and_status(&args, printer, &notes, &summary);
    // The report is out; now wait for the traces (the exit status does not depend on them).
    if let (Some(export), Some(sink)) = (export, traces) {
        export.finish(sink);
    }
    result
}

/// Print the closing summary and decide the exit status.
fn report_and_status(
    args: &CheckArgs,
    mut printer: Printer,
    notes: &Notes,
    summary: &check::Summary,
) -> anyhow::Result<ExitCode> {
    if notes.bad_total > notes.bad_shown {
        eprintln!(
            "retryscope: {} more bad lines not shown ({} in all; see the summary)",
            notes.bad_total - notes.bad_shown,
            notes.bad_total
        );
    }
    let closing = if args.json {
        format!("{}\n", render::summary_json(summary))
    } else {
        render::summary_text_styled(summary, printer.style)
    };
    printer.write(&closing);
    if let Some(e) = printer.write_error.take() {
        if e.kind() == io::ErrorKind::BrokenPipe {
            return Ok(ExitCode::SUCCESS);
        }
        return Err(e).context("writing the report");
    }
    printer.out.flush().context("writing the report")?;
    if !summary.unreadable_inputs.is_empty() || !summary.refused_inputs.is_empty() {
        return Ok(ExitCode::from(2));
    }
    if summary.events == 0 {
        eprintln!(
            "retryscope: error: no events in {} input(s) ({} lines, {} bad): nothing was checked; \
             is this the right path, and the right --format?",
            summary.inputs, summary.lines, summary.bad_lines
        );
        return Ok(ExitCode::from(2));
    }
    if let Some(required) = &args.require_coverage {
        let missing: Vec<&str> = Sight::ALL
            .into_iter()
            .filter(|s| required.iter().any(|r| r == s.as_str()) && !summary.can_show(*s))
            .map(Sight::words)
            .collect();
        if !missing.is_empty() {
            eprintln!(
                "retryscope: coverage: no input can show {} (--require-coverage): \
                 a finding about them could not have been raised; see the summary's blind spots \
                 for what to add",
                missing.join(" or ")
            );
            return Ok(ExitCode::from(1));
        }
    }
    if let Some(threshold) = args.fail_on
        && summary.max_severity().is_some_and(|s| s >= threshold)
    {
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

fn use_color(when: &str) -> bool {
    let no_color = std::env::var("NO_COLOR").ok();
    let term = std::env::var("TERM").ok();
    render::color_choice(
        when,
        io::stdout().is_terminal(),
        no_color.as_deref(),
        term.as_deref(),
    )
}

fn write_html(
    file: std::fs::File,
    path: &std::path::Path,
    html: &retryscope::check::html::HtmlReport,
    summary: &check::Summary,
) -> anyhow::Result<()> {
    let mut out = io::BufWriter::new(file);
    html.write(summary, &mut out)
        .and_then(|()| out.flush())
        .with_context(|| format!("cannot write the HTML report {}", path.display()))?;
    eprintln!("retryscope: HTML report written to {}", path.display());
    Ok(())
}
