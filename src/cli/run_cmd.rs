//! `retryscope run` and `retryscope validate`: flags over the config file, the tokio runtime,
//! the metrics server, signals, and the engine thread.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use retryscope::config::RunConfig;
use retryscope::run::{Engine, Sources};
use retryscope::sink::metrics::Metrics;
use retryscope::sink::traces::{Protocol, TraceExportConfig};
use retryscope::source::file::ReadFrom;

/// Flags of `run`; each overrides the config file.
#[derive(Debug, Args)]
#[command(
    after_help = "Exit status: 0 after a clean stop (Ctrl-C, SIGTERM, or the end of stdin \
with --exit-on-eof); 2 for unusable arguments or configuration, or when it cannot start \
(metrics address in use, unreadable price table or checkpoint), or when an ingest worker thread \
dies (--workers; no checkpoint is written after it)."
)]
pub struct RunArgs {
    /// Files or glob patterns to tail, or `-` for stdin.
    #[arg(value_name = "PATH_OR_GLOB")]
    paths: Vec<String>,
    /// TOML configuration file (see docs/configuration.md).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address for /metrics, /healthz and /-/ready [default: 127.0.0.1:9464].
    #[arg(long, value_name = "ADDR")]
    metrics_addr: Option<String>,
    /// Directory for checkpoints (file offsets and open turns survive restarts).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Where files with no checkpoint start [default: beginning].
    #[arg(long, value_name = "beginning|end")]
    read_from: Option<ReadFrom>,
    /// Close turns idle this long (seconds) [default: 300].
    #[arg(long, value_name = "N")]
    idle_timeout_secs: Option<u64>,
    /// Open turns kept in memory before the least recently active is evicted [default: 100000].
    #[arg(long, value_name = "N")]
    max_open_turns: Option<usize>,
    /// Read a file's last line without its newline once the file has been quiet this long
    /// (milliseconds; 0: wait for the newline) [default: 500].
    #[arg(long, value_name = "MS")]
    partial_line_wait_ms: Option<u64>,
    /// Threads that decode and correlate (at most 8): native lines sharded by turn, any other
    /// stream (provider, agent, OTLP session) read whole by one of them [default: 1; more only
    /// pays on idle cores]
    #[arg(long, value_name = "N")]
    workers: Option<usize>,
    /// More attempts than this in a turn (the first try included) is a `retry_cap_exceeded`
    /// finding [default: 4]. `--retry-cap` is an older name for it.
    #[arg(long, alias = "retry-cap", value_name = "N")]
    max_attempts: Option<u32>,
    /// Tools whose executions are reads (comma-separated).
    #[arg(long, value_name = "TOOL,...", value_delimiter = ',')]
    read_only_tools: Vec<String>,
    /// Findings as JSON lines, one per finding as soon as it is known: `-` (stdout), a file,
    /// or an empty string ('') to disable [default: -].
    #[arg(long, value_name = "TARGET")]
    findings_out: Option<String>,
    /// Price table (LiteLLM JSON) layered over the built-in one (a model in both takes this
    /// file's price).
    #[arg(long, value_name = "FILE")]
    prices: Option<PathBuf>,
    /// Format of tailed files and stdin: auto (detected per input), native, openai-chat,
    /// openai-responses, anthropic, gemini, gemini-cli-responses, acp, gemini-cli-telemetry.
    #[arg(long, value_name = "FORMAT")]
    format: Option<retryscope_core::decode::Format>,
    /// Run the built-in demo fleet of synthetic agents.
    #[arg(long)]
    demo: bool,
    /// Demo: probability an attempt breaks and is retried [default: 0.2].
    #[arg(long, value_name = "P")]
    demo_retry_rate: Option<f64>,
    /// Demo: turns per second [default: 5].
    #[arg(long, value_name = "N")]
    demo_turns_per_sec: Option<f64>,
    /// Export turns as OTLP traces to this endpoint.
    #[arg(long, value_name = "URL")]
    otlp_endpoint: Option<String>,
    /// OTLP protocol: grpc or http/protobuf.
    #[arg(long, value_name = "PROTOCOL", value_parser = crate::cli::check_cmd::parse_protocol)]
    otlp_protocol: Option<Protocol>,
    #[command(flatten)]
    otlp_tls: crate::cli::check_cmd::OtlpTlsArgs,
    /// Put the first characters of each attempt's text (the attempt text prefix) in the
    /// exported traces (off by default: only counts and lengths leave the process).
    #[arg(long)]
    capture_content: bool,
    /// With stdin as the only source, exit when it ends instead of serving metrics on.
    #[arg(long)]
    exit_on_eof: bool,
    /// Collect from NATS JetStream (lines sent by `retryscope ship`) instead of tailing:
    /// share the partitions with the other collectors on the same server.
    #[arg(long, value_name = "URL")]
    pub(super) nats: Option<String>,
    #[command(flatten)]
    pub(super) nats_deploy: super::nats_args::NatsArgs,
    #[command(flatten)]
    pub(super) collector: super::nats_args::CollectorArgs,
    /// Receive OTLP/HTTP (protobuf and JSON: /v1/logs, /v1/traces; /v1/metrics is
    /// acknowledged and ignored) on this address (`HOST:PORT`; `:PORT` or `PORT` alone listen
    /// on 127.0.0.1).
    #[arg(long, value_name = "ADDR")]
    otlp_listen: Option<String>,
    /// Receive OTLP/gRPC (logs, traces and metrics services) on this address.
    #[arg(long, value_name = "ADDR")]
    otlp_grpc_listen: Option<String>,
    /// The OTLP receiver requires `authorization: Bearer <token>` with the token in this file.
    #[arg(long, value_name = "FILE")]
    otlp_listen_token_file: Option<PathBuf>,
    /// TLS certificate chain (PEM) for the OTLP listeners (with --otlp-tls-key).
    #[arg(long, value_name = "FILE")]
    otlp_tls_cert: Option<PathBuf>,
    /// TLS private key (PEM) for the OTLP listeners.
    #[arg(long, value_name = "FILE")]
    otlp_tls_key: Option<PathBuf>,
    /// When the checkpoint in --data-dir is unusable (corrupt, empty, truncated), move it and
    /// the findings file aside and start over; without this flag `run` refuses to start.
    #[arg(long)]
    reset_checkpoint: bool,
    /// How findings on stdout are written: json (one JSON line each), human (one coloured
    /// sentence each, as `check` prints them, and a summary line), or auto: human on a
    /// terminal, json otherwise.
    #[arg(long, value_name = "MODE", default_value = "auto", value_parser = ["auto", "human", "json"])]
    output: String,
    /// With human output: print findings at or above this severity (info, warning, high,
    /// critical); the rest are counted in the summary line.
    #[arg(long, value_name = "SEVERITY", default_value = "high")]
    min_severity: retryscope_core::finding::Severity,
    /// With human output: a summary line this often (seconds; 0: only at the stop).
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    summary_every: u64,
    #[command(flatten)]
    limits: super::limits_args::LimitArgs,
}

