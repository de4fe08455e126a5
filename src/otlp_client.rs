//! How retryscope talks OTLP as a client: the endpoint, protocol, headers and timeout
//! (from flags, the config file and the standard `OTEL_EXPORTER_OTLP_*` variables), and the
//! exporter built from them. Shared by the turn traces ([`crate::sink::traces`]) and
//! retryscope's own operational spans ([`crate::telemetry`]), which must not depend on each
//! other. The endpoint's rules are [`endpoint`]'s, TLS is [`tls`]'s, the environment
//! variables `env`'s.

pub mod endpoint;
mod env;
pub mod tls;

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use opentelemetry_otlp::{WithExportConfig, WithHttpConfig, WithTonicConfig};

pub use endpoint::Endpoint;
pub use env::{
    ENV_CERTIFICATE, ENV_CLIENT_CERTIFICATE, ENV_CLIENT_KEY, ENV_ENDPOINT, ENV_HEADERS,
    ENV_PROTOCOL, ENV_TIMEOUT, ENV_TRACES_CERTIFICATE, ENV_TRACES_CLIENT_CERTIFICATE,
    ENV_TRACES_CLIENT_KEY, ENV_TRACES_ENDPOINT, ENV_TRACES_HEADERS, ENV_TRACES_PROTOCOL,
    ENV_TRACES_TIMEOUT, parse_headers,
};
pub use tls::{LoadedTls, OtlpHttpClient, TlsFiles, http_client};

/// What can go wrong setting up trace export.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// An `OTEL_EXPORTER_OTLP_*` variable has a value we cannot use.
    #[error("invalid {var}: {message}")]
    Env {
        /// The variable.
        var: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// The configuration is unusable.
    #[error("invalid trace export config: {0}")]
    Config(String),
    /// The endpoint is unusable.
    #[error("invalid OTLP endpoint `{endpoint}` (from {setting}): {message}")]
    Endpoint {
        /// Where it came from (flag, config key or variable).
        setting: String,
        /// The endpoint as given.
        endpoint: String,
        /// What is wrong with it.
        message: String,
    },
    /// TLS cannot be set up.
    #[error("OTLP export TLS ({setting}): {message}")]
    Tls {
        /// The setting at fault.
        setting: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The OTLP exporter could not be built.
    #[error("cannot build the OTLP exporter: {0}")]
    Build(#[from] opentelemetry_otlp::ExporterBuildError),
    /// [`TraceSink::start`](crate::sink::traces::TraceSink::start) was called outside a tokio runtime.
    #[error("trace export needs a tokio runtime: {0}")]
    NoRuntime(#[from] tokio::runtime::TryCurrentError),
}

/// The OTLP transport.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP/gRPC (tonic), usually port 4317.
    Grpc,
    /// OTLP/HTTP with protobuf bodies, usually port 4318. The OTel default.
    #[default]
    HttpProtobuf,
}

impl serde::Serialize for Protocol {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for Protocol {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Protocol::parse(&name).ok_or_else(|| {
            serde::de::Error::custom(format!("`{name}` is not grpc or http/protobuf"))
        })
    }
}

impl Protocol {
    /// The `OTEL_EXPORTER_OTLP_PROTOCOL` spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Grpc => "grpc",
            Protocol::HttpProtobuf => "http/protobuf",
        }
    }

    /// Parse the `OTEL_EXPORTER_OTLP_PROTOCOL` spelling.
    pub fn parse(s: &str) -> Option<Protocol> {
        match s.trim() {
            "grpc" => Some(Protocol::Grpc),
            "http/protobuf" => Some(Protocol::HttpProtobuf),
            _ => None,
        }
    }
}

