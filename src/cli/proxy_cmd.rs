//! `retryscope proxy`: flags over the config file's `[proxy]` table, then the same runtime,
//! metrics server, engine and sinks as `run`, fed by the proxy instead of files.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use retryscope::config::RunConfig;
use retryscope::internal_events::{
    InternalEvent, ProxyAnswerUnobserved, ProxyCut, ProxyFeedLost, ProxyUpstreamError,
};
use retryscope::proxy::{
    self, How, InjectMatch, InjectRule, LineSink, Point, Proxy, ProxyNote, Tracker,
    UpstreamSettings,
};
use retryscope::run::{Engine, Sources};
use retryscope::sink::metrics::Metrics;
use retryscope::sink::traces::{Protocol, TraceExportConfig};

/// Flags of `proxy`; each overrides the config file.
#[derive(Debug, Args)]
#[command(after_help = "Point the agent's base URL at the proxy (for example \
ANTHROPIC_BASE_URL=http://127.0.0.1:8788). Exit status: 0 after Ctrl-C or SIGTERM; 2 for unusable \
arguments or configuration, or when it cannot start. See docs/proxy.md.")]
pub struct ProxyArgs {
    /// TOML configuration file: the `[proxy]` table (several upstreams by path prefix) and
    /// everything `run` reads (sinks, OTLP, limits).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address to listen on [default: 127.0.0.1:8788].
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// Upstream base URL for every path (https://api.anthropic.com, http://127.0.0.1:9000);
    /// adds a `/` route to the config file's.
    #[arg(long, value_name = "URL")]
    upstream: Option<String>,
    /// Cut streams on purpose: after-tool-call, mid-word or before-finish (for upstreams
    /// without their own `inject` in the config file).
    #[arg(long, value_name = "POINT")]
    inject: Option<Point>,
    /// How to cut: reset (TCP RST), eof (the body ends there) or error (the provider's own
    /// in-stream error event) [default: reset].
    #[arg(long, value_name = "HOW", requires = "inject")]
    inject_how: Option<How>,
    /// Cut the first N streams that reach the point [default: 1].
    #[arg(
        long,
        value_name = "N",
        requires = "inject",
        conflicts_with = "inject_fraction"
    )]
    inject_first: Option<u64>,
    /// Cut this fraction of streams instead (0..=1), chosen with --inject-seed.
    #[arg(long, value_name = "P", requires = "inject")]
    inject_fraction: Option<f64>,
    /// Seed of --inject-fraction's choice [default: 0].
    #[arg(long, value_name = "N", requires = "inject_fraction")]
    inject_seed: Option<u64>,
    /// Which requests' streams count and may be cut: tools (requests that offer the model
    /// tools, so a client's side calls such as a title request are left alone), all,
    /// path=GLOB or model=GLOB (`*`, `?`) [default: tools].
    #[arg(long, value_name = "MATCH", requires = "inject")]
    inject_match: Option<InjectMatch>,
    /// Save each attempt's request and stream in DIR (secrets redacted); `retryscope check
    /// DIR` re-checks the session.
    #[arg(long, value_name = "DIR")]
    record: Option<PathBuf>,
    /// Extra root certificates (PEM) trusted for upstream TLS.
    #[arg(long, value_name = "FILE")]
    ca_file: Option<PathBuf>,
    /// Address for /metrics, /healthz and /-/ready [default: 127.0.0.1:9464].
    #[arg(long, value_name = "ADDR")]
    metrics_addr: Option<String>,
    /// Directory for checkpoints (open turns survive restarts).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Findings as JSON lines: `-` (stdout), a file, or '' to disable [default: -].
    #[arg(long, value_name = "TARGET")]
    findings_out: Option<String>,
    /// Close turns idle this long (seconds) [default: 300].
    #[arg(long, value_name = "N")]
    idle_timeout_secs: Option<u64>,
    /// More attempts than this in a turn is a `retry_cap_exceeded` finding [default: 4].
    #[arg(long, value_name = "N")]
    max_attempts: Option<u32>,
    /// Tools whose executions are reads (comma-separated).
    #[arg(long, value_name = "TOOL,...", value_delimiter = ',')]
    read_only_tools: Vec<String>,
    /// Price table (LiteLLM JSON) layered over the built-in one.
    #[arg(long, value_name = "FILE")]
    prices: Option<PathBuf>,
    /// Export turns as OTLP traces to this endpoint.
    #[arg(long, value_name = "URL")]
    otlp_endpoint: Option<String>,
    /// OTLP protocol: grpc or http/protobuf.
    #[arg(long, value_name = "PROTOCOL", value_parser = crate::cli::check_cmd::parse_protocol)]
    otlp_protocol: Option<Protocol>,
    /// Put the first characters of each attempt's text in the exported traces.
    #[arg(long)]
    capture_content: bool,
    #[command(flatten)]
    limits: super::limits_args::LimitArgs,
}

