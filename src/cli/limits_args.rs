//! The listener limit flags shared by `run` and `proxy` (over the config file's
//! `[connections]` table; docs/reliability.md lists each limit).

use retryscope::listener::Limits;

/// Connection caps and timeouts of every listener.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct LimitArgs {
    /// Open connections per listener; more are closed at once [default: 1024].
    #[arg(long, value_name = "N")]
    max_connections: Option<usize>,
    /// Open connections from one peer address per listener [default: 256].
    #[arg(long, value_name = "N")]
    max_connections_per_peer: Option<usize>,
    /// Milliseconds for a client's TLS handshake [default: 10000].
    #[arg(long, value_name = "MS")]
    handshake_timeout_ms: Option<u64>,
    /// Milliseconds for a connection's first request (HTTP/1 headers, HTTP/2 preface) and
    /// each HTTP/1 request's headers [default: 10000].
    #[arg(long, value_name = "MS")]
    header_timeout_ms: Option<u64>,
    /// Milliseconds a connection may idle with no request in flight [default: 120000].
    #[arg(long, value_name = "MS")]
    conn_idle_timeout_ms: Option<u64>,
    /// Milliseconds for a whole OTLP request body to arrive [default: 30000].
    #[arg(long, value_name = "MS")]
    body_timeout_ms: Option<u64>,
    /// Concurrent HTTP/2 streams per connection [default: 32].
    #[arg(long, value_name = "N")]
    max_streams_per_connection: Option<u32>,
}

impl LimitArgs {
    /// Flags over the config file's values.
    pub(crate) fn apply_to(&self, l: &mut Limits) {
        let set = |to: &mut u64, from: Option<u64>| {
            if let Some(v) = from {
                *to = v;
            }
        };
        if let Some(v) = self.max_connections {
            l.max_connections = v;
        }
        if let Some(v) = self.max_connections_per_peer {
            l.max_connections_per_peer = v;
        }
        set(&mut l.handshake_timeout_ms, self.handshake_timeout_ms);
        set(&mut l.header_timeout_ms, self.header_timeout_ms);
        set(&mut l.idle_timeout_ms, self.conn_idle_timeout_ms);
        set(&mut l.body_timeout_ms, self.body_timeout_ms);
        if let Some(v) = self.max_streams_per_connection {
            l.max_streams_per_connection = v;
        }
    }
}
