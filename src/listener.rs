//! The one accept loop every TCP listener of the process uses (`/metrics`, OTLP/HTTP,
//! OTLP/gRPC, the proxy): what a client may hold and for how long.
//!
//! Owns: the connection caps (per listener and per peer address; the excess is closed at once
//! and counted in `retryscope_listener_connections_refused_total{listener,reason}`), accept
//! errors (EMFILE backs off instead of spinning), and, per connection ([`conn`]), the TLS
//! handshake timeout, the first-request (HTTP/2 preface or HTTP/1 header) timeout, the idle
//! timeout between requests and the graceful close on shutdown. The body-read deadline is
//! carried here ([`Limits::body_timeout`]) and applied by the servers that read bodies.

pub mod conn;

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use crate::sink::metrics::{FamilyId, Metrics};

pub use conn::{Conn, ConnState, Tracked, TrackedService};

/// The listeners (a metric label; a closed set).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Name {
    /// `/metrics`, `/healthz`, `/-/ready`.
    Metrics,
    /// `run --otlp-listen`.
    OtlpHttp,
    /// `run --otlp-grpc-listen`.
    OtlpGrpc,
    /// `retryscope proxy`.
    Proxy,
}

impl Name {
    /// Every listener.
    pub const ALL: [Name; 4] = [Name::Metrics, Name::OtlpHttp, Name::OtlpGrpc, Name::Proxy];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Name::Metrics => "metrics",
            Name::OtlpHttp => "otlp_http",
            Name::OtlpGrpc => "otlp_grpc",
            Name::Proxy => "proxy",
        }
    }
}

/// Why a connection was refused or closed by the listener (a metric label; a closed set).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The listener holds `max_connections`.
    ListenerCap,
    /// The peer address holds `max_connections_per_peer`.
    PeerCap,
    /// The TLS handshake did not finish in time.
    HandshakeTimeout,
    /// No complete first request (HTTP/1 headers, HTTP/2 preface) in time.
    HeaderTimeout,
    /// No request and no byte for the idle timeout.
    IdleTimeout,
    /// A request body was not received in time.
    BodyTimeout,
}

impl Reason {
    /// Every reason.
    pub const ALL: [Reason; 6] = [
        Reason::ListenerCap,
        Reason::PeerCap,
        Reason::HandshakeTimeout,
        Reason::HeaderTimeout,
        Reason::IdleTimeout,
        Reason::BodyTimeout,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::ListenerCap => "listener_cap",
            Reason::PeerCap => "peer_cap",
            Reason::HandshakeTimeout => "handshake_timeout",
            Reason::HeaderTimeout => "header_timeout",
            Reason::IdleTimeout => "idle_timeout",
            Reason::BodyTimeout => "body_timeout",
        }
    }

    /// Refused at accept (the other reasons close an accepted connection).
    pub fn at_accept(self) -> bool {
        matches!(self, Reason::ListenerCap | Reason::PeerCap)
    }
}

/// What one client may hold on a listener (`[connections]` in the configuration file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Open connections per listener; more are closed at once.
    pub max_connections: usize,
    /// Open connections from one peer address per listener; more are closed at once.
    pub max_connections_per_peer: usize,
    /// Milliseconds for a TLS handshake.
    pub handshake_timeout_ms: u64,
    /// Milliseconds for a connection's first request to arrive (HTTP/1 headers, or the HTTP/2
    /// preface), and for each later request's headers (HTTP/1).
    pub header_timeout_ms: u64,
    /// Milliseconds a connection may stay open with no request in flight and no byte sent.
    pub idle_timeout_ms: u64,
    /// Milliseconds for a whole request body to arrive (OTLP receiver).
    pub body_timeout_ms: u64,
    /// Concurrent HTTP/2 streams per connection.
    pub max_streams_per_connection: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 1024,
            max_connections_per_peer: 256,
            handshake_timeout_ms: 10_000,
            header_timeout_ms: 10_000,
            idle_timeout_ms: 120_000,
            body_timeout_ms: 30_000,
            max_streams_per_connection: 32,
        }
    }
}

impl Limits {
    /// The TLS handshake timeout.
    pub fn handshake_timeout(&self) -> Duration {
        Duration::from_millis(self.handshake_timeout_ms)
    }
    /// The header timeout.
    pub fn header_timeout(&self) -> Duration {
        Duration::from_millis(self.header_timeout_ms)
    }
    /// The idle timeout.
    pub fn idle_timeout(&self) -> Duration {
        Duration::from_millis(self.idle_timeout_ms)
    }
    /// The body-read deadline.
    pub fn body_timeout(&self) -> Duration {
        Duration::from_millis(self.body_timeout_ms)
    }