fn merge(args: &ProxyArgs) -> anyhow::Result<RunConfig> {
    let mut cfg = match &args.config {
        Some(path) => RunConfig::load(path)?,
        None => RunConfig::default(),
    };
    args.limits.apply_to(&mut cfg.connections);
    let p = &mut cfg.proxy;
    if let Some(v) = &args.listen {
        p.listen = v.clone();
    }
    if let Some(url) = &args.upstream {
        p.upstream.push(UpstreamSettings {
            prefix: "/".to_owned(),
            url: url.clone(),
            strip_prefix: None,
            inject: None,
        });
    }
    if let Some(point) = args.inject {
        if let Some(f) = args.inject_fraction
            && !(0.0..=1.0).contains(&f)
        {
            anyhow::bail!("--inject-fraction {f}: give a number between 0 and 1");
        }
        p.inject = Some(InjectRule {
            point,
            how: args.inject_how.unwrap_or_default(),
            first: args.inject_first,
            fraction: args.inject_fraction,
            seed: args.inject_seed.unwrap_or(0),
            matches: args.inject_match.clone().unwrap_or_default(),
        });
    }
    if let Some(v) = &args.record {
        p.record = Some(v.clone());
    }
    if let Some(v) = &args.ca_file {
        p.ca_file = Some(v.clone());
    }
    if p.upstream.is_empty() {
        anyhow::bail!("no upstream: give --upstream URL, or [[proxy.upstream]] in --config");
    }
    if let Some(v) = &args.metrics_addr {
        cfg.metrics_addr = v.clone();
    }
    if let Some(v) = &args.data_dir {
        cfg.data_dir = Some(v.clone());
    }
    if let Some(v) = &args.findings_out {
        cfg.findings_out = v.clone();
    }
    if let Some(v) = args.idle_timeout_secs {
        cfg.idle_timeout_secs = v;
    }
    if let Some(v) = args.max_attempts {
        cfg.max_attempts = v;
    }
    cfg.read_only_tools
        .extend(args.read_only_tools.iter().cloned());
    if let Some(v) = &args.prices {
        cfg.prices = Some(v.clone());
    }
    if let Some(v) = &args.otlp_endpoint {
        cfg.otlp.endpoint = Some(v.clone());
    }
    if let Some(v) = args.otlp_protocol {
        cfg.otlp.protocol = Some(v);
    }
    cfg.otlp.capture_content |= args.capture_content;
    // The proxy writes the native format; files in the config are not tailed by it.
    cfg.format = retryscope_core::decode::Format::Native;
    cfg.include.clear();
    cfg.validate()?;
    super::run_cmd::preflight(&cfg)?;
    Ok(cfg)
}

pub fn run(args: ProxyArgs) -> anyhow::Result<ExitCode> {
    let cfg = merge(&args)?;
    let traces = super::common::trace_config(&cfg)?;
    let runtime = super::common::runtime(2, "retryscope-proxy")?;
    runtime.block_on(async move {
        let telemetry = retryscope::telemetry::init(traces.as_ref())
            .context("starting logging and self-telemetry")?;
        let result = serve(cfg, traces).await;
        match tokio::task::spawn_blocking(move || telemetry.shutdown(Duration::from_secs(10))).await
        {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "operational spans not flushed"),
            Err(e) => tracing::warn!(error = %e, "operational span shutdown panicked"),
        }
        result
    })
}

