//! How retryscope talks OTLP as a client: the endpoint, protocol, headers and timeout
//! (from flags, the config file and the standard `OTEL_EXPORTER_OTLP_*` variables), and the
//! exporter built from them. Shared by the turn traces ([`crate::sink::traces`]) and
//! retryscope's own operational spans ([`crate::telemetry`]), which must not depend on each
//! other. The endpoint's rules are [`endpoint`]'s, TLS is [`tls`]'s.

pub mod endpoint;
pub mod tls;

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use opentelemetry_otlp::{WithExportConfig, WithHttpConfig, WithTonicConfig};

pub use endpoint::Endpoint;
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

/// `OTEL_EXPORTER_OTLP_ENDPOINT`: base URL for every signal.
pub const ENV_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`: full URL for traces, used as given.
pub const ENV_TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
/// `OTEL_EXPORTER_OTLP_HEADERS`: `k=v,k2=v2`, URL-encoded.
pub const ENV_HEADERS: &str = "OTEL_EXPORTER_OTLP_HEADERS";
/// `OTEL_EXPORTER_OTLP_TRACES_HEADERS`: as above, for traces only (wins).
pub const ENV_TRACES_HEADERS: &str = "OTEL_EXPORTER_OTLP_TRACES_HEADERS";
/// `OTEL_EXPORTER_OTLP_PROTOCOL`: `grpc` or `http/protobuf`.
pub const ENV_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";
/// `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`: as above, for traces only (wins).
pub const ENV_TRACES_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL";
/// `OTEL_EXPORTER_OTLP_TIMEOUT`: milliseconds.
pub const ENV_TIMEOUT: &str = "OTEL_EXPORTER_OTLP_TIMEOUT";
/// `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`: milliseconds, for traces only (wins).
pub const ENV_TRACES_TIMEOUT: &str = "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT";
/// `OTEL_EXPORTER_OTLP_CERTIFICATE`: PEM file of CA certificates to trust.
pub const ENV_CERTIFICATE: &str = "OTEL_EXPORTER_OTLP_CERTIFICATE";
/// `OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE`: as above, for traces only (wins).
pub const ENV_TRACES_CERTIFICATE: &str = "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE";
/// `OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE`: PEM client certificate for mTLS.
pub const ENV_CLIENT_CERTIFICATE: &str = "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE";
/// `OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE`: as above, for traces only (wins).
pub const ENV_TRACES_CLIENT_CERTIFICATE: &str = "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE";
/// `OTEL_EXPORTER_OTLP_CLIENT_KEY`: PEM client private key for mTLS.
pub const ENV_CLIENT_KEY: &str = "OTEL_EXPORTER_OTLP_CLIENT_KEY";
/// `OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY`: as above, for traces only (wins).
pub const ENV_TRACES_CLIENT_KEY: &str = "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY";

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
    /// Defaults overridden by the standard `OTEL_EXPORTER_OTLP_*` variables (the
    /// `..._TRACES_...` variants win over the generic ones).
    pub fn from_env() -> Result<Self, TraceError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// [`TraceExportConfig::from_env`] with variables read through `lookup`.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, TraceError> {
        let get = |specific: &'static str, generic: &'static str| {
            let non_empty = |k: &'static str| {
                lookup(k)
                    .filter(|v| !v.trim().is_empty())
                    .map(|v| (k, v.trim().to_owned()))
            };
            non_empty(specific).or_else(|| non_empty(generic))
        };
        let mut cfg = TraceExportConfig::default();
        if let Some((var, endpoint)) = get(ENV_TRACES_ENDPOINT, ENV_ENDPOINT) {
            if var == ENV_TRACES_ENDPOINT {
                cfg.env_traces_endpoint = Some(endpoint.clone());
            } else {
                cfg.env_endpoint = Some(endpoint.clone());
            }
            cfg.endpoint = Some(endpoint);
        }
        if let Some((var, value)) = get(ENV_TRACES_PROTOCOL, ENV_PROTOCOL) {
            cfg.protocol = Protocol::parse(&value).ok_or_else(|| TraceError::Env {
                var,
                message: format!("`{value}` (expected grpc or http/protobuf)"),
            })?;
        }
        if let Some((var, value)) = get(ENV_TRACES_HEADERS, ENV_HEADERS) {
            cfg.headers =
                parse_headers(&value).map_err(|message| TraceError::Env { var, message })?;
        }
        if let Some((var, value)) = get(ENV_TRACES_TIMEOUT, ENV_TIMEOUT) {
            let ms: u64 = value.parse().map_err(|_| TraceError::Env {
                var,
                message: format!("`{value}` is not a number of milliseconds"),
            })?;
            cfg.timeout = Duration::from_millis(ms);
        }
        let path = |(_, v): (&str, String)| std::path::PathBuf::from(v);
        cfg.tls.ca_file = get(ENV_TRACES_CERTIFICATE, ENV_CERTIFICATE).map(path);
        cfg.tls.client_cert = get(ENV_TRACES_CLIENT_CERTIFICATE, ENV_CLIENT_CERTIFICATE).map(path);
        cfg.tls.client_key = get(ENV_TRACES_CLIENT_KEY, ENV_CLIENT_KEY).map(path);
        Ok(cfg)
    }

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

/// Parse `k=v,k2=v2` with URL-encoded keys and values (the OTLP headers format).
pub fn parse_headers(s: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (k, v) = item
            .split_once('=')
            .ok_or_else(|| format!("header `{item}` has no `=`"))?;
        let key = percent_decode(k.trim())?;
        if key.is_empty() {
            return Err(format!("header `{item}` has an empty name"));
        }
        out.push((key, percent_decode(v.trim())?));
    }
    Ok(out)
}

fn percent_decode(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("bad percent escape in `{s}`"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("`{s}` does not decode to UTF-8"))
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
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> Result<TraceExportConfig, TraceError> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        TraceExportConfig::from_lookup(|k| vars.get(k).cloned())
    }

    #[test]
    fn off_without_an_endpoint() {
        let cfg = env(&[]).unwrap();
        assert!(!cfg.is_enabled());
        assert_eq!(cfg.traces_endpoint(), None);
        assert_eq!(cfg.protocol, Protocol::HttpProtobuf);
        assert_eq!(cfg.timeout, Duration::from_secs(10));
        assert_eq!(cfg.service_name, "retryscope");
        assert!(!cfg.capture_content);
        assert!(!env(&[(ENV_ENDPOINT, "  ")]).unwrap().is_enabled());
    }

    #[test]
    fn http_endpoint_rules() {
        // The generic variable is a base URL: the signal path is appended.
        let cfg = env(&[(ENV_ENDPOINT, "http://otel:4318/")]).unwrap();
        assert_eq!(
            cfg.traces_endpoint().as_deref(),
            Some("http://otel:4318/v1/traces")
        );
        let cfg = env(&[(ENV_ENDPOINT, "http://gw/otlp")]).unwrap();
        assert_eq!(
            cfg.traces_endpoint().as_deref(),
            Some("http://gw/otlp/v1/traces")
        );
        // The traces variable is a full URL and wins over the generic one.
        let mut cfg = env(&[
            (ENV_ENDPOINT, "http://otel:4318"),
            (ENV_TRACES_ENDPOINT, "http://gw/custom/traces"),
        ])
        .unwrap();
        assert_eq!(
            cfg.traces_endpoint().as_deref(),
            Some("http://gw/custom/traces")
        );
        // An explicit endpoint overrides the environment and gets the rule for given URLs.
        cfg.endpoint = Some("http://other:4318".to_owned());
        assert_eq!(
            cfg.traces_endpoint().as_deref(),
            Some("http://other:4318/v1/traces")
        );
        cfg.endpoint = Some("http://other:4318/v1/traces".to_owned());
        assert_eq!(
            cfg.traces_endpoint().as_deref(),
            Some("http://other:4318/v1/traces")
        );
    }

    #[test]
    fn grpc_endpoint_is_used_as_given() {
        let cfg = env(&[(ENV_ENDPOINT, "http://otel:4317"), (ENV_PROTOCOL, "grpc")]).unwrap();
        assert_eq!(cfg.protocol, Protocol::Grpc);
        assert_eq!(cfg.traces_endpoint().as_deref(), Some("http://otel:4317"));
        // The traces-specific protocol wins.
        let cfg = env(&[
            (ENV_PROTOCOL, "grpc"),
            (ENV_TRACES_PROTOCOL, "http/protobuf"),
        ])
        .unwrap();
        assert_eq!(cfg.protocol, Protocol::HttpProtobuf);
    }

    #[test]
    fn bad_values_name_their_variable() {
        let err = env(&[(ENV_PROTOCOL, "http/json")]).unwrap_err().to_string();
        assert!(err.contains(ENV_PROTOCOL), "{err}");
        let err = env(&[(ENV_TRACES_TIMEOUT, "5s")]).unwrap_err().to_string();
        assert!(err.contains(ENV_TRACES_TIMEOUT), "{err}");
        let err = env(&[(ENV_HEADERS, "novalue")]).unwrap_err().to_string();
        assert!(err.contains(ENV_HEADERS), "{err}");
    }

    #[test]
    fn headers_and_timeout_from_env() {
        let cfg = env(&[
            (
                ENV_HEADERS,
                "Authorization=Bearer%20tok%3D%3D, x-team = a%2Cb ,",
            ),
            (ENV_TIMEOUT, "2500"),
        ])
        .unwrap();
        assert_eq!(
            cfg.headers,
            vec![
                ("Authorization".to_owned(), "Bearer tok==".to_owned()),
                ("x-team".to_owned(), "a,b".to_owned()),
            ]
        );
        assert_eq!(cfg.timeout, Duration::from_millis(2500));
        let cfg = env(&[(ENV_HEADERS, "a=1"), (ENV_TRACES_HEADERS, "b=2")]).unwrap();
        assert_eq!(cfg.headers, vec![("b".to_owned(), "2".to_owned())]);
        assert!(parse_headers("a=%zz").is_err());
        assert!(parse_headers("=v").is_err());
        // Debug output shows header names, never values (they are usually secrets).
        let shown = format!("{cfg:?}");
        assert!(
            shown.contains("\"b\"") && !shown.contains("\"2\""),
            "{shown}"
        );
    }

    #[test]
    fn tls_files_from_env_traces_variables_win() {
        let cfg = env(&[
            (ENV_CERTIFICATE, "/etc/ca.pem"),
            (ENV_TRACES_CERTIFICATE, "/etc/traces-ca.pem"),
            (ENV_CLIENT_CERTIFICATE, "/etc/c.pem"),
            (ENV_CLIENT_KEY, "/etc/c.key"),
        ])
        .unwrap();
        assert_eq!(
            cfg.tls.ca_file.as_deref(),
            Some(std::path::Path::new("/etc/traces-ca.pem"))
        );
        assert_eq!(
            cfg.tls.client_cert.as_deref(),
            Some(std::path::Path::new("/etc/c.pem"))
        );
        assert_eq!(
            cfg.tls.client_key.as_deref(),
            Some(std::path::Path::new("/etc/c.key"))
        );
    }

    #[test]
    fn a_bad_endpoint_names_where_it_came_from() {
        let mut cfg = env(&[(ENV_ENDPOINT, "ftp://otel:21")]).unwrap();
        let err = cfg.prepare().unwrap_err().to_string();
        assert!(err.contains(ENV_ENDPOINT) && err.contains("ftp"), "{err}");
        let traces = env(&[(ENV_TRACES_ENDPOINT, "grpc://otel:4317")]).unwrap();
        let err = traces.prepare().unwrap_err().to_string();
        assert!(err.contains(ENV_TRACES_ENDPOINT), "{err}");
        cfg.endpoint = Some("gopher://x".to_owned());
        let err = cfg.prepare().unwrap_err().to_string();
        assert!(err.contains("--otlp-endpoint"), "{err}");
        // Scheme-less is http://, for both protocols.
        cfg.endpoint = Some("otel:4317".to_owned());
        cfg.protocol = Protocol::Grpc;
        let target = cfg.prepare().unwrap().unwrap();
        assert_eq!(target.endpoint.url, "http://otel:4317");
        assert!(target.tls.is_none());
        cfg.protocol = Protocol::HttpProtobuf;
        assert_eq!(
            cfg.traces_endpoint().as_deref(),
            Some("http://otel:4317/v1/traces")
        );
    }

    #[test]
    fn certificate_files_need_an_https_endpoint() {
        let mut cfg = env(&[(ENV_ENDPOINT, "http://otel:4318")]).unwrap();
        cfg.tls.ca_file = Some("/nonexistent/ca.pem".into());
        let err = cfg.prepare().unwrap_err().to_string();
        assert!(err.contains("not https://"), "{err}");
        // With https:// the file is read at startup, and a missing one is named.
        cfg.endpoint = Some("https://otel:4318".to_owned());
        let err = cfg.prepare().unwrap_err().to_string();
        assert!(
            err.contains("/nonexistent/ca.pem") && err.contains("--otlp-ca-file"),
            "{err}"
        );
    }
}
