//! The standard `OTEL_EXPORTER_OTLP_*` variables (the `..._TRACES_...` variants win over the
//! generic ones) read into a [`TraceExportConfig`], and the OTLP headers format they use.

use std::time::Duration;

use super::{Protocol, TraceError, TraceExportConfig};

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
