//! Forwarding: the listener (HTTP/1.1 and h2c), the upstream client (HTTP/1.1 and HTTP/2
//! over TLS by ALPN, rustls with the ring provider), and the response body that streams each
//! upstream chunk to the client as it arrives, byte for byte, while the attempt tracker sees
//! it (and, for a stream chosen for injection, cuts it where the rule says).
//!
//! Owns: routing by path prefix, hop-by-hop headers (RFC 9110 §7.6.1), the request body
//! limit, the TCP reset of an injected cut (`SO_LINGER` 0, then close), and telling the
//! tracker how each response ended (complete, upstream error, client gone, cut).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode, Uri};
use http_body::{Body, Frame as BodyFrame};
use http_body_util::{BodyExt, Either, Full, Limited};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

use super::ProxyError;
use super::attempts::{AttemptRef, End, Tracker};
use super::frames::{Framer, Framing};
use super::history::{self, Api};
use super::inject::{Cutter, Decision, How, Injector};
use super::record::Recorder;
use super::settings::{ProxySettings, UpstreamSettings};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body the proxy answers with.
pub type ProxyBody = Either<ObservedBody, Full<Bytes>>;

/// Largest stream event the framer holds (a bigger one is forwarded but not decoded).
const MAX_FRAME: usize = 8 << 20;

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
    },
    /// The upstream could not be reached or failed mid-body.
    UpstreamError,
}

/// One upstream and the paths routed to it.
struct Route {
    prefix: String,
    strip: bool,
    scheme: http::uri::Scheme,
    authority: http::uri::Authority,
    base_path: String,
    injector: Option<Injector>,
}

impl Route {
    fn new(
        u: &UpstreamSettings,
        default_inject: Option<&super::inject::InjectRule>,
    ) -> Result<Self, ProxyError> {
        let uri: Uri = u
            .url
            .parse()
            .map_err(|e| ProxyError::Config(format!("upstream url `{}`: {e}", u.url)))?;
        let (Some(scheme), Some(authority)) = (uri.scheme().cloned(), uri.authority().cloned())
        else {
            return Err(ProxyError::Config(format!(
                "upstream url `{}` needs a scheme and a host (http://… or https://…)",
                u.url
            )));
        };
        if uri.query().is_some() {
            return Err(ProxyError::Config(format!(
                "upstream url `{}`: no query string (put keys in headers)",
                crate::sanitize::display(uri.path())
            )));
        }
        let prefix = if u.prefix.is_empty() {
            "/".to_owned()
        } else {
            u.prefix.clone()
        };
        if !prefix.starts_with('/') {
            return Err(ProxyError::Config(format!(
                "upstream prefix `{prefix}` must start with /"
            )));
        }
        Ok(Route {
            strip: u.strip_prefix.unwrap_or(prefix != "/"),
            prefix,
            scheme,
            authority,
            base_path: uri.path().trim_end_matches('/').to_owned(),
            injector: u
                .inject
                .clone()
                .or_else(|| default_inject.cloned())
                .map(Injector::new),
        })
    }

    fn matches(&self, path: &str) -> bool {
        self.prefix == "/"
            || path == self.prefix
            || path.starts_with(&self.prefix)
                && (self.prefix.ends_with('/')
                    || path.as_bytes().get(self.prefix.len()) == Some(&b'/'))
    }

    /// The upstream URI for a request's path and query.
    fn target(&self, path_and_query: &str) -> Result<Uri, http::Error> {
        let rest = if self.strip && self.prefix != "/" {
            let r = &path_and_query[self.prefix.trim_end_matches('/').len()..];
            if r.starts_with('/') {
                r.to_owned()
            } else {
                format!("/{r}")
            }
        } else {
            path_and_query.to_owned()
        };
        Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(format!("{}{rest}", self.base_path))
            .build()
    }
}

/// The proxy: routes, the upstream client, the tracker.
pub struct Proxy {
    routes: Vec<Route>,
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
    tracker: Mutex<Tracker>,
    recorder: Option<Recorder>,
    notes: Box<dyn Fn(ProxyNote) + Send + Sync>,
    max_request_bytes: usize,
}

