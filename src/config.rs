//! The `retryscope run` configuration file (TOML): every field, its default and its unit.
//!
//! Unknown fields are rejected with the field's name, so a typo never silently falls back to a
//! default. Every important setting is also a command-line flag; flags win over the file.
//! `docs/configuration.md` is the reference.
//!
//! The configuration depends on no source and no proxy module: the tailer's `read_from`
//! ([`ReadFrom`]) and the `[proxy]` table ([`proxy`]) are defined here, and the file source
//! and the proxy read them (and re-export them under their old paths).

pub mod proxy;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::sink::metrics::MetricsConfig;
use crate::sink::traces::Protocol;
use proxy::ProxySettings;
use retryscope_core::decode::Format;

/// Where the file tailer starts files that have no checkpoint and exist at the first scan
/// (`read_from`; `source::file` reads it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReadFrom {
    /// From offset 0.
    #[default]
    Beginning,
    /// From the start of the file's last (possibly incomplete) line: lines already complete
    /// are skipped, a line being written is delivered once complete.
    End,
}

impl std::str::FromStr for ReadFrom {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "beginning" => Ok(ReadFrom::Beginning),
            "end" => Ok(ReadFrom::End),
            other => Err(format!("`{other}` is not beginning or end")),
        }
    }
}

/// OTLP trace export (off unless `endpoint` is set here, by flag or by environment).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OtlpSettings {
    /// Collector endpoint, e.g. `http://127.0.0.1:4317` (gRPC) or `http://127.0.0.1:4318` (HTTP).
    pub endpoint: Option<String>,
    /// `grpc` or `http/protobuf`.
    pub protocol: Option<Protocol>,
    /// Extra request headers (e.g. authentication).
    pub headers: std::collections::BTreeMap<String, String>,
    /// Export timeout in seconds.
    pub timeout_secs: Option<u64>,
    /// Export prompt/output text (off: only counts and lengths leave the process).
    pub capture_content: bool,
    /// `service.name` of the exported turn traces.
    pub service_name: Option<String>,
    /// Turns queued for export before new ones are dropped (and counted).
    pub queue_turns: Option<usize>,
    /// PEM file of CA certificates trusted for an `https://` endpoint, besides the system's.
    pub ca_file: Option<std::path::PathBuf>,
    /// PEM client certificate for mTLS (with `client_key`).
    pub client_cert: Option<std::path::PathBuf>,
    /// PEM client private key for mTLS (with `client_cert`).
    pub client_key: Option<std::path::PathBuf>,
}

/// The OTLP receiver (off unless `listen` or `grpc_listen` is set, here or by flag).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OtlpReceiverSettings {
    /// OTLP/HTTP address (`HOST:PORT`; `:PORT` or `PORT` alone mean 127.0.0.1).
    pub listen: Option<String>,
    /// OTLP/gRPC address (same forms).
    pub grpc_listen: Option<String>,
    /// File holding the bearer token clients must send.
    pub token_file: Option<PathBuf>,
    /// TLS certificate chain (PEM) for both listeners.
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM).
    pub tls_key: Option<PathBuf>,
    /// Largest request body in bytes, compressed or decompressed.
    pub max_request_bytes: usize,
    /// Bytes of accepted records waiting for the engine before requests are refused as
    /// retryable (429 / UNAVAILABLE).
    pub queue_bytes: u64,
}

impl Default for OtlpReceiverSettings {
    fn default() -> Self {
        OtlpReceiverSettings {
            listen: None,
            grpc_listen: None,
            token_file: None,
            tls_cert: None,
            tls_key: None,
            max_request_bytes: 16 << 20,
            queue_bytes: 128 << 20,
        }
    }
}

/// A listen address with the host filled in: `4318` and `:4318` mean `127.0.0.1:4318`.
pub fn listen_addr(addr: &str) -> String {
    let a = addr.trim();
    if a.bytes().all(|b| b.is_ascii_digit()) && !a.is_empty() {
        return format!("127.0.0.1:{a}");
    }
    if let Some(port) = a.strip_prefix(':') {
        return format!("127.0.0.1:{port}");
    }
    a.to_owned()
}

/// The built-in demo fleet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DemoSettings {
    /// Synthetic agents.
    pub agents: usize,
    /// Probability an attempt breaks mid-stream and is retried.
    pub retry_rate: f64,
    /// Turns started per second across the fleet.
    pub turns_per_sec: f64,
    /// Seed of the generator (same seed, same fleet).
    pub seed: u64,
}

impl Default for DemoSettings {
    fn default() -> Self {
        DemoSettings {
            agents: 8,
            retry_rate: 0.2,
            turns_per_sec: 5.0,
            seed: 7,
        }
    }
}

