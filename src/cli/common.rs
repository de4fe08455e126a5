//! What the commands share: their runtime, their traces' export settings and start, the
//! open-file limit, the stop signals, and the host's name.

use std::time::Duration;

use anyhow::Context;

use retryscope::config::RunConfig;
use retryscope::sink::traces::{TraceExportConfig, TraceSink};

/// A multi-thread runtime of `threads` workers named `name`: what every command's network
/// side runs on (the engine itself is a blocking thread beside it).
pub(crate) fn runtime(threads: usize, name: &str) -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name(name)
        .enable_all()
        .build()
        .with_context(|| format!("starting the runtime ({name})"))
}

pub(crate) fn trace_config(cfg: &RunConfig) -> anyhow::Result<Option<TraceExportConfig>> {
    let mut t = TraceExportConfig::from_env()?;
    if let Some(e) = &cfg.otlp.endpoint {
        t.endpoint = Some(e.clone());
    }
    if let Some(p) = cfg.otlp.protocol {
        t.protocol = p;
    }
    for (k, v) in &cfg.otlp.headers {
        t.headers.push((k.clone(), v.clone()));
    }
    if let Some(secs) = cfg.otlp.timeout_secs {
        t.timeout = Duration::from_secs(secs);
    }
    if let Some(name) = &cfg.otlp.service_name {
        t.service_name = name.clone();
    }
    if let Some(q) = cfg.otlp.queue_turns {
        t.queue_capacity = q;
    }
    crate::cli::check_cmd::OtlpTlsArgs::apply_settings(&cfg.otlp, &mut t);
    t.capture_content = cfg.otlp.capture_content;
    Ok(t.endpoint.is_some().then_some(t))
}

/// Start exporting turn traces when `cfg` names an endpoint (inside the runtime).
pub(crate) fn start_traces(cfg: Option<TraceExportConfig>) -> anyhow::Result<Option<TraceSink>> {
    let Some(t) = cfg else {
        return Ok(None);
    };
    tracing::info!(
        endpoint = %t.endpoint.as_deref().unwrap_or(""),
        "exporting turn traces over OTLP"
    );
    Ok(Some(
        TraceSink::start(t).context("starting the OTLP exporter")?,
    ))
}

/// Raise the soft limit on open files to the hard limit: one descriptor per tailed file
/// (5,000 files do not fit the usual soft limit of 1,024). Files that still cannot be opened
/// are counted (`retryscope_file_errors_total{kind="emfile"}`) and retried.
pub(crate) fn raise_fd_limit() {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => tracing::info!(limit, "open file limit"),
        Err(e) => tracing::warn!(error = %e, "cannot raise the open file limit"),
    }
}

pub(crate) async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// This host's name (`/etc/hostname`), or `fallback` when it has none.
pub(crate) fn host_name(fallback: &str) -> String {
    std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| fallback.to_string())
}

/// Bind the OTLP receiver `cfg` configures, feeding `queue`; its requests and its listeners'
/// connections are counted in `metrics` (`internal_events::OtlpReport`, counting gates), and
/// it serves once `ready` is set. `run` and `run --nats` start it this way.
pub(crate) async fn start_otlp_receiver(
    cfg: &RunConfig,
    queue: std::sync::Arc<retryscope::source::otlp::Queue>,
    metrics: std::sync::Arc<retryscope::sink::metrics::Metrics>,
    ready: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> anyhow::Result<retryscope::source::otlp::listen::Running> {
    let events = std::sync::Arc::new(retryscope::internal_events::OtlpReport {
        metrics: metrics.clone(),
    });
    let listeners = retryscope::source::otlp::listen::Listeners::bind(
        &cfg.otlp_receiver,
        &cfg.connections,
        queue,
        events,
    )
    .await?;
    let limits = cfg.connections.clone();
    Ok(listeners.start_when(ready, move |name| {
        retryscope::listener::Gate::new(name, limits.clone(), Some(metrics.clone()))
    }))
}
