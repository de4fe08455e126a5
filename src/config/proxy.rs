//! The `[proxy]` table of the configuration file, and the flags that fill it: data the proxy
//! reads (`crate::proxy` re-exports these types), including the words of its injection rules
//! (cut points, ways to cut, which requests), so that the configuration depends on no proxy
//! module.
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

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

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

/// Where to cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Point {
    /// Right after the event that completes a tool call (before the finish).
    AfterToolCall,
    /// After a text fragment that ends inside a word (the fragment is shortened to do so).
    MidWord,
    /// Immediately before the event that carries the finish reason.
    BeforeFinish,
}

impl Point {
    /// Every point.
    pub const ALL: [Point; 3] = [Point::AfterToolCall, Point::MidWord, Point::BeforeFinish];

    /// Its name (a metric label value).
    pub fn as_str(self) -> &'static str {
        match self {
            Point::AfterToolCall => "after-tool-call",
            Point::MidWord => "mid-word",
            Point::BeforeFinish => "before-finish",
        }
    }
}

impl std::str::FromStr for Point {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Point::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| format!("`{s}`: expected after-tool-call, mid-word or before-finish"))
    }
}

/// How to cut.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum How {
    /// TCP RST to the client (HTTP/2: RST_STREAM of that stream only).
    #[default]
    Reset,
    /// The body ends cleanly there, as if the stream were over.
    Eof,
    /// The provider's own in-stream error event, then the body ends.
    Error,
}

impl How {
    /// Every way.
    pub const ALL: [How; 3] = [How::Reset, How::Eof, How::Error];

    /// Its name (a metric label value).
    pub fn as_str(self) -> &'static str {
        match self {
            How::Reset => "reset",
            How::Eof => "eof",
            How::Error => "error",
        }
    }
}

impl std::str::FromStr for How {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        How::ALL
            .into_iter()
            .find(|h| h.as_str() == s)
            .ok_or_else(|| format!("`{s}`: expected reset, eof or error"))
    }
}

/// Which streams of an upstream to cut, where and how (the config file's
/// `[proxy.upstream.inject]`, or the `--inject*` flags).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InjectRule {
    /// Where.
    pub point: Point,
    /// How [default: reset].
    #[serde(default)]
    pub how: How,
    /// Cut the first N streams that reach the point [default: 1 unless `fraction` is set].
    #[serde(default)]
    pub first: Option<u64>,
    /// Or cut this fraction of streams (0..=1), chosen by `seed`.
    #[serde(default)]
    pub fraction: Option<f64>,
    /// Seed of the fraction's choice.
    #[serde(default)]
    pub seed: u64,
    /// Which requests' streams count (and may be cut) [default: `tools`, those that offer
    /// the model tools].
    #[serde(default, rename = "match")]
    pub matches: Match,
}

/// Which requests' streams an injection counts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Match {
    /// Requests that offer the model tools (`tools` non-empty; Chat's legacy `functions`).
    #[default]
    Tools,
    /// Every model request.
    All,
    /// Requests whose path (without the query) matches the glob.
    Path(String),
    /// Requests whose model (Gemini: from the path) matches the glob.
    Model(String),
}

impl FromStr for Match {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("`{s}`: expected tools, all, path=GLOB or model=GLOB");
        Ok(match s {
            "tools" => Match::Tools,
            "all" => Match::All,
            _ => match s.split_once('=') {
                Some(("path", g)) if !g.is_empty() => Match::Path(g.to_owned()),
                Some(("model", g)) if !g.is_empty() => Match::Model(g.to_owned()),
                _ => return Err(bad()),
            },
        })
    }
}

impl TryFrom<String> for Match {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<Match> for String {
    fn from(m: Match) -> String {
        m.to_string()
    }
}

impl fmt::Display for Match {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Match::Tools => f.write_str("tools"),
            Match::All => f.write_str("all"),
            Match::Path(g) => write!(f, "path={g}"),
            Match::Model(g) => write!(f, "model={g}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{How, Point};
    use crate::config::RunConfig;

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
