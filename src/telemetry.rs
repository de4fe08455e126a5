//! retryscope's own logs and operational traces (self-telemetry).
//!
//! [`init`] installs the process-wide `tracing` subscriber:
//!
//! * a `fmt` layer writing logs to stderr, filtered by `RUST_LOG` or a default level (h2,
//!   hyper, tonic and tower stay at `warn`);
//! * when a self-export configuration is given, a `tracing-opentelemetry` layer that turns
//!   retryscope's own `tracing` spans (`engine.start`, `checkpoint.write`, ...) into OTLP
//!   spans with wall-clock times.
//!
//! Operational spans never mix with the turn traces of [`crate::sink::traces`]:
//!
//! * they come from their own `SdkTracerProvider`, whose resource `service.name` is the turn
//!   traces' service name plus `-self` (`retryscope-self` by default), so backends list them
//!   as a separate service;
//! * turn spans are built as `SpanData` and handed straight to their exporter, never through a
//!   tracer, so no operational span can become a turn span's parent (or the other way round);
//! * the OpenTelemetry layer only sees spans whose target starts with `retryscope`, whatever
//!   `RUST_LOG` says, so the exporters' own HTTP/2 and gRPC traffic is never traced.
//!
//! The provider uses the SDK's `BatchSpanProcessor`, which exports from its own OS thread.
//! The gRPC exporter works there once built inside the runtime; hyper's HTTP client does not
//! (it needs a tokio reactor), so for HTTP/protobuf each request is spawned onto the runtime
//! that was current during [`init`].

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::filter::FilterExt;
use tracing_subscriber::filter::{EnvFilter, LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, fmt};

pub mod logs;

use crate::otlp_client::{TraceError, TraceExportConfig, build_exporter};

/// Suffix appended to the turn traces' `service.name` for operational spans.
pub const SELF_SERVICE_SUFFIX: &str = "-self";

/// Instrumentation scope of operational spans.
pub const SELF_SCOPE: &str = "retryscope-self";

/// Only spans and events with a target under this prefix are exported as operational spans.
const SELF_TARGET: &str = "retryscope";

/// Crates whose logs stay at `warn` unless `RUST_LOG` says otherwise: the exporters' stacks.
const QUIET_DEPS: &str = "h2=warn,hyper=warn,hyper_util=warn,tonic=warn,tower=warn";