impl Proxy {
    /// A proxy for `settings`, tracking into `tracker`; `notes` hears about cuts and errors.
    pub fn new(
        settings: &ProxySettings,
        tracker: Tracker,
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
        Ok(Proxy {
            routes,
            client: client(settings.ca_file.as_deref())?,
            tracker: Mutex::new(tracker),
            recorder,
            notes,
            max_request_bytes: settings.max_request_bytes,
        })
    }

    fn route(&self, path: &str) -> Option<usize> {
        self.routes.iter().position(|r| r.matches(path))
    }

    fn tracker(&self) -> std::sync::MutexGuard<'_, Tracker> {
        match self.tracker.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// The tracker's counters.
    pub fn stats(&self) -> super::attempts::TrackerStats {
        self.tracker().stats()
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
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .build();
    Ok(Client::builder(TokioExecutor::new()).build(https))
}

/// Serve until `shutdown` resolves. Each connection speaks HTTP/1.1 or HTTP/2 (prior
/// knowledge).
pub async fn serve(
    listener: TcpListener,
    proxy: Arc<Proxy>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "proxy: accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let ctl = Arc::new(ConnCtl::default());
        let io = TokioIo::new(ResettableStream {
            inner: stream,
            ctl: ctl.clone(),
        });
        let proxy = proxy.clone();
        tokio::spawn(async move {
            let service =
                hyper::service::service_fn(move |req| handle(proxy.clone(), ctl.clone(), req));
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            if let Err(e) = builder.serve_connection(io, service).await {
                tracing::debug!(error = %e, "proxy: connection ended with an error");
            }
        });
    }
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

/// Headers that belong to one connection, never forwarded (RFC 9110 §7.6.1), plus those the
/// `Connection` header names.
fn strip_hop_by_hop(h: &mut HeaderMap) {
    let named: Vec<HeaderName> = h
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for n in named {
        h.remove(n);
    }
    for n in [
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    ] {
        h.remove(n);
    }
}

async fn handle(
    proxy: Arc<Proxy>,
    ctl: Arc<ConnCtl>,
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
    let body = match Limited::new(body, proxy.max_request_bytes).collect().await {
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
    let attempt = api.map(|api| {
        let parsed = history::parse(api, &path, &body);
        let retry_count = parts
            .headers
            .get("x-stainless-retry-count")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u32>().ok());
        proxy
            .tracker()
            .begin(api, parsed.as_ref(), retry_count, now_ms())
    });
    if let (Some(rec), Some(a)) = (&proxy.recorder, &attempt) {
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
            tracing::warn!(error = %why, path = %crate::sanitize::display(&path), "proxy: upstream request failed");
            if let Some(a) = &attempt {
                proxy.tracker().end(a, &End::Upstream(why), now_ms());
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
    if let (Some(a), false) = (&attempt, success) {
        proxy
            .tracker()
            .http_error(a, rparts.status.as_u16(), now_ms());
    }
    let cutter = match (&attempt, success, framing) {
        (Some(a), true, Framing::Sse | Framing::JsonArray) => {
            route.injector.as_ref().and_then(|inj| inj.choose(a.api))
        }
        _ => None,
    };
    let observer = attempt.map(|a| Observer {
        framer: Framer::new(framing, MAX_FRAME),
        decode: success,
        proxy: proxy.clone(),
        route: ri,
        attempt: a,
        ended: false,
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

fn error_chain(e: &dyn std::error::Error) -> String {
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

/// What the tracker learns from one response.
struct Observer {
    proxy: Arc<Proxy>,
    route: usize,
    attempt: AttemptRef,
    framer: Framer,
    /// Whether the body is a model stream (a 2xx), whose payloads are decoded.
    decode: bool,
    ended: bool,
}

impl Observer {
    fn chunk(&self, data: &str) {
        if self.decode {
            self.proxy.tracker().chunk(&self.attempt, data, now_ms());
        }
    }

    fn chunks(&self, frames: &[super::frames::Frame]) {
        if self.decode && !frames.is_empty() {
            let now = now_ms();
            let mut t = self.proxy.tracker();
            for f in frames {
                t.chunk(&self.attempt, &f.data, now);
            }
        }
    }

    fn end(&mut self, how: End) {
        if self.ended {
            return;
        }
        self.ended = true;
        let now = now_ms();
        let mut t = self.proxy.tracker();
        if self.decode && self.framer.framing() == Framing::Whole && how == End::Complete {
            // A non-streaming answer: Gemini's is a chunk; the others are recorded as
            // finished (their tool calls are not decoded).
            let (frame, _) = self.framer.finish();
            match (self.attempt.api, frame) {
                (Api::Gemini, Some(f)) => t.chunk(&self.attempt, &f.data, now),
                (_, Some(f)) => {
                    let reason = serde_json::from_str::<serde_json::Value>(&f.data)
                        .ok()
                        .and_then(|v| {
                            v.get("stop_reason")
                                .or_else(|| v.pointer("/choices/0/finish_reason"))
                                .or_else(|| v.get("status"))
                                .and_then(|r| r.as_str().map(str::to_owned))
                        })
                        .unwrap_or_else(|| "stop".to_owned());
                    t.complete_whole(&self.attempt, &reason, now);
                }
                (_, None) => {}
            }
        }
        t.end(&self.attempt, &how, now);
    }
}

/// A response body streamed from upstream to the client as it arrives.
pub struct ObservedBody {
    inner: Option<Incoming>,
    observer: Option<Observer>,
    cutter: Option<Cutter>,
    /// Forward whole frames (a stream chosen for injection) rather than chunks as they come.
    framed: bool,
    ctl: Option<Arc<ConnCtl>>,
    pending: VecDeque<Bytes>,
    /// After `pending`: end the body, or reset.
    then: Option<How>,
    /// Before a reset: time for the last bytes to leave and reach the client (a RST drops
    /// whatever is still queued, on either side).
    reset_wait: Option<Pin<Box<tokio::time::Sleep>>>,
}

/// How long the bytes before an injected reset get to reach the client.
const RESET_DELAY: std::time::Duration = std::time::Duration::from_millis(100);

impl ObservedBody {
    /// Cut now: `pending` holds what is still forwarded.
    fn cut(&mut self, how: How) {
        let Some(cutter) = self.cutter.take() else {
            return;
        };
        self.inner = None; // the upstream sees us go away, as after a real cut
        if let Some(obs) = &mut self.observer {
            if how == How::Error {
                let (bytes, data) = cutter.error_bytes(obs.framer.framing());
                self.pending.push_back(Bytes::from(bytes));
                obs.chunk(&data);
            }
            let (point, how_s) = (cutter.point().as_str(), how.as_str());
            (obs.proxy.notes)(ProxyNote::Cut { point, how: how_s });
            obs.end(End::Injected { point, how: how_s });
        }
        self.then = Some(if how == How::Reset {
            How::Reset
        } else {
            How::Eof
        });
    }

    /// Framed forwarding of a data chunk: frames as they complete, cut where the rule says.
    fn framed_chunk(&mut self, data: &[u8]) {
        let frames = match &mut self.observer {
            Some(obs) => obs.framer.push(data),
            None => {
                self.pending.push_back(Bytes::copy_from_slice(data));
                return;
            }
        };
        for f in frames {
            let decision = match &mut self.cutter {
                Some(c) => c.decide(&f),
                None => Decision::Forward,
            };
            let claimed = decision != Decision::Forward && self.claim();
            if decision != Decision::Forward && !claimed {
                // Another stream took the last cut: this one passes untouched.
                self.cutter = None;
            }
            let how = self.cutter.as_ref().map(Cutter::how).unwrap_or_default();
            match decision {
                Decision::CutAfter { bytes, data } if claimed => {
                    self.pending.push_back(Bytes::from(bytes));
                    if let Some(o) = &self.observer {
                        o.chunk(&data);
                    }
                    self.cut(how);
                    return;
                }
                Decision::CutBefore if claimed => {
                    self.cut(how);
                    return;
                }
                _ => {
                    if let Some(o) = &self.observer {
                        o.chunk(&f.data);
                    }
                    self.pending.push_back(Bytes::from(f.bytes));
                }
            }
        }
    }

    /// Take one of the upstream's cuts.
    fn claim(&self) -> bool {
        self.observer.as_ref().is_some_and(|o| {
            o.proxy.routes[o.route]
                .injector
                .as_ref()
                .is_some_and(Injector::claim)
        })
    }
}

impl Body for ObservedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<BodyFrame<Bytes>, BoxError>>> {
        let this = &mut *self;
        loop {
            if let Some(b) = this.pending.pop_front() {
                return Poll::Ready(Some(Ok(BodyFrame::data(b))));
            }
            match this.then.take() {
                Some(How::Reset) => {
                    let wait = this
                        .reset_wait
                        .get_or_insert_with(|| Box::pin(tokio::time::sleep(RESET_DELAY)));
                    if wait.as_mut().poll(cx).is_pending() {
                        this.then = Some(How::Reset);
                        return Poll::Pending;
                    }
                    if let Some(ctl) = &this.ctl {
                        ctl.reset();
                    }
                    return Poll::Ready(Some(Err("retryscope proxy: injected reset".into())));
                }
                Some(_) => return Poll::Ready(None),
                None => {}
            }
            let Some(inner) = this.inner.as_mut() else {
                return Poll::Ready(None);
            };
            match Pin::new(inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    this.inner = None;
                    if let Some(obs) = &mut this.observer {
                        if obs.framer.framing() != Framing::Whole {
                            let (last, tail) = obs.framer.finish();
                            if let Some(f) = last {
                                obs.chunk(&f.data);
                                if this.framed {
                                    this.pending.push_back(Bytes::from(f.bytes));
                                }
                            }
                            if this.framed && !tail.is_empty() {
                                this.pending.push_back(Bytes::from(tail));
                            }
                        }
                        obs.end(End::Complete);
                    }
                    if this.pending.is_empty() {
                        return Poll::Ready(None);
                    }
                }
                Poll::Ready(Some(Err(e))) => {
                    this.inner = None;
                    if let Some(obs) = &mut this.observer {
                        (obs.proxy.notes)(ProxyNote::UpstreamError);
                        obs.end(End::Upstream(error_chain(&e)));
                    }
                    return Poll::Ready(Some(Err(Box::new(e))));
                }
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        if this.framed {
                            this.framed_chunk(&data);
                            continue;
                        }
                        if let Some(obs) = &mut this.observer {
                            if obs.framer.framing() == Framing::Whole {
                                obs.framer.push(&data);
                            } else {
                                let frames = obs.framer.push(&data);
                                obs.chunks(&frames);
                            }
                        }
                        return Poll::Ready(Some(Ok(BodyFrame::data(data))));
                    }
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_none() && self.pending.is_empty() && self.then.is_none()
    }
}

impl Drop for ObservedBody {
    fn drop(&mut self) {
        if let Some(obs) = &mut self.observer
            && !obs.ended
        {
            obs.end(End::ClientGone);
        }
    }
}

/// Per-connection control: an injected reset of an HTTP/1.1 connection.
#[derive(Debug, Default)]
pub struct ConnCtl {
    reset: AtomicBool,
}

impl ConnCtl {
    fn reset(&self) {
        self.reset.store(true, Ordering::SeqCst);
    }

    fn is_reset(&self) -> bool {
        self.reset.load(Ordering::SeqCst)
    }
}

/// The client connection; after an injected reset, writes fail and closing it sends a TCP
/// RST (`SO_LINGER` 0) instead of a FIN.
struct ResettableStream {
    inner: TcpStream,
    ctl: Arc<ConnCtl>,
}

fn reset_error() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::ConnectionReset, "injected reset")
}

impl AsyncRead for ResettableStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.ctl.is_reset() {
            return Poll::Ready(Err(reset_error()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for ResettableStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if self.ctl.is_reset() {
            return Poll::Ready(Err(reset_error()));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        if self.ctl.is_reset() {
            return Poll::Ready(Err(reset_error()));
        }
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if self.ctl.is_reset() {
            return Poll::Ready(Err(reset_error()));
        }
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if self.ctl.is_reset() {
            let _ = self.inner.set_zero_linger();
            return Poll::Ready(Err(reset_error()));
        }
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl Drop for ResettableStream {
    fn drop(&mut self) {
        if self.ctl.is_reset() {
            let _ = self.inner.set_zero_linger();
        }
    }
}
