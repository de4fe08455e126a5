//! Forwarding: the listener (HTTP/1.1 and h2c), the upstream client (HTTP/1.1 and HTTP/2
//! over TLS by ALPN, rustls with the ring provider), and the response body that streams each
//! upstream chunk to the client as it arrives, byte for byte, while the attempt tracker sees
//! it (and, for a stream chosen for injection, cuts it where the rule says).
//!
//! Owns: the request body limit, and what each request tells the tracker before its response
//! streams (`body.rs`); routes are `route.rs`'s, the client connection's reset `conn.rs`'s,
//! hop-by-hop headers and request codings `wire.rs`'s. Every call that writes lines goes through
//! [`Proxy::track`]: built under the tracker's lock, queued before it is released, sent after
//! (`feed.rs`: order and back-pressure).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Either, Full, Limited};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

use super::ProxyError;
use super::attempts::{End, Tracker};
use super::body::{ObservedBody, Observer};
use super::conn::{ConnCtl, ResettableStream};
use super::feed::{Backlog, Feed};
use super::frames::{Framer, Framing};
use super::history::{self, Api};
use super::inject::{Injector, Target};
use super::record::Recorder;
use super::route::Route;
use super::wire::{gunzip, request_encoding, strip_hop_by_hop};
use crate::config::proxy::ProxySettings;

/// The body the proxy answers with.
pub type ProxyBody = Either<ObservedBody, Full<Bytes>>;

/// Largest stream event, or non-streaming answer, the framer holds (a bigger one is forwarded
/// but not decoded; see `ProxyNote::Unobserved`).
pub const MAX_FRAME: usize = 8 << 20;

/// Most idle upstream connections kept per upstream host.
pub const UPSTREAM_MAX_IDLE_PER_HOST: usize = 16;

/// Milliseconds since the Unix epoch (event times of the lines the proxy writes).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Something the proxy did that is counted (and logged) by its owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxyNote {
    /// A stream was cut on purpose.
    Cut {
        /// Where.
        point: &'static str,
        /// How.
        how: &'static str,
        /// The request whose stream it was.
        target: Option<Target>,
    },
    /// The upstream could not be reached or failed mid-body.
    UpstreamError,
    /// A model request is forwarded and tracked (one attempt).
    Stream,
    /// The proxy held one upstream chunk of a model stream this long before forwarding it.
    Held {
        /// Nanoseconds.
        nanos: u64,
    },
    /// A non-streaming answer over the frame cap was passed through without being observed.
    Unobserved,
    /// The engine was gone: lines built for it were dropped (their responses were proxied).
    FeedLost {
        /// How many.
        lines: u64,
    },
}

/// The proxy: routes, the upstream client, the tracker and its feed.
pub struct Proxy {
    pub(super) routes: Vec<Route>,
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
    tracker: Mutex<Tracker>,
    pub(super) feed: Feed,
    recorder: Option<Recorder>,
    pub(super) notes: Arc<dyn Fn(ProxyNote) + Send + Sync>,
    max_request_bytes: usize,
}

