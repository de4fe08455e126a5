//! `retryscope run --nats`: the collector glue: the runtime, the metrics server, signals, the
//! findings output, and `retryscope::nats::collect`.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;

use retryscope::config::RunConfig;
use retryscope::nats::collect::{CollectConfig, collect};
use retryscope::sink::findings::FindingsSink;
use retryscope::sink::metrics::Metrics;
use retryscope_core::correlate::CorrelatorConfig;
use retryscope_core::cost::PriceTable;

use super::nats_args::{CollectorArgs, NatsArgs};

/// Collect from the NATS at `url` with `cfg` (the same configuration as `run`, checked by the
/// caller for what a collector cannot honour).
pub fn run(
    cfg: RunConfig,
    url: &str,
    args: &CollectorArgs,
    deploy: &NatsArgs,
) -> anyhow::Result<ExitCode> {
    let nats = deploy.deploy(url)?;
    let instance = args
        .instance
        .clone()
        .unwrap_or_else(|| super::common::host_name("collector"));
    let lease = Duration::from_secs(args.lease_secs.max(1));
    let checkpoint_every = Duration::from_millis(args.checkpoint_ms.max(10));
    let prices = Arc::new(PriceTable::builtin_with(cfg.prices.as_deref())?);
    let correlator = CorrelatorConfig {
        retry_cap: cfg.max_attempts,
        read_only_tools: cfg.read_only_tools.iter().cloned().collect(),
        idle_timeout_ms: Some(
            i64::try_from(cfg.idle_timeout_secs.saturating_mul(1000)).unwrap_or(i64::MAX),
        ),
        max_open_turns: cfg.max_open_turns,
        capture_content: cfg.otlp.capture_content,
        ..CorrelatorConfig::default()
    };
    let collect_cfg = CollectConfig {
        nats,
        instance,
        lease,
        checkpoint_every,
        // Long enough for a takeover's replay: lease + checkpoint interval, with room.
        findings_window: (lease + checkpoint_every) * 4 + Duration::from_secs(60),
        correlator,
        format: cfg.format,
    };
    let traces = super::common::trace_config(&cfg)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(async move {
        let _telemetry = retryscope::telemetry::init(None).context("starting logging")?;
        let served = Arc::new(Metrics::new(cfg.labels.clone()).context("registering metrics")?);
        let listener = tokio::net::TcpListener::bind(&cfg.metrics_addr)
            .await
            .with_context(|| format!("binding the metrics address {}", cfg.metrics_addr))?;
        tracing::info!(addr = %cfg.metrics_addr, "serving /metrics");
        let ready = Arc::new(AtomicBool::new(false));
        let shutdown = Arc::new(AtomicBool::new(false));
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(retryscope::server::serve(
            listener,
            served.clone(),
            ready.clone(),
            async move {
                let _ = stop_rx.await;
            },
        ));
        let flag = shutdown.clone();
        tokio::spawn(async move {
            super::common::wait_for_signal().await;
            tracing::info!("shutting down: checkpointing partitions, freeing leases");
            flag.store(true, Ordering::SeqCst);
        });
        // Each instance writes its own findings; resuming a file means nothing here (the
        // partitions it owned may be elsewhere now), so it appends.
        let mut findings = FindingsSink::open(&cfg.findings_out, None)
            .with_context(|| format!("opening findings output `{}`", cfg.findings_out))?;
        let traces = super::common::start_traces(traces)?;
        let summary = collect(
            collect_cfg,
            prices,
            served,
            &mut findings,
            traces.as_ref(),
            shutdown,
            ready,
        )
        .await?;
        findings.flush().context("flushing findings")?;
        if let Some(t) = traces {
            t.shutdown(Duration::from_secs(10)).await;
        }
        let _ = stop_tx.send(());
        let _ = server.await;
        tracing::info!(
            messages = summary.messages,
            checkpoints = summary.checkpoints,
            "stopped"
        );
        Ok(ExitCode::SUCCESS)
    })
}
