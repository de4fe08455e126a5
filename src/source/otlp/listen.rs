//! Starting and stopping the OTLP listeners: bind both addresses at start-up (so a bad or busy
//! address stops `run` at once), load the token and TLS files, warn when listening beyond
//! loopback without a token, and serve only once the engine is ready (its spool open and
//! replayed), so nothing is acknowledged before it can be written ahead.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::{OtlpReceiverSettings, listen_addr};
use crate::listener::{Gate, Limits, Name};

use super::accept::{Receiver, ReceiverConfig};
use super::auth::{AuthError, Token, tls_config};
use super::events::ReceiverEvents;
use super::queue::Queue;

/// Why the receiver could not start.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    /// An address could not be bound.
    #[error("cannot listen for {what} on {addr}: {source}")]
    Bind {
        /// OTLP/HTTP or OTLP/gRPC.
        what: &'static str,
        /// The address.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// Token or TLS files.
    #[error(transparent)]
    Auth(#[from] AuthError),
}

/// Bound listeners, not serving yet.
pub struct Listeners {
    http: Option<(TcpListener, SocketAddr)>,
    grpc: Option<(TcpListener, SocketAddr)>,
    tls_http: super::http::Tls,
    tls_grpc: super::http::Tls,
    receiver: Arc<Receiver>,
}

/// Serving listeners.
pub struct Running {
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

async fn bind(what: &'static str, addr: &str) -> Result<(TcpListener, SocketAddr), ListenError> {
    let addr = listen_addr(addr);
    let err = |source| ListenError::Bind {
        what,
        addr: addr.clone(),
        source,
    };
    let l = TcpListener::bind(&addr).await.map_err(err)?;
    let local = l.local_addr().map_err(err)?;
    Ok((l, local))
}

impl Listeners {
    /// Bind the configured addresses and load credentials; the receiver reports each
    /// request's outcome to `events`.
    pub async fn bind(
        cfg: &OtlpReceiverSettings,
        limits: &Limits,
        queue: Arc<Queue>,
        events: Arc<dyn ReceiverEvents>,
    ) -> Result<Self, ListenError> {
        let token = cfg
            .token_file
            .as_deref()
            .map(Token::from_file)
            .transpose()?;
        let (tls_http, tls_grpc) = match (&cfg.tls_cert, &cfg.tls_key) {
            (Some(cert), Some(key)) => (
                Some(tokio_rustls::TlsAcceptor::from(tls_config(
                    cert,
                    key,
                    &[b"http/1.1"],
                )?)),
                Some(tokio_rustls::TlsAcceptor::from(tls_config(
                    cert,
                    key,
                    &[b"h2"],
                )?)),
            ),
            _ => (None, None),
        };
        let http = match &cfg.listen {
            Some(a) => Some(bind("OTLP/HTTP", a).await?),
            None => None,
        };
        let grpc = match &cfg.grpc_listen {
            Some(a) => Some(bind("OTLP/gRPC", a).await?),
            None => None,
        };
        for (what, l) in [("OTLP/HTTP", &http), ("OTLP/gRPC", &grpc)] {
            if let Some((_, addr)) = l {
                tracing::info!(%addr, tls = tls_http.is_some(), token = token.is_some(), "receiving {what}");
                if let Some(why) =
                    super::auth::exposure_warning(addr, token.is_some(), tls_http.is_some())
                {
                    tracing::warn!(%addr, "{what} {why}");
                }
            }
        }
        let receiver = Arc::new(Receiver::new(
            queue,
            events,
            ReceiverConfig {
                max_request_bytes: cfg.max_request_bytes,
                token,
                body_timeout: limits.body_timeout(),
            },
        ));
        Ok(Listeners {
            http,
            grpc,
            tls_http,
            tls_grpc,
            receiver,
        })
    }

    /// The bound OTLP/HTTP address.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http.as_ref().map(|(_, a)| *a)
    }

    /// The bound OTLP/gRPC address.
    pub fn grpc_addr(&self) -> Option<SocketAddr> {
        self.grpc.as_ref().map(|(_, a)| *a)
    }

    /// Serve once `ready` turns true (connections wait in the backlog until then), each
    /// listener's connections capped and timed out by the gate `gate` makes for its name (the
    /// caller's: its limits, and where it counts).
    pub fn start_when(self, ready: Arc<AtomicBool>, gate: impl Fn(Name) -> Arc<Gate>) -> Running {
        let (stop, stop_rx) = watch::channel(false);
        let mut tasks = Vec::new();
        if let Some((l, _)) = self.http {
            let gate = gate(Name::OtlpHttp);
            let (rx, tls, stop, ready) = (
                self.receiver.clone(),
                self.tls_http,
                stop_rx.clone(),
                ready.clone(),
            );
            tasks.push(tokio::spawn(async move {
                wait_ready(&ready, &stop).await;
                super::http::serve_gated(l, tls, rx, gate, stop).await;
            }));
        }
        if let Some((l, _)) = self.grpc {
            let gate = gate(Name::OtlpGrpc);
            let (rx, tls, stop) = (self.receiver.clone(), self.tls_grpc, stop_rx.clone());
            tasks.push(tokio::spawn(async move {
                wait_ready(&ready, &stop).await;
                super::grpc::serve_gated(l, tls, rx, gate, stop).await;
            }));
        }
        Running { stop, tasks }
    }
}

async fn wait_ready(ready: &AtomicBool, stop: &watch::Receiver<bool>) {
    while !ready.load(Ordering::SeqCst) && !*stop.borrow() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl Running {
    /// Stop accepting; open connections finish their current request.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
        }
    }
}