/// The whole `run` configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunConfig {
    /// Glob patterns of log files to tail.
    pub include: Vec<String>,
    /// Glob patterns never to read (e.g. rotated copies under copytruncate).
    pub exclude: Vec<String>,
    /// Where files with no checkpoint start; files appearing later are always read whole.
    pub read_from: ReadFrom,
    /// Directory for checkpoints; without it, a restart starts over.
    pub data_dir: Option<PathBuf>,
    /// Address of `/metrics`, `/healthz` and `/-/ready`.
    pub metrics_addr: String,
    /// Close a turn after this many seconds without events (as incomplete if unfinished).
    pub idle_timeout_secs: u64,
    /// Open turns kept in memory; beyond it the least recently active is evicted.
    pub max_open_turns: usize,
    /// More attempts than this in a turn (the first try included) is a `retry_cap_exceeded`
    /// finding. `retry_cap` is an older name for it.
    #[serde(alias = "retry_cap")]
    pub max_attempts: u32,
    /// Tools whose executions are reads, never effects.
    pub read_only_tools: Vec<String>,
    /// Lines longer than this are skipped and counted.
    pub max_line_bytes: usize,
    /// How often files are polled for new lines, in milliseconds.
    pub poll_interval_ms: u64,
    /// How often the checkpoint is written, in seconds.
    pub checkpoint_interval_secs: u64,
    /// Seconds a rotated-away file must stay idle at its end before it is released.
    pub rotate_wait_secs: u64,
    /// Milliseconds a file must stay quiet before its unterminated last line is read (0:
    /// never; such a line waits for its newline).
    pub partial_line_wait_ms: u64,
    /// Findings as JSON lines: `-` for stdout, a file path, or empty to disable.
    pub findings_out: String,
    /// Threads that decode and correlate, each owning the native turns whose id hashes to it
    /// and the other streams whose name does (default 1: all on the engine thread; at most 8).
    pub workers: Option<usize>,
    /// A LiteLLM-format price table replacing the built-in one.
    pub prices: Option<PathBuf>,
    /// Input format of tailed files: `auto` (detected per file from its first line), `native`,
    /// or a provider format (`openai-chat`, `anthropic`, `gemini-cli-telemetry`, ...).
    pub format: Format,
    /// Label value caps.
    pub labels: MetricsConfig,
    /// Trace export.
    pub otlp: OtlpSettings,
    /// The OTLP receiver.
    pub otlp_receiver: OtlpReceiverSettings,
    /// Limits of every listener (`/metrics`, the OTLP receiver, the proxy): connection caps
    /// and timeouts.
    pub connections: crate::listener::Limits,
    /// The demo fleet (`--demo`).
    pub demo: DemoSettings,
    /// `retryscope proxy`: listener, upstreams, injection, recording.
    pub proxy: ProxySettings,
    /// `--reset-checkpoint` (command line only): move an unusable checkpoint and the findings
    /// file aside and start over, instead of refusing to start.
    #[serde(skip)]
    pub reset_checkpoint: bool,
    /// Findings on stdout for a person (`--output human`, or stdout is a terminal): command
    /// line only.
    #[serde(skip)]
    pub live_view: Option<crate::sink::live_view::LiveViewSettings>,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            include: Vec::new(),
            exclude: Vec::new(),
            read_from: ReadFrom::Beginning,
            data_dir: None,
            metrics_addr: "127.0.0.1:9464".to_owned(),
            idle_timeout_secs: 300,
            max_open_turns: 100_000,
            max_attempts: 4,
            read_only_tools: Vec::new(),
            max_line_bytes: 1 << 20,
            poll_interval_ms: 100,
            checkpoint_interval_secs: 1,
            rotate_wait_secs: 5,
            partial_line_wait_ms: 500,
            findings_out: "-".to_owned(),
            workers: None,
            prices: None,
            format: Format::Auto,
            labels: MetricsConfig::default(),
            otlp: OtlpSettings::default(),
            otlp_receiver: OtlpReceiverSettings::default(),
            connections: crate::listener::Limits::default(),
            demo: DemoSettings::default(),
            proxy: ProxySettings::default(),
            reset_checkpoint: false,
            live_view: None,
        }
    }
}

/// `IP:PORT`, `[IPv6]:PORT` or `NAME:PORT` (a name is resolved when binding).
fn is_host_port(addr: &str) -> bool {
    if addr.parse::<std::net::SocketAddr>().is_ok() {
        return true;
    }
    match addr.rsplit_once(':') {
        Some((host, port)) => {
            port.parse::<u16>().is_ok()
                && !host.is_empty()
                && host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
        }
        None => false,
    }
}

/// Why a configuration is unusable.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The TOML is invalid or has unknown fields.
    #[error("invalid config {path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// What is wrong (names the field).
        message: String,
    },
    /// A value is out of range.
    #[error("invalid config: {0}")]
    Invalid(String),
}

