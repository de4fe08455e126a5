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
    /// Publish the proxy's lines to this NATS server's JetStream (by turn, as `ship` does)
    /// instead of correlating them here: the cluster's `run --nats` collectors correlate
    /// them, with every other host's (docs/scaling.md).
    #[arg(long, value_name = "URL")]
    nats_publish: Option<String>,
    #[command(flatten)]
    nats_deploy: super::nats_args::NatsArgs,
    /// With --nats-publish: this host's name in message ids [default: the host name].
    #[arg(long, value_name = "NAME", requires = "nats_publish")]
    source_id: Option<String>,
    /// With --nats-publish: partitions, when this proxy creates the events stream.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 16,
        requires = "nats_publish"
    )]
    partitions: u32,
}

/// Where the proxy's lines go with --nats-publish.
struct Publish {
    deploy: retryscope::nats::deploy::Deploy,
    source_id: String,
    partitions: u32,
}

impl ProxyArgs {
    /// The cluster to publish to, or why the flags ask for what only a local engine does
    /// (exit 2: never ignored).
    fn publish(&self) -> anyhow::Result<Option<Publish>> {
        let Some(url) = &self.nats_publish else {
            if let Some(flag) = self.nats_deploy.any_given() {
                anyhow::bail!("{flag} applies to --nats-publish, which is not given");
            }
            return Ok(None);
        };
        let local = [
            (self.data_dir.is_some(), "--data-dir"),
            (self.findings_out.is_some(), "--findings-out"),
            (self.otlp_endpoint.is_some(), "--otlp-endpoint"),
            (self.idle_timeout_secs.is_some(), "--idle-timeout-secs"),
            (self.max_attempts.is_some(), "--max-attempts"),
            (!self.read_only_tools.is_empty(), "--read-only-tools"),
            (self.prices.is_some(), "--prices"),
        ];
        if let Some((_, flag)) = local.iter().find(|(given, _)| *given) {
            anyhow::bail!(
                "{flag} configures the correlation, which with --nats-publish happens on the \
                 cluster's collectors: give it to `run --nats` there"
            );
        }
        Ok(Some(Publish {
            deploy: self.nats_deploy.deploy(url)?,
            source_id: self
                .source_id
                .clone()
                .unwrap_or_else(|| super::common::host_name("host")),
            partitions: self.partitions.max(1),
        }))
    }
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
    let publish = match args.publish() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("retryscope: error: {e:#}");
            return Ok(ExitCode::from(2));
        }
    };
    let cfg = merge(&args)?;
    let traces = super::common::trace_config(&cfg)?;
    let runtime = super::common::runtime(2, "retryscope-proxy")?;
    runtime.block_on(async move {
        let telemetry = retryscope::telemetry::init(traces.as_ref())
            .context("starting logging and self-telemetry")?;
        let result = serve(cfg, traces, publish).await;
        match tokio::task::spawn_blocking(move || telemetry.shutdown(Duration::from_secs(10))).await
        {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "operational spans not flushed"),
            Err(e) => tracing::warn!(error = %e, "operational span shutdown panicked"),
        }
        result
    })
}

async fn serve(
    cfg: RunConfig,
    traces: Option<TraceExportConfig>,
    publish: Option<Publish>,
) -> anyhow::Result<ExitCode> {
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
    if let Some(publish) = publish {
        return publish_lines(
            publish, &cfg, rx, ready, shutdown, stop_tx, proxy, proxy_task,
        )
        .await
        .map(|()| ExitCode::SUCCESS);
    }
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

/// `--nats-publish`: the proxy's lines go to JetStream instead of an engine. Ready once the
/// events stream is there; at the signal the proxy stops taking requests first, then what it
/// wrote is published (the feed ends when the proxy is gone), within 10 s.
#[allow(clippy::too_many_arguments)]
async fn publish_lines(
    publish: Publish,
    cfg: &RunConfig,
    rx: std::sync::mpsc::Receiver<retryscope::run::FeedItem>,
    ready: Arc<AtomicBool>,
    shutdown: Arc<AtomicBool>,
    stop_tx: tokio::sync::watch::Sender<bool>,
    proxy: Arc<Proxy>,
    proxy_task: tokio::task::JoinHandle<()>,
) -> anyhow::Result<()> {
    let feed = retryscope::nats::ship::FeedShip {
        source_id: publish.source_id,
        name: "proxy",
        max_line_bytes: cfg.max_line_bytes,
        poll_interval: Duration::from_millis(20),
        by_head: false,
    };
    // The publisher stops on its own flag: the signal stops the proxy, and the publisher
    // drains what the proxy wrote until the feed ends.
    let drained = Arc::new(AtomicBool::new(false));
    let publisher = tokio::spawn({
        let drained = drained.clone();
        async move {
            retryscope::nats::ship::publish_feed(
                &publish.deploy,
                feed,
                publish.partitions,
                Duration::from_secs(300),
                rx,
                ready,
                drained,
            )
            .await
        }
    });
    while !shutdown.load(Ordering::SeqCst) && !publisher.is_finished() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = stop_tx.send(true);
    let _ = proxy_task.await;
    let lost = proxy.feed_lost();
    drop(proxy);
    let stopping = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(10)).await;
        drained.store(true, Ordering::SeqCst);
    });
    let summary = publisher
        .await
        .context("the publisher panicked")?
        .context("publishing the proxy's lines to JetStream")?;
    stopping.abort();
    tracing::info!(
        lines = summary.lines,
        dead_letters = summary.dead_letters,
        lines_lost = lost,
        "stopped"
    );
    Ok(())
}