/// Flags of `validate`.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// The configuration file to check.
    config: PathBuf,
}

pub fn validate(args: ValidateArgs) -> anyhow::Result<ExitCode> {
    let cfg = RunConfig::load(&args.config)?;
    preflight(&cfg)?;
    // The OTLP endpoint and TLS files, as `run` would check them at startup (no connection).
    if let Some(traces) = super::common::trace_config(&cfg)? {
        traces.prepare()?;
    }
    println!(
        "{}: ok ({} include patterns, metrics on {})",
        args.config.display(),
        cfg.include.len(),
        cfg.metrics_addr
    );
    Ok(ExitCode::SUCCESS)
}

fn merge(args: &RunArgs) -> anyhow::Result<(RunConfig, Sources)> {
    let mut cfg = match &args.config {
        Some(path) => RunConfig::load(path)?,
        None => RunConfig::default(),
    };
    let mut stdin = false;
    for p in &args.paths {
        if p == "-" {
            stdin = true;
        } else {
            cfg.include.push(p.clone());
        }
    }
    if let Some(v) = &args.metrics_addr {
        cfg.metrics_addr = v.clone();
    }
    if let Some(v) = &args.data_dir {
        cfg.data_dir = Some(v.clone());
    }
    if let Some(v) = args.read_from {
        cfg.read_from = v;
    }
    if let Some(v) = args.idle_timeout_secs {
        cfg.idle_timeout_secs = v;
    }
    if let Some(v) = args.max_open_turns {
        cfg.max_open_turns = v;
    }
    if let Some(v) = args.partial_line_wait_ms {
        cfg.partial_line_wait_ms = v;
    }
    if let Some(v) = args.workers {
        cfg.workers = Some(v);
    }
    if let Some(v) = args.max_attempts {
        cfg.max_attempts = v;
    }
    cfg.read_only_tools
        .extend(args.read_only_tools.iter().cloned());
    if let Some(v) = &args.findings_out {
        cfg.findings_out = v.clone();
    }
    if let Some(v) = &args.prices {
        cfg.prices = Some(v.clone());
    }
    if let Some(v) = args.format {
        cfg.format = v;
    }
    if let Some(v) = args.demo_retry_rate {
        cfg.demo.retry_rate = v;
    }
    if let Some(v) = args.demo_turns_per_sec {
        cfg.demo.turns_per_sec = v;
    }
    if let Some(v) = &args.otlp_endpoint {
        cfg.otlp.endpoint = Some(v.clone());
    }
    if let Some(v) = args.otlp_protocol {
        cfg.otlp.protocol = Some(v);
    }
    args.otlp_tls.apply_to(&mut cfg.otlp);
    cfg.otlp.capture_content |= args.capture_content;
    let r = &mut cfg.otlp_receiver;
    for (to, from) in [
        (&mut r.listen, &args.otlp_listen),
        (&mut r.grpc_listen, &args.otlp_grpc_listen),
    ] {
        if from.is_some() {
            to.clone_from(from);
        }
    }
    for (to, from) in [
        (&mut r.token_file, &args.otlp_listen_token_file),
        (&mut r.tls_cert, &args.otlp_tls_cert),
        (&mut r.tls_key, &args.otlp_tls_key),
    ] {
        if from.is_some() {
            to.clone_from(from);
        }
    }
    args.limits.apply_to(&mut cfg.connections);
    cfg.reset_checkpoint = args.reset_checkpoint;
    cfg.live_view = live_view(args);
    cfg.validate()?;
    preflight(&cfg)?;
    let receiving = cfg.otlp_receiver.listen.is_some() || cfg.otlp_receiver.grpc_listen.is_some();
    let sources = Sources {
        files: !cfg.include.is_empty(),
        stdin,
        demo: args.demo,
        otlp: receiving.then(|| {
            Arc::new(retryscope::source::otlp::Queue::new(
                cfg.otlp_receiver.queue_bytes,
            ))
        }),
        ..Sources::default()
    };
    Ok((cfg, sources))
}

