//! The `[proxy]` table of the configuration file, and the flags that fill it.
//!
//! ```toml
//! [proxy]
//! listen = "127.0.0.1:8788"
//! record = "proxy-recording"          # optional: --record DIR
//! ca_file = "/etc/ssl/extra-ca.pem"   # optional: another root for upstream TLS
//! upstream_idle_secs = 30             # idle upstream connections are closed after this
//!
//! [[proxy.upstream]]
//! prefix = "/anthropic"               # requests under this path go here, prefix stripped
//! url = "https://api.anthropic.com"
//! inject = { point = "after-tool-call", how = "reset", first = 1 }
//!
//! [[proxy.upstream]]
//! prefix = "/"                        # everything else
//! url = "https://api.openai.com"
//! ```

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::inject::InjectRule;

/// One upstream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamSettings {
    /// Requests whose path starts with this go to this upstream [default: `/`, everything];
    /// the longest matching prefix wins.
    #[serde(default)]
    pub prefix: String,
    /// Base URL: `https://api.anthropic.com`, `http://127.0.0.1:9000/v1beta` (its path is
    /// put before the request's).
    pub url: String,
    /// Remove the prefix from the path before forwarding [default: true unless it is `/`].
    #[serde(default)]
    pub strip_prefix: Option<bool>,
    /// Cut this upstream's streams on purpose.
    #[serde(default)]
    pub inject: Option<InjectRule>,
}

/// `retryscope proxy`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProxySettings {
    /// Address to listen on.
    pub listen: String,
    /// The upstreams.
    pub upstream: Vec<UpstreamSettings>,
    /// Injection for upstreams without their own `inject` (the `--inject*` flags).
    pub inject: Option<InjectRule>,
    /// Save each attempt's request and stream here (`--record DIR`).
    pub record: Option<PathBuf>,
    /// Extra root certificates (PEM) trusted for upstream TLS, besides the system's.
    pub ca_file: Option<PathBuf>,
    /// Seconds an idle upstream connection is kept for reuse before it is closed.
    pub upstream_idle_secs: u64,
    /// Largest request body forwarded, in bytes.
    pub max_request_bytes: usize,
}

impl Default for ProxySettings {
    fn default() -> Self {
        ProxySettings {
            listen: "127.0.0.1:8788".to_owned(),
            upstream: Vec::new(),
            inject: None,
            record: None,
            ca_file: None,
            upstream_idle_secs: 30,
            max_request_bytes: 64 << 20,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::RunConfig;
    use crate::proxy::{How, Point};

    #[test]
    fn proxy_table_with_several_upstreams_and_injection() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("proxy.toml");
        std::fs::write(
            &path,
            r#"
findings_out = ""
[proxy]
listen = "127.0.0.1:9999"
[[proxy.upstream]]
prefix = "/anthropic"
url = "https://api.anthropic.com"
inject = { point = "mid-word", how = "error", first = 2 }
[[proxy.upstream]]
url = "https://api.openai.com"
"#,
        )
        .expect("write");
        let cfg = RunConfig::load(&path).expect("load");
        assert_eq!(cfg.proxy.listen, "127.0.0.1:9999");
        assert_eq!(cfg.proxy.upstream.len(), 2);
        let rule = cfg.proxy.upstream[0].inject.as_ref().expect("inject");
        assert_eq!(
            (rule.point, rule.how, rule.first),
            (Point::MidWord, How::Error, Some(2))
        );
        assert_eq!(cfg.proxy.upstream[1].prefix, "");
        std::fs::write(&path, "[proxy]\nlisen = \"x\"\n").expect("write");
        assert!(RunConfig::load(&path).is_err(), "a typo is refused");
        std::fs::write(
            &path,
            "[[proxy.upstream]]\nurl = \"http://h\"\ninject = { point = \"mid-sentence\" }\n",
        )
        .expect("write");
        assert!(
            RunConfig::load(&path).is_err(),
            "an unknown point is refused"
        );
    }
}
