//! `retryscope proxy`: an HTTP proxy between an agent and its model provider that sees every
//! attempt on the wire, reads what the client did from its next request, and can cut streams
//! where the article says to test (docs/proxy.md).
//!
//! Shape: `forward` (listener, upstream client, the streaming body) hands each request and
//! each stream payload to `attempts` (turns and attempts, native event lines), which uses
//! `history` (the request bodies of the four APIs); its lines, built under the tracker's
//! lock, leave through `feed` (one ordered queue, sent after the lock is released, with
//! back-pressure per request) to a `LineSink`: the engine's feed, the same ingest path,
//! correlator and sinks as `retryscope run`, teed to `record` with `--record`. `frames` finds
//! event boundaries in a body; `inject` decides cuts.

mod attempts;
mod body;
mod client;
mod conn;
mod feed;
mod forward;
mod frames;
mod history;
mod inject;
mod record;
mod redact;
mod route;
mod whole;
mod wire;

pub use crate::config::proxy::{ProxySettings, UpstreamSettings};
pub use attempts::{AttemptRef, End, Tracker, TrackerStats};
pub use body::ObservedBody;
pub use feed::{EngineSink, FEED_BACKLOG_BYTES, LineSink, Offer, REQUEST_BACKLOG_BYTES};
pub use forward::{MAX_FRAME, Proxy, ProxyBody, ProxyNote, now_ms, serve, serve_gated};
pub use frames::{Frame, Framer, Framing};
pub use history::Api;
pub use inject::{How, InjectRule, Match as InjectMatch, Point, Target as InjectTarget};
pub use record::{Recorder, Tee, redact_query};

/// Why the proxy cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// Unusable settings.
    #[error("proxy configuration: {0}")]
    Config(String),
    /// TLS setup.
    #[error("proxy TLS: {0}")]
    Tls(String),
    /// The recording directory.
    #[error("cannot record into {0}: {1}")]
    Record(String, std::io::Error),
    /// The thread that waits for the engine.
    #[error("cannot start the proxy's feed thread: {0}")]
    Feed(std::io::Error),
}