/// The live view's settings when findings on stdout are for a person.
fn live_view(args: &RunArgs) -> Option<retryscope::sink::live_view::LiveViewSettings> {
    use std::io::IsTerminal;
    let terminal = std::io::stdout().is_terminal();
    let human = match args.output.as_str() {
        "human" => true,
        "json" => false,
        _ => terminal,
    };
    let no_color = std::env::var("NO_COLOR").ok();
    let term = std::env::var("TERM").ok();
    human.then(|| retryscope::sink::live_view::LiveViewSettings {
        color: retryscope::check::render::color_choice(
            "auto",
            terminal,
            no_color.as_deref(),
            term.as_deref(),
        ),
        min_severity: args.min_severity,
        summary_every: (args.summary_every > 0).then(|| Duration::from_secs(args.summary_every)),
    })
}

/// The configuration of a NATS collector: the same flags, without file sources. What a
/// collector cannot honour yet is refused with the reason (exit 2), never ignored.
fn merge_nats(args: &RunArgs) -> anyhow::Result<RunConfig> {
    if !args.paths.is_empty() || args.demo {
        anyhow::bail!("with --nats, lines come from `retryscope ship`: give no paths or --demo");
    }
    let cfg = merge(args)?.0;
    if let Some(flag) = nats_unsupported(&cfg, args) {
        anyhow::bail!("with --nats, {flag}");
    }
    Ok(cfg)
}