/// What can go wrong setting up or shutting down self-telemetry.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// Self-export was asked for outside a tokio runtime.
    #[error("self-telemetry export needs a tokio runtime: {0}")]
    NoRuntime(#[from] tokio::runtime::TryCurrentError),
    /// The OTLP exporter could not be built.
    #[error(transparent)]
    Exporter(#[from] TraceError),
    /// A global `tracing` subscriber is already installed.
    #[error("cannot install the tracing subscriber: {0}")]
    Init(#[from] tracing_subscriber::util::TryInitError),
    /// Flushing or shutting down the operational span exporter failed.
    #[error("self-telemetry shutdown: {0}")]
    Shutdown(#[from] opentelemetry_sdk::error::OTelSdkError),
}

/// Keeps the operational span pipeline alive; shuts it down (flushing what is queued) on
/// [`TelemetryGuard::shutdown`] or on drop.
#[derive(Debug)]
#[must_use = "dropping the guard shuts operational span export down"]
pub struct TelemetryGuard {
    provider: Option<SdkTracerProvider>,
}

impl TelemetryGuard {
    /// Whether operational spans are exported.
    pub fn is_exporting(&self) -> bool {
        self.provider.is_some()
    }

    /// Flush queued operational spans and stop exporting, within `timeout`.
    ///
    /// This blocks the calling thread while the export runs on the runtime, so the runtime
    /// must still be running and must not be a current-thread runtime driven by this thread:
    /// call it from `tokio::task::spawn_blocking` or from a plain thread.
    pub fn shutdown(mut self, timeout: Duration) -> Result<(), TelemetryError> {
        match self.provider.take() {
            Some(provider) => Ok(provider.shutdown_with_timeout(timeout)?),
            None => Ok(()),
        }
    }
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take() {
            // Best effort: the explicit `shutdown` is the path that reports errors.
            let _ = provider.shutdown_with_timeout(Duration::from_secs(5));
        }
    }
}

/// Colours in logs: only on a terminal, and not when `NO_COLOR` is set to anything non-empty
/// (<https://no-color.org>).
pub fn log_colors(stderr_is_terminal: bool, no_color: Option<&str>) -> bool {
    stderr_is_terminal && no_color.is_none_or(str::is_empty)
}

/// [`init_with_level`] with the default log level `info`.
pub fn init(self_export: Option<&TraceExportConfig>) -> Result<TelemetryGuard, TelemetryError> {
    init_with_level("info", self_export)
}

/// Install the global subscriber: logs to stderr at `default_level` (unless `RUST_LOG` is
/// set) and, when `self_export` has an endpoint, operational spans over OTLP to it.
///
/// With an endpoint this must run inside a tokio runtime, which must outlive the guard's
/// shutdown. Fails if a global subscriber is already installed.
pub fn init_with_level(
    default_level: &str,
    self_export: Option<&TraceExportConfig>,
) -> Result<TelemetryGuard, TelemetryError> {
    let log_filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(format!("{default_level},{QUIET_DEPS}")));
    let ansi = log_colors(
        std::io::IsTerminal::is_terminal(&std::io::stderr()),
        std::env::var("NO_COLOR").ok().as_deref(),
    );
    let log_layer = fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .fmt_fields(logs::fields())
        .event_format(logs::NoteSuppressed(fmt::format().with_ansi(ansi)))
        .with_filter(log_filter.and(logs::LogLimiter::new(logs::LOG_EVERY)));
    let provider = match self_export {
        Some(cfg) => self_provider(cfg)?,
        None => None,
    };
    let span_layer = provider.as_ref().map(|p| {
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer(SELF_SCOPE))
            .with_filter(Targets::new().with_target(SELF_TARGET, LevelFilter::INFO))
    });
    let installed = tracing_subscriber::registry()
        .with(log_layer)
        .with(span_layer)
        .try_init();
    if let Err(e) = installed {
        if let Some(p) = provider {
            let _ = p.shutdown_with_timeout(Duration::from_secs(1));
        }
        return Err(e.into());
    }
    Ok(TelemetryGuard { provider })
}

/// The provider for operational spans; `None` when `cfg` has no endpoint.
fn self_provider(cfg: &TraceExportConfig) -> Result<Option<SdkTracerProvider>, TelemetryError> {
    let Some(target) = cfg.prepare()? else {
        return Ok(None);
    };
    let handle = tokio::runtime::Handle::try_current()?;
    let http_client = OnRuntime {
        handle: handle.clone(),
        inner: target.http_client(cfg.timeout)?,
    };
    let exporter = {
        // tonic's lazy channel spawns its worker onto the current runtime while it is built.
        let _guard = handle.enter();
        build_exporter(cfg, &target, http_client)?
    };
    let resource = Resource::builder()
        .with_service_name(format!("{}{SELF_SERVICE_SUFFIX}", cfg.service_name))
        .build();
    Ok(Some(
        SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .build(),
    ))
}

/// hyper's client run on a tokio runtime, for callers on threads without one (the SDK's
/// batch span processor thread).
#[derive(Debug)]
struct OnRuntime {
    handle: tokio::runtime::Handle,
    inner: crate::otlp_client::OtlpHttpClient,
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for OnRuntime {
    async fn send_bytes(
        &self,
        request: opentelemetry_http::Request<opentelemetry_http::Bytes>,
    ) -> Result<
        opentelemetry_http::Response<opentelemetry_http::Bytes>,
        opentelemetry_http::HttpError,
    > {
        let inner = self.inner.clone();
        self.handle
            .spawn(async move { inner.send_bytes(request).await })
            .await?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_colours_respect_no_color() {
        assert!(log_colors(true, None));
        assert!(log_colors(true, Some("")));
        assert!(!log_colors(true, Some("1")));
        assert!(!log_colors(false, None));
    }

    #[test]
    fn self_export_outside_a_runtime_is_an_error() {
        let cfg = TraceExportConfig {
            endpoint: Some("http://127.0.0.1:9".to_owned()),
            ..TraceExportConfig::default()
        };
        assert!(matches!(
            self_provider(&cfg),
            Err(TelemetryError::NoRuntime(_))
        ));
    }

    #[test]
    fn no_endpoint_means_no_provider() {
        assert!(matches!(
            self_provider(&TraceExportConfig::default()),
            Ok(None)
        ));
    }
}