async fn serve(cfg: RunConfig, traces: Option<TraceExportConfig>) -> anyhow::Result<ExitCode> {
    super::common::raise_fd_limit();
    let metrics = Arc::new(Metrics::new(cfg.labels.clone()).context("registering metrics")?);
    let metrics_listener = tokio::net::TcpListener::bind(&cfg.metrics_addr)
        .await
        .with_context(|| {
            format!(
                "cannot serve /metrics on {} (choose another with --metrics-addr)",
                cfg.metrics_addr
            )
        })?;
    let proxy_listener = tokio::net::TcpListener::bind(&cfg.proxy.listen)
        .await
        .with_context(|| {
            format!(
                "cannot listen on {} (choose another with --listen)",
                cfg.proxy.listen
            )
        })?;
    if let Ok(addr) = metrics_listener.local_addr() {
        tracing::info!(%addr, "serving /metrics");
    }
    let listen_addr = proxy_listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let ready = Arc::new(AtomicBool::new(false));
    let shutdown = Arc::new(AtomicBool::new(false));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let server = {
        let mut rx = stop_rx.clone();
        tokio::spawn(retryscope::server::serve_limited(
            metrics_listener,
            metrics.clone(),
            ready.clone(),
            cfg.connections.clone(),
            async move {
                let _ = rx.changed().await;
            },
        ))
    };
    let traces = super::common::start_traces(traces)?;
    // The tracker's lines: to the engine, and to the recording.
    let (tx, rx) = std::sync::mpsc::sync_channel(16_384);
    let start_ms = proxy::now_ms();
    let mut sink: Box<dyn LineSink> = Box::new(proxy::EngineSink::new(tx));
    if let Some(dir) = &cfg.proxy.record {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating --record {}", dir.display()))?;
        let path = proxy::Recorder::events_path(dir, start_ms);
        sink = Box::new(
            proxy::Tee::new(&path, sink).with_context(|| format!("opening {}", path.display()))?,
        );
        tracing::info!(path = %path.display(), "recording the session");
    }
    let tracker = Tracker::new(sink, format!("px{start_ms}"));
    let notes_metrics = metrics.clone();
    let notes = Box::new(move |n: ProxyNote| match n {
        ProxyNote::Cut { point, how, target } => ProxyCut {
            point,
            how,
            target: target.as_ref(),
        }
        .emit(&notes_metrics),
        ProxyNote::UpstreamError => ProxyUpstreamError.emit(&notes_metrics),
        ProxyNote::Stream => notes_metrics.inc_proxy_streams(),
        ProxyNote::Held { nanos } => notes_metrics.observe_proxy_latency(nanos as f64 / 1e9),
        ProxyNote::Unobserved => ProxyAnswerUnobserved.emit(&notes_metrics),
        ProxyNote::FeedLost { lines } => ProxyFeedLost { lines }.emit(&notes_metrics),
    });
    let proxy = Arc::new(Proxy::new(&cfg.proxy, tracker, notes)?);
    for u in &cfg.proxy.upstream {
        tracing::info!(
            prefix = %u.prefix,
            upstream = %retryscope_core::sanitize::display(&u.url),
            inject = %u
                .inject
                .as_ref()
                .or(cfg.proxy.inject.as_ref())
                .map_or_else(|| "none".to_owned(), |r| format!("{} by {}, matching {}", r.point.as_str(), r.how.as_str(), r.matches)),
            "proxy route"
        );
    }
    tracing::info!(listen = %listen_addr, "proxying");
    let proxy_task = {
        let mut rx = stop_rx.clone();
        let gate = retryscope::listener::Gate::new(
            retryscope::listener::Name::Proxy,
            cfg.connections.clone(),
            Some(metrics.clone()),
        );
        tokio::spawn(proxy::serve_gated(
            proxy_listener,
            proxy.clone(),
            gate,
            async move {
                let _ = rx.changed().await;
            },
        ))
    };
    let signal_flag = shutdown.clone();
    tokio::spawn(async move {
        super::common::wait_for_signal().await;
        tracing::info!("shutting down: closing open turns, flushing sinks");
        signal_flag.store(true, Ordering::SeqCst);
    });
    let engine = Engine::new(cfg, Sources::default(), metrics.clone(), traces).with_feed(rx);
    let engine_shutdown = shutdown.clone();
    let (summary, traces) =
        tokio::task::spawn_blocking(move || engine.run(engine_shutdown, ready, false))
            .await
            .context("the engine thread panicked")??;
    let _ = stop_tx.send(true);
    if let Some(t) = traces {
        t.shutdown(Duration::from_secs(10)).await;
    }
    let _ = proxy_task.await;
    let _ = server.await;
    let stats = proxy.stats();
    tracing::info!(
        requests = stats.requests,
        retries = stats.retries,
        resumed = stats.resumed,
        executions = stats.executions,
        cuts = proxy.cuts(),
        lines = summary.lines,
        lines_lost = proxy.feed_lost(),
        "stopped"
    );
    if summary.final_checkpoint_failed {
        anyhow::bail!("the final checkpoint could not be written");
    }
    Ok(ExitCode::SUCCESS)
}
