//! One admitted connection: its TLS handshake under a timeout, its byte stream watched for
//! activity, its requests tracked while in flight, and the watchdog that closes it when its
//! first request is late or it idles (HTTP/2 gets a GOAWAY first; anything still open after
//! a short grace is dropped).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http_body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{Gate, Reason, Slot};

/// A TLS-or-plain byte stream of a served connection.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// What the watchdog looks at: bytes, requests in flight, last activity.
#[derive(Debug)]
pub struct ConnState {
    start: Instant,
    /// Milliseconds since `start` of the last byte read or written, or the last response end.
    last_ms: AtomicU64,
    bytes_read: AtomicU64,
    requests: AtomicU64,
    inflight: AtomicUsize,
    /// The watchdog has counted why it closes the connection (so hyper's own timeout error
    /// that may follow is not counted again).
    counted: std::sync::atomic::AtomicBool,
}

impl ConnState {
    fn new() -> Self {
        ConnState {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
            bytes_read: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            inflight: AtomicUsize::new(0),
            counted: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn touch(&self) {
        let ms = self.start.elapsed().as_millis() as u64;
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    /// Requests received on this connection so far.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Why the connection should close now, if it should.
    fn overdue(&self, header: Duration, idle: Duration) -> Option<Reason> {
        let now = self.start.elapsed();
        if self.requests.load(Ordering::SeqCst) == 0 && now > header {
            return Some(Reason::HeaderTimeout);
        }
        let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        if self.inflight.load(Ordering::SeqCst) == 0 && now.saturating_sub(last) > idle {
            return Some(Reason::IdleTimeout);
        }
        None
    }
}

/// An admitted connection: its slot under the caps and its watched state.
#[derive(Debug)]
pub struct Conn {
    gate: Arc<Gate>,
    state: Arc<ConnState>,
    _slot: Slot,
}

impl Conn {
    pub(super) fn new(gate: Arc<Gate>, slot: Slot) -> Self {
        Conn {
            gate,
            state: Arc::new(ConnState::new()),
            _slot: slot,
        }
    }

    /// The listener's gate (its limits; counting body timeouts).
    pub fn gate(&self) -> &Arc<Gate> {
        &self.gate
    }

    /// The TLS session over `stream` (or `stream` itself without TLS), watched for activity.
    /// `None` when the handshake failed or did not finish within the handshake timeout
    /// (counted).
    pub async fn tls<T: Io + 'static>(
        &self,
        stream: T,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> Option<Box<dyn Io>> {
        let stream = self.watch(stream);
        let Some(acceptor) = tls else {
            return Some(Box::new(stream));
        };
        let timeout = self.gate.limits.handshake_timeout();
        match tokio::time::timeout(timeout, acceptor.accept(stream)).await {
            Ok(Ok(s)) => Some(Box::new(s)),
            Ok(Err(e)) => {
                tracing::debug!(error = %e, listener = self.gate.name.as_str(), "TLS handshake failed");
                None
            }
            Err(_) => {
                self.gate.count(Reason::HandshakeTimeout);
                None
            }
        }
    }

    /// `io` with its reads and writes noted (for the idle and first-request timeouts).
    pub fn watch<T>(&self, io: T) -> Watched<T> {
        Watched {
            inner: io,
            state: self.state.clone(),
        }
    }

    /// `svc` with its requests counted in flight until their response body is done.
    pub fn track<S>(&self, svc: S) -> TrackedService<S> {
        TrackedService {
            inner: svc,
            state: self.state.clone(),
        }
    }

    /// Count a connection error that is hyper's own HTTP/1 header timeout.
    pub fn note_error(&self, e: &(dyn std::error::Error + 'static)) {
        if e.downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_timeout)
            && !self.state.counted.swap(true, Ordering::SeqCst)
        {
            self.gate.count(Reason::HeaderTimeout);
        }
    }

    /// Drive `conn` (a hyper connection) until it ends, closing it gracefully (`graceful`)
    /// when `stop` completes, when its first request is late or when it idles; whatever is
    /// still open a grace period later is dropped (`None`).
    pub async fn run<C, T>(
        &self,
        conn: C,
        graceful: fn(Pin<&mut C>),
        stop: impl Future<Output = ()>,
    ) -> Option<T>
    where
        C: Future<Output = T>,
    {
        let limits = &self.gate.limits;
        let (header, idle) = (limits.header_timeout(), limits.idle_timeout());
        let grace = header.min(Duration::from_secs(5));
        let period =
            (header.min(idle) / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(conn);
        tokio::pin!(stop);
        let mut closing: Option<Instant> = None;
        loop {
            tokio::select! {
                r = conn.as_mut() => return Some(r),
                () = &mut stop, if closing.is_none() => {
                    graceful(conn.as_mut());
                    closing = Some(Instant::now() + grace);
                }
                _ = tick.tick() => {
                    if let Some(deadline) = closing {
                        if Instant::now() >= deadline {
                            return None;
                        }
                        continue;
                    }
                    if let Some(reason) = self.state.overdue(header, idle) {
                        if !self.state.counted.swap(true, Ordering::SeqCst) {
                            self.gate.count(reason);
                        }
                        graceful(conn.as_mut());
                        closing = Some(Instant::now() + grace);
                    }
                }
            }
        }
    }
}

/// A byte stream whose reads and writes are noted in the connection's state.
#[derive(Debug)]
pub struct Watched<T> {
    inner: T,
    state: Arc<ConnState>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            self.state.bytes_read.fetch_add(n as u64, Ordering::Relaxed);
            self.state.touch();
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.state.touch();
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.state.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A request in flight: the idle timeout does not run while one is.
#[derive(Debug)]
struct InFlight(Arc<ConnState>);

impl InFlight {
    fn new(state: Arc<ConnState>) -> Self {
        state.requests.fetch_add(1, Ordering::SeqCst);
        state.inflight.fetch_add(1, Ordering::SeqCst);
        InFlight(state)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.touch();
        self.0.inflight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A service whose requests are in flight until their response body ends.
#[derive(Debug, Clone)]
pub struct TrackedService<S> {
    inner: S,
    state: Arc<ConnState>,
}

impl<S, Req, B> hyper::service::Service<Req> for TrackedService<S>
where
    S: hyper::service::Service<Req, Response = http::Response<B>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Tracked<B>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn call(&self, req: Req) -> Self::Future {
        let guard = InFlight::new(self.state.clone());
        let fut = self.inner.call(req);
        Box::pin(async move {
            fut.await.map(|r| {
                r.map(|b| Tracked {
                    inner: Box::pin(b),
                    guard: Some(guard),
                })
            })
        })
    }
}

/// A response body that keeps its request in flight until it ends.
pub struct Tracked<B> {
    inner: Pin<Box<B>>,
    guard: Option<InFlight>,
}

impl<B: Body> Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let r = self.inner.as_mut().poll_frame(cx);
        if matches!(r, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            self.guard = None;
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