/// The first setting a NATS collector cannot honour, as a sentence naming it and what to do.
fn nats_unsupported(cfg: &RunConfig, args: &RunArgs) -> Option<&'static str> {
    if cfg.workers.is_some_and(|w| w > 1) {
        return Some(
            "--workers (or workers in the configuration) does not apply: a collector runs one \
             correlator per owned partition; scale out with more collectors",
        );
    }
    if cfg.data_dir.is_some() || cfg.reset_checkpoint {
        return Some(
            "--data-dir and --reset-checkpoint do not apply: a collector keeps its partitions' \
             checkpoints in JetStream (the retryscope_state bucket), and its OTLP receiver \
             publishes what it accepts there",
        );
    }
    if args.exit_on_eof {
        return Some("--exit-on-eof does not apply: a collector has no stdin to end");
    }
    if args.output == "human" {
        return Some(
            "--output human is not available: a collector writes findings as JSON lines \
             (--findings-out)",
        );
    }
    None
}

/// What `run` would reject at start, checked before it starts (and by `validate`): the price
/// table loads, and the findings file's folder exists.
pub(super) fn preflight(cfg: &RunConfig) -> anyhow::Result<()> {
    retryscope_core::cost::PriceTable::builtin_with(cfg.prices.as_deref())?;
    let target = cfg.findings_out.as_str();
    if !target.is_empty() && target != "-" {
        let path = std::path::Path::new(target);
        let folder = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => std::path::Path::new("."),
        };
        if !folder.is_dir() {
            anyhow::bail!(
                "findings_out `{}`: the folder {} does not exist",
                retryscope_core::sanitize::display(target),
                folder.display()
            );
        }
        if path.is_dir() {
            anyhow::bail!(
                "findings_out `{}` is a directory; give a file name",
                retryscope_core::sanitize::display(target)
            );
        }
    }
    Ok(())
}

/// Warn about include patterns that cannot match what the user probably meant: a directory
/// (run tails files: give a glob), a missing file, a glob under a missing folder.
fn warn_about_includes(include: &[String]) {
    for pattern in include {
        let shown = retryscope_core::sanitize::display(pattern);
        let path = std::path::Path::new(pattern);
        let is_glob = pattern.contains(['*', '?', '[']);
        if !is_glob && path.is_dir() {
            tracing::warn!(
                "`{shown}` is a directory; run tails files: give a glob such as `{}/*.jsonl`",
                shown.trim_end_matches('/')
            );
        } else if !is_glob && !path.exists() {
            tracing::warn!("`{shown}` does not exist; it will be read if it appears");
        } else if is_glob {
            let literal = &pattern[..pattern.find(['*', '?', '[']).unwrap_or(pattern.len())];
            let folder = match literal.rfind('/') {
                Some(0) => "/",
                Some(i) => &literal[..i],
                None => ".",
            };
            if !std::path::Path::new(folder).is_dir() {
                tracing::warn!(
                    "no folder `{}` for `{shown}`: nothing can match until it exists",
                    retryscope_core::sanitize::display(folder)
                );
            }
        }
    }
}

pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    if args.nats.is_some() {
        let cfg = merge_nats(&args)?;
        let url = args.nats.clone().unwrap_or_default();
        return super::collect_cmd::run(cfg, &url, &args.collector, &args.nats_deploy);
    }
    if let Some(flag) = args.nats_deploy.any_given() {
        anyhow::bail!("{flag} applies only with --nats (a collector)");
    }
    let (cfg, sources) = merge(&args)?;
    if !sources.any() {
        // Before anything is started or logged ("serving /metrics" and then this read as if
        // the collector had run).
        return Err(retryscope::run::RunError::NoSource.into());
    }
    let traces = super::common::trace_config(&cfg)?;
    let exit_on_eof = args.exit_on_eof;
    let runtime = super::common::runtime(2, "retryscope-run")?;
    runtime.block_on(async move {
        // The subscriber is installed inside the runtime: with an OTLP endpoint, retryscope's
        // own spans are exported too (as `<service>-self`, apart from the turn traces).
        let telemetry = retryscope::telemetry::init(traces.as_ref())
            .context("starting logging and self-telemetry")?;
        if telemetry.is_exporting() {
            tracing::info!("exporting operational spans over OTLP (service suffix `-self`)");
        }
        let result = serve(cfg, sources, traces, exit_on_eof).await;
        // Flush operational spans while the runtime still runs; shutdown blocks this thread.
        match tokio::task::spawn_blocking(move || telemetry.shutdown(Duration::from_secs(10))).await
        {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "operational spans not flushed"),
            Err(e) => tracing::warn!(error = %e, "operational span shutdown panicked"),
        }
        result
    })
}