impl Proxy {
    /// A proxy for `settings`, tracking into `tracker` (whose sink gets the lines, from the
    /// proxy's feed: `feed.rs`); `notes` hears about cuts and errors.
    pub fn new(
        settings: &ProxySettings,
        mut tracker: Tracker,
        notes: Box<dyn Fn(ProxyNote) + Send + Sync>,
    ) -> Result<Self, ProxyError> {
        if settings.upstream.is_empty() {
            return Err(ProxyError::Config(
                "no upstream: give --upstream URL or [[proxy.upstream]] in the config".to_owned(),
            ));
        }
        let mut routes = settings
            .upstream
            .iter()
            .map(|u| Route::new(u, settings.inject.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        // Longest prefix first.
        routes.sort_by_key(|r| std::cmp::Reverse(r.prefix.len()));
        let recorder = match &settings.record {
            Some(dir) => Some(
                Recorder::open(dir)
                    .map_err(|e| ProxyError::Record(dir.display().to_string(), e))?,
            ),
            None => None,
        };
        let notes: Arc<dyn Fn(ProxyNote) + Send + Sync> = Arc::from(notes);
        let Some(sink) = tracker.out().hold() else {
            return Err(ProxyError::Config(
                "the tracker already feeds another proxy".to_owned(),
            ));
        };
        let lost = notes.clone();
        let feed = Feed::start(
            sink,
            Box::new(move |lines| lost(ProxyNote::FeedLost { lines })),
        )
        .map_err(ProxyError::Feed)?;
        Ok(Proxy {
            routes,
            client: client(
                settings.ca_file.as_deref(),
                std::time::Duration::from_secs(settings.upstream_idle_secs.max(1)),
            )?,
            tracker: Mutex::new(tracker),
            feed,
            recorder,
            notes,
            max_request_bytes: settings.max_request_bytes,
        })
    }

    fn route(&self, path: &str) -> Option<usize> {
        self.routes.iter().position(|r| r.matches(path))
    }

    pub(super) fn tracker(&self) -> std::sync::MutexGuard<'_, Tracker> {
        match self.tracker.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Run `f` on the tracker for the request owning `backlog`: its lines are built and
    /// queued under the tracker's lock, then sent after it is released, as far as the sink
    /// takes them without waiting (the rest by the feed's thread).
    pub(super) fn track<R>(&self, backlog: &Arc<Backlog>, f: impl FnOnce(&mut Tracker) -> R) -> R {
        let r = {
            let mut t = self.tracker();
            let r = f(&mut t);
            self.feed.push(t.out().drain(), backlog);
            r
        };
        self.feed.pump();
        r
    }

    /// The tracker's counters.
    pub fn stats(&self) -> super::attempts::TrackerStats {
        self.tracker().stats()
    }

    /// Lines the engine could not take because it was gone, so far.
    pub fn feed_lost(&self) -> u64 {
        self.feed.lost()
    }

    /// Streams cut so far, over every upstream.
    pub fn cuts(&self) -> u64 {
        self.routes
            .iter()
            .filter_map(|r| r.injector.as_ref())
            .map(Injector::cuts)
            .sum()
    }
}

/// The upstream client: HTTP/1.1 and HTTP/2 (by ALPN) over rustls with the ring provider,
/// the system's roots plus `ca_file` (PEM), or plain HTTP.
fn client(
    ca_file: Option<&std::path::Path>,
    idle: std::time::Duration,
) -> Result<Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>, ProxyError> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for cert in native.certs {
        let _ = roots.add(cert);
    }
    if let Some(path) = ca_file {
        let certs = CertificateDer::pem_file_iter(path)
            .map_err(|e| ProxyError::Tls(format!("ca_file {}: {e}", path.display())))?;
        for cert in certs {
            let cert =
                cert.map_err(|e| ProxyError::Tls(format!("ca_file {}: {e}", path.display())))?;
            roots
                .add(cert)
                .map_err(|e| ProxyError::Tls(format!("ca_file {}: {e}", path.display())))?;
        }
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| ProxyError::Tls(e.to_string()))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(http);
    // Idle connections expire after `idle` (the pool's timer runs the expiry: without it, idle
    // connections were never closed) and at most a few are kept per host.
    Ok(Client::builder(TokioExecutor::new())
        .pool_timer(hyper_util::rt::TokioTimer::new())
        .pool_idle_timeout(idle)
        .pool_max_idle_per_host(UPSTREAM_MAX_IDLE_PER_HOST)
        .build(https))
}

/// Serve until `shutdown` resolves, with the default listener limits ([`serve_gated`]).
pub async fn serve(
    listener: TcpListener,
    proxy: Arc<Proxy>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let gate = crate::listener::Gate::new(
        crate::listener::Name::Proxy,
        crate::listener::Limits::default(),
        None,
    );
    serve_gated(listener, proxy, gate, shutdown).await;
}

/// Serve until `shutdown` resolves. Each connection speaks HTTP/1.1 or HTTP/2 (prior
/// knowledge), capped and timed out by `gate` ([`crate::listener`]: connections, header and
/// idle timeouts, HTTP/2 streams).
pub async fn serve_gated(
    listener: TcpListener,
    proxy: Arc<Proxy>,
    gate: Arc<crate::listener::Gate>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let limits = gate.limits().clone();
    // Open connections are not drained on shutdown: the process exits after this returns.
    let drain = std::time::Duration::ZERO;
    let gate_for_requests = gate.clone();
    crate::listener::serve(listener, gate, shutdown, drain, move |stream, conn| {
        let proxy = proxy.clone();
        let limits = limits.clone();
        let gate = gate_for_requests.clone();
        async move {
            let ctl = Arc::new(ConnCtl::default());
            let io = TokioIo::new(conn.watch(ResettableStream {
                inner: stream,
                ctl: ctl.clone(),
            }));
            let gate = gate.clone();
            let service = conn.track(hyper::service::service_fn(move |req| {
                handle(proxy.clone(), ctl.clone(), gate.clone(), req)
            }));
            let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(limits.header_timeout());
            builder
                .http2()
                .max_concurrent_streams(limits.max_streams_per_connection);
            let served = builder.serve_connection(io, service);
            let never = std::future::pending::<()>();
            if let Some(Err(e)) = conn.run(served, |c| c.graceful_shutdown(), never).await {
                conn.note_error(&*e);
                tracing::debug!(error = %e, "proxy: connection ended with an error");
            }
        }
    })
    .await;
}

fn plain(status: StatusCode, msg: &str) -> Response<ProxyBody> {
    let mut r = Response::new(Either::Right(Full::new(Bytes::from(format!(
        "retryscope proxy: {msg}\n"
    )))));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

async fn handle(
    proxy: Arc<Proxy>,
    ctl: Arc<ConnCtl>,
    gate: Arc<crate::listener::Gate>,
    req: Request<Incoming>,
) -> Result<Response<ProxyBody>, Infallible> {
    let path = req.uri().path().to_owned();
    let path_and_query = req
        .uri()
        .path_and_query()
        .map(|pq| pq.as_str().to_owned())
        .unwrap_or_else(|| "/".to_owned());
    let Some(ri) = proxy.route(&path) else {
        return Ok(plain(
            StatusCode::NOT_FOUND,
            "no upstream is configured for this path",
        ));
    };
    let route = &proxy.routes[ri];
    let target = match route.target(&path_and_query) {
        Ok(t) => t,
        Err(_) => {
            return Ok(plain(
                StatusCode::BAD_REQUEST,
                "cannot build the upstream URL",
            ));
        }
    };
    let h2 = req.version() == http::Version::HTTP_2;
    let (mut parts, body) = req.into_parts();
    // The whole request body within the listener's body deadline: a client that trickles it
    // (or stops) would otherwise hold its connection until the per-peer cap.
    let read = Limited::new(body, proxy.max_request_bytes).collect();
    let Ok(read) = tokio::time::timeout(gate.limits().body_timeout(), read).await else {
        gate.count(crate::listener::Reason::BodyTimeout);
        let mut r = plain(
            StatusCode::REQUEST_TIMEOUT,
            "request body not received within the body deadline",
        );
        if !h2 {
            r.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        return Ok(r);
    };
    let body = match read {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            return Ok(
                if e.downcast_ref::<http_body_util::LengthLimitError>()
                    .is_some()
                {
                    plain(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "request body over the proxy's limit",
                    )
                } else {
                    plain(StatusCode::BAD_REQUEST, "cannot read the request body")
                },
            );
        }
    };
    let api = (parts.method == http::Method::POST)
        .then(|| Api::from_path(&path))
        .flatten();
    let parsed = api.and_then(|api| match request_encoding(&parts.headers) {
        None => history::parse(api, &path, &body),
        Some("gzip") => gunzip(&body, proxy.max_request_bytes)
            .and_then(|plain| history::parse(api, &path, &plain)),
        // Another coding (zstd...): forwarded, not read.
        Some(_) => None,
    });
    // What an injection rule aims at, and what a cut reports of the request it cut.
    let aimed = Target {
        method: parts.method.to_string(),
        path: path.split('?').next().unwrap_or(&path).to_owned(),
        model: parsed.as_ref().and_then(|r| r.model.clone()),
        tools: parsed.as_ref().is_some_and(|r| r.offers_tools),
    };
    // A background response's stream resumed: the same attempt goes on.
    let resumed = (parts.method == http::Method::GET)
        .then(|| history::resumed_response(&path, parts.uri.query()))
        .flatten()
        .and_then(|id| proxy.tracker().resume(id));
    let backlog = Backlog::new();
    let attempt = resumed.or_else(|| {
        api.map(|api| {
            let retry_count = parts
                .headers
                .get("x-stainless-retry-count")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u32>().ok());
            let ua = parts.headers.get(header::USER_AGENT);
            let client = super::client::kind(ua.and_then(|v| v.to_str().ok()));
            proxy.track(&backlog, |t| {
                t.client = client;
                t.begin(api, parsed.as_ref(), retry_count, now_ms())
            })
        })
    });
    if attempt.is_some() {
        (proxy.notes)(ProxyNote::Stream);
    }
    let mut begun = Begun {
        proxy: proxy.clone(),
        attempt,
        backlog,
    };
    // Lines of this request over its bound (a long history read): it waits for the engine
    // before it goes upstream. Others go on.
    proxy.feed.ready(&begun.backlog).await;
    let attempt = &begun.attempt;
    if let (Some(rec), Some(a)) = (&proxy.recorder, attempt) {
        rec.request(a, &parts.method, &path_and_query, &parts.headers, &body);
    }
    strip_hop_by_hop(&mut parts.headers);
    if attempt.is_some() {
        // The stream must be readable by the tracker: no compression on the model call.
        parts.headers.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("identity"),
        );
    }
    parts.headers.remove(header::HOST);
    let mut up = Request::new(Full::new(body));
    *up.method_mut() = parts.method;
    *up.uri_mut() = target;
    *up.headers_mut() = parts.headers;
    let resp = match proxy.client.request(up).await {
        Ok(r) => r,
        Err(e) => {
            (proxy.notes)(ProxyNote::UpstreamError);
            let why = error_chain(&e);
            tracing::warn!(error = %why, path = %retryscope_core::sanitize::display(&path), "proxy: upstream request failed");
            if let Some(a) = begun.take() {
                proxy.track(&begun.backlog, |t| t.end(&a, &End::Upstream(why), now_ms()));
            }
            return Ok(plain(
                StatusCode::BAD_GATEWAY,
                "the upstream could not be reached",
            ));
        }
    };
    let (mut rparts, rbody) = resp.into_parts();
    strip_hop_by_hop(&mut rparts.headers);
    let content_type = rparts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let framing = if content_type.starts_with("text/event-stream") {
        Framing::Sse
    } else if api == Some(Api::Gemini) && path.ends_with(":streamGenerateContent") {
        Framing::JsonArray
    } else {
        Framing::Whole
    };
    let success = rparts.status.is_success();
    if let (Some(a), false) = (&begun.attempt, success) {
        let status = rparts.status.as_u16();
        proxy.track(&begun.backlog, |t| t.http_error(a, status, now_ms()));
    }
    let cutter = match (&begun.attempt, success, framing) {
        (Some(a), true, Framing::Sse | Framing::JsonArray) => route
            .injector
            .as_ref()
            .and_then(|inj| inj.choose(a.api, aimed)),
        _ => None,
    };
    let observer = begun.take().map(|a| Observer {
        framer: Framer::new(framing, MAX_FRAME),
        decode: success,
        proxy: proxy.clone(),
        route: ri,
        attempt: a,
        ended: false,
        backlog: begun.backlog.clone(),
        waiting: None,
    });
    let body = ObservedBody {
        inner: Some(rbody),
        framed: cutter.is_some(),
        cutter,
        observer,
        ctl: (!h2).then_some(ctl),
        pending: VecDeque::new(),
        then: None,
        reset_wait: None,
    };
    Ok(Response::from_parts(rparts, Either::Left(body)))
}

/// An attempt begun whose response body does not exist yet. When the request is dropped
/// before (the client went away while the upstream was still to answer), the attempt ends as
/// `client_closed`: an attempt left open would hold its turn as a response in flight.
struct Begun {
    proxy: Arc<Proxy>,
    attempt: Option<super::attempts::AttemptRef>,
    /// The request's lines waiting for the engine (its response's, after).
    backlog: Arc<Backlog>,
}

impl Begun {
    /// The attempt, now ended or owned by its response body.
    fn take(&mut self) -> Option<super::attempts::AttemptRef> {
        self.attempt.take()
    }
}

impl Drop for Begun {
    fn drop(&mut self) {
        if let Some(a) = self.attempt.take() {
            self.proxy
                .track(&self.backlog, |t| t.end(&a, &End::ClientGone, now_ms()));
        }
    }
}

pub(super) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}