impl RunConfig {
    /// Load and validate a TOML file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: name.clone(),
            source,
        })?;
        let cfg: RunConfig = toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: name,
            message: e.to_string(),
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Check ranges and addresses.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !is_host_port(&self.metrics_addr) {
            return Err(ConfigError::Invalid(format!(
                "metrics_addr `{}` is not HOST:PORT (e.g. 127.0.0.1:9464 or localhost:9464)",
                self.metrics_addr
            )));
        }
        let positive = [
            ("idle_timeout_secs", self.idle_timeout_secs),
            ("poll_interval_ms", self.poll_interval_ms),
            ("checkpoint_interval_secs", self.checkpoint_interval_secs),
            ("max_open_turns", self.max_open_turns as u64),
            ("max_line_bytes", self.max_line_bytes as u64),
            ("max_attempts", u64::from(self.max_attempts)),
        ];
        for (name, v) in positive {
            if v == 0 {
                return Err(ConfigError::Invalid(format!("{name} must be positive")));
            }
        }
        if self.workers == Some(0) {
            return Err(ConfigError::Invalid("workers must be positive".to_owned()));
        }
        let r = &self.otlp_receiver;
        for (name, addr) in [
            ("otlp_receiver.listen", &r.listen),
            ("otlp_receiver.grpc_listen", &r.grpc_listen),
        ] {
            if let Some(a) = addr
                && !is_host_port(&listen_addr(a))
            {
                return Err(ConfigError::Invalid(format!(
                    "{name} `{a}` is not HOST:PORT, :PORT or PORT (e.g. 127.0.0.1:4318)"
                )));
            }
        }
        if r.tls_cert.is_some() != r.tls_key.is_some() {
            return Err(ConfigError::Invalid(
                "otlp_receiver: give both tls_cert and tls_key, or neither".to_owned(),
            ));
        }
        if r.max_request_bytes == 0 || r.queue_bytes == 0 {
            return Err(ConfigError::Invalid(
                "otlp_receiver.max_request_bytes and queue_bytes must be positive".to_owned(),
            ));
        }
        if let Some(name) = self.connections.zero_field() {
            return Err(ConfigError::Invalid(format!(
                "connections.{name} must be positive"
            )));
        }
        if !(0.0..=1.0).contains(&self.demo.retry_rate) {
            return Err(ConfigError::Invalid(
                "demo.retry_rate must be between 0 and 1".to_owned(),
            ));
        }
        if !(self.demo.turns_per_sec > 0.0 && self.demo.turns_per_sec.is_finite()) {
            return Err(ConfigError::Invalid(
                "demo.turns_per_sec must be positive".to_owned(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_limits_are_read_and_zero_is_refused() {
        let cfg: RunConfig =
            toml::from_str("[connections]\nmax_connections = 5\nbody_timeout_ms = 250\n").unwrap();
        assert_eq!(cfg.connections.max_connections, 5);
        assert_eq!(cfg.connections.body_timeout_ms, 250);
        assert_eq!(cfg.connections.max_connections_per_peer, 256);
        cfg.validate().unwrap();
        let zero: RunConfig = toml::from_str("[connections]\nidle_timeout_ms = 0\n").unwrap();
        let err = zero.validate().unwrap_err().to_string();
        assert!(err.contains("connections.idle_timeout_ms"), "{err}");
        let typo = toml::from_str::<RunConfig>("[connections]\nmax_conections = 1").unwrap_err();
        assert!(typo.to_string().contains("max_conections"), "{typo}");
    }

    #[test]
    fn empty_file_is_all_defaults() {
        let cfg: RunConfig = toml::from_str("").unwrap();
        assert_eq!(cfg, RunConfig::default());
        assert_eq!(cfg.metrics_addr, "127.0.0.1:9464");
        cfg.validate().unwrap();
    }

    #[test]
    fn full_file_parses() {
        let cfg: RunConfig = toml::from_str(
            r#"
include = ["/var/log/agents/*.jsonl"]
exclude = ["*.gz"]
read_from = "end"
data_dir = "/var/lib/retryscope"
metrics_addr = "127.0.0.1:19464"
idle_timeout_secs = 60
read_only_tools = ["lookup_order"]
[labels]
max_models = 10
[otlp]
endpoint = "http://127.0.0.1:4317"
protocol = "grpc"
headers = { authorization = "Bearer x" }
ca_file = "/etc/retryscope/ca.pem"
[demo]
retry_rate = 0.5
"#,
        )
        .unwrap();
        cfg.validate().unwrap();
        assert_eq!(cfg.read_from, ReadFrom::End);
        assert_eq!(cfg.labels.max_models, 10);
        assert_eq!(cfg.labels.max_tools, 100);
        assert_eq!(cfg.otlp.headers["authorization"], "Bearer x");
        assert_eq!(
            cfg.otlp.ca_file.as_deref(),
            Some(std::path::Path::new("/etc/retryscope/ca.pem"))
        );
    }

    #[test]
    fn unknown_fields_are_rejected_by_name() {
        let err = toml::from_str::<RunConfig>("idle_timeout = 5").unwrap_err();
        assert!(err.to_string().contains("idle_timeout"), "{err}");
        let err = toml::from_str::<RunConfig>("[otlp]\nendpont = \"x\"").unwrap_err();
        assert!(err.to_string().contains("endpont"), "{err}");
    }

    #[test]
    fn bad_values_are_rejected() {
        let mut cfg = RunConfig {
            metrics_addr: "localhost".into(),
            ..RunConfig::default()
        };
        assert!(cfg.validate().is_err());
        cfg.metrics_addr = "localhost:9999".into();
        cfg.validate().unwrap();
        cfg.metrics_addr = "127.0.0.1:1".into();
        cfg.idle_timeout_secs = 0;
        assert!(cfg.validate().is_err());
    }
}