    /// The first zero limit's name, if any.
    pub fn zero_field(&self) -> Option<&'static str> {
        [
            ("max_connections", self.max_connections as u64),
            (
                "max_connections_per_peer",
                self.max_connections_per_peer as u64,
            ),
            ("handshake_timeout_ms", self.handshake_timeout_ms),
            ("header_timeout_ms", self.header_timeout_ms),
            ("idle_timeout_ms", self.idle_timeout_ms),
            ("body_timeout_ms", self.body_timeout_ms),
            (
                "max_streams_per_connection",
                u64::from(self.max_streams_per_connection),
            ),
        ]
        .into_iter()
        .find(|(_, v)| *v == 0)
        .map(|(n, _)| n)
    }
}

/// One listener's limits and open connections (shared by its connection tasks).
#[derive(Debug)]
pub struct Gate {
    name: Name,
    limits: Limits,
    metrics: Option<Arc<Metrics>>,
    open: AtomicUsize,
    peers: Mutex<HashMap<IpAddr, usize>>,
}

impl Gate {
    /// A gate for listener `name`, counting into `metrics` when given.
    pub fn new(name: Name, limits: Limits, metrics: Option<Arc<Metrics>>) -> Arc<Self> {
        Arc::new(Gate {
            name,
            limits,
            metrics,
            open: AtomicUsize::new(0),
            peers: Mutex::new(HashMap::new()),
        })
    }

    /// The limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The listener.
    pub fn name(&self) -> Name {
        self.name
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    /// Zero series of every listener's open connections and refusals (every reason).
    pub fn preregister(metrics: &Metrics) {
        let names = Name::ALL.map(Name::as_str);
        let reasons = Reason::ALL.map(Reason::as_str);
        metrics.preregister(FamilyId::ListenerOpen, &[&names]);
        metrics.preregister(FamilyId::ListenerRefused, &[&names, &reasons]);
    }

    /// Count a refused or closed connection.
    pub fn count(&self, reason: Reason) {
        tracing::debug!(
            listener = self.name.as_str(),
            reason = reason.as_str(),
            "connection refused or closed"
        );
        if let Some(m) = &self.metrics {
            m.listener_connection_refused(self.name.as_str(), reason.as_str());
        }
    }

    fn set_gauge(&self) {
        if let Some(m) = &self.metrics {
            m.set_listener_connections(self.name.as_str(), self.open() as u64);
        }
    }

    /// Admit a connection from `peer`, or say which cap it hits.
    fn admit(self: &Arc<Self>, peer: IpAddr) -> Result<Slot, Reason> {
        let mut peers = self.peers.lock().map_err(|_| Reason::ListenerCap)?;
        if self.open.load(Ordering::SeqCst) >= self.limits.max_connections {
            return Err(Reason::ListenerCap);
        }
        let n = peers.entry(peer).or_insert(0);
        if *n >= self.limits.max_connections_per_peer {
            return Err(Reason::PeerCap);
        }
        *n += 1;
        self.open.fetch_add(1, Ordering::SeqCst);
        drop(peers);
        self.set_gauge();
        Ok(Slot {
            gate: self.clone(),
            peer,
        })
    }
}

/// An admitted connection's place under the caps, given back when dropped.
#[derive(Debug)]
pub struct Slot {
    gate: Arc<Gate>,
    peer: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Ok(mut peers) = self.gate.peers.lock()
            && let Some(n) = peers.get_mut(&self.peer)
        {
            *n -= 1;
            if *n == 0 {
                peers.remove(&self.peer);
            }
        }
        self.gate.open.fetch_sub(1, Ordering::SeqCst);
        self.gate.set_gauge();
    }
}

/// Accept on `listener` until `stop` completes: each admitted connection is handed to
/// `handle` in its own task (with its [`Conn`]: the caps' slot and the per-connection
/// timeouts); connections over a cap are closed at once and counted. On stop the loop stops
/// accepting, and waits up to `drain` for the connection tasks (which see `stop` through
/// their own handles) before aborting them.
pub async fn serve<F, Fut>(
    listener: TcpListener,
    gate: Arc<Gate>,
    stop: impl Future<Output = ()>,
    drain: Duration,
    handle: F,
) where
    F: Fn(TcpStream, Conn) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut conns = JoinSet::new();
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            () = &mut stop => break,
            accepted = listener.accept() => accepted,
            // Reap finished connection tasks so the set does not grow without bound.
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
        };
        let (stream, peer) = match accepted {
            Ok(s) => s,
            Err(e) => {
                // Typically EMFILE: back off instead of spinning.
                tracing::warn!(error = %e, listener = gate.name.as_str(), "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        match gate.admit(peer.ip()) {
            Ok(slot) => {
                let _ = stream.set_nodelay(true);
                conns.spawn(handle(stream, Conn::new(gate.clone(), slot)));
            }
            Err(reason) => {
                gate.count(reason);
                // Closed at once.
                drop(stream);
            }
        }
    }
    drop(listener);
    let drained =
        tokio::time::timeout(drain, async { while conns.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        conns.abort_all();
    }
}

#[cfg(test)]
mod tests;