/// Where and how to export turn traces. Export is off unless `endpoint` is set.
///
/// Build it with [`TraceExportConfig::from_env`] (or [`Default`]) and then assign explicit
/// values (flags, config file) to its fields: they override the environment.
#[derive(Clone, PartialEq, Eq)]
pub struct TraceExportConfig {
    /// OTLP endpoint. Without a scheme it is `http://`. For HTTP, `/v1/traces` is appended
    /// unless it already ends with it (or it came from `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
    /// which is used as given).
    pub endpoint: Option<String>,
    /// Transport.
    pub protocol: Protocol,
    /// Extra request headers (gRPC metadata), e.g. authentication.
    pub headers: Vec<(String, String)>,
    /// Deadline of one export, retries included.
    pub timeout: Duration,
    /// Turns waiting for export beyond which new turns are dropped.
    pub queue_capacity: usize,
    /// Spans per export request.
    pub max_batch: usize,
    /// Resource `service.name` of the exported spans.
    pub service_name: String,
    /// Export attempt text (see [`SpanOptions::capture_content`](crate::sink::traces::SpanOptions::capture_content)).
    pub capture_content: bool,
    /// Certificate files for `https://` endpoints (CA to trust, client identity).
    pub tls: TlsFiles,
    /// Trust the system's CA certificates too (on by default; tests turn it off).
    pub system_roots: bool,
    /// The value of `OTEL_EXPORTER_OTLP_ENDPOINT` seen by `from_env`, to name the setting
    /// of a bad endpoint.
    pub(crate) env_endpoint: Option<String>,
    /// The value of `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` seen by `from_env`: an endpoint
    /// equal to it is a full URL and used as given.
    pub(crate) env_traces_endpoint: Option<String>,
}

impl fmt::Debug for TraceExportConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Header values are usually credentials: show only their names.
        let header_names: Vec<&str> = self.headers.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("TraceExportConfig")
            .field("endpoint", &self.endpoint)
            .field("protocol", &self.protocol)
            .field("headers", &header_names)
            .field("timeout", &self.timeout)
            .field("queue_capacity", &self.queue_capacity)
            .field("max_batch", &self.max_batch)
            .field("service_name", &self.service_name)
            .field("capture_content", &self.capture_content)
            .field("tls", &self.tls)
            .field("system_roots", &self.system_roots)
            .finish()
    }
}

impl Default for TraceExportConfig {
    fn default() -> Self {
        TraceExportConfig {
            endpoint: None,
            protocol: Protocol::default(),
            headers: Vec::new(),
            timeout: Duration::from_secs(10),
            queue_capacity: 2048,
            max_batch: 512,
            service_name: "retryscope".to_owned(),
            capture_content: false,
            tls: TlsFiles::default(),
            system_roots: true,
            env_endpoint: None,
            env_traces_endpoint: None,
        }
    }
}

impl TraceExportConfig {
    /// Whether an endpoint is configured (export is on).
    pub fn is_enabled(&self) -> bool {
        self.endpoint
            .as_deref()
            .is_some_and(|e| !e.trim().is_empty())
    }

    /// The URL the exporter sends to, after the scheme rule (none means `http://`) and the
    /// HTTP `/v1/traces` rule; `None` when off. Not validated: see [`Self::prepare`].
    pub fn traces_endpoint(&self) -> Option<String> {
        let given = self.endpoint.as_deref()?.trim();
        if given.is_empty() {
            return None;
        }
        let endpoint = endpoint::with_scheme(given);
        Some(match self.protocol {
            Protocol::Grpc => endpoint,
            Protocol::HttpProtobuf
                if self.env_traces_endpoint.as_deref() == Some(given)
                    || endpoint.ends_with("/v1/traces") =>
            {
                endpoint
            }
            Protocol::HttpProtobuf => format!("{}/v1/traces", endpoint.trim_end_matches('/')),
        })
    }