/// Everything `run` does inside the runtime once logging is up.
async fn serve(
    cfg: RunConfig,
    sources: Sources,
    traces: Option<TraceExportConfig>,
    exit_on_eof: bool,
) -> anyhow::Result<ExitCode> {
    super::common::raise_fd_limit();
    let metrics = Arc::new(Metrics::new(cfg.labels.clone()).context("registering metrics")?);
    warn_about_includes(&cfg.include);
    let listener = tokio::net::TcpListener::bind(&cfg.metrics_addr)
        .await
        .with_context(|| {
            format!(
                "cannot serve /metrics on {} (choose another address with --metrics-addr or \
                 metrics_addr in the config)",
                cfg.metrics_addr
            )
        })?;
    match listener.local_addr() {
        Ok(addr) => {
            tracing::info!(%addr, live_page = %format!("http://{addr}/ui"), "serving /metrics")
        }
        Err(_) => tracing::info!(addr = %cfg.metrics_addr, "serving /metrics"),
    }
    let ready = Arc::new(AtomicBool::new(false));
    let shutdown = Arc::new(AtomicBool::new(false));
    let (stop_server_tx, stop_server_rx) = tokio::sync::oneshot::channel::<()>();
    let page = retryscope::sink::live_page::SharedPage::default();
    let server = tokio::spawn(retryscope::server::serve_with_page(
        listener,
        metrics.clone(),
        ready.clone(),
        cfg.connections.clone(),
        Some(page.clone()),
        async move {
            let _ = stop_server_rx.await;
        },
    ));
    let traces = super::common::start_traces(traces)?;
    let signal_flag = shutdown.clone();
    let checkpointing = cfg.data_dir.is_some();
    tokio::spawn(async move {
        super::common::wait_for_signal().await;
        if checkpointing {
            tracing::info!("shutting down: stopping reads, flushing sinks, writing the checkpoint");
        } else {
            tracing::info!("shutting down: stopping reads, closing open turns, flushing sinks");
        }
        signal_flag.store(true, Ordering::SeqCst);
    });
    // The receiver is bound now (a bad or busy address stops the start) and accepts once the
    // engine is ready (the spool is open and replayed).
    let receiver = match &sources.otlp {
        Some(queue) => Some(
            super::common::start_otlp_receiver(&cfg, queue.clone(), metrics.clone(), ready.clone())
                .await?,
        ),
        None => None,
    };
    let engine = Engine::new(cfg, sources, metrics.clone(), traces).with_live_page(page);
    let engine_shutdown = shutdown.clone();
    let (summary, traces) =
        tokio::task::spawn_blocking(move || engine.run(engine_shutdown, ready, exit_on_eof))
            .await
            .context("the engine thread panicked")??;
    if let Some(t) = traces {
        t.shutdown(Duration::from_secs(10)).await;
    }
    if let Some(r) = receiver {
        r.stop().await;
    }
    let _ = stop_server_tx.send(());
    let _ = server.await;
    tracing::info!(
        lines = summary.lines,
        checkpoints = summary.checkpoints,
        open_turns_checkpointed = summary.open_turns_checkpointed,
        "stopped"
    );
    if summary.final_checkpoint_failed {
        anyhow::bail!(
            "the final checkpoint could not be written; the next start resumes from the last \
             good one and reads again what came after it"
        );
    }
    Ok(ExitCode::SUCCESS)
}
