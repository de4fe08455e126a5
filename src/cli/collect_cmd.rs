//! `retryscope run --nats`: the collector glue: the runtime, the metrics server, signals, the
//! findings output, and `retryscope::nats::collect`.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;

use retryscope::config::RunConfig;
use retryscope::nats::collect::{CollectConfig, collect};
use retryscope::sink::findings::FindingsSink;
use retryscope::sink::metrics::Metrics;
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
    let correlator = retryscope::engine::correlator_config(&cfg, false);
    let collect_cfg = CollectConfig {
        nats,
        instance,
        lease,
        checkpoint_every,
        // Long enough for a takeover's replay: lease + checkpoint interval, with room.
        findings_window: (lease + checkpoint_every) * 4 + Duration::from_secs(60),
        correlator,
        format: cfg.format,
        // Parts of one turn shipped by two hosts reach JetStream in any order.
        settle: Duration::from_secs(args.settle_secs),
    };
    let traces = super::common::trace_config(&cfg)?;
    let runtime = super::common::runtime(2, "retryscope-collect")?;
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
        let findings = Arc::new(Mutex::new(
            FindingsSink::open(&cfg.findings_out, None)
                .with_context(|| format!("opening findings output `{}`", cfg.findings_out))?,
        ));
        let traces = super::common::start_traces(traces)?.map(Arc::new);
        let receiving = Receiving::start(&cfg, &collect_cfg, ready.clone(), &shutdown).await?;
        let summary = collect(
            collect_cfg,
            prices,
            served,
            receiving.as_ref().map(|r| r.metrics.clone()),
            findings.clone(),
            traces.clone(),
            shutdown,
            ready,
        )
        .await?;
        if let Some(r) = receiving {
            r.stop().await;
        }
        if let Ok(mut findings) = findings.lock() {
            findings.flush().context("flushing findings")?;
        }
        // The partitions' engines are gone: the exporter is this one's alone, to flush.
        if let Some(t) = traces.and_then(|t| Arc::try_unwrap(t).ok()) {
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

/// The OTLP receiver of a collector, publishing what it accepts into the events stream
/// (`retryscope::nats::receive`).
struct Receiving {
    listeners: retryscope::source::otlp::listen::Running,
    /// The receiver's own counters (added to the partitions' in what is served).
    metrics: Arc<Metrics>,
    drain: Arc<AtomicBool>,
    publisher: tokio::task::JoinHandle<Result<u64, retryscope::nats::NatsError>>,
}

impl Receiving {
    /// Bind the receiver when one is configured; it accepts once `ready` is set. Also
    /// `None` when `shutdown` comes while the NATS server is waited for.
    async fn start(
        cfg: &RunConfig,
        collect: &CollectConfig,
        ready: Arc<AtomicBool>,
        shutdown: &AtomicBool,
    ) -> anyhow::Result<Option<Receiving>> {
        let r = &cfg.otlp_receiver;
        if r.listen.is_none() && r.grpc_listen.is_none() {
            return Ok(None);
        }
        let metrics = Arc::new(Metrics::new(cfg.labels.clone()).context("registering metrics")?);
        let queue = Arc::new(retryscope::source::otlp::Queue::new(r.queue_bytes));
        let listeners =
            super::common::start_otlp_receiver(cfg, queue.clone(), metrics.clone(), ready).await?;
        let Some(client) = collect
            .nats
            .connect(
                &format!("retryscope-receiver {}", collect.instance),
                shutdown,
            )
            .await?
        else {
            // Stopped while waiting for the server: nothing was accepted yet.
            listeners.stop().await;
            return Ok(None);
        };
        let drain = Arc::new(AtomicBool::new(false));
        let publisher = tokio::spawn(retryscope::nats::receive::ship_received(
            async_nats::jetstream::new(client),
            queue,
            collect.instance.clone(),
            metrics.clone(),
            drain.clone(),
        ));
        Ok(Some(Receiving {
            listeners,
            metrics,
            drain,
            publisher,
        }))
    }

    /// Refuse new requests (agents retry them elsewhere), then publish what was accepted.
    async fn stop(self) {
        self.listeners.stop().await;
        self.drain.store(true, Ordering::SeqCst);
        match self.publisher.await {
            Ok(Ok(n)) => tracing::info!(records = n, "OTLP receiver: published"),
            Ok(Err(e)) => {
                tracing::error!(error = %e, "OTLP receiver: records accepted and not published")
            }
            Err(e) => tracing::error!(error = %e, "OTLP receiver: the publisher died"),
        }
    }
}