    /// Where the endpoint was set, for error messages.
    pub fn endpoint_setting(&self) -> &'static str {
        let given = self.endpoint.as_deref().map(str::trim);
        if given.is_some() && given == self.env_traces_endpoint.as_deref() {
            ENV_TRACES_ENDPOINT
        } else if given.is_some() && given == self.env_endpoint.as_deref() {
            ENV_ENDPOINT
        } else {
            "--otlp-endpoint / [otlp] endpoint"
        }
    }

    /// Everything export needs that can fail, checked at startup: the endpoint (a URL with
    /// an `http` or `https` scheme and a host) and, for `https://`, the certificates. `None`
    /// when export is off.
    pub fn prepare(&self) -> Result<Option<Prepared>, TraceError> {
        let Some(url) = self.traces_endpoint() else {
            return Ok(None);
        };
        let setting = self.endpoint_setting();
        let endpoint = endpoint::parse(&url, setting).map_err(|e| match e {
            // Name the endpoint as the user wrote it, not after the `/v1/traces` rule.
            TraceError::Endpoint {
                setting, message, ..
            } => TraceError::Endpoint {
                setting,
                endpoint: self.endpoint.clone().unwrap_or_default(),
                message,
            },
            other => other,
        })?;
        let tls = if endpoint.https {
            let loaded = LoadedTls::load(&self.tls, self.system_roots)?;
            loaded.check_usable()?;
            Some(loaded)
        } else if self.tls.is_set() {
            return Err(TraceError::Endpoint {
                setting: setting.to_owned(),
                endpoint: self.endpoint.clone().unwrap_or_default(),
                message: "certificate files are set but the endpoint is not https://".to_owned(),
            });
        } else {
            None
        };
        Ok(Some(Prepared { endpoint, tls }))
    }
}

/// A checked export target: from [`TraceExportConfig::prepare`].
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The URL, with its scheme.
    pub endpoint: Endpoint,
    /// The certificates, for `https://`.
    pub tls: Option<LoadedTls>,
}

impl Prepared {
    /// The OTLP/HTTP client for this target.
    pub fn http_client(&self, timeout: Duration) -> Result<OtlpHttpClient, TraceError> {
        http_client(self.tls.as_ref(), timeout)
    }
}

/// The OTLP exporter for `cfg`, sending to `target` (from [`TraceExportConfig::prepare`]);
/// `http_client` (from [`Prepared::http_client`]) is used for HTTP/protobuf only. The gRPC
/// exporter must be built inside a tokio runtime context.
pub fn build_exporter(
    cfg: &TraceExportConfig,
    target: &Prepared,
    http_client: impl opentelemetry_http::HttpClient + 'static,
) -> Result<opentelemetry_otlp::SpanExporter, TraceError> {
    let endpoint = target.endpoint.url.as_str();
    // Validate every header up front: the HTTP exporter would silently skip a bad one.
    let mut headers = http::HeaderMap::new();
    for (k, v) in &cfg.headers {
        let key = http::HeaderName::from_bytes(k.as_bytes())
            .map_err(|_| TraceError::Config(format!("invalid header name `{k}`")))?;
        let value = http::HeaderValue::from_str(v)
            .map_err(|_| TraceError::Config(format!("invalid value for header `{k}`")))?;
        headers.append(key, value);
    }
    let exporter = match cfg.protocol {
        Protocol::Grpc => {
            let metadata =
                opentelemetry_otlp::tonic_types::metadata::MetadataMap::from_headers(headers);
            let mut builder = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(endpoint)
                .with_timeout(cfg.timeout)
                .with_metadata(metadata);
            if let Some(tls) = &target.tls {
                builder = builder.with_tls_config(tls.tonic_config());
            }
            builder.build()?
        }
        Protocol::HttpProtobuf => {
            let headers: HashMap<String, String> = cfg.headers.iter().cloned().collect();
            opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_endpoint(endpoint)
                .with_timeout(cfg.timeout)
                .with_headers(headers)
                .with_http_client(http_client)
                .build()?
        }
    };
    Ok(exporter)
}

#[cfg(test)]
mod tests;
